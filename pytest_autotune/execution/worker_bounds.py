"""What bounds an isolated worker: its output per evaluation, its memory, its process group.

A candidate kernel is arbitrary code. Three ways it cost more than its own
configuration, and what :mod:`.isolation` does about each with these parts:

* Output: a kernel printing 40 MB per call once made a 1.68 GB pytest log.
  The worker's stdout and stderr are one pipe that an :class:`OutputTap`
  thread drains all the time (a full pipe would block the kernel), keeping
  per evaluation the first and the last ``cap / 2`` bytes and counting the
  rest.
* Memory: a candidate touching 20 GB took the machine down. The caller
  reads the resident memory of the worker and the processes it started
  (:func:`resident_bytes`) each time it wakes while waiting for an
  evaluation (every 50 ms) and stops the worker over its limit; the
  configuration fails as ``resources``. Resident memory, not an
  ``RLIMIT_AS``/``RLIMIT_DATA`` limit on address space: a refused ``malloc``
  surfaces as a segfault no one can tell from any other crash, and CUDA
  reserves far more address space than it uses. The price: a limit checked
  every 50 ms, so a candidate allocating faster than that can overshoot by
  what it touches in 50 ms before it is stopped. Linux only (``/proc``).
* Process group: the worker leads a session of its own, so a candidate's
  forked children are in its process group; :func:`kill_group` ends them
  with it.
"""
from __future__ import annotations

import os
import select
import signal
import threading

_CHUNK = 1 << 16
_TAKE_LIMIT = 1 << 22  # bytes read at most when an evaluation's output is taken: a pipe holds 64 KiB to 1 MiB
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class OutputTap:
    """Drains a worker's output pipe on a thread; :meth:`take` returns an evaluation's output, capped.

    The pipe is read all the time, so a kernel never blocks on a full pipe,
    and memory stays bounded: per window, ``cap // 2`` bytes from the start,
    ``cap - cap // 2`` from the end, and a count of the bytes in between.
    """

    def __init__(self, fd: int, cap: int) -> None:
        self._fd = fd
        self._cap = max(0, int(cap))
        self._lock = threading.Lock()
        self._head = bytearray()
        self._tail = bytearray()
        self._total = 0
        os.set_blocking(fd, False)
        self._thread = threading.Thread(target=self._drain, name="autotune-worker-output", daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        while True:
            with self._lock:
                fd = self._fd
            if fd < 0:
                return
            try:
                ready, _, _ = select.select([fd], [], [], 1.0)
            except (OSError, ValueError):  # closed under us
                return
            if ready:
                with self._lock:
                    if self._fd < 0 or not self._read(1):
                        return

    def _read(self, chunks: int) -> bool:
        """Read up to ``chunks`` chunks that are there now (lock held); False at end of file."""
        for _ in range(chunks):
            try:
                data = os.read(self._fd, _CHUNK)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not data:
                return False
            self._keep(data)
        return True

    def _keep(self, data: bytes) -> None:
        self._total += len(data)
        room = self._cap // 2 - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if data:
            self._tail += data
            excess = len(self._tail) - (self._cap - self._cap // 2)
            if excess > 0:
                del self._tail[:excess]

    def take(self) -> str:
        """What the worker wrote since the last take, at most ``cap`` bytes of it kept; '' when nothing.

        Reads what is in the pipe first: the worker flushes before it answers, so an evaluation's
        output is in the pipe, or already read, by the time its answer arrives."""
        with self._lock:
            if self._fd >= 0:
                self._read(_TAKE_LIMIT // _CHUNK)
            head, tail, total = bytes(self._head), bytes(self._tail), self._total
            self._head, self._tail, self._total = bytearray(), bytearray(), 0
        return capped_text(head, tail, total)

    def close(self) -> str:
        """Stop draining and close the pipe; returns what :meth:`take` would have."""
        text = self.take()
        with self._lock:
            fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)
        return text


def capped_text(head: bytes, tail: bytes, total: int) -> str:
    """Head and tail of ``total`` bytes of output as text, with a line counting what lies between them."""
    omitted = total - len(head) - len(tail)
    if total == 0:
        return ""
    text = head.decode(errors="replace")
    if omitted > 0:
        if text and not text.endswith("\n"):
            text += "\n"
        text += f"... {omitted} bytes of kernel output omitted ...\n"
    return text + tail.decode(errors="replace")


def _descendants(pid: int) -> list[int]:
    """``pid`` and the processes its main threads started, where Linux lists them (``/proc/<pid>/task/<pid>/
    children``, one read per process: read every 50 ms, it must stay cheap for a worker with many threads)."""
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        try:
            with open(f"/proc/{current}/task/{current}/children") as handle:
                todo.extend(int(child) for child in handle.read().split())
        except (OSError, ValueError):
            pass
    return tree


def resident_bytes(pid: int) -> int | None:
    """Resident memory of ``pid`` and the processes it started, in bytes; None where ``/proc`` cannot tell."""
    total, seen = 0, False
    for member in _descendants(pid):
        try:
            with open(f"/proc/{member}/statm") as handle:
                total += int(handle.read().split()[1]) * _PAGE
            seen = True
        except (OSError, IndexError, ValueError):
            continue
    return total if seen else None


def kill_group(pgid: int) -> None:
    """SIGKILL every process of group ``pgid`` (a worker and what its candidates forked); gone is fine."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
