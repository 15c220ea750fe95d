"""A suspected regression's fresh rounds as evidence, and what that evidence decides.

:func:`.verdict.run_gate` measures the rounds and reads each one (the machine against the lock's, whether
the round is like-for-like, what the machine explains of it) into a :class:`FreshRound`; one
:class:`RoundEvidence` collects them and says, after each, whether they decide: a typed decision, or None
for "more rounds". Nothing here measures or words a message, so the rules can be checked on synthetic
rounds and :mod:`.messages` renders what a decision found.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Sequence, Union

import numpy as np

from ..lock.entry import LockEntry, as_entry
from ..measure.reference import LockedReference
from ..measure.timing import Comparison, compare_samples, faster_half
from .probes import MachineComparison


@dataclass(frozen=True)
class GateCase:
    """The kernel a gate judges: its name, its test, its lock entry, and the tolerance (a fraction,
    0.10 = 10 %) and significance level it is judged by. Every comparison and message of one gate needs
    all five, so they travel together."""

    kernel: str
    nodeid: str
    entry: LockEntry
    tolerance: float
    alpha: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "entry", as_entry(self.entry))

    @property
    def locked_reference(self) -> LockedReference | None:
        """The lock's reference runs, where its rounds had them (measure/reference.py)."""
        return LockedReference.of(self.entry.machine)

    def compare(self, locked: Sequence[float], new: Sequence[float]) -> Comparison:
        """``new`` against ``locked`` by this gate's tolerance and significance level."""
        return compare_samples(locked, new, self.tolerance * 100.0, self.alpha)


@dataclass(frozen=True)
class RoundRules:
    """The numbers the rounds are judged by: the constants of :mod:`.verdict`, read when a gate starts
    (so that a replay can vary them)."""

    like_rounds: int
    """Like-for-like rounds a slowdown must show in (on two CPUs where the rounds took two)."""
    one_cpu_rounds: int
    """Like-for-like rounds that decide on one CPU alone, once no further round follows."""
    min_rounds: int
    """Rounds before a slowdown in like-for-like rounds is final."""
    exponent: float = 1.0
    """The power the machine's slowdown was taken to where it stays unlike the lock's (the message names it)."""


@dataclass(frozen=True)
class FreshRound:
    """One fresh round as the gate read it."""

    cpu: int | None
    """The CPU it was pinned to (None: not pinned)."""
    samples: Sequence[float]
    """The faster half of the kernel's samples in that round."""
    machine: MachineComparison | None
    """The round's probes against the lock's (None without probes)."""
    like: bool
    """Like-for-like: the machine read like the lock's (or nothing said otherwise)."""
    divisor: float
    """What the machine explains of this round's kernel time, as a time factor."""
    preempted: int = 0
    """The kernel's runs another task interrupted that round, left out of ``samples``
    (:func:`~pytest_autotune.measure.timing.unpreempted`)."""
    state: float | None = None
    """Where the round's reference runs read a slower state than the lock's (their median beyond the
    tolerance): by how much (a time factor; the round is then not like-for-like). None: in the lock's state, or
    no reference."""
    shared: bool = False
    """A neighbour shared the kernel's CPU throughout the round (too few runs nobody interrupted): the round
    times the neighbour too, so it is no evidence of a regression (only of a pass, were it back in tolerance)."""


@dataclass(frozen=True)
class Faded:
    """A round read back within the tolerance of the lock: load only ever adds time, so it did not persist."""

    verdict: ClassVar[str] = "pass"
    comparison: Comparison
    """That round's faster half against the lock's."""
    change: float
    """Its change against the lock (a fraction), beyond what a faster machine explains."""
    round_number: int
    """Which fresh round (from 1)."""


@dataclass(frozen=True)
class SlowerLikeForLike:
    """A slowdown shown in like-for-like rounds, significant over their pooled samples."""

    verdict: ClassVar[str] = "slower"
    comparison: Comparison
    """The pooled like-for-like samples (each round divided by the machine's small difference) against the lock's."""
    machine: MachineComparison | None
    """The slowest machine among those rounds (None where they had no probes)."""
    like_rounds: int
    """How many like-for-like rounds showed it."""
    probed: bool
    """Whether those rounds had probes: like-for-like rounds, or plain fresh rounds."""
    one_cpu: bool = False
    """Decided on one CPU alone, every round used and no other CPU like the lock's."""
    cpu: int | None = None
    """That CPU, where ``one_cpu``."""
    rounds: int = 0
    """Every fresh round measured, where ``one_cpu``."""


@dataclass(frozen=True)
class SlowerBeyondMachine:
    """Still slower beyond the tolerance once each round is divided by the most the machine explains."""

    verdict: ClassVar[str] = "slower"
    comparison: Comparison
    machine: MachineComparison | None
    """The slowest machine among the rounds unlike the lock's."""
    exponent: float
    state: float | None = None
    """The slowest state the reference runs read among rounds out of the lock's state (None: none was)."""


@dataclass(frozen=True)
class MachineExplains:
    """Within the tolerance once the most the machine explains is taken off: not comparable with the lock."""

    verdict: ClassVar[str] = "incomparable"
    comparison: Comparison
    machine: MachineComparison | None
    """The slowest probes among the rounds unlike the lock's (None: only the reference runs said so)."""
    exponent: float
    state: float | None = None
    """The slowest state the reference runs read among rounds out of the lock's state (None: none was)."""


@dataclass(frozen=True)
class NotSignificant:
    """Slower in every round, but not significantly over them, and no machine to blame: a pass, with a note."""

    verdict: ClassVar[str] = "pass"
    comparison: Comparison
    like_rounds: int


@dataclass(frozen=True)
class Undecided:
    """The gate's budget was spent before the rounds decided: not comparable, with the evidence so far (never
    a pass or a fail by exhaustion)."""

    verdict: ClassVar[str] = "incomparable"
    comparison: Comparison
    """The like-for-like rounds' pooled samples against the lock's (all rounds where none was like-for-like;
    the first measurement where no round was measured)."""
    like_rounds: int
    rounds: int
    probed: bool
    """Whether the rounds had probes (like-for-like rounds) or not (plain fresh rounds)."""

    def evidence(self) -> str:
        """``+18.0% in 2 of 3 like-for-like rounds``: what the rounds had shown when the budget ran out."""
        change = f"{self.comparison.change_pct:+.1f}%"
        if not self.rounds:
            return f"{change} in the first measurement, no fresh round within the budget"
        if not self.probed:
            return f"{change} in {self.rounds} fresh round{'s' if self.rounds != 1 else ''}"
        if not self.like_rounds:
            return f"{change} in {self.rounds} rounds, none like-for-like"
        return f"{change} in {self.like_rounds} of {self.rounds} like-for-like rounds"


@dataclass(frozen=True)
class NeighbourShared:
    """Every fresh round had a neighbour on the kernel's CPU throughout (too few runs nobody interrupted): not
    comparable, since what the rounds timed was the kernel and the neighbour's time slices together."""

    verdict: ClassVar[str] = "incomparable"
    comparison: Comparison
    """The rounds' samples, as measured, against the lock's."""
    rounds: int
    preempted: int
    """Runs another task interrupted, over all the rounds."""


Decision = Union[Faded, SlowerLikeForLike, SlowerBeyondMachine, MachineExplains, NotSignificant, NeighbourShared,
                 Undecided]


@dataclass
class RoundEvidence:
    """The fresh rounds of one suspected regression, and what they decide so far.

    Every round is compared with the faster half of the lock's samples. :meth:`decision` applies the
    rules in order: a round back within the tolerance passes; a slowdown in enough like-for-like rounds,
    on enough CPUs, after enough rounds, is a regression; and only when no round follows, the one-CPU
    rule and then the correction by the machine decide what is left.
    """

    case: GateCase
    rules: RoundRules
    rounds: list[FreshRound] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.locked: list[float] = faster_half(self.case.entry.samples)
        self._locked_median = float(np.median(self.locked))

    def add(self, fresh: FreshRound) -> None:
        self.rounds.append(fresh)

    def against_lock(self, fresh: FreshRound) -> float:
        """The round's median over the lock's (faster halves both), as measured: 1.3 = 30 % slower."""
        return float(np.median(fresh.samples)) / self._locked_median

    def change(self, fresh: FreshRound) -> float:
        """The round's change against the lock (a fraction). Only a machine *faster* than the lock's is taken
        off here: a faster machine hides a slowdown, it never fades one."""
        return self.against_lock(fresh) / min(1.0, fresh.divisor) - 1.0

    @property
    def like_rounds(self) -> int:
        return sum(r.like for r in self.rounds)

    def rows(self) -> list[dict[str, Any]]:
        """One record per round for the outcome (``GateOutcome.rounds``)."""
        return [{"cpu": r.cpu, "like": r.like, "machine": None if r.machine is None else round(r.machine.factor, 3),
                 "change_pct": round(100 * (self.against_lock(r) - 1), 1), "preempted": r.preempted,
                 **({"state": round(r.state, 3)} if r.state is not None else {}),
                 **({"shared_cpu": True} if r.shared else {})}
                for r in self.rounds]

    def decision(self, last: bool = False) -> Decision | None:
        """What the rounds so far decide, or None: more rounds may decide. ``last``: no round follows, so
        the evidence decides now (the one-CPU rule and the machine's correction apply only then)."""
        if self.rounds and self.change(self.rounds[-1]) <= self.case.tolerance:
            latest = self.rounds[-1]
            return Faded(self.case.compare(self.locked, latest.samples), self.change(latest), len(self.rounds))
        like = [r for r in self.rounds if r.like]
        like_cpus = {r.cpu for r in like}
        cpus = {r.cpu for r in self.rounds}
        like_machines = [r.machine for r in like if r.machine is not None]
        if (len(like) >= self.rules.like_rounds and len(like_cpus) >= min(2, len(cpus))
                and len(self.rounds) >= self.rules.min_rounds):
            judged = self._pooled(like)
            if judged.slower:
                return SlowerLikeForLike(judged, _slowest(like_machines), len(like), bool(like_machines))
        if not last:
            return None
        if len(like) >= self.rules.one_cpu_rounds and len(like_cpus) == 1 < len(cpus):
            judged = self._pooled(like)
            if judged.slower:
                return SlowerLikeForLike(judged, _slowest(like_machines), len(like), bool(like_machines),
                                         one_cpu=True, cpu=next(iter(like_cpus)), rounds=len(self.rounds))
        judged = [r for r in self.rounds if not r.shared]  # a round a neighbour shared throughout is no evidence
        if not judged:
            return NeighbourShared(self._pooled(self.rounds), len(self.rounds), sum(r.preempted for r in self.rounds))
        beyond = self._pooled(judged)
        worst = _slowest([r.machine for r in judged if not r.like and r.machine is not None])
        states = [r.state for r in judged if r.state is not None]
        state = max(states) if states else None
        if beyond.slower:
            return SlowerBeyondMachine(beyond, worst, self.rules.exponent, state)
        if worst is not None or state is not None:
            return MachineExplains(beyond, worst, self.rules.exponent, state)
        return NotSignificant(beyond, len(like))

    def undecided(self, first: Comparison) -> Undecided:
        """What the rounds so far show, where the budget ends them undecided: the like-for-like rounds pooled
        (as they are judged), else every round corrected by the machine, else the first measurement."""
        like = [r for r in self.rounds if r.like]
        shown = self._pooled(like or [r for r in self.rounds if not r.shared] or self.rounds) if self.rounds else first
        return Undecided(shown, len(like), len(self.rounds), any(r.machine is not None for r in self.rounds))

    def _pooled(self, rounds: Sequence[FreshRound]) -> Comparison:
        """These rounds' samples, each divided by what the machine explains of its round, against the lock's."""
        return self.case.compare(self.locked, [x / r.divisor for r in rounds for x in r.samples])


def _slowest(machines: Sequence[MachineComparison]) -> MachineComparison | None:
    return max(machines, key=lambda m: m.factor) if machines else None
