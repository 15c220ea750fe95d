"""The static gate end to end: a CUDA kernel tuned through the CuPy stand-in (real NVRTC, real nvdisasm), then
gated by plain pytest on a machine without CuPy: identical, comment-only, worse (local memory), changed, accepted,
warned; and the static baseline recorded by ``--autotune-compile --autotune-record-static``."""
from __future__ import annotations

import json
import sys

import pytest

from tests.plugin.test_plugin_e2e import c_cache, failure_text, project, run, run_report, the_lockfile  # noqa: F401

pytestmark = pytest.mark.slow

KEY = "test_vadd.py::test_vadd::vadd"

BASE = r"""
extern "C" __global__ void vadd(float *c, const float *a, const float *b, int n) {
    int i = blockIdx.x * block_size_x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
"""
COMMENTED = BASE.replace("    int i =", "    /* one thread per element: a comment changes no instruction */\n    int i =")
# a per-thread array indexed at run time lives in local memory: a static regression on any GPU
LOCAL_ARRAY = BASE.replace("    if (i < n) c[i] = a[i] + b[i];", """    float tmp[64];
    for (int w = 0; w < 64; w++) tmp[w] = a[(i + w) % n];
    if (i < n) c[i] = tmp[(i * 7) % 64] + b[i];""")
SCALED = BASE.replace("a[i] + b[i]", "a[i] * 3.0f + b[i]")  # other code, same resources: changed, not worse

TEST = '''
import numpy as np
import pytest

N = 4096


@pytest.mark.tune(params={"block_size_x": [128, 256]}, strategy="brute_force")
def test_vadd(autotune):
    a, b = np.ones(N, np.float32), np.ones(N, np.float32)
    c = np.zeros(N, np.float32)
    result = autotune.kernel("vadd.cu", "vadd", N, [c, a, b, np.int32(N)], expected=[a + b, None, None, None],
                             isolate=False)
    assert result.params["block_size_x"] in (128, 256)
'''


def _static_tools() -> None:
    from pytest_autotune.backends.nvrtc import nvrtc_unavailable_reason
    from pytest_autotune.errors import BackendUnavailable
    from pytest_autotune.static.disasm import find_nvdisasm

    reason = nvrtc_unavailable_reason()
    if reason:
        pytest.skip(reason)
    try:
        find_nvdisasm()
    except BackendUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture
def tuned(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """vadd tuned and locked on the stand-in's H100 (sm_90), then the stand-in removed: a CI runner without CuPy."""
    import fake_cuda

    _static_tools()
    _, modules = fake_cuda.install_cupy(monkeypatch)
    project.makefile(".cu", vadd=BASE)
    project.makepyfile(test_vadd=TEST)
    run(project, "--autotune").assert_outcomes(passed=1)
    for name in modules:
        monkeypatch.delitem(sys.modules, name)
    return project


def _entry(project: pytest.Pytester) -> dict:
    return the_lockfile(project)[1]["entries"][KEY]


def test_a_gpu_entry_records_the_winners_static_profile(tuned: pytest.Pytester) -> None:
    static = _entry(tuned)["static"]
    assert static["arch"] == "sm_90" and static["fingerprint"].startswith("sha256:")
    assert static["registers"] > 0 and static["threads"] in (128, 256)
    assert static["instructions"]["global_load"] == 2 and static["instructions"]["global_store"] == 1
    assert 0 < static["occupancy"] <= 1
    assert {"compiler", "nvdisasm"} <= set(static["toolchain"])


def test_without_the_gpu_the_binary_gates_the_kernel(tuned: pytest.Pytester) -> None:
    result, rows = run_report(tuned)
    result.assert_outcomes(passed=1)
    row = rows[KEY]
    assert (row["mode"], row["status"], row["arch"]) == ("static", "pass", "sm_90"), row
    assert "binary identical to the lock's" in row["message"]
    assert row["static"]["verdict"] == "identical"
    assert "vadd@sm_90" in result.stdout.str()  # the summary names the architecture

    tuned.makefile(".cu", vadd=COMMENTED)  # a comment: the same machine code
    result, rows = run_report(tuned)
    result.assert_outcomes(passed=1)
    assert rows[KEY]["status"] == "pass", rows[KEY]


def test_a_binary_worse_than_the_locks_fails_and_names_what_got_worse(tuned: pytest.Pytester) -> None:
    tuned.makefile(".cu", vadd=LOCAL_ARRAY)
    result, rows = run_report(tuned)
    result.assert_outcomes(failed=1)
    row = rows[KEY]
    assert (row["mode"], row["status"]) == ("static", "WORSE"), row
    assert "local memory 0 ->" in row["note"], row["note"]
    out = failure_text(result)
    assert "REGRESSION (static)" in out and "--autotune-accept-static" in out, out
    assert "Traceback" not in out and "pytest_autotune/" not in out

    result, rows = run_report(tuned, "--autotune-static=warn")  # reported, never failed
    result.assert_outcomes(passed=1)
    assert rows[KEY]["status"] == "WORSE"


def test_a_changed_binary_passes_unless_every_change_fails(tuned: pytest.Pytester) -> None:
    tuned.makefile(".cu", vadd=SCALED)
    result, rows = run_report(tuned)
    result.assert_outcomes(passed=1)
    row = rows[KEY]
    assert row["status"] == "changed" and "needs a GPU run to time it" in row["message"], row
    run(tuned, "--autotune-static=fail-on-change").assert_outcomes(failed=1)
    run(tuned, "--autotune-static=off").assert_outcomes(skipped=1)  # off: not gated, as before


def test_accepting_a_reviewed_change_keeps_the_timing_and_names_the_timed_binary(tuned: pytest.Pytester) -> None:
    before = _entry(tuned)
    tuned.makefile(".cu", vadd=LOCAL_ARRAY)
    result, rows = run_report(tuned, "--autotune-accept-static")
    result.assert_outcomes(passed=1)
    assert rows[KEY]["status"] == "accepted", rows[KEY]
    after = _entry(tuned)
    assert after["samples"] == before["samples"] and after["params"] == before["params"]
    assert after["static"]["fingerprint"] != before["static"]["fingerprint"]
    assert after["static_accepted"]["timed_fingerprint"] == before["static"]["fingerprint"]
    result, rows = run_report(tuned)  # the accepted binary now passes, said to be timed on an earlier one
    result.assert_outcomes(passed=1)
    assert rows[KEY]["status"] == "pass" and "earlier binary" in rows[KEY]["message"], rows[KEY]


def test_a_static_baseline_gates_a_kernel_never_tuned_on_a_gpu(project: pytest.Pytester) -> None:
    _static_tools()
    project.makefile(".cu", vadd=BASE)
    project.makepyfile(test_vadd=TEST)
    run(project).assert_outcomes(skipped=1)  # no GPU lock, no baseline: not gated, as before
    run(project, "--autotune-compile=sm_90", "--autotune-record-static").assert_outcomes(passed=1)
    baseline = json.loads((project.path / "autotune.lock" / "static" / "sm_90.json").read_text())
    entry = baseline["entries"][KEY]
    assert entry["origin"] == "first configuration" and entry["static"]["arch"] == "sm_90"
    result, rows = run_report(project)
    result.assert_outcomes(passed=1)
    assert (rows[KEY]["mode"], rows[KEY]["status"]) == ("static", "pass"), rows[KEY]
    project.makefile(".cu", vadd=LOCAL_ARRAY)
    result, rows = run_report(project)
    result.assert_outcomes(failed=1)
    assert rows[KEY]["status"] == "WORSE" and "static baseline" in failure_text(result)


def test_the_timed_gate_on_the_gpu_shows_the_static_evidence(project: pytest.Pytester,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A slowdown with the lock's very binary and toolchain is the machine, the data or the driver: the timed
    gate's message says so (the stand-in's kernel made 3x slower, the code unchanged)."""
    import fake_cuda

    _static_tools()
    state, _ = fake_cuda.install_cupy(monkeypatch)
    project.makefile(".cu", vadd=BASE)
    project.makepyfile(test_vadd=TEST)
    run(project, "--autotune").assert_outcomes(passed=1)
    cuda = sys.modules["cupy"].cuda
    monkeypatch.setattr(cuda, "get_elapsed_time", lambda start, end: 0.75 if state.launches[-1][0][0] in (16, 32)
                        else 0.25)
    result, rows = run_report(project)
    result.assert_outcomes(failed=1)
    assert rows[KEY]["mode"] == "gate" and rows[KEY]["static"]["verdict"] == "identical", rows[KEY]
    assert "binary and toolchain identical to the lock's" in failure_text(result)


def test_a_gpu_job_without_its_gpu_fails_even_where_the_binary_would_pass(tuned: pytest.Pytester) -> None:
    result, rows = run_report(tuned, "--autotune-require-device")
    result.assert_outcomes(failed=1)
    assert rows[KEY]["status"] == "no device" and "--autotune-require-device" in failure_text(result)
