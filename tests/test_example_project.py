"""The example project, run the way a user runs it: tune, then gate, in a subprocess.

C kernels run on the CPU; the CUDA tests of the example skip themselves without a GPU.
Runs on a copy, so the committed example lockfile is never touched.
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "example_project"


def _run(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = os.pathsep.join([str(cwd / "src"), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:xdist", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def example_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("example") / "example_project"
    shutil.copytree(EXAMPLE, dest, ignore=shutil.ignore_patterns("autotune.lock", ".pytest_cache", "__pycache__",
                                                                 "*.egg-info"))
    return dest


@pytest.mark.slow
def test_tune_then_gate(example_copy: Path) -> None:
    tuned = _run(example_copy, "--autotune", "--autotune-report=report.json")
    assert tuned.returncode == 0, tuned.stdout[-4000:] + tuned.stderr[-2000:]
    assert "autotune summary" in tuned.stdout
    lockfiles = list((example_copy / "autotune.lock").glob("*.json"))
    assert len(lockfiles) == 1, lockfiles
    entries = json.loads(lockfiles[0].read_text())["entries"]
    assert {"tests/test_cpu_kernels.py::test_blocked_matmul::matmul",
            "tests/test_cpu_kernels.py::test_stencil_square_and_wide::stencil_square",
            "tests/test_cpu_kernels.py::test_stencil_square_and_wide::stencil_wide"} <= set(entries)
    report = json.loads((example_copy / "report.json").read_text())
    assert {r["status"] for r in report["kernels"]} == {"tuned"}

    # CI machines are shared and the suite runs in parallel: the gate's statistics are tested
    # elsewhere; here a wide tolerance keeps the check about the workflow, not the noise.
    gated = _run(example_copy, "--autotune-tolerance=1.0")
    assert gated.returncode == 0, gated.stdout[-4000:] + gated.stderr[-2000:]
    assert "autotune summary" in gated.stdout
    table = gated.stdout.split("autotune summary", 1)[1]
    for kernel in ("matmul", "stencil_square", "stencil_wide"):
        line = next(l for l in table.splitlines() if l.split() and l.split()[0].endswith("::" + kernel))
        assert " gate " in line and (" pass " in line or " faster " in line), line


@pytest.mark.slow
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
