"""The gate's time budget through the plugin (issue 39): a gate under load stops at its budget as "not comparable",
a session budget shared out until kernels are left NOT GATED, the time each gate took in the report, and usage
errors for bad budgets. The load is made deterministically: a recording re-recorded 25 % slower (the replay
runner: exact, no probes, every round like-for-like, the time is the rounds' pauses), and a Python kernel whose
run time the test sets through a file (a busy-wait lasts at least that long, however loaded the machine is)."""
from __future__ import annotations

import json

import pytest

from tests.plugin import test_plugin_e2e as e2e
from tests.plugin.test_plugin_e2e import REPLAY_TEST, fake_recording, run, run_report

c_cache, project = e2e.c_cache, e2e.project  # the e2e tests' fixtures: a hermetic compile cache, a project

KEY = "test_replay.py::test_replay::fake_gpu"


def _replay(pytester: pytest.Pytester, marker: str = "") -> None:
    (pytester.path / "fake_gpu.json").write_text(json.dumps(fake_recording()))
    (pytester.path / "scale.txt").write_text("1.0")
    test = REPLAY_TEST if not marker else REPLAY_TEST.replace('strategy="brute_force")',
                                                               f'strategy="brute_force", {marker})')
    assert test != REPLAY_TEST or not marker
    pytester.makepyfile(test_replay=test)


@pytest.mark.usefixtures("real_pauses")  # the pauses are what it checks
def test_a_gate_under_load_stops_at_its_budget_as_not_comparable(project: pytest.Pytester) -> None:
    _replay(project, 'gate_budget="0.5s"')
    run(project, "--autotune").assert_outcomes(passed=1)
    # 25 % slower in every round, as a busy machine can make a kernel read: without a budget this takes six
    # rounds (MIN_ROUNDS) and fails; in 0.5 s the pauses leave room for two, and the gate says it could not decide
    (project.path / "fake_gpu.json").write_text(json.dumps(fake_recording({(128, 2): 1.25})))
    result, rows = run_report(project, "-q")
    result.assert_outcomes(passed=1)  # --autotune-incomparable=warn (the default): passed, and said so
    row = rows[KEY]
    assert row["status"] == "incomparable" and row["incomparable_policy"] == "warn"
    assert "not comparable (undecided within the budget: +25.6% in 2 fresh rounds)" in row["message"]
    assert "its gate budget of 0.5 s (gate_budget=0.5s) was spent after" in row["message"]
    assert row["gate_budget_s"] == 0.5 and 0.4 <= row["gate_seconds"] <= 0.5 + 0.3, row["gate_seconds"]
    result.stdout.fnmatch_lines(["autotune: NOT COMPARABLE (passed, --autotune-incomparable=warn): *undecided "
                                 "within the budget*"])
    # the not-comparable policy applies as to any not-comparable verdict
    result = run(project, "-q", "--autotune-incomparable=fail")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*not comparable (undecided within the budget: +25.6% in 2 fresh rounds)*"])
    # the marker's budget beats the flag's default; without a budget the same rounds decide: a regression
    run(project, "-q", "--autotune-kernel-gate-budget=none").assert_outcomes(passed=1)
    _replay(project)
    (project.path / "fake_gpu.json").write_text(json.dumps(fake_recording({(128, 2): 1.25})))
    result, rows = run_report(project, "-q", "--autotune-kernel-gate-budget=none")
    result.assert_outcomes(failed=1)
    assert rows[KEY]["status"] == "REGRESSION" and rows[KEY]["gate_budget_s"] is None
    assert rows[KEY]["gate_seconds"] > 1.0  # six rounds' pauses: 2.1 s
    result, rows = run_report(project, "-q", "--autotune-kernel-gate-budget=0.5s")
    assert rows[KEY]["status"] == "incomparable" and "(--autotune-kernel-gate-budget=0.5s)" in rows[KEY]["message"]


FUNCTION_TESTS = '''
import pathlib
import time

import pytest

from pytest_autotune.execution.device import DeviceInfo

DEVICE = DeviceInfo(model="Busy Box", kind="python")  # no machine probes: the test is about the budget
MS = float((pathlib.Path(__file__).parent / "ms.txt").read_text())
MEASURE = {"warmup": 0, "min_iterations": 5, "max_iterations": 5}  # enough samples to be significant


def busy():
    end = time.perf_counter() + MS / 1000.0
    while time.perf_counter() < end:
        pass


@pytest.mark.tune(params={"X": [1]}, measure=MEASURE)
def test_first(autotune):
    autotune.function(lambda p: busy(), name="first", device=DEVICE)


@pytest.mark.tune(params={"X": [1]}, measure=MEASURE)
def test_second(autotune):
    autotune.function(lambda p: busy(), name="second", device=DEVICE)
'''


def test_a_session_budget_is_shared_out_and_kernels_not_reached_are_not_gated(project: pytest.Pytester) -> None:
    project.makepyfile(test_two=FUNCTION_TESTS)
    (project.path / "ms.txt").write_text("1")
    run(project, "--autotune").assert_outcomes(passed=2)
    # each run now takes at least 100 ms: the first gate's measurement alone (5 runs) outlasts its share of the
    # session (0.3 s over 2 kernels), so it stops there undecided, and the session is spent before the second
    (project.path / "ms.txt").write_text("100")
    result, rows = run_report(project, "--autotune-gate-budget=0.3s")
    result.assert_outcomes(passed=1, skipped=1)
    first, second = rows["test_two.py::test_first::first"], rows["test_two.py::test_second::second"]
    assert first["status"] == "incomparable", first
    assert first["gate_budget_s"] == pytest.approx(0.15)
    assert "in the first measurement, no fresh round within the budget" in first["message"]
    assert "its share of --autotune-gate-budget=0.3s" in first["message"] and first["gate_seconds"] >= 0.5
    assert second["status"] == "session budget" and "gate_seconds" not in second
    result.stdout.fnmatch_lines(["autotune: 1 kernel(s) NOT GATED: test_two.py::test_second::second "
                                 "(session budget: --autotune-gate-budget=0.3s spent by the gates before it)"])
    result.stdout.fnmatch_lines(["*autotune: not gated, the session budget*"])  # the skip's reason (-rs)
    # the ini option, and a budget that lasts: both gated, each gate's time in the report
    (project.path / "ms.txt").write_text("1")
    project.makeini("[pytest]\nautotune_gate_budget = 5m\n")
    result, rows = run_report(project)
    result.assert_outcomes(passed=2)
    assert all(r["status"] == "pass" and r["gate_seconds"] < 60 and r["gate_budget_s"] == 30.0
               for r in rows.values())


@pytest.mark.parametrize("args, ini, expected", [
    (("--autotune-gate-budget=soon",), "", "--autotune-gate-budget=soon: *duration*"),
    (("--autotune-kernel-gate-budget=-3s",), "", "--autotune-kernel-gate-budget=-3s: *duration*"),
    ((), "autotune_kernel_gate_budget = forever", "ini option autotune_kernel_gate_budget=forever: *duration*"),
    ((), "autotune_gate_budget = 0s", "ini option autotune_gate_budget=0s: *positive duration*"),
])
def test_bad_budgets_are_usage_errors_naming_the_flag_or_ini_option(project: pytest.Pytester, args: tuple[str, ...],
                                                                    ini: str, expected: str) -> None:
    project.makeini(f"[pytest]\n{ini}\n")
    project.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    result = run(project, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{expected}"])


def test_a_bad_marker_budget_is_a_collection_error_naming_the_argument(project: pytest.Pytester) -> None:
    _replay(project, 'gate_budget="a while"')
    result = run(project)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*tune marker argument 'gate_budget': 'a while' must be a duration such as*"])


class _WorkerConfig:
    """What _session_gate_budget reads of a pytest-xdist worker's config: the flag, the ini option, workerinput."""

    def __init__(self, flag: str | None, ini: str = "none", workers: int | None = None) -> None:
        self.flag, self.ini = flag, ini
        if workers is not None:
            self.workerinput = {"workercount": workers, "workerid": "gw0"}

    def getoption(self, name: str) -> str | None:
        return self.flag

    def getini(self, name: str) -> str:
        return self.ini


def test_under_xdist_each_worker_has_the_session_budget_over_the_workers() -> None:
    from pytest_autotune.plugin import _session_gate_budget

    assert _session_gate_budget(_WorkerConfig(None)) is None  # the default: no session budget
    alone = _session_gate_budget(_WorkerConfig("5m"))
    assert alone is not None and alone.seconds == 300.0 and alone.flag == "--autotune-gate-budget=5m"
    worker = _session_gate_budget(_WorkerConfig(None, ini="4m", workers=4))
    assert worker is not None and worker.seconds == 60.0
    assert worker.flag == "ini option autotune_gate_budget=4m (over 4 workers)"
