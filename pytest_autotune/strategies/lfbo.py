"""``lfbo``: likelihood-free Bayesian optimisation with a random-forest classifier.

After Song, Yu, Neiswanger and Ermon, "A General Recipe for Likelihood-free
Bayesian Optimization" (ICML 2022). Instead of a regression model and an
acquisition function computed from its posterior, the acquisition is a
classifier trained so that its output is a monotone function of the utility:

* the successful observations are split at the ``gamma`` quantile ``tau`` of
  their times: those at or below it are *good* (we minimise), the others
  *bad*; failed configurations carry no time and are bad;
* for expected improvement (``weighting="ei"``) the classifier minimises the
  weighted cross-entropy ``-sum_i [ max(tau - y_i, 0) log C(x_i) + log(1 - C(x_i)) ]``
  (the paper's recipe with ``u(y; tau) = max(tau - y, 0)``): every evaluated
  configuration is a negative example of weight 1 and every good one also a
  positive example weighted by its improvement over ``tau`` (scaled to mean 1,
  which changes no ranking). The optimal ``C(x)`` is ``EI(x) / (1 + EI(x))``.
  ``weighting="pi"`` gives the good ones unit weight (probability of
  improvement: the plain good-versus-bad classifier);
* the classifier is a random forest (scikit-learn), which handles discrete,
  ordinal and categorical parameters and a space of any shape without a
  kernel; it is refitted on every observation (seeded from the strategy's
  RNG, so a run is deterministic for a seed);
* the proposal is the candidate with the highest predicted probability of
  good (ties broken at random). Candidates are valid, unevaluated
  configurations only (restrictions are respected by construction and
  nothing is proposed twice): ``candidates`` drawn uniformly from the
  constrained space, plus the Hamming neighbours of the ``local`` best
  observations (the classifier's maxima are usually next to them); a space
  no larger than ``candidates`` is scored whole.

Before the classifier has both a good and a bad example (and for the first
``initial_samples`` evaluations) it proposes a Latin-hypercube design. With
several proposals pending (``batch_size`` above 1) a pending configuration
is in :attr:`observed` as failed until its result arrives (the constant
liar), so the next fit steers away from it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from .base import SearchGenerator, Strategy, check
from .registry import register

__all__ = ["LFBO", "WEIGHTINGS", "training_set"]

WEIGHTINGS = ("ei", "pi")


def _is_int(v: object) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) and math.isfinite(v)


def training_set(x: np.ndarray, values: np.ndarray, gamma: float,
                 weighting: str = "ei") -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The weighted classification problem of the paper's recipe, or None while it has a single class.

    ``x``: encoded evaluated configurations; ``values``: their times (NaN for a
    failure). Returns (features, labels, weights): every configuration as a
    negative of weight 1, the good ones (time at or below the ``gamma``
    quantile of the successful times) again as positives weighted by their
    improvement over that quantile (``"ei"``, mean 1) or by 1 (``"pi"``).
    """
    ok = np.isfinite(values)
    if not ok.any():
        return None
    tau = float(np.quantile(values[ok], gamma, method="lower"))
    good = ok & (values <= tau)
    if good.sum() == len(values):  # everything good: no contrast to learn from
        return None
    if weighting == "ei":
        w_pos = tau - values[good]
        w_pos = w_pos / w_pos.mean() if w_pos.sum() > 0 else np.ones(int(good.sum()))
        # the quantile itself improves on nothing: keep it a (light) positive rather than dropping it
        w_pos = np.maximum(w_pos, 1e-3)
    else:
        w_pos = np.ones(int(good.sum()))
    features = np.concatenate([x[good], x])
    labels = np.concatenate([np.ones(int(good.sum()), dtype=np.int64), np.zeros(len(x), dtype=np.int64)])
    weights = np.concatenate([w_pos, np.ones(len(x))])
    return features, labels, weights


@register
class LFBO(Strategy):
    """Likelihood-free BO: a random forest classifies good vs bad; the most probably good candidate is next."""

    name = "lfbo"
    continues_from_observations = True  # the classifier learns from whatever is already observed

    @dataclass
    class Hyperparameters:
        gamma: float = 0.33
        """Quantile of the successful times that separates good from bad (the paper's default 1/3)."""
        weighting: str = "ei"
        """``"ei"``: positives weighted by their improvement (expected improvement); ``"pi"``: unit weights."""
        trees: int = 32
        """Trees of the random forest."""
        min_samples_leaf: int = 1
        """The forest's smallest leaf (larger: smoother probabilities)."""
        initial_samples: Optional[int] = None
        """Latin-hypercube design before the classifier; ``None``: ``ceil(initial_fraction * budget)`` in [4, 20]."""
        initial_fraction: float = 0.1
        """With ``initial_samples=None``, the design's share of the budget."""
        candidates: int = 1024
        """Random valid configurations scored per step (all of them on a space no larger)."""
        local: int = 3
        """Hamming neighbours of this many best observations join the candidates."""
        refit_growth: float = 0.1
        """Refit once the observations grew by this fraction since the last fit (0: every step); in between,
        the next candidates of the last fit's ranking are proposed. Keeps long budgets cheap: ~70 fits for 953
        evaluations instead of 953."""

        def validate(self) -> None:
            check(_is_number(self.gamma) and 0.0 < self.gamma < 1.0, "gamma",
                  f"must be a number in (0, 1), got {self.gamma!r}")
            check(self.weighting in WEIGHTINGS, "weighting",
                  f"must be one of {', '.join(map(repr, WEIGHTINGS))}, got {self.weighting!r}")
            check(_is_int(self.trees) and 1 <= self.trees <= 1000, "trees",
                  f"must be an integer in [1, 1000], got {self.trees!r}")
            check(_is_int(self.min_samples_leaf) and self.min_samples_leaf >= 1, "min_samples_leaf",
                  f"must be an integer >= 1, got {self.min_samples_leaf!r}")
            check(self.initial_samples is None or (_is_int(self.initial_samples) and self.initial_samples >= 1),
                  "initial_samples", f"must be None or an integer >= 1, got {self.initial_samples!r}")
            check(_is_number(self.initial_fraction) and 0.0 < self.initial_fraction <= 1.0, "initial_fraction",
                  f"must be a number in (0, 1], got {self.initial_fraction!r}")
            check(_is_int(self.candidates) and self.candidates >= 16, "candidates",
                  f"must be an integer >= 16, got {self.candidates!r}")
            check(_is_int(self.local) and self.local >= 0, "local", f"must be an integer >= 0, got {self.local!r}")
            check(_is_number(self.refit_growth) and 0.0 <= self.refit_growth <= 1.0, "refit_growth",
                  f"must be a number in [0, 1], got {self.refit_growth!r}")

    def __init__(self, space: Any, seed: int | None = None, **hyperparameters: Any):
        super().__init__(space, seed=seed, **hyperparameters)
        # imported here, not per step (about 2 s the first time) nor with the package (most tunings never use it)
        from sklearn.ensemble import RandomForestClassifier

        self._forest = RandomForestClassifier

    def initial_size(self) -> int:
        hp = self.hp
        k = hp.initial_samples if hp.initial_samples is not None else \
            min(20, max(4, math.ceil(hp.initial_fraction * self.budget)))
        return max(1, min(int(k), len(self.space), self.budget))

    def _candidates(self) -> np.ndarray:
        """Valid, unevaluated rows to score: a uniform draw plus the neighbours of the best observations."""
        n = len(self.space)
        if n <= self.hp.candidates:
            rows = np.arange(n)
        else:
            rows = self.space.sample(self.hp.candidates, self.rng)
            ranked = sorted((v, r) for r, v in self.observed.items() if v is not None)
            near = [self.space.neighbours(r) for _, r in ranked[: self.hp.local]]
            rows = np.unique(np.concatenate([rows, *near])) if near else np.unique(rows)
        if self.observed:
            rows = rows[~np.isin(rows, np.fromiter(self.observed, dtype=np.int64, count=len(self.observed)))]
        return rows.astype(np.int64)

    def _fit(self) -> Any | None:
        rows = np.fromiter(self.observed, dtype=np.int64, count=len(self.observed))
        values = np.array([np.nan if self.observed[int(r)] is None else float(self.observed[int(r)]) for r in rows])
        problem = training_set(self.space.encode(rows), values, float(self.hp.gamma), self.hp.weighting)
        if problem is None:
            return None
        features, labels, weights = problem
        forest = self._forest(n_estimators=int(self.hp.trees), min_samples_leaf=int(self.hp.min_samples_leaf),
                                        max_features="sqrt", random_state=int(self.rng.integers(0, 2**31 - 1)))
        forest.fit(features, labels, sample_weight=weights)
        return forest

    def ranking(self) -> np.ndarray:
        """Candidates, most probably good first (a random order before a classifier can be fitted)."""
        candidates = self._candidates()
        if len(candidates) == 0:
            return candidates
        forest = self._fit()
        if forest is None:
            return self.rng.permutation(candidates)
        p_good = forest.predict_proba(self.space.encode(candidates))[:, list(forest.classes_).index(1)]
        # ties (common: a forest's probabilities take few values) in a random order
        return candidates[np.lexsort((self.rng.random(len(candidates)), -p_good))]

    def search(self) -> SearchGenerator:
        n_init = self.initial_size()
        if len(self.observed) < n_init:
            design = [int(r) for r in self.space.lhs_sample(n_init, self.rng, maximin=False)
                      if int(r) not in self.observed][: n_init - len(self.observed)]
            for row in design:
                yield row
        queue: list[int] = []
        fitted_at = -1
        while True:
            n = len(self.observed)
            if fitted_at < 0 or n >= fitted_at * (1.0 + float(self.hp.refit_growth)) or not queue:
                queue = [int(r) for r in self.ranking()][::-1]  # a stack: the best candidate last
                fitted_at = n
            while queue and queue[-1] in self.observed:
                queue.pop()
            if not queue:
                left = self.random_unevaluated(1)
                if not left:
                    return
                yield left[0]
                continue
            yield queue.pop()
