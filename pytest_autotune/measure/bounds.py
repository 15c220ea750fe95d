"""Sizes for the bounds of an isolated worker: its memory limit and its per-evaluation output cap.

A candidate kernel runs in a worker process (``execution/isolation.py``); what
it may cost the machine is bounded there. Both bounds are written as sizes
(``16KiB``, ``4GiB``, ``512MB``, a plain number of bytes); the memory limit
also as a share of the machine (``50%``), ``auto`` or ``none``:

* ``auto`` (the default): half of this machine's memory (the smaller of
  physical memory and a container's cgroup limit), divided among the
  pytest-xdist workers of the run, which each tune a kernel at once. Half,
  so that one runaway candidate leaves the rest of the machine (the
  caller, the compilers, the desktop) running; a problem that needs more
  names its size.
* ``N%``: that share of the machine's memory for each worker.
* ``none``: no limit.
"""
from __future__ import annotations

import os
import re
from typing import Any

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "kb": 10**3, "m": 1 << 20, "mib": 1 << 20, "mb": 10**6,
          "g": 1 << 30, "gib": 1 << 30, "gb": 10**9, "t": 1 << 40, "tib": 1 << 40, "tb": 10**12}
_SIZE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*")
NO_LIMIT = ("none", "off", "unlimited")
SIZE_EXAMPLES = "a size such as 4GiB or 512MB, a share of the machine's memory such as 50%, auto, or none"


def parse_size(value: Any) -> int:
    """Bytes of a size: an int, or text such as ``16KiB``, ``4G``, ``512MB`` (k/M/G/T and KiB.. are binary, kB..
    decimal); ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"expected a size such as 16KiB or 4GiB, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"expected a size >= 0, got {value}")
        return value
    match = _SIZE.fullmatch(str(value).lower())
    if match is None or match.group(2) not in _UNITS:
        raise ValueError(f"expected a size such as 16KiB or 4GiB, got {value!r}")
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def check_memory_limit(value: Any) -> None:
    """Raise ValueError when ``value`` is not a memory limit :func:`memory_limit_bytes` understands."""
    if value is None:
        return
    text = str(value).strip().lower()
    if text in NO_LIMIT or text == "auto":
        return
    if text.endswith("%"):
        try:
            share = float(text[:-1])
        except ValueError:
            share = -1.0
        if not 0 < share <= 100:
            raise ValueError(f"expected a share of the machine's memory in (0%, 100%], got {value!r}")
        return
    try:
        size = parse_size(value)
    except ValueError:
        raise ValueError(f"expected {SIZE_EXAMPLES}, got {value!r}") from None
    if size == 0:
        raise ValueError(f"a memory limit of 0 bytes leaves nothing to run in; use none for no limit, got {value!r}")


def machine_memory() -> int | None:
    """Bytes of memory this process may use: physical memory, or a container's cgroup limit when smaller
    (None where neither can be read)."""
    found: list[int] = []
    try:
        found.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):  # pragma: no cover - not POSIX
        pass
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as handle:
                text = handle.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < (1 << 60):  # v1 writes "no limit" as a number near 2**63
            found.append(int(text))
    return min(found) if found else None


def memory_limit_bytes(value: Any, sharing: int | None = None) -> int | None:
    """The limit ``value`` means on this machine, in bytes; None: no limit (``none``, or the machine's memory
    unknown for ``auto`` and ``N%``). ``sharing``: processes tuning at once (default: pytest-xdist's worker
    count from the environment), among which ``auto`` divides its half."""
    check_memory_limit(value)
    if value is None:
        return None
    text = str(value).strip().lower()
    if text in NO_LIMIT:
        return None
    if text != "auto" and not text.endswith("%"):
        return parse_size(value)
    total = machine_memory()
    if total is None:
        return None
    if text.endswith("%"):
        return int(total * float(text[:-1]) / 100)
    if sharing is None:
        try:
            sharing = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
        except ValueError:
            sharing = 1
    return total // 2 // max(1, sharing)


def format_size(size: int) -> str:
    """``268435456`` -> ``256 MiB``: short, binary units."""
    value = float(size)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "bytes" or value == int(value) else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.0f} TiB" if value == int(value) else f"{value:.1f} TiB"
