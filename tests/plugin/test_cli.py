"""``pytest-autotune show`` / ``diff``: output and exit codes."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_autotune.lock.lockfile import LockfileError

import pytest_autotune

from opencl_support import pocl  # noqa: F401  (fixture)
from pytest_autotune.cli import main
from pytest_autotune.lock.lockfile import merge_entries, read_lockfile


@pytest.fixture(autouse=True)
def _no_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """``show`` fits ``COLUMNS`` when set; the exact tables below are what a pipe gets (a test that wants a width
    sets it). A full run's workers can inherit one."""
    monkeypatch.delenv("COLUMNS", raising=False)


H100 = {"model": "NVIDIA H100 80GB HBM3", "kind": "cuda", "slug": "nvidia-h100-80gb-hbm3", "versions": {}, "properties": {}}
A100 = {"model": "NVIDIA A100-SXM4-40GB", "kind": "cuda", "slug": "nvidia-a100-sxm4-40gb", "versions": {}, "properties": {}}

MM = "tests/test_mm.py::test_mm[1024]::matmul"
CONV = "tests/test_conv.py::test_conv::conv2d"
REDUCE = "tests/test_reduce.py::test_sum::reduce"
SCAN = "tests/test_scan.py::test_scan::scan"


def entry(median, **params):
    return {
        "params": params or {"block_size_x": 128, "tile": 2},
        "stats": {"median": median, "mean": median, "min": median, "iqr": 0.0, "n": 7},
        "samples": [median] * 7,
        "hashes": {"source": "s1", "space": "p1", "problem": "q1"},
        "unit": "ms",
        "strategy": {"name": "genetic", "hyperparameters": {}, "seed": 3},
        "evaluations": {"total": 87, "failed": {"compile": 2, "launch": 1}, "budget": 100},
        "timestamp": "2024-05-01T12:00:00Z",
    }


@pytest.fixture
def lockdir(tmp_path):
    d = tmp_path / "autotune.lock"
    merge_entries(
        d / "nvidia-h100-80gb-hbm3.json",
        {MM: entry(0.25, block_size_x=128, tile=2), CONV: entry(1.5, block_size_x=64, tile=1), REDUCE: entry(0.1)},
        H100,
    )
    merge_entries(
        d / "nvidia-a100-sxm4-40gb.json",
        {MM: entry(0.5, block_size_x=256, tile=2), CONV: entry(1.5003, block_size_x=64, tile=1), SCAN: entry(0.2)},
        A100,
    )
    return d


def run(capsys, *argv):
    code = main(list(map(str, argv)))
    out, err = capsys.readouterr()
    return code, out, err


# --------------------------------------------------------------------------- show


def test_show_table(capsys, lockdir):
    path = lockdir / "nvidia-h100-80gb-hbm3.json"
    code, out, err = run(capsys, "show", path)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == f"{path}: NVIDIA H100 80GB HBM3 (nvidia-h100-80gb-hbm3), schema 2, 3 entries"
    assert lines[1].split() == ["key", "params", "median", "n", "strategy", "evaluations", "timestamp"]
    rows = {line.split()[0]: line for line in lines[3:]}
    assert list(rows) == sorted([MM, CONV, REDUCE])
    mm = rows[MM]
    for cell in ["block_size_x=128 tile=2", "0.25 ms", " 7 ", "genetic (seed 3)", "87/100 (3 failed)", "2024-05-01T12:00:00Z"]:
        assert cell in mm, (cell, mm)
    # Columns line up: every row starts its params column at the same offset.
    offsets = {line.index("block_size_x") for line in rows.values()}
    assert len(offsets) == 1


def test_show_honours_columns_and_cuts_nothing(capsys, lockdir, monkeypatch):
    """``show`` fits the terminal's width like the summary does (issue 40): at 80 columns each entry's key has a
    line of its own, its numbers the next, its parameters an indented line; a wide terminal keeps one line."""
    path = lockdir / "nvidia-h100-80gb-hbm3.json"
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run(capsys, "show", path)
    lines = out.splitlines()
    assert code == 0 and max(map(len, lines)) <= 80, out
    for key in (MM, CONV, REDUCE):
        row = lines.index(key)  # the whole key, on its own line
        assert "genetic (seed 3)" in lines[row + 1] and "87/100 (3 failed)" in lines[row + 1]
        assert lines[row + 2].startswith("    params: block_size_x=")
    assert "    params: block_size_x=128 tile=2" in lines
    monkeypatch.setenv("COLUMNS", "400")
    code, out, _ = run(capsys, "show", path)
    assert sum(1 for line in out.splitlines() if line.startswith("tests/")) == 3
    assert any(line.startswith(MM) and "block_size_x=128 tile=2" in line for line in out.splitlines())


def test_show_json_is_the_validated_lockfile(capsys, lockdir):
    path = lockdir / "nvidia-h100-80gb-hbm3.json"
    code, out, _ = run(capsys, "show", path, "--json")
    assert code == 0
    assert out == path.read_text()  # canonical form, identical to the file
    assert set(json.loads(out)["entries"]) == {MM, CONV, REDUCE}


def test_show_directory(capsys, lockdir):
    code, out, _ = run(capsys, "show", lockdir)
    assert code == 0
    assert out.index("NVIDIA A100") < out.index("NVIDIA H100")  # sorted by file name
    assert SCAN in out and REDUCE in out
    code, out, _ = run(capsys, "show", lockdir, "--json")
    assert code == 0
    assert sorted(json.loads(out)) == ["nvidia-a100-sxm4-40gb.json", "nvidia-h100-80gb-hbm3.json"]


def test_show_empty_lockfile(capsys, tmp_path):
    path = tmp_path / "gpu.json"
    merge_entries(path, {"a::k": entry(1.0)}, H100)
    merge_entries(path, {}, H100, remove=["a::k"])
    code, out, _ = run(capsys, "show", path)
    assert code == 0 and "0 entries" in out and "(no entries)" in out


def test_show_missing_and_corrupt_exit_2(capsys, tmp_path):
    missing = tmp_path / "nope.json"
    code, out, err = run(capsys, "show", missing)
    assert code == 2 and out == "" and str(missing) in err and "no such file" in err

    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text('{"schema": 1, "device": {}, "entries": {')
    before = corrupt.read_bytes()
    code, out, err = run(capsys, "show", corrupt)
    assert code == 2 and out == "" and str(corrupt) in err and "not valid JSON" in err
    assert corrupt.read_bytes() == before

    newer = tmp_path / "newer.json"
    newer.write_text('{"schema": 99, "device": {}, "entries": {}}')
    code, _, err = run(capsys, "show", newer)
    assert code == 2 and str(newer) in err and "upgrade" in err


def test_show_directory_without_lockfiles_exit_2(capsys, tmp_path):
    code, _, err = run(capsys, "show", tmp_path)
    assert code == 2 and "no lockfiles" in err


# --------------------------------------------------------------------------- diff


def test_diff_two_gpus(capsys, lockdir):
    a, b = lockdir / "nvidia-h100-80gb-hbm3.json", lockdir / "nvidia-a100-sxm4-40gb.json"
    code, out, err = run(capsys, "diff", a, b)
    assert code == 0 and err == ""
    assert f"A: {a}: NVIDIA H100 80GB HBM3" in out and f"B: {b}: NVIDIA A100-SXM4-40GB" in out
    assert f"only in A (1):\n  - {REDUCE}\n" in out
    assert f"only in B (1):\n  + {SCAN}\n" in out
    assert "changed (2):" in out
    mm_block = out[out.index(f"  ~ {MM}") :].splitlines()[:3]
    assert mm_block[1].strip() == "params: block_size_x: 128 -> 256"
    assert mm_block[2].strip() == "median: 0.25 -> 0.5 ms (+100.0%)"
    conv_block = out[out.index(f"  ~ {CONV}") :].splitlines()[:2]
    assert conv_block[1].strip() == "median: 1.5 -> 1.5 ms (+0.0%)"  # same params, median moved by 0.02 %
    assert out.rstrip().endswith("unchanged: 0")

    code, _, _ = run(capsys, "diff", a, b, "--fail-on-change")
    assert code == 1


def test_diff_threshold_ignores_small_median_moves(capsys, lockdir):
    a, b = lockdir / "nvidia-h100-80gb-hbm3.json", lockdir / "nvidia-a100-sxm4-40gb.json"
    code, out, _ = run(capsys, "diff", a, b, "--threshold", "1")
    assert code == 0
    assert "changed (1):" in out and CONV not in out and "unchanged: 1" in out
    code, _, err = run(capsys, "diff", a, b, "--threshold", "-1")
    assert code == 2 and "threshold" in err


def test_diff_identical_and_hash_changes(capsys, tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    merge_entries(a, {MM: entry(0.25)}, H100)
    merge_entries(b, {MM: entry(0.25)}, H100)
    code, out, _ = run(capsys, "diff", a, b, "--fail-on-change")
    assert code == 0 and "no differences" in out and "unchanged: 1" in out

    changed = entry(0.25)
    changed["hashes"]["source"] = "s2"  # same winner, but the kernel source changed
    merge_entries(b, {MM: changed}, H100)
    code, out, _ = run(capsys, "diff", a, b, "--fail-on-change")
    assert code == 1 and "hashes changed: source" in out and "params:" not in out

    merge_entries(b, {}, H100, remove=[MM])  # an entry removed on one side is a change too
    code, out, _ = run(capsys, "diff", a, b, "--fail-on-change")
    assert code == 1 and f"only in A (1):\n  - {MM}" in out


def test_diff_added_param_and_a_zero_median_is_no_lock(capsys, tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    with pytest.raises(LockfileError, match="stats.median: must be a positive time"):  # nothing to gate against
        merge_entries(a, {MM: entry(0.0, block_size_x=128)}, H100)
    merge_entries(a, {MM: entry(0.4, block_size_x=128)}, H100)
    merge_entries(b, {MM: entry(0.5, block_size_x=128, unroll=4)}, H100)
    code, out, _ = run(capsys, "diff", a, b)
    assert code == 0
    assert "params: +unroll=4" in out


def test_diff_corrupt_or_missing_exit_2_and_names_file(capsys, tmp_path, lockdir):
    good = lockdir / "nvidia-h100-80gb-hbm3.json"
    bad = tmp_path / "bad.json"
    bad.write_text("<<<<<<< HEAD\n")
    before = bad.read_bytes()
    for argv in (["diff", good, bad], ["diff", bad, good], ["diff", good, bad, "--fail-on-change"]):
        code, out, err = run(capsys, *argv)
        assert code == 2 and out == "" and str(bad) in err, err
    assert bad.read_bytes() == before
    code, _, err = run(capsys, "diff", good, tmp_path / "missing.json")
    assert code == 2 and "missing.json" in err


# --------------------------------------------------------------------------- entry points


def test_usage_errors_and_help_return_codes(capsys):
    assert main([]) == 2
    assert main(["frobnicate"]) == 2
    assert main(["diff", "only-one.json"]) == 2
    capsys.readouterr()
    assert main(["--help"]) == 0
    assert "show" in capsys.readouterr().out
    assert main(["--version"]) == 0
    assert pytest_autotune.__version__ in capsys.readouterr().out


def test_python_dash_m_entry_point(lockdir):
    env = dict(os.environ, PYTHONPATH=str(Path(pytest_autotune.__file__).parent.parent))
    path = lockdir / "nvidia-h100-80gb-hbm3.json"
    proc = subprocess.run([sys.executable, "-m", "pytest_autotune", "show", str(path)], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert MM in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "pytest_autotune", "show", str(path) + ".missing"], env=env, capture_output=True, text=True)
    assert proc.returncode == 2 and "no such file" in proc.stderr
    assert read_lockfile(path) is not None


# --------------------------------------------------------------------------- devices: runners, lockfiles, builds


def test_devices_lists_each_runners_devices_and_lockfiles(pocl, tmp_path, capsys) -> None:
    assert main(["devices", "--lockdir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["runner", "device", "lockfile", "builds"]
    c_line = next(line for line in out.splitlines() if line.startswith("c "))
    assert " cpu-" in c_line and c_line.rstrip().endswith("yes")
    pocl_line = next(line for line in out.splitlines() if "Portable Computing Language /" in line)
    assert " opencl-pocl-" in pocl_line and pocl_line.rstrip().endswith("yes")


def test_devices_exits_1_when_no_opencl_device_builds(tmp_path, capsys, monkeypatch) -> None:
    import pytest_autotune.cli as cli
    from pytest_autotune.backends import opencl_device
    from tests.backends.test_opencl_probe import FakeCL, device

    monkeypatch.setattr(opencl_device, "_probed", {})
    monkeypatch.setattr(cli, "_pyopencl", lambda: FakeCL(device("pthread-AMD EPYC", fails=True)))
    assert main(["devices", "--lockdir", str(tmp_path)]) == 1
    out = re.sub(r"  +", "  ", capsys.readouterr().out)  # the columns' widths follow the other runners' rows
    assert ("opencl  0:0 Portable Computing Language / pthread-AMD EPYC  opencl-pocl-amd-epyc.json  no: OpenCL "
            "device 'pthread-AMD EPYC' (PoCL 3.0-rc2, LLVM 14.0.6) cannot build a kernel: error: unknown target CPU "
            "'generic'; install your distribution's PoCL, e.g. apt-get install pocl-opencl-icd") in out
    assert out.rstrip().endswith("no OpenCL device builds a kernel; install your distribution's PoCL, e.g. "
                                 "apt-get install pocl-opencl-icd")
    # without PyOpenCL no OpenCL device is expected: exit 0
    monkeypatch.setattr(cli, "_pyopencl", lambda: None)
    assert main(["devices", "--lockdir", str(tmp_path)]) == 0


def test_devices_names_a_lockfile_under_its_older_name(tmp_path, capsys, monkeypatch) -> None:
    import shutil

    import pytest_autotune.cli as cli
    from pytest_autotune.backends import opencl_device
    from tests.backends.test_opencl_probe import FakeCL, device

    legacy = "opencl-portable-computing-language-pthread-amd-epyc.json"
    shutil.copy(Path(__file__).resolve().parents[2] / "example_project" / "autotune.lock" / legacy, tmp_path)
    monkeypatch.setattr(opencl_device, "_probed", {})
    monkeypatch.setattr(cli, "_pyopencl", lambda: FakeCL(device("pthread-skylake-avx512-AMD EPYC", fails=False)))
    assert main(["devices", "--lockdir", str(tmp_path)]) == 0
    assert f"{legacy} (older name, in use)  yes" in re.sub(r"  +", "  ", capsys.readouterr().out)


def _devices_line(capsys, tmp_path, runner: str) -> str:
    assert main(["devices", "--lockdir", str(tmp_path)]) == 0  # CUDA and Triton never change the exit status
    return next(line for line in capsys.readouterr().out.splitlines() if line.startswith(runner + " "))


def test_devices_says_why_cuda_is_unavailable(tmp_path, capsys, monkeypatch) -> None:
    """Not installed, no device, or no driver: the CUDA row gives the runners' own reasons (issue 40)."""
    import pytest_autotune.cli as cli
    from fake_cuda import install_cupy

    monkeypatch.setattr(cli, "_pyopencl", lambda: None)
    monkeypatch.setitem(sys.modules, "cupy", None)  # neither library importable
    monkeypatch.setitem(sys.modules, "pycuda", None)
    line = _devices_line(capsys, tmp_path, "cuda")
    assert "no: the cupy runner needs CuPy (pip install cupy-cuda13x" in line, line
    assert "the pycuda runner needs PyCUDA (pip install pycuda)" in line, line
    install_cupy(monkeypatch)  # CuPy installed, the driver sees no device

    def no_device() -> int:
        raise sys.modules["cupy.cuda.runtime"].CUDARuntimeError(  # (driver name, text, runtime name)
            ("CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected", "cudaErrorNoDevice"))

    monkeypatch.setattr(sys.modules["cupy.cuda.runtime"], "getDeviceCount", no_device)
    line = _devices_line(capsys, tmp_path, "cuda")
    assert "no: no usable CUDA device for CuPy: cudaErrorNoDevice: no CUDA-capable device is detected" in line, line
    monkeypatch.setattr(sys.modules["cupy.cuda.runtime"], "getDeviceCount", lambda: 1)  # a device: listed
    line = _devices_line(capsys, tmp_path, "cuda")
    assert line.split()[1] == "0" and line.rstrip().endswith("yes (CuPy, NVRTC)"), line


def test_devices_lists_the_triton_interpreter_and_whether_triton_interpret_is_set(tmp_path, capsys,
                                                                                  monkeypatch) -> None:
    pytest.importorskip("triton")
    pytest.importorskip("torch")
    import pytest_autotune.cli as cli
    from pytest_autotune.backends import triton_kernel

    monkeypatch.setattr(cli, "_pyopencl", lambda: None)
    monkeypatch.setattr(triton_kernel, "gpu_device_present", lambda: False)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    line = _devices_line(capsys, tmp_path, "triton")
    assert "interpreter" in line and "(TRITON_INTERPRET=1 set)" in line and " triton-interpreter-" in line, line
    monkeypatch.delenv("TRITON_INTERPRET")
    line = _devices_line(capsys, tmp_path, "triton")
    assert "TRITON_INTERPRET unset: pytest-autotune sets it, no GPU here" in line, line
