"""A pytest plugin for ``bench_tune_overhead.py``: where the wall time of one ``pytest --autotune`` goes.

Loaded in the benchmark's subprocess with ``-p _tune_phases`` (the benchmarks folder on ``PYTHONPATH``),
it wraps the phases of a tuning, without changing them, and writes their exclusive times to the JSON file
named by ``$BENCH_TUNE_PHASES`` when the session ends:

* ``startup``: from the subprocess's launch (``$BENCH_TUNE_T0``, the parent's ``time.time()``) to the test's
  call: interpreter, imports, collection;
* ``search``, ``finalists`` (``engine.tuner._finish``: the confirmation rounds, the winner once more),
  ``lock_rounds`` (``gate.rounds.best_state_rounds``), ``probes`` (``gate.probes.measure_cpu_probes``),
  ``pauses`` (the lock's sleeps), ``after`` (the rest of the test call: the entry, the lockfile);
* in every phase but the probes, each evaluation's own timings: ``compile_s``, ``verify_s``, ``bench_s``
  (warm-up and timed runs: kernel execution), ``worker_start_s``, and the evaluation's remainder
  (``eval_other``: messages to the worker, buffers, restarts);
* ``teardown``: from the test's end to the session's end (the report, the summary).

Exclusive means a phase's time leaves out what the phases inside it took.
"""
from __future__ import annotations

import atexit
import json
import os
import time
from typing import Any, Callable

import pytest

_T_IMPORT = time.time()
_stack: list[str] = []
_spent: dict[str, float] = {}
_counts: dict[str, int] = {}
_marks: dict[str, float] = {}
_depth = [0]


def _add(key: str, seconds: float, count: int = 0) -> None:
    _spent[key] = _spent.get(key, 0.0) + seconds
    if count:
        _counts[key] = _counts.get(key, 0) + count


def _phase(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` timed as phase ``name``, its time net of the phases inside it."""
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        _stack.append(name)
        inner_before = _spent.get("_inner_" + name, 0.0)
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            total = time.perf_counter() - t
            _stack.pop()
            inner = _spent.get("_inner_" + name, 0.0) - inner_before
            _add(name, total - inner, 1)
            if _stack:  # the direct parent's exclusive time leaves this out
                _add("_inner_" + _stack[-1], total)
    return wrapped


def _evaluation(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A runner's evaluation: its compile, verify and bench timings in the phase it ran in."""
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _depth[0]:
            return fn(self, *args, **kwargs)
        _depth[0] += 1
        t = time.perf_counter()
        try:
            m = fn(self, *args, **kwargs)
        finally:
            _depth[0] -= 1
        total = time.perf_counter() - t
        phase = _stack[-1] if _stack else "outside"
        if phase == "probes":
            return m
        timings = getattr(m, "timings", {}) or {}
        parts = {k: float(timings.get(k, 0.0)) for k in ("compile_s", "verify_s", "bench_s", "worker_start_s")}
        for key, seconds in parts.items():
            _add(f"{phase}.{key}", seconds)
        _add(f"{phase}.eval_other", max(0.0, total - sum(parts.values())))
        _add(f"{phase}.evaluations", 0.0, 1)
        _add(f"{phase}.timed_runs", 0.0, len(getattr(m, "samples", None) or ()))
        if _stack:
            _add("_inner_" + _stack[-1], total)
        return m
    return wrapped


def _install() -> None:
    from pytest_autotune.engine import tuner
    from pytest_autotune.execution import isolation
    from pytest_autotune.gate import probes, rounds
    from pytest_autotune.lifecycle import recording, run

    tuner._finish = _phase("finalists", tuner._finish)
    run.tune = _phase("search", run.tune)
    recording.best_state_rounds = _phase("lock_rounds", recording.best_state_rounds)
    probes.measure_cpu_probes = _phase("probes", probes.measure_cpu_probes)

    class _Time:
        sleep = staticmethod(_phase("pauses", time.sleep))

        def __getattr__(self, name: str) -> Any:
            return getattr(time, name)

    rounds.time = _Time()  # type: ignore[assignment]
    isolation.HostedRunner.evaluate = _evaluation(isolation.HostedRunner.evaluate)


_install()


def _mark(name: str) -> None:
    _marks.setdefault(name, time.time())


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    _mark("configure")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    _mark("collected")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _mark("setup_start")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    _mark("call_start")
    _stack.append("after")
    before = _spent.get("_inner_after", 0.0)
    t = time.perf_counter()
    yield
    total = time.perf_counter() - t
    _stack.pop()
    _add("after", total - (_spent.get("_inner_after", 0.0) - before), 1)
    _mark("call_end")


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    _mark("unconfigure")


def _write() -> None:
    """At the interpreter's exit (registered first, so it runs after the other exit handlers)."""
    path = os.environ.get("BENCH_TUNE_PHASES")
    if not path:
        return
    t0 = float(os.environ.get("BENCH_TUNE_T0", _T_IMPORT))
    now = time.time()
    marks = {k: v - t0 for k, v in _marks.items()}
    out = {"spent_s": {k: v for k, v in _spent.items() if not k.startswith("_inner_")}, "counts": _counts,
           "marks_s": marks, "import_s": _T_IMPORT - t0, "startup_s": marks.get("call_start", now - t0),
           "exit_s": now - t0}
    with open(path, "w") as f:
        json.dump(out, f, indent=1)


atexit.register(_write)
