"""The static gate's builders with the real compilers, no GPU: NVRTC (cuda-bindings), nvcc from the
nvidia-cuda-nvcc wheel, and Triton 3.9 for GPUTarget("cuda", arch, 32).

Where the wheels exist (Linux x86-64) a missing compiler fails these tests instead of skipping them, as in
tests/backends/test_nvrtc_compile.py. The plugin runs this process under TRITON_INTERPRET=1 when no GPU is
present, so the Triton kernels below are then InterpretedFunctions and build in the builder's child
process; test_the_build_is_what_a_launch_compiles checks the result against a process without the
interpreter, where Triton's own JITFunction.run (warmup, a driver that only names the target) compiles.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import platform
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from pytest_autotune.backends.nvrtc import nvrtc_unavailable_reason, supported_archs
from pytest_autotune.errors import BackendUnavailable, SpecError
from pytest_autotune.execution.kernel import KernelSpec
from pytest_autotune.static.build import (BuiltKernel, StaticBuildError, build_for_runner, build_nvcc, build_nvrtc,
                                          build_triton, find_nvcc, pycuda_command)
from triton_support import require_triton

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_SRC = ROOT / "example_project" / "src"
WHEELS_EXIST = sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64")
NVRTC_MISSING = nvrtc_unavailable_reason()
needs_nvrtc = pytest.mark.skipif(bool(NVRTC_MISSING) and not WHEELS_EXIST,
                                 reason=f"no cuda-bindings/NVRTC wheels for this platform: {NVRTC_MISSING}")


def wheel_nvcc() -> str | None:
    """The nvidia-cuda-nvcc wheel's nvcc, not a toolkit's: these tests must pass on a host without one."""
    try:
        from cuda.pathfinder import find_nvidia_binary_utility

        found = find_nvidia_binary_utility("nvcc")
    except Exception:  # noqa: BLE001
        return None
    return found if found and "site-packages" in found else None


WHEEL_NVCC = wheel_nvcc()
needs_nvcc = pytest.mark.skipif(WHEEL_NVCC is None and not WHEELS_EXIST, reason="no nvidia-cuda-nvcc wheel here")

VADD = """extern "C" __global__ void vadd(float *c, const float *a, const float *b, int n) {
    extern __shared__ float scratch[];
    int i = (blockIdx.y * blockDim.y + threadIdx.y) * 64 + blockIdx.x * blockDim.x + threadIdx.x;
    scratch[threadIdx.y * blockDim.x + threadIdx.x] = a[i];
    if (i < n) c[i] = scratch[threadIdx.y * blockDim.x + threadIdx.x] + b[i];
}
"""
SCALE = """template <int BS, typename T>
__global__ void scale(T *x, T a, int n) {
    __shared__ T tile[BS];
    int i = blockIdx.x * BS + threadIdx.x;
    tile[threadIdx.x] = i < n ? x[i] : T(0);
    __syncthreads();
    if (i < n) x[i] = tile[BS - 1 - threadIdx.x] * a;
}
"""
BROKEN = """extern "C" __global__ void broken(float *x) { x[threadIdx.x] = undefined_name; }
"""


def vadd_spec(source: str = VADD, name: str = "vadd") -> KernelSpec:
    n = 64 * 64
    return KernelSpec(source, name, (64, 64), [np.zeros(n, np.float32), np.ones(n, np.float32),
                                               np.ones(n, np.float32), np.int32(n)],
                      shared_mem="block_size_x * block_size_y * 4", lang="cuda")


def scale_spec() -> KernelSpec:
    return KernelSpec(SCALE, "scale<block_size_x, float>", 1000, [np.zeros(1000, np.float32), np.float32(2),
                                                                  np.int32(1000)], lang="cuda")


VADD_PARAMS = {"block_size_x": 32, "block_size_y": 4}


def assert_cubin(built: BuiltKernel, arch: int) -> None:
    assert built.cubin[:4] == b"\x7fELF" and built.arch == arch
    assert b"\0" + built.symbol.encode() + b"\0" in built.cubin
    assert built.resources.registers > 0 and built.seconds > 0


# -- NVRTC and nvcc -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cuda_builds() -> dict[str, BuiltKernel]:
    builds = {}
    for label, spec, params in (("vadd", vadd_spec(), VADD_PARAMS), ("scale", scale_spec(), {"block_size_x": 128})):
        if not NVRTC_MISSING or WHEELS_EXIST:
            builds[f"nvrtc {label}"] = build_nvrtc(spec, params, 90)
        if WHEEL_NVCC or WHEELS_EXIST:
            builds[f"nvcc {label}"] = build_nvcc(spec, params, 90, nvcc=WHEEL_NVCC)
    return builds


@needs_nvrtc
@needs_nvcc
def test_nvrtc_and_nvcc_build_the_same_configuration(cuda_builds):
    for compiler in ("nvrtc", "nvcc"):
        vadd, scale = cuda_builds[f"{compiler} vadd"], cuda_builds[f"{compiler} scale"]
        for built in (vadd, scale):
            assert_cubin(built, 90)
            assert built.toolchain["compiler"].startswith(compiler + " ")
        # the launch geometry: a 32 x 4 block with block_size_x * block_size_y floats of dynamic shared memory
        assert (vadd.symbol, vadd.threads, vadd.dynamic_shared, vadd.resources.shared_mem) == ("vadd", 128, 512, 0)
        # the template's instance by its mangled name; 128 floats of static shared memory, one barrier
        assert scale.symbol == "_Z5scaleILi128EfEvPT0_S0_i"
        assert (scale.threads, scale.dynamic_shared, scale.resources.shared_mem) == (128, 0, 512)
        assert scale.resources.barriers == 1 and scale.resources.spill_stores == 0
    assert cuda_builds["nvcc vadd"].toolchain["ptxas"].startswith("ptxas ")
    for label in ("vadd", "scale"):  # the same front end and ptxas generation: close register counts
        nvrtc, nvcc = cuda_builds[f"nvrtc {label}"].resources, cuda_builds[f"nvcc {label}"].resources
        assert abs(nvrtc.registers - nvcc.registers) <= 8, (nvrtc, nvcc)


def test_the_nvcc_command_is_the_one_pycuda_runs(tmp_path):
    source = tmp_path / "k.cu"
    source.write_text(VADD)
    spec = KernelSpec(str(source), "vadd", 64, [np.zeros(64, np.float32)], compiler_options=["-O3", "-DX=1"])
    assert pycuda_command("nvcc", spec, 80) == ["nvcc", "--cubin", "-O3", "-DX=1", "-arch", "sm_80",
                                                f"-I{tmp_path}", "--resource-usage", "kernel.cu"]


@needs_nvrtc
@needs_nvcc
def test_a_source_that_does_not_compile_raises_the_compilers_message():
    spec = KernelSpec(BROKEN, "broken", 64, [np.zeros(64, np.float32)], lang="cuda")
    for build in (build_nvrtc, lambda *a: build_nvcc(*a, nvcc=WHEEL_NVCC)):
        with pytest.raises(StaticBuildError, match="undefined_name") as caught:
            build(spec, {}, 90)
        assert "could not compile broken for sm_90" in str(caught.value) and "undefined_name" in caught.value.log


@needs_nvcc
def test_nvcc_is_found_in_the_wheel_without_one_on_path(monkeypatch, tmp_path):
    with pytest.raises(BackendUnavailable, match="nvcc '/nowhere/nvcc' was not found"):
        build_nvcc(vadd_spec(), VADD_PARAMS, 90, nvcc="/nowhere/nvcc")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_nvcc() == WHEEL_NVCC


def test_a_toolkits_nvcc_off_path_is_the_last_resort(monkeypatch, tmp_path):
    """No nvcc on PATH nor in a wheel: a toolkit's ($CUDA_PATH, $CUDA_HOME, /usr/local/cuda: cuda_toolkit's roots,
    here one made up) installed but not on PATH; none: the install hint."""
    from pytest_autotune.static import build

    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(sys, "path", [str(tmp_path / "no-site-packages")])
    monkeypatch.setitem(sys.modules, "cuda.pathfinder", None)  # as without cuda-pathfinder
    toolkit = tmp_path / "cuda-13.0"
    monkeypatch.setattr(build, "_toolkit_roots", lambda: [str(toolkit)])  # not /usr/local/cuda of this host
    with pytest.raises(BackendUnavailable, match=r"no nvcc on PATH, in the nvidia-cuda-nvcc wheel nor in "
                                                 r"\$CUDA_PATH, \$CUDA_HOME or /usr/local/cuda \(pip install "
                                                 r".*nvidia-cuda-cccl"):
        find_nvcc()
    (toolkit / "bin").mkdir(parents=True)
    (toolkit / "bin" / "nvcc").write_text("#!/bin/sh\n")
    (toolkit / "bin" / "nvcc").chmod(0o755)
    assert find_nvcc() == str(toolkit / "bin" / "nvcc")


@needs_nvrtc
@needs_nvcc
def test_an_architecture_the_compiler_dropped_is_backend_unavailable():
    if 70 in supported_archs():
        pytest.skip("this NVRTC still targets sm_70")
    with pytest.raises(BackendUnavailable, match="sm_70"):
        build_nvrtc(vadd_spec(), VADD_PARAMS, 70)
    with pytest.raises(BackendUnavailable, match="cannot compile for sm_70"):
        build_nvcc(vadd_spec(), VADD_PARAMS, 70, nvcc=WHEEL_NVCC)


@needs_nvrtc
def test_build_for_runner_picks_the_runners_compiler():
    assert build_for_runner(None, vadd_spec(), VADD_PARAMS, 80).toolchain["compiler"].startswith("nvrtc ")
    assert build_for_runner("cupy", vadd_spec(), VADD_PARAMS, 80).arch == 80
    with pytest.raises(SpecError, match="no static build for the 'c' runner"):
        build_for_runner("c", vadd_spec(), VADD_PARAMS, 80)


# -- Triton ---------------------------------------------------------------------------------------

HAVE_TRITON = all(importlib.util.find_spec(m) is not None for m in ("triton", "torch"))

if HAVE_TRITON:  # the kernels stay at the module's top level: the builder's child process imports them
    import triton
    import triton.language as tl

    from pytest_autotune.backends.triton_runner import TritonSpec

    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        x, y = tl.load(x_ptr + offsets, mask=mask), tl.load(y_ptr + offsets, mask=mask)
        tl.store(out_ptr + offsets, x + y, mask=mask)

    @triton.jit
    def _row_max(x):
        return tl.max(x, axis=0)

    @triton.jit
    def softmax_kernel(out_ptr, in_ptr, n_cols, BLOCK: tl.constexpr):
        cols = tl.arange(0, BLOCK)
        row = tl.program_id(0) * n_cols
        x = tl.load(in_ptr + row + cols, mask=cols < n_cols, other=-float("inf"))
        e = tl.exp(x - _row_max(x))  # a @triton.jit helper: interpreted too under TRITON_INTERPRET=1
        tl.store(out_ptr + row + cols, e / tl.sum(e, axis=0), mask=cols < n_cols)

    @triton.jit
    def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        rm = tl.program_id(0) * BM + tl.arange(0, BM)
        rn = tl.program_id(1) * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
            b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
            acc += tl.dot(a, b)
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


    @triton.jit
    def act_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, ACTIVATION: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offsets, mask=offsets < n)
        if ACTIVATION == "leaky_relu":
            x = tl.where(x >= 0, x, x * 0.01)
        tl.store(out_ptr + offsets, x, mask=offsets < n)


@pytest.fixture(scope="module")
def triton_here() -> None:
    require_triton()  # a skip without Triton, a failure where the test extra installs it


def add_spec() -> TritonSpec:
    x = np.zeros(1000, np.float32)
    return TritonSpec(add_kernel, lambda meta: (triton.cdiv(1000, meta["BLOCK"]),), [x, x, x, 1000], tuned=["BLOCK"])


def softmax_spec() -> TritonSpec:
    return TritonSpec(softmax_kernel, (8,), [np.zeros((8, 100), np.float32), np.zeros((8, 100), np.float32), 100],
                      tuned=["BLOCK"])


def matmul_spec() -> TritonSpec:
    a, c = np.zeros((128, 128), np.float16), np.zeros((128, 128), np.float32)
    return TritonSpec(matmul_kernel, (2, 2), [a, a, c, 128, 128, 128], tuned=["BM", "BN", "BK"])


def example_softmax_spec() -> TritonSpec:
    from example_kernels.triton_softmax import SOFTMAX_SHAPE, softmax_grid, softmax_kernel as example_kernel

    n_rows, n_cols = SOFTMAX_SHAPE
    x = np.zeros(SOFTMAX_SHAPE, np.float32)  # as tests/test_triton_kernels.py calls it
    return TritonSpec(example_kernel, softmax_grid(n_rows), [np.zeros_like(x), x, n_rows, n_cols],
                      tuned=["BLOCK_COLS", "ROWS"])


ADD = {"BLOCK": 256, "num_warps": 4}
MATMUL = {"BM": 64, "BN": 64, "BK": 32, "num_warps": 4, "num_stages": 3}
CASES = {  # name: (spec maker, params, arch)
    "add sm_90": (add_spec, ADD, 90), "add sm_90 8 warps": (add_spec, {**ADD, "num_warps": 8}, 90),
    "add sm_80": (add_spec, ADD, 80), "softmax sm_90": (softmax_spec, {"BLOCK": 128, "num_warps": 2}, 90),
    "matmul sm_90": (matmul_spec, MATMUL, 90), "matmul sm_80": (matmul_spec, MATMUL, 80),
    "example sm_90": (example_softmax_spec, {"BLOCK_COLS": 128, "ROWS": 2, "num_warps": 2, "num_stages": 1}, 90),
    "example sm_80": (example_softmax_spec, {"BLOCK_COLS": 128, "ROWS": 2, "num_warps": 2, "num_stages": 1}, 80),
}


@pytest.fixture(scope="module")
def example_on_path(triton_here):
    with pytest.MonkeyPatch.context() as patch:  # the builder's child imports the example's kernel too
        patch.syspath_prepend(str(EXAMPLE_SRC))
        yield


@pytest.fixture(scope="module")
def triton_builds(example_on_path) -> dict[str, BuiltKernel]:
    return {name: build_triton(make(), params, arch) for name, (make, params, arch) in CASES.items()}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def code_sections(cubin: bytes) -> dict[str, bytes]:
    """The ``.text.*`` sections of a 64-bit ELF cubin: the machine code alone. Whole cubins of one kernel differ
    across Triton's cache: an identical kernel in another file shares its cache entry, and the cubin's line
    information names the first file compiled."""
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    names_at, names_size = headers[shstrndx][4], headers[shstrndx][5]
    names = cubin[names_at:names_at + names_size]
    out = {}
    for name_at, _type, _flags, _addr, offset, size in headers:
        name = names[name_at:names.index(b"\0", name_at)].decode()
        if name.startswith(".text"):
            out[name] = cubin[offset:offset + size]
    return out


def code_digest(cubin: bytes) -> str:
    sections = code_sections(cubin)
    return sha(b"".join(name.encode() + b"\0" + sections[name] for name in sorted(sections)))


def test_triton_builds_cubins_for_sm_80_and_sm_90(triton_builds):
    for name, built in triton_builds.items():
        assert_cubin(built, CASES[name][2])
        assert built.toolchain["compiler"] == f"triton {triton.__version__}" and "ptxas" in built.toolchain
        assert built.threads == CASES[name][1]["num_warps"] * 32, name
    assert triton_builds["add sm_90"].symbol == "add_kernel"
    assert triton_builds["example sm_80"].symbol == triton_builds["example sm_90"].symbol == "softmax_kernel"
    for kernel in ("add", "matmul", "example"):
        assert triton_builds[f"{kernel} sm_80"].cubin != triton_builds[f"{kernel} sm_90"].cubin
    # ptxas-blackwell builds sm_90 and later in Triton 3.9, its older ptxas sm_80
    assert triton_builds["add sm_90"].toolchain["ptxas"] != triton_builds["add sm_80"].toolchain["ptxas"]


def test_num_warps_sets_the_threads_and_changes_the_code(triton_builds):
    four, eight = triton_builds["add sm_90"], triton_builds["add sm_90 8 warps"]
    assert (four.threads, eight.threads) == (128, 256)
    assert four.cubin != eight.cubin


def test_a_pipelined_dot_uses_tensor_cores_and_dynamic_shared_memory(triton_builds, tmp_path):
    nvdisasm = None
    with contextlib.suppress(ImportError):  # the nvidia-cuda-nvdisasm wheel, where installed
        from cuda.pathfinder import find_nvidia_binary_utility

        nvdisasm = find_nvidia_binary_utility("nvdisasm")
    for arch, instruction in ((80, "HMMA"), (90, "HGMMA")):
        built = triton_builds[f"matmul sm_{arch}"]
        # num_stages=3 buffers tiles of A and B in shared memory: what the launch allocates dynamically
        assert built.dynamic_shared >= 2 * (64 * 32 * 2) and built.resources.shared_mem == 0
        if nvdisasm:
            (tmp_path / "k.cubin").write_bytes(built.cubin)
            sass = subprocess.run([nvdisasm, str(tmp_path / "k.cubin")], capture_output=True, text=True).stdout
            assert instruction in sass, arch


def test_a_build_is_deterministic_and_uses_no_cache_entry(triton_builds, monkeypatch, tmp_path):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))  # a cold compile, not the cached binary
    again = build_triton(add_spec(), ADD, 90)
    assert code_digest(again.cubin) == code_digest(triton_builds["add sm_90"].cubin)
    assert again.resources == triton_builds["add sm_90"].resources
    assert any(tmp_path.iterdir())


@pytest.mark.filterwarnings("ignore:TRITON_DEFAULT_FP_FUSION is unset")  # Triton's, as at any launch
def test_the_ptxas_log_comes_from_triton_itself_when_a_rerun_differs(triton_builds, monkeypatch):
    """Resources come from re-running Triton's ptxas only when that run's cubin is Triton's; a flag of a newer
    Triton missing from the rerun (here: one too many) makes Triton compile again and print its own log."""
    from triton.runtime.jit import JITFunction

    from pytest_autotune.static import build

    command, compiles = build._ptxas_command, []
    monkeypatch.setattr(build, "_ptxas_command", lambda *a: [*command(*a)[:1], "--opt-level", "1", *command(*a)[1:]])
    monkeypatch.setattr(build, "triton_compile", lambda *a, compile=build.triton_compile: compiles.append(a) or
                        compile(*a))
    kernel = JITFunction(add_kernel.fn)  # builds in this process, interpreter or not: no helpers, no tl library
    built = build._build_jit(kernel, build.launch_arguments(add_spec(), ADD), 90, "add_kernel")
    assert len(compiles) == 2 and code_digest(built.cubin) == code_digest(triton_builds["add sm_90"].cubin)
    assert built.resources == triton_builds["add sm_90"].resources


def test_a_configuration_triton_rejects_is_a_static_build_error(triton_here):
    with pytest.raises(StaticBuildError, match="num_ctas > 1 requires NVIDIA SM90"):
        build_triton(add_spec(), {**ADD, "num_ctas": 2}, 80)
    with pytest.raises(StaticBuildError, match="arange"):  # not a power of two
        build_triton(add_spec(), {"BLOCK": 100, "num_warps": 4}, 90)
    assert build_for_runner("triton", add_spec(), ADD, 90).symbol == "add_kernel"


CHECK = """
import json, sys
import numpy as np
from triton.backends.compiler import GPUTarget
from triton.runtime.driver import driver
import test_build as t
from pytest_autotune.static.build import build_triton

class TargetOnly:  # what JITFunction.run asks of the driver; device ids stand for the architectures
    def get_current_device(self):
        return self.arch
    def get_current_stream(self, device):
        return 0
    def get_current_target(self):
        return GPUTarget("cuda", self.arch, 32)

found = {}
for name, (make, params, arch) in t.CASES.items():
    spec = make()
    built = build_triton(spec, params, arch)
    fake = TargetOnly()
    fake.arch = arch
    driver.set_active(fake)
    launched = spec.kernel.resolve().warmup(*spec.args, grid=(1,), **params)  # JITFunction.run, no launch
    found[name] = [t.code_digest(built.cubin), t.code_digest(launched.asm["cubin"]),
                   type(spec.kernel.resolve()).__name__]
print(json.dumps(found))
"""


def test_the_build_is_what_a_launch_compiles(triton_builds, example_on_path):
    """A process without the interpreter builds each case in-process and through Triton's own launch path
    (``warmup``, which runs ``JITFunction.run`` without launching); both equal this process's builds."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), *sys.path])
    done = subprocess.run([sys.executable, "-c", CHECK], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    for name, built in triton_builds.items():
        ours, launch, kind = found[name]
        assert kind == "JITFunction" and ours == launch == code_digest(built.cubin), name


EDITED = '''
import triton
import triton.language as tl


@triton.jit
def scaled(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * FACTOR, mask=offs < n)
'''


def test_an_edited_kernel_module_is_built_as_it_is_now(tmp_path, monkeypatch):
    """The build process outlives a test session (and sees every session's kernels): a module it imported before
    is imported again once its file changed, and a module of the same name in another folder is that one."""
    from pytest_autotune.backends.triton_kernel import KernelRef

    x = np.zeros(256, np.float32)
    digests = []
    for folder, factor in (("a", "2.0"), ("a", "2.0 + tl.load(x_ptr + offs + 1, mask=offs < 0, other=0.0)"),
                           ("b", "3.0")):
        path = tmp_path / folder / "edited_kernels.py"
        path.parent.mkdir(exist_ok=True)
        path.write_text(EDITED.replace("FACTOR", factor))
        os.utime(path, ns=(time.time_ns(), time.time_ns() + len(digests)))  # a new mtime even within one tick
        monkeypatch.delitem(sys.modules, "edited_kernels", raising=False)  # this process imports it afresh too
        monkeypatch.syspath_prepend(str(path.parent))
        kernel = KernelRef("edited_kernels", "scaled", str(path)).resolve()
        spec = TritonSpec(kernel, (1,), [x, x, 256], tuned=["BLOCK"])
        digests.append(code_digest(build_triton(spec, {"BLOCK": 256, "num_warps": 4}, 90).cubin))
    assert len(set(digests)) == 3, digests


def test_an_untuned_constexpr_given_by_keyword_reaches_tritons_binder(triton_here):
    """autotune.triton(..., kwargs={"ACTIVATION": ...}): the static build compiles what the launch would."""
    x = np.zeros(1000, np.float32)
    built = {act: build_triton(TritonSpec(act_kernel, (4,), [x, x, 1000], kwargs={"ACTIVATION": act},
                                          tuned=["BLOCK"]), {"BLOCK": 256, "num_warps": 4}, 90)
             for act in ("leaky_relu", "none")}
    for one in built.values():
        assert_cubin(one, 90)
    assert code_digest(built["leaky_relu"].cubin) != code_digest(built["none"].cubin)  # the keyword was compiled in
