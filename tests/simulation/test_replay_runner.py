"""The replay runner: recorded measurements behind the ordinary Runner protocol."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from pytest_autotune.datasets import default_spaces_root, load_dataset
from pytest_autotune.results import FailureKind, Measurement
from pytest_autotune.runners.base import Runner, supports_profiling
from pytest_autotune.execution.device import DeviceInfo
from pytest_autotune.errors import BackendUnavailable, SpecError
from pytest_autotune.simulation.replay import MIN_NOISE_FACTOR, ReplayError, ReplayRunner


def write_json(path: Path, doc) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


@pytest.fixture
def kt_path(tmp_path) -> Path:
    """A Kernel Tuner cache: a in {1, 2, 4}, mode in {x, y}; (2, y) failed to compile."""
    cache = {}
    for a in (1, 2, 4):
        for mode in ("x", "y"):
            t = 10.0 * a + (1.0 if mode == "y" else 0.0)
            entry = {"a": a, "mode": mode, "time": t, "times": [t - 1, t, t + 1]}
            if (a, mode) == (2, "y"):
                entry = {"a": a, "mode": mode, "time": "CompilationFailedConfig"}
            cache[f"{a},{mode}"] = entry
    return write_json(tmp_path / "toy_GPU.json.gz", {
        "device_name": "NVIDIA Toy 9000", "kernel_name": "toy", "tune_params_keys": ["a", "mode"],
        "tune_params": {"a": [1, 2, 4], "mode": ["x", "y"]}, "objective": "time", "cache": cache})


@pytest.fixture
def ktt_path(tmp_path) -> Path:
    """A KTT output with counters: BX in {8, 16}; BX=16 failed."""
    results = []
    for bx in (8, 16):
        ok = bx == 8
        crs = [{"Duration": 2500.0, "KernelFunction": "k", "ProfilingData": {"Counters": [
            {"Name": "dram__bytes.sum", "Type": "Double", "Value": 123.0},
            {"Name": "sm__throughput.pct", "Type": "Double", "Value": 45.5}]}}] if ok else []
        results.append({"Configuration": [{"Name": "BX", "Value": bx, "ValueType": "UnsignedInt"}],
                        "ComputationResults": crs, "Status": "Ok" if ok else "ComputationFailed",
                        "KernelName": "K"})
    return write_json(tmp_path / "ktt" / "KTToy_Card.json", {
        "Metadata": {"Device": "Toy Card", "TimeUnit": "Microseconds"}, "Results": results})


def test_is_a_runner_with_replay_identity(kt_path):
    runner = ReplayRunner(kt_path)
    assert isinstance(runner, Runner)
    assert runner.name == "replay"
    dev = runner.device()
    assert isinstance(dev, DeviceInfo)
    assert dev.model == "NVIDIA Toy 9000" and dev.kind == "replay"
    assert dev.slug == "nvidia-toy-9000"
    assert dev.properties["recording"] == "toy_GPU" and dev.properties["configurations"] == 6
    assert dev.properties["valid_configurations"] == 5
    assert runner.constants() == {}
    runner.close()
    assert runner.closed


def test_accepts_a_loaded_recording(kt_path):
    rec = load_dataset(kt_path)
    runner = ReplayRunner(rec)
    assert runner.recorded is rec
    assert runner.evaluate({"a": 4, "mode": "y"}).value == 41.0


def test_evaluate_valid_configuration_returns_recorded_time_and_samples(kt_path):
    runner = ReplayRunner(kt_path)
    m = runner.evaluate({"a": 2, "mode": "x"})
    assert isinstance(m, Measurement) and m.ok
    assert m.value == 20.0 and m.samples == [19.0, 20.0, 21.0]
    assert m.params == {"a": 2, "mode": "x"}
    assert runner.evaluations == 1


def test_evaluate_recorded_failure_keeps_its_kind(kt_path):
    runner = ReplayRunner(kt_path)
    m = runner.evaluate({"a": 2, "mode": "y"})
    assert not m.ok and m.value is None and m.failure is FailureKind.COMPILE
    assert "CompilationFailedConfig" in m.detail


@pytest.mark.parametrize("params, detail", [
    ({"a": 3, "mode": "x"}, "a=3 is not among the recorded values [1, 2, 4]"),
    ({"a": 1}, "lacks parameter(s) ['mode']"),
    ({"a": 1, "mode": "x", "unroll": 2}, "sets parameter(s) ['unroll']"),
    ({"a": "1", "mode": "x"}, "a='1' is not among the recorded values"),
    ({"a": [1], "mode": "x"}, "a=[1] is not among the recorded values"),
])
def test_evaluate_unknown_configuration_is_invalid_never_raises(kt_path, params, detail):
    runner = ReplayRunner(kt_path)
    m = runner.evaluate(params)
    assert m.failure is FailureKind.INVALID and m.value is None
    assert detail in m.detail and "toy_GPU" in m.detail
    assert runner.evaluations == 1


def test_unrecorded_combination_of_known_values(tmp_path, kt_path):
    doc = json.loads(gzip.decompress(kt_path.read_bytes()))
    del doc["cache"]["4,y"]
    runner = ReplayRunner(write_json(tmp_path / "partial.json", doc))
    m = runner.evaluate({"a": 4, "mode": "y"})
    assert m.failure is FailureKind.INVALID and "combination of values is not among the recorded" in m.detail
    assert runner.evaluate("not a mapping").failure is FailureKind.INVALID
    assert runner.evaluations == 2


def test_numpy_values_are_found(kt_path):
    m = ReplayRunner(kt_path).evaluate({"a": np.int64(4), "mode": np.str_("x")})
    assert m.ok and m.value == 40.0


def test_scale_multiplies_value_and_samples(kt_path):
    m = ReplayRunner(kt_path, scale=1.5).evaluate({"a": 1, "mode": "x"})
    assert m.value == pytest.approx(15.0)
    assert m.samples == pytest.approx([13.5, 15.0, 16.5])
    assert ReplayRunner(kt_path, scale=1.5).device().properties["scale"] == 1.5


def test_noise_is_reproducible_with_a_seed_and_relative(kt_path):
    def run(seed, noise=0.1):
        runner = ReplayRunner(kt_path, noise=noise, seed=seed)
        return [runner.evaluate({"a": a, "mode": "x"}) for a in (1, 2, 4, 1)]

    first, again, other = run(7), run(7), run(8)
    assert [m.samples for m in first] == [m.samples for m in again]
    assert [m.value for m in first] == [m.value for m in again]
    assert [m.samples for m in first] != [m.samples for m in other]
    # repeated evaluation of one configuration draws fresh noise, like a real device
    assert first[0].samples != first[3].samples
    for m in first:
        recorded = 10.0 * m.params["a"]
        assert m.samples != pytest.approx([recorded - 1, recorded, recorded + 1])
        assert m.value == pytest.approx(recorded, rel=0.5)
    # the value moves with its samples: scaled by the mean noise factor
    m = first[0]
    factors = np.array(m.samples) / np.array([9.0, 10.0, 11.0])
    assert m.value == pytest.approx(10.0 * factors.mean())


def test_noise_statistics_are_relative_gaussian(tmp_path):
    cache = {"1": {"a": 1, "time": 2.0, "times": [2.0] * 4000}}
    path = write_json(tmp_path / "flat.json", {"device_name": "d", "tune_params_keys": ["a"],
                                               "tune_params": {"a": [1]}, "cache": cache})
    samples = np.array(ReplayRunner(path, noise=0.05, scale=3.0, seed=1).evaluate({"a": 1}).samples)
    assert samples.mean() == pytest.approx(6.0, rel=0.01)
    assert samples.std() / samples.mean() == pytest.approx(0.05, rel=0.1)
    huge = np.array(ReplayRunner(path, noise=5.0, seed=1).evaluate({"a": 1}).samples)
    assert huge.min() == pytest.approx(2.0 * MIN_NOISE_FACTOR)  # clipped: times stay positive


def test_zero_noise_is_exact_and_consumes_no_randomness(kt_path):
    a = ReplayRunner(kt_path, noise=0.0, seed=1).evaluate({"a": 1, "mode": "y"})
    b = ReplayRunner(kt_path).evaluate({"a": 1, "mode": "y"})
    assert a.samples == b.samples == [10.0, 11.0, 12.0]


@pytest.mark.parametrize("kwargs", [{"noise": -0.1}, {"scale": 0}, {"scale": float("nan")}, {"noise": "lots"}])
def test_bad_options_raise_spec_error(kt_path, kwargs):
    with pytest.raises(SpecError):
        ReplayRunner(kt_path, **kwargs)


def test_bad_recording_argument(kt_path):
    with pytest.raises(SpecError):
        ReplayRunner(42)
    with pytest.raises(FileNotFoundError):
        ReplayRunner(kt_path.with_name("absent.json"))


def test_profile_returns_recorded_counters(ktt_path):
    runner = ReplayRunner(ktt_path)
    assert supports_profiling(runner) and runner.can_profile
    assert runner.profile({"BX": 8}) == {"dram__bytes.sum": 123.0, "sm__throughput.pct": 45.5}
    assert runner.evaluate({"BX": 8}).value == pytest.approx(2.5)  # microseconds -> ms
    with pytest.raises(ReplayError, match="failed") as info:
        runner.profile({"BX": 16})  # failed configurations have no counters
    assert "KTToy_Card" in str(info.value)
    with pytest.raises(ReplayError, match="BX=12"):
        runner.profile({"BX": 12})
    assert runner.profiles == 3 and runner.evaluations == 1


def test_profile_without_counters_names_the_file(kt_path):
    runner = ReplayRunner(kt_path)
    assert not runner.can_profile
    with pytest.raises(BackendUnavailable, match="no hardware counters") as info:
        runner.profile({"a": 1, "mode": "x"})
    assert str(kt_path) in str(info.value)


def test_evaluations_are_counted(kt_path):
    runner = ReplayRunner(kt_path)
    for params in ({"a": 1, "mode": "x"}, {"a": 2, "mode": "y"}, {"a": 9, "mode": "x"}, {"a": 1, "mode": "x"}):
        runner.evaluate(params)
    assert runner.evaluations == 4


# -- on the real recordings ---------------------------------------------------------------------------

SPACES = default_spaces_root()
needs_spaces = pytest.mark.skipif(not SPACES.is_dir(), reason=f"recorded spaces not found at {SPACES} "
                                  "(set AUTOTUNE_SPACES to the folder of ../shared/data/spaces)")


@needs_spaces
def test_real_ktt_profile_and_replay_of_every_row():
    runner = ReplayRunner(SPACES / "ktt/KTConvolutionOutput_2080Ti.json.gz")
    rec = runner.recorded
    assert runner.device().model == "NVIDIA GeForce RTX 2080 Ti"
    best = rec.params_of(rec.best_row)
    counters = runner.profile(best)
    assert len(counters) == len(rec.counters) and all(np.isfinite(list(counters.values())))
    # replaying the whole space reproduces the recording exactly
    values = [runner.evaluate(rec.params_of(r)).value for r in range(rec.n_configs)]
    got = np.array([np.nan if v is None else v for v in values])
    np.testing.assert_array_equal(got, rec.times)
    assert runner.evaluations == rec.n_configs


@needs_spaces
def test_real_ktt_3090_has_no_counters():
    runner = ReplayRunner(SPACES / "ktt/KTConvolutionOutput_3090.json.gz")
    rec = runner.recorded
    with pytest.raises(BackendUnavailable, match="KTConvolutionOutput_3090"):
        runner.profile(rec.params_of(rec.best_row))


@needs_spaces
def test_real_t4_replay_keeps_runtimes_as_samples():
    runner = ReplayRunner(SPACES / "t4/convolution_milo_A100.json.gz", scale=2.0)
    rec = runner.recorded
    assert runner.device().model == "A100"
    m = runner.evaluate(rec.params_of(rec.best_row))
    assert m.value == pytest.approx(2 * rec.optimum)
    assert len(m.samples) == len(rec.samples_of(rec.best_row)) > 1
