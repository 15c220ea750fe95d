"""The lock's evidence sized to what it must show (issue 39): runners-up re-timed in the lock's rounds only as
the tuning's time affords, probes built once per size and sized with this machine's chain rate."""
from __future__ import annotations

import shutil

import pytest

from pytest_autotune.gate import probes
from pytest_autotune.gate.rounds import LOCK_RUNNERS_UP_SHARE, lock_runners_up


def test_runners_up_join_the_lock_rounds_only_as_the_tuning_time_affords() -> None:
    # a 10 s tuning affords 0.5 s: 6 rounds of 20 ms runners-up fit four (0.48 s), not five
    assert LOCK_RUNNERS_UP_SHARE == 0.05
    assert lock_runners_up([0.02] * 5, 6, 10.0) == 4
    # fastest first, in rank order: a slow runner-up stops the count (the ones after it are not re-timed)
    assert lock_runners_up([0.01, 1.0, 0.01], 6, 10.0) == 1
    assert lock_runners_up([0.5], 6, 4.0) == 0  # Triton's slow runners-up in a short tuning: none
    assert lock_runners_up([], 6, 100.0) == 0
    assert lock_runners_up([0.001] * 5, 14, 600.0) == 5


def test_probe_sizes_follow_the_chain_rate_given() -> None:
    nominal = probes.probe_sizes(1 << 20, 0.5)
    assert nominal["fma_iterations"] == 1 << 19  # 0.5 ms at the nominal 1 ns per iteration
    # at 4 ns per iteration the chain of a 0.5 ms kernel is a quarter as long: it lasts about as long
    assert probes.probe_sizes(1 << 20, 0.5, ns_per_iteration=4.0)["fma_iterations"] == 1 << 17
    assert probes.probe_sizes(1 << 20, 0.5, ns_per_iteration=4.0)["triad_n"] == nominal["triad_n"]
    assert probes.probe_sizes(None, None, ns_per_iteration=4.0) == probes.probe_sizes()  # unknown: the defaults


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler")
def test_probes_build_their_runner_once_per_size(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_autotune import runners

    built: list[str] = []
    make = runners.make_runner

    def counting(spec, **options):  # type: ignore[no-untyped-def]
        built.append(spec.kernel_name if hasattr(spec, "kernel_name") else str(spec))
        return make(spec, **options)

    monkeypatch.setattr(runners, "make_runner", counting)
    probes._close_runners()
    first = probes.measure_cpu_probes(1 << 14, 1 << 12)
    again = probes.measure_cpu_probes(1 << 14, 1 << 12)
    assert len(built) == 2  # the triad and the chains, each once
    for record in (first, again):
        assert len(record["samples_ms"]["bandwidth_gbs"]) >= 15 and record["triad_n"] == 1 << 14
    probes.measure_cpu_probes(1 << 15, 1 << 12)
    assert len(built) == 3  # a new triad size: one more runner; the chains' size is the same
    rate = probes.fma_ns_per_iteration()
    assert 0.05 <= rate < 1000


@pytest.mark.usefixtures("real_pauses")  # the pauses are what it checks
def test_a_further_round_pauses_from_the_start_of_the_round_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """What spreads the lock's rounds is the time between them: a round that lasts 0.2 s already waited 0.2 s
    of a further round's pause; the first six rounds keep their pauses."""
    import time

    from pytest_autotune.gate import rounds
    from pytest_autotune.results import Measurement

    slept: list[float] = []
    monkeypatch.setattr(rounds.time, "sleep", lambda s: slept.append(round(s, 2)))

    def busy() -> Measurement:
        until = time.perf_counter() + 0.2
        while time.perf_counter() < until:
            pass
        return Measurement(params={}, value=1.0, samples=[1.0, 1.0, 1.0])

    result = rounds.best_state_rounds([busy], None, None, 0.1, rounds=2, pause_s=0.05, more_pauses_s=(0.1, 0.5))
    assert result is not None and result[2] == 4
    assert slept[0] == 0.05 and 0.25 <= slept[-1] <= 0.3  # 0.5 - 0.2 (the first further pause: nothing left)
    assert len(slept) == 2
