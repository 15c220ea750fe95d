"""Candidate evaluation in an isolated, restartable worker process.

A sticky CUDA error (illegal address, trap) poisons the CUDA context for the
rest of the process, a segfault in a C kernel kills it, and an endless loop
never returns. So by default the executor (device buffers, compiled kernels)
lives in a worker process that never shares state with the caller: no forked
CUDA context, no inherited locks or threads. The calling process keeps only a
pipe, and never touches the device itself.

Start method: ``forkserver`` where available, else ``spawn``. Both give a
child that did not inherit the caller's memory; the fork server is itself a
fresh interpreter that only imports numpy and the runner modules (never
CUDA), and forks each worker from that state, so a (re)start costs tens of
milliseconds instead of a new interpreter plus numpy import (hundreds): it
matters for restarts after faults and for a test session with many tuned
kernels. The worker applies the caller's current environment and working
directory first (a fork server started earlier would otherwise hand out a
stale ``CUDA_VISIBLE_DEVICES``). ``PYTEST_AUTOTUNE_START_METHOD=spawn``
forces spawn.

* The executor recipe (the spec with its numpy arguments) is sent once, when
  the worker starts; each evaluation sends only the parameter dict and
  receives a :class:`~pytest_autotune.results.Measurement`.
* A watchdog works from a heartbeat in shared memory: the worker bumps a
  counter after every launch and records its phase. No progress for
  ``watchdog_s`` (``compile_timeout_s`` while compiling, and in a first launch
  that a runtime compiles for: phase "jit") is a TIMEOUT; the
  worker is killed and restarted lazily on the next evaluation.
* A worker that dies (signal or exit) yields RUNTIME (COMPILE if it died
  while compiling) with the signal name in ``detail``; a worker whose
  executor reports a poisoned context is restarted proactively.
* Workers are closed by :meth:`HostedRunner.close`, at interpreter exit, and
  exit by themselves when the parent's end of the pipe closes.
"""
from __future__ import annotations

import atexit
import copy
import importlib
import multiprocessing
import os
import pickle
import signal
import traceback
import weakref
from dataclasses import dataclass, field
from time import monotonic, perf_counter
from typing import Any, Mapping

import numpy as np

from ..measure import MeasureOptions
from ..results import FailureKind, Measurement
from .device import DeviceInfo
from .errors import BackendUnavailable, SpecError
from ..verify import verify_outputs
from .executor import PHASES, SLOW_PHASES, Executor

_PHASE_CODE = {name: i for i, name in enumerate(PHASES)}
_POLL_SLICE_S = 0.05


@dataclass(frozen=True)
class ExecutorRecipe:
    """Picklable instructions to build an executor: ``module:Class`` and its kwargs."""

    target: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    attributes: dict[str, Any] = field(default_factory=dict)  # set on the executor once built

    def build(self) -> Executor:
        module_name, _, class_name = self.target.partition(":")
        cls = getattr(importlib.import_module(module_name), class_name)
        executor = cls(**self.kwargs)
        for name, value in self.attributes.items():
            setattr(executor, name, value)
        return executor


# ----------------------------------------------------------------------------
# Worker side
# ----------------------------------------------------------------------------
def _safe_exception(exc: BaseException) -> BaseException:
    """The exception itself if it survives pickling, else a RuntimeError with its text."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")


def _worker_main(conn: Any, recipe: ExecutorRecipe, beat: Any, phase: Any, env: dict[str, str], cwd: str) -> None:
    """Entry point of the worker process: build the executor, then serve evaluations."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    os.environ.clear()
    os.environ.update(env)
    try:
        os.chdir(cwd)
    except OSError:
        pass

    def heartbeat(name: str) -> None:
        phase.value = _PHASE_CODE[name]
        beat.value += 1

    try:
        executor = recipe.build()
        executor.heartbeat = heartbeat
        conn.send(("ready", executor.device(), executor.constants()))
    except BaseException as exc:  # report, then exit: the parent raises
        conn.send(("init_error", _safe_exception(exc), traceback.format_exc()))
        return
    try:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                return  # parent went away
            if message[0] == "close":
                return
            _, params, keep_outputs = message
            try:
                measurement = executor.evaluate(params, keep_outputs=keep_outputs)
            except BaseException as exc:
                conn.send(("raise", _safe_exception(exc), traceback.format_exc()))
                continue
            try:
                conn.send(("result", measurement, executor.healthy))
            except Exception as exc:  # e.g. outputs that cannot be pickled
                conn.send(("raise", RuntimeError(f"cannot return the measurement: {exc}"), traceback.format_exc()))
            if not executor.healthy:
                return  # poisoned context: exit so the parent starts a fresh one
    finally:
        try:
            executor.close()
        except Exception:
            pass


# ----------------------------------------------------------------------------
# Parent side
# ----------------------------------------------------------------------------
_live: "weakref.WeakSet[IsolatedExecutor]" = weakref.WeakSet()
_PRELOAD = [
    "numpy",
    "pytest_autotune.runners.isolation",
    "pytest_autotune.runners.c_runner",
    "pytest_autotune.runners.callable_runner",
    "pytest_autotune.runners.cupy_runner",  # imports cupy only when a runner is built
    "pytest_autotune.runners.pycuda_runner",
    "pytest_autotune.runners.opencl_runner",  # imports pyopencl only when a runner is built
    "pytest_autotune.runners.oclgrind",
]
_preload_set = False


def start_method() -> str:
    """``$PYTEST_AUTOTUNE_START_METHOD``, else forkserver where supported, else spawn."""
    chosen = os.environ.get("PYTEST_AUTOTUNE_START_METHOD")
    if chosen:
        if chosen not in ("spawn", "forkserver"):
            raise SpecError(f"PYTEST_AUTOTUNE_START_METHOD must be 'spawn' or 'forkserver', not {chosen!r}")
        return chosen
    return "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"


def _context() -> Any:
    global _preload_set
    method = start_method()
    ctx = multiprocessing.get_context(method)
    if method == "forkserver" and not _preload_set:
        ctx.set_forkserver_preload(_PRELOAD)  # takes effect if the server is not running yet
        _preload_set = True
    return ctx


@atexit.register
def _close_all_workers() -> None:
    for worker in list(_live):
        worker.close()


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "worker process stopped answering"
    if code < 0:
        try:
            sig = signal.Signals(-code)
            return f"worker process killed by {sig.name} ({signal.strsignal(sig) or 'signal'})"
        except ValueError:
            return f"worker process killed by signal {-code}"
    return f"worker process exited with status {code}"


class IsolatedExecutor:
    """Parent-side proxy: same interface as an executor, work done in a worker."""

    def __init__(self, recipe: ExecutorRecipe, measure: MeasureOptions, start_timeout_s: float = 600.0) -> None:
        self.recipe = recipe
        self.measure = measure
        self.start_timeout_s = start_timeout_s
        self.starts = 0  # how many workers were started (1 + restarts)
        self._ctx = _context()
        self._proc: Any = None
        self._conn: Any = None
        self._beat: Any = None
        self._phase: Any = None
        self._info: tuple[DeviceInfo, dict[str, Any]] | None = None
        self._closed = False
        _live.add(self)

    # -- life cycle ------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    def _start(self) -> float:
        if self._closed:
            raise RuntimeError("runner is closed")
        t = perf_counter()
        parent_conn, child_conn = self._ctx.Pipe(duplex=True)
        self._beat = self._ctx.Value("Q", 0, lock=False)
        self._phase = self._ctx.Value("i", 0, lock=False)
        proc = self._ctx.Process(
            target=_worker_main,
            args=(child_conn, self.recipe, self._beat, self._phase, dict(os.environ), os.getcwd()),
            name="pytest-autotune-worker",
            daemon=True,
        )
        proc.start()
        child_conn.close()
        self._proc, self._conn = proc, parent_conn
        self.starts += 1
        if not parent_conn.poll(self.start_timeout_s):
            self._kill()
            raise BackendUnavailable(f"isolated worker did not start within {self.start_timeout_s:g} s")
        try:
            message = parent_conn.recv()
        except (EOFError, OSError):
            code = self._reap()
            raise BackendUnavailable(f"isolated worker failed to start: {_describe_exit(code)}") from None
        if message[0] == "init_error":
            self._reap()
            exc, text = message[1], message[2]
            if isinstance(exc, (SpecError, BackendUnavailable)):
                raise exc
            raise BackendUnavailable(f"runner failed to initialise in the worker process:\n{text}") from None
        self._info = (message[1], message[2])
        return perf_counter() - t

    def _kill(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            self._proc.kill()
        self._reap()

    def _reap(self) -> int | None:
        """Join a finished worker and drop its handles; returns the exit code."""
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        code = None
        if proc is not None:
            proc.join(timeout=10)
            if proc.is_alive():  # pragma: no cover - kill is not refused on Linux
                proc.kill()
                proc.join(timeout=10)
            code = proc.exitcode
            proc.close() if proc.exitcode is not None else None
        if conn is not None:
            conn.close()
        return code

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        _live.discard(self)
        if self._proc is None:
            return
        try:
            if self._proc.is_alive():
                self._conn.send(("close",))
                self._proc.join(timeout=5)
        except (OSError, ValueError, BrokenPipeError):
            pass
        if self._proc is not None and self._proc.is_alive():
            self._proc.terminate()
            self._proc.join(timeout=5)
        self._kill()

    def __del__(self) -> None:  # best effort; atexit covers interpreter shutdown
        try:
            self.close()
        except Exception:
            pass

    # -- executor interface ------------------------------------------------------
    def device(self) -> DeviceInfo:
        if self._info is None:
            self._start()
        assert self._info is not None
        return self._info[0]

    def constants(self) -> dict[str, Any]:
        if self._info is None:
            self._start()
        assert self._info is not None
        return dict(self._info[1])

    def evaluate(self, params: Mapping[str, Any], keep_outputs: bool = False) -> Measurement:
        params = dict(params)
        start = perf_counter()
        start_s = 0.0
        if not self.alive:
            if self._proc is not None:
                self._reap()
            start_s = self._start()
        try:
            self._conn.send(("eval", params, keep_outputs))
            outcome = self._wait()
        except BaseException:
            self._kill()  # interrupted mid-evaluation: never leave a busy worker behind
            raise
        kind = outcome[0]
        if kind == "result":
            measurement: Measurement = outcome[1]
            if not outcome[2]:
                self._reap()  # the worker exits by itself after a poisoning error
        elif kind == "raise":
            exc = outcome[1]
            if isinstance(exc, SpecError):
                raise exc
            raise RuntimeError(f"runner failed in the worker process:\n{outcome[2]}")
        else:
            measurement = Measurement.failed(params, outcome[1], outcome[2])
        measurement.timings["wall_s"] = perf_counter() - start
        if start_s:
            measurement.timings["worker_start_s"] = start_s
        return measurement

    def _wait(self) -> tuple[Any, ...]:
        """Wait for the worker's answer under the heartbeat watchdog."""
        conn, proc = self._conn, self._proc
        last_beat, last_change = self._beat.value, monotonic()
        while True:
            phase = PHASES[self._phase.value]
            limit = self.measure.compile_timeout_s if phase in SLOW_PHASES else self.measure.watchdog_s
            remaining = last_change + limit - monotonic()
            if remaining <= 0:
                self._kill()
                return (
                    "failed",
                    FailureKind.TIMEOUT,
                    f"no progress for {limit:g} s while in phase '{phase}' (watchdog); worker killed and restarted",
                )
            ready = conn.poll(min(remaining, _POLL_SLICE_S))
            if ready:
                try:
                    return conn.recv()
                except (EOFError, OSError):
                    return self._crashed(phase)
            beat = self._beat.value
            if beat != last_beat:
                last_beat, last_change = beat, monotonic()
            if not proc.is_alive() and not conn.poll(0):
                return self._crashed(phase)

    def _crashed(self, phase: str) -> tuple[Any, ...]:
        phase = PHASES[self._phase.value]  # the worker's last word, not the one seen before the poll
        code = self._reap()
        kind = FailureKind.COMPILE if phase == "compile" else FailureKind.RUNTIME
        return ("failed", kind, f"{_describe_exit(code)} while in phase '{phase}'; worker restarted")


# ----------------------------------------------------------------------------
# The Runner a user holds
# ----------------------------------------------------------------------------
class _Discard:
    def write(self, data: Any) -> int:
        return memoryview(data).nbytes


class _ArraysAsIds(pickle.Pickler):
    """Pickles everything but numpy arrays (always picklable, possibly large) for real."""

    def persistent_id(self, obj: Any) -> Any:
        return id(obj) if type(obj) is np.ndarray else None


def _check_picklable(obj: Any) -> None:
    """Raise if ``obj`` cannot be pickled; cheap even when it carries large arrays."""
    _ArraysAsIds(_Discard(), protocol=pickle.HIGHEST_PROTOCOL).dump(obj)


class HostedRunner:
    """A :class:`~pytest_autotune.runners.base.Runner` whose executor runs in-process or isolated.

    ``isolate=True`` (default for compiled kernels): crashes, hangs and sticky
    CUDA errors cost one configuration, never the calling process.
    ``isolate=False``: no process boundary (faster start, easier debugging),
    but a segfault or hang takes the caller with it.
    """

    name = "hosted"
    executor_target = ""  # "module:Class" of the executor

    def __init__(self, *, isolate: bool, measure: MeasureOptions | Mapping[str, Any] | None, **executor_kwargs: Any):
        self.measure = MeasureOptions.coerce(measure)
        self.isolate = bool(isolate)
        self.recipe = ExecutorRecipe(self.executor_target, {"measure": self.measure, **executor_kwargs})
        self._parent_spec: Any = None
        if self.isolate:
            self.recipe = self._picklable_recipe(self.recipe)
            self._impl: Any = IsolatedExecutor(self.recipe, self.measure)
            try:
                self._impl.device()  # start now: a missing backend fails here, clearly
            except BaseException:
                self._impl.close()
                raise
        else:
            self._impl = self.recipe.build()

    def _picklable_recipe(self, recipe: ExecutorRecipe) -> ExecutorRecipe:
        """The recipe itself, or one whose verify callable stays here when it cannot be pickled.

        A ``verify=lambda ...`` in a test is common; rather than refusing it, the
        worker then returns each configuration's outputs and this process runs
        the callable (costing one transfer of the outputs per configuration).
        """
        try:
            _check_picklable(recipe)
            return recipe
        except Exception as exc:
            problem = exc
        spec = recipe.kwargs.get("spec")
        if spec is not None and getattr(spec, "verify", None) is not None:
            stripped = copy.copy(spec)
            stripped.verify = None
            candidate = ExecutorRecipe(recipe.target, {**recipe.kwargs, "spec": stripped}, {"check_outputs": False})
            try:
                _check_picklable(candidate)
            except Exception as exc:
                problem = exc
            else:
                self._parent_spec = spec
                return candidate
        raise SpecError(
            f"cannot send this runner's inputs to an isolated worker ({problem}); use module-level "
            "functions instead of lambdas/closures, or isolate=False"
        ) from None

    def device(self) -> DeviceInfo:
        return self._impl.device()

    def constants(self) -> dict[str, Any]:
        return self._impl.constants()

    def evaluate(self, params: Mapping[str, Any], keep_outputs: bool = False) -> Measurement:
        """Compile, verify and time one configuration; never raises for a bad one.

        With ``keep_outputs=True`` the argument values after the verification
        run are in ``measurement.extra["outputs"]`` (aligned with the args).
        """
        start = perf_counter()
        measurement = self._impl.evaluate(params, keep_outputs=keep_outputs)
        if self._parent_spec is not None and measurement.ok:
            measurement = self._verify_here(measurement, keep_outputs)
        measurement.timings.setdefault("wall_s", perf_counter() - start)
        return measurement

    def _verify_here(self, measurement: Measurement, keep_outputs: bool) -> Measurement:
        spec = self._parent_spec
        t = perf_counter()
        outputs = measurement.extra.get("outputs") if keep_outputs else measurement.extra.pop("outputs", None)
        result = verify_outputs(outputs or [], spec.expected, atol=spec.atol, rtol=spec.rtol, verify=spec.verify)
        measurement.timings["verify_s"] = measurement.timings.get("verify_s", 0.0) + perf_counter() - t
        if result.ok:
            return measurement
        failed = Measurement.failed(measurement.params, FailureKind.WRONG_OUTPUT, result.message, **measurement.timings)
        failed.extra = {k: v for k, v in measurement.extra.items() if k not in ("outputs", "stats", "objective")}
        return failed

    @property
    def worker_starts(self) -> int:
        """Worker processes started so far (0 in-process); > 1 means restarts after faults."""
        return getattr(self._impl, "starts", 0)

    def close(self) -> None:
        self._impl.close()

    def __enter__(self) -> "HostedRunner":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "isolated" if self.isolate else "in-process"
        return f"<{type(self).__name__} {self.name!r} {mode}>"
