"""The evaluate flow shared by compiled-kernel backends (cupy, pycuda, c).

An *executor* is the in-process half of a runner: it owns the device buffers
and evaluates one configuration at a time. :mod:`.isolation` hosts it either
in the calling process or in a worker process. The order of steps is fixed
here so every backend fails the same way for the same reason:

    geometry + device limits  -> INVALID    (nothing compiled yet)
    compile                   -> COMPILE    (compiler log in ``detail``)
    kernel resource limits    -> RESOURCES  (registers, shared memory; the limit is named)
    verification run          -> LAUNCH / RUNTIME
    compare outputs           -> WRONG_OUTPUT
    warm-up + timed runs      -> Measurement with every sample

The verification run doubles as the first warm-up run.
"""
from __future__ import annotations

import abc
import contextlib
import hashlib
import traceback
from dataclasses import dataclass
from time import perf_counter
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..errors import AutotuneError
from ..measure.timing import EarlyStop, MeasureOptions, TimingStats, time_runs
from ..results import FailureKind, Measurement
from ..measure.verify import verify_outputs
from .device import DeviceInfo
from ..errors import ArtefactUnusable, InvalidConfiguration, SpecError
from .kernel import Geometry, KernelSpec, instantiated_name, launch_geometry, render_source

# "jit": a first launch during which the runtime may still be compiling (PoCL builds each work-group
# size's code then); it gets the compile time-out, but a crash in it is the kernel's (RUNTIME).
PHASES = ("idle", "setup", "compile", "run", "jit")
SLOW_PHASES = ("compile", "jit")


def _no_heartbeat(phase: str) -> None:
    return None


class CompileFailed(AutotuneError):
    """Raised by a backend's ``compile`` hook; ``log`` is the compiler output."""

    def __init__(self, log: str) -> None:
        super().__init__(log)
        self.log = log


@dataclass
class RunFailure(AutotuneError):
    """Raised by backend hooks when a launch or a run fails."""

    kind: FailureKind
    detail: str
    poisoned: bool = False  # the process (CUDA context) is unusable afterwards

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}"


class Executor(abc.ABC):
    """In-process backend behind a runner (see :mod:`.isolation`)."""

    name: str = "executor"

    def __init__(self) -> None:
        self.healthy = True  # False once a sticky error poisoned this process
        self.heartbeat: Callable[[str], None] = _no_heartbeat  # set by the isolation worker
        # Entered around the warm-up and timed runs; a compile pool on the same CPU pauses its compilers there.
        self.timing_window: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext
        # Where a run executes on this thread (a C kernel), the time each timed run spent off its CPU (ms): wall
        # time minus the thread's CPU time, i.e. preempted by another task or taken by the host. None where the
        # runner's clock is not this thread's (a GPU's events). See OFFCPU_MS.
        self.offcpu: list[float] | None = None
        # Where set (floats per array, by the parent: HostedRunner.reference_runs), a reference run precedes
        # each timed run, its time in ``reference`` (measure/reference.py). Executors without one ignore it.
        self.reference_n = 0
        self.reference: list[tuple[float, float]] = []  # (triad, chains) ms, see measure/reference.py

    @abc.abstractmethod
    def device(self) -> DeviceInfo: ...

    @abc.abstractmethod
    def constants(self) -> dict[str, Any]: ...

    @abc.abstractmethod
    def evaluate(self, params: Mapping[str, Any], keep_outputs: bool = False,
                 stop: EarlyStop | None = None) -> Measurement: ...

    def close(self) -> None:
        return None

    def _timed_measurement(self, params: Mapping[str, Any], samples: Sequence[float], measure: MeasureOptions,
                           timings: dict[str, float], extra: dict[str, Any], start: float,
                           stop: EarlyStop | None = None) -> Measurement:
        """The successful measurement of ``params`` from its timed samples (``start``: when evaluation began)."""
        stats = TimingStats.from_samples(samples)
        extra["stats"] = stats.as_dict(samples=False)
        if self.offcpu is not None:  # the timed runs' share off the CPU, aligned with the samples
            if len(self.offcpu) >= len(samples):
                extra["offcpu_ms"] = [round(x, 4) for x in self.offcpu[len(self.offcpu) - len(samples):]]
            self.offcpu.clear()
        if self.reference:  # the reference run before each timed run, aligned with the samples
            if len(self.reference) >= len(samples):
                runs = self.reference[len(self.reference) - len(samples):]
                extra["reference_ms"] = [round(t, 5) for t, _ in runs]
                extra["reference_chains_ms"] = [round(c, 5) for _, c in runs]
            self.reference.clear()
        extra["objective"] = measure.objective
        timings["total_s"] = perf_counter() - start
        return Measurement(params=params, value=stats.objective(measure.objective), samples=stats.samples,
                           timings=timings, extra=extra,
                           early_stopped=bool(stop is not None and measure.early_stop and stop.hopeless(samples)))


def output_copies(outputs: Sequence[Any]) -> list[Any]:
    return [np.array(o, copy=True) if isinstance(o, np.ndarray) else o for o in outputs]


class CompiledKernelExecutor(Executor):
    """Template method for compiled kernels; subclasses implement the hooks."""

    uses_geometry = True  # False for CPU code called once per run
    check_outputs = True  # False: return outputs and let the parent process verify them

    def __init__(self, spec: KernelSpec, measure: MeasureOptions | None = None) -> None:
        super().__init__()
        if not isinstance(spec, KernelSpec):
            raise SpecError(f"{type(self).__name__} needs a KernelSpec, got {type(spec).__name__}")
        self.spec = spec
        self.measure = MeasureOptions.coerce(measure)

    # -- hooks -----------------------------------------------------------------
    def check_geometry(self, geometry: Geometry) -> str | None:
        """Reason the device cannot launch this geometry, or None (before compiling)."""
        return check_launch_limits(geometry, self.constants())

    @abc.abstractmethod
    def compile(self, source: str, name: str) -> Any:
        """Compile ``source`` and return a handle to kernel ``name``; raise CompileFailed."""

    def load(self, artefact: Any, source: str, name: str) -> Any:
        """A handle to the kernel a compile pool built from ``source`` (a :class:`~.compile_pool.CompiledArtefact`);
        raise :class:`~.errors.ArtefactUnusable` with the driver's error when the device refuses the artefact
        (:meth:`evaluate` then compiles inline and marks the measurement ``extra["fallback"]``).
        Only runners that offer a compile stage implement it."""
        raise NotImplementedError(f"the {self.name} runner has no separate compile stage")

    def check_compiled(self, kernel: Any, geometry: Geometry) -> str | None:
        """Reason the compiled kernel cannot run with this geometry, or None."""
        return None

    def kernel_info(self, kernel: Any) -> dict[str, Any]:
        """Backend facts about the compiled kernel for ``Measurement.extra``."""
        return {}

    @abc.abstractmethod
    def restore_outputs(self) -> None: ...

    def flush_cache(self) -> None:
        return None

    @abc.abstractmethod
    def run_once(self, kernel: Any, geometry: Geometry) -> None:
        """Launch once and wait for completion; raise RunFailure on error."""

    @abc.abstractmethod
    def timed_run(self, kernel: Any, geometry: Geometry) -> float:
        """Launch once, wait, and return the duration in ms by the backend's clock."""

    @abc.abstractmethod
    def fetch_outputs(self) -> list[Any]:
        """Argument values after the last run, aligned with ``spec.args``."""

    def release(self, kernel: Any) -> None:
        return None

    def classify(self, exc: BaseException, stage: str) -> RunFailure:
        """Turn an unexpected exception during ``stage`` into a failure."""
        if isinstance(exc, RunFailure):
            return exc
        kind = FailureKind.LAUNCH if stage == "launch" else FailureKind.RUNTIME
        return RunFailure(kind, f"{type(exc).__name__}: {exc}")

    # -- flow ------------------------------------------------------------------
    def prepare_run(self) -> None:
        self.restore_outputs()
        if self.measure.flush_l2:
            self.flush_cache()

    def evaluate(self, params: Mapping[str, Any], keep_outputs: bool = False, artefact: Any = None,
                 stop: EarlyStop | None = None) -> Measurement:
        """Compile (or, given a compile pool's ``artefact``, load), verify and time one configuration;
        ``stop``: the early-stop cutoff of a search."""
        params = dict(params)
        start = perf_counter()
        timings: dict[str, float] = {}

        def failed(kind: FailureKind, detail: str, **extra: Any) -> Measurement:
            timings["total_s"] = perf_counter() - start
            m = Measurement.failed(params, kind, detail, **timings)
            m.extra.update(extra)
            return m

        if not self.healthy:
            return failed(FailureKind.RUNTIME, "device context is unusable after an earlier crash (use isolate=True)")
        self.heartbeat("setup")
        geometry: Geometry = ((1, 1, 1), (1, 1, 1), 0)
        extra: dict[str, Any] = {}
        try:
            if self.uses_geometry:
                geometry = launch_geometry(self.spec, params)
                extra.update(grid=list(geometry[0]), block=list(geometry[1]), shared_mem=geometry[2])
                reason = self.check_geometry(geometry)
                if reason:
                    return failed(FailureKind.INVALID, reason, **extra)
            source = render_source(self.spec, params)
            name = instantiated_name(self.spec, params)
        except InvalidConfiguration as exc:
            return failed(FailureKind.INVALID, str(exc), **extra)
        extra["kernel_name"] = name
        extra["source_sha256"] = hashlib.sha256(source.encode()).hexdigest()

        self.heartbeat("compile")
        t = perf_counter()
        fallback: str | None = None
        try:
            if artefact is None:
                kernel = self.compile(source, name)
            else:
                try:
                    kernel = self.load(artefact, source, name)
                except ArtefactUnusable as exc:  # the device refused the pool's artefact: compile here, visibly
                    fallback = str(exc) or type(exc).__name__
                    t = perf_counter()
                    kernel = self.compile(source, name)
        except CompileFailed as exc:
            timings["compile_s"] = perf_counter() - t
            if fallback is not None:
                extra["fallback"] = fallback
            return failed(FailureKind.COMPILE, exc.log, **extra)
        if artefact is None or fallback is not None:
            timings["compile_s"] = perf_counter() - t  # compiled here: no load time to record
            if fallback is not None:
                extra["fallback"] = fallback
        else:  # compiled ahead by the pool: its compile time, what loading took here, what the compiler said
            timings["compile_s"] = artefact.seconds
            timings["load_s"] = perf_counter() - t
            extra.update({k: v for k, v in getattr(artefact, "extra", {}).items() if k not in extra})
        try:
            extra.update(self._guarded("launch", lambda: self.kernel_info(kernel)))
            reason = self._guarded("launch", lambda: self.check_compiled(kernel, geometry))
            if reason:
                return failed(FailureKind.RESOURCES, reason, **extra)
            return self._run_and_time(params, kernel, geometry, keep_outputs, timings, extra, start, stop)
        except RunFailure as exc:
            if exc.poisoned:
                self.healthy = False
            return failed(exc.kind, exc.detail, **extra)
        finally:
            self.heartbeat("idle")
            self.release(kernel)

    def _guarded(self, stage: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except (SpecError, KeyboardInterrupt):
            raise
        except RunFailure:
            raise
        except Exception as exc:  # classified: a bad configuration must not stop tuning
            raise self.classify(exc, stage) from exc

    def _run_and_time(
        self,
        params: dict[str, Any],
        kernel: Any,
        geometry: Geometry,
        keep_outputs: bool,
        timings: dict[str, float],
        extra: dict[str, Any],
        start: float,
        stop: EarlyStop | None = None,
    ) -> Measurement:
        self.heartbeat("run")
        t = perf_counter()
        self._guarded("launch", self.restore_outputs)
        self._guarded("launch", lambda: self.run_once(kernel, geometry))
        outputs = self._guarded("run", self.fetch_outputs)
        if self.check_outputs:
            result = verify_outputs(
                outputs, self.spec.expected, atol=self.spec.atol, rtol=self.spec.rtol, verify=self.spec.verify
            )
            if not result.ok:
                timings["verify_s"] = perf_counter() - t
                raise RunFailure(FailureKind.WRONG_OUTPUT, result.message)
        else:
            keep_outputs = True  # the caller verifies (see HostedRunner: unpicklable verify callables)
        timings["verify_s"] = perf_counter() - t
        if keep_outputs:
            extra["outputs"] = output_copies(outputs)
        del outputs

        t = perf_counter()
        with self.timing_window():
            samples = self._guarded(
                "run",
                lambda: time_runs(
                    lambda: self.timed_run(kernel, geometry),
                    self.measure,
                    prepare=self.prepare_run,
                    on_run=lambda: self.heartbeat("run"),
                    stop=stop,
                ),
            )
        timings["bench_s"] = perf_counter() - t
        return self._timed_measurement(params, samples, self.measure, timings, extra, start, stop)


def check_launch_limits(geometry: Geometry, limits: Mapping[str, Any]) -> str | None:
    """Device-limit check of a launch geometry; keys as in ``cuda_constants``."""
    grid, block, smem = geometry
    threads = block[0] * block[1] * block[2]
    max_threads = limits.get("max_threads")
    if max_threads and threads > max_threads:
        return f"{threads} threads per block exceed the device limit of {max_threads}"
    for axis, size in zip("xyz", block):
        limit = limits.get(f"max_block_dim_{axis}")
        if limit and size > limit:
            return f"block dimension {axis} = {size} exceeds the device limit of {limit}"
    for axis, size in zip("xyz", grid):
        limit = limits.get(f"max_grid_dim_{axis}")
        if limit and size > limit:
            return f"grid dimension {axis} = {size} exceeds the device limit of {limit}"
    max_smem = limits.get("max_shared_memory_per_block")
    if max_smem and smem > max_smem:
        return f"{smem} bytes of dynamic shared memory exceed max_shared_memory_per_block = {max_smem}"
    return None


def check_kernel_resources(
    threads: int,
    static_smem: int,
    dynamic_smem: int,
    registers_per_thread: int,
    kernel_max_threads: int | None,
    limits: Mapping[str, Any],
) -> str | None:
    """Reason a compiled kernel cannot launch with this block, naming the limit (None when it can).

    Checked before any launch, from what the compiler reports (registers per
    thread, static shared memory): registers x threads against
    ``max_registers_per_block``, static shared memory against
    ``max_static_shared_memory_per_block``, static + dynamic against the
    opt-in ``max_shared_memory_per_block`` (the driver's rule for
    ``cudaFuncAttributeMaxDynamicSharedMemorySize``), and the kernel's own
    thread limit (``cudaFuncAttributes.maxThreadsPerBlock``).
    """
    max_static = limits.get("max_static_shared_memory_per_block")
    if max_static and static_smem > max_static:
        return f"{static_smem} bytes of static shared memory exceed max_static_shared_memory_per_block = {max_static}"
    max_smem = limits.get("max_shared_memory_per_block")
    if max_smem and static_smem + dynamic_smem > max_smem:
        return (
            f"{static_smem} bytes static + {dynamic_smem} bytes dynamic shared memory exceed "
            f"max_shared_memory_per_block = {max_smem}"
        )
    max_regs = limits.get("max_registers_per_block")
    if max_regs and registers_per_thread * threads > max_regs:
        return (
            f"{registers_per_thread} registers/thread x {threads} threads = {registers_per_thread * threads} "
            f"registers exceed max_registers_per_block = {max_regs}"
        )
    if kernel_max_threads and threads > kernel_max_threads:
        return f"{threads} threads per block exceed this kernel's limit of {kernel_max_threads} (register use)"
    return None


def format_exception(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()
