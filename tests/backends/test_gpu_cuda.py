"""The CUDA path on a real GPU (CuPy runner, NVRTC compile stage): skipped without a device, failed instead with
``AUTOTUNE_REQUIRE_GPU=1`` (the device check, ``tools/gpu_check.sh``, runs them so).

Written for an H100/H200 with cupy-cuda13x 14.2 and NVRTC 13; none has run on a GPU yet. What each
proves: the gate passes an unchanged kernel and fails one made much slower; the compile pool's NVRTC cubins are
what the CuPy device stage loads (no fallback); a resource violation is caught before any launch; an illegal
address is isolated (the worker is replaced, the search goes on); CUDA event timing agrees with the wall clock.
"""
from __future__ import annotations

import json
from pathlib import Path
from time import perf_counter

import numpy as np
import pytest

from pytest_autotune.measure.timing import MeasureOptions
from pytest_autotune.results import FailureKind
from pytest_autotune.runners import KernelSpec, make_runner
from pytest_autotune.engine.tuner import compile_ahead_summary, tune

from test_runner_cuda import FAST, _require, vadd_spec

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def cupy_device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _require("cupy")
    monkeypatch.setenv("PYTEST_AUTOTUNE_CACHE_DIR", str(tmp_path / "cache"))  # cubins compiled afresh here


# -- the gate on a real device --------------------------------------------------------------------------------

SWORK_CU = r"""
#define REPS 20
/* out = out * 0.5 + in, REPS times per element: REPS is the work, an edit of it a slower kernel. */
extern "C" __global__ void swork(float *out, const float *in, int n) {
    int i = blockIdx.x * block_size_x + threadIdx.x;
    if (i < n) {
        float v = out[i], x = in[i];
        for (int k = 0; k < REPS; k++)
            v = v * 0.5f + x;
        out[i] = v;
    }
}
"""

SWORK_TEST = '''
import numpy as np
import pytest

N = 1 << 22


@pytest.mark.tune(params={"block_size_x": [128, 256, 512]}, strategy="brute_force",
                  measure={"min_iterations": 20, "max_iterations": 40})
def test_swork(autotune):
    a = np.linspace(0, 1, N, dtype=np.float32)
    autotune.kernel("swork.cu", "swork", N, [np.zeros(N, np.float32), a, np.int32(N)], expected=None,
                    runner="cupy")
'''


def test_gpu_gate_passes_the_unchanged_kernel_and_fails_one_made_much_slower(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\n")
    pytester.makefile(".cu", swork=SWORK_CU)
    pytester.makepyfile(test_swork=SWORK_TEST)
    args = ("-p", "no:cacheprovider", "--autotune-require-device", "--autotune-compile-workers=2")
    tuned = pytester.runpytest_subprocess(*args, "--autotune", "--autotune-report=tune.json")
    tuned.assert_outcomes(passed=1)
    (lockfile,) = (pytester.path / "autotune.lock").glob("nvidia*.json")
    entry = json.loads(lockfile.read_text())["entries"]["test_swork.py::test_swork::swork"]
    assert entry["params"]["block_size_x"] in (128, 256, 512)

    unchanged = pytester.runpytest_subprocess(*args, "--autotune-missing=fail", "--autotune-report=gate.json")
    unchanged.assert_outcomes(passed=1)
    (row,) = json.loads((pytester.path / "gate.json").read_text())["kernels"]
    assert row["mode"] == "gate" and row["status"] in ("pass", "faster"), row

    # 100x the arithmetic per element: several times slower on any GPU, the A/B against the locked source says so
    (pytester.path / "swork.cu").write_text(SWORK_CU.replace("#define REPS 20", "#define REPS 2000"))
    slower = pytester.runpytest_subprocess(*args, "--autotune-missing=fail", "--autotune-report=slow.json")
    slower.assert_outcomes(failed=1)
    slower.stdout.fnmatch_lines(["*autotune regression: kernel 'swork' in test_swork.py::test_swork got slower*"])
    assert json.loads(lockfile.read_text())["entries"]["test_swork.py::test_swork::swork"] == entry  # never written


# -- the compile pool: NVRTC cubins loaded by the CuPy device stage -------------------------------------------

TEMPLATE_VADD = ("template <int BS> __global__ void vadd(float *c, const float *a, const float *b, int n) {\n"
                 "    int i = blockIdx.x * BS + threadIdx.x;\n    if (i < n) c[i] = a[i] + b[i];\n}\n")


def _template_spec(n: int = 1 << 16) -> KernelSpec:
    rng = np.random.default_rng(3)
    a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    return KernelSpec(TEMPLATE_VADD, "vadd<block_size_x>", n, [np.zeros(n, np.float32), a, b, np.int32(n)],
                      expected=[a + b, None, None, None], lang="cuda")


def test_gpu_compile_pool_cubins_are_loaded_by_the_cupy_device_stage_without_fallback() -> None:
    from pytest_autotune.backends import nvrtc

    assert nvrtc.nvrtc_unavailable_reason() is None, nvrtc.nvrtc_unavailable_reason()
    with make_runner(_template_spec(), runner="cupy", measure=FAST) as runner:
        assert runner.compile_stage() is not None  # NVRTC here targets this device's architecture
        result = tune(runner, {"block_size_x": [32, 64, 128, 256, 512, 1024]}, strategy="brute_force",
                      compile_workers=3, confirm_rounds=0)
    records = result.history.records
    measured = [r for r in records if r.measurement.ok]
    assert len(measured) == 6
    assert not [r.measurement.extra["fallback"] for r in records if r.measurement.extra.get("fallback")]
    ahead = compile_ahead_summary(result.history)
    assert ahead["fallbacks"] == 0 and ahead["loaded"] >= 5, ahead  # the first may be compiled inline
    for r in measured:
        if "load_s" in r.measurement.timings:
            assert r.measurement.extra.get("kernel_name") == f"vadd<{r.params['block_size_x']}>"
            assert "spill_stores" in r.measurement.extra  # ptxas' report came with the cubin


# -- a resource violation caught before launch ----------------------------------------------------------------

SMEM_KERNEL = r"""
extern "C" __global__ void smem_user(float *out, int n) {
    __shared__ float fixed[10240];  /* 40 KiB static */
    extern __shared__ float dynamic[];
    int i = threadIdx.x;
    fixed[i] = (float) i;
    dynamic[i] = 1.0f;
    __syncthreads();
    if (blockIdx.x * blockDim.x + i < n) out[blockIdx.x * blockDim.x + i] = fixed[i] + dynamic[i];
}
"""


@pytest.mark.parametrize("compile_workers", [1, 2], ids=["inline", "compile-pool"])
def test_gpu_static_plus_dynamic_shared_memory_over_the_opt_in_is_refused_before_launch(compile_workers) -> None:
    n = 1 << 12
    spec = KernelSpec(SMEM_KERNEL, "smem_user", n, [np.zeros(n, np.float32), np.int32(n)], lang="cuda",
                      shared_mem="smem", expected=None)
    with make_runner(spec, runner="cupy", measure=FAST) as runner:
        optin = runner.constants()["max_shared_memory_per_block"]
        over = optin - 40 * 1024 + 1024  # dynamic alone fits the opt-in; with the 40 KiB static part it does not
        result = tune(runner, {"block_size_x": [128], "smem": [4096, over]}, strategy="brute_force",
                      compile_workers=compile_workers, confirm_rounds=0)
        starts = runner.worker_starts
    by_smem = {r.params["smem"]: r.measurement for r in result.history.records}
    assert by_smem[4096].ok, by_smem[4096].detail
    refused = by_smem[over]
    assert refused.failure is FailureKind.RESOURCES, (refused.failure, refused.detail)
    assert "40960 bytes static" in refused.detail and "exceed max_shared_memory_per_block" in refused.detail
    assert "bench_s" not in refused.timings and "verify_s" not in refused.timings  # never launched
    assert starts == 1  # nothing crashed


# -- an illegal address: isolated, the worker replaced, the search goes on --------------------------------------


def test_gpu_illegal_address_is_isolated_and_the_worker_replaced() -> None:
    with make_runner(vadd_spec(), runner="cupy", measure=FAST) as runner:
        first_pid = runner.worker_pid
        result = tune(runner, {"block_size_x": [128, 256], "MODE": [3, 0]}, strategy="brute_force",
                      confirm_rounds=0)
        assert runner.worker_starts >= 2 and runner.worker_pid != first_pid
    crashes = [r.measurement for r in result.history.records if r.params["MODE"] == 3]
    assert crashes and all(m.failure is FailureKind.RUNTIME and "illegal" in m.detail.lower() for m in crashes)
    assert result.params["MODE"] == 0 and result.measurement.ok


# -- CUDA event timing against the wall clock -------------------------------------------------------------------

SPIN = r"""
extern "C" __global__ void spin(float *out, long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < (unsigned long long) ns);
    if (threadIdx.x == 0 && blockIdx.x == 0) out[0] = 1.0f;
}
"""


def test_gpu_event_timing_agrees_with_the_wall_clock() -> None:
    """A kernel that spins 2 ms on the GPU's global timer: CUDA events say 2 ms (not less, not much more), and
    the timed runs together never exceed the wall time the timing loop took."""
    spec = KernelSpec(SPIN, "spin", 1, [np.zeros(1, np.float32), np.int64(2_000_000)], lang="cuda",
                      expected=None)
    measure = MeasureOptions(warmup=2, min_iterations=20, max_iterations=20, watchdog_s=30.0, flush_l2=False)
    with make_runner(spec, runner="cupy", measure=measure) as runner:
        start = perf_counter()
        m = runner.evaluate({"block_size_x": 32})
        wall = perf_counter() - start
    assert m.ok, m.detail
    assert len(m.samples) == 20
    assert 1.99 <= min(m.samples) and m.value < 3.0, m.samples
    assert sum(m.samples) / 1e3 <= m.timings["bench_s"] <= wall
