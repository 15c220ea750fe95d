"""Bayesian optimisation with a Gaussian process over the discrete, normalised search space.

The method of Willemsen, van Nieuwpoort and van Werkhoven, "Bayesian
Optimization for auto-tuning GPU kernels" (PMBS 2021; Kernel Tuner's
``bayes_opt``):

* configurations are points of [0,1]^d (value index / (values - 1) per
  parameter, :meth:`SearchSpace.encode`); the search space is the discrete
  set of valid configurations, so the acquisition function is evaluated on
  not-yet-evaluated valid configurations only and the best is proposed (no
  continuous optimisation, no rounding, never a re-proposal);
* the surrogate is a Gaussian process with a fixed Matérn kernel from
  scikit-learn (nu = 3/2, length scale 1.5 with contextual variance, 2
  without), observations standardised (``normalize_y``); failed
  configurations never enter the GP (they have no value to give it);
* the initial sample is a maximin Latin hypercube (20 points, scaled down for
  small budgets); failed initial points are replaced by random ones until the
  initial sample has that many valid observations;
* acquisition functions EI, PI (``poi``) and LCB with the contextual-variance
  exploration factor, alone or as the ``multi`` / ``advanced_multi``
  portfolios (see :mod:`._acquisition`).

Four additions to the published method (each a hyperparameter; all four
off is the method as published):

* ``centre_first`` (default on): the initial sample starts at the centre
  configuration, the middle value of every ordered parameter (the valid
  configuration nearest it). Parameter lists usually bracket sensible
  values: on 11 of the 15 recorded GPU spaces the centre is faster than 80%
  of the space. Measured in ``auto``: +0.027 +/- 0.016 on seeds 0-39
  (0.773 / 0.777 vs 0.756 / 0.740), +0.047 and +0.021 on seeds 40-59 and
  80-99; it gains most on the smallest budgets (MI250X +0.33, W7800 +0.19)
  and costs a little elsewhere (GEMM -0.02, A6000 -0.05, A4000 -0.12); on
  the recorded CPU matmul (20 evaluations) -0.20 -> -0.05.
* unordered parameters (string values such as a loop order) are one-hot in
  the GP (:meth:`BayesianOptimization.encode_indices`) instead of an
  invented order; numeric spaces are unaffected (same proposals). On the
  recorded CPU matmul: -1.44 -> -0.20 (200 seeds).
* ``cover_unordered`` (default on): the initial sample is at least as large
  as the number of values of the largest unordered parameter, and the point
  that gives way to the centre is one repeating the centre's unordered
  values, so the Latin hypercube shows the GP every value once. A one-hot
  value without an observation is invisible to the GP (its prediction is
  the mean of everything), so EI kept refining the values it had seen: on
  the recorded CPU matmul (6 loop orders, 2 fast; budget 20, a 4-point
  sample) ``auto`` -0.05 -> 0.40 (200 seeds). Spaces without an unordered
  parameter are unaffected.
* ``failure_model`` (default on): a separate model of where configurations
  fail (:mod:`._feasibility`, a kernel-weighted failure rate, length scale
  ``failure_lengthscale``) weights EI and PI by the predicted chance that a
  candidate runs, and no candidate more likely to fail than to run is
  proposed while others are left. Without it the GP, blind to failures, keeps
  proposing a failing region that looks promising: on pnpoly 64-72% of the
  first 20 evaluations failed (8% of the space does), on the KTT convolution
  37-39% (22%); ``bayes`` 0.433 -> 0.546 on the 13 measured spaces. Until
  something fails it changes nothing.

Per-step cost. The GP posterior is not refitted from scratch: the strategy
keeps the exact posterior of a candidate pool and updates it in O(n m) per
observation (n observations, m candidates) by appending a row to the Cholesky
factor ``L`` of ``K + noise I`` and to ``V = L^-1 K(X, C)``, the candidates'
variance ``1 - sum(V**2)`` and the means ``V^T L^-1 y``, ``V^T L^-1 1`` (the
latter two give the standardised posterior mean for any standardisation of y,
so changing mean and scale of the observations costs nothing). This is the
same posterior as scikit-learn's ``GaussianProcessRegressor(kernel,
alpha=noise, normalize_y=True, optimizer=None)``, without its O(n^3) refit and
O(m n^2) prediction. On spaces larger than ``max_candidates`` the pool is a
random subset of the unevaluated configurations, refilled as candidates are
evaluated, plus the Hamming neighbourhoods of the best observations. Near
``max_train`` observations a second model is built in the background from the
best 3/8 and the most recent 1/8 of them (plus every newer observation), a
few points per step, and swapped in when it has caught up, so no step pays
for a full refit.

Defaults and evidence (``benchmarks/results/bayes_variants.json``: the 13
measured spaces, 10 seeds each, mean over spaces; 0 = random search; the
genetic algorithm in the same run 0.553): ``ei`` 0.416 +/- 0.046, ``multi``
0.402, ``advanced_multi`` 0.383, ``poi`` 0.378, ``lcb`` 0.162; without
contextual variance 0.394 / 0.369 / 0.313 / 0.337 / 0.194 (it helps every
function but LCB). So the default is EI with contextual variance. Over these
budgets (144-2148 evaluations) the published ranking (``advanced_multi``
best, BO ahead of GA) is not reproduced: its promotion rule rewards the
function whose own observations are lowest, the most exploitative one, which
then stalls. In the papers' own view, the quality after a small fixed number
of evaluations (opt/best, mean over the spaces), it is: after 50 evaluations
every BO variant (0.876-0.891) beats GA (0.857) and ``advanced_multi`` is the
best (0.891), after 100 it still leads (0.923 vs GA 0.919), after 220 GA
wins (0.970 vs at most 0.952). A log transform of the times
(``normalize_y="log"``) measured +0.03 +/- 0.035 over standardisation (not
significant), a larger initial sample for small budgets -0.00 +/- 0.07, the
variance or the std in the contextual variance (``cv_statistic``) 0.00 +/-
0.02, length scale 1.0 or 0.5 instead of 1.5 lower (-0.07, -0.17 with EI on
9 spaces); the published settings stay. (These last comparisons predate the
fix that gives every parameter value an equal share of the Latin-hypercube
design, which raised EI from 0.37 to 0.42.)
"""
from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from ._acquisition import (ACQUISITION_FUNCTIONS, AdvancedMultiPortfolio, MultiPortfolio, acquisition_scores,
                           contextual_variance)
from ._feasibility import FailureModel
from ..space import SearchSpace
from .base import Batch, SearchGenerator, Strategy, check
from .registry import register


# SciPy's linear algebra is imported on first use: at import it costs a pytest --autotune session about a
# second of start-up (scipy.linalg pulls in numpy.f2py), also in the sessions that never run bayes
def cholesky(*args: Any, **kwargs: Any) -> Any:
    from scipy.linalg import cholesky as f

    return f(*args, **kwargs)


def solve_triangular(*args: Any, **kwargs: Any) -> Any:
    from scipy.linalg import solve_triangular as f

    return f(*args, **kwargs)


def dtrsm(*args: Any, **kwargs: Any) -> Any:
    from scipy.linalg.blas import dtrsm as f

    return f(*args, **kwargs)


def dtrsv(*args: Any, **kwargs: Any) -> Any:
    from scipy.linalg.blas import dtrsv as f

    return f(*args, **kwargs)

if TYPE_CHECKING:  # scikit-learn is imported when a search starts (it takes a second to import)
    from sklearn.gaussian_process.kernels import Matern

ACQUISITIONS = ACQUISITION_FUNCTIONS + ("multi", "advanced_multi")
NORMALIZATIONS = ("standardize", "log", "none")

__all__ = ["BayesianOptimization", "PoolGP", "ACQUISITIONS", "NORMALIZATIONS"]


class PoolGP:
    """Exact GP posterior over a pool of candidate rows, updated in O(n m) per observation.

    ``X`` holds the encoded configurations of every row. The prior is a
    zero-mean GP with unit variance and ``kernel`` on the *standardised*
    outputs (scikit-learn's ``normalize_y``); ``noise`` is added to the
    diagonal (``alpha``). Training outputs ``w`` are stored raw; mean ``a``
    and scale ``b`` of the standardisation are recomputed at every
    prediction, which only needs ``V^T L^-1 w`` and ``V^T L^-1 1``.
    """

    def __init__(self, X: np.ndarray, kernel: Matern, noise: float, pool_capacity: int, standardize: bool = True,
                 train_capacity: int = 0):
        self.X = np.ascontiguousarray(X, dtype=np.float64)
        self.kernel = kernel
        self.noise = float(noise)
        self.standardize = standardize
        d = self.X.shape[1]
        # training set (capacity grows by doubling)
        self.n = 0
        self._cap = 0
        self.L = np.zeros((0, 0), order="F")  # lower Cholesky factor, identity beyond n
        self.zw = np.zeros(0)  # L^-1 w
        self.z1 = np.zeros(0)  # L^-1 1
        self.w = np.zeros(0)
        self.train_rows = np.zeros(0, dtype=np.int64)
        self.Xtrain = np.zeros((0, d))
        # candidate pool (fixed capacity)
        self.capacity = int(pool_capacity)
        self.m = 0
        self.V = np.zeros((0, self.capacity))
        self.pool = np.zeros(self.capacity, dtype=np.int64)
        self.Xpool = np.zeros((self.capacity, d))
        self.pw = np.zeros(self.capacity)  # V^T L^-1 w
        self.p1 = np.zeros(self.capacity)  # V^T L^-1 1
        self.var = np.ones(self.capacity)  # prior variance 1 minus explained variance
        self.local = np.zeros(self.capacity, dtype=bool)
        self.pos = np.full(len(self.X), -1, dtype=np.int64)  # row -> pool slot
        if train_capacity > 0:  # allocate once (lazily zeroed pages): no copies while the search runs
            self._grow(train_capacity)

    # -- kernel --------------------------------------------------------------------------------
    def k(self, A: np.ndarray, B: np.ndarray) -> np.ndarray:
        return self.kernel(A, B)

    # -- training set --------------------------------------------------------------------------
    def _grow(self, capacity: int = 0) -> None:
        cap = max(32, 2 * self._cap, capacity)
        n = self.n
        L = np.eye(cap, order="F")
        L[:n, :n] = self.L[:n, :n]
        V = np.zeros((cap, self.capacity))
        V[:n, : self.m] = self.V[:n, : self.m]
        self.L, self.V = L, V
        for name in ("zw", "z1", "w"):
            a = np.zeros(cap)
            a[:n] = getattr(self, name)[:n]
            setattr(self, name, a)
        rows = np.zeros(cap, dtype=np.int64)
        rows[:n] = self.train_rows[:n]
        Xt = np.zeros((cap, self.X.shape[1]))
        Xt[:n] = self.Xtrain[:n]
        self.train_rows, self.Xtrain, self._cap = rows, Xt, cap

    def _solve_L(self, b: np.ndarray) -> np.ndarray:
        """``L[:n,:n]^-1 b`` for a vector or a matrix of n rows (BLAS on the padded factor, no copy)."""
        n, cap = self.n, self._cap
        if b.ndim == 1:
            x = np.zeros(cap)
            x[:n] = b
            return dtrsv(self.L, x, lower=1, overwrite_x=1)[:n]
        x = np.zeros((cap, b.shape[1]), order="F")
        x[:n] = b
        return dtrsm(1.0, self.L, x, lower=1, overwrite_b=1)[:n]

    def add_observation(self, row: int, w: float) -> None:
        """Condition on output ``w`` at ``row`` (which leaves the pool if it is there)."""
        self.remove(row)
        if self.n == self._cap:
            self._grow()
        n, m = self.n, self.m
        x = self.X[row]
        if n:
            l = self._solve_L(self.k(self.Xtrain[:n], x[None, :])[:, 0])
            lnn = math.sqrt(max(1.0 + self.noise - float(l @ l), self.noise))
            self.L[n, :n] = l
            zw = (w - float(l @ self.zw[:n])) / lnn
            z1 = (1.0 - float(l @ self.z1[:n])) / lnn
        else:
            l = np.zeros(0)
            lnn = math.sqrt(1.0 + self.noise)
            zw, z1 = w / lnn, 1.0 / lnn
        self.L[n, n] = lnn
        if m:
            kc = self.k(x[None, :], self.Xpool[:m])[0]
            v = (kc - l @ self.V[:n, :m]) / lnn if n else kc / lnn
            self.V[n, :m] = v
            self.var[:m] -= v * v
            self.pw[:m] += v * zw
            self.p1[:m] += v * z1
        self.zw[n], self.z1[n], self.w[n] = zw, z1, w
        self.train_rows[n] = row
        self.Xtrain[n] = x
        self.n = n + 1

    def set_outputs(self, w: np.ndarray) -> None:
        """Replace all training outputs (e.g. a change of output transform): O(n^2 + n m)."""
        n, m = self.n, self.m
        self.w[:n] = w
        self.zw[:n] = self._solve_L(np.asarray(w, dtype=np.float64))
        self.pw[:m] = self.zw[:n] @ self.V[:n, :m] if n else 0.0

    def rebuild(self, keep: np.ndarray) -> None:
        """Refit from scratch on the training points at positions ``keep`` (in that order)."""
        keep = np.asarray(keep, dtype=np.int64)
        rows, w = self.train_rows[keep].copy(), self.w[keep].copy()
        Xt = self.X[rows]
        k = len(rows)
        K = self.k(Xt, Xt)
        K[np.diag_indices_from(K)] += self.noise
        Lk = cholesky(K, lower=True)
        self.n = k
        self.L[:] = 0.0
        self.L[np.diag_indices_from(self.L)] = 1.0
        self.L[:k, :k] = Lk
        self.train_rows[:k], self.Xtrain[:k], self.w[:k] = rows, Xt, w
        self.zw[:k] = solve_triangular(Lk, w, lower=True)
        self.z1[:k] = solve_triangular(Lk, np.ones(k), lower=True)
        m = self.m
        if m:
            Vm = solve_triangular(Lk, self.k(Xt, self.Xpool[:m]), lower=True)
            self.V[:k, :m] = Vm
            self.var[:m] = 1.0 - np.einsum("ij,ij->j", Vm, Vm)
            self.pw[:m] = self.zw[:k] @ Vm
            self.p1[:m] = self.z1[:k] @ Vm

    # -- pool ----------------------------------------------------------------------------------
    def add_candidates(self, rows: np.ndarray, local: bool = False) -> None:
        rows = np.asarray(rows, dtype=np.int64)
        c = len(rows)
        if c == 0:
            return
        m, n = self.m, self.n
        if m + c > self.capacity:
            raise ValueError("candidate pool over capacity")
        sl = slice(m, m + c)
        Xc = self.X[rows]
        self.pool[sl], self.Xpool[sl], self.local[sl] = rows, Xc, local
        self.pos[rows] = np.arange(m, m + c)
        if n:
            Vc = self._solve_L(self.k(self.Xtrain[:n], Xc))
            self.V[:n, sl] = Vc
            self.var[sl] = 1.0 - np.einsum("ij,ij->j", Vc, Vc)
            self.pw[sl] = self.zw[:n] @ Vc
            self.p1[sl] = self.z1[:n] @ Vc
        else:
            self.var[sl], self.pw[sl], self.p1[sl] = 1.0, 0.0, 0.0
        self.m = m + c

    def remove(self, row: int) -> None:
        """Take ``row`` out of the pool (no-op when it is not there)."""
        j = int(self.pos[row])
        if j < 0:
            return
        last = self.m - 1
        if j != last:
            moved = int(self.pool[last])
            self.V[: self.n, j] = self.V[: self.n, last]
            for a in (self.pool, self.Xpool, self.pw, self.p1, self.var, self.local):
                a[j] = a[last]
            self.pos[moved] = j
        self.pos[row] = -1
        self.m = last

    # -- prediction ----------------------------------------------------------------------------
    def scale(self) -> tuple[float, float]:
        """Mean and scale of the output standardisation (scikit-learn's ``normalize_y``)."""
        if not self.standardize or self.n == 0:
            return 0.0, 1.0
        w = self.w[: self.n]
        a, b = float(w.mean()), float(w.std())
        return a, (b if b > 10 * np.finfo(float).eps else 1.0)

    def predict(self) -> tuple[np.ndarray, np.ndarray]:
        """Standardised posterior mean and std of the pool (in pool order)."""
        m = self.m
        a, b = self.scale()
        mean = (self.pw[:m] - a * self.p1[:m]) / b
        std = np.sqrt(np.maximum(self.var[:m], 0.0))
        return mean, std

    def predict_raw(self) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and std of the pool in output units (as scikit-learn's ``predict``)."""
        a, b = self.scale()
        mean, std = self.predict()
        return a + b * mean, b * std


@register
class BayesianOptimization(Strategy):
    """Bayesian optimisation (GP, Matérn kernel) with EI / PI / LCB or the multi / advanced_multi portfolios."""

    name = "bayes"

    @dataclass
    class Hyperparameters:
        acquisition: str = "ei"  # ei, poi, lcb, multi, advanced_multi (ei: best measured, see the module doc)
        contextual_variance: bool = True  # exploration factor from the model's variance (else `exploration`)
        exploration: float = 0.01  # constant lambda (xi of EI/PI in std units, kappa of LCB) without CV
        cv_statistic: str = "variance"  # contextual variance from the mean posterior variance, or std (Kernel Tuner)
        lengthscale: Optional[float] = None  # Matérn length scale; None: 1.5 with CV, 2.0 without
        nu: float = 1.5  # Matérn smoothness (3/2)
        noise: float = 1e-6  # added to the kernel diagonal (scikit-learn's alpha), standardised units
        normalize_y: str = "standardize"  # standardize, log (log, then standardise), none
        initial_samples: int = 20  # valid points of the maximin Latin-hypercube initial sample
        initial_fraction: float = 0.2  # at most this fraction of the budget goes to the initial sample
        centre_first: bool = True  # the initial sample starts at the middle value of every ordered parameter
        cover_unordered: bool = True  # the initial sample holds every value of each unordered parameter (see the doc)
        order: tuple = ("ei", "poi", "lcb")  # functions of the multi portfolios, in round-robin order
        skip_threshold: int = 5  # multi: duplicate rounds before skipping; advanced: marks to drop/promote
        required_improvement: float = 0.1  # advanced_multi: relative distance from the mean for a mark
        discount: Optional[float] = None  # discount of the observation score; None: 0.65 multi, 0.75 advanced
        max_candidates: int = 8192  # candidate pool size on larger spaces (pruning)
        neighbourhood: int = 3  # pruned spaces: Hamming neighbours of this many best points join the pool
        max_train: int = 1024  # observations in the GP; near it the model shrinks to the best 3/8 + newest 1/8
        failure_model: bool = True  # weight the acquisition by the predicted chance a candidate runs (_feasibility)
        failure_lengthscale: float = 0.3  # Matérn length scale of that failure model (encoded space)

        def validate(self) -> None:
            def real(v: object) -> bool:
                return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_)) \
                    and math.isfinite(float(v))

            def integer(v: object) -> bool:
                return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))

            check(isinstance(self.acquisition, str) and self.acquisition in ACQUISITIONS, "acquisition",
                  f"must be one of {', '.join(ACQUISITIONS)}, got {self.acquisition!r}")
            check(isinstance(self.contextual_variance, (bool, np.bool_)), "contextual_variance",
                  "must be true or false")
            check(self.cv_statistic in ("variance", "std"), "cv_statistic",
                  f"must be 'variance' or 'std', got {self.cv_statistic!r}")
            check(real(self.exploration) and self.exploration >= 0, "exploration",
                  f"must be a number >= 0, got {self.exploration!r}")
            check(self.lengthscale is None or (real(self.lengthscale) and self.lengthscale > 0), "lengthscale",
                  f"must be a positive number or None, got {self.lengthscale!r}")
            check(real(self.nu) and self.nu > 0, "nu", f"must be a positive number (e.g. 1.5, 2.5), got {self.nu!r}")
            check(real(self.noise) and 0 < self.noise < 1, "noise", f"must be in (0, 1), got {self.noise!r}")
            check(isinstance(self.normalize_y, str) and self.normalize_y in NORMALIZATIONS, "normalize_y",
                  f"must be one of {', '.join(NORMALIZATIONS)}, got {self.normalize_y!r}")
            check(integer(self.initial_samples) and self.initial_samples >= 1, "initial_samples",
                  f"must be an integer >= 1, got {self.initial_samples!r}")
            check(real(self.initial_fraction) and 0 < self.initial_fraction <= 1, "initial_fraction",
                  f"must be in (0, 1], got {self.initial_fraction!r}")
            check(isinstance(self.centre_first, (bool, np.bool_)), "centre_first",
                  f"must be true or false, got {self.centre_first!r}")
            check(isinstance(self.cover_unordered, (bool, np.bool_)), "cover_unordered",
                  f"must be true or false, got {self.cover_unordered!r}")
            order = self.order
            check(isinstance(order, (list, tuple)) and len(order) >= 1
                  and all(isinstance(f, str) and f in ACQUISITION_FUNCTIONS for f in order)
                  and len(set(order)) == len(order), "order",
                  f"must be a non-empty list of distinct functions from {', '.join(ACQUISITION_FUNCTIONS)}, "
                  f"got {order!r}")
            check(integer(self.skip_threshold) and self.skip_threshold >= 1, "skip_threshold",
                  f"must be an integer >= 1, got {self.skip_threshold!r}")
            check(real(self.required_improvement) and 0 <= self.required_improvement < 1, "required_improvement",
                  f"must be in [0, 1), got {self.required_improvement!r}")
            check(self.discount is None or (real(self.discount) and 0 < self.discount <= 1), "discount",
                  f"must be in (0, 1] or None, got {self.discount!r}")
            check(integer(self.max_candidates) and self.max_candidates >= 16, "max_candidates",
                  f"must be an integer >= 16, got {self.max_candidates!r}")
            check(integer(self.neighbourhood) and self.neighbourhood >= 0, "neighbourhood",
                  f"must be an integer >= 0, got {self.neighbourhood!r}")
            check(integer(self.max_train) and self.max_train >= 16, "max_train",
                  f"must be an integer >= 16, got {self.max_train!r}")
            check(isinstance(self.failure_model, (bool, np.bool_)), "failure_model",
                  f"must be true or false, got {self.failure_model!r}")
            check(real(self.failure_lengthscale) and self.failure_lengthscale > 0, "failure_lengthscale",
                  f"must be a positive number, got {self.failure_lengthscale!r}")

    def __init__(self, space: SearchSpace, seed: int | None = None, **hyperparameters: Any):
        super().__init__(space, seed=seed, **hyperparameters)
        # scikit-learn takes about a second to import: pay it here, with the strategy's construction, rather
        # than in the first search step (and not at all when the package is imported without using bayes)
        from sklearn.gaussian_process.kernels import Matern

        self._matern = Matern

    # -- derived settings ----------------------------------------------------------------------
    @property
    def lengthscale(self) -> float:
        if self.hp.lengthscale is not None:
            return float(self.hp.lengthscale)
        return 1.5 if self.hp.contextual_variance else 2.0

    @property
    def discount(self) -> float:
        if self.hp.discount is not None:
            return float(self.hp.discount)
        return 0.65 if self.hp.acquisition == "multi" else 0.75

    def initial_size(self) -> int:
        """Valid points in the initial sample: ``initial_samples``, scaled down for small budgets, but
        (``cover_unordered``) at least the number of values of the largest unordered parameter."""
        frac = max(1, int(math.ceil(self.hp.initial_fraction * self.budget)))
        frac = max(frac, min(self._unordered_values(), self.budget))
        return max(1, min(int(self.hp.initial_samples), frac, len(self.space)))

    def _unordered_values(self) -> int:
        """Values of the largest unordered parameter (0 without one, or with ``cover_unordered`` off)."""
        space = self.space
        unordered = space.categorical & (space.sizes > 1)
        return int(space.sizes[unordered].max()) if self.hp.cover_unordered and unordered.any() else 0

    # -- bookkeeping ---------------------------------------------------------------------------
    def _setup(self) -> None:
        space = self.space
        X = self.encode_indices(space.indices)
        kernel = self._matern(length_scale=self.lengthscale, nu=float(self.hp.nu), length_scale_bounds="fixed")
        n_rows = len(space)
        self.pruned = n_rows > self.hp.max_candidates
        capacity = self.hp.max_candidates if self.pruned else n_rows
        train_capacity = min(self.hp.max_train, self.budget, n_rows)
        self.gp = PoolGP(X, kernel, self.hp.noise, capacity, standardize=self.hp.normalize_y != "none",
                         train_capacity=train_capacity)
        self.log_outputs = self.hp.normalize_y == "log"
        self.failure_model = FailureModel(X, self._matern(length_scale=float(self.hp.failure_lengthscale),
                                                          nu=float(self.hp.nu), length_scale_bounds="fixed")) \
            if self.hp.failure_model else None
        self.valid_values: list[float] = []  # raw objective values, in evaluation order
        self.sorted_values: list[float] = []
        self.observed_values: dict[int, float] = {}  # row -> raw value of every valid observation
        self.failed_rows: list[int] = []
        self.local_fifo: deque[int] = deque()
        self.local_cap = self.hp.max_candidates // 4
        self.sigma2_initial: float | None = None
        self.initial_mean: float | None = None
        self.trace: list[dict] = []  # per model step: lambda, active functions (diagnostics)
        # training-set cap: a smaller GP is built in the background, a few points per step, then swapped in
        self.shadow: PoolGP | None = None
        self.shadow_queue: deque[tuple[int, float]] = deque()
        self.rebuilds = 0
        self._kernel, self._X, self._train_capacity = kernel, X, train_capacity
        if self.pruned:
            self._pool_add(self._draw_outside_pool(capacity))
        else:
            self._pool_add(np.arange(n_rows))

    def encode_indices(self, idx: np.ndarray) -> np.ndarray:
        """Value-index rows (one column per parameter) as the GP's points.

        An ordered parameter is one coordinate, value index / (values - 1); an
        unordered one (:attr:`SearchSpace.categorical`, e.g. a loop order)
        with more than two values is one-hot, each coordinate 1/sqrt(2), so
        any two of its values are as far apart as the ends of an ordered
        parameter. Encoding it as an index instead invents an order: on the
        example matmul's loop order (the fast ``ikj`` and ``kij`` at 0.2 and
        0.8) the GP kept proposing the slow ends. Constant parameters are
        left out: they do not change distances.
        """
        space = self.space
        columns = []
        for j in np.flatnonzero(space.sizes > 1):
            size = int(space.sizes[j])
            if space.categorical[j] and size > 2:
                columns.append((idx[:, j, None] == np.arange(size)[None, :]) / math.sqrt(2.0))
            else:
                columns.append(idx[:, j, None] / (size - 1.0))
        if not columns:
            return np.full((len(idx), 1), 0.5)
        return np.ascontiguousarray(np.concatenate(columns, axis=1), dtype=np.float64)

    def latin_hypercube(self, k: int, designs: int = 10) -> np.ndarray:
        """Maximin Latin-hypercube sample of ``k`` distinct valid rows.

        As :meth:`SearchSpace.lhs_sample` (one point per stratum of every
        dimension, the best of ``designs`` designs by smallest pairwise
        distance), but each point snaps to the nearest valid configuration in
        the encoded space (the GP's own metric) with one vectorised distance
        computation, which keeps this first step cheap on large constrained
        spaces where most Cartesian points are invalid.
        """
        n = self.gp.X.shape[0]
        k = min(int(k), n)
        if k <= 0:
            return np.zeros(0, dtype=np.int64)
        perm = self.rng.permutation(n)  # rows in random order: ties between equidistant rows break randomly
        X = self.gp.X[perm]
        varying = np.flatnonzero(self.space.sizes > 1)
        sizes = self.space.sizes[varying].astype(np.float64)
        d = max(1, len(varying))
        x2 = np.einsum("ij,ij->i", X, X)
        best, best_score = None, -1.0
        for _ in range(designs):
            strata = np.stack([self.rng.permutation(k) for _ in range(d)], axis=1)
            points = (strata + self.rng.random((k, d))) / k
            values = np.zeros((k, len(self.space.sizes)), dtype=np.int64)  # constant parameters: their one value
            values[:, varying] = np.minimum(np.floor(points[:, : len(varying)] * sizes), sizes - 1)  # equal shares
            points = self.encode_indices(values)
            d2 = x2[None, :] - 2.0 * (X @ points.T).T  # + |p|^2, constant per point (X @ p.T: 2x faster than p @ X.T)
            rows = np.argmin(d2, axis=1)
            used: set[int] = set()
            for i in range(k):
                r = int(rows[i])
                if r in used:
                    di = d2[i].copy()
                    di[list(used)] = np.inf
                    r = int(np.argmin(di))
                    rows[i] = r
                used.add(r)
            if designs == 1 or k == 1:
                return perm[rows]
            e = X[rows]
            dist = np.sqrt(np.maximum(((e[:, None, :] - e[None, :, :]) ** 2).sum(-1), 0.0))
            score = float(dist[np.triu_indices(k, 1)].min())
            if score > best_score:
                best, best_score = perm[rows], score
        return best  # type: ignore[return-value]

    def centre(self) -> int:
        """The valid configuration nearest the middle value of every ordered parameter (a random value of the others)."""
        sizes = self.space.sizes
        middle = (sizes - 1) // 2
        for j in np.flatnonzero(self.space.categorical):
            middle[j] = self.rng.integers(sizes[j])
        return self.space.nearest(middle, self.rng)

    def design_for(self, k: int) -> list[int]:
        """The initial design of ``k`` rows (centre, maximin Latin hypercube) for a strategy that starts without
        this one's model (a chain on several devices, :mod:`.chain`)."""
        if getattr(self, "gp", None) is None:
            self._setup()
        return self.initial_design(k)

    def initial_design(self, k: int) -> list[int]:
        """``k`` rows: the centre (``centre_first``), then the maximin Latin hypercube.

        The hypercube gives every value of a parameter an equal share, so with
        ``k`` at least its number of values each value of an unordered
        parameter is in it; the point that gives way to the centre is then one
        repeating the centre's unordered values, so the coverage survives.
        """
        if not self.hp.centre_first or k <= 0:
            return self.latin_hypercube(k).tolist()
        centre = self.centre()
        rest = [r for r in self.latin_hypercube(k).tolist() if r != centre]
        if self._unordered_values() and len(rest) >= k:
            unordered = np.flatnonzero(self.space.categorical)
            mine = self.space.indices[centre, unordered]
            shared = [int(np.sum(self.space.indices[r, unordered] == mine)) for r in rest]
            del rest[int(np.argmax(shared))]
        return [centre] + rest[: k - 1]

    def _draw_outside_pool(self, k: int) -> np.ndarray:
        """Up to ``k`` random rows neither evaluated nor in the pool (vectorised: this fills the first pool)."""
        if k <= 0:
            return np.zeros(0, dtype=np.int64)
        n = len(self.space)
        taken = self.gp.pos >= 0
        if self.observed:
            taken[np.fromiter(self.observed.keys(), dtype=np.int64, count=len(self.observed))] = True
        out = np.zeros(0, dtype=np.int64)
        for _ in range(4):
            draws = self.rng.integers(0, n, size=2 * (k - len(out)) + 16)
            draws = draws[~taken[draws]]
            _, first = np.unique(draws, return_index=True)  # each row once, in the order drawn
            draws = draws[np.sort(first)][: k - len(out)]
            taken[draws] = True
            out = np.concatenate([out, draws])
            if len(out) == k:
                return out
        rest = np.flatnonzero(~taken)
        extra = self.rng.choice(rest, size=min(k - len(out), len(rest)), replace=False) if len(rest) else []
        return np.concatenate([out, np.asarray(extra, dtype=np.int64)])

    def _transform(self, value: float) -> float:
        if self.log_outputs:
            if value > 0:
                return math.log(value)
            # a non-positive objective: fall back to plain standardisation for the rest of the search
            self.log_outputs = False
            self.gp.set_outputs(np.array([self.observed_values[int(r)] for r in self.gp.train_rows[: self.gp.n]]))
            self.shadow, self.shadow_queue = None, deque()  # restarted later on the new outputs
        return float(value)

    def _observe(self, row: int, value: float | None) -> None:
        """Record an evaluation: the GP sees valid values only; the pool never holds evaluated rows."""
        row = int(row)
        self._pool_remove(row)
        failed = value is None or not math.isfinite(value)
        if self.failure_model is not None:
            self.failure_model.observe(row, failed)
        if failed:
            self.failed_rows.append(row)
        else:
            self._learn(row, float(value))
        if self.pruned:
            self._pool_add(self._draw_outside_pool(self.gp.capacity - self.gp.m))
        self._advance_shadow()

    def revise(self, row: int, value: float | None) -> None:
        """A pending row of a batch was observed as failed (the stand-in lie); it ran: the GP learns its value.

        Meanwhile the failure model steered proposals away from it, like a local penalty."""
        row = int(row)
        if value is None or not math.isfinite(value) or row not in getattr(self, "failed_rows", ()):
            return
        self.failed_rows.remove(row)
        if self.failure_model is not None:
            self.failure_model.forget_failure(row)
        self._learn(row, float(value))

    def _learn(self, row: int, value: float) -> None:
        """The GP and the bookkeeping learn one valid value."""
        self.valid_values.append(value)
        self.observed_values[row] = value
        rank = bisect.bisect_left(self.sorted_values, value)
        self.sorted_values.insert(rank, value)
        w = self._transform(value)
        if self.gp.n >= self.hp.max_train:  # the background model could not keep up: rebuild now
            self._rebuild_now()
        self.gp.add_observation(row, w)
        if self.shadow is not None:
            self.shadow_queue.append((row, w))
        if self.pruned and rank < self.hp.neighbourhood:
            self._add_neighbours(row)

    # -- candidate pool (mirrored into the background model) -------------------------------------
    def _pool_add(self, rows: np.ndarray, local: bool = False) -> None:
        self.gp.add_candidates(rows, local)
        if self.shadow is not None:
            self.shadow.add_candidates(rows, local)

    def _pool_remove(self, row: int) -> None:
        self.gp.remove(row)
        if self.shadow is not None:
            self.shadow.remove(row)

    # -- training-set cap ---------------------------------------------------------------------------
    SHADOW_RATE: int = 6  # training points the background model takes per step

    def _kept_positions(self) -> np.ndarray:
        """Training points kept when the model shrinks: the best 3/8 and the most recent 1/8 of ``max_train``."""
        gp = self.gp
        n, cap = gp.n, self.hp.max_train
        best = np.argsort(gp.w[:n], kind="stable")[: (3 * cap) // 8]
        recent = np.setdiff1d(np.arange(max(0, n - cap // 8), n), best)
        return np.sort(np.concatenate([best, recent]))

    def _advance_shadow(self) -> None:
        """Start, feed or swap in the background model that replaces the GP before it reaches ``max_train``.

        Rebuilding at the cap at once costs O(k^2 m) in one step; instead, the
        kept points (and every new observation) are added to a second model a
        few per step, so each step stays O(n m); when it has caught up it
        becomes the model.
        """
        gp, cap = self.gp, self.hp.max_train
        if self.shadow is None:
            keep = cap // 2
            lead = -(-keep // (self.SHADOW_RATE - 1)) + 8  # steps needed to catch up, with margin
            if gp.n < max(cap - lead, keep + 1) or gp.n + self.budget - len(self.observed) < cap:
                return  # not near the cap yet, or the budget ends before it is reached
            positions = self._kept_positions()
            shadow = PoolGP(self._X, self._kernel, self.hp.noise, gp.capacity, standardize=gp.standardize,
                            train_capacity=self._train_capacity)
            shadow.add_candidates(gp.pool[: gp.m].copy(), False)
            shadow.local[: gp.m] = gp.local[: gp.m]
            self.shadow = shadow
            self.shadow_queue = deque(zip(gp.train_rows[positions].tolist(), gp.w[positions].tolist()))
            return
        for _ in range(self.SHADOW_RATE):
            if not self.shadow_queue:
                break
            r, w = self.shadow_queue.popleft()
            self.shadow.add_observation(r, w)
        if not self.shadow_queue:
            self.gp, self.shadow = self.shadow, None
            self.rebuilds += 1

    def _rebuild_now(self) -> None:
        self.shadow, self.shadow_queue = None, deque()
        self.gp.rebuild(self._kept_positions())
        self.rebuilds += 1

    def _add_neighbours(self, row: int) -> None:
        gp = self.gp
        nb = [int(r) for r in self.space.neighbours(row, "hamming") if int(r) not in self.observed and gp.pos[r] < 0]
        if not nb:
            return
        nb = nb[: self.local_cap]
        # oldest local candidates leave first, then random ones make room
        while self.local_fifo and len(self.local_fifo) + len(nb) > self.local_cap:
            self._pool_remove(self.local_fifo.popleft())
        free = gp.capacity - gp.m
        if free < len(nb):
            slots = np.flatnonzero(~gp.local[: gp.m])
            evict = self.rng.choice(slots, size=min(len(nb) - free, len(slots)), replace=False)
            for r in gp.pool[evict].tolist():
                self._pool_remove(int(r))
        nb = nb[: gp.capacity - gp.m]
        self._pool_add(np.array(nb, dtype=np.int64), local=True)
        self.local_fifo.extend(nb)

    # -- model queries -------------------------------------------------------------------------
    def mean_variance(self) -> float:
        """Mean posterior variance (output units) over the random part of the pool."""
        gp = self.gp
        m = gp.m
        if m == 0:
            return 0.0
        sel = ~gp.local[:m]
        var = gp.var[:m][sel] if sel.any() else gp.var[:m]
        _, b = gp.scale()
        if self.hp.cv_statistic == "std":
            return float(b * np.sqrt(np.maximum(var, 0.0)).mean())
        return float(b * b * np.maximum(var, 0.0).mean())

    def exploration_factor(self) -> float:
        """lambda: contextual variance, or the constant ``exploration``."""
        if not self.hp.contextual_variance:
            return float(self.hp.exploration)
        if self.sigma2_initial is None or not self.valid_values:
            return 0.01  # as Kernel Tuner before anything is known
        return contextual_variance(self.mean_variance(), self.sigma2_initial, self.initial_mean,
                                   self.sorted_values[0])

    def _snapshot(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, float]:
        """Pool rows, standardised mean/std, standardised best and lambda: one prediction for all functions."""
        gp = self.gp
        mean, std = gp.predict()
        a, b = gp.scale()
        best = self.sorted_values[0]
        f_best = ((math.log(best) if self.log_outputs else best) - a) / b
        lam = self.exploration_factor()
        return gp.pool[: gp.m].copy(), mean, std, f_best, lam

    def _scores(self, name: str, rows: np.ndarray, mean: np.ndarray, std: np.ndarray, f_best: float,
                lam: float) -> np.ndarray:
        """Acquisition scores of the pool, weighted by the chance each candidate runs (constrained EI).

        EI and PI are multiplied by ``1 - P(fail)``; LCB, which can be
        negative, is restricted to the candidates more likely to run than
        fail (all of them when there are none).
        """
        scores = acquisition_scores(name, mean, std, f_best, lam)
        p_fail = None if self.failure_model is None else self.failure_model.failure_probability(rows)
        if p_fail is None:
            return scores
        if name != "lcb":
            scores = scores * (1.0 - p_fail)
        likely = p_fail < 0.5
        return np.where(likely, scores, -np.inf) if likely.any() else scores

    def _ensure_pool(self) -> bool:
        if self.gp.m == 0 and self.pruned:
            self._pool_add(self._draw_outside_pool(self.gp.capacity))
        return self.gp.m > 0

    # -- search --------------------------------------------------------------------------------
    def search(self) -> SearchGenerator:
        self._setup()
        n_init = self.initial_size()
        valid = 0
        design = [int(row) for row in self.initial_design(n_init)]
        while design or valid < n_init:
            if not design:  # failed initial points are replaced by random ones
                design = self.random_unevaluated(1 if self.batch_size <= 1 else n_init - valid)
                if not design:
                    return
            # batching, the design goes out as one batch: the model needs its values, not stand-ins
            values = (yield Batch(design)) if self.batch_size > 1 else [(yield design[0])]
            for row, value in zip(design, values):
                self._observe(row, value)
                valid += value is not None and math.isfinite(value)
            design = design[len(values):]
        self.initial_mean = float(np.mean(self.valid_values))
        self.sigma2_initial = self.mean_variance()
        acq = self.hp.acquisition
        if acq in ACQUISITION_FUNCTIONS:
            yield from self._single(acq)
        elif acq == "multi":
            yield from self._multi()
        else:
            yield from self._advanced_multi()

    def _single(self, name: str) -> SearchGenerator:
        while self._ensure_pool():
            rows, mean, std, f_best, lam = self._snapshot()
            j = int(np.argmax(self._scores(name, rows, mean, std, f_best, lam)))
            self.trace.append({"lambda": lam, "functions": (name,)})
            row = int(rows[j])
            value = yield row
            self._observe(row, value)

    def _portfolio_score(self, value: float | None, substitute: float) -> float:
        return substitute if value is None or not math.isfinite(value) else float(value)

    def _multi(self) -> SearchGenerator:
        names = tuple(self.hp.order)
        port = MultiPortfolio(names, self.hp.skip_threshold, self.discount)
        self.portfolio = port
        substitute = float(self.initial_mean)  # failed candidates score as the initial sample mean
        while True:
            if len(port.active) == 1:
                yield from self._single(names[port.active[0]])
                return
            if not self._ensure_pool():
                return
            rows, mean, std, f_best, lam = self._snapshot()
            picks = {f: int(rows[int(np.argmax(self._scores(names[f], rows, mean, std, f_best, lam)))])
                     for f in port.active}
            self.trace.append({"lambda": lam, "functions": tuple(names[f] for f in port.active)})
            scores: dict[int, float] = {}
            for cand, _f in port.plan(picks):
                value = yield cand
                self._observe(cand, value)
                scores[cand] = self._portfolio_score(value, substitute)
            port.record(scores)
            port.update()

    def _advanced_multi(self) -> SearchGenerator:
        names = tuple(self.hp.order)
        port = AdvancedMultiPortfolio(names, self.hp.skip_threshold, self.discount, self.hp.required_improvement)
        self.portfolio = port
        while True:
            if port.single:
                yield from self._single(names[port.active[0]])
                return
            if not self._ensure_pool():
                return
            rows, mean, std, f_best, lam = self._snapshot()
            median = float(np.median(self.valid_values))  # failed candidates score as the median
            self.trace.append({"lambda": lam, "functions": tuple(names[f] for f in port.active)})
            taken = np.zeros(len(rows), dtype=bool)
            for f in list(port.active):
                scores = self._scores(names[f], rows, mean, std, f_best, lam)
                scores[taken] = -np.inf
                j = int(np.argmax(scores))
                if taken[j]:
                    break
                taken[j] = True
                row = int(rows[j])
                value = yield row
                self._observe(row, value)
                port.record(f, self._portfolio_score(value, median))
            port.update()
