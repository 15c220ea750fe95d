"""``tune()``: the engine's one-call API (search space -> strategy -> evaluator -> runner -> result).

Usable from plain Python; the pytest plugin is one client of it::

    from pytest_autotune import tune
    from pytest_autotune.runners import make_runner
    runner = make_runner(spec)                       # cupy, pycuda, c, callable, replay
    result = tune(runner, params={"block_size_x": [32, 64, 128]}, budget=50)
    result.params, result.stats.median
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from .evaluator import Budget, EvaluationRecord, Evaluator, SearchHistory
from .measure import TimingStats
from .results import Measurement
from .runners.base import Runner, supports_profiling
from .runners.device import DeviceInfo
from .space import SearchSpace
from .space.searchspace import RestrictionLike
from .strategies import Strategy, make_strategy
from .strategies.registry import StrategySpec

DEFAULT_STRATEGY = "auto"
DEFAULT_BUDGET = 200
RUNNERS_UP = 3


class TuneError(RuntimeError):
    """No configuration could be measured successfully."""


@dataclass
class TuneResult:
    """The winner of a search, its timing statistics, the verified outputs and the history."""

    params: dict[str, Any]
    value: float
    stats: TimingStats
    measurement: Measurement
    history: SearchHistory
    runners_up: list[EvaluationRecord]
    strategy: dict[str, Any]
    device: DeviceInfo
    space: SearchSpace
    outputs: list[Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def evaluations(self) -> int:
        return len(self.history.records)

    @property
    def failures(self) -> dict[str, int]:
        return self.history.failures()


def build_space(params: Mapping[str, Sequence[Any]], restrictions: Iterable[RestrictionLike] | None,
                runner: Runner | None = None, constants: Mapping[str, Any] | None = None) -> SearchSpace:
    """The search space with the runner's device limits available as restriction constants.

    A device constant that has the same name as a tunable parameter is left
    out: the user's parameter wins.
    """
    merged = dict(runner.constants()) if runner is not None else {}
    merged.update(constants or {})
    merged = {k: v for k, v in merged.items() if k not in params}
    return SearchSpace(params, restrictions, merged)


def _evaluate(runner: Runner, params: Mapping[str, Any], keep_outputs: bool) -> Measurement:
    if keep_outputs:
        try:
            return runner.evaluate(params, keep_outputs=True)  # type: ignore[call-arg]
        except TypeError:
            pass
    return runner.evaluate(params)


def tune(runner: Runner, params: Mapping[str, Sequence[Any]] | None = None,
         restrictions: Iterable[RestrictionLike] | None = None, *, space: SearchSpace | None = None,
         strategy: StrategySpec | Strategy = DEFAULT_STRATEGY, budget: Budget | int | str | None = DEFAULT_BUDGET,
         seed: int | None = None, constants: Mapping[str, Any] | None = None,
         cache: Mapping[int, Measurement] | None = None,
         on_record: Callable[[EvaluationRecord, Evaluator], None] | None = None,
         keep_outputs: bool = True, runners_up: int = RUNNERS_UP) -> TuneResult:
    """Search ``params`` under ``restrictions`` with ``strategy`` on ``runner``; return the verified winner.

    ``budget`` is a number of unique evaluations or a duration (``"90s"``).
    ``cache`` holds already measured rows of the same space (resumption).
    The winner is measured once more with its outputs kept, so the caller
    gets fresh outputs to inspect (the lock keeps the search's samples).
    """
    if space is None:
        if params is None:
            raise ValueError("tune() needs params (or a prebuilt space)")
        space = build_space(params, restrictions, runner, constants)
    search = make_strategy(strategy, space, seed=seed)
    if search.requires_profiling:
        if not supports_profiling(runner):
            raise TuneError(f"strategy {search.name!r} needs hardware counters, but the {runner.name!r} runner "
                            "cannot profile (use the replay runner on a recording with counters, or a CUDA runner "
                            "with Nsight Compute installed)")
        search.profiler = runner.profile  # type: ignore[attr-defined]
    evaluator = Evaluator(space, runner.evaluate, budget, cache=cache, on_record=on_record)
    history = evaluator.run(search)
    ranked = history.ranked()
    if not ranked:
        failures = ", ".join(f"{k}: {v}" for k, v in sorted(history.failures().items())) or "none evaluated"
        last = history.records[-1].measurement.detail.strip().splitlines()[:3] if history.records else []
        raise TuneError(f"no configuration ran successfully in {len(history.records)} evaluations "
                        f"({failures}){'; last error: ' + ' | '.join(last) if last else ''}")
    best = ranked[0]
    outputs = None
    if keep_outputs:
        again = _evaluate(runner, best.params, keep_outputs=True)
        outputs = again.extra.get("outputs")
    stats = TimingStats.from_samples(best.measurement.samples or [best.value])  # type: ignore[list-item]
    return TuneResult(
        params=dict(best.params), value=float(best.value), stats=stats,  # type: ignore[arg-type]
        measurement=best.measurement, history=history, runners_up=ranked[1:1 + runners_up],
        strategy={"name": search.name, "hyperparameters": search.hyperparameters(), "seed": seed},
        device=runner.device(), space=space, outputs=outputs)
