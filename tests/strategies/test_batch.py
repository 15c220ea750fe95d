"""Batch proposals (``BatchSearch``, ``Evaluator(batch_size=..., prefetch=...)``).

Batch size 1 must reproduce the sequential evaluation order exactly: every
registered strategy is driven by the evaluator and by a reference copy of the
one-at-a-time loop the evaluator ran before batches existed, on a synthetic
space with failures, with seeds, and on recorded GPU spaces. Larger batches
must stay correct: nothing pending twice, the budget kept, every result told
and the strategy's record corrected where it was answered with a lie.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_autotune import datasets, tune
from pytest_autotune.engine.evaluator import Evaluator
from pytest_autotune.results import Measurement
from pytest_autotune.execution.device import DeviceInfo
from pytest_autotune.strategies import available_strategies, make_strategy
from pytest_autotune.strategies.base import Batch, Strategy
from pytest_autotune.strategies.batch import BatchSearch, proposal_key
from strategy_fixtures import bowl, sparse_space

ALL = [name for name in available_strategies() if name != "profile"]  # profile needs counters: see below


def sequential_reference(space, objective, strategy: Strategy, budget: int, seeds=()) -> list[Any]:
    """The evaluation order of the one-at-a-time loop (the evaluator before batches), for comparison."""
    seen: dict[Any, float | None] = {}
    order: list[Any] = []
    for row in seeds:
        if row not in seen:
            m = objective(space.get(row))
            seen[row] = m.value if m.ok else None
            strategy.observed[row] = seen[row]
            strategy.transferred.add(row)  # as the evaluator marks a warm start's seeds
            order.append(row)
    gen = strategy.run(budget)
    value = None
    first = True
    try:
        while len(order) < budget and sum(isinstance(k, int) for k in seen) < len(space):
            try:
                proposal = next(gen) if first else gen.send(value)
            except StopIteration:
                break
            first = False
            key, row = proposal_key(space, proposal)
            if key in seen:
                value = seen[key]
                continue
            if row >= 0:
                m = objective(space.get(row))
                value = m.value if m.ok else None
            else:
                value = None  # invalid index vector
            seen[key] = value
            order.append(key)
    finally:
        gen.close()
    return order


def evaluator_order(history) -> list[Any]:
    return [r.row if r.row >= 0 else tuple(int(x) for x in r.measurement.params.values()) for r in history.records]


def _keys(space, history) -> list[Any]:
    return [proposal_key(space, r.row if r.row >= 0 else np.asarray(space.value_indices(r.params)))[0]
            for r in history.records]


def _same_order(space, objective, name: Any, seed: int, budget: int, seeds=(), profiler=None) -> None:
    ref = make_strategy(name, space, seed=seed)
    new = make_strategy(name, space, seed=seed)
    if profiler is not None:
        ref.profiler = new.profiler = profiler
    expected = sequential_reference(space, objective, ref, budget, seeds)
    history = Evaluator(space, objective, budget=budget, seeds=seeds, batch_size=1).run(new)
    assert _keys(space, history) == expected, f"{name} seed {seed}: batch size 1 changed the evaluation order"
    assert len(history.strategy_seconds) >= len(history.records) - len(seeds)  # one per proposal, free ones too


@pytest.mark.parametrize("name", ALL)
def test_batch_size_one_reproduces_the_sequential_order(name: str) -> None:
    space = sparse_space()
    objective = bowl(space, fail=lambda v: v[3] == 5)
    spec = LIGHT.get(name, name)
    for seed in (0, 1):
        _same_order(space, objective, spec, seed, 60)
    _same_order(space, bowl(space), spec, 2, 40, seeds=[3, 17])


# the same code path at a fraction of the cost: LFBO's 32-tree forest refitted along 440 evaluations took 65 s
LIGHT: dict[str, Any] = {"lfbo": {"name": "lfbo", "trees": 4}}


@pytest.mark.parametrize("name", ["genetic:constraint_aware=false", "diff_evo:constraint_aware=false"])
def test_batch_size_one_reproduces_unaware_orders_with_invalid_proposals(name: str) -> None:
    strategy, flag = name.split(":")
    space = sparse_space()
    objective = bowl(space)
    ref = make_strategy({"name": strategy, "constraint_aware": False}, space, seed=3)
    new = make_strategy({"name": strategy, "constraint_aware": False}, space, seed=3)
    expected = sequential_reference(space, objective, ref, 50)
    history = Evaluator(space, objective, budget=50).run(new)
    assert _keys(space, history) == expected
    assert any(r.row < 0 for r in history.records)  # invalid vectors were proposed and recorded


def _recorded(spaces_dir: Path, relative: str):
    path = spaces_dir / relative
    if not path.exists():
        pytest.skip(f"{path} not found")
    rec = datasets.load_dataset(path)

    def objective(params):
        return rec.measurement(rec.space.find(dict(params)), params)

    return rec, objective


@pytest.mark.parametrize("relative", ["kerneltuner/pnpoly_RTX_3090.json.gz", "t4/convolution_milo_A100.json.gz",
                                      "ktt/KTConvolutionOutput_3090.json.gz"])
def test_batch_size_one_reproduces_orders_on_recorded_spaces(spaces_dir: Path, relative: str) -> None:
    rec, objective = _recorded(spaces_dir, relative)
    profiler = (lambda p: rec.counters_of(rec.space.find(dict(p)))) if rec.counters else None
    for name in available_strategies():
        if name == "profile" and profiler is None:
            continue
        _same_order(rec.space, objective, name, 0, 50, profiler=profiler)
    if profiler is not None:  # the counter-guided strategy batches too (on the one recording with counters)
        strategy = make_strategy("profile", rec.space, seed=0)
        strategy.profiler = profiler
        sizes: list[int] = []
        history = Evaluator(rec.space, objective, budget=60, batch_size=4,
                            prefetch=lambda p: sizes.append(len(p))).run(strategy)
        assert len({r.row for r in history.records}) == 60 and max(sizes) == 4
        assert all(strategy.observed[r.row] == r.value for r in history.records)


# -- larger batches -----------------------------------------------------------------------------------------


class Spy:
    """An objective that checks the evaluator's batch discipline while it measures."""

    def __init__(self, space, objective):
        self.space, self.objective = space, objective
        self.prefetched: list[list[dict[str, Any]]] = []
        self.measured: list[dict[str, Any]] = []

    def prefetch(self, params: list[dict[str, Any]]) -> None:
        self.prefetched.append([dict(p) for p in params])

    def __call__(self, params) -> Measurement:
        self.measured.append(dict(params))
        return self.objective(params)


@pytest.mark.parametrize("batch_size", [4, 16])
@pytest.mark.parametrize("name", ALL)
def test_batches_are_correct_for_every_strategy(name: str, batch_size: int) -> None:
    space = sparse_space()
    objective = bowl(space, fail=lambda v: v[3] == 5)
    spy = Spy(space, objective)
    strategy = make_strategy(name, space, seed=5)
    history = Evaluator(space, spy, budget=80, batch_size=batch_size, prefetch=spy.prefetch).run(strategy)
    rows = [r.row for r in history.records]
    assert len(rows) == 80 or history.stop_reason == "strategy finished"
    assert len(set(rows)) == len(rows), "a configuration was evaluated twice"
    for batch in spy.prefetched:
        assert 1 <= len(batch) <= batch_size
        assert all(space.find(p) >= 0 for p in batch)
    assert spy.prefetched and all(any(p == m for b in spy.prefetched for p in b) for m in spy.measured)
    for r in history.records:  # the strategy's record holds the truth, lies corrected
        assert strategy.observed[r.row] == r.value
    assert history.best is not None


def test_larger_batches_keep_more_configurations_pending() -> None:
    space = sparse_space()
    seen: list[int] = []

    def prefetch(params: list[dict[str, Any]]) -> None:
        seen.append(len(params))

    for name in ("random", "bayes", "genetic", "simulated_annealing", "tpe"):
        seen.clear()
        Evaluator(space, bowl(space), budget=60, batch_size=8, prefetch=prefetch).run(make_strategy(name, space, seed=0))
        assert max(seen) == 8, f"{name} never filled a batch of 8: {seen}"


def test_results_may_arrive_in_any_order_and_lies_are_corrected() -> None:
    space = sparse_space()
    objective = bowl(space)
    strategy = make_strategy("tpe", space, seed=1)
    search = BatchSearch(strategy, budget=40, batch_size=5)
    told = 0
    while not search.finished and told < 40:
        asked = search.ask()
        pending = search.pending
        assert len(pending) <= 5 and len({proposal_key(space, p)[0] for p in pending}) == len(pending)
        if not pending:
            break
        last = pending[-1]  # the newest first: out of order
        value = objective(space.get(int(last))).value
        search.tell(last, value)
        told += 1
        assert strategy.observed[int(last)] == value
    assert told == 40 and search.evaluated == 40
    with pytest.raises(KeyError, match="not pending"):
        search.tell(10**6 % len(space), 1.0) if 10**6 % len(space) not in strategy.observed else search.tell(-1, 1.0)


class Twice(Strategy):
    """Yields one batch of two, then waits for both; records what it received."""

    name = ""

    def search(self):
        self.received = yield Batch([0, 1])
        self.again = yield Batch([1, 2])  # 1 is known: only 2 is new


def test_a_batch_is_answered_with_its_values_in_order() -> None:
    space = sparse_space()
    objective = bowl(space)
    strategy = Twice(space, seed=0)
    search = BatchSearch(strategy, budget=10, batch_size=1)
    assert search.ask(4) == [0, 1]  # a strategy's batch is handed out whole when there is room
    assert search.ask(4) == []  # it waits for both values
    search.tell(1, 2.0)
    search.tell(0, 3.0)
    assert search.ask(4) == [2]
    search.tell(2, 5.0)
    assert search.ask(4) == [] and search.finished
    assert strategy.received == [3.0, 2.0] and strategy.again == [2.0, 5.0]
    assert strategy.observed == {0: 3.0, 1: 2.0, 2: 5.0}


def test_batch_size_must_be_positive() -> None:
    space = sparse_space()
    with pytest.raises(ValueError, match="batch_size"):
        Evaluator(space, bowl(space), batch_size=0)
    with pytest.raises(ValueError, match="batch_size"):
        BatchSearch(make_strategy("random", space), budget=5, batch_size=True)


class _Runner:
    """The least a runner needs for ``tune``: a bowl over x and y."""

    name = "fake"

    def device(self) -> DeviceInfo:
        return DeviceInfo(model="Fake", kind="cpu")

    def constants(self) -> dict[str, Any]:
        return {}

    def evaluate(self, params, keep_outputs: bool = False) -> Measurement:
        value = float((params["x"] - 3) ** 2 + (params["y"] - 2) ** 2 + 1)
        return Measurement(params=dict(params), value=value, samples=[value] * 3)


def test_tune_passes_batch_size_and_prefetch_through() -> None:
    calls: list[int] = []
    result = tune(_Runner(), {"x": list(range(8)), "y": list(range(8))}, strategy="random", budget=20, seed=0,
                  batch_size=4, prefetch=lambda params: calls.append(len(params)), keep_outputs=False)
    assert result.evaluations == 20 and max(calls) == 4


def _truths(history) -> dict[int, float | None]:
    return {r.row: r.value for r in history.records}


def test_model_based_strategies_learn_the_truth_of_every_stand_in() -> None:
    """Pending results are stood in for by a failure; the models must end up holding the measured values."""
    space = sparse_space()
    objective = bowl(space, fail=lambda v: v[3] == 5)

    bayes = make_strategy("bayes", space, seed=3)
    truth = _truths(Evaluator(space, objective, budget=70, batch_size=8).run(bayes))
    assert sorted(bayes.failed_rows) == sorted(r for r, v in truth.items() if v is None and r in bayes.failed_rows)
    assert all(truth[r] is None for r in bayes.failed_rows)
    told = {r: v for r, v in truth.items() if v is not None}
    # every valid value the GP learnt is the measured one, and nothing measured valid is left as a failure
    assert bayes.observed_values and all(told[r] == v for r, v in bayes.observed_values.items())
    learnt = set(bayes.observed_values) | set(bayes.failed_rows)
    assert all(r in bayes.observed_values for r in learnt if truth.get(r) is not None)
    assert bayes.failure_model.failures == len(bayes.failed_rows)

    tpe = make_strategy("tpe", space, seed=3)
    truth = _truths(Evaluator(space, objective, budget=70, batch_size=8).run(tpe))
    for row, i in tpe._obs_of_row.items():
        value = tpe._obs_value[i]
        assert (truth[row] is None and np.isnan(value)) or value == truth[row]


def test_shrinking_sample_learns_the_truth_of_every_stand_in() -> None:
    space = sparse_space()
    strategy = make_strategy("shrinking_sample", space, seed=2)
    truth = _truths(Evaluator(space, bowl(space, fail=lambda v: v[3] == 5), budget=60, batch_size=8).run(strategy))
    seen = np.flatnonzero(strategy._seen)
    assert len(seen) and all((truth[r] is None and np.isnan(strategy._vals[r])) or strategy._vals[r] == truth[r]
                             for r in seen.tolist() if r in truth)


def test_auto_batches_its_model_phase_and_its_walk() -> None:
    space = sparse_space()
    strategy = make_strategy("auto", space, seed=0)
    sizes: list[int] = []
    history = Evaluator(space, bowl(space), budget=80, batch_size=8, prefetch=lambda p: sizes.append(len(p))).run(strategy)
    assert len(history.records) == 80 and max(sizes) == 8
    walk = strategy.delegate.phases[1]
    for row, i in walk._model._obs_of_row.items():  # the guide saw the truths of the model phase's stand-ins
        value = walk._model._obs_value[i]
        assert (strategy.observed[row] is None and np.isnan(value)) or value == strategy.observed[row]


def test_a_chain_hands_over_only_when_the_first_phase_results_are_in() -> None:
    """Batching, the walk must start from the best of the model phase's results, not of the few told so far."""
    space = sparse_space()
    strategy = make_strategy("auto", space, seed=4)
    chain = strategy.delegate
    walk = chain.phases[1]
    at_start: dict[int, float | None] = {}
    original = walk.search

    def search():
        at_start.update(chain.observed)
        return (yield from original())

    walk.search = search
    history = Evaluator(space, bowl(space, fail=lambda v: v[3] == 5), budget=60, batch_size=8).run(strategy)
    first_phase = [r for r in history.records[:20]]
    assert all(at_start[r.row] == r.value for r in first_phase)  # no stand-in left when the walk begins
