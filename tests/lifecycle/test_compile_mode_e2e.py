"""``pytest --autotune-compile=sm_80,sm_90`` end to end: inner pytest sessions on a small CUDA kernel, real NVRTC.

No GPU, no CuPy, no driver: the mode compiles with NVRTC alone. Runs where
the cuda-bindings/NVRTC wheels exist (Linux x86-64, as in CI); skips elsewhere.
"""
from __future__ import annotations

import importlib
import json
import platform
import sys

import pytest

from pytest_autotune.lock.lockfile import merge_entries
from pytest_autotune.execution.device import DeviceInfo
from pytest_autotune.backends import nvrtc
from pytest_autotune.backends.nvrtc import nvrtc_unavailable_reason

WHEELS_EXIST = sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64")
NVRTC_MISSING = nvrtc_unavailable_reason()
pytestmark = pytest.mark.skipif(bool(NVRTC_MISSING) and not WHEELS_EXIST,
                                reason=f"no cuda-bindings/NVRTC wheels for this platform: {NVRTC_MISSING}")

# Inner sessions drop the modules they import; keep one copy of the heavy ones (see test_plugin_e2e).
for _name in ("pytest_autotune.lifecycle.compile_check", "scipy.stats"):
    importlib.import_module(_name)
if not NVRTC_MISSING:
    importlib.import_module("cuda.bindings.nvrtc")

KERNEL = r"""
/* Each block stages block_size_x * TILE floats in a static shared array. */
extern "C" __global__ void stage(float *out, const float *in, int n) {
    __shared__ float tile[block_size_x * TILE];
    const int base = blockIdx.x * block_size_x * TILE;
    for (int t = 0; t < TILE; t++) {
        const int i = base + t * block_size_x + threadIdx.x;
        tile[t * block_size_x + threadIdx.x] = i < n ? in[i] : 0.0f;
    }
    __syncthreads();
    for (int t = 0; t < TILE; t++) {
        const int i = base + t * block_size_x + threadIdx.x;
        if (i < n) out[i] = 2.0f * tile[(t * block_size_x + threadIdx.x + 1) % (block_size_x * TILE)];
    }
}
"""

TEST = r"""
import numpy as np
import pytest

n = 1 << 16
x = np.arange(n, dtype=np.float32)


@pytest.mark.tune(params={"block_size_x": [64, 128, 256, 512, 1024], "TILE": [1, 4, 16, 32, 64]},
                  restrictions=["block_size_x * TILE * 4 <= LIMIT"])
def test_stage(autotune):
    result = autotune.kernel("stage.cu", "stage", n, [np.zeros_like(x), x, np.int32(n)],
                             expected=[None, None, None], grid_div_x=["block_size_x", "TILE"])
    assert result.mode == "compile" and result.outputs is None
"""

INNER_ARGS = ("-rs", "-p", "no:benchmark", "-p", "no:unraisableexception", "-p", "no:hypothesispytest",
              "-p", "no:xdist", "-p", "no:randomly")


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("COLUMNS", "400")  # a wide terminal: the summary table keeps whole test ids
    pytester.makeini("[pytest]\n")
    pytester.path.joinpath("stage.cu").write_text(KERNEL)
    return pytester


def write_test(pytester: pytest.Pytester, limit: str) -> None:
    pytester.makepyfile(test_stage=TEST.replace("LIMIT", limit))


def lock_winner(pytester: pytest.Pytester, cc: int, params: dict) -> None:
    device = DeviceInfo(f"NVIDIA Test sm_{cc}", "cuda", properties={"compute_capability": cc})
    entry = {"kernel": "stage", "test": "test_stage.py::test_stage", "params": params,
             "stats": {"median": 1.0, "mean": 1.0, "min": 1.0, "iqr": 0.0, "n": 1}, "samples": [1.0],
             "hashes": {"source": "a" * 16, "space": "b" * 16, "problem": "c" * 16}}
    merge_entries(pytester.path / "autotune.lock" / f"{device.slug}.json", {"test_stage.py::test_stage::stage": entry},
                  device)


def report(pytester: pytest.Pytester) -> dict:
    rows = json.loads((pytester.path / "report.json").read_text())["kernels"]
    assert len(rows) == 1
    return rows[0]


def test_valid_space_and_locked_winner_compile(project):
    write_test(project, "max_static_shared_memory_per_block")
    lock_winner(project, 90, {"block_size_x": 256, "TILE": 16})
    lock_winner(project, 75, {"block_size_x": 64, "TILE": 1})  # sm_75 is not asked for: not compiled
    result = project.runpytest(*INNER_ARGS, "--autotune-compile=sm_80,sm_90", "--autotune-report=report.json")
    result.assert_outcomes(passed=1)
    row = report(project)
    assert row["mode"] == "compile" and row["status"] == "compiled" and row["strategy"] == "nvrtc"
    # the run's own mode is compile, not gate (it neither tuned nor gated)
    assert json.loads((project.path / "report.json").read_text())["meta"]["mode"] == "compile"
    # 19 of the 25 configurations fit 48 KiB of static shared memory (block_size_x * TILE <= 12288), on both
    # architectures; sm_90 also compiles its locked winner
    counts = {arch: {k: v for k, v in c.items() if k not in ("seconds", "compiler")} for arch, c in row["compile"].items()}
    assert counts == {arch: {"valid_configurations": 19, "compiled": 19 + (arch == "sm_90"), "compile": 0,
                             "resources": 0, "invalid": 0, "spilling": 0} for arch in ("sm_80", "sm_90")}
    # compile time per architecture, and per configuration with its resources: 39 passed
    passed = row["configurations"]
    assert len(passed) == 39 and sum(p["arch"] == "sm_90" for p in passed) == 20
    for arch, c in row["compile"].items():
        assert c["compiler"].startswith("nvrtc ")
        mine = [p["seconds"] for p in passed if p["arch"] == arch]
        assert all(s > 0 for s in mine) and c["seconds"] == pytest.approx(sum(mine), abs=0.01)
    assert 0 < sum(c["seconds"] for c in row["compile"].values()) <= row["seconds"]
    locked = next(p for p in passed if p["origin"] == "locked")
    assert locked["arch"] == "sm_90" and locked["params"] == {"block_size_x": 256, "TILE": 16}
    # 256 threads, each staging 16 floats: 16 KiB of static shared memory, nothing dynamic, no local memory
    assert {k: locked["resources"][k] for k in ("static_shared_mem", "dynamic_shared_mem", "threads", "stack_frame",
                                                "spill_stores", "spill_loads")} == {
        "static_shared_mem": 16384, "dynamic_shared_mem": 0, "threads": 256, "stack_frame": 0, "spill_stores": 0,
        "spill_loads": 0}
    assert locked["resources"]["registers"] > 0 and 0 < locked["resources"]["occupancy"] <= 1
    result.stdout.fnmatch_lines(["*test_stage.py::test_stage::stage*compile*compiled*nvrtc*"])


def test_sample_option_limits_the_configurations(project):
    write_test(project, "max_static_shared_memory_per_block")
    result = project.runpytest(*INNER_ARGS, "--autotune-compile=sm_90", "--autotune-compile-sample=5",
                               "--autotune-report=report.json")
    result.assert_outcomes(passed=1)
    assert report(project)["compile"]["sm_90"]["compiled"] == 5


def test_the_markers_compile_sample_wins_over_the_flag_for_its_test_only(project):
    """One test's slow compiles sampled less than the suite's: the marker's compile_sample= beats
    --autotune-compile-sample (as every marker argument beats a flag's default); a test without it keeps the flag's."""
    sampled = TEST.replace("LIMIT", "max_static_shared_memory_per_block")
    own = sampled.replace('restrictions=["', 'compile_sample=2, restrictions=["').replace("test_stage", "test_own")
    project.makepyfile(test_stage=sampled + own)
    result = project.runpytest(*INNER_ARGS, "--autotune-compile=sm_90", "--autotune-compile-sample=5",
                               "--autotune-report=report.json")
    result.assert_outcomes(passed=2)
    rows = {r["test"]: r for r in json.loads((project.path / "report.json").read_text())["kernels"]}
    assert rows["test_stage.py::test_own"]["compile"]["sm_90"]["compiled"] == 2
    assert rows["test_stage.py::test_stage"]["compile"]["sm_90"]["compiled"] == 5


def test_a_bad_compile_sample_is_a_collection_error_naming_the_argument(project):
    project.makepyfile(test_stage=TEST.replace("LIMIT", "max_static_shared_memory_per_block").replace(
        'restrictions=["', 'compile_sample=0, restrictions=["'))
    result = project.runpytest(*INNER_ARGS, "--autotune-compile=sm_90")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*tune marker argument 'compile_sample': 0 must be a whole number of "
                                 "configurations >= 1*"])


def test_restriction_against_the_opt_in_limit_fails_naming_the_static_limit(project):
    """Static tiles bounded by max_shared_memory_per_block (the 227 KiB opt-in limit on sm_90) instead of the static
    limit: the configurations that cannot compile fail the test, naming max_static_shared_memory_per_block."""
    write_test(project, "max_shared_memory_per_block")
    result = project.runpytest(*INNER_ARGS, "--autotune-compile=sm_90")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        # 24 fit the 227 KiB opt-in limit; the 5 with block_size_x * TILE > 12288 cannot compile
        "*autotune: 5 of 24 configurations of stage that the restrictions allow cannot work:*",
        "*sm_90 space {block_size_x=256, TILE=64}: resources: 65536 bytes of static shared memory exceed "
        "max_static_shared_memory_per_block = 49152 (ptxas: uses too much shared data (0x10000 bytes, 0xc000 max))*",
    ])


def test_compile_error_fails_naming_file_and_line(project):
    project.path.joinpath("stage.cu").write_text(KERNEL.replace("2.0f * tile", "2.0f * tyle"))
    write_test(project, "max_static_shared_memory_per_block")
    result = project.runpytest(*INNER_ARGS, "--autotune-compile=sm_80", "--autotune-compile-sample=2")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*sm_80 space *: compile: NVRTC_ERROR_COMPILATION | "
                                 'stage.cu(13): error: identifier "tyle" is undefined*'])


@pytest.mark.parametrize("flag, message", [
    ("--autotune-compile=sm_35", "*argument --autotune-compile: no device limits for 'sm_35'; known architectures: "
                                 "sm_70*"),
    ("--autotune-compile-sample=0", "*argument --autotune-compile-sample: expected a whole number of configurations "
                                    ">= 1, got '0'"),
])
def test_bad_flag_values_are_usage_errors(project, flag, message):
    write_test(project, "max_static_shared_memory_per_block")
    result = project.runpytest(*INNER_ARGS, "--autotune-compile=sm_90", flag)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_missing_nvrtc_fails_the_check_instead_of_skipping_it(project, monkeypatch):
    """A compile-check CI job whose NVRTC is broken must not pass green with every kernel skipped."""
    write_test(project, "max_static_shared_memory_per_block")
    monkeypatch.setattr(nvrtc, "nvrtc_unavailable_reason", lambda: "the NVRTC library could not be loaded (test)")
    result = project.runpytest(*INNER_ARGS, "--autotune-compile=sm_90")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*autotune: --autotune-compile needs NVRTC: the NVRTC library could not be "
                                 "loaded (test)*"])


def test_architecture_the_installed_nvrtc_cannot_target_fails_naming_the_flag(project, monkeypatch):
    write_test(project, "max_static_shared_memory_per_block")
    monkeypatch.setattr(nvrtc, "supported_archs", lambda: (75, 80, 86, 87, 89, 90))
    result = project.runpytest(*INNER_ARGS, "--autotune-compile=sm_90,sm_100")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*autotune: --autotune-compile=sm_90,sm_100: NVRTC * cannot compile for sm_100 "
                                 "(it knows sm_75, * sm_90); sm_100 needs a newer NVRTC: pip install -U *"
                                 "nvidia-cuda-nvrtc*"])


def test_architecture_the_installed_nvrtc_dropped_names_an_older_nvrtc(project, monkeypatch):
    """NVRTC 13 no longer targets sm_70: the remedy is NVRTC 12, not a newer one."""
    write_test(project, "max_static_shared_memory_per_block")
    monkeypatch.setattr(nvrtc, "supported_archs", lambda: (75, 80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121))
    result = project.runpytest(*INNER_ARGS, "--autotune-compile=sm_70")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*NVRTC * cannot compile for sm_70 (it knows sm_75, * sm_121); sm_70 needs an older "
                                 "NVRTC (NVRTC 13 dropped sm_70/sm_72): pip install *pytest-autotune?nvrtc12?*"])
    result.stdout.no_fnmatch_line("*newer NVRTC*")


CUB_KERNEL = r"""
#include <cub/cub.cuh>

/* One partial sum per block, as Kernel Tuner's expdist reduces: CUB's block reduction. */
extern "C" __global__ void block_sum(float *out, const float *in, int n) {
    typedef cub::BlockReduce<float, block_size_x> BlockReduce;
    __shared__ typename BlockReduce::TempStorage temp;
    const int i = blockIdx.x * block_size_x + threadIdx.x;
    const float s = BlockReduce(temp).Sum(i < n ? in[i] : 0.0f);
    if (threadIdx.x == 0) out[blockIdx.x] = s;
}
"""

CUB_TEST = r"""
import numpy as np
import pytest

n = 4096
x = np.ones(n, dtype=np.float32)


@pytest.mark.tune(params={"block_size_x": [128, 256]})
def test_block_sum(autotune):
    result = autotune.kernel("block_sum.cu", "block_sum", n, [np.zeros(n // 128, np.float32), x, np.int32(n)],
                             expected=[None, None, None], runner="pycuda")
    assert result.mode == "compile" and result.params["block_size_x"] in (128, 256)
"""


def test_pycuda_kernel_is_built_by_nvcc_as_pycuda_builds_it(project):
    """NVRTC refuses <cub/cub.cuh> ('not supported when compiling with NVRTC'); PyCUDA's nvcc builds it, and so
    must the compile check of a runner="pycuda" kernel (one configuration: an nvcc build of CUB takes seconds)."""
    from pytest_autotune.static.build import find_nvcc

    try:
        find_nvcc()
    except Exception as exc:  # noqa: BLE001
        if not WHEELS_EXIST:
            pytest.skip(f"no nvcc here: {exc}")
        raise
    project.path.joinpath("block_sum.cu").write_text(CUB_KERNEL)
    project.makepyfile(test_block_sum=CUB_TEST)
    result = project.runpytest(*INNER_ARGS, "--autotune-compile=sm_90", "--autotune-compile-sample=1",
                               "--autotune-report=report.json")
    result.assert_outcomes(passed=1)
    row = report(project)
    assert row["strategy"] == "nvcc" and row["status"] == "compiled"
    assert row["compile"]["sm_90"]["compiled"] == 1 and row["compile"]["sm_90"]["compiler"].startswith("nvcc ")
    (passed,) = row["configurations"]
    # CUB's TempStorage is static shared memory; the block is block_size_x threads
    assert passed["arch"] == "sm_90" and passed["resources"]["static_shared_mem"] > 0
    assert passed["resources"]["threads"] == passed["params"]["block_size_x"] and passed["seconds"] > 0


def test_the_pycuda_runners_own_nvcc_is_used_and_a_missing_one_fails_the_check(project):
    """The runner's ``nvcc=`` option names the compiler; one that is not there fails the test (a compile-check CI
    job must not pass green with nothing built), saying what to install."""
    project.path.joinpath("block_sum.cu").write_text(CUB_KERNEL)
    project.makepyfile(test_block_sum=CUB_TEST.replace('runner="pycuda"', 'runner="pycuda", nvcc="/nowhere/nvcc"'))
    result = project.runpytest(*INNER_ARGS, "--autotune-compile=sm_90")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*autotune: --autotune-compile needs nvcc for the pycuda runner: nvcc '/nowhere/nvcc' "
                                 "was not found or is not executable (pip install nvidia-cuda-nvcc *nvidia-cuda-cccl*"])


def test_an_architecture_nvcc_cannot_target_fails_naming_the_flag(project):
    from pytest_autotune.static.build import find_nvcc

    try:
        nvcc = find_nvcc()
    except Exception as exc:  # noqa: BLE001
        if not WHEELS_EXIST:
            pytest.skip(f"no nvcc here: {exc}")
        raise
    import subprocess

    if "compute_70" in subprocess.run([nvcc, "--list-gpu-arch"], capture_output=True, text=True).stdout:
        pytest.skip("this nvcc still targets sm_70")
    project.makepyfile(test_stage=TEST.replace("LIMIT", "max_static_shared_memory_per_block").replace(
        'grid_div_x=["block_size_x", "TILE"]', 'grid_div_x=["block_size_x", "TILE"], runner="pycuda"'))
    result = project.runpytest(*INNER_ARGS, "--autotune-compile=sm_70,sm_90", "--autotune-compile-sample=1")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*autotune: --autotune-compile=sm_70,sm_90: nvcc * cannot compile for sm_70*"])


def test_sm_120_is_accepted_when_the_nvrtc_targets_it(project):
    if nvrtc.nvrtc_unavailable_reason() or 120 not in nvrtc.supported_archs():
        pytest.skip("the installed NVRTC cannot target sm_120")
    write_test(project, "max_static_shared_memory_per_block")
    result = project.runpytest(*INNER_ARGS, "--autotune-compile=sm_120", "--autotune-compile-sample=2")
    result.assert_outcomes(passed=1)
