"""The C runner end to end: compile, run, time, verify; every fault recorded, tuning goes on."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from pytest_autotune.measure.timing import MeasureOptions
from pytest_autotune.results import FailureKind
from pytest_autotune.runners import (
    RUNNERS,
    BackendUnavailable,
    KernelSpec,
    SpecError,
    backend_available,
    infer_runner,
    make_runner,
    register_runner,
)
from pytest_autotune.runners.base import Runner
from pytest_autotune.backends.c_runner import CRunner

pytestmark = pytest.mark.skipif(not backend_available("c"), reason="needs gcc")

N = 1 << 14
FAST = MeasureOptions(warmup=1, min_iterations=5, max_iterations=5, watchdog_s=5.0)

VADD = r"""
/* c = a + b, WPT elements per outer step, inner loop unrolled UNROLL times */
#define PRAGMA(x) _Pragma(#x)
#define UNROLLED(n) PRAGMA(GCC unroll n)
void vadd(float *c, const float *a, const float *b, int n) {
    for (int i = 0; i < n; i += WPT) {
        UNROLLED(UNROLL)
        for (int j = 0; j < WPT; j++) {
            if (i + j < n) c[i + j] = a[i + j] + b[i + j];
        }
    }
}
"""

FAULTY = r"""
#include <stdlib.h>
void vadd(float *c, const float *a, const float *b, int n) {
#if MODE == 1           /* wrong output */
    for (int i = 0; i < n; i++) c[i] = a[i] - b[i];
    return;
#elif MODE == 2         /* does not compile */
    int x = undeclared_symbol + ;
#elif MODE == 3         /* segfault */
    volatile float *p = (float *)0;
    p[0] = 1.0f;
#elif MODE == 4         /* never returns */
    volatile int spin = 0;
    for (;;) spin++;
#elif MODE == 5         /* trap */
    abort();
#endif
    for (int i = 0; i < n; i++) c[i] = a[i] + b[i];
}
"""


def vadd_spec(source=VADD, name="vadd", **kw):
    rng = np.random.default_rng(0)
    a = rng.random(N, dtype=np.float32)
    b = rng.random(N, dtype=np.float32)
    c = np.zeros(N, np.float32)
    return KernelSpec(source, name, N, [c, a, b, np.int32(N)], expected=[a + b, None, None, None], **kw)


@pytest.fixture
def cache(tmp_path):
    return tmp_path / "cache"


def test_vector_add_compiles_runs_times_and_verifies(cache):
    spec = vadd_spec()
    with make_runner(spec, cache_dir=cache, measure=FAST) as runner:
        assert isinstance(runner, CRunner) and runner.name == "c"
        assert isinstance(runner, Runner)
        assert runner.device().kind == "cpu" and runner.device().slug.startswith("cpu-")
        assert runner.constants()["cpu_count"] >= 1
        results = [runner.evaluate({"WPT": w, "UNROLL": u}) for w, u in [(1, 1), (4, 2), (8, 8)]]
        for m in results:
            assert m.ok, m.detail
            assert m.failure is None and m.value > 0
            assert len(m.samples) == 5  # exactly min=max iterations, warm-up not included
            assert m.value == pytest.approx(float(np.median(m.samples)))
            assert m.extra["stats"]["n"] == 5 and m.extra["objective"] == "median"
            assert m.extra["cache_hit"] is False
            for key in ("compile_s", "verify_s", "bench_s", "total_s", "wall_s"):
                assert m.timings[key] >= 0
        assert runner.worker_starts == 1  # one worker reused for every configuration


def test_outputs_of_a_configuration_are_returned_on_request(cache):
    spec = vadd_spec()
    with make_runner(spec, cache_dir=cache, measure=FAST, isolate=False) as runner:
        m = runner.evaluate({"WPT": 2, "UNROLL": 2}, keep_outputs=True)
        assert m.ok, m.detail
        outputs = m.extra["outputs"]
        assert len(outputs) == 4
        np.testing.assert_array_equal(outputs[0], spec.expected[0])
        assert outputs[3] == N
        assert "outputs" not in runner.evaluate({"WPT": 2, "UNROLL": 2}).extra
    assert not spec.args[0].any()  # the user's arrays are never written


def test_objective_and_measure_options_are_honoured(cache):
    with make_runner(vadd_spec(), cache_dir=cache, isolate=False,
                     measure={"min_iterations": 3, "max_iterations": 3, "objective": "min"}) as runner:
        m = runner.evaluate({"WPT": 1, "UNROLL": 1})
        assert m.ok and len(m.samples) == 3 and m.value == min(m.samples)


def test_every_fault_is_recorded_and_the_next_configuration_still_measures(cache):
    spec = vadd_spec(FAULTY)
    options = FAST.with_(watchdog_s=1.0)
    with make_runner(spec, cache_dir=cache, measure=options) as runner:

        def good():
            m = runner.evaluate({"MODE": 0})
            assert m.ok, m.detail
            assert len(m.samples) == 5
            return m

        good()
        wrong = runner.evaluate({"MODE": 1})
        assert wrong.failure is FailureKind.WRONG_OUTPUT and wrong.value is None
        assert "argument 0" in wrong.detail and "largest error" in wrong.detail
        good()

        broken = runner.evaluate({"MODE": 2})
        assert broken.failure is FailureKind.COMPILE
        assert "undeclared_symbol" in broken.detail and "error" in broken.detail
        assert "kernel.c:" in broken.detail  # #line keeps the user's file name and lines
        good()

        starts = runner.worker_starts
        crash = runner.evaluate({"MODE": 3})
        assert crash.failure is FailureKind.RUNTIME
        assert "SIGSEGV" in crash.detail
        good()
        assert runner.worker_starts == starts + 1  # restarted once, after the crash

        hang = runner.evaluate({"MODE": 4})
        assert hang.failure is FailureKind.TIMEOUT
        assert "watchdog" in hang.detail
        good()

        trap = runner.evaluate({"MODE": 5})
        assert trap.failure is FailureKind.RUNTIME and "SIGABRT" in trap.detail
        good()
        assert runner.worker_starts == starts + 3


def test_verify_callable_gets_a_scalar_reference_as_given(cache):
    """A reduction's reference is its sum (Kernel Tuner's ``answer=[numpy.sum(x), None, None]``): the verify
    callable decides; the sum of the wrong output fails, the right one passes."""
    a = np.arange(N, dtype=np.float32) % 7
    b = np.ones(N, np.float32)

    def verify(expected, outputs):
        assert np.isclose(outputs[0].sum(dtype=np.float64), expected[0]), f"sum {outputs[0].sum()} != {expected[0]}"

    spec = KernelSpec(FAULTY, "vadd", N, [np.zeros(N, np.float32), a, b, np.int32(N)],
                      expected=[np.sum(a + b, dtype=np.float64), None, None, None], verify=verify)
    with make_runner(spec, cache_dir=cache, measure=FAST, isolate=False) as runner:
        good = runner.evaluate({"MODE": 0})
        wrong = runner.evaluate({"MODE": 1})
    assert good.ok, good.detail
    assert wrong.failure is FailureKind.WRONG_OUTPUT and "verify callable failed: sum" in wrong.detail


def test_compile_cache_hit_on_second_use(cache):
    spec = vadd_spec()
    params = {"WPT": 4, "UNROLL": 4}
    with make_runner(spec, cache_dir=cache, measure=FAST, isolate=False) as runner:
        first = runner.evaluate(params)
    with make_runner(spec, cache_dir=cache, measure=FAST, isolate=False) as runner:
        second = runner.evaluate(params)
        other = runner.evaluate({"WPT": 4, "UNROLL": 2})
    assert first.ok and second.ok and other.ok
    assert first.extra["cache_hit"] is False
    assert second.extra["cache_hit"] is True
    assert other.extra["cache_hit"] is False  # different parameters, different library
    assert second.timings["compile_s"] < first.timings["compile_s"]
    libraries = sorted(cache.glob("*.so"))
    sources = sorted(cache.glob("*.c"))
    assert len(libraries) == 2 and len(sources) == 2
    texts = [s.read_text() for s in sources]
    assert any("#define UNROLL 4\n#define WPT 4\n" in t for t in texts)  # the exact source is kept


def test_template_kernel_in_cpp_file(tmp_path, cache):
    path = tmp_path / "vadd.cpp"
    path.write_text(textwrap.dedent(r"""
        // no extern "C": the runner takes &vadd<...> through an extern "C" accessor
        template <int WPT, typename T>
        void vadd(T *c, const T *a, const T *b, int n) {
            for (int i = 0; i < n; i += WPT)
                for (int j = 0; j < WPT && i + j < n; j++) c[i + j] = a[i + j] + b[i + j];
        }
    """))
    spec = vadd_spec(path, "vadd<WPT, float>")
    assert spec.lang == "c++"
    with make_runner(spec, cache_dir=cache, measure=FAST) as runner:
        for wpt in (1, 3):
            m = runner.evaluate({"WPT": wpt})
            assert m.ok, m.detail
            assert m.extra["kernel_name"] == f"vadd<{wpt}, float>"
        bad = runner.evaluate({"WPT": "no_such_thing"})
        assert bad.failure is FailureKind.COMPILE


def test_scalars_are_passed_by_value_with_their_c_type(cache):
    source = r"""
    void axpb(double *out, float a, double b, long long k, unsigned char flag, int n) {
        for (int i = 0; i < n; i++) out[i] = a * i + b + (double)k + flag;
    }
    """
    n = 16
    out = np.zeros(n, np.float64)
    expected = np.float32(0.5) * np.arange(n) + 2.25 + 2.0**40 + 3
    spec = KernelSpec(
        source, "axpb", n,
        [out, np.float32(0.5), np.float64(2.25), np.int64(2**40), np.uint8(3), np.int32(n)],
        expected=[expected.astype(np.float64), None, None, None, None, None],
    )
    with make_runner(spec, cache_dir=cache, measure=FAST, isolate=False) as runner:
        m = runner.evaluate({})
        assert m.ok, m.detail


def test_in_process_mode_matches_isolated(cache):
    spec = vadd_spec()
    params = {"WPT": 2, "UNROLL": 1}
    with make_runner(spec, cache_dir=cache, measure=FAST, isolate=False) as local:
        a = local.evaluate(params, keep_outputs=True)
        assert local.worker_starts == 0
    with make_runner(spec, cache_dir=cache, measure=FAST, isolate=True) as isolated:
        b = isolated.evaluate(params, keep_outputs=True)
    assert a.ok and b.ok
    np.testing.assert_array_equal(a.extra["outputs"][0], b.extra["outputs"][0])


def test_close_stops_the_worker(cache):
    runner = make_runner(vadd_spec(), cache_dir=cache, measure=FAST)
    pid = runner._impl.pid
    assert runner._impl.alive
    runner.close()
    assert runner._impl.pid is None and not runner._impl.alive
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # exited and reaped
    runner.close()  # idempotent


def test_worker_is_cleaned_up_at_interpreter_exit(tmp_path):
    script = tmp_path / "leave_open.py"
    script.write_text(textwrap.dedent(f"""
        import numpy as np
        from pytest_autotune.runners import KernelSpec, make_runner
        if __name__ == "__main__":
            spec = KernelSpec("void f(float *x, int n) {{ }}", "f", 4, [np.zeros(4, np.float32), np.int32(4)])
            runner = make_runner(spec, cache_dir={str(tmp_path / 'c')!r})
            print(runner._impl.pid, flush=True)
            # no close(): the atexit hook must stop the worker
    """))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    pid = int(out.stdout.strip())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_runner_selection_and_errors(cache, tmp_path):
    assert infer_runner(vadd_spec()) == "c"
    assert infer_runner(lambda params: None) == "callable"
    with pytest.raises(SpecError, match="unknown runner"):
        make_runner(vadd_spec(), runner="no-such-runner")
    cuda = KernelSpec("__global__ void k(float *x) { }", "k", 4, [np.zeros(4, np.float32)])
    with pytest.raises(SpecError, match="C or C\\+\\+"):
        make_runner(cuda, runner="c", cache_dir=cache)
    if not backend_available("cupy") and not backend_available("pycuda"):
        with pytest.raises(BackendUnavailable, match="CuPy"):
            make_runner(cuda)
    if not backend_available("cupy"):
        with pytest.raises(BackendUnavailable):
            make_runner(cuda, runner="cupy")
    with pytest.raises(BackendUnavailable):
        make_runner(vadd_spec(), cache_dir=cache, compiler="no-such-compiler-xyz")
    with pytest.raises(SpecError, match="C\\+\\+"):
        make_runner(KernelSpec("void f(int n) {}", "f<N>", 1, [np.int32(1)], lang="c"), cache_dir=cache)


def test_registry_accepts_new_runners():
    made = {}

    def fake_factory(spec, **options):
        made["call"] = (spec, options)
        return "fake-runner"

    register_runner("fake_replay", fake_factory)
    try:
        assert make_runner("spec", runner="fake_replay", path="x.json") == "fake-runner"
        assert made["call"] == ("spec", {"path": "x.json"})
        with pytest.raises(ValueError):
            register_runner("fake_replay", fake_factory)
    finally:
        RUNNERS.pop("fake_replay")


def test_unpicklable_verify_callable_runs_in_the_calling_process(cache):
    spec = vadd_spec()
    calls = []
    threshold = {"max_err": 0.0}

    def close_enough(expected, outputs):  # a closure: cannot be pickled into the worker
        calls.append(1)
        return float(np.abs(outputs[0] - expected[0]).max()) <= threshold["max_err"]

    spec.verify = close_enough
    with make_runner(spec, cache_dir=cache, measure=FAST) as runner:
        assert runner.isolate
        good = runner.evaluate({"WPT": 2, "UNROLL": 1})
        assert good.ok, good.detail
        assert "outputs" not in good.extra  # transferred for verification only
        kept = runner.evaluate({"WPT": 2, "UNROLL": 1}, keep_outputs=True)
        assert kept.ok and kept.extra["outputs"][0].shape == (N,)
        threshold["max_err"] = -1.0  # now nothing passes
        rejected = runner.evaluate({"WPT": 2, "UNROLL": 1})
        assert rejected.failure is FailureKind.WRONG_OUTPUT and "returned False" in rejected.detail
    assert len(calls) == 3


def test_worker_sees_the_callers_current_environment(tmp_path, monkeypatch):
    # the worker applies the environment of the moment it starts, not one of an earlier runner
    make_runner(vadd_spec(), cache_dir=tmp_path / "first", measure=FAST).close()
    monkeypatch.setenv("PYTEST_AUTOTUNE_CACHE_DIR", str(tmp_path / "from-env"))
    with make_runner(vadd_spec(), measure=FAST) as runner:
        assert runner.evaluate({"WPT": 1, "UNROLL": 1}).ok
    assert len(list((tmp_path / "from-env" / "c").glob("*.so"))) == 1
