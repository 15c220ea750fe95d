"""The gate's time budget (issue 39), on a simulated clock: a gate whose rounds keep suspecting a regression
stops at its budget as "not comparable" with the evidence so far; a verdict decided within the budget is
what it was without one; a session's budget is shared out fairly. No sleeping: every measurement and pause
advances the fake clock instead."""
from __future__ import annotations

import numpy as np
import pytest

from pytest_autotune.gate import verdict
from pytest_autotune.gate.budget import GateBudget, SessionGateBudget, format_seconds, parse_gate_budget
from pytest_autotune.gate.evidence import FreshRound, GateCase, RoundEvidence, RoundRules
from pytest_autotune.gate.probes import MachineComparison
from pytest_autotune.results import Measurement

ENTRY = {"params": {"B": 2}, "samples": [1.0 * (1 + 0.002 * i) for i in range(8)]}


class FakeClock:
    """Time that passes only when a measurement (``cost`` seconds each) or a pause says so."""

    def __init__(self, cost: float) -> None:
        self.now, self.cost, self.measured = 0.0, cost, 0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def measure(self, scale: float) -> Measurement:
        self.now += self.cost
        self.measured += 1
        samples = [scale * (1 + 0.002 * i) for i in range(8)]
        return Measurement(params={"B": 2}, value=float(np.median(samples)), samples=samples)

    def budget(self, seconds: float | None, source: str = "gate_budget=3s") -> GateBudget:
        return GateBudget(seconds, source, clock=self.clock, sleep=self.sleep).start()


@pytest.mark.usefixtures("real_pauses")  # the pauses are what it checks
def test_a_gate_whose_rounds_keep_suspecting_a_regression_stops_at_its_budget_as_not_comparable() -> None:
    # a kernel 30 % slower in every round (a busy machine, as far as the gate can tell), 1 s per measurement:
    # with a 3 s budget there is room for the first measurement and one round, never the six the rule needs
    fake = FakeClock(cost=1.0)
    budget = fake.budget(3.0)  # started before the first measurement, as the lifecycle does
    out = verdict.run_gate("k", "t.py::t", ENTRY, fake.measure(1.3), 0.1, 0.01,
                           remeasure=lambda: fake.measure(1.3), budget=budget)
    assert out.verdict == "incomparable" and out.budget_stopped and budget.stopped and not out.failed
    assert len(out.rounds) == 1 and fake.measured == 2
    assert budget.elapsed <= 3.0  # a round starts only when its pause and the last round's length still fit
    assert ("not comparable (undecided within the budget: +30.0% in 1 fresh round): its gate budget of 3 s "
            "(gate_budget=3s) was spent after 2.1 s") in out.message
    assert "+30.0% in the first measurement" in out.message and "gate_budget=" in out.message


def test_a_budget_spent_by_the_first_measurement_leaves_no_round() -> None:
    fake = FakeClock(cost=5.0)
    budget = fake.budget(3.0)
    out = verdict.run_gate("k", "t.py::t", ENTRY, fake.measure(1.3), 0.1, 0.01,
                           remeasure=lambda: fake.measure(1.3), budget=budget)
    assert out.verdict == "incomparable" and out.rounds == [] and fake.measured == 1
    assert "undecided within the budget: +30.0% in the first measurement, no fresh round within the budget" \
        in out.message


@pytest.mark.parametrize("scales, expected", [((1.0,), "pass"), ((1.5,), "slower")])
def test_a_verdict_decided_within_the_budget_is_what_it_was_without_one(scales: tuple[float, ...],
                                                                        expected: str) -> None:
    # a burst that fades in the first round (pass), a slowdown that persists over MIN_ROUNDS (slower):
    # the same verdict and message with a generous budget as with none
    outcomes = []
    for seconds in (None, 60.0):
        fake = FakeClock(cost=0.05)
        outcomes.append(verdict.run_gate("k", "t.py::t", ENTRY, fake.measure(1.5), 0.1, 0.01,
                                         remeasure=lambda: fake.measure(scales[0]), budget=fake.budget(seconds)))
    unlimited, limited = outcomes
    assert unlimited.verdict == limited.verdict == expected and not limited.budget_stopped
    assert unlimited.message == limited.message and unlimited.rounds == limited.rounds


@pytest.mark.usefixtures("real_pauses")  # the pauses are what it checks
def test_the_rounds_pauses_count_against_the_budget() -> None:
    # measurements that cost nothing: the pauses alone (0.1, 0.3, 0.5, ...) spend a 1 s budget
    fake = FakeClock(cost=0.0)
    out = verdict.run_gate("k", "t.py::t", ENTRY, fake.measure(1.3), 0.1, 0.01,
                           remeasure=lambda: fake.measure(1.3), budget=fake.budget(1.0))
    assert out.verdict == "incomparable" and len(out.rounds) == 3  # 0.1 + 0.3 + 0.5 = 0.9 s; the next, 0.2, not
    assert fake.now == pytest.approx(0.9)


def test_an_ab_gate_stops_at_its_budget_before_confirming_a_suspected_slowdown() -> None:
    fake = FakeClock(cost=0.5)  # one A/B block: 4 rounds of A and B, 4 s
    out = verdict.run_ab_gate("k", "t.py::t", ENTRY, lambda: fake.measure(1.0), lambda: fake.measure(1.3),
                              0.1, 0.01, pause_s=0.1, budget=fake.budget(6.0))
    assert out.verdict == "incomparable" and out.budget_stopped and out.method == "a/b"
    assert "undecided within the budget: +30.0% A/B in 1 of 3 blocks" in out.message
    assert "in the first A/B block" in out.message
    # with time for every block, the same slowdown is a regression
    fake = FakeClock(cost=0.5)
    out = verdict.run_ab_gate("k", "t.py::t", ENTRY, lambda: fake.measure(1.0), lambda: fake.measure(1.3),
                              0.1, 0.01, pause_s=0.1, budget=fake.budget(60.0))
    assert out.verdict == "slower"


def test_the_runners_up_are_re_timed_only_while_the_budget_lasts() -> None:
    fake = FakeClock(cost=2.0)
    entry = {**ENTRY, "runners_up": [{"params": {"B": 4}}, {"params": {"B": 8}}]}
    timed: list[dict] = []
    budget = fake.budget(5.0)  # the first measurement and one runner-up (2 s each) fit, a third would not
    out = verdict.run_gate("k", "t.py::t", entry, fake.measure(1.0), 0.1, 0.01,
                           lambda p: timed.append(p) or fake.measure(1.0), budget=budget)
    assert out.verdict == "pass" and timed == [{"B": 4}]
    assert "ranking: 1 runner(s)-up not re-timed within the gate budget" in out.notes


def machine(factor: float) -> MachineComparison:
    return MachineComparison({"bandwidth_gbs": (1 / factor - 1) * 100}, 10.0, time_point={"bandwidth_gbs": factor})


def test_the_evidence_so_far_names_the_like_for_like_rounds() -> None:
    case = GateCase("k", "t.py::t", ENTRY, 0.1, 0.01)
    gathered = RoundEvidence(case, RoundRules(2, 3, 6))
    samples = [1.18 * (1 + 0.002 * i) for i in range(4)]
    for cpu, factor in ((0, 1.0), (1, 1.6), (0, 1.02)):
        mc = machine(factor)
        gathered.add(FreshRound(cpu, samples, mc, mc.like_the_locks, factor if mc.like_the_locks else factor ** 2))
    first = case.compare(ENTRY["samples"], samples)
    undecided = gathered.undecided(first)
    assert undecided.verdict == "incomparable"
    assert undecided.evidence().endswith("in 2 of 3 like-for-like rounds")
    assert undecided.evidence().startswith("+1")  # the like-for-like rounds pooled, as they are judged


def test_the_session_budget_is_shared_out_fairly() -> None:
    now = [0.0]
    session = SessionGateBudget(60.0, expected=3, clock=lambda: now[0])
    assert session.share() == 20.0
    first = session.take(10.0, "gate_budget=10s", clock=lambda: now[0])
    assert (first.seconds, first.source) == (10.0, "gate_budget=10s")  # its own budget is less than its share
    first.start()
    now[0] += 40.0  # it overran (one long measurement): the others share what is left
    session.done(first)
    second = session.take(None, "", clock=lambda: now[0])
    assert second.seconds == 10.0 and second.source == "its share of --autotune-gate-budget"
    second.start()
    now[0] += 20.0
    session.done(second)
    assert session.spent and session.left() == 0.0 and session.share() == 0.0
    # more kernels than expected: each still gets a share of what is left, never a negative one
    session = SessionGateBudget(10.0, expected=1)
    session.gated = 5
    assert session.share() == 10.0


@pytest.mark.parametrize("text, seconds", [("10s", 10.0), ("5m", 300.0), ("1m30s", 90.0), (2, 2.0), ("0.5s", 0.5),
                                           ("none", None), ("off", None), (None, None)])
def test_budgets_parse_like_the_tuning_budget(text: object, seconds: float | None) -> None:
    assert parse_gate_budget(text) == seconds


@pytest.mark.parametrize("text", ["ten seconds", "-5s", True, [1]])
def test_a_bad_budget_is_a_value_error_naming_it(text: object) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_gate_budget(text)


def test_budgets_read_as_written() -> None:
    assert (format_seconds(10), format_seconds(300), format_seconds(2.05)) == ("10 s", "5 min", "2.05 s")


def test_the_marker_budget_beats_the_flags_default() -> None:
    from pytest_autotune.lifecycle import MarkerError, parse_marker

    params = {"params": {"B": [1, 2]}}
    assert parse_marker((), params, {}).gate_budget == 30.0  # the built-in default (scripts)
    settings = parse_marker((), {**params, "gate_budget": "30s"}, {"gate_budget": 5.0, "gate_budget_source": "x"})
    assert (settings.gate_budget, settings.gate_budget_source) == (30.0, "gate_budget=30s")
    settings = parse_marker((), params, {"gate_budget": 5.0, "gate_budget_source": "--autotune-kernel-gate-budget=5s"})
    assert (settings.gate_budget, settings.gate_budget_source) == (5.0, "--autotune-kernel-gate-budget=5s")
    assert parse_marker((), {**params, "gate_budget": "none"}, {}).gate_budget is None
    with pytest.raises(MarkerError, match="tune marker argument 'gate_budget'") as caught:
        parse_marker((), {**params, "gate_budget": 0}, {})
    assert caught.value.argument == "gate_budget"
