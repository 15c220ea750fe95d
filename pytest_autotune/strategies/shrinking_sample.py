"""Shrinking-sample search: sample the medians of a partitioned space, zoom into the best partition, repeat.

The published procedure, on value indices of each parameter:

1. the current range of every parameter (its whole value list at first) is
   cut into ``k`` partitions of consecutive values (as equal as possible;
   fewer when the range has fewer than ``k`` values);
2. the partitions of all parameters span a grid of *cells*; each cell is
   sampled at the combination of its partitions' medians (the reduced space);
3. the best cell's partitions become the new ranges;
4. this repeats until every range holds at most ``v_th`` values; the final
   section (every valid configuration inside the final ranges) is then
   searched exhaustively.

Choices this implementation makes where the description leaves room:

* **Invalid median combinations are repaired inside their cell**: a cell
  is sampled at the valid configuration of the cell nearest (sum of index
  differences, ties at random) to its median combination; a cell without any
  valid configuration is skipped. Skipping every invalid combination would
  blind the search on constrained spaces (on the GEMM spaces with k = 2 only
  132 of the 568 non-empty first-level cells have a valid median
  combination, so three quarters of the space would never be looked at),
  while repairing *across* cells would make a cell's score describe another
  cell.
  Repairing within the cell keeps "the best point's partitions" exact.
* A cell that already holds an evaluated configuration (from an earlier
  level) is scored by its best one and not sampled again: the evaluations
  are already paid for.
* A failed sample (``None``) scores its cell as failed: never the best. If
  every cell of a level failed, further configurations per cell (nearest to
  the medians first) are evaluated until one is valid.
* A parameter whose range already holds at most ``v_th`` values is not cut
  further (it is one partition); the others keep shrinking. So binary
  parameters with ``v_th >= 2`` are decided by the final exhaustive search.
* Medians of even-sized partitions are the lower middle value.
* The final section is searched nearest-to-its-best-configuration first
  (index distance), so a budget that ends inside it has covered the most
  promising part.

**After the procedure** (budget left), with the default
``continuation="local"``: a greedy first-improvement descent over Hamming
neighbours from the best configuration (the final section only covers
``v_th`` values per parameter, and its neighbours just outside are often
better). Then the cells not chosen at every level (together they partition
the rest of the space) wait in a queue ordered by their score; the search
takes the best waiting cell, runs the same procedure inside it, descends
from the best again, and so on: a best-first search of the partition tree
(failed cells come last). ``continuation="best_first"`` leaves the descents
out. The search ends only when the space is exhausted. :attr:`ShrinkingSample.procedure_evaluations`
and :attr:`ShrinkingSample.procedure_best` record where the published
procedure itself ended.
"""
from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass

import numpy as np

from .base import SearchGenerator, check
from .local import _LocalSearch
from .registry import register


CONTINUATIONS = ("local", "best_first")


def partition_bounds(lo: int, hi: int, k: int) -> list[tuple[int, int]]:
    """Cut the index range ``lo..hi`` (inclusive) into ``min(k, width)`` runs of consecutive indices.

    Sizes differ by at most one, larger runs first (``numpy.array_split``).
    """
    width = hi - lo + 1
    m = min(k, width)
    base, extra = divmod(width, m)
    out, start = [], lo
    for j in range(m):
        size = base + (1 if j < extra else 0)
        out.append((start, start + size - 1))
        start += size
    return out


def partition_median(lo: int, hi: int) -> int:
    """Median index of the run ``lo..hi`` (the lower middle one for an even count)."""
    return lo + (hi - lo) // 2


@dataclass
class Level:
    """One shrinking step over the ranges ``lo..hi`` (inclusive, per parameter)."""

    lo: np.ndarray
    hi: np.ndarray
    k: int
    v_th: int

    def __post_init__(self) -> None:
        self.bounds: list[list[tuple[int, int]]] = []
        for a, b in zip(self.lo.tolist(), self.hi.tolist()):
            self.bounds.append(partition_bounds(a, b, self.k) if b - a + 1 > self.v_th else [(a, b)])
        self.shape = np.array([len(b) for b in self.bounds], dtype=np.int64)
        self.medians = [np.array([partition_median(a, b) for a, b in bs], dtype=np.int64) for bs in self.bounds]

    @property
    def n_cells(self) -> int:
        return int(np.prod(self.shape))

    def parts(self, indices: np.ndarray) -> np.ndarray:
        """Partition number per parameter for index vectors inside the ranges (n x d)."""
        out = np.empty(indices.shape, dtype=np.int64)
        for p, bs in enumerate(self.bounds):
            starts = np.array([a for a, _ in bs], dtype=np.int64)
            out[:, p] = np.searchsorted(starts, indices[:, p], side="right") - 1
        return out

    def cell_ids(self, parts: np.ndarray) -> np.ndarray:
        mult = np.ones(len(self.shape), dtype=np.int64)
        for p in range(len(self.shape) - 2, -1, -1):
            mult[p] = mult[p + 1] * self.shape[p + 1]
        return parts @ mult

    def median_vectors(self, parts: np.ndarray) -> np.ndarray:
        """The median combination of the cell of each row of ``parts``."""
        return np.stack([self.medians[p][parts[:, p]] for p in range(parts.shape[1])], axis=1)

    def cell_ranges(self, parts_row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lo = np.array([self.bounds[p][j][0] for p, j in enumerate(parts_row.tolist())], dtype=np.int64)
        hi = np.array([self.bounds[p][j][1] for p, j in enumerate(parts_row.tolist())], dtype=np.int64)
        return lo, hi


@register
class ShrinkingSample(_LocalSearch):
    """Shrinking-sample search (partition medians, zoom into the best partition, exhaustive final section).

    Hyperparameters:

    * ``k`` (default 2): partitions each range is cut into per step;
    * ``v_th`` (default 1): range size at or below which a parameter is no
      longer cut; the final section holds at most ``v_th`` values per
      parameter (1: the procedure zooms down to a single configuration);
    * ``continuation`` (default ``local``): what the budget left after the
      procedure is spent on. ``local``: a greedy first-improvement descent
      over Hamming neighbours from the best configuration, then the best
      waiting cell (see below) through the same procedure, again followed by
      a descent, and so on; ``best_first``: the waiting cells only.

    Defaults from the 13 measured benchmark spaces: k = 2 with v_th = 1 or 2
    scored best on the strategy metric (k = 3 or 4 sample so coarse a grid
    that they lose badly on the small-budget convolution spaces), v_th = 1
    reached more of the optimum at the end of the procedure (mean opt/best
    0.83 vs 0.77), and ``local`` scored 0.25 against 0.05 for ``best_first``.
    See the module documentation for the choices made where the published
    description leaves room (repair within the cell, reuse, continuation).
    """

    name = "shrinking_sample"

    @dataclass
    class Hyperparameters:
        k: int = 2
        v_th: int = 1
        continuation: str = "local"

        def validate(self) -> None:
            check(isinstance(self.k, (int, np.integer)) and not isinstance(self.k, bool) and 2 <= self.k <= 64,
                  "k", f"must be an integer number of partitions in 2..64, got {self.k!r}")
            check(isinstance(self.v_th, (int, np.integer)) and not isinstance(self.v_th, bool) and self.v_th >= 1,
                  "v_th", f"must be a positive integer number of values, got {self.v_th!r}")
            check(self.continuation in CONTINUATIONS, "continuation",
                  f"must be one of {', '.join(CONTINUATIONS)}, got {self.continuation!r}")

    #: evaluations spent when the published procedure (down to the first final section) ended; None while it
    #: runs, and when the budget or the space ran out inside it
    procedure_evaluations: int | None = None
    #: best (row, value) when the published procedure ended
    procedure_best: tuple[int, float] | None = None

    # -- bookkeeping -------------------------------------------------------------------
    def _evaluate(self, row: int) -> SearchGenerator:
        value = yield int(row)
        self._seen[row] = True
        self._vals[row] = np.nan if value is None else float(value)
        return value

    def revise(self, row: int, value: float | None) -> None:
        """The truth of a pending row of a batch, first recorded as failed."""
        if getattr(self, "_vals", None) is not None and self._seen[row]:
            self._vals[row] = np.nan if value is None else float(value)

    def _sync(self) -> None:
        """Fold evaluations made outside :meth:`_evaluate` (the local-search polish) into the arrays."""
        for row, value in self.observed.items():
            if not self._seen[row]:
                self._seen[row] = True
                self._vals[row] = np.nan if value is None else value

    def _polish(self) -> SearchGenerator:
        if self.hp.continuation == "local" and self.best is not None:
            yield from self._descend(*self.best)
            self._sync()

    def _cell_scores(self, rows: np.ndarray, first: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per cell (rows grouped by cell, cells starting at ``first``): best valid value (inf if none)
        and whether any of its configurations was evaluated."""
        vals = np.where(self._seen[rows] & np.isfinite(self._vals[rows]), self._vals[rows], np.inf)
        best = np.minimum.reduceat(vals, first) if len(first) else np.empty(0)
        seen = np.logical_or.reduceat(self._seen[rows], first) if len(first) else np.empty(0, dtype=bool)
        return best, seen

    # -- the procedure -----------------------------------------------------------------
    def _shrink(self, rows: np.ndarray, lo: np.ndarray, hi: np.ndarray, frontier: list) -> SearchGenerator:
        """The published procedure inside the section ``lo..hi`` (whose valid configurations are ``rows``):
        shrink to a final section, then search it exhaustively."""
        k, v_th = int(self.hp.k), int(self.hp.v_th)
        while np.any(hi - lo + 1 > v_th) and len(rows):
            level = Level(lo, hi, k, v_th)
            idx = self._idx[rows]
            parts = level.parts(idx)
            cells = level.cell_ids(parts)
            dist = np.abs(idx - level.median_vectors(parts)).sum(axis=1)
            order = np.lexsort((self.rng.random(len(rows)), dist, cells))  # per cell: nearest to its medians first
            rows, cells, parts = rows[order], cells[order], parts[order]
            first = np.flatnonzero(np.r_[True, cells[1:] != cells[:-1]])
            ends = np.r_[first[1:], len(rows)]
            _, seen = self._cell_scores(rows, first)
            # The reduced space: one configuration per cell that has none evaluated yet, in random order.
            todo = rows[first[~seen]]
            for r in todo[self.rng.permutation(len(todo))]:
                yield from self._evaluate(int(r))
            best, _ = self._cell_scores(rows, first)
            depth = 1
            while not np.isfinite(best).any():
                # Every sampled cell failed: sample the next-nearest configuration of each cell.
                extra = [int(rows[a + depth]) for a, b in zip(first, ends) if a + depth < b]
                if not extra:
                    return  # the whole section failed
                for r in extra:
                    if not self._seen[r]:
                        yield from self._evaluate(r)
                best, _ = self._cell_scores(rows, first)
                depth += 1
            ties = np.flatnonzero(best == best.min())
            win = int(ties[self.rng.integers(len(ties))])
            for c in range(len(first)):
                if c != win:
                    c_lo, c_hi = level.cell_ranges(parts[first[c]])
                    heapq.heappush(frontier, (float(best[c]), next(self._tick), rows[first[c]:ends[c]], c_lo, c_hi))
            lo, hi = level.cell_ranges(parts[first[win]])
            rows = rows[first[win]:ends[win]]
        # The final section, nearest to its best configuration first.
        todo = rows[~self._seen[rows]]
        if len(todo):
            vals = np.where(np.isfinite(self._vals[rows]), self._vals[rows], np.inf)
            if np.isfinite(vals).any():
                anchor = self._idx[rows[int(np.argmin(vals))]]
                dist = np.abs(self._idx[todo] - anchor).sum(axis=1)
            else:
                dist = np.zeros(len(todo), dtype=np.int64)
            for r in todo[np.lexsort((self.rng.random(len(todo)), dist))]:
                yield from self._evaluate(int(r))

    def search(self) -> SearchGenerator:
        n = len(self.space)
        self._idx = self.space.indices.astype(np.int64)
        self._seen = np.zeros(n, dtype=bool)
        self._vals = np.full(n, np.nan)
        self._tick = itertools.count()
        for row, value in self.observed.items():  # a pre-seeded history, if any
            self._seen[row] = True
            self._vals[row] = np.nan if value is None else value
        frontier: list = []  # (score, tie, rows, lo, hi) of the cells not chosen; they partition the rest
        lo = np.zeros(self.space.n_params, dtype=np.int64)
        hi = self.space.sizes.astype(np.int64) - 1
        self._setup("hamming", 0.02)
        yield from self._shrink(np.arange(n), lo, hi, frontier)
        self.procedure_evaluations = int(self._seen.sum())
        self.procedure_best = self.best
        yield from self._polish()
        # Continuation: the best waiting cell next (best-first over the partition tree).
        while frontier:
            _, _, rows, c_lo, c_hi = heapq.heappop(frontier)
            if not self._seen[rows].all():
                yield from self._shrink(rows, c_lo, c_hi, frontier)
                yield from self._polish()
        # Nothing should be left (the cells cover the space); evaluate any remainder to be sure.
        left = np.flatnonzero(~self._seen)
        for r in left[self.rng.permutation(len(left))]:
            yield from self._evaluate(int(r))
