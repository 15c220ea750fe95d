"""Neighbour and nearest-valid queries on a sorted mixed-radix key array.

Every valid configuration is one int64 key, ``sum(index_k * mult_k)`` with the
first parameter most significant, and the keys are sorted. A prefix of value
indices ``(v_0 .. v_k)`` then covers the contiguous key range
``[prefix, prefix + mult_k)``, so "does any valid configuration start like
this?" is two binary searches. Neighbourhood queries walk the parameters
level by level, keeping only prefixes that exist (a pruned trie walk), all
vectorised over the frontier. No per-query scan of the whole space, except
where a scan is the cheaper plan: box queries on small spaces (at most
:data:`SCAN_LIMIT` cells) or on sparse ones without a dense key table (at most
:data:`SCAN_LIMIT_SPARSE` cells), and walks whose frontier outgrows
:data:`MAX_FRONTIER`.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

# Beyond this many live prefixes a walk falls back to one vectorised scan.
MAX_FRONTIER = 200_000
# Frontiers up to this size go unchecked to the next level (with a dense key table: a probe is one gather) ...
CHECK_AT = 4096
# ... and without one, where every probe is a binary search, so pruning early pays off sooner.
CHECK_AT_SPARSE = 64
# Box queries on spaces with at most this many cells (valid rows x parameters) scan the columns instead,
# and so do spaces with up to SCAN_LIMIT_SPARSE cells when there is no dense key table.
SCAN_LIMIT = 1 << 16
SCAN_LIMIT_SPARSE = 1 << 20


DENSE_LIMIT = 1 << 24


class DenseRows:
    """Key -> row table over the whole Cartesian product (small spaces only).

    A gather replaces a binary search: ~20x cheaper per probe, which is what
    makes neighbourhoods of tens of thousands of rows cheap.
    """

    def __init__(self, keys: np.ndarray, cartesian_size: int):
        self.table = np.full(cartesian_size, -1, dtype=np.int32 if len(keys) < 2**31 else np.int64)
        self.table[keys] = np.arange(len(keys))


def rows_of_keys(keys: np.ndarray, probe: np.ndarray, dense: DenseRows | None = None) -> np.ndarray:
    """Row of each probe key in ``keys``, -1 where absent."""
    if dense is not None:
        return dense.table[probe].astype(np.int64)
    pos = np.searchsorted(keys, probe)
    pos_c = np.minimum(pos, len(keys) - 1)
    hit = (pos < len(keys)) & (keys[pos_c] == probe)
    return np.where(hit, pos_c, -1)


def _prefix_exists(keys: np.ndarray, lo: np.ndarray, width: int) -> np.ndarray:
    return np.searchsorted(keys, lo, "left") < np.searchsorted(keys, lo + width, "left")


def _merge_levels(mult: np.ndarray, choices: Sequence[np.ndarray], center: np.ndarray | None,
                  prunes: Sequence[bool] | None) -> list[tuple[np.ndarray, np.ndarray, int, bool]]:
    """Per walk level: key offsets, their L1 distances, prefix width, and whether checking can prune.

    Runs of levels that cannot prune (unconstrained parameters) are merged
    into one level, so a large frontier is expanded once instead of per level;
    so are single-choice levels, which never widen the frontier (checking the
    longer prefix they make prunes at least as much).
    """
    levels: list[tuple[np.ndarray, np.ndarray, int, bool]] = []
    for k, c in enumerate(choices):
        c = np.asarray(c, dtype=np.int64)
        offsets = c * mult[k]
        dist = np.abs(c - center[k]) if center is not None else (
            _ZEROS[: len(c)] if len(c) <= len(_ZEROS) else np.zeros(len(c), dtype=np.int64))
        checkable = prunes is None or bool(prunes[k])
        if levels and len(c) == 1:
            prev_off, prev_dist, _, prev_check = levels[-1]
            levels[-1] = (prev_off + offsets[0], prev_dist + dist[0] if center is not None else prev_dist,
                          int(mult[k]), prev_check or checkable)
        elif levels and not checkable and not levels[-1][3] and len(levels[-1][0]) * len(c) <= 4096:
            prev_off, prev_dist, _, _ = levels[-1]
            levels[-1] = ((prev_off[:, None] + offsets[None, :]).ravel(),
                          (prev_dist[:, None] + dist[None, :]).ravel(), int(mult[k]), False)
        else:
            levels.append((offsets, dist, int(mult[k]), checkable))
    return levels


def box_walk(keys: np.ndarray, mult: np.ndarray, choices: Sequence[np.ndarray],
             center: np.ndarray | None = None, l1_budget: int | None = None, dense: DenseRows | None = None,
             prunes: Sequence[bool] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Rows whose value index at level k is one of ``choices[k]``.

    ``prunes[k]`` False says level k's parameter is unconstrained, so checking
    prefixes there cannot remove anything and is skipped.

    With ``l1_budget`` only rows within that sum of absolute index differences
    from ``center`` are kept. Returns ``(rows, l1_distance)`` or ``(None, None)``
    when the frontier grows past :data:`MAX_FRONTIER` (caller falls back to a scan).
    """
    levels = _merge_levels(mult, choices, center, prunes)
    check_at = CHECK_AT if dense is not None else min(CHECK_AT, CHECK_AT_SPARSE)
    prefix = np.zeros(1, dtype=np.int64)
    used = np.zeros(1, dtype=np.int64)
    last = len(levels) - 1
    k = -1
    for k, (offsets, dist, width, checkable) in enumerate(levels):
        lo = (prefix[:, None] + offsets[None, :]).ravel()
        if l1_budget is not None:
            u = (used[:, None] + dist[None, :]).ravel()
            within = u <= l1_budget
            lo, u = lo[within], u[within]
        # Checking existence costs two binary searches per prefix; small
        # frontiers are cheaper to carry unchecked to a deeper level.
        if k == last:
            found = rows_of_keys(keys, lo, dense)
            exists = found >= 0
            lo = found[exists]
            if l1_budget is not None:
                u = u[exists]
        elif len(lo) > check_at and checkable:
            exists = _prefix_exists(keys, lo, width)
            lo = lo[exists]
            if l1_budget is not None:
                u = u[exists]
        prefix = lo
        if l1_budget is not None:
            used = u
        if len(prefix) == 0:
            break
        if len(prefix) > MAX_FRONTIER:
            return None, None  # type: ignore[return-value]
    rows = prefix if levels and len(prefix) and k == last else np.empty(0, dtype=np.int64)
    return rows, (used if l1_budget is not None else np.zeros(len(rows), dtype=np.int64))


def hamming(keys: np.ndarray, mult: np.ndarray, sizes: np.ndarray, v: np.ndarray,
            dense: DenseRows | None = None) -> np.ndarray:
    """Valid configurations that differ from ``v`` in exactly one parameter."""
    base = int(np.dot(v.astype(np.int64), mult))
    probes = []
    for k, m in enumerate(sizes):
        if m > 1:
            others = np.arange(m, dtype=np.int64)
            others = others[others != v[k]]
            probes.append(base + (others - int(v[k])) * int(mult[k]))
    if not probes:
        return np.empty(0, dtype=np.int64)
    rows = rows_of_keys(keys, np.concatenate(probes), dense)
    return rows[rows >= 0]


class HammingPlan:
    """Every (parameter, other value) pair as flat arrays, so a Hamming query is a few vectorised steps."""

    def __init__(self, sizes: np.ndarray, mult: np.ndarray):
        multi = [k for k, m in enumerate(sizes) if m > 1]
        self.value = np.concatenate([np.arange(int(sizes[k]), dtype=np.int64) for k in multi]) if multi \
            else np.empty(0, dtype=np.int64)
        self.param = np.concatenate([np.full(int(sizes[k]), k, dtype=np.intp) for k in multi]) if multi \
            else np.empty(0, dtype=np.intp)
        self.mult = np.asarray(mult, dtype=np.int64)[self.param]

    def rows(self, keys: np.ndarray, key: int, v: np.ndarray, dense: DenseRows | None = None) -> np.ndarray:
        """Sorted rows differing from vector ``v`` (whose key is ``key``) in exactly one parameter."""
        current = v[self.param]
        delta = self.value - current
        probes = (key + delta * self.mult)[delta != 0]
        rows = rows_of_keys(keys, probes, dense)
        rows = rows[rows >= 0]
        rows.sort()
        return rows


class AdjacentTable:
    """Per parameter and value index: the nearest lower and higher value index that any valid row uses."""

    def __init__(self, present: Sequence[np.ndarray], sizes: np.ndarray):
        self.below: list[list[int]] = []
        self.above: list[list[int]] = []
        for col, m in zip(present, sizes):
            x = np.arange(int(m))
            lo = np.searchsorted(col, x, "left")
            hi = np.searchsorted(col, x, "right")
            self.below.append(np.where(lo > 0, col[np.maximum(lo - 1, 0)], -1).tolist())
            self.above.append(np.where(hi < len(col), col[np.minimum(hi, len(col) - 1)], -1).tolist())
        # the same as flat arrays (parameter k's value x at offsets[k] + x), the value itself where none
        self.offsets = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
        own = np.concatenate([np.arange(int(m)) for m in sizes]).astype(np.int64)
        below, above = np.array(sum(self.below, []), dtype=np.int64), np.array(sum(self.above, []), dtype=np.int64)
        self.low = np.where(below >= 0, below, own)
        self.high = np.where(above >= 0, above, own)

    def bounds(self, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per parameter, the lowest and highest of :meth:`choices` (the box the neighbours lie in)."""
        at = self.offsets + v
        return self.low[at], self.high[at]

    def choices(self, v: np.ndarray) -> list[list[int]]:
        """Same as :func:`adjacent_choices`, from the precomputed tables."""
        out = []
        for x, below, above in zip(v.tolist(), self.below, self.above):
            lo, hi = below[x], above[x]
            out.append(([lo] if lo >= 0 else []) + [x] + ([hi] if hi >= 0 else []))
        return out


_ZEROS = np.zeros(1 << 16, dtype=np.int64)


def strictly_adjacent_choices(sizes: np.ndarray, v: np.ndarray) -> list[list[int]]:
    return [list(range(max(0, x - 1), min(m, x + 2))) for x, m in zip(v.tolist(), sizes.tolist())]


def adjacent_choices(present: Sequence[np.ndarray], v: np.ndarray) -> list[np.ndarray]:
    """Per parameter: the value itself and the nearest lower and higher values any valid row uses."""
    out = []
    for x, col in zip(v, present):
        x = int(x)
        pos = np.searchsorted(col, x)
        picks = [x]
        if pos > 0:
            picks.append(int(col[pos - 1]))
        hi = pos + 1 if pos < len(col) and col[pos] == x else pos
        if hi < len(col):
            picks.append(int(col[hi]))
        out.append(np.array(sorted(set(picks)), dtype=np.int64))
    return out


def nearest_by_index_distance(keys: np.ndarray, mult: np.ndarray, sizes: np.ndarray, indices: np.ndarray,
                              v: np.ndarray, exclude_self: bool = True, max_radius: int | None = None,
                              dense: DenseRows | None = None, prunes: Sequence[bool] | None = None) -> np.ndarray:
    """All valid rows at the smallest nonzero L1 distance (sum of |index differences|) from ``v``."""
    full = [np.arange(int(m)) for m in sizes]
    limit = int(np.sum(np.asarray(sizes) - 1)) if max_radius is None else max_radius
    for radius in range(1, limit + 1):
        rows, dist = box_walk(keys, mult, full, center=v, l1_budget=radius, dense=dense, prunes=prunes)
        if rows is None:  # too many prefixes: one scan is cheaper
            return _scan_nearest(indices, v, exclude_self)
        keep = dist > 0 if exclude_self else np.ones(len(rows), dtype=bool)
        rows = rows[keep & (rows >= 0)]
        if len(rows):
            return rows
    if not exclude_self:
        return _scan_nearest(indices, v, exclude_self)
    return np.empty(0, dtype=np.int64)


def _scan_nearest(indices: np.ndarray, v: np.ndarray, exclude_self: bool) -> np.ndarray:
    dist = np.abs(indices.astype(np.int32) - v.astype(np.int32)).sum(axis=1)
    if exclude_self:
        dist = np.where(dist == 0, np.iinfo(np.int32).max, dist)
    best = dist.min() if len(dist) else 0
    if exclude_self and best == np.iinfo(np.int32).max:
        return np.empty(0, dtype=np.int64)
    return np.flatnonzero(dist == best)
