"""Profile-based searcher: counter model, bottleneck equations, scoring, search loop, tuner guard, ncu plumbing."""
from __future__ import annotations

import gzip
import json
import os
import stat
import sys
import textwrap
import types
from pathlib import Path

import numpy as np
import pytest

from pytest_autotune.engine.evaluator import Evaluator
from pytest_autotune.results import FailureKind, Measurement
from pytest_autotune.backends import ncu as ncu_mod
from pytest_autotune.errors import BackendUnavailable
from pytest_autotune.execution.kernel import KernelSpec
from pytest_autotune.space import SearchSpace
from pytest_autotune.strategies import _counters as C
from pytest_autotune.strategies.base import StrategyError
from pytest_autotune.strategies.profile import ProfileSearch
from pytest_autotune.strategies.registry import make_strategy, validate_strategy_spec
from pytest_autotune.strategies.simple import RandomSearch
from pytest_autotune.engine.tuner import TuneError, tune

KTT_2080 = (Path(__file__).resolve().parents[3] / "shared" / "data" / "spaces" / "ktt"
            / "KTConvolutionOutput_2080Ti.json.gz")


# -- a synthetic shared-memory-bound kernel -----------------------------------------------------------------------

def _synthetic():
    """192 configurations; time follows the shared-memory loads, which the bottleneck analysis asks to cut.

    The optimum is a=6, b=32, c=0. Configurations with a == 1 and c == 2 fail (no time, no counters).
    """
    params = {"a": [1, 2, 3, 4, 5, 6, 7, 8], "b": [1, 2, 4, 8, 16, 32, 64, 128], "c": [0, 1, 2]}
    space = SearchSpace(params)
    cfg = np.array([[params[n][i] for n, i in zip(params, row)] for row in space.indices], dtype=float)
    a, lb, c = cfg[:, 0], np.log2(cfg[:, 1]), cfg[:, 2]
    shared_ld = 1000.0 * (1 + (a - 6) ** 2 + (lb - 5) ** 2) * (1 + 0.1 * c)
    n = len(space)
    counters = {
        C.SHARED_UTIL: np.full(n, 60.0), C.SHARED_LOADS: shared_ld, C.SHARED_STORES: np.full(n, 100.0),
        C.DRAM_UTIL: np.full(n, 5.0), C.DRAM_READ: 500.0 + 10 * a, C.DRAM_WRITE: np.full(n, 100.0),
        C.L2_UTIL: np.full(n, 5.0), C.L2_READ: 800.0 + 10 * lb, C.L2_WRITE: np.full(n, 200.0),
        C.TEX_UTIL: np.full(n, 1.0), C.TEX_LOADS: 300.0 + c,
        C.LOCAL_LOADS: np.zeros(n), C.LOCAL_STORES: np.zeros(n),
        C.OCCUPANCY: np.full(n, 50.0), C.SM_EFFICIENCY: np.full(n, 99.0),
        C.INST_EXECUTED: np.full(n, 1000.0), C.WARP_EFFICIENCY: np.full(n, 32.0),
        C.WARP_EFFICIENCY_PCT: np.full(n, 100.0), C.ISSUE_UTIL: np.full(n, 20.0),
        C.INST_FP32: 8000.0 + a, C.INST_INT: np.full(n, 2000.0), C.INST_LDST: shared_ld / 10,
        C.INST_FP64: np.zeros(n), C.INST_MISC: np.full(n, 100.0), C.INST_CONTROL: np.full(n, 100.0),
        C.INST_CONVERSION: np.zeros(n),
        C.SFU_UTIL: np.zeros(n), C.TEX_PIPE_UTIL: np.zeros(n),
    }
    failed = (a == 1) & (c == 2)
    for v in counters.values():
        v[failed] = np.nan
    times = np.where(failed, np.nan, shared_ld / 1000.0)
    recorded = types.SimpleNamespace(space=space, counters=counters, times=times, name="synthetic", path=None,
                                     device="synthetic GPU", kernel="synthetic")
    return recorded


SYN = _synthetic()


def _objective(recorded):
    def evaluate(params):
        t = recorded.times[recorded.space.find(params)]
        if not np.isfinite(t):
            return Measurement.failed(params, FailureKind.RUNTIME, "recorded failure")
        return Measurement(params, value=float(t), samples=[float(t)])
    return evaluate


class _Profiler:
    def __init__(self, recorded):
        self.recorded = recorded
        self.calls: list[int] = []

    def __call__(self, params):
        row = self.recorded.space.find(params)
        self.calls.append(row)
        out = {k: float(v[row]) for k, v in self.recorded.counters.items() if np.isfinite(v[row])}
        if not out:
            raise LookupError(f"no counters for {params}")
        return out


@pytest.fixture(scope="module")
def syn_model():
    return C.train_model(SYN)


def _run(strategy, recorded, budget):
    profiler = _Profiler(recorded)
    strategy.profiler = profiler
    history = Evaluator(recorded.space, _objective(recorded), budget=budget).run(strategy)
    return history, profiler


# -- the counter model ----------------------------------------------------------------------------------------------

def test_model_matches_sklearn_and_round_trips(tmp_path, syn_model):
    from sklearn.tree import DecisionTreeRegressor

    x = syn_model.space_features(SYN.space)
    pred = syn_model.predict_space(SYN.space)
    ok = np.isfinite(SYN.counters[C.SHARED_LOADS])
    j = syn_model.counters.index(C.SHARED_LOADS)
    est = DecisionTreeRegressor(random_state=0).fit(x[ok], SYN.counters[C.SHARED_LOADS][ok])
    assert np.array_equal(pred[:, j], est.predict(x))
    # a fully grown tree reproduces the training counters exactly
    assert np.array_equal(pred[ok, j], SYN.counters[C.SHARED_LOADS][ok])
    for name in ("model.json", "model.json.gz"):
        path = syn_model.save(tmp_path / name)
        loaded = C.CounterModel.load(path)
        assert loaded.counters == syn_model.counters and loaded.param_names == syn_model.param_names
        assert np.array_equal(loaded.predict_space(SYN.space), pred)
        assert np.array_equal(loaded.predict([{"a": 6, "b": 32, "c": 0}]), pred[[SYN.space.find((6, 32, 0))]])
    raw = gzip.decompress((tmp_path / "model.json.gz").read_bytes())
    doc = json.loads(raw)
    assert doc["format"] == C.MODEL_FORMAT and doc["version"] == 1 and len(doc["trees"]) == len(syn_model.counters)
    assert doc["metadata"]["n_train"] == int(ok.sum())
    # the model covers the counters the synthetic file records, and says which it lacks
    assert C.THREADS in doc["metadata"]["missing_counters"]


def test_model_load_rejects_bad_files(tmp_path, syn_model):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "something else"}))
    with pytest.raises(C.CounterModelError, match="not a counter model"):
        C.CounterModel.load(bad)
    doc = syn_model.to_json()
    doc["version"] = 99
    bad.write_text(json.dumps(doc))
    with pytest.raises(C.CounterModelError, match="version"):
        C.CounterModel.load(bad)
    doc = syn_model.to_json()
    doc["trees"][0]["children_left"][0] = 0  # a cycle: node 0 its own child
    bad.write_text(json.dumps(doc))
    with pytest.raises(C.CounterModelError, match="out-of-range"):
        C.CounterModel.load(bad)
    bad.write_text("not json")
    with pytest.raises(C.CounterModelError, match="not a JSON"):
        C.CounterModel.load(bad)
    with pytest.raises(C.CounterModelError, match="no counter model"):
        C.CounterModel.load(tmp_path / "absent.json")
    other = SearchSpace({"a": [1, 2], "z": [1, 2]})
    with pytest.raises(C.CounterModelError, match="parameters"):
        syn_model.predict_space(other)
    with pytest.raises(C.CounterModelError, match="no hardware counters"):
        C.train_model(types.SimpleNamespace(space=SYN.space, counters=None, name="durations only"))


def test_model_encodes_string_parameters_by_index():
    space = SearchSpace({"layout": ["row", "col"], "n": [1, 2, 4]})
    y = np.array([10.0 if space.get(r)["layout"] == "row" else 20.0 for r in range(len(space))])
    rec = types.SimpleNamespace(space=space, counters={C.DRAM_READ: y}, name="s", path=None, device="", kernel="")
    model = C.train_model(rec)
    assert model.to_json()["parameters"][0]["encoding"] == "index"
    assert np.array_equal(model.predict([{"layout": "col", "n": 2}, {"layout": "row", "n": 4}])[:, 0], [20.0, 10.0])
    with pytest.raises(C.CounterModelError, match="not in the training data"):
        model.predict([{"layout": "diag", "n": 2}])


# -- bottleneck equations --------------------------------------------------------------------------------------------

HAND = {
    C.DRAM_UTIL: 40.0, C.DRAM_READ: 300.0, C.DRAM_WRITE: 100.0,
    C.L2_UTIL: 20.0, C.L2_READ: 600.0, C.L2_WRITE: 200.0,
    C.TEX_UTIL: 10.0, C.TEX_LOADS: 50.0,
    C.LOCAL_LOADS: 100.0, C.LOCAL_STORES: 100.0,
    C.SHARED_UTIL: 50.0, C.SHARED_LOADS: 900.0, C.SHARED_STORES: 100.0,
    C.OCCUPANCY: 60.0, C.SM_EFFICIENCY: 90.0, C.THREADS: 200.0,
    C.INST_EXECUTED: 1000.0, C.WARP_EFFICIENCY: 32.0, C.WARP_EFFICIENCY_PCT: 100.0, C.ISSUE_UTIL: 50.0,
    C.INST_FP32: 25600.0, C.INST_INT: 3200.0, C.INST_FP64: 0.0, C.INST_MISC: 0.0, C.INST_LDST: 3200.0,
    C.INST_CONTROL: 0.0, C.INST_CONVERSION: 0.0, C.SFU_UTIL: 0.0, C.TEX_PIPE_UTIL: 0.0,
}


def test_bottlenecks_by_hand():
    bn = C.analyze_bottlenecks(HAND, cores=100)
    expected = {
        "dram_read": 0.75 * 0.40, "dram_write": 0.25 * 0.40,  # read/write share x utilisation
        "l2_read": 0.75 * 0.20, "l2_write": 0.25 * 0.20,
        "tex": 0.10,
        "local": (200 / 800) * 0.40,  # local share of L1-L2 traffic x busiest memory (DRAM 40 %)
        "shared_read": 0.9 * 0.5, "shared_write": 0.1 * 0.5,
        "sm_parallel": 0.4, "gpu_parallel": 0.1,
        "threads": (500 - 200) / 500,  # five threads per core, 100 cores
        # I_fitted = 1000 * 32 (no divergence); issue 50 % -> U_issue = 1 (dual issue)
        "fp32": 25600 / 32000, "int": 3200 / 32000, "ldst": 3200 / 32000, "fp64": 0.0, "misc": 0.0,
        "control": 0.0, "conversion": 0.0, "sfu": 0.0, "tex_unit": 0.0,
        # largest share 0.8 > 0.7: weight (0.8 - 0.7) / 0.3; (1 - 0.5) of the issue slots idle
        "issue": 0.5 * (0.8 - 0.7) / 0.3,
    }
    assert set(bn) == set(expected)
    for key, value in expected.items():
        assert bn[key] == pytest.approx(value, abs=1e-12), key
    dpc = C.compute_changes(bn)
    assert dpc[C.DRAM_READ] == pytest.approx(-0.3) and dpc[C.DRAM_WRITE] == pytest.approx(-0.1)
    assert dpc[C.LOCAL_LOADS] == dpc[C.LOCAL_STORES] == pytest.approx(-0.1)
    assert dpc[C.SHARED_LOADS] == pytest.approx(-0.45) and dpc[C.TEX_LOADS] == pytest.approx(-0.1)
    assert dpc[C.INST_FP32] == pytest.approx(-(0.8 - 0.7) / 0.3)  # above inst_reaction: scaled
    assert dpc[C.INST_INT] == 0.0 and dpc[C.INST_LDST] == 0.0  # below inst_reaction: ignored
    assert dpc[C.ISSUE_UTIL] == pytest.approx(1 / 6)
    assert dpc[C.SM_EFFICIENCY] == pytest.approx(0.1) and dpc[C.THREADS] == pytest.approx(0.6)


def test_bottlenecks_warp_efficiency_and_missing_counters():
    half = dict(HAND, **{C.WARP_EFFICIENCY: 16.0, C.WARP_EFFICIENCY_PCT: 50.0, C.ISSUE_UTIL: 25.0})
    bn = C.analyze_bottlenecks(half)
    # I_fitted = 1000 * 32 * (100/50) * (100/50) = 128000; U_issue = 25/50
    assert bn["fp32"] == pytest.approx(25600 / 128000 * 0.5)
    assert bn["issue"] == 0.0  # largest share 0.2 < 0.7
    # the non-predicated efficiency is used when profiled
    pred = dict(half, **{C.WARP_NONPRED_EFFICIENCY: 32.0})
    assert C.analyze_bottlenecks(pred)["fp32"] == pytest.approx(25600 / 64000 * 0.5)
    # no core count (and no device attributes): the thread term is 0; with device attributes it is computed
    assert bn["threads"] == 0.0
    attrs = dict(HAND, **{C.SM_COUNT: 2, C.CC_MAJOR: 7, C.CC_MINOR: 5, C.THREADS: 320.0})
    assert C.analyze_bottlenecks(attrs)["threads"] == pytest.approx((640 - 320) / 640)  # 2 SMs x 64 cores
    # an SM efficiency above 100 % is no bottleneck; an empty profile gives zeros
    assert C.analyze_bottlenecks(dict(HAND, **{C.SM_EFFICIENCY: 104.9}))["gpu_parallel"] == 0.0
    empty = C.analyze_bottlenecks({})
    assert all(v == 0.0 for v in empty.values())
    assert C.THREADS not in C.missing_counters(HAND) and C.DRAM_UTIL in C.missing_counters({})


def test_score_and_normalisation_by_hand():
    counters = [C.DRAM_READ, C.SHARED_LOADS, C.INST_FP64]
    changes = {C.DRAM_READ: -0.5, C.SHARED_LOADS: -0.25, C.INST_FP64: -1.0}
    ref = np.array([100.0, 10.0, 0.0])
    cand = np.array([[50.0, 30.0, 0.0],  # -0.5 * (-50/150) - 0.25 * (20/40) = 1/6 - 1/8; 0/0 counts 0
                     [100.0, 10.0, 0.0]])
    s = C.score_candidates(changes, counters, ref, cand)
    assert s == pytest.approx([1 / 6 - 1 / 8, 0.0])
    raw = np.array([0.5, 0.25, 0.0, -0.1, -0.2, -0.3])
    w = C.normalise_scores(raw)
    assert w == pytest.approx([2.0 ** 8, 1.5 ** 8, 1e-4, (1 - 0.1 / 0.3) ** 8, (1 - 0.2 / 0.3) ** 8, 1e-4])
    assert w[4] == pytest.approx((1 / 3) ** 8) and w[4] > 1e-4  # above the floor
    assert C.normalise_scores(np.zeros(3)) == pytest.approx([1e-4] * 3)  # no information: uniform


# -- the search -------------------------------------------------------------------------------------------------------

def test_search_proposes_unevaluated_rows_profiles_and_is_reproducible(syn_model):
    hist1, prof1 = _run(ProfileSearch(SYN.space, seed=3, model=syn_model), SYN, budget=60)
    hist2, prof2 = _run(ProfileSearch(SYN.space, seed=3, model=syn_model), SYN, budget=60)
    rows1 = [r.row for r in hist1.records]
    assert rows1 == [r.row for r in hist2.records] and prof1.calls == prof2.calls
    assert len(rows1) == 60 and len(set(rows1)) == 60 and all(0 <= r < len(SYN.space) for r in rows1)
    assert len(hist1.strategy_seconds) == 60  # not a single re-proposal of an evaluated row
    assert len(prof1.calls) >= 60 // 5 - 1  # one profiling per batch of five
    assert len(set(prof1.calls)) == len(prof1.calls)  # each configuration profiled at most once
    evaluated = {r.row: r.value for r in hist1.records}
    assert all(evaluated.get(r) is not None for r in prof1.calls)  # only evaluated, valid ones
    hist3, _ = _run(ProfileSearch(SYN.space, seed=4, model=syn_model), SYN, budget=60)
    assert [r.row for r in hist3.records] != rows1
    # exhausting the space ends cleanly with every row evaluated once
    full, _ = _run(ProfileSearch(SYN.space, seed=5, model=syn_model, reference="best"), SYN, budget=len(SYN.space))
    assert sorted(r.row for r in full.records) == list(range(len(SYN.space)))


def test_search_finds_the_optimum_faster_than_random(syn_model):
    best = SYN.space.find((6, 32, 0))

    def evals_to_optimum(strategy):
        hist, _ = _run(strategy, SYN, budget=len(SYN.space))
        return next(i + 1 for i, r in enumerate(hist.records) if r.row == best)

    seeds = range(12)
    prof = [evals_to_optimum(ProfileSearch(SYN.space, seed=s, model=syn_model)) for s in seeds]
    rand = [evals_to_optimum(RandomSearch(SYN.space, seed=s)) for s in seeds]
    assert np.mean(prof) < 0.5 * np.mean(rand), (np.mean(prof), np.mean(rand))


def test_search_without_profiler_and_profiler_failures(syn_model):
    strategy = ProfileSearch(SYN.space, seed=0, model=syn_model)
    with pytest.raises(StrategyError, match="needs hardware counters"):
        Evaluator(SYN.space, _objective(SYN), budget=10).run(strategy)

    def broken(params):
        raise RuntimeError("ncu crashed")

    strategy = ProfileSearch(SYN.space, seed=0, model=syn_model)
    strategy.profiler = broken
    with pytest.raises(StrategyError, match="never succeeded.*ncu crashed"):
        Evaluator(SYN.space, _objective(SYN), budget=50).run(strategy)

    def unavailable(params):
        raise BackendUnavailable("ncu not found")

    strategy = ProfileSearch(SYN.space, seed=0, model=syn_model)
    strategy.profiler = unavailable
    with pytest.raises(BackendUnavailable):
        Evaluator(SYN.space, _objective(SYN), budget=50).run(strategy)


def test_hyperparameter_validation(tmp_path, syn_model):
    path = syn_model.save(tmp_path / "m.json")
    assert validate_strategy_spec({"name": "profile", "model": str(path)})[0] == "profile"
    with pytest.raises(StrategyError, match="exactly one of 'model'"):
        validate_strategy_spec("profile")
    with pytest.raises(StrategyError, match="exactly one of 'model'"):
        validate_strategy_spec({"name": "profile", "model": str(path), "train": str(path)})
    with pytest.raises(StrategyError, match="no counter model file"):
        validate_strategy_spec({"name": "profile", "model": str(tmp_path / "absent.json")})
    with pytest.raises(StrategyError, match="no file"):
        validate_strategy_spec({"name": "profile", "train": str(tmp_path / "absent.json.gz")})
    for key, bad in (("batch", 0), ("exponent", -1), ("cutoff", 0.1), ("inst_reaction", 1.0), ("cores", 0),
                     ("reference", "global"), ("max_depth", 0)):
        with pytest.raises(StrategyError, match=key):
            validate_strategy_spec({"name": "profile", "model": str(path), key: bad})
    # a model that does not fit the space fails at construction, before any evaluation
    with pytest.raises(StrategyError, match="parameters"):
        make_strategy({"name": "profile", "model": str(path)}, SearchSpace({"x": [1, 2]}))
    strategy = make_strategy({"name": "profile", "model": str(path)}, SYN.space, seed=1)
    assert isinstance(strategy, ProfileSearch) and strategy.requires_profiling


@pytest.mark.skipif(not KTT_2080.is_file(), reason="KTT recordings not available")
def test_train_at_startup_from_a_ktt_file():
    from pytest_autotune.datasets import load_dataset
    from pytest_autotune.simulation.replay import ReplayRunner

    rec = load_dataset(KTT_2080)
    # every counter of the mapping is in the file, except the launch's thread count
    assert set(C.MODEL_COUNTERS) - set(rec.counters) == {C.THREADS}
    assert set(C.PC_STRESS) <= set(rec.counters)
    runner = ReplayRunner(rec)
    result = tune(runner, space=rec.space, strategy={"name": "profile", "train": str(KTT_2080), "max_depth": 12},
                  budget=30, seed=0, keep_outputs=False)
    assert result.evaluations == 30 and runner.profiles >= 5


# -- the tuner's guard ------------------------------------------------------------------------------------------------

class _FakeRunner:
    name = "fake"

    def __init__(self, recorded):
        self.evaluate = _objective(recorded)

    def constants(self):
        return {}

    def device(self):
        from pytest_autotune.execution.device import DeviceInfo
        return DeviceInfo(model="fake", kind="fake")

    def close(self):
        pass


def test_tuner_refuses_a_runner_that_cannot_profile(tmp_path, syn_model):
    path = syn_model.save(tmp_path / "m.json")
    spec = {"name": "profile", "model": str(path)}
    with pytest.raises(TuneError, match="'profile' needs hardware counters, but the 'fake' runner cannot profile"):
        tune(_FakeRunner(SYN), space=SYN.space, strategy=spec, budget=10)
    off = _FakeRunner(SYN)
    off.profile = _Profiler(SYN)
    off.can_profile = False  # e.g. a replay of a recording without counters
    with pytest.raises(TuneError, match="cannot profile"):
        tune(off, space=SYN.space, strategy=spec, budget=10)
    on = _FakeRunner(SYN)
    on.profile = _Profiler(SYN)
    result = tune(on, space=SYN.space, strategy=spec, budget=40, seed=0, keep_outputs=False)
    assert result.evaluations == 40 and on.profile.calls
    assert json.loads(json.dumps(result.strategy["hyperparameters"]))["model"] == str(path)  # lockfile-ready


# -- Nsight Compute plumbing ------------------------------------------------------------------------------------------

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
          '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')


def _row(launch, name, unit, value):
    return (f'"{launch}","4242","python3.11","127.0.0.1","vadd","1","7","(256, 1, 1)","(4, 1, 1)","0","7.5",'
            f'"Command line profiler metrics","{name}","{unit}","{value}"')


DETAILS = "\n".join([
    "==PROF== Connected to process 4242 (/usr/bin/python3.11)",
    "==PROF== Profiling \"vadd\" - 0: 0%....50%....100% - 9 passes",
    HEADER,
    _row(0, "dram__sectors_read.sum", "sector", "1,234,567"),
    _row(0, "dram__throughput.avg.pct_of_peak_sustained_elapsed", "%", "12.5"),
    _row(0, "dram__bytes_read.sum", "Kbyte", "2.5"),
    _row(0, "launch__func_cache_config", "", "CachePreferNone"),
    _row(0, "smsp__inst_executed_pipe_fp64.avg.pct_of_peak_sustained_active", "%", "n/a"),
    _row(1, "dram__sectors_read.sum", "sector", "7"),
    "==PROF== Disconnected from process 4242",
])


def test_parse_ncu_csv_details_page():
    first = ncu_mod.parse_ncu_csv(DETAILS)
    assert first == {"dram__sectors_read.sum": 1234567.0,
                     "dram__throughput.avg.pct_of_peak_sustained_elapsed": 12.5,
                     "dram__bytes_read.sum": 2500.0}
    launches = ncu_mod.parse_ncu_csv_launches(DETAILS)
    assert len(launches) == 2 and launches[1] == {"dram__sectors_read.sum": 7.0}
    assert ncu_mod.parse_ncu_csv("==PROF== nothing profiled\n") == {}
    assert ncu_mod.parse_ncu_csv("") == {}


def test_parse_ncu_csv_raw_page():
    raw = "\n".join([
        '"ID","Kernel Name","dram__sectors_read.sum","sm__warps_active.avg.pct_of_peak_sustained_active"',
        '"","","sector","%"',
        '"0","vadd","1,024","55.5"',
    ])
    assert ncu_mod.parse_ncu_csv(raw) == {"dram__sectors_read.sum": 1024.0,
                                          "sm__warps_active.avg.pct_of_peak_sustained_active": 55.5}


def test_ncu_command_construction():
    cmd = ncu_mod.ncu_command("/tmp/job/profile_job.py", "/tmp/job/job.json", ["a__b.sum", "c__d.pct"],
                              kernel_name="ns::matmul<16, 8>", ncu="/opt/ncu", python="/usr/bin/python3",
                              log_file="/tmp/job/ncu.csv")
    assert cmd[0] == "/opt/ncu" and cmd[-3:] == ["/usr/bin/python3", "/tmp/job/profile_job.py", "/tmp/job/job.json"]
    flags = dict(zip(cmd[1:-3:1], cmd[2:-3:1]))
    assert "--csv" in cmd and flags["--metrics"] == "a__b.sum,c__d.pct" and flags["--page"] == "details"
    assert flags["--print-units"] == "base" and flags["--launch-count"] == "1"
    assert flags["--kernel-name-base"] == "function" and flags["--kernel-name"] == "regex:^(.*::)?matmul$"
    assert flags["--target-processes"] == "all" and flags["--log-file"] == "/tmp/job/ncu.csv"
    assert flags["--clock-control"] == "none"  # profile at the clocks the tuner timed with
    with pytest.raises(ValueError, match="characters"):
        ncu_mod.ncu_command("s.py", "j.json", ["a__b.sum --export x"], kernel_name="k")
    with pytest.raises(ValueError, match="at least one"):
        ncu_mod.ncu_command("s.py", "j.json", [], kernel_name="k")
    assert set(C.REQUIRED_COUNTERS) <= set(ncu_mod.NCU_METRICS) and C.THREADS in ncu_mod.NCU_METRICS


CUDA_SRC = "__global__ void vadd(float *c, const float *a, const float *b, int n) { }\n"


def _spec():
    return KernelSpec(source=CUDA_SRC, kernel_name="vadd", problem_size=1000,
                      args=[np.zeros(4, np.float32), np.arange(4, dtype=np.float32), np.ones(4, np.float32),
                            np.int32(4)])


def test_write_profile_job(tmp_path):
    script, job, name = ncu_mod.write_profile_job(tmp_path, _spec(), {"block_size_x": 256, "TILE": 2}, device_id=1)
    doc = json.loads(job.read_text())
    assert name == "vadd" and doc["grid"] == [4, 1, 1] and doc["block"] == [256, 1, 1] and doc["device_id"] == 1
    assert doc["arg_kinds"] == ["array", "array", "array", "scalar"] and doc["is_template"] is False
    source = Path(doc["source_file"]).read_text()
    assert "#define TILE 2" in source and "#define block_size_x 256" in source and CUDA_SRC in source
    args = np.load(doc["args_file"], allow_pickle=False)
    assert np.array_equal(args["arg1"], np.arange(4, dtype=np.float32))
    assert args["arg3"][()] == np.int32(4) and args["arg3"].dtype == np.int32
    compile(script.read_text(), str(script), "exec")  # the job script is valid Python


def _fake_ncu(tmp_path, body):
    """An executable standing in for ncu: a Python script that sees ncu's arguments."""
    path = tmp_path / "fake-ncu"
    path.write_text(f"#!{sys.executable}\n" + textwrap.dedent(body))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


FAKE_OK = '''
import json, sys
args = sys.argv[1:]
log = args[args.index("--log-file") + 1]
metrics = args[args.index("--metrics") + 1].split(",")
job = json.load(open(args[-1]))
assert args[-2].endswith("profile_job.py") and job["kernel_name"] == "vadd"
if "bad__metric.sum" in metrics:
    print("==ERROR== Failed to find metric bad__metric.sum")
    sys.exit(1)
rows = [%r]
for i, m in enumerate(metrics):
    rows.append(%r.format(m, i))
open(log, "w").write("\\n".join(rows))
''' % (HEADER, _row(0, "{}", "", "{}"))


def test_profile_kernel_through_a_stand_in_ncu(tmp_path):
    exe = _fake_ncu(tmp_path, FAKE_OK)
    got = ncu_mod.profile_kernel(_spec(), {"block_size_x": 256}, ncu=exe, metrics=["x__a.sum", "x__b.sum"],
                                 timeout=60)
    assert got == {"x__a.sum": 0.0, "x__b.sum": 1.0, "launch__thread_count": 4 * 256.0}
    # a metric this ncu does not know is dropped and the run repeated
    got = ncu_mod.profile_kernel(_spec(), {"block_size_x": 256}, ncu=exe, metrics=["bad__metric.sum", "x__b.sum"],
                                 timeout=60)
    assert got["x__b.sum"] == 0.0 and "bad__metric.sum" not in got


def test_profile_kernel_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv(ncu_mod.NCU_ENV, raising=False)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "no-cuda"))
    if not os.path.exists("/usr/local/cuda/bin/ncu"):
        assert not ncu_mod.ncu_available()
    with pytest.raises(BackendUnavailable, match="ncu"):
        ncu_mod.profile_kernel(_spec(), {"block_size_x": 256}, ncu=str(tmp_path / "absent-ncu"))
    perm = _fake_ncu(tmp_path, 'print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission")\n')
    with pytest.raises(BackendUnavailable, match="ERR_NVGPUCTRPERM"):
        ncu_mod.profile_kernel(_spec(), {"block_size_x": 256}, ncu=perm)
    empty = _fake_ncu(tmp_path, 'import sys; print("kernel crashed"); sys.exit(1)\n')
    with pytest.raises(ncu_mod.NcuError, match="(?s)no metrics.*kernel crashed"):
        ncu_mod.profile_kernel(_spec(), {"block_size_x": 256}, ncu=empty)
    slow = _fake_ncu(tmp_path, "import time; time.sleep(30)\n")
    with pytest.raises(ncu_mod.NcuError, match="did not finish"):
        ncu_mod.profile_kernel(_spec(), {"block_size_x": 256}, ncu=slow, timeout=0.5)
