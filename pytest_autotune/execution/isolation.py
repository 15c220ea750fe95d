"""Candidate evaluation in an isolated, restartable worker process.

A sticky CUDA error (illegal address, trap) poisons the CUDA context for the
rest of the process, a segfault in a C kernel kills it, and an endless loop
never returns. So by default the executor (device buffers, compiled kernels)
lives in a worker process that never shares state with the caller: no forked
CUDA context, no inherited locks or threads. The calling process keeps only a
socket, and never touches the device itself.

The worker is a fresh interpreter running :mod:`.worker` (``python -m
pytest_autotune.execution.worker``), connected by a socket pair and a small
shared heartbeat file, both passed as file descriptors. It is not a
:mod:`multiprocessing` child: spawn and forkserver children re-import the
caller's ``__main__`` file, which re-runs a plain script that has no
``if __name__ == "__main__"`` guard (the manual's docs/how-to/without-pytest.md).
It starts in its own session, so Ctrl-C at the terminal reaches only the
caller, and what it prints goes to the caller's stderr, capped per
evaluation (compiler crashes stay visible; :mod:`.worker_bounds`). It
applies the caller's current environment, working directory and
``sys.path`` before anything else (``CUDA_VISIBLE_DEVICES`` per xdist
worker, test modules imported from temporary directories). A (re)start
costs a new interpreter and its numpy import, about 0.2 s on an idle core
(the fork server used before forked in about 20 ms): once per runner and
once per crashed, hung or poisoning candidate, next to a compile each.
Because the worker never imports ``__main__``, functions and classes
defined in the running script cannot be sent to it (see
:class:`_WorkerPickleCheck`); a ``verify`` callable then runs here.

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
  exit by themselves when the parent's end of the pipe closes. Whenever a
  worker ends, its whole process group goes with it: a candidate's forked
  children never outlive it.
* Bounds (:mod:`.worker_bounds`): the output of one evaluation is kept up to
  ``output_cap`` bytes, head and tail, and forwarded to the caller's stderr
  (and into the ``detail`` of a failed configuration); a worker holding more
  than ``worker_memory`` is stopped and its configuration fails as
  RESOURCES. Neither applies with ``isolate=False``: there is no worker.
"""
from __future__ import annotations

import atexit
import copy
import importlib
import os
import pickle
import signal
import socket
import subprocess
import sys
import types
import weakref
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from time import monotonic, perf_counter, sleep
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from ..measure.bounds import format_size, memory_limit_bytes
from ..measure.timing import EarlyStop, MeasureOptions
from ..results import FailureKind, Measurement
from .device import DeviceInfo
from ..errors import BackendUnavailable, SpecError
from ..measure.verify import verify_outputs
from ..runners.base import HOSTED, Capabilities
from .compile_pool import CompiledArtefact, CompilePool, CompileStage
from .executor import SLOW_PHASES, Executor
from .worker import HeartbeatBoard
from .worker_bounds import OutputTap, kill_group, resident_bytes

_POLL_SLICE_S = 0.05
_WORKER_MODULE = "pytest_autotune.execution.worker"


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
# Parent side
# ----------------------------------------------------------------------------
_live: "weakref.WeakSet[IsolatedExecutor]" = weakref.WeakSet()


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


class _WorkerProcess:
    """One started worker: its process, its end of the connection, its heartbeat board, its output tap."""

    def __init__(self, output_cap: int = MeasureOptions.output_cap) -> None:
        if os.name != "posix":
            raise BackendUnavailable("isolated workers need a POSIX system; use isolate=False")
        if not sys.executable:
            raise BackendUnavailable("cannot start an isolated worker: sys.executable is unknown; use isolate=False")
        board, board_fd = HeartbeatBoard.create()
        ours = theirs = None
        out_read, out_write = os.pipe()  # the worker's stdout and stderr, in the order written
        try:
            ours, theirs = socket.socketpair()
            env = dict(os.environ)
            # the caller's import path, so that `-m` finds this package wherever it was imported from;
            # the worker restores the caller's own PYTHONPATH with the rest of the environment
            env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if isinstance(p, str) and p)
            self.proc = subprocess.Popen(
                [sys.executable, "-m", _WORKER_MODULE, str(theirs.fileno()), str(board_fd)],
                pass_fds=(theirs.fileno(), board_fd),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out_write,
                stderr=out_write,
                # Ctrl-C at the terminal is the caller's to handle; and the worker leads a process group
                # that holds whatever its candidates fork, for kill_group
                start_new_session=True,
            )
        except BaseException:
            if ours is not None:
                ours.close()
            board.close()
            os.close(out_read)
            raise
        finally:
            if theirs is not None:
                theirs.close()  # the worker holds its own copy: its exit is our end of file
            os.close(board_fd)
            os.close(out_write)
        self.conn = Connection(ours.detach())
        self.board = board
        self.output = OutputTap(out_read, output_cap)
        self.last_output = ""  # what it wrote last, kept by reap once the tap is closed

    def alive(self) -> bool:
        """Whether it runs; never reaps it (see :meth:`exited`)."""
        return self.proc.returncode is None and not self.exited(0)

    def kill(self) -> None:
        """SIGKILL the worker and everything in its process group."""
        if self.proc.returncode is None:  # not reaped: its pid is still the group's, never another's
            kill_group(self.proc.pid)

    def exited(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for the worker to exit without reaping it: while it is a zombie its pid
        names its process group and no other process, so the group can still be killed safely."""
        if not hasattr(os, "waitid"):  # pragma: no cover - POSIX systems without it: reaps, then no group kill
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                return False
            return True
        deadline = monotonic() + timeout
        while True:
            try:
                if os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                    return True
            except ChildProcessError:  # reaped already
                return True
            if monotonic() >= deadline:
                return False
            sleep(0.005)

    def reap(self) -> int | None:
        """Wait for the (finishing or killed) process, kill what is left of its process group (a
        candidate's forked children), release the handles; returns the exit code."""
        if not self.exited(10):  # pragma: no cover - it was told to stop or killed
            self.kill()
        self.kill()  # whatever the candidates forked ends with the worker
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - kill is not refused on Linux
            self.proc.kill()
            code = self.proc.wait(timeout=10)
        self.conn.close()
        self.board.close()
        self.last_output = self.output.close()
        return code


class IsolatedExecutor:
    """Parent-side proxy: same interface as an executor, work done in a worker."""

    def __init__(self, recipe: ExecutorRecipe, measure: MeasureOptions, start_timeout_s: float = 600.0) -> None:
        self.recipe = recipe
        self.measure = measure
        self.start_timeout_s = start_timeout_s
        self.starts = 0  # how many workers were started (1 + restarts)
        self._worker: _WorkerProcess | None = None
        self._info: tuple[DeviceInfo, dict[str, Any]] | None = None
        self._closed = False
        self._output = ""  # what a worker that ended wrote last, not yet forwarded
        self.memory_limit = memory_limit_bytes(measure.worker_memory)  # bytes; None: no limit
        self.reference_n = 0  # sent with each evaluation: the worker's reference runs (HostedRunner.reference_runs)
        _live.add(self)

    # -- life cycle ------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self._worker is not None and self._worker.alive()

    @property
    def pid(self) -> int | None:
        """The worker's process id while one is started."""
        return self._worker.proc.pid if self._worker is not None else None

    def _start(self) -> float:
        if self._closed:
            raise RuntimeError("runner is closed")
        t = perf_counter()
        self._worker = worker = _WorkerProcess(self.measure.output_cap)
        self.starts += 1
        try:
            worker.conn.send(("setup", dict(os.environ), os.getcwd(), list(sys.path)))
            worker.conn.send(self.recipe)
        except OSError:  # it died before reading: the reply below says why
            pass
        if not worker.conn.poll(self.start_timeout_s):
            self._kill()
            self._forward(self._take_output())
            raise BackendUnavailable(f"isolated worker did not start within {self.start_timeout_s:g} s")
        try:
            message = worker.conn.recv()
        except (EOFError, OSError):
            code = self._reap()
            said = self._take_output()
            self._forward(said)
            raise BackendUnavailable(f"isolated worker failed to start: {_describe_exit(code)}"
                                     + (f"\n{said}" if said else "")) from None
        if message[0] == "init_error":
            self._reap()
            self._forward(self._take_output())
            exc, text = message[1], message[2]
            if isinstance(exc, (SpecError, BackendUnavailable)):
                raise exc
            raise BackendUnavailable(f"runner failed to initialise in the worker process:\n{text}") from None
        self._info = (message[1], message[2])
        self._forward(self._take_output())  # what the runtime said while starting (a driver's warning)
        return perf_counter() - t

    def _kill(self) -> None:
        if self._worker is not None:
            self._worker.kill()
        self._reap()

    def _reap(self) -> int | None:
        """Wait for a finished worker and drop its handles; returns the exit code."""
        worker, self._worker = self._worker, None
        if worker is None:
            return None
        code = worker.reap()
        self._output += worker.last_output
        return code

    def _take_output(self) -> str:
        """What the worker (and one that just ended) wrote since the last take, capped."""
        text, self._output = self._output, ""
        if self._worker is not None:
            text += self._worker.output.take()
        return text

    @staticmethod
    def _forward(text: str) -> None:
        """Show a worker's output where it went before it was capped: the caller's stderr."""
        if text:
            sys.stderr.write(text if text.endswith("\n") else text + "\n")
            sys.stderr.flush()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        _live.discard(self)
        worker = self._worker
        if worker is None:
            return
        try:
            if worker.alive():
                worker.conn.send(("close",))
                worker.exited(5)
        except (OSError, ValueError):
            pass
        if not worker.exited(0):
            worker.proc.terminate()
            worker.exited(5)
        self._kill()  # the rest of its process group too
        try:
            self._forward(self._take_output())
        except (OSError, ValueError):  # at interpreter exit stderr may be gone
            pass

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

    def evaluate(self, params: Mapping[str, Any], keep_outputs: bool = False, artefact: Any = None,
                 timing_window: Callable[[], AbstractContextManager[Any]] | None = None,
                 stop: EarlyStop | None = None) -> Measurement:
        """Evaluate in the worker; ``artefact``: compiled ahead by a pool; ``timing_window``: entered here
        while the worker times the kernel (the worker asks for it and waits until it is entered);
        ``stop``: the early-stop cutoff of a search."""
        params = dict(params)
        start = perf_counter()
        start_s = 0.0
        if not self.alive:
            self._reap()
            start_s = self._start()
        assert self._worker is not None
        try:
            message: tuple[Any, ...] = ("eval", params, keep_outputs, stop)
            if artefact is not None or timing_window is not None or self.reference_n:
                message += (artefact, timing_window is not None)
            if self.reference_n:
                message += (self.reference_n,)
            self._worker.conn.send(message)
            outcome = self._wait(timing_window)
        except BaseException:
            self._kill()  # interrupted mid-evaluation: never leave a busy worker behind
            raise
        said = self._take_output()
        self._forward(said)
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
        if said and measurement.failure is not None:
            measurement.detail = f"{measurement.detail}\n\nkernel output (stdout and stderr):\n{said}".lstrip()
        measurement.timings["wall_s"] = perf_counter() - start
        if start_s:
            measurement.timings["worker_start_s"] = start_s
        return measurement

    def _wait(self, timing_window: Callable[[], AbstractContextManager[Any]] | None = None) -> tuple[Any, ...]:
        """Wait for the worker's answer under the heartbeat watchdog, opening ``timing_window`` when asked."""
        with ExitStack() as window:
            return self._wait_answer(window, timing_window)

    def _wait_answer(self, window: ExitStack,
                     timing_window: Callable[[], AbstractContextManager[Any]] | None) -> tuple[Any, ...]:
        worker = self._worker
        assert worker is not None
        conn, board = worker.conn, worker.board
        last_beat, last_change = board.beats, monotonic()
        while True:
            over = self._over_memory(worker)
            if over:
                self._kill()
                return ("failed", FailureKind.RESOURCES, over)
            phase = board.phase
            limit = self.measure.compile_timeout_s if phase in SLOW_PHASES else self.measure.watchdog_s
            remaining = last_change + limit - monotonic()
            if remaining <= 0:
                self._kill()
                return (
                    "failed",
                    FailureKind.TIMEOUT,
                    f"no progress for {limit:g} s while in phase '{phase}' (watchdog); worker killed and restarted",
                )
            if conn.poll(min(remaining, _POLL_SLICE_S)):
                try:
                    answer = conn.recv()
                except (EOFError, OSError):
                    return self._crashed()
                if answer[0] != "timing":
                    return answer
                if answer[1]:  # the worker is about to time the kernel and waits for the window to open
                    window.enter_context(timing_window() if timing_window is not None else nullcontext())
                    conn.send(("window open",))
                else:
                    window.close()
                continue
            beat = board.beats
            if beat != last_beat:
                last_beat, last_change = beat, monotonic()
            if not worker.alive() and not conn.poll(0):
                return self._crashed()

    def _over_memory(self, worker: _WorkerProcess) -> str:
        """Why the worker must stop for the memory it holds (with its children), or ''."""
        if self.memory_limit is None:
            return ""
        used = resident_bytes(worker.proc.pid)
        if used is None or used <= self.memory_limit:
            return ""
        return (f"the worker process held {format_size(used)} of memory, over its limit of "
                f"{format_size(self.memory_limit)} (worker_memory={self.measure.worker_memory!r}; set the ini "
                "option autotune_worker_memory or measure={'worker_memory': ...}); worker killed and restarted")

    def _crashed(self) -> tuple[Any, ...]:
        assert self._worker is not None
        phase = self._worker.board.phase  # the worker's last word, read before the board is released
        code = self._reap()
        kind = FailureKind.COMPILE if phase == "compile" else FailureKind.RUNTIME
        return ("failed", kind, f"{_describe_exit(code)} while in phase '{phase}'; worker restarted")


# ----------------------------------------------------------------------------
# The Runner a user holds
# ----------------------------------------------------------------------------
class _Discard:
    def write(self, data: Any) -> int:
        return memoryview(data).nbytes


class _WorkerPickleCheck(pickle.Pickler):
    """Pickles everything but numpy arrays (always picklable, possibly large) for real.

    Also refuses functions and classes of the running script: they pickle by
    reference to ``__main__``, which in the worker is the worker itself.
    """

    def persistent_id(self, obj: Any) -> Any:
        if type(obj) is np.ndarray:
            return id(obj)
        if isinstance(obj, (type, types.FunctionType)) and getattr(obj, "__module__", None) == "__main__":
            raise pickle.PicklingError(
                f"{obj.__qualname__} is defined in the script being run (__main__), which the worker "
                "process does not import; move it into an importable module"
            )
        return None


def _check_picklable(obj: Any) -> None:
    """Raise if ``obj`` cannot be unpickled in the worker; cheap even when it carries large arrays."""
    _WorkerPickleCheck(_Discard(), protocol=pickle.HIGHEST_PROTOCOL).dump(obj)


class HostedRunner:
    """A :class:`~pytest_autotune.runners.base.Runner` whose executor runs in-process or isolated.

    ``isolate=True`` (default for compiled kernels): crashes, hangs and sticky
    CUDA errors cost one configuration, never the calling process.
    ``isolate=False``: no process boundary (faster start, easier debugging),
    but a segfault or hang takes the caller with it, and nothing caps the
    kernel's output, limits its memory or ends what it forks (the measure
    options ``output_cap`` and ``worker_memory`` bound a worker only).
    """

    name = "hosted"
    executor_target = ""  # "module:Class" of the executor
    capabilities: Capabilities = HOSTED  # outputs, early stop, compile ahead (where compile_stage() is not None)

    def __init__(self, *, isolate: bool, measure: MeasureOptions | Mapping[str, Any] | None, **executor_kwargs: Any):
        self.measure = MeasureOptions.coerce(measure)
        self.isolate = bool(isolate)
        self.recipe = ExecutorRecipe(self.executor_target, {"measure": self.measure, **executor_kwargs})
        self._parent_spec: Any = None
        self._pool: CompilePool | None = None
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

    @contextmanager
    def reference_runs(self, n: int) -> Iterator[None]:
        """Within it, every timed run is preceded by a reference run over three arrays of ``n`` floats where the
        executor times one (the C runner; :mod:`~pytest_autotune.measure.reference`): the lock's and the gate's
        rounds, which need each run's machine state. ``n`` <= 0: none."""
        before = self._impl.reference_n
        self._impl.reference_n = max(0, int(n))
        try:
            yield
        finally:
            self._impl.reference_n = before

    # -- compile ahead (execution/compile_pool.py) ----------------------------------------
    def compile_stage(self) -> CompileStage | None:
        """The runner's CPU-only compile stage, for a compile pool; None when it has none."""
        return None

    def start_compile_ahead(self, workers: int) -> bool:
        """Compile configurations passed to :meth:`prefetch` on ``workers`` threads; False when this
        runner cannot (no compile stage)."""
        self.stop_compile_ahead()
        stage = self.compile_stage()
        if stage is None:
            return False
        self._pool = CompilePool(stage, workers)
        return True

    def prefetch(self, configurations: list[dict[str, Any]]) -> None:
        """Start compiling ``configurations`` (the evaluator's prefetch hook)."""
        if self._pool is not None:
            self._pool.submit(configurations)

    def first_ready(self, configurations: list[dict[str, Any]]) -> int:
        """Which of the pending ``configurations`` to evaluate next: the first compiled (the evaluator's hook)."""
        pool = getattr(self, "_pool", None)
        return pool.first_ready(configurations) if pool is not None else 0

    def stop_compile_ahead(self) -> None:
        pool, self._pool = getattr(self, "_pool", None), None
        if pool is not None:
            pool.close()

    @property
    def compile_pool(self) -> CompilePool | None:
        return getattr(self, "_pool", None)

    def _evaluate_compiled(self, params: Mapping[str, Any], keep_outputs: bool,
                           stop: EarlyStop | None = None) -> Measurement:
        """Through the compile pool: a failed compile or static check never reaches the device stage."""
        pool = self._pool
        assert pool is not None
        artefact = pool.take(params)  # None: not compiled ahead (a seed, a re-timing): compiled inline
        if artefact is not None and not artefact.ok:
            return artefact.failed_measurement(params)
        # every timed window pauses the pool's compilers, whoever compiled the kernel being timed
        window = pool.timing_window if pool.stage.pause_while_timing else None
        more: dict[str, Any] = {"stop": stop} if stop is not None else {}
        if self.isolate:
            return self._impl.evaluate(params, keep_outputs=keep_outputs, artefact=artefact, timing_window=window,
                                       **more)
        self._impl.timing_window = window or nullcontext
        try:
            return self._impl.evaluate(params, keep_outputs=keep_outputs, artefact=artefact, **more)
        finally:
            self._impl.timing_window = nullcontext

    def evaluate_compiled(self, params: Mapping[str, Any], artefact: CompiledArtefact, keep_outputs: bool = False,
                          stop: EarlyStop | None = None) -> Measurement:
        """The device stage alone, for an ``artefact`` compiled elsewhere (a cluster's compile task): a failed
        compile never reaches the device; otherwise load, verify and time as :meth:`evaluate` does."""
        if not artefact.ok:
            return artefact.failed_measurement(params)
        start = perf_counter()
        more: dict[str, Any] = {"stop": stop} if stop is not None else {}
        measurement = self._impl.evaluate(params, keep_outputs=keep_outputs, artefact=artefact, **more)
        if self._parent_spec is not None and measurement.ok:
            measurement = self._verify_here(measurement, keep_outputs)
        measurement.timings.setdefault("wall_s", perf_counter() - start)
        return measurement

    def evaluate(self, params: Mapping[str, Any], keep_outputs: bool = False,
                 stop: EarlyStop | None = None) -> Measurement:
        """Compile, verify and time one configuration; never raises for a bad one.

        With ``keep_outputs=True`` the argument values after the verification
        run are in ``measurement.extra["outputs"]`` (aligned with the args).
        ``stop``: end the timing early when the first runs are hopeless
        (:class:`~pytest_autotune.measure.timing.EarlyStop`; the search passes it).
        """
        start = perf_counter()
        if getattr(self, "_pool", None) is not None:
            measurement = self._evaluate_compiled(params, keep_outputs, stop)
        else:
            measurement = self._impl.evaluate(params, keep_outputs=keep_outputs, stop=stop)
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
    def worker_pid(self) -> int | None:
        """The isolated worker's process id (None in-process or before it starts)."""
        return getattr(self._impl, "pid", None)

    @property
    def worker_starts(self) -> int:
        """Worker processes started so far (0 in-process); > 1 means restarts after faults."""
        return getattr(self._impl, "starts", 0)

    def close(self) -> None:
        self.stop_compile_ahead()
        self._impl.close()

    def __enter__(self) -> "HostedRunner":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "isolated" if self.isolate else "in-process"
        return f"<{type(self).__name__} {self.name!r} {mode}>"


def usable_cpus() -> list[int]:
    """The CPUs this process may run on, in order (``[]`` where affinity is not supported)."""
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


@contextmanager
def sharing_one_cpu(*runners: Any, cpu: int | None = None, here: bool = False) -> Iterator[None]:
    """Pin the runners' worker processes (and, with ``here``, the calling thread) to one CPU for the
    duration, then restore their affinity. ``cpu`` defaults to the first usable one.

    Two measurements compared side by side (the gate's A/B; the machine probes, which run in this
    process, and the kernel they correct) must meet the same conditions. Left to the scheduler, they sat
    on different CPUs for whole scheduling windows: identical sources read up to 1.5x apart on a shared
    2-core host, in 3-15 % of A/B blocks; pinned to one CPU, 0 of 40 at the same load, and the spread of
    the A/B ratio halved. The probes, run in this process while the kernel ran in its worker, had no
    correlation with the kernel's speed (r = -0.02 over 30 rounds); pinned beside it, r = 0.61. Linux only;
    elsewhere a no-op.
    """
    pids = [pid for pid in (getattr(r, "worker_pid", None) for r in runners) if pid is not None]
    if here:
        pids.append(0)  # 0: the calling thread
    if not hasattr(os, "sched_setaffinity") or len(pids) < (1 if here else 2):
        yield
        return
    saved: dict[int, set[int]] = {}
    try:
        cpu = min(os.sched_getaffinity(0)) if cpu is None else cpu
        for pid in pids:
            saved[pid] = os.sched_getaffinity(pid)
            os.sched_setaffinity(pid, {cpu})
    except OSError:  # a worker just exited, no permission, a CPU not ours: as the scheduler places them
        pass
    try:
        yield
    finally:
        for pid, cpus in saved.items():
            try:
                os.sched_setaffinity(pid, cpus)
            except OSError:
                pass
