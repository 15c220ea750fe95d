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

import numpy as np

from .. import defaults as DEFAULTS
from ..errors import AutotuneError
from .evaluator import Budget, EvaluationRecord, Evaluator, SearchHistory
from .fleet import ClusterRun
from ..measure.timing import TimingStats
from .pipeline_depth import PipelineDepth
from .systematic import STOP_PREFIX
from ..results import Measurement
from ..runners.base import Runner, capabilities, measure_of, supports_profiling
from ..execution.compile_pool import compile_ahead, pipelined
from ..execution.device import DeviceInfo
from ..backends.nvrtc import SPILL_FACTS
from ..space import SearchSpace
from ..space.searchspace import RestrictionLike
from ..strategies import Strategy, make_strategy
from ..strategies.registry import StrategySpec

DEFAULT_STRATEGY = DEFAULTS.STRATEGY
DEFAULT_BUDGET = DEFAULTS.BUDGET
RUNNERS_UP = 5
"""Next-best configurations a lock entry keeps. They seed the warm start of a new device
(``lock.transfer``): on the recorded GPU spaces (``benchmarks/bench_transfer.py``, leave one GPU out,
sources tuned with budget B, 20 seeds) 5 beat 3 and 10 at the full budget (mean score 0.944 vs 0.937 /
0.941) and 3 at budget 25 (0.850 vs 0.841; 10: 0.866, all of it on GEMM). With 5, only the A100
convolution ends more than one standard error below the search without warm start at the full budget
(with 0, 1, 3 or 10 the RTX 3090 GEMM does too). Measured before the annealing guide stopped learning from
the seeds (see :class:`~.strategies.local.SimulatedAnnealing`). Costs: lockfile lines, and
``--autotune-ranking`` re-times more runners-up."""
CONFIRM_TOP = 3  # finalists re-timed after the search (plus the incumbent)
CONFIRM_ROUNDS = 2  # interleaved re-timing rounds of the finalists


class TuneError(AutotuneError, RuntimeError):
    """No configuration could be measured successfully; ``history`` holds every failed attempt."""

    def __init__(self, message: str, history: SearchHistory | None = None) -> None:
        super().__init__(message)
        self.history = history


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
    # Finalists re-timed side by side after the search: params key -> pooled samples of the rounds.
    confirmation: dict[str, list[float]] = field(default_factory=dict)
    incumbent: dict[str, Any] | None = None  # the configuration the caller asked to defend (a locked winner)
    cluster: ClusterRun | None = None  # a tuning on a cluster (Ray): its devices, nodes, devices lost

    def confirmed_samples(self, params: Mapping[str, Any]) -> list[float] | None:
        """The confirmation samples of ``params`` (``None`` when it was not a finalist or failed there)."""
        return self.confirmation.get(params_key(params))

    @property
    def evaluations(self) -> int:
        return len(self.history.records)

    @property
    def failures(self) -> dict[str, int]:
        return self.history.failures()


def build_space(params: Mapping[str, Sequence[Any]], restrictions: Iterable[RestrictionLike] | None,
                runner: Runner | None = None, constants: Mapping[str, Any] | None = None, *,
                max_configurations: int | None = None) -> SearchSpace:
    """The search space with the runner's device limits available as restriction constants.

    A device constant that has the same name as a tunable parameter is left
    out: the user's parameter wins. More valid configurations than
    ``max_configurations`` (None: the space package's default) is an error.
    """
    merged = dict(runner.constants()) if runner is not None else {}
    merged.update(constants or {})
    merged = {k: v for k, v in merged.items() if k not in params}
    return SearchSpace(params, restrictions, merged, max_configurations=max_configurations)


def params_key(params: Mapping[str, Any]) -> str:
    """A hashable, order-independent name of a configuration."""
    return repr(sorted((str(k), repr(v)) for k, v in params.items()))


def evaluate_once(runner: Runner, params: Mapping[str, Any], keep_outputs: bool) -> Measurement:
    """One measurement of ``params``, with its outputs where asked for and the runner keeps them."""
    if keep_outputs and capabilities(runner).keeps_outputs:
        return runner.evaluate(params, keep_outputs=True)
    return runner.evaluate(params)


@dataclass(frozen=True)
class TuneOptions:
    """How a search runs, as one value (``tune(..., options=TuneOptions(...))``): the strategy and its budget and
    seed, how the winner is confirmed and how many runners-up are kept, the pipeline (batch, compile workers),
    the stops (early stop, systematic failures) and where (a Ray cluster). The defaults are tune()'s."""

    strategy: Any = DEFAULT_STRATEGY
    budget: Any = DEFAULT_BUDGET
    seed: int | None = None
    keep_outputs: bool = True
    runners_up: int = RUNNERS_UP
    confirm_rounds: int = CONFIRM_ROUNDS
    confirm_top: int = CONFIRM_TOP
    batch_size: int = 1
    compile_workers: int | None = None
    early_stop: bool = True  # and the runner's measure options: a search stops early only where both allow it
    stop_systematic: bool = True
    cluster: Any = None
    effort: str = DEFAULTS.EFFORT  # "quick": a small search, fewer finalists and rounds (:class:`~..defaults.Effort`)


_UNSET: Any = object()
_OPTION_NAMES = tuple(TuneOptions.__dataclass_fields__)


def tune(runner: Runner, params: Mapping[str, Sequence[Any]] | None = None,
         restrictions: Iterable[RestrictionLike] | None = None, *, space: SearchSpace | None = None,
         options: TuneOptions | None = None,
         strategy: StrategySpec | Strategy = _UNSET, budget: Budget | int | str | None = _UNSET,
         seed: int | None = _UNSET, constants: Mapping[str, Any] | None = None,
         cache: Mapping[int, Measurement] | None = None,
         on_record: Callable[[EvaluationRecord, Evaluator], None] | None = None,
         keep_outputs: bool = _UNSET, runners_up: int = _UNSET, incumbent: Mapping[str, Any] | None = None,
         seeds: Sequence[Mapping[str, Any]] = (), confirm_rounds: int = _UNSET,
         confirm_top: int = _UNSET, batch_size: int = _UNSET,
         prefetch: Callable[[list[dict[str, Any]]], None] | None = None,
         compile_workers: int | None = _UNSET, early_stop: bool = _UNSET,
         stop_systematic: bool = _UNSET, cluster: Any = _UNSET, effort: str = _UNSET,
         on_confirm: Callable[[int, int], None] | None = None) -> TuneResult:
    """Search ``params`` under ``restrictions`` with ``strategy`` on ``runner``; return the verified winner.

    ``budget`` is a number of unique evaluations or a duration (``"90s"``).
    ``cache`` holds already measured rows of the same space (resumption).
    ``incumbent`` (a locked winner) and ``seeds`` are evaluated first, as
    ordinary candidates; configurations outside the space are ignored.
    ``compile_workers`` > 1 compiles proposed candidates ahead on that many
    workers while the device times the current one (runners with a compile
    stage; :mod:`~pytest_autotune.execution.compile_pool`).

    A winner measured once during a noisy moment is not trusted: the best
    ``confirm_top`` configurations of the search, and the incumbent, are
    re-timed in ``confirm_rounds`` interleaved rounds (ABCABC..., so all see
    the same conditions), and the winner is the lowest median of those pooled
    samples, which also become its statistics. The winner is then measured
    once more with its outputs kept, so the caller gets fresh outputs.

    Up to ``batch_size`` configurations are kept pending at once and
    ``prefetch`` is handed them as they are proposed (see :class:`Evaluator`);
    with a prefetch (or a compile pool) only as many as keep the device busy
    (:mod:`~pytest_autotune.engine.pipeline_depth`), and the runner's
    ``first_ready`` picks which pending one is measured next.
    ``options`` carries all of these as one :class:`TuneOptions` (or pass them one by one).
    ``early_stop`` (and the runner's ``measure.early_stop``; the marker's ``measure`` sets the latter, the one
    source the plugin uses): a configuration
    whose first timed runs are far slower than the best so far stops being
    timed (:class:`~pytest_autotune.measure.timing.EarlyStop`); it is flagged, its
    partial value reaches the strategy, and it is never a finalist, the
    winner or a runner-up.
    ``stop_systematic``: a failure that does not depend on the parameters (a
    syntax error: the first configurations and a contrast all fail alike)
    ends the search at once with a TuneError naming it
    (:mod:`~pytest_autotune.engine.systematic`).
    ``cluster`` (``"ray"``, a Ray address, or a
    :class:`~pytest_autotune.engine.cluster.ClusterSpec`): search on every
    device of a Ray cluster at once (:mod:`~pytest_autotune.engine.cluster`);
    the finalists are then re-timed on one device.
    ``effort`` (``"full"``, ``"quick"``; :class:`~pytest_autotune.defaults.Effort`) scales the budget, the
    finalists, their rounds and the runners-up kept (:func:`effort_budget`). ``on_confirm(done, total)`` is
    called after each re-timing of a finalist (a progress line: the search's last line is not the end).
    """
    given = {name: value for name, value in (("strategy", strategy), ("budget", budget), ("seed", seed),
                                              ("keep_outputs", keep_outputs), ("runners_up", runners_up),
                                              ("confirm_rounds", confirm_rounds), ("confirm_top", confirm_top),
                                              ("batch_size", batch_size), ("compile_workers", compile_workers),
                                              ("early_stop", early_stop), ("stop_systematic", stop_systematic),
                                              ("cluster", cluster), ("effort", effort)) if value is not _UNSET}
    if options is not None and given:
        raise TypeError(f"tune(): pass {', '.join(sorted(given))} in options=TuneOptions(...), or without options=")
    o = options if options is not None else TuneOptions(**given)
    strategy, budget, seed, keep_outputs, runners_up = o.strategy, o.budget, o.seed, o.keep_outputs, o.runners_up
    confirm_rounds, confirm_top, batch_size, compile_workers = o.confirm_rounds, o.confirm_top, o.batch_size, \
        o.compile_workers
    early_stop, stop_systematic, cluster = o.early_stop, o.stop_systematic, o.cluster
    tier = DEFAULTS.effort(o.effort)
    budget = effort_budget(budget, tier)
    confirm_top, confirm_rounds = tier.scaled(confirm_top), tier.scaled(confirm_rounds)
    runners_up = tier.scaled(runners_up) if runners_up else 0
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
    first = [incumbent] if incumbent is not None else []
    seed_rows = [row for row in (space.find(dict(p)) for p in [*first, *seeds]) if row >= 0]
    if cluster is not None:
        from .cluster import tune_on_cluster  # Ray only where a cluster is asked for

        return tune_on_cluster(runner, cluster, space, search, budget, cache=cache, on_record=on_record,
                               seeds=seed_rows, early_stop=early_stop and stops_early(runner),
                               stop_systematic=stop_systematic, finish=lambda history, finishing, run: _finish(
                                   finishing, search, space, history, incumbent=incumbent, seed=seed,
                                   keep_outputs=keep_outputs, runners_up=runners_up, confirm_top=confirm_top,
                                   confirm_rounds=confirm_rounds, extra={"cluster": run.as_dict()}, cluster=run,
                                   on_confirm=on_confirm))
    with compile_ahead(runner, compile_workers) as compiling:
        batch_size, prefetch = pipelined(batch_size, prefetch, compiling, compile_workers)
        # compiling ahead (a pool, or the caller's prefetch): only as many pending as keep the device busy
        # (speculation costs search quality), and the device takes whichever candidate is compiled first
        ahead = compiling is not None or (prefetch is not None and batch_size > 1)
        depth = PipelineDepth(batch_size) if ahead else None
        first_ready = runner.first_ready if ahead and capabilities(runner).picks_ready else None  # type: ignore[attr-defined]
        evaluator = Evaluator(space, runner.evaluate, budget, cache=cache, on_record=on_record, seeds=seed_rows,
                              batch_size=batch_size, prefetch=prefetch,
                              early_stop=early_stop and stops_early(runner), depth=depth, first_ready=first_ready,
                              stop_systematic=stop_systematic)
        history = evaluator.run(search)
    return _finish(runner, search, space, history, incumbent=incumbent, seed=seed, keep_outputs=keep_outputs,
                   runners_up=runners_up, confirm_top=confirm_top, confirm_rounds=confirm_rounds,
                   on_confirm=on_confirm)


def effort_budget(budget: Budget | int | str | None, effort: "str | DEFAULTS.Effort" = DEFAULTS.EFFORT) -> Budget:
    """The search's budget at ``effort``: the budget itself at full effort; at quick a share of it, capped
    (what a progress line's total must show, too)."""
    b, tier = Budget.parse(budget), DEFAULTS.effort(effort)
    if tier.budget_share >= 1.0 and tier.max_evaluations is None and tier.max_seconds is None:
        return b
    return Budget(max_evaluations=tier.evaluations(b.max_evaluations), max_seconds=tier.seconds(b.max_seconds))


def _finish(runner: Runner, search: Strategy, space: SearchSpace, history: SearchHistory, *,
            incumbent: Mapping[str, Any] | None, seed: int | None, keep_outputs: bool, runners_up: int,
            confirm_top: int, confirm_rounds: int, extra: dict[str, Any] | None = None,
            cluster: ClusterRun | None = None, on_confirm: Callable[[int, int], None] | None = None) -> TuneResult:
    """After the search: confirm the finalists on ``runner``, pick and re-measure the winner."""
    ranked = history.ranked()
    if not ranked:
        raise TuneError(no_success_message(history), history)
    finalists = ranked[:max(1, confirm_top)]
    defended = next((r for r in ranked if incumbent is not None and params_key(r.params) == params_key(incumbent)),
                    None)
    if defended is not None and defended not in finalists:
        finalists.append(defended)
    # the incumbent is re-timed even alone (every other candidate failed or was stopped early): the caller
    # compares its samples of this session with the lock's
    confirmation = confirm(runner, [r.params for r in finalists], confirm_rounds, on_confirm) \
        if len(finalists) > 1 or defended is not None else {}
    best = min(finalists, key=lambda r: _confirmed_median(confirmation, r))
    samples = confirmation.get(params_key(best.params)) or best.measurement.samples or [best.value]
    outputs = None
    if keep_outputs:
        again = evaluate_once(runner, best.params, keep_outputs=True)
        outputs = again.extra.get("outputs")
    stats = TimingStats.from_samples(samples)  # type: ignore[arg-type]
    others = [r for r in ranked if r is not best]
    others.sort(key=lambda r: _confirmed_median(confirmation, r))
    return TuneResult(
        params=dict(best.params), value=float(stats.objective(_objective_name(runner))), stats=stats,
        measurement=best.measurement, history=history, runners_up=others[:runners_up],
        strategy={"name": search.name, "hyperparameters": search.hyperparameters(), "seed": seed},
        device=runner.device(), space=space, outputs=outputs, confirmation=confirmation,
        incumbent=dict(incumbent) if incumbent is not None else None, extra=dict(extra or {}), cluster=cluster)


def stops_early(runner: Runner) -> bool:
    """Whether ``runner.evaluate`` takes an early-stop cutoff and its measure options allow one."""
    measure = measure_of(runner)
    return capabilities(runner).stops_early and bool(getattr(measure, "early_stop", True))


def _objective_name(runner: Runner) -> str:
    measure = measure_of(runner)
    return getattr(measure, "objective", "median")


def _confirmed_median(confirmation: Mapping[str, list[float]], record: EvaluationRecord) -> float:
    """Rank by the confirmation rounds where a configuration took part, else by its search value.

    A finalist that failed in the confirmation rounds (flaky) ranks last."""
    key = params_key(record.params)
    if key in confirmation:
        samples = confirmation[key]
        return float(np.median(samples)) if samples else float("inf")
    return float(record.value)  # type: ignore[arg-type]


def confirm(runner: Runner, candidates: Sequence[Mapping[str, Any]], rounds: int,
            on_step: Callable[[int, int], None] | None = None) -> dict[str, list[float]]:
    """Re-time ``candidates`` in ``rounds`` interleaved rounds; pooled samples per candidate.

    A candidate that fails in any round gets an empty list: a configuration
    that does not run reliably is no winner. ``on_step(done, total)`` follows each re-timing (one that is
    skipped after a failure counts as done: the total stays honest).
    """
    pooled: dict[str, list[float]] = {params_key(p): [] for p in candidates}
    failed: set[str] = set()
    total, done = max(0, rounds) * len(candidates), 0
    for _ in range(max(0, rounds)):
        for params in candidates:
            key = params_key(params)
            done += 1
            if key in failed:
                if on_step is not None:
                    on_step(done, total)
                continue
            m = runner.evaluate(params)
            if on_step is not None:
                on_step(done, total)
            if m.ok:
                pooled[key].extend(m.samples or [float(m.value)])  # type: ignore[arg-type]
            else:
                failed.add(key)
                pooled[key] = []
    return pooled


def no_success_message(history: SearchHistory) -> str:
    """Why a search found nothing: the failure counts and, per kind, the first error in full."""
    failures = ", ".join(f"{k}: {v}" for k, v in sorted(history.failures().items())) or "none evaluated"
    if history.stop_reason.startswith(STOP_PREFIX):
        return f"stopped after {len(history.records)} evaluations ({failures}): {history.stop_reason}"
    lines = [f"no configuration ran successfully in {len(history.records)} evaluations ({failures})"]
    for kind, example in first_failures(history).items():
        lines.append(f"first {kind} failure, at {example['params']}:")
        lines.extend("    " + line for line in example["detail"].strip().splitlines()[:40])
    return "\n".join(lines)


def spills(history: SearchHistory, winner: Measurement) -> dict[str, Any]:
    """What the compiler said about spilling, for the report: the winner's bytes of spill stores, spill
    loads and stack frame, and how many measured configurations spilled. Empty where the runner's
    compiler reports nothing of the kind (C, OpenCL, PyCUDA)."""
    spilled = sum(bool(r.measurement.extra.get("spill_stores") or r.measurement.extra.get("spill_loads"))
                  for r in history.records)
    mine = {k: int(winner.extra[k]) for k in SPILL_FACTS if k in winner.extra}
    return {"winner": mine, "spilling_configurations": spilled} if mine or spilled else {}


def compile_ahead_summary(history: SearchHistory) -> dict[str, Any]:
    """How the compile pool's artefacts fared on the device, for the report: ``loaded`` (measurements
    whose artefact the device stage loaded), ``fallbacks`` (artefacts the device refused, compiled inline
    instead) and the first fallback's configuration and driver error. Empty when nothing was compiled ahead."""
    loaded = sum("load_s" in r.measurement.timings for r in history.records)
    fell = [r for r in history.records if r.measurement.extra.get("fallback")]
    if not loaded and not fell:
        return {}
    out: dict[str, Any] = {"loaded": loaded, "fallbacks": len(fell)}
    if fell:
        out["first_fallback"] = {"params": dict(fell[0].params), "error": str(fell[0].measurement.extra["fallback"])}
    return out


def first_failures(history: SearchHistory) -> dict[str, dict[str, Any]]:
    """Per failure kind, the first failed configuration and its full error text."""
    out: dict[str, dict[str, Any]] = {}
    for record in history.records:
        failure = record.measurement.failure
        if failure is not None and str(failure) not in out:
            out[str(failure)] = {"params": dict(record.params), "detail": record.measurement.detail,
                                 "count": 0}
        if failure is not None:
            out[str(failure)]["count"] += 1
    return out
