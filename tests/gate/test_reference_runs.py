"""Reference runs interleaved with the kernel's (issue 43): each timed run of a C kernel is preceded by a triad
over the kernel's footprint, so the gate knows the machine's state at every run. Runs the reference reads in a
slower state than the lock's are left out; a round in a slower state throughout is not like-for-like, and the
most that state explains is taken off before a regression is called."""
from __future__ import annotations

import json

import numpy as np
import pytest

from pytest_autotune.gate.rounds import judged_runs, reference_runs
from pytest_autotune.gate.trust import UntrustedEntry, trusted_reference_size
from pytest_autotune.gate.verdict import run_gate
from pytest_autotune.lock.entry import InvalidEntryError, normalize_entry
from pytest_autotune.measure.reference import LockedReference, round_state
from pytest_autotune.measure.timing import TimingStats
from pytest_autotune.results import Measurement
from pytest_autotune.runners import KernelSpec, make_runner

RNG = np.random.default_rng(43)
LOCKED_REFERENCE = 0.10  # ms
ENTRY = {"params": {"X": 1}, "samples": [1.0 + 0.002 * i for i in range(32)], "tolerance": 0.1,
         "machine": {"reference_ms": LOCKED_REFERENCE, "reference_n": 1 << 14}}


def test_a_runs_state_is_the_slower_of_its_references_and_a_measurements_their_median() -> None:
    locked = LockedReference(LOCKED_REFERENCE, 0.01)
    triads = [0.10, 0.21, 0.10, 0.105, 0.2, 0.10, 0.10, 0.10]
    chains = [0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.02]  # the last run: only the chains saw the slower state
    states = locked.states(triads, chains)
    assert states[-1] == pytest.approx(2.0) and states[1] == pytest.approx(2.1) and states[0] == pytest.approx(1.0)
    assert round_state(states) == pytest.approx(1.025) and round_state([2.0] * 6) == 2.0 and round_state([]) is None
    # a lock's record: read back, or nothing where it has none or a bad value
    assert LockedReference.of(locked.record()) == locked
    assert LockedReference.of({}) is None and LockedReference.of({"reference_ms": -1}) is None


def _measurement(samples: list[float], reference: list[float], offcpu: list[float] | None = None) -> Measurement:
    extra = {"reference_ms": reference, **({"offcpu_ms": offcpu} if offcpu is not None else {})}
    return Measurement(params={"X": 1}, value=float(np.median(samples)), samples=samples, extra=extra)


def test_judged_runs_leave_out_the_preempted_and_say_the_state_the_others_ran_in() -> None:
    m = _measurement([1.0, 9.0, 2.0, 1.0, 1.0, 1.0], [0.1, 0.1, 0.2, 0.1, 0.1, 0.1], [0, 8.0, 0, 0, 0, 0])
    runs = judged_runs(m, LockedReference(LOCKED_REFERENCE), 0.1)
    assert runs.samples == [1.0, 2.0, 1.0, 1.0, 1.0] and runs.preempted == 1 and runs.state == pytest.approx(1.0)
    assert runs.in_lock_state and not runs.shared_cpu
    slow = judged_runs(_measurement([2.0] * 8, [0.19] * 8), LockedReference(LOCKED_REFERENCE), 0.1)
    assert not slow.in_lock_state and slow.state == pytest.approx(1.9) and slow.samples == [2.0] * 8
    # every run interrupted: a neighbour shared the CPU throughout
    shared = judged_runs(_measurement([3.0] * 8, [0.1] * 8, [2.0] * 8), LockedReference(LOCKED_REFERENCE), 0.1)
    assert shared.shared_cpu and shared.preempted == 8 and shared.samples == [3.0] * 8


def _slow_state() -> Measurement:
    """The host's slower state (issue 43's bimodal host): kernel and reference both about 2x the lock's."""
    return _measurement(list(2.0 + 0.05 * RNG.random(16)), list(0.2 + 0.005 * RNG.random(16)))


def _mixed_state(factor: float = 1.0) -> Measurement:
    """Most runs in the lock's state, a quarter in the slower one (states switch within a second)."""
    fast, slow = list(factor * (1.0 + 0.02 * RNG.random(12))), list(factor * (2.0 + 0.05 * RNG.random(4)))
    return _measurement(fast + slow, [0.1] * 12 + [0.2] * 4)


def _no_reference(m: Measurement) -> Measurement:
    m.extra = {}
    return m


@pytest.mark.parametrize("with_reference", [False, True], ids=["today", "reference runs"])
def test_a_kernel_in_the_hosts_slower_state_is_not_called_a_regression(with_reference: bool) -> None:
    """Today's gate (no reference runs) read the host's slower state as the kernel's +100 % in every round;
    with the reference before each run the rounds are out of the lock's state, and that state explains it."""
    measure = _slow_state if with_reference else (lambda: _no_reference(_slow_state()))
    outcome = run_gate("k", "t.py::t", ENTRY, measure(), 0.1, 0.01, remeasure=measure, pauses_s=[0.0] * 6)
    if not with_reference:
        assert outcome.verdict == "slower", outcome.message
        return
    assert outcome.verdict == "incomparable", outcome.message
    assert "not comparable (a neighbour shared this CPU, or the host ran slower)" in outcome.message
    assert "read this CPU 2.0" in outcome.message and all(not r["like"] and r["state"] > 1.9 for r in outcome.rounds)


def test_a_round_mostly_in_the_locks_state_is_like_for_like() -> None:
    """A quarter of each round in the slower state: the round is in the lock's state, the unchanged kernel
    passes at once, and one made 1.3x slower is caught."""
    unchanged = run_gate("k", "t.py::t", ENTRY, _mixed_state(), 0.1, 0.01, remeasure=_mixed_state,
                         pauses_s=[0.0] * 6)
    assert unchanged.verdict == "pass" and not unchanged.rounds, unchanged.message
    slower = run_gate("k", "t.py::t", ENTRY, _mixed_state(1.3), 0.1, 0.01, remeasure=lambda: _mixed_state(1.3),
                      pauses_s=[0.0] * 6)
    assert slower.verdict == "slower" and "got slower than its lock allows" in slower.message, slower.message
    assert all(r["like"] for r in slower.rounds)


def test_a_regression_beyond_what_the_slower_state_explains_is_still_caught() -> None:
    """x3 while the reference reads the machine 1.2x slower than the lock's: the state explains at most 1.2x
    squared (+47 %), the rest is the kernel's."""
    def slower() -> Measurement:
        return _measurement(list(3.0 + 0.05 * RNG.random(16)), list(0.12 + 0.002 * RNG.random(16)))

    outcome = run_gate("k", "t.py::t", ENTRY, slower(), 0.1, 0.01, remeasure=slower, pauses_s=[0.0] * 6)
    assert outcome.verdict == "slower", outcome.message
    assert "read this CPU 1.2" in outcome.message and "beyond it" in outcome.message


def test_a_lock_recorded_in_the_slower_state_does_not_hide_a_slowdown_in_the_faster_one() -> None:
    """The lock met only the host's slower state (2 ms, reference 0.2 ms); the gate meets the faster one, where
    the kernel made 1.3x slower reads 1.3 ms: -35 % against the lock, a pass. Its reference runs read the
    machine twice as fast as the lock's: taken off, it is +30 %, a regression."""
    entry = {**ENTRY, "samples": [2.0 + 0.004 * i for i in range(32)],
             "machine": {"reference_ms": 0.2, "reference_n": 1 << 14}}

    def faster_machine_slower_kernel() -> Measurement:
        return _measurement(list(1.3 + 0.02 * RNG.random(16)), list(0.1 + 0.002 * RNG.random(16)))

    without = run_gate("k", "t.py::t", entry, _no_reference(faster_machine_slower_kernel()), 0.1, 0.01,
                       remeasure=lambda: _no_reference(faster_machine_slower_kernel()), pauses_s=[0.0] * 6)
    assert without.verdict in ("pass", "faster"), without.message
    outcome = run_gate("k", "t.py::t", entry, faster_machine_slower_kernel(), 0.1, 0.01,
                       remeasure=faster_machine_slower_kernel, pauses_s=[0.0] * 6)
    assert outcome.verdict == "slower", outcome.message


def test_the_c_runner_times_a_reference_before_each_run_only_when_asked() -> None:
    n = 1 << 14
    a = np.ones(n, np.float32)
    code = "void k(float *a, int n) { for (int i = 0; i < n; i++) a[i] = a[i] * 0.5f + 1.0f; }"
    for isolate in (True, False):
        runner = make_runner(KernelSpec(code, "k", 1, [a, np.int32(n)], lang="c"), "c", isolate=isolate,
                             measure={"min_iterations": 6, "max_iterations": 6})
        try:
            assert "reference_ms" not in runner.evaluate({}).extra
            with reference_runs(runner, 1 << 12):
                m = runner.evaluate({})
            after = runner.evaluate({})
        finally:
            runner.close()
        assert m.ok and len(m.extra["reference_ms"]) == len(m.extra["reference_chains_ms"]) == len(m.samples) == 6
        assert all(0 < c < 50 for c in m.extra["reference_chains_ms"])
        assert all(0 < r < 50 for r in m.extra["reference_ms"])
        assert "reference_ms" not in after.extra


def test_the_lock_records_its_reference_and_the_gate_uses_it(pytester: pytest.Pytester) -> None:
    """Tuned through the plugin: the lock's entry keeps its reference runs' median and size; the gate of the
    unchanged kernel passes with them."""
    pytester.makepyfile(test_k="""
        import numpy as np, pytest
        K = "void k(float *a, const float *b, int n) { for (int r = 0; r < R; r++) for (int i = 0; i < n; i++) a[i] = a[i] * 0.999f + b[i]; }"
        n = 1 << 14
        @pytest.mark.tune(params={"R": [8, 16]})
        def test_k(autotune):
            autotune.kernel(K, "k", 1, args=[np.zeros(n, np.float32), np.ones(n, np.float32), np.int32(n)], lang="c",
                            verify=lambda *x: True)
    """)
    assert pytester.runpytest_subprocess("--autotune", "-p", "no:cacheprovider").ret == 0
    (lockfile,) = (pytester.path / "autotune.lock").glob("cpu-*.json")
    (entry,) = json.loads(lockfile.read_text())["entries"].values()
    machine = entry["machine"]
    assert machine["reference_ms"] > 0 and machine["reference_chains_ms"] > 0
    assert machine["reference_n"] == machine["triad_n"]
    assert pytester.runpytest_subprocess("-p", "no:cacheprovider").ret == 0
    # a pull request's lock asking the worker for 2**40 floats a side is refused before anything runs
    lock = json.loads(lockfile.read_text())
    (key,) = lock["entries"]
    lock["entries"][key]["machine"] = {**machine, "probe": "another-version", "reference_n": 1 << 40}
    lockfile.write_text(json.dumps(lock))
    tampered = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert tampered.ret == 1
    tampered.stdout.fnmatch_lines(["*machine.reference_n = 1099511627776 is outside the reference runs' range*"])


@pytest.mark.parametrize("field, value, says", [
    ("reference_ms", -1.0, "machine.reference_ms: must be a positive time"),
    ("reference_ms", "fast", "machine.reference_ms: must be a number"),
    ("reference_chains_ms", float("inf"), "machine.reference_chains_ms: must be a finite number"),
    ("reference_n", 0, "machine.reference_n: must be a positive integer"),
])
def test_a_tampered_reference_is_refused_naming_the_field(field: str, value: object, says: str) -> None:
    raw = {"params": {"X": 1}, "samples": [1.0], "stats": TimingStats.from_samples([1.0]).as_dict(samples=False),
           "hashes": {"source": "a", "space": "b", "problem": "c"},
           "machine": {"reference_ms": 0.1, "reference_n": 1024, field: value}}
    with pytest.raises(InvalidEntryError, match=says.replace(".", r"\.")):
        normalize_entry(raw)


def test_a_reference_size_from_a_lock_stays_in_the_probes_range() -> None:
    assert trusted_reference_size({"machine": {"reference_n": 1 << 14}}, path="l", key="k") == {"reference_n": 1 << 14}
    assert trusted_reference_size({"machine": {}}, path="l", key="k") == {}
    with pytest.raises(UntrustedEntry, match=r"machine.reference_n = 1099511627776 is outside the reference runs"):
        trusted_reference_size({"machine": {"reference_n": 1 << 40}}, path="l", key="k")
