"""The ``lfbo`` strategy: the paper's weighting, search quality against random, restrictions, repeats, seeds."""
from __future__ import annotations

import numpy as np
import pytest

from pytest_autotune.engine.evaluator import Evaluator
from pytest_autotune.space import SearchSpace
from pytest_autotune.strategies.base import StrategyError
from pytest_autotune.strategies.lfbo import LFBO, training_set
from pytest_autotune.strategies.registry import make_strategy
from pytest_autotune.strategies.simple import RandomSearch

from strategy_fixtures import TARGET, bowl, sparse_space


@pytest.fixture(scope="module")
def space() -> SearchSpace:
    return sparse_space()


def drive(strategy, space, budget, value_of):
    """Run the generator by hand, asserting every proposal is a new valid row."""
    gen = strategy.run(budget)
    seen: list[int] = []
    try:
        proposal = next(gen)
        while True:
            assert isinstance(proposal, (int, np.integer)), f"proposal {proposal!r} is not a row"
            row = int(proposal)
            assert 0 <= row < len(space), f"row {row} outside the space"
            assert row not in seen, f"row {row} proposed twice (step {len(seen)})"
            seen.append(row)
            if len(seen) >= budget:
                break
            proposal = gen.send(value_of(space.get(row)))
    except StopIteration:
        pass
    finally:
        gen.close()
    return seen


def test_ei_weighting_follows_the_paper():
    x = np.arange(6, dtype=float)[:, None]
    values = np.array([1.0, 2.0, 3.0, 4.0, np.nan, 6.0])  # a failure (NaN) among them
    features, labels, weights = training_set(x, values, gamma=0.5, weighting="ei")
    tau = 3.0  # the lower 0.5 quantile of the five successful times
    good = [0, 1, 2]
    # positives: the good ones, weighted by their improvement over tau scaled to mean 1; then every row as a
    # negative of weight 1, the failure included
    assert labels.tolist() == [1, 1, 1] + [0] * 6
    assert features[:3, 0].tolist() == good and features[3:, 0].tolist() == list(range(6))
    improvement = np.array([tau - 1.0, tau - 2.0, tau - 3.0])
    expected = np.maximum(improvement / improvement.mean(), 1e-3)
    assert np.allclose(weights[:3], expected)
    assert np.allclose(weights[3:], 1.0)
    _, _, pi_weights = training_set(x, values, gamma=0.5, weighting="pi")
    assert np.allclose(pi_weights, 1.0)


def test_no_classifier_without_a_good_and_a_bad_example():
    x = np.zeros((3, 1))
    assert training_set(x, np.array([np.nan, np.nan, np.nan]), 0.33) is None  # all failed
    assert training_set(x, np.array([2.0, 2.0, 2.0]), 0.33) is None  # all equal: all good


def test_respects_restrictions_and_never_repeats_until_exhausted():
    small = SearchSpace({"a": list(range(6)), "b": list(range(6)), "c": [1, 2, 4]}, ["a + b <= 7", "c * a <= 12"])
    rows = drive(LFBO(small, seed=1, candidates=16), small, len(small) + 5,
                 lambda p: None if p["a"] == 0 else 1.0 + (p["a"] - 4) ** 2 + (p["b"] - 1) ** 2 + p["c"])
    assert sorted(rows) == list(range(len(small)))  # every valid row exactly once, then the search ends


def test_a_pooled_space_proposes_only_valid_new_rows(space):
    # more valid rows than candidates: a random pool plus the neighbours of the best
    target = TARGET
    rows = drive(LFBO(space, seed=4, candidates=64, trees=4), space, 200,
                 lambda p: 1.0 + float(np.sum((space.value_indices(p) - target) ** 2)))
    assert len(rows) == 200 and len(set(rows)) == 200


def _evaluations_to_optimum(strategy, space, budget):
    history = Evaluator(space, bowl(space), budget=budget).run(strategy)
    values = [r.value for r in history.records]
    return values.index(1.0) + 1 if 1.0 in values else budget + 1


def test_finds_the_optimum_faster_than_random(space):
    budget = 150
    seeds = range(4)
    lfbo = [_evaluations_to_optimum(LFBO(space, seed=s), space, budget) for s in seeds]
    rand = [_evaluations_to_optimum(RandomSearch(space, seed=s), space, budget) for s in seeds]
    assert sum(e <= budget for e in lfbo) >= 3, lfbo  # random finds the single optimum among ~1,100 rarely
    assert np.median(lfbo) < 0.5 * np.median(rand), (lfbo, rand)


def test_deterministic_for_a_seed(space):
    value = lambda p: 1.0 + float(np.sum((space.value_indices(p) - TARGET) ** 2))  # noqa: E731
    a = drive(LFBO(space, seed=7, trees=4), space, 60, value)
    b = drive(LFBO(space, seed=7, trees=4), space, 60, value)
    c = drive(LFBO(space, seed=8, trees=4), space, 60, value)
    assert a == b
    assert a != c


def test_refit_every_step_differs_from_the_schedule_but_stays_valid(space):
    value = lambda p: 1.0 + float(np.sum((space.value_indices(p) - TARGET) ** 2))  # noqa: E731
    every = drive(LFBO(space, seed=2, refit_growth=0.0, trees=4), space, 40, value)
    assert len(set(every)) == 40


@pytest.mark.parametrize("bad", [{"gamma": 0.0}, {"gamma": 1.0}, {"weighting": "ucb"}, {"trees": 0},
                                 {"candidates": 4}, {"refit_growth": -0.1}, {"initial_samples": 0},
                                 {"local": -1}, {"min_samples_leaf": 0}])
def test_bad_hyperparameters_name_the_field(space, bad):
    field = next(iter(bad))
    with pytest.raises(StrategyError, match=repr(field)):
        make_strategy({"name": "lfbo", **bad}, space)
