"""Minimal stand-ins for CuPy and PyCUDA, so the runners' glue code runs without a GPU.

Only the API surface the runners use is modelled, with the documented names
and call shapes; a "kernel" is the vector add of ``test_runner_cuda.VADD``,
executed in numpy, its behaviour picked by ``#define MODE`` in the source:
1 wrong output, 2 compile error, 3 illegal address (sticky error raised at
the next synchronisation), 4 uses 255 registers per thread.
"""
from __future__ import annotations

import re
import types

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
STICKY = "CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered"


class DriverError(Exception):
    pass


class State:
    """The fake device: a pending sticky error surfaces at the next sync."""

    def __init__(self) -> None:
        self.poisoned = False
        self.launches: list[tuple] = []
        self.dynamic_smem_opt_in: list[int] = []

    def sync(self) -> None:
        if self.poisoned:
            raise DriverError(STICKY)


def mode_of(source: str) -> int:
    match = re.search(r"#define MODE (\d+)", source)
    return int(match.group(1)) if match else 0


def run_vadd(mode: int, state: State, c: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    if state.poisoned:
        raise DriverError(STICKY)
    if mode == 3:
        state.poisoned = True
        return
    c[:] = a - b if mode == 1 else a + b


# ----------------------------------------------------------------------------
# CuPy
# ----------------------------------------------------------------------------
def make_cupy(state: State) -> dict[str, types.ModuleType]:
    cupy = types.ModuleType("cupy")
    cuda = types.ModuleType("cupy.cuda")
    compiler = types.ModuleType("cupy.cuda.compiler")
    runtime = types.ModuleType("cupy.cuda.runtime")

    class CompileException(Exception):
        def get_message(self) -> str:
            return f"NVRTC_ERROR_COMPILATION: {self}"

    class MemoryPointer:
        def __init__(self, array: np.ndarray) -> None:
            self.array, self.ptr = array, array.ctypes.data

        def copy_from_device_async(self, src: "MemoryPointer", size: int, stream=None) -> None:
            assert size == self.array.nbytes == src.array.nbytes
            np.copyto(self.array, src.array)

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
        def __init__(self, mode: int) -> None:
            self.mode = mode
            self.num_regs = 255 if mode == 4 else 20
            self.shared_size_bytes = 0
            self.local_size_bytes = 0
            self.max_threads_per_block = 256 if mode == 4 else 1024
            self._dyn = 48 * 1024

        @property
        def max_dynamic_shared_size_bytes(self) -> int:
            return self._dyn

        @max_dynamic_shared_size_bytes.setter
        def max_dynamic_shared_size_bytes(self, value: int) -> None:
            state.dynamic_smem_opt_in.append(value)
            self._dyn = value

        def __call__(self, grid, block, args, shared_mem=0):
            assert isinstance(grid, tuple) and isinstance(block, tuple) and isinstance(args, tuple)
            if shared_mem > self._dyn:
                raise DriverError("CUDA_ERROR_INVALID_VALUE: invalid argument")
            state.launches.append((grid, block, shared_mem))
            c, a, b, n = args
            assert isinstance(n, np.int32)
            run_vadd(self.mode, state, c.host, a.host, b.host)

    class RawModule:
        def __init__(self, *, code, options=(), name_expressions=None) -> None:
            assert isinstance(options, tuple)
            self.code, self.name_expressions = code, name_expressions

        def get_function(self, name: str) -> RawKernel:
            assert self.name_expressions is not None and name in self.name_expressions
            if mode_of(self.code) == 2:
                raise CompileException("kernel.cu(11): error: identifier \"this\" is undefined")
            return RawKernel(mode_of(self.code))

    class Stream:
        ptr = 0

        def synchronize(self) -> None:
            state.sync()

    class Event:
        def record(self, stream=None) -> None:
            return None

        def synchronize(self) -> None:
            state.sync()

    class Device:
        def __init__(self, device_id: int = 0) -> None:
            self.id = device_id

        def use(self) -> None:
            return None

        def synchronize(self) -> None:
            state.sync()

    class Pool:
        def free_all_blocks(self) -> None:
            return None

    compiler.CompileException = CompileException
    runtime.getDeviceCount = lambda: 1
    runtime.getDeviceProperties = lambda i: dict(PROPS)
    runtime.driverGetVersion = lambda: 12040
    runtime.runtimeGetVersion = lambda: 12020
    runtime.memsetAsync = lambda ptr, value, size, stream: None
    cuda.compiler, cuda.runtime = compiler, runtime
    cuda.Device, cuda.Event = Device, Event
    cuda.get_current_stream = lambda: Stream()
    cuda.get_elapsed_time = lambda start, end: 0.25
    cupy.cuda = cuda
    cupy.__version__ = "13.0.0+fake"
    cupy.RawModule = RawModule
    cupy.asarray = ndarray
    cupy.asnumpy = lambda d: d.host.copy()
    cupy.empty = lambda n, dtype: ndarray(np.empty(n, dtype))
    cupy.uint8 = np.uint8
    cupy.get_default_memory_pool = lambda: Pool()
    return {"cupy": cupy, "cupy.cuda": cuda, "cupy.cuda.compiler": compiler, "cupy.cuda.runtime": runtime}


# ----------------------------------------------------------------------------
# PyCUDA
# ----------------------------------------------------------------------------
def make_pycuda(state: State) -> dict[str, types.ModuleType]:
    pycuda = types.ModuleType("pycuda")
    drv = types.ModuleType("pycuda.driver")
    comp = types.ModuleType("pycuda.compiler")

    class Error(Exception):
        pass

    class CompileError(Error):
        pass

    attrs = types.SimpleNamespace(**{k: k for k in (
        "MULTIPROCESSOR_COUNT", "MAX_THREADS_PER_BLOCK", "MAX_SHARED_MEMORY_PER_BLOCK",
        "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR", "MAX_REGISTERS_PER_BLOCK",
        "WARP_SIZE", "L2_CACHE_SIZE", "MAX_BLOCK_DIM_X", "MAX_BLOCK_DIM_Y", "MAX_BLOCK_DIM_Z",
        "MAX_GRID_DIM_X", "MAX_GRID_DIM_Y", "MAX_GRID_DIM_Z")})
    values = {
        "MULTIPROCESSOR_COUNT": 132, "MAX_THREADS_PER_BLOCK": 1024, "MAX_SHARED_MEMORY_PER_BLOCK": 48 * 1024,
        "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 227 * 1024, "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR": 228 * 1024,
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
            Context.stack.pop()

        @staticmethod
        def synchronize() -> None:
            state.sync()

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
        def __init__(self, mode: int) -> None:
            self.mode = mode
            self.attrs = {"NUM_REGS": 255 if mode == 4 else 20, "SHARED_SIZE_BYTES": 0, "LOCAL_SIZE_BYTES": 0,
                          "MAX_THREADS_PER_BLOCK": 256 if mode == 4 else 1024,
                          "MAX_DYNAMIC_SHARED_SIZE_BYTES": 48 * 1024}

        def prepare(self, typestr: str) -> None:
            assert typestr == "PPPi", typestr
            self.typestr = typestr

        def get_attribute(self, name: str) -> int:
            return self.attrs[name]

        def set_attribute(self, name: str, value: int) -> None:
            state.dynamic_smem_opt_in.append(value)
            self.attrs[name] = value

        def prepared_call(self, grid, block, *args, shared_size=0):
            assert self.typestr and len(args) == len(self.typestr)
            if shared_size > self.attrs["MAX_DYNAMIC_SHARED_SIZE_BYTES"]:
                raise Error("cuLaunchKernel failed: invalid argument")
            state.launches.append((grid, block, shared_size))
            c, a, b = (memory[p].view(np.float32) for p in args[:3])
            run_vadd(self.mode, state, c, a, b)

    class Module:
        def __init__(self, cubin: bytes) -> None:
            self.cubin = cubin

        def get_function(self, symbol: str) -> Function:
            assert symbol.encode() in self.cubin
            return Function(mode_of(self.cubin.decode(errors="replace")))

    class Event:
        def record(self, stream=None) -> None:
            return None

        def synchronize(self) -> None:
            state.sync()

        def time_till(self, end: "Event") -> float:
            return 0.25

    def compile(source, nvcc="nvcc", options=None, keep=False, no_extern_c=False, arch=None, code=None,
                cache_dir=None, include_dirs=(), target="cubin"):
        assert no_extern_c is True
        if mode_of(source) == 2:
            raise CompileError("nvcc compilation of kernel.cu failed\n[stderr]:\nkernel.cu(11): error: ...")
        name = re.search(r"__global__ void (\w+)", source).group(1)
        symbol = name if 'extern "C"' in source else f"_Z{len(name)}{name}PfPKfS2_i"
        return source.encode() + b"\0.text." + symbol.encode() + b"\0" + symbol.encode() + b"\0"

    def memcpy_htod(dst: DeviceAllocation, src: np.ndarray) -> None:
        dst.buf[:src.nbytes] = src.view(np.uint8).ravel()

    def memcpy_dtoh(dst: np.ndarray, src: DeviceAllocation) -> None:
        dst.view(np.uint8).ravel()[:] = src.buf[:dst.nbytes]

    def memcpy_dtod(dst: DeviceAllocation, src: DeviceAllocation, size: int) -> None:
        dst.buf[:size] = src.buf[:size]

    drv.init = lambda: None
    drv.Error, drv.CompileError = Error, CompileError
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
