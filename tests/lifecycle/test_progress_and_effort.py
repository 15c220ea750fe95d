"""Progress lines for every phase after the search (finalists re-timed, the lock's rounds, the gate's rounds),
throttled on one clock with an ETA; and the effort tiers (``--autotune-effort=quick|full``): a smaller search from
the warm start, fewer rounds, an entry that says quick, and a full tuning that replaces it. Fake clocks and
runners, and recorded measurements (the replay runner), keep every test exact and fast."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pytest

from pytest_autotune import defaults as DEFAULTS
from pytest_autotune.engine.evaluator import Budget
from pytest_autotune.engine.tuner import confirm, effort_budget, tune
from pytest_autotune.execution.device import DeviceInfo
from pytest_autotune.gate.rounds import best_state_rounds
from pytest_autotune.gate.verdict import run_ab_gate, run_gate
from pytest_autotune.lifecycle import Action, Host, Kernels, Progress, Status
from pytest_autotune.lifecycle.run import QUICK_NOTE
from pytest_autotune.lock.entry import InvalidEntryError, normalize_entry
from pytest_autotune.lock.lockfile import read_lockfile
from pytest_autotune.results import Measurement

PARAMS = {"block_size_x": [32, 64, 128, 256], "tile": [1, 2, 4]}


class Clock:
    """A fake clock: each step of work advances it by ``step`` seconds."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _measurement(value: float, params: Mapping[str, Any] | None = None) -> Measurement:
    samples = [value * (1 + 0.001 * i) for i in range(7)]
    return Measurement(params=dict(params or {}), value=float(np.median(samples)), samples=samples)


class _Runner:
    """Times are a function of B (5 is best); each evaluation advances ``clock`` by ``step`` seconds."""

    name = "fake"

    def __init__(self, clock: Clock | None = None, step: float = 0.0) -> None:
        self.calls: list[int] = []
        self.clock, self.step = clock, step

    def device(self) -> DeviceInfo:
        return DeviceInfo(model="Fake", kind="cpu")

    def constants(self) -> dict[str, Any]:
        return {}

    def evaluate(self, params: Mapping[str, Any], keep_outputs: bool = False) -> Measurement:
        self.calls.append(int(params["B"]))
        if self.clock is not None:
            self.clock.now += self.step
        return _measurement(1.0 + 0.1 * abs(int(params["B"]) - 5), params)


def _seconds(line: str) -> float:
    return float(line.split(", ")[1 if "evaluations" not in line else 3].rstrip("s"))


# --------------------------------------------------------------------------- progress of every phase
def test_finalists_lock_rounds_and_gate_rounds_each_show_lines_with_an_eta_on_one_throttle() -> None:
    clock, lines = Clock(), []
    times: list[float] = []
    progress = Progress(lambda line: (lines.append(line), times.append(clock.now)), "t.py::t::k", None,
                        every=3.0, clock=clock)
    runner = _Runner(clock, step=1.0)  # every re-timing, every round takes a second
    confirm(runner, [{"B": b} for b in (4, 5, 6)], 4, progress.phase("finalists re-timed"))
    best_state_rounds([lambda: runner.evaluate({"B": 5})], None, None, 0.1, rounds=6, pause_s=0.0,
                      on_round=progress.phase("lock rounds"))
    assert lines[0] == "autotune t.py::t::k: finalists re-timed 1/12, 1.0s, ETA 11s"
    assert "autotune t.py::t::k: finalists re-timed 12/12, 12.0s" in lines  # a phase that showed a line ends
    assert any(line.startswith("autotune t.py::t::k: lock rounds ") and ", ETA " in line for line in lines)
    assert lines[-1].startswith("autotune t.py::t::k: lock rounds 6/6, ")
    # nothing silent for longer than the interval (plus the one step in flight)
    assert max(b - a for a, b in zip(times, times[1:])) <= 3.0 + 1.0
    assert len(lines) == 7  # throttled: 18 steps of a second, a line every 3 s and each phase's last


def test_gate_rounds_say_at_most_and_their_eta_is_a_bound() -> None:
    clock, lines = Clock(), []
    progress = Progress(lines.append, "t.py::t::k", None, every=0.0, clock=clock)
    entry = {"params": {"B": 5}, "samples": [1.0 + 0.001 * i for i in range(7)], "machine": {}}

    def remeasure() -> Measurement:
        clock.now += 1.0
        return _measurement(2.0, {"B": 5})  # slower in every round: the rounds run to the end

    outcome = run_gate("k", "t.py::t", entry, _measurement(2.0, {"B": 5}), 0.1, 0.01, remeasure=remeasure,
                       pauses_s=(0.0,) * 6, on_round=progress.phase("gate rounds", at_most=True))
    assert outcome.verdict == "slower"
    assert lines[0] == "autotune t.py::t::k: gate rounds 1 of at most 6, 1.0s, ETA at most 5s"
    assert lines[-1] == "autotune t.py::t::k: gate rounds 6/6, 6.0s"


def test_ab_blocks_report_each_block() -> None:
    seen: list[tuple[int, int]] = []
    entry = {"params": {"B": 5}, "samples": [1.0] * 7}
    run_ab_gate("k", "t.py::t", entry, lambda: _measurement(1.0), lambda: _measurement(1.0), 0.1, 0.01,
                pause_s=0.0, on_round=lambda done, total: seen.append((done, total)))
    assert seen == [(1, 3)]  # the first block cleared it: no further blocks


def test_quiet_progress_has_no_phase_lines_and_writing_a_line_costs_nothing_per_step() -> None:
    """Under -q and on xdist workers there is no writer: no phase callbacks at all (nothing is formatted).
    With a writer, lines are throttled by the clock: a thousand steps in three seconds write two lines
    (the cost of the search's lines was never in writing them: 12 lines took 2 ms in the example's tuning)."""
    assert Progress(None, "k", None).phase("lock rounds") is None
    clock, lines = Clock(), []
    phase = Progress(lines.append, "k", None, clock=clock).phase("finalists re-timed")
    for done in range(1, 1001):
        clock.now = done * 0.003
        phase(done, 1000)  # type: ignore[misc]
    assert len(lines) == 2 and lines[-1].startswith("autotune k: finalists re-timed 1000/1000, ")


def test_tune_reports_the_finalists_it_re_times() -> None:
    seen: list[tuple[int, int]] = []
    tune(_Runner(), {"B": [1, 2, 3, 4, 5, 6, 7, 8]}, strategy="brute_force", budget=8, confirm_top=3,
         confirm_rounds=2, keep_outputs=False, on_confirm=lambda done, total: seen.append((done, total)))
    assert seen == [(i, 6) for i in range(1, 7)]


# --------------------------------------------------------------------------- effort tiers
def test_quick_spends_a_share_of_the_budget_and_half_of_what_follows_the_search() -> None:
    quick, full = DEFAULTS.effort("quick"), DEFAULTS.effort("full")
    assert effort_budget(200, "full") == Budget(max_evaluations=200)
    assert effort_budget(200, "quick") == Budget(max_evaluations=20)  # a quarter, at most 20
    assert effort_budget(40, "quick") == Budget(max_evaluations=10)
    assert effort_budget(12, "quick") == Budget(max_evaluations=8)  # at least 8 (or the whole budget)
    assert effort_budget("5m", "quick") == Budget(max_evaluations=20, max_seconds=30.0)
    assert (quick.scaled(3), quick.scaled(2), quick.scaled(6, least=2)) == (2, 1, 3)
    assert (full.scaled(3), full.scaled(2), full.scaled(6)) == (3, 2, 6) and not full.recorded and quick.recorded
    with pytest.raises(ValueError, match="effort 'slow': choose from full, quick"):
        DEFAULTS.effort("slow")

    quick_runner, full_runner = _Runner(), _Runner()
    q = tune(quick_runner, {"B": list(range(1, 41))}, strategy="brute_force", budget=40, keep_outputs=False,
             effort="quick")
    f = tune(full_runner, {"B": list(range(1, 41))}, strategy="brute_force", budget=40, keep_outputs=False)
    assert (q.evaluations, f.evaluations) == (10, 40)
    assert len(q.confirmation) == 2 and len(f.confirmation) == 3  # finalists
    assert len(quick_runner.calls) == 10 + 2 * 1 and len(full_runner.calls) == 40 + 3 * 2


def recording(path: Path, device: str = "Fake GPU 9000") -> Path:
    """A Kernel Tuner cache of 12 configurations, optimum (128, 2) at 1.0 ms, 7 runs each."""
    cache = {}
    for bx in PARAMS["block_size_x"]:
        for tile in PARAMS["tile"]:
            t = 1.0 + abs(bx - 128) / 128 + 0.3 * (tile - 2) ** 2
            cache[f"{bx},{tile}"] = {"block_size_x": bx, "tile": tile, "time": t,
                                     "times": [t * (1 + 0.01 * k) for k in range(-3, 4)]}
    path.write_text(json.dumps({"device_name": device, "kernel_name": "fake", "tune_params": PARAMS,
                                "tune_params_keys": list(PARAMS), "cache": cache}))
    return path


def kernels(tmp_path: Path, mode: str | None = "all", **options: Any) -> Kernels:
    return Kernels.create("bench/fake.py", params=PARAMS, strategy="brute_force", mode=mode, budget=40,
                          lockdir=tmp_path / "autotune.lock", scratch_dir=tmp_path / "scratch",
                          host=Host("bench/fake.py", say=lambda line: None), **options)


def _entry(tmp_path: Path, device: str = "fake-gpu-9000") -> Any:
    return read_lockfile(tmp_path / "autotune.lock" / f"{device}.json").entries["bench/fake.py::fake"]


def test_a_quick_tuning_starts_warm_says_quick_and_a_full_one_replaces_it(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    other = recording(tmp_path / "other.json", device="Fake GPU 8000")
    assert kernels(tmp_path).replay(other, name="fake").status is Status.FIRST_LOCK  # another device's lock
    data = recording(tmp_path / "fake.json")
    quick = kernels(tmp_path, effort="quick").replay(data, name="fake")
    assert quick.action is Action.PASS and quick.status is Status.FIRST_LOCK
    assert quick.row.evaluations == 10 and quick.row.note.startswith("quick tuning; warm start from 1 device")
    entry = _entry(tmp_path)
    assert entry.effort == "quick" and entry["effort"] == "quick" and entry.params == {"block_size_x": 128, "tile": 2}
    assert "effort" not in _entry(tmp_path, "fake-gpu-8000")  # a full tuning's entry is as it always was

    # the gate says the lock is a quick tuning's
    gated = kernels(tmp_path, mode=None).replay(data, name="fake")
    assert gated.status is Status.PASS and QUICK_NOTE in gated.row.note

    # quick again with this device's entry: other devices' winners are still its first candidates
    import pytest_autotune.lifecycle.run as run_module

    asked: list[str] = []
    real = run_module.warm_start
    monkeypatch.setattr(run_module, "warm_start", lambda *a, **k: (asked.append("warm"), real(*a, **k))[1])
    assert kernels(tmp_path, mode="missing", effort="quick").replay(data, name="fake").status is Status.LEFT_ALONE
    kernels(tmp_path, effort="quick").replay(data, name="fake")
    assert asked == ["warm"]

    # a full run re-tunes a quick entry even with only=missing, and the entry no longer says quick
    full = kernels(tmp_path, mode="missing").replay(data, name="fake")
    assert full.status is Status.KEPT_LOCK and "quick tuning replaced by a full one" in full.row.note
    assert full.row.evaluations == 12 and "effort" not in _entry(tmp_path)
    assert kernels(tmp_path, mode="missing").replay(data, name="fake").status is Status.LEFT_ALONE


def test_effort_is_checked_where_it_is_given(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="effort='slow'"):
        kernels(tmp_path, effort="slow")
    kernels(tmp_path, effort="quick").replay(recording(tmp_path / "fake.json"), name="fake")
    raw = _entry(tmp_path).to_dict()
    with pytest.raises(InvalidEntryError, match="effort"):
        normalize_entry({**raw, "effort": "slow"})


def test_the_flag_and_the_ini_option_name_themselves_in_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest("--autotune", "--autotune-effort=slow")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--autotune-effort=slow: choose from full, quick*"])
    pytester.makeini("[pytest]\nautotune_effort = fast\n")
    result = pytester.runpytest("--autotune")
    result.stderr.fnmatch_lines(["*ini option autotune_effort=fast: choose from full, quick*"])
    assert pytester.runpytest("--autotune-effort=quick").ret == pytest.ExitCode.OK
