"""The ``opencl`` runner: OpenCL C kernels through PyOpenCL, on any OpenCL device.

Parameters reach the kernel as ``#define`` lines (:func:`~.kernel.render_source`,
as for every source runner); the global and local work sizes come from the
same launch geometry as CUDA's grid and block (:func:`~.kernel.launch_geometry`,
then :func:`~.kernel.ndrange`: global = grid * block). Arguments: numpy arrays
become device buffers (allocated once per runner; outputs restored before
every run from a pristine device copy), numpy scalars are passed by value and
:class:`~.kernel.LocalMemory` entries become ``__local`` pointer arguments
sized per configuration. Every launch is timed with the queue's profiling
events (``PROFILING_ENABLE``), not the host clock.

Failures: a build error is COMPILE with the build log; geometry or local
memory beyond the device's or the compiled kernel's limits is INVALID before
the launch; an enqueue the runtime refuses (``INVALID_WORK_GROUP_SIZE``, for
instance from ``reqd_work_group_size``, ``OUT_OF_RESOURCES``) is LAUNCH; an
error while waiting for the kernel is RUNTIME and replaces the worker process.
The first launch of a configuration (its verification run) is watched with
``compile_timeout_s`` rather than ``watchdog_s``: PoCL, like drivers that JIT,
compiles the code for a work-group size inside that launch.
With ``check="races"`` or ``"memory"`` each configuration first runs once under
Oclgrind (:mod:`.oclgrind`). pyopencl is imported only in the process that
owns the device.
"""
from __future__ import annotations

import os
import re
import warnings
from typing import Any, Mapping, Sequence

import numpy as np

from ..measure.timing import EarlyStop, MeasureOptions
from ..results import FailureKind, Measurement
from ..execution.device import DeviceInfo
from ..errors import BackendUnavailable, InvalidConfiguration, SpecError
from ..execution.executor import CompileFailed, CompiledKernelExecutor, RunFailure, check_launch_limits
from ..execution.isolation import HostedRunner
from ..execution.kernel import Geometry, KernelSpec, LocalMemory, ndrange
from .opencl_device import detect_opencl_device, opencl_constants, select_device

_MAX_LOG = 20000
# Status codes with which the runtime refuses an enqueue without harming the context.
_LAUNCH_REFUSALS = (
    "INVALID_WORK_GROUP_SIZE",
    "INVALID_WORK_ITEM_SIZE",
    "INVALID_GLOBAL_WORK_SIZE",
    "INVALID_GLOBAL_OFFSET",
    "INVALID_KERNEL_ARGS",
    "INVALID_ARG_SIZE",
    "INVALID_ARG_VALUE",
    "OUT_OF_RESOURCES",
    "OUT_OF_HOST_MEMORY",
    "MEM_OBJECT_ALLOCATION_FAILURE",
)
_SAVED_SOURCE = re.compile(r"\n\(source saved as (\S+)\)")


def import_pyopencl() -> Any:
    try:
        import pyopencl
    except ImportError as exc:
        raise BackendUnavailable(f"the opencl runner needs PyOpenCL (pip install pytest-autotune[opencl]): {exc}") from None
    return pyopencl


def check_opencl_spec(spec: Any) -> None:
    """What the opencl runner cannot run, said before any device is touched."""
    if not isinstance(spec, KernelSpec):
        raise SpecError(f"OpenCLRunner needs a KernelSpec, got {type(spec).__name__}")
    if spec.lang != "opencl":
        raise SpecError(f"the opencl runner compiles OpenCL C (.cl or lang='opencl'), not {spec.lang!r} source")
    if spec.is_template:
        raise SpecError(f"kernel_name {spec.kernel_name!r}: OpenCL C has no templates; use #define parameters")
    if spec.shared_mem is not None:
        raise SpecError("shared_mem: OpenCL sizes local memory per argument; pass "
                        "LocalMemory(nbytes) among the args instead")


def local_sizes(spec: KernelSpec, params: Mapping[str, Any]) -> dict[int, int]:
    """Bytes of each ``LocalMemory`` argument for ``params`` (InvalidConfiguration when not positive)."""
    return {i: a.size(params) for i, a in enumerate(spec.args) if isinstance(a, LocalMemory)}


def build_options(spec: KernelSpec) -> list[str]:
    return [*spec.compiler_options, *([f"-I{spec.source_file.parent}"] if spec.source_file else [])]


def build_failure_text(exc: BaseException) -> str:
    """PyOpenCL's build error (which carries the build log), without the temporary copy it leaves behind.

    On platforms where PyOpenCL caches binaries itself it saves the failing
    source to a temporary file and names it in the message; a tuning run
    with many failing configurations would litter the temporary directory.
    """
    text = str(exc)
    for path in _SAVED_SOURCE.findall(text):
        try:
            os.unlink(path)
        except OSError:
            pass
    return _SAVED_SOURCE.sub("", text).strip()[-_MAX_LOG:]


def build_kernel(cl: Any, context: Any, source: str, name: str, options: Sequence[str]) -> tuple[Any, Any]:
    """``(program, kernel)``; CompileFailed with the build log or the kernels the program does have."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cl.CompilerWarning)  # the log is read from the program instead
        try:
            program = cl.Program(context, source).build(options=list(options))
        except cl.Error as exc:
            raise CompileFailed(build_failure_text(exc)) from None
    try:
        kernel = cl.Kernel(program, name)
    except cl.Error:
        names = program.get_info(cl.program_info.KERNEL_NAMES) or "none"
        raise CompileFailed(f"kernel {name!r} not found in the program (kernels: {names})") from None
    return program, kernel


def set_kernel_args(cl: Any, kernel: Any, values: Sequence[Any], sizes: Mapping[int, int]) -> None:
    """Bind buffers, scalars and ``__local`` sizes; a mismatch with the kernel's signature is COMPILE."""
    args = [cl.LocalMemory(sizes[i]) if i in sizes else v for i, v in enumerate(values)]
    try:
        kernel.set_args(*args)
    except (cl.Error, TypeError, ValueError) as exc:
        raise CompileFailed(f"the arguments do not fit kernel {kernel.function_name!r}: {exc}") from None


def opencl_failure(cl: Any, exc: BaseException, stage: str) -> RunFailure:
    """Classify an exception raised while launching (``"launch"``) or waiting for (``"run"``) a kernel.

    A refused enqueue (work-group size, resources, arguments) leaves the
    context usable; anything else, and every error while the kernel runs,
    may have broken it, so the worker is replaced.
    """
    if isinstance(exc, RunFailure):
        return exc
    text = f"{type(exc).__name__}: {exc}"
    if stage == "launch":
        refusals = {getattr(cl.status_code, n, None) for n in _LAUNCH_REFUSALS} - {None}
        code = getattr(exc, "code", None)
        return RunFailure(FailureKind.LAUNCH, text, poisoned=not (isinstance(exc, cl.Error) and code in refusals))
    return RunFailure(FailureKind.RUNTIME, text, poisoned=True)


class DeviceBuffers:
    """The kernel's arguments on one OpenCL context: buffers for arrays, pristine copies of the outputs."""

    def __init__(self, cl: Any, context: Any, queue: Any, spec: KernelSpec) -> None:
        self.cl, self.queue, self.spec = cl, queue, spec
        flags = cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR
        # an empty array is a NULL buffer: OpenCL has no zero-sized buffers
        self.values = [(cl.Buffer(context, flags, hostbuf=a) if a.nbytes else None) if isinstance(a, np.ndarray) else a
                       for a in spec.args]
        self.outputs = [i for i in spec.output_indices if spec.args[i].nbytes]
        self.pristine = {i: cl.Buffer(context, flags, hostbuf=spec.args[i]) for i in self.outputs}

    def restore(self) -> None:
        for i in self.outputs:
            self.cl.enqueue_copy(self.queue, self.values[i], self.pristine[i])

    def fetch(self) -> list[Any]:
        out: list[Any] = []
        for i, arg in enumerate(self.spec.args):
            if i in self.pristine:
                host = np.empty_like(arg)
                self.cl.enqueue_copy(self.queue, host, self.values[i])  # blocking
                out.append(host)
            else:
                out.append(arg)
        return out

    def release(self) -> None:
        for buffer in [*self.pristine.values(), *self.values]:
            if isinstance(buffer, self.cl.Buffer):
                buffer.release()
        self.values, self.pristine = [], {}


class OpenCLExecutor(CompiledKernelExecutor):
    """In-process half of :class:`OpenCLRunner`."""

    name = "opencl"

    def __init__(self, spec: KernelSpec, measure: MeasureOptions | None = None, *, device: str | int | None = None) -> None:
        super().__init__(spec, measure)
        check_opencl_spec(spec)
        cl = self.cl = import_pyopencl()
        self.cl_device = select_device(cl, device)
        self._device = detect_opencl_device(cl, self.cl_device)
        self._constants = opencl_constants(self._device)
        self.context = cl.Context([self.cl_device])
        self.queue = cl.CommandQueue(self.context, properties=cl.command_queue_properties.PROFILING_ENABLE)
        self.options = build_options(spec)
        self.args = DeviceBuffers(cl, self.context, self.queue, spec)
        self.local: dict[int, int] = {}
        self._flush: Any = None
        self._flush_value = 0
        self.queue.finish()

    def device(self) -> DeviceInfo:
        return self._device

    def constants(self) -> dict[str, Any]:
        return dict(self._constants)

    def classify(self, exc: BaseException, stage: str) -> RunFailure:
        return opencl_failure(self.cl, exc, stage)

    def evaluate(self, params: Mapping[str, Any], keep_outputs: bool = False,
                 stop: EarlyStop | None = None) -> Measurement:
        try:
            self.local = local_sizes(self.spec, params)
        except InvalidConfiguration as exc:
            return Measurement.failed(params, FailureKind.INVALID, str(exc))
        return super().evaluate(params, keep_outputs, stop=stop)

    # -- compile ---------------------------------------------------------------
    def check_geometry(self, geometry: Geometry) -> str | None:
        reason = check_launch_limits(geometry, self._constants)
        total = sum(self.local.values())
        if reason is None and total > self._constants["local_mem_size"]:
            reason = (f"{total} bytes of LocalMemory arguments exceed the device's "
                      f"{self._constants['local_mem_size']} bytes of local memory")
        return reason

    def compile(self, source: str, name: str) -> Any:
        program, kernel = build_kernel(self.cl, self.context, source, name, self.options)
        set_kernel_args(self.cl, kernel, self.args.values, self.local)
        return program, kernel

    def kernel_info(self, kernel: Any) -> dict[str, Any]:
        program, fn = kernel
        cl, dev = self.cl, self.cl_device
        info = cl.kernel_work_group_info
        facts = {
            "work_group_size": int(fn.get_work_group_info(info.WORK_GROUP_SIZE, dev)),
            "local_mem": int(fn.get_work_group_info(info.LOCAL_MEM_SIZE, dev)),
            "private_mem": int(fn.get_work_group_info(info.PRIVATE_MEM_SIZE, dev)),
            "preferred_work_group_multiple": int(fn.get_work_group_info(info.PREFERRED_WORK_GROUP_SIZE_MULTIPLE, dev)),
        }
        log = (program.get_build_info(dev, cl.program_build_info.LOG) or "").strip()
        if log:
            facts["build_log"] = log[-_MAX_LOG:]
        return facts

    def check_compiled(self, kernel: Any, geometry: Geometry) -> str | None:
        facts = self.kernel_info(kernel)
        block = geometry[1]
        threads = block[0] * block[1] * block[2]
        if threads > facts["work_group_size"]:
            return f"{threads} work-items per group exceed this kernel's limit of {facts['work_group_size']}"
        if facts["local_mem"] > self._constants["local_mem_size"]:
            return (f"the kernel uses {facts['local_mem']} bytes of local memory; the device has "
                    f"{self._constants['local_mem_size']}")
        return None

    # -- run -------------------------------------------------------------------
    def restore_outputs(self) -> None:
        self.args.restore()

    def flush_cache(self) -> None:
        cl = self.cl
        if self._flush is None:
            size = 2 * int(self._constants.get("global_mem_cache_size") or 32 << 20)
            self._flush = cl.Buffer(self.context, cl.mem_flags.READ_WRITE, size)
        self._flush_value = (self._flush_value + 1) & 0xFF
        cl.enqueue_fill_buffer(self.queue, self._flush, np.uint8(self._flush_value), 0, self._flush.size)

    def _enqueue(self, kernel: Any, geometry: Geometry) -> Any:
        global_size, local_size = ndrange(geometry)
        try:
            return self.cl.enqueue_nd_range_kernel(self.queue, kernel[1], global_size, local_size)
        except Exception as exc:
            raise opencl_failure(self.cl, exc, "launch") from None

    def _wait(self, event: Any) -> None:
        try:
            event.wait()
        except Exception as exc:
            raise opencl_failure(self.cl, exc, "run") from None

    def run_once(self, kernel: Any, geometry: Geometry) -> None:
        """The verification run: the first launch of a work-group size, which PoCL compiles for first."""
        self.heartbeat("jit")
        self._wait(self._enqueue(kernel, geometry))
        self.heartbeat("run")

    def timed_run(self, kernel: Any, geometry: Geometry) -> float:
        event = self._enqueue(kernel, geometry)
        self._wait(event)
        return (event.profile.end - event.profile.start) * 1e-6

    def fetch_outputs(self) -> list[Any]:
        return self.args.fetch()

    def close(self) -> None:
        try:
            self.queue.finish()
        except Exception:
            pass
        self.args.release()
        self._flush = None


class OpenCLRunner(HostedRunner):
    """Tune OpenCL C kernels with PyOpenCL.

    Options: ``isolate`` (default True), ``measure``, ``device`` (a selector,
    see :mod:`.opencl_device`; default ``$PYTEST_AUTOTUNE_DEVICE``, then
    ``$PYOPENCL_CTX``, then the first GPU/accelerator/CPU device). A spec with
    ``check`` set is first run under Oclgrind for each configuration; one
    with races or out-of-bounds accesses returns that failure, never timed.
    """

    name = "opencl"
    executor_target = "pytest_autotune.backends.opencl_runner:OpenCLExecutor"

    def __init__(self, spec: KernelSpec, *, isolate: bool = True,
                 measure: MeasureOptions | dict[str, Any] | None = None, device: str | int | None = None) -> None:
        check_opencl_spec(spec)
        self.spec = spec
        super().__init__(isolate=isolate, measure=measure, spec=spec, device=device)
