"""Between strategy and runner: memoise, enforce the budget, record every evaluation.

The evaluator is the only place where a proposal turns into a measurement.
It guarantees that a configuration is measured once (asking again is free),
that the search ends cleanly when the budget (unique evaluations and/or wall
clock) is spent or the space is exhausted, and that failures reach the
strategy as ``None`` while the record keeps their kind.
"""
from __future__ import annotations

import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..measure.timing import EarlyStop
from .pipeline_depth import PipelineDepth
from .systematic import SystematicWatch
from ..results import FailureKind, Measurement
from ..space import SearchSpace
from ..strategies.base import Strategy
from ..strategies.batch import MAX_FREE_PROPOSALS, BatchSearch, proposal_key  # noqa: F401 (re-exported)

Objective = Callable[[Mapping[str, Any]], Measurement]
Prefetch = Callable[[list[dict[str, Any]]], None]


def parse_duration(text: str | float | int) -> float:
    """``"90s"``, ``"2m"``, ``"1h30m"``, ``"1.5h"`` or a number of seconds -> seconds."""
    if isinstance(text, (int, float)):
        return float(text)
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*(h|m|s|ms)?", text.strip().lower())
    if not parts or re.sub(r"[\d.\s]|ms|h|m|s", "", text.lower()):
        raise ValueError(f"budget duration {text!r} is not understood (use e.g. '90s', '5m', '1h')")
    scale = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "": 1.0}
    return sum(float(num) * scale[unit] for num, unit in parts)


@dataclass(frozen=True)
class Budget:
    """Maximum unique evaluations and/or wall-clock seconds (``None`` = unlimited)."""

    max_evaluations: int | None = None
    max_seconds: float | None = None

    @classmethod
    def parse(cls, value: "Budget | int | str | None") -> "Budget":
        """An int is evaluations; a string with a unit (``"90s"``) is a duration."""
        if isinstance(value, Budget):
            return value
        if value is None:
            return cls()
        if isinstance(value, bool):
            raise ValueError(f"budget {value!r} must be a number of evaluations or a duration like '90s'")
        if isinstance(value, int) or (isinstance(value, str) and value.strip().isdigit()):
            n = int(value)
            if n <= 0:
                raise ValueError(f"budget must be positive, got {value!r}")
            return cls(max_evaluations=n)
        if isinstance(value, str):
            seconds = parse_duration(value)
            if seconds <= 0:
                raise ValueError(f"budget duration {value!r} must be positive")
            return cls(max_seconds=seconds)
        raise ValueError(f"budget {value!r} must be a number of evaluations or a duration like '90s'")


@dataclass
class EvaluationRecord:
    """One unique evaluation, in the order it happened."""

    index: int  # 0-based position in the evaluation order
    row: int  # row in the space, -1 for an invalid configuration (constraint-unaware proposals)
    params: dict[str, Any]
    measurement: Measurement
    strategy_seconds: float  # the strategy's own compute time before proposing this configuration

    @property
    def value(self) -> float | None:
        return self.measurement.value if self.measurement.ok else None

    @property
    def eligible(self) -> bool:
        """Ran, and was timed in full: a candidate for winner or runner-up (never an early-stopped one)."""
        return self.value is not None and not self.measurement.early_stopped


@dataclass
class SearchHistory:
    """Everything a search did; the basis of a TuneResult and of the benchmark scores."""

    records: list[EvaluationRecord] = field(default_factory=list)
    stop_reason: str = ""
    strategy_seconds: list[float] = field(default_factory=list)  # per proposal, incl. free ones
    # the same as this thread's CPU time: what the step costs on an idle machine (wall time includes preemption)
    strategy_cpu_seconds: list[float] = field(default_factory=list)
    elapsed_seconds: float = 0.0

    @property
    def best(self) -> EvaluationRecord | None:
        ok = [r for r in self.records if r.eligible]
        return min(ok, key=lambda r: r.value) if ok else None  # type: ignore[arg-type,return-value]

    def failures(self) -> dict[str, int]:
        return dict(Counter(str(r.measurement.failure) for r in self.records if r.measurement.failure is not None))

    def best_so_far(self) -> np.ndarray:
        """Best valid objective after each evaluation (NaN until something valid is found)."""
        out = np.full(len(self.records), np.nan)
        best = np.inf
        for i, r in enumerate(self.records):
            if r.eligible and r.value < best:  # type: ignore[operator]
                best = r.value
            out[i] = best if np.isfinite(best) else np.nan
        return out

    def ranked(self, k: int | None = None) -> list[EvaluationRecord]:
        """Valid, fully timed evaluations from best to worst (the winner first, then runners-up)."""
        ok = sorted((r for r in self.records if r.eligible), key=lambda r: r.value)  # type: ignore[arg-type,return-value]
        return ok if k is None else ok[:k]


class Evaluator:
    """Drives a strategy against an objective within a budget.

    ``objective(params) -> Measurement`` is usually ``runner.evaluate``.
    ``cache`` pre-seeds known results (row -> Measurement), e.g. from an
    interrupted run, so they are not measured again; cached results still
    count towards the budget (they are part of this search's evaluations).
    ``on_record`` is called after each new evaluation (progress display).
    ``seeds`` are rows evaluated first, in order, before the strategy proposes
    anything (a locked winner, other devices' winners); they count towards the
    budget and the strategy finds them in its ``observed`` record.

    ``batch_size`` (default 1) is how many proposals are kept pending at once
    (:class:`~.strategies.batch.BatchSearch`); they are still measured one at
    a time, in proposal order, and each result is told as it arrives.
    ``prefetch(params)`` is called with the pending, not yet measured
    configurations whenever new ones were proposed (a compile pool starts
    on them).
    ``depth`` (with ``batch_size`` above 1): keep only as many pending as the
    measured stage costs need to keep the device busy
    (:class:`~pytest_autotune.engine.pipeline_depth.PipelineDepth`, at most ``batch_size``);
    the strategy's batch size follows it.
    ``first_ready(pending params) -> index`` (a compile pool's): which pending
    configuration to measure next, the first compiled rather than the oldest,
    so the device never waits behind one slow compile (results are told in
    any order; without it, proposal order).
    ``early_stop``: each measurement gets the cutoff of
    :meth:`~pytest_autotune.measure.timing.EarlyStop.after_best` from the best fully
    timed value so far, as ``objective(params, stop=...)`` (the objective must
    accept it); the strategy sees what was measured.
    ``stop_systematic``: when the first evaluations all fail alike and a
    contrast configuration fails the same way, stop with that failure
    (:mod:`~pytest_autotune.engine.systematic`); ``stop_reason`` then starts
    with ``"systematic failure"``.
    """

    def __init__(self, space: SearchSpace, objective: Objective, budget: Budget | int | str | None = None,
                 cache: Mapping[int, Measurement] | None = None,
                 on_record: Callable[[EvaluationRecord, "Evaluator"], None] | None = None,
                 clock: Callable[[], float] = time.perf_counter, seeds: Sequence[int] = (),
                 batch_size: int = 1, prefetch: Prefetch | None = None, early_stop: bool = False,
                 depth: PipelineDepth | None = None,
                 first_ready: Callable[[list[dict[str, Any]]], int] | None = None, stop_systematic: bool = False):
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        self.space = space
        self.objective = objective
        self.budget = Budget.parse(budget)
        self.preloaded: dict[int, Measurement] = dict(cache or {})
        self.on_record = on_record
        self.clock = clock
        self.history = SearchHistory()
        self._seen: dict[Any, EvaluationRecord] = {}
        self._rows_seen = 0  # valid configurations evaluated
        self.seeds = [int(r) for r in seeds]
        self.batch_size = int(batch_size)
        self.prefetch = prefetch
        self.early_stop = early_stop
        self.depth = depth if self.batch_size > 1 else None
        self.first_ready = first_ready if self.batch_size > 1 else None
        self._best: float | None = None  # best fully timed value so far (the early-stop reference)
        self.watch = SystematicWatch(space) if stop_systematic else None

    @property
    def evaluations(self) -> int:
        return len(self.history.records)

    def _exhausted(self, started: float) -> str:
        b = self.budget
        if b.max_evaluations is not None and self.evaluations >= b.max_evaluations:
            return "budget of evaluations spent"
        if b.max_seconds is not None and self.clock() - started >= b.max_seconds:
            return "time budget spent"
        if self._rows_seen >= len(self.space):
            return "search space exhausted"
        return ""

    def _key(self, proposal: Any) -> tuple[Any, int]:
        """Cache key and row of a proposal (row number, or an index vector that may be invalid)."""
        return proposal_key(self.space, proposal)

    def _measure(self, key: Any, row: int, proposal: Any) -> Measurement:
        if row >= 0:
            params = self.space.get(row)
            if row in self.preloaded:
                return self.preloaded[row]
            stop = EarlyStop.after_best(self._best) if self.early_stop else None
            return self.objective(params, stop=stop) if stop is not None else self.objective(params)  # type: ignore[call-arg]
        vec = np.clip(np.asarray(proposal, dtype=np.int64), 0, self.space.sizes - 1)
        params = self.space.vector_to_config(vec)
        return Measurement.failed(params, FailureKind.INVALID, "violates the search-space restrictions")

    def _record(self, key: Any, row: int, measurement: Measurement, spent: float) -> EvaluationRecord:
        record = EvaluationRecord(self.evaluations, row, dict(measurement.params) or self.space.get(row),
                                  measurement, spent)
        self._seen[key] = record
        self._rows_seen += row >= 0
        if record.eligible and (self._best is None or record.value < self._best):  # type: ignore[operator]
            self._best = record.value
        self.history.records.append(record)
        if self.on_record is not None:
            self.on_record(record, self)
        return record

    def _finish(self, batch: BatchSearch, reason: str, started: float) -> None:
        """Close the search and record why and after how long it ended (however it ended)."""
        batch.close()
        self.history.stop_reason = reason
        self.history.elapsed_seconds = self.clock() - started

    def _systematic(self, record: EvaluationRecord, strategy: Strategy, batch: BatchSearch, started: float) -> str:
        """After ``record``: the stop reason when the failures so far are systematic (a contrast decides)."""
        watch = self.watch
        if watch is None or watch.settled:
            return ""
        watch.observe(record.row, record.measurement)
        pending = [self._key(p)[1] for p in batch.pending]
        row = watch.contrast([r.row for r in self.history.records if r.row >= 0] + pending)
        if row is not None and not self._exhausted(started):
            contrast = self._record(row, row, self._measure(row, row, row), 0.0)
            strategy.observed[row] = contrast.value
            batch.remember(row, contrast.value)
            watch.observe(row, contrast.measurement)
        return watch.message

    def _run_seeds(self, strategy: Strategy, batch: BatchSearch, started: float) -> str:
        for row in self.seeds:
            reason = self._exhausted(started)
            if reason:
                return reason
            if row in self._seen:
                continue
            record = self._record(row, row, self._measure(row, row, row), 0.0)
            self._follow_depth(batch, record)
            strategy.observed[row] = record.value
            strategy.transferred.add(row)
            batch.remember(row, record.value)
            stop = self._systematic(record, strategy, batch, started)
            if stop:
                return stop
        return ""

    def _follow_depth(self, batch: BatchSearch, record: EvaluationRecord) -> None:
        """Resize the batch to the pipeline depth the measured stage costs call for (cached results cost nothing)."""
        if self.depth is None or record.row in self.preloaded:
            return
        self.depth.observe_measurement(record.measurement)
        batch.resize(min(self.depth.depth, self.batch_size))

    def _next_pending(self, batch: BatchSearch) -> Any:
        """The pending proposal to measure now: one that costs no device time (cached, outside the
        restrictions) first, else the first compiled (``first_ready``), else the oldest."""
        pending = batch.pending
        if self.first_ready is None or len(pending) == 1:
            return pending[0]
        rows = [self._key(p)[1] for p in pending]
        free = next((i for i, row in enumerate(rows) if row < 0 or row in self.preloaded), None)
        if free is not None:
            return pending[free]
        return pending[self.first_ready([self.space.get(row) for row in rows])]

    def _room(self, batch: BatchSearch) -> int:
        """How many more proposals may be pending: the batch size, and what is left of the evaluation budget."""
        room = batch.batch_size - len(batch.pending)
        if self.budget.max_evaluations is not None:
            room = min(room, self.budget.max_evaluations - self.evaluations - len(batch.pending))
        return room

    def _prefetch(self, batch: BatchSearch) -> None:
        """Hand the pending configurations that will really be measured to ``prefetch``."""
        todo = []
        for proposal in batch.pending:
            key, row = self._key(proposal)
            if row >= 0 and row not in self.preloaded:
                todo.append(self.space.get(row))
        if todo:
            self.prefetch(todo)  # type: ignore[misc]

    def _open_batch(self, strategy: Strategy, devices: int = 1) -> BatchSearch:
        """The strategy's batched search, sized by the budget and the pipeline depth; its step times feed the
        history (shared by the one-device and the fleet evaluator, which says how many devices measure)."""
        max_evals = self.budget.max_evaluations
        batch = BatchSearch(strategy, max_evals if max_evals is not None else len(self.space), self.batch_size,
                            devices=devices)
        self.history.strategy_seconds = batch.step_seconds
        self.history.strategy_cpu_seconds = batch.step_cpu_seconds
        if self.depth is not None:
            batch.resize(min(self.depth.depth, self.batch_size))
        return batch

    def _tell(self, batch: BatchSearch, proposal: Any, key: Any, row: int, measurement: Measurement
              ) -> EvaluationRecord:
        """Record a measurement, tell the search its value and let the pipeline depth learn from it (one
        device or a fleet alike)."""
        record = self._record(key, row, measurement, batch.seconds(proposal))
        batch.tell(proposal, record.value)
        self._follow_depth(batch, record)
        return record

    def run(self, strategy: Strategy) -> SearchHistory:
        """Search until the budget is spent, the space is exhausted, or the strategy stops."""
        started = self.clock()
        batch = self._open_batch(strategy)
        reason = ""
        try:
            reason = self._run_seeds(strategy, batch, started)
            while not reason:
                reason = self._exhausted(started)
                if reason:
                    break
                if batch.ask(self._room(batch)) and self.prefetch is not None:
                    self._prefetch(batch)
                if not batch.pending:
                    reason = batch.stop_reason or "strategy finished"
                    break
                proposal = self._next_pending(batch)
                key, row = self._key(proposal)
                record = self._tell(batch, proposal, key, row, self._measure(key, row, proposal))
                reason = self._systematic(record, strategy, batch, started)
        finally:
            self._finish(batch, reason, started)
        return self.history
