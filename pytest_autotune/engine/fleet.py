"""The evaluator for D devices: one search keeps every device of a cluster busy.

:class:`FleetEvaluator` is the :class:`~.evaluator.Evaluator` with the
device stage spread over a :class:`Fleet` (the Ray backend,
:mod:`.cluster`). The pipelining rules of one device generalise:

* enough proposals pending for every device and its compiles
  (:class:`~.pipeline_depth.PipelineDepth` with ``devices=D``: ``D * (1 +
  ceil(compile / device))``, at most ``D`` plus every compile worker);
* whenever a device is free, the first compiled pending proposal not yet
  started goes to it (``Fleet.first_ready``), never the oldest behind a slow
  compile;
* results are told to the strategy in the order they come back (the batch
  search takes them in any order); the early-stop cutoff of a measurement is
  the best fully timed value known when it started.

The budget counts what is running: evaluations done plus started never
exceed it. :func:`~pytest_autotune.simulation.search.simulate_fleet_search`
drives the simulated clock the same way.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Hashable, Mapping, Protocol

from ..measure.timing import EarlyStop
from ..results import Measurement
from ..strategies.base import Strategy
from ..strategies.batch import BatchSearch
from .evaluator import Evaluator, SearchHistory

__all__ = ["ClusterRun", "Fleet", "FleetEvaluator"]


@dataclass(frozen=True)
class ClusterRun:
    """What a tuning on a cluster ran on (``TuneResult.cluster``): the summary's line and the report's fields
    about it. ``devices``: those searching at the end; ``lost``: devices that died (each with its error);
    ``refused``: devices of another model that joined; ``retried``: evaluations retried on another device."""

    model: str
    devices: int
    nodes: tuple[str, ...]
    resource: str
    lost: tuple[str, ...] = ()
    joined: int = 0
    refused: tuple[str, ...] = ()
    retried: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"devices": self.devices, "model": self.model, "nodes": list(self.nodes), "joined": self.joined,
                "lost": list(self.lost), "refused": list(self.refused), "retried": self.retried,
                "resource": self.resource}


class Fleet(Protocol):
    """Devices that evaluate configurations concurrently (the Ray backend's :class:`~.cluster.RayFleet`)."""

    @property
    def devices(self) -> int:
        """Devices in use now (may grow while a search runs: a node joined)."""
        ...

    def idle(self) -> int:
        """Devices free to start an evaluation now."""
        ...

    def prefetch(self, configurations: list[dict[str, Any]]) -> None:
        """Start compiling ``configurations`` ahead (on the cluster's CPUs)."""
        ...

    def first_ready(self, configurations: list[dict[str, Any]]) -> int:
        """Index of the configuration to start next: the first whose compile is done (waits for one)."""
        ...

    def start(self, params: Mapping[str, Any], stop: EarlyStop | None) -> Hashable:
        """Start evaluating ``params`` on a free device; a ticket for :meth:`next_result`."""
        ...

    def next_result(self) -> tuple[Hashable, Measurement]:
        """Wait for the next evaluation to finish (any device, any order): its ticket and measurement.

        A device lost mid-evaluation is handled inside: the evaluation is retried once on another device,
        then returned as a failed measurement, never dropped."""
        ...


class FleetEvaluator(Evaluator):
    """An :class:`~.evaluator.Evaluator` whose measurements run on the devices of a :class:`Fleet`."""

    def __init__(self, space: Any, fleet: Fleet, budget: Any = None, *,
                 objective: Callable[..., Measurement] | None = None, **kwargs: Any) -> None:
        """``objective``: one measurement waited for on one device, outside the pipeline (the systematic-failure
        check's contrast configuration)."""
        kwargs.pop("first_ready", None)
        super().__init__(space, objective or self._no_objective, budget, **kwargs)
        self.fleet = fleet
        self.prefetch = fleet.prefetch
        self._running: dict[Hashable, tuple[Any, Any, int, Any]] = {}  # ticket -> (proposal, key, row, early-stop cutoff)

    @staticmethod
    def _no_objective(params: Mapping[str, Any], **_: Any) -> Measurement:
        raise RuntimeError("this fleet evaluator has no objective for a measurement outside the pipeline")

    def _start(self, proposal: Any) -> None:
        key, row = self._key(proposal)
        stop = EarlyStop.after_best(self._best) if self.early_stop else None
        ticket = self.fleet.start(self.space.get(row), stop)
        self._running[ticket] = (proposal, key, row, stop)

    def _follow_depth(self, batch: BatchSearch, record: Any) -> None:
        if self.depth is not None:  # devices may have joined (or been lost) since the search started
            self.depth.devices = max(1, self.fleet.devices)
        super()._follow_depth(batch, record)

    def _free(self, key: Any, row: int) -> bool:
        """Costs no device time: outside the restrictions, or measured before (the cache)."""
        return row < 0 or row in self.preloaded

    def _run_seeds(self, strategy: Strategy, batch: BatchSearch, started: float) -> str:
        """The seeds, spread over the devices (they do not depend on each other's results)."""
        todo = [row for row in dict.fromkeys(self.seeds) if row not in self._seen]
        if self.budget.max_evaluations is not None:
            todo = todo[:max(0, self.budget.max_evaluations - self.evaluations)]
        waiting = [row for row in todo if row not in self.preloaded]
        reason = ""
        for row in todo:
            if row in self.preloaded and not reason:
                reason = self._seed_done(strategy, batch, row, self.preloaded[row], started)
        if reason:
            return reason
        self.fleet.prefetch([self.space.get(row) for row in waiting])
        running: dict[Hashable, int] = {}
        while waiting or running:
            while waiting and not reason and self.fleet.idle() > 0:
                row = waiting.pop(0)
                running[self.fleet.start(self.space.get(row), None)] = row
            ticket, measurement = self.fleet.next_result()
            stop = self._seed_done(strategy, batch, running.pop(ticket), measurement, started)
            if stop and not reason:
                waiting.clear()  # a systematic failure: what was started still comes back and is recorded
                reason = stop
        return reason or self._exhausted(started)

    def _seed_done(self, strategy: Strategy, batch: BatchSearch, row: int, measurement: Measurement,
                   started: float) -> str:
        record = self._record(row, row, measurement, 0.0)
        self._follow_depth(batch, record)
        strategy.observed[row] = record.value
        strategy.transferred.add(row)
        batch.remember(row, record.value)
        return self._systematic(record, strategy, batch, started)

    def run(self, strategy: Strategy) -> SearchHistory:
        """Search until the budget is spent, the space is exhausted or the strategy stops; every started
        evaluation is waited for and recorded."""
        started = self.clock()
        batch = self._open_batch(strategy, devices=max(1, self.fleet.devices))
        reason = ""
        try:
            reason = self._run_seeds(strategy, batch, started)
            while True:
                if not reason:
                    reason = self._exhausted(started)
                if not reason:
                    if batch.ask(self._room(batch)):
                        self._prefetch(batch)
                    if not batch.pending:
                        reason = batch.stop_reason or "strategy finished"
                if reason and not self._running:
                    break
                if not reason and self._dispatch(batch):
                    continue  # a free one (cached, invalid) was recorded: ask again
                if not self._running:  # pragma: no cover - pending proposals and idle devices always start one
                    break
                ticket, measurement = self.fleet.next_result()
                proposal, key, row, _ = self._running.pop(ticket)
                record = self._tell(batch, proposal, key, row, measurement)
                if not reason:  # failures that do not depend on the parameters end the search (what runs is kept)
                    reason = self._systematic(record, strategy, batch, started)
        finally:
            self._finish(batch, reason, started)
        return self.history

    def _dispatch(self, batch: BatchSearch) -> bool:
        """Start pending proposals on the idle devices, the first compiled first; record free ones at once.
        True when a free one was recorded (the strategy may propose again)."""
        running = {key for _, key, _, _ in self._running.values()}
        waiting = [p for p in batch.pending if self._key(p)[0] not in running]
        for proposal in waiting:
            key, row = self._key(proposal)
            if self._free(key, row):
                record = self._record(key, row, self._measure(key, row, proposal), batch.seconds(proposal))
                batch.tell(proposal, record.value)
                return True
        while waiting and self.fleet.idle() > 0:
            configs = [self.space.get(self._key(p)[1]) for p in waiting]
            pick = self.fleet.first_ready(configs) if len(waiting) > 1 else 0
            self._start(waiting.pop(pick))
        return False
