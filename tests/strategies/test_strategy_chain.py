"""``chain`` (one strategy, then another on the same observations), annealing restarts, and ``auto``."""
from __future__ import annotations

import numpy as np
import pytest

from pytest_autotune.engine.evaluator import Evaluator
from pytest_autotune.space import SearchSpace
from pytest_autotune.strategies.auto import DEFAULT_CHOICE
from pytest_autotune.strategies.base import StrategyError
from pytest_autotune.strategies.registry import make_strategy, validate_strategy_spec

from strategy_fixtures import bowl, sparse_space

@pytest.fixture(scope="module")
def space() -> SearchSpace:
    return sparse_space()


def rows_of(space, spec, budget, seed=0):
    strategy = make_strategy(spec, space, seed=seed)
    history = Evaluator(space, bowl(space), budget=budget).run(strategy)
    return strategy, [r.row for r in history.records]


CHAIN = {"name": "chain", "first": {"name": "tpe"}, "evaluations": 25,
         "then": {"name": "simulated_annealing", "guide": True}}


def test_first_phase_is_exactly_the_first_strategy_at_that_budget(space):
    _, chained = rows_of(space, CHAIN, budget=120, seed=4)
    _, alone = rows_of(space, {"name": "tpe"}, budget=25, seed=4)  # seed + 0 for the first phase
    assert chained[:25] == alone
    assert len(chained) == 120 and len(set(chained)) == 120  # nothing evaluated twice across the phases


def test_second_phase_starts_from_the_best_and_learns_every_observation(space):
    strategy, rows = rows_of(space, CHAIN, budget=60, seed=1)
    objective = bowl(space)
    first = [objective(space.get(r)).value for r in rows[:25]]
    best_row = rows[int(np.argmin(first))]
    # annealing's first proposal is an unevaluated neighbour of the best configuration of the first phase
    assert rows[25] in set(space.neighbours(best_row, "hamming").tolist())
    walk = strategy.phases[1]
    assert walk.observed is strategy.observed
    assert walk._model._n_obs == 59  # the 25 earlier observations too, not only the walk's own (the 60th ends it)


def test_chain_is_reproducible_and_reaches_the_optimum(space):
    s1, r1 = rows_of(space, CHAIN, budget=200, seed=2)
    _, r2 = rows_of(space, CHAIN, budget=200, seed=2)
    assert r1 == r2
    assert s1.best[1] == 1.0


def test_budget_below_the_first_phase_is_all_first_phase(space):
    _, chained = rows_of(space, CHAIN, budget=10, seed=3)
    _, alone = rows_of(space, {"name": "tpe"}, budget=10, seed=3)
    assert chained == alone


@pytest.mark.parametrize("hyper, field", [
    ({"then": {"name": "genetic"}}, "then"),  # cannot continue from earlier observations
    ({"then": "simulated_annealing"}, "then"),
    ({"first": {"name": "no_such"}}, "first"),
    ({"first": {"name": "tpe", "gamma": 2}}, "first"),
    ({"evaluations": -1}, "evaluations"),
    ({"evaluations": 2.5}, "evaluations"),
])
def test_bad_chains_name_the_hyperparameter(space, hyper, field):
    with pytest.raises(StrategyError, match=repr(field)):
        validate_strategy_spec({"name": "chain", **hyper})
    with pytest.raises(StrategyError, match=repr(field)):
        make_strategy({"name": "chain", **hyper}, space)


def test_then_error_lists_the_strategies_that_can_continue():
    with pytest.raises(StrategyError, match="simulated_annealing"):
        validate_strategy_spec({"name": "chain", "then": {"name": "pso"}})


def _count_fresh_starts(strategy):
    calls = []
    walk = strategy.phases[1] if hasattr(strategy, "phases") else strategy
    original = walk._fresh_start

    def counting(samples=1):
        calls.append(samples)
        return (yield from original(samples))

    walk._fresh_start = counting
    return calls


def test_stale_walk_restarts_fresh_with_restart_samples(space):
    spec = {"name": "simulated_annealing", "restart_after": 0.05, "stale_gain": 0.5, "stale_restart": "fresh",
            "restart_samples": 3, "start_samples": 7}
    strategy = make_strategy(spec, space, seed=0)
    calls = _count_fresh_starts(strategy)
    Evaluator(space, bowl(space), budget=300).run(strategy)
    assert calls[0] == 7 and len(calls) > 3 and set(calls[1:]) == {3}


def test_default_stale_walk_goes_back_to_its_best(space):
    """``stale_restart="best"`` (default): a stale walk returns to its best point instead of starting afresh."""
    counts = {}
    for mode in ("best", "fresh"):
        strategy = make_strategy({"name": "simulated_annealing", "restart_after": 0.05, "stale_gain": 0.5,
                                  "stale_restart": mode}, space, seed=0)
        calls = _count_fresh_starts(strategy)
        Evaluator(space, bowl(space), budget=150).run(strategy)
        counts[mode] = len(calls)
    assert counts["best"] < counts["fresh"]


@pytest.mark.parametrize("field, value", [("stale_gain", -0.1), ("stale_gain", 1.0), ("stale_restart", "never"),
                                          ("restart_samples", 0), ("restart_samples", 2.0)])
def test_restart_hyperparameters_are_validated(space, field, value):
    with pytest.raises(StrategyError, match=repr(field)):
        make_strategy({"name": "simulated_annealing", field: value}, space)


def test_auto_is_the_documented_chain_and_shares_one_record(space):
    strategy = make_strategy("auto", space, seed=5)
    assert strategy.hp.choice == DEFAULT_CHOICE and DEFAULT_CHOICE["name"] == "chain"
    history = Evaluator(space, bowl(space), budget=80).run(strategy)
    assert len({r.row for r in history.records}) == 80
    chain = strategy.delegate
    assert chain.observed is strategy.observed
    assert all(phase.observed is strategy.observed for phase in chain.phases)
    assert len(strategy.observed) == 80  # every told result is in the record, the last one too


@pytest.fixture
def test_strategy():
    """Register a throwaway strategy class for one test."""
    from pytest_autotune.strategies import registry

    added = []

    def add(cls):
        added.append(registry.register(cls).name)
        return cls

    yield add
    for name in added:
        registry._REGISTRY.pop(name, None)


def test_chain_and_auto_hand_the_profiler_to_a_phase_that_needs_it(space, test_strategy):
    """A counter-steered first phase gets the tuner's profiler through ``auto`` and the chain."""
    from pytest_autotune.strategies.base import Strategy

    @test_strategy
    class Profiled(Strategy):
        name = "test_profiled"
        requires_profiling = True

        def search(self):
            for row in range(0, len(self.space), 11):
                self.profiler(self.space.get(row))
                yield row

    spec = {"name": "chain", "first": {"name": "test_profiled"}, "evaluations": 5}
    assert make_strategy(spec, space, seed=0).requires_profiling
    assert not make_strategy("chain", space).requires_profiling
    auto = make_strategy({"name": "auto", "choice": spec}, space, seed=0)
    assert auto.requires_profiling
    seen = []
    auto.profiler = seen.append
    Evaluator(space, bowl(space), budget=12).run(auto)
    assert len(seen) == 5 and auto.delegate.phases[0].profiler == seen.append


def test_first_phase_counts_new_configurations_not_repeats(space, test_strategy):
    """A first phase that re-proposes an evaluated row (free) still gets its full share of new evaluations."""
    from pytest_autotune.strategies.base import Strategy

    @test_strategy
    class Repeater(Strategy):
        name = "test_repeater"

        def search(self):
            for row in range(0, len(self.space), 7):
                yield row
                yield row  # asking again is free

    chain = make_strategy({"name": "chain", "first": {"name": "test_repeater"}, "evaluations": 6}, space, seed=0)
    rows = [r.row for r in Evaluator(space, bowl(space), budget=20).run(chain).records]
    assert rows[:6] == list(range(0, 42, 7))  # six new configurations, then the walk
    assert len(rows) == 20 and len(set(rows)) == 20
