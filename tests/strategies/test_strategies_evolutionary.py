"""The constraint-aware evolutionary strategies: genetic, diff_evo, pso, firefly."""
from __future__ import annotations

import numpy as np
import pytest

from pytest_autotune.engine.evaluator import Evaluator
from pytest_autotune.results import FailureKind, Measurement
from pytest_autotune.space import SearchSpace
from pytest_autotune.strategies.base import StrategyError
from pytest_autotune.strategies.diff_evo import DifferentialEvolution
from pytest_autotune.strategies.genetic import GeneticAlgorithm
from pytest_autotune.strategies.registry import make_strategy, validate_strategy_spec
from pytest_autotune.strategies.swarm import Firefly, ParticleSwarm

NAMES = ["genetic", "diff_evo", "pso", "firefly"]
CLASSES = {"genetic": GeneticAlgorithm, "diff_evo": DifferentialEvolution, "pso": ParticleSwarm, "firefly": Firefly}


@pytest.fixture(scope="module")
def sparse_space() -> SearchSpace:
    """~30% of a 4,096-point Cartesian product is valid (restrictions across parameters)."""
    params = {"a": list(range(8)), "b": list(range(8)), "c": [1, 2, 4, 8, 16, 32, 64, 128], "d": list(range(8))}
    return SearchSpace(params, ["a + b <= 9", "c * (d + 1) <= 256", "(a + d) % 3 != 1"])


@pytest.fixture(scope="module")
def tiny_space() -> SearchSpace:
    return SearchSpace({"x": [1, 2, 3, 4], "y": [1, 2, 3]}, ["x * y <= 8"])


def bowl(space: SearchSpace):
    """Separable bowl over value indices; the optimum (a=6, b=2, c=8, d=3) is valid and unique."""
    target = np.array([6, 2, 3, 3])

    def objective(params):
        v = space.value_indices(params)
        return Measurement(params, value=1.0 + float(np.sum((v - target) ** 2)))

    return objective


def run(space, name, budget, seed=0, objective=None, **hp):
    strategy = make_strategy({"name": name, **hp}, space, seed=seed)
    history = Evaluator(space, objective or bowl(space), budget=budget).run(strategy)
    return strategy, history


def test_space_is_sparse(sparse_space):
    assert 0.15 < len(sparse_space) / sparse_space.cartesian_size < 0.5


@pytest.mark.parametrize("name", NAMES)
def test_aware_proposes_only_valid_rows_and_spends_the_whole_budget(sparse_space, name):
    _, history = run(sparse_space, name, budget=300)
    assert len(history.records) == 300
    assert history.stop_reason == "budget of evaluations spent"
    assert all(r.row >= 0 for r in history.records)
    assert history.failures() == {}
    # nothing evaluated is ever proposed again: every proposal was a new evaluation
    assert len(history.strategy_seconds) == len(history.records)


@pytest.mark.parametrize("name", NAMES)
def test_unaware_proposes_invalid_vectors_recorded_as_invalid(sparse_space, name):
    _, history = run(sparse_space, name, budget=200, constraint_aware=False)
    assert len(history.records) == 200
    invalid = [r for r in history.records if r.row < 0]
    assert invalid, "an unaware strategy on a sparse space must propose invalid configurations"
    assert all(r.measurement.failure is FailureKind.INVALID for r in invalid)
    assert history.failures().get("invalid") == len(invalid)
    assert len(history.strategy_seconds) == len(history.records)
    # the aware variant wastes nothing on invalid configurations and so finds better ones
    _, aware = run(sparse_space, name, budget=200)
    assert not any(r.row < 0 for r in aware.records)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("aware", [True, False])
def test_reproducible_with_a_seed(sparse_space, name, aware):
    def sequence(seed):
        _, h = run(sparse_space, name, budget=80, seed=seed, constraint_aware=aware)
        return [tuple(r.params.values()) for r in h.records]

    first = sequence(7)
    assert first == sequence(7)
    assert first != sequence(8)


@pytest.mark.parametrize("name", NAMES)
def test_exhausts_a_small_space_without_stalling(tiny_space, name):
    _, history = run(tiny_space, name, budget=100, objective=lambda p: Measurement(p, value=float(p["x"] + p["y"])))
    assert history.stop_reason == "search space exhausted"
    assert sorted(r.row for r in history.records) == list(range(len(tiny_space)))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("aware", [True, False])
def test_flat_objective_does_not_stall(sparse_space, name, aware):
    """Nothing better to move towards anywhere: the search must still spend its budget on new configurations."""
    _, history = run(sparse_space, name, budget=400, objective=lambda p: Measurement(p, value=1.0),
                     constraint_aware=aware)
    assert len(history.records) == 400
    assert history.stop_reason == "budget of evaluations spent"


@pytest.mark.parametrize("name", NAMES)
def test_converged_population_keeps_exploring(sparse_space, name):
    """A tiny population collapses onto the bowl's optimum; the search must re-seed, never spin or stop."""
    for seed in range(3):
        _, history = run(sparse_space, name, budget=700, seed=seed, population_size=3 + (name == "diff_evo"))
        assert len(history.records) == 700
        assert len(history.strategy_seconds) == 700


class _Found(Exception):
    pass


@pytest.mark.parametrize("name", NAMES)
def test_finds_the_optimum_much_faster_than_random(sparse_space, name):
    optimum = sparse_space.get(sparse_space.find({"a": 6, "b": 2, "c": 8, "d": 3}))
    n = len(sparse_space)
    budget = n // 2
    hits = []
    for seed in range(8):
        calls = []

        def objective(params):
            calls.append(1)
            if params == optimum:
                raise _Found  # stop the search at the hit
            return bowl(sparse_space)(params)

        try:
            run(sparse_space, name, budget=budget, seed=seed, objective=objective)
        except _Found:
            pass
        hits.append(len(calls) if calls and len(calls) <= budget else budget + 1)
    # uniform sampling without replacement finds the unique optimum within the budget with chance 1/2 per run
    # (all 8 runs: 0.4%), and E[min(hit, budget + 1)] is about budget (1 - budget / 2n) = 0.75 budget here
    random_expected = sum(1 - k / n for k in range(budget + 1))
    assert max(hits) <= budget, (name, hits)
    # measured with the defaults: genetic 0.16, diff_evo 0.40, pso 0.26, firefly 0.11 of random's mean
    assert np.mean(hits) < 0.55 * random_expected, (name, hits, random_expected)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("aware", [True, False])
def test_failures_are_handled(sparse_space, name, aware):
    def flaky(params):
        if (params["a"] + params["d"]) % 2:
            return Measurement.failed(params, FailureKind.RUNTIME, "illegal address")
        return bowl(sparse_space)(params)

    strategy, history = run(sparse_space, name, budget=150, objective=flaky, constraint_aware=aware)
    assert len(history.records) == 150
    assert history.failures().get("runtime", 0) > 0
    assert history.best is not None and history.best.value is not None
    # failed configurations reach the strategy as None, never as a number (the last one is never sent back)
    failed = [r.row for r in history.records[:-1] if r.row >= 0 and r.value is None]
    assert failed and all(strategy.observed[row] is None for row in failed)


def test_all_failing_objective_does_not_crash(sparse_space):
    for name in NAMES:
        _, history = run(sparse_space, name, budget=60,
                         objective=lambda p: Measurement.failed(p, FailureKind.COMPILE, "nope"))
        assert len(history.records) == 60
        assert history.best is None


@pytest.mark.parametrize("name, field, value", [
    ("genetic", "population_size", 1),
    ("genetic", "mutation_rate", 1.5),
    ("genetic", "crossover", "three_point"),
    ("genetic", "selection_pressure", 0),
    ("genetic", "elitism", -1),
    ("genetic", "constraint_aware", "yes"),
    ("diff_evo", "method", "best2exp"),
    ("diff_evo", "F", 0.0),
    ("diff_evo", "CR", 1.2),
    ("diff_evo", "population_size", 2),
    ("diff_evo", "repair", "closest"),
    ("diff_evo", "constraint_aware", 1),
    ("pso", "w", -0.1),
    ("pso", "vmax", 0.0),
    ("pso", "c1", float("nan")),
    ("pso", "population_size", 1.5),
    ("firefly", "gamma", -1.0),
    ("firefly", "alpha", 3.0),
    ("firefly", "B0", 2.0),
    ("firefly", "stall_moves", 0),
])
def test_hyperparameter_validation_names_the_field(name, field, value):
    with pytest.raises(StrategyError, match=repr(field)):
        validate_strategy_spec({"name": name, field: value})


@pytest.mark.parametrize("name", NAMES)
def test_defaults_validate_and_unknown_hyperparameters_are_rejected(name, sparse_space):
    validate_strategy_spec(name)
    with pytest.raises(StrategyError, match="no hyperparameter"):
        make_strategy({"name": name, "popsize": 10}, sparse_space)
    assert CLASSES[name].name == name


@pytest.mark.parametrize("name", NAMES)
def test_population_scales_with_the_budget(name, sparse_space):
    small, large = CLASSES[name](sparse_space, seed=0), CLASSES[name](sparse_space, seed=0)
    small.budget, large.budget = 20, 1000
    assert small.population_size() < large.population_size()
    fixed = CLASSES[name](sparse_space, seed=0, population_size=9)
    fixed.budget = 20
    assert fixed.population_size() == 9
