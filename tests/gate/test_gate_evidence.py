"""The gate's round-by-round evidence, fed synthetic rounds (CPU, kernel change, machine factor, like-for-like):
each way the evidence can decide, and when it must wait for more rounds. No measuring, no clock, no pytester."""
from __future__ import annotations

import pytest

from pytest_autotune.gate import verdict
from pytest_autotune.gate.evidence import (Faded, FreshRound, GateCase, MachineExplains, NotSignificant, RoundEvidence,
                                           RoundRules, SlowerBeyondMachine, SlowerLikeForLike)
from pytest_autotune.gate.probes import MachineComparison

LOCKED = [1.0 * (1 + 0.002 * i) for i in range(8)]
CASE = GateCase("k", "t.py::t", {"params": {"B": 2}, "samples": LOCKED}, tolerance=0.1, alpha=0.01)
RULES = RoundRules(verdict.LIKE_ROUNDS, verdict.ONE_CPU_ROUNDS, verdict.MIN_ROUNDS, verdict.MISMATCH_EXPONENT)
EVERY_ROUND = len(verdict.ROUND_PAUSES_S) + len(verdict.MORE_ROUND_PAUSES_S)


def machine(factor: float) -> MachineComparison:
    """The probes taking ``factor`` times their lock's time (one probe, point estimate)."""
    return MachineComparison({"bandwidth_gbs": (1 / factor - 1) * 100}, 10.0, time_point={"bandwidth_gbs": factor})


def fresh(cpu: int | None, scale: float, factor: float | None = 1.0) -> FreshRound:
    """A round on ``cpu`` with the kernel at ``scale`` times the lock's time, beside probes at ``factor`` times
    theirs (None: no probes), read as the gate reads it."""
    samples = [scale * (1 + 0.002 * i) for i in range(4)]
    if factor is None:
        return FreshRound(cpu, samples, None, True, 1.0)
    mc = machine(factor)
    return FreshRound(cpu, samples, mc, mc.like_the_locks, verdict.round_divisor(mc.factor, mc.like_the_locks))


def evidence(*rounds: FreshRound) -> RoundEvidence:
    gathered = RoundEvidence(CASE, RULES)
    for r in rounds:
        gathered.add(r)
    return gathered


def test_a_round_back_within_the_tolerance_is_a_load_that_passed() -> None:
    decided = evidence(fresh(0, 1.5), fresh(1, 1.02)).decision()
    assert isinstance(decided, Faded) and decided.verdict == "pass"
    assert decided.round_number == 2 and decided.change == pytest.approx(0.02)


def test_a_faster_machine_hides_a_slowdown_it_never_fades_one() -> None:
    # +4 % against the lock, on a machine whose probes run 20 % faster: +30 % once that is taken off
    gathered = evidence(fresh(0, 1.04, factor=0.8))
    assert gathered.change(gathered.rounds[0]) == pytest.approx(0.3)
    assert gathered.decision() is None


def test_a_slowdown_in_like_for_like_rounds_on_two_cpus_is_final_after_the_minimum_rounds() -> None:
    gathered = evidence()
    for i in range(verdict.MIN_ROUNDS - 1):
        gathered.add(fresh(i % 2, 1.3))
        assert gathered.decision() is None, f"decided after {i + 1} rounds"  # the kernel may still come back
    gathered.add(fresh(1, 1.3))
    decided = gathered.decision()
    assert isinstance(decided, SlowerLikeForLike) and decided.verdict == "slower"
    assert decided.like_rounds == verdict.MIN_ROUNDS and decided.probed and not decided.one_cpu
    assert decided.comparison.change_pct == pytest.approx(30.0)
    assert decided.machine is not None and decided.machine.factor == 1.0


def test_rounds_without_probes_are_all_like_for_like() -> None:
    decided = evidence(*[fresh(None, 1.5, factor=None) for _ in range(verdict.MIN_ROUNDS)]).decision()
    assert isinstance(decided, SlowerLikeForLike) and not decided.probed and decided.machine is None


def test_like_for_like_rounds_on_one_cpu_wait_while_the_other_cpu_is_unlike_the_locks() -> None:
    # CPU 0 like the lock's with the kernel at +30 %, CPU 1 1.6x slower throughout
    rounds = [fresh(0, 1.3) if i % 2 == 0 else fresh(1, 2.1, factor=1.6) for i in range(EVERY_ROUND)]
    gathered = evidence()
    for r in rounds:
        gathered.add(r)
        assert gathered.decision() is None  # a state of one CPU's that the probes miss looks just like this
    decided = gathered.decision(last=True)
    assert isinstance(decided, SlowerLikeForLike) and decided.one_cpu
    assert (decided.cpu, decided.like_rounds, decided.rounds) == (0, EVERY_ROUND // 2, EVERY_ROUND)


def test_too_few_like_for_like_rounds_on_one_cpu_leave_the_machine_to_explain_it() -> None:
    like = [fresh(0, 1.3) for _ in range(verdict.ONE_CPU_ROUNDS - 1)]
    unlike = [fresh(i % 2, 2.1, factor=1.6) for i in range(EVERY_ROUND - len(like))]
    decided = evidence(*like, *unlike).decision(last=True)
    assert isinstance(decided, MachineExplains) and decided.verdict == "incomparable"


def test_a_machine_that_stays_unlike_the_locks_explains_its_slowdown_squared() -> None:
    # the kernel at 2.0x beside probes at 1.63x: 1.63 squared explains it
    rounds = [fresh(i % 2, 2.0, factor=1.63) for i in range(len(verdict.ROUND_PAUSES_S))]
    gathered = evidence(*rounds)
    assert gathered.like_rounds == 0 and gathered.decision() is None
    decided = gathered.decision(last=True)
    assert isinstance(decided, MachineExplains) and decided.verdict == "incomparable"
    assert decided.machine.factor == pytest.approx(1.63) and decided.exponent == verdict.MISMATCH_EXPONENT
    # 6.0x there is still a regression: beyond the 2.66x the machine explains
    decided = evidence(*[fresh(i % 2, 6.0, factor=1.63) for i in range(len(rounds))]).decision(last=True)
    assert isinstance(decided, SlowerBeyondMachine) and decided.verdict == "slower"
    assert decided.comparison.change_pct == pytest.approx(100 * (6.0 / 1.63 ** 2 - 1))


def test_slower_but_not_significantly_and_no_machine_to_blame_passes() -> None:
    # one round of 4 samples, all slower than the lock's 4: p = 1/70, above alpha 0.01
    decided = evidence(fresh(0, 1.3)).decision(last=True)
    assert isinstance(decided, NotSignificant) and decided.verdict == "pass" and decided.like_rounds == 1


def test_each_round_is_recorded_as_measured() -> None:
    gathered = evidence(fresh(0, 1.3), fresh(1, 2.1, factor=1.6), fresh(None, 1.5, factor=None))
    assert gathered.rows() == [{"cpu": 0, "like": True, "machine": 1.0, "change_pct": 30.0, "preempted": 0},
                               {"cpu": 1, "like": False, "machine": 1.6, "change_pct": 110.0, "preempted": 0},
                               {"cpu": None, "like": True, "machine": None, "change_pct": 50.0, "preempted": 0}]
