"""One tuning over two devices of a real local Ray cluster: a C kernel and a recorded space end to end, an actor
killed mid-tune, Ctrl-C, and the plugin's --autotune-ray.

The cluster is one ``ray.init`` per module with two CPUs and two declared devices (``autotune_device``), as
the documentation's set-up declares them. Where the test extra installs Ray (Linux x86-64) or under CI a
missing Ray fails these tests instead of skipping them.
"""
from __future__ import annotations

import json
import os
import platform
import signal
import sys
import time

import numpy as np
import pytest

from pytest_autotune import tune
from pytest_autotune.engine.cluster import RESOURCE, ClusterError, RayFleet
from pytest_autotune.results import FailureKind
from pytest_autotune.runners import KernelSpec, make_runner
from pytest_autotune.simulation.replay import ReplayRunner


def _ray_or_fail():
    try:
        import ray
    except ImportError:
        why = "needs Ray (pip install -e '.[test]' installs it)"
        if (sys.platform.startswith("linux") and platform.machine() == "x86_64") or os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    return ray


@pytest.fixture(scope="module")
def cluster():
    ray = _ray_or_fail()
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, resources={RESOURCE: 2}, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}})
    yield ray
    ray.shutdown()


def cluster_model() -> str:
    from pytest_autotune.execution.device import detect_cpu_device

    return detect_cpu_device().model


def _freed(ray, timeout: float = 20.0) -> bool:
    """Both devices free again (the fleet's actors killed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ray.available_resources().get(RESOURCE, 0) == 2:
            return True
        time.sleep(0.2)
    return False


VADD = """
void vadd(float *c, const float *a, const float *b, int n) {
    for (int i = 0; i < n; i += STEP)
        for (int j = 0; j < STEP && i + j < n; ++j) c[i + j] = a[i + j] + b[i + j];
}
"""

NAP = """
#include <unistd.h>
void nap(float *out, int n) { usleep(NAP_US); out[0] = (float) n; }
"""


def _vadd_runner():
    n = 4096
    rng = np.random.default_rng(0)
    a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    spec = KernelSpec(VADD, "vadd", n, [np.zeros_like(a), a, b, np.int32(n)], expected=[a + b, None, None, None],
                      lang="c")
    return make_runner(spec)


def _nap_runner():
    out = np.zeros(1, dtype=np.float32)
    spec = KernelSpec(NAP, "nap", 1, [out, np.int32(3)], expected=[np.array([3.0], np.float32), None], lang="c")
    return make_runner(spec, measure={"warmup": 0, "min_iterations": 2, "max_iterations": 2})


def test_a_c_kernel_tunes_on_both_devices(cluster):
    runner = _vadd_runner()
    try:
        result = tune(runner, params={"STEP": [1, 2, 4, 8, 16, 32], "U": [1, 2]}, budget=10, cluster="ray", seed=1)
    finally:
        runner.close()
    assert result.evaluations == 10 and all(r.measurement.ok for r in result.history.records)
    used = {r.measurement.extra["cluster_device"] for r in result.history.records}
    assert len(used) == 2  # both devices timed configurations
    info = result.extra["cluster"]
    assert info["devices"] == 2 and info["lost"] == [] and info["resource"] == RESOURCE
    assert result.device.kind == "cpu" and result.outputs is not None
    np.testing.assert_allclose(result.outputs[0], result.outputs[1] + result.outputs[2])  # verified, fresh outputs
    assert result.confirmation  # finalists re-timed on one device
    assert _freed(cluster)


def test_a_recorded_space_end_to_end(cluster, spaces_dir):
    runner = ReplayRunner(spaces_dir / "kerneltuner" / "pnpoly_RTX_3090.json.gz")
    result = tune(runner, space=runner.recorded.space, budget=40, cluster="ray", seed=0)
    records = result.history.records
    assert len(records) == 40 and len({r.row for r in records}) == 40
    for r in records:  # every fully timed answer is the recording's, whichever device gave it
        if r.eligible:
            assert r.value == pytest.approx(float(runner.recorded.times[r.row]))
    # the winner: the finalist (the best by recorded value) with the lowest median of its re-timed runs; the
    # recording's value is its runs' mean, so the order can differ from the values', and which 40 rows a
    # cluster's search meets depends on the devices' timing
    finalists = sorted((r for r in records if r.eligible), key=lambda r: r.value)[:len(result.confirmation)]
    medians = {repr(r.params): np.median(result.confirmed_samples(r.params)) for r in finalists}
    assert len(finalists) >= 2 and medians[repr(result.params)] == min(medians.values())
    for r in finalists:  # re-timed on one device, round after round: the recording's runs again
        recorded, got = list(runner.recorded.measurement(r.row, r.params).samples), result.confirmed_samples(r.params)
        assert len(got) % len(recorded) == 0 and got == pytest.approx(recorded * (len(got) // len(recorded)))
    assert len({r.measurement.extra["cluster_device"] for r in records}) == 2
    assert _freed(cluster)


def test_a_killed_device_costs_a_retry_never_an_evaluation(cluster):
    """Kill the process of a device actor while it times a configuration: the evaluation is retried on the
    other device and recorded; the freed device is taken up again by a new actor (a device that joins)."""
    runner = _nap_runner()
    killed: list[str] = []

    killed_after: list[int] = []

    def on_record(record, evaluator):
        # from the second record on, at the first moment a device is timing something (on a loaded machine the
        # next candidates may still be compiling when a record arrives)
        if len(evaluator.history.records) >= 2 and not killed:
            busy = evaluator.fleet.running()
            if busy:
                name, params = busy[0]
                killed.append(name)
                killed_after.append(len(evaluator.history.records))
                os.kill(int(name.rsplit(":", 1)[1]), signal.SIGKILL)

    try:
        result = tune(runner, params={"NAP_US": list(range(20_000, 60_001, 2_500))}, budget=16, cluster="ray",
                      strategy="random", seed=3, on_record=on_record, confirm_rounds=1)
    finally:
        runner.close()
    records = result.history.records
    assert killed, "no device was ever timing a configuration when a record arrived"
    assert len(records) == 16 and len({r.row for r in records}) == 16  # none lost, none twice
    info = result.extra["cluster"]
    assert len(info["lost"]) == 1 and killed[0] in info["lost"][0] and info["retried"] >= 1
    assert all(r.measurement.ok for r in records)  # the retry on another device succeeded
    assert killed[0] not in {r.measurement.extra["cluster_device"] for r in records[killed_after[0]:]}
    assert _freed(cluster)


def test_a_device_that_joins_mid_run_is_used(cluster):
    """One device is held by someone else when the tuning starts; freed mid-run (as a node joining), the fleet
    starts an actor on it and times configurations there."""

    @cluster.remote(num_cpus=0, resources={RESOURCE: 1})
    class Holder:
        def ping(self) -> int:
            return 1

    holder = Holder.remote()
    cluster.get(holder.ping.remote())
    runner = _nap_runner()

    def on_record(record, evaluator):
        if len(evaluator.history.records) == 1:
            assert evaluator.fleet.devices == 1
            cluster.kill(holder)
        elif evaluator.fleet.devices == 1 and len(evaluator.history.records) <= 20:
            # a loaded machine starts the new actor's process slowly (the run once ended before it answered):
            # the search waits a moment per record, so the device still joins mid-run, with evaluations left
            time.sleep(1.0)

    try:
        result = tune(runner, params={"NAP_US": list(range(40_000, 100_001, 1_500))}, budget=40, cluster="ray",
                      strategy="random", seed=5, on_record=on_record, confirm_rounds=1)
    finally:
        runner.close()
    info = result.extra["cluster"]
    assert info["joined"] >= 1 and info["devices"] == 2
    assert len({r.measurement.extra["cluster_device"] for r in result.history.records}) == 2
    assert _freed(cluster)


def test_ctrl_c_frees_the_devices(cluster):
    runner = _nap_runner()

    def on_record(record, evaluator):
        if len(evaluator.history.records) == 3:
            raise KeyboardInterrupt  # what Ctrl-C raises in the driver

    try:
        with pytest.raises(KeyboardInterrupt):
            tune(runner, params={"NAP_US": list(range(20_000, 60_001, 5_000))}, budget=9, cluster="ray",
                 strategy="random", on_record=on_record)
    finally:
        runner.close()
    assert _freed(cluster)  # no actor left holding a device


def test_a_cluster_without_the_declared_resource_is_refused(cluster):
    runner = _vadd_runner()
    from pytest_autotune.engine.cluster import ClusterSpec

    try:
        with pytest.raises(ClusterError, match=r"no 'gpu_box' resource.*ray start --resources"):
            RayFleet(runner, ClusterSpec(resource="gpu_box"))
    finally:
        runner.close()


PLUGIN_TEST = '''
import numpy as np
import pytest

CODE = """
void scale(float *out, const float *x, int n) {
    for (int i = 0; i < n; i += STEP) for (int j = 0; j < STEP && i + j < n; ++j) out[i + j] = 2.0f * x[i + j];
}
"""

@pytest.mark.tune(params={"STEP": [1, 2, 4, 8, 16, 32, 64]}, budget=7, seed=0)
def test_scale(autotune):
    n = 2048
    x = np.arange(n, dtype=np.float32)
    result = autotune.kernel(CODE, "scale", n, [np.zeros_like(x), x, np.int32(n)], lang="c",
                             expected=[2 * x, None, None])
    assert result.params["STEP"] in (1, 2, 4, 8, 16, 32, 64)
'''


def test_the_plugin_tunes_on_the_cluster_and_writes_the_lock_once(cluster, pytester):
    pytester.makepyfile(test_scale=PLUGIN_TEST)
    result = pytester.runpytest_inprocess("--autotune", "--autotune-ray", "-p", "no:cacheprovider",
                                          "--autotune-report=ray.json")
    result.assert_outcomes(passed=1)
    locks = list((pytester.path / "autotune.lock").glob("*.json"))
    assert len(locks) == 1 and "test_scale" in locks[0].read_text()
    entry = json.loads(locks[0].read_text())
    assert "cluster" not in locks[0].name and cluster_model() in json.dumps(entry)  # the devices' model, once
    # the summary and the JSON report say it ran on Ray (issue 40): devices, nodes, devices lost
    (row,) = json.loads((pytester.path / "ray.json").read_text())["kernels"]
    assert row["ray_devices"] == 2 and row["ray_lost"] == [] and row["ray_refused"] == [], row
    assert len(row["ray_nodes"]) == 1 and isinstance(row["ray_retried"], int) and "cluster" not in row
    summary = " ".join(line.strip() for line in result.outlines)  # a line wider than the terminal wraps
    assert f"ray: test_scale.py::test_scale::scale: 2 device(s) on 1 node(s) ({row['ray_nodes'][0]}), 0 lost" \
        in summary, result.outlines
    assert _freed(cluster)
