"""Triton kernels on a CI runner without a GPU: the interpreter proves the result and its timing is information;
the performance verdict is the static gate's, the binary Triton builds for each locked architecture (real
Triton compiles for sm_90 with the ptxas it ships, real nvdisasm)."""
from __future__ import annotations

import json

import pytest
from triton_support import interpreter, require_triton

require_triton()

from tests.backends.test_triton import KERNELS, project, run  # noqa: E402,F401  (the fixture, the inner session)

pytestmark = pytest.mark.slow

KEY = "test_add.py::test_add::add"
TEST = '''
import numpy as np
import pytest
import triton

from kernels_tri import add

N = 100
FAST = {"warmup": 0, "min_iterations": 3, "max_iterations": 3}


@pytest.mark.tune(params={"BLOCK": [32, 64], "num_warps": [1, 2]}, strategy="brute_force", measure=FAST)
def test_add(autotune):
    x, y = np.linspace(0, 1, N, dtype=np.float32), np.linspace(1, 2, N, dtype=np.float32)
    out = np.zeros(N, dtype=np.float32)
    autotune.triton(add, lambda meta: (triton.cdiv(N, meta["BLOCK"]),), [x, y, out, N], expected=[None, None, x + y, None])
'''
# the same sum, loading x twice more (masked to zero): more global loads, a static regression on any GPU
MORE_LOADS = KERNELS.replace(
    "    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)\n",
    "    zero = tl.load(x_ptr + offs + 1, mask=offs < 0, other=0.0) + tl.load(x_ptr + offs + 2, mask=offs < 0, other=0.0)\n"
    "    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask) + zero,"
    " mask=mask)\n", 1)


def _rows(project: pytest.Pytester) -> list[dict]:
    return json.loads((project.path / "report.json").read_text())["kernels"]


@pytest.mark.skipif(not interpreter(), reason="a GPU is present: Triton runs on it, not in the interpreter")
def test_without_a_gpu_the_interpreter_verifies_and_the_binary_gates(project: pytest.Pytester) -> None:
    from pytest_autotune.lock.lockfile import merge_entries, read_lockfile

    assert MORE_LOADS != KERNELS
    project.makepyfile(test_add=TEST)
    run(project, "--autotune").assert_outcomes(passed=1)
    run(project, "--autotune-compile=sm_90", "--autotune-record-static",
        "--autotune-report=report.json").assert_outcomes(passed=1)
    (compiled,) = _rows(project)  # compile mode's report: Triton's compile time and the binary's resources
    assert compiled["mode"] == "compile" and compiled["compile"]["sm_90"]["compiler"].startswith("triton ")
    (built,) = compiled["configurations"]
    assert built["arch"] == "sm_90" and built["params"] == compiled["params"] and 0 < built["seconds"] <= \
        compiled["seconds"]
    assert built["resources"]["registers"] > 0 and built["resources"]["threads"] == 32 * built["params"]["num_warps"]
    baseline = json.loads((project.path / "autotune.lock" / "static" / "sm_90.json").read_text())
    profile = baseline["entries"][KEY]["static"]
    assert profile["toolchain"]["compiler"].startswith("triton") and profile["instructions"]["global_load"] >= 2

    # a GPU lock of the kernel on an H100 (what a GPU tuning writes), beside the interpreter's lock
    (interp,) = (p for p in (project.path / "autotune.lock").glob("triton-interpreter-*.json"))
    entry = dict(read_lockfile(interp).entries[KEY])
    entry["params"], entry["static"] = baseline["entries"][KEY]["params"], {**profile}  # the winner's own profile
    merge_entries(project.path / "autotune.lock" / "nvidia-h100-80gb-hbm3.json", {KEY: entry},
                  {"kind": "cuda", "model": "NVIDIA H100 80GB HBM3", "properties": {"compute_capability": 90}})

    result = run(project, "--autotune-report=report.json")
    result.assert_outcomes(passed=1)
    rows = _rows(project)
    static = [r for r in rows if r["mode"] == "static"]
    assert [(r["arch"], r["status"], r["device"]) for r in static] == [("sm_90", "pass", "NVIDIA H100 80GB HBM3")]
    (timed,) = [r for r in rows if r["mode"] == "gate"]
    assert timed["status"] == "info" and "information only" in timed["note"], timed  # never a verdict

    project.makepyfile(kernels_tri=MORE_LOADS)  # same result, more loads: the interpreter passes, the binary not
    result = run(project, "--autotune-report=report.json")
    result.assert_outcomes(failed=1)
    (static,) = [r for r in _rows(project) if r["mode"] == "static"]
    assert static["status"] == "WORSE" and "global loads" in static["note"], static
    out = "\n".join(result.outlines)
    assert "REGRESSION (static)" in out and "on NVIDIA H100 80GB HBM3" in out, out

    # information only is about the timing: a wrong result still fails, whatever the binaries say
    project.makepyfile(kernels_tri=KERNELS.replace("    mask = offs < n\n", "    mask = offs < n - 3\n", 1))
    wrong = run(project, "--autotune-static=warn")
    wrong.assert_outcomes(failed=1)
    assert "no longer works" in "\n".join(wrong.outlines)

