"""Local search strategies: simulated_annealing, mls, ils."""
from __future__ import annotations

import numpy as np
import pytest

from pytest_autotune.engine.evaluator import Evaluator
from pytest_autotune.results import Measurement
from pytest_autotune.space import SearchSpace
from pytest_autotune.strategies.base import StrategyError
from pytest_autotune.strategies.local import (IteratedLocalSearch, MultiStartLocalSearch, SimulatedAnnealing,
                                              resolve_neighbour)
from pytest_autotune.strategies.registry import make_strategy, validate_strategy_spec

import strategy_fixtures
from strategy_fixtures import TARGET, bowl

NAMES = ["simulated_annealing", "mls", "ils"]


@pytest.fixture(scope="module")
def sparse_space() -> SearchSpace:
    return strategy_fixtures.sparse_space()


@pytest.fixture(scope="module")
def box_space() -> SearchSpace:
    return SearchSpace({"a": list(range(8)), "b": list(range(8)), "c": list(range(8))})


def run(space, spec, budget, seed=0, objective=None):
    strategy = make_strategy(spec, space, seed=seed)
    history = Evaluator(space, objective or bowl(space), budget=budget).run(strategy)
    return strategy, history


@pytest.mark.parametrize("name", NAMES)
def test_valid_rows_whole_budget_and_no_reproposals(sparse_space, name):
    _, history = run(sparse_space, name, budget=300)
    assert len(history.records) == 300
    assert history.stop_reason == "budget of evaluations spent"
    assert all(0 <= r.row < len(sparse_space) for r in history.records)
    assert len({r.row for r in history.records}) == 300
    # every proposal was a new configuration: nothing evaluated is ever proposed again
    assert len(history.strategy_seconds) == len(history.records)


@pytest.mark.parametrize("name", NAMES)
def test_runs_until_the_space_is_exhausted_without_stalling(sparse_space, name):
    _, history = run(sparse_space, name, budget=None)
    assert history.stop_reason == "search space exhausted"
    assert len(history.records) == len(sparse_space)
    assert len(history.strategy_seconds) == len(history.records)


@pytest.mark.parametrize("name", NAMES)
def test_reproducible_with_a_seed(sparse_space, name):
    rows = lambda seed: [r.row for r in run(sparse_space, name, budget=120, seed=seed)[1].records]  # noqa: E731
    assert rows(3) == rows(3)
    assert rows(3) != rows(4)


@pytest.mark.parametrize("name", NAMES)
def test_beats_random_on_an_easy_objective(sparse_space, name):
    budget, seeds = 60, range(12)
    ours = [run(sparse_space, name, budget, seed=s)[1].best.value for s in seeds]
    rand = [run(sparse_space, "random", budget, seed=s)[1].best.value for s in seeds]
    assert np.mean(ours) < 0.6 * np.mean(rand), (np.mean(ours), np.mean(rand))
    # the optimum itself is found by most runs
    assert np.mean(np.array(ours) == 1.0) >= 0.4


@pytest.mark.parametrize("seed", range(5))
def test_one_descent_reaches_the_optimum_of_a_separable_bowl(box_space, seed):
    """Hamming descent on an unconstrained separable bowl has no local optimum but the global one."""
    mls = MultiStartLocalSearch(box_space, seed=seed, min_improvement=0.0)
    mls._setup("auto", 0.0)
    objective = bowl(box_space)
    start = int(box_space.sample(1, seed)[0])
    value = objective(box_space.get(start)).value
    mls.observed[start] = value
    gen = mls._descend(start, value)
    proposal = next(gen)
    try:
        while True:
            v = objective(box_space.get(proposal)).value
            mls.observed[proposal] = v
            proposal = gen.send(v)
    except StopIteration as stop:
        row, best = stop.value
    assert best == 1.0 and list(box_space.indices[row]) == [6, 2, 3]
    assert len(mls.observed) < len(box_space) / 4  # a descent, not an enumeration


@pytest.mark.parametrize("name", NAMES)
def test_failures_are_never_an_improvement(sparse_space, name):
    """A third of the space fails, including configurations next to the optimum."""
    fail = lambda v: (int(v[0]) + 2 * int(v[1]) + int(v[3])) % 3 == 0 and not np.array_equal(v, TARGET)  # noqa: E731
    strategy, history = run(sparse_space, name, budget=250, objective=bowl(sparse_space, fail))
    assert len(history.records) == 250
    assert history.failures().get("runtime", 0) > 30
    assert history.best is not None and history.best.value is not None
    assert strategy.best[1] == history.best.value
    assert len(history.strategy_seconds) == len(history.records)


@pytest.mark.parametrize("name", NAMES)
def test_a_single_working_configuration_is_found(sparse_space, name):
    """Everything fails but the optimum: starts keep drawing until something valid exists."""
    fail = lambda v: not np.array_equal(v, TARGET)  # noqa: E731
    _, history = run(sparse_space, name, budget=None, objective=bowl(sparse_space, fail))
    assert history.best.value == 1.0
    assert len(history.records) == len(sparse_space)


def test_annealing_never_accepts_a_failure_and_cools_over_the_budget(sparse_space):
    sa = SimulatedAnnealing(sparse_space, seed=0, t_start=0.2, t_end=0.002)
    sa.budget = 500
    assert sa.temperature(0) == pytest.approx(0.2)
    assert sa.temperature(250) == pytest.approx(0.02)
    assert sa.temperature(500) == pytest.approx(0.002)
    assert sa.temperature(10_000) == pytest.approx(0.002)
    assert not any(sa._accept(None, 1.0) for _ in range(100))
    assert all(sa._accept(0.5, 1.0) for _ in range(100))
    # a 10% worse move at T = 0.1 is accepted with probability 1/e
    sa.hp.t_start = sa.hp.t_end = 0.1
    rate = np.mean([sa._accept(1.1, 1.0) for _ in range(4000)])
    assert abs(rate - np.exp(-1)) < 0.03
    # relative, so negative objectives work too
    assert all(sa._accept(-2.0, -1.0) for _ in range(50))


def test_ils_kick_is_a_walk_over_valid_neighbours(sparse_space):
    ils = IteratedLocalSearch(sparse_space, seed=1, perturbation=1)
    ils._setup("hamming")
    for row in sparse_space.sample(20, 0):
        end = ils._kick(int(row))
        assert end in set(sparse_space.neighbours(int(row), "hamming").tolist())
    ils.hp.perturbation = 3
    for row in sparse_space.sample(20, 1):
        end = ils._kick(int(row))
        assert 0 <= end < len(sparse_space) and end != int(row)
        assert np.sum(sparse_space.indices[end] != sparse_space.indices[int(row)]) <= 3


def test_auto_neighbourhood(sparse_space):
    assert resolve_neighbour(sparse_space, "auto") == "hamming"
    binary = SearchSpace({"x": [0, 1], "y": [0, 1], "z": [0, 1]})  # three Hamming neighbours each
    assert resolve_neighbour(binary, "auto") == "adjacent"
    assert resolve_neighbour(binary, "strictly-adjacent") == "strictly-adjacent"
    _, history = run(binary, "mls", budget=None, objective=lambda p: Measurement(p, value=1.0 + sum(p.values())))
    assert len(history.records) == 8


@pytest.mark.parametrize("name,field,value", [
    ("mls", "neighbour", "manhattan"),
    ("mls", "improvement", "steepest"),
    ("mls", "start_samples", 0),
    ("mls", "min_improvement", 1.5),
    ("mls", "min_improvement", "0.1"),
    ("ils", "perturbation", 0),
    ("ils", "perturbation", 2.5),
    ("ils", "acceptance", "metropolis"),
    ("ils", "restart_after", -1),
    ("ils", "start_samples", True),
    ("simulated_annealing", "t_start", 0),
    ("simulated_annealing", "t_start", float("inf")),
    ("simulated_annealing", "t_end", 5.0),
    ("simulated_annealing", "restart_after", 2),
    ("simulated_annealing", "neighbour", None),
])
def test_hyperparameter_validation_names_the_field(sparse_space, name, field, value):
    with pytest.raises(StrategyError, match=repr(field)):
        make_strategy({"name": name, field: value}, sparse_space)
    with pytest.raises(StrategyError, match=repr(field)):
        validate_strategy_spec({"name": name, field: value})


def test_defaults_are_documented_and_valid():
    for cls in (MultiStartLocalSearch, IteratedLocalSearch, SimulatedAnnealing):
        hp = cls.Hyperparameters()
        hp.validate()
        for field in vars(hp):
            assert f"``{field}``" in cls.__doc__, (cls.name, field)


def test_best_improvement_and_acceptance_variants_run(sparse_space):
    for spec in ({"name": "mls", "improvement": "best"}, {"name": "ils", "acceptance": "always"},
                 {"name": "ils", "acceptance": "equal", "restart_after": 0, "improvement": "best"},
                 {"name": "simulated_annealing", "restart_after": 0, "neighbour": "adjacent"}):
        _, history = run(sparse_space, spec, budget=150)
        assert len(history.records) == 150
        assert len(history.strategy_seconds) == 150


def test_guided_annealing_takes_the_models_favourite_neighbour(sparse_space):
    """With ``guide``, a guided step is the unevaluated neighbour with the highest TPE l/g ratio."""
    strategy = make_strategy({"name": "simulated_annealing", "guide": True, "guide_probability": 1.0},
                             sparse_space, seed=3)
    Evaluator(sparse_space, bowl(sparse_space), budget=80).run(strategy)
    model = strategy._model
    assert model is not None and model._n_obs == 79  # every evaluation told to the walk (the 80th ends the run)
    todo = max(([r for r in sparse_space.neighbours(row, "hamming").tolist() if r not in strategy.observed]
                for row in range(0, len(sparse_space), 97)), key=len)
    assert len(todo) > 3
    score = model.log_ratio(np.asarray(todo))
    pick = strategy._next_neighbour(todo)
    assert score[todo.index(pick)] == pytest.approx(score.max())
    assert np.ptp(score) > 0  # the model does discriminate between neighbours


@pytest.mark.parametrize("seed", [0, 1])
def test_guided_annealing_is_reproducible_valid_and_finds_the_bowl(sparse_space, seed):
    spec = {"name": "simulated_annealing", "guide": True}
    s1, h1 = run(sparse_space, spec, budget=200, seed=seed)
    _, h2 = run(sparse_space, spec, budget=200, seed=seed)
    assert [r.row for r in h1.records] == [r.row for r in h2.records]
    assert len({r.row for r in h1.records}) == 200
    assert s1.best[1] == 1.0  # the optimum of the bowl (TARGET) within 200 of about 1,400 valid rows


@pytest.mark.parametrize("field, value", [("guide", "yes"), ("guide_probability", 1.5), ("guide_probability", None),
                                          ("guide_gamma", 0), ("guide_gamma", "wide")])
def test_guide_hyperparameters_are_validated(sparse_space, field, value):
    with pytest.raises(StrategyError, match=repr(field)):
        make_strategy({"name": "simulated_annealing", field: value}, sparse_space)


# -- the asynchronous walk (batch size above 1) -----------------------------------------------------------------


def drive(strategy, space, objective, budget: int, batch_size: int, newest_first: bool = True):
    """A pipeline stand-in: keep ``batch_size`` pending, tell one result at a time (the newest first: results
    arrive out of order). Returns how many proposals were pending at each measurement and the best value."""
    from pytest_autotune.strategies.batch import BatchSearch

    search = BatchSearch(strategy, budget, batch_size)
    depths, best = [], float("inf")
    try:
        while search.evaluated < budget:
            search.ask()
            if not search.pending:
                break
            depths.append(len(search.pending))
            proposal = search.pending[-1 if newest_first else 0]
            value = objective(space.get(int(proposal))).value
            best = min(best, value)
            search.tell(proposal, value)
    finally:
        search.close()
    return depths, best


def test_the_asynchronous_walk_keeps_the_pipeline_full_and_still_descends(box_space):
    objective = bowl(box_space)
    optimum = min(objective(box_space.get(r)).value for r in range(len(box_space)))
    spec = {"name": "simulated_annealing", "start_samples": 4}
    async_depths, async_best = drive(make_strategy(spec, box_space, seed=3), box_space, objective, 120, 4)
    sync_depths, _ = drive(make_strategy({**spec, "asynchronous": False}, box_space, seed=3), box_space,
                           objective, 120, 4)
    full = lambda depths: np.mean([d == 4 for d in depths])  # noqa: E731
    # a synchronous step drains the pipeline before its next step; the asynchronous walk refills it at once
    assert full(async_depths) > 0.9 and full(async_depths) > full(sync_depths) + 0.2, (full(async_depths),
                                                                                        full(sync_depths))
    assert async_best <= optimum * 1.05  # moving on results that arrive out of order still finds the bowl's floor


def test_an_arriving_result_moves_the_walk_only_when_it_should(box_space):
    sa = make_strategy({"name": "simulated_annealing", "t_start": 1e-9, "t_end": 1e-9}, box_space, seed=0)
    sa.batch_size = 4
    search = sa.run(len(box_space))
    next(search)  # the walk sets up (its first start sample is out)
    from pytest_autotune.strategies.local import _Walk

    here, there, elsewhere = 0, 1, 2
    sa._walk = _Walk(here, 10.0, best_v=10.0, best_at=0, gain=0.0)
    sa._out = {there: here, elsewhere: 5}
    sa.revise(elsewhere, 11.0)  # worse, proposed from a point the walk has left: no move
    assert sa._walk.cur == here and elsewhere not in sa._out
    sa.revise(there, 8.0)  # better: the walk moves there and the best improves
    assert (sa._walk.cur, sa._walk.cur_v, sa._walk.best_v) == (there, 8.0, 8.0)
    search.close()


def test_asynchronous_must_be_a_boolean(box_space):
    with pytest.raises(StrategyError, match="asynchronous"):
        make_strategy({"name": "simulated_annealing", "asynchronous": "yes"}, box_space)


def _max_pending_after_start(monkeypatch, side_points: int) -> int:
    """The most proposals pending at once once annealing's start samples are in, with a batch (16) wider than
    a point's neighbourhood (11 here)."""
    from pytest_autotune.strategies.batch import BatchSearch

    monkeypatch.setattr(SimulatedAnnealing, "SIDE_POINTS", side_points)
    space = SearchSpace({"a": list(range(6)), "b": [0, 1], "c": [0, 1]})
    strategy = make_strategy({"name": "simulated_annealing", "start_samples": 3}, space, seed=4)
    search = BatchSearch(strategy, 200, 16)
    most, told = 0, 0
    try:
        while told < 20:
            search.ask()
            if not search.pending:
                break
            if told >= 3:
                most = max(most, len(search.pending))
            proposal = search.pending[0]
            params = space.get(int(proposal))
            search.tell(proposal, float(params["a"] + 3 * params["b"] + 5 * params["c"] + 1))
            told += 1
    finally:
        search.close()
    return most


def test_a_batch_wider_than_the_neighbourhood_steps_beside_it(monkeypatch):
    """Many devices: the walk's own neighbours are all out, so the batch is topped up with neighbours of the
    next best points instead of idling every device but a few."""
    default = SimulatedAnnealing.SIDE_POINTS
    assert _max_pending_after_start(monkeypatch, 0) <= 11
    assert _max_pending_after_start(monkeypatch, default) > 11
