"""``tpe``: a Tree-structured Parzen Estimator over the valid configurations only.

The method of Bergstra et al. ("Algorithms for hyper-parameter optimization",
NeurIPS 2011) as Optuna's ``TPESampler`` implements it, adapted to a discrete,
constrained search space:

* after an initial maximin Latin-hypercube sample, the observations are split
  into a *good* set, the best ``ceil(gamma * n_ok)`` successful ones (at most
  ``max_good``, Optuna's ``min(ceil(0.1 n), 25)``), and a *bad* set, all the
  others. Failed configurations (compile/runtime errors, wrong output) cost an
  evaluation and carry no number; with ``failures="bad"`` they join the bad
  set (they are as undesirable as the worst), with ``"ignore"`` they are only
  marked evaluated. No penalty value is ever invented;
* ``l(x)`` and ``g(x)`` are Parzen densities over the parameters' *value
  indices*: each observation contributes a kernel, a discretised Gaussian over
  the index (standard deviation ``bandwidth`` times the index range of the
  parameter; ``bandwidth=0`` makes it categorical) mixed with a uniform floor
  ``smoothing`` over the parameter's values. A uniform prior component of
  weight ``prior_weight`` is added to both densities (Optuna's
  ``consider_prior``). With ``multivariate=True`` (Optuna's
  ``multivariate=True``) each kernel is the product of the per-parameter
  kernels centred on one observed configuration, so interactions between
  parameters are modelled; otherwise each parameter has its own independent
  mixture and the density is their product (Optuna's default);
* instead of sampling candidates from ``l`` and optimising in a continuous
  box, *every* valid, not yet evaluated configuration is scored by
  ``log l(x) - log g(x)`` (vectorised over ``space.indices``) and the best is
  proposed (random tie-break). ``temperature > 0`` samples proportionally to
  ``exp(score / temperature)`` instead; ``ei_candidates = k > 0`` is Optuna's
  scheme: draw ``k`` candidates with probability proportional to ``l(x)``
  and take the best ratio among them. Invalid and already evaluated
  configurations are never proposed, so no evaluation is wasted and the
  search never stalls: it goes on until the budget is spent or the space is
  exhausted.

Per-step cost. The per-parameter kernels are fixed tables, so in the
multivariate model the bad density is maintained incrementally: every
observation adds its kernel column (one gather per parameter over the
candidates, O(m d)) to a running sum over all observations, the good set's
columns (at most ``max_good``, cached) are summed each step, and ``g`` uses
the difference. A step costs O(m (d + max_good)) for m candidates, about
2-5 ms on the 17,956-configuration GEMM space. On spaces larger than
``max_candidates`` the candidates are a random pool of that many
configurations, grown by the Hamming neighbourhoods of good observations and
refilled with random configurations when the pool is used up.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from .base import SearchGenerator, Strategy, check
from .registry import register

__all__ = ["TPE", "FAILURE_MODES", "kernel_tables"]

FAILURE_MODES = ("bad", "ignore")
INITIAL_DESIGNS = ("lhs", "lhs_maximin", "random")
_LOG_CLIP = 700.0  # exp() stays finite in float64


def kernel_tables(sizes, bandwidth: float, smoothing: float, ordinal_weight: float = 1.0) -> list[np.ndarray]:
    """Per parameter, ``log(s * K[a, b])``: the kernel centred on value index ``b`` evaluated at ``a``.

    ``K[:, b]`` mixes three parts: ``smoothing`` of uniform mass over the
    ``s`` values, and of the rest ``ordinal_weight`` as a discretised Gaussian
    over the index (standard deviation ``bandwidth * (s - 1)``) and
    ``1 - ordinal_weight`` as a point mass on ``b`` (a categorical kernel; the
    Gaussian is a point mass too when ``bandwidth`` is 0). Each column sums to
    1. The factor ``s`` divides out the uniform density, which keeps products
    over many parameters in floating-point range.
    """
    tables = []
    for s in sizes:
        s = int(s)
        idx = np.arange(s, dtype=np.float64)
        if bandwidth > 0 and s > 1:
            h = bandwidth * (s - 1)
            w = np.exp(-0.5 * ((idx[:, None] - idx[None, :]) / h) ** 2)
        else:
            w = np.eye(s)
        w /= w.sum(axis=0, keepdims=True)
        w = ordinal_weight * w + (1.0 - ordinal_weight) * np.eye(s)
        k = (1.0 - smoothing) * w + smoothing / s
        tables.append(np.log(s * k))
    return tables


@register
class TPE(Strategy):
    """Tree-structured Parzen Estimator scoring every unevaluated valid configuration by l(x)/g(x)."""

    name = "tpe"

    @dataclass
    class Hyperparameters:
        gamma: float = 0.1
        """Fraction of the successful observations that form the good set."""
        max_good: int = 25
        """Cap on the good set's size (Optuna: ``min(ceil(0.1 n), 25)``)."""
        initial_samples: Optional[int] = None
        """Size of the initial Latin-hypercube sample; ``None`` sizes it to the budget (``initial_fraction``)."""
        initial_fraction: float = 0.1
        """With ``initial_samples=None``: ``ceil(initial_fraction * budget)``, clipped to [2, ``max_initial``]."""
        max_initial: int = 20
        """Upper bound of the budget-sized initial sample."""
        initial_design: str = "lhs"
        """``"lhs"``: Latin hypercube (``space.lhs_sample``, maximin off: 10x cheaper); ``"random"``: uniform rows."""
        multivariate: bool = True
        """Joint kernels (product over parameters per observation) instead of independent per-parameter densities."""
        bandwidth: float = 0.2
        """Kernel standard deviation as a fraction of each parameter's index range (0: categorical kernel)."""
        ordinal_weight: float = 1.0
        """Share of each kernel's non-uniform mass spread over neighbouring indices (the rest is categorical)."""
        smoothing: float = 0.1
        """Uniform mass mixed into each per-parameter kernel (0 < smoothing <= 1)."""
        prior_weight: float = 1.0
        """Weight of the uniform prior component in l and g (in units of one observation)."""
        failures: str = "bad"
        """``"bad"``: failed configurations join the bad set; ``"ignore"``: they are only marked evaluated."""
        ei_candidates: int = 0
        """0: score every candidate; k > 0: draw k candidates from l (Optuna's scheme) and take the best ratio."""
        temperature: float = 0.0
        """0: propose the best log-ratio; > 0: sample proportionally to exp(log-ratio / temperature)."""
        max_candidates: int = 32768
        """Spaces with more valid configurations score a random pool of this many (plus neighbours of good ones)."""

        def validate(self) -> None:
            check(isinstance(self.gamma, (int, float)) and not isinstance(self.gamma, bool)
                  and 0.0 < self.gamma < 1.0, "gamma", f"must be a number in (0, 1), got {self.gamma!r}")
            check(_is_int(self.max_good) and self.max_good >= 1, "max_good",
                  f"must be an integer >= 1, got {self.max_good!r}")
            check(self.initial_samples is None or (_is_int(self.initial_samples) and self.initial_samples >= 1),
                  "initial_samples", f"must be None or an integer >= 1, got {self.initial_samples!r}")
            check(_is_number(self.initial_fraction) and 0.0 < self.initial_fraction <= 1.0, "initial_fraction",
                  f"must be a number in (0, 1], got {self.initial_fraction!r}")
            check(_is_int(self.max_initial) and self.max_initial >= 2, "max_initial",
                  f"must be an integer >= 2, got {self.max_initial!r}")
            check(self.initial_design in INITIAL_DESIGNS, "initial_design",
                  f"must be one of {', '.join(INITIAL_DESIGNS)}, got {self.initial_design!r}")
            check(isinstance(self.multivariate, bool), "multivariate",
                  f"must be true or false, got {self.multivariate!r}")
            check(_is_number(self.bandwidth) and 0.0 <= self.bandwidth <= 10.0, "bandwidth",
                  f"must be a number in [0, 10], got {self.bandwidth!r}")
            check(_is_number(self.ordinal_weight) and 0.0 <= self.ordinal_weight <= 1.0, "ordinal_weight",
                  f"must be a number in [0, 1], got {self.ordinal_weight!r}")
            check(_is_number(self.smoothing) and 0.0 < self.smoothing <= 1.0, "smoothing",
                  f"must be a number in (0, 1], got {self.smoothing!r}")
            check(_is_number(self.prior_weight) and self.prior_weight > 0.0, "prior_weight",
                  f"must be a number > 0, got {self.prior_weight!r}")
            check(self.failures in FAILURE_MODES, "failures",
                  f"must be one of {', '.join(FAILURE_MODES)}, got {self.failures!r}")
            check(_is_int(self.ei_candidates) and self.ei_candidates >= 0, "ei_candidates",
                  f"must be an integer >= 0, got {self.ei_candidates!r}")
            check(_is_number(self.temperature) and self.temperature >= 0.0, "temperature",
                  f"must be a number >= 0, got {self.temperature!r}")
            check(not (self.ei_candidates > 0 and self.temperature > 0), "temperature",
                  "use either ei_candidates or temperature, not both")
            check(_is_int(self.max_candidates) and self.max_candidates >= 16, "max_candidates",
                  f"must be an integer >= 16, got {self.max_candidates!r}")

    # -- setup -------------------------------------------------------------------------------------------
    def _setup(self) -> None:
        space, hp = self.space, self.hp
        sizes = np.asarray(space.sizes, dtype=np.int64)
        self._active = np.flatnonzero(sizes > 1)  # single-valued parameters carry no information
        self._sizes = sizes[self._active]
        self._tables = kernel_tables(self._sizes, hp.bandwidth, hp.smoothing, hp.ordinal_weight)
        d = len(self._active)
        # observations (every evaluated row, in order)
        self._obs_x = np.empty((16, d), dtype=np.int64)
        self._obs_value = np.empty(16)  # NaN for failures
        self._n_obs = 0
        self._obs_of_row: dict[int, int] = {}  # row -> observation index
        # candidate pool
        n = len(space)
        self._full = n <= hp.max_candidates
        if self._full:
            self._pool_rows = np.arange(n, dtype=np.int64)
            self._pool_x = np.ascontiguousarray(space.indices[:, self._active], dtype=np.int64)
            self._pool_pos: dict[int, int] | None = None
        else:
            self._pool_rows = np.empty(0, dtype=np.int64)
            self._pool_x = np.empty((0, d), dtype=np.int64)
            self._pool_pos = {}
        m = len(self._pool_rows)
        self._pool_done = np.zeros(m, dtype=bool)  # evaluated
        self._s_all = np.zeros(m)  # multivariate: sum of the kernel columns of the modelled observations
        self._good_cols: dict[int, np.ndarray] = {}  # observation index -> its kernel column over the pool
        if not self._full:
            self._grow_pool(space.sample(hp.max_candidates, self.rng))

    def _n_initial(self) -> int:
        hp = self.hp
        if hp.initial_samples is not None:
            k = hp.initial_samples
        else:
            k = min(hp.max_initial, max(2, math.ceil(hp.initial_fraction * self.budget)))
        return max(1, min(k, len(self.space), self.budget))

    # -- kernels -------------------------------------------------------------------------------------------
    def _log_kernel(self, x: np.ndarray, centres: np.ndarray) -> np.ndarray:
        """``sum_k log(s_k K_k(x_k | c_k))`` for candidates ``x`` (m x d) and centres (c x d): m x c."""
        out = np.zeros((len(x), len(centres)))
        for k, t in enumerate(self._tables):
            out += t[x[:, k][:, None], centres[:, k][None, :]]
        return out

    def _column(self, centre: np.ndarray, x: np.ndarray | None = None) -> np.ndarray:
        """Scaled kernel of one observation over the pool (or over ``x``)."""
        x = self._pool_x if x is None else x
        acc = np.zeros(len(x))
        for k, t in enumerate(self._tables):
            acc += t[:, centre[k]][x[:, k]]
        return np.exp(np.minimum(acc, _LOG_CLIP))

    def _modelled(self, i: int) -> bool:
        """Does observation ``i`` enter the densities (successes always, failures with ``failures="bad"``)?"""
        return not np.isnan(self._obs_value[i]) or self.hp.failures == "bad"

    # -- the candidate pool (only grows on spaces larger than max_candidates) ---------------------------------
    def _grow_pool(self, rows: np.ndarray) -> None:
        rows = np.asarray([int(r) for r in rows if int(r) not in self._pool_pos], dtype=np.int64)
        if len(rows) == 0:
            return
        x = np.ascontiguousarray(self.space.indices[rows][:, self._active], dtype=np.int64)
        start = len(self._pool_rows)
        for j, r in enumerate(rows.tolist()):
            self._pool_pos[r] = start + j
        self._pool_rows = np.concatenate([self._pool_rows, rows])
        self._pool_x = np.concatenate([self._pool_x, x])
        self._pool_done = np.concatenate([self._pool_done, np.array([r in self.observed for r in rows.tolist()])])
        s_new = np.zeros(len(rows))
        if self.hp.multivariate and self._n_obs:
            idx = [i for i in range(self._n_obs) if self._modelled(i)]
            for chunk in range(0, len(idx), 256):
                part = idx[chunk:chunk + 256]
                s_new += np.exp(np.minimum(self._log_kernel(x, self._obs_x[part]), _LOG_CLIP)).sum(axis=1)
            for i in list(self._good_cols):
                self._good_cols[i] = np.concatenate([self._good_cols[i], self._column(self._obs_x[i], x)])
        self._s_all = np.concatenate([self._s_all, s_new])

    def _pos(self, row: int) -> int:
        if self._pool_pos is None:
            return row
        return self._pool_pos.get(row, -1)

    # -- observations ----------------------------------------------------------------------------------------
    def _observe(self, row: int, value: float | None) -> int:
        i = self._n_obs
        if i == len(self._obs_value):
            self._obs_x = np.concatenate([self._obs_x, np.empty_like(self._obs_x)])
            self._obs_value = np.concatenate([self._obs_value, np.empty_like(self._obs_value)])
        self._obs_x[i] = self.space.indices[row, self._active]
        self._obs_value[i] = np.nan if value is None else float(value)
        self._n_obs += 1
        self._obs_of_row[row] = i
        p = self._pos(row)
        if p >= 0:
            self._pool_done[p] = True
        if self.hp.multivariate and self._modelled(i):
            col = self._column(self._obs_x[i])
            self._s_all += col
            if value is not None:
                self._good_cols[i] = col  # kept only while the observation is in the good set (see _scores)
        return i

    def _good_set(self) -> np.ndarray:
        """Observation indices of the good set: the best ceil(gamma * n_ok), at most max_good."""
        values = self._obs_value[: self._n_obs]
        ok = np.flatnonzero(~np.isnan(values))
        n_good = min(self.hp.max_good, math.ceil(self.hp.gamma * len(ok)))
        order = ok[np.argsort(values[ok], kind="stable")]
        return order[:n_good]

    # -- scoring ----------------------------------------------------------------------------------------------
    def _scores(self, good: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(log l, log l - log g) over the pool, up to constants."""
        hp = self.hp
        pw = float(hp.prior_weight)
        n_ok = int(np.count_nonzero(~np.isnan(self._obs_value[: self._n_obs])))
        n_fail = self._n_obs - n_ok
        n_good = len(good)
        n_bad = n_ok - n_good + (n_fail if hp.failures == "bad" else 0)
        if hp.multivariate:
            keep = set(good.tolist())
            for i in list(self._good_cols):
                if i not in keep:
                    del self._good_cols[i]
            s_good = np.zeros(len(self._pool_rows))
            for i in good.tolist():
                col = self._good_cols.get(i)
                if col is None:
                    col = self._good_cols[i] = self._column(self._obs_x[i])
                s_good += col
            s_bad = np.maximum(self._s_all - s_good, 0.0)
            log_l = np.log((pw + s_good) / (pw + n_good))
            log_g = np.log((pw + s_bad) / (pw + n_bad))
            return log_l, log_l - log_g
        # independent per-parameter mixtures: l(x) = prod_k l_k(x_k)
        values = self._obs_value[: self._n_obs]
        is_good = np.zeros(self._n_obs, dtype=bool)
        is_good[good] = True
        bad_mask = ~is_good & (~np.isnan(values) if hp.failures == "ignore" else True)
        gx, bx = self._obs_x[: self._n_obs][is_good], self._obs_x[: self._n_obs][bad_mask]
        log_l = np.zeros(len(self._pool_rows))
        log_r = np.zeros(len(self._pool_rows))
        for k, t in enumerate(self._tables):
            kern = np.exp(t)  # s * K
            lk = (pw + kern[:, gx[:, k]].sum(axis=1)) / (pw + len(gx))
            gk = (pw + kern[:, bx[:, k]].sum(axis=1)) / (pw + len(bx))
            log_l += np.log(lk)[self._pool_x[:, k]]
            log_r += (np.log(lk) - np.log(gk))[self._pool_x[:, k]]
        return log_l, log_r

    # -- a model for other strategies ---------------------------------------------------------------------------
    def start_model(self) -> None:
        """Use this TPE only as a model (no search of its own): feed it with :meth:`observe`, ask :meth:`log_ratio`."""
        self._setup()
        if not self._full:  # no candidate pool to maintain: log_ratio computes the rows it is asked about
            d = len(self._active)
            self._pool_rows, self._pool_x = np.empty(0, dtype=np.int64), np.empty((0, d), dtype=np.int64)
            self._pool_done, self._s_all, self._pool_pos = np.zeros(0, dtype=bool), np.zeros(0), {}

    def observe(self, row: int, value: float | None) -> None:
        """Record an evaluation made by someone else (``None``: failed)."""
        self._observe(int(row), value)

    def revise(self, row: int, value: float | None) -> None:
        """The truth of an observation first recorded as failed (a pending result in a batch)."""
        i = getattr(self, "_obs_of_row", {}).get(int(row))
        if i is None:
            return
        was = self._modelled(i)
        self._obs_value[i] = np.nan if value is None else float(value)
        now = self._modelled(i)
        if self.hp.multivariate and was != now and len(self._pool_rows):
            col = self._column(self._obs_x[i])
            self._s_all = np.maximum(self._s_all + (col if now else -col), 0.0)
        self._good_cols.pop(i, None)  # recomputed when it is in the good set

    def log_ratio(self, rows: np.ndarray) -> np.ndarray | None:
        """``log l(x) - log g(x)`` of the given rows (higher is more promising); None before any success.

        On the full candidate pool this reads the incrementally maintained
        scores; on larger spaces (multivariate model) the kernels of the rows
        against every modelled observation are summed directly, in chunks.
        """
        good = self._good_set()
        if len(good) == 0:
            return None
        rows = np.asarray(rows, dtype=np.int64)
        if self._full:
            return self._scores(good)[1][rows]
        if not self.hp.multivariate:
            raise NotImplementedError("log_ratio on a pooled space needs the multivariate model")
        hp = self.hp
        x = np.ascontiguousarray(self.space.indices[rows][:, self._active], dtype=np.int64)
        modelled = [i for i in range(self._n_obs) if self._modelled(i)]
        s_all = np.zeros(len(rows))
        for start in range(0, len(modelled), 256):
            part = modelled[start:start + 256]
            s_all += np.exp(np.minimum(self._log_kernel(x, self._obs_x[part]), _LOG_CLIP)).sum(axis=1)
        s_good = np.exp(np.minimum(self._log_kernel(x, self._obs_x[good]), _LOG_CLIP)).sum(axis=1)
        s_bad = np.maximum(s_all - s_good, 0.0)
        pw = float(hp.prior_weight)
        n_bad = len(modelled) - len(good)
        return np.log((pw + s_good) / (pw + len(good))) - np.log((pw + s_bad) / (pw + n_bad))

    def _temperature(self) -> float:
        return self.hp.temperature

    def _select(self, good: np.ndarray) -> int:
        hp = self.hp
        cand = np.flatnonzero(~self._pool_done)
        log_l, score = self._scores(good)
        log_l, score = log_l[cand], score[cand]
        if hp.ei_candidates > 0:
            p = np.exp(log_l - log_l.max())
            draws = np.unique(self.rng.choice(len(cand), size=hp.ei_candidates, p=p / p.sum()))
            sub = score[draws]
            best = draws[np.flatnonzero(sub >= sub.max() - 1e-12)]
        elif self._temperature() > 0:
            p = np.exp((score - score.max()) / self._temperature())
            return int(self._pool_rows[cand[self.rng.choice(len(cand), p=p / p.sum())]])
        else:
            best = np.flatnonzero(score >= score.max() - 1e-12)
        pick = best[0] if len(best) == 1 else self.rng.choice(best)
        return int(self._pool_rows[cand[pick]])

    # -- the search ---------------------------------------------------------------------------------------------
    def search(self) -> SearchGenerator:
        self._setup()
        n = len(self.space)
        last: tuple[int, int] | None = None  # (observation index, row) of the latest evaluation
        k = self._n_initial()
        if self.hp.initial_design == "random":
            initial = self.space.sample(k, self.rng)
        else:
            initial = self.space.lhs_sample(k, self.rng, maximin=self.hp.initial_design == "lhs_maximin")
        for row in initial:
            row = int(row)
            if row in self.observed:
                continue
            last = (self._observe(row, (yield row)), row)
        while len(self.observed) < n:
            good = self._good_set()
            if len(good) == 0:  # nothing has run yet: keep sampling at random
                row = self.random_unevaluated(1)[0]
            else:
                if not self._full:
                    if last is not None and last[0] in set(good.tolist()):  # a new good one: its neighbours join
                        self._grow_pool(self.space.neighbours(last[1], "hamming"))
                    if not np.any(~self._pool_done):  # pool used up: refill at random
                        left = n - len(self.observed)
                        self._grow_pool(np.asarray(self.random_unevaluated(min(self.hp.max_candidates, left))))
                row = self._select(good)
            last = (self._observe(row, (yield row)), row)


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) and math.isfinite(v)
