"""Runs another task interrupted are not the kernel's time (issue 43): a CPU kernel's runs carry their time off
the CPU (wall minus the thread's CPU time), and the lock's rounds and the gate judge the runs nobody
interrupted. A neighbour that time-slices the kernel's CPU no longer reads as a slower kernel."""
from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from pytest_autotune.gate.verdict import run_gate
from pytest_autotune.measure.timing import MIN_UNPREEMPTED, OFFCPU_MS, unpreempted
from pytest_autotune.results import Measurement
from pytest_autotune.runners import KernelSpec, make_runner
from pytest_autotune.execution.isolation import sharing_one_cpu, usable_cpus


def test_preempted_runs_are_left_out() -> None:
    samples = [1.0, 1.0, 9.0, 1.0, 1.0, 1.02]
    offcpu = [0.0, 0.005, 8.0, 0.0, 0.0, OFFCPU_MS]  # one run lost 8 ms to a neighbour; the others read ~0
    assert unpreempted(samples, offcpu) == ([1.0, 1.0, 1.0, 1.0, 1.02], 1)


def test_without_accounting_or_with_too_few_clean_runs_every_run_counts() -> None:
    samples = [1.0, 1.5, 1.5, 1.5, 1.5]
    assert unpreempted(samples, None) == (samples, 0)
    assert unpreempted(samples, [0.0] * 4) == (samples, 0)  # not aligned: not trusted
    # the CPU shared throughout: fewer than MIN_UNPREEMPTED undisturbed runs, judged as measured
    assert unpreempted(samples, [0.0] + [0.5] * 4) == (samples, 0)
    assert MIN_UNPREEMPTED == 4


ENTRY = {"params": {"X": 1}, "samples": [1.0 + 0.001 * i for i in range(32)], "tolerance": 0.1}


RNG = np.random.default_rng(7)


def _shared_cpu_measurement(with_accounting: bool) -> Measurement:
    """A kernel of 1 ms on a CPU a neighbour time-slices: 26 of 32 runs interrupted for 0.4 ms each."""
    clean = list(1.0 + 0.03 * RNG.random(6))
    hit = list(1.4 + 0.03 * RNG.random(26))
    samples = clean + hit
    extra = {"offcpu_ms": [0.0] * 6 + [0.4] * 26} if with_accounting else {}
    return Measurement(params={"X": 1}, value=float(np.median(samples)), samples=samples, extra=extra)


@pytest.mark.parametrize("accounting", [False, True], ids=["every run", "unpreempted runs"])
def test_a_neighbour_time_slicing_the_kernels_cpu_is_no_regression(accounting: bool) -> None:
    """Judged on every run (the gate before issue 43) the time-sliced kernel reads +40 % in every round, a
    regression; judged on the runs nobody interrupted it is the lock's kernel."""
    outcome = run_gate("k", "t.py::t", ENTRY, _shared_cpu_measurement(accounting), 0.1, 0.01,
                       remeasure=lambda: _shared_cpu_measurement(accounting), pauses_s=[0.0] * 12)
    if accounting:
        assert outcome.verdict == "pass", outcome.message
    else:
        assert outcome.verdict == "slower" and "got slower than its lock allows" in outcome.message, outcome.message


SPIN = "import os\nparent = os.getppid()\nprint('spinning', flush=True)\nwhile os.getppid() == parent:\n    pass\n"
KERNEL = ("void scale(float *a, int n, int reps) {\n"
          "    for (int r = 0; r < reps; r++) for (int i = 0; i < n; i++) a[i] = a[i] * 0.999f + 1.0f;\n}\n")


@pytest.mark.neighbours
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity (Linux)")
def test_a_real_neighbour_on_the_kernels_cpu_shows_as_time_off_the_cpu() -> None:
    """A spinning process pinned to the CPU the kernel's worker is pinned to: the runs it interrupted carry
    the time it took, and only those are left out."""
    cpu = usable_cpus()[-1]
    a = np.ones(1 << 15, np.float32)
    runner = make_runner(KernelSpec(KERNEL, "scale", 1, [a, np.int32(a.size), np.int32(1200)], lang="c"), "c",
                         measure={"warmup": 1, "min_iterations": 40, "max_iterations": 40, "time_budget_s": 0})
    neighbour = subprocess.Popen([sys.executable, "-c", SPIN], preexec_fn=lambda: os.sched_setaffinity(0, {cpu}),
                                 stdout=subprocess.PIPE, text=True)
    try:
        assert neighbour.stdout is not None and neighbour.stdout.readline().strip() == "spinning"  # it runs now
        with sharing_one_cpu(runner, cpu=cpu, here=True):  # here: one runner alone is pinned only with this thread
            m = runner.evaluate({})
    finally:
        neighbour.kill()
        neighbour.wait()
        runner.close()
    assert m.ok, m.detail
    offcpu = m.extra["offcpu_ms"]
    assert len(offcpu) == len(m.samples) == 40
    # two runnable tasks on one CPU for the runs (2-6 ms each; at 0.3 ms, 40 runs once fitted in one slice):
    # the scheduler gave the neighbour time during the kernel's runs
    assert sum(offcpu) > 0.5, (offcpu, m.samples)
    kept, left_out = unpreempted(m.samples, offcpu)
    hit = [x for x, off in zip(m.samples, offcpu) if off > OFFCPU_MS + 0.01 * x]
    assert left_out == len(hit) >= 1 or len(m.samples) - len(hit) < MIN_UNPREEMPTED
    for x, off in zip(m.samples, offcpu):  # a run's time off the CPU is part of its wall time, never more
        assert 0.0 <= off <= x


def _without_accounting(m: Measurement) -> Measurement:
    """The measurement as the gate before issue 43 read it: no time off the CPU, no reference runs."""
    m.extra = {k: v for k, v in m.extra.items() if k not in ("offcpu_ms", "reference_ms")}
    return m


def test_a_round_a_neighbour_shared_throughout_is_no_regression() -> None:
    """Every run interrupted (a neighbour on the kernel's CPU the whole round): today's gate read the time
    slices as the kernel's and failed it; now the rounds are no evidence of a regression."""
    def shared() -> Measurement:
        samples = list(2.0 + 0.05 * RNG.random(16))
        return Measurement(params={"X": 1}, value=float(np.median(samples)), samples=samples,
                           extra={"offcpu_ms": [1.0] * 16})

    today = run_gate("k", "t.py::t", ENTRY, _without_accounting(shared()), 0.1, 0.01,
                     remeasure=lambda: _without_accounting(shared()), pauses_s=[0.0] * 6)
    assert today.verdict == "slower", today.message
    now = run_gate("k", "t.py::t", ENTRY, shared(), 0.1, 0.01, remeasure=shared, pauses_s=[0.0] * 6)
    assert now.verdict == "incomparable", now.message
    assert "not comparable (a neighbour shared this CPU)" in now.message and "fresh rounds" in now.message
    assert all(r.get("shared_cpu") for r in now.rounds) and now.rounds[0]["preempted"] == 16


@pytest.mark.neighbours
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or not usable_cpus(), reason="needs CPU affinity (Linux)")
def test_today_s_gate_cries_wolf_beside_a_real_neighbour_and_the_gate_does_not() -> None:
    """Issue 43 with real neighbours: three processes spinning on the kernel's CPU, each in a session of its own
    (as another job's are), while the unchanged kernel (7-17 ms a run, longer than the scheduler's 4 ms slices:
    every run is interrupted, and takes about 4x its time) is gated against the lock it recorded without them.
    Today's gate, reading every run, fails it as a regression; the gate now sees the neighbours in the runs'
    time off the CPU and calls it not comparable. (One neighbour, or three in the test's own session, took
    half the CPU at most: the worker leads a session, and the scheduler shares the CPU between sessions
    (autogroup). The 1.2-2x that left is within the 2x the host's own states move this kernel between a lock
    and a gate, and today's gate passed one gate in six: a coin toss.)"""
    cpu = usable_cpus()[0]
    a = np.ones(1 << 18, np.float32)
    runner = make_runner(KernelSpec(KERNEL, "scale", 1, [a, np.int32(a.size), np.int32(600)], lang="c"), "c",
                         measure={"warmup": 1, "min_iterations": 6, "max_iterations": 6, "time_budget_s": 0})
    neighbours = []

    def pin(i: int) -> Any:  # every round on the neighbours' CPU
        return sharing_one_cpu(runner, cpu=cpu, here=True)

    try:
        with pin(0):  # the lock: the machine's best of three, as its rounds keep
            quiet = min((runner.evaluate({}) for _ in range(3)), key=lambda m: m.value)
        assert quiet.ok, quiet.detail
        entry = {"params": {}, "samples": list(quiet.samples), "tolerance": 0.1}
        for _ in range(3):  # each a session of its own, as the worker is: each its own share of the CPU
            neighbours.append(subprocess.Popen([sys.executable, "-c", SPIN], stdout=subprocess.PIPE, text=True,
                                               start_new_session=True,
                                               preexec_fn=lambda: os.sched_setaffinity(0, {cpu})))
        for n in neighbours:
            assert n.stdout is not None and n.stdout.readline().strip() == "spinning"
        for _ in range(3):  # the host's own 2x states can hide the neighbour for a round: up to three gates
            with pin(0):
                first = runner.evaluate({})
            today = run_gate("scale", "t.py::t", entry, _without_accounting(first), 0.1, 0.01,
                             remeasure=lambda: _without_accounting(runner.evaluate({})), pin=pin, pauses_s=[0.0] * 4)
            if today.verdict == "slower":
                break
        with pin(0):
            first = runner.evaluate({})
        now = run_gate("scale", "t.py::t", entry, first, 0.1, 0.01, remeasure=lambda: runner.evaluate({}),
                       pin=pin, pauses_s=[0.0] * 4)
    finally:
        for n in neighbours:
            n.kill()
            n.wait()
        runner.close()
    assert today.verdict == "slower", (today.message, today.rounds, quiet.samples)
    assert "got slower than its lock allows" in today.message
    assert now.verdict == "incomparable", (now.message, now.rounds, quiet.samples)
    assert "not comparable (a neighbour shared this CPU)" in now.message, now.message
