"""The strategy-benchmark metric: performance relative to random search, 0 = random, 1 = optimum at once.

For a space with N configurations (valid and failed) and valid times
t_1 <= ... <= t_V:

* ``E_k`` is the expected best valid time of random search after k uniform
  draws without replacement from all N configurations:
  ``E_k = t_1 + sum_{i=2..V} (t_i - t_{i-1}) * C(N-i+1, k) / C(N, k)``;
* the budget ``B`` is the smallest k with ``E_k <= med - 0.95 (med - opt)``;
* a run's ``best_t`` is the best valid time among its first t unique
  evaluations (``t_V`` until something valid is found; a run that stopped
  early keeps its last value);
* its score is the mean over ``t_j = ceil(j B / 20)``, j = 1..20, of
  ``(E_t - best_t) / (E_t - opt)``, skipping points where ``E_t = opt``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy.special import gammaln

POINTS = 20


@dataclass(frozen=True)
class SpaceStats:
    """What the metric needs of a space: N and its sorted valid times."""

    n_configs: int
    sorted_times: np.ndarray  # valid times, ascending

    @classmethod
    def from_times(cls, times: Sequence[float], n_configs: int | None = None) -> "SpaceStats":
        """``times`` per configuration with NaN for failed ones (N = its length unless given)."""
        arr = np.asarray(times, dtype=np.float64)
        valid = np.sort(arr[np.isfinite(arr)])
        if len(valid) == 0:
            raise ValueError("a space without valid configurations cannot be scored")
        return cls(int(n_configs if n_configs is not None else len(arr)), valid)

    @property
    def optimum(self) -> float:
        return float(self.sorted_times[0])

    @property
    def median(self) -> float:
        return float(np.median(self.sorted_times))

    def expected_best(self, k: int) -> float:
        """E_k for random search without replacement over all N configurations."""
        n, t = self.n_configs, self.sorted_times
        k = int(k)
        if k <= 0:
            return float(t[-1])
        if k >= n:
            return float(t[0])
        i = np.arange(2, len(t) + 1)
        a = n - i + 1  # C(a, k) / C(n, k) is the chance that k draws miss the i-1 best
        with np.errstate(invalid="ignore"):
            log_ratio = (gammaln(a + 1) - gammaln(a - k + 1)) - (gammaln(n + 1) - gammaln(n - k + 1))
        ratio = np.where(a >= k, np.exp(log_ratio), 0.0)
        return float(t[0] + np.sum(np.diff(t) * ratio))

    def budget(self) -> int:
        """Smallest k with E_k <= med - 0.95 (med - opt), capped at N (binary search; E_k falls with k)."""
        target = self.median - 0.95 * (self.median - self.optimum)
        lo, hi = 1, self.n_configs
        while lo < hi:
            mid = (lo + hi) // 2
            if self.expected_best(mid) <= target + 1e-12 * abs(target):
                hi = mid
            else:
                lo = mid + 1
        return lo

    def checkpoints(self, budget: int | None = None) -> list[int]:
        b = self.budget() if budget is None else budget
        return [math.ceil(j * b / POINTS) for j in range(1, POINTS + 1)]


def best_so_far(values: Sequence[float | None], worst: float) -> np.ndarray:
    """Best valid value after each evaluation; ``worst`` (t_V) before anything valid."""
    arr = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
    arr = np.where(np.isfinite(arr), arr, np.inf)
    out = np.minimum.accumulate(arr) if len(arr) else arr
    return np.where(np.isfinite(out), out, worst)


def score_run(stats: SpaceStats, values: Sequence[float | None], budget: int | None = None) -> float:
    """Score of one run from its objective values in evaluation order (None/NaN = failed)."""
    b = stats.budget() if budget is None else budget
    best = best_so_far(values, float(stats.sorted_times[-1]))
    total, count = 0.0, 0
    for t in stats.checkpoints(b):
        e_t = stats.expected_best(t)
        if e_t == stats.optimum:
            continue
        if len(best) == 0:
            best_t = float(stats.sorted_times[-1])
        else:
            best_t = float(best[min(t, len(best)) - 1])
        total += (e_t - best_t) / (e_t - stats.optimum)
        count += 1
    return total / count if count else 0.0
