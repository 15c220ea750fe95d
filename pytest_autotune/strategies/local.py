"""Local search: simulated annealing, multi-start local search (MLS) and iterated local search (ILS).

All three walk the constrained space through its valid neighbours
(:meth:`~pytest_autotune.space.SearchSpace.neighbours`) and share the same
discipline, which is what separates them from Kernel Tuner's versions of the
same names (metric 0.01 for its simulated_annealing, below zero for mls and
greedy_ils; about 0.5 for these on the same 13 spaces):

* **nothing is evaluated twice**: a neighbour already in :attr:`observed` is
  judged from its recorded value without proposing it again, and a move to an
  already-known better neighbour is free;
* **no stalling**: at a local optimum (every neighbour evaluated, none better)
  the search restarts or perturbs instead of re-proposing known
  configurations, and it ends only when the space is exhausted;
* **failures** (``None``: compile/runtime/wrong output) are never an
  improvement and never accepted as the current point;
* **(re)starts from the best of a small random sample** (``start_samples``,
  default 20): a descent from one random point spends its first evaluations
  next to a typically poor configuration, where a handful of independent
  draws does better; this was the largest single gain on the benchmark;
* **moves need a real gain** (``min_improvement``, default 2%): walking a
  flat parameter by noise-sized steps re-scans a whole neighbourhood per
  step; the evaluations still count for the best found;
* **neighbourhood per space** (``neighbour="auto"``): Hamming (one parameter
  changed to any of its values) unless that neighbourhood is tiny, in which
  case the "adjacent" box neighbourhood is used (see :func:`resolve_neighbour`).
  Hamming beat the adjacent box clearly on every benchmark space (box
  neighbourhoods hold thousands of rows on GEMM and allow only +-1 steps);
* **budget-aware**: simulated annealing cools over the evaluation budget, not
  over a fixed iteration count.

Objective values are compared relatively (``(new - current) / |current|``)
wherever a magnitude matters, so the same hyperparameters work for kernels
running in microseconds or in seconds, and for negative objectives.
"""
from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Generator, Optional, Sequence

import numpy as np

from ..space import SearchSpace
from ..space.searchspace import NEIGHBOUR_METHODS
from .base import Batch, SearchGenerator, Strategy, check, check_choice
from .registry import register
from .tpe import TPE

NEIGHBOUR_CHOICES = ("auto",) + NEIGHBOUR_METHODS
# "auto" switches from Hamming to the adjacent box when a Hamming neighbourhood averages fewer rows than this.
AUTO_MIN_HAMMING = 8
# What a stale annealing walk does: go back to the best point (while it has unevaluated neighbours) or start afresh.
STALE_RESTARTS = ("best", "fresh")
# Cached neighbour lists per search (bounded: adjacent boxes can hold thousands of rows on GEMM-like spaces).
NEIGHBOUR_CACHE = 4096


def resolve_neighbour(space: SearchSpace, method: str, rng: np.random.Generator | None = None) -> str:
    """The concrete neighbour method for ``method`` (``"auto"`` decided from a small sample of the space)."""
    if method != "auto":
        return method
    rng = np.random.default_rng(0) if rng is None else rng
    probe = space.sample(min(16, len(space)), np.random.default_rng(int(rng.integers(2**31))))
    mean_hamming = float(np.mean([len(space.neighbours(int(r), "hamming")) for r in probe])) if len(probe) else 0.0
    return "hamming" if mean_hamming >= AUTO_MIN_HAMMING else "adjacent"


def _check_neighbour(method: str) -> None:
    check(method in NEIGHBOUR_CHOICES, "neighbour", f"must be one of {', '.join(NEIGHBOUR_CHOICES)}, got {method!r}")


def _improves(value: float | None, reference: float, min_improvement: float = 0.0) -> bool:
    """``value`` beats ``reference`` by more than the relative margin (valid for negative objectives too)."""
    return value is not None and value < reference - min_improvement * abs(reference)


def _check_improvement(value: object) -> None:
    check(_is_real(value) and 0 <= value < 1, "min_improvement",  # type: ignore[operator]
          f"must be a relative margin in [0, 1) (0.02 = a move must gain 2%), got {value!r}")


def _check_improvement_rule(value: object) -> None:
    check(value in ("first", "best"), "improvement", f"must be 'first' or 'best', got {value!r}")


def _check_samples(value: object) -> None:
    check(_is_int(value) and 1 <= value <= 1000, "start_samples",  # type: ignore[operator]
          f"must be an integer in 1..1000 (random configurations a (re)start picks its best from), got {value!r}")


def _is_int(x: object) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _is_real(x: object) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_))


class _LocalSearch(Strategy):
    """Shared machinery: cached neighbourhoods, random restarts, greedy descent."""

    def _setup(self, method: str, min_improvement: float = 0.0) -> None:
        self._method = resolve_neighbour(self.space, method, self.rng)
        self._cache: OrderedDict[int, np.ndarray] = OrderedDict()
        self._margin = float(min_improvement)

    def neighbours(self, row: int) -> np.ndarray:
        """Valid neighbour rows of ``row`` (cached)."""
        hit = self._cache.get(row)
        if hit is None:
            hit = self.space.neighbours(int(row), self._method).astype(np.int64)
            self._cache[row] = hit
            if len(self._cache) > NEIGHBOUR_CACHE:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(row)
        return hit

    def _split(self, rows: np.ndarray) -> tuple[list[int], tuple[float, int] | None]:
        """Unevaluated rows, and the best (value, row) among the evaluated valid ones."""
        todo: list[int] = []
        best: tuple[float, int] | None = None
        obs = self.observed
        for r in rows.tolist():
            if r in obs:
                v = obs[r]
                if v is not None and (best is None or v < best[0]):
                    best = (v, r)
            else:
                todo.append(r)
        return todo, best

    def _fresh_start(self, samples: int = 1) -> Generator[int, float | None, tuple[int, float] | None]:
        """Evaluate ``samples`` random unevaluated rows (more while none is valid); the best ``(row, value)``.

        None when the space is exhausted without a valid configuration.
        Batching, the samples go out as one batch (then a batch at a time
        while none is valid).
        """
        best: tuple[int, float] | None = None
        taken = 0
        while self.batch_size > 1 and (taken < samples or best is None):
            picks = self.random_unevaluated(samples - taken if taken < samples else self.batch_size)
            if not picks:
                return best
            taken += len(picks)
            for row, value in zip(picks, (yield Batch(picks))):
                if value is not None and (best is None or value < best[1]):
                    best = (row, value)
        while taken < samples or best is None:
            pick = self.random_unevaluated(1)
            if not pick:
                return best
            value = yield pick[0]
            taken += 1
            if value is not None and (best is None or value < best[1]):
                best = (pick[0], value)
        return best

    def _one(self, row: int) -> Generator[object, object, float | None]:
        """The value of one configuration; batching, it waits for the truth (a batch of one) instead of a lie."""
        if self.batch_size > 1:
            return (yield Batch([row]))[0]
        return (yield row)

    def _descend(self, row: int, value: float, first: bool = True) -> Generator[int, float | None, tuple[int, float]]:
        """Greedy descent from an evaluated valid ``row`` to a local optimum of the neighbourhood.

        First improvement: unevaluated neighbours in random order, move at the
        first better one (the neighbour one more step in the direction of the
        last move, when there is one, is tried first: improvements in tuning
        spaces tend to continue along a parameter). Best improvement: evaluate
        all unevaluated neighbours, move to the best. Known better neighbours
        are moved to for free. "Better" means better by more than
        ``min_improvement`` (relative): chasing measurement-noise-sized gains
        through flat parameters wastes evaluations that a restart or kick
        spends better. Every evaluation still counts for the best found.

        Batching, the neighbours go out ``batch_size`` at a time
        (speculatively: the evaluations after the first improvement are the
        cost of batching) and the walk moves to the best improvement of the batch.
        """
        cur, cur_v = int(row), float(value)
        prev: int | None = None
        while True:
            todo, known = self._split(self.neighbours(cur))
            if known is not None and _improves(known[0], cur_v, self._margin):
                prev, cur, cur_v = cur, known[1], known[0]
                continue
            if not todo:
                return cur, cur_v
            order = [todo[i] for i in self.rng.permutation(len(todo))]
            if prev is not None and first:
                # Momentum: the point one more step in the direction of the last move, when it is a neighbour.
                idx = self.space.indices
                ahead = 2 * idx[cur].astype(np.int64) - idx[prev].astype(np.int64)
                nxt = self.space.find_indices(ahead) if np.all((ahead >= 0) & (ahead < self.space.sizes)) else -1
                if nxt >= 0 and nxt in order:
                    order.remove(nxt)
                    order.insert(0, nxt)
            best_new: tuple[float, int] | None = None
            step = self.batch_size
            for chunk in ([order[i:i + step] for i in range(0, len(order), step)] if step > 1 else ()):
                for n, v in zip(chunk, (yield Batch(chunk))):
                    if _improves(v, cur_v, self._margin) and (best_new is None or v < best_new[0]):
                        best_new = (v, n)
                if first and best_new is not None:
                    break
            for n in order if step <= 1 else ():
                v = yield n
                if _improves(v, cur_v, self._margin) and (best_new is None or v < best_new[0]):
                    best_new = (v, n)
                    if first:
                        break
            if best_new is None:
                return cur, cur_v
            prev, cur, cur_v = cur, best_new[1], best_new[0]


@register
class MultiStartLocalSearch(_LocalSearch):
    """Multi-start local search: greedy descent from random starts, restart at every local optimum.

    Each (re)start evaluates ``start_samples`` random unevaluated
    configurations and descends from the best valid one; at a local optimum
    (no unevaluated neighbour improves) it restarts, so it never stalls and
    ends only when the space is exhausted.

    Hyperparameters:

    * ``neighbour``: ``auto`` (default; Hamming on every benchmark space, see
      :func:`resolve_neighbour`), ``hamming``, ``adjacent``,
      ``strictly-adjacent`` or ``index-distance``;
    * ``improvement``: ``first`` (default: move at the first better
      neighbour, random order) or ``best`` (evaluate the whole neighbourhood,
      move to its best);
    * ``start_samples`` (default 20): random configurations per (re)start;
    * ``min_improvement`` (default 0.02): relative gain a move needs.
    """

    name = "mls"

    @dataclass
    class Hyperparameters:
        neighbour: str = "auto"
        improvement: str = "first"
        start_samples: int = 20
        min_improvement: float = 0.02

        def validate(self) -> None:
            _check_neighbour(self.neighbour)
            _check_improvement_rule(self.improvement)
            _check_samples(self.start_samples)
            _check_improvement(self.min_improvement)

    def search(self) -> SearchGenerator:
        self._setup(self.hp.neighbour, self.hp.min_improvement)
        first = self.hp.improvement == "first"
        while True:
            start = yield from self._fresh_start(self.hp.start_samples)
            if start is None:
                return
            yield from self._descend(*start, first=first)


@register
class IteratedLocalSearch(_LocalSearch):
    """Iterated local search: descend, kick the local optimum by a random walk, descend, accept, repeat.

    Starts like ``mls`` (best of ``start_samples`` random configurations,
    then greedy descent). At a local optimum it takes a random walk of
    ``perturbation`` steps over valid neighbours (never revisiting a point of
    the walk), evaluates the end point and descends from it; the new local
    optimum replaces the current one per ``acceptance``. Kicks that land on
    evaluated configurations are redrawn (free); when 32 in a row do, or after
    ``restart_after`` consecutive kicks without improvement, it restarts from
    fresh random configurations.

    Hyperparameters: ``neighbour``, ``improvement``, ``start_samples`` and
    ``min_improvement`` as for ``mls``; ``perturbation`` (default 4);
    ``acceptance``: ``better`` (default: keep the new local optimum only if it
    improves), ``equal`` (improves or ties) or ``always`` (random-walk ILS);
    ``restart_after`` (default 10; 0 = restart only when kicks find nothing new).
    """

    name = "ils"

    @dataclass
    class Hyperparameters:
        neighbour: str = "auto"
        improvement: str = "first"
        perturbation: int = 4
        acceptance: str = "better"
        restart_after: int = 10
        start_samples: int = 20
        min_improvement: float = 0.02

        def validate(self) -> None:
            _check_neighbour(self.neighbour)
            _check_improvement_rule(self.improvement)
            check(_is_int(self.perturbation) and 1 <= self.perturbation <= 100, "perturbation",
                  f"must be an integer number of random-walk steps in 1..100, got {self.perturbation!r}")
            check(self.acceptance in ("better", "equal", "always"), "acceptance",
                  f"must be 'better', 'equal' or 'always', got {self.acceptance!r}")
            check(_is_int(self.restart_after) and self.restart_after >= 0, "restart_after",
                  f"must be a non-negative integer (0 = restart only when stuck), got {self.restart_after!r}")
            _check_samples(self.start_samples)
            _check_improvement(self.min_improvement)

    def _kick(self, row: int) -> int:
        """End point of a random walk of ``perturbation`` steps that does not return to where it has been."""
        path = {row}
        cur = row
        for _ in range(self.hp.perturbation):
            nbrs = [n for n in self.neighbours(cur).tolist() if n not in path]
            if not nbrs:
                break
            cur = nbrs[int(self.rng.integers(len(nbrs)))]
            path.add(cur)
        return cur

    def _accepts(self, candidate: tuple[int, float], current: tuple[int, float]) -> bool:
        if self.hp.acceptance == "always":
            return True
        if self.hp.acceptance == "equal":
            return candidate[1] <= current[1]
        return candidate[1] < current[1]

    def search(self) -> SearchGenerator:
        self._setup(self.hp.neighbour, self.hp.min_improvement)
        first = self.hp.improvement == "first"
        current: tuple[int, float] | None = None
        stale = 0
        while True:
            if current is None:
                start = yield from self._fresh_start(self.hp.start_samples)
                if start is None:
                    return
                current = yield from self._descend(*start, first=first)
                stale = 0
                continue
            target: int | None = None
            for _ in range(32):
                end = self._kick(current[0])
                if end not in self.observed or _improves(self.observed[end], current[1]):
                    target = end
                    break
            if target is None:  # the surroundings are evaluated: restart instead of stalling
                current = None
                continue
            value = self.observed[target] if target in self.observed else (yield from self._one(target))
            candidate = None if value is None else (yield from self._descend(target, value, first=first))
            improved = candidate is not None and candidate[1] < current[1]
            if candidate is not None and self._accepts(candidate, current):
                current = candidate
            stale = 0 if improved else stale + 1
            if self.hp.restart_after and stale >= self.hp.restart_after:
                current = None


@dataclass
class _Walk:
    """Where an annealing walk is and how its best has progressed (shared with :meth:`SimulatedAnnealing.revise`)."""

    cur: int
    cur_v: float
    best_v: float
    best_at: int  # evaluations when the best last improved by ``gain``
    gain: float

    def note(self, value: float | None, evaluations: int) -> None:
        """A result, for the best's progress (what the stale-walk restarts count from)."""
        if _improves(value, self.best_v, self.gain):
            self.best_v, self.best_at = value, evaluations  # type: ignore[assignment]


@register
class SimulatedAnnealing(_LocalSearch):
    """Simulated annealing over valid neighbours with a temperature schedule tied to the budget.

    Starts from the best of ``start_samples`` random configurations, or, when
    the strategy already holds observations (the first phase of a
    :class:`~.chain.Chain`), from the best of those. Each step proposes a
    random unevaluated neighbour of the current point and moves there when it
    is better, or with probability ``exp(-(new - current) / |current| / T)``
    when worse; a failure is never accepted. ``T`` falls geometrically from
    ``t_start`` to ``t_end`` over the evaluation budget (``T = t_start (t_end
    / t_start) ** (evaluations / budget)``), so the walk explores early and is
    greedy at the end whatever the budget. Evaluated neighbours are never
    proposed again. When the current point has no unevaluated neighbour
    left, or the best has not improved for ``restart_after`` x budget evaluations, the walk restarts:
    from the best point found when that still has unevaluated neighbours,
    else from fresh random configurations.

    A warm start (configurations another device's lock suggested, evaluated
    first: :attr:`~.base.Strategy.transferred`) stays in the observations:
    the walk can start from it and it can win. Two things differ. The guide
    does not learn from it: the seeds are a biased sample (fast elsewhere),
    and a guide that learns from seeds of an unlike GPU keeps steering the
    walk back to their parameter values. And a walk that starts from a seed
    restarts after ``transfer_patience`` (default 0.1) x budget evaluations
    without progress instead of ``restart_after``'s 0.2, until its first
    restart: a seed can be a dead end here (on the A100 convolution the
    seeds' basin tops out at 0.68 of the optimum, and the walk spent a whole
    patience period there before it restarted and found 0.93 and then the
    optimum). Measured (``bench_transfer.py``, leave one GPU out, 5
    runners-up, budget B, 20 seeds), A100 convolution against 0.876 +- 0.023
    cold: seeds in the guide 0.81; not in the guide 0.84; and the shorter
    patience 0.05 / 0.1: 0.857 / 0.869 (0.861 in the final run,
    ``results/transfer_patience.json``), within one standard error of cold.
    Mean over the 15 GPUs: 0.944 / 0.939 / 0.937 / 0.939; the price is on
    spaces whose seeds are already optimal (RTX 2080 Ti pnpoly 0.98 -> 0.91,
    cold 0.59). The shorter patience with the seeds in the guide: A100 0.79.
    Also tried: the walk started from the search's own best instead of a
    seed (0.81), and forgetting the seeds at the first restart (0.80).

    Hyperparameters: ``neighbour`` and ``start_samples`` as for ``mls``;
    ``t_start`` (default 0.1) and ``t_end`` (default 0.01) on the relative
    cost scale (at T = 0.1 a 10% worse neighbour is accepted with probability
    1/e); ``restart_after`` (default 0.2 of the budget; 0 = only when stuck).

    ``guide`` (default off; ``auto`` turns it on) steers the walk with a model of
    every observation: a Tree-structured Parzen Estimator (:class:`~.tpe.TPE`,
    multivariate, categorical kernels: ``bandwidth=0``). With probability
    ``guide_probability`` (default 0.5) a step proposes the unevaluated
    neighbour with the highest ``l(x) / g(x)`` instead of a random one; the
    acceptance rule, the restarts and the cooling stay as they are. The model
    learns which parameter values go with fast configurations across the
    whole walk, which a random neighbour choice ignores; the random steps
    keep the walk from following a misled model. Inside ``auto``, where the
    walk restarts afresh when stale, following the model on 75% of the
    steps scored better (see the ``auto`` module). The model's
    good set is the best ``guide_gamma`` (default 0.2) of the successful
    observations, twice TPE's own default: the walk's observations cluster
    around its path, and a wider good set keeps the model from rating only
    that neighbourhood highly (0.592 vs 0.575 on seeds 0-19, 0.583 vs 0.568
    on seeds 20-39; 0.3: 0.582 on seeds 20-39). Benchmark: see the ``auto``
    module.

    Restarts (defaults keep the behaviour above): ``stale_gain`` (default 0)
    is the relative gain of the best that counts as progress for
    ``restart_after``; with 0 any gain does, so on a flat parameter (pnpoly's
    ``block_size_x``) noise-sized "improvements" keep a trapped walk from ever
    restarting. ``stale_restart``: ``"best"`` (default) sends a stale walk
    back to the best point while that has unevaluated neighbours, which on
    such spaces is the trap itself; ``"fresh"`` starts it from
    ``restart_samples`` (default: ``start_samples``) new random
    configurations. ``auto`` uses 0.02 / ``"fresh"`` / 12.
    ``transfer_patience``: see the warm start above.

    Batching (``batch_size`` above 1, a compile pipeline), the walk is
    ``asynchronous`` (default): each step proposes the next neighbour of the
    current point at once, answered with a stand-in, and the walk moves when
    a neighbour's result arrives (to it when it beats the current point, or
    by the acceptance rule when it was proposed from the current point). So
    the pipeline stays full and no step waits for its slowest compile. With
    ``asynchronous=False`` a step sends ``batch_size`` neighbours out
    together and moves once all are back (to the best improvement). On
    several devices (``devices`` above 1) the starts and restarts are
    asynchronous too (:meth:`_start_async`): their samples go out with
    stand-ins and the walk begins at the first valid result instead of
    waiting for the slowest compile of the batch. Measured
    at 8 compile workers on the simulated clock (``auto``, 20 seeds, the 15
    recorded spaces): see docs/how-to/compile-ahead.md.
    """

    name = "simulated_annealing"
    continues_from_observations = True

    @dataclass
    class Hyperparameters:
        neighbour: str = "auto"
        t_start: float = 0.1
        t_end: float = 0.01
        restart_after: float = 0.2
        start_samples: int = 20
        guide: bool = False
        guide_probability: float = 0.5
        guide_gamma: float = 0.2
        stale_gain: float = 0.0
        stale_restart: str = "best"
        restart_samples: Optional[int] = None
        transfer_patience: float = 0.1
        asynchronous: bool = True

        def validate(self) -> None:
            _check_neighbour(self.neighbour)
            check(_is_real(self.stale_gain) and 0 <= self.stale_gain < 1, "stale_gain",
                  f"must be a relative gain in [0, 1) (0.02 = the best must improve by 2% to count as progress), "
                  f"got {self.stale_gain!r}")
            check_choice(self.stale_restart, "stale_restart", STALE_RESTARTS)
            check(self.restart_samples is None or (_is_int(self.restart_samples) and 1 <= self.restart_samples <= 1000),
                  "restart_samples", f"must be None (= start_samples) or an integer in 1..1000, got {self.restart_samples!r}")
            check(isinstance(self.guide, (bool, np.bool_)), "guide", f"must be true or false, got {self.guide!r}")
            check(_is_real(self.guide_probability) and 0 <= self.guide_probability <= 1, "guide_probability",
                  f"must be a probability in [0, 1], got {self.guide_probability!r}")
            check(_is_real(self.guide_gamma) and 0 < self.guide_gamma <= 1, "guide_gamma",
                  f"must be a fraction in (0, 1], got {self.guide_gamma!r}")
            check(_is_real(self.t_start) and math.isfinite(self.t_start) and self.t_start > 0, "t_start",
                  f"must be a positive number, got {self.t_start!r}")
            check(_is_real(self.t_end) and math.isfinite(self.t_end) and 0 < self.t_end <= self.t_start, "t_end",
                  f"must be a positive number not above t_start ({self.t_start!r}), got {self.t_end!r}")
            check(isinstance(self.asynchronous, (bool, np.bool_)), "asynchronous",
                  f"must be true or false, got {self.asynchronous!r}")
            check(_is_real(self.transfer_patience) and 0 < self.transfer_patience <= 1, "transfer_patience",
                  f"must be a fraction of the budget in (0, 1], got {self.transfer_patience!r}")
            check(_is_real(self.restart_after) and 0 <= self.restart_after <= 1, "restart_after",
                  f"must be a fraction of the budget in [0, 1] (0 = only when stuck), got {self.restart_after!r}")
            _check_samples(self.start_samples)

    def temperature(self, evaluations: int) -> float:
        """The temperature after ``evaluations`` unique evaluations."""
        frac = min(1.0, evaluations / max(1, self.budget))
        return float(self.hp.t_start * (self.hp.t_end / self.hp.t_start) ** frac)

    def _accept(self, new: float | None, cur: float) -> bool:
        if new is None:
            return False
        if new < cur:
            return True
        delta = (new - cur) / max(abs(cur), 1e-300)
        return bool(self.rng.random() < math.exp(-delta / self.temperature(len(self.observed))))

    def search(self) -> SearchGenerator:
        self._setup(self.hp.neighbour)
        self._model = None
        self._walk: _Walk | None = None
        self._out: dict[int, int] = {}  # proposed asynchronously, truth still to come -> the point it left from
        if not self.hp.guide:
            return (yield from self._anneal())
        self._model = TPE(self.space, seed=None if self.seed is None else self.seed + 7919, bandwidth=0.0,
                          gamma=self.hp.guide_gamma)
        self._model.observed = self.observed
        self._model.start_model()
        for row, value in list(self.observed.items()):  # what a chain's earlier phase saw
            if int(row) not in self.transferred:  # a warm start's seeds mislead the guide (see the docstring)
                self._model.observe(int(row), value)
        walk = self._anneal()
        try:
            proposal = next(walk)
            while True:
                value = yield proposal
                if isinstance(proposal, Batch):
                    for row, row_value in zip(proposal, value):
                        self._model.observe(int(row), row_value)
                else:
                    self._model.observe(int(proposal), value)
                proposal = walk.send(value)
        except StopIteration:
            return

    def revise(self, row: int, value: float | None) -> None:
        if getattr(self, "_model", None) is not None:  # the guide learns the truth of a stand-in
            self._model.revise(row, value)
        if row in getattr(self, "_out", ()):
            self._arrived(row, value)


    def _next_neighbour(self, todo: list[int]) -> int:
        """A random unevaluated neighbour, or (guided, with ``guide_probability``) the model's favourite."""
        if self._model is not None and self.rng.random() < self.hp.guide_probability:
            score = self._model.log_ratio(np.asarray(todo, dtype=np.int64))
            if score is not None:
                top = np.flatnonzero(score >= score.max() - 1e-12)
                return todo[int(top[0] if len(top) == 1 else self.rng.choice(top))]
        return todo[int(self.rng.integers(len(todo)))]

    def _anneal(self) -> SearchGenerator:
        patience = int(math.ceil(self.hp.restart_after * self.budget)) if self.hp.restart_after > 0 else 0
        restart_samples = self.hp.start_samples if self.hp.restart_samples is None else self.hp.restart_samples
        # Observations made before this search (a chain's first phase): start from their best.
        wide = self._wide()
        if wide:
            state = self.best or (yield from self._start_async(self.hp.start_samples, self.start_design))
        else:
            state = self.best or (yield from self._fresh_start(self.hp.start_samples))
        if state is None:
            return
        w = self._walk = _Walk(*state, best_v=state[1], best_at=self._told(), gain=self.hp.stale_gain)
        leash = patience  # a walk from a transferred configuration is on a shorter one until it first restarts
        if patience and w.cur in self.transferred:
            leash = max(1, int(math.ceil(self.hp.transfer_patience * self.budget)))
        while True:
            todo, _ = self._split(self.neighbours(w.cur))
            if not todo and self._out:
                waiting = [r for r in self.neighbours(w.cur).tolist() if r in self._out]
                side = self._side_step(w.cur) if waiting and len(self._out) < self.batch_size else None
                if side is not None:  # room for more than this neighbourhood (many devices): step beside it
                    n, origin = side
                    self._out[n] = origin
                    v = yield n
                    if self._truth_came(n, v):
                        self._arrived(n, v)
                    continue
                if waiting:  # every neighbour is out: their results decide where the walk goes next
                    for row, value in zip(waiting, (yield Batch(waiting))):
                        if row in self._out:  # (its truth came before the walk resumed: no revise for it)
                            self._arrived(row, value)
                    continue
            stale = bool(patience) and self._told() - w.best_at >= leash
            if not todo or stale:
                leash = patience  # any restart leaves the transferred start behind
                if stale:
                    w.best_at = self._told()
                best = self.best
                if (not stale or self.hp.stale_restart == "best") and best is not None and best[0] != w.cur \
                        and self._split(self.neighbours(best[0]))[0]:
                    w.cur, w.cur_v = best
                    continue
                state = yield from (self._start_async(restart_samples) if wide else self._fresh_start(restart_samples))
                if state is None:
                    return
                w.cur, w.cur_v = state
                w.note(w.cur_v, self._told())
                continue
            if self.batch_size > 1 and not self.hp.asynchronous:
                yield from self._step_batch(todo)
                continue
            n = self._next_neighbour(todo)
            if self.batch_size > 1:  # asynchronous: a stand-in now, the walk moves when the truth arrives
                self._out[n] = w.cur
                v = yield n
                if self._truth_came(n, v):  # no stand-in: the truth came before the walk resumed
                    self._arrived(n, v)
                continue
            v = yield n
            w.note(v, self._told())
            if self._accept(v, w.cur_v):
                w.cur, w.cur_v = n, float(v)  # type: ignore[arg-type]

    SIDE_POINTS = 8  # the best points a side step may start from

    # Rows a wide walk starts from before random ones (a space-filling design; set by :class:`~.chain.Chain`).
    start_design: Sequence[int] = ()

    def _wide(self) -> bool:
        """Whether starts and restarts go out asynchronously: an asynchronous walk on several devices.

        A synchronous start is a round: ``samples`` configurations go out as one
        batch and the walk waits for the slowest compile among them (on the recorded
        convolutions 1-3.5 s a compile, tails to 14 s) while every device idles.
        On one device the measured composition stays as it is.
        """
        return bool(self.hp.asynchronous) and self.batch_size > 1 and self.devices > 1

    def _start_async(self, samples: int, design: Sequence[int] = ()) -> Generator[object, object,
                                                                                 tuple[int, float] | None]:
        """A start that waits for no round: ``samples`` new configurations (``design`` first, then random ones) go
        out with stand-ins, and the walk starts from the first valid result; results that arrive later move
        it when better (they leave from no point: :meth:`_arrived`). While none is valid, more random ones go
        out as devices free up. The best ``(row, value)`` of this start, or None once the space is exhausted.
        """
        rows = [int(r) for r in dict.fromkeys(design) if int(r) not in self.observed][:samples]
        rows += [r for r in self.random_unevaluated(samples - len(rows)) if r not in rows]
        mine: list[int] = []
        while True:
            known = [(self.observed[r], r) for r in mine if r not in self.stand_ins and self.observed.get(r) is not None]
            if known:
                value, row = min(known)
                return row, float(value)  # type: ignore[arg-type]
            if not rows:
                rows = self.random_unevaluated(1)
            if not rows:  # the space is exhausted: wait for what is still out
                out = [r for r in mine if r in self.stand_ins]
                if not out:
                    return None
                yield Batch(out[:1])
                continue
            n = rows.pop(0)
            mine.append(n)
            self._out[n] = -1  # from no point: it moves the walk only by beating it
            v = yield n
            if n not in self.stand_ins:  # no stand-in: the truth came before the walk resumed
                self._arrived(n, v)

    def _told(self) -> int:
        """Evaluations whose results are known: :attr:`observed` less the stand-ins of proposals still pending.

        The stale walk's patience counts these. Counting stand-ins, a batch of
        ``k`` pending proposals made the walk look ``k`` evaluations staler than
        it was, so on a cluster (tens pending) it restarted after a few real results.
        At batch size 1 there are no stand-ins: ``len(observed)``, as before.
        On one device with a compile pool (batch up to P + 1) it stays
        ``len(observed)`` too, so one device searches exactly as benchmarked:
        counting right there changes its searches (20 of 40 runs on four
        recorded spaces, host time left out), which only a one-device benchmark
        can judge.
        """
        return len(self.observed) - (len(self.stand_ins) if self.devices > 1 else 0)

    def _truth_came(self, row: int, value: float | None) -> bool:
        """Whether ``value``, sent back for an asynchronous proposal, is its truth (not a stand-in): then no
        :meth:`revise` follows, and the walk takes it now. On one device, as benchmarked, a ``None`` is taken
        for a stand-in (a failure told before the walk resumed stays in :attr:`_out`, see :meth:`_told`)."""
        return row not in self.stand_ins if self.devices > 1 else value is not None

    def _side_step(self, current: int) -> tuple[int, int] | None:
        """An unevaluated neighbour of one of the best points but ``current`` (and its origin), for a batch wider
        than the walk's neighbourhood: with many devices, waiting for the neighbourhood's results leaves all but
        a few idle. The walk moves there only if it beats the walk's point (:meth:`_arrived`). None: no such
        neighbour among the :attr:`SIDE_POINTS` best points."""
        ranked = sorted((v, r) for r, v in self.observed.items() if v is not None and r != current)
        for _, origin in ranked[:self.SIDE_POINTS]:
            todo, _ = self._split(self.neighbours(origin))
            todo = [r for r in todo if r not in self._out]
            if todo:
                return self._next_neighbour(todo), origin
        return None

    def _arrived(self, row: int, value: float | None) -> None:
        """The truth about a neighbour proposed asynchronously: the walk moves to it when it is better than
        where the walk is now, or, proposed from where the walk still is, when the acceptance rule says so."""
        origin = self._out.pop(row)
        w = self._walk
        if value is None or w is None:
            return
        w.note(value, self._told())
        if value < w.cur_v or (origin == w.cur and self._accept(value, w.cur_v)):
            w.cur, w.cur_v = row, float(value)

    def _step_batch(self, todo: list[int]):
        """One synchronous batched step: ``batch_size`` neighbours chosen as single steps would choose them,
        evaluated together; the walk moves to the best improvement, else applies the acceptance rule from the
        least worse up (speculative: the other evaluations are the cost of batching; they still count for the
        best)."""
        w = self._walk
        left, picks = list(todo), []
        while left and len(picks) < self.batch_size:
            picks.append(self._next_neighbour(left))
            left.remove(picks[-1])
        values = yield Batch(picks)
        for v in values:
            w.note(v, self._told())
        for v, n in sorted((v, n) for n, v in zip(picks, values) if v is not None):
            if self._accept(v, w.cur_v):
                w.cur, w.cur_v = n, float(v)
                return
