"""Searches on the simulated clock: a strategy driven as the evaluator drives it, or a fixed order charged.

:func:`simulate_search` drives a strategy through a :class:`~pytest_autotune.simulation.replay.ReplayRunner`
that carries a clock; :func:`replay_sequence` charges another tuner's evaluation order on the same
:class:`~pytest_autotune.simulation.clock.Pipeline`.
"""
from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

from ..datasets import RecordedSpace
from ..engine.pipeline_depth import split_stages
from .clock import CostCharger, Pipeline

if TYPE_CHECKING:  # pragma: no cover
    from ..engine.pipeline_depth import PipelineDepth
    from ..strategies.base import Strategy
    from ..strategies.batch import BatchSearch
    from .replay import ReplayRunner

__all__ = ["SimulatedRun", "simulate_search", "simulate_fleet_search", "replay_sequence"]


@dataclass
class SimulatedRun:
    """A search on simulated time: each evaluation's row, value and the time its result was known."""

    rows: list[int] = field(default_factory=list)
    values: list[float | None] = field(default_factory=list)
    done_s: list[float] = field(default_factory=list)
    compile_s: list[float] = field(default_factory=list)  # each evaluation's compile time
    device_s: list[float] = field(default_factory=list)  # and its device time (0 for a compile failure)
    wall_s: float = 0.0  # simulated time at the end
    busy_s: dict[str, float] = field(default_factory=dict)
    stop_reason: str = ""

    def time_to(self, threshold: float) -> float | None:
        """Simulated seconds until a result at or below ``threshold`` was known; None if never (censored)."""
        for value, done in zip(self.values, self.done_s):
            if value is not None and value <= threshold:
                return done
        return None

    def evaluations_to(self, threshold: float) -> int | None:
        for i, value in enumerate(self.values):
            if value is not None and value <= threshold:
                return i + 1
        return None


def _finish(run: SimulatedRun, pipeline: Pipeline, reason: str) -> SimulatedRun:
    run.wall_s = pipeline.now
    run.busy_s = dict(pipeline.busy)
    run.stop_reason = reason
    return run


def _ask(search: "BatchSearch", space: Any, runner: "ReplayRunner") -> str:
    """Ask the search for its next proposals and send the valid ones to the compile stage (the runner's
    prefetch); the strategy's stop reason when nothing is pending, else ""."""
    from ..strategies.batch import proposal_key

    asked = search.ask()
    fresh = [row for row in (proposal_key(space, p)[1] for p in asked) if row >= 0]
    if fresh:
        runner.prefetch([space.get(row) for row in fresh])
    return "" if search.pending else (search.stop_reason or "strategy finished")


def _record(run: SimulatedRun, search: "BatchSearch", proposal: Any, row: int, value: float | None, done: float,
            compile_s: float, device_s: float, depth: "PipelineDepth | None", batch_size: int,
            stop_below: float | None) -> bool:
    """Tell the search one result and record it as the evaluator does (the pipeline depth learns from it);
    True when it reached ``stop_below``."""
    run.compile_s.append(compile_s)
    run.device_s.append(device_s)
    search.tell(proposal, value)
    if depth is not None and row >= 0:
        depth.observe(compile_s, device_s)
        search.resize(min(depth.depth, batch_size))
    run.rows.append(row)
    run.values.append(value)
    run.done_s.append(done)
    return stop_below is not None and value is not None and value <= stop_below


def simulate_search(strategy: "Strategy", runner: "ReplayRunner", budget: int, *, batch_size: int = 1,
                    stop_below: float | None = None,
                    depth: "PipelineDepth | None" = None, early_stop: bool = False,
                    ready_first: bool = True) -> SimulatedRun:
    """Drive ``strategy`` as the evaluator does, on the runner's simulated clock.

    Up to ``batch_size`` proposals are pending; new ones are compiled ahead
    (``runner.prefetch``), pending ones are measured one at a time, the
    first compiled first (``ready_first``; else in proposal order), and each
    result is told as it arrives. Ends when the strategy is
    done, after ``budget`` unique evaluations, or once a result at or below
    ``stop_below`` is known (what the evaluator cannot do, and a benchmark
    needs). ``depth``, when given, resizes the batch after each evaluation to
    what the stage costs measured so far call for, as the evaluator does with a
    compile pool (:class:`~pytest_autotune.engine.pipeline_depth.PipelineDepth`, at most ``batch_size``). With
    ``early_stop``, each measurement gets the evaluator's early-stop cutoff
    (:meth:`~pytest_autotune.measure.timing.EarlyStop.after_best` of the best fully timed value so far) and
    a stopped configuration is charged only the runs it made.
    """
    from ..measure.timing import EarlyStop
    from ..strategies.batch import BatchSearch, proposal_key

    if runner.charger is None:
        raise ValueError("simulate_search needs a ReplayRunner with a clock (ReplayRunner(..., clock=P))")
    space = strategy.space
    search = BatchSearch(strategy, budget, batch_size)
    if depth is not None:
        search.resize(min(depth.depth, batch_size))
    run = SimulatedRun()
    runner.charger.restart_host_timer()
    reason = "budget of evaluations spent"
    best_timed: float | None = None  # the early-stop reference: best fully timed value so far
    try:
        while len(run.rows) < budget:
            finished = _ask(search, space, runner)
            if finished:
                reason = finished
                break
            pending = search.pending
            rows = [proposal_key(space, p)[1] for p in pending]
            proposal = pending[runner.charger.first_ready(rows) if ready_first else 0]
            row = proposal_key(space, proposal)[1]
            if row >= 0:
                cutoff = EarlyStop.after_best(best_timed) if early_stop else None
                m = runner.evaluate(space.get(row), stop=cutoff)
                value, simulated = (m.value if m.ok else None), m.extra["simulated"]
                if value is not None and not m.early_stopped and (best_timed is None or value < best_timed):
                    best_timed = value
                done, (compile_s, device_s) = simulated["done_s"], split_stages(simulated["stages_s"])
            else:  # outside the restrictions: rejected before compiling, at no cost
                value, done, compile_s, device_s = None, runner.charger.pipeline.now, 0.0, 0.0
            if _record(run, search, proposal, row, value, done, compile_s, device_s, depth, batch_size, stop_below):
                reason = "target reached"
                break
    finally:
        search.close()
    return _finish(run, runner.charger.pipeline, reason)


def simulate_fleet_search(strategy: "Strategy", runner: "ReplayRunner", budget: int, *, batch_size: int = 1,
                          stop_below: float | None = None, depth: "PipelineDepth | None" = None,
                          early_stop: bool = False, ready_first: bool = True) -> SimulatedRun:
    """:func:`simulate_search` on a cluster: the runner's clock has ``D`` devices, and the driver keeps each busy.

    As :class:`~pytest_autotune.engine.fleet.FleetEvaluator` drives a cluster:
    up to ``batch_size`` proposals pending, compiled ahead; whenever a device is
    free the first compiled pending one not yet started goes to it; the host
    waits for the first result to come back and tells it (results arrive in
    any order). The clock must let the host go on while devices run
    (``Pipeline(..., devices=D, host_waits=False)``). With one device this is
    :func:`simulate_search`, evaluation for evaluation.
    """
    from ..measure.timing import EarlyStop
    from ..strategies.batch import BatchSearch, proposal_key

    charger = runner.charger
    if charger is None:
        raise ValueError("simulate_fleet_search needs a ReplayRunner with a clock (ReplayRunner(..., clock=P))")
    pipe = charger.pipeline
    if pipe.host_waits:
        raise ValueError("simulate_fleet_search needs a clock whose host does not wait on the device "
                         "(Pipeline(..., host_waits=False))")
    space = strategy.space
    search = BatchSearch(strategy, budget, batch_size, devices=pipe.devices)
    if depth is not None:
        search.resize(min(depth.depth, batch_size))
    run = SimulatedRun()
    charger.restart_host_timer()
    reason = "budget of evaluations spent"
    best_timed: float | None = None
    running: list[tuple[float, int, object, int, float | None, float, float, bool]] = []  # a heap by done time
    started: set[object] = set()
    order = itertools.count()
    try:
        while len(run.rows) < budget:
            finished = _ask(search, space, runner)
            if finished:
                reason = finished
                break
            waiting = [p for p in search.pending if proposal_key(space, p)[0] not in started]
            while waiting and len(running) < pipe.devices:
                rows = [proposal_key(space, p)[1] for p in waiting]
                proposal = waiting.pop(charger.first_ready(rows) if ready_first and len(rows) > 1 else 0)
                key, row = proposal_key(space, proposal)
                started.add(key)
                if row >= 0:
                    cutoff = EarlyStop.after_best(best_timed) if early_stop else None
                    m = runner.evaluate(space.get(row), stop=cutoff)
                    value, simulated = (m.value if m.ok else None), m.extra["simulated"]
                    done, (compile_s, device_s) = simulated["done_s"], split_stages(simulated["stages_s"])
                    stopped = bool(m.early_stopped)
                else:  # outside the restrictions: rejected before compiling, at no cost
                    value, done, compile_s, device_s, stopped = None, pipe.now, 0.0, 0.0, False
                heapq.heappush(running, (done, next(order), proposal, row, value, compile_s, device_s, stopped))
            done, _, proposal, row, value, compile_s, device_s, stopped = heapq.heappop(running)
            started.discard(proposal_key(space, proposal)[0])
            pipe.wait_until(done)
            if value is not None and not stopped and (best_timed is None or value < best_timed):
                best_timed = value
            if _record(run, search, proposal, row, value, done, compile_s, device_s, depth, batch_size, stop_below):
                reason = "target reached"
                break
    finally:
        search.close()
    return _finish(run, pipe, reason)


def replay_sequence(recorded: RecordedSpace, rows: Sequence[int], think_s: Sequence[float], *,
                    workers: int = 1, stop_below: float | None = None) -> SimulatedRun:
    """Charge a fixed evaluation order sequentially (another tuner's run): think, compile, then the device.

    ``think_s[i]`` is the tuner's own compute before evaluation ``i``. With
    one worker nothing overlaps: each evaluation costs its compile,
    verification, timed runs and framework, one after another.
    """
    if len(think_s) != len(rows):
        raise ValueError(f"think_s has {len(think_s)} entries for {len(rows)} rows")
    charger = CostCharger(recorded, Pipeline(workers, keep_spans=False), host_time=False)
    run = SimulatedRun()
    reason = "sequence replayed"
    for row, think in zip(rows, think_s):
        charger.pipeline.think(think)
        charged = charger.charge(int(row))
        done = charged["done_s"]
        compile_s, device_s = split_stages(charged["stages_s"])
        run.compile_s.append(compile_s)
        run.device_s.append(device_s)
        value = None if row < 0 or recorded.failures[row] is not None else float(recorded.times[row])
        run.rows.append(int(row))
        run.values.append(value)
        run.done_s.append(done)
        if stop_below is not None and value is not None and value <= stop_below:
            reason = "target reached"
            break
    return _finish(run, charger.pipeline, reason)
