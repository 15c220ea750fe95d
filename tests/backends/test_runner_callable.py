"""The callable runner: user launch functions timed and verified, faults recorded."""
from __future__ import annotations

import numpy as np
import pytest

from pytest_autotune.results import FailureKind
from pytest_autotune.runners import InvalidConfiguration, SpecError, make_runner
from pytest_autotune.backends.callable_runner import CallableRunner
from pytest_autotune.execution.device import DeviceInfo

FAST = {"warmup": 1, "min_iterations": 4, "max_iterations": 4}
X = np.arange(64, dtype=np.float64)


def scaled_sum(params):
    """Module level so it can be pickled into an isolated worker."""
    if params["chunk"] == 0:
        raise InvalidConfiguration("chunk must be positive")
    if params["chunk"] < 0:
        raise RuntimeError("negative chunk")
    out = np.zeros_like(X)
    for start in range(0, X.size, params["chunk"]):
        out[start:start + params["chunk"]] = X[start:start + params["chunk"]] * 2
    if params.get("bug"):
        out[5] = -1
    return out


def test_times_and_verifies_a_launch_function():
    calls = []

    def sync():
        calls.append("sync")

    runner = make_runner(scaled_sum, sync=sync, expected=[X * 2], measure=FAST)
    assert isinstance(runner, CallableRunner) and runner.name == "callable"
    m = runner.evaluate({"chunk": 16}, keep_outputs=True)
    assert m.ok, m.detail
    assert len(m.samples) == 4 and m.value > 0
    np.testing.assert_array_equal(m.extra["outputs"][0], X * 2)
    assert calls.count("sync") == 1 + 1 + 4  # verification + warm-up + timed, sync inside each
    assert runner.device().kind == "cpu"
    runner.close()


def test_faults_are_recorded():
    runner = make_runner(scaled_sum, expected=[X * 2], measure=FAST)
    wrong = runner.evaluate({"chunk": 8, "bug": True})
    assert wrong.failure is FailureKind.WRONG_OUTPUT and "index (5,)" in wrong.detail
    invalid = runner.evaluate({"chunk": 0})
    assert invalid.failure is FailureKind.INVALID and "positive" in invalid.detail
    crash = runner.evaluate({"chunk": -1})
    assert crash.failure is FailureKind.RUNTIME and "negative chunk" in crash.detail
    assert runner.evaluate({"chunk": 32}).ok


def test_none_outputs_with_a_reference_is_wrong_and_without_is_fine():
    runner = make_runner(lambda params: None, expected=[X], measure=FAST)
    assert runner.evaluate({}).failure is FailureKind.WRONG_OUTPUT
    runner = make_runner(lambda params: None, measure=FAST)
    assert runner.evaluate({}).ok


def test_verify_callable_and_constants_and_device():
    device = DeviceInfo(model="Test GPU 9000", kind="cuda", properties={"max_threads": 1024, "sm_count": 2})
    runner = make_runner(
        scaled_sum, verify=lambda expected, outputs: outputs[0][1] == 2.0, measure=FAST,
        device=device, constants={"custom": 7},
    )
    assert runner.device().slug == "test-gpu-9000"
    assert runner.constants() == {"max_threads": 1024, "sm_count": 2, "custom": 7}
    assert runner.evaluate({"chunk": 4}).ok
    assert runner.evaluate({"chunk": 4, "bug": True}).ok  # the callable only checks index 1


def test_isolated_callable_runner_with_module_level_function():
    with make_runner(scaled_sum, expected=[X * 2], measure=FAST, isolate=True) as runner:
        assert runner.evaluate({"chunk": 16}).ok
        assert runner.evaluate({"chunk": 0}).failure is FailureKind.INVALID
        assert runner.worker_starts == 1


def test_isolating_a_closure_is_a_clear_error():
    local = 2
    with pytest.raises(SpecError, match="isolate=False"):
        make_runner(lambda params: local, isolate=True)


def test_launch_may_be_passed_by_keyword():
    runner = make_runner(None, runner="callable", launch=scaled_sum, expected=[X * 2], measure=FAST)
    assert isinstance(runner, CallableRunner)
    assert runner.evaluate({"chunk": 8}).ok
    with pytest.raises(SpecError):
        make_runner(scaled_sum, runner="callable", launch=scaled_sum)
