"""Stand-ins for CuPy and PyCUDA, so the runners' glue code runs without a GPU.

Only the API surface the runners use is modelled, but with the real
libraries' names, call shapes, limits and error texts (read from CuPy 14's
``cupy/_core/raw.pyx``, ``cupy/cuda/compiler.py``, ``cupy_backends/cuda/api``
and PyCUDA's ``src/cpp/cuda.hpp``, ``src/wrapper/wrap_cudadrv.cpp``,
``pycuda/driver.py``, ``pycuda/compiler.py``). A stand-in kinder than the
library hides bugs, so:

* dynamic shared memory: the kernel attribute defaults to 48 KiB minus the
  kernel's static shared memory; raising it above the opt-in maximum minus
  the static part is ``CUDA_ERROR_INVALID_VALUE``; a launch asking for more
  dynamic shared memory than the attribute is ``CUDA_ERROR_INVALID_VALUE``;
* launches check block and grid against the device limits, and registers x
  threads against the register file (``CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES``);
* CuPy's ``get_function`` without name expressions looks the plain name up
  (found only for ``extern "C"`` kernels, else ``CUDA_ERROR_NOT_FOUND``), and
  NVRTC gets CuPy's extra options (``--std=c++17``, its bundled CCCL and header folder, the CUDA runtime
  headers' folder, ``-ftz=true``, ``-arch``, ``--device-as-default-execution-space``), in CuPy's order,
  recorded in ``State.nvrtc_options``;
* ``RawModule(path=...)`` (CuPy 14, ``cupy/_core/raw.pyx``): exactly one of ``code``/``path``,
  ``name_expressions`` only with code; the file is loaded lazily by ``get_function`` (``cuModuleLoad``):
  ``CUDA_ERROR_FILE_NOT_FOUND`` for a missing file, ``CUDA_ERROR_NO_BINARY_FOR_GPU`` for a cubin of
  another architecture (see :func:`fake_cubin`);
* CuPy without NVRTC fails in ``cupy.cuda.nvrtc.getVersion()``; CuPy without the CUDA headers (NVRTC
  installed, ``[ctk]`` not) fails every ``RawModule`` compile with the ``RuntimeError`` of
  ``cupy/_core/core.pyx`` ``assemble_cupy_compiler_options``;
* ``CompileException(msg, source, name, options, backend)`` and PyCUDA's
  ``CompileError(msg, command_line, stdout, stderr)`` with their ``__str__``;
  compile errors name the file and line of the ``#line`` directive;
* a sticky error surfaces at the next synchronisation -- CuPy's stream and
  event syncs go through the runtime API (``cudaErrorIllegalAddress: ...``),
  a CuPy launch through the driver (``CUDA_ERROR_ILLEGAL_ADDRESS: ...``) --
  and PyCUDA reports only ``cuGetErrorString``'s text
  (``cuCtxSynchronize failed: an illegal memory access was encountered``,
  ``cuLaunchKernel failed: invalid argument``) with its exception classes;
* PyCUDA's argument packer knows struct codes plus ``F``/``D``, not ``e``;
  PyCUDA warns (``UserWarning``) when nvcc printed anything on success;
* ``__constant__`` symbols: every loaded module has its own, zero-filled (a module CuPy memoizes keeps
  its values until ``clear_memo``). CuPy's ``RawModule.get_global(name)`` returns a ``MemoryPointer`` whose
  memory has size 0 (``cupy/_core/raw.pyx``: CuPy drops the size ``cuModuleGetGlobal`` gives), filled with
  ``copy_from_host(address, nbytes)``; the size is the driver's, through cuda-bindings'
  ``cuModuleGetGlobal(CUmodule(module.ptr), name) -> (CUresult, CUdeviceptr, bytes)`` (see
  :func:`cu_module_get_global`; :func:`install_cupy` puts it on cuda-bindings' driver module). PyCUDA's ``Module.get_global(name)`` returns ``(device pointer, bytes)``
  (``src/cpp/cuda.hpp``) and ``memcpy_htod`` takes that pointer. A missing symbol is ``CUDA_ERROR_NOT_FOUND``
  (CuPy's ``CUDADriverError``; PyCUDA's ``LogicError("cuModuleGetGlobal failed: named symbol not found")``);
  a copy past the symbol's end is ``CUDA_ERROR_INVALID_VALUE``.

A "kernel" runs in numpy, picked by its name (:data:`KERNELS`): the vector add of ``test_runner_cuda.VADD``,
its behaviour picked by ``#define`` lines in the rendered source (``MODE`` 1 wrong output, 2 compile error,
3 illegal address, 4 uses 255 registers per thread; ``STATIC_SMEM`` bytes of static shared memory), or
``convolution_kernel`` (tests/data/kernel_tuner/convolution.cu, our port of Kernel Tuner's convolution
example), which reads its filter from ``__constant__ d_filter`` (see
:func:`run_convolution`).
"""
from __future__ import annotations

import ctypes
import itertools
import re
import struct
import types
import warnings
from typing import Any

import numpy as np

PROPS = {
    "name": b"NVIDIA Fake H100 80GB HBM3",
    "major": 9, "minor": 0,
    "multiProcessorCount": 132,
    "totalGlobalMem": 80 * 2**30,
    "maxThreadsPerBlock": 1024,
    "maxThreadsDim": (1024, 1024, 64),
    "maxGridSize": (2**31 - 1, 65535, 65535),
    "sharedMemPerBlock": 48 * 1024,
    "sharedMemPerBlockOptin": 227 * 1024,
    "sharedMemPerMultiprocessor": 228 * 1024,
    "regsPerBlock": 65536,
    "warpSize": 32,
    "l2CacheSize": 50 * 2**20,
}
CUPY_INCLUDE = "/venv/site-packages/cupy/_core/include"  # cupy._core.core._get_header_dir_path()
CUDA_INCLUDE = "/venv/site-packages/nvidia/cuda_runtime/include"  # what cuda.pathfinder finds for "cudart"
DEFAULT_SMEM = PROPS["sharedMemPerBlock"]
OPTIN_SMEM = PROPS["sharedMemPerBlockOptin"]

# (driver enum name, cuGetErrorString text, runtime enum name)
ILLEGAL_ADDRESS = ("CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered", "cudaErrorIllegalAddress")
INVALID_VALUE = ("CUDA_ERROR_INVALID_VALUE", "invalid argument", "cudaErrorInvalidValue")
OUT_OF_RESOURCES = ("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch",
                    "cudaErrorLaunchOutOfResources")
NOT_FOUND = ("CUDA_ERROR_NOT_FOUND", "named symbol not found", "cudaErrorSymbolNotFound")
OUT_OF_MEMORY = ("CUDA_ERROR_OUT_OF_MEMORY", "out of memory", "cudaErrorMemoryAllocation")
FILE_NOT_FOUND = ("CUDA_ERROR_FILE_NOT_FOUND", "file not found", "cudaErrorFileNotFound")
INVALID_IMAGE = ("CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid", "cudaErrorInvalidKernelImage")
NO_BINARY_FOR_GPU = ("CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device",
                     "cudaErrorNoKernelImageForDevice")
FAKE_CUBIN = "FAKE-CUBIN"  # a stand-in cubin: "FAKE-CUBIN sm_90\n" + the rendered source (see fake_cubin)


def fake_cubin(path, source: str, arch: str = "sm_90") -> str:
    """Write what the stand-in's ``RawModule(path=...)`` loads as a cubin built for ``arch``; returns the path."""
    with open(path, "w") as handle:
        handle.write(f"{FAKE_CUBIN} {arch}\n{source}")
    return str(path)


class State:
    """The fake device: a pending sticky error surfaces at the next sync; what the runner asked for."""

    def __init__(self) -> None:
        self.poisoned = False
        self.launches: list[tuple] = []
        self.dynamic_smem_opt_in: list[int] = []
        self.nvrtc_options: list[tuple[str, ...]] = []
        self.nvrtc_missing = False
        self.cuda_headers_missing = False  # NVRTC loads, but CuPy finds no cudart headers
        self.nvcc_remarks = ""  # printed by nvcc on success (PyCUDA warns with it)
        self.fail_alloc_after: int | None = None  # PyCUDA: cuMemAlloc fails after this many allocations
        self.allocations = 0
        self.loaded_modules = 0  # CuPy modules kept alive by its memo
        self.memo: dict[tuple, object] = {}  # CuPy's _get_raw_module memo: (code, options) -> loaded module
        self.modules: dict[int, object] = {}  # CUmodule handle -> loaded module (CuPy's), for cuModuleGetGlobal
        self.cubin_loads = 0  # RawModule(path=...) loads that succeeded


def define(source: str, name: str) -> int:
    match = re.search(rf"#define {name} (\d+)", source)
    return int(match.group(1)) if match else 0


def mode_of(source: str) -> int:
    return define(source, "MODE")


def compile_error_line(source: str, marker: str = "this line does not compile") -> str:
    """``file(line)`` of ``marker`` as a compiler reports it after a ``#line 1 "file"`` directive."""
    lines = source.splitlines()
    filename, base = "kernel.cu", 0
    for i, line in enumerate(lines):
        directive = re.match(r'#line 1 "([^"]+)"', line)
        if directive:
            filename, base = directive.group(1), i + 1
        if marker in line and not line.lstrip().startswith("#"):
            return f"{filename}({i - base + 1})"
    return f"{filename}(1)"


def kernel_names(source: str) -> dict[str, str]:
    """Kernel name -> the symbol a compiler gives it (plain for extern "C", else mangled)."""
    out = {}
    for match in re.finditer(r'(extern "C" )?__global__ void (\w+)', source):
        name = match.group(2)
        out[name] = name if match.group(1) else f"_Z{len(name)}{name}PfPKfS2_i"
    return out


def run_vadd(mode: int, state: State, c: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    if mode == 3:
        state.poisoned = True
        return
    c[:] = a - b if mode == 1 else a + b


_C_SIZES = {"char": 1, "short": 2, "int": 4, "unsigned": 4, "float": 4, "double": 8, "long": 8,
            "float2": 8, "float4": 16, "int2": 8, "int4": 16, "double2": 16}
_SIZE_EXPR = re.compile(r"[\d\s()+\-*/]+\Z")


def constant_symbols(source: str) -> dict[str, np.ndarray]:
    """The ``__constant__`` arrays and scalars a compiler would emit for ``source``, zero-filled bytes.

    Sizes are expressions over numbers and the source's ``#define`` values (the first of each name: the
    rendered parameters come first); an unknown type or size is an error of the stand-in, not a guess."""
    symbols = {}
    for match in re.finditer(r"__constant__\s+(?:unsigned\s+)?(\w+)\s+(\w+)\s*(?:\[([^\]]+)\])?\s*;", source):
        ctype, name, count = match.groups()
        count = re.sub(r"\b[A-Za-z_]\w*\b", lambda m: str(define(source, m.group(0))), count or "1")
        assert ctype in _C_SIZES and _SIZE_EXPR.match(count), f"stand-in cannot size __constant__ {match.group(0)}"
        symbols[name] = np.zeros(_C_SIZES[ctype] * int(eval(count)), np.uint8)  # digits and + - * / only
    return symbols


def host_bytes(address: int, size: int) -> np.ndarray:
    """``size`` bytes of host memory at ``address`` (what ``cudaMemcpy`` reads from a host pointer)."""
    return np.frombuffer((ctypes.c_uint8 * size).from_address(address), np.uint8).copy()


def run_convolution(source: str, constants: dict[str, np.ndarray], grid, block, output: np.ndarray,
                    image: np.ndarray) -> None:
    """``convolution_kernel`` of tests/data/kernel_tuner/convolution.cu (our port of Kernel Tuner's
    examples/cuda/convolution.cu: same interface and tunable parameters, kernel written here): each output pixel
    a thread block covers is the sum over the filter of input window x ``d_filter[i * filter_width + j]``, the
    filter read from constant memory (never from the ``filter`` argument); pixels outside the grid stay as they
    were."""
    fh, fw = define(source, "filter_height"), define(source, "filter_width")
    height, width = define(source, "image_height"), define(source, "image_width")
    tile_x, tile_y = max(define(source, "tile_size_x"), 1), max(define(source, "tile_size_y"), 1)
    weights = constants["d_filter"].view(np.float32)[:fh * fw].reshape(fh, fw)
    padded = image.reshape(height + fh // 2 * 2, width + fw // 2 * 2)
    result = np.zeros((height, width), np.float32)
    for i, j in itertools.product(range(fh), range(fw)):
        result += padded[i:i + height, j:j + width] * weights[i, j]
    rows = min(height, grid[1] * block[1] * tile_y)
    cols = min(width, grid[0] * block[0] * tile_x)
    output.reshape(height, width)[:rows, :cols] = result[:rows, :cols]


def launch_problem(block, grid, registers: int) -> tuple[str, str, str] | None:
    """The error a real launch of this geometry gets from the driver, or None."""
    threads = block[0] * block[1] * block[2]
    if threads > PROPS["maxThreadsPerBlock"] or any(b > m for b, m in zip(block, PROPS["maxThreadsDim"])):
        return INVALID_VALUE
    if any(g > m or g < 1 for g, m in zip(grid, PROPS["maxGridSize"])):
        return INVALID_VALUE
    if registers * threads > PROPS["regsPerBlock"]:
        return OUT_OF_RESOURCES
    return None


# ----------------------------------------------------------------------------
# CuPy
# ----------------------------------------------------------------------------
def make_cupy(state: State) -> dict[str, types.ModuleType]:
    cupy = types.ModuleType("cupy")
    cuda = types.ModuleType("cupy.cuda")
    compiler = types.ModuleType("cupy.cuda.compiler")
    runtime = types.ModuleType("cupy.cuda.runtime")
    driver = types.ModuleType("cupy.cuda.driver")
    nvrtc = types.ModuleType("cupy.cuda.nvrtc")

    class CUDADriverError(RuntimeError):
        def __init__(self, error: tuple[str, str, str]) -> None:
            super().__init__(f"{error[0]}: {error[1]}")

    class CUDARuntimeError(RuntimeError):
        def __init__(self, error: tuple[str, str, str]) -> None:
            super().__init__(f"{error[2]}: {error[1]}")

    class CompileException(Exception):
        def __init__(self, msg, source, name, options, backend="nvrtc") -> None:
            self._msg, self.source, self.name, self.options, self.backend = msg, source, name, options, backend
            super().__init__()

        def __str__(self) -> str:
            return self.get_message()

        def get_message(self) -> str:
            return self._msg

    class DynamicLibNotFoundError(RuntimeError):
        pass

    def get_version() -> tuple[int, int]:
        if state.nvrtc_missing:
            raise DynamicLibNotFoundError('Failure finding "libnvrtc.so": no NVIDIA NVRTC library was found')
        return (12, 9)

    class UnownedMemory:
        def __init__(self, ptr: int, size: int) -> None:
            self.ptr, self.size = ptr, size

    class MemoryPointer:
        def __init__(self, array: np.ndarray, size: int | None = None) -> None:
            self.array, self.ptr = array, array.ctypes.data
            self.mem = UnownedMemory(self.ptr, array.nbytes if size is None else size)

        def copy_from_device_async(self, src: "MemoryPointer", size: int, stream=None) -> None:
            assert size == self.array.nbytes == src.array.nbytes
            np.copyto(self.array, src.array)

        def copy_from_host(self, mem, size: int) -> None:
            """``cudaMemcpy`` host to device: past the end of the symbol or allocation is invalid."""
            if state.poisoned:
                raise CUDARuntimeError(ILLEGAL_ADDRESS)
            if size > self.array.nbytes:
                raise CUDARuntimeError(INVALID_VALUE)
            self.array[:size] = host_bytes(mem if isinstance(mem, int) else mem.value, size)

    class ndarray:
        def __init__(self, array: np.ndarray) -> None:
            self.host = np.array(array, copy=True)

        @property
        def data(self) -> MemoryPointer:
            return MemoryPointer(self.host)

        @property
        def nbytes(self) -> int:
            return self.host.nbytes

        def copy(self) -> "ndarray":
            return ndarray(self.host)

    class RawKernel:
        def __init__(self, source: str, name: str = "vadd", constants: dict | None = None) -> None:
            self.source, self.name, self.constants = source, name.split("<")[0].strip(), constants or {}
            self.mode = mode_of(source)
            self.num_regs = 255 if self.mode == 4 else 20
            self.shared_size_bytes = define(source, "STATIC_SMEM")
            self.local_size_bytes = 0
            self.max_threads_per_block = 256 if self.mode == 4 else 1024
            self._dyn = DEFAULT_SMEM - self.shared_size_bytes

        @property
        def max_dynamic_shared_size_bytes(self) -> int:
            return self._dyn

        @max_dynamic_shared_size_bytes.setter
        def max_dynamic_shared_size_bytes(self, value: int) -> None:
            if value + self.shared_size_bytes > OPTIN_SMEM:  # cuFuncSetAttribute's rule
                raise CUDADriverError(INVALID_VALUE)
            state.dynamic_smem_opt_in.append(value)
            self._dyn = value

        def __call__(self, grid, block, args, shared_mem=0):
            assert isinstance(grid, tuple) and isinstance(block, tuple) and isinstance(args, tuple)
            if state.poisoned:
                raise CUDADriverError(ILLEGAL_ADDRESS)  # cuLaunchKernel returns the sticky error
            problem = launch_problem(block, grid, self.num_regs)
            if problem is None and shared_mem > self._dyn:
                problem = INVALID_VALUE
            if problem:
                raise CUDADriverError(problem)
            state.launches.append((grid, block, shared_mem))
            if "convolution_kernel" in self.name:  # by name, or by its mangled symbol from a cubin
                output, image, _filter = args
                run_convolution(self.source, self.constants, grid, block, output.host, image.host)
                return
            c, a, b, n = args
            assert isinstance(n, np.int32)
            run_vadd(self.mode, state, c.host, a.host, b.host)

    class RawModule:
        def __init__(self, *, code=None, path=None, options=(), name_expressions=None) -> None:
            assert isinstance(options, tuple)
            if (code is None) == (path is None):  # cupy/_core/raw.pyx RawModule.__init__
                raise TypeError("Exactly one of `code` and `path` keyword arguments must be given.")
            if name_expressions is not None and code is None:
                raise ValueError("need CUDA C++ code for the requested kernels")
            self.code, self.path, self.options = code, path, options
            self.name_expressions = tuple(name_expressions) if name_expressions is not None else None
            self._mapping: dict[str, str] | None = None
            self._module: CudaModule | None = None

        def _load_file(self) -> None:
            """CuPy 14 loads a path lazily (``_get_raw_module`` -> ``Module.load_file``, i.e. ``cuModuleLoad``) when
            ``get_function`` asks for the kernel: a missing file or a cubin for another architecture fails there."""
            try:
                data = open(self.path, "rb").read().decode()
            except OSError:
                raise CUDADriverError(FILE_NOT_FOUND) from None
            header, _, code = data.partition("\n")
            if not header.startswith(FAKE_CUBIN):
                raise CUDADriverError(INVALID_IMAGE)
            if header.split()[1] != f"sm_{PROPS['major']}{PROPS['minor']}":
                raise CUDADriverError(NO_BINARY_FOR_GPU)
            self.code = code
            state.cubin_loads += 1

        def _compile(self) -> dict[str, str]:
            """What compile_with_cache does: CuPy's options, NVRTC, the lowered names."""
            if self.path is not None:
                if self.code is None:
                    self._load_file()
                return {}
            if self._mapping is None:
                if state.cuda_headers_missing:  # assemble_cupy_compiler_options, before NVRTC is asked
                    raise RuntimeError("Failed to find CUDA headers. Please install CUDA toolkit headers (e.g., pip "
                                       "install cupy-cuda12x[ctk]) or specify CUDA_PATH environment variable.")
                get_version()
                options = self.options  # assemble_cupy_compiler_options: standard, bundled CCCL, headers
                if not any("-std=" in o for o in options):
                    options += ("--std=c++17",)
                options = tuple(f"-I{CUPY_INCLUDE}/cupy/_cccl/{d}" for d in ("cub", "thrust", "libcudacxx")) + options
                options += (f"-I{CUPY_INCLUDE}", f"-I{CUDA_INCLUDE}")
                options += ("-ftz=true", f"-arch=sm_{PROPS['major']}{PROPS['minor']}",  # compile_with_cache, nvrtc
                            "--device-as-default-execution-space")
                state.nvrtc_options.append(options)
                if mode_of(self.code) == 2:
                    raise CompileException(
                        f"{compile_error_line(self.code)}: error: this declaration has no storage class or "
                        f"type specifier\n\n1 error detected in the compilation of \"a0b1c2.cu\".",
                        self.code, "a0b1c2.cu", options)
                symbols = kernel_names(self.code)
                self._mapping = {ne: symbols.get(ne.split("<")[0].strip(), "") for ne in self.name_expressions or ()}
                state.loaded_modules += 1
            return self._mapping

        @property
        def module(self) -> "CudaModule":
            """The loaded module (cupy.cuda.function.Module: ``ptr`` is its CUmodule handle), memoized per
            source and options as CuPy's ``_get_raw_module`` does, until ``clear_memo``."""
            if self._module is None:
                self._compile()
                key = (self.code, self.options) if self.path is None else (self.path,)
                if key not in state.memo:
                    state.memo[key] = CudaModule(self.code)
                self._module = state.memo[key]
            return self._module

        def get_function(self, name: str) -> RawKernel:
            mapping = self._compile()
            symbol = mapping.get(name, name) if self.name_expressions else name
            if symbol not in kernel_names(self.code).values():
                raise CUDADriverError(NOT_FOUND)  # cuModuleGetFunction
            return RawKernel(self.code, name, self.module.constants)

        def get_global(self, name: str) -> MemoryPointer:
            """cupy/_core/raw.pyx: ``cuModuleGetGlobal``'s pointer in an ``UnownedMemory`` of size 0."""
            constants = self.module.constants
            if name not in constants:
                raise CUDADriverError(NOT_FOUND)  # driver.moduleGetGlobal -> check_status
            return MemoryPointer(constants[name], size=0)

    class CudaModule:
        def __init__(self, code: str) -> None:
            self.constants = constant_symbols(code)
            self.ptr = id(self)
            state.modules[self.ptr] = self

    class Stream:
        ptr = 0

        def synchronize(self) -> None:
            if state.poisoned:
                raise CUDARuntimeError(ILLEGAL_ADDRESS)

    class Event:
        def record(self, stream=None) -> None:
            return None

        def synchronize(self) -> None:
            if state.poisoned:
                raise CUDARuntimeError(ILLEGAL_ADDRESS)

    class Device:
        def __init__(self, device_id: int = 0) -> None:
            self.id = device_id

        def use(self) -> None:
            return None

        def synchronize(self) -> None:
            if state.poisoned:
                raise CUDARuntimeError(ILLEGAL_ADDRESS)

    class Pool:
        def free_all_blocks(self) -> None:
            return None

    def clear_memo() -> None:
        state.loaded_modules = 0
        state.memo.clear()

    compiler.CompileException = CompileException
    driver.CUDADriverError = CUDADriverError
    runtime.CUDARuntimeError = CUDARuntimeError
    runtime.getDeviceCount = lambda: 1
    runtime.getDeviceProperties = lambda i: dict(PROPS)
    runtime.driverGetVersion = lambda: 12040
    runtime.runtimeGetVersion = lambda: 12020
    runtime.memsetAsync = lambda ptr, value, size, stream: None
    runtime.deviceSynchronize = lambda: Device().synchronize()
    nvrtc.getVersion = get_version
    cuda.compiler, cuda.runtime, cuda.driver, cuda.nvrtc = compiler, runtime, driver, nvrtc
    cuda.Device, cuda.Event = Device, Event
    cuda.get_current_stream = lambda: Stream()
    cuda.get_elapsed_time = lambda start, end: 0.25
    cupy.cuda = cuda
    cupy.__version__ = "14.0.0+fake"
    cupy.RawModule = RawModule
    cupy.asarray = ndarray
    cupy.asnumpy = lambda d: d.host.copy()
    cupy.empty = lambda n, dtype: ndarray(np.empty(n, dtype))
    cupy.uint8 = np.uint8
    cupy.get_default_memory_pool = lambda: Pool()
    cupy.clear_memo = clear_memo
    return {"cupy": cupy, "cupy.cuda": cuda, "cupy.cuda.compiler": compiler, "cupy.cuda.runtime": runtime,
            "cupy.cuda.driver": driver, "cupy.cuda.nvrtc": nvrtc}


# ----------------------------------------------------------------------------
# PyCUDA
# ----------------------------------------------------------------------------
_PVT_STRUCT = set("xbBcshHiIlLnNqQ?fdFDP")  # pycuda/_pvt_struct: struct's codes + F/D, no "e"


def make_pycuda(state: State) -> dict[str, types.ModuleType]:
    pycuda = types.ModuleType("pycuda")
    drv = types.ModuleType("pycuda.driver")
    comp = types.ModuleType("pycuda.compiler")

    class Error(Exception):
        pass

    class LogicError(Error):
        pass

    class LaunchError(Error):
        pass

    class MemoryError_(Error):
        pass

    MemoryError_.__name__ = "MemoryError"

    def raise_cuda(routine: str, error: tuple[str, str, str]) -> None:
        """pycuda::error::make_message + translate_cuda_error: the class by code, the text alone."""
        message = f"{routine} failed: {error[1]}"
        if error in (OUT_OF_RESOURCES,):
            raise LaunchError(message)
        if error is OUT_OF_MEMORY:
            raise MemoryError_(message)
        raise LogicError(message)  # CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_ILLEGAL_ADDRESS, ...

    class CompileError(Error):
        def __init__(self, msg, command_line, stdout=None, stderr=None) -> None:
            self.msg, self.command_line, self.stdout, self.stderr = msg, command_line, stdout, stderr

        def __str__(self) -> str:
            result = self.msg
            if self.command_line:
                result += "\n[command: %s]" % (" ".join(self.command_line))
            if self.stdout:
                result += "\n[stdout:\n%s]" % self.stdout
            if self.stderr:
                result += "\n[stderr:\n%s]" % self.stderr
            return result

    attrs = types.SimpleNamespace(**{k: k for k in (
        "MULTIPROCESSOR_COUNT", "MAX_THREADS_PER_BLOCK", "MAX_SHARED_MEMORY_PER_BLOCK",
        "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR", "MAX_REGISTERS_PER_BLOCK",
        "WARP_SIZE", "L2_CACHE_SIZE", "MAX_BLOCK_DIM_X", "MAX_BLOCK_DIM_Y", "MAX_BLOCK_DIM_Z",
        "MAX_GRID_DIM_X", "MAX_GRID_DIM_Y", "MAX_GRID_DIM_Z")})
    values = {
        "MULTIPROCESSOR_COUNT": 132, "MAX_THREADS_PER_BLOCK": 1024, "MAX_SHARED_MEMORY_PER_BLOCK": DEFAULT_SMEM,
        "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": OPTIN_SMEM, "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR": 228 * 1024,
        "MAX_REGISTERS_PER_BLOCK": 65536, "WARP_SIZE": 32, "L2_CACHE_SIZE": 50 * 2**20,
        "MAX_BLOCK_DIM_X": 1024, "MAX_BLOCK_DIM_Y": 1024, "MAX_BLOCK_DIM_Z": 64,
        "MAX_GRID_DIM_X": 2**31 - 1, "MAX_GRID_DIM_Y": 65535, "MAX_GRID_DIM_Z": 65535,
    }
    fattrs = types.SimpleNamespace(**{k: k for k in (
        "NUM_REGS", "SHARED_SIZE_BYTES", "LOCAL_SIZE_BYTES", "MAX_THREADS_PER_BLOCK",
        "MAX_DYNAMIC_SHARED_SIZE_BYTES")})
    memory: dict[int, np.ndarray] = {}

    class DeviceAllocation:
        def __init__(self, nbytes: int) -> None:
            if state.fail_alloc_after is not None and state.allocations >= state.fail_alloc_after:
                raise_cuda("cuMemAlloc", OUT_OF_MEMORY)
            state.allocations += 1
            self.buf = np.zeros(nbytes, np.uint8)
            memory[self.buf.ctypes.data] = self.buf

        def __int__(self) -> int:
            return self.buf.ctypes.data

        def free(self) -> None:
            memory.pop(self.buf.ctypes.data, None)

    class Context:
        stack: list = []

        def push(self) -> None:
            Context.stack.append(self)

        def pop(self) -> None:
            if not Context.stack:
                raise LogicError("cuCtxPopCurrent failed: invalid device context")
            Context.stack.pop()

        @staticmethod
        def synchronize() -> None:
            if state.poisoned:
                raise_cuda("cuCtxSynchronize", ILLEGAL_ADDRESS)

    class Device:
        def __init__(self, i: int) -> None:
            self.i = i

        @staticmethod
        def count() -> int:
            return 1

        def retain_primary_context(self) -> Context:
            return Context()

        def get_attribute(self, name: str) -> int:
            return values[name]

        def compute_capability(self) -> tuple[int, int]:
            return (9, 0)

        def total_memory(self) -> int:
            return 80 * 2**30

        def name(self) -> str:
            return "NVIDIA Fake H100 80GB HBM3"

    class Function:
        def __init__(self, source: str, name: str = "vadd", constants: dict | None = None) -> None:
            self.source, self.name, self.constants = source, name, constants or {}
            self.mode = mode_of(source)
            static = define(source, "STATIC_SMEM")
            self.attrs = {"NUM_REGS": 255 if self.mode == 4 else 20, "SHARED_SIZE_BYTES": static,
                          "LOCAL_SIZE_BYTES": 0, "MAX_THREADS_PER_BLOCK": 256 if self.mode == 4 else 1024,
                          "MAX_DYNAMIC_SHARED_SIZE_BYTES": DEFAULT_SMEM - static}
            self.arg_format = ""

        def prepare(self, arg_types: str) -> "Function":
            self.arg_format = arg_types
            return self

        def get_attribute(self, name: str) -> int:
            return self.attrs[name]

        def set_attribute(self, name: str, value: int) -> None:
            if name == "MAX_DYNAMIC_SHARED_SIZE_BYTES" and value + self.attrs["SHARED_SIZE_BYTES"] > OPTIN_SMEM:
                raise_cuda("cuFuncSetAttribute", INVALID_VALUE)
            state.dynamic_smem_opt_in.append(value)
            self.attrs[name] = value

        def prepared_call(self, grid, block, *args, shared_size=0):
            bad = set(self.arg_format) - _PVT_STRUCT
            if bad:
                raise struct.error("bad char in struct format")
            assert len(args) == len(self.arg_format)
            if state.poisoned:
                raise_cuda("cuLaunchKernel", ILLEGAL_ADDRESS)
            problem = launch_problem(block, grid, self.attrs["NUM_REGS"])
            if problem is None and shared_size > self.attrs["MAX_DYNAMIC_SHARED_SIZE_BYTES"]:
                problem = INVALID_VALUE
            if problem:
                raise_cuda("cuLaunchKernel", problem)
            state.launches.append((grid, block, shared_size))
            if "convolution_kernel" in self.name:
                output, image = (memory[p].view(np.float32) for p in args[:2])
                run_convolution(self.source, self.constants, grid, block, output, image)
                return
            c, a, b = (memory[p].view(np.float32) for p in args[:3])
            run_vadd(self.mode, state, c, a, b)

    class Module:
        def __init__(self, cubin: bytes) -> None:
            self.cubin = cubin
            self.constants = constant_symbols(cubin.decode(errors="replace"))  # each load its own, zeroed
            for buffer in self.constants.values():
                memory[buffer.ctypes.data] = buffer

        def get_function(self, symbol: str) -> Function:
            if (b"\0" + symbol.encode() + b"\0") not in self.cubin:
                raise_cuda("cuModuleGetFunction", NOT_FOUND)
            return Function(self.cubin.decode(errors="replace"), symbol, self.constants)

        def get_global(self, name: str) -> tuple[int, int]:
            """``(CUdeviceptr, bytes)`` of a global symbol (pycuda src/cpp/cuda.hpp ``module::get_global``)."""
            if name not in self.constants:
                raise_cuda("cuModuleGetGlobal", NOT_FOUND)
            buffer = self.constants[name]
            return buffer.ctypes.data, buffer.nbytes

    class Event:
        def record(self, stream=None) -> None:
            return None

        def synchronize(self) -> None:
            if state.poisoned:
                raise_cuda("cuEventSynchronize", ILLEGAL_ADDRESS)

        def time_till(self, end: "Event") -> float:
            return 0.25

    def compile(source, nvcc="nvcc", options=None, keep=False, no_extern_c=False, arch=None, code=None,
                cache_dir=None, include_dirs=(), target="cubin"):
        assert no_extern_c is True
        cmdline = [nvcc, "--cubin", *(options or []), "kernel.cu"]
        if mode_of(source) == 2:
            raise CompileError("nvcc compilation of /tmp/tmpab12/kernel.cu failed", cmdline,
                               stderr=f"{compile_error_line(source)}: error: this declaration has no storage "
                                      "class or type specifier\n\n1 error detected in the compilation of "
                                      "\"kernel.cu\".\n")
        if state.nvcc_remarks:
            warnings.warn("The CUDA compiler succeeded, but said the following:\n" + state.nvcc_remarks,
                          stacklevel=2)
        symbols = "".join(f"\0.text.{s}\0{s}\0" for s in kernel_names(source).values())
        return source.encode() + symbols.encode()

    def memcpy_htod(dst, src: np.ndarray) -> None:
        """A DeviceAllocation or a device pointer (an int, as ``get_global`` returns); past its end is invalid."""
        buf = memory.get(dst) if isinstance(dst, int) else dst.buf
        if buf is None or src.nbytes > buf.nbytes:
            raise_cuda("cuMemcpyHtoD", INVALID_VALUE)
        buf[:src.nbytes] = np.ascontiguousarray(src).view(np.uint8).ravel()

    def memcpy_dtoh(dst: np.ndarray, src: DeviceAllocation) -> None:
        dst.view(np.uint8).ravel()[:] = src.buf[:dst.nbytes]

    def memcpy_dtod(dst: DeviceAllocation, src: DeviceAllocation, size: int) -> None:
        dst.buf[:size] = src.buf[:size]

    drv.init = lambda: None
    drv.Error, drv.LogicError, drv.LaunchError, drv.MemoryError = Error, LogicError, LaunchError, MemoryError_
    drv.CompileError = CompileError
    drv.Device, drv.Context, drv.Event = Device, Context, Event
    drv.device_attribute, drv.function_attribute = attrs, fattrs
    drv.mem_alloc = DeviceAllocation
    drv.memcpy_htod, drv.memcpy_dtoh, drv.memcpy_dtod = memcpy_htod, memcpy_dtoh, memcpy_dtod
    drv.memset_d8 = lambda alloc, value, size: None
    drv.module_from_buffer = Module
    drv.get_driver_version = lambda: 12040
    drv.get_version = lambda: (12, 2, 0)
    comp.compile = compile
    pycuda.driver, pycuda.compiler = drv, comp
    pycuda.VERSION_TEXT = "2024.1+fake"
    return {"pycuda": pycuda, "pycuda.driver": drv, "pycuda.compiler": comp}


def cu_module_get_global(state: State, result: Any) -> Any:
    """cuda-bindings' ``cuModuleGetGlobal(CUmodule, name) -> (CUresult, CUdeviceptr, bytes)`` on the modules the
    CuPy stand-in loaded (``RawModule.module.ptr``), with ``result`` (the ``CUresult`` enum) for its codes."""

    def get_global(hmod: Any, name: Any) -> tuple:
        module = state.modules.get(int(hmod))
        if module is None:
            return result.CUDA_ERROR_INVALID_HANDLE, 0, 0
        buffer = module.constants.get(name.decode() if isinstance(name, bytes) else name)
        if buffer is None:
            return result.CUDA_ERROR_NOT_FOUND, 0, 0
        return result.CUDA_SUCCESS, buffer.ctypes.data, buffer.nbytes

    return get_global


def make_cuda_bindings_driver(state: State) -> types.ModuleType:
    """``cuda.bindings.driver`` where cuda-bindings is not installed: the one call the cupy runner makes."""
    import enum

    driver = types.ModuleType("cuda.bindings.driver")

    class CUresult(enum.IntEnum):
        CUDA_SUCCESS = 0
        CUDA_ERROR_INVALID_HANDLE = 400
        CUDA_ERROR_NOT_FOUND = 500

    class CUmodule:
        def __init__(self, init_value: int = 0) -> None:
            self._handle = int(init_value)

        def __int__(self) -> int:
            return self._handle

    driver.CUresult, driver.CUmodule = CUresult, CUmodule
    driver.cuModuleGetGlobal = cu_module_get_global(state, CUresult)
    return driver


def _install_cuda_driver(monkeypatch: Any, state: State) -> None:
    """The driver call on the real cuda-bindings (its nvrtc module imports driver: never replace the module),
    or a stand-in module where cuda-bindings is missing."""
    import importlib
    import sys

    try:
        driver = importlib.import_module("cuda.bindings.driver")
    except ImportError:
        monkeypatch.setitem(sys.modules, "cuda.bindings.driver", make_cuda_bindings_driver(state))
        return
    monkeypatch.setattr(driver, "cuModuleGetGlobal", cu_module_get_global(state, driver.CUresult))


def install_cupy(monkeypatch, state: "State | None" = None) -> tuple["State", list[str]]:
    """Put the CuPy stand-in into ``sys.modules`` for one test (``monkeypatch`` undoes it): the state and the
    module names. Each module gets a ``__spec__``, so ``importlib.util.find_spec`` finds it as an installed CuPy."""
    import importlib.machinery
    import sys

    state = state or State()
    modules = make_cupy(state)
    _install_cuda_driver(monkeypatch, state)
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
        if getattr(module, "__spec__", None) is None:
            monkeypatch.setattr(module, "__spec__", importlib.machinery.ModuleSpec(name, None), raising=False)
    return state, list(modules)
