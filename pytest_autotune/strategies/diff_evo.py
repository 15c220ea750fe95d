"""Constraint-aware differential evolution on parameter-value indices."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .base import SearchGenerator, check
from .genetic import (Candidate, EvolutionaryStrategy, check_bool, check_choice, check_number, check_population,
                      scaled_population)
from .registry import register

METHODS = ("best1bin", "rand1bin", "currenttobest1bin", "randtobest1bin")


@register
class DifferentialEvolution(EvolutionaryStrategy):
    """Differential evolution (DE/x/1/bin) over value-index vectors, repairing to valid configurations.

    The population starts as a Latin-hypercube sample of valid configurations
    (:meth:`SearchSpace.lhs_sample`) when aware, or uniform vectors of the
    full Cartesian product when not. For each target ``x_i`` in turn a mutant
    is formed on the index vectors with ``method``:

    * ``best1bin``: ``best + F (x_r1 - x_r2)``
    * ``rand1bin``: ``x_r0 + F (x_r1 - x_r2)``
    * ``currenttobest1bin``: ``x_i + F (best - x_i) + F (x_r1 - x_r2)``
    * ``randtobest1bin``: ``x_r0 + F (best - x_r0) + F (x_r1 - x_r2)``

    rounded and clipped to the index ranges, then binomially crossed with the
    target (each parameter from the mutant with probability ``CR``, at least
    one). A trial that breaks the restrictions is repaired when aware
    (``repair="neighbour"``: random strictly-adjacent/adjacent/Hamming valid
    neighbour; ``"nearest"``: nearest valid by index distance). The trial
    replaces its target when it is at least as good (immediate updating, as in
    SciPy's default). A trial evaluated before costs nothing; when ``2 P``
    trials in a row bring nothing new the population is re-seeded (best kept)
    with unevaluated configurations. No generation limit.

    ``population_size=None`` scales with the budget B: ``round(pop_factor sqrt(B))``
    clipped to [5, 40].
    """

    name = "diff_evo"

    @dataclass
    class Hyperparameters:
        population_size: int | None = None  # None: round(pop_factor * sqrt(budget)) clipped to [5, 40]
        pop_factor: float = 1.0
        method: str = "best1bin"
        F: float = 0.8  # differential weight
        CR: float = 0.9  # binomial crossover rate
        repair: str = "neighbour"  # "neighbour" (strictly-adjacent, adjacent, Hamming) or "nearest" (index distance)
        initial: str = "lhs"  # "lhs": Latin hypercube snapped to valid; "random": uniform over valid configurations
        constraint_aware: bool = True

        def validate(self) -> None:
            check_population(self.population_size, "population_size", 3)
            check_number(self.pop_factor, "pop_factor", 0.0, 100.0, lo_open=True)
            check_choice(self.method, "method", METHODS)
            check_number(self.F, "F", 0.0, 2.0, lo_open=True)
            check_number(self.CR, "CR", 0.0, 1.0)
            check_choice(self.repair, "repair", ("neighbour", "nearest"))
            check_choice(self.initial, "initial", ("lhs", "random"))
            check_bool(self.constraint_aware, "constraint_aware")

    def population_size(self) -> int:
        if self.hp.population_size is not None:
            return int(self.hp.population_size)
        return scaled_population(self.budget, self.hp.pop_factor, 5, 40)

    def _repair(self, vec: np.ndarray) -> Candidate:
        if not self.hp.constraint_aware:
            return self.canonical(vec)
        if self.hp.repair == "nearest":
            return self.space.nearest(vec, self.rng)
        return self.space.repair(vec, self.rng)

    def _initial(self, size: int, aware: bool) -> list[Candidate]:
        if aware and self.hp.initial == "lhs":
            # maximin over a few candidate designs while that stays cheap (each design snaps ``size`` points)
            candidates = max(1, min(10, 60 // max(size, 1)))
            rows = self.space.lhs_sample(size, self.rng, maximin=candidates > 1, candidates=candidates)
            return [int(r) for r in rows]
        return self.fresh_candidates(size, aware)

    def _pick(self, size: int, exclude: int, k: int) -> np.ndarray:
        others = np.array([j for j in range(size) if j != exclude])
        return self.rng.choice(others, size=k, replace=k > len(others))

    def search(self) -> SearchGenerator:
        self._init_state()
        hp = self.hp
        aware = bool(hp.constraint_aware)
        size = min(self.population_size(), len(self.space))
        hi = self._sizes - 1

        members: list[Candidate] = []
        fit = np.empty(size)
        for i, c in enumerate(self._initial(size, aware)):
            value = yield from self.evaluate(c)
            members.append(c)
            fit[i] = self.fitness(value)
        size = len(members)
        pop = np.array([self.vector(c) for c in members], dtype=np.float64)
        keys = [self.key(c) for c in members]
        stale = 0
        while True:
            for i in range(size):
                if self.exhausted():
                    return
                best = pop[int(np.argmin(fit))]
                if hp.method == "best1bin":
                    r1, r2 = self._pick(size, i, 2)
                    mutant = best + hp.F * (pop[r1] - pop[r2])
                elif hp.method == "rand1bin":
                    r0, r1, r2 = self._pick(size, i, 3)
                    mutant = pop[r0] + hp.F * (pop[r1] - pop[r2])
                elif hp.method == "currenttobest1bin":
                    r1, r2 = self._pick(size, i, 2)
                    mutant = pop[i] + hp.F * (best - pop[i]) + hp.F * (pop[r1] - pop[r2])
                else:  # randtobest1bin
                    r0, r1, r2 = self._pick(size, i, 3)
                    mutant = pop[r0] + hp.F * (best - pop[r0]) + hp.F * (pop[r1] - pop[r2])
                cross = self.rng.random(len(hi)) < hp.CR
                cross[self.rng.integers(len(hi))] = True
                trial = np.where(cross, np.clip(np.rint(mutant), 0, hi), pop[i]).astype(np.int64)
                c = self._repair(trial)
                before = self.fresh
                value = yield from self.evaluate(c)
                stale = 0 if self.fresh > before else stale + 1
                f = self.fitness(value)
                k = self.key(c)
                if f <= fit[i] and (k == keys[i] or k not in keys):
                    pop[i], fit[i], keys[i] = self.vector(c), f, k
                if stale >= 2 * size:
                    # converged: keep the best, re-seed the rest with unevaluated configurations
                    stale = 0
                    keep = int(np.argmin(fit))
                    fresh = self.fresh_candidates(size - 1, aware)
                    if not fresh:
                        return
                    slots = [j for j in range(size) if j != keep]
                    for j, c2 in zip(slots, fresh):
                        value = yield from self.evaluate(c2)
                        pop[j], fit[j], keys[j] = self.vector(c2), self.fitness(value), self.key(c2)
