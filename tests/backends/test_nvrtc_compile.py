"""Real NVRTC compiles without a GPU (cuda-bindings + nvidia-cuda-nvrtc, CUDA 13, installed by the test extra;
NVRTC 12 from nvidia-cuda-nvrtc-cu12 passes them too: the architectures follow the installed NVRTC).

These run in CI on Linux x86-64, where the wheels exist: there a missing
NVRTC fails the tests instead of skipping them. Elsewhere they skip.
"""
from __future__ import annotations

import platform
import sys
from pathlib import Path

import numpy as np
import pytest

from pytest_autotune.lifecycle.compile_check import (check_configuration, check_kernel, configurations_to_check,
                                           locked_winners, parse_arch_list)
from pytest_autotune.backends.cuda_arch import ARCH_LIMITS, arch_limits, parse_arch
from pytest_autotune.backends.cuda_common import find_kernel_symbol, mangled_prefix_pattern
from pytest_autotune.execution.kernel import KernelSpec
from pytest_autotune.backends import nvrtc
from pytest_autotune.backends.nvrtc import (arch_remedy, compile_configuration, find_header_dir,
                                           nvrtc_unavailable_reason, parse_ptxas_log)
from pytest_autotune.space import SearchSpace

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "example_project"
WHEELS_EXIST = sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64")
NVRTC_MISSING = nvrtc_unavailable_reason()
needs_nvrtc = pytest.mark.skipif(bool(NVRTC_MISSING) and not WHEELS_EXIST,
                                 reason=f"no cuda-bindings/NVRTC wheels for this platform: {NVRTC_MISSING}")
# Where the wheels exist, a missing NVRTC is a broken install: the tests run and fail saying so.
# The table's architectures the installed NVRTC can target (NVRTC 13 dropped sm_70/72, NVRTC 12 lacks sm_110):
TARGETABLE = sorted(set(ARCH_LIMITS) & set(nvrtc.supported_archs())) if not NVRTC_MISSING else sorted(ARCH_LIMITS)

BROKEN = """extern "C" __global__ void broken(float *x) {
    int i = threadIdx.x;
    x[i] = undefined_name;
}
"""

TEMPLATE = """template <int BS, typename T>
__global__ void scale(T *x, T a, int n) {
    int i = blockIdx.x * BS + threadIdx.x;
    if (i < n) x[i] *= a;
}
"""


def small_spec(source, name, **kw) -> KernelSpec:
    return KernelSpec(source, name, 64, [np.zeros(64, np.float32), np.float32(2), np.int32(64)], **kw)


def example_spec(kernel_name: str) -> KernelSpec:
    sys.path.insert(0, str(EXAMPLE / "src"))
    try:
        from example_kernels.cuda import CUDA_KERNELS, compile_spec_arguments
    finally:
        sys.path.remove(str(EXAMPLE / "src"))
    kernel = CUDA_KERNELS[kernel_name]
    return KernelSpec(**compile_spec_arguments(kernel)), kernel


# -- no NVRTC needed ----------------------------------------------------------------------------------


def test_arch_names_and_table():
    assert parse_arch("sm_90") == parse_arch("90") == parse_arch("9.0") == parse_arch(90) == 90
    assert parse_arch("compute_100") == 100 and parse_arch("sm_90a") == 90
    with pytest.raises(ValueError, match="not a CUDA architecture"):
        parse_arch("hopper")
    with pytest.raises(ValueError, match="no device limits for sm_35; known architectures: sm_70"):
        arch_limits("sm_35")
    assert {70, 75, 80, 86, 89, 90, 100, 103, 110, 120, 121} <= set(ARCH_LIMITS)
    for cc in ARCH_LIMITS:
        limits = arch_limits(cc)
        assert limits["max_static_shared_memory_per_block"] == 48 * 1024 <= limits["max_shared_memory_per_block"]
        assert limits["max_shared_memory_per_block"] <= limits["max_shared_memory"]
        assert limits["max_registers_per_block"] == 65536 and limits["max_threads"] == 1024
    assert arch_limits("sm_90")["max_shared_memory_per_block"] == 227 * 1024
    assert arch_limits("sm_80")["max_shared_memory_per_block"] == 163 * 1024
    assert arch_limits("sm_120")["max_shared_memory_per_block"] == 99 * 1024  # consumer Blackwell: as sm_86/89
    assert arch_limits("sm_103")["max_shared_memory"] == arch_limits("sm_110")["max_shared_memory"] == 228 * 1024
    with pytest.raises(ValueError, match="no device limits for sm_88"):  # NVRTC 13 targets it; no sourced numbers
        arch_limits("sm_88")


def test_remedy_names_an_older_nvrtc_for_a_dropped_arch_and_a_newer_one_for_an_unknown_arch():
    nvrtc13 = (75, 80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121)
    dropped = arch_remedy([70], nvrtc13)
    assert "sm_70 needs an older NVRTC" in dropped and "nvrtc12" in dropped and "newer" not in dropped
    unknown = arch_remedy([130], nvrtc13)
    assert "sm_130 needs a newer NVRTC" in unknown and "nvidia-cuda-nvrtc" in unknown and "older" not in unknown
    nvrtc12 = (50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90, 100, 101, 103, 120, 121)
    assert "sm_110 needs a newer NVRTC" in arch_remedy([110], nvrtc12)
    both = arch_remedy([72, 130], nvrtc13)
    assert "sm_72 needs an older" in both and "sm_130 needs a newer" in both


def test_header_folders_of_both_wheel_layouts_and_a_toolkit(tmp_path):
    """CUDA 13's wheels share nvidia/cu13/include (CCCL in cccl/); CUDA 12's have one folder per wheel."""
    def touch(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")

    cu13, cu12, toolkit, nvrtc_only = (tmp_path / d for d in ("cu13", "cu12", "toolkit", "nvrtc_only"))
    touch(cu13 / "nvidia/cu13/include/cuda_runtime.h")
    touch(cu13 / "nvidia/cu13/include/cccl/cuda/std/type_traits")
    touch(cu12 / "nvidia/cuda_runtime/include/cuda_runtime.h")
    touch(cu12 / "nvidia/cuda_cccl/include/cuda/std/type_traits")
    touch(toolkit / "include/cuda_runtime.h")
    touch(toolkit / "include/cccl/cuda/std/type_traits")
    touch(nvrtc_only / "nvidia/cu13/include/nvrtc.h")  # the nvidia-cuda-nvrtc 13 wheel alone: no runtime headers
    assert find_header_dir("cudart", [cu13]) == str(cu13 / "nvidia/cu13/include")
    assert find_header_dir("cccl", [cu13]) == str(cu13 / "nvidia/cu13/include/cccl")
    assert find_header_dir("cudart", [cu12]) == str(cu12 / "nvidia/cuda_runtime/include")
    assert find_header_dir("cccl", [cu12]) == str(cu12 / "nvidia/cuda_cccl/include")
    assert find_header_dir("cudart", [nvrtc_only]) is None
    assert find_header_dir("cccl", [nvrtc_only], [toolkit]) == str(toolkit / "include/cccl")
    assert find_header_dir("cudart", [nvrtc_only], [toolkit]) == str(toolkit / "include")


def test_arch_list_option_values():
    import argparse

    assert parse_arch_list("sm_80, sm_90,sm_80") == [80, 90]
    with pytest.raises(argparse.ArgumentTypeError, match="no device limits for 'sm_35'"):
        parse_arch_list("sm_80,sm_35")
    assert parse_arch_list("sm_100,sm_120") == [100, 120]
    with pytest.raises(argparse.ArgumentTypeError, match="not a CUDA architecture"):
        parse_arch_list("ampere")


def test_ptxas_log_layouts():
    new = ("ptxas info    : 0 bytes gmem\n"
           "ptxas info    : Compiling entry function '_Z1kILi4EEvPf' for 'sm_90'\n"
           "ptxas info    : Function properties for _Z1kILi4EEvPf\n"
           "ptxas         .     16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
           "ptxas info    : Used 255 registers, used 1 barriers, 16384 bytes smem\n")
    old = ("ptxas info    : Compiling entry function 'vadd' for 'sm_70'\n"
           "ptxas info    : Function properties for vadd\n"
           "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
           "ptxas info    : Used 12 registers, 380 bytes cmem[0]\n")
    k = parse_ptxas_log(new)["_Z1kILi4EEvPf"]
    assert (k.registers, k.shared_mem, k.stack_frame, k.spill_stores, k.spill_loads, k.barriers) == \
        (255, 16384, 16, 8, 12, 1)
    v = parse_ptxas_log(old)["vadd"]
    assert (v.registers, v.shared_mem, v.spill_stores) == (12, 0, 0)


def test_sample_of_a_space_is_all_or_seeded():
    space = SearchSpace({"a": list(range(10)), "b": list(range(10))}, ["a <= b"])
    assert len(configurations_to_check(space, 64)) == len(space) == 55
    first = configurations_to_check(space, 20, seed=3)
    assert len(first) == 20 and first == configurations_to_check(space, 20, seed=3)
    assert first != configurations_to_check(space, 20, seed=4)
    assert all(c["a"] <= c["b"] for c in first)


def test_locked_winners_by_architecture(tmp_path):
    from pytest_autotune.lock.lockfile import merge_entries
    from pytest_autotune.execution.device import DeviceInfo

    for model, cc, bs in (("NVIDIA H100", 90, 256), ("NVIDIA A100", [8, 0], 128), ("NVIDIA L4", "8.9", 64)):
        device = DeviceInfo(model, "cuda", properties={"compute_capability": cc})
        entry = {"kernel": "k", "test": "t.py::test", "params": {"block_size_x": bs},
                 "stats": {"median": 1.0, "mean": 1.0, "min": 1.0, "iqr": 0.0, "n": 1}, "samples": [1.0],
                 "hashes": {"source": "a" * 16, "space": "b" * 16, "problem": "c" * 16}}
        merge_entries(tmp_path / f"{device.slug}.json", {"t.py::test::k": entry}, device)
    assert locked_winners(tmp_path, "t.py::test", "k", [80, 90]) == {80: [{"block_size_x": 128}],
                                                                     90: [{"block_size_x": 256}]}
    assert locked_winners(tmp_path / "missing", "t.py::test", "k", [90]) == {}


# -- real NVRTC ---------------------------------------------------------------------------------------


@needs_nvrtc
def test_compile_error_names_the_file_and_line(tmp_path):
    path = tmp_path / "broken.cu"
    path.write_text(BROKEN)
    spec = KernelSpec(str(path), "broken", 32, [np.zeros(32, np.float32)])
    check = check_configuration(spec, {"block_size_x": 32}, "sm_90")
    assert check.status == "compile"
    assert 'broken.cu(3): error: identifier "undefined_name" is undefined' in check.detail
    assert "NVRTC_ERROR_COMPILATION" in check.detail


@needs_nvrtc
def test_template_names_resolve_to_what_both_runners_launch():
    """NVRTC's lowered name is what CuPy launches; PyCUDA's symbol search must find the same one in the cubin."""
    spec = small_spec(TEMPLATE, "scale<block_size_x, float>")
    result = compile_configuration(spec, {"block_size_x": 128}, "sm_80", keep_cubin=True)
    assert result.ok, result.log
    assert result.name_expression == "scale<128, float>"
    assert result.lowered_name == "_Z5scaleILi128EfEvPT0_S0_i"
    assert mangled_prefix_pattern("scale<128, float>").match(result.lowered_name)
    assert find_kernel_symbol(result.cubin, "scale<128, float>") == result.lowered_name
    assert result.resources is not None and result.resources.registers > 0


@needs_nvrtc
@pytest.mark.parametrize("arch", TARGETABLE)
def test_static_shared_memory_limit_of_the_table_is_what_ptxas_enforces(arch):
    source = ('extern "C" __global__ void k(float *x) { __shared__ float s[NWORDS]; s[threadIdx.x] = x[0];'
              ' __syncthreads(); x[threadIdx.x] = s[NWORDS - 1 - threadIdx.x]; }\n')
    spec = KernelSpec(source, "k", 32, [np.zeros(32, np.float32)], lang="cuda")
    limit = arch_limits(arch)["max_static_shared_memory_per_block"]
    fits = check_configuration(spec, {"block_size_x": 32, "NWORDS": limit // 4}, arch)
    assert fits.ok and fits.resources["static_shared_mem"] == limit
    over = check_configuration(spec, {"block_size_x": 32, "NWORDS": limit // 4 + 1}, arch)
    assert over.status == "resources"
    assert f"{limit + 4} bytes of static shared memory exceed max_static_shared_memory_per_block = {limit}" \
        in over.detail


@needs_nvrtc
def test_register_limit_is_checked_before_launch_with_real_ptxas_output():
    """The matmul without __launch_bounds__: 32x32 threads with 8x4 tiles need more registers than a block has."""
    spec, kernel = example_spec("matmul")
    code = spec.code.replace("__launch_bounds__(block_size_x * block_size_y, 1)", "")
    assert code != spec.code
    unbounded = KernelSpec(code, "matmul", spec.problem_size, spec.args, grid_div_x=kernel.grid_div_x,
                           grid_div_y=kernel.grid_div_y, lang="cuda")
    params = {"block_size_x": 32, "block_size_y": 32, "tile_size_x": 8, "tile_size_y": 4, "TILE_K": 8, "UNROLL": 1}
    check = check_configuration(unbounded, params, "sm_80")
    assert check.status == "resources"
    regs = check.resources["registers"]
    assert regs * 1024 > 65536
    assert f"{regs} registers/thread x 1024 threads = {regs * 1024} registers exceed max_registers_per_block = " \
           "65536" in check.detail
    bounded = check_configuration(spec, params, "sm_80")  # the example's kernel, with __launch_bounds__
    assert bounded.ok and bounded.resources["registers"] * 1024 <= 65536


SPILLING = """extern "C" __global__ void __launch_bounds__(1024) heavy(float *x) {
    float acc[NACC];
    #pragma unroll
    for (int i = 0; i < NACC; i++) acc[i] = x[i * blockDim.x + threadIdx.x];
    #pragma unroll
    for (int r = 0; r < 8; r++)
        #pragma unroll
        for (int i = 0; i < NACC; i++) acc[i] = acc[i] * acc[(i + r) % NACC] + 1.0f;
    float s = 0;
    #pragma unroll
    for (int i = 0; i < NACC; i++) s += acc[i];
    x[threadIdx.x] = s;
}
"""


@needs_nvrtc
def test_spills_are_recorded(tmp_path):
    spec = KernelSpec(SPILLING, "heavy", 1024, [np.zeros(1024, np.float32)], lang="cuda")
    check = check_configuration(spec, {"block_size_x": 1024, "NACC": 128}, "sm_90")
    assert check.ok, check.detail
    assert check.spills and check.resources["spill_stores"] > 0 and check.resources["registers"] <= 64


@needs_nvrtc
def test_spills_reach_the_measurement_of_a_tuning_run(tmp_path):
    """The cupy runner's NVRTC stage hands ptxas's spill counts to the device stage's measurement."""
    from pytest_autotune.execution.compile_pool import CompilerProcesses
    from pytest_autotune.backends.nvrtc import NvrtcCompileStage

    spec = KernelSpec(SPILLING, "heavy", 1024, [np.zeros(1024, np.float32)], lang="cuda")
    stage = NvrtcCompileStage(spec, 90, arch_limits(90), cache_dir=tmp_path)
    spilling = stage.compile({"block_size_x": 1024, "NACC": 128}, CompilerProcesses())
    assert spilling.ok, spilling.detail
    assert spilling.extra["spill_stores"] > 0 and spilling.extra["spill_loads"] > 0
    cached = stage.compile({"block_size_x": 1024, "NACC": 128}, CompilerProcesses())  # from the disk cache
    assert cached.extra["spill_stores"] == spilling.extra["spill_stores"]
    light = stage.compile({"block_size_x": 1024, "NACC": 4}, CompilerProcesses())
    assert light.ok and light.extra["spill_stores"] == light.extra["spill_loads"] == 0


@needs_nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("kernel_name", ["vector_add", "matmul", "convolution", "reduction"])
def test_example_kernels_allowed_configurations_compile(kernel_name, arch):
    """A seeded sample of 10 of each example kernel's valid configurations compiles and fits the architecture."""
    spec, kernel = example_spec(kernel_name)
    report = check_kernel(spec, kernel.params, kernel.restrictions, [arch], sample=10, seed=16, name=kernel_name)
    assert len(report.checks) == 10
    assert not report.failures(), report.failure_message()
    assert all(c.resources and c.lowered_name == kernel.kernel_name for c in report.checks)


@needs_nvrtc
def test_nvcc_only_options_are_compile_failures_with_nvrtc():
    """The CuPy runner compiles with NVRTC: an nvcc-only option fails every configuration, saying which."""
    spec = small_spec(TEMPLATE, "scale<block_size_x, float>", compiler_options=["-O3"])
    check = check_configuration(spec, {"block_size_x": 64}, "sm_90")
    assert check.status == "compile" and "unrecognized option -O3" in check.detail


@needs_nvrtc
def test_pycuda_instantiation_line_raises_no_unused_variable_remark_in_nvidias_front_end():
    """The line the pycuda runner appends to template kernels, through NVIDIA's EDG front end (NVRTC's, as nvcc's).

    Without ``__attribute__((unused))`` EDG remarks #177-D ("declared but never
    referenced"), which PyCUDA turns into a UserWarning (an error under
    ``filterwarnings=error``); with it, no remark. NVRTC then refuses the line
    because it compiles everything as device code ("dynamic initialization is
    not supported for a __device__ variable"); nvcc compiles it as host code.
    """
    from pytest_autotune.backends.cuda_common import instantiation_reference
    from pytest_autotune.backends.nvrtc import compile_source

    line = instantiation_reference("scale<128, float>")
    plain = line.replace(" __attribute__((unused))", "")
    assert plain != line
    ours = compile_source(TEMPLATE + line, "scale<128, float>", (), arch="sm_80")
    without = compile_source(TEMPLATE + plain, "scale<128, float>", (), arch="sm_80")
    assert "#177" in without.log and "pytest_autotune_instance_" in without.log
    assert "#177" not in ours.log and "warning" not in ours.log, ours.log


@needs_nvrtc
def test_kernels_that_include_cuda_headers_compile_as_under_cupy():
    """CuPy compiles with the CUDA runtime headers and CCCL on the include path; so must the NVRTC compiles
    (--autotune-compile and the cupy runner's compile stage), or a half-precision kernel fails every configuration."""
    source = """#include <cuda_fp16.h>
#include <cuda/std/cstdint>
extern "C" __global__ void halve(__half *x, int n) {
    cuda::std::int32_t i = blockIdx.x * block_size_x + threadIdx.x;
    if (i < n) x[i] = __hmul(x[i], __float2half(0.5f));
}
"""
    spec = KernelSpec(source, "halve", 64, [np.zeros(64, np.float16), np.int32(64)], lang="cuda")
    check = check_configuration(spec, {"block_size_x": 64}, "sm_80")
    assert check.ok, check.detail


def _nvcc_or_skip() -> None:
    from pytest_autotune.static.build import find_nvcc

    try:
        find_nvcc()
    except Exception as exc:  # noqa: BLE001 - BackendUnavailable
        if WHEELS_EXIST:  # the test extra installs the nvidia-cuda-nvcc wheel there: a broken install
            raise
        pytest.skip(f"no nvcc here: {exc}")


def test_a_pycuda_kernel_is_checked_with_nvcc_its_errors_and_limits_named_as_for_nvrtc():
    """runner="pycuda": the same statuses as NVRTC's check, from nvcc's build (PyCUDA's command line)."""
    _nvcc_or_skip()
    broken = check_configuration(small_spec(BROKEN, "broken", lang="cuda"), {"block_size_x": 32}, "sm_90",
                                 runner="pycuda")
    assert broken.status == "compile" and 'identifier "undefined_name" is undefined' in broken.detail
    assert broken.seconds > 0
    source = ('extern "C" __global__ void k(float *x) { __shared__ float s[NWORDS]; s[threadIdx.x] = x[0];'
              ' __syncthreads(); x[threadIdx.x] = s[NWORDS - 1 - threadIdx.x]; }\n')
    spec = KernelSpec(source, "k", 32, [np.zeros(32, np.float32)], lang="cuda")
    limit = arch_limits(90)["max_static_shared_memory_per_block"]
    fits = check_configuration(spec, {"block_size_x": 32, "NWORDS": limit // 4}, "sm_90", runner="pycuda")
    assert fits.ok and fits.compiler.startswith("nvcc ") and fits.resources["static_shared_mem"] == limit
    over = check_configuration(spec, {"block_size_x": 32, "NWORDS": limit // 4 + 1}, "sm_90", runner="pycuda")
    assert over.status == "resources"
    assert f"{limit + 4} bytes of static shared memory exceed max_static_shared_memory_per_block = {limit}" \
        in over.detail


def test_a_kernel_without_a_runner_is_built_by_the_compiler_of_the_runner_a_plain_run_would_pick(monkeypatch):
    """No runner named: PyCUDA's nvcc where PyCUDA alone is installed (a plain run would pick it), NVRTC where CuPy
    is, or where neither is (the CI machine without a GPU library)."""
    from types import SimpleNamespace

    from pytest_autotune.backends import registry
    from pytest_autotune.lifecycle.compile_check import compiler_runner

    def installed(*names):
        backends = [SimpleNamespace(name=n, available=lambda n=n: n in names) for n in ("cupy", "pycuda")]
        monkeypatch.setattr(registry, "for_language", lambda lang: backends if lang == "cuda" else [])

    installed("pycuda")
    assert compiler_runner(None) == "pycuda" and compiler_runner("cupy") == "cupy"
    installed("cupy", "pycuda")
    assert compiler_runner(None) == "cupy" and compiler_runner("pycuda") == "pycuda"
    installed()
    assert compiler_runner(None) == "cupy" and compiler_runner("my_cuda_runner") == "cupy"


@needs_nvrtc
@pytest.mark.parametrize("runner", ["cupy", "pycuda"])
def test_a_cccl_header_not_found_says_what_to_install(runner):
    """A CI machine with the nvcc wheel but not nvidia-cuda-cccl cannot find <cub/...>: the check says to install it
    (a header of CCCL's layout that exists nowhere stands in for the missing wheel)."""
    if runner == "pycuda":
        _nvcc_or_skip()
    spec = small_spec('#include <cub/no_such_header.cuh>\nextern "C" __global__ void k(float *x) {}\n', "k",
                      lang="cuda")
    check = check_configuration(spec, {"block_size_x": 32}, "sm_90", runner=runner)
    assert check.status == "compile"
    assert check.detail.startswith("CCCL's headers (CUB, Thrust, libcu++) are not installed where the compiler "
                                   "looks: pip install nvidia-cuda-cccl")
    assert "no_such_header.cuh" in check.detail  # the compiler's own message follows


@needs_nvrtc
def test_an_unknown_header_of_ones_own_gets_no_cccl_hint():
    spec = small_spec('#include "my_header.cuh"\nextern "C" __global__ void k(float *x) {}\n', "k", lang="cuda")
    check = check_configuration(spec, {"block_size_x": 32}, "sm_90")
    assert check.status == "compile" and "nvidia-cuda-cccl" not in check.detail and "my_header.cuh" in check.detail
