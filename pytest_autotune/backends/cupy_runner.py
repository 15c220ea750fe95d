"""The ``cupy`` runner: CUDA kernels compiled with NVRTC through ``cupy.RawModule``.

Every kernel name goes through ``name_expressions``, so NVRTC instantiates
templates (``kernel_name="matmul<tx, ty>"``) and resolves mangled names (a
kernel need not be ``extern "C"``). Device buffers are
allocated once per runner; output buffers are restored before every run from
a pristine device copy of the host values (a device-to-device copy, much
cheaper than re-uploading). Timing uses CUDA events around the launch.
cupy is imported lazily, in the process that owns the device.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..measure.timing import MeasureOptions
from .cuda_common import CudaExecutor, check_cuda_spec, constant_symbol_size
from ..execution.device import cuda_constants, detect_cuda_device_cupy
from ..errors import ArtefactUnusable, BackendUnavailable, SpecError
from ..execution.executor import CompileFailed
from .ncu import NsightProfiling
from ..execution.isolation import HostedRunner
from ..execution.kernel import Geometry, KernelSpec


def import_cupy(device_id: int = 0) -> Any:
    """Import cupy and check the device exists; BackendUnavailable otherwise."""
    try:
        import cupy
    except ImportError as exc:
        raise BackendUnavailable("the cupy runner needs CuPy (pip install cupy-cuda13x, or cupy-cuda12x for a "
                                 f"CUDA 12 driver): {exc}") from None
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDARuntimeError without a driver/device
        raise BackendUnavailable(f"no usable CUDA device for CuPy: {exc}") from None
    if count <= device_id:
        raise BackendUnavailable(f"CUDA device {device_id} requested but {count} device(s) present")
    try:  # CuPy 14 ships without the toolkit: NVRTC comes with its [ctk] extra
        cupy.cuda.nvrtc.getVersion()
    except Exception as exc:
        raise BackendUnavailable(
            f"CuPy cannot load NVRTC, so no kernel could compile ({type(exc).__name__}: {exc}); "
            'install the CUDA toolkit libraries: pip install "cupy-cuda13x[ctk]" (or pytest-autotune[cuda]; '
            'for a CUDA 12 driver "cupy-cuda12x[ctk]", pytest-autotune[cuda12])'
        ) from None
    _probe_compile(cupy)
    return cupy


PROBE_KERNEL = 'extern "C" __global__ void pytest_autotune_probe() {}'


def _probe_compile(cupy: Any) -> None:
    """Compile an empty kernel, so a toolchain that can compile nothing makes the runner unavailable.

    NVRTC is not all CuPy needs: every compile also adds the CUDA headers'
    folder, and CuPy raises "Failed to find CUDA headers" when they are
    missing (NVRTC installed alone, without ``[ctk]``). Without this probe
    every configuration would be recorded as a compile failure.
    """
    try:
        cupy.RawModule(code=PROBE_KERNEL).get_function("pytest_autotune_probe")
    except Exception as exc:
        raise BackendUnavailable(
            f"CuPy cannot compile even an empty kernel ({type(exc).__name__}: {exc}); install the CUDA toolkit "
            'libraries and headers: pip install "cupy-cuda13x[ctk]" (or pytest-autotune[cuda]; for a CUDA 12 driver '
            '"cupy-cuda12x[ctk]", pytest-autotune[cuda12])'
        ) from None


class CupyExecutor(CudaExecutor):
    """In-process half of :class:`CupyRunner`.

    CuPy memoizes every compiled module for the life of the process
    (``_get_raw_module``), so a long search would keep thousands of modules
    loaded; every ``forget_modules_every`` configurations the executor clears
    CuPy's memo (``cupy.clear_memo``) and the modules are unloaded once no
    kernel refers to them. Recompiling is not needed: CuPy's disk cache has them.
    """

    name = "cupy"
    forget_modules_every = 64

    def __init__(self, spec: KernelSpec, measure: MeasureOptions | None = None, *, device_id: int = 0) -> None:
        super().__init__(spec, measure)
        if spec.lang != "cuda":
            raise SpecError(f"the cupy runner compiles CUDA source, not {spec.lang!r}")
        cp = self.cp = import_cupy(device_id)
        cp.cuda.Device(device_id).use()
        self._device = detect_cuda_device_cupy(device_id)
        self._constants = cuda_constants(self._device)
        self.default_smem = int(self._device.properties.get("max_shared_memory_per_block_default", 48 * 1024))
        self.stream = cp.cuda.get_current_stream()
        self.options = tuple(spec.compiler_options) + (
            (f"-I{spec.source_file.parent}",) if spec.source_file else ()
        )
        self.buffers = [cp.asarray(a) if isinstance(a, np.ndarray) else a for a in spec.args]
        self.outputs = spec.output_indices
        self.pristine = {i: self.buffers[i].copy() for i in self.outputs}
        self.launch_args = tuple(self.buffers)
        self.start_event, self.end_event = cp.cuda.Event(), cp.cuda.Event()
        self._flush: Any = None
        self._flush_value = 0
        self._compiled_since_clear = 0
        cp.cuda.Device(device_id).synchronize()

    # -- compile ---------------------------------------------------------------
    def compile(self, source: str, name: str) -> Any:
        cp = self.cp
        from cupy.cuda.compiler import CompileException

        try:
            # name_expressions for every kernel: NVRTC then resolves the mangled
            # name, so templates and kernels without extern "C" both work.
            module = cp.RawModule(code=source, options=self.options, name_expressions=[name])
            kernel = module.get_function(name)
            kernel.num_regs  # noqa: B018 - forces compile + load so errors surface here
        except CompileException as exc:
            message = exc.get_message() if hasattr(exc, "get_message") else str(exc)
            raise CompileFailed(message) from None
        except Exception as exc:  # e.g. module load (JIT/ptxas) failures
            raise CompileFailed(f"{type(exc).__name__}: {exc}") from None
        return module, kernel

    def load(self, artefact: Any, source: str, name: str) -> Any:
        """The cubin the NVRTC compile stage built, loaded under its lowered name.

        A cubin the driver refuses (a driver older than the NVRTC that built
        it, say) raises :class:`ArtefactUnusable` with the driver's error: the
        executor compiles it here through CuPy instead and marks the
        measurement ``extra["fallback"]``, so the report shows the
        compile-ahead pipeline was not used.
        """
        try:
            module = self.cp.RawModule(path=artefact.path)
            kernel = module.get_function(artefact.symbol)
            kernel.num_regs  # noqa: B018 - loads the module now
        except Exception as exc:
            raise ArtefactUnusable(f"cubin {artefact.path} did not load: {type(exc).__name__}: {exc}") from None
        return module, kernel

    def kernel_info(self, kernel: Any) -> dict[str, Any]:
        fn = kernel[1]
        return {
            "registers": int(fn.num_regs),
            "static_shared_mem": int(fn.shared_size_bytes),
            "local_mem": int(fn.local_size_bytes),
            "max_threads_per_block": int(fn.max_threads_per_block),
        }

    def _allow_dynamic_smem(self, fn: Any, smem: int) -> None:
        fn.max_dynamic_shared_size_bytes = smem

    def _constant_symbol(self, kernel: Any, name: str) -> tuple[int | None, Any]:
        module = kernel[0]
        pointer = module.get_global(name)  # a MemoryPointer over the symbol (cupy/_core/raw.pyx), of size 0
        size = constant_symbol_size(module.module.ptr, name)

        return size, lambda value: pointer.copy_from_host(value.ctypes.data, value.nbytes)  # synchronous

    def release(self, kernel: Any) -> None:
        self._compiled_since_clear += 1
        if self._compiled_since_clear >= self.forget_modules_every:
            self._compiled_since_clear = 0
            self.cp.clear_memo()

    # -- run -------------------------------------------------------------------
    def restore_outputs(self) -> None:
        for i in self.outputs:
            dst, src = self.buffers[i], self.pristine[i]
            dst.data.copy_from_device_async(src.data, dst.nbytes, self.stream)

    def flush_cache(self) -> None:
        cp = self.cp
        if self._flush is None:
            l2 = int(self._constants.get("l2_cache_size") or 64 << 20)
            self._flush = cp.empty(2 * l2, dtype=cp.uint8)
        self._flush_value = (self._flush_value + 1) & 0xFF
        cp.cuda.runtime.memsetAsync(self._flush.data.ptr, self._flush_value, self._flush.nbytes, self.stream.ptr)

    def _launch(self, fn: Any, geometry: Geometry) -> None:
        grid, block, smem = geometry
        fn(grid, block, self.launch_args, shared_mem=smem)

    def _synchronize(self) -> None:
        self.stream.synchronize()

    def timed_run(self, kernel: Any, geometry: Geometry) -> float:
        self.start_event.record(self.stream)
        self._launch(kernel[1], geometry)
        self.end_event.record(self.stream)
        self.end_event.synchronize()
        return float(self.cp.cuda.get_elapsed_time(self.start_event, self.end_event))

    def fetch_outputs(self) -> list[Any]:
        out: list[Any] = []
        for i, (arg, buf) in enumerate(zip(self.spec.args, self.buffers)):
            out.append(self.cp.asnumpy(buf) if i in self.outputs else arg)
        return out

    def close(self) -> None:
        self.buffers, self.launch_args, self.pristine = [], (), {}
        self._flush = None
        try:
            self.cp.get_default_memory_pool().free_all_blocks()
        except Exception:
            pass


class CupyRunner(NsightProfiling, HostedRunner):
    """Tune CUDA kernels with CuPy/NVRTC. Options: ``isolate`` (default True), ``measure``, ``device_id``."""

    name = "cupy"
    executor_target = "pytest_autotune.backends.cupy_runner:CupyExecutor"

    def __init__(
        self,
        spec: KernelSpec,
        *,
        isolate: bool = True,
        measure: MeasureOptions | dict[str, Any] | None = None,
        device_id: int = 0,
    ) -> None:
        check_cuda_spec(spec, "cupy")
        self.spec = spec
        self.device_id = device_id
        super().__init__(isolate=isolate, measure=measure, spec=spec, device_id=device_id)

    def compile_stage(self) -> Any:
        """NVRTC in this process for the device's architecture (None without cuda-bindings/NVRTC here)."""
        from .nvrtc import NvrtcCompileStage

        return NvrtcCompileStage.for_device(self.spec, self.device().properties.get("compute_capability"),
                                            self.constants())
