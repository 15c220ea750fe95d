"""Constraint-aware particle swarm optimisation and firefly algorithm in the [0,1]^d encoding.

Particles and fireflies move freely in the continuous encoding of the space
(:meth:`SearchSpace.encode`: value index / (values - 1) per parameter). To be
evaluated a position is rounded to value indices; when aware it snaps to the
nearest valid configuration (:meth:`SearchSpace.decode`) *without moving the
particle*, so the dynamics are those of the continuous algorithm. Unaware, the
rounded vector is proposed as it is and, when invalid, costs an evaluation
and counts as the static penalty.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generator

import numpy as np

from .base import SearchGenerator, check_choice
from .genetic import (Candidate, EvalGen, EvolutionaryStrategy, check_bool, check_int, check_number,
                      check_population, scaled_population)
from .registry import register


class _ContinuousStrategy(EvolutionaryStrategy):
    """Encoding helpers shared by PSO and firefly."""

    def _span(self) -> np.ndarray:
        return np.maximum(self._sizes - 1, 1).astype(np.float64)

    def positions_of(self, candidates: list[Candidate]) -> np.ndarray:
        x = np.array([self.vector(c) for c in candidates], dtype=np.float64) / self._span()
        x[:, self._sizes == 1] = 0.5
        return x

    def initial_positions(self, size: int, aware: bool) -> np.ndarray:
        """Random valid configurations (aware) or uniform Cartesian vectors (unaware), encoded."""
        cands = self.fresh_candidates(size, aware)
        return self.positions_of(cands)

    def candidate_at(self, x: np.ndarray, aware: bool) -> Candidate:
        if aware:
            return int(self.space.decode(x[None, :], self.rng)[0])
        v = np.rint(np.clip(x, 0.0, 1.0) * (self._sizes - 1)).astype(np.int64)
        return self.canonical(v)

    def evaluate_at(self, x: np.ndarray, aware: bool) -> EvalGen:
        value = yield from self.evaluate(self.candidate_at(x, aware))
        return value

    #: bounds of the budget-scaled population (``population_size=None``)
    population_bounds: tuple[int, int] = (5, 30)

    def population_size(self) -> int:
        if self.hp.population_size is not None:
            return int(self.hp.population_size)
        return scaled_population(self.budget, self.hp.pop_factor, *self.population_bounds)

    def initial_swarm(self) -> Generator[Any, Any, tuple[np.ndarray, np.ndarray]]:
        """Evaluate the initial population: its encoded positions and their fitness."""
        aware = bool(self.hp.constraint_aware)
        x = self.initial_positions(min(self.population_size(), len(self.space)), aware)
        fit = np.empty(len(x))
        for i in range(len(x)):
            value = yield from self.evaluate_at(x[i], aware)
            fit[i] = self.fitness(value)
        return x, fit


@register
class ParticleSwarm(_ContinuousStrategy):
    """Particle swarm optimisation with inertia, snapping positions to valid configurations.

    Velocity update ``v = w v + c1 r1 (pbest - x) + c2 r2 (gbest - x)``
    (``r1, r2`` uniform per dimension), clipped to ``[-vmax, vmax]``;
    positions are clipped to [0, 1]. Particles start at random valid
    configurations (aware) or uniform Cartesian vectors (unaware) with random
    velocities in ``[-vmax, vmax]``. A particle whose snapped configuration
    was already evaluated ``stall_moves`` times in a row is re-seeded at an
    unevaluated configuration (its personal best memory reset); there is no
    iteration limit.

    ``population_size=None`` scales with the budget B: ``round(pop_factor sqrt(B))``
    clipped to [5, 30].

    Defaults: the standard PSO constants (inertia 0.73, c1 = c2 = 1.5, as in
    Clerc and Kennedy's constricted swarm) and no velocity clamp inside the
    box. Sweeps (aggregate over the 13 measured spaces, SE about 0.02): vmax
    0.2 / 0.5 / 1.0 -> 0.07 / 0.26 / 0.37; pop_factor 0.7 / 1.5 / 3 -> 0.23 /
    0.26 / 0.33 (vmax 0.5) and 3 / 5 -> 0.39 / 0.38 (vmax 1); then with vmax
    1: w 0.5 / 0.7 / 0.8 -> 0.39 / 0.47 / 0.47, (w, c1, c2) = (0.73, 1.5,
    1.5) 0.46 and 0.48 with stall_moves 10 (3: 0.46). Kernel Tuner's
    constants (0.5, 2, 1) collapse the swarm too early at these budgets.
    """

    name = "pso"

    @dataclass
    class Hyperparameters:
        population_size: int | None = None  # None: round(pop_factor * sqrt(budget)) clipped to [5, 30]
        pop_factor: float = 3.0
        w: float = 0.73  # inertia
        c1: float = 1.5  # cognitive (personal best) weight
        c2: float = 1.5  # social (global best) weight
        vmax: float = 1.0  # velocity clamp per dimension in the [0,1] encoding (1: only the box bounds it)
        stall_moves: int = 10  # moves without a new configuration before a particle is re-seeded
        constraint_aware: bool = True

        def validate(self) -> None:
            check_population(self.population_size, "population_size", 2)
            check_number(self.pop_factor, "pop_factor", 0.0, 100.0, lo_open=True)
            check_number(self.w, "w", 0.0, 2.0)
            check_number(self.c1, "c1", 0.0, 10.0)
            check_number(self.c2, "c2", 0.0, 10.0)
            check_number(self.vmax, "vmax", 0.0, 1.0, lo_open=True)
            check_int(self.stall_moves, "stall_moves", 1)
            check_bool(self.constraint_aware, "constraint_aware")

    def search(self) -> SearchGenerator:
        self._init_state()
        hp = self.hp
        aware = bool(hp.constraint_aware)
        d = len(self._sizes)
        x, pfit = yield from self.initial_swarm()
        size = len(x)
        v = self.rng.uniform(-hp.vmax, hp.vmax, (size, d))
        pbest = x.copy()
        g = int(np.argmin(pfit))
        gbest, gfit = pbest[g].copy(), pfit[g]
        stuck = np.zeros(size, dtype=np.int64)
        step = max(1, self.batch_size)  # particles that move together (1: each sees the last one's result)
        while True:
            for start in range(0, size, step):
                if self.exhausted():
                    return
                movers = range(start, min(size, start + step))
                candidates = []
                for i in movers:
                    r1, r2 = self.rng.random(d), self.rng.random(d)
                    v[i] = np.clip(hp.w * v[i] + hp.c1 * r1 * (pbest[i] - x[i]) + hp.c2 * r2 * (gbest - x[i]),
                                   -hp.vmax, hp.vmax)
                    x[i] = np.clip(x[i] + v[i], 0.0, 1.0)
                    candidates.append(self.candidate_at(x[i], aware))
                new = [not self.is_evaluated(c) for c in candidates]
                values = yield from self.evaluate_all(candidates)
                restarts: dict[int, Candidate] = {}  # particles stuck in evaluated places start afresh
                for i, is_new in zip(movers, new):
                    stuck[i] = 0 if is_new else stuck[i] + 1
                    if stuck[i] >= hp.stall_moves:
                        fresh = self.fresh_candidates(1, aware)
                        if not fresh:
                            return
                        if self.key(fresh[0]) in map(self.key, restarts.values()):
                            continue  # drawn for another particle of this step: this one tries next time
                        stuck[i] = 0
                        x[i] = self.positions_of(fresh)[0]
                        v[i] = self.rng.uniform(-hp.vmax, hp.vmax, d)
                        restarts[i] = fresh[0]
                restarted = dict(zip(restarts, (yield from self.evaluate_all(list(restarts.values())))))
                for i, value in zip(movers, values):
                    f = self.fitness(restarted[i] if i in restarted else value)
                    if i in restarted:
                        pbest[i], pfit[i] = x[i].copy(), f
                    elif f < pfit[i]:
                        pbest[i], pfit[i] = x[i].copy(), f
                    if f < gfit:
                        gbest, gfit = x[i].copy(), f


@register
class Firefly(_ContinuousStrategy):
    """Firefly algorithm: fireflies move towards brighter ones, snapping to valid configurations.

    A firefly ``i`` is attracted by every brighter ``j``: ``x_i += B0
    exp(-gamma r^2) (x_j - x_i) + alpha (u - 1/2)`` with ``u`` uniform per
    dimension and ``r`` the Euclidean distance in the [0,1]^d encoding divided
    by ``sqrt(d)`` (``d`` = parameters with more than one value), so that
    ``gamma`` means the same whatever the number of parameters (Yang's
    ``gamma ~ 1/L^2`` with ``L`` the diagonal). ``update`` chooses when
    positions are evaluated:

    * ``"generation"`` (Yang's original algorithm): every firefly makes all
      its moves towards the fireflies that were brighter at the start of the
      generation (their positions then; from the dimmest of them to the
      brightest, so the strongest pull comes last), and is evaluated once;
    * ``"move"`` (as Kernel Tuner does): a firefly is evaluated after every
      single move and its brightness updated at once (``P^2/2`` evaluations a
      generation).

    The brightest firefly, which no one attracts, makes a random step of size
    ``alpha`` and keeps it only if it is not worse (the best is never lost).
    A firefly whose configuration was already evaluated ``stall_moves`` times
    in a row, and every firefly but the best after a generation without any
    new configuration, is re-seeded at an unevaluated configuration. No
    iteration limit.

    ``population_size=None`` scales with the budget B: ``round(pop_factor sqrt(B))``
    clipped to [4, 30].

    The firefly algorithm is the weakest of the family here, as in the
    literature (Kernel Tuner 1.5.0's firefly scores 0.29 against 0.42-0.45
    for its GA, DE and PSO). Its dim fireflies spend most evaluations moving
    through poor regions, and once they gather around the brightest their
    snapped positions are mostly configurations already evaluated, so many
    evaluations go to re-seeding. Sweeps (aggregate over the 13 measured
    spaces, SE about 0.03): pop_factor 1 / 2 / 3 -> 0.08 / 0.15 / 0.20;
    gamma 0.3 / 1 / 3 -> 0.14 / 0.15 / -0.12 (Kernel Tuner's raw-distance
    gamma 1 is about 5 here); alpha 0.1 / 0.2 -> 0.08 / 0.15; update "move"
    0.14 vs "generation" 0.15; stall_moves 10 0.17. With
    ``benchmarks/bench_strategies.py --runs 10``: 0.27 +/- 0.06.
    """

    name = "firefly"

    @dataclass
    class Hyperparameters:
        population_size: int | None = None  # None: round(pop_factor * sqrt(budget)) clipped to [4, 30]
        pop_factor: float = 3.0
        B0: float = 1.0  # maximum attractiveness
        gamma: float = 1.0  # light absorption (distances in units of the hypercube diagonal)
        alpha: float = 0.2  # random step size in the [0,1] encoding
        update: str = "generation"  # "generation" (Yang) or "move" (Kernel Tuner)
        stall_moves: int = 3
        constraint_aware: bool = True

        def validate(self) -> None:
            check_population(self.population_size, "population_size", 2)
            check_number(self.pop_factor, "pop_factor", 0.0, 100.0, lo_open=True)
            check_number(self.B0, "B0", 0.0, 1.0)
            check_number(self.gamma, "gamma", 0.0, 1000.0)
            check_number(self.alpha, "alpha", 0.0, 2.0)
            check_choice(self.update, "update", ("generation", "move"))
            check_int(self.stall_moves, "stall_moves", 1)
            check_bool(self.constraint_aware, "constraint_aware")

    population_bounds = (4, 30)

    def _attract(self, xi: np.ndarray, xj: np.ndarray, n_free: int) -> np.ndarray:
        r2 = float(np.sum((xj - xi) ** 2)) / n_free
        beta = self.hp.B0 * np.exp(-self.hp.gamma * r2)
        return np.clip(xi + beta * (xj - xi) + self.hp.alpha * (self.rng.random(len(xi)) - 0.5), 0.0, 1.0)

    def search(self) -> SearchGenerator:
        self._init_state()
        hp = self.hp
        aware = bool(hp.constraint_aware)
        d = len(self._sizes)
        x, fit = yield from self.initial_swarm()
        size = len(x)
        stuck = np.zeros(size, dtype=np.int64)
        n_free = max(int(np.sum(self._sizes > 1)), 1)
        per_move = hp.update == "move"

        while True:
            sweep_start = self.fresh
            brightest = int(np.argmin(fit))
            x0, f0 = x.copy(), fit.copy()  # the generation's start (Yang's update moves towards these)
            for i in range(size):
                if i == brightest:
                    moves = [-1]  # nobody attracts the brightest: a random step, kept only if not worse
                else:
                    # brighter ones from the dimmest to the brightest: the last (strongest) pull is the best's
                    moves = sorted((j for j in range(size) if f0[j] < f0[i]), key=lambda j: (-f0[j], j))
                    if not per_move:
                        new = x0[i]
                        for j in moves:
                            new = self._attract(new, x0[j], n_free)
                        moves = [-2] if moves else []
                for j in moves:
                    if self.exhausted():
                        return
                    if j == -1:
                        new = np.clip(x[i] + hp.alpha * (self.rng.random(d) - 0.5), 0.0, 1.0)
                    elif j >= 0:  # per move: towards j if j is still brighter than i
                        if not fit[j] < fit[i]:
                            continue
                        new = self._attract(x[i], x[j], n_free)
                    before = self.fresh
                    value = yield from self.evaluate_at(new, aware)
                    f = self.fitness(value)
                    if j != -1 or f <= fit[i]:
                        x[i], fit[i] = new, f
                    stuck[i] = 0 if self.fresh > before else stuck[i] + 1
                    if stuck[i] >= hp.stall_moves and j != -1:
                        fresh = self.fresh_candidates(1, aware)
                        if not fresh:
                            return
                        stuck[i] = 0
                        x[i] = self.positions_of(fresh)[0]
                        value = yield from self.evaluate(fresh[0])
                        fit[i] = self.fitness(value)
            if self.fresh == sweep_start:
                # a whole generation brought nothing new (e.g. all collapsed on the best): re-seed all but the best
                brightest = int(np.argmin(fit))
                fresh = self.fresh_candidates(size - 1, aware)
                if not fresh:
                    return
                for i, c in zip([k for k in range(size) if k != brightest], fresh):
                    x[i] = self.positions_of([c])[0]
                    value = yield from self.evaluate(c)
                    fit[i] = self.fitness(value)
                    stuck[i] = 0
