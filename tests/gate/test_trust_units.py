"""The pieces behind a gate and a lock a team can trust, tested without pytest sessions:
which entries can be gated, what a re-tune does with the lock it finds, seeds and
confirmation rounds in the engine, the scratch key, the ETA."""
from __future__ import annotations

import contextlib
import re
from typing import Any, Mapping

import numpy as np
import pytest

from pytest_autotune.engine.evaluator import Evaluator
from pytest_autotune.gate.verdict import check_entry
from pytest_autotune.results import FailureKind, Measurement
from pytest_autotune.gate.retune import decide
from pytest_autotune.execution.device import DeviceInfo
from pytest_autotune.lifecycle.scratch import fingerprint
from pytest_autotune.lifecycle import eta
from pytest_autotune.space import SearchSpace
from pytest_autotune.strategies import make_strategy
from pytest_autotune.engine.tuner import TuneError, tune

HASHES = {"source": "s1", "space": "p1", "problem": "q1"}
ENTRY = {"params": {"B": 2}, "hashes": dict(HASHES), "samples": [1.0] * 10, "stats": {"median": 1.0}}


def _never() -> bool:
    raise AssertionError("the space need not be built when the space hash is unchanged")


# --------------------------------------------------------------------------- check_entry
def test_unchanged_entry_is_gated_without_building_the_space() -> None:
    check = check_entry(ENTRY, HASHES, _never)
    assert check.stale is None and check.changed == () and check.notes == ""


def test_kernel_edits_are_gated_with_a_note() -> None:
    check = check_entry(ENTRY, {**HASHES, "source": "s2"}, _never)
    assert check.stale is None and check.notes == "source changed since lock"


def test_space_change_is_stale_only_when_the_locked_configuration_left_the_space() -> None:
    assert check_entry(ENTRY, {**HASHES, "space": "p2"}, lambda: True).stale is None
    assert check_entry(ENTRY, {**HASHES, "space": "p2"}, lambda: True).notes == "space changed since lock"
    stale = check_entry(ENTRY, {**HASHES, "space": "p2"}, lambda: False).stale
    assert stale == "the locked configuration is no longer in the search space"


def test_problem_change_is_stale_and_says_so() -> None:
    check = check_entry(ENTRY, {**HASHES, "problem": "q2", "source": "s2"}, _never)
    assert check.stale is not None and "problem changed" in check.stale and "scalar values" in check.stale


def test_a_stale_problem_says_what_changed() -> None:
    from pytest_autotune.lock.problem import describe_problem, problem_change

    a, b = np.zeros((4, 8), np.float32), np.zeros((4, 8), np.float64)
    old = describe_problem((8, 4), [a, np.int32(8), np.float32(0.5)])
    assert problem_change(old, describe_problem((8, 4), [a, np.int32(8), np.float32(0.5)])) == ""
    assert problem_change(old, describe_problem((16, 4), [b, np.int32(16), np.float32(0.5)])) == (
        "size 8x4 -> 16x4; argument 0: dtype float32 -> float64; argument 1: value 8 -> 16")
    assert problem_change(old, describe_problem((8, 4), [a, np.int32(8)])) == "3 arguments -> 2"
    assert problem_change(None, old) == ""  # a schema-1 entry records no readable problem: the generic reason


def test_a_changed_constant_memory_array_is_named() -> None:
    from pytest_autotune.lock.problem import describe_problem, problem_change, problem_error

    args = [np.zeros(16, np.float32)]
    old = describe_problem(16, args, {"d_filter": np.zeros(289, np.float32)})
    assert old["constant_memory"] == {"d_filter": {"shape": [289], "dtype": "float32"}} and problem_error(old) is None
    assert "constant_memory" not in describe_problem(16, args)  # none: the entry reads as before
    assert problem_change(old, describe_problem(16, args, {"d_filter": np.zeros(81, np.float32)})) == (
        "constant_memory 'd_filter': shape (289,) -> (81,)")
    assert problem_error({"size": [16], "args": [], "constant_memory": [1]}) is not None  # a lock is data


# --------------------------------------------------------------------------- retune.decide
FAST, SAME, SLOW = [0.70 + 0.001 * i for i in range(10)], [1.0 + 0.001 * i for i in range(10)], \
    [1.3 + 0.001 * i for i in range(10)]


def test_first_lock() -> None:
    d = decide(None, [], {"B": 4}, SAME, None, 0.1, 0.01)
    assert d.action == "first" and d.write and d.params == {"B": 4}


def test_a_significantly_faster_winner_replaces_the_lock() -> None:
    d = decide(ENTRY, [], {"B": 4}, FAST, SAME, 0.1, 0.01)
    assert d.action == "new" and d.write and d.params == {"B": 4} and d.samples == FAST
    assert re.fullmatch(r"new winner, 29\.\d% faster than lock", d.message), d.message


def test_noise_never_churns_the_lock() -> None:
    # a challenger 3 % faster (significant, but within the 10 % tolerance) does not replace the lock
    challenger = [x * 0.97 for x in SAME]
    d = decide(ENTRY, [], {"B": 4}, challenger, SAME, 0.1, 0.01)
    assert d.action == "kept" and not d.write and d.params == {"B": 2}
    assert "not significant" in d.message


def test_a_slower_machine_never_lowers_the_lock() -> None:
    d = decide(ENTRY, [], {"B": 2}, SLOW, SLOW, 0.1, 0.01)
    assert d.action == "kept" and not d.write and "+30" in d.message and "lock left as it was" in d.message


def test_a_faster_measurement_of_the_locked_winner_refreshes_its_timings() -> None:
    d = decide(ENTRY, [], {"B": 2}, FAST, FAST, 0.1, 0.01)
    assert d.action == "refreshed" and d.write and d.params == {"B": 2} and d.samples == FAST


def test_changed_hashes_rewrite_the_entry_with_the_kept_winner() -> None:
    d = decide(ENTRY, ["source changed"], {"B": 4}, SAME, SAME, 0.1, 0.01)
    assert d.action == "updated" and d.write and d.params == {"B": 2} and "source changed" in d.message


def test_a_locked_winner_that_no_longer_runs_is_replaced() -> None:
    d = decide(ENTRY, [], {"B": 4}, SLOW, None, 0.1, 0.01)
    assert d.action == "new" and d.params == {"B": 4} and "no longer runs" in d.message


# --------------------------------------------------------------------------- engine: seeds and confirmation
SPACE = SearchSpace({"B": [1, 2, 3, 4, 5, 6, 7, 8]})


class _Runner:
    """Times are a function of B (5 is best); ``noisy`` makes one configuration look fast once."""

    name = "fake"

    def __init__(self, lucky: int | None = None, fails: set[int] = frozenset()) -> None:
        self.calls: list[int] = []
        self.lucky = lucky
        self.fails = set(fails)

    def device(self) -> DeviceInfo:
        return DeviceInfo(model="Fake", kind="cpu")

    def constants(self) -> dict[str, Any]:
        return {}

    def evaluate(self, params: Mapping[str, Any], keep_outputs: bool = False) -> Measurement:
        b = int(params["B"])
        self.calls.append(b)
        if b in self.fails:
            return Measurement.failed(params, FailureKind.COMPILE, f"k.c:1: error: B={b}\nsecond line")
        base = 1.0 + 0.1 * abs(b - 5)
        if self.lucky == b and self.calls.count(b) == 1:
            base = 0.5  # measured during a quiet moment, never again
        samples = [base * (1 + 0.001 * i) for i in range(7)]
        return Measurement(params=dict(params), value=float(np.median(samples)), samples=samples)

    def close(self) -> None:
        pass


def test_seeds_are_evaluated_first_and_the_strategy_sees_them() -> None:
    runner = _Runner()
    strategy = make_strategy("random", SPACE, seed=0)
    history = Evaluator(SPACE, runner.evaluate, 4, seeds=[SPACE.find({"B": 7}), SPACE.find({"B": 2})]).run(strategy)
    assert [r.params["B"] for r in history.records[:2]] == [7, 2]
    assert len(history.records) == 4
    assert strategy.observed[SPACE.find({"B": 7})] == pytest.approx(1.2, rel=0.01)


def test_a_warm_start_is_marked_and_the_annealing_guide_does_not_learn_from_it() -> None:
    """Transferred seeds stay observations (the walk may start there, they may win), but auto's guide does not
    learn from them: seeds of an unlike device kept steering the walk to their values (bench_transfer: A100
    convolution 0.75 against 0.89)."""
    space = SearchSpace({"X": list(range(30)), "Y": list(range(30))})

    def evaluate(params: Mapping[str, Any]) -> Measurement:
        x, y = params["X"], params["Y"]
        value = 0.5 if (x, y) == (0, 0) else 1.0 + 0.01 * (abs(x - 20) + abs(y - 20))  # (0, 0): a seed's basin
        return Measurement(params=dict(params), value=value, samples=[value])

    seed_row = space.find({"X": 0, "Y": 0})
    strategy = make_strategy({"name": "chain", "first": {"name": "random"}, "evaluations": 6,
                              "then": {"name": "simulated_annealing", "guide": True}}, space, seed=0)
    history = Evaluator(space, evaluate, 12, seeds=[seed_row]).run(strategy)
    assert strategy.transferred == {seed_row} and history.records[0].params == {"X": 0, "Y": 0}
    guide = strategy.phases[1]._model
    learnt = set(guide._obs_of_row)
    assert seed_row not in learnt
    own = [space.find(dict(r.params)) for r in history.records[1:]]
    assert set(own[:6]) <= learnt <= set(own)  # the first phase's observations and the walk's own
    assert strategy.best == (seed_row, 0.5)  # the seed is still an observation and can win


def test_the_incumbent_is_measured_as_a_candidate() -> None:
    runner = _Runner()
    result = tune(runner, space=SPACE, strategy="random", budget=3, seed=1, incumbent={"B": 5})
    assert runner.calls[0] == 5 and result.params == {"B": 5}
    assert result.confirmed_samples({"B": 5})  # re-timed with the finalists


def test_confirmation_rounds_unmask_a_lucky_measurement() -> None:
    runner = _Runner(lucky=1)
    result = tune(runner, space=SPACE, strategy="brute_force", budget=8)
    assert result.history.ranked()[0].params == {"B": 1}  # looked best during the search
    assert result.params == {"B": 5}  # side by side, B=5 wins
    assert result.stats.n == 14 and result.stats.median == pytest.approx(1.0, rel=0.01)
    # ranked by the confirmation where re-timed: the lucky B=1 (1.4 ms side by side) is no runner-up
    assert [r.params["B"] for r in result.runners_up][:3] == [4, 6, 3]


def test_no_success_lists_each_failure_kind_with_its_first_error_in_full() -> None:
    runner = _Runner(fails=set(range(1, 9)))
    with pytest.raises(TuneError) as info:
        tune(runner, space=SPACE, strategy="brute_force", budget=3)
    text = str(info.value)
    assert "no configuration ran successfully in 3 evaluations (compile: 3)" in text
    assert "first compile failure, at {'B': 1}:\n    k.c:1: error: B=1\n    second line" in text
    assert " | " not in text and info.value.history is not None and len(info.value.history.records) == 3


# --------------------------------------------------------------------------- scratch key, ETA
def test_the_scratch_fingerprint_covers_what_decides_an_outcome() -> None:
    ref = np.arange(4, dtype=np.float32)
    base = {"expected": [ref, None], "atol": None, "rtol": 1e-5, "verify": None, "runner": "c"}
    same = fingerprint({**base, "expected": [ref.copy(), None]})
    assert fingerprint(base) == same
    for change in ({"expected": [ref + 1, None]}, {"rtol": 1e-3}, {"verify": lambda e, o: True},
                   {"runner": "cupy"}, {"measure": {"min_iterations": 3}}):
        assert fingerprint({**base, **change}) != same, change


def test_eta_from_the_mean_time_per_evaluation() -> None:
    assert eta(10, 40, 5.0) == ", ETA 15s"
    assert eta(10, 1000, 5.0) == ", ETA 8.2min"
    assert eta(0, 40, 0.0) == "" and eta(40, 40, 9.0) == "" and eta(3, None, 1.0) == ""


# --------------------------------------------------------------------------- the gate: A/B, confirmation, machines
from pytest_autotune.gate.verdict import GateOutcome, LockedSourceUnusable, run_ab_gate, run_gate  # noqa: E402
from pytest_autotune.gate.probes import PROBE_VERSION, compare_machines  # noqa: E402


def _m(scale: float, n: int = 8) -> Measurement:
    samples = [scale * (1 + 0.002 * i) for i in range(n)]
    return Measurement(params={"B": 2}, value=float(np.median(samples)), samples=samples)


@pytest.fixture(autouse=True)
def _no_round_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    """The gate's fresh rounds without their seconds of pause (the rule, not the clock, is under test)."""
    from pytest_autotune.gate import verdict

    monkeypatch.setattr(verdict, "ROUND_PAUSES_S", (0.0,) * len(verdict.ROUND_PAUSES_S))
    monkeypatch.setattr(verdict, "MORE_ROUND_PAUSES_S", (0.0,) * len(verdict.MORE_ROUND_PAUSES_S))


def _sequence(*scales: float):
    """Measurements at these scales, then the last one for good (a kernel that stays as slow as it got)."""
    it = iter(scales)
    last = [scales[-1]]

    def measure() -> Measurement:
        last[0] = next(it, last[0])
        return _m(last[0])
    return measure


LOCKED = {**ENTRY, "samples": _m(1.0).samples}


def test_ab_gate_judges_the_edit_on_this_machine_alone() -> None:
    # this machine is 40 % slower than the lock's; the edit itself adds 30 %
    # (the first, discarded round is a cold worker's: 2.5 ms, far slower than anything after it);
    # a suspected slowdown is measured again in two further blocks (3 rounds each, no warm-up)
    out = run_ab_gate("k", "t.py::t", LOCKED, _sequence(2.5, *[1.4] * 9), _sequence(*[1.82] * 10), 0.1, 0.01,
                      pause_s=0)
    assert out.verdict == "slower" and out.method == "a/b"
    assert "got slower with the source edit" in out.message and "+30.0%" in out.message
    assert "slower in each of 3 blocks" in out.message
    assert "against the lock's samples: +82.0%" in out.message
    # a neutral edit (a comment) on the same slow machine passes, although the absolute comparison says +40 %
    out = run_ab_gate("k", "t.py::t", LOCKED, _sequence(2.5, 1.4, 1.4, 1.4), _sequence(1.4, 1.4, 1.4, 1.4),
                      0.1, 0.01)
    assert out.verdict == "pass" and out.absolute is not None and out.absolute.slower


def test_a_faster_edit_is_reported_as_faster() -> None:
    out = run_ab_gate("k", "t.py::t", LOCKED, _sequence(2.5, *[1.0] * 3), _sequence(*[0.6] * 4), 0.1, 0.01,
                      pause_s=0)
    assert out.verdict == "faster" and not out.failed and out.method == "a/b"
    assert "40.0% faster than its locked source (A/B)" in out.message and "--autotune t.py::t" in out.message


def test_an_ab_block_is_one_draw_a_slowdown_must_persist_in_later_blocks() -> None:
    # One block where the current source's worker sat on a busier CPU (identical sources, 1.5x apart
    # for one scheduling window: measured on the CI host), then two ordinary blocks: a pass, with a note.
    out = run_ab_gate("k", "t.py::t", LOCKED, _sequence(2.5, *[1.0] * 6), _sequence(*[1.5] * 4, *[1.0] * 3),
                      0.1, 0.01, pause_s=0)
    assert out.verdict == "pass" and "did not persist in a later A/B block" in out.notes[0]
    # a slowdown that every block shows, but one block only weakly: reported at its weakest block
    out = run_ab_gate("k", "t.py::t", LOCKED, _sequence(2.5, *[1.0] * 9),
                      _sequence(*[1.5] * 4, *[1.2] * 3, *[1.5] * 3), 0.1, 0.01, pause_s=0)
    assert out.verdict == "slower" and "+20.0%" in out.message


def test_ab_gate_broken_edit_and_unusable_locked_source() -> None:
    broken = lambda: Measurement.failed({"B": 2}, FailureKind.COMPILE, "k.c:3: error: x")  # noqa: E731
    out = run_ab_gate("k", "t.py::t", LOCKED, _sequence(1.0), broken, 0.1, 0.01)
    assert out.verdict == "broken" and "with the edited source" in out.message
    with pytest.raises(LockedSourceUnusable):
        run_ab_gate("k", "t.py::t", LOCKED, broken, _sequence(1.0), 0.1, 0.01)


def test_a_suspected_regression_must_persist_in_fresh_rounds() -> None:
    burst = run_gate("k", "t.py::t", LOCKED, _m(1.5), 0.1, 0.01, remeasure=_sequence(1.0, 1.01))
    assert burst.verdict == "pass" and "did not persist" in burst.notes[0] and "fresh round 1" in burst.notes[0]
    # without probes every round is like-for-like: a slowdown that persists over MIN_ROUNDS is a regression
    rounds: list[int] = []
    real = run_gate("k", "t.py::t", LOCKED, _m(1.5), 0.1, 0.01, remeasure=lambda: rounds.append(1) or _m(1.5))
    assert real.verdict == "slower" and "+50.0%" in real.message and len(rounds) == 6


def _probes(bandwidth_ms: float, compute_ms: float, n: int = 20, spread: float = 0.02) -> dict:
    """A probe record as measure_cpu_probes writes it: each run's time, spread evenly by +-spread."""
    def runs(ms: float) -> list[float]:
        return [ms * (1 - spread + 2 * spread * i / (n - 1)) for i in range(n)]
    return {"probe": PROBE_VERSION, "triad_n": 1 << 20, "fma_iterations": 1 << 16,
            "bandwidth_gbs": round(12.0 / bandwidth_ms, 3), "compute_gflops": round(1.0 / compute_ms, 3),
            "samples_ms": {"bandwidth_gbs": runs(bandwidth_ms), "compute_gflops": runs(compute_ms)}}


def test_a_machine_difference_corrects_the_verdict_it_does_not_veto_it() -> None:
    # The lock's machine, then this one with 18 % less memory bandwidth (a busy neighbour) in
    # every round: no round is like-for-like, so each is corrected by the most the machine explains
    entry = {**LOCKED, "machine": _probes(1.0, 1.0)}
    here = _probes(1.18, 1.0)
    # the kernel 3x slower through its environment: far beyond what the machine explains -> a regression
    out = run_gate("k", "t.py::t", entry, _m(3.0), 0.1, 0.01, remeasure=_sequence(3.0), probe=lambda: here)
    assert out.verdict == "slower" and out.failed, out.message
    m = re.search(r"\+(\d+)% against the lock; the machine explains at most \+(\d+)% \(memory bandwidth probe "
                  r"\+18%, to the power 2", out.message)
    assert m and int(m[1]) == 200 and int(m[2]) == 39, out.message
    # the kernel 15 % slower on that machine: the machine could explain it -> not comparable, not a failure
    out = run_gate("k", "t.py::t", entry, _m(1.15), 0.1, 0.01, remeasure=_sequence(1.15), probe=lambda: here)
    assert out.verdict == "incomparable" and not out.failed and "the machine explains at most +" in out.message
    # "faster" is corrected alike: 30 % faster on a machine with twice the compute is no news
    fast_machine = _probes(1.0, 0.5)
    out = run_gate("k", "t.py::t", entry, _m(0.7), 0.1, 0.01, probe=lambda: fast_machine)
    assert out.verdict == "pass" and "which the machine could explain" in out.notes[-1]
    out = run_gate("k", "t.py::t", entry, _m(0.3), 0.1, 0.01, probe=lambda: here)
    assert out.verdict == "faster" and "the machine explains at most" in out.message


def test_like_for_like_rounds_decide_whatever_the_other_rounds_probes_say() -> None:
    """The CI host's two states: some rounds the probes (and the kernel) run 1.6x slower. A +30 % kernel,
    compared with its lock in the rounds where the probes read like the lock's, is a regression: before,
    the slow rounds' probes were pooled in, and the machine "explained" the +30 % away."""
    entry = {**LOCKED, "machine": _probes(1.0, 1.0)}
    states = [1.6, 1.6, 1.0, 1.0, 1.6, 1.6, 1.0, 1.0, 1.6, 1.6, 1.0, 1.0] * 2  # before and after each round
    probe_runs = iter(_probes(x, 1.0) for x in states)
    kernel = iter(_m(x) for x in [1.3 * 1.6, 1.3, 1.3 * 1.6, 1.3, 1.3 * 1.6, 1.3] * 2)
    calls: list[int] = []
    out = run_gate("k", "t.py::t", entry, _m(1.3), 0.1, 0.01, remeasure=lambda: next(kernel),
                   probe=lambda: calls.append(1) or next(probe_runs))
    assert out.verdict == "slower", out.message
    assert "+30.0% beyond it in 3 like-for-like rounds" in out.message
    assert len(calls) == 2 * 6  # probes before and after each round, over the 6 rounds a regression needs
    assert out.comparison is not None and round(out.comparison.change_pct, 1) == 30.0  # the row's number


def test_like_for_like_rounds_on_one_cpu_decide_only_once_every_round_is_used() -> None:
    """One CPU reads like the lock's, the other 1.6x slower (its hyperthread sibling busy) in every round: a
    kernel at +30 % on the first is not a regression in 6 rounds (a state of one CPU's that the probes miss
    looks just like that), but it still is after all 20 rounds, in ONE_CPU_ROUNDS like-for-like rounds or
    more; in fewer, it is not comparable. Rounds pinned to the CPUs in turn, for real."""
    import os

    from pytest_autotune.gate import verdict
    from pytest_autotune.gate.rounds import rotating_pin
    from pytest_autotune.execution.isolation import usable_cpus

    cpus = usable_cpus()
    if len(cpus) < 2:
        pytest.skip("needs two usable CPUs")
    entry = {**LOCKED, "machine": _probes(1.0, 1.0)}
    every_round = len(verdict.ROUND_PAUSES_S) + len(verdict.MORE_ROUND_PAUSES_S)

    def gate(like_rounds_on_first: int) -> GateOutcome:
        probes_on_first: list[int] = []  # a round runs probes, kernel, probes

        def like() -> bool:  # the first CPU, in its first rounds
            on_first = os.sched_getaffinity(0) == {cpus[0]}
            return on_first and (len(probes_on_first) + 1) // 2 <= like_rounds_on_first

        def probe() -> dict:
            if os.sched_getaffinity(0) == {cpus[0]}:
                probes_on_first.append(1)
            return _probes(1.0 if like() else 1.6, 1.0)

        return run_gate("k", "t.py::t", entry, _m(1.3), 0.1, 0.01, remeasure=lambda: _m(1.3 if like() else 2.1),
                        probe=probe, pin=rotating_pin())

    out = gate(every_round)
    assert out.verdict == "slower", out.message
    like_rounds = [r for r in out.rounds if r["like"]]
    assert len(out.rounds) == every_round and {r["cpu"] for r in like_rounds} == {cpus[0]}
    assert f"in {len(like_rounds)} like-for-like rounds, all on CPU {cpus[0]}: no other CPU read like" in out.message
    assert os.sched_getaffinity(0) == set(cpus)  # the affinity is given back
    out = gate(verdict.ONE_CPU_ROUNDS - 1)
    assert out.verdict == "incomparable", out.message
    # both CPUs like the lock's: the same +30 % is a regression, in the 6 rounds a regression needs
    out = run_gate("k", "t.py::t", entry, _m(1.3), 0.1, 0.01, remeasure=lambda: _m(1.3),
                   probe=lambda: _probes(1.0, 1.0), pin=rotating_pin())
    assert out.verdict == "slower" and len(out.rounds) == verdict.MIN_ROUNDS, out.message


def test_a_slowdown_seen_like_for_like_on_one_cpu_gets_more_rounds_for_the_other() -> None:
    """Busy neighbours keep the second CPU unlike the lock's for the whole first schedule (12 rounds), then
    it clears: the further rounds (MORE_ROUND_PAUSES_S) confirm the +30 % there. Before, the first
    schedule ended "incomparable". Rounds pinned to the CPUs in turn, for real."""
    import os

    from pytest_autotune.gate import verdict
    from pytest_autotune.gate.rounds import rotating_pin
    from pytest_autotune.execution.isolation import usable_cpus

    cpus = usable_cpus()
    if len(cpus) < 2:
        pytest.skip("needs two usable CPUs")
    entry = {**LOCKED, "machine": _probes(1.0, 1.0)}
    kernel_runs: list[int] = []

    def slow_here() -> bool:  # the second CPU, during the first schedule
        return os.sched_getaffinity(0) == {cpus[1]} and len(kernel_runs) <= len(verdict.ROUND_PAUSES_S)

    def kernel() -> Measurement:
        kernel_runs.append(1)
        return _m(2.1 if slow_here() else 1.3)

    out = run_gate("k", "t.py::t", entry, _m(1.3), 0.1, 0.01, remeasure=kernel,
                   probe=lambda: _probes(1.6 if slow_here() else 1.0, 1.0), pin=rotating_pin())
    assert out.verdict == "slower", out.message
    assert len(verdict.ROUND_PAUSES_S) < len(out.rounds) <= len(verdict.ROUND_PAUSES_S) + len(verdict.MORE_ROUND_PAUSES_S)
    assert {r["cpu"] for r in out.rounds if r["like"]} == set(cpus[:2])
    assert out.rounds[1] == {"cpu": cpus[1], "like": False, "machine": 1.6, "change_pct": 110.0, "preempted": 0}


def test_a_faster_machine_never_fades_a_slowdown() -> None:
    """Rounds where the machine runs 20 % faster than the lock's (the probes say so): a +30 % kernel reads
    only +4 % against the lock there. That is a slowdown the faster machine hides, not one that faded."""
    entry = {**LOCKED, "machine": _probes(1.0, 1.0)}
    out = run_gate("k", "t.py::t", entry, _m(1.3), 0.1, 0.01, remeasure=_sequence(1.04),
                   probe=lambda: _probes(0.8, 0.8))
    assert out.verdict == "slower", out.message
    assert out.comparison is not None and round(out.comparison.change_pct) == 30


def test_a_machine_that_stays_slower_than_the_locks_explains_more_than_its_probes_say() -> None:
    """In the slow state the unchanged 128 KiB kernel took 2.0x its lock's time while the triad probe beside
    it took 1.63x (CI host). With no like-for-like round, that is not comparable, not a false alarm."""
    entry = {**LOCKED, "machine": _probes(1.0, 1.0)}
    out = run_gate("k", "t.py::t", entry, _m(2.0), 0.1, 0.01, remeasure=_sequence(2.0),
                   probe=lambda: _probes(1.63, 1.0))
    assert out.verdict == "incomparable" and not out.failed, out.message
    assert len(out.rounds) == 12 and not any(r["like"] for r in out.rounds)  # no like round: no more rounds
    # a 3x regression in that state is still one: 6.0x against the lock, at most 2.66x explained
    out = run_gate("k", "t.py::t", entry, _m(6.0), 0.1, 0.01, remeasure=_sequence(6.0),
                   probe=lambda: _probes(1.63, 1.0))
    assert out.verdict == "slower", out.message


def test_the_runner_up_no_longer_excuses_a_slowdown_it_tells_a_lost_rank() -> None:
    # the lock: winner 1.0 ms, runner-up 1.2 ms; now both 3x slower (a toolchain or flag regression hits
    # every configuration) on the same machine: a regression, not "the runner-up is slower here too"
    entry = {**LOCKED, "machine": _probes(1.0, 1.0), "runners_up": [{"params": {"B": 4}, "samples": _m(1.2).samples}]}
    out = run_gate("k", "t.py::t", entry, _m(3.0), 0.1, 0.01, lambda p: _m(3.6), remeasure=_sequence(3.0),
                   probe=lambda: _probes(1.0, 1.0))
    assert out.verdict == "slower" and not out.stale_ranking
    # the runner-up now beats the winner: the winner lost its rank, and the gate says to re-tune
    out = run_gate("k", "t.py::t", entry, _m(3.0), 0.1, 0.01, lambda p: _m(1.2), remeasure=_sequence(3.0),
                   probe=lambda: _probes(1.0, 1.0))
    assert out.verdict == "slower" and out.stale_ranking
    assert "the winner lost its rank" in out.notes[-1] and "--autotune t.py::t" in out.notes[-1]


def test_machine_bounds_come_from_repeated_probe_runs() -> None:
    locked = _probes(1.0, 1.0)
    noisy = compare_machines(locked, _probes(1.0, 1.0, spread=0.3), 0.1)
    steady = compare_machines(locked, _probes(1.0, 1.0, spread=0.01), 0.1)
    assert noisy is not None and steady is not None
    assert noisy.slowdown > steady.slowdown >= 1.0  # a noisier machine explains more, never less than nothing
    assert steady.slowdown < 1.05
    assert compare_machines(locked, {**locked, "triad_n": 1 << 22}, 0.1) is None  # a probe of another size
    # a round's point estimate: the ratio of lower quartiles, like-for-like within the tolerance
    point = compare_machines(locked, _probes(1.08, 1.0), 0.1, bounds=False)
    assert point is not None and not point.time_ratio and point.like_the_locks
    assert abs(point.factor - 1.08) < 0.01


def test_a_machine_unlike_the_locks_is_not_comparable() -> None:
    locked = {"probe": "p1", "bandwidth_gbs": 20.0, "compute_gflops": 10.0}
    slower_machine = compare_machines(locked, {"probe": "p1", "bandwidth_gbs": 13.8, "compute_gflops": 10.2}, 0.1)
    assert slower_machine is not None and not slower_machine.comparable
    assert slower_machine.describe() == "this machine's memory bandwidth is 31% lower than the lock's machine's"
    # single values (an older probe record), given directly: the point estimate bounds the machine's share
    out = run_gate("k", "t.py::t", LOCKED, _m(1.4), 0.1, 0.01, remeasure=_sequence(1.4), machine=slower_machine)
    assert out.verdict == "incomparable" and not out.failed and "not comparable" in out.message
    out = run_gate("k", "t.py::t", LOCKED, _m(3.0), 0.1, 0.01, remeasure=_sequence(3.0), machine=slower_machine)
    assert out.verdict == "slower" and "the machine explains at most +45%" in out.message
    same = compare_machines(locked, {"probe": "p1", "bandwidth_gbs": 19.0, "compute_gflops": 10.5}, 0.1)
    assert same is not None and same.comparable
    assert run_gate("k", "t.py::t", LOCKED, _m(1.4), 0.1, 0.01, machine=same).verdict == "slower"
    assert compare_machines(locked, {**locked, "probe": "p2"}, 0.1) is None  # another probe version: unknown
    assert compare_machines(None, locked, 0.1) is None


def test_the_report_says_what_the_compiler_said_about_spills() -> None:
    """Spills recorded by the NVRTC stage reach the report (the winner's bytes, how many spilled)."""
    from pytest_autotune.engine.evaluator import EvaluationRecord, SearchHistory
    from pytest_autotune.engine.tuner import spills

    def record(i: int, stores: int | None) -> EvaluationRecord:
        extra = {} if stores is None else {"spill_stores": stores, "spill_loads": stores, "stack_frame": 8 + stores}
        m = Measurement(params={"B": i}, value=1.0 + i, samples=[1.0 + i], extra=extra)
        return EvaluationRecord(i, i, {"B": i}, m, 0.0)

    history = SearchHistory(records=[record(0, 0), record(1, 24), record(2, 96)])
    assert spills(history, history.records[0].measurement) == {
        "winner": {"spill_stores": 0, "spill_loads": 0, "stack_frame": 8}, "spilling_configurations": 2}
    assert spills(SearchHistory(records=[record(0, None)]), record(0, None).measurement) == {}  # C, OpenCL: nothing


def test_a_walk_from_a_transferred_start_restarts_after_transfer_patience(monkeypatch) -> None:
    """A warm start's seed can be a dead end on this device (the A100 convolution: 0.67 of the optimum, no 2%
    gain nearby): the walk from it gets ``transfer_patience`` x budget evaluations, not ``restart_after``'s."""
    from pytest_autotune.strategies.local import SimulatedAnnealing

    space = SearchSpace({"X": list(range(30)), "Y": list(range(30))})

    def evaluate(params: Mapping[str, Any]) -> Measurement:
        x, y = params["X"], params["Y"]
        value = 0.5 if (x, y) == (0, 0) else 1.0 + 0.01 * (abs(x - 20) + abs(y - 20))
        return Measurement(params=dict(params), value=value, samples=[value])

    restarts: list[int] = []
    fresh_start = SimulatedAnnealing._fresh_start

    def recording(self: Any, samples: int = 1) -> Any:
        restarts.append(len(self.observed))
        return (yield from fresh_start(self, samples))

    monkeypatch.setattr(SimulatedAnnealing, "_fresh_start", recording)
    then = {"name": "simulated_annealing", "stale_restart": "fresh", "restart_samples": 3, "stale_gain": 0.02}
    strategy = make_strategy({"name": "chain", "first": {"name": "random"}, "evaluations": 6, "then": then},
                             space, seed=0)
    Evaluator(space, evaluate, 200, seeds=[space.find({"X": 0, "Y": 0})]).run(strategy)
    assert restarts and restarts[0] == 1 + 6 + 20  # the seed, the first phase, 0.1 x 200 without a 2% gain
    assert all(b - a >= 40 for a, b in zip(restarts, restarts[1:]))  # then restart_after (0.2 x 200) again


def test_a_slowdown_must_persist_over_the_like_for_like_rounds() -> None:
    """A neighbour that competed for the caches for a moment (the probes, sized to the kernel, saw nothing):
    the slowdown survives a fresh round, then is gone: a pass, with a note. A locked configuration that no
    longer runs in a fresh round is broken."""
    entry = {**LOCKED, "machine": _probes(1.0, 1.0)}
    here = _probes(1.0, 1.0)
    passing = run_gate("k", "t.py::t", entry, _m(1.6), 0.1, 0.01, remeasure=_sequence(1.6, 1.0),
                       probe=lambda: here)
    assert passing.verdict == "pass" and not passing.failed, passing.message
    assert "did not persist" in passing.notes[-1] and "fresh round 2" in passing.notes[-1]
    broken_later = iter([_m(1.6), Measurement.failed({"B": 2}, FailureKind.RUNTIME, "lost")])
    out = run_gate("k", "t.py::t", entry, _m(1.6), 0.1, 0.01, remeasure=lambda: next(broken_later),
                   probe=lambda: here)
    assert out.verdict == "broken" and "lost" in out.message


def test_the_lock_keeps_the_rounds_where_the_machine_was_at_its_best() -> None:
    """The lock's samples and probes describe one state, the fastest the machine offered, as the winner reads
    it: rounds on a CPU in the slow state (probes 1.6x, kernel 1.8x) are left out of both."""
    from pytest_autotune.gate.rounds import best_state_rounds

    slow = [False, True, False, True, True, False]
    probe_runs = iter(_probes(1.6 if s else 1.0, 1.0) for s in slow for _ in (0, 1))
    winner = iter(_m(1.8 if s else 1.0) for s in slow)
    runner_up = iter(_m(2.16 if s else 1.2) for s in slow)
    pins: list[int] = []

    def pin(i: int) -> Any:
        pins.append(i)
        return contextlib.nullcontext()

    result = best_state_rounds([lambda: next(winner), lambda: next(runner_up)], lambda: next(probe_runs), pin,
                               0.1, pause_s=0)
    assert result is not None
    (samples, up), machine, kept = result
    assert kept == 3 and pins == list(range(6))
    assert max(samples) < 1.1 and min(up) >= 1.2 and max(up) < 1.3
    assert machine is not None and max(machine["samples_ms"]["bandwidth_gbs"]) < 1.1
    # a state of the kernel's that the probes miss (they read like the fast rounds): left out all the same
    winner = iter(_m(x) for x in [1.0, 1.35, 1.0, 1.0, 1.35, 1.35])
    result = best_state_rounds([lambda: next(winner)], lambda: _probes(1.0, 1.0), None, 0.1, pause_s=0)
    assert result is not None and result[2] == 3 and max(result[0][0]) < 1.1


def test_a_lock_spreads_its_rounds_over_seconds_and_keeps_the_fast_state_it_meets() -> None:
    """Six rounds span about a second; the CI host's slow state lasts seconds. The further rounds (their pauses
    from the tuning's time) meet the fast state after six slow rounds, and the lock keeps those; with six
    rounds only (a seconds-long tune), the lock keeps the slow state it saw."""
    from pytest_autotune.gate.rounds import best_state_rounds

    def lock(speeds: list[float], more: tuple[float, ...]) -> tuple[list[float], int, int]:
        it = iter(speeds)
        calls: list[int] = []
        result = best_state_rounds([lambda: calls.append(1) or _m(next(it))], None, None, 0.1, pause_s=0,
                                   more_pauses_s=more)
        assert result is not None
        return result[0][0], result[2], len(calls)

    slow_then_fast = [1.8, 1.7, 1.8, 1.8, 1.9, 1.8, 1.8, 1.0, 1.8, 1.0]
    samples, kept, rounds = lock(slow_then_fast, (0.0,) * 4)
    assert (rounds, kept) == (10, 2) and max(samples) < 1.1
    samples, kept, rounds = lock(slow_then_fast, ())
    assert rounds == 6 and min(samples) >= 1.7


def test_the_lock_waits_for_the_machine_a_tenth_of_the_tuning_time_at_most() -> None:
    from pytest_autotune.gate.rounds import LOCK_MORE_PAUSES_S, lock_pauses

    assert lock_pauses(2.0) == ()  # a test suite's tune of a tiny kernel: no further rounds
    assert lock_pauses(10.0) == (0.3, 0.7)
    assert lock_pauses(600.0) == LOCK_MORE_PAUSES_S and sum(lock_pauses(73.0)) <= 7.3
