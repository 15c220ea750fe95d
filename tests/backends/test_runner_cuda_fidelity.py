"""The CUDA runners against stand-ins that behave like CuPy 14 and PyCUDA (tests/fake_cuda.py).

Each test here failed before the fix it names: the
runners' handling of shared memory opt-in, PyCUDA's error texts, missing
NVRTC, Nsight Compute's kernel lookup, PyCUDA's context on a failed set-up,
nvcc's remarks, PyCUDA's argument codes and CuPy's module memo.
"""
from __future__ import annotations

import json
import sys
import warnings

import numpy as np
import pytest

from pytest_autotune.results import FailureKind
from pytest_autotune.errors import BackendUnavailable, SpecError
from pytest_autotune.backends.nvrtc import cupy_options

from test_runner_cuda import FAST, VADD, fake_backend, vadd_spec  # noqa: F401  (fake_backend is a fixture)

KIB = 1024


def test_static_shared_memory_counts_towards_the_dynamic_opt_in(fake_backend):
    """16 KiB static + 40 KiB dynamic exceeds the default 48 KiB: the kernel must opt in (it did not)."""
    name, state, cls = fake_backend
    runner = cls(vadd_spec(shared_mem="smem"), isolate=False, measure=FAST)
    m = runner.evaluate({"block_size_x": 128, "smem": 40 * KIB, "STATIC_SMEM": 16 * KIB, "MODE": 0})
    assert m.ok, m.detail
    assert state.dynamic_smem_opt_in == [40 * KIB]
    assert m.extra["static_shared_mem"] == 16 * KIB
    small = runner.evaluate({"block_size_x": 128, "smem": 8 * KIB, "STATIC_SMEM": 16 * KIB, "MODE": 0})
    assert small.ok and state.dynamic_smem_opt_in == [40 * KIB]  # within the default: no opt-in
    # static + dynamic above the opt-in maximum (227 KiB) is refused before launch, naming the limit
    launches = len(state.launches)
    over = runner.evaluate({"block_size_x": 128, "smem": 215 * KIB, "STATIC_SMEM": 16 * KIB, "MODE": 0})
    assert over.failure is FailureKind.RESOURCES and "max_shared_memory_per_block = 232448" in over.detail
    assert len(state.launches) == launches
    runner.close()


def test_pycuda_launch_rejection_keeps_the_context(fake_backend):
    """PyCUDA says 'cuLaunchKernel failed: invalid argument': a launch failure, not a poisoned context."""
    name, state, cls = fake_backend
    runner = cls(vadd_spec(), isolate=False, measure=FAST)
    executor = runner._impl
    kernel = executor.compile(executor.spec.code.replace("block_size_x", "128").replace("MODE", "0"), "vadd")
    with pytest.raises(Exception) as info:
        executor.run_once(kernel, ((1, 1, 1), (2048, 1, 1), 0))  # past the checks, straight to the driver
    failure = info.value
    assert failure.kind is FailureKind.LAUNCH and not failure.poisoned
    expected = "cuLaunchKernel failed: invalid argument" if name == "pycuda" else "CUDA_ERROR_INVALID_VALUE"
    assert expected in failure.detail
    assert runner.evaluate({"block_size_x": 128, "MODE": 0}).ok  # the context still works
    runner.close()


@pytest.mark.parametrize("fake_backend", ["cupy"], indirect=True)
@pytest.mark.parametrize("missing, message", [
    ("nvrtc_missing", r"cannot load NVRTC.*cupy-cuda13x\[ctk\]"),
    # NVRTC alone (the nvrtc extra, no [ctk]): CuPy refuses every compile for want of the CUDA headers
    ("cuda_headers_missing", r"CuPy cannot compile.*Failed to find CUDA headers.*\[ctk\]"),
])
def test_cupy_without_its_toolkit_is_unavailable_not_a_compile_failure(fake_backend, missing, message):
    name, state, cls = fake_backend
    setattr(state, missing, True)
    with pytest.raises(BackendUnavailable, match=message):
        cls(vadd_spec(), isolate=False, measure=FAST)


def _rendered(runner, params):
    from pytest_autotune.execution.kernel import render_source

    return render_source(runner._impl.spec, params)


@pytest.mark.parametrize("fake_backend", ["cupy"], indirect=True)
def test_what_the_compile_stage_learnt_goes_into_the_measurement(fake_backend, tmp_path):
    """A configuration compiled ahead (NVRTC stage) keeps the stage's spill counts in its record."""
    import fake_cuda
    from pytest_autotune.execution.compile_pool import CompiledArtefact

    name, state, cls = fake_backend
    runner = cls(vadd_spec(), isolate=False, measure=FAST)
    params = {"block_size_x": 64, "MODE": 0}
    cubin = fake_cuda.fake_cubin(tmp_path / "vadd.cubin", _rendered(runner, params))
    artefact = CompiledArtefact(True, path=cubin, symbol="vadd", seconds=0.2,
                                extra={"spill_stores": 24, "spill_loads": 16, "stack_frame": 40, "block": [1, 1, 1]})
    compiled_before = len(state.nvrtc_options)
    m = runner._impl.evaluate(params, artefact=artefact)
    assert m.ok, m.detail
    assert state.cubin_loads == 1 and len(state.nvrtc_options) == compiled_before  # loaded, not recompiled
    assert "fallback" not in m.extra and "load_s" in m.timings
    assert (m.extra["spill_stores"], m.extra["spill_loads"], m.extra["stack_frame"]) == (24, 16, 40)
    assert m.extra["block"] == [64, 1, 1]  # what the device stage computed itself wins
    assert m.timings["compile_s"] == 0.2
    runner.close()


@pytest.mark.parametrize("fake_backend", ["cupy"], indirect=True)
@pytest.mark.parametrize("cubin, error", [("sm_100", "CUDA_ERROR_NO_BINARY_FOR_GPU"),
                                          (None, "CUDA_ERROR_FILE_NOT_FOUND")])
def test_a_cubin_the_driver_refuses_is_compiled_inline_and_marked_as_a_fallback(fake_backend, tmp_path, cubin,
                                                                                error):
    """A cubin the driver refuses is compiled inline and marked as a fallback, with no load time; the CuPy runner
    used to recompile it silently and still record a load time."""
    import fake_cuda
    from pytest_autotune.execution.compile_pool import CompiledArtefact

    name, state, cls = fake_backend
    runner = cls(vadd_spec(), isolate=False, measure=FAST)
    params = {"block_size_x": 64, "MODE": 0}
    path = tmp_path / "vadd.cubin"
    if cubin:
        fake_cuda.fake_cubin(path, _rendered(runner, params), arch=cubin)
    compiled_before = len(state.nvrtc_options)
    m = runner._impl.evaluate(params, artefact=CompiledArtefact(True, path=str(path), symbol="vadd", seconds=0.2))
    assert m.ok, m.detail  # compiled inline: the configuration is still measured
    assert len(state.nvrtc_options) == compiled_before + 1 and state.cubin_loads == 0
    assert error in m.extra["fallback"] and str(path) in m.extra["fallback"]
    assert "load_s" not in m.timings and m.timings["compile_s"] != 0.2  # the inline compile's own time
    runner.close()


def test_the_stand_in_takes_raw_module_arguments_as_cupy_14_does():
    import fake_cuda

    cupy = fake_cuda.make_cupy(fake_cuda.State())["cupy"]
    with pytest.raises(TypeError, match="Exactly one of `code` and `path`"):
        cupy.RawModule(code="x", path="y")
    with pytest.raises(ValueError, match="need CUDA C"):
        cupy.RawModule(path="y.cubin", name_expressions=["k"])


@pytest.mark.parametrize("fake_backend", ["cupy"], indirect=True)
def test_cupy_module_memo_is_cleared_during_long_searches(fake_backend):
    name, state, cls = fake_backend
    runner = cls(vadd_spec(), isolate=False, measure=FAST.with_(min_iterations=1, max_iterations=1, warmup=0))
    for i in range(70):
        assert runner.evaluate({"block_size_x": 32 + i, "MODE": 0}).ok
    assert state.loaded_modules < 64  # CuPy's memo would otherwise keep all 70 loaded
    runner.close()


@pytest.mark.parametrize("fake_backend", ["cupy"], indirect=True)
def test_cupy_runner_and_nvrtc_module_use_the_same_options(fake_backend, monkeypatch):
    """The options NVRTC receives through CuPy (modelled on compile_with_cache) are what nvrtc.cupy_options gives,
    but for CuPy's own folders (its bundled CCCL, its headers) where the NVRTC module uses the installed CCCL."""
    import fake_cuda
    from pytest_autotune.backends import nvrtc

    monkeypatch.setattr(nvrtc, "cuda_header_dirs", lambda: ("/venv/site-packages/nvidia/cuda_cccl/include",
                                                            fake_cuda.CUDA_INCLUDE))
    name, state, cls = fake_backend
    spec = vadd_spec(compiler_options=["-DEXTRA=1", "--use_fast_math"])
    runner = cls(spec, isolate=False, measure=FAST)
    assert runner.evaluate({"block_size_x": 64, "MODE": 0}).ok
    ours = cupy_options(spec, 90)
    assert ours[0] == "-I/venv/site-packages/nvidia/cuda_cccl/include"  # CCCL first, as CuPy puts its copy
    assert [o for o in state.nvrtc_options[-1] if fake_cuda.CUPY_INCLUDE not in o] == list(ours[1:])
    assert f"-I{fake_cuda.CUDA_INCLUDE}" in ours
    runner.close()
    spec17 = vadd_spec(compiler_options=["-std=c++14"])
    assert "--std=c++17" not in cupy_options(spec17, 80) and "-arch=sm_80" in cupy_options(spec17, 80)


def test_compile_errors_name_the_users_file_and_line(fake_backend, tmp_path):
    name, state, cls = fake_backend
    path = tmp_path / "vadd.cu"
    path.write_text(VADD)
    line = VADD.splitlines().index(next(l for l in VADD.splitlines() if "this line does not compile" in l)) + 1
    runner = cls(vadd_spec(str(path)), isolate=False, measure=FAST)
    broken = runner.evaluate({"block_size_x": 64, "MODE": 2})
    assert broken.failure is FailureKind.COMPILE and f"vadd.cu({line}): error" in broken.detail
    runner.close()


@pytest.mark.parametrize("fake_backend", ["pycuda"], indirect=True)
def test_pycuda_pops_its_context_when_set_up_fails(fake_backend):
    name, state, cls = fake_backend
    state.fail_alloc_after = 2  # the third device buffer does not fit
    with pytest.raises(Exception, match="cuMemAlloc failed: out of memory"):
        cls(vadd_spec(), isolate=False, measure=FAST)
    assert sys.modules["pycuda.driver"].Context.stack == []


@pytest.mark.parametrize("fake_backend", ["pycuda"], indirect=True)
def test_pycuda_compiler_remarks_do_not_abort_under_filterwarnings_error(fake_backend):
    name, state, cls = fake_backend
    state.nvcc_remarks = 'kernel.cu(9): warning #177-D: variable "pytest_autotune_instance_" was declared but never ' \
                         "referenced"
    runner = cls(vadd_spec(), isolate=False, measure=FAST)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = runner.evaluate({"block_size_x": 64, "MODE": 0})
    assert m.ok, m.detail
    assert "#177-D" in m.extra["compiler_output"]
    runner.close()


@pytest.mark.parametrize("fake_backend", ["pycuda"], indirect=True)
def test_pycuda_argument_codes_for_half_and_complex(fake_backend):
    name, state, cls = fake_backend
    from pytest_autotune.backends.pycuda_runner import prepared_arguments

    args = [np.zeros(4, np.float32), np.float16(1.5), np.complex64(1 + 2j), np.int64(3), np.bool_(True)]
    codes, values = prepared_arguments(args, [4096] * len(args))
    assert codes == "PHFl?"
    assert values[1] == int(np.float16(1.5).view(np.uint16))  # the half's 16 bits
    with pytest.raises(SpecError, match="argument 0 is a float128|argument 0 is a longdouble"):
        prepared_arguments([np.longdouble(1.0)], [None])


def test_profile_job_finds_kernels_without_extern_c(tmp_path, monkeypatch):
    """The Nsight Compute job script looks the kernel up through a name expression, like the runner."""
    import fake_cuda
    from pytest_autotune.backends.ncu import PROFILE_SCRIPT, write_profile_job

    state = fake_cuda.State()
    for name, module in fake_cuda.make_cupy(state).items():
        monkeypatch.setitem(sys.modules, name, module)
    spec = vadd_spec(VADD.replace('extern "C" ', ""), shared_mem="smem")
    script, job, _ = write_profile_job(tmp_path, spec, {"block_size_x": 128, "smem": 40 * KIB,
                                                        "STATIC_SMEM": 16 * KIB, "MODE": 0})
    monkeypatch.setattr(sys, "argv", ["profile_job.py", str(job)])
    exec(compile(PROFILE_SCRIPT, str(script), "exec"), {"__name__": "__main__"})
    assert state.launches == [((782, 1, 1), (128, 1, 1), 40 * KIB)]
    assert state.dynamic_smem_opt_in == [40 * KIB]  # static + dynamic above 48 KiB
    assert json.loads(job.read_text())["default_shared_mem"] == 48 * KIB


# -- the device record's versions: the installed runtime and NVRTC, not CuPy's build ----------------------


@pytest.mark.parametrize("fake_backend", ["cupy"], indirect=True)
def test_device_record_stores_the_installed_runtime_and_nvrtc_not_cupys_build(fake_backend, monkeypatch):
    from importlib import metadata

    from pytest_autotune.execution import device

    real_version = metadata.version

    def version(name):
        if name == "nvidia-cuda-runtime":
            return "13.0.96"
        return real_version(name)

    monkeypatch.setattr(metadata, "version", version)
    name, state, cls = fake_backend
    info = device.detect_cuda_device_cupy(0)
    assert info.versions["cuda_runtime"] == "13.0.96"  # the wheel installed here
    assert info.versions["cuda_runtime_cupy"] == "12.2"  # what the stand-in's runtimeGetVersion says (CuPy's build)
    assert info.versions["nvrtc"] == "12.9"  # cupy.cuda.nvrtc.getVersion(): what the device stage compiles with


def test_installed_runtime_from_the_headers_of_a_toolkit(tmp_path, monkeypatch):
    from importlib import metadata

    from pytest_autotune.backends import cuda_toolkit

    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    (tmp_path / "cuda_runtime_api.h").write_text("#define CUDART_VERSION  13000\n")
    assert cuda_toolkit.installed_cuda_runtime_version(tmp_path) == "13.0"
    assert cuda_toolkit.installed_cuda_runtime_version(tmp_path / "nowhere") is None
