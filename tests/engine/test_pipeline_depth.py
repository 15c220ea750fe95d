"""The pending depth of a compile-ahead pipeline (pytest_autotune/pipeline_depth.py): just enough to keep
the device busy, followed by the strategy's batch size in the evaluator, on the simulated clock and in tune()."""
from __future__ import annotations

from typing import Any

import pytest

from pytest_autotune.engine.evaluator import Evaluator
from pytest_autotune.engine.pipeline_depth import PipelineDepth, stage_seconds
from pytest_autotune.results import FailureKind, Measurement
from pytest_autotune.space import SearchSpace
from pytest_autotune.strategies import make_strategy
from pytest_autotune.strategies.base import Strategy


def test_depth_is_full_until_warm_then_one_plus_compile_over_device() -> None:
    depth = PipelineDepth(9, warmup=2)
    assert depth.depth == 9  # nothing measured: the initial design goes out whole
    depth.observe(0.05, 1.0)
    assert depth.depth == 9
    depth.observe(0.05, 1.0)
    assert depth.depth == 2  # the device dominates: one compiling ahead of the one being timed is enough
    for _ in range(3):
        depth.observe(2.3, 0.06)
    assert depth.depth == 9  # now compiling dominates (medians 2.3 / 0.06): every worker busy, capped at most
    assert depth.describe()["median_compile_s"] == pytest.approx(2.3)


def test_depth_medians_ignore_candidates_that_never_reached_the_device() -> None:
    depth = PipelineDepth(5, warmup=1)
    for _ in range(5):
        depth.observe(0.1, 0.0)  # compile failures: compile time, no device time
    assert depth.depth == 5  # no device time measured yet: no basis to shrink
    depth.observe(0.1, 0.4)
    assert depth.depth == 2
    nothing_to_compile = PipelineDepth(5, warmup=1)
    nothing_to_compile.observe(0.0, 0.4)
    assert nothing_to_compile.depth == 1


@pytest.mark.parametrize("most", [0, -1, 1.5, True, "4"])
def test_depth_needs_a_positive_whole_number(most: Any) -> None:
    with pytest.raises(ValueError, match="most must be a positive integer"):
        PipelineDepth(most)


def test_stage_seconds_from_the_clock_or_the_runner() -> None:
    simulated = Measurement({"x": 1}, value=1.0)
    simulated.extra["simulated"] = {"stages_s": {"compile": 0.2, "verify": 0.01, "runs": 0.5, "framework": 0.02}}
    assert stage_seconds(simulated) == pytest.approx((0.2, 0.53))
    real = Measurement({"x": 1}, value=1.0, timings={"compile_s": 0.3, "load_s": 0.01, "verify_s": 0.1,
                                                      "bench_s": 0.6, "total_s": 1.2})
    assert stage_seconds(real) == pytest.approx((0.3, 0.7))
    failed = Measurement.failed({"x": 1}, FailureKind.COMPILE, "error", compile_s=0.25)
    assert stage_seconds(failed) == pytest.approx((0.25, 0.0))
    assert stage_seconds(Measurement({"x": 1}, value=1.0)) is None  # the runner did not say: not counted


class Walk(Strategy):
    """Proposes rows in order, noting the batch size it saw at each proposal."""

    name = "walk"

    def __init__(self, space: SearchSpace) -> None:
        super().__init__(space, seed=0)
        self.sizes: list[int] = []

    def search(self):
        for row in range(len(self.space)):
            self.sizes.append(self.batch_size)
            yield row


def device_bound(params: dict[str, Any]) -> Measurement:
    return Measurement(params, value=float(params["x"]), timings={"compile_s": 0.05, "bench_s": 1.0})


def test_the_evaluator_shrinks_the_batch_when_the_device_is_the_bottleneck() -> None:
    space = SearchSpace({"x": list(range(1, 13))})
    walk = Walk(space)
    history = Evaluator(space, device_bound, budget=12, batch_size=5, depth=PipelineDepth(5, warmup=3)).run(walk)
    assert len(history.records) == 12
    assert walk.sizes[0] == 5 and walk.sizes[-1] == 2  # full for the initial design, then just one ahead
    without = Walk(space)
    Evaluator(space, device_bound, budget=12, batch_size=5).run(without)
    assert set(without.sizes) == {5}  # no depth policy: the batch size as given


def test_composite_strategies_pass_a_new_batch_size_to_their_members() -> None:
    space = SearchSpace({"x": list(range(1, 9)), "y": list(range(1, 9))})
    auto = make_strategy("auto", space, seed=0)
    auto.batch_size = 4
    chain = auto.delegate
    assert chain.batch_size == 4 and all(phase.batch_size == 4 for phase in chain.phases)
    auto.batch_size = 2
    assert [phase.batch_size for phase in chain.phases] == [2, 2]


def test_batch_size_one_without_a_pool_is_unchanged_by_a_depth() -> None:
    space = SearchSpace({"x": list(range(1, 7))})
    walk = Walk(space)
    evaluator = Evaluator(space, device_bound, budget=6, batch_size=1, depth=PipelineDepth(5, warmup=0))
    evaluator.run(walk)
    assert evaluator.depth is None and set(walk.sizes) == {1}  # today's sequential search, exactly


def test_the_evaluator_measures_the_pending_configuration_first_ready_names() -> None:
    space = SearchSpace({"x": list(range(1, 5))})
    asked: list[list[int]] = []

    def newest(configs: list[dict[str, Any]]) -> int:
        asked.append([c["x"] for c in configs])
        return len(configs) - 1

    history = Evaluator(space, device_bound, budget=4, batch_size=4, first_ready=newest).run(Walk(space))
    assert [r.params["x"] for r in history.records] == [4, 3, 2, 1]
    assert asked[0] == [1, 2, 3, 4]
    cached = {1: device_bound({"x": 2})}  # a cached result costs no device time: taken before any other
    history = Evaluator(space, device_bound, budget=4, batch_size=4, first_ready=newest, cache=cached).run(Walk(space))
    assert [r.params["x"] for r in history.records] == [2, 4, 3, 1]
    one = Evaluator(space, device_bound, budget=4, batch_size=1, first_ready=newest).run(Walk(space))
    assert [r.params["x"] for r in one.records] == [1, 2, 3, 4]  # batch size 1: nothing to choose from


def test_tune_with_a_prefetch_pipelines_as_a_compile_pool_does(spaces_dir, monkeypatch: pytest.MonkeyPatch) -> None:
    """The manual's simulated-clock example (docs/how-to/replay.md): tune(replay runner with a clock, batch_size, prefetch)."""
    from pytest_autotune.engine import evaluator as evaluator_module
    from pytest_autotune import tune
    from pytest_autotune.simulation.replay import ReplayRunner

    path = spaces_dir / "kerneltuner" / "gemm_RTX_3090.json.gz"
    if not path.exists():
        pytest.skip(f"{path} not found")
    seen: list[dict[str, Any]] = []
    original = evaluator_module.Evaluator.__init__

    def spy(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        seen.append({"depth": self.depth, "first_ready": kwargs.get("first_ready")})

    monkeypatch.setattr(evaluator_module.Evaluator, "__init__", spy)
    runner = ReplayRunner(path, clock=8)
    tune(runner, params=runner.recorded.params, restrictions=runner.recorded.restrictions, strategy="auto",
         budget=30, seed=0, batch_size=9, prefetch=runner.prefetch, keep_outputs=False, confirm_rounds=0)
    depth = seen[0]["depth"]
    assert seen[0]["first_ready"] == runner.first_ready
    assert depth.most == 9 and depth.depth == 2  # GEMM: timed far longer than it compiles, one compiling ahead
