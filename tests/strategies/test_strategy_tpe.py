"""The ``tpe`` strategy: proposals, reproducibility, budget, model, failures, hyperparameters."""
from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_autotune.engine.evaluator import Evaluator
from pytest_autotune.results import Measurement
from pytest_autotune.space import SearchSpace
from pytest_autotune.strategies.base import StrategyError
from pytest_autotune.strategies.registry import make_strategy
from pytest_autotune.strategies.simple import RandomSearch
from pytest_autotune.strategies.tpe import TPE, kernel_tables

from strategy_fixtures import measured


@pytest.fixture(scope="module")
def space() -> SearchSpace:
    # constrained 4-D space: 12 x 10 x 5 x 3 values, x + y < 18 and z != 3 when w == 0
    return SearchSpace({"x": list(range(12)), "y": list(range(10)), "z": list(range(5)), "w": [0, 1, 2]},
                       ["x + y < 18", "z != 3 or w != 0"])


def bowl(p) -> float:
    """Smooth objective with its optimum (1.0) at x=9, y=2, z=1, w=2."""
    return 1.0 + 0.05 * (p["x"] - 9) ** 2 + 0.08 * (p["y"] - 2) ** 2 + 0.2 * (p["z"] - 1) ** 2 + 0.3 * (p["w"] - 2) ** 2


def objective(fail=lambda p: False):
    return measured(bowl, fail)


def drive(strategy, space, budget, fail=lambda p: False):
    """Run the generator by hand (no evaluator), asserting every proposal is a new valid row."""
    gen = strategy.run(budget)
    seen: list[int] = []
    value = None
    try:
        proposal = next(gen)
        while True:
            assert isinstance(proposal, (int, np.integer)), f"proposal {proposal!r} is not a row"
            row = int(proposal)
            assert 0 <= row < len(space)
            assert row not in seen, f"row {row} proposed twice (step {len(seen)})"
            seen.append(row)
            if len(seen) >= budget:
                break
            params = space.get(row)
            value = None if fail(params) else bowl(params)
            proposal = gen.send(value)
    except StopIteration:
        pass
    finally:
        gen.close()
    return seen


VARIANTS = [
    {},
    {"multivariate": False},
    {"failures": "ignore"},
    {"bandwidth": 0.0},
    {"temperature": 1.0},
    {"ei_candidates": 16},
    {"initial_design": "random", "initial_samples": 3},
    {"max_candidates": 64},  # pooled candidates: random pool + neighbourhoods of good rows, refilled when used up
]


@pytest.mark.parametrize("hp", VARIANTS, ids=lambda hp: ",".join(f"{k}={v}" for k, v in hp.items()) or "default")
def test_only_new_valid_rows_until_exhausted(space, hp):
    rows = drive(TPE(space, seed=3, **hp), space, len(space), fail=lambda p: p["x"] == 0)
    assert sorted(rows) == list(range(len(space)))  # every row exactly once: no repeats, nothing skipped


def test_reproducible_per_seed(space):
    a = drive(TPE(space, seed=7), space, 60)
    b = drive(TPE(space, seed=7), space, 60)
    c = drive(TPE(space, seed=8), space, 60)
    assert a == b
    assert a != c


@pytest.mark.parametrize("budget", [1, 5, 37])
def test_whole_budget_used(space, budget):
    history = Evaluator(space, objective(), budget=budget).run(TPE(space, seed=0))
    assert len(history.records) == budget
    assert history.stop_reason == "budget of evaluations spent"
    assert len({r.row for r in history.records}) == budget


def test_exhausts_small_space_without_stalling():
    small = SearchSpace({"a": [1, 2, 3, 4], "b": [1, 2, 3]}, ["a * b != 6"])
    history = Evaluator(small, objective_ab, budget=100).run(TPE(small, seed=1))
    assert history.stop_reason == "search space exhausted"
    assert len(history.records) == len(small)


def objective_ab(params):
    return Measurement(params, value=float((params["a"] - 3) ** 2 + params["b"]))


def test_beats_random_on_easy_objective(space):
    budget, seeds = 40, range(12)

    def best(strategy):
        history = Evaluator(space, objective(), budget=budget).run(strategy)
        return min(r.value for r in history.records if r.value is not None)

    tpe = np.array([best(TPE(space, seed=s)) for s in seeds])
    rnd = np.array([best(RandomSearch(space, seed=s)) for s in seeds])
    # the optimum is 1.0; TPE gets (much) closer on average, and is never far off
    assert tpe.mean() - 1.0 < 0.5 * (rnd.mean() - 1.0), (tpe.mean(), rnd.mean())
    assert np.median(tpe) < np.median(rnd)


@pytest.mark.parametrize("mode", ["bad", "ignore"])
def test_failures_handled(space, mode):
    fail = lambda p: p["y"] >= 5 or p["w"] == 1  # noqa: E731  (about two thirds of the space fails)
    history = Evaluator(space, objective(fail), budget=50).run(TPE(space, seed=2, failures=mode))
    assert len(history.records) == 50
    assert sum(r.value is None for r in history.records) > 0
    assert any(r.value is not None for r in history.records)
    if mode == "bad":  # failures repel the model: it finds the optimum region despite them
        assert min(r.value for r in history.records if r.value is not None) < 1.5
        assert sum(r.value is None for r in history.records) < 25


def test_all_failures_keeps_searching(space):
    history = Evaluator(space, objective(lambda p: True), budget=30).run(TPE(space, seed=0))
    assert len(history.records) == 30 and all(r.value is None for r in history.records)


def test_failed_rows_repel_in_bad_mode(space):
    """With failures in the bad set the model moves away from a failing region; ignored, it cannot tell."""
    fail = lambda p: p["w"] == 2 and p["z"] <= 2  # noqa: E731  (the region around the optimum fails)

    def failed_share(mode):
        total = 0
        for s in range(6):
            h = Evaluator(space, objective(fail), budget=40).run(TPE(space, seed=s, failures=mode))
            total += sum(r.value is None for r in h.records[10:])
        return total

    assert failed_share("bad") < failed_share("ignore")


@pytest.mark.parametrize("ordinal_weight", [0.0, 0.5, 1.0])
def test_kernel_tables_are_normalised(ordinal_weight):
    for bandwidth in (0.0, 0.2, 1.0):
        for s, t in zip((2, 5, 31), kernel_tables([2, 5, 31], bandwidth, 0.1, ordinal_weight)):
            k = np.exp(t) / s
            np.testing.assert_allclose(k.sum(axis=0), 1.0)
            assert np.all(np.argmax(k, axis=0) == np.arange(s))  # each kernel peaks at its centre
            assert np.all(k >= 0.1 / s - 1e-15)  # the uniform floor


def test_kernel_shapes():
    (cat,) = kernel_tables([5], 0.0, 0.2)
    np.testing.assert_allclose(np.exp(cat) / 5, 0.8 * np.eye(5) + 0.04)  # categorical: point mass + floor
    (ordinal,) = kernel_tables([9], 0.25, 0.1)
    k = np.exp(ordinal[:, 4]) / 9
    assert k[3] == pytest.approx(k[5]) and k[4] > k[3] > k[2] > k[1]  # symmetric, falls off with distance
    (mixed,) = kernel_tables([9], 0.25, 0.1, 0.5)
    m = np.exp(mixed[:, 4]) / 9
    assert m[4] > k[4] and m[3] < k[3]  # half categorical: more peaked


def test_incremental_model_matches_direct_computation(space):
    """The running sums (all observations minus the good set) give the same densities as a direct evaluation."""
    strategy = TPE(space, seed=4, failures="bad")
    rows = drive(strategy, space, 45, fail=lambda p: p["z"] == 4)
    good = strategy._good_set()
    log_l, score = strategy._scores(good)
    x_obs = strategy._obs_x[: strategy._n_obs]
    vals = strategy._obs_value[: strategy._n_obs]
    bad = np.setdiff1d(np.arange(len(rows) - 1), good)  # the last proposal got no value yet
    assert len(rows) - 1 == strategy._n_obs and np.isnan(vals).any()
    kern = np.exp(strategy._log_kernel(strategy._pool_x, x_obs))  # pool x observations
    pw = strategy.hp.prior_weight
    l = (pw + kern[:, good].sum(1)) / (pw + len(good))
    g = (pw + kern[:, bad].sum(1)) / (pw + len(bad))
    np.testing.assert_allclose(log_l, np.log(l), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(score, np.log(l) - np.log(g), rtol=1e-9, atol=1e-9)


def test_good_set_size(space):
    strategy = TPE(space, seed=0, gamma=0.2, max_good=3)
    drive(strategy, space, 41)
    assert len(strategy._good_set()) == 3  # min(3, ceil(0.2 * 40))
    strategy = TPE(space, seed=0, gamma=0.2)
    drive(strategy, space, 11)
    good = strategy._good_set()
    assert len(good) == 2  # ceil(0.2 * 10)
    vals = strategy._obs_value[: strategy._n_obs]
    assert set(vals[good]) == set(np.sort(vals)[:2])


def test_initial_sample_sized_to_budget(space):
    assert TPE(space, seed=0)._n_initial() == 20  # budget = len(space): capped at max_initial
    s = TPE(space, seed=0)
    s.budget = 12
    assert s._n_initial() == 2
    s = TPE(space, seed=0, initial_samples=5)
    s.budget = 3
    assert s._n_initial() == 3


@pytest.mark.parametrize("field,value", [
    ("gamma", 0.0), ("gamma", 1.5), ("gamma", True), ("max_good", 0), ("max_good", 2.5),
    ("initial_samples", 0), ("initial_samples", "10"), ("initial_fraction", 0.0), ("max_initial", 1),
    ("initial_design", "sobol"), ("multivariate", "yes"), ("bandwidth", -0.1), ("bandwidth", float("nan")),
    ("ordinal_weight", 1.5), ("ordinal_weight", None),
    ("smoothing", 0.0), ("smoothing", 2.0), ("prior_weight", 0.0), ("failures", "worst"),
    ("ei_candidates", -1), ("temperature", -1.0), ("max_candidates", 4),
])
def test_hyperparameter_validation_names_the_field(space, field, value):
    with pytest.raises(StrategyError, match=f"'{field}'"):
        TPE(space, **{field: value})


def test_temperature_and_ei_candidates_exclusive(space):
    with pytest.raises(StrategyError, match="'temperature'"):
        TPE(space, temperature=1.0, ei_candidates=8)


def test_registered_with_unknown_hyperparameter_listed(space):
    assert isinstance(make_strategy({"name": "tpe", "gamma": 0.2}, space, seed=0), TPE)
    with pytest.raises(StrategyError, match="gama"):
        make_strategy({"name": "tpe", "gama": 0.2}, space)


def test_single_valued_parameters_and_tiny_spaces():
    s = SearchSpace({"a": [1], "b": [1, 2, 3], "c": ["x"]})
    history = Evaluator(s, lambda p: Measurement(p, value=float(p["b"])), budget=10).run(TPE(s, seed=0))
    assert len(history.records) == 3 and history.stop_reason == "search space exhausted"
    one = SearchSpace({"a": [1]})
    history = Evaluator(one, lambda p: Measurement(p, value=1.0), budget=5).run(TPE(one, seed=0))
    assert len(history.records) == 1
    assert math.isclose(history.best.value, 1.0)


@pytest.mark.parametrize("bandwidth", [0.0, 0.2])
def test_log_ratio_as_a_model_is_the_same_on_the_full_pool_and_computed_directly(space, bandwidth):
    """``log_ratio`` (the guide of annealing) agrees between the incremental pool and the direct sum."""
    full = TPE(space, seed=0, bandwidth=bandwidth)
    pooled = TPE(space, seed=0, bandwidth=bandwidth, max_candidates=16)  # forces the direct computation
    for model in (full, pooled):
        model.start_model()
    assert full._full and not pooled._full
    rng = np.random.default_rng(1)
    rows = rng.choice(len(space), size=60, replace=False)
    assert full.log_ratio(rows[:5]) is None  # nothing observed yet
    for i, r in enumerate(rows[:40]):
        value = None if i % 7 == 3 else bowl(space.get(int(r)))
        full.observe(int(r), value)
        pooled.observe(int(r), value)
    a, b = full.log_ratio(rows[40:]), pooled.log_ratio(rows[40:])
    np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9)
    # good regions rate higher: the row closest to the optimum beats the farthest one
    values = np.array([bowl(space.get(int(r))) for r in rows[40:]])
    assert a[np.argmin(values)] > a[np.argmax(values)]
