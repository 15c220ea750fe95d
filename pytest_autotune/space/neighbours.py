"""Neighbour and nearest-valid queries on a sorted mixed-radix key array.

Every valid configuration is one int64 key, ``sum(index_k * mult_k)`` with the
first parameter most significant, and the keys are sorted. A prefix of value
indices ``(v_0 .. v_k)`` then covers the contiguous key range
``[prefix, prefix + mult_k)``, so "does any valid configuration start like
this?" is two binary searches. Neighbourhood queries walk the parameters
level by level, keeping only prefixes that exist (a pruned trie walk), all
vectorised over the frontier. No per-query scan of the whole space.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

# Beyond this many live prefixes a walk falls back to one vectorised scan.
MAX_FRONTIER = 200_000
# Frontiers up to this size go unchecked to the next level.
CHECK_AT = 4096


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
    into one level, so a large frontier is expanded once instead of per level.
    """
    levels: list[tuple[np.ndarray, np.ndarray, int, bool]] = []
    for k, c in enumerate(choices):
        c = np.asarray(c, dtype=np.int64)
        offsets = c * mult[k]
        dist = np.abs(c - center[k]) if center is not None else np.zeros(len(c), dtype=np.int64)
        checkable = prunes is None or bool(prunes[k])
        if levels and not checkable and not levels[-1][3] and len(levels[-1][0]) * len(c) <= 4096:
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
        elif len(lo) > CHECK_AT and checkable:
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


def strictly_adjacent_choices(sizes: np.ndarray, v: np.ndarray) -> list[np.ndarray]:
    return [np.arange(max(0, int(x) - 1), min(int(m), int(x) + 2)) for x, m in zip(v, sizes)]


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
