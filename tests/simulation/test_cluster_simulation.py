"""D devices without Ray: the simulated cluster clock, the pending depth for D devices, the fleet evaluator's
loop on a fake fleet, the one-model check, and the benchmark's --devices."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from pytest_autotune.engine.cluster import ClusterError, ClusterSpec, check_same_model, parse_cluster
from pytest_autotune.engine.fleet import FleetEvaluator
from pytest_autotune.engine.pipeline_depth import PipelineDepth
from pytest_autotune.datasets import load_dataset
from pytest_autotune.errors import SpecError
from pytest_autotune.results import FailureKind, Measurement
from pytest_autotune.execution.device import DeviceInfo
from pytest_autotune.execution.remote import runner_recipe
from pytest_autotune.simulation import Pipeline, simulate_fleet_search, simulate_search
from pytest_autotune.simulation.replay import ReplayRunner
from pytest_autotune.space import SearchSpace
from pytest_autotune.strategies import make_strategy
from tests.simulation.test_simulate import Fixed, tiny_space

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks import bench_time_to_solution as bench  # noqa: E402
from tests.bench.test_bench_time_to_solution import toy_cache  # noqa: E402
from tests.datasets.test_datasets import write_json  # noqa: E402

# -- the simulated clock with D devices -------------------------------------------------------------------------


def _run(rec, devices: int, fleet: bool, strategy: str = "auto", seed: int = 3, workers: int = 4, budget: int = 120,
         target: float | None = 1.01):
    runner = ReplayRunner(rec, clock=Pipeline(workers * devices, devices=devices, host_waits=not fleet))
    runner.charger.timer = lambda: 0.0  # no measured host time: the two drivers must agree exactly
    most = devices * (workers + 1)
    simulate = simulate_fleet_search if fleet else simulate_search
    return simulate(make_strategy(strategy, rec.space, seed=seed), runner, budget, batch_size=most,
                    depth=PipelineDepth(most, devices=devices), early_stop=True,
                    stop_below=None if target is None else rec.optimum * target)


def test_one_device_of_the_cluster_clock_is_todays_clock_row_for_row(spaces_dir):
    rec = load_dataset(spaces_dir / "kerneltuner" / "pnpoly_RTX_3090.json.gz")
    for seed in (0, 1):
        today = _run(rec, 1, fleet=False, seed=seed, budget=60, target=None)
        cluster = _run(rec, 1, fleet=True, seed=seed, budget=60, target=None)
        assert len(today.rows) == 60
        assert cluster.rows == today.rows and cluster.values == today.values
        assert cluster.done_s == today.done_s and cluster.wall_s == today.wall_s
        assert cluster.busy_s == today.busy_s


def test_one_device_equals_todays_clock_on_the_tiny_space(tmp_path):
    rec = tiny_space(tmp_path)
    rows = [rec.row_of({"c": c}) for c in (2, 3, 1)]
    runs = []
    for fleet in (False, True):
        runner = ReplayRunner(rec, clock=Pipeline(2, host_waits=not fleet))
        runner.charger.host_time = False
        simulate = simulate_fleet_search if fleet else simulate_search
        runs.append(simulate(Fixed(rec.space, rows), runner, budget=10, batch_size=3))
    assert runs[0].rows == runs[1].rows and runs[0].done_s == pytest.approx(runs[1].done_s)


def test_two_devices_time_two_candidates_at_once(tmp_path):
    pipe = Pipeline(2, devices=2, host_waits=False)
    for key in "ab":
        pipe.compile(key, 0.1)
    assert pipe.measure("a", 0.5) == pytest.approx((0.1, 0.6)) and pipe.measure("b", 0.5) == pytest.approx((0.1, 0.6))
    assert pipe.now == 0.0  # the host did not wait: it waits for the first result when it wants it
    pipe.wait_until(0.6)
    assert pipe.now == 0.6 and {s.where for s in pipe.spans if s.what == "device"} == {"device-0", "device-1"}
    serial = Pipeline(2, devices=1, host_waits=False)
    for key in "ab":
        serial.compile(key, 0.1)
    serial.measure("a", 0.5)
    assert serial.measure("b", 0.5) == pytest.approx((0.6, 1.1))  # one device: the second queues
    rec = tiny_space(tmp_path)
    rows = [rec.row_of({"c": c}) for c in (1, 2)]
    runner = ReplayRunner(rec, clock=Pipeline(2, devices=2, host_waits=False))
    runner.charger.host_time = False
    run = simulate_fleet_search(Fixed(rec.space, rows), runner, budget=10, batch_size=2)
    # both compile at once (100 and 300 ms) and each goes to its own device (21 and 17 ms)
    assert run.rows == rows and run.done_s == pytest.approx([0.121, 0.317])


def test_more_devices_keep_more_running(spaces_dir):
    rec = load_dataset(spaces_dir / "kerneltuner" / "gemm_RTX_3090.json.gz")
    one, eight = _run(rec, 1, fleet=True, strategy="random"), _run(rec, 8, fleet=True, strategy="random")
    # random search proposes without waiting: eight devices do the same evaluations in a fraction of the time
    assert eight.done_s[-1] < 0.3 * one.done_s[min(len(one.done_s), len(eight.done_s)) - 1]


def test_the_fleet_driver_needs_a_clock_whose_host_does_not_wait(tmp_path):
    rec = tiny_space(tmp_path)
    with pytest.raises(ValueError, match="host_waits"):
        simulate_fleet_search(Fixed(rec.space, [0]), ReplayRunner(rec, clock=Pipeline(1)), budget=2)
    with pytest.raises(ValueError, match="devices must be a positive integer"):
        Pipeline(1, devices=0)


def test_pipeline_depth_for_d_devices():
    depth = PipelineDepth(40, warmup=1, devices=4)
    depth.observe(1.0, 0.5)  # compile twice the device time: 1 + 2 per device
    assert depth.depth == 12 and depth.describe()["devices"] == 4
    depth.devices = 20
    assert depth.depth == 40  # at most ``most``
    single = PipelineDepth(9, warmup=1)
    single.observe(1.0, 0.5)
    assert single.depth == 3  # one device: as before
    with pytest.raises(ValueError, match="devices"):
        PipelineDepth(4, devices=0)


# -- the fleet evaluator on a fake fleet --------------------------------------------------------------------------


class FakeFleet:
    """Two devices; results come back newest first (any order must do); records what ran where."""

    def __init__(self, devices: int = 2, values=lambda p: float(p["x"])):
        self.devices = devices
        self.values = values
        self.running: dict[int, dict] = {}
        self.prefetched: list[dict] = []
        self.started: list[dict] = []
        self.max_running = 0
        self._ticket = 0

    def idle(self) -> int:
        return self.devices - len(self.running)

    def prefetch(self, configurations):
        self.prefetched.extend(configurations)

    def first_ready(self, configurations):
        return len(configurations) - 1  # the newest compiled first: not proposal order

    def start(self, params, stop):
        self._ticket += 1
        self.running[self._ticket] = dict(params)
        self.started.append(dict(params))
        self.max_running = max(self.max_running, len(self.running))
        return self._ticket

    def next_result(self):
        ticket = max(self.running)
        params = self.running.pop(ticket)
        value = self.values(params)
        if value is None:
            return ticket, Measurement.failed(params, FailureKind.RUNTIME, "lost twice")
        return ticket, Measurement(params, value, [value])


def test_the_fleet_evaluator_keeps_every_device_busy_within_the_budget():
    space = SearchSpace({"x": list(range(30))})
    fleet = FakeFleet(devices=3)
    history = FleetEvaluator(space, fleet, budget=10, batch_size=6).run(make_strategy("random", space, seed=1))
    assert len(history.records) == 10 and fleet.max_running == 3
    assert len(fleet.started) == 10  # never more started than the budget allows
    assert {r.row for r in history.records} == {space.find(p) for p in fleet.started}
    assert history.stop_reason == "budget of evaluations spent"


def test_the_fleet_evaluator_records_failures_and_seeds():
    space = SearchSpace({"x": list(range(20))})
    fleet = FakeFleet(values=lambda p: None if p["x"] == 5 else float(p["x"]))
    seeds = [space.find({"x": 5}), space.find({"x": 7})]
    history = FleetEvaluator(space, fleet, budget=8, batch_size=4, seeds=seeds).run(
        make_strategy("random", space, seed=2))
    assert [r.row for r in history.records[:2]] == seeds[::-1] or {r.row for r in history.records[:2]} == set(seeds)
    failed = [r for r in history.records if r.measurement.failure is FailureKind.RUNTIME]
    assert [r.params for r in failed] == [{"x": 5}]  # recorded as a failure, never dropped
    assert len(history.records) == 8


def test_the_fleet_evaluator_answers_cached_rows_without_a_device():
    space = SearchSpace({"x": list(range(6))})
    cache = {space.find({"x": x}): Measurement({"x": x}, float(x), [float(x)]) for x in range(6)}
    fleet = FakeFleet()
    history = FleetEvaluator(space, fleet, budget=6, batch_size=3, cache=cache).run(
        make_strategy("random", space, seed=0))
    assert len(history.records) == 6 and fleet.started == []


# -- one model, parsing -------------------------------------------------------------------------------------------


def test_devices_of_different_models_are_refused_naming_them():
    infos = {f"n{i}": DeviceInfo("NVIDIA A100", "cuda") for i in range(3)}
    assert check_same_model(infos) == "NVIDIA A100"
    infos["n9"] = DeviceInfo("NVIDIA H100", "cuda")
    with pytest.raises(ClusterError, match=r"3 x 'NVIDIA A100', 1 x 'NVIDIA H100'"):
        check_same_model(infos)


def test_cluster_values():
    assert parse_cluster("ray") == ClusterSpec() and parse_cluster(True) == ClusterSpec()
    assert parse_cluster("10.0.0.1:6379").address == "10.0.0.1:6379"
    with pytest.raises(SpecError, match="cluster=3"):
        parse_cluster(3)


def test_a_replay_runner_on_a_simulated_clock_cannot_travel(tmp_path):
    rec = tiny_space(tmp_path)
    assert runner_recipe(ReplayRunner(rec)).build() is not None
    with pytest.raises(SpecError, match="simulated clock"):
        runner_recipe(ReplayRunner(rec, clock=1))


# -- the benchmark --------------------------------------------------------------------------------------------------


def test_the_benchmark_scales_over_devices(tmp_path, capsys):
    spaces = tmp_path / "spaces"
    write_json(spaces / "toy_A.json", toy_cache(40))
    out = tmp_path / "tts.json"
    code = bench.main(["--spaces", str(spaces), "--workers", "2", "--devices", "1,4", "--runs", "2", "--strategies",
                       "random", "--kernel-tuner", "none", "--no-optuna", "--jobs", "1", "--json", str(out),
                       "--no-anchor-cache"])
    assert code == 0
    assert "scaling over D devices" in capsys.readouterr().out
    data = json.loads(out.read_text())
    rows = {r["label"]: r for r in data["scaling"]}
    assert set(rows) == {"random@2", "random@2x4"} and rows["random@2x4"]["devices"] == 4
    assert rows["random@2x4"]["speedup_over_1_device"] > 1.5  # random search gains from every device
    assert 0 < rows["random@2x4"]["score_at_B_median"] <= 1
    with pytest.raises(SystemExit, match="--devices"):
        bench.parse_devices("0,2")
