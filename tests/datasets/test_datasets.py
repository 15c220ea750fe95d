"""Recorded-data loaders: T4 (+T1), Kernel Tuner caches and KTT output.

Synthetic files written to ``tmp_path`` cover every format and edge case, so
these tests run anywhere; the real brute-forced spaces (``$AUTOTUNE_SPACES``,
default ``<repo>/../shared/data/spaces``) are checked against the counts their
README promises and skipped when the folder is absent.
"""
from __future__ import annotations

import gzip
import json
import math
import os
import time
from pathlib import Path

import numpy as np
import pytest

from benchmarks.anchors import GEMM_RESTRICTIONS  # the data README's CLBlast GEMM restrictions
from pytest_autotune.datasets import (
    DatasetError,
    RecordedSpace,
    SpaceDefinition,
    clear_cache,
    default_spaces_root,
    detect_format,
    discover,
    find_definition,
    load_dataset,
    load_definition,
    sniff_format,
)
from pytest_autotune.results import FailureKind
from pytest_autotune.space import SearchSpace

# -- synthetic files ------------------------------------------------------------------------------


def write_json(path: Path, doc, gz: bool | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(doc).encode()
    if gz if gz is not None else path.name.endswith(".gz"):
        data = gzip.compress(data)
    path.write_bytes(data)
    return path


T1_DOC = {
    "General": {"BenchmarkName": "toy", "OutputFormat": "JSON"},
    "ConfigurationSpace": {
        "TuningParameters": [
            {"Name": "bx", "Type": "int", "Values": "[2**i for i in range(0, 3)]", "Default": 1},
            {"Name": "tile", "Type": "int", "Values": "[1, 2, 3]", "Default": 1},
        ],
        "Conditions": [{"Expression": "bx * tile <= 6", "Parameters": ["bx", "tile"]}],
    },
}
# valid (bx, tile): (1,1) (1,2) (1,3) (2,1) (2,2) (2,3) (4,1); (4,2) and (4,3) violate bx*tile <= 6
T1_VALID = [(1, 1), (1, 2), (1, 3), (2, 1), (2, 2), (2, 3), (4, 1)]


def t4_result(bx, tile, invalidity="correct", time_ms=None, runtimes=None):
    value = time_ms if invalidity == "correct" else {"compile": "CompilationFailedConfig"}.get(
        invalidity, "RuntimeFailedConfig")
    times = {"compilation": 10.0, "framework": 1.0}
    if runtimes is not None:
        times["runtimes"] = runtimes
    return {"configuration": {"bx": bx, "tile": tile}, "invalidity": invalidity, "times": times,
            "measurements": [{"name": "time", "value": value, "unit": ""}], "objectives": ["time"]}


def t4_doc(configs=T1_VALID, failures=None, timeunit="miliseconds"):
    failures = failures or {}
    results = []
    for bx, tile in configs:
        inv = failures.get((bx, tile), "correct")
        t = float(bx * 10 + tile)
        results.append(t4_result(bx, tile, inv, t, [t - 0.5, t, t + 0.5] if inv == "correct" else None))
    return {"metadata": {"timeunit": timeunit}, "schema_version": "1.0.0", "results": results}


def make_t4_tree(root: Path, doc=None, name="toy_GPU_X.json.gz") -> Path:
    write_json(root / "t1" / "toy.json", T1_DOC)
    return write_json(root / "t4" / name, doc if doc is not None else t4_doc(
        failures={(1, 3): "compile", (2, 3): "runtime", (4, 1): "constraints", (2, 2): "correctness"}))


def kt_doc(failures=None, with_fields=True):
    failures = failures or {}
    tp = {"a": [1, 2, 4], "mode": ["x", "y"]}
    cache = {}
    for a in tp["a"]:
        for mode in tp["mode"]:
            key = f"{a},{mode}"
            t = failures.get((a, mode), float(a) + (0.25 if mode == "y" else 0.0))
            entry = {"time": t, "compile_time": 1.0}
            if not isinstance(t, str):
                entry["times"] = [t * 0.9, t, t * 1.1]
            if with_fields:
                entry.update(a=a, mode=mode)
            cache[key] = entry
    return {"device_name": "Toy GPU 9000", "kernel_name": "toy_kernel", "problem_size": [64],
            "tune_params_keys": ["a", "mode"], "tune_params": tp, "objective": "time", "cache": cache}


def ktt_doc(with_counters=True, time_unit="Microseconds"):
    results = []
    for bx in (8, 16, 32):
        for ro in (0, 1):
            ok = not (bx == 32 and ro == 1)
            cr = []
            if ok:
                entry = {"Duration": 1000.0 * bx + ro * 500.0, "KernelFunction": "conv", "Overhead": 1.0}
                if with_counters:
                    entry["ProfilingData"] = {"Counters": [
                        {"Name": "dram__bytes.sum", "Type": "Double", "Value": float(bx * 100 + ro)},
                        {"Name": "sm__warps_active.pct", "Type": "Double", "Value": 50.0 + ro},
                    ], "RemainingProfilingRuns": 0}
                cr.append(entry)
            results.append({
                "Configuration": [{"Name": "BX", "Value": bx, "ValueType": "UnsignedInt"},
                                  {"Name": "RO", "Value": ro, "ValueType": "UnsignedInt"}],
                "ComputationResults": cr, "KernelName": "Convolution",
                "Status": "Ok" if ok else "ComputationFailed", "TotalDuration": 0.0})
    return {"Metadata": {"Device": "Toy Card", "TimeUnit": time_unit, "KttVersion": "2.1.0"}, "Results": results}


# -- T4 -------------------------------------------------------------------------------------------


def test_t4_loads_with_default_definition_and_maps_failures(tmp_path):
    path = make_t4_tree(tmp_path)
    rec = load_dataset(path)
    assert isinstance(rec, RecordedSpace)
    assert rec.format == "t4"
    assert rec.name == "toy_GPU_X"
    assert rec.device == "GPU X"  # from the file name, after the kernel prefix of the T1 file
    assert rec.kernel == "toy"
    assert rec.definition == tmp_path / "t1" / "toy.json"
    assert rec.params == {"bx": [1, 2, 4], "tile": [1, 2, 3]}
    assert rec.restrictions == ["bx * tile <= 6"]
    assert rec.n_configs == len(T1_VALID) == len(rec.space)
    assert [rec.space.tuple(r) for r in range(rec.n_configs)] == T1_VALID
    kinds = {rec.space.tuple(r): rec.failures[r] for r in range(rec.n_configs)}
    assert kinds[(1, 3)] is FailureKind.COMPILE
    assert kinds[(2, 3)] is FailureKind.RUNTIME
    assert kinds[(4, 1)] is FailureKind.INVALID  # "constraints": rejected before launch
    assert kinds[(2, 2)] is FailureKind.WRONG_OUTPUT  # "correctness": ran, wrong output
    assert kinds[(1, 1)] is None
    assert rec.n_valid == 3
    assert rec.failure_counts() == {FailureKind.INVALID: 1, FailureKind.COMPILE: 1, FailureKind.RUNTIME: 1,
                                    FailureKind.WRONG_OUTPUT: 1}
    # times aligned with rows; NaN exactly where failed
    for r in range(rec.n_configs):
        bx, tile = rec.space.tuple(r)
        if rec.failures[r] is None:
            assert rec.times[r] == bx * 10 + tile
            assert rec.samples_of(r).tolist() == [bx * 10 + tile - 0.5, bx * 10 + tile, bx * 10 + tile + 0.5]
        else:
            assert math.isnan(rec.times[r])
            assert rec.samples_of(r) is None
    assert rec.optimum == 11.0 and rec.params_of(rec.best_row) == {"bx": 1, "tile": 1}
    np.testing.assert_array_equal(np.sort(rec.valid_times()), [11.0, 12.0, 21.0])
    assert rec.statuses[rec.row_of({"bx": 4, "tile": 1})] == "constraints"


def test_t4_measurement_of_valid_and_failed_rows(tmp_path):
    rec = load_dataset(make_t4_tree(tmp_path))
    m = rec.measurement(rec.row_of({"bx": 2, "tile": 1}))
    assert m.ok and m.value == 21.0 and m.samples == [20.5, 21.0, 21.5]
    assert m.params == {"bx": 2, "tile": 1}
    bad = rec.measurement(rec.row_of((1, 3)))
    assert not bad.ok and bad.value is None and bad.failure is FailureKind.COMPILE
    assert "toy_GPU_X" in bad.detail and "compile" in bad.detail


def test_t4_time_unit_is_converted(tmp_path):
    rec = load_dataset(make_t4_tree(tmp_path, t4_doc(timeunit="seconds")))
    row = rec.row_of({"bx": 1, "tile": 1})
    assert rec.times[row] == 11_000.0 and rec.samples_of(row)[0] == 10_500.0


def test_t4_plain_and_gzip_load_the_same(tmp_path):
    gz = load_dataset(make_t4_tree(tmp_path / "a", name="toy_A100.json.gz"))
    plain = load_dataset(make_t4_tree(tmp_path / "b", name="toy_A100.json"))
    assert plain.name == gz.name == "toy_A100" and plain.device == "A100"
    np.testing.assert_array_equal(plain.times, gz.times)
    assert plain.failures.tolist() == gz.failures.tolist()
    # compression is recognised by content, not by the extension
    odd = write_json(tmp_path / "c" / "t4" / "toy_B.json", t4_doc(), gz=True)
    write_json(tmp_path / "c" / "t1" / "toy.json", T1_DOC)
    assert load_dataset(odd).n_configs == len(T1_VALID)


@pytest.mark.parametrize("configs, message", [
    (T1_VALID + [(4, 2)], "violate its restrictions"),  # a configuration the definition forbids
    (T1_VALID[:-1], "have no record"),  # a valid configuration missing
    (T1_VALID + [(1, 1)], "more than once"),  # a duplicate
])
def test_t4_disagreeing_with_definition_names_the_file(tmp_path, configs, message):
    path = make_t4_tree(tmp_path, t4_doc(configs=configs), name="toy_BAD.json.gz")
    with pytest.raises(DatasetError, match=message) as info:
        load_dataset(path)
    assert str(path) in str(info.value)


def test_t4_value_or_parameter_unknown_to_definition(tmp_path):
    doc = t4_doc()
    doc["results"][0]["configuration"]["bx"] = 3
    path = make_t4_tree(tmp_path, doc)
    with pytest.raises(DatasetError, match=r"value that the definition .* does not list, e\.g\. 3"):
        load_dataset(path)
    doc = t4_doc()
    doc["results"][2]["configuration"]["unroll"] = 1
    with pytest.raises(DatasetError, match="unroll"):
        load_dataset(make_t4_tree(tmp_path / "x", doc))
    doc = t4_doc()
    del doc["results"][1]["configuration"]["tile"]
    with pytest.raises(DatasetError, match="result #1 lacks 'tile'"):
        load_dataset(make_t4_tree(tmp_path / "y", doc))


def test_t4_definition_lookup_prefers_longest_prefix_and_real_t1_files(tmp_path):
    write_json(tmp_path / "t1" / "conv.json", T1_DOC)
    other = json.loads(json.dumps(T1_DOC))
    other["ConfigurationSpace"]["Conditions"] = []  # no restriction: 9 configurations
    write_json(tmp_path / "t1" / "conv_big.json", other)
    write_json(tmp_path / "t1" / "conv_big_extra_notes.json", {"not": "a definition"})
    path = write_json(tmp_path / "t4" / "conv_big_GPU.json.gz",
                      t4_doc(configs=[(bx, t) for bx in (1, 2, 4) for t in (1, 2, 3)]))
    assert find_definition(path) == tmp_path / "t1" / "conv_big.json"
    rec = load_dataset(path)
    assert rec.n_configs == 9 and rec.device == "GPU" and rec.restrictions == []
    # the shorter prefix is used when asked for explicitly, and then the file disagrees with it
    with pytest.raises(DatasetError, match="violate its restrictions"):
        load_dataset(path, definition=tmp_path / "t1" / "conv.json")


def test_t4_without_definition_is_a_clear_error(tmp_path):
    path = write_json(tmp_path / "t4" / "lonely_A100.json.gz", t4_doc())
    with pytest.raises(DatasetError, match="definition="):
        load_dataset(path)
    # given explicitly (path, parsed document or SpaceDefinition), it loads
    write_json(tmp_path / "defs" / "whatever.json", T1_DOC)
    assert load_dataset(path, definition=tmp_path / "defs" / "whatever.json").n_configs == len(T1_VALID)
    assert load_dataset(path, definition=T1_DOC).n_configs == len(T1_VALID)
    defn = SpaceDefinition("lonely", {"bx": [1, 2, 4], "tile": [1, 2, 3]}, ["bx * tile <= 6"])
    rec = load_dataset(path, definition=defn)
    assert rec.n_configs == len(T1_VALID) and rec.device == "A100"


def test_load_definition_evaluates_value_expressions(tmp_path):
    defn = load_definition(write_json(tmp_path / "toy.json", T1_DOC))
    assert defn.params == {"bx": [1, 2, 4], "tile": [1, 2, 3]}
    assert defn.kernel == "toy" and defn.name == "toy"
    assert [tuple(c.values()) for c in defn.build()] == T1_VALID
    bad = json.loads(json.dumps(T1_DOC))
    bad["ConfigurationSpace"]["TuningParameters"][0]["Values"] = "[__import__('os')]"
    with pytest.raises(DatasetError, match="'bx'"):
        load_definition(bad)


def test_a_t1_file_or_unknown_json_is_refused(tmp_path):
    with pytest.raises(DatasetError, match="load_definition"):
        load_dataset(write_json(tmp_path / "t1" / "toy.json", T1_DOC))
    with pytest.raises(DatasetError, match="unrecognised format"):
        load_dataset(write_json(tmp_path / "x.json", {"hello": [1, 2]}))
    broken = tmp_path / "broken.json.gz"
    broken.write_bytes(gzip.compress(b'{"results": ['))
    with pytest.raises(DatasetError, match="not valid JSON"):
        load_dataset(broken)
    with pytest.raises(FileNotFoundError):
        load_dataset(tmp_path / "absent.json")


# -- Kernel Tuner cache ---------------------------------------------------------------------------


def test_kernel_tuner_cache_loads_and_maps_failure_strings(tmp_path):
    path = write_json(tmp_path / "kerneltuner" / "toy_GPU.json.gz", kt_doc(failures={
        (1, "y"): "InvalidConfig", (2, "x"): "CompilationFailedConfig", (4, "y"): "RuntimeFailedConfig"}))
    rec = load_dataset(path)
    assert rec.format == "kerneltuner"
    assert rec.device == "Toy GPU 9000" and rec.kernel == "toy_kernel"
    assert rec.params == {"a": [1, 2, 4], "mode": ["x", "y"]}
    assert rec.restrictions == []
    assert rec.n_configs == 6 and rec.n_valid == 3
    assert rec.failures[rec.row_of({"a": 1, "mode": "y"})] is FailureKind.INVALID
    assert rec.failures[rec.row_of({"a": 2, "mode": "x"})] is FailureKind.COMPILE
    assert rec.failures[rec.row_of({"a": 4, "mode": "y"})] is FailureKind.RUNTIME
    assert rec.statuses[rec.row_of({"a": 2, "mode": "x"})] == "CompilationFailedConfig"
    row = rec.row_of({"a": 2, "mode": "y"})
    assert rec.times[row] == 2.25
    np.testing.assert_allclose(rec.samples_of(row), [2.025, 2.25, 2.475])
    assert rec.optimum == 1.0 == rec.valid_times().min()
    m = rec.measurement(rec.row_of({"a": 4, "mode": "y"}))
    assert m.failure is FailureKind.RUNTIME and "RuntimeFailedConfig" in m.detail


def test_kernel_tuner_space_is_exactly_the_recorded_configurations(tmp_path):
    doc = kt_doc()
    del doc["cache"]["4,y"]
    rec = load_dataset(write_json(tmp_path / "toy_GPU.json", doc))
    assert rec.n_configs == 5 and rec.row_of({"a": 4, "mode": "y"}) == -1
    assert rec.space.cartesian_size == 6


def test_kernel_tuner_entries_without_parameter_fields_are_parsed_from_keys(tmp_path):
    with_fields = load_dataset(write_json(tmp_path / "a" / "toy_GPU.json", kt_doc()))
    from_keys = load_dataset(write_json(tmp_path / "b" / "toy_GPU.json", kt_doc(with_fields=False)))
    np.testing.assert_array_equal(with_fields.times, from_keys.times)
    assert [with_fields.space.tuple(r) for r in range(6)] == [from_keys.space.tuple(r) for r in range(6)]
    doc = kt_doc(with_fields=False)
    doc["cache"]["8,x"] = {"time": 1.0}
    with pytest.raises(DatasetError, match="'8' is not a value of parameter 'a'"):
        load_dataset(write_json(tmp_path / "c" / "toy_GPU.json", doc))


def test_kernel_tuner_nonfinite_or_missing_time_is_a_runtime_failure(tmp_path):
    doc = kt_doc()
    doc["cache"]["1,x"]["time"] = None
    doc["cache"]["2,x"]["time"] = "SomeNewFailureConfig"
    rec = load_dataset(write_json(tmp_path / "toy_GPU.json", doc))
    assert rec.failures[rec.row_of((1, "x"))] is FailureKind.RUNTIME
    assert rec.failures[rec.row_of((2, "x"))] is FailureKind.RUNTIME
    assert np.array_equal(np.isnan(rec.times), np.array([f is not None for f in rec.failures]))


def test_kernel_tuner_with_definition_is_verified_against_it(tmp_path):
    path = write_json(tmp_path / "toy_GPU.json", kt_doc())
    defn = SpaceDefinition("toy", {"a": [1, 2, 4], "mode": ["x", "y"]}, ["a < 4 or mode == 'x'"])
    with pytest.raises(DatasetError, match="violate its restrictions"):
        load_dataset(path, definition=defn)
    loose = SpaceDefinition("toy", {"mode": ["x", "y"], "a": [1, 2, 4]}, [])
    rec = load_dataset(path, definition=loose)
    assert rec.space.names == ("mode", "a") and rec.n_configs == 6  # the definition fixes the order


# -- KTT ------------------------------------------------------------------------------------------


def test_ktt_loads_durations_in_ms_and_counters(tmp_path):
    rec = load_dataset(write_json(tmp_path / "ktt" / "KTToy_Card.json.gz", ktt_doc()))
    assert rec.format == "ktt" and rec.device == "Toy Card" and rec.kernel == "Convolution"
    assert rec.params == {"BX": [8, 16, 32], "RO": [0, 1]}
    assert rec.n_configs == 6 and rec.n_valid == 5
    row = rec.row_of({"BX": 16, "RO": 1})
    assert rec.times[row] == pytest.approx(16.5)  # 16500 us -> 16.5 ms
    assert rec.measurement(row).samples == [pytest.approx(16.5)]
    failed = rec.row_of({"BX": 32, "RO": 1})
    assert rec.failures[failed] is FailureKind.RUNTIME and rec.statuses[failed] == "ComputationFailed"
    assert set(rec.counters) == {"dram__bytes.sum", "sm__warps_active.pct"}
    assert rec.counters["dram__bytes.sum"][row] == 1601.0
    assert math.isnan(rec.counters["dram__bytes.sum"][failed])
    assert rec.counters_of(row) == {"dram__bytes.sum": 1601.0, "sm__warps_active.pct": 51.0}
    assert rec.counters_of(failed) == {}


def test_ktt_without_counters_and_other_units(tmp_path):
    rec = load_dataset(write_json(tmp_path / "ktt.json", ktt_doc(with_counters=False, time_unit="Nanoseconds")))
    assert rec.counters is None
    assert rec.times[rec.row_of((8, 0))] == pytest.approx(8000.0 * 1e-6)
    with pytest.raises(DatasetError, match="unknown time unit 'fortnights'"):
        load_dataset(write_json(tmp_path / "bad.json", ktt_doc(time_unit="fortnights")))


def test_ktt_inconsistent_configuration_names(tmp_path):
    doc = ktt_doc()
    doc["Results"][3]["Configuration"][1]["Name"] = "READ_ONLY"
    with pytest.raises(DatasetError, match=r"Results\[3\]"):
        load_dataset(write_json(tmp_path / "ktt.json", doc))


# -- cache, discovery, immutability ----------------------------------------------------------------


def test_loads_are_memoised_by_path_and_invalidated_on_change(tmp_path):
    path = write_json(tmp_path / "toy_GPU.json", kt_doc())
    clear_cache()
    first = load_dataset(path)
    assert load_dataset(str(path)) is first
    assert load_dataset(path, cache=False) is not first
    doc = kt_doc()
    doc["cache"]["1,x"]["time"] = 0.5
    write_json(path, doc)
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    second = load_dataset(path)
    assert second is not first and second.optimum == 0.5


def test_memoised_t4_is_reloaded_when_its_definition_changes(tmp_path):
    path = make_t4_tree(tmp_path)
    first = load_dataset(path)
    assert load_dataset(path) is first
    loose = json.loads(json.dumps(T1_DOC))
    loose["ConfigurationSpace"]["Conditions"] = [{"Expression": "bx * tile <= 4"}]
    t1 = write_json(tmp_path / "t1" / "toy.json", loose)
    os.utime(t1, ns=(time.time_ns(), time.time_ns() + 10**9))
    with pytest.raises(DatasetError, match="violate its restrictions"):
        load_dataset(path)


def test_recorded_arrays_are_read_only(tmp_path):
    rec = load_dataset(write_json(tmp_path / "ktt.json", ktt_doc()))
    with pytest.raises(ValueError):
        rec.times[0] = 0.0
    with pytest.raises(ValueError):
        rec.counters["dram__bytes.sum"][0] = 0.0


def test_discover_finds_measured_files_by_content(tmp_path):
    make_t4_tree(tmp_path)
    write_json(tmp_path / "kerneltuner" / "toy_GPU.json.gz", kt_doc())
    write_json(tmp_path / "ktt" / "KTToy_Card.json", ktt_doc())
    write_json(tmp_path / "elsewhere" / "deep" / "cache_from_a_run.json", kt_doc())  # any layout
    write_json(tmp_path / "notes.json", {"comment": "no measurements"})
    (tmp_path / "README.md").write_text("not json")
    found = discover(tmp_path)
    assert found == sorted([
        tmp_path / "t4" / "toy_GPU_X.json.gz",
        tmp_path / "kerneltuner" / "toy_GPU.json.gz",
        tmp_path / "ktt" / "KTToy_Card.json",
        tmp_path / "elsewhere" / "deep" / "cache_from_a_run.json",
    ])
    assert [load_dataset(p).format for p in found] == [sniff_format(p) for p in found]
    with pytest.raises(FileNotFoundError):
        discover(tmp_path / "absent")


def test_sniff_large_files_from_their_head(tmp_path, monkeypatch):
    import pytest_autotune.datasets.load as ds
    monkeypatch.setattr(ds, "_SNIFF_BYTES", 300)  # force the prefix path on these small files
    for doc in (kt_doc(), ktt_doc(), t4_doc()):
        assert len(json.dumps(doc)) > 300
    assert sniff_format(write_json(tmp_path / "kt.json.gz", kt_doc())) == "kerneltuner"
    assert sniff_format(write_json(tmp_path / "ktt.json", ktt_doc())) == "ktt"
    assert sniff_format(write_json(tmp_path / "t4.json", t4_doc())) == "t4"
    assert sniff_format(write_json(tmp_path / "x.json", {"padding": "z" * 400})) is None


def test_detect_format():
    assert detect_format(t4_doc()) == "t4"
    assert detect_format(kt_doc()) == "kerneltuner"
    assert detect_format(ktt_doc()) == "ktt"
    assert detect_format(T1_DOC) == "t1"
    with pytest.raises(DatasetError):
        detect_format([1, 2, 3])


def test_default_root_honours_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("AUTOTUNE_SPACES", str(tmp_path))
    assert default_spaces_root() == tmp_path
    monkeypatch.delenv("AUTOTUNE_SPACES")
    assert default_spaces_root().parts[-3:] == ("shared", "data", "spaces")


# -- the real brute-forced spaces ---------------------------------------------------------------------

SPACES = default_spaces_root()
needs_spaces = pytest.mark.skipif(not SPACES.is_dir(), reason=f"recorded spaces not found at {SPACES} "
                                  "(set AUTOTUNE_SPACES to the folder of ../shared/data/spaces)")

# file -> (configs, valid), as in the README table
README_COUNTS = {
    "t4/convolution_milo_A100.json.gz": (4362, 4201),
    "t4/convolution_milo_A4000.json.gz": (4362, 4201),
    "t4/convolution_milo_A6000.json.gz": (4362, 3889),
    "t4/convolution_milo_MI250X.json.gz": (4362, 4362),
    "t4/convolution_milo_W6600.json.gz": (4362, 4362),
    "t4/convolution_milo_W7800.json.gz": (4362, 4246),
    "kerneltuner/gemm_RTX_2080_Ti.json.gz": (17956, 17956),
    "kerneltuner/gemm_RTX_3090.json.gz": (17956, 17956),
    "kerneltuner/gemm_RTX_Titan.json.gz": (17956, 17956),
    "kerneltuner/pnpoly_RTX_2080_Ti.json.gz": (4092, 3734),
    "kerneltuner/pnpoly_RTX_3060_laptop.json.gz": (4092, 3774),
    "kerneltuner/pnpoly_RTX_3090.json.gz": (4092, 3774),
    "kerneltuner/pnpoly_RTX_Titan.json.gz": (4092, 3750),
    "ktt/KTConvolutionOutput_2080Ti.json.gz": (6768, 5280),
    "ktt/KTConvolutionOutput_3090.json.gz": (6768, 5240),
}


@needs_spaces
def test_discover_finds_every_measured_space():
    found = discover(SPACES)
    assert [p.relative_to(SPACES).as_posix() for p in found] == sorted(README_COUNTS)


@needs_spaces
@pytest.mark.parametrize("relpath", sorted(README_COUNTS))
def test_real_space_counts_match_the_readme(relpath):
    rec = load_dataset(SPACES / relpath)
    configs, valid = README_COUNTS[relpath]
    assert (rec.n_configs, rec.n_valid) == (configs, valid)
    assert rec.format == relpath.split("/")[0]
    ok = rec.ok
    assert np.array_equal(ok, np.array([f is None for f in rec.failures]))
    assert np.all(rec.times[ok] > 0)
    assert rec.optimum == rec.valid_times().min()
    assert rec.measurement(rec.best_row).value == rec.optimum
    assert sum(rec.failure_counts().values()) == configs - valid
    # every row's configuration round-trips through the space
    for row in (0, rec.n_configs // 2, rec.n_configs - 1):
        assert rec.row_of(rec.params_of(row)) == row


@needs_spaces
def test_real_t4_failure_kinds_and_device():
    rec = load_dataset(SPACES / "t4/convolution_milo_A6000.json.gz")
    assert rec.device == "A6000" and rec.kernel == "convolution_milo"
    assert rec.failure_counts() == {FailureKind.COMPILE: 252, FailureKind.RUNTIME: 221}
    assert len(rec.restrictions) == 4
    row = rec.best_row
    assert len(rec.measurement(row).samples) > 1  # times.runtimes kept as samples


@needs_spaces
def test_real_kernel_tuner_failures_and_device():
    rec = load_dataset(SPACES / "kerneltuner/pnpoly_RTX_3090.json.gz")
    assert rec.device == "NVIDIA GeForce RTX 3090"
    assert rec.failure_counts() == {FailureKind.RUNTIME: 318}
    assert set(rec.statuses[~rec.ok]) == {"RuntimeFailedConfig"}


@needs_spaces
def test_real_gemm_cache_equals_the_readme_restrictions():
    rec = load_dataset(SPACES / "kerneltuner/gemm_RTX_3090.json.gz")
    built = SearchSpace(rec.params, GEMM_RESTRICTIONS)
    assert len(built) == rec.n_configs
    np.testing.assert_array_equal(built.indices, rec.space.indices)


@needs_spaces
def test_real_ktt_counters():
    with_counters = load_dataset(SPACES / "ktt/KTConvolutionOutput_2080Ti.json.gz")
    assert with_counters.device == "NVIDIA GeForce RTX 2080 Ti"
    assert with_counters.counters is not None and len(with_counters.counters) >= 10
    present = np.all([~np.isnan(v) for v in with_counters.counters.values()], axis=0)
    assert np.array_equal(present, with_counters.ok)  # counters for every Ok configuration, none for failed
    assert with_counters.failure_counts() == {FailureKind.RUNTIME: 1488}
    # durations are microseconds in the file: a convolution of 4096^2 takes about a millisecond
    assert 0.1 < with_counters.optimum < 10
    without = load_dataset(SPACES / "ktt/KTConvolutionOutput_3090.json.gz")
    assert without.counters is None and without.counters_of(without.best_row) == {}


@needs_spaces
@pytest.mark.parametrize("relpath", ["kerneltuner/gemm_RTX_2080_Ti.json.gz", "ktt/KTConvolutionOutput_2080Ti.json.gz"])
def test_real_largest_files_load_fast(relpath):
    # CPU time of this process, so that other work on a busy machine does not count
    best = _timed_load(SPACES / relpath)
    assert best < 1.5, f"{relpath} took {best:.2f} s of CPU to load (about 0.4 s expected)"


def _timed_load(path):
    start = time.process_time()
    load_dataset(path, cache=False)
    return time.process_time() - start
