"""The example project, run the way a user runs it: tune, then gate, in a subprocess.

C kernels run on the CPU, the OpenCL kernel on PoCL's CPU device, the Triton kernel in Triton's
interpreter; the CUDA tests of the example skip themselves without a GPU.
Runs on a copy, so the committed example lockfile is never touched.
"""
from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import opencl_support
import pytest
import triton_support

EXAMPLE = Path(__file__).resolve().parents[2] / "example_project"


def _run(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = os.pathsep.join([str(cwd / "src"), env.get("PYTHONPATH", "")])
    env["COLUMNS"] = "300"  # a wide terminal: the summary table keeps whole test ids
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:xdist", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def example_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("example") / "example_project"
    shutil.copytree(EXAMPLE, dest, ignore=shutil.ignore_patterns("autotune.lock", ".pytest_cache", "__pycache__",
                                                                 "*.egg-info"))
    return dest


# The example in parts that tune independently (each its own copy and lockfiles), so that pytest-xdist runs them
# side by side: the whole example tuned in one command is test_re_tuning_the_committed_lock_never_makes_it_worse.
PARTS = {
    "c": ("tests/test_cpu_kernels.py", "tests/test_library.py", "tests/test_cuda_kernels.py"),
    "opencl": ("tests/test_opencl_kernels.py",),
    "triton": ("tests/test_triton_kernels.py",),
}


def _copy_example(dest: Path, lock: bool = False) -> Path:
    dest = dest / "example_project"
    ignore = [".pytest_cache", "__pycache__", "*.egg-info"] + ([] if lock else ["autotune.lock"])
    shutil.copytree(EXAMPLE, dest, ignore=shutil.ignore_patterns(*ignore))
    return dest


def _part_kernels(part: str) -> tuple[list[str], list[str]]:
    """The lock keys a part's tuning writes here, and the summary's kernel names its gate shows (empty where the
    part's device is missing here: OpenCL without PoCL)."""
    if part == "c":
        return (["tests/test_cpu_kernels.py::test_blocked_matmul::matmul",
                 "tests/test_cpu_kernels.py::test_stencil_square_and_wide::stencil_square",
                 "tests/test_cpu_kernels.py::test_stencil_square_and_wide::stencil_wide"],
                ["test_cpu_kernels.py::test_blocked_matmul::matmul", "stencil_square", "stencil_wide"])
    if part == "opencl":
        if not (opencl_support.must_run() or "Portable Computing Language" in opencl_support.platforms()):
            return [], []
        return (["tests/test_opencl_kernels.py::test_opencl_tiled_matmul::matmul"],
                ["test_opencl_kernels.py::test_opencl_tiled_matmul::matmul"])
    triton_support.require_triton()
    return ["tests/test_triton_kernels.py::test_softmax::softmax_kernel"], ["softmax_kernel"]


@pytest.mark.slow
@pytest.mark.parametrize("part", sorted(PARTS))
def test_tune_then_gate(part: str, tmp_path: Path) -> None:
    """A part of the example tuned from nothing (a quick tuning: the full one is the re-tuning test's), then gated."""
    keys, kernels = _part_kernels(part)
    example = _copy_example(tmp_path)
    tuned = _run(example, *PARTS[part], "--autotune", "--autotune-effort=quick", "--autotune-report=report.json")
    assert tuned.returncode == 0, tuned.stdout[-4000:] + tuned.stderr[-2000:]
    assert "autotune summary" in tuned.stdout
    lockdir = example / "autotune.lock"
    if part == "c":
        lockfiles = list(lockdir.glob("cpu-*.json"))
    elif part == "opencl":
        lockfiles = list(lockdir.glob("opencl-*.json"))
    else:  # in the interpreter's lockfile without a GPU (never a GPU's), else in the GPU's
        lockfiles = [lockdir / triton_support.expected_lockfile()]
    if keys:
        assert len(lockfiles) == 1 and lockfiles[0].exists(), lockfiles
        entries = json.loads(lockfiles[0].read_text())["entries"]
        assert set(keys) <= set(entries), entries
        assert {entries[k].get("effort") for k in keys} == {"quick"}
    report = json.loads((example / "report.json").read_text())
    tuned_here = [r for r in report["kernels"] if r["status"] != "no device"]  # CUDA without a GPU: named, skipped
    assert {r["status"] for r in tuned_here} <= {"first lock"}
    assert {r["kernel"] for r in report["kernels"] if r["status"] == "no device"} <= {
        "convolution", "reduce_sum", "matmul", "vector_add"}
    if not any(r["status"] == "no device" for r in report["kernels"]):
        assert "NOT TUNED" not in tuned.stdout
    else:
        assert "kernel(s) NOT TUNED: tests/test_cuda_kernels.py::" in tuned.stdout

    # CI machines are shared and the suite runs in parallel: the gate's statistics are tested
    # elsewhere; here a wide tolerance keeps the check about the workflow, not the noise.
    gated = _run(example, *PARTS[part], "--autotune-tolerance=1.0")
    assert gated.returncode == 0, gated.stdout[-4000:] + gated.stderr[-2000:]
    assert "autotune summary" in gated.stdout
    table = gated.stdout.split("autotune summary", 1)[1]
    for kernel in kernels:
        line = next(l for l in table.splitlines() if l.split() and l.split()[0].endswith(kernel))
        # Triton's interpreter times as information only (the binary is what gates it without a GPU)
        verdicts = (" info ",) if part == "triton" and "interpreter" in line else (" pass ", " faster ")
        assert " gate " in line and any(v in line for v in verdicts), line


def accepted_rewrite(message: str) -> bool:
    """Why re-tuning may rewrite a kept winner's entry: it lacks what this version records (an entry of an
    older version gains probes and its source), or this host measures the locked winner significantly
    faster than the host that recorded the lock (a faster CPU: timings refreshed). Never a slower host."""
    updated = "entry updated" in message and ("machine probes recorded" in message or "kernel source stored" in message)
    refreshed = re.fullmatch(r"kept locked winner( \(best challenger [+-]\d+\.\d%, not significant\))?; "
                             r"timings refreshed, \d+\.\d% faster than locked", message) is not None
    return updated or refreshed


def test_a_faster_host_refreshing_the_lock_is_accepted_and_a_slower_one_is_not() -> None:
    assert accepted_rewrite("kept locked winner; timings refreshed, 28.2% faster than locked")
    assert accepted_rewrite("kept locked winner (best challenger -3.1%, not significant); timings refreshed, "
                            "12.0% faster than locked")
    assert accepted_rewrite("kept locked winner; entry updated: machine probes recorded")
    assert not accepted_rewrite("kept locked winner; this machine measures it +20.0% against the lock (lock left as "
                                "it was)")
    assert not accepted_rewrite("kept locked winner; entry updated: source changed")


@pytest.mark.slow
def test_re_tuning_the_committed_lock_never_makes_it_worse(tmp_path: Path) -> None:
    """The README's first command on an unchanged tree: every committed entry stays byte for byte as it
    was, unless a winner significantly faster than the locked one, measured side by side here, replaces it.
    The C and OpenCL parts: the committed Triton lock is another CPU's interpreter's, which a re-tuning here
    never writes into (Triton tuned from nothing: test_tune_then_gate[triton])."""
    dest = _copy_example(tmp_path, lock=True)
    lockfile = dest / "autotune.lock" / "cpu-amd-epyc.json"
    committed_bytes = lockfile.read_bytes()
    committed = json.loads(committed_bytes)
    # whatever CPU runs this, re-tune into the committed file (the lockfile-name hook exists for that)
    (dest / "conftest.py").write_text("def pytest_autotune_lockfile_name(config, device):\n"
                                      "    return 'cpu-amd-epyc' if device.kind == 'cpu' else None\n")
    run = _run(dest, *PARTS["c"], *PARTS["opencl"], "--autotune", "--autotune-report=report.json")
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    after = json.loads(lockfile.read_text())
    rows = {f"{r['test']}::{r['kernel']}": r for r in json.loads((dest / "report.json").read_text())["kernels"]}
    for key, entry in committed["entries"].items():
        row = rows[key]
        if row["status"] == "kept lock" and not row["lock_written"]:
            assert after["entries"][key] == entry, key
            assert "kept locked winner" in row["message"]
        elif row["status"] == "kept lock":
            assert after["entries"][key]["params"] == entry["params"], key
            assert accepted_rewrite(row["message"]), row["message"]
        else:
            assert row["status"] == "new winner", row
            assert after["entries"][key]["params"] != entry["params"]
            assert "faster than lock" in row["message"], row["message"]
    if not any(rows[key]["lock_written"] for key in committed["entries"]):
        assert lockfile.read_bytes() == committed_bytes


@pytest.mark.skipif(not (sys.platform.startswith("linux") and platform.machine() == "x86_64"),
                    reason="the cuda-bindings/NVRTC wheels exist for Linux x86-64")
def test_cuda_kernels_compile_without_a_gpu(example_copy: Path) -> None:
    """The GPU-less CI job of the README: every CUDA test's kernel compiles for sm_80 and sm_90 with NVRTC."""
    done = _run(example_copy, "tests/test_cuda_kernels.py", "--autotune-compile=sm_80,sm_90",
                "--autotune-compile-sample=2", "--autotune-report=compile.json")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    rows = json.loads((example_copy / "compile.json").read_text())["kernels"]
    assert {(r["kernel"], r["mode"], r["status"]) for r in rows} == {
        ("vector_add", "compile", "compiled"), ("matmul", "compile", "compiled"),
        ("convolution", "compile", "compiled"), ("reduce_sum", "compile", "compiled")}
    for r in rows:
        assert set(r["compile"]) == {"sm_80", "sm_90"}
        assert all(c["compiled"] == 2 and c["compile"] == c["resources"] == 0 for c in r["compile"].values())
