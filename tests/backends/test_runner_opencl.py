"""The opencl runner on a real OpenCL device (PoCL on the CPU): geometry, buffers, local memory,
event timing, verification and every failure kind, through the same protocol as the other runners."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from opencl_support import pocl  # noqa: F401  (fixture)

from pytest_autotune.measure.timing import MeasureOptions
from pytest_autotune.results import FailureKind
from pytest_autotune.runners import KernelSpec, LocalMemory, SpecError, infer_runner, make_runner
from pytest_autotune.execution.kernel import launch_geometry, ndrange
from pytest_autotune.backends.opencl_device import device_model
from pytest_autotune.engine.tuner import build_space, tune

FAST = MeasureOptions(warmup=0, min_iterations=3, max_iterations=3, watchdog_s=20.0)

# Each work-item scales TILE_Y rows of one column: the grid shrinks by block_size_y * TILE_Y on y,
# so a global size computed wrongly leaves rows unwritten (zeros) and fails verification.
SCALE_2D = r"""
__kernel void scale2d(__global float *out, __global const float *in, const int nx, const int ny) {
    const int x = get_global_id(0);
    const int y0 = get_group_id(1) * block_size_y * TILE_Y + get_local_id(1);
    if (x >= nx) return;
    for (int t = 0; t < TILE_Y; t++) {
        const int y = y0 + t * block_size_y;
        if (y < ny) out[y * nx + x] = 2.0f * in[y * nx + x];
    }
}
"""

# Work-group sums through a __local scratch argument sized by the work-group.
BLOCK_SUM = r"""
__kernel void block_sum(__global float *sums, __global const float *in, __local float *scratch) {
    const int lid = get_local_id(0);
    scratch[lid] = in[get_global_id(0)];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = block_size_x / 2; s > 0; s >>= 1) {
        if (lid < s) scratch[lid] += scratch[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) sums[get_group_id(0)] = scratch[0];
}
"""

FAULTY = r"""
__kernel void faulty(__global float *out, __global const float *in) {
    const int i = get_global_id(0);
#if MODE == 1
    out[i] = -in[i];            /* wrong output */
#elif MODE == 2
    out[i] = in[i] + undeclared_symbol;   /* does not compile */
#else
    out[i] = in[i];
#endif
}
"""

FIXED_GROUP = r"""
__kernel __attribute__((reqd_work_group_size(64, 1, 1)))
void fixed(__global float *out, __global const float *in) {
    out[get_global_id(0)] = in[get_global_id(0)] + 1.0f;
}
"""


def scale2d_spec(nx: int = 200, ny: int = 130) -> tuple[KernelSpec, np.ndarray]:
    a = np.random.default_rng(0).random((ny, nx), dtype=np.float32)
    spec = KernelSpec(SCALE_2D, "scale2d", (nx, ny), [np.zeros_like(a), a, np.int32(nx), np.int32(ny)],
                      expected=[2 * a, None, None, None], grid_div_y=["block_size_y", "TILE_Y"])
    return spec, a


def copy_spec(source: str, name: str, n: int = 1024, expected_shift: float = 0.0) -> KernelSpec:
    a = np.arange(n, dtype=np.float32)
    return KernelSpec(source, name, n, [np.zeros_like(a), a], expected=[a + expected_shift, None], lang="opencl")


def test_opencl_sources_pick_the_opencl_runner(tmp_path) -> None:
    path = tmp_path / "k.cl"
    path.write_text(FAULTY)
    assert KernelSpec(str(path), "faulty", 8, [np.zeros(8, np.float32)]).lang == "opencl"
    assert KernelSpec(FAULTY, "faulty", 8, [np.zeros(8, np.float32)]).lang == "opencl"  # __kernel in text
    spec = KernelSpec("void f(float *a) {}", "f", 8, [np.zeros(8, np.float32)], lang="OpenCL")
    assert spec.lang == "opencl" and infer_runner(spec) == "opencl"


def test_global_size_is_grid_times_block() -> None:
    spec, _ = scale2d_spec(nx=200, ny=130)
    geometry = launch_geometry(spec, {"block_size_x": 32, "block_size_y": 4, "TILE_Y": 8})
    assert geometry[:2] == ((7, 5, 1), (32, 4, 1))
    assert ndrange(geometry) == ((224, 20, 1), (32, 4, 1))


def test_spec_errors_name_what_is_wrong() -> None:
    a = np.zeros(8, np.float32)
    with pytest.raises(SpecError, match="check='race' is not a known check"):
        KernelSpec(FAULTY, "faulty", 8, [a, a], check="race")
    with pytest.raises(SpecError, match="LocalMemory size must be"):
        LocalMemory(1.5)
    with pytest.raises(SpecError, match="shared_mem: OpenCL sizes local memory per argument"):
        make_runner(KernelSpec(FAULTY, "faulty", 8, [a, a], shared_mem=64))
    with pytest.raises(SpecError, match="OpenCL C has no templates"):
        make_runner(KernelSpec(FAULTY, "faulty<4>", 8, [a, a], lang="opencl"))
    c_source = "void f(float *a, int n) {}"
    with pytest.raises(SpecError, match="check='races' runs the kernel under Oclgrind.*'c' runner cannot"):
        make_runner(KernelSpec(c_source, "f", 8, [a, np.int32(8)], check="races"))
    with pytest.raises(SpecError, match="argument 1 is LocalMemory.*'c' runner"):
        make_runner(KernelSpec(c_source, "f", 8, [a, LocalMemory(64)]))


def test_device_model_names_platform_vendor_family_and_hardware() -> None:
    def device(platform: str, vendor: str, name: str) -> SimpleNamespace:
        return SimpleNamespace(platform=SimpleNamespace(name=platform, vendor=vendor), vendor=vendor, name=name)

    assert device_model(device("NVIDIA CUDA", "NVIDIA Corporation", "NVIDIA GeForce RTX 3090")) == \
        "NVIDIA GeForce RTX 3090"
    assert device_model(device("AMD Accelerated Parallel Processing", "Advanced Micro Devices, Inc.", "gfx1030")) == \
        "AMD gfx1030"
    # the driver's prefix and code-generation variant are not the hardware: two PoCL builds, one device
    assert device_model(device("Portable Computing Language", "The pocl project", "pthread-AMD EPYC 7B13")) == \
        device_model(device("Portable Computing Language", "The pocl project", "pthread-znver3-AMD EPYC 7B13")) == \
        "PoCL AMD EPYC 7B13"


def test_warp_size_comes_from_the_vendor_extension_only() -> None:
    from pytest_autotune.backends.opencl_device import _warp_size

    cl = SimpleNamespace(Error=RuntimeError)
    nvidia = SimpleNamespace(extensions="cl_khr_fp64 cl_nv_device_attribute_query", warp_size_nv=32)
    amd = SimpleNamespace(extensions="cl_amd_device_attribute_query cl_khr_fp16", wavefront_width_amd=64)
    other = SimpleNamespace(extensions="cl_khr_fp64", warp_size_nv=32)  # the attribute alone proves nothing
    assert (_warp_size(cl, nvidia), _warp_size(cl, amd), _warp_size(cl, other)) == (32, 64, None)


def test_device_identity_slug_and_restriction_constants(pocl) -> None:
    spec, _ = scale2d_spec()
    with make_runner(spec, measure=FAST) as runner:
        info, constants = runner.device(), runner.constants()
    assert info.kind == "opencl" and info.model.startswith("PoCL ")
    assert info.slug.startswith("opencl-pocl-") and "pthread" not in info.slug
    assert {"pyopencl", "driver", "platform", "opencl_c", "pocl", "llvm", "cpu_variant"} <= set(info.versions)
    assert constants["max_threads"] == constants["max_work_group_size"] > 0
    assert constants["max_shared_memory_per_block"] == constants["local_mem_size"] > 0
    assert constants["sm_count"] == constants["compute_units"] > 0
    assert constants["max_block_dim_x"] == constants["max_work_item_size_x"] > 0
    space = build_space({"block_size_x": [64, 1 << 20]}, ["block_size_x <= max_threads"], runner)
    assert len(space) == 1  # the device limit removed the oversized work-group


def test_tunes_a_2d_kernel_verified_and_event_timed(pocl) -> None:
    spec, _ = scale2d_spec()
    params = {"block_size_x": [64], "block_size_y": [1, 4], "TILE_Y": [1, 3]}  # 200 x 130: partial groups
    with make_runner(spec, measure=FAST) as runner:
        result = tune(runner, params=params, strategy="brute_force")
        assert result.failures == {}  # every decomposition covers every element
        assert result.evaluations == 4
        m = runner.evaluate(result.params, keep_outputs=True)
    assert m.ok and len(m.samples) == 3 and all(s > 0 for s in m.samples)
    np.testing.assert_allclose(m.extra["outputs"][0], spec.expected[0])
    assert {"work_group_size", "local_mem", "private_mem", "preferred_work_group_multiple"} <= set(m.extra)
    bx, by, ty = (result.params[k] for k in ("block_size_x", "block_size_y", "TILE_Y"))
    assert m.extra["grid"] == [-(-200 // bx), -(-130 // (by * ty)), 1] and m.extra["block"] == [bx, by, 1]


def test_local_memory_argument_sized_per_configuration(pocl) -> None:
    n = 4096
    a = np.random.default_rng(1).random(n, dtype=np.float32)
    sums = np.zeros(n // 16, np.float32)  # room for the smallest work-group size

    def verify(expected, outputs):
        return outputs[0].any()  # checked exactly below, per work-group size

    spec = KernelSpec(BLOCK_SUM, "block_sum", n, [sums, a, LocalMemory("block_size_x * 4 * SCALE")], verify=verify)
    with make_runner(spec, measure=FAST) as runner:
        for bs in (16, 64, 256):
            m = runner.evaluate({"block_size_x": bs, "SCALE": 1}, keep_outputs=True)
            assert m.ok, m.detail
            expected = a.reshape(-1, bs).sum(axis=1, dtype=np.float64)
            np.testing.assert_allclose(m.extra["outputs"][0][: n // bs], expected, rtol=1e-4)
            assert m.extra["local_mem"] >= bs * 4  # the kernel reports the __local argument's bytes
        too_big = runner.evaluate({"block_size_x": 64, "SCALE": 1 << 20})
        assert too_big.failure is FailureKind.INVALID and "LocalMemory arguments exceed" in too_big.detail
        assert "compile_s" not in too_big.timings  # rejected before building
        zero = runner.evaluate({"block_size_x": 64, "SCALE": 0})
        assert zero.failure is FailureKind.INVALID and "must be positive" in zero.detail


def test_failures_compile_wrong_output_and_device_limits(pocl) -> None:
    spec = copy_spec(FAULTY, "faulty")
    with make_runner(spec, measure=FAST) as runner:
        assert runner.evaluate({"MODE": 0, "block_size_x": 64}).ok
        wrong = runner.evaluate({"MODE": 1, "block_size_x": 64})
        assert wrong.failure is FailureKind.WRONG_OUTPUT
        broken = runner.evaluate({"MODE": 2, "block_size_x": 64})
        assert broken.failure is FailureKind.COMPILE
        # the build log, pointing at the user's own line (the #defines come before a #line directive)
        assert "undeclared_symbol" in broken.detail and "kernel.cl:7:" in broken.detail
        huge = runner.evaluate({"MODE": 0, "block_size_x": 1 << 20})
        assert huge.failure is FailureKind.INVALID and "exceed the device limit" in huge.detail
        assert runner.evaluate({"MODE": 0, "block_size_x": 32}).ok  # tuning goes on
        assert runner.worker_starts == 1


def test_unknown_kernel_name_is_a_compile_failure_listing_the_kernels(pocl) -> None:
    with make_runner(copy_spec(FAULTY, "nope"), measure=FAST) as runner:
        m = runner.evaluate({"MODE": 0, "block_size_x": 64})
    assert m.failure is FailureKind.COMPILE and "kernel 'nope' not found" in m.detail and "faulty" in m.detail


def test_work_group_size_the_runtime_refuses_is_a_launch_failure(pocl) -> None:
    with make_runner(copy_spec(FIXED_GROUP, "fixed", expected_shift=1.0), measure=FAST) as runner:
        outcomes = {bs: runner.evaluate({"block_size_x": bs}) for bs in (32, 64, 128)}
        assert runner.worker_starts == 1  # a refused enqueue leaves the context usable
    assert outcomes[64].ok
    for bs in (32, 128):
        assert outcomes[bs].failure is FailureKind.LAUNCH and "INVALID_WORK_GROUP_SIZE" in outcomes[bs].detail


def test_opencl_errors_are_classified_by_status_code() -> None:
    cl = pytest.importorskip("pyopencl")
    from pytest_autotune.backends.opencl_runner import opencl_failure

    class EnqueueError(cl.RuntimeError):
        """pyopencl's error type with a status code (built without pyopencl's private error record: creating
        those by hand crashed an xdist worker that had run other OpenCL tests)."""

        def __init__(self, code: int) -> None:
            super().__init__(f"clEnqueueNDRangeKernel failed: {code}")
            self._code = code

        @property
        def code(self) -> int:
            return self._code

    def error(code: int) -> Exception:
        return EnqueueError(code)

    refused = opencl_failure(cl, error(cl.status_code.OUT_OF_RESOURCES), "launch")
    assert refused.kind is FailureKind.LAUNCH and not refused.poisoned
    unknown = opencl_failure(cl, error(cl.status_code.INVALID_COMMAND_QUEUE), "launch")
    assert unknown.kind is FailureKind.LAUNCH and unknown.poisoned
    crashed = opencl_failure(cl, error(cl.status_code.OUT_OF_RESOURCES), "run")  # NVIDIA's word for a fault
    assert crashed.kind is FailureKind.RUNTIME and crashed.poisoned


def test_device_selection(pocl, monkeypatch) -> None:
    cl = pytest.importorskip("pyopencl")
    from pytest_autotune.backends.opencl_device import list_devices, select_device

    devices = list_devices(cl)
    cpu = next((p, d, dev) for p, d, dev in devices if dev.platform.name.startswith("Portable"))
    monkeypatch.delenv("PYTEST_AUTOTUNE_DEVICE", raising=False)
    monkeypatch.delenv("PYOPENCL_CTX", raising=False)
    assert select_device(cl, f"{cpu[0]}:{cpu[1]}") == cpu[2]
    assert select_device(cl, "pthread") == cpu[2]  # by name
    assert select_device(cl).platform.name != "Oclgrind"  # the simulator is never the default
    with pytest.raises(SpecError, match=r"device='7:7' matches no OpenCL device; available: .*Portable"):
        select_device(cl, "7:7")
    monkeypatch.setenv("PYTEST_AUTOTUNE_DEVICE", "no-such-device")  # what --autotune-devices sets per worker
    with pytest.raises(SpecError, match=r"--autotune-devices \(PYTEST_AUTOTUNE_DEVICE\)='no-such-device' matches no "
                                        "OpenCL device"):
        select_device(cl)
    assert select_device(cl, "pthread") == cpu[2]  # an explicit device= wins over the variable
    monkeypatch.delenv("PYTEST_AUTOTUNE_DEVICE")
    monkeypatch.setenv("PYOPENCL_CTX", "7:7")  # PyOpenCL's own variable is named as it is
    with pytest.raises(SpecError, match="PYOPENCL_CTX='7:7' matches no OpenCL device"):
        select_device(cl)


def test_in_process_runner(pocl) -> None:
    spec, _ = scale2d_spec(nx=64, ny=64)
    with make_runner(spec, measure=FAST, isolate=False) as runner:
        assert runner.evaluate({"block_size_x": 16, "block_size_y": 2, "TILE_Y": 2}).ok


def test_flush_l2_overwrites_a_buffer_beyond_the_cache_before_each_run(pocl) -> None:
    spec, _ = scale2d_spec(nx=64, ny=64)
    measure = FAST.with_(flush_l2=True)
    with make_runner(spec, measure=measure, isolate=False) as runner:
        executor = runner._impl
        m = runner.evaluate({"block_size_x": 16, "block_size_y": 2, "TILE_Y": 2})
        assert m.ok, m.detail
        assert executor._flush.size >= 2 * runner.constants()["global_mem_cache_size"]
        assert executor._flush_value == 3  # one fill per timed run, each with a new byte


# The first run spins (about a second on a CPU); later runs find the flag set and return at once.
SLOW_FIRST_RUN = r"""
__kernel void slow_first(__global float *out, __global int *flag) {
    const int i = get_global_id(0);
    float x = 1.0f;
    if (flag[0] == 0 && i == 0)
        for (int k = 0; k < SPIN; k++) x = x * 0.999999f + 1e-7f;
    barrier(CLK_GLOBAL_MEM_FENCE);
    if (i == 0) flag[0] = 1;
    out[i] = x > 0.0f ? 1.0f : 0.0f;
}
"""


def test_first_launch_gets_the_compile_time_out_not_the_watchdog(pocl) -> None:
    """PoCL compiles a work-group size's code inside its first launch: that launch must not be a TIMEOUT."""
    out, flag = np.zeros(64, np.float32), np.zeros(1, np.int32)
    spec = KernelSpec(SLOW_FIRST_RUN, "slow_first", 64, [out, flag], expected=[np.ones(64, np.float32), None])
    measure = MeasureOptions(warmup=0, min_iterations=3, max_iterations=3, watchdog_s=0.2, compile_timeout_s=60)
    with make_runner(spec, measure=measure) as runner:
        m = runner.evaluate({"block_size_x": 64, "SPIN": 400_000_000})
    assert m.ok, m.detail
    assert m.timings["verify_s"] > 0.2  # the first launch really outlasted the watchdog


HANGS = r"""
__kernel void hangs(__global float *out, __global const float *in) {
    const int i = get_global_id(0);
    volatile int spin = 1;
    while (HANG && spin) { }
    out[i] = in[i];
}
"""


def test_a_hanging_kernel_is_a_timeout_and_the_worker_is_replaced(pocl) -> None:
    measure = MeasureOptions(warmup=0, min_iterations=3, max_iterations=3, watchdog_s=1.0, compile_timeout_s=3.0)
    with make_runner(copy_spec(HANGS, "hangs"), measure=measure) as runner:
        hung = runner.evaluate({"HANG": 1, "block_size_x": 64})
        assert hung.failure is FailureKind.TIMEOUT and "while in phase 'jit'" in hung.detail
        assert runner.evaluate({"HANG": 0, "block_size_x": 64}).ok
        assert runner.worker_starts == 2


# A __constant pointer argument: Kernel Tuner's cmem_args has no OpenCL part; the buffer is an ordinary argument.
WEIGH = r"""
__kernel void weigh(__global float *out, __global const float *in, __constant float *w, const int m) {
    const int i = get_global_id(0);
    float s = 0.0f;
    for (int k = 0; k < m; k++) s += w[k];
    out[i] = in[i] * s;
}
"""


def test_a_constant_pointer_argument_is_an_ordinary_buffer(pocl) -> None:
    """``__constant float *w`` takes a numpy array in ``args`` like ``__global`` ones (read-write buffers are
    valid for it); with ``expected`` it is an input, never restored or fetched."""
    n, m = 1024, 300
    a = np.random.default_rng(2).random(n, dtype=np.float32)
    w = np.linspace(0, 1, m, dtype=np.float32)
    spec = KernelSpec(WEIGH, "weigh", n, [np.zeros(n, np.float32), a, w, np.int32(m)],
                      expected=[a * w.sum(dtype=np.float32), None, None, None], rtol=1e-4)
    assert spec.output_indices == (0,)
    with make_runner(spec, measure=FAST) as runner:
        m_ = runner.evaluate({"block_size_x": 64}, keep_outputs=True)
    assert m_.ok, m_.detail
    np.testing.assert_array_equal(m_.extra["outputs"][2], w)
