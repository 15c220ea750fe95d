"""Small helpers shared by the benchmarks: timing, peak memory, tables, JSON results.

Generic on purpose: nothing here knows about search spaces or strategies.

* :func:`best_of` -- best wall time of N runs (and the last result);
* :func:`per_call` -- best-of-N mean cost of one call over a list of arguments;
* :func:`peak_memory` -- peak Python-heap growth during a call (tracemalloc, which
  numpy reports its buffers to), measured in a separate run because tracing
  slows pure-Python code several-fold and would distort timings;
* :func:`print_table` / :func:`fmt_time` / :func:`fmt_bytes` / :func:`fmt_ratio`;
* :func:`environment` and :func:`write_json` -- a results file with the machine it came from;
* :func:`anchor_cache_dir` -- the folder, outside the repository, of the anchor-run caches.
"""
from __future__ import annotations

import gc
import json
import os
import platform
import sys
import time
import tracemalloc
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

__all__ = ["best_of", "per_call", "peak_memory", "print_table", "fmt_time", "fmt_bytes", "fmt_ratio",
           "environment", "write_json", "Timer", "anchor_cache_dir"]


def anchor_cache_dir() -> Path:
    """Where the anchor caches (Kernel Tuner / Optuna runs) live: ``$AUTOTUNE_ANCHOR_CACHE``, else
    ``~/.cache/pytest-autotune/anchors``. Outside the repository (the caches are tens of MB and
    regenerable): a missing file is filled by the next run of the benchmark that uses it."""
    env = os.environ.get("AUTOTUNE_ANCHOR_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "pytest-autotune" / "anchors"


def best_of(fn: Callable[[], Any], repeat: int = 3, warmup: int = 0) -> tuple[float, Any]:
    """Best wall time in seconds of ``repeat`` calls of ``fn()`` (after ``warmup`` untimed calls), and the last result.

    The garbage collector is run before, and disabled during, each timed call so
    that a collection triggered by earlier garbage is not charged to ``fn``.
    """
    result = None
    for _ in range(warmup):
        result = fn()
    best = float("inf")
    for _ in range(max(1, repeat)):
        result = None
        gc.collect()
        gc.disable()
        try:
            start = time.perf_counter()
            result = fn()
            elapsed = time.perf_counter() - start
        finally:
            gc.enable()
        best = min(best, elapsed)
    return best, result


def per_call(fn: Callable[..., Any], args: Sequence[Any], repeat: int = 3, star: bool = False,
             clock: Callable[[], float] = time.perf_counter) -> float:
    """Seconds per call of ``fn(arg)`` (``fn(*arg)`` with ``star``) averaged over ``args``; best of ``repeat`` passes.

    ``clock=time.process_time`` measures CPU time instead of wall time: less
    sensitive to other processes on a busy machine (single-threaded code only).
    """
    if not args:
        return float("nan")
    best = float("inf")
    for _ in range(max(1, repeat)):
        gc.collect()
        start = clock()
        if star:
            for a in args:
                fn(*a)
        else:
            for a in args:
                fn(a)
        best = min(best, clock() - start)
    return best / len(args)


def peak_memory(fn: Callable[[], Any]) -> tuple[int, Any]:
    """Peak traced allocation in bytes during ``fn()`` above what was allocated before it, and its result."""
    gc.collect()
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        result = fn()
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        if not was_tracing:
            tracemalloc.stop()
    return max(0, peak), result


class Timer:
    """``with Timer() as t: ...`` then ``t.seconds``."""

    def __enter__(self) -> "Timer":
        self.start = time.perf_counter()
        self.seconds = float("nan")
        return self

    def __exit__(self, *exc: Any) -> None:
        self.seconds = time.perf_counter() - self.start


# -- formatting ---------------------------------------------------------------------------------

def fmt_time(seconds: float | None) -> str:
    if seconds is None or seconds != seconds:
        return "-"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    if seconds >= 1e-6:
        return f"{seconds * 1e6:.1f} us"
    return f"{seconds * 1e9:.0f} ns"


def fmt_bytes(n: float | None) -> str:
    if n is None or n != n:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover


def fmt_ratio(x: float | None) -> str:
    if x is None or x != x:
        return "-"
    return f"{x:.0f}x" if x >= 100 else f"{x:.1f}x" if x >= 10 else f"{x:.2f}x"


def print_table(rows: Iterable[Sequence[Any]], header: Sequence[str], title: str | None = None,
                align: str | None = None, file=None) -> str:
    """Print (and return) a plain-text table; ``align`` is one 'l'/'r' per column (default: first left, rest right)."""
    rows = [[str(c) for c in r] for r in rows]
    header = [str(h) for h in header]
    align = align or "l" + "r" * (len(header) - 1)
    widths = [max([len(h)] + [len(r[i]) for r in rows if i < len(r)]) for i, h in enumerate(header)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(cells, widths, align)).rstrip()

    out = []
    if title:
        out.append(title)
    out.append(line(header))
    out.append("  ".join("-" * w for w in widths))
    out.extend(line(r) for r in rows)
    text = "\n".join(out)
    print(text, file=file or sys.stdout, flush=True)
    return text


# -- results files ------------------------------------------------------------------------------

def environment(packages: Iterable[str] = ()) -> dict[str, Any]:
    """Where and with what a benchmark ran."""
    from importlib import metadata

    versions = {}
    for name in packages:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    try:
        load = os.getloadavg()
    except OSError:  # pragma: no cover - not on every platform
        load = None
    return {
        "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "cpu_count": os.cpu_count(),
        "load_average": load,
        "packages": versions,
    }


def write_json(path: str | os.PathLike, payload: Any) -> Path:
    """Write ``payload`` as indented JSON, atomically (a ``.tmp`` sibling renamed into place)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(payload, f, indent=2, sort_keys=False, default=_jsonable)
        f.write("\n")
    os.replace(tmp, path)
    return path


def _jsonable(obj: Any) -> Any:
    try:
        import numpy as np
    except ImportError:  # pragma: no cover
        np = None
    if np is not None:
        if isinstance(obj, np.integer):
            return int(obj)
        if isinstance(obj, np.floating):
            return float(obj)
        if isinstance(obj, np.ndarray):
            return obj.tolist()
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")
