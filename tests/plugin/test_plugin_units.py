"""Unit tests of the plugin's pytest-free parts: marker validation, the gate decision,
the scratch cache, the summary/report formatting, progress lines and option parsing.

The end-to-end behaviour (inner pytest sessions) is in ``test_plugin_e2e.py``.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from pytest_autotune.engine.evaluator import Budget
from pytest_autotune.gate.verdict import retune_command, run_gate
from pytest_autotune.lifecycle.settings import MARKER_ARGS, MarkerError, parse_marker
from pytest_autotune.measure.timing import MeasureOptions
from pytest_autotune.plugin import _budget_default
from pytest_autotune.plugin.table import COLUMNS, format_table, short_ids, table_rows
from pytest_autotune.plugin.report import (failure_lines, lockfile_lines, ray_line,
                                    not_gated_line, not_tuned_line, write_json_report, write_plots)
from pytest_autotune.results import FailureKind, Measurement
from pytest_autotune.lifecycle.scratch import ScratchCache
from pytest_autotune.lifecycle import Options, Progress
from pytest_autotune.plugin.session import SessionState
from pytest_autotune.space import SearchSpace

DEFAULTS = {"strategy": "random", "budget": 200, "tolerance": 0.10, "alpha": 0.01, "seed": None}


# ---------------------------------------------------------------------------------------------
# Marker validation
# ---------------------------------------------------------------------------------------------
def test_marker_defaults_come_from_the_session_and_the_marker_overrides_them() -> None:
    s = parse_marker((), {"params": {"X": (1, 2)}}, {**DEFAULTS, "budget": "90s", "seed": 3, "tolerance": 0.2})
    assert s.params == {"X": [1, 2]}  # tuples become lists
    assert s.strategy == "random" and s.seed == 3 and s.tolerance == 0.2 and s.alpha == 0.01
    assert s.budget == Budget(max_seconds=90.0) and s.budget_text == "90s"
    assert s.measure == MeasureOptions() and s.restrictions == [] and s.constants == {}

    s = parse_marker((), {"params": {"X": [1, 2]}, "strategy": "brute_force", "budget": 5, "seed": 0,
                          "tolerance": 0, "alpha": 0.05, "measure": {"min_iterations": 3, "max_iterations": 3}},
                     DEFAULTS)
    assert (s.strategy, s.budget, s.seed) == ("brute_force", Budget(max_evaluations=5), 0)
    assert (s.tolerance, s.alpha) == (0.0, 0.05)
    assert s.measure.min_iterations == 3 and isinstance(s.tolerance, float)


def test_marker_restrictions_constants_and_device_limits() -> None:
    s = parse_marker((), {"params": {"X": [1, 2, 4]}, "restrictions": "X < N", "constants": {"N": 3}}, DEFAULTS)
    assert s.restrictions == ["X < N"] and s.constants == {"N": 3}  # a single string is one restriction
    check = lambda p: p["X"] != 2  # noqa: E731
    assert parse_marker((), {"params": {"X": [1, 2]}, "restrictions": [check]}, DEFAULTS).restrictions == [check]
    # Device limits are known only at run time: an expression reading one is not judged empty now...
    parse_marker((), {"params": {"X": [1, 2]}, "restrictions": ["X > max_threads"]}, DEFAULTS)
    # ...but its syntax and names are, and a parameter shadows a device constant of the same name.
    with pytest.raises(MarkerError, match=r"unknown name 'max_thread'; did you mean 'max_threads'\?"):
        parse_marker((), {"params": {"X": [1, 2]}, "restrictions": ["X > max_thread"]}, DEFAULTS)
    with pytest.raises(MarkerError, match="the search space is empty"):
        parse_marker((), {"params": {"X": [1, 2], "warp_size": [1]}, "restrictions": ["X > warp_size + 5"]}, DEFAULTS)


def test_block_limit_is_a_boolean_marker_argument() -> None:
    assert parse_marker((), {"params": {"X": [1, 2]}}, DEFAULTS).block_limit is True
    assert parse_marker((), {"params": {"X": [1, 2]}, "block_limit": False}, DEFAULTS).block_limit is False
    with pytest.raises(MarkerError, match=r"'block_limit': 0 must be True \(drop thread blocks larger"):
        parse_marker((), {"params": {"X": [1, 2]}, "block_limit": 0}, DEFAULTS)


def test_the_thread_block_limit_is_for_cuda_and_opencl_kernels_only() -> None:
    from pytest_autotune.execution.kernel import KernelSpec
    from pytest_autotune.lifecycle.calls import implicit_restrictions

    settings = parse_marker((), {"params": {"block_size_x": [64, 2048]}}, DEFAULTS)
    a = np.zeros(4, np.float32)
    cuda = KernelSpec("__global__ void k(float *a) {}", "k", 4, [a])
    opencl = KernelSpec("__kernel void k(__global float *a) {}", "k", 4, [a])
    c = KernelSpec("void k(float *a) {}", "k", 4, [a])
    assert implicit_restrictions(cuda, settings) == ["block_size_x <= max_threads"]
    assert implicit_restrictions(opencl, settings) == ["block_size_x <= max_threads"]
    assert implicit_restrictions(c, settings) == []
    off = parse_marker((), {"params": {"block_size_x": [64, 2048]}, "block_limit": False}, DEFAULTS)
    assert implicit_restrictions(cuda, off) == []


def test_every_constant_a_runner_provides_is_known_to_the_marker() -> None:
    """A restriction over a device limit must pass collection for every runner's own constant names."""
    from pytest_autotune.lifecycle.settings import DEVICE_CONSTANTS
    from pytest_autotune.execution.device import DeviceInfo, cpu_constants, detect_cpu_device

    cpu = cpu_constants(detect_cpu_device())
    assert cpu and set(cpu) <= set(DEVICE_CONSTANTS)
    for name in cpu:
        parse_marker((), {"params": {"X": [1, 2]}, "restrictions": [f"X * 4 <= {name}"]}, DEFAULTS)
    assert cpu_constants(DeviceInfo(model="m", kind="cpu", properties={"l2_cache": 1})) == {"l2_cache": 1}


@pytest.mark.parametrize("kwargs, argument, fragment", [
    ({"params": {"X": [1]}, "strategy": "nope"}, "strategy", "unknown strategy 'nope'"),
    ({"params": {"X": [1]}, "strategy": {"name": "random", "bogus": 1}}, "strategy", "bogus"),
    ({"params": {"X": [1]}, "budget": 0}, "budget", "must be positive"),
    ({"params": {"X": [1]}, "budget": True}, "budget", "number of evaluations or a duration"),
    ({"params": {"X": [1]}, "budget": 2.5}, "budget", "number of evaluations or a duration"),
    ({"params": {"X": [1]}, "budget": "soon"}, "budget", "is not understood"),
    ({"params": {"X": [1]}, "objective": "energy"}, "objective", "'energy' is not supported"),
    ({"params": {"X": [1]}, "tolerance": -0.1}, "tolerance", "must be a fraction"),
    ({"params": {"X": [1]}, "tolerance": True}, "tolerance", "must be a fraction"),
    ({"params": {"X": [1]}, "tolerance": "10%"}, "tolerance", "must be a fraction"),
    ({"params": {"X": [1]}, "alpha": 0}, "alpha", "between 0 and 1"),
    ({"params": {"X": [1]}, "alpha": 1.0}, "alpha", "between 0 and 1"),
    ({"params": {"X": [1]}, "seed": 1.5}, "seed", "must be an integer"),
    ({"params": {"X": [1]}, "seed": True}, "seed", "must be an integer"),
    ({"params": {"X": [1]}, "compile_sample": 0}, "compile_sample", "0 must be a whole number of configurations >= 1"),
    ({"params": {"X": [1]}, "compile_sample": True}, "compile_sample", "True must be a whole number"),
    ({"params": {"X": [1]}, "compile_sample": 2.0}, "compile_sample", "2.0 must be a whole number"),
    ({"params": {"X": [1]}, "compile_sample": "8"}, "compile_sample", "'8' must be a whole number"),
    ({"params": {"X": [1]}, "measure": {"bogus": 1}}, "measure", "unknown measure option(s): bogus"),
    ({"params": {"X": [1]}, "measure": {"min_iterations": 0}}, "measure", "min_iterations must be >= 1"),
    ({"params": {"X": [1]}, "measure": 7}, "measure", "must be MeasureOptions or a dict"),
    ({"params": {"X": [1]}, "constants": [1]}, "constants", "must be a dict"),
    ({"params": {"X": [1]}, "restrictions": 5}, "restrictions", "must be a list"),
    ({"params": {"X": [1]}, "restrictions": [5]}, "restrictions", "must be a string or a callable"),
    ({"params": {"X": [1, 2]}, "restrictions": ["X >"]}, "restrictions", "is not a valid Python expression"),
    ({"params": {"X": [1, 2]}, "restrictions": ["Y > 1"]}, "restrictions", "unknown name 'Y'"),
    ({"params": {"X": [1, 2]}, "restrictions": ["X > 2"]}, "restrictions", "the search space is empty"),
    ({"params": {"X": [1, 2]}, "restrictions": ["__import__('os')"]}, "restrictions", ""),
    ({"params": {}}, "params", "must be a non-empty dict"),
    ({"params": [1, 2]}, "params", "must be a non-empty dict"),
    ({}, "params", "must be a non-empty dict"),
    ({"params": {"X": []}}, "params", "empty value list"),
    ({"params": {"X": "abc"}}, "params", "values must be a list"),
    ({"params": {"X": 3}}, "params", "values must be a list"),
])
def test_bad_marker_argument_names_the_argument(kwargs: dict[str, Any], argument: str, fragment: str) -> None:
    with pytest.raises(MarkerError) as info:
        parse_marker((), kwargs, DEFAULTS)
    message = str(info.value)
    assert message.startswith(f"tune marker argument {argument!r}: "), message
    assert fragment in message


def test_the_marker_compile_sample_is_kept_and_absent_means_the_flags() -> None:
    assert parse_marker((), {"params": {"X": [1]}, "compile_sample": 4}, DEFAULTS).compile_sample == 4
    assert parse_marker((), {"params": {"X": [1]}}, DEFAULTS).compile_sample is None
    assert parse_marker((), {"params": {"X": [1]}, "compile_sample": None}, DEFAULTS).compile_sample is None


def test_unknown_and_positional_marker_arguments() -> None:
    with pytest.raises(MarkerError, match=r"unknown argument\(s\) \['budgte', 'tolerence'\]; known: params, "):
        parse_marker((), {"params": {"X": [1]}, "tolerence": 0.1, "budgte": 3}, DEFAULTS)
    with pytest.raises(MarkerError, match="keyword arguments only"):
        parse_marker(({"X": [1]},), {}, DEFAULTS)
    assert "params" in MARKER_ARGS and "measure" in MARKER_ARGS


# ---------------------------------------------------------------------------------------------
# Gate decision
# ---------------------------------------------------------------------------------------------
def _samples(median: float, n: int = 32, spread: float = 0.02, seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(median * (1 + spread * rng.standard_normal(n)))


def _entry(samples: list[float], runners_up: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"params": {"B": 64}, "samples": samples, "stats": {"median": float(np.median(samples))},
            "runners_up": runners_up or []}


def _measured(samples: list[float], params: dict[str, Any] | None = None) -> Measurement:
    return Measurement(params=params or {"B": 64}, value=float(np.median(samples)), samples=samples)


def test_gate_passes_an_unchanged_kernel() -> None:
    out = run_gate("k", "t.py::t", _entry(_samples(1.0, seed=1)), _measured(_samples(1.0, seed=2)), 0.10, 0.01)
    assert out.verdict == "pass" and not out.failed and out.message == "" and out.stale_ranking == []
    assert abs(out.comparison.change_pct) < 3


def test_gate_fails_a_significant_slowdown_beyond_tolerance_with_the_full_message() -> None:
    locked = _samples(1.0, seed=1)
    out = run_gate("matmul", "tests/t.py::test_m[a]", _entry(locked), _measured(_samples(1.25, seed=2)), 0.10, 0.01)
    assert out.verdict == "slower" and out.failed
    lines = out.message.splitlines()
    assert lines[0] == "autotune regression: kernel 'matmul' in tests/t.py::test_m[a] got slower than its lock allows"
    cmp = out.comparison
    assert lines[1] == (f"  locked median {cmp.locked_median:.6g} ms (n=32)  ->  now {cmp.new_median:.6g} ms (n=32): "
                        f"{cmp.change_pct:+.1f}%")
    assert 20 < cmp.change_pct < 30 and cmp.p_value < 1e-6
    assert lines[2].startswith("  tolerance 10%, Mann-Whitney U one-sided p = ") and lines[2].endswith("(alpha 0.01)")
    assert lines[3] == "  locked params: {'B': 64}"
    assert lines[4] == "  if the slowdown is expected, re-tune with: pytest --autotune tests/t.py::test_m[a]"


@pytest.mark.parametrize("factor, tolerance, verdict", [
    (1.05, 0.10, "pass"),  # significant, but within the tolerance
    (1.15, 0.10, "slower"),
    (1.15, 0.20, "pass"),  # a wider tolerance from the marker
    (0.70, 0.10, "faster"),
    (0.95, 0.10, "pass"),  # faster within the tolerance is no news
])
def test_gate_tolerance(factor: float, tolerance: float, verdict: str) -> None:
    out = run_gate("k", "t", _entry(_samples(1.0, seed=1, spread=0.01)),
                   _measured(_samples(factor, seed=2, spread=0.01)), tolerance, 0.01)
    assert out.verdict == verdict
    assert out.failed == (verdict == "slower")
    if verdict == "faster":
        assert re.match(r"kernel 'k' is (29|30)\.\d% faster than locked \(p = [\d.e-]+\); ", out.message)
        assert out.message.endswith("consider updating the lock: pytest --autotune t")


def test_gate_needs_significance_not_just_a_median_shift() -> None:
    # Three samples a side cannot reach p < 0.01 (the smallest one-sided p is 1/20): never a failure.
    out = run_gate("k", "t", _entry([1.0, 1.01, 0.99]), _measured([2.0, 2.01, 1.99]), 0.10, 0.01)
    assert out.verdict == "pass" and out.comparison.change_pct == pytest.approx(100.0)
    assert out.comparison.p_value == pytest.approx(0.05)
    # Overlapping, noisy samples with a shifted median: not significant at alpha 0.01.
    rng = np.random.default_rng(5)
    locked = list(1.0 + rng.exponential(0.5, 8))
    new = list(1.15 + rng.exponential(0.5, 8))
    out = run_gate("k", "t", _entry(locked), _measured(new), 0.10, 0.01)
    assert out.comparison.p_value > 0.01 and out.verdict == "pass"


def test_gate_measurement_without_samples_uses_its_value() -> None:
    m = Measurement(params={"B": 64}, value=1.0, samples=[])
    out = run_gate("k", "t", _entry([1.0] * 7), m, 0.10, 0.01)
    assert out.verdict == "pass" and out.comparison.n_new == 1


def test_gate_reports_a_broken_locked_configuration() -> None:
    m = Measurement.failed({"B": 64}, FailureKind.COMPILE, "  error: 'x' undeclared\n")
    out = run_gate("k", "t.py::t", _entry([1.0] * 7), m, 0.10, 0.01)
    assert out.verdict == "broken" and out.failed and out.comparison is None
    assert out.message.splitlines() == [
        "autotune: the locked configuration of kernel 'k' in t.py::t no longer works (compile): error: 'x' undeclared",
        "  locked params: {'B': 64}",
        "  re-tune with: pytest --autotune t.py::t",
    ]


def test_gate_ranking_check_reports_runners_up_that_now_win() -> None:
    ups = [{"params": {"B": 32}, "median": 1.2}, {"params": {"B": 128}, "median": 1.3},
           {"params": {"B": 256}, "median": 1.4}]
    fresh = {32: _samples(0.7, seed=3), 128: _samples(1.02, seed=4)}
    asked: list[dict[str, Any]] = []

    def measure(params: dict[str, Any]) -> Measurement:
        asked.append(dict(params))
        if params["B"] == 256:
            return Measurement.failed(params, FailureKind.RUNTIME, "crash")  # ignored, not a verdict
        return _measured(fresh[params["B"]], params)

    out = run_gate("k", "t", _entry(_samples(1.0, seed=1), ups), _measured(_samples(1.0, seed=2)), 0.10, 0.01, measure)
    assert asked == [{"B": 32}, {"B": 128}, {"B": 256}]
    assert out.verdict == "pass" and not out.failed
    (stale,) = out.stale_ranking
    assert stale["params"] == {"B": 32} and -35 < stale["change_pct"] < -25 and stale["p_value"] < 0.01
    # without the callable nothing is re-timed
    assert run_gate("k", "t", _entry(_samples(1.0, seed=1), ups), _measured(_samples(1.0, seed=2)),
                    0.10, 0.01).stale_ranking == []


def test_retune_command_parses_as_a_pytest_command_line() -> None:
    assert retune_command("tests/t.py::test_x[a-1]") == "pytest --autotune tests/t.py::test_x[a-1]"
    assert _budget_default("200") == 200 and _budget_default(" 90s ") == "90s"


# ---------------------------------------------------------------------------------------------
# Scratch cache
# ---------------------------------------------------------------------------------------------
SPACE = SearchSpace({"X": [1, 2, 3], "Y": ["a", "b"]})
HASHES = {"source": "s1", "space": "p1", "problem": "q1"}


def test_scratch_cache_round_trip(tmp_path: Path) -> None:
    cache = ScratchCache(tmp_path / "scratch", "t.py::t::k", HASHES)
    assert cache.load(SPACE) == {} and not cache.path.exists()
    ok = Measurement({"X": 2, "Y": "b"}, value=1.5, samples=[1.4, 1.5, 1.6], timings={"compile_s": 0.2})
    bad = Measurement.failed({"X": 3, "Y": "a"}, FailureKind.COMPILE, "error: " + "x" * 5000)
    cache.append(ok)
    cache.append(bad)
    assert cache.path.parent == tmp_path / "scratch" and cache.path.suffix == ".jsonl"
    loaded = cache.load(SPACE)
    assert sorted(loaded) == [SPACE.find({"X": 2, "Y": "b"}), SPACE.find({"X": 3, "Y": "a"})]
    got = loaded[SPACE.find({"X": 2, "Y": "b"})]
    assert (got.params, got.value, got.samples, got.failure, got.timings) == (
        {"X": 2, "Y": "b"}, 1.5, [1.4, 1.5, 1.6], None, {"compile_s": 0.2})
    failed = loaded[SPACE.find({"X": 3, "Y": "a"})]
    assert failed.failure is FailureKind.COMPILE and not failed.ok and len(failed.detail) == 2000
    cache.clear()
    assert not cache.path.exists() and cache.load(SPACE) == {}
    cache.clear()  # clearing twice is fine


def test_scratch_cache_survives_a_torn_line_and_a_changed_space(tmp_path: Path) -> None:
    cache = ScratchCache(tmp_path, "k", HASHES)
    cache.append(Measurement({"X": 1, "Y": "a"}, value=1.0, samples=[1.0]))
    cache.append(Measurement({"X": 9, "Y": "a"}, value=0.5, samples=[0.5]))  # not in this space (any more)
    with open(cache.path, "a", encoding="utf-8") as fh:
        fh.write('{"params": {"X": 2, "Y": "a"}, "val')  # the crash hit mid-write
    assert list(cache.load(SPACE)) == [SPACE.find({"X": 1, "Y": "a"})]
    # the resumed run's first record starts on a line of its own, not glued to the torn one
    cache.append(Measurement({"X": 3, "Y": "b"}, value=2.0, samples=[2.0]))
    assert sorted(cache.load(SPACE)) == sorted([SPACE.find({"X": 1, "Y": "a"}), SPACE.find({"X": 3, "Y": "b"})])


def test_scratch_cache_is_per_kernel_and_per_hash_set(tmp_path: Path) -> None:
    a = ScratchCache(tmp_path, "t.py::t::k", HASHES)
    assert a.path == ScratchCache(tmp_path, "t.py::t::k", dict(reversed(list(HASHES.items())))).path
    others = [ScratchCache(tmp_path, "t.py::t::other", HASHES),
              ScratchCache(tmp_path, "t.py::t::k", {**HASHES, "source": "s2"})]  # the kernel was edited
    assert len({a.path, *(o.path for o in others)}) == 3
    a.append(Measurement({"X": 1, "Y": "a"}, value=1.0, samples=[1.0]))
    assert all(o.load(SPACE) == {} for o in others)


# ---------------------------------------------------------------------------------------------
# Summary table, JSON report, plots
# ---------------------------------------------------------------------------------------------
ROWS = [
    {"test": "t.py::test_a", "kernel": "matmul", "mode": "tune", "status": "tuned", "params": {"B": 64, "U": 4},
     "time_ms": 0.123456, "change_pct": None, "evaluations": 30, "budget": 200, "strategy": "random",
     "failures": {"runtime": 1, "compile": 2}, "best_so_far": [None, 2.0, 1.0, 1.0]},
    {"test": "t.py::test_b", "kernel": "k", "mode": "gate", "status": "REGRESSION",
     "params": {f"P{i}": 1000 + i for i in range(10)}, "time_ms": 12.5, "change_pct": 23.04, "strategy": None},
    {"test": "t.py::test_c", "kernel": "k", "mode": "gate", "status": "missing", "message": "no lock entry"},
    {"test": "t.py::test_e", "kernel": "k", "mode": "gate", "status": "pass", "params": {"B": 8}, "time_ms": 1.0,
     "change_pct": 1.0, "note": "source changed since lock"},
    {"test": "t.py::test_d", "kernel": "k", "mode": "gate", "status": "faster", "time_ms": float("nan"),
     "change_pct": -40.0, "params": {}},
]


def test_summary_table_columns_and_formats() -> None:
    lines = format_table(ROWS)
    assert len(lines) == 2 + len(ROWS)
    assert lines[0].split() == ["kernel", "mode", "status", "winner", "median", "vs", "lock", "evals", "strategy",
                                "failures", "note"]
    assert set(lines[1]) == {"-", " "}
    starts = [i for i, c in enumerate(lines[1]) if c == "-" and (i == 0 or lines[1][i - 1] == " ")]
    assert len(starts) == len(COLUMNS)
    for line in lines[2:]:  # every cell starts in its column
        for s in starts[1:]:
            assert line[s - 2:s] == "  " or len(line) <= s, line
    a, b, c, e, d = lines[2:]
    assert e.endswith("source changed since lock")
    assert a.startswith("t.py::test_a::matmul  tune  tuned ") and "B=64, U=4" in a and "0.1235 ms" in a
    assert "30/200" in a and "random" in a and a.endswith("compile:2, runtime:1  -")  # the note column
    assert "REGRESSION" in b and "12.5 ms" in b and "+23.0%" in b
    winner = b[starts[3]:starts[4]].strip()
    assert winner == ", ".join(f"P{i}={1000 + i}" for i in range(10))  # no terminal width: nothing is cut
    assert c.split()[3:] == ["-"] * 7  # nothing known: dashes
    assert "-40.0%" in d and d.split()[3] == "-" and d.split()[4] == "-"  # empty params, NaN time
    assert format_table([]) == ["  ".join(COLUMNS), "  ".join("-" * len(h) for h in COLUMNS)]
    assert "note" not in format_table(ROWS[4:])[0] and "winner" not in format_table(ROWS[2:3])[0]  # empty columns


@pytest.mark.parametrize("width", [80, 120, 140])
def test_summary_table_fits_the_terminal_width_and_cuts_nothing(width: int) -> None:
    long_test = "tests/test_a_rather_long_module_name.py::test_with_a_long_name[param-1]"
    rows = [{**ROWS[1], "test": long_test, "note": "source changed since lock"}, ROWS[0]]
    if width == 80:  # a gate run: no evaluations, failures or notes to show
        rows = [{**ROWS[1], "test": long_test, "strategy": "auto"}, {**ROWS[1], "status": "pass"}]
    lines = format_table(rows, width=width)
    assert max(len(line) for line in lines) <= width, "\n".join(lines)
    assert "…" not in "".join(lines)  # nothing is cut: what does not fit wraps
    text = " ".join(line.strip() for line in lines)
    # the file's stem (its path too where there is room), the test and the kernel
    assert re.search(r"(tests/)?test_a_rather_long_module_name(\.py)?::test_with_a_long_name\[param-1\]::k", text)
    assert ", ".join(f"P{i}={1000 + i}" for i in range(10)) in text  # the whole winner
    regression = next(line for line in lines if "REGRESSION" in line)
    assert "+23.0%" in regression and "12.5 ms" in regression  # the verdict columns on one line
    wide = format_table(rows, width=1000)
    assert len(wide) == 2 + len(rows) and "P9=1009" in wide[2] and long_test in wide[2]  # one line a kernel


def test_a_long_note_is_kept_whole_in_the_narrow_table() -> None:
    edited = {**ROWS[1], "status": "pass", "note": "source changed since lock; A/B against the locked source"}
    rows = [edited, {**ROWS[1], "test": "t.py::test_z", "note": "short"}]
    lines = format_table(rows, width=80)
    assert "    note: source changed since lock; A/B against the locked source" in lines
    assert "    note: short" in lines and max(map(len, lines)) <= 80


def test_failure_lines_lockfile_lines_and_the_not_gated_line(tmp_path: Path) -> None:
    row = {"test": "t.py::test_a", "kernel": "k", "failure_examples": {
        "compile": {"params": {"B": 3}, "count": 4, "detail": "\nk.c:3:5: error: 'x' undeclared\n  3 | x = 1;\n"}}}
    assert failure_lines(row) == ["  t.py::test_a::k compile x4, first at B=3: k.c:3:5: error: 'x' undeclared"]
    a, b, c = (str(tmp_path / name) for name in ("a.json", "b.json", "c.json"))
    (tmp_path / "b.json").write_text("{}")
    assert lockfile_lines([{"lockfile": a}, {"lockfile": a, "lock_written": True}, {"lockfile": b},
                           {"lockfile": c}]) == [f"autotune lockfile: {a} (written)", f"autotune lockfile: {b} (read)",
                                                 f"autotune lockfile: {c} (not found)"]
    assert not_gated_line(ROWS[:2]) == ""
    rows = [ROWS[2], {"test": "t.py::test_e", "kernel": "k", "mode": "gate", "status": "stale",
                      "message": "lock entry is stale: the problem changed"},
            *({"test": f"t.py::test_{x}", "kernel": "k", "mode": "gate", "status": "no device",
               "message": "no usable device for this kernel: CuPy is not installed"} for x in "fg")]
    assert not_gated_line(rows) == ("autotune: 4 kernel(s) NOT GATED: t.py::test_c::k (no lock entry for this "
                                    "device); t.py::test_e::k (lock entry is stale: the problem changed); "
                                    "t.py::test_f::k, t.py::test_g::k (no usable device for this kernel: CuPy is "
                                    "not installed)")
    # --autotune on a machine without the kernel's device: named at the end too, as NOT TUNED (not as NOT GATED)
    tuned = [{**r, "mode": "tune"} for r in rows[2:]]
    assert not_gated_line(tuned) == ""
    assert not_tuned_line(tuned) == ("autotune: 2 kernel(s) NOT TUNED: t.py::test_f::k, t.py::test_g::k (no usable "
                                     "device for this kernel: CuPy is not installed)")


def test_the_ray_line_names_devices_nodes_and_what_was_lost() -> None:
    """A tuning on Ray says so in one summary line (issue 40); a local one has none."""
    assert ray_line(ROWS[0]) == ""
    row = {**ROWS[0], "ray_devices": 3, "ray_nodes": ["head", "gpu-2"], "ray_lost": ["gpu-2:811 (RayActorError: died)"],
           "ray_refused": [], "ray_joined": 1, "ray_retried": 1}
    assert ray_line(row) == ("ray: t.py::test_a::matmul: 3 device(s) on 2 node(s) (head, gpu-2), 1 lost (gpu-2:811 "
                             "(RayActorError: died)), 1 joined, 1 evaluation(s) retried on another device")


def test_json_report(tmp_path: Path) -> None:
    path = write_json_report(tmp_path / "deep" / "er" / "r.json", ROWS[:2] + [{"odd": Path("x")}], {"mode": "gate"})
    text = path.read_text()
    data = json.loads(text)
    assert data["meta"] == {"mode": "gate"} and len(data["kernels"]) == 3
    assert data["kernels"][0]["failures"] == {"compile": 2, "runtime": 1}
    assert data["kernels"][2] == {"odd": "x"}  # non-JSON values as text, not a crash
    assert text.endswith("\n") and text.index('"kernels"') < text.index('"meta"')  # sorted keys


def test_convergence_plots(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    rows = [ROWS[0], {**ROWS[0], "test": "t.py::test_p[a/b c]", "best_so_far": [3.0, math.nan, 1.0]}, ROWS[1]]
    written = write_plots(tmp_path / "plots", rows)
    assert [p.name for p in written] == ["t.py_test_a__matmul.png", "t.py_test_p_a_b_c___matmul.png"]
    for p in written:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 1000


# ---------------------------------------------------------------------------------------------
# Progress lines
# ---------------------------------------------------------------------------------------------
def _record(value: float | None) -> SimpleNamespace:
    failure = None if value is not None else FailureKind.RUNTIME
    return SimpleNamespace(measurement=SimpleNamespace(failure=failure, value=value))


def test_progress_lines_are_throttled_and_the_last_one_always_shows() -> None:
    lines: list[str] = []
    progress = Progress(lines.append, "t.py::t::k", budget=3, every=3600.0)
    best = SimpleNamespace(value=0.5)
    for done, value in enumerate([1.0, None, 0.5], start=1):
        progress(_record(value), SimpleNamespace(evaluations=done, history=SimpleNamespace(best=best)))
    assert len(lines) == 2  # the first, then nothing for an hour, except the final one
    assert lines[0].startswith("autotune t.py::t::k: 1/3 evaluations, best 0.5 ms, 0 failed, ")
    assert lines[1].startswith("autotune t.py::t::k: 3/3 evaluations, best 0.5 ms, 1 failed, ")
    assert progress.failures == 1
    # no budget known (a time budget): no final line, "-" as the total
    lines.clear()
    progress = Progress(lines.append, "k", budget=None, every=3600.0)
    progress(_record(None), SimpleNamespace(evaluations=1, history=SimpleNamespace(best=None)))
    assert lines[0].startswith("autotune k: 1/- evaluations, best -, 1 failed")


@pytest.mark.parametrize("verbosity, worker, shown", [(0, False, True), (1, False, True), (-1, False, False),
                                                       (0, True, False)])
def test_progress_is_quiet_with_q_and_on_xdist_workers(verbosity: int, worker: bool, shown: bool) -> None:
    options = Options(mode="all", missing="skip", fresh=False, lockdir=Path("l"), scratch_dir=Path("s"),
                      ranking=False, report=None, plots=None, devices=[], defaults=DEFAULTS,
                      verbosity=verbosity, is_worker=worker)
    state = SessionState(options, write_line=print)
    assert (state.progress("k", 3).write_line is not None) == shown


MATMULS = ["tests/test_cpu_kernels.py::test_blocked_matmul", "tests/test_cuda_kernels.py::test_tiled_matmul",
           "tests/test_opencl_kernels.py::test_opencl_tiled_matmul"]


def test_at_80_columns_every_row_names_its_test_with_winner_and_note_whole() -> None:
    """Three tests ending in ``_matmul`` must not all read ``…_matmul::matmul`` in a CI log (issue 40), nor their
    winners and notes ``BLO…`` and ``sou…``."""
    rows = [{**ROWS[0], "test": t, "kernel": "matmul", "status": "first lock",
             "params": {"BLOCK_I": 192, "BLOCK_J": 192, "BLOCK_K": 8}, "note": f"warm start from {t}"}
            for t in MATMULS]
    lines = format_table(rows, width=80)
    assert max(len(line) for line in lines) <= 80, "\n".join(lines)
    for test in MATMULS:
        stem, name = test.removeprefix("tests/").split(".py::")
        assert f"{stem}::{name}::matmul" in lines, "\n".join(lines)  # the row's own line, whole
    assert lines.count("    winner: BLOCK_I=192, BLOCK_J=192, BLOCK_K=8") == 3
    joined = " ".join(line.strip() for line in lines)
    assert all(f"note: warm start from {t}" in joined for t in MATMULS)
    assert all(line.startswith("    ") for line in lines if "first lock" in line)  # under the row's name


def test_short_ids_grow_until_no_two_tests_read_the_same() -> None:
    ids = ["tests/a/test_x.py::test_y::k", "tests/b/test_x.py::test_y::k", "tests/test_z.py::test_y::k",
           "tests/test_z.py::test_y::k"]
    assert short_ids(ids) == ["a/test_x::test_y::k", "b/test_x::test_y::k", "test_z::test_y::k", "test_z::test_y::k"]
    assert short_ids(["a/t.py::x::k", "t.py::x::k"]) == ["a/t::x::k", "t.py::x::k"]  # the id itself at the end


def test_vs_lock_says_which_comparison_it_is() -> None:
    """An A/B change (locked source beside the edit) is marked; a change against the lock's median is not."""
    rows = [{**ROWS[1], "test": "t.py::a", "change_pct": -4.9, "change_kind": "a/b"},
            {**ROWS[1], "test": "t.py::b", "change_pct": 23.0, "change_kind": "lock"},
            {**ROWS[1], "test": "t.py::c", "change_pct": 62.4, "change_kind": "now"}]
    cells = table_rows(rows)
    assert cells[0][5] == "-4.9% A/B" and cells[1][5] == "+23.0%"
    assert cells[2][5] == "now +62.4%"  # a tuning's timing of a kept winner now: no verdict, and it says so
