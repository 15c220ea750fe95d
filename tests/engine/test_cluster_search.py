"""Search on several devices: no round waits for its slowest compile, and a wide batch's stand-ins are not results.

One device keeps its composition (tests/simulation/test_cluster_simulation.py checks it
row for row); these check what changes with D devices, and the stale walk's
count of results, which any batch above 1 uses.
"""
from __future__ import annotations

import statistics

import numpy as np
import pytest

from pytest_autotune.datasets import load_dataset
from pytest_autotune.engine.pipeline_depth import PipelineDepth
from pytest_autotune.simulation import Pipeline, simulate_fleet_search, simulate_search
from pytest_autotune.simulation.replay import ReplayRunner
from pytest_autotune.space import SearchSpace
from pytest_autotune.strategies import make_strategy
from pytest_autotune.strategies.batch import BatchSearch
from pytest_autotune.strategies.local import SimulatedAnnealing


def grid(n: int = 12) -> SearchSpace:
    return SearchSpace({"x": list(range(n)), "y": list(range(n))})


def bowl(space: SearchSpace, row: int) -> float:
    x, y = (int(v) for v in space.indices[row])
    return 1.0 + (x - 7) ** 2 + (y - 4) ** 2


def test_batch_search_shares_its_stand_ins_with_the_strategy():
    space = grid()
    strategy = make_strategy({"name": "random"}, space, seed=0)
    search = BatchSearch(strategy, budget=50, batch_size=6)
    asked = search.ask()
    assert len(asked) == 6
    # every pending proposal but the one the generator still waits on was answered with a stand-in
    assert strategy.stand_ins == {int(r) for r in asked[:-1]}
    assert all(strategy.observed[r] is None for r in strategy.stand_ins)
    search.tell(asked[0], bowl(space, int(asked[0])))
    assert int(asked[0]) not in strategy.stand_ins and strategy.observed[int(asked[0])] == bowl(space, int(asked[0]))
    single = make_strategy({"name": "random"}, space, seed=0)
    one = BatchSearch(single, budget=50)
    one.tell(one.ask()[0], 1.0)
    one.ask()
    assert single.stand_ins == set() and single.devices == 1


def test_batch_search_refuses_a_device_count_that_is_not_positive():
    with pytest.raises(ValueError, match="devices must be a positive integer, got 0"):
        BatchSearch(make_strategy({"name": "random"}, grid(), seed=0), budget=5, devices=0)


def test_a_stale_walk_counts_results_not_the_stand_ins_of_a_wide_batch(monkeypatch):
    """A flat objective never improves: the walk must see ``patience`` real results before it restarts, however
    many proposals are pending. Before, stand-ins counted: when the batch widened after the walk started (the
    depth grows once costs are measured, a device joins) the 39 new stand-ins made it stale at once."""
    space = grid(20)
    walk = SimulatedAnnealing(space, seed=1, restart_after=0.1, start_samples=1, restart_samples=1, stale_gain=0.02)
    budget = 200
    patience = int(np.ceil(0.1 * budget))
    told = 0
    restarts: list[int] = []
    method = SimulatedAnnealing._start_async

    def counted(self, samples, *args):
        restarts.append(told)
        return (yield from method(self, samples, *args))

    monkeypatch.setattr(SimulatedAnnealing, "_start_async", counted)
    search = BatchSearch(walk, budget=budget, batch_size=2, devices=2)
    while len(restarts) < 2 and not search.finished:
        search.ask()
        if not search.pending:
            break
        search.tell(search.pending[0], 1.0)
        told += 1
        search.resize(40)  # the walk has started: the batch widens
    assert len(restarts) == 2, restarts  # the start, then the first restart
    assert restarts[1] >= patience, f"restarted after {restarts[1]} results, patience {patience}"


def test_on_several_devices_auto_walks_from_the_first_result_without_waiting_for_the_rest():
    space = grid()
    cluster = make_strategy("auto", space, seed=4)
    search = BatchSearch(cluster, budget=100, batch_size=20, devices=4)
    first = search.ask()
    assert len(first) == 20  # the design and more: every device and compile worker has work at once
    bayes, walk = cluster.delegate.phases
    assert [int(r) for r in first[:len(walk.start_design)]] == walk.start_design
    assert walk.start_design[0] == bayes.centre() or len(set(walk.start_design)) == len(walk.start_design)
    row = int(first[0])
    search.tell(first[0], bowl(space, row))
    more = search.ask()  # one result is enough to walk on: the 19 others are still compiling
    assert len(more) == 1 and int(more[0]) in walk.neighbours(row).tolist()
    # one device: today's chain, whose Bayesian design is a batch that waits for all of its results
    one = make_strategy("auto", space, seed=4)
    serial = BatchSearch(one, budget=100, batch_size=20)
    design = serial.ask()
    assert 1 < len(design) < 20
    serial.tell(design[0], bowl(space, int(design[0])))
    assert serial.ask() == []


def _time_to_5pct(rec, devices: int, seed: int, workers: int = 8) -> float:
    runner = ReplayRunner(rec, clock=workers if devices == 1 else Pipeline(workers * devices, devices=devices,
                                                                        host_waits=False))
    runner.charger.timer = lambda: 0.0  # no host time: the comparison is of the search alone
    most = devices * (workers + 1)
    simulate = simulate_search if devices == 1 else simulate_fleet_search
    run = simulate(make_strategy("auto", rec.space, seed=seed), runner, 400, batch_size=most,
                   depth=PipelineDepth(most, devices=devices), early_stop=True, stop_below=1.05 * rec.optimum)
    t = run.time_to(1.05 * rec.optimum)
    return float("inf") if t is None else t


def test_eight_devices_tune_a_compile_bound_space_several_times_faster(spaces_dir):
    """KTT's convolution: compiles of 1-3.5 s (tails to 14 s), 50 ms on the device. Rounds that wait for the
    slowest compile made 8 devices about 1.7x faster than one (29.9 vs 52.1 s, 4 seeds)."""
    rec = load_dataset(spaces_dir / "ktt" / "KTConvolutionOutput_2080Ti.json.gz")
    one = statistics.median(_time_to_5pct(rec, 1, seed) for seed in range(3))
    eight = statistics.median(_time_to_5pct(rec, 8, seed) for seed in range(3))
    assert eight < one / 4, (one, eight)


def test_the_fleet_evaluator_tells_the_strategy_how_many_devices_measure():
    from pytest_autotune.engine.fleet import FleetEvaluator
    from tests.simulation.test_cluster_simulation import FakeFleet

    space = SearchSpace({"x": list(range(30))})
    strategy = make_strategy("auto", space, seed=1)
    FleetEvaluator(space, FakeFleet(devices=3), budget=12, batch_size=6).run(strategy)
    walk = strategy.delegate.phases[1]
    assert strategy.devices == walk.devices == 3 and walk.start_design  # the wide composition was chosen
