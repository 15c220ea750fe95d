"""pytest-autotune export: the header and JSON exports, against golden files (UPDATE_GOLDEN=1 rewrites them)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_autotune.cli import EXIT_ERROR, EXIT_OK, main
from pytest_autotune.lock.lockfile import merge_entries, read_lockfile

DATA = Path(__file__).resolve().parents[1] / "data" / "export"
LOCK = DATA / "lock"  # two GPUs; matmul tuned for two sizes on one, one size on the other; a size-less kernel
GOLDEN = {
    "all.h": ["--format", "header"],
    "all_default_h100.h": ["--format", "header", "--default-device", "nvidia-h100-80gb-hbm3"],
    "reduce.h": ["--format", "header", "--kernel", "reduce"],
    "all.json": ["--format", "json"],
}


def export(capsys: pytest.CaptureFixture[str], lockdir: Path | str, *args: str) -> tuple[int, str, str]:
    code = main(["export", str(lockdir), *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_export_matches_golden_file(name: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(DATA)  # the header names the lock directory as given: keep it relative
    code, out, err = export(capsys, "lock", *GOLDEN[name])
    assert code == EXIT_OK, err
    golden = DATA / name
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(out)
    assert out == golden.read_text()


def test_export_is_deterministic_whatever_the_order_entries_were_written(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    copy = tmp_path / "lock"
    copy.mkdir()
    for path in sorted(LOCK.glob("*.json"), reverse=True):  # entries re-merged one by one, in reverse order
        lock = read_lockfile(path)
        for key in sorted(lock.entries, reverse=True):
            merge_entries(copy / path.name, {key: lock.entries[key]}, lock.device)
    for fmt in ("header", "json"):
        assert export(capsys, copy, "--format", fmt)[1] == export(capsys, LOCK, "--format", fmt)[1].replace(
            str(LOCK), str(copy))


def test_json_export_structure(capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(export(capsys, LOCK, "--format", "json")[1])
    assert data["format"] == "pytest-autotune-export" and data["version"] == 1
    a100 = data["devices"]["nvidia-a100-sxm4-80gb"]
    assert a100["model"] == "NVIDIA A100-SXM4-80GB"
    assert set(a100["kernels"]["matmul"]) == {"1024x1024", "4096x4096"}
    assert a100["kernels"]["matmul"]["4096x4096"]["params"]["tile"] == 4
    assert a100["kernels"]["reduce"][""]["params"]["vector"] == "float4"


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
@pytest.mark.parametrize("define, expected", [("-DAUTOTUNE_DEVICE_NVIDIA_A100_SXM4_80GB", "32 4 256 float4"),
                                              ("-DAUTOTUNE_DEVICE_NVIDIA_H100_80GB_HBM3", "64 8 512 float2"),
                                              (None, "64 8 512 float2")])
def test_header_selects_the_device_in_a_c_build(tmp_path: Path, define: str | None, expected: str) -> None:
    header = (DATA / "all_default_h100.h").read_text()
    (tmp_path / "autotune_params.h").write_text(header)
    (tmp_path / "main.c").write_text(
        '#include <stdio.h>\n#include "autotune_params.h"\n#define STR_(x) #x\n#define STR(x) STR_(x)\n'
        'int main(void) { printf("%d %d %d %s\\n", AUTOTUNE_MATMUL_4096X4096_BLOCK_SIZE_X, '
        'AUTOTUNE_MATMUL_4096X4096_TILE, AUTOTUNE_REDUCE_THREADS, STR(AUTOTUNE_REDUCE_VECTOR)); return 0; }\n')
    cmd = ["gcc", "-Wall", "-Werror", *([define] if define else []), "-o", str(tmp_path / "main"), str(tmp_path / "main.c")]
    subprocess.run(cmd, check=True, cwd=tmp_path)
    assert subprocess.run([str(tmp_path / "main")], capture_output=True, text=True, check=True).stdout.strip() == expected


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_headers_of_two_kernels_can_be_included_together(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for kernel in ("matmul", "reduce"):
        assert export(capsys, LOCK, "--format", "header", "--kernel", kernel, "-o", str(tmp_path / f"{kernel}.h"))[0] == 0
    (tmp_path / "main.c").write_text(
        '#include <stdio.h>\n#include "matmul.h"\n#include "reduce.h"\n'
        'int main(void) { printf("%d %d\\n", AUTOTUNE_MATMUL_4096X4096_TILE, AUTOTUNE_REDUCE_THREADS); return 0; }\n')
    subprocess.run(["gcc", "-Wall", "-Werror", "-DAUTOTUNE_DEVICE_NVIDIA_H100_80GB_HBM3", "-o", str(tmp_path / "main"),
                    str(tmp_path / "main.c")], check=True, cwd=tmp_path)
    assert subprocess.run([str(tmp_path / "main")], capture_output=True, text=True, check=True).stdout == "8 512\n"


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_header_refuses_two_devices_at_once(tmp_path: Path) -> None:
    (tmp_path / "main.c").write_text('#include "%s"\nint main(void) { return 0; }\n' % (DATA / "all.h"))
    result = subprocess.run(["gcc", "-DAUTOTUNE_DEVICE_NVIDIA_A100_SXM4_80GB", "-DAUTOTUNE_DEVICE_NVIDIA_H100_80GB_HBM3",
                             "-fsyntax-only", str(tmp_path / "main.c")], capture_output=True, text=True)
    assert result.returncode != 0 and "define at most one AUTOTUNE_DEVICE_<SLUG>" in result.stderr


def _entry(kernel: str, test: str, params: dict, size: list | None = None) -> dict:
    return {"kernel": kernel, "test": test, "params": params,
            "stats": {"median": 1.0, "mean": 1.0, "min": 1.0, "iqr": 0.0, "n": 1}, "samples": [1.0],
            "hashes": {"source": "s", "space": "t", "problem": "p"}, "problem": {"size": size, "args": []}}


def test_name_collisions_are_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    merge_entries(tmp_path / "gpu.json", {"t::a::conv": _entry("conv", "t::a", {"x_y": 1}),
                                         "t::b::conv_x": _entry("conv_x", "t::b", {"y": 2})}, {"model": "GPU"})
    code, out, err = export(capsys, tmp_path, "--format", "header")
    assert code == EXIT_ERROR and out == ""
    assert "header name collision: AUTOTUNE_CONV_X_Y stands for kernel 'conv' parameter 'x_y' and for kernel " \
           "'conv_x' parameter 'y' (gpu)" in err


def test_same_kernel_and_problem_from_two_tests_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    merge_entries(tmp_path / "gpu.json", {"t::a::k": _entry("k", "t::a", {"x": 1}, [64]),
                                         "t::b::k": _entry("k", "t::b", {"x": 2}, [64])}, {"model": "GPU"})
    code, _, err = export(capsys, tmp_path, "--format", "json")
    assert code == EXIT_ERROR
    assert "kernel 'k' is tuned for problem 64 by two tests with different parameters: t::a and t::b" in err


def test_device_symbol_collision_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for slug in ("gpu-a", "gpu_a"):
        merge_entries(tmp_path / f"{slug}.json", {"t::a::k": _entry("k", "t::a", {"x": 1})}, {"model": slug})
    code, _, err = export(capsys, tmp_path, "--format", "header")
    assert code == EXIT_ERROR and "lockfiles 'gpu-a' and 'gpu_a' both map to AUTOTUNE_DEVICE_GPU_A" in err


def test_usage_errors_name_what_is_wrong(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert "--kernel 'nope': no lockfile in" in export(capsys, LOCK, "--format", "json", "--kernel", "nope")[2]
    assert "--default-device 'gpu-x': no lockfile of that name" in export(
        capsys, LOCK, "--format", "header", "--default-device", "gpu-x")[2]
    assert "--default-device applies to --format header only" in export(
        capsys, LOCK, "--format", "json", "--default-device", "nvidia-h100-80gb-hbm3")[2]
    assert "no lockfiles (*.json)" in export(capsys, tmp_path, "--format", "json")[2]
    assert "not a directory of lockfiles" in export(capsys, tmp_path / "missing", "--format", "json")[2]
    assert export(capsys, LOCK)[0] == EXIT_ERROR  # --format is required


def test_output_file_is_written_and_left_alone_when_unchanged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "include" / "autotune_params.h"
    assert export(capsys, LOCK, "--format", "header", "-o", str(target)) == (EXIT_OK, "", "")
    text = target.read_text()
    assert "#define AUTOTUNE_REDUCE_THREADS 512" in text
    os.utime(target, ns=(1, 1))
    assert export(capsys, LOCK, "--format", "header", "--output", str(target))[0] == EXIT_OK
    assert target.stat().st_mtime_ns == 1 and target.read_text() == text
