"""Acquisition functions and acquisition-function portfolios for the ``bayes`` strategy.

Everything here is pure arithmetic on posterior predictions and observation
sequences (no search space, no GP), so each rule can be unit-tested on
crafted numbers. The rules follow Willemsen, van Nieuwpoort and van Werkhoven,
"Bayesian Optimization for auto-tuning GPU kernels" (PMBS 2021), as in
Kernel Tuner's ``bayes_opt`` strategy:

* the acquisition functions EI, PI ("poi") and LCB for minimisation, with
  the exploration factor lambda used as ``xi`` (EI, PI) or ``kappa`` (LCB);
* the *contextual variance* exploration factor
  ``lambda = (sigma2 / (mu_s / f_best)) / sigma2_s``;
* the *discounted observation score* ``dos_t = sum_i o_i * d**(t - i)``;
* :class:`MultiPortfolio` (``multi``): round-robin over the functions, skip
  functions that keep suggesting the same candidate as another one;
* :class:`AdvancedMultiPortfolio` (``advanced_multi``): drop a function that
  is consistently worse than the portfolio mean, promote one that is
  consistently better to sole function.
"""
from __future__ import annotations

from collections import deque
from typing import Mapping, Sequence

import numpy as np

ACQUISITION_FUNCTIONS = ("ei", "poi", "lcb")
_STD_FLOOR = 1e-9  # as Kernel Tuner: avoids dividing by a zero posterior std
_INV_SQRT_2PI = 1.0 / np.sqrt(2.0 * np.pi)


def ndtr(x: np.ndarray) -> np.ndarray:
    """The standard normal CDF; SciPy imported on first use (not at the plugin's start-up)."""
    from scipy.special import ndtr as f

    return f(x)


# -- acquisition functions (all return a score to MAXIMISE) -------------------------------
def expected_improvement(mean: np.ndarray, std: np.ndarray, f_best: float, xi: float) -> np.ndarray:
    """EI for minimisation: ``E[max(f_best - xi - f(x), 0)]`` under the posterior."""
    s = std + _STD_FLOOR
    imp = (f_best - xi) - mean
    z = imp / s
    return imp * ndtr(z) + s * (_INV_SQRT_2PI * np.exp(-0.5 * z * z))


def probability_of_improvement(mean: np.ndarray, std: np.ndarray, f_best: float, xi: float) -> np.ndarray:
    """PI for minimisation: ``P(f(x) < f_best - xi)``."""
    return ndtr(((f_best - xi) - mean) / (std + _STD_FLOOR))


def lower_confidence_bound(mean: np.ndarray, std: np.ndarray, kappa: float) -> np.ndarray:
    """Negated LCB ``-(mu - kappa * sigma)``, so that the largest score is the lowest bound."""
    return kappa * std - mean


def acquisition_scores(name: str, mean: np.ndarray, std: np.ndarray, f_best: float, exploration: float) -> np.ndarray:
    """Scores of one acquisition function (higher is better) from one shared prediction."""
    if name == "ei":
        return expected_improvement(mean, std, f_best, exploration)
    if name == "poi":
        return probability_of_improvement(mean, std, f_best, exploration)
    if name == "lcb":
        return lower_confidence_bound(mean, std, exploration)
    raise ValueError(f"unknown acquisition function {name!r}; known: {', '.join(ACQUISITION_FUNCTIONS)}")


# -- exploration factor --------------------------------------------------------------------
def contextual_variance(sigma2: float, sigma2_initial: float, initial_mean: float, f_best: float) -> float:
    """Contextual-variance exploration factor for minimisation.

    ``lambda = (sigma2 / (mu_s / f_best)) / sigma2_s`` with ``sigma2`` the mean
    posterior variance now, ``sigma2_s`` the mean posterior variance right after
    the initial sample, ``mu_s`` the mean of the initial sample and ``f_best``
    the best observation so far. It is large while the model is uncertain and
    the search has not improved much on the initial sample, and shrinks as the
    model becomes certain or the search finds much better configurations.
    The ratio ``mu_s / f_best`` is only meaningful for positive objectives
    (times); otherwise it is taken as 1 (variance ratio alone).
    """
    if not (sigma2_initial > 0 and np.isfinite(sigma2_initial)):
        return 0.0
    ratio = initial_mean / f_best if (f_best > 0 and initial_mean > 0) else 1.0
    return float((sigma2 / ratio) / sigma2_initial)


# -- portfolio scores ----------------------------------------------------------------------
def discounted_observation_score(observations: Sequence[float], discount: float) -> float:
    """``dos_t = sum_{i=1..t} o_i * discount**(t - i)``: recent observations weigh most (lower is better)."""
    obs = np.asarray(observations, dtype=np.float64)
    if obs.size == 0:
        return 0.0
    weights = discount ** np.arange(obs.size - 1, -1, -1, dtype=np.float64)
    return float(obs @ weights)


class MultiPortfolio:
    """``multi``: every round, each active function proposes its best candidate from one shared prediction.

    A function whose suggestion equals that of an earlier function in the
    round is a *duplicate*: both are marked, the candidate is evaluated once
    and both receive its observation. Each function keeps a sliding window of
    the last ``skip_threshold`` rounds; when the window is all duplicates for
    more than one active function, these conflicting functions are compared
    by their discounted observation score and all but the best are skipped
    (for the rest of the search); the best gets a clean window.
    """

    def __init__(self, names: Sequence[str], skip_threshold: int, discount: float):
        self.names = tuple(names)
        self.skip_threshold = int(skip_threshold)
        self.discount = float(discount)
        self.active: list[int] = list(range(len(self.names)))
        self.windows = [deque([0] * self.skip_threshold, maxlen=self.skip_threshold) for _ in self.names]
        self.observations: list[list[float]] = [[] for _ in self.names]
        self._round_owner: dict[int, int] = {}
        self._round_picks: list[tuple[int, int]] = []

    def plan(self, picks: Mapping[int, int]) -> list[tuple[int, int]]:
        """Register a round's suggestions (function index -> candidate, in active order).

        Returns the unique ``(candidate, function index)`` pairs to evaluate, in order.
        """
        owner: dict[int, int] = {}
        unique: list[tuple[int, int]] = []
        self._round_picks = []
        for f in self.active:
            if f not in picks:
                continue
            cand = int(picks[f])
            dup = cand in owner
            self.windows[f].append(1 if dup else 0)
            if dup:
                self.windows[owner[cand]][-1] = 1
            else:
                owner[cand] = f
                unique.append((cand, f))
            self._round_picks.append((f, cand))
        self._round_owner = owner
        return unique

    def record(self, scores: Mapping[int, float]) -> None:
        """Observation score per evaluated candidate of the round; duplicates share the original's."""
        for f, cand in self._round_picks:
            if cand in scores:
                self.observations[f].append(float(scores[cand]))

    def dos(self, f: int) -> float:
        return discounted_observation_score(self.observations[f], self.discount)

    def update(self) -> list[int]:
        """Apply the skip rule after a round; returns the functions skipped now."""
        conflicting = [f for f in self.active if sum(self.windows[f]) >= self.skip_threshold]
        if len(conflicting) < 2:
            return []
        keep = min(conflicting, key=lambda f: (self.dos(f), f))
        self.windows[keep] = deque([0] * self.skip_threshold, maxlen=self.skip_threshold)
        skipped = [f for f in conflicting if f != keep]
        self.active = [f for f in self.active if f not in skipped]
        return skipped


class AdvancedMultiPortfolio:
    """``advanced_multi``: judge the functions directly by their discounted observation score.

    Every round each active function evaluates its own best candidate (no
    duplicates: later functions pick among the rest). After the round, a
    function whose score is more than ``required_improvement`` (fraction)
    worse than the mean over active functions gets a *worse* mark, one that
    much better a *better* mark. When some function has ``skip_threshold``
    worse marks the worst of those is dropped and all marks reset; otherwise
    when one has ``skip_threshold`` better marks it is promoted to sole
    function. Failed observations are scored as the median of valid ones.
    """

    def __init__(self, names: Sequence[str], skip_threshold: int, discount: float, required_improvement: float):
        self.names = tuple(names)
        self.skip_threshold = int(skip_threshold)
        self.discount = float(discount)
        self.required_improvement = float(required_improvement)
        self.active: list[int] = list(range(len(self.names)))
        self.observations: list[list[float]] = [[] for _ in self.names]
        self.worse = [0] * len(self.names)
        self.better = [0] * len(self.names)

    @property
    def single(self) -> bool:
        return len(self.active) == 1

    def record(self, f: int, score: float) -> None:
        self.observations[f].append(float(score))

    def dos(self, f: int) -> float:
        return discounted_observation_score(self.observations[f], self.discount)

    def update(self) -> tuple[str, int] | None:
        """Apply the drop/promote rule after a round: ``("drop", f)``, ``("promote", f)`` or None."""
        if self.single:
            return None
        dos = {f: self.dos(f) for f in self.active}
        mean = float(np.mean(list(dos.values())))
        margin = abs(mean) * self.required_improvement  # mean * factor for positive objectives (times)
        for f in self.active:
            if dos[f] > mean + margin:
                self.worse[f] += 1
            elif dos[f] < mean - margin:
                self.better[f] += 1
        worst_count = max(self.worse[f] for f in self.active)
        if worst_count >= self.skip_threshold:
            worst = max((f for f in self.active if self.worse[f] == worst_count), key=lambda f: (dos[f], -f))
            self.active = [f for f in self.active if f != worst]
            self.worse = [0] * len(self.names)
            self.better = [0] * len(self.names)
            return "drop", worst
        best_count = max(self.better[f] for f in self.active)
        if best_count >= self.skip_threshold:
            best = min((f for f in self.active if self.better[f] == best_count), key=lambda f: (dos[f], f))
            self.active = [best]
            return "promote", best
        return None
