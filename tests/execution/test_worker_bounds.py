"""Bounded workers: a kernel must not flood the log, outlive the run or take the
machine's memory. Real C kernels (gcc, ctypes) run in the isolated worker."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from pytest_autotune.measure.bounds import format_size, memory_limit_bytes, parse_size
from pytest_autotune.measure.timing import MeasureOptions
from pytest_autotune.results import FailureKind
from pytest_autotune.runners import KernelSpec, backend_available, make_runner
from pytest_autotune.execution.worker_bounds import OutputTap
from process_support import exited

needs_gcc = pytest.mark.skipif(not backend_available("c"), reason="needs gcc")
ROOT = Path(__file__).resolve().parents[2]
QUICK = {"min_iterations": 1, "max_iterations": 1, "warmup": 0}  # two calls: verification and one timed run

KERNEL = r"""
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void bounded(int *out, int n) {
    out[0] = 0;
#if ACTION == 1  /* 40 MB of output per call */
    static char line[1 << 20];
    memset(line, 'x', sizeof line);
    printf("first words of the kernel\n");
    for (int i = 0; i < 40; i++) fwrite(line, 1, sizeof line, stdout);
    printf("\nlast words of the kernel\n");
#elif ACTION == 2  /* touches 1 GiB */
    size_t size = (size_t)1 << 30;
    volatile char *p = malloc(size);
    if (p == NULL) abort();
    for (size_t i = 0; i < size; i += 4096) p[i] = 1;
    out[0] = p[size - 4096];
    free((void *)p);
#elif ACTION == 3 || ACTION == 4  /* forks a child that outlives the call; 4: then hangs */
    pid_t child = fork();
    if (child == 0) {
        execlp("sleep", "sleep", "1000", (char *)NULL);
        _exit(127);
    }
    out[0] = (int)child;
#if ACTION == 4
    sleep(60);
#endif
#elif ACTION == 5  /* says something, then crashes */
    printf("about to crash\n");
    raise(SIGSEGV);
#endif
}
"""


def _spec() -> KernelSpec:
    return KernelSpec(KERNEL, "bounded", 1, [np.zeros(1, np.int32), np.int32(1)])




def _wait_gone(pid: int, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not exited(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return exited(pid)


# -- output ----------------------------------------------------------------------------------------------
@needs_gcc
def test_a_kernel_printing_40_mb_per_call_puts_head_and_tail_in_the_log(tmp_path, capfd):
    cap = 4096
    with make_runner(_spec(), cache_dir=tmp_path, measure={**QUICK, "output_cap": cap}) as runner:
        flooding = runner.evaluate({"ACTION": 1})
        quiet = runner.evaluate({"ACTION": 0})
    out, err = capfd.readouterr()
    assert flooding.ok and quiet.ok  # the kernel never blocked on a full pipe
    logged = out + err
    per_call = 40 * (1 << 20) + len("first words of the kernel\n") + len("\nlast words of the kernel\n")
    assert len(logged) < 2 * cap, f"{len(logged)} bytes reached the log"
    assert logged.startswith("first words of the kernel\n")
    assert logged.rstrip("\n").endswith("last words of the kernel")
    assert f"... {2 * per_call - cap} bytes of kernel output omitted ...\n" in logged


@needs_gcc
def test_a_failed_configuration_keeps_what_its_kernel_said(tmp_path, capfd):
    with make_runner(_spec(), cache_dir=tmp_path, measure=QUICK) as runner:
        crashed = runner.evaluate({"ACTION": 5})
    assert crashed.failure is FailureKind.RUNTIME and "SIGSEGV" in crashed.detail
    assert "kernel output (stdout and stderr):\nabout to crash" in crashed.detail
    assert "about to crash" in capfd.readouterr().err


def chatty_launch(params):
    """A ``function`` kernel that prints 1 MB per call (module level: the worker imports it)."""
    print("y" * (1 << 20))
    return [np.ones(2)]


def test_a_python_kernel_printing_in_the_worker_is_capped_too(capfd):
    with make_runner(chatty_launch, isolate=True, expected=[np.ones(2)],
                     measure={**QUICK, "output_cap": "1KiB"}) as runner:
        assert runner.evaluate({}).ok
    logged = "".join(capfd.readouterr())
    assert len(logged) < 2048 and "bytes of kernel output omitted" in logged


def test_output_tap_keeps_head_and_tail_and_counts_the_rest():
    read, write = os.pipe()
    tap = OutputTap(read, cap=8)
    os.write(write, b"0123456789abcdef")
    assert tap.take() == "0123\n... 8 bytes of kernel output omitted ...\ncdef"
    os.write(write, b"short")
    assert tap.take() == "short"
    assert tap.take() == ""
    os.close(write)
    assert tap.close() == ""


# -- memory ----------------------------------------------------------------------------------------------
@needs_gcc
def test_a_candidate_over_the_memory_limit_fails_as_resources_and_the_run_goes_on(tmp_path):
    with make_runner(_spec(), cache_dir=tmp_path, measure={**QUICK, "worker_memory": "256MiB"}) as runner:
        greedy = runner.evaluate({"ACTION": 2})
        after = runner.evaluate({"ACTION": 0})
        starts = runner.worker_starts
    assert greedy.failure is FailureKind.RESOURCES, greedy.detail
    assert "over its limit of 256 MiB" in greedy.detail and "autotune_worker_memory" in greedy.detail
    assert after.ok and starts == 2  # the next candidate ran in a restarted worker


@needs_gcc
def test_the_same_candidate_runs_under_a_limit_it_fits(tmp_path):
    with make_runner(_spec(), cache_dir=tmp_path, measure={**QUICK, "worker_memory": "none"}) as runner:
        assert runner.evaluate({"ACTION": 2}).ok


def test_memory_limits_and_sizes():
    assert parse_size("16KiB") == parse_size("16k") == 16384 and parse_size("1MB") == 10**6 and parse_size(7) == 7
    assert memory_limit_bytes("256MiB") == 256 << 20
    assert memory_limit_bytes("none") is None and memory_limit_bytes(None) is None
    whole = memory_limit_bytes("100%")
    assert whole and memory_limit_bytes("auto", sharing=1) == whole // 2
    assert memory_limit_bytes("auto", sharing=4) == whole // 2 // 4  # pytest-xdist workers share the half
    assert format_size(256 << 20) == "256 MiB" and format_size(1536 << 20) == "1.5 GiB"
    assert MeasureOptions(output_cap="64KiB").output_cap == 65536
    for bad in ({"worker_memory": "lots"}, {"worker_memory": "0"}, {"worker_memory": "150%"}, {"output_cap": "-1"}):
        with pytest.raises(ValueError):
            MeasureOptions(**bad)


# -- process group ---------------------------------------------------------------------------------------
@needs_gcc
def test_a_forked_child_of_a_candidate_ends_with_the_runner(tmp_path):
    with make_runner(_spec(), cache_dir=tmp_path, measure=QUICK) as runner:
        m = runner.evaluate({"ACTION": 3}, keep_outputs=True)
        assert m.ok, m.detail
        child = int(m.extra["outputs"][0][0])
        assert child > 0 and not exited(child)  # it outlived the call
    assert _wait_gone(child), f"process {child}, forked by a candidate, outlived close()"


@needs_gcc
def test_a_hanging_candidate_s_children_end_with_its_worker(tmp_path):
    with make_runner(_spec(), cache_dir=tmp_path, measure={**QUICK, "watchdog_s": 1.0}) as runner:
        worker = runner.worker_pid
        hung = runner.evaluate({"ACTION": 4})
        assert hung.failure is FailureKind.TIMEOUT
        children = [int(pid) for pid in os.listdir("/proc") if pid.isdigit() and _group_of(int(pid)) == worker]
        assert runner.evaluate({"ACTION": 0}).ok
    assert children == [], f"processes {children} of the killed worker's group are still there"


def _group_of(pid: int) -> int | None:
    try:
        if exited(pid):
            return None
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


@needs_gcc
def test_children_end_when_the_caller_is_killed_outright(tmp_path):
    script = tmp_path / "killed.py"
    script.write_text(textwrap.dedent(f"""\
        import os, signal, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})  # tests/: the shared helpers
        from test_worker_bounds import QUICK, _spec
        from pytest_autotune.runners import make_runner
        runner = make_runner(_spec(), cache_dir={str(tmp_path / 'cache')!r}, measure=QUICK)
        m = runner.evaluate({{"ACTION": 3}}, keep_outputs=True)
        print(int(m.extra["outputs"][0][0]), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # no atexit, no close: only the closed pipe tells the worker
    """))
    out = subprocess.run([sys.executable, script.name], cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == -signal.SIGKILL, out.stderr
    child = int(out.stdout.strip())
    assert _wait_gone(child, 20), f"process {child}, forked by a candidate, outlived its killed caller"


# -- ini options -----------------------------------------------------------------------------------------
def test_the_ini_bounds_reach_every_marker_unless_it_sets_its_own():
    from pytest_autotune.lifecycle.settings import parse_marker

    ini = {"output_cap": 1024, "worker_memory": "2GiB"}
    plain = parse_marker((), {"params": {"x": [1, 2]}}, ini).measure
    assert (plain.output_cap, plain.worker_memory) == (1024, "2GiB")
    own = parse_marker((), {"params": {"x": [1, 2]}, "measure": {"worker_memory": "none", "warmup": 3}}, ini).measure
    assert (own.output_cap, own.worker_memory, own.warmup) == (1024, "none", 3)
    assert parse_marker((), {"params": {"x": [1]}}, {}).measure.worker_memory == "auto"


@pytest.mark.parametrize("line, message", [
    ("autotune_worker_memory = plenty", "*ini option autotune_worker_memory=plenty: expected a size such as 4GiB*"),
    ("autotune_output_cap = 16 lines", "*ini option autotune_output_cap=16 lines: expected a size such as 16KiB*"),
])
def test_a_bad_bound_in_the_ini_file_is_a_usage_error(pytester, line, message):
    pytester.makeini(f"[pytest]\n{line}\n")
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
