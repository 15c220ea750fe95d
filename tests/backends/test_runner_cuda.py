"""CUDA runners (cupy, pycuda).

Tests marked ``gpu`` need CuPy or PyCUDA and a CUDA device and skip cleanly
without them. The rest exercises the CUDA-specific logic that needs no GPU:
error triage, device-limit checks, symbol lookup, and the whole evaluate /
isolation flow against a fake device whose kernels "run" in numpy.
"""
from __future__ import annotations

import shutil
import subprocess
import sys

import numpy as np
import pytest

from pytest_autotune.measure.timing import MeasureOptions
from pytest_autotune.results import FailureKind
from pytest_autotune.runners import KernelSpec, make_runner
from pytest_autotune.backends.cuda_common import (
    cuda_failure,
    find_kernel_symbol,
    mangled_prefix_pattern,
    split_top_level,
)
from pytest_autotune.execution.device import DeviceInfo
from pytest_autotune.execution.executor import (
    CompileFailed,
    CompiledKernelExecutor,
    check_kernel_resources,
    check_launch_limits,
)
from pytest_autotune.execution.isolation import HostedRunner

FAST = MeasureOptions(warmup=1, min_iterations=5, max_iterations=5, watchdog_s=20.0)
LIMITS = {
    "max_threads": 1024,
    "max_block_dim_x": 1024, "max_block_dim_y": 1024, "max_block_dim_z": 64,
    "max_grid_dim_x": 2**31 - 1, "max_grid_dim_y": 65535, "max_grid_dim_z": 65535,
    "max_shared_memory_per_block": 48 * 1024,
    "max_shared_memory": 100 * 1024,
    "max_registers_per_block": 65536,
    "warp_size": 32,
    "sm_count": 4,
}

VADD = r"""
extern "C" __global__ void vadd(float *c, const float *a, const float *b, int n) {
    extern __shared__ float scratch[];
    int i = blockIdx.x * block_size_x + threadIdx.x;
#if STATIC_SMEM
    __shared__ volatile char fixed[STATIC_SMEM];  /* static shared memory the launch must account for */
    fixed[threadIdx.x % STATIC_SMEM] = 0;
#endif
#if MODE == 1
    if (i < n) c[i] = a[i] - b[i];                /* wrong output */
#elif MODE == 2
    this line does not compile;
#elif MODE == 3
    float *wild = (float *)0x10;                  /* illegal memory access */
    if (i < n) wild[(size_t)i * 4096] = 1.0f;
#else
    if (i < n) c[i] = a[i] + b[i];
#endif
}
"""

VADD_TEMPLATE = r"""
template <int bs, typename T>
__global__ void vadd_t(T *c, const T *a, const T *b, int n) {
    int i = blockIdx.x * bs + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
"""


def vadd_spec(source=VADD, name="vadd", n=100_000, **kw):
    rng = np.random.default_rng(1)
    a = rng.random(n, dtype=np.float32)
    b = rng.random(n, dtype=np.float32)
    c = np.zeros(n, np.float32)
    return KernelSpec(source, name, n, [c, a, b, np.int32(n)], expected=[a + b, None, None, None], **kw)


# ----------------------------------------------------------------------------
# Logic that needs no GPU
# ----------------------------------------------------------------------------
class CUDADriverError(Exception):
    """Stands in for cupy/pycuda exception types: triage works on the text."""


@pytest.mark.parametrize(
    "message, stage, kind, poisoned",
    [
        ("CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered", "run", FailureKind.RUNTIME, True),
        ("cuCtxSynchronize failed: an illegal memory access was encountered", "run", FailureKind.RUNTIME, True),
        ("cudaErrorMisalignedAddress: misaligned address", "run", FailureKind.RUNTIME, True),
        ("CUDA_ERROR_ASSERT: device-side assert triggered", "run", FailureKind.RUNTIME, True),
        ("CUDA_ERROR_LAUNCH_FAILED: unspecified launch failure", "launch", FailureKind.RUNTIME, True),
        ("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: too many resources requested for launch", "launch",
         FailureKind.LAUNCH, False),
        ("CUDA_ERROR_INVALID_VALUE: invalid argument", "launch", FailureKind.LAUNCH, False),
        # PyCUDA writes cuGetErrorString's text only (pycuda src/cpp/cuda.hpp, error::make_message)
        ("cuLaunchKernel failed: invalid argument", "launch", FailureKind.LAUNCH, False),
        ("cuLaunchKernel failed: too many resources requested for launch", "launch", FailureKind.LAUNCH, False),
        ("cuLaunchKernel failed: too many blocks in cooperative launch", "launch", FailureKind.LAUNCH, False),
        ("cuLaunchKernel failed: unspecified launch failure", "launch", FailureKind.RUNTIME, True),
        ("cuCtxSynchronize failed: the launch timed out and was terminated", "run", FailureKind.RUNTIME, True),
        ("cuCtxSynchronize failed: an illegal instruction was encountered", "run", FailureKind.RUNTIME, True),
        ("cudaErrorIllegalAddress: an illegal memory access was encountered", "run", FailureKind.RUNTIME, True),
        ("something odd", "launch", FailureKind.LAUNCH, True),
        ("something odd", "run", FailureKind.RUNTIME, True),
    ],
)
def test_cuda_error_triage(message, stage, kind, poisoned):
    failure = cuda_failure(CUDADriverError(message), stage)
    assert failure.kind is kind
    assert failure.poisoned is poisoned
    assert message in failure.detail


def test_launch_limits():
    ok = ((10, 1, 1), (256, 1, 1), 1024)
    assert check_launch_limits(ok, LIMITS) is None
    assert "2048 threads per block" in check_launch_limits(((1, 1, 1), (2048, 1, 1), 0), LIMITS)
    assert "block dimension z" in check_launch_limits(((1, 1, 1), (1, 1, 128), 0), LIMITS)
    assert "grid dimension y" in check_launch_limits(((1, 70000, 1), (32, 1, 1), 0), LIMITS)
    assert "shared memory" in check_launch_limits(((1, 1, 1), (32, 1, 1), 48 * 1024 + 1), LIMITS)


def test_kernel_resource_limits():
    def check(**kw):
        args = dict(threads=256, static_smem=0, dynamic_smem=0, registers_per_thread=32,
                    kernel_max_threads=1024, limits=LIMITS)
        args.update(kw)
        return check_kernel_resources(**args)

    assert check() is None
    assert "= 261120 registers exceed max_registers_per_block = 65536" in check(
        registers_per_thread=255, threads=1024, kernel_max_threads=None)
    assert "static + 9216 bytes dynamic shared memory exceed max_shared_memory_per_block" in check(
        static_smem=40 * 1024, dynamic_smem=9 * 1024)
    assert "this kernel's limit" in check(threads=1024, registers_per_thread=32, kernel_max_threads=512)
    limits = {**LIMITS, "max_shared_memory_per_block": 227 * 1024, "max_static_shared_memory_per_block": 48 * 1024}
    assert "exceed max_static_shared_memory_per_block = 49152" in check(static_smem=49 * 1024, limits=limits)
    assert check(static_smem=40 * 1024, dynamic_smem=100 * 1024, limits=limits) is None


def test_resources_failures_are_invalid_configs_in_kernel_tuner_caches():
    from pytest_autotune.datasets import KERNEL_TUNER_FAILURE_TEXT

    assert KERNEL_TUNER_FAILURE_TEXT[FailureKind.RESOURCES] == "InvalidConfig"


def test_mangled_patterns_and_symbol_lookup():
    assert split_top_level("16, foo<1, 2>, float") == ["16", "foo<1, 2>", "float"]
    pattern = mangled_prefix_pattern("matmul<16, -2, true, float>")
    assert pattern.match("_Z6matmulILi16ELin2ELb1EfEvPfS0_")
    assert not pattern.match("_Z6matmulILi16ELi2ELb1EfEvPfS0_")
    image = (
        b"\0.text._Z6matmulILi32ELi8EEvPfS0_S0_\0_Z6matmulILi32ELi8EEvPfS0_S0_"
        b"\0_Z6matmulILi16ELi8EEvPfS0_S0_\0vadd\0_Z4axpyPfS_f\0"
    )
    assert find_kernel_symbol(image, "matmul<16, 8>") == "_Z6matmulILi16ELi8EEvPfS0_S0_"
    assert find_kernel_symbol(image, "matmul<32, 8>") == "_Z6matmulILi32ELi8EEvPfS0_S0_"
    assert find_kernel_symbol(image, "vadd") == "vadd"
    assert find_kernel_symbol(image, "axpy") == "_Z4axpyPfS_f"
    with pytest.raises(LookupError, match="not found"):
        find_kernel_symbol(image, "matmul<64, 8>")


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_symbol_lookup_on_a_real_object_file(tmp_path):
    """nvcc mangles device code like g++ (Itanium ABI), so g++ can check the matcher."""
    src = tmp_path / "k.cpp"
    src.write_text(
        "template <int A, unsigned B, typename T> void kern(T *x, int n) { x[0] = A + B + n; }\n"
        "template void kern<16, 4u, float>(float *, int);\n"
        "template void kern<16, 8u, float>(float *, int);\n"
        "template void kern<-3, 8u, double>(double *, int);\n"
        "void plain(float *x) { x[0] = 1; }\n"
    )
    obj = tmp_path / "k.o"
    subprocess.run(["g++", "-c", str(src), "-o", str(obj)], check=True)
    data = obj.read_bytes()
    assert find_kernel_symbol(data, "kern<16, 8, float>") == "_Z4kernILi16ELj8EfEvPT1_i"
    assert find_kernel_symbol(data, "kern<-3, 8, double>") == "_Z4kernILin3ELj8EdEvPT1_i"
    assert find_kernel_symbol(data, "plain") == "_Z5plainPf"


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_instantiation_reference_compiles_cleanly_and_emits_the_instance(tmp_path):
    """The line the pycuda runner appends to template kernels: valid C++ (with its unused attribute), no
    warning under -Wall -Werror, and the instance it names is emitted (nvcc's front end is EDG, g++'s syntax)."""
    from pytest_autotune.backends.cuda_common import instantiation_reference

    src = tmp_path / "t.cpp"
    src.write_text("template <int A, typename T> void kern(T *x) { x[0] = A; }\n"
                   + instantiation_reference("kern<16, float>"))
    obj = tmp_path / "t.o"
    done = subprocess.run(["g++", "-Wall", "-Wextra", "-Werror", "-c", str(src), "-o", str(obj)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert find_kernel_symbol(obj.read_bytes(), "kern<16, float>") == "_Z4kernILi16EfEvPT0_"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (the CUDA toolkit or the nvidia-cuda-nvcc wheel)")
def test_instantiation_reference_under_nvcc_as_pycuda_compiles(tmp_path):
    """PyCUDA's compile (``nvcc --cubin -arch sm_XX``) of a template kernel plus the runner's line: nvcc prints
    nothing (PyCUDA would warn with it), the same line without ``unused`` draws #177-D, and the symbol
    search finds the instance in nvcc's cubin."""
    from pytest_autotune.backends.cuda_common import instantiation_reference

    line = instantiation_reference("scale<128, float>")
    outputs = {}
    for label, tail in (("ours", line), ("plain", line.replace(" __attribute__((unused))", ""))):
        src = tmp_path / f"{label}.cu"
        src.write_text(VADD_TEMPLATE.replace("vadd_t", "scale") + tail)
        done = subprocess.run(["nvcc", "--cubin", "-arch", "sm_80", str(src), "-o", str(tmp_path / f"{label}.cubin")],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        outputs[label] = done.stdout + done.stderr
    assert outputs["ours"].strip() == ""
    assert "#177" in outputs["plain"]
    assert find_kernel_symbol((tmp_path / "ours.cubin").read_bytes(), "scale<128, float>") == \
        "_Z5scaleILi128EfEvPT0_PKS0_S3_i"


class FakeGpuExecutor(CompiledKernelExecutor):
    """A 'device' whose kernels run in numpy: exercises the CUDA flow without a GPU.

    MODE in the rendered source picks the behaviour: 1 wrong output, 2 compile
    error, 3 sticky illegal-address error, 4 a kernel needing 255 registers.
    """

    name = "fake-gpu"

    def __init__(self, spec, measure=None):
        super().__init__(spec, measure)
        self.compiled = []
        self.buffers = [np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in spec.args]
        self.pristine = {i: self.buffers[i].copy() for i in spec.output_indices}

    def device(self):
        return DeviceInfo("Fake GPU", "cuda", properties=dict(LIMITS))

    def constants(self):
        return dict(LIMITS)

    def compile(self, source, name):
        mode = int(source.split("#define MODE ")[1].split("\n")[0]) if "#define MODE" in source else 0
        self.compiled.append(name)
        if mode == 2:
            raise CompileFailed("kernel.cu(3): error: this declaration has no storage class")
        return {"mode": mode, "regs": 255 if mode == 4 else 16}

    def check_compiled(self, kernel, geometry):
        _, block, smem = geometry
        return check_kernel_resources(block[0] * block[1] * block[2], 0, smem, kernel["regs"], None, LIMITS)

    def restore_outputs(self):
        for i, value in self.pristine.items():
            np.copyto(self.buffers[i], value)

    def run_once(self, kernel, geometry):
        if kernel["mode"] == 3:
            raise cuda_failure(CUDADriverError("CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access"), "run")
        c, a, b, _ = self.buffers
        c[:] = a - b if kernel["mode"] == 1 else a + b

    def timed_run(self, kernel, geometry):
        self.run_once(kernel, geometry)
        return 0.5

    def fetch_outputs(self):
        return list(self.buffers)


class FakeGpuRunner(HostedRunner):
    name = "fake-gpu"
    executor_target = f"{__name__}:FakeGpuExecutor"

    def __init__(self, spec, isolate=False, measure=None):
        super().__init__(isolate=isolate, measure=measure, spec=spec)


def test_invalid_configurations_are_rejected_before_compiling():
    runner = FakeGpuRunner(vadd_spec(), measure=FAST)
    executor = runner._impl
    too_many = runner.evaluate({"block_size_x": 2048, "MODE": 0})
    assert too_many.failure is FailureKind.INVALID and "2048 threads per block" in too_many.detail
    assert "compile_s" not in too_many.timings and executor.compiled == []
    spec = vadd_spec(shared_mem="smem")
    runner = FakeGpuRunner(spec, measure=FAST)
    over = runner.evaluate({"block_size_x": 128, "smem": 64 * 1024, "MODE": 0})
    assert over.failure is FailureKind.INVALID and "shared memory" in over.detail
    assert runner._impl.compiled == []
    regs = runner.evaluate({"block_size_x": 1024, "smem": 0, "MODE": 4})
    assert regs.failure is FailureKind.RESOURCES and "max_registers_per_block" in regs.detail
    assert runner._impl.compiled == ["vadd"]  # register use is only known after compiling
    good = runner.evaluate({"block_size_x": 256, "smem": 1024, "MODE": 0})
    assert good.ok and good.extra["grid"] == [391, 1, 1] and good.extra["block"] == [256, 1, 1]
    assert good.samples == [0.5] * 5


def test_fake_gpu_faults_and_poisoned_context_in_process():
    runner = FakeGpuRunner(vadd_spec(), measure=FAST)
    assert runner.evaluate({"block_size_x": 128, "MODE": 1}).failure is FailureKind.WRONG_OUTPUT
    compile_error = runner.evaluate({"block_size_x": 128, "MODE": 2})
    assert compile_error.failure is FailureKind.COMPILE and "error" in compile_error.detail
    crash = runner.evaluate({"block_size_x": 128, "MODE": 3})
    assert crash.failure is FailureKind.RUNTIME and "ILLEGAL_ADDRESS" in crash.detail
    after = runner.evaluate({"block_size_x": 128, "MODE": 0})  # in-process: the context stays poisoned
    assert after.failure is FailureKind.RUNTIME and "isolate=True" in after.detail


def test_isolated_worker_is_replaced_after_a_sticky_error():
    with FakeGpuRunner(vadd_spec(), isolate=True, measure=FAST) as runner:
        assert runner.evaluate({"block_size_x": 128, "MODE": 0}).ok
        crash = runner.evaluate({"block_size_x": 128, "MODE": 3})
        assert crash.failure is FailureKind.RUNTIME
        after = runner.evaluate({"block_size_x": 128, "MODE": 0})
        assert after.ok, after.detail  # a fresh worker, a fresh context
        assert runner.worker_starts == 2
        assert "worker_start_s" in after.timings


@pytest.fixture(params=["cupy", "pycuda"])
def fake_backend(request, monkeypatch):
    """The real runner classes on top of fake cupy/pycuda modules (tests/fake_cuda.py)."""
    import fake_cuda

    state = fake_cuda.State()
    modules = fake_cuda.make_cupy(state) if request.param == "cupy" else fake_cuda.make_pycuda(state)
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    real_which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda cmd, *a, **k: "/fake/nvcc" if cmd == "nvcc" else real_which(cmd, *a, **k))
    if request.param == "cupy":
        from pytest_autotune.backends.cupy_runner import CupyRunner as cls
    else:
        from pytest_autotune.backends.pycuda_runner import PycudaRunner as cls
    return request.param, state, cls


@pytest.mark.parametrize("extern_c", [True, False])
def test_cuda_runner_glue_on_a_fake_device(fake_backend, extern_c):
    name, state, cls = fake_backend
    source = VADD if extern_c else VADD.replace('extern "C" ', "")
    runner = cls(vadd_spec(source, shared_mem="smem"), isolate=False, measure=FAST)
    info = runner.device()
    assert info.slug == "nvidia-fake-h100-80gb-hbm3" and info.kind == "cuda"
    assert info.versions["driver"] == "12.4" and name in info.versions
    limits = runner.constants()
    assert limits["max_shared_memory_per_block"] == 227 * 1024 and limits["sm_count"] == 132
    assert limits["max_threads"] == 1024 and limits["max_registers_per_block"] == 65536

    ok = runner.evaluate({"block_size_x": 256, "smem": 0, "MODE": 0}, keep_outputs=True)
    assert ok.ok, ok.detail
    assert ok.samples == [0.25] * 5 and ok.extra["registers"] == 20
    np.testing.assert_array_equal(ok.extra["outputs"][0], runner.spec.expected[0])
    assert state.launches[-1] == ((391, 1, 1), (256, 1, 1), 0)
    assert len(state.launches) == 1 + 1 + 5  # verification, warm-up, timed

    big = runner.evaluate({"block_size_x": 128, "smem": 100 * 1024, "MODE": 0})
    assert big.ok, big.detail
    assert state.dynamic_smem_opt_in == [100 * 1024]  # opted in above the 48 KiB default

    launches = len(state.launches)
    over = runner.evaluate({"block_size_x": 128, "smem": 228 * 1024, "MODE": 0})
    assert over.failure is FailureKind.INVALID and "shared memory" in over.detail
    threads = runner.evaluate({"block_size_x": 2048, "smem": 0, "MODE": 0})
    assert threads.failure is FailureKind.INVALID and "compile_s" not in threads.timings
    regs = runner.evaluate({"block_size_x": 1024, "smem": 0, "MODE": 4})
    assert regs.failure is FailureKind.RESOURCES and "max_registers_per_block" in regs.detail
    assert len(state.launches) == launches  # nothing launched for invalid configurations

    broken = runner.evaluate({"block_size_x": 128, "smem": 0, "MODE": 2})
    assert broken.failure is FailureKind.COMPILE and "error" in broken.detail
    wrong = runner.evaluate({"block_size_x": 128, "smem": 0, "MODE": 1})
    assert wrong.failure is FailureKind.WRONG_OUTPUT
    crash = runner.evaluate({"block_size_x": 128, "smem": 0, "MODE": 3})
    assert crash.failure is FailureKind.RUNTIME and "illegal memory access" in crash.detail
    after = runner.evaluate({"block_size_x": 128, "smem": 0, "MODE": 0})
    assert after.failure is FailureKind.RUNTIME and "isolate=True" in after.detail  # in-process: poisoned
    runner.close()


# ----------------------------------------------------------------------------
# Real GPUs
# ----------------------------------------------------------------------------
def _require(backend: str) -> None:
    if backend == "cupy":
        cupy = pytest.importorskip("cupy")
        try:
            count = cupy.cuda.runtime.getDeviceCount()
        except Exception:
            count = 0
    else:
        drv = pytest.importorskip("pycuda.driver")
        if shutil.which("nvcc") is None:
            pytest.skip("pycuda runner needs nvcc")
        try:
            drv.init()
            count = drv.Device.count()
        except Exception:
            count = 0
    if count < 1:
        pytest.skip("no CUDA device")


@pytest.fixture(params=["cupy", "pycuda"])
def backend(request):
    _require(request.param)
    return request.param


@pytest.mark.gpu
def test_gpu_correct_run_and_device_identity(backend):
    with make_runner(vadd_spec(), runner=backend, measure=FAST) as runner:
        info = runner.device()
        assert info.kind == "cuda" and info.slug.startswith("nvidia")
        assert {"driver", "cuda_runtime"} <= set(info.versions)
        constants = runner.constants()
        for key in ("max_threads", "max_shared_memory_per_block", "max_shared_memory",
                    "max_registers_per_block", "warp_size", "sm_count"):
            assert constants[key] > 0
        for bs in (64, 256):
            m = runner.evaluate({"block_size_x": bs, "MODE": 0}, keep_outputs=True)
            assert m.ok, m.detail
            assert len(m.samples) == 5 and m.value > 0
            assert m.extra["registers"] > 0 and m.extra["block"] == [bs, 1, 1]
            np.testing.assert_array_equal(m.extra["outputs"][0], runner.spec.expected[0])


@pytest.mark.gpu
def test_gpu_template_kernel(backend):
    spec = vadd_spec(VADD_TEMPLATE, "vadd_t<block_size_x, float>")
    with make_runner(spec, runner=backend, measure=FAST.with_(flush_l2=True)) as runner:
        for bs in (128, 512):
            m = runner.evaluate({"block_size_x": bs})
            assert m.ok, m.detail
            assert m.extra["kernel_name"] == f"vadd_t<{bs}, float>"


@pytest.mark.gpu
def test_gpu_compile_error_and_wrong_output(backend):
    with make_runner(vadd_spec(), runner=backend, measure=FAST) as runner:
        broken = runner.evaluate({"block_size_x": 128, "MODE": 2})
        assert broken.failure is FailureKind.COMPILE and "error" in broken.detail.lower()
        wrong = runner.evaluate({"block_size_x": 128, "MODE": 1})
        assert wrong.failure is FailureKind.WRONG_OUTPUT and "largest error" in wrong.detail
        assert runner.evaluate({"block_size_x": 128, "MODE": 0}).ok


@pytest.mark.gpu
def test_gpu_limits_are_invalid_before_launch(backend):
    spec = vadd_spec(shared_mem="smem")
    with make_runner(spec, runner=backend, measure=FAST) as runner:
        limit = runner.constants()["max_shared_memory_per_block"]
        too_many = runner.evaluate({"block_size_x": 4096, "smem": 0, "MODE": 0})
        assert too_many.failure is FailureKind.INVALID and "threads per block" in too_many.detail
        assert "compile_s" not in too_many.timings
        too_much = runner.evaluate({"block_size_x": 128, "smem": limit + 1024, "MODE": 0})
        assert too_much.failure is FailureKind.INVALID and "shared memory" in too_much.detail
        big_but_fine = runner.evaluate({"block_size_x": 128, "smem": min(limit, 64 * 1024), "MODE": 0})
        assert big_but_fine.ok, big_but_fine.detail  # above the 48 KiB default: needs the opt-in


@pytest.mark.gpu
def test_gpu_static_plus_dynamic_shared_memory_opt_in(backend):
    """16 KiB static + 40 KiB dynamic: above the 48 KiB default only together, so the runner must opt in."""
    spec = vadd_spec(shared_mem="smem")
    with make_runner(spec, runner=backend, measure=FAST) as runner:
        m = runner.evaluate({"block_size_x": 128, "smem": 40 * 1024, "STATIC_SMEM": 16 * 1024, "MODE": 0})
        assert m.ok, m.detail
        assert m.extra["static_shared_mem"] >= 16 * 1024


@pytest.mark.gpu
def test_gpu_illegal_memory_access_leaves_next_configuration_working(backend):
    with make_runner(vadd_spec(), runner=backend, measure=FAST) as runner:
        crash = runner.evaluate({"block_size_x": 128, "MODE": 3})
        assert crash.failure is FailureKind.RUNTIME
        assert "illegal" in crash.detail.lower()
        after = runner.evaluate({"block_size_x": 128, "MODE": 0})
        assert after.ok, after.detail
        assert runner.worker_starts == 2
