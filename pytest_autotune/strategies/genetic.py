"""Constraint-aware genetic algorithm, and the machinery shared by the evolutionary strategies.

The evolutionary strategies (``genetic`` here, ``diff_evo`` in
:mod:`.diff_evo`, ``pso`` and ``firefly`` in :mod:`.swarm`) follow the
constraint-aware evolutionary algorithms for GPU auto-tuning: they only ever
evaluate valid configurations. Crossover and mutation work on value-index
vectors; a child that breaks the restrictions is *repaired* to a random valid
neighbour (strictly-adjacent, then adjacent, then Hamming, see
:meth:`SearchSpace.repair`) instead of being evaluated and penalised.

With ``constraint_aware=False`` each strategy behaves like its classic,
unconstrained counterpart: the initial population is drawn uniformly from the
full Cartesian product (uniform value indices per parameter, valid or not),
operators never repair, and an invalid candidate is proposed as an index
vector. The evaluator records it as an INVALID failure (it costs one
evaluation) and answers ``None``. Inside the strategy every ``None`` (invalid
or a failed valid configuration) counts as a static penalty worse than any
observed value (``+inf``) for selection only; no number is ever invented for
anyone outside the strategy.

Shared rules (all in :class:`EvolutionaryStrategy`):

* an evaluated configuration is never proposed again: its value is looked up
  in :attr:`Strategy.observed` (and, for invalid vectors, in a local set);
* there is no iteration limit: a search runs until the evaluator stops it
  (budget spent or space exhausted); a population that stops producing new
  configurations is re-seeded with unevaluated ones;
* population sizes default to ``None`` = scaled to the evaluation budget
  (see each strategy's docstring for the rule and the evidence behind it).

How the defaults were chosen: one-at-a-time sweeps around a starting point,
scored with :mod:`benchmarks.scoring` on the 13 measured spaces (3 GEMM, 4
pnpoly, 6 T4 convolution; budget B = 12 .. 2148) with 10 seeds on the
largest budgets and up to 100 on the smallest (their scores are the noisiest),
then confirmed with ``benchmarks/bench_strategies.py --runs 10`` (aggregate
over the 13 spaces, mean +/- SE): genetic 0.55 +/- 0.04, diff_evo 0.54 +/-
0.04, pso 0.54 +/- 0.04, firefly 0.27 +/- 0.06 (Kernel Tuner 1.5.0 in the
same run: genetic_algorithm 0.44, diff_evo 0.42, pso 0.45, firefly 0.29;
random -0.03). Constraint-unaware variants of the same strategies: -0.39,
-0.31, -0.29, -0.74: on the sparse spaces (GEMM: 17,956 valid of 82,944;
convolution: 4,362 of 10,240) they spend most of a small budget on invalid
configurations. What mattered most: population sizes of order ``sqrt(B)``
(a few times it) capped at 30-40 (larger populations only delay
exploitation at these budgets; much smaller ones lose to random search on
the T4 spaces, whose best configurations sit among poor neighbours), strong
selection (genetic: Beta(1, 8) rank selection and 5 elites), large steps
(diff_evo F = 1.2; pso with inertia 0.73 and no velocity clamp inside the
box), and a uniform random initial population rather than a snapped Latin
hypercube (see :mod:`.diff_evo`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Generator, Union

import numpy as np

from .base import Batch, SearchGenerator, Strategy, check, check_choice
from .registry import register

PENALTY = math.inf  # selection fitness of a failed or invalid candidate: worse than any observed value

Candidate = Union[int, np.ndarray]  # a valid row, or (unaware only) a value-index vector that may be invalid
EvalGen = Generator[object, Union[float, None], Union[float, None]]


def check_population(value: object, field: str, minimum: int) -> None:
    """``None`` (scale to the budget) or an int >= ``minimum``."""
    check(value is None or (isinstance(value, (int, np.integer)) and not isinstance(value, bool)
                            and value >= minimum), field, f"must be None (scale to the budget) or an integer >= {minimum}")


def check_number(value: object, field: str, lo: float, hi: float, lo_open: bool = False, hi_open: bool = False) -> None:
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        ok = (value > lo if lo_open else value >= lo) and (value < hi if hi_open else value <= hi)
    lb = "(" if lo_open else "["
    rb = ")" if hi_open else "]"
    check(ok, field, f"must be a number in {lb}{lo}, {hi}{rb}, got {value!r}")


def check_int(value: object, field: str, minimum: int) -> None:
    check(isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= minimum, field,
          f"must be an integer >= {minimum}, got {value!r}")


def check_bool(value: object, field: str) -> None:
    check(isinstance(value, (bool, np.bool_)), field, f"must be true or false, got {value!r}")


def scaled_population(budget: int, factor: float, lo: int, hi: int) -> int:
    """Population size ``factor * sqrt(budget)`` clipped to ``[lo, hi]``."""
    return int(min(hi, max(lo, round(factor * math.sqrt(max(budget, 1))))))


class EvolutionaryStrategy(Strategy):
    """Base class: memoised evaluation of rows and (unaware) invalid vectors, fitness, sampling.

    Subclasses use ``value = yield from self.evaluate(candidate)``; it only
    yields when the candidate is new, so nothing evaluated is proposed twice.
    ``self.fresh`` counts new evaluations (for stall detection).
    """

    def _init_state(self) -> None:
        self.fresh = 0
        self._invalid_seen: set[tuple[int, ...]] = set()
        self._sizes = np.asarray(self.space.sizes, dtype=np.int64)

    # -- evaluation ---------------------------------------------------------------------
    def canonical(self, candidate: Candidate) -> Candidate:
        """A valid vector becomes its row; rows and invalid vectors pass through."""
        if isinstance(candidate, (int, np.integer)):
            return int(candidate)
        vec = np.clip(np.asarray(candidate, dtype=np.int64), 0, self._sizes - 1)
        row = self.space.find_indices(vec)
        return row if row >= 0 else vec

    def key(self, candidate: Candidate) -> int | tuple[int, ...]:
        c = self.canonical(candidate)
        return c if isinstance(c, int) else tuple(int(x) for x in c)

    def is_evaluated(self, candidate: Candidate) -> bool:
        c = self.canonical(candidate)
        if isinstance(c, int):
            return c in self.observed
        return tuple(int(x) for x in c) in self._invalid_seen

    def evaluate(self, candidate: Candidate) -> EvalGen:
        """Value of a candidate (``None`` = failed/invalid); proposes it only if never evaluated."""
        c = self.canonical(candidate)
        if isinstance(c, int):
            if c in self.observed:
                return self.observed[c]
            value = yield c
            self.fresh += 1
            return value
        k = tuple(int(x) for x in c)
        if k in self._invalid_seen:
            return None
        self._invalid_seen.add(k)
        yield c
        self.fresh += 1
        return None

    def evaluate_all(self, candidates: list[Candidate]) -> Generator[object, object, list[float | None]]:
        """Values of several candidates, in order; the new ones go out as one :class:`Batch` when batching.

        At batch size 1 this is :meth:`evaluate` one candidate after another,
        exactly; above it a generation is proposed at once."""
        if self.batch_size <= 1:
            values = []
            for c in candidates:
                values.append((yield from self.evaluate(c)))
            return values
        keys = [self.key(c) for c in candidates]
        new: dict = {}  # key -> candidate, each proposed once
        for k, c in zip(keys, candidates):
            if k not in new and not self.is_evaluated(c):
                new[k] = self.canonical(c)
        answers: dict = {}
        if new:
            answers = dict(zip(new, (yield Batch(list(new.values())))))
            self.fresh += len(new)
            self._invalid_seen.update(k for k in new if not isinstance(k, int))
        return [answers[k] if k in answers else self.observed.get(k) if isinstance(k, int) else None for k in keys]

    @staticmethod
    def fitness(value: float | None) -> float:
        return PENALTY if value is None else float(value)

    def exhausted(self) -> bool:
        return len(self.observed) >= len(self.space)

    # -- vectors ----------------------------------------------------------------------------
    def vector(self, candidate: Candidate) -> np.ndarray:
        """Value-index vector (int64) of a row or vector."""
        if isinstance(candidate, (int, np.integer)):
            return self.space.indices[int(candidate)].astype(np.int64)
        return np.asarray(candidate, dtype=np.int64)

    def random_vectors(self, k: int) -> np.ndarray:
        """``k`` uniform value-index vectors of the full Cartesian product (valid or not)."""
        return (self.rng.random((k, len(self._sizes))) * self._sizes).astype(np.int64)

    def fresh_candidates(self, k: int, aware: bool) -> list[Candidate]:
        """Up to ``k`` distinct never-evaluated candidates: valid rows (aware) or Cartesian vectors (unaware)."""
        if aware:
            return list(self.random_unevaluated(k))
        out: list[Candidate] = []
        keys: set = set()
        for _ in range(50):
            for v in self.random_vectors(2 * (k - len(out)) + 4):
                c = self.canonical(v)
                kk = self.key(c)
                if kk in keys or self.is_evaluated(c):
                    continue
                keys.add(kk)
                out.append(c)
                if len(out) == k:
                    return out
        # nearly everything seen: fall back on unevaluated valid rows
        return out + [r for r in self.random_unevaluated(k - len(out)) if r not in keys]

    def hamming_mutation(self, candidate: Candidate, aware: bool, prefer_new: bool = False) -> Candidate | None:
        """A random neighbour differing in one parameter.

        Aware: a random valid Hamming neighbour (``None`` when there is none;
        with ``prefer_new`` only unevaluated ones). Unaware: one random
        parameter (with more than one value) set to another random value.
        """
        if aware:
            rows = self.space.neighbours(int(candidate), "hamming")
            if prefer_new:
                rows = np.array([r for r in rows.tolist() if r not in self.observed], dtype=np.int64)
            if len(rows) == 0:
                return None
            return int(rows[self.rng.integers(len(rows))])
        v = self.vector(candidate).copy()
        free = np.flatnonzero(self._sizes > 1)
        if len(free) == 0:
            return None
        for _ in range(8 if prefer_new else 1):
            w = v.copy()
            p = int(free[self.rng.integers(len(free))])
            new = int(self.rng.integers(self._sizes[p] - 1))
            w[p] = new + (new >= v[p])
            c = self.canonical(w)
            if not prefer_new or not self.is_evaluated(c):
                return c
        return None


# -- crossover operators on index vectors --------------------------------------------------------
def single_point(a: np.ndarray, b: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    pos = int(rng.integers(1, len(a))) if len(a) > 1 else 0
    return np.concatenate([a[:pos], b[pos:]]), np.concatenate([b[:pos], a[pos:]])


def two_point(a: np.ndarray, b: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    if len(a) < 3:
        return single_point(a, b, rng)
    p1, p2 = np.sort(rng.choice(np.arange(1, len(a)), size=2, replace=False))
    c1, c2 = a.copy(), b.copy()
    c1[p1:p2], c2[p1:p2] = b[p1:p2], a[p1:p2]
    return c1, c2


def uniform(a: np.ndarray, b: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    mask = rng.random(len(a)) < 0.5
    return np.where(mask, a, b), np.where(mask, b, a)


CROSSOVERS = {"single_point": single_point, "two_point": two_point, "uniform": uniform}


@register
class GeneticAlgorithm(EvolutionaryStrategy):
    """Constraint-aware genetic algorithm (rank selection, crossover, Hamming mutation, repair).

    Each generation breeds ``population_size`` new children: two distinct
    parents are drawn by rank from the current population (the rank index is
    ``floor(P * Beta(1, selection_pressure))``, so the best individuals are
    drawn most), crossed over (``crossover``), repaired to a valid neighbour
    when aware, and mutated with probability ``mutation_rate`` to a random
    valid Hamming neighbour. A child that was evaluated before (or is already
    in the brood) is mutated again towards an unevaluated Hamming neighbour,
    and as a last resort replaced by a random unevaluated configuration: every
    child costs one new evaluation and nothing is re-proposed. The next
    population keeps the ``elitism`` best of the old one and fills up with the
    best children. There is no generation limit; the search runs until the
    budget is spent.

    ``population_size=None`` scales to the budget B as ``round(pop_factor
    sqrt(B))`` clipped to [6, 40]. Sweeps behind the defaults (aggregate score
    over the 13 spaces, SE about 0.02; see the module docs): selection
    pressure 1.5 / 2.5 / 5 / 8 / 12 -> 0.21 / 0.36 / 0.43 / 0.46 / 0.46;
    elitism 0 / 2 / 5 -> 0.24 / 0.36 / 0.38 (at pressure 2.5); pop_factor
    1 / 2.5 / 3.5 -> 0.33 / 0.48 / 0.49; fixed populations on the large-budget
    spaces 25 / 40 / 60 / 90 -> 0.81 / 0.80 / 0.76 / 0.67 (hence the cap);
    crossover uniform 0.46, single-point 0.44, two-point 0.32 (at pressure
    2.5); mutation_rate 0.15 / 0.3 / 0.6 within noise at 0.3, worse at 0.6.
    """

    name = "genetic"

    @dataclass
    class Hyperparameters:
        population_size: int | None = None  # None: round(pop_factor * sqrt(budget)) clipped to [6, 40]
        pop_factor: float = 3.5  # population = round(pop_factor * sqrt(budget)) when population_size is None
        crossover: str = "uniform"  # single_point, two_point or uniform
        mutation_rate: float = 0.3  # chance that a child gets a Hamming mutation
        selection_pressure: float = 8.0  # beta of the Beta(1, beta) rank distribution (> 1: favour the best)
        elitism: int = 5  # best of the old generation that compete with the children for a place
        constraint_aware: bool = True

        def validate(self) -> None:
            check_population(self.population_size, "population_size", 2)
            check_number(self.pop_factor, "pop_factor", 0.0, 100.0, lo_open=True)
            check_choice(self.crossover, "crossover", tuple(CROSSOVERS))
            check_number(self.mutation_rate, "mutation_rate", 0.0, 1.0)
            check_number(self.selection_pressure, "selection_pressure", 0.0, 100.0, lo_open=True)
            check_int(self.elitism, "elitism", 0)
            check_bool(self.constraint_aware, "constraint_aware")

    def population_size(self) -> int:
        if self.hp.population_size is not None:
            return int(self.hp.population_size)
        return scaled_population(self.budget, self.hp.pop_factor, 6, 40)

    def rank_index(self, n: int) -> int:
        return min(n - 1, int(self.rng.beta(1.0, self.hp.selection_pressure) * n))

    def search(self) -> SearchGenerator:
        self._init_state()
        hp = self.hp
        aware = bool(hp.constraint_aware)
        size = min(self.population_size(), len(self.space))
        cross = CROSSOVERS[hp.crossover]

        # initial population: random valid rows (aware) or uniform Cartesian vectors (unaware)
        population: list[tuple[float, Candidate]] = []
        first = self.fresh_candidates(size, aware)
        for c, value in zip(first, (yield from self.evaluate_all(first))):
            population.append((self.fitness(value), c))

        while not self.exhausted():
            # rank: best first, ties broken at random
            order = sorted(range(len(population)), key=lambda i: (population[i][0], self.rng.random()))
            ranked = [population[i] for i in order]
            children: list[tuple[float, Candidate]] = []
            keys: set = set()
            if self.batch_size > 1:  # a generation is one batch: bred first, then evaluated together
                brood = list(self._breed(ranked, size, keys, aware, cross))
                children = [(self.fitness(v), c) for c, v in zip(brood, (yield from self.evaluate_all(brood)))]
            else:
                # children are bred one at a time and evaluated as soon as they exist (bounded compute per step)
                for c in self._breed(ranked, size, keys, aware, cross):
                    value = yield from self.evaluate(c)
                    children.append((self.fitness(value), c))
            if not children:
                return
            # the elite of the old generation competes with the children for a place
            pool = ranked[: min(hp.elitism, size)] + children
            pool.sort(key=lambda fc: fc[0])
            population = pool[:size]

    def _breed(self, ranked: list[tuple[float, Candidate]], size: int, keys: set, aware: bool,
               cross) -> Generator[Candidate, None, None]:
        """Up to ``size`` distinct, never-evaluated children of ``ranked`` (best first)."""
        hp = self.hp
        made = attempts = 0
        pending: list[Candidate] = []
        while made < size and attempts < 20 * size:
            if not pending:
                attempts += 1
                i = self.rank_index(len(ranked))
                j = self.rank_index(len(ranked))
                if len(ranked) > 1:
                    while j == i:
                        j = self.rank_index(len(ranked))
                pending = list(cross(self.vector(ranked[i][1]), self.vector(ranked[j][1]), self.rng))
            child = pending.pop(0)
            c: Candidate | None = self.space.repair(child, self.rng) if aware else self.canonical(child)
            if self.rng.random() < hp.mutation_rate:
                m = self.hamming_mutation(c, aware)
                c = c if m is None else m
            if self.key(c) in keys or self.is_evaluated(c):
                c = self.hamming_mutation(c, aware, prefer_new=True)
                if c is None or self.key(c) in keys:
                    continue
            keys.add(self.key(c))
            made += 1
            yield c
        if made < size:  # converged: re-seed with unevaluated configurations
            for c in self.fresh_candidates(size - made + 4, aware):
                if self.key(c) not in keys and not self.is_evaluated(c) and made < size:
                    keys.add(self.key(c))
                    made += 1
                    yield c
