"""The isolated worker: a fresh interpreter that hosts one executor.

Started by :mod:`.isolation` as ``python -m pytest_autotune.execution.worker
CONN_FD HEARTBEAT_FD``, never through :mod:`multiprocessing`: spawn and
forkserver children re-run the caller's ``__main__`` file, so a plain script
without an ``if __name__ == "__main__"`` guard would start itself again.
This process imports only this package, numpy and what the recipe names.

Protocol on ``CONN_FD`` (a :class:`multiprocessing.connection.Connection`):

1. parent -> ``("setup", environ, cwd, sys_path)``: plain strings, applied
   before anything of the caller's is unpickled;
2. parent -> the :class:`~.isolation.ExecutorRecipe`;
   worker -> ``("ready", device, constants)`` or ``("init_error", exc, text)``;
3. parent -> ``("eval", params, keep_outputs, stop)``, or with a compile pool
   ``("eval", params, keep_outputs, stop, artefact, pause)``, and with reference runs
   (measure/reference.py) their size after those; worker -> ``("result",
   measurement, healthy)`` or ``("raise", exc, text)``; ``("close",)`` or
   end of file ends the worker. With ``pause`` the worker sends ``("timing",
   True)`` before its timed runs and waits for ``("window open",)`` (the
   parent has stopped its compilers), then ``("timing", False)`` after them.

``HEARTBEAT_FD`` is a 16-byte shared file (:class:`HeartbeatBoard`) the
watchdog in the parent reads while an evaluation runs.

Stdout and stderr are one pipe the parent drains and caps per evaluation
(:mod:`.worker_bounds`); the worker flushes both, C's stdio included,
before each answer, so an evaluation's output arrives before its result.
The worker leads its own process group: when the parent goes away without
closing it, it kills the group (its candidates' forked children) on exit.
"""
from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import pickle
import signal
import sys
import tempfile
import traceback
from multiprocessing.connection import Connection
from typing import Any, Iterator

from .executor import PHASES

_PHASE_CODE = {name: i for i, name in enumerate(PHASES)}


class HeartbeatBoard:
    """A launch counter and the current phase in memory shared with the parent.

    Shared memory rather than heartbeat messages: the worker bumps the counter
    after every launch, inside the timed loop, where a store costs nothing and
    a pipe write is a system call that can block once the parent stops
    reading. The parent also reads the last phase after the worker died.
    """

    SIZE = 16  # two int64: [beats, phase code]

    def __init__(self, fd: int) -> None:
        self._map = mmap.mmap(fd, self.SIZE)
        self._cells = (ctypes.c_int64 * 2).from_buffer(self._map)

    @classmethod
    def create(cls) -> tuple["HeartbeatBoard", int]:
        """A new zeroed board and the file descriptor to hand to the worker."""
        try:
            fd = os.memfd_create("pytest-autotune-heartbeat")  # Linux: never touches a disk
        except (AttributeError, OSError):  # pragma: no cover - macOS, old kernels
            fd, path = tempfile.mkstemp(prefix="pytest-autotune-heartbeat-")
            os.unlink(path)
        os.ftruncate(fd, cls.SIZE)
        return cls(fd), fd

    @property
    def beats(self) -> int:
        return self._cells[0]

    @property
    def phase(self) -> str:
        return PHASES[self._cells[1]]

    def beat(self, phase: str) -> None:
        self._cells[1] = _PHASE_CODE[phase]
        self._cells[0] += 1

    def close(self) -> None:
        del self._cells  # the ctypes view pins the map
        self._map.close()


def _safe_exception(exc: BaseException) -> BaseException:
    """The exception itself if it survives pickling, else a RuntimeError with its text."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")


def _apply_setup(message: tuple[Any, ...]) -> None:
    """The caller's environment, working directory and import path, as they are now."""
    _, environ, cwd, sys_path = message
    os.environ.clear()
    os.environ.update(environ)  # before any backend reads CUDA_VISIBLE_DEVICES
    try:
        os.chdir(cwd)
    except OSError:
        pass
    sys.path[:] = sys_path


@contextlib.contextmanager
def _timing_window(conn: Connection) -> Iterator[None]:
    """Ask the parent to open its timing window (pause its compilers) and wait until it has."""
    conn.send(("timing", True))
    reply = conn.recv()
    if reply != ("window open",):  # pragma: no cover - protocol error
        raise RuntimeError(f"unexpected reply to a timing request: {reply!r}")
    try:
        yield
    finally:
        conn.send(("timing", False))


def _evaluate(executor: Any, conn: Connection, params: Any, keep_outputs: bool, stop: Any = None,
              artefact: Any = None, pause: bool = False, reference_n: int = 0) -> Any:
    """One evaluation; with a compile pool's ``artefact`` the executor loads it instead of compiling.

    ``stop`` (early stopping) and ``artefact`` are passed only when set: an executor that times or
    compiles nothing need not know about them. ``reference_n``: the reference runs' size for this evaluation
    (0: none; an executor without reference runs ignores it)."""
    executor.reference_n = int(reference_n)
    more: dict[str, Any] = {}
    if stop is not None:
        more["stop"] = stop
    if artefact is not None:
        more["artefact"] = artefact
    if not pause:
        return executor.evaluate(params, keep_outputs=keep_outputs, **more)
    executor.timing_window = lambda: _timing_window(conn)
    try:
        return executor.evaluate(params, keep_outputs=keep_outputs, **more)
    finally:
        executor.timing_window = contextlib.nullcontext


def _c_stdio() -> Any:
    """The C library's ``fflush``, with C's stdout made line-buffered (as on a terminal, so that what a kernel
    printed before it crashed reaches the pipe); None where there is no such C library."""
    try:
        libc = ctypes.CDLL(None)
        libc.setvbuf(ctypes.c_void_p.in_dll(libc, "stdout"), None, 1, 0)  # 1: _IOLBF
        return libc.fflush
    except (OSError, AttributeError, ValueError):  # pragma: no cover - not glibc/musl/macOS libc
        return None


def _flush(fflush: Any) -> None:
    """Everything printed so far into the pipe: Python's buffers and C's."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    if fflush is not None:
        fflush(None)


def serve(conn: Connection, board: HeartbeatBoard) -> bool:
    """Build the executor from the recipe, then evaluate until told to stop; True when the parent went
    away instead."""
    fflush = _c_stdio()
    try:
        _apply_setup(conn.recv())
        recipe = conn.recv()
    except (EOFError, OSError):
        return True  # parent went away before the start finished
    except BaseException as exc:  # the recipe names something this process cannot import
        conn.send(("init_error", _safe_exception(exc), traceback.format_exc()))
        return False
    try:
        executor = recipe.build()
        executor.heartbeat = board.beat
        _flush(fflush)
        conn.send(("ready", executor.device(), executor.constants()))
    except BaseException as exc:  # report, then exit: the parent raises
        _flush(fflush)
        conn.send(("init_error", _safe_exception(exc), traceback.format_exc()))
        return False
    try:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                return True  # parent went away
            if message[0] == "close":
                return False
            _, params, keep_outputs, stop, *compiled = message
            try:
                measurement = _evaluate(executor, conn, params, keep_outputs, stop, *compiled)
            except BaseException as exc:
                _flush(fflush)
                conn.send(("raise", _safe_exception(exc), traceback.format_exc()))
                continue
            _flush(fflush)
            try:
                conn.send(("result", measurement, executor.healthy))
            except Exception as exc:  # e.g. outputs that cannot be pickled
                conn.send(("raise", RuntimeError(f"cannot return the measurement: {exc}"), traceback.format_exc()))
            if not executor.healthy:
                return False  # poisoned context: exit so the parent starts a fresh one
    finally:
        try:
            executor.close()
        except Exception:
            pass


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    try:
        conn_fd, board_fd = (int(arg) for arg in argv)
    except ValueError:
        print(
            "usage: python -m pytest_autotune.execution.worker CONN_FD HEARTBEAT_FD\n"
            "(started by pytest_autotune.execution.isolation, not by hand)",
            file=sys.stderr,
        )
        return 2
    board = HeartbeatBoard(board_fd)
    os.close(board_fd)
    with Connection(conn_fd) as conn:
        orphaned = serve(conn, board)
    if orphaned and os.getpgrp() == os.getpid():  # no parent left to end what the candidates forked
        sys.stdout.flush()
        os.killpg(os.getpid(), signal.SIGKILL)  # this process too: it was exiting anyway
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
