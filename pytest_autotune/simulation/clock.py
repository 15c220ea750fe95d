"""A simulated clock for recorded spaces: what tuning would have cost in wall time, without a GPU.

A recorded space holds every configuration's costs (:mod:`pytest_autotune.datasets.costs`):
compilation, verification, framework overhead and each timed iteration. The
clock replays a search against them on the machine this project builds:

* ``P`` **compile workers** (CPU cores) compile proposed candidates ahead, in
  the order they were proposed, each on the first worker that is free;
* one **serial device** (or ``D`` of them, a cluster: each measurement on the
  device free first) verifies a compiled candidate, runs its timed
  iterations and pays its framework overhead (host-side setup and copies,
  serialised with the device: the conservative choice);
* the **host** thread runs the strategy and the evaluator; the time it spends
  between two calls into the runner is measured for real and charged
  (``think``), and it waits for each measurement, as the evaluator does.

A candidate whose compilation failed (or that was rejected before it:
restrictions, device resources) costs its compile time and never device
time. Sequential tuning, as Kernel Tuner does it (compile, verify, time,
framework, one configuration after another), is the same clock with one
worker and nothing proposed ahead.

Missing costs (:class:`CostModel`): a stage the file never records costs 0
(and is listed in :attr:`CostModel.assumptions`); a row without a stage the
file records for other rows is charged the median of those rows; a valid row
without recorded iterations is charged one run of its recorded time; a
failed row has no timed iterations (its launch failed, or it never ran).

The replay runner carries a clock (``ReplayRunner(path, clock=...)``): it
charges each evaluation and exposes ``prefetch`` for the evaluator's compile
stage, so the product's own search loop runs on simulated time.
:func:`simulate_search` drives a strategy that way and
:func:`replay_sequence` charges a fixed evaluation order (another tuner's).
"""
from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Iterable, Sequence

import numpy as np

from ..datasets import COST_STAGES, RecordedSpace
from ..results import FailureKind

__all__ = ["Charge", "CostModel", "Pipeline", "Span", "CostCharger", "NO_DEVICE"]

NO_DEVICE = frozenset({FailureKind.COMPILE, FailureKind.INVALID, FailureKind.RESOURCES})
"""Failures that never reach the device: the compiler (or a check before it) rejected the candidate."""


# -- what one evaluation costs ------------------------------------------------------------------------


@dataclass(frozen=True)
class Charge:
    """The recorded cost of one evaluation, in seconds, by stage."""

    compile: float = 0.0
    verify: float = 0.0
    runs: tuple[float, ...] = ()  # each timed iteration
    framework: float = 0.0
    reaches_device: bool = True  # False: it failed at (or before) compilation

    def device(self, iterations: int | None = None) -> float:
        """Device time: verification, the first ``iterations`` timed runs (all when None), framework."""
        if not self.reaches_device:
            return 0.0
        runs = self.runs if iterations is None else self.runs[:max(int(iterations), 0)]
        return self.verify + math.fsum(runs) + self.framework

    def sequential(self, iterations: int | None = None) -> float:
        """Everything one after another, as a sequential tuner pays it."""
        return self.compile + self.device(iterations)

    def by_stage(self, iterations: int | None = None) -> dict[str, float]:
        """Seconds per stage actually charged (``runs``: the timed iterations run)."""
        if not self.reaches_device:
            return {"compile": self.compile, "verify": 0.0, "runs": 0.0, "framework": 0.0}
        runs = self.runs if iterations is None else self.runs[:max(int(iterations), 0)]
        return {"compile": self.compile, "verify": self.verify, "runs": math.fsum(runs), "framework": self.framework}


class CostModel:
    """Per-row :class:`Charge` of a recorded space, with the module's rules for missing costs."""

    def __init__(self, recorded: RecordedSpace):
        self.recorded = recorded
        n = recorded.n_configs
        self.assumptions: list[str] = []
        self._stage: dict[str, np.ndarray] = {}
        table = recorded.costs
        for stage in COST_STAGES:
            values = table.stage(stage) if table is not None else np.full(n, np.nan)
            have = ~np.isnan(values)
            if not have.any():
                self._stage[stage] = np.zeros(n)
                self.assumptions.append(f"{stage}: not recorded, charged 0")
                continue
            filled = np.where(have, values, float(np.median(values[have])))
            missing = n - int(have.sum())
            if missing:
                self.assumptions.append(f"{stage}: missing for {missing} of {n} configurations, charged the "
                                        f"median of the others ({np.median(values[have]):.4g} ms)")
            self._stage[stage] = filled / 1e3  # ms -> s
        without_runs = sum(1 for r in np.flatnonzero(recorded.ok) if recorded.samples[r] is None)
        if without_runs:
            self.assumptions.append(f"runs: no timed iterations recorded for {without_runs} valid configurations, "
                                    "charged one run of the recorded time")
        self._cache: dict[int, Charge] = {}

    def charge(self, row: int) -> Charge:
        """The cost of evaluating ``row``; a row outside the space (-1) costs nothing (rejected up front)."""
        row = int(row)
        if row < 0:
            return Charge(reaches_device=False)
        hit = self._cache.get(row)
        if hit is not None:
            return hit
        rec = self.recorded
        kind = rec.failures[row]
        if kind is None:
            samples = rec.samples[row]
            runs = tuple((np.asarray(samples) / 1e3).tolist()) if samples is not None and len(samples) else (
                float(rec.times[row]) / 1e3,)
        else:
            runs = ()
        charge = Charge(compile=float(self._stage["compile"][row]), verify=float(self._stage["verify"][row]),
                        runs=runs, framework=float(self._stage["framework"][row]),
                        reaches_device=kind not in NO_DEVICE)
        self._cache[row] = charge
        return charge


# -- the machine: compile workers and a serial device ----------------------------------------------------


@dataclass(frozen=True)
class Span:
    """One stretch of simulated work: ``what`` (compile, device, think) of ``key`` on ``where``."""

    key: Hashable
    what: str
    where: str  # "compile-<i>", "device" or "host"
    start: float
    end: float


class Pipeline:
    """``workers`` compile workers and ``devices`` devices on a simulated clock (seconds from 0).

    ``now`` is the host thread's time: it advances when the host thinks
    (:meth:`think`) and when it waits for a result (:meth:`measure`, or
    :meth:`wait_until` when ``host_waits`` is False: a driver of several
    devices starts one evaluation per free device and waits for the first
    result, :func:`~pytest_autotune.simulation.search.simulate_fleet_search`).
    Compiles queue on the first free worker in submission order; a measurement
    goes to the device free first. With one device and ``host_waits`` this is
    the clock of one serial device, as before devices were counted.
    """

    def __init__(self, workers: int = 1, keep_spans: bool = True, *, devices: int = 1, host_waits: bool = True):
        for name, value in (("workers", workers), ("devices", devices)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        self.workers = int(workers)
        self.devices = int(devices)
        self.host_waits = bool(host_waits)
        self.now = 0.0
        self._free = [(0.0, i) for i in range(self.workers)]  # (time the worker is free, worker index)
        self._device_free = [(0.0, i) for i in range(self.devices)]  # (time the device is free, device index)
        self._compiled: dict[Hashable, float] = {}
        self.keep_spans = keep_spans
        self.spans: list[Span] = []
        self.busy = {"compile": 0.0, "device": 0.0, "host": 0.0}

    @property
    def device_free(self) -> float:
        """When the first device is free."""
        return self._device_free[0][0]

    def _span(self, key: Hashable, what: str, where: str, start: float, end: float) -> None:
        self.busy[what if what != "think" else "host"] += end - start
        if self.keep_spans and end > start:
            self.spans.append(Span(key, what, where, start, end))

    def think(self, seconds: float, key: Hashable = None) -> None:
        """The host computes for ``seconds`` (strategy, evaluator)."""
        seconds = max(float(seconds), 0.0)
        self._span(key, "think", "host", self.now, self.now + seconds)
        self.now += seconds

    def wait_until(self, moment: float) -> None:
        """The host waits for a result known at ``moment`` (a driver of several devices)."""
        self.now = max(self.now, float(moment))

    def compile(self, key: Hashable, seconds: float) -> float:
        """Start compiling ``key`` now (or when a worker frees up); returns when it is done. Once per key."""
        if key in self._compiled:
            return self._compiled[key]
        free_at, worker = heapq.heappop(self._free)
        start = max(self.now, free_at)
        end = start + max(float(seconds), 0.0)
        heapq.heappush(self._free, (end, worker))
        self._compiled[key] = end
        self._span(key, "compile", f"compile-{worker}", start, end)
        return end

    def compiled(self, key: Hashable) -> bool:
        return key in self._compiled

    def ready_at(self, key: Hashable) -> float:
        """When ``key``'s compile ends (0 when it was never started: it would be compiled on demand)."""
        return self._compiled.get(key, 0.0)

    def measure(self, key: Hashable, seconds: float, reaches_device: bool = True) -> tuple[float, float]:
        """``key`` runs, once compiled, on the device free first; returns the device (start, end).

        With ``host_waits`` the host waits for the result (``now`` becomes its end)."""
        ready = self._compiled.get(key)
        if ready is None:
            raise KeyError(f"{key!r} was never compiled")
        if not reaches_device:
            done = max(self.now, ready)
            if self.host_waits:
                self.now = done
            return done, done
        free_at, device = heapq.heappop(self._device_free)
        start = max(self.now, ready, free_at)
        end = start + max(float(seconds), 0.0)
        heapq.heappush(self._device_free, (end, device))
        self._span(key, "device", "device" if self.devices == 1 else f"device-{device}", start, end)
        if self.host_waits:
            self.now = end
        return start, end


# -- charging a replay runner's evaluations --------------------------------------------------------------


class CostCharger:
    """Charges the evaluations of a recorded space on a :class:`Pipeline` (what a ``ReplayRunner`` carries).

    With ``host_time`` the real time spent outside the charger between two
    calls (the strategy, the evaluator) is charged to the host, read from
    ``timer`` (wall time by default; ``time.thread_time`` charges the host
    thread's CPU time, what the work costs on an idle machine); without it the
    caller charges host time itself (:meth:`Pipeline.think`).
    """

    def __init__(self, recorded: RecordedSpace, pipeline: Pipeline | int = 1, *, host_time: bool = True,
                 model: CostModel | None = None, timer: Callable[[], float] = time.perf_counter):
        self.recorded = recorded
        self.pipeline = pipeline if isinstance(pipeline, Pipeline) else Pipeline(pipeline)
        self.model = model if model is not None else CostModel(recorded)
        self.host_time = host_time
        self.timer = timer
        self._last = timer()

    def restart_host_timer(self) -> None:
        """Host time counts from now (call right before the search starts)."""
        self._last = self.timer()

    def _host(self) -> None:
        if self.host_time:
            now = self.timer()
            self.pipeline.think(now - self._last)

    def _done(self) -> None:
        self._last = self.timer()

    def prefetch(self, rows: Iterable[int]) -> None:
        """Start compiling ``rows`` (the evaluator's compile stage, ahead of the device)."""
        self._host()
        for row in rows:
            row = int(row)
            if row >= 0:
                self.pipeline.compile(row, self.model.charge(row).compile)
        self._done()

    def first_ready(self, rows: Sequence[int]) -> int:
        """Index of the row the device takes next, as a compile pool picks it: the earliest proposed of
        those compiled by the time the device is free, else the one whose compile ends first. A row
        nobody prefetched, or one outside the space, is ready at once (compiled when measured, or rejected)."""
        ready = [self.pipeline.ready_at(int(row)) if int(row) >= 0 else 0.0 for row in rows]
        free = max(self.pipeline.now, self.pipeline.device_free)
        return next((i for i, t in enumerate(ready) if t <= free), int(np.argmin(ready)))

    def charge(self, row: int, iterations: int | None = None) -> dict[str, Any]:
        """Measure ``row`` on the simulated machine (compiling it first if nobody prefetched it).

        ``iterations`` is how many timed runs were actually made (all recorded
        ones when None; the hook for early stopping). Returns the seconds
        charged per stage and the simulated times, for ``Measurement.extra``.
        """
        self._host()
        row = int(row)
        charge = self.model.charge(row)
        pipe = self.pipeline
        if row < 0:
            end = pipe.now
            start = end
        else:
            pipe.compile(row, charge.compile)
            start, end = pipe.measure(row, charge.device(iterations), charge.reaches_device)
        run_count = len(charge.runs) if iterations is None else min(max(int(iterations), 0), len(charge.runs))
        out = {"stages_s": charge.by_stage(iterations), "iterations": run_count if charge.reaches_device else 0,
               "iterations_recorded": len(charge.runs), "device_start_s": start, "done_s": end}
        self._done()
        return out


# -- whole searches on simulated time ------------------------------------------------------------------
