"""The CI regression gate: re-time the locked winner and decide pass, fail or "faster".

Two ways to decide, by what changed since the lock:

* **the kernel source was edited**: :func:`run_ab_gate` builds the locked
  source and the current one at the locked parameters and times them in
  interleaved rounds (ABAB...) on this machine. "The edit made it slower" is
  decided from those samples alone, whatever this machine's speed relative
  to the lock's; the comparison with the locked samples is reported beside it.
* **the source is unchanged**: :func:`run_gate` compares fresh samples with
  the locked ones. A suspected regression is measured again in rounds, each
  beside this machine's probes on the kernel's CPU (:mod:`.rounds`). Where
  the probes read like the lock's, the kernel is compared with its lock
  as it is; where the machine stays unlike the lock's, the most it explains
  is taken off first. A machine difference corrects the verdict, it never
  vetoes it: "not comparable" is left only for a change the machine could
  explain.

This module measures and applies; the rounds' evidence and what it decides are
:mod:`.evidence`, the wording of every message :mod:`.messages`. Kept free of
pytest so the decision can be tested (and reused) on its own: the plugin turns
a :class:`GateOutcome` into ``pytest.fail`` or a summary row.

The constants below are the gate's rules; how each was chosen, with the
measurements and their results files, is in the manual:
``docs/explanation/gate-machine-differences.md#how-the-constants-were-chosen``.
"""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from ..lock.entry import as_entry
from ..errors import AutotuneError
from ..lock.problem import problem_change
from ..measure.pauses import scaled
from ..measure.timing import Comparison, faster_half
from ..results import Measurement
from . import messages
from .budget import UNLIMITED, GateBudget
from .evidence import (Decision, Faded, FreshRound, GateCase, MachineExplains, NeighbourShared, NotSignificant,
                       RoundEvidence, RoundRules, SlowerBeyondMachine, SlowerLikeForLike, Undecided)
from .messages import retune_command
from .probes import MachineComparison, compare_machines, pool_probes
from .rounds import Measure, Pin, Probe, Round, judged_runs, measure_round

__all__ = ["AB_ROUNDS", "AB_CONFIRM_BLOCKS", "CONFIRM_PAUSE_S", "ROUND_PAUSES_S", "MORE_ROUND_PAUSES_S", "LIKE_ROUNDS",
           "ONE_CPU_ROUNDS", "MIN_ROUNDS", "MISMATCH_EXPONENT", "GateOutcome", "EntryCheck", "LockedSourceUnusable",
           "check_entry", "retune_command", "run_gate", "run_ab_gate", "interleaved", "round_divisor"]

AB_ROUNDS = 3  # interleaved rounds of locked and current source
AB_CONFIRM_BLOCKS = 2  # further A/B blocks a suspected regression of an edit must survive
CONFIRM_PAUSE_S = 0.1
"""Pause before each further A/B block, so that it is a new draw of the machine's scheduling, not the same
window again. Measured: docs/explanation/gate-machine-differences.md#confirm_pause_s"""

ROUND_PAUSES_S = (0.1, 0.3, 0.5, 0.2, 0.7, 0.3, 1.0, 0.5, 1.5, 0.5, 2.0, 1.0)
"""The pause before each fresh round of a suspected regression (at most 12 rounds, 8.6 s of pauses): varied
lengths, so that each round meets the machine in a fresh state. Measured:
docs/explanation/gate-machine-differences.md#round_pauses_s"""

MORE_ROUND_PAUSES_S = (0.5, 1.0, 0.3, 1.5, 0.7, 2.0, 0.5, 1.0)
"""Further rounds (7.5 s of pauses at most), only where like-for-like rounds showed the slowdown but not yet
in :data:`LIKE_ROUNDS` rounds on two CPUs: the evidence is there, the second CPU has not yet read like the
lock's. Measured: docs/explanation/gate-machine-differences.md#more_round_pauses_s"""

LIKE_ROUNDS = 2
"""Like-for-like rounds a slowdown must show in, significant over their pooled samples, on two CPUs where the
rounds took two: a neighbour that disturbed one CPU for a moment is not on the other. Measured:
docs/explanation/gate-machine-differences.md#like_rounds"""

ONE_CPU_ROUNDS = 3
"""Like-for-like rounds that decide a slowdown on one CPU alone, once every round is used and no other CPU
read like the lock's: rounds spread over the whole schedule are no passing neighbour. Measured:
docs/explanation/gate-machine-differences.md#one_cpu_rounds"""

MIN_ROUNDS = 6
"""Fresh rounds before a slowdown in like-for-like rounds is final: the probes can miss a slow state the
kernel is in, and an unchanged kernel comes back to its lock's speed in a later round. Measured:
docs/explanation/gate-machine-differences.md#min_rounds"""

MISMATCH_EXPONENT = 2.0
"""Where the machine stays unlike the lock's, the most it explains is its probes' slowdown to this power: a
kernel can feel a contention more than the probe sized to it. Measured:
docs/explanation/gate-machine-differences.md#mismatch_exponent"""


@dataclass
class GateOutcome:
    """What the gate found for one kernel.

    ``method`` is ``absolute`` (fresh samples against the locked ones) or
    ``a/b`` (locked against current source, side by side on this machine);
    ``absolute`` keeps the comparison with the locked samples in both cases.
    """

    verdict: str  # "pass" | "slower" | "faster" | "broken" | "incomparable"
    comparison: Comparison | None
    measurement: Measurement
    message: str = ""
    stale_ranking: list[dict[str, Any]] = field(default_factory=list)  # runners-up that now beat the winner
    method: str = "absolute"
    absolute: Comparison | None = None
    machine: MachineComparison | None = None
    notes: list[str] = field(default_factory=list)
    rounds: list[dict[str, Any]] = field(default_factory=list)
    """The fresh rounds of a suspected regression, one record each: ``cpu``, ``change_pct`` (its faster
    half against the lock's), ``machine`` (the probes' time factor, None without probes), ``like``."""
    budget_stopped: bool = False
    """The gate's time budget ended the rounds with the verdict undecided (the verdict is ``incomparable``)."""

    @property
    def failed(self) -> bool:
        return self.verdict in ("slower", "broken")


@dataclass(frozen=True)
class EntryCheck:
    """Can a lock entry be gated, and what changed since it was written?

    ``stale`` (why the entry cannot be gated) is set only when the locked
    configuration cannot be run as it was measured: the problem changed, or
    the locked parameters are no longer in the search space. An edited
    kernel (source or compiler options) is gated: kernel edits are what the
    gate exists for. ``changed`` lists what differs from the lock all the same.
    """

    stale: str | None
    changed: tuple[str, ...] = ()

    @property
    def notes(self) -> str:
        return "; ".join(f"{name} changed since lock" for name in self.changed)


def check_entry(entry: Mapping[str, Any], hashes: Mapping[str, str], locked_in_space: Callable[[], bool],
                problem: Mapping[str, Any] | None = None) -> EntryCheck:
    """Classify ``entry`` against the current ``hashes``; ``locked_in_space()`` is asked only when needed.
    With the current readable ``problem``, a changed problem's reason says which part changed."""
    entry = as_entry(entry)
    recorded = entry.hashes
    changed = tuple(sorted(name for name, value in hashes.items() if recorded.get(name) != value))
    if "problem" in changed:
        change = problem_change(entry.problem, problem) if problem is not None else ""
        return EntryCheck(f"the problem changed: {change}" if change else
                          "the problem changed (problem size, argument shapes, dtypes or scalar values)", changed)
    if "space" in changed and not locked_in_space():
        return EntryCheck("the locked configuration is no longer in the search space", changed)
    return EntryCheck(None, changed)


def _samples(m: Measurement) -> list[float]:
    """A measurement's runs that no other task interrupted (every run without that accounting)."""
    return judged_runs(m).samples


def _broken(case: GateCase, measurement: Measurement, what: str = "") -> GateOutcome:
    return GateOutcome("broken", None, measurement, messages.broken(case, measurement, what))


def run_gate(kernel: str, nodeid: str, entry: Mapping[str, Any], measurement: Measurement, tolerance: float,
             alpha: float, measure_runner_up: Callable[[Mapping[str, Any]], Measurement] | None = None, *,
             remeasure: Measure | None = None,
             machine: MachineComparison | Callable[[], MachineComparison | None] | None = None,
             probe: Probe | None = None, pin: Pin | None = None,
             pauses_s: Sequence[float] | None = None, budget: GateBudget | None = None,
             on_round: Callable[[int, int], None] | None = None) -> GateOutcome:
    """Compare a fresh measurement of the locked winner with the lock, in like-for-like conditions.

    ``tolerance`` is a fraction (0.10 = 10 %). A first measurement within
    the tolerance passes at once. A suspected regression is measured again
    in rounds (``remeasure``, one per pause of ``pauses_s``, default
    :data:`ROUND_PAUSES_S`), each beside this machine's probes (``probe``,
    before and after, on the kernel's CPU with ``pin``, see :mod:`.rounds`):

    * a round whose faster half is back within the tolerance ends it: a
      pass (load only ever adds time; it did not persist);
    * a round whose probes read within the tolerance of the lock's is
      *like-for-like*: only the probes' small difference is taken off there.
      A slowdown in :data:`LIKE_ROUNDS` such rounds (on two CPUs where the
      rounds took two), significant on their pooled samples, that has not
      faded in :data:`MIN_ROUNDS` rounds, is a regression; once every round
      is used, so is one in :data:`ONE_CPU_ROUNDS` such rounds on one CPU;
    * when the machine stays unlike the lock's in every round, each round is
      corrected by the most the machine explains (its probes' slowdown
      raised to :data:`MISMATCH_EXPONENT`): a slowdown still beyond the
      tolerance is a regression naming both numbers, and one the machine
      could explain is ``incomparable``.

    ``budget`` (:mod:`.budget`, started by the caller before the first
    measurement) bounds the gate's wall time: a further round starts only
    while its pause and the last round's length fit; rounds the budget ends
    undecided are ``incomparable`` with the evidence so far (a decided
    verdict stays what it is).

    ``machine`` (a comparison, or a callable asked when needed) gives the
    machine directly instead of probes: it corrects every round alike.
    Without either, every round is like-for-like.

    With ``measure_runner_up`` the recorded runners-up are re-timed; one that
    now beats the winner significantly marks the ranking stale (a re-tune is
    due). It never excuses a slowdown: a slowdown the winner and its
    runner-up share is what a toolchain, header, flag or environment
    regression looks like, since it hits every configuration of the kernel.

    ``on_round(done, at_most)`` follows each fresh round (a progress line; the rounds may stop before ``at_most``).
    """
    case = GateCase(kernel, nodeid, entry, tolerance, alpha)
    if not measurement.ok:
        return _broken(case, measurement)
    runs = judged_runs(measurement, case.locked_reference, tolerance)
    # a machine clearly faster than the lock's (its reference runs say) hides a slowdown: it is taken off
    new_samples: Sequence[float] = [x / faster_state(runs.state, tolerance) for x in runs.samples]
    cmp = case.compare(case.entry.samples, new_samples)
    outcome = GateOutcome("pass", cmp, measurement, absolute=cmp)
    if cmp.slower and remeasure is not None:
        given = machine() if callable(machine) else machine
        return _judge_in_rounds(case, outcome, remeasure, given, probe, pin,
                                ROUND_PAUSES_S if pauses_s is None else pauses_s, measure_runner_up,
                                MORE_ROUND_PAUSES_S if pauses_s is None else (), budget or UNLIMITED,
                                on_round=on_round)
    mc = None
    if (cmp.slower or cmp.faster) and machine is None and probe is not None:
        with pin(0) if pin is not None else nullcontext():
            mc = compare_machines(case.entry.machine, pool_probes([probe() or {}]), tolerance)
    elif cmp.slower or cmp.faster:
        mc = machine() if callable(machine) else machine
    outcome.machine = mc
    if cmp.slower:  # measured once, no fresh rounds: judged beyond the most the machine explains
        corrected = case.compare(case.entry.samples, [x / mc.slowdown for x in new_samples]) if mc is not None else None
        if corrected is not None and not corrected.slower:
            outcome.verdict = "incomparable"
            outcome.message = messages.incomparable(case, cmp, mc)  # type: ignore[arg-type]
        else:
            outcome.verdict = "slower"
            outcome.message = messages.regression(case, cmp, mc, corrected)
    elif cmp.faster:
        if mc is not None and not case.compare(case.entry.samples, [x / mc.speedup for x in new_samples]).faster:
            outcome.notes.append(messages.faster_explained(cmp, mc))
        else:
            outcome.verdict = "faster"
            outcome.message = messages.faster(case, cmp, extra=f"; {mc.explains(slower=False)}" if mc is not None else "")
    _check_ranking(case, outcome, new_samples, measure_runner_up, budget or UNLIMITED)
    return outcome


def _judge_in_rounds(case: GateCase, outcome: GateOutcome, remeasure: Measure, given: MachineComparison | None,
                     probe: Probe | None, pin: Pin | None, pauses: Sequence[float],
                     measure_runner_up: Callable[[Mapping[str, Any]], Measurement] | None,
                     more_pauses: Sequence[float] = (), budget: GateBudget = UNLIMITED, *,
                     on_round: Callable[[int, int], None] | None = None) -> GateOutcome:
    """A suspected regression, judged in rounds beside the probes (see :func:`run_gate`): measure a round,
    add it to the evidence, stop once the evidence decides. ``more_pauses`` continue the rounds where
    like-for-like rounds showed the slowdown but have not yet decided it (see :data:`MORE_ROUND_PAUSES_S`).
    A round starts only while ``budget`` allows its pause and the last round's length; where it does not,
    the evidence so far is :class:`~.evidence.Undecided`. ``on_round(done, at_most)`` follows each round."""
    first = outcome.absolute
    assert first is not None
    evidence = RoundEvidence(case, RoundRules(LIKE_ROUNDS, ONE_CPU_ROUNDS, MIN_ROUNDS,
                                              exponent=MISMATCH_EXPONENT if given is None else 1.0))
    latest: list[float] = []  # the latest round's samples, all of them (the runners-up are timed against them)
    decision: Decision | None = None
    schedule = [*pauses, *more_pauses]
    # the last round's length: what the next one is expected to take (the first, the first measurement's: the
    # budget starts before it, and a round measures the same kernel again, with the probes)
    round_s = budget.elapsed
    for i, pause in enumerate(scaled(p) for p in schedule):
        if i == len(pauses) and not evidence.like_rounds:
            break  # no like-for-like round: more rounds are unlikely to bring one, the correction decides
        if not budget.allows(pause + round_s):
            decision = evidence.undecided(first)
            budget.stopped = True
            break
        budget.sleep(pause)
        began = budget.clock()
        r = measure_round(i, [remeasure], probe if given is None else None, pin)
        round_s = budget.clock() - began
        if r.failed is not None:
            return _broken(case, r.failed)
        latest = r.samples()
        evidence.add(_read_round(case, r, given))
        decision = evidence.decision()
        if on_round is not None:  # the further rounds count once like-for-like rounds make them possible
            on_round(i + 1, len(schedule) if evidence.like_rounds else len(pauses))
        if decision is not None:
            break
    if decision is None:
        decision = evidence.decision(last=True)
    assert decision is not None
    outcome.rounds = evidence.rows()
    _conclude(case, outcome, first, decision, budget)
    _check_ranking(case, outcome, latest or _samples(outcome.measurement), measure_runner_up, budget)
    return outcome


def _read_round(case: GateCase, r: Round, given: MachineComparison | None) -> FreshRound:
    """What a measured round is as evidence: the machine that round (the given comparison, else the round's
    probes against the lock's), whether it is like-for-like, and what the machine explains of it: the
    probes' point estimate where they read like the lock's (faster or slower by at most the tolerance),
    that to :data:`MISMATCH_EXPONENT` where they do not, the given comparison's most where one is given."""
    mc = given if given is not None else (
        compare_machines(case.entry.machine, pool_probes(r.probes), case.tolerance, bounds=False)
        if r.probes else None)
    runs = judged_runs(r.measurements[0], case.locked_reference, case.tolerance)
    like = (mc is None or (given is None and mc.like_the_locks)) and runs.in_lock_state and not runs.shared_cpu
    divisor = 1.0 if mc is None else max(1.0, mc.slowdown) if given is not None else round_divisor(mc.factor, like)
    state = None
    if not runs.in_lock_state and runs.state is not None:  # its reference runs read a slower state throughout
        state = runs.state
        divisor = max(divisor, round_divisor(state, False))
    faster = faster_state(runs.state, case.tolerance)
    if faster < 1.0:  # a faster machine hides a slowdown: taken off too
        divisor = min(divisor, faster)
    return FreshRound(r.cpu, faster_half(runs.samples), mc, like, divisor, runs.preempted, state, runs.shared_cpu)


def _conclude(case: GateCase, outcome: GateOutcome, first: Comparison, decision: Decision,
              budget: GateBudget = UNLIMITED) -> None:
    """The outcome of what the rounds decided, worded by :mod:`.messages`."""
    outcome.verdict, outcome.comparison = decision.verdict, decision.comparison
    if isinstance(decision, Undecided):
        outcome.budget_stopped = True
        outcome.message = messages.undecided(case, first, decision.evidence(), budget)
        return  # the rounds' records (outcome.rounds) keep each round's probes
    if isinstance(decision, Faded):
        outcome.notes.append(messages.faded(first, decision))
    elif isinstance(decision, SlowerLikeForLike):
        outcome.machine = decision.machine
        outcome.message = messages.slower_like_for_like(case, first, decision)
    elif isinstance(decision, SlowerBeyondMachine):
        outcome.machine = decision.machine
        outcome.message = messages.slower_beyond_machine(case, first, decision)
    elif isinstance(decision, MachineExplains):
        outcome.machine = decision.machine
        outcome.message = messages.machine_explains(case, first, decision)
    elif isinstance(decision, NeighbourShared):
        outcome.message = messages.neighbour_shared(case, first, decision)
    elif isinstance(decision, NotSignificant):
        outcome.notes.append(messages.not_significant(decision))


def faster_state(state: float | None, tolerance: float) -> float:
    """The reference runs' state where it is clearly faster than the lock's (beyond the tolerance), else 1.0:
    what a kernel's time is divided by so that a faster machine does not hide a slowdown."""
    return state if state is not None and state < 1 / (1 + tolerance) else 1.0


def round_divisor(factor: float, like: bool) -> float:
    """What the machine explains of a fresh round's kernel time, from its probes' factor: the factor itself where
    the round is like-for-like, the factor to :data:`MISMATCH_EXPONENT` where it is not."""
    return factor if like else factor ** MISMATCH_EXPONENT


def _check_ranking(case: GateCase, outcome: GateOutcome, winner_samples: Sequence[float],
                   measure_runner_up: Callable[[Mapping[str, Any]], Measurement] | None,
                   budget: GateBudget = UNLIMITED) -> None:
    """Re-time the runners-up: one that now beats the winner significantly marks the ranking stale. Only
    while the gate's budget lasts: the ranking is advice, the verdict is decided already."""
    if measure_runner_up is None:
        return
    took = 0.0  # the last runner-up's time: what the next one is expected to take
    for i, up in enumerate(case.entry.runners_up):
        if not budget.allows(took):
            outcome.notes.append(f"ranking: {len(case.entry.runners_up) - i} runner(s)-up not re-timed "
                                 "within the gate budget")
            break
        began = budget.clock()
        m = measure_runner_up(up.params)
        took = budget.clock() - began
        if not m.ok:
            continue
        # "faster" here means the runner-up beats the winner's fresh samples significantly.
        rival = case.compare(winner_samples, m.samples or [m.value])
        if rival.faster:
            outcome.stale_ranking.append({"params": up.params, "median": rival.new_median,
                                          "change_pct": rival.change_pct, "p_value": rival.p_value})
    if outcome.stale_ranking:
        outcome.notes.append(messages.lost_rank(outcome.stale_ranking, case.nodeid))


def interleaved(measure_a: Measure, measure_b: Measure, rounds: int, warmup_rounds: int = 1
                ) -> tuple[list[float], list[float], Measurement | None, Measurement | None]:
    """Rounds of A and B, alternating the order (AB, BA, AB, ...): pooled samples of each side and the
    first failed measurement of each (or None).

    Interleaving puts both sides under the same conditions (load, clocks, neighbours) within a few hundred
    milliseconds of each other, and alternating the order cancels a drift within a round. The first
    ``warmup_rounds`` are discarded: a freshly started worker's first measurement runs on cold pages and
    clocks (measured: 30 % slower than the next ones for a 0.1 ms kernel), enough to hide a real change."""
    a: list[float] = []
    b: list[float] = []
    for i in range(warmup_rounds + rounds):
        first, second = (measure_a, measure_b) if i % 2 == 0 else (measure_b, measure_a)
        m1, m2 = first(), second()
        ma, mb = (m1, m2) if i % 2 == 0 else (m2, m1)
        if not ma.ok or not mb.ok:
            return a, b, (ma if not ma.ok else None), (mb if not mb.ok else None)
        if i >= warmup_rounds:
            a.extend(_samples(ma))
            b.extend(_samples(mb))
    return a, b, None, None


def run_ab_gate(kernel: str, nodeid: str, entry: Mapping[str, Any], measure_locked: Measure, measure_current: Measure,
                tolerance: float, alpha: float, rounds: int = AB_ROUNDS, *, confirm_blocks: int = AB_CONFIRM_BLOCKS,
                pause_s: float = CONFIRM_PAUSE_S, budget: GateBudget | None = None,
                on_round: Callable[[int, int], None] | None = None) -> GateOutcome:
    """The edited kernel against its locked source, side by side at the locked parameters.

    Fails when the current source is slower than the locked one by more than
    ``tolerance`` and significantly so (the gate's statistics on the
    interleaved samples), in the first block of ``rounds`` and again in each
    of ``confirm_blocks`` further blocks, each after a pause of ``pause_s``:
    a block's samples share one scheduling window, so a block is one draw of
    the machine's conditions, however many samples it holds. If the locked
    source no longer builds or runs here, :class:`LockedSourceUnusable` is
    raised and the caller falls back to :func:`run_gate`. A further block
    starts only while ``budget`` allows its pause and the last block's length;
    a suspected slowdown the budget leaves unconfirmed is ``incomparable``.
    ``on_round(done, at_most)`` follows each block.
    """
    case = GateCase(kernel, nodeid, entry, tolerance, alpha)
    budget = budget or UNLIMITED
    blocks: list[Comparison] = []
    b: list[float] = []
    block_s = 0.0
    stopped = False
    while True:
        if blocks:
            pause = scaled(pause_s)
            if not budget.allows(pause + block_s):
                stopped = budget.stopped = True
                break
            budget.sleep(pause)
        began = budget.clock()
        a, b, failed_a, failed_b = interleaved(measure_locked, measure_current, rounds,
                                               warmup_rounds=0 if blocks else 1)
        block_s = budget.clock() - began
        if on_round is not None:
            on_round(len(blocks) + 1, 1 + confirm_blocks)
        if failed_b is not None:
            return _broken(case, failed_b, " with the edited source")
        if failed_a is not None:
            raise LockedSourceUnusable(f"{failed_a.failure}: {failed_a.detail.strip()[:300]}")
        # The faster half of each side: preemption and a busy neighbour only ever add time, and they add
        # it to both sides alike, which compresses the ratio of medians (a +30 % edit read +13..+26 % at
        # load 8); the lower quartile keeps the kernels' own cost.
        blocks.append(case.compare(faster_half(a), faster_half(b)))
        if not blocks[-1].slower or len(blocks) > confirm_blocks:
            break
    # a regression is reported at its weakest block; a pass by the block that cleared it
    cmp = blocks[-1] if not blocks[-1].slower else min(blocks, key=lambda c: c.change_pct)
    absolute = case.compare(case.entry.samples, b)
    current = Measurement(params=case.entry.params, value=cmp.new_median, samples=b)
    outcome = GateOutcome("pass", cmp, current, method="a/b", absolute=absolute)
    if stopped:  # slower in every block measured, too few blocks to confirm it
        outcome.verdict, outcome.budget_stopped = "incomparable", True
        outcome.message = messages.undecided(case, blocks[0], f"{cmp.change_pct:+.1f}% A/B in {len(blocks)} of "
                                             f"{confirm_blocks + 1} blocks", budget,
                                             first_what="the first A/B block")
        return outcome
    if len(blocks) > 1 and not cmp.slower:
        outcome.notes.append(messages.ab_faded(blocks[0], cmp))
    if cmp.slower:
        outcome.verdict = "slower"
        outcome.message = messages.ab_regression(case, cmp, rounds, absolute, len(blocks))
    elif cmp.faster:
        outcome.verdict = "faster"
        outcome.message = messages.faster(case, cmp, "its locked source (A/B)")
    return outcome


class LockedSourceUnusable(AutotuneError):
    """The locked source no longer builds or runs here (a header changed, say): no A/B comparison."""
