"""Early stopping: hopeless configurations are timed briefly, flagged, and never win nor are runners-up."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pytest

from pytest_autotune import tune
from pytest_autotune.lifecycle.settings import parse_marker
from pytest_autotune.measure.timing import EARLY_STOP_FACTOR, EARLY_STOP_RUNS, EarlyStop, MeasureOptions, time_runs
from pytest_autotune.results import FailureKind, Measurement
from pytest_autotune.runners import KernelSpec, backend_available, make_runner
from pytest_autotune.backends.callable_runner import CallableRunner
from pytest_autotune.execution.device import DeviceInfo
from pytest_autotune.simulation.replay import ReplayRunner
from pytest_autotune.lifecycle.scratch import ScratchCache
from pytest_autotune.space import SearchSpace
from pytest_autotune.engine.tuner import stops_early

FULL = MeasureOptions(warmup=0, min_iterations=7, max_iterations=7)
NEVER = EarlyStop(EARLY_STOP_RUNS, 1e12)  # nothing is that slow
ALWAYS = EarlyStop(EARLY_STOP_RUNS, 0.0)  # everything is


def counting_run(times: list[float]):
    calls = iter(times)
    return lambda: next(calls)


# -- the rule and the timing loop -----------------------------------------------------------------
def test_cutoff_is_factor_times_the_best_and_absent_before_anything_ran():
    assert EarlyStop.after_best(None) is None
    assert EarlyStop.after_best(float("nan")) is None
    stop = EarlyStop.after_best(2.0)
    assert stop == EarlyStop(EARLY_STOP_RUNS, EARLY_STOP_FACTOR * 2.0)
    assert stop.hopeless([7.0, 6.5, 6.1, 4.1, 0.1]) and not stop.hopeless([7.0, 3.0, 9.0, 9.0])  # the minimum decides
    assert not stop.hopeless([7.0] * (EARLY_STOP_RUNS - 1))  # fewer runs than it needs
    with pytest.raises(ValueError, match="runs"):
        EarlyStop(0, 1.0)


def test_time_runs_stops_after_k_hopeless_runs_and_only_then():
    slow = [10.0] * 7
    assert time_runs(counting_run(slow), FULL, stop=EarlyStop(3, 5.0)) == [10.0] * 3
    # one run below the cutoff among the first k: timed in full
    assert len(time_runs(counting_run([10.0, 4.0, 10.0, 10, 10, 10, 10]), FULL, stop=EarlyStop(3, 5.0))) == 7
    assert len(time_runs(counting_run(slow), FULL, stop=None)) == 7
    assert len(time_runs(counting_run(slow), FULL.with_(early_stop=False), stop=EarlyStop(3, 5.0))) == 7


# -- real runners ---------------------------------------------------------------------------------
def _launch(params: Mapping[str, Any]) -> list[np.ndarray]:
    return [np.full(4, params["x"], dtype=np.float32)]


def test_callable_runner_flags_a_stopped_configuration_and_keeps_what_it_measured():
    with CallableRunner(_launch, measure=FULL, device=DeviceInfo(model="cpu", kind="cpu")) as runner:
        stopped = runner.evaluate({"x": 1}, stop=ALWAYS)
        sound = runner.evaluate({"x": 1}, stop=NEVER)
        plain = runner.evaluate({"x": 1})
    assert stopped.ok and stopped.early_stopped and len(stopped.samples) == EARLY_STOP_RUNS
    assert stopped.value == pytest.approx(float(np.median(stopped.samples)))
    assert sound.ok and not sound.early_stopped and len(sound.samples) == 7
    assert not plain.early_stopped and len(plain.samples) == 7


C_KERNEL = r"""
void fill(float *x, int n) { for (int i = 0; i < n; i++) x[i] = (float)SCALE; }
"""


@pytest.mark.skipif(not backend_available("c"), reason="needs gcc")
@pytest.mark.parametrize("isolate", [True, False])
def test_c_runner_passes_the_cutoff_to_its_timing_loop(tmp_path, isolate):
    spec = KernelSpec(C_KERNEL, "fill", 64, [np.zeros(64, np.float32), np.int32(64)],
                      expected=[np.full(64, 2, np.float32), None])
    with make_runner(spec, cache_dir=tmp_path, measure=FULL, isolate=isolate) as runner:
        assert stops_early(runner)
        stopped = runner.evaluate({"SCALE": 2}, stop=ALWAYS)
        sound = runner.evaluate({"SCALE": 2}, stop=NEVER)
    assert stopped.ok and stopped.early_stopped and len(stopped.samples) == EARLY_STOP_RUNS
    assert sound.ok and not sound.early_stopped and len(sound.samples) == 7
    with make_runner(spec, cache_dir=tmp_path, measure=FULL.with_(early_stop=False), isolate=isolate) as runner:
        assert not stops_early(runner)
        full = runner.evaluate({"SCALE": 2}, stop=ALWAYS)
    assert not full.early_stopped and len(full.samples) == 7


# -- never a winner nor a runner-up -----------------------------------------------------------------
class PartialLooksBest:
    """Configuration x=0 is hopeless by its first runs, yet its partial median is the smallest of all."""

    name = "fake"
    measure = MeasureOptions()

    def __init__(self) -> None:
        self.stops: list[EarlyStop | None] = []

    def device(self) -> DeviceInfo:
        return DeviceInfo(model="fake", kind="cpu")

    def constants(self) -> dict[str, Any]:
        return {}

    def evaluate(self, params: Mapping[str, Any], keep_outputs: bool = False,
                 stop: EarlyStop | None = None) -> Measurement:
        self.stops.append(stop)
        x = params["x"]
        if x == 0 and stop is not None:
            return Measurement(dict(params), value=0.01, samples=[0.01] * 3, early_stopped=True)
        return Measurement(dict(params), value=1.0 + x, samples=[1.0 + x] * 7)

    def close(self) -> None:
        pass


def test_an_early_stopped_configuration_never_wins_nor_is_a_runner_up():
    space = SearchSpace({"x": [1, 0, 2, 3]})
    runner = PartialLooksBest()
    result = tune(runner, space=space, strategy="brute_force", budget=4, keep_outputs=False)
    stopped = [r for r in result.history.records if r.measurement.early_stopped]
    assert [r.params["x"] for r in stopped] == [0]
    assert result.params == {"x": 1}
    assert 0 not in [r.params["x"] for r in result.runners_up]
    assert all(r.params["x"] != 0 for r in result.history.ranked())
    assert result.history.best.params == {"x": 1} and np.nanmin(result.history.best_so_far()) == 2.0
    assert result.confirmed_samples({"x": 0}) is None  # not even a finalist
    # the first evaluation has no best to compare with; the others get 3x the best so far
    assert runner.stops[0] is None and runner.stops[1] == EarlyStop(EARLY_STOP_RUNS, EARLY_STOP_FACTOR * 2.0)


class IncumbentAlone(PartialLooksBest):
    """x=1 is fast; the others are hopeless once x=1 was timed (or fail: the older way to be alone)."""

    fail_others = False

    def evaluate(self, params: Mapping[str, Any], keep_outputs: bool = False,
                 stop: EarlyStop | None = None) -> Measurement:
        if params["x"] == 1:
            return Measurement(dict(params), value=1.0, samples=[1.0] * 7)
        if self.fail_others:
            return Measurement.failed(params, FailureKind.RUNTIME, "boom")
        assert stop is not None
        return Measurement(dict(params), value=9.0, samples=[9.0] * stop.runs, early_stopped=True)


@pytest.mark.parametrize("fail_others", [False, True])
def test_an_incumbent_left_alone_is_still_retimed_for_the_lock_decision(fail_others):
    runner = IncumbentAlone()
    runner.fail_others = fail_others
    result = tune(runner, space=SearchSpace({"x": [0, 1, 2]}), strategy="brute_force", budget=3,
                  keep_outputs=False, incumbent={"x": 1})
    assert [r.params for r in result.history.ranked()] == [{"x": 1}]
    assert result.params == {"x": 1} and result.confirmed_samples({"x": 1})  # else: "no longer runs"


def test_disabled_no_cutoff_reaches_the_runner():
    runner = PartialLooksBest()
    result = tune(runner, space=SearchSpace({"x": [1, 0, 2]}), strategy="brute_force", budget=3,
                  keep_outputs=False, early_stop=False)
    assert set(runner.stops) == {None} and result.params == {"x": 0}
    runner = PartialLooksBest()
    runner.measure = MeasureOptions(early_stop=False)
    assert not stops_early(runner)
    tune(runner, space=SearchSpace({"x": [1, 0, 2]}), strategy="brute_force", budget=3, keep_outputs=False)
    assert set(runner.stops) == {None}


def test_a_runner_without_the_stop_argument_is_never_asked_to_stop():
    class Plain(PartialLooksBest):
        def evaluate(self, params: Mapping[str, Any], keep_outputs: bool = False) -> Measurement:  # type: ignore[override]
            return super().evaluate(params)

    runner = Plain()
    assert not stops_early(runner)
    result = tune(runner, space=SearchSpace({"x": [1, 0, 2]}), strategy="brute_force", budget=3, keep_outputs=False)
    assert set(runner.stops) == {None} and result.params == {"x": 0}


# -- the recorded spaces: sound candidates are never stopped ----------------------------------------
def test_replay_returns_the_first_runs_of_a_hopeless_configuration(spaces_dir):
    runner = ReplayRunner(spaces_dir / "kerneltuner" / "pnpoly_RTX_3090.json.gz")
    rec = runner.recorded
    slow = int(np.nanargmax(rec.times))
    params = rec.params_of(slow)
    stopped = runner.evaluate(params, stop=EarlyStop.after_best(rec.optimum))
    assert stopped.early_stopped and stopped.samples == list(rec.samples_of(slow)[:EARLY_STOP_RUNS])
    best = runner.evaluate(rec.params_of(rec.best_row), stop=EarlyStop.after_best(rec.optimum))
    assert not best.early_stopped and len(best.samples) == len(rec.samples_of(rec.best_row))


@pytest.mark.parametrize("name", ["t4/convolution_milo_W6600", "kerneltuner/pnpoly_RTX_Titan"])
def test_no_candidate_within_5_percent_of_the_best_is_stopped_on_recorded_spaces(spaces_dir, name):
    """W6600's first runs are up to 3.4x its later ones (clock ramp-up), Titan's up to 3.9x: the hardest."""
    runner = ReplayRunner(spaces_dir / f"{name}.json.gz")
    times = runner.recorded.times
    for seed in range(3):
        result = tune(runner, space=runner.recorded.space, strategy="random", budget=400, seed=seed,
                      keep_outputs=False, confirm_rounds=0)
        stopped = [r for r in result.history.records if r.measurement.early_stopped]
        assert stopped, "nothing was stopped: the test would prove nothing"
        final = min(times[r.row] for r in result.history.records if r.value is not None)
        assert all(times[r.row] > 1.05 * final for r in stopped)
        assert result.history.best.row == min((r for r in result.history.records if r.value is not None),
                                              key=lambda r: times[r.row]).row


# -- the switches -----------------------------------------------------------------------------------
def test_marker_measure_option_and_the_flag_default_turn_it_off():
    on = parse_marker((), {"params": {"x": [1, 2]}}, {})
    assert on.measure.early_stop is True
    off = parse_marker((), {"params": {"x": [1, 2]}, "measure": {"early_stop": False}}, {})
    assert off.measure.early_stop is False
    flag = parse_marker((), {"params": {"x": [1, 2]}, "measure": {"min_iterations": 9}}, {"early_stop": False})
    assert flag.measure.early_stop is False and flag.measure.min_iterations == 9


def test_scratch_cache_keeps_the_flag_so_a_resumed_search_still_excludes_it(tmp_path):
    space = SearchSpace({"x": [1, 2]})
    cache = ScratchCache(tmp_path, "k", {"h": "1"})
    cache.append(Measurement({"x": 1}, value=5.0, samples=[5.0] * 3, early_stopped=True))
    cache.append(Measurement({"x": 2}, value=1.0, samples=[1.0] * 7))
    loaded = cache.load(space)
    assert loaded[space.find({"x": 1})].early_stopped and not loaded[space.find({"x": 2})].early_stopped
