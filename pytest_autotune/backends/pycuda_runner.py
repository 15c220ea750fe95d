"""The ``pycuda`` runner: CUDA kernels compiled with nvcc through PyCUDA.

Same contract as the cupy runner. PyCUDA compiles with nvcc to a cubin
(``pycuda.compiler.compile``, which caches on disk), the runner finds the
kernel's symbol in the cubin (plain name for ``extern "C"`` kernels, the
mangled name otherwise) and loads it with ``module_from_buffer``. Template
kernels are instantiated by a host-side reference to ``&kernel<args>``
appended to the source. Works in the device's primary context, so it can
share it with CuPy or other libraries. Timing uses ``pycuda.driver.Event``.
"""
from __future__ import annotations

import shutil
import warnings
from typing import Any

import numpy as np

from ..measure.timing import MeasureOptions
from .cuda_common import CudaExecutor, check_cuda_spec, find_kernel_symbol, instantiation_reference
from ..execution.device import cuda_constants, detect_cuda_device_pycuda
from ..errors import BackendUnavailable, SpecError
from ..execution.executor import CompileFailed
from .ncu import NsightProfiling
from ..execution.isolation import HostedRunner
from ..execution.kernel import Geometry, KernelSpec


def import_pycuda(device_id: int = 0, nvcc: str = "nvcc") -> Any:
    """Import and initialise PyCUDA's driver; BackendUnavailable when that cannot work."""
    try:
        import pycuda.driver as drv
    except ImportError as exc:
        raise BackendUnavailable(f"the pycuda runner needs PyCUDA (pip install pycuda): {exc}") from None
    try:
        drv.init()
        count = drv.Device.count()
    except Exception as exc:
        raise BackendUnavailable(f"no usable CUDA device for PyCUDA: {exc}") from None
    if count <= device_id:
        raise BackendUnavailable(f"CUDA device {device_id} requested but {count} device(s) present")
    if shutil.which(nvcc) is None:
        raise BackendUnavailable(f"the pycuda runner compiles with nvcc; {nvcc!r} is not on PATH")
    return drv


# Format characters PyCUDA's argument packer (pycuda/_pvt_struct) understands: the
# struct module's integer, bool and float codes plus "F"/"D" for complex64/128.
# float16 ("e") is not among them: a half is passed as its 16 bits ("H"), which
# has the size and alignment of __half.
_PVT_STRUCT_CODES = frozenset("bBhHiIlLqQ?fdFD")


def prepared_arguments(args: list[Any], buffers: list[Any]) -> tuple[str, list[Any]]:
    """``prepare`` format string and ``prepared_call`` values for ``args`` (device pointers for arrays)."""
    codes, values = [], []
    for i, (arg, buf) in enumerate(zip(args, buffers)):
        if isinstance(arg, np.ndarray):
            codes.append("P")
            values.append(int(buf))
            continue
        scalar = np.asarray(arg)
        if scalar.dtype == np.float16:
            codes.append("H")
            values.append(int(scalar.view(np.uint16)))
        elif scalar.dtype.char in _PVT_STRUCT_CODES:
            codes.append(scalar.dtype.char)
            values.append(arg)
        else:
            raise SpecError(f"argument {i} is a {scalar.dtype} scalar, which PyCUDA cannot pass to a kernel")
    return "".join(codes), values


class PycudaExecutor(CudaExecutor):
    """In-process half of :class:`PycudaRunner`."""

    name = "pycuda"

    def __init__(
        self,
        spec: KernelSpec,
        measure: MeasureOptions | None = None,
        *,
        device_id: int = 0,
        nvcc: str = "nvcc",
        cache_dir: str | None = None,
    ) -> None:
        super().__init__(spec, measure)
        if spec.lang != "cuda":
            raise SpecError(f"the pycuda runner compiles CUDA source, not {spec.lang!r}")
        drv = self.drv = import_pycuda(device_id, nvcc)
        from pycuda.compiler import compile as nvcc_compile

        self._nvcc_compile = nvcc_compile
        self.nvcc = nvcc
        self.cache_dir = cache_dir
        self.buffers: list[Any] = []
        self.pristine: dict[int, Any] = {}
        self._flush: Any = None
        self.context = drv.Device(device_id).retain_primary_context()
        self.context.push()
        try:
            self._set_up(spec, device_id)
        except BaseException:
            # A context left pushed makes PyCUDA abort the process at exit
            # ("context stack was not empty upon module cleanup").
            self.close()
            raise

    def _set_up(self, spec: KernelSpec, device_id: int) -> None:
        """Device query and buffers, inside the pushed context."""
        drv = self.drv
        self._device = detect_cuda_device_pycuda(device_id)
        self._constants = cuda_constants(self._device)
        self.default_smem = int(self._device.properties.get("max_shared_memory_per_block_default", 48 * 1024))
        self.include_dirs = [str(spec.source_file.parent)] if spec.source_file else []
        self.outputs = spec.output_indices
        for i, arg in enumerate(spec.args):
            if isinstance(arg, np.ndarray):
                alloc = drv.mem_alloc(max(arg.nbytes, 1))
                self.buffers.append(alloc)
                drv.memcpy_htod(alloc, arg)
                if i in self.outputs:
                    copy = drv.mem_alloc(max(arg.nbytes, 1))
                    self.pristine[i] = copy
                    drv.memcpy_dtod(copy, alloc, arg.nbytes)
            else:
                self.buffers.append(arg)
        self.typestr, self.cargs = prepared_arguments(spec.args, self.buffers)
        self.start_event, self.end_event = drv.Event(), drv.Event()
        self._flush_bytes = 0
        self._flush_value = 0
        drv.Context.synchronize()

    # -- compile ---------------------------------------------------------------
    def compile(self, source: str, name: str) -> Any:
        drv = self.drv
        if self.spec.is_template:
            source = source + instantiation_reference(name)
        try:
            with warnings.catch_warnings(record=True) as remarks:
                # PyCUDA reports anything nvcc printed on success as a UserWarning;
                # under filterwarnings=error that would abort the whole search.
                warnings.simplefilter("always")
                cubin = self._nvcc_compile(
                    source,
                    nvcc=self.nvcc,
                    options=list(self.spec.compiler_options),
                    no_extern_c=True,
                    include_dirs=self.include_dirs,
                    cache_dir=self.cache_dir,
                )
        except drv.CompileError as exc:
            raise CompileFailed(str(exc)) from None
        try:
            symbol = find_kernel_symbol(cubin, name)
        except LookupError as exc:
            raise CompileFailed(str(exc)) from None
        try:
            module = drv.module_from_buffer(cubin)
            fn = module.get_function(symbol)
            fn.prepare(self.typestr)
        except Exception as exc:
            raise CompileFailed(f"{type(exc).__name__}: {exc}") from None
        return module, fn, "\n".join(str(w.message) for w in remarks)

    def _attr(self, fn: Any, name: str) -> int:
        return int(fn.get_attribute(getattr(self.drv.function_attribute, name)))

    def kernel_info(self, kernel: Any) -> dict[str, Any]:
        fn = kernel[1]
        return {
            "registers": self._attr(fn, "NUM_REGS"),
            "static_shared_mem": self._attr(fn, "SHARED_SIZE_BYTES"),
            "local_mem": self._attr(fn, "LOCAL_SIZE_BYTES"),
            "max_threads_per_block": self._attr(fn, "MAX_THREADS_PER_BLOCK"),
            **({"compiler_output": kernel[2]} if len(kernel) > 2 and kernel[2] else {}),
        }

    def _allow_dynamic_smem(self, fn: Any, smem: int) -> None:
        fn.set_attribute(self.drv.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)

    def _constant_symbol(self, kernel: Any, name: str) -> tuple[int | None, Any]:
        pointer, size = kernel[0].get_global(name)  # (device pointer, bytes): pycuda src/cpp/cuda.hpp
        return int(size), lambda value: self.drv.memcpy_htod(pointer, value)

    # -- run -------------------------------------------------------------------
    def restore_outputs(self) -> None:
        for i, copy in self.pristine.items():
            self.drv.memcpy_dtod(self.buffers[i], copy, self.spec.args[i].nbytes)

    def flush_cache(self) -> None:
        if self._flush is None:
            self._flush_bytes = 2 * int(self._constants.get("l2_cache_size") or 64 << 20)
            self._flush = self.drv.mem_alloc(self._flush_bytes)
        self._flush_value = (self._flush_value + 1) & 0xFF
        self.drv.memset_d8(self._flush, self._flush_value, self._flush_bytes)

    def _launch(self, fn: Any, geometry: Geometry) -> None:
        grid, block, smem = geometry
        fn.prepared_call(grid, block, *self.cargs, shared_size=smem)

    def _synchronize(self) -> None:
        self.drv.Context.synchronize()

    def timed_run(self, kernel: Any, geometry: Geometry) -> float:
        self.start_event.record()
        self._launch(kernel[1], geometry)
        self.end_event.record()
        self.end_event.synchronize()
        return float(self.start_event.time_till(self.end_event))

    def fetch_outputs(self) -> list[Any]:
        out: list[Any] = []
        for i, (arg, buf) in enumerate(zip(self.spec.args, self.buffers)):
            if i in self.outputs:
                host = np.empty_like(arg)
                self.drv.memcpy_dtoh(host, buf)
                out.append(host)
            else:
                out.append(arg)
        return out

    def close(self) -> None:
        for alloc in [*self.buffers, *self.pristine.values(), self._flush]:
            if alloc is not None and hasattr(alloc, "free"):
                try:
                    alloc.free()
                except Exception:
                    pass
        self.buffers, self.pristine, self._flush = [], {}, None
        try:
            self.context.pop()
        except Exception:
            pass


class PycudaRunner(NsightProfiling, HostedRunner):
    """Tune CUDA kernels with PyCUDA/nvcc. Options: ``isolate``, ``measure``, ``device_id``, ``nvcc``, ``cache_dir``."""

    name = "pycuda"
    executor_target = "pytest_autotune.backends.pycuda_runner:PycudaExecutor"

    def __init__(
        self,
        spec: KernelSpec,
        *,
        isolate: bool = True,
        measure: MeasureOptions | dict[str, Any] | None = None,
        device_id: int = 0,
        nvcc: str = "nvcc",
        cache_dir: str | None = None,
    ) -> None:
        check_cuda_spec(spec, "pycuda")
        self.spec = spec
        self.device_id = device_id
        super().__init__(isolate=isolate, measure=measure, spec=spec, device_id=device_id, nvcc=nvcc, cache_dir=cache_dir)
