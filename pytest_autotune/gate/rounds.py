"""Rounds beside the probes: the kernel measured where the machine's conditions are known.

A shared machine is not one machine over time. On the 2-core CI host the same
unchanged kernel (128 KiB in L2) read 0.245 ms in some rounds and 0.40-0.60 ms
in others, a tenth of a second apart: states that last from a fraction of a
second to several seconds, per CPU (a busy hyperthread sibling on the host,
most likely). A triad probe sized to the kernel, pinned beside it on the same
CPU, mostly read the same two states (0.0030 ms and 0.0049 ms; correlation
0.61 over 30 rounds); run in the pytest process while the kernel ran in its
worker, it read no correlation at all (-0.02).

So both the lock and the gate measure in *rounds*: each round pins the
kernel's worker and this thread to one CPU (the CPUs taken in turn), runs
the probes, the kernel, and the probes again. The probes then say, round by
round, which state the machine was in:

* the lock keeps the rounds where the machine was at its best (the winner
  within the tolerance of its best round): its samples and probes describe
  one state, the fastest the machine offered (:func:`best_state_rounds`);
* the gate compares the kernel with the lock in *like-for-like* rounds (the
  probes within the tolerance of the lock's): there no correction is needed
  and none is guessed (:mod:`.verdict`).
"""
from __future__ import annotations

import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..measure.pauses import pause as take_pause
from ..measure.reference import LockedReference, round_state
from ..measure.timing import MIN_UNPREEMPTED, faster_half, interrupted
from ..results import Measurement
from ..execution.isolation import sharing_one_cpu, usable_cpus
from .probes import pool_probes

Measure = Callable[[], Measurement]
Probe = Callable[[], "Mapping[str, Any] | None"]
Pin = Callable[[int], AbstractContextManager]
"""Round ``i``'s placement: a context manager that keeps the kernel and the probes on one CPU."""

LOCK_ROUNDS = 6
"""Rounds the lock measures its winner in, beside the probes (the CPUs in turn: 3 on each of 2 cores)."""
LOCK_PAUSE_S = 0.1
"""The pause between the first rounds. Kept where the machine reads quiet: the CI host's slow state is
invisible to the load and, in a slow span, to the probes (they read that state in every round), so "quiet"
cannot be told from "steadily slow"; without the pauses the six rounds would span half the time and be
likelier to lie within one slow span, the lock the gate's yardstick recorded slow
(docs/explanation/gate-machine-differences.md#lock_more_pauses_s)."""
LOCK_MORE_PAUSES_S = (0.3, 0.7, 1.0, 0.5, 1.5, 0.3, 2.0, 1.0)
"""The lock's further rounds, one after each pause (7.3 s in all), where the tuning's time allows them (see
:data:`LOCK_PATIENCE`): a slow state can outlast six rounds, and spread over more seconds the lock's rounds
are likelier to meet the fast state. Measured: docs/explanation/gate-machine-differences.md#lock_more_pauses_s.
Each pause counts from the start of the round before: what spreads the rounds is the time between them, and a
round that itself lasts a second (a Triton kernel in the interpreter, with its probes) already spaced them by
that much; for a kernel of a millisecond the pauses are as before."""
LOCK_PATIENCE = 0.1
"""The share of the tuning's wall time the lock's further rounds may spend in pauses (all of
:data:`LOCK_MORE_PAUSES_S` once tuning took 73 s): a test suite's seconds-long tunes of tiny kernels pay
nothing, a real tuning's minutes a few seconds."""


LOCK_RUNNERS_UP_SHARE = 0.05
"""The share of the tuning's wall time the runners-up may add to the lock's rounds. The gate never reads a
runner-up's locked samples (``--autotune-ranking`` times the runners-up afresh beside the winner), so their
re-timing is the lockfile's ranking, not the gate's evidence: the finalists among them were re-timed beside
the winner already (the confirmation rounds), and the others join the rounds only where the time they would
take is small beside the tuning's (fastest first). Before, a 12-configuration C tuning re-timed 5 runners-up
in each of its 7 rounds (2.6 s beside a 1.3 s search); Triton's interpreter, runners-up of 13-27 ms."""


def lock_runners_up(costs_s: Sequence[float], rounds: int, tuning_s: float) -> int:
    """How many of the runners-up (their evaluation's cost in seconds, in rank order) the lock's ``rounds``
    rounds re-time: as many, in order, as fit :data:`LOCK_RUNNERS_UP_SHARE` of ``tuning_s``."""
    allowed, spent = 0, 0.0
    for cost in costs_s:
        spent += max(0.0, cost) * rounds
        if spent > LOCK_RUNNERS_UP_SHARE * tuning_s:
            break
        allowed += 1
    return allowed


def rotating_pin(*runners: Any) -> Pin:
    """Round ``i`` on the ``i``-th usable CPU (in turn), with the runners' workers and this thread.

    Taking the CPUs in turn gives each its chance to be in the fast state; pinning keeps the probes on the
    CPU the kernel runs on, so they see what it sees."""
    cpus = usable_cpus()
    if not cpus:
        return lambda i: nullcontext()
    return lambda i: sharing_one_cpu(*runners, cpu=cpus[i % len(cpus)], here=True)


def reference_runs(runner: Any, n: int | None) -> AbstractContextManager:
    """The runner's reference runs of size ``n`` for the rounds within (:mod:`~pytest_autotune.measure.reference`);
    nothing where the runner has none (a GPU's, a replay) or no size is known."""
    start = getattr(runner, "reference_runs", None)
    return start(n) if callable(start) and n else nullcontext()


@dataclass
class Round:
    """One round: each configuration's measurement, between two runs of the probes."""

    measurements: list[Measurement]
    probes: list[Mapping[str, Any]]
    cpu: int | None = None  # the CPU it was pinned to (None: not pinned)

    @property
    def failed(self) -> Measurement | None:
        return next((m for m in self.measurements if not m.ok), None)

    def samples(self, which: int = 0) -> list[float]:
        """Measure ``which``'s runs that no other task interrupted (all of them without that accounting)."""
        return judged_runs(self.measurements[which]).samples


@dataclass(frozen=True)
class JudgedRuns:
    """The runs of a measurement the gate judges, and why the others were left out."""

    samples: list[float]
    """Runs no other task interrupted (all of them where too few were)."""
    preempted: int = 0
    """Runs another task interrupted (:func:`~pytest_autotune.measure.timing.unpreempted`)."""
    state: float | None = None
    """The machine's state over the judged runs, as their reference runs read it against the lock's (their
    median; 1.0: the lock's, 2.0: twice as slow); None without reference runs (:mod:`~pytest_autotune.measure.reference`)."""
    triads: list[float] = field(default_factory=list)
    """The undisturbed runs' reference triad times (ms), aligned with the measurement's undisturbed runs."""
    chains: list[float] = field(default_factory=list)
    """The same runs' reference chain times (ms); empty where the measurement has none."""

    in_lock_state: bool = True
    """In the lock's state: ``state`` within the tolerance, or faster (or no reference said otherwise)."""
    shared_cpu: bool = False
    """Another task interrupted so many runs that fewer than :data:`~.timing.MIN_UNPREEMPTED` were left: a
    neighbour shared the kernel's CPU throughout, and the runs (all kept in ``samples``) time it, not the kernel."""


def judged_runs(m: Measurement, locked: LockedReference | None = None, tolerance: float = 0.0) -> JudgedRuns:
    """The runs of ``m`` to judge (those no other task interrupted) and, with the lock's reference runs
    (``locked``), the machine's state they ran in (:func:`~pytest_autotune.measure.reference.round_state`)."""
    if not m.samples:
        return JudgedRuns([float(m.value)])  # type: ignore[arg-type]
    extra = m.extra if isinstance(m.extra, dict) else {}
    offcpu = extra.get("offcpu_ms")
    samples = list(m.samples)
    hit = interrupted(samples, offcpu if isinstance(offcpu, list) else None) or [False] * len(samples)
    # too few runs nobody interrupted: a neighbour shared the CPU throughout; every run is kept, and counted
    shared = any(hit) and hit.count(False) < MIN_UNPREEMPTED <= len(samples)
    mask = [True] * len(samples) if shared or hit.count(False) < MIN_UNPREEMPTED else [not h for h in hit]
    kept = [x for x, keep in zip(samples, mask) if keep]
    preempted = hit.count(True) if shared or mask.count(False) else 0
    triads, chains = (_aligned(extra.get(name), mask) for name in ("reference_ms", "reference_chains_ms"))
    if triads is None:
        return JudgedRuns(kept, preempted, shared_cpu=shared)
    if locked is None:
        return JudgedRuns(kept, preempted, triads=triads, chains=chains or [], shared_cpu=shared)
    state = round_state(locked.states(triads, chains))
    in_state = state is not None and state <= 1 + tolerance
    return JudgedRuns(kept, preempted, state, triads, chains or [], in_state, shared)


def _aligned(values: Any, mask: Sequence[bool]) -> list[float] | None:
    """A per-run record's values of the runs ``mask`` keeps; None unless one number per run."""
    if not isinstance(values, list) or len(values) != len(mask):
        return None
    return [float(v) for v, keep in zip(values, mask) if keep]


def measure_round(i: int, measures: Sequence[Measure], probe: Probe | None, pin: Pin | None,
                  pause_s: float = 0.0) -> Round:
    """Round ``i``: after ``pause_s``, on round ``i``'s CPU, the probes, each measure in turn, the probes."""
    take_pause(pause_s)
    with pin(i) if pin is not None else nullcontext():
        cpu = _pinned_cpu()
        before = (probe() or {}) if probe is not None else {}
        measurements = []
        for measure in measures:
            measurements.append(measure())
            if not measurements[-1].ok:
                break
        after = (probe() or {}) if probe is not None else {}
    return Round(measurements, [p for p in (before, after) if p], cpu)


def lock_pauses(tuning_s: float) -> tuple[float, ...]:
    """The further lock rounds' pauses a tuning of ``tuning_s`` seconds allows (see :data:`LOCK_PATIENCE`)."""
    allowed, spent = [], 0.0
    for pause in LOCK_MORE_PAUSES_S:
        spent += pause
        if spent > LOCK_PATIENCE * tuning_s:
            break
        allowed.append(pause)
    return tuple(allowed)


def _pinned_cpu() -> int | None:
    cpus = usable_cpus()
    return cpus[0] if len(cpus) == 1 else None


def best_state_rounds(measures: Sequence[Measure], probe: Probe | None, pin: Pin | None, tolerance: float,
                      rounds: int = LOCK_ROUNDS, pause_s: float = LOCK_PAUSE_S,
                      more_pauses_s: Sequence[float] = (),
                      on_round: Callable[[int, int], None] | None = None
                      ) -> tuple[list[list[float]], dict[str, Any] | None, int] | None:
    """Measure ``measures`` in ``rounds`` rounds beside the probes, then one more after each pause of
    ``more_pauses_s`` (see :func:`lock_pauses`), and keep the rounds at the machine's best.

    The machine's best is what the first measure (the winner) reads it to be: a round is kept when the
    median of its faster half is within ``tolerance`` of the best round's. (Chosen by the probes instead,
    the lock of the 128 KiB kernel on the CI host kept rounds at 0.33 ms when the kernel's best was 0.24 ms:
    the probes do not see every state the kernel feels.) Returns each measure's pooled samples from the kept
    rounds, the pooled probe record of those rounds, and how many were kept; None when a measure fails
    (the caller keeps what it had). ``on_round(done, total)`` follows each round (a progress line)."""
    pauses = [pause_s if i else 0.0 for i in range(rounds)] + list(more_pauses_s)
    done: list[Round] = []
    speeds: list[float] = []
    last_s = 0.0
    for i, pause in enumerate(pauses):
        if i >= rounds:  # a further round: its pause counted from the start of the round before
            pause = max(0.0, pause - last_s)
        started = time.perf_counter()
        r = measure_round(i, measures, probe, pin, pause)
        last_s = time.perf_counter() - started - pause
        if on_round is not None:
            on_round(i + 1, len(pauses))
        if r.failed is not None:
            return None
        done.append(r)
        speeds.append(float(np.median(faster_half(r.samples(0)))))
    kept = [r for r, speed in zip(done, speeds) if speed <= min(speeds) * (1 + tolerance)]
    # with reference runs (measure/reference.py): the lock's state is its kept rounds' reference medians
    runs = [judged_runs(r.measurements[0]) for r in kept]
    triads, chains = [x for j in runs for x in j.triads], [x for j in runs for x in j.chains]
    locked = LockedReference(float(np.median(triads)), float(np.median(chains)) if chains else None) \
        if triads else None
    samples = [[x for r in kept for x in judged_runs(r.measurements[j], locked, tolerance).samples]
               for j in range(len(measures))]
    machine = pool_probes([p for r in kept for p in r.probes])
    if locked is not None:
        machine = {**(machine or {}), **locked.record()}
    return samples, machine, len(kept)
