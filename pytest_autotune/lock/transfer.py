"""Warm start: tune a kernel on a new device from what other devices' lockfiles already hold.

A repository that tuned a kernel on five GPUs knows five good configurations
(and their runners-up) before the sixth GPU measures anything. When that
kernel is tuned on a device without an entry, the winners and runners-up of
the other devices' entries for the *same kernel and the same search space*
are evaluated first, in round-robin order (every device's winner, then every
device's first runner-up, ...; duplicates once), and the strategy then sees
them as ordinary observations. On a GPU unlike the others they cost a few
evaluations; on a similar one the search starts next to the optimum
(``benchmarks/bench_transfer.py`` measures both).

Reads lockfiles only; never imports pytest.
"""
from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .entry import as_entry
from .lockfile import LockfileError, read_lockfile
from .problem import problem_distance

__all__ = ["WarmStart", "candidates_of", "interleave", "warm_start"]


@dataclass
class WarmStart:
    """Configurations to evaluate first, and the lockfiles (devices) they came from."""

    seeds: list[dict[str, Any]] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)  # lockfile stems (device slugs), sorted

    def note(self) -> str:
        """The summary's note: ``warm start from 3 devices`` (empty when there was nothing to start from)."""
        n = len(self.devices)
        return f"warm start from {n} device{'s' if n != 1 else ''}" if n else ""


def candidates_of(entry: Mapping[str, Any]) -> list[dict[str, Any]]:
    """An entry's winner followed by its runners-up, best first."""
    entry = as_entry(entry)
    return [entry.params, *(r.params for r in entry.runners_up)]


def _key(params: Mapping[str, Any]) -> str:
    return repr(sorted((str(k), repr(v)) for k, v in params.items()))


def interleave(sources: Sequence[Sequence[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """Round-robin over ranked lists (each source's best, then each one's second, ...), duplicates dropped.

    Round-robin rather than source by source: when one source device is unlike
    this one, its whole list is no more likely to help than the others' winners.
    """
    seen: set[str] = set()
    out: list[dict[str, Any]] = []
    for rank in range(max((len(s) for s in sources), default=0)):
        for source in sources:
            if rank < len(source) and _key(source[rank]) not in seen:
                seen.add(_key(source[rank]))
                out.append(dict(source[rank]))
    return out


def _best_entry(entries: list[Mapping[str, Any]], hashes: Mapping[str, str],
                problem: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The same problem if the device tuned it, else the nearest problem size, else the first by test."""
    same = [e for e in entries if as_entry(e).hashes.get("problem") == hashes.get("problem")]
    if same:
        return same[0]
    if problem is not None:
        ranked = sorted(entries, key=lambda e: _distance_or_inf(problem, as_entry(e).problem))
        return ranked[0]
    return entries[0]


def _distance_or_inf(a: Mapping[str, Any], b: Any) -> float:
    if not isinstance(b, Mapping):
        return math.inf
    d = problem_distance(a, b)
    return math.inf if d is None else d


def warm_start(lockdir: str | os.PathLike[str], own_lockfile: str | os.PathLike[str], kernel: str,
               hashes: Mapping[str, str], problem: Mapping[str, Any] | None = None) -> WarmStart:
    """Seeds for tuning ``kernel`` from the other lockfiles in ``lockdir`` (``own_lockfile`` excluded).

    An entry qualifies when its kernel name and space hash equal ``kernel`` and
    ``hashes["space"]`` (a different space would make its parameters
    meaningless here). A lockfile that cannot be read is skipped: the warm
    start is an optimisation, and the search still runs without it.
    """
    own = Path(own_lockfile).resolve()
    ranked_lists: list[list[dict[str, Any]]] = []
    devices: list[str] = []
    directory = Path(lockdir)
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else ():
        if path.resolve() == own:
            continue
        try:
            lock = read_lockfile(path)
        except LockfileError:
            continue
        if lock is None:
            continue
        matching = [e for key, e in sorted(lock.entries.items())
                    if _kernel_of(key, e) == kernel and e.hashes.get("space") == hashes.get("space")]
        if matching:
            ranked_lists.append(candidates_of(_best_entry(matching, hashes, problem)))
            devices.append(path.stem)
    return WarmStart(interleave(ranked_lists), devices)


def _kernel_of(key: str, entry: Mapping[str, Any]) -> str:
    name = as_entry(entry).kernel
    return name if isinstance(name, str) and name else key.rsplit("::", 1)[-1]
