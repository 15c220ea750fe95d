"""Compile ahead (execution/compile_pool.py): the pool compiles the next candidates while one is timed,
failures never reach the device and stay classified as without a pool, compilers pause while a CPU
kernel is timed, and one worker is today's inline compile."""
from __future__ import annotations

import contextlib
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_autotune import tune
from pytest_autotune.measure.timing import MeasureOptions
from pytest_autotune.results import FailureKind
from pytest_autotune.runners import KernelSpec, make_runner
from pytest_autotune.execution.compile_pool import (CompiledArtefact, _process_tree, CompilePool, CompilerProcesses,
                                                  compile_ahead, default_compile_workers, parse_compile_workers,
                                                  pipelined)

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="the C runner needs gcc")

N = 1 << 12
FAST = MeasureOptions(warmup=0, min_iterations=3, max_iterations=3, watchdog_s=10.0)

# MODE 0: right; 1: wrong output; 2: does not compile
KERNEL = r"""
void scale(float *out, const float *in, int n) {
#if MODE == 2
    int broken = undeclared_symbol + ;
#endif
    for (int i = 0; i < n; i += UNROLL)
        for (int j = 0; j < UNROLL && i + j < n; j++)
            out[i + j] = in[i + j] * (MODE == 1 ? 3.0f : 2.0f);
}
"""
PARAMS = {"MODE": [0, 1, 2], "UNROLL": [1, 2, 4, 8]}


def spec() -> KernelSpec:
    a = np.linspace(0, 1, N, dtype=np.float32)
    return KernelSpec(KERNEL, "scale", N, [np.zeros(N, np.float32), a, np.int32(N)],
                      expected=[a * 2, None, None], lang="c")


@pytest.fixture
def c_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh compile cache: every configuration really compiles (no library from an earlier test)."""
    monkeypatch.setenv("PYTEST_AUTOTUNE_CACHE_DIR", str(tmp_path))
    return tmp_path


def without_temp_dir(detail: str) -> str:
    """A compiler message without the per-compile temporary folder it names."""
    return re.sub(r"\S*autotune-c-[^/\s]+/", "TMP/", detail)


class Events:
    """What happened when, across the pool's threads and the device stage."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.log: list[tuple[str, str, float]] = []

    def add(self, what: str, params: Any) -> None:
        with self.lock:
            self.log.append((what, repr(sorted(dict(params).items())), time.perf_counter()))

    def when(self, what: str, params: Any) -> float:
        key = repr(sorted(dict(params).items()))
        return next(t for w, k, t in self.log if w == what and k == key)


def instrumented(runner: Any, events: Events) -> None:
    """Record compile starts/ends in the pool and device-stage starts (in-process executor)."""
    stage_compile = runner.compile_pool.stage.compile

    def compile_logged(params: Any, processes: Any) -> Any:
        events.add("compile start", params)
        artefact = stage_compile(params, processes)
        events.add("compile end", params)
        return artefact

    runner.compile_pool.stage.compile = compile_logged
    executor = runner._impl
    evaluate, executor_compile = executor.evaluate, executor.compile

    def evaluate_logged(params: Any, keep_outputs: bool = False, artefact: Any = None) -> Any:
        events.add("device start", params)
        if artefact is not None and artefact.ok:
            assert Path(artefact.path).exists()  # the artefact is there before its device stage starts
        measurement = evaluate(params, keep_outputs=keep_outputs, artefact=artefact)
        events.add("device end", params)
        return measurement

    def compile_on_device(source: str, name: str) -> Any:
        events.add("device compiled", {})
        return executor_compile(source, name)

    executor.evaluate, executor.compile = evaluate_logged, compile_on_device


# -- the pool on its own --------------------------------------------------------------------------

def test_parse_compile_workers() -> None:
    assert parse_compile_workers("3") == 3
    assert parse_compile_workers("auto") == parse_compile_workers("") == default_compile_workers() >= 1
    assert parse_compile_workers("auto", sharing=1000) == 1  # pytest-xdist workers share the cores
    for bad in ("0", "-2", "two", "1.5"):
        with pytest.raises(ValueError, match="whole number of compile workers >= 1"):
            parse_compile_workers(bad)


def test_pipelined_batch_is_workers_plus_one() -> None:
    def mine(configs: list) -> None: ...

    assert pipelined(1, None, None, 4) == (1, None)  # no pool: the evaluator as given
    assert pipelined(1, None, mine, 2) == (3, mine)
    seen: list = []
    size, both = pipelined(8, seen.append, mine, 2)
    both([{"x": 1}])
    assert size == 8 and seen == [[{"x": 1}]]


class SleepStage:
    """A compile stage whose 'compiler' is a shell loop that counts, so pausing is observable."""

    pause_while_timing = True

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def compile(self, params: Any, processes: CompilerProcesses) -> CompiledArtefact:
        out = self.folder / f"count{params['i']}.txt"
        # one short append per step: a stop can never leave the file half written (a truncating
        # `echo > file` stopped between its truncate and its write reads as empty)
        script = f"i=0; while [ $i -lt 400 ]; do i=$((i+1)); echo $i >> {out}; sleep 0.005; done"
        processes.run(["sh", "-c", script], timeout=60)
        return CompiledArtefact(True, path=str(out), symbol="x")


def count(path: Path) -> int:
    """How many steps the counting 'compiler' has completed (whole lines only)."""
    try:
        return path.read_text().count("\n")
    except OSError:
        return 0


@pytest.mark.skipif(sys.platform != "linux", reason="process groups and SIGSTOP as on Linux")
def test_pause_stops_running_compilers_and_holds_new_ones(tmp_path: Path) -> None:
    pool = CompilePool(SleepStage(tmp_path), workers=2)
    try:
        pool.submit([{"i": 0}])
        deadline = time.monotonic() + 10
        while count(tmp_path / "count0.txt") < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        with pool.timing_window():
            pool.submit([{"i": 1}])  # must not start while the window is open
            time.sleep(0.1)  # let a last write land
            before = count(tmp_path / "count0.txt")
            time.sleep(0.4)
            assert before > 0 and count(tmp_path / "count0.txt") == before  # stopped: no progress at all
            assert not (tmp_path / "count1.txt").exists()
        deadline = time.monotonic() + 10
        progressed = 0
        while progressed <= before and time.monotonic() < deadline:
            time.sleep(0.01)
            progressed = count(tmp_path / "count0.txt")
        assert progressed > before  # going on again
        assert pool.take({"i": 1}).ok and pool.take({"i": 0}).ok
    finally:
        pool.close()
    assert pool.processes.running == 0


class GatedStage:
    """A compile stage whose "slow" configurations finish only once the test opens the gate."""

    pause_while_timing = False

    def __init__(self) -> None:
        self.gate = threading.Event()

    def compile(self, params: Any, processes: CompilerProcesses) -> CompiledArtefact:
        if params["slow"]:
            assert self.gate.wait(30)
        return CompiledArtefact(True, path="x", symbol="x")


def test_first_ready_is_the_first_compiled_not_the_oldest() -> None:
    stage = GatedStage()
    pool = CompilePool(stage, workers=2)
    try:
        slow, fast = {"slow": True, "i": 0}, {"slow": False, "i": 1}
        pool.submit([slow, fast])
        assert pool.first_ready([slow, fast]) == 1  # the device does not wait behind the slow compile
        assert pool.take(fast).ok
        threading.Timer(0.3, stage.gate.set).start()
        assert pool.first_ready([slow]) == 0 and stage.gate.is_set()  # none ready: it waited for one
        assert pool.first_ready([{"slow": True, "i": 2}, slow]) == 0  # never submitted: the device stage compiles it
        with pytest.raises(ValueError, match="at least one"):
            pool.first_ready([])
    finally:
        stage.gate.set()
        pool.close()


def test_take_of_a_configuration_never_submitted_is_none(tmp_path: Path) -> None:
    pool = CompilePool(SleepStage(tmp_path), workers=1)
    try:
        assert pool.take({"i": 7}) is None  # a re-timing or gate run: the device stage compiles it
    finally:
        pool.close()


def test_a_stage_that_raises_leaves_the_configuration_to_the_device_stage() -> None:
    class Raising:
        pause_while_timing = False

        def compile(self, params: Any, processes: Any) -> CompiledArtefact:
            raise ValueError("cannot render")

    pool = CompilePool(Raising(), workers=1)
    try:
        pool.submit([{"a": 1}])
        assert pool.take({"a": 1}) is None
    finally:
        pool.close()


# -- the C runner through the pool ----------------------------------------------------------------

@needs_gcc
def test_pool_compiles_the_next_candidate_while_the_device_times_one(c_cache: Path) -> None:
    configs = [{"MODE": 0, "UNROLL": u} for u in (1, 2, 4, 8)]
    events = Events()
    with make_runner(spec(), isolate=False, measure=FAST) as runner:
        assert runner.start_compile_ahead(2)
        instrumented(runner, events)
        runner.prefetch(configs[:3])
        for i, params in enumerate(configs):
            if i + 3 < len(configs):
                runner.prefetch([configs[i + 3]])
            m = runner.evaluate(params)
            assert m.ok, m.detail
            assert "load_s" in m.timings and m.timings["compile_s"] > 0
    assert not any(w == "device compiled" for w, _, _ in events.log)  # the device stage compiled nothing
    for earlier, later in zip(configs, configs[1:]):
        # the next candidate's compile started before the current one's device stage ended
        assert events.when("compile start", later) < events.when("device end", earlier)
        assert events.when("compile end", later) < events.when("device start", later)


@needs_gcc
def test_compile_failures_never_reach_the_device_and_read_as_without_a_pool(c_cache: Path) -> None:
    broken, wrong = {"MODE": 2, "UNROLL": 4}, {"MODE": 1, "UNROLL": 4}
    events = Events()
    with make_runner(spec(), isolate=False, measure=FAST) as runner:
        inline = runner.evaluate(broken)
        assert runner.start_compile_ahead(2)
        instrumented(runner, events)
        runner.prefetch([broken, wrong])
        pooled, pooled_wrong = runner.evaluate(broken), runner.evaluate(wrong)
    assert inline.failure is pooled.failure is FailureKind.COMPILE
    assert without_temp_dir(pooled.detail) == without_temp_dir(inline.detail)
    assert "undeclared_symbol" in pooled.detail
    assert pooled.extra["kernel_name"] == inline.extra["kernel_name"]
    assert pooled.extra["source_sha256"] == inline.extra["source_sha256"]
    starts = [k for w, k, _ in events.log if w == "device start"]
    assert starts == [repr(sorted(wrong.items()))]  # the broken one never reached the device stage
    assert pooled_wrong.failure is FailureKind.WRONG_OUTPUT  # compiled fine, failed on the device


@needs_gcc
def test_isolated_worker_pauses_compilers_during_every_timed_window(c_cache: Path) -> None:
    """The worker process asks for the window before its timed runs; while it is open no compiler runs."""
    configs = [{"MODE": 0, "UNROLL": u} for u in (1, 2, 4, 8)]
    windows: list[list[str]] = []
    with make_runner(spec(), measure=FAST) as runner:  # isolated: the device stage is another process
        assert runner.start_compile_ahead(2)
        pool = runner.compile_pool
        opened = pool.processes.paused_window

        @contextlib.contextmanager
        def window() -> Any:
            with opened():
                states = []
                for group in list(pool.processes._groups):
                    for pid in _process_tree(group):  # gcc and what it runs (cc1, as, ld)
                        try:
                            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
                            pending = [int(line.split()[1], 16) for line in Path(f"/proc/{pid}/status").read_text()
                                       .splitlines() if line.startswith(("SigPnd:", "ShdPnd:"))]
                        except OSError:
                            continue  # finished meanwhile
                        # runnable with a SIGSTOP pending (a busy machine has not scheduled it yet): it stops
                        # before it runs another instruction of its own
                        states.append("T" if any(m & (1 << (signal.SIGSTOP - 1)) for m in pending) else state)
                windows.append(states)
                yield

        pool.processes.paused_window = window
        runner.prefetch(configs)
        results = [runner.evaluate(p) for p in configs]
        results.append(runner.evaluate({"MODE": 0, "UNROLL": 16}))  # not compiled ahead: inline, paused too
    assert all(m.ok for m in results), [m.detail for m in results]
    assert "load_s" not in results[-1].timings
    assert len(windows) == len(configs) + 1  # one window per timed configuration
    # stopped (T), exited (Z), or in uninterruptible I/O with the stop pending (D): none on a CPU
    assert all(state in ("T", "t", "Z", "D") for states in windows for state in states), windows


@needs_gcc
def test_tune_with_a_pool_keeps_only_the_depth_the_measured_costs_need(c_cache: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_autotune.engine import tuner as tuner_module
    from pytest_autotune.engine.pipeline_depth import PipelineDepth

    made: list[PipelineDepth] = []

    class Spy(PipelineDepth):
        def __init__(self, most: int, warmup: int = 3) -> None:
            super().__init__(most, warmup)
            made.append(self)

    monkeypatch.setattr(tuner_module, "PipelineDepth", Spy)
    with make_runner(spec(), measure=FAST) as runner:
        tune(runner, PARAMS, strategy="brute_force", compile_workers=2, confirm_rounds=0, keep_outputs=False)
        assert len(made) == 1 and made[0].most == 3  # a pool of 2: at most one on the device and two compiling
        info = made[0].describe()
        assert info["evaluations"] == 12  # every configuration's real costs, compile failures included
        assert info["median_compile_s"] > 0 and info["median_device_s"] > 0
        tune(runner, PARAMS, strategy="brute_force", compile_workers=1, confirm_rounds=0, keep_outputs=False)
    assert len(made) == 1  # no pool: no depth, the batch size as given


@needs_gcc
def test_tune_with_workers_compiles_ahead_and_one_worker_compiles_inline(c_cache: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_autotune.engine import evaluator as evaluator_module

    seen: list[dict[str, Any]] = []
    original = evaluator_module.Evaluator.__init__

    def spy(self: Any, *args: Any, **kwargs: Any) -> None:
        seen.append({"batch_size": kwargs.get("batch_size", 1), "prefetch": kwargs.get("prefetch"),
                     "first_ready": kwargs.get("first_ready")})
        original(self, *args, **kwargs)

    monkeypatch.setattr(evaluator_module.Evaluator, "__init__", spy)
    with make_runner(spec(), measure=FAST) as runner:
        result = tune(runner, PARAMS, strategy="brute_force", compile_workers=2, confirm_rounds=0,
                      keep_outputs=False)
        assert runner.compile_pool is None  # closed when the search ended
        one = tune(runner, PARAMS, strategy="brute_force", compile_workers=1, confirm_rounds=0, keep_outputs=False)
    assert seen[0]["batch_size"] == 3 and seen[0]["prefetch"] is not None
    assert seen[0]["first_ready"] is not None  # the device takes whichever candidate is compiled first
    assert seen[1] == {"batch_size": 1, "prefetch": None, "first_ready": None}  # one worker: today's inline compiles
    records = result.history.records
    # the same configurations; with a pool the device takes whichever is compiled first, so the order may differ
    assert sorted(map(repr, (r.params for r in records))) == sorted(map(repr, (r.params for r in one.history.records)))
    kinds = {tuple(sorted(r.params.items())): r.measurement.failure for r in records}
    assert kinds == {tuple(sorted(r.params.items())): r.measurement.failure for r in one.history.records}
    assert all("load_s" in r.measurement.timings for r in records if r.measurement.failure is not FailureKind.COMPILE)
    assert not any("load_s" in r.measurement.timings for r in one.history.records)
    assert result.params["MODE"] == 0


def test_compile_ahead_is_off_for_runners_without_a_compile_stage() -> None:
    class Plain:
        def evaluate(self, params: Any) -> Any: ...

    with compile_ahead(Plain(), 4) as prefetch:
        assert prefetch is None


# -- NVRTC: the cupy runner's compile stage, for real, without a GPU -------------------------------

nvrtc = pytest.importorskip("pytest_autotune.backends.nvrtc")
NVRTC_MISSING = nvrtc.nvrtc_unavailable_reason()
WHEELS_EXIST = sys.platform.startswith("linux") and __import__("platform").machine() in ("x86_64", "AMD64")
needs_nvrtc = pytest.mark.skipif(bool(NVRTC_MISSING) and not WHEELS_EXIST, reason=f"no NVRTC here: {NVRTC_MISSING}")

CUDA = r"""
template <int BS>
__global__ void scale(float *x, float a, int n) {
#if BROKEN
    x[0] = undefined_name;
#endif
    __shared__ float tile[STATIC_FLOATS];
    int i = blockIdx.x * BS + threadIdx.x;
    tile[threadIdx.x % STATIC_FLOATS] = x[i];
    __syncthreads();
    if (i < n) x[i] = a * tile[threadIdx.x % STATIC_FLOATS];
}
"""


def cuda_stage(tmp_path: Path) -> Any:
    from pytest_autotune.backends.cuda_arch import arch_limits

    spec = KernelSpec(CUDA, "scale<block_size_x>", 4096, [np.zeros(4096, np.float32), np.float32(2), np.int32(4096)],
                      lang="cuda", shared_mem="DYNAMIC")
    return nvrtc.NvrtcCompileStage(spec, 80, arch_limits(80), cache_dir=tmp_path)


@needs_nvrtc
def test_nvrtc_stage_builds_a_cubin_the_device_stage_loads_by_lowered_name(tmp_path: Path) -> None:
    stage = cuda_stage(tmp_path)
    artefact = stage.compile({"block_size_x": 128, "BROKEN": 0, "STATIC_FLOATS": 128, "DYNAMIC": 0}, CompilerProcesses())
    assert artefact.ok, artefact.detail
    cubin = Path(artefact.path).read_bytes()
    assert cubin[:4] == b"\x7fELF" and artefact.symbol.encode() in cubin
    assert artefact.symbol.startswith("_Z5scaleILi128EE")  # the template instance, mangled
    again = stage.compile({"block_size_x": 128, "BROKEN": 0, "STATIC_FLOATS": 128, "DYNAMIC": 0}, CompilerProcesses())
    assert again.path == artefact.path  # cached on disk


@needs_nvrtc
def test_nvrtc_stage_rejects_before_the_device_with_the_device_stage_messages(tmp_path: Path) -> None:
    from pytest_autotune.execution.executor import check_kernel_resources, check_launch_limits

    stage = cuda_stage(tmp_path)
    broken = stage.compile({"block_size_x": 128, "BROKEN": 1, "STATIC_FLOATS": 128, "DYNAMIC": 0}, CompilerProcesses())
    assert broken.failure is FailureKind.COMPILE
    assert "undefined_name" in broken.detail and not broken.detail.startswith("NVRTC_ERROR")  # CuPy's message
    too_big = stage.compile({"block_size_x": 2048, "BROKEN": 0, "STATIC_FLOATS": 128, "DYNAMIC": 0}, CompilerProcesses())
    assert too_big.failure is FailureKind.INVALID
    assert too_big.detail == check_launch_limits(((2, 1, 1), (2048, 1, 1), 0), stage.limits)
    # 40 KiB static (within the 48 KiB ptxas allows) + 150,000 bytes dynamic: over the 166,912 opt-in limit
    smem = stage.compile({"block_size_x": 128, "BROKEN": 0, "STATIC_FLOATS": 10240, "DYNAMIC": 150000},
                         CompilerProcesses())
    assert smem.failure is FailureKind.RESOURCES
    assert smem.detail == check_kernel_resources(128, 40960, 150000, 0, None, stage.limits)
    assert "40960 bytes static + 150000 bytes dynamic shared memory exceed" in smem.detail
    measurement = smem.failed_measurement({"block_size_x": 128})
    assert measurement.failure is FailureKind.RESOURCES and measurement.extra["block"] == [128, 1, 1]


# -- the pytest flag ----------------------------------------------------------------------------------

PROJECT_TEST = '''
import numpy as np
import pytest

N = 1 << 12
SOURCE = """
void scale(float *out, const float *in, int n) {
#if MODE == 2
    int broken = undeclared_symbol + ;
#endif
    for (int i = 0; i < n; i += UNROLL)
        for (int j = 0; j < UNROLL && i + j < n; j++)
            out[i + j] = in[i + j] * 2.0f;
}
"""


@pytest.mark.tune(params={"MODE": [0, 2], "UNROLL": [1, 2, 4, 8]}, strategy="brute_force",
                  measure={"min_iterations": 3, "max_iterations": 3, "warmup": 0})
def test_scale(autotune):
    a = np.linspace(0, 1, N, dtype=np.float32)
    result = autotune.kernel(SOURCE, "scale", N, [np.zeros(N, np.float32), a, np.int32(N)],
                             expected=[a * 2, None, None], lang="c")
    assert result.params["MODE"] == 0
'''
INNER = ("-p", "no:benchmark", "-p", "no:unraisableexception", "-p", "no:hypothesispytest", "-p", "no:cacheprovider")


@pytest.fixture
def project(pytester: pytest.Pytester, c_cache: Path) -> pytest.Pytester:
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_scale=PROJECT_TEST)
    return pytester


@pytest.mark.parametrize("value", ["0", "-1", "many"])
def test_a_bad_flag_value_is_a_usage_error_naming_the_flag(project: pytest.Pytester, value: str) -> None:
    result = project.runpytest(*INNER, "--autotune", f"--autotune-compile-workers={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--autotune-compile-workers={value}: expected a whole number of compile "
                                 "workers >= 1*"])


def test_a_bad_ini_value_is_a_usage_error_naming_the_ini_option(project: pytest.Pytester) -> None:
    project.makeini("[pytest]\nautotune_compile_workers = zero\n")
    result = project.runpytest(*INNER, "--autotune")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ini option autotune_compile_workers=zero: expected a whole number*"])


@needs_gcc
def test_pytest_autotune_with_two_compile_workers_tunes_and_locks(project: pytest.Pytester) -> None:
    report = project.path / "report.json"
    result = project.runpytest(*INNER, "--autotune", "--autotune-compile-workers=2",
                               f"--autotune-report={report}")
    result.assert_outcomes(passed=1)
    row = __import__("json").loads(report.read_text())["kernels"][0]
    assert row["evaluations"] == 8 and row["failures"] == {"compile": 4}
    assert row["params"]["MODE"] == 0
    gate = project.runpytest(*INNER)  # plain pytest gates the lock written with the pool
    gate.assert_outcomes(passed=1)


BROKEN_ARTEFACTS = """
import pytest
from pytest_autotune.backends import c_runner


@pytest.fixture(autouse=True)
def unloadable_libraries(monkeypatch, tmp_path):
    \"\"\"Every library the pool compiles ahead is replaced by one the loader refuses (as a cubin for a newer
    driver is refused on the device).\"\"\"
    real = c_runner.CCompileStage.compile

    def compile(self, params, processes):
        artefact = real(self, params, processes)
        if artefact.ok:
            bad = tmp_path / ("bad-%d.so" % len(list(tmp_path.iterdir())))
            bad.write_bytes(b"not a shared library")
            artefact.path = str(bad)
        return artefact

    monkeypatch.setattr(c_runner.CCompileStage, "compile", compile)
"""


@needs_gcc
def test_an_artefact_that_does_not_load_is_a_visible_fallback_in_the_report(project: pytest.Pytester) -> None:
    """A compiled-ahead artefact the device stage cannot load is recompiled inline and reported as a fallback, not
    recompiled silently with a load time."""
    project.makeconftest(BROKEN_ARTEFACTS)
    report = project.path / "report.json"
    result = project.runpytest(*INNER, "--autotune", "--autotune-compile-workers=2",
                               f"--autotune-report={report}")
    result.assert_outcomes(passed=1)  # compiled inline: tuning still works
    said = " ".join(line.strip() for line in result.outlines)  # wrapped at the terminal's width
    assert re.search(r"FALLBACK test_scale\.py::test_scale::scale: 4 compiled-ahead artefact\(s\) did not load "
                     r"\(0 did\) and were compiled inline; first at .*: cannot load the compiled library .*bad-",
                     said), result.outlines
    row = __import__("json").loads(report.read_text())["kernels"][0]
    assert row["compile_ahead"]["fallbacks"] == 4 and row["compile_ahead"]["loaded"] == 0
    assert "cannot load the compiled library" in row["compile_ahead"]["first_fallback"]["error"]


@needs_gcc
def test_artefacts_that_load_are_counted_and_no_fallback_is_reported(project: pytest.Pytester) -> None:
    report = project.path / "report.json"
    result = project.runpytest(*INNER, "--autotune", "--autotune-compile-workers=2", f"--autotune-report={report}")
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("FALLBACK*")
    ahead = __import__("json").loads(report.read_text())["kernels"][0]["compile_ahead"]
    assert ahead["fallbacks"] == 0 and ahead["loaded"] == 4  # the 4 MODE=0 configurations; MODE=2 fails to compile


@pytest.mark.gpu
def test_gpu_cupy_runner_loads_the_cubins_the_pool_compiled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a real GPU: the device stage loads every cubin NVRTC built ahead, and the results verify."""
    monkeypatch.setenv("PYTEST_AUTOTUNE_CACHE_DIR", str(tmp_path))
    n = 1 << 16
    a, b = np.random.rand(n).astype(np.float32), np.random.rand(n).astype(np.float32)
    source = ("template <int BS> __global__ void vadd(float *c, const float *a, const float *b, int n) {\n"
              "    int i = blockIdx.x * BS + threadIdx.x;\n    if (i < n) c[i] = a[i] + b[i];\n}\n")
    spec = KernelSpec(source, "vadd<block_size_x>", n, [np.zeros(n, np.float32), a, b, np.int32(n)],
                      expected=[a + b, None, None, None], lang="cuda")
    with make_runner(spec, runner="cupy", measure=FAST) as runner:
        result = tune(runner, {"block_size_x": [32, 64, 128, 256, 512, 1024, 2048]}, strategy="brute_force",
                      compile_workers=2, confirm_rounds=0)
    records = result.history.records
    assert all("load_s" in r.measurement.timings for r in records if r.measurement.ok)
    too_big = next(r for r in records if r.params["block_size_x"] == 2048)
    assert too_big.measurement.failure is FailureKind.INVALID  # decided by the compile stage, before the device


@pytest.mark.skipif(sys.platform != "linux", reason="process groups and SIGSTOP as on Linux")
def test_a_compilers_time_out_does_not_count_the_time_it_was_stopped() -> None:
    processes = CompilerProcesses()
    outcome: dict[str, Any] = {}

    def compile_for_a_while() -> None:
        try:
            # generous margins: starting `sh` alone took over 0.3 s at load 15 on the 2-core CI host
            outcome["done"] = processes.run(["sh", "-c", "sleep 0.3; echo built"], timeout=2.0).stdout
        except subprocess.TimeoutExpired as exc:
            outcome["timeout"] = exc

    worker = threading.Thread(target=compile_for_a_while)
    worker.start()
    deadline = time.monotonic() + 5
    while processes.running == 0 and time.monotonic() < deadline:
        time.sleep(0.005)
    with processes.paused_window():
        time.sleep(2.5)  # longer than the time-out: stopped time must not count
    worker.join(10)
    assert outcome == {"done": "built\n"}
    with pytest.raises(subprocess.TimeoutExpired):
        processes.run(["sleep", "5"], timeout=0.2)  # a compiler that really hangs still times out
    assert processes.running == 0
