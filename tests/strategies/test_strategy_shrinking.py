"""Shrinking-sample search: section arithmetic, the procedure, its end and what follows."""
from __future__ import annotations

import numpy as np
import pytest

from pytest_autotune.engine.evaluator import Evaluator
from pytest_autotune.results import FailureKind, Measurement
from pytest_autotune.space import SearchSpace
from pytest_autotune.strategies.base import StrategyError
from pytest_autotune.strategies.registry import make_strategy, validate_strategy_spec
from pytest_autotune.strategies.shrinking_sample import Level, ShrinkingSample, partition_bounds, partition_median

HAND = {"x": list(range(7)), "y": [10, 20, 30, 40], "z": [0, 1]}  # 7 x 4 x 2 = 56 configurations


def hand_space(*restrictions: str) -> SearchSpace:
    return SearchSpace(HAND, list(restrictions))


def indices_objective(space: SearchSpace, f, fail=None):
    def objective(params):
        v = space.value_indices(params)
        if fail is not None and fail(v):
            return Measurement.failed(params, FailureKind.COMPILE, "synthetic failure")
        return Measurement(params, value=float(f(v)))
    return objective


def monotone(v) -> float:
    """Separable, increasing in every index: best at the first configuration (0, 0, 0)."""
    return 1.0 + v[0] + 2.0 * v[1] + 4.0 * v[2]


def run(space, spec, objective, budget=None, seed=0):
    strategy = make_strategy(spec, space, seed=seed)
    history = Evaluator(space, objective, budget=budget).run(strategy)
    return strategy, history


# -- section arithmetic ----------------------------------------------------------------------------

def test_partitions_are_consecutive_runs_of_near_equal_size():
    assert partition_bounds(0, 6, 2) == [(0, 3), (4, 6)]
    assert partition_bounds(0, 6, 3) == [(0, 2), (3, 4), (5, 6)]
    assert partition_bounds(4, 6, 2) == [(4, 5), (6, 6)]
    assert partition_bounds(2, 3, 5) == [(2, 2), (3, 3)]  # fewer values than k: one partition each
    assert partition_bounds(5, 5, 2) == [(5, 5)]
    for lo, hi, k in [(0, 30, 3), (3, 17, 4), (0, 1, 2), (7, 7, 9)]:
        parts = partition_bounds(lo, hi, k)
        assert parts[0][0] == lo and parts[-1][1] == hi
        assert all(b[0] == a[1] + 1 for a, b in zip(parts, parts[1:]))
        sizes = [b - a + 1 for a, b in parts]
        assert max(sizes) - min(sizes) <= 1 and len(parts) == min(k, hi - lo + 1)


def test_medians_are_the_middle_value_lower_for_even_counts():
    assert partition_median(0, 3) == 1
    assert partition_median(4, 6) == 5
    assert partition_median(5, 6) == 5
    assert partition_median(2, 2) == 2


def test_level_cells_medians_and_ranges_on_a_hand_built_space():
    level = Level(np.array([0, 0, 0]), np.array([6, 3, 1]), k=2, v_th=2)
    assert level.bounds == [[(0, 3), (4, 6)], [(0, 1), (2, 3)], [(0, 1)]]  # z (2 values <= v_th) is not cut
    assert level.shape.tolist() == [2, 2, 1] and level.n_cells == 4
    assert [m.tolist() for m in level.medians] == [[1, 5], [0, 2], [0]]
    space = hand_space()
    parts = level.parts(space.indices.astype(np.int64))
    cells = level.cell_ids(parts)
    assert sorted(np.bincount(cells).tolist()) == [12, 12, 16, 16]  # x 4|3 values x y 2|2 x z 2
    med = level.median_vectors(parts)
    assert {tuple(r) for r in med.tolist()} == {(1, 0, 0), (1, 2, 0), (5, 0, 0), (5, 2, 0)}
    row = space.find({"x": 5, "y": 30, "z": 1})
    lo, hi = level.cell_ranges(parts[row])
    assert lo.tolist() == [4, 2, 0] and hi.tolist() == [6, 3, 1]
    # with v_th = 1 every parameter is cut, z into its two values
    level1 = Level(np.array([0, 0, 0]), np.array([6, 3, 1]), k=3, v_th=1)
    assert level1.bounds[2] == [(0, 0), (1, 1)] and level1.shape.tolist() == [3, 3, 2]


# -- the procedure -----------------------------------------------------------------------------------

def test_first_level_samples_the_medians_one_per_cell():
    space = hand_space()
    strategy, history = run(space, {"name": "shrinking_sample", "k": 2, "v_th": 2}, indices_objective(space, monotone),
                            budget=4)
    got = {tuple(space.indices[r.row].tolist()) for r in history.records}
    assert got == {(1, 0, 0), (1, 2, 0), (5, 0, 0), (5, 2, 0)}


def test_invalid_median_is_repaired_inside_its_cell_and_empty_cells_are_skipped():
    # (x=1, y=10) is the median of cell x 0-3 / y 0-1 and is invalid; cell x 4-6 / y 2-3 is empty
    space = hand_space("not (x == 1 and y == 10)", "not (x >= 4 and y >= 30)")
    for seed in range(5):
        _, history = run(space, {"name": "shrinking_sample", "k": 2, "v_th": 2},
                         indices_objective(space, monotone), budget=3, seed=seed)
        got = [tuple(space.indices[r.row].tolist()) for r in history.records]
        assert (1, 2, 0) in got and (5, 0, 0) in got
        repaired = [g for g in got if g[0] <= 3 and g[1] <= 1]
        assert len(repaired) == 1
        assert repaired[0] in {(0, 0, 0), (2, 0, 0), (1, 1, 0), (1, 0, 1)}  # index distance 1 from (1, 0, 0)
    # only three non-empty cells: the fourth evaluation belongs to the next level
    strategy, history = run(space, {"name": "shrinking_sample", "k": 2, "v_th": 2},
                            indices_objective(space, monotone), budget=4)
    assert not any(space.indices[r.row][0] >= 4 and space.indices[r.row][1] >= 2 for r in history.records)


def test_procedure_ends_after_searching_the_final_section_exhaustively():
    space = hand_space()
    objective = indices_objective(space, monotone)
    strategy, history = run(space, {"name": "shrinking_sample", "k": 2, "v_th": 2, "continuation": "best_first"},
                            objective)
    # level 1: four medians; level 2 (x cut into 0-1 | 2-3; y, z already <= v_th): the cell holding the
    # level-1 winner (1, 0, 0) is reused, the other sampled at (2, 0, 0); the final section x 0-1,
    # y 0-1, z 0-1 holds 8 configurations, one already evaluated.
    assert strategy.procedure_evaluations == 4 + 1 + 7
    first = [tuple(space.indices[r.row].tolist()) for r in history.records[:12]]
    final = {(x, y, z) for x in (0, 1) for y in (0, 1) for z in (0, 1)}
    assert final <= set(first)
    assert first[5:] == sorted(first[5:], key=lambda v: abs(v[0] - 1) + v[1] + v[2])  # nearest the best first
    assert strategy.procedure_best[1] == monotone((0, 0, 0))
    # after the procedure the search carries on until the space is exhausted, never re-proposing
    assert history.stop_reason == "search space exhausted" and len(history.records) == len(space)
    assert len(history.strategy_seconds) == len(history.records)


@pytest.mark.parametrize("k,v_th", [(2, 1), (2, 2), (3, 1), (3, 2), (4, 3)])
def test_reaches_the_optimum_of_a_separable_objective(k, v_th):
    space = SearchSpace({"a": list(range(9)), "b": list(range(16)), "c": list(range(5)), "d": [0, 1]})

    def f(v):  # separable, best at a=8, b=0, c=4, d=1 (corners: every level's best median keeps them)
        return 1.0 + (8 - v[0]) + 0.5 * v[1] + 3.0 * (4 - v[2]) + 2.0 * (1 - v[3])

    strategy, history = run(space, {"name": "shrinking_sample", "k": k, "v_th": v_th}, indices_objective(space, f),
                            budget=len(space) // 2)
    assert strategy.procedure_evaluations is not None
    assert strategy.procedure_best[1] == 1.0
    assert strategy.procedure_evaluations < len(space) / 4


def test_every_median_failing_samples_further_configurations():
    space = hand_space()
    medians = {(1, 0, 0), (1, 2, 0), (5, 0, 0), (5, 2, 0)}
    fail = lambda v: tuple(int(x) for x in v) in medians  # noqa: E731
    strategy, history = run(space, {"name": "shrinking_sample", "k": 2, "v_th": 2},
                            indices_objective(space, monotone, fail), budget=40)
    assert history.failures() == {"compile": 4}
    assert strategy.procedure_evaluations is not None
    assert strategy.procedure_best is not None and strategy.procedure_best[1] is not None
    assert history.best.value == monotone((0, 0, 0))


def test_a_single_working_configuration_is_found():
    space = hand_space()
    fail = lambda v: tuple(int(x) for x in v) != (6, 0, 1)  # noqa: E731
    _, history = run(space, "shrinking_sample", indices_objective(space, monotone, fail))
    assert history.best.value == monotone((6, 0, 1))
    assert len(history.records) == len(space) and len(history.strategy_seconds) == len(space)


# -- the framework contract --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sparse_space() -> SearchSpace:
    params = {"a": list(range(8)), "b": list(range(8)), "c": [1, 2, 4, 8, 16, 32, 64, 128], "d": list(range(8))}
    return SearchSpace(params, ["a + b <= 9", "c * (d + 1) <= 256", "(a + d) % 3 != 1"])


def bowl(space):
    target = np.array([6, 2, 3, 3])
    return indices_objective(space, lambda v: 1.0 + float(np.sum((v - target) ** 2)))


@pytest.mark.parametrize("continuation", ["local", "best_first"])
def test_valid_rows_whole_budget_no_reproposals(sparse_space, continuation):
    _, history = run(sparse_space, {"name": "shrinking_sample", "continuation": continuation}, bowl(sparse_space),
                     budget=400)
    assert len(history.records) == 400 and history.stop_reason == "budget of evaluations spent"
    assert all(0 <= r.row < len(sparse_space) for r in history.records)
    assert len(history.strategy_seconds) == len(history.records)


def test_reproducible_with_a_seed(sparse_space):
    rows = lambda seed: [r.row for r in run(sparse_space, "shrinking_sample", bowl(sparse_space), 150,  # noqa: E731
                                            seed=seed)[1].records]
    assert rows(2) == rows(2)
    assert rows(2) != rows(5)


def test_beats_random_on_an_easy_objective(sparse_space):
    ours = [run(sparse_space, "shrinking_sample", bowl(sparse_space), 60, seed=s)[1].best.value for s in range(20)]
    rand = [run(sparse_space, "random", bowl(sparse_space), 60, seed=s)[1].best.value for s in range(20)]
    assert np.mean(ours) < 0.75 * np.mean(rand), (np.mean(ours), np.mean(rand))


@pytest.mark.parametrize("field,value", [("k", 1), ("k", 2.0), ("k", True), ("v_th", 0), ("v_th", "2"),
                                         ("continuation", "restart")])
def test_hyperparameter_validation_names_the_field(sparse_space, field, value):
    with pytest.raises(StrategyError, match=repr(field)):
        make_strategy({"name": "shrinking_sample", field: value}, sparse_space)
    with pytest.raises(StrategyError, match=repr(field)):
        validate_strategy_spec({"name": "shrinking_sample", field: value})


def test_defaults_are_documented_and_valid():
    hp = ShrinkingSample.Hyperparameters()
    hp.validate()
    for field in vars(hp):
        assert f"``{field}``" in ShrinkingSample.__doc__
