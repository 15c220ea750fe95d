"""Compile ahead: compile workers build the next candidates while the device stage times the current one.

A source runner's evaluation has a CPU-only half (render the source, run the
compiler, read the compiler's resource report, check static limits) and a
device half (load, verify, time). A runner that can split them offers a
:class:`CompileStage`; a :class:`CompilePool` runs that stage for the
configurations the search has proposed but not yet measured (the evaluator's
``prefetch`` hook), on ``workers`` threads. Each thread mostly waits, on a
compiler process (gcc, g++) or inside a library call that releases the GIL
(NVRTC), so threads are enough and nothing of the caller's is re-imported.

What the stage produces, a :class:`CompiledArtefact`, goes to the device
stage: the path of a shared library or cubin to load, or, when the
configuration cannot work, the failure exactly as the device stage would have
recorded it (same :class:`~pytest_autotune.results.FailureKind`, same
message): compile failures and static resource rejections never reach the
device.

On a CPU runner the compilers share the cores with the kernel being timed.
:class:`CompilerProcesses` starts every compiler in its own process group so
the device stage can stop them all (``SIGSTOP``) for the length of a timed
window and let them go on (``SIGCONT``) afterwards; no compiler starts while
a window is open.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Protocol, Sequence

from ..results import FailureKind, Measurement
from ..runners.base import capabilities


def artefact_cache_dir(kind: str) -> Path:
    """Where compiled artefacts of ``kind`` ("c", "cubin") are cached: ``$PYTEST_AUTOTUNE_CACHE_DIR/<kind>``,
    else ``$XDG_CACHE_HOME/pytest-autotune/<kind>``, else ``~/.cache/pytest-autotune/<kind>``."""
    root = os.environ.get("PYTEST_AUTOTUNE_CACHE_DIR")
    if root:
        return Path(root) / kind
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "pytest-autotune" / kind


def default_compile_workers(sharing: int = 1) -> int:
    """CPU cores this process may use, divided among ``sharing`` processes that tune at once (pytest-xdist
    workers), minus one for the device stage; at least 1."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, cores // max(1, sharing) - 1)


def parse_compile_workers(text: str | int, sharing: int = 1) -> int:
    """A ``--autotune-compile-workers`` value: a whole number >= 1, or ``auto`` (:func:`default_compile_workers`)."""
    if isinstance(text, str) and text.strip().lower() in ("", "auto"):
        return default_compile_workers(sharing)
    try:
        value = int(str(text).strip())
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"expected a whole number of compile workers >= 1 (1 compiles inline, as without a pool) "
                         f"or 'auto' (CPU cores minus one, here {default_compile_workers()}), got {text!r}")
    return value


def config_key(params: Mapping[str, Any]) -> str:
    """A hashable, order-independent name of a configuration (the same as the tuner's ``params_key``)."""
    return repr(sorted((str(k), repr(v)) for k, v in params.items()))


@dataclass
class CompiledArtefact:
    """The compile stage's outcome for one configuration, handed to the device stage.

    ``ok``: ``path`` is the compiled artefact (a ``.so``, a cubin) and
    ``symbol`` what to look up in it. Otherwise ``failure``/``detail`` are what
    the device stage would have recorded, and the device never sees it.
    ``extra`` holds what the device stage's measurement would carry about the
    compile (kernel name, source hash, launch geometry, cache hit).
    """

    ok: bool
    path: str | None = None
    symbol: str | None = None
    failure: FailureKind | None = None
    detail: str = ""
    seconds: float = 0.0  # time in the compiler
    extra: dict[str, Any] = field(default_factory=dict)

    def failed_measurement(self, params: Mapping[str, Any]) -> Measurement:
        """The failed :class:`Measurement` the device stage would have returned."""
        assert self.failure is not None
        timings = {"total_s": self.seconds}
        if self.failure is not FailureKind.INVALID:
            timings["compile_s"] = self.seconds
        measurement = Measurement.failed(dict(params), self.failure, self.detail, **timings)
        measurement.extra.update(self.extra)
        return measurement


class CompileStage(Protocol):
    """The CPU-only half of a source runner's evaluation; safe to call from several threads at once."""

    pause_while_timing: bool  # True on CPU runners: compilers stop while a kernel is timed

    def compile(self, params: Mapping[str, Any], processes: "CompilerProcesses") -> CompiledArtefact: ...


STOP_WAIT_S = 0.5  # longest wait for a compiler to stop
# Stopped, traced, zombie, dead; and D (uninterruptible I/O): off the CPU, and it stops on leaving the
# kernel, since the stop signal is already pending.
_STOPPED_STATES = frozenset("TtZXD")


def _process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (Linux ``/proc/<pid>/task/<tid>/children``; just ``pid`` elsewhere)."""
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{current}/task/{task}/children") as handle:
                    todo.extend(int(child) for child in handle.read().split())
            except (OSError, ValueError):
                pass
    return tree


_SIGSTOP_BIT = 1 << (signal.SIGSTOP - 1)


def _stop_pending(pid: int) -> bool:
    """Whether a SIGSTOP is pending for ``pid`` (``/proc/<pid>/status``): it stops before it runs another
    instruction of its own. On a busy machine a runnable process can wait a while for the CPU that would
    let it take the signal; it is off the CPU all that time."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            masks = [int(line.split()[1], 16) for line in handle if line.startswith(("SigPnd:", "ShdPnd:"))]
    except (OSError, IndexError, ValueError):
        return False
    return any(mask & _SIGSTOP_BIT for mask in masks)


def _stopped(pid: int) -> bool:
    """Whether ``pid`` is held off the CPU: stopped (``/proc/<pid>/stat``), or about to stop with a SIGSTOP
    pending; True when gone or where there is no /proc."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in _STOPPED_STATES or _stop_pending(pid)


class CompilerProcesses:
    """Compiler processes started by the pool, which a timed window can stop and let go on.

    Each compiler starts in a new process group (``start_new_session``), so
    stopping the group stops the driver and what it runs (``cc1``, ``as``,
    ``ld``). While paused, no compiler starts. A compiler's time-out counts
    only the time it was not stopped.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: set[int] = set()
        self._pauses = 0
        self._paused_since = 0.0
        self._paused_total = 0.0
        self._closed = False
        self._unpaused = threading.Event()
        self._unpaused.set()

    def run(self, cmd: Sequence[str], timeout: float) -> subprocess.CompletedProcess:
        """``subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)``, pausable; ``timeout``
        counts the time the compiler was not stopped."""
        while True:
            self._unpaused.wait()
            with self._lock:
                if self._closed:
                    raise RuntimeError("the compile pool is closed")
                if self._pauses == 0:
                    proc = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
                    self._groups.add(proc.pid)
                    break
        started, paused_before = time.monotonic(), self.paused_seconds()
        try:
            while True:
                # the time-out counts the compiler's own time: stopped stretches do not use it up
                left = timeout - (time.monotonic() - started - (self.paused_seconds() - paused_before))
                try:
                    if left <= 0:
                        raise subprocess.TimeoutExpired(list(cmd), timeout)
                    out, err = proc.communicate(timeout=min(left, 1.0))
                    break
                except subprocess.TimeoutExpired:
                    if left > 1.0 or self.paused:
                        continue  # retrying communicate loses no output
                    self._signal(proc.pid, signal.SIGKILL)
                    proc.communicate()
                    raise subprocess.TimeoutExpired(list(cmd), timeout) from None
        finally:
            with self._lock:
                self._groups.discard(proc.pid)
        return subprocess.CompletedProcess(list(cmd), proc.returncode, out, err)

    def paused_seconds(self) -> float:
        """Seconds spent paused so far (the current pause included)."""
        with self._lock:
            ongoing = time.monotonic() - self._paused_since if self._pauses else 0.0
            return self._paused_total + ongoing

    @staticmethod
    def _signal(group: int, sig: int) -> None:
        try:
            os.killpg(group, sig)
        except (ProcessLookupError, PermissionError):
            pass  # finished in the meantime

    @property
    def paused(self) -> bool:
        return self._pauses > 0

    @property
    def running(self) -> int:
        """Compiler process groups alive now."""
        with self._lock:
            return len(self._groups)

    def pause(self) -> None:
        """Stop every running compiler and start no new one until :meth:`resume`.

        Returns once every process of every compiler's group is stopped (a
        signal is delivered asynchronously: a compiler running on another
        core goes on for a moment after ``kill`` returns), or after
        ``STOP_WAIT_S`` for one stuck in uninterruptible I/O.
        """
        with self._lock:
            self._pauses += 1
            if self._pauses == 1:
                self._paused_since = time.monotonic()
            self._unpaused.clear()
            for group in self._groups:
                self._signal(group, signal.SIGSTOP)
            deadline = time.monotonic() + STOP_WAIT_S
            quiet = 0  # consecutive checks that found nothing running
            while self._groups and time.monotonic() < deadline:
                running = [pid for group in self._groups for pid in _process_tree(group) if not _stopped(pid)]
                quiet = 0 if running else quiet + 1
                if quiet == 2:
                    break
                # again: reaches a child forked after the first signal (and, checked once more after a quiet
                # check, one a parent in uninterruptible sleep, counted as stopped, forked meanwhile: seen once
                # on a loaded host, a compiler running during a timed window)
                for group in self._groups:
                    self._signal(group, signal.SIGSTOP)
                time.sleep(0.0002)

    def resume(self) -> None:
        with self._lock:
            if self._pauses == 0:
                return
            self._pauses -= 1
            if self._pauses:
                return
            self._paused_total += time.monotonic() - self._paused_since
            for group in self._groups:
                self._signal(group, signal.SIGCONT)
            self._unpaused.set()

    @contextlib.contextmanager
    def paused_window(self) -> Iterator[None]:
        self.pause()
        try:
            yield
        finally:
            self.resume()

    def close(self) -> None:
        """Kill every running compiler; later :meth:`run` calls raise."""
        with self._lock:
            self._closed = True
            for group in self._groups:
                self._signal(group, signal.SIGKILL)
            self._pauses = 0
            self._unpaused.set()


class CompilePool:
    """Compile workers for one runner: :meth:`submit` configurations ahead, :meth:`take` their artefacts.

    ``take`` of a configuration never submitted (a re-timing, a gate run)
    returns None and the device stage compiles it itself, as without a pool.
    So does a compile stage that raised (a parameter value that cannot be
    written into source): the device stage then raises the same error.
    """

    def __init__(self, stage: CompileStage, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"a compile pool needs at least 1 worker, got {workers}")
        self.stage = stage
        self.workers = workers
        self.processes = CompilerProcesses()
        self._threads = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="autotune-compile")
        self._jobs: dict[str, Future] = {}
        self._lock = threading.Lock()
        self.compiled = 0  # artefacts handed to the device stage
        self.rejected = 0  # failures that never reached the device

    def submit(self, configurations: Sequence[Mapping[str, Any]]) -> None:
        """Start compiling ``configurations`` (already submitted ones are skipped)."""
        with self._lock:
            for params in configurations:
                key = config_key(params)
                if key not in self._jobs:
                    self._jobs[key] = self._threads.submit(self._compile, dict(params))

    def _compile(self, params: dict[str, Any]) -> CompiledArtefact | None:
        try:
            return self.stage.compile(params, self.processes)
        except Exception:
            return None  # the device stage compiles it and raises (or records) what went wrong

    def pending(self, params: Mapping[str, Any]) -> bool:
        """Whether ``params`` was submitted and not taken yet."""
        with self._lock:
            return config_key(params) in self._jobs

    def first_ready(self, configurations: Sequence[Mapping[str, Any]]) -> int:
        """Index of the configuration the device stage should take next: the first whose compile is done.

        Waits until one is when none is yet. A configuration never submitted counts as ready (the device
        stage compiles it itself), so the device never idles behind one slow compile while another waits.
        """
        if not configurations:
            raise ValueError("first_ready needs at least one configuration")
        with self._lock:
            jobs = [self._jobs.get(config_key(params)) for params in configurations]
        if any(job is None for job in jobs):
            return next(i for i, job in enumerate(jobs) if job is None)
        done, _ = wait(jobs, return_when=FIRST_COMPLETED)  # type: ignore[arg-type]
        return next(i for i, job in enumerate(jobs) if job in done)

    def take(self, params: Mapping[str, Any]) -> CompiledArtefact | None:
        """The artefact of a submitted configuration (waiting for its compile), else None."""
        with self._lock:
            job = self._jobs.pop(config_key(params), None)
        if job is None:
            return None
        artefact = job.result()
        if artefact is not None:
            if artefact.ok:
                self.compiled += 1
            else:
                self.rejected += 1
        return artefact

    def timing_window(self) -> contextlib.AbstractContextManager[None]:
        """Context for the device stage's timed runs: compilers stopped when the stage asks for it."""
        return self.processes.paused_window() if self.stage.pause_while_timing else contextlib.nullcontext()

    def close(self) -> None:
        self.processes.close()
        self._threads.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            self._jobs.clear()


@contextlib.contextmanager
def compile_ahead(runner: Any, workers: int | None) -> Iterator[Callable[[list[dict[str, Any]]], None] | None]:
    """The evaluator's ``prefetch`` hook for ``runner`` with ``workers`` compile workers, or None.

    None (compile inline, as without a pool) when ``workers`` is None or 1,
    or when the runner has no separate compile stage. The pool is closed on
    exit; the runner keeps working without it.
    """
    if workers is None or workers <= 1 or not capabilities(runner).compiles_ahead \
            or not runner.start_compile_ahead(workers):
        yield None
        return
    try:
        yield runner.prefetch
    finally:
        runner.stop_compile_ahead()



Prefetch = Callable[[list[dict[str, Any]]], None]


def pipelined(batch_size: int, prefetch: Prefetch | None, compiling: Prefetch | None,
              workers: int | None) -> tuple[int, Prefetch | None]:
    """The evaluator's ``batch_size`` and ``prefetch`` once a compile pool (``compiling``) runs.

    With ``workers`` compile workers the evaluator keeps at least
    ``workers + 1`` proposals pending: one on the device and one compiling on
    each worker, so no worker idles while the device measures. More would
    only make the strategy propose further ahead of its results (speculation
    costs search quality, ``benchmarks/bench_batch.py``) without compiling
    anything sooner. Without a pool both stay as given.
    """
    if compiling is None or not workers:
        return batch_size, prefetch
    if prefetch is None:
        return max(batch_size, workers + 1), compiling
    caller = prefetch

    def both(configurations: list[dict[str, Any]]) -> None:
        compiling(configurations)
        caller(configurations)

    return max(batch_size, workers + 1), both
