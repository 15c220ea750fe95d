"""The isolated worker as a process of its own: plain scripts, sessions, parent death.

Each test runs a small script with ``python script.py`` in a subprocess,
because what is checked (an unguarded ``__main__``, a parent killed outright)
cannot happen inside the pytest process.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from pytest_autotune.measure.timing import MeasureOptions
from pytest_autotune.results import FailureKind, Measurement
from pytest_autotune.runners import BackendUnavailable, KernelSpec, SpecError, backend_available, make_runner
from pytest_autotune.execution.device import DeviceInfo
from pytest_autotune.execution.executor import Executor
from pytest_autotune.execution.isolation import ExecutorRecipe, HostedRunner, IsolatedExecutor
from process_support import exited

needs_gcc = pytest.mark.skipif(not backend_available("c"), reason="needs gcc")

ROOT = Path(__file__).resolve().parents[2]


def run_script(path: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python path`` in the script's directory, importing this checkout of pytest_autotune."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, path.name], cwd=path.parent, env=env, capture_output=True,
                          text=True, timeout=timeout)


def manual_without_pytest_page() -> tuple[str, str]:
    """The kernel and the script of the manual's "Tune without pytest" page, as the user would copy them."""
    page = (ROOT / "docs" / "how-to" / "without-pytest.md").read_text()
    kernel = re.search(r"<!-- file: kernels/scale.c -->\n```c\n(.*?)```", page, re.S).group(1)
    script = re.search(r"<!-- run -->\n```python\n(.*?)```", page, re.S).group(1)
    return kernel, script


@needs_gcc
def test_manual_without_pytest_snippet_runs_as_a_plain_script(tmp_path):
    # multiprocessing's spawn/forkserver children re-ran an unguarded script: "An attempt has been
    # made to start a new process before the current process has finished its bootstrapping phase"
    kernel, snippet = manual_without_pytest_page()
    assert "__main__" not in snippet, "the manual's script has no guard, and must run without one"
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "scale.c").write_text(kernel)
    script = tmp_path / "tune_scale.py"
    script.write_text(snippet)
    out = run_script(script)
    assert out.returncode == 0, out.stderr
    assert "bootstrapping" not in out.stderr
    params, median, failures = re.fullmatch(r"(\{.*\}) (\S+) (\{.*\})\n", out.stdout).groups()
    assert eval(params)["UNROLL"] in (1, 2, 4, 8) and float(median) > 0 and eval(failures) == {}


@needs_gcc
def test_script_functions_stay_in_the_script_and_worker_stderr_is_the_callers(tmp_path):
    (tmp_path / "scale.c").write_text(textwrap.dedent(r"""
        #include <stdio.h>
        void scale(float *x, int n) {
            fprintf(stderr, "note from the kernel\n");
            for (int i = 0; i < n; i++) x[i] *= 2.0f;
        }
    """))
    script = tmp_path / "script_verify.py"
    script.write_text(textwrap.dedent("""\
        import numpy as np
        from pytest_autotune.runners import KernelSpec, SpecError, make_runner

        calls = []

        def close_enough(expected, outputs):  # lives in __main__: the worker cannot import it
            calls.append(1)
            return bool(np.allclose(outputs[0], 2.0))

        def launch(params):
            return [np.ones(4)]

        spec = KernelSpec("scale.c", "scale", 4, [np.ones(4, np.float32), np.int32(4)], verify=close_enough)
        with make_runner(spec, measure={"min_iterations": 1, "max_iterations": 1, "warmup": 0}) as runner:
            m = runner.evaluate({})
            print("measured", m.ok, runner.isolate, len(calls))
        try:
            make_runner(launch, isolate=True)
        except SpecError as exc:
            print("refused", exc)
    """))
    out = run_script(script)
    assert out.returncode == 0, out.stderr
    assert "measured True True 1" in out.stdout  # verified here, in the script's process
    assert "refused" in out.stdout and "launch is defined in the script being run (__main__)" in out.stdout
    assert "note from the kernel" in out.stderr


@needs_gcc
def test_worker_is_outside_the_callers_process_group(tmp_path):
    # Ctrl-C at a terminal signals the foreground process group: only the caller handles it
    spec = KernelSpec("void f(float *x, int n) { }", "f", 4, [np.zeros(4, np.float32), np.int32(4)])
    with make_runner(spec, cache_dir=tmp_path) as runner:
        assert os.getpgid(runner._impl.pid) != os.getpgid(0)




@needs_gcc
def test_worker_exits_when_its_parent_is_killed(tmp_path):
    script = tmp_path / "killed.py"
    script.write_text(textwrap.dedent(f"""\
        import os, signal
        import numpy as np
        from pytest_autotune.runners import KernelSpec, make_runner
        spec = KernelSpec("void f(float *x, int n) {{ }}", "f", 4, [np.zeros(4, np.float32), np.int32(4)])
        runner = make_runner(spec, cache_dir={str(tmp_path / 'cache')!r})
        print(runner._impl.pid, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # no atexit, no close: only the closed pipe tells the worker
    """))
    out = run_script(script)
    assert out.returncode == -signal.SIGKILL, out.stderr
    pid = int(out.stdout.strip())
    deadline = time.monotonic() + 20
    while not exited(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert exited(pid)


class ScriptedExecutor(Executor):
    """Does in the worker what ``params["action"]`` says, reporting phases like a real executor."""

    def __init__(self, measure, fail_init=None):
        super().__init__()
        if fail_init == "spec":
            raise SpecError("bad spec, said the worker")
        if fail_init == "other":
            raise ValueError("something else broke")

    def device(self):
        return DeviceInfo("scripted", "cpu")

    def constants(self):
        return {"pid": os.getpid()}

    def evaluate(self, params, keep_outputs=False):
        action = params["action"]
        if action == "die_compiling":
            self.heartbeat("compile")
            os.kill(os.getpid(), signal.SIGKILL)
        if action == "hang_compiling":
            self.heartbeat("compile")
            time.sleep(60)
        if action == "hang_running":
            self.heartbeat("run")
            time.sleep(60)
        if action == "slow_but_beating":  # 1 s in all, never 0.4 s without a launch
            for _ in range(10):
                time.sleep(0.1)
                self.heartbeat("run")
        if action == "poison":
            self.healthy = False
        self.heartbeat("idle")
        return Measurement(params=dict(params), value=1.0, samples=[1.0], extra={"pid": os.getpid()})


class ScriptedRunner(HostedRunner):
    name = "scripted"
    executor_target = f"{__name__}:ScriptedExecutor"  # importable in the worker through the caller's sys.path


def test_watchdog_reads_the_workers_heartbeat_and_phase():
    measure = MeasureOptions(watchdog_s=0.4, compile_timeout_s=0.6)
    with ScriptedRunner(isolate=True, measure=measure) as runner:
        worker_pid = runner.constants()["pid"]
        assert worker_pid != os.getpid()
        slow = runner.evaluate({"action": "slow_but_beating"})
        assert slow.ok and slow.extra["pid"] == worker_pid  # progress kept the watchdog quiet

        hang = runner.evaluate({"action": "hang_compiling"})
        assert hang.failure is FailureKind.TIMEOUT
        assert "no progress for 0.6 s while in phase 'compile'" in hang.detail

        died = runner.evaluate({"action": "die_compiling"})
        assert died.failure is FailureKind.COMPILE
        assert "killed by SIGKILL" in died.detail and "phase 'compile'" in died.detail

        poisoned = runner.evaluate({"action": "poison"})
        assert poisoned.ok
        after = runner.evaluate({"action": "ok"})
        assert after.ok and after.timings["worker_start_s"] > 0  # a fresh worker after the poisoned one
        assert runner.worker_starts == 4


def test_init_errors_in_the_worker():
    with pytest.raises(SpecError, match="bad spec, said the worker"):
        ScriptedRunner(isolate=True, measure=None, fail_init="spec")
    with pytest.raises(BackendUnavailable, match="(?s)failed to initialise in the worker.*ValueError: something else"):
        ScriptedRunner(isolate=True, measure=None, fail_init="other")


def test_a_worker_that_does_not_start_in_time_is_killed():
    executor = IsolatedExecutor(ExecutorRecipe(ScriptedRunner.executor_target, {"measure": None}), MeasureOptions(),
                                start_timeout_s=0.001)  # far less than starting an interpreter takes
    with pytest.raises(BackendUnavailable, match="did not start within 0.001 s"):
        executor.device()
    assert executor.pid is None and not executor.alive
    executor.close()


def test_ctrl_c_in_the_caller_stops_a_busy_worker():
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        with ScriptedRunner(isolate=True, measure=None) as runner:
            busy_pid = runner._impl.pid
            signal.setitimer(signal.ITIMER_REAL, 0.3)
            with pytest.raises(KeyboardInterrupt):
                runner.evaluate({"action": "hang_running"})
            assert runner._impl.pid is None and exited(busy_pid)  # killed, not left hanging
            assert runner.evaluate({"action": "ok"}).ok  # the next evaluation starts a fresh worker
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
