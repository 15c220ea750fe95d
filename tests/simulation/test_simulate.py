"""The simulated clock: recorded costs per format, the pipeline's arithmetic, the replay runner on the clock."""
from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_autotune.datasets import load_dataset
from pytest_autotune.results import FailureKind
from pytest_autotune.errors import SpecError
from pytest_autotune.simulation.replay import ReplayRunner
from pytest_autotune.simulation import Charge, CostModel, Pipeline, replay_sequence, simulate_search
from pytest_autotune.strategies.base import Strategy
from tests.datasets.test_datasets import kt_doc, ktt_doc, make_t4_tree, t4_doc, write_json

# -- reading the costs of each format ------------------------------------------------------------------------


def test_t4_costs_come_from_times_in_the_files_unit(tmp_path):
    doc = t4_doc(timeunit="seconds")
    for res in doc["results"]:
        res["times"]["validation"] = 0.5
    doc["results"][0]["times"].pop("compilation")  # one record without its compile time
    rec = load_dataset(make_t4_tree(tmp_path, doc))
    costs = rec.costs
    assert costs.fields == {"compile": "times.compilation", "verify": "times.validation",
                            "framework": "times.framework"}
    row = rec.row_of({"bx": 1, "tile": 1})  # the first record
    assert math.isnan(costs.compile[row]) and costs.verify[row] == 500.0 and costs.framework[row] == 1000.0
    other = rec.row_of({"bx": 2, "tile": 1})
    assert costs.of(other) == {"compile": 10_000.0, "verify": 500.0, "framework": 1000.0}  # seconds -> ms
    assert rec.samples_of(other).tolist() == [20_500.0, 21_000.0, 21_500.0]  # the timed runs, same unit


def test_kernel_tuner_costs_and_missing_fields(tmp_path):
    doc = kt_doc()
    entry = doc["cache"]["2,x"]
    entry.update(verification_time=3.0, framework_time=4.0, compile_time=2.5)
    doc["cache"]["4,y"]["compile_time"] = "n/a"  # not a number: missing, not an error
    rec = load_dataset(write_json(tmp_path / "kt.json", doc))
    row = rec.row_of({"a": 2, "mode": "x"})
    assert rec.costs.of(row) == {"compile": 2.5, "verify": 3.0, "framework": 4.0}
    assert rec.costs.of(rec.row_of({"a": 1, "mode": "x"})) == {"compile": 1.0}
    assert math.isnan(rec.costs.compile[rec.row_of({"a": 4, "mode": "y"})])
    assert rec.costs.fields["compile"] == "compile_time" and rec.costs.recorded("verify")


def test_ktt_costs_split_total_overhead_in_microseconds(tmp_path):
    doc = ktt_doc()
    for res in doc["Results"]:
        res.update(TotalOverhead=10_000.0, DataMovementOverhead=1_000.0, ValidationOverhead=500.0,
                   SearcherOverhead=250.0)
    rec = load_dataset(write_json(tmp_path / "ktt.json.gz", doc))
    row = rec.row_of({"BX": 8, "RO": 0})
    # compile = total minus the named parts (data movement, validation, KTT's searcher), ms
    assert rec.costs.of(row) == {"compile": 8.25, "verify": 0.5, "framework": 1.0}
    failed = rec.row_of({"BX": 32, "RO": 1})
    assert rec.failures[failed] is FailureKind.RUNTIME and rec.costs.compile[failed] == 8.25


def test_a_file_without_costs_is_charged_zero_and_says_so(tmp_path):
    doc = kt_doc()
    for entry in doc["cache"].values():
        entry.pop("compile_time")
    rec = load_dataset(write_json(tmp_path / "kt.json", doc))
    model = CostModel(rec)
    assert any(a.startswith("compile: not recorded") for a in model.assumptions)
    charge = model.charge(rec.row_of({"a": 1, "mode": "x"}))
    assert charge.compile == 0.0 and charge.verify == 0.0
    assert charge.runs == pytest.approx((0.9e-3, 1e-3, 1.1e-3))  # ms -> s


def test_a_row_missing_a_recorded_stage_gets_the_median_of_the_others(tmp_path):
    doc = kt_doc()
    for i, entry in enumerate(doc["cache"].values()):
        entry["compile_time"] = float(i + 1)  # 1..6 ms
    doc["cache"]["4,y"].pop("compile_time")  # the others: 1..5, median 3
    doc["cache"]["4,y"].pop("times")  # and no timed runs: one run of its recorded time
    rec = load_dataset(write_json(tmp_path / "kt.json", doc))
    model = CostModel(rec)
    charge = model.charge(rec.row_of({"a": 4, "mode": "y"}))
    assert charge.compile == pytest.approx(3e-3) and charge.runs == pytest.approx((4.25e-3,))
    assert any("median" in a for a in model.assumptions) and any("one run" in a for a in model.assumptions)


# -- a tiny space with exact costs ---------------------------------------------------------------------------


def tiny_space(tmp_path):
    """Three configurations, costs in whole milliseconds; c=3 fails to compile."""
    cache = {
        "1": {"c": 1, "time": 5.0, "times": [5.0, 5.0], "compile_time": 100.0, "verification_time": 10.0,
              "framework_time": 1.0},
        "2": {"c": 2, "time": 2.0, "times": [2.0, 2.0, 2.0], "compile_time": 300.0, "verification_time": 10.0,
              "framework_time": 1.0},
        "3": {"c": 3, "time": "CompilationFailedConfig", "compile_time": 50.0, "verification_time": 0.0,
              "framework_time": 1.0},
    }
    doc = {"tune_params_keys": ["c"], "tune_params": {"c": [1, 2, 3]}, "cache": cache, "device_name": "Tiny"}
    return load_dataset(write_json(tmp_path / "tiny.json", doc))


def test_charges_of_the_tiny_space(tmp_path):
    rec = tiny_space(tmp_path)
    model = CostModel(rec)
    one = model.charge(rec.row_of({"c": 1}))
    assert one == Charge(compile=0.1, verify=0.01, runs=(0.005, 0.005), framework=0.001)
    assert one.device() == pytest.approx(0.021) and one.sequential() == pytest.approx(0.121)
    assert one.device(iterations=1) == pytest.approx(0.016)  # the early-stopping hook: one timed run made
    failed = model.charge(rec.row_of({"c": 3}))
    assert not failed.reaches_device and failed.device() == 0.0 and failed.sequential() == pytest.approx(0.05)
    assert model.charge(-1) == Charge(reaches_device=False)  # outside the space: rejected before compiling


def test_sequential_replay_adds_every_cost_in_turn(tmp_path):
    rec = tiny_space(tmp_path)
    rows = [rec.row_of({"c": c}) for c in (3, 1, 2)]
    run = replay_sequence(rec, rows, [0.002, 0.001, 0.0])
    # c=3: think 2 ms + compile 50 ms, no device; c=1: think 1 + 100 + 10 + 10 + 1; c=2: 300 + 10 + 6 + 1
    assert run.done_s == pytest.approx([0.052, 0.174, 0.491])
    assert run.values == [None, 5.0, 2.0]
    assert run.time_to(2.0 * 1.05) == pytest.approx(0.491) and run.time_to(1.0) is None
    assert run.busy_s == pytest.approx({"compile": 0.45, "device": 0.038, "host": 0.003})


def test_two_workers_compile_ahead_while_the_device_works(tmp_path):
    rec = tiny_space(tmp_path)
    pipe = Pipeline(workers=2)
    model = CostModel(rec)
    r1, r2, r3 = (rec.row_of({"c": c}) for c in (1, 2, 3))
    for row in (r1, r2, r3):  # all three proposed at t = 0
        pipe.compile(row, model.charge(row).compile)
    assert pipe.measure(r1, model.charge(r1).device()) == pytest.approx((0.1, 0.121))
    assert pipe.measure(r2, model.charge(r2).device()) == pytest.approx((0.3, 0.317))
    # c=3 waited for the first free worker (c=1's, free at 0.1): compiled 0.1 .. 0.15, no device time
    assert pipe.measure(r3, 0.0, reaches_device=False) == pytest.approx((0.317, 0.317))
    compile3 = next(s for s in pipe.spans if s.key == r3 and s.what == "compile")
    assert (compile3.where, compile3.start, compile3.end) == ("compile-0", pytest.approx(0.1), pytest.approx(0.15))
    with pytest.raises(KeyError):
        pipe.measure(12345, 1.0)
    with pytest.raises(ValueError, match="workers"):
        Pipeline(0)


class Fixed(Strategy):
    """Proposes the given rows in order (a stand-in strategy with no compute of its own to speak of)."""

    name = "fixed"

    def __init__(self, space, rows):
        super().__init__(space, seed=0)
        self.rows = rows

    def search(self):
        for row in self.rows:
            yield row


def test_the_replay_runner_on_the_clock_pipelines_compiles_behind_the_device(tmp_path):
    rec = tiny_space(tmp_path)
    rows = [rec.row_of({"c": c}) for c in (1, 2)]
    runner = ReplayRunner(rec, clock=2)
    runner.charger.host_time = False  # exact arithmetic: no measured host time
    runner.prefetch([rec.params_of(r) for r in rows])  # both proposed at once (batch of two)
    m1 = runner.evaluate(rec.params_of(rows[0]))
    m2 = runner.evaluate(rec.params_of(rows[1]))
    assert m1.extra["simulated"]["done_s"] == pytest.approx(0.121)
    assert m2.extra["simulated"]["device_start_s"] == pytest.approx(0.3)  # its compile overlapped c=1's device
    assert runner.simulated_seconds == pytest.approx(0.317)  # sequentially: 0.121 + 0.317 = 0.438
    device1 = next(s for s in runner.charger.pipeline.spans if s.what == "device")
    compile2 = next(s for s in runner.charger.pipeline.spans if s.what == "compile" and s.key == rows[1])
    assert compile2.start < device1.end and compile2.end > device1.start  # overlap: the point of the pipeline
    assert m2.extra["simulated"]["stages_s"] == pytest.approx({"compile": 0.3, "verify": 0.01, "runs": 0.006,
                                                              "framework": 0.001})
    failed = runner.evaluate({"c": 3})
    assert failed.failure is FailureKind.COMPILE and failed.extra["simulated"]["iterations"] == 0


def test_without_a_clock_the_replay_runner_is_unchanged(tmp_path):
    rec = tiny_space(tmp_path)
    runner = ReplayRunner(rec)
    runner.prefetch([{"c": 1}])  # a no-op
    m = runner.evaluate({"c": 1})
    assert "simulated" not in m.extra and runner.simulated_seconds == 0.0
    with pytest.raises(SpecError, match="clock"):
        ReplayRunner(rec, clock=0)


def test_simulate_search_with_one_worker_is_the_sequential_sum(tmp_path):
    rec = tiny_space(tmp_path)
    rows = [rec.row_of({"c": c}) for c in (3, 1, 2)]
    runner = ReplayRunner(rec, clock=1)
    run = simulate_search(Fixed(rec.space, rows), runner, budget=10)
    assert run.rows == rows and run.values == [None, 5.0, 2.0]
    assert run.stop_reason == "strategy finished"
    host = run.busy_s["host"]
    assert 0 <= host < 0.05  # measured: the strategy and the loop, for real
    # the recorded costs in turn, plus host time (some of which overlaps a compile started just before)
    assert 0.05 + 0.121 + 0.317 <= run.wall_s <= 0.05 + 0.121 + 0.317 + host + 1e-12


def test_simulate_search_stops_at_the_target_and_at_the_budget(tmp_path):
    rec = tiny_space(tmp_path)
    rows = [rec.row_of({"c": c}) for c in (1, 2, 3)]
    assert len(simulate_search(Fixed(rec.space, rows), ReplayRunner(rec, clock=1), budget=10,
                               stop_below=5.0).rows) == 1
    assert len(simulate_search(Fixed(rec.space, rows), ReplayRunner(rec, clock=1), budget=2).rows) == 2
    with pytest.raises(ValueError, match="clock"):
        simulate_search(Fixed(rec.space, rows), ReplayRunner(rec), budget=2)


def test_real_spaces_have_costs_for_every_stage(spaces_dir):
    rec = load_dataset(spaces_dir / "kerneltuner" / "pnpoly_RTX_3090.json.gz")
    model = CostModel(rec)
    assert model.assumptions == []
    charge = model.charge(rec.best_row)
    assert 0.0 < charge.compile < 1.0 and len(charge.runs) == 10  # ~0.1 s compile, ten timed runs
    assert np.isclose(sum(charge.runs), float(np.sum(rec.samples_of(rec.best_row))) / 1e3)


def test_the_product_evaluator_drives_the_clock_as_simulate_search_does(tmp_path):
    """Evaluator(batch_size, prefetch=runner.prefetch) and simulate_search give the same simulated timeline."""
    from pytest_autotune.engine.evaluator import Evaluator

    rec = tiny_space(tmp_path)
    rows = [rec.row_of({"c": c}) for c in (2, 3, 1)]
    via_evaluator = ReplayRunner(rec, clock=2)
    via_evaluator.charger.host_time = False
    history = Evaluator(rec.space, via_evaluator.evaluate, budget=10, batch_size=3,
                        prefetch=via_evaluator.prefetch, first_ready=via_evaluator.first_ready).run(Fixed(rec.space, rows))
    # c=2 (300 ms) and c=3 (50 ms) compile at once, c=1 after c=3 on the same worker (50 .. 150 ms). The device
    # takes whichever is compiled first: c=3 at 50 ms (failed: no device time), c=1 150 .. 171, c=2 300 .. 317
    assert [r.row for r in history.records] == [rows[1], rows[2], rows[0]]
    direct = ReplayRunner(rec, clock=2)
    direct.charger.host_time = False
    run = simulate_search(Fixed(rec.space, rows), direct, budget=10, batch_size=3)
    assert run.rows == [r.row for r in history.records]
    done = [r.measurement.extra["simulated"]["done_s"] for r in history.records]
    assert done == pytest.approx(run.done_s)
    assert run.done_s == pytest.approx([0.05, 0.171, 0.317])
    assert via_evaluator.simulated_seconds == pytest.approx(0.317)  # sequentially: 0.317 + 0.05 + 0.121 = 0.488
    # in proposal order the device waits for c=2 first: c=2 300 .. 317, c=3 at once, c=1 317 .. 338
    in_order = ReplayRunner(rec, clock=2)
    in_order.charger.host_time = False
    run = simulate_search(Fixed(rec.space, rows), in_order, budget=10, batch_size=3, ready_first=False)
    assert run.rows == rows and run.done_s == pytest.approx([0.317, 0.317, 0.338])


def test_a_depth_of_one_on_the_clock_is_sequential(tmp_path):
    from pytest_autotune.engine.pipeline_depth import PipelineDepth

    class One(PipelineDepth):
        seen: list = []

        @property
        def depth(self):
            self.seen.append(self._observed)
            return 1  # never more than one pending: sequential

    rec = tiny_space(tmp_path)
    rows = [rec.row_of({"c": c}) for c in (1, 2, 3)]
    runner = ReplayRunner(rec, clock=4)
    runner.charger.host_time = False
    depth = One(5, warmup=0)
    run = simulate_search(Fixed(rec.space, rows), runner, budget=10, batch_size=5, depth=depth)
    assert run.rows == rows and depth.seen[:3] == [0, 1, 2]  # sized before the start, then after each evaluation
    assert run.done_s == pytest.approx([0.121, 0.438, 0.488])  # no overlap: the sequential sums
    assert run.compile_s == pytest.approx([0.1, 0.3, 0.05]) and run.device_s == pytest.approx([0.021, 0.017, 0.0])


def test_early_stopping_on_the_clock_charges_only_the_runs_made(spaces_dir):
    # A real recording with per-run times: the same evaluation order with and without early stopping.
    path = spaces_dir / "kerneltuner" / "pnpoly_RTX_3090.json.gz"
    if not path.exists():
        pytest.skip(f"{path} not found")
    rec = load_dataset(path)
    order = [int(r) for r in np.argsort(rec.times)[::-1] if np.isfinite(rec.times[r])][:20]
    order = [int(np.nanargmin(rec.times))] + order  # the best first: everything after it is hopeless
    full = simulate_search(Fixed(rec.space, order), ReplayRunner(rec, clock=1), budget=len(order))
    stopped = simulate_search(Fixed(rec.space, order), ReplayRunner(rec, clock=1), budget=len(order),
                              early_stop=True)
    assert stopped.rows == full.rows  # the same configurations, in the same order
    assert sum(stopped.device_s) < 0.8 * sum(full.device_s)
    assert stopped.values[0] == full.values[0]  # the best was timed in full
