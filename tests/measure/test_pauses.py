"""The one setting that shortens the pauses between the lock's and the gate's rounds (PYTEST_AUTOTUNE_PAUSE_SCALE):
read as input, applied to every pause, named when it is wrong, and said in the summary when it is not 1."""
from __future__ import annotations

import json

import pytest

from pytest_autotune.errors import SpecError
from pytest_autotune.gate.budget import GateBudget
from pytest_autotune.gate.verdict import run_gate
from pytest_autotune.measure.pauses import PAUSE_SCALE_ENV, pause, pause_scale, scaled
from pytest_autotune.results import Measurement


@pytest.mark.parametrize("raw, value", [("", 1.0), ("  ", 1.0), ("0", 0.0), ("0.5", 0.5), (" 2 ", 2.0), ("10", 10.0)])
def test_the_scale_reads_as_written(raw: str, value: float) -> None:
    assert pause_scale({PAUSE_SCALE_ENV: raw}) == value
    assert pause_scale({}) == 1.0


@pytest.mark.parametrize("raw", ["fast", "-1", "nan", "inf", "10.5", "1e400", "0x10"])
def test_a_bad_scale_is_an_error_naming_the_variable(raw: str) -> None:
    with pytest.raises(SpecError, match=rf"^{PAUSE_SCALE_ENV}=.*expected a number from 0 to 10"):
        pause_scale({PAUSE_SCALE_ENV: raw})


def test_every_pause_is_scaled(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setenv(PAUSE_SCALE_ENV, "0.5")
    pause(0.4, slept.append)
    pause(0.0, slept.append)
    pause(-1.0, slept.append)
    assert slept == [0.2] and scaled(3.0) == 1.5
    monkeypatch.setenv(PAUSE_SCALE_ENV, "0")
    pause(0.4, slept.append)
    assert slept == [0.2]


@pytest.mark.parametrize("scale, expected", [("1", 2.1), ("0", 0.0), ("0.5", 1.05)])
def test_the_gate_s_rounds_sleep_the_scaled_pauses(monkeypatch: pytest.MonkeyPatch, scale: str,
                                                   expected: float) -> None:
    """A kernel slower in every round: the gate runs its rounds, each after its scaled pause, and still decides."""
    monkeypatch.setenv(PAUSE_SCALE_ENV, scale)
    slept: list[float] = []
    entry = {"params": {"X": 1}, "samples": [1.0 + 0.01 * i for i in range(10)], "tolerance": 0.1}

    def slower() -> Measurement:
        samples = [1.5 + 0.01 * i for i in range(10)]
        return Measurement(params={"X": 1}, value=1.545, samples=samples)

    budget = GateBudget(sleep=slept.append).start()
    out = run_gate("k", "t.py::t", entry, slower(), 0.1, 0.01, remeasure=slower, budget=budget)
    assert out.verdict == "slower", out.message
    assert sum(slept[:6]) == pytest.approx(expected)  # the six rounds' pauses: 2.1 s unscaled


def test_the_plugin_refuses_a_bad_scale_and_names_a_good_one_in_the_summary(pytester: pytest.Pytester,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_f='''
import pytest


@pytest.mark.tune(params={"A": [1, 2]}, strategy="brute_force",
                  measure={"warmup": 0, "min_iterations": 3, "max_iterations": 3})
def test_f(autotune):
    autotune.function(lambda p: None, name="f")
''')
    monkeypatch.setenv(PAUSE_SCALE_ENV, "soon")
    result = pytester.runpytest("-p", "no:randomly", "--autotune")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{PAUSE_SCALE_ENV}='soon': expected a number from 0 to 10*"])
    assert "Traceback" not in result.stderr.str() + result.stdout.str()
    monkeypatch.setenv(PAUSE_SCALE_ENV, "0")
    result = pytester.runpytest("-p", "no:randomly", "--autotune", "--autotune-report=r.json")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"note: {PAUSE_SCALE_ENV}=0: the pauses between*"])
    assert json.loads((pytester.path / "r.json").read_text())["meta"]["pause_scale"] == 0.0
    monkeypatch.delenv(PAUSE_SCALE_ENV)
    result = pytester.runpytest("-p", "no:randomly", "--autotune-report=r.json")
    result.assert_outcomes(passed=1)
    assert PAUSE_SCALE_ENV not in result.stdout.str()
    assert json.loads((pytester.path / "r.json").read_text())["meta"]["pause_scale"] == 1.0
