"""Lock maintenance after tests were renamed or deleted: which entries belong to no test, which were
renamed, the stored sources nothing uses; and the locked, atomic writes that remove or re-key them.

What exists is what pytest collects (:mod:`..plugin.prune` runs the collection); everything here works
from the :class:`Collected` record, without pytest.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ..lock.lockfile import lockfile_path, merge_entries, read_lockfile
from ..lock.sources import unreferenced_sources

__all__ = ["Collected", "Orphan", "Rename", "find_orphans", "find_renames", "rekey", "orphaned_sources", "remove_orphans"]


@dataclass(eq=False)
class Collected:
    """What collection found: tune-marked node ids, the files they live in, errors, the lock directory."""

    marked: set[str] = field(default_factory=set)
    files: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)
    rootdir: Path | None = None
    lockdir: Path | None = None
    spaces: dict[str, str] = field(default_factory=dict)  # marked node id -> its search space's hash


@dataclass(frozen=True)
class Orphan:
    lockfile: Path
    key: str
    test: str


def find_orphans(found: Collected) -> list[Orphan]:
    """Entries of every lockfile in the lock directory whose test is no collected tune-marked test."""
    assert found.lockdir is not None and found.rootdir is not None
    orphans = []
    for path in sorted(found.lockdir.glob("*.json")):
        lock = read_lockfile(path)  # a corrupt lockfile raises: reported, never rewritten
        for key, entry in sorted((lock.entries if lock else {}).items()):
            test = str(entry.test or key.rsplit("::", 1)[0])
            test_file = test.split("::", 1)[0]
            in_scope = test_file in found.files or not (found.rootdir / test_file).exists()
            if in_scope and test not in found.marked:
                orphans.append(Orphan(path, key, test))
    return orphans


@dataclass(frozen=True)
class Rename:
    """An orphaned entry that belongs to a renamed test: re-keyed, not removed."""

    lockfile: Path
    key: str
    new_key: str
    new_test: str


def find_renames(found: Collected, orphans: Sequence[Orphan]) -> list[Rename]:
    """Orphans whose kernel is tuned, with the same search space, by exactly one collected test of the same
    file set that has no entry for that kernel yet (the test was renamed): they move to that test's key.
    (The problem is checked by the gate and ``--autotune`` when the test runs; collection cannot see it.)"""
    renames = []
    for o in orphans:
        lock = read_lockfile(o.lockfile)
        entry = (lock.entries if lock else {}).get(o.key) or {}
        kernel, space = (entry.kernel, entry.hashes.get("space")) if entry else (None, None)
        taken = {str(e.test) for e in (lock.entries if lock else {}).values() if e.kernel == kernel}
        candidates = [t for t, h in sorted(found.spaces.items()) if h == space and t not in taken]
        if kernel and len(candidates) == 1:
            renames.append(Rename(o.lockfile, o.key, f"{candidates[0]}::{kernel}", candidates[0]))
    return renames


def rekey(renames: Sequence[Rename]) -> None:
    """Move each renamed test's entry to its new key (one locked, atomic merge per lockfile)."""
    for r in renames:
        lock = read_lockfile(r.lockfile)
        if lock is not None and r.key in lock.entries:
            entry = {**lock.entries[r.key], "test": r.new_test}
            merge_entries(lockfile_path(r.lockfile.parent, r.lockfile.stem), {r.new_key: entry}, lock.device,
                          remove=[r.key])


def orphaned_sources(lockdir: Path, orphans: Sequence[Orphan]) -> list[Path]:
    """Stored kernel sources (``sources/``) that no entry references once ``orphans`` are gone."""
    gone = {(o.lockfile, o.key) for o in orphans}
    referenced = []
    for path in sorted(lockdir.glob("*.json")):
        lock = read_lockfile(path)
        kept = [e for key, e in (lock.entries if lock else {}).items() if (path, key) not in gone]
        referenced += [e.source_file for e in kept if e.source_file]
        referenced += [name for e in kept for name in e.headers.values()]  # stored headers
    return unreferenced_sources(lockdir, referenced)


def remove_orphans(orphans: Sequence[Orphan], sources: Sequence[Path] = ()) -> None:
    """Remove the orphaned entries, each lockfile in one locked, atomic merge, then the sources nothing uses."""
    by_file: dict[Path, list[str]] = {}
    for o in orphans:
        by_file.setdefault(o.lockfile, []).append(o.key)
    for path, keys in by_file.items():
        lock = read_lockfile(path)
        if lock is not None:
            merge_entries(lockfile_path(path.parent, path.stem), {}, lock.device, remove=keys)
    for path in sources:
        path.unlink(missing_ok=True)
