"""Lockfile schema, canonical serialisation, merge under a file lock, atomic writes, and hashing."""
from __future__ import annotations

import copy
import functools
import json
import os
import pickle
import random
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import filelock
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pytest_autotune
from pytest_autotune.lock.hashing import describe_callable, hash_problem, hash_source, hash_space, stable_hash
from pytest_autotune.lock.lockfile import (
    SCHEMA_VERSION,
    InvalidEntryError,
    Lockfile,
    LockfileError,
    LockTimeoutError,
    NewerSchemaError,
    entry_key,
    get_entry,
    lockfile_path,
    merge_entries,
    normalize_entry,
    parse_lockfile,
    read_lockfile,
    serialize,
    stale_hashes,
    utc_timestamp,
)
from pytest_autotune.results import FailureKind
from pytest_autotune.execution.device import DeviceInfo

DEVICE = DeviceInfo(
    model="NVIDIA H100 80GB HBM3",
    kind="cuda",
    versions={"driver": "550.54.15", "cuda": "12.4"},
    properties={"compute_capability": (9, 0), "multiprocessors": 132},
).as_dict()


def make_entry(median: float = 0.5, **overrides):
    entry = {
        "params": {"block_size_x": 128, "block_size_y": 4, "tile": 2},
        "stats": {"median": median, "mean": median * 1.01, "min": median * 0.98, "iqr": 0.002, "n": 3},
        "samples": [median * 0.98, median, median * 1.05],
        "hashes": {"source": "a" * 16, "space": "b" * 16, "problem": "c" * 16},
    }
    entry.update(overrides)
    return entry


def full_entry(median: float = 0.5):
    """An entry with every optional field the plugin fills."""
    return make_entry(
        median,
        runners_up=[{"params": {"block_size_x": 64, "block_size_y": 8, "tile": 1}, "median": median * 1.1, "samples": [median * 1.1]}],
        objective="time",
        unit="ms",
        strategy={"name": "genetic", "hyperparameters": {"population": 20, "mutation": 0.1}, "seed": 42},
        evaluations={"total": 87, "failed": {"compile": 2, "launch": 1}, "budget": 100},
        runner="cupy",
        versions={"cupy": "13.1.0", "cuda": "12.4", "pytest-autotune": "0.1.0"},
        tolerance={"atol": 1e-6, "rtol": 1e-5},
        timestamp="2024-05-01T12:00:00Z",
        geometry={"grid": [64, 64, 1], "block": [128, 4, 1]},
        source={"file": "kernels/matmul.cu", "kernel": "matmul"},
    )


def listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


# --------------------------------------------------------------------------- keys, paths


def test_entry_key_joins_nodeid_and_kernel():
    assert entry_key("tests/test_mm.py::test_mm[1024-float32]", "matmul") == "tests/test_mm.py::test_mm[1024-float32]::matmul"
    with pytest.raises(ValueError, match="kernel"):
        entry_key("tests/test_mm.py::test_mm", "")
    with pytest.raises(ValueError, match="nodeid"):
        entry_key("", "matmul")


def test_lockfile_path_uses_device_slug(tmp_path):
    assert lockfile_path(tmp_path / "autotune.lock", "nvidia-h100-80gb-hbm3") == tmp_path / "autotune.lock" / "nvidia-h100-80gb-hbm3.json"
    for bad in ["", "..", "../evil", "a/b", "a\\b"]:
        with pytest.raises(ValueError):
            lockfile_path(tmp_path, bad)


def test_utc_timestamp_format():
    import datetime as dt

    stamp = utc_timestamp(dt.datetime(2024, 5, 1, 14, 0, 0, tzinfo=dt.timezone(dt.timedelta(hours=2))))
    assert stamp == "2024-05-01T12:00:00Z"
    with pytest.raises(ValueError):
        utc_timestamp(dt.datetime(2024, 5, 1))
    normalize_entry(make_entry(timestamp=utc_timestamp()))  # what we produce, we accept


# --------------------------------------------------------------------------- round trip and format


def test_read_absent_returns_none(tmp_path):
    assert read_lockfile(tmp_path / "missing.json") is None


def test_round_trip_keeps_every_field(tmp_path):
    path = tmp_path / "autotune.lock" / "gpu.json"
    entries = {entry_key("tests/test_a.py::test_mm", "matmul"): full_entry(0.5), "tests/test_b.py::test_x::k": make_entry(1.5)}
    entries["tests/test_b.py::test_x::k"]["future_field"] = {"kept": [1, 2]}  # unknown fields survive a rewrite
    written = merge_entries(path, entries, DEVICE)
    back = read_lockfile(path)
    assert back == written
    assert back.schema == SCHEMA_VERSION
    assert back.device == json.loads(json.dumps(DEVICE))  # tuples become lists, nothing else changes
    assert back.entries == {k: normalize_entry(v) for k, v in entries.items()}
    assert back.entries[entry_key("tests/test_a.py::test_mm", "matmul")]["samples"] == [0.49, 0.5, 0.525]
    assert get_entry(back, "tests/test_a.py::test_mm", "matmul") == entries[entry_key("tests/test_a.py::test_mm", "matmul")]
    assert get_entry(back, "tests/test_a.py::test_mm", "other") is None
    assert get_entry(None, "tests/test_a.py::test_mm", "matmul") is None
    data = json.loads(path.read_text())
    assert set(data) == {"schema", "device", "entries"} and data["schema"] == SCHEMA_VERSION == 2


def test_timing_floats_rounded_params_exact_and_numpy_accepted(tmp_path):
    entry = make_entry(
        0.123456789123,
        samples=np.array([0.123456789123, 1.0 / 3.0, 2e-9 / 3.0]),
        params={"alpha": 0.123456789123, "n": np.int64(7), "flag": np.bool_(True), "kind": FailureKind.COMPILE},
        runners_up=[{"params": {"alpha": 1 / 3}, "median": np.float32(2 / 3), "samples": (1 / 3,)}],
    )
    entry["stats"]["n"] = np.int32(3)
    norm = normalize_entry(entry)
    assert norm["samples"] == [0.123457, 0.333333, 6.66667e-10]
    assert norm["stats"]["median"] == 0.123457 and norm["stats"]["n"] == 3 and type(norm["stats"]["n"]) is int
    assert norm["params"] == {"alpha": 0.123456789123, "n": 7, "flag": True, "kind": "compile"}  # never rounded
    assert norm["runners_up"] == [{"params": {"alpha": 1 / 3}, "median": 0.666667, "samples": [0.333333]}]
    merge_entries(tmp_path / "g.json", {"k": entry}, DEVICE)
    assert read_lockfile(tmp_path / "g.json").entries["k"] == norm


def test_serialization_is_canonical(tmp_path):
    entries = {f"tests/test_{i}.py::test::k": full_entry(0.1 * (i + 1)) for i in range(6)}
    path = tmp_path / "a.json"
    merge_entries(path, entries, DEVICE)
    text = path.read_text()
    assert text.endswith("}\n") and not text.endswith("\n\n")
    assert "\r" not in text and "\t" not in text

    # Keys sorted at every level.
    def check_sorted(pairs):
        keys = [k for k, _ in pairs]
        assert keys == sorted(keys)
        return dict(pairs)

    json.loads(text, object_pairs_hook=check_sorted)
    # Numeric arrays on one line; one block per entry starting at a fixed indent.
    lines = text.splitlines()
    sample_lines = [line for line in lines if line.strip().startswith('"samples":')]
    assert sample_lines and all(line.rstrip(",").endswith("]") for line in sample_lines)
    assert sum(1 for line in lines if line.startswith('    "tests/')) == len(entries)
    # Re-serialising what was read changes no byte.
    assert serialize(parse_lockfile(text)) == text


def _shuffled(obj, rng):
    """Same data, every mapping rebuilt in a random insertion order."""
    if isinstance(obj, dict):
        items = list(obj.items())
        rng.shuffle(items)
        return {k: _shuffled(v, rng) for k, v in items}
    if isinstance(obj, list):
        return [_shuffled(v, rng) for v in obj]
    return obj


def test_insertion_order_does_not_change_bytes(tmp_path):
    entries = {f"tests/test_{i}.py::test[{i}]::kern": full_entry(0.01 * (i + 1)) for i in range(8)}
    outputs = set()
    for seed in range(4):
        rng = random.Random(seed)
        path = tmp_path / f"run{seed}" / "gpu.json"
        keys = list(entries)
        rng.shuffle(keys)
        for key in keys:  # one merge per entry, in a different order each time
            merge_entries(path, {key: _shuffled(copy.deepcopy(entries[key]), rng)}, _shuffled(DEVICE, rng))
        outputs.add(path.read_bytes())
    assert len(outputs) == 1


def test_unchanged_merge_does_not_rewrite(tmp_path):
    path = tmp_path / "gpu.json"
    merge_entries(path, {"a::k": make_entry()}, DEVICE)
    before = os.stat(path)
    merge_entries(path, {"a::k": make_entry()}, DEVICE)
    after = os.stat(path)
    assert (before.st_ino, before.st_mtime_ns) == (after.st_ino, after.st_mtime_ns)


_finite = st.floats(min_value=-1e12, max_value=1e12, allow_nan=False, allow_infinity=False)
_positive = st.floats(min_value=1e-9, max_value=1e6, allow_nan=False)
# what a parameter can be: an identifier naming a number, a boolean or a one-line string
_param_name = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,5}", fullmatch=True)
_param_value = st.one_of(st.booleans(), st.integers(-(2**53), 2**53), _finite,
                         st.text(max_size=8).filter(lambda t: not set(t) & set("\n\r\0")))


@st.composite
def _entries(draw):
    entries = {}
    for key in draw(st.lists(st.text(min_size=1, max_size=20), min_size=1, max_size=4, unique=True)):
        median = draw(_positive)
        entries[key] = make_entry(
            median,
            params=draw(st.dictionaries(_param_name, _param_value, max_size=4)),
            samples=draw(st.lists(_positive, min_size=1, max_size=12)),
            tolerance=draw(st.one_of(_finite, st.dictionaries(st.text(max_size=4), _finite, max_size=2))),
        )
    return entries


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_entries())
def test_property_serialization_round_trips_and_is_idempotent(entries):
    text = serialize(Lockfile(device=DEVICE, entries=entries))
    parsed = parse_lockfile(text)
    assert serialize(parsed) == text
    assert parsed.entries.keys() == entries.keys()
    for key, entry in entries.items():
        assert parsed.entries[key]["params"] == entry["params"]  # exact, including floats
        assert parsed.entries[key]["tolerance"] == entry["tolerance"]
        assert parsed.entries[key]["samples"] == pytest.approx(entry["samples"], rel=1e-5)


# --------------------------------------------------------------------------- merge semantics


def test_merge_keeps_other_entries_replaces_and_removes(tmp_path):
    path = tmp_path / "gpu.json"
    merge_entries(path, {"a::k": make_entry(1.0), "b::k": make_entry(2.0)}, DEVICE)
    merge_entries(path, {"c::k": make_entry(3.0)}, DEVICE)
    result = merge_entries(path, {"a::k": make_entry(0.5)}, DEVICE, remove=["b::k", "never-there::k"])
    back = read_lockfile(path)
    assert back == result
    assert sorted(back.entries) == ["a::k", "c::k"]
    assert back.entries["a::k"]["stats"]["median"] == 0.5
    assert back.entries["c::k"]["stats"]["median"] == 3.0


def test_merge_updates_device_block(tmp_path):
    path = tmp_path / "gpu.json"
    merge_entries(path, {"a::k": make_entry()}, DEVICE)
    newer = dict(DEVICE, versions={"driver": "560.1", "cuda": "12.6"})
    merge_entries(path, {}, DeviceInfo("NVIDIA H100 80GB HBM3", "cuda", {"driver": "560.1", "cuda": "12.6"}, DEVICE["properties"]))
    back = read_lockfile(path)
    assert back.device["versions"] == newer["versions"]
    assert "a::k" in back.entries


def test_merge_nothing_into_absent_file_creates_nothing(tmp_path):
    path = tmp_path / "gpu.json"
    assert merge_entries(path, {}, DEVICE, remove=["x::k"]).entries == {}
    assert not path.exists()


def test_merge_rejects_key_both_written_and_removed(tmp_path):
    with pytest.raises(ValueError, match="a::k"):
        merge_entries(tmp_path / "gpu.json", {"a::k": make_entry()}, DEVICE, remove=["a::k"])


def test_new_lock_directory_gets_gitignore_for_lock_files(tmp_path):
    lockdir = tmp_path / "autotune.lock"
    merge_entries(lockfile_path(lockdir, "gpu"), {"a::k": make_entry()}, DEVICE)
    assert [n for n in listing(lockdir) if not n.endswith(".lock")] == [".gitignore", "gpu.json"]  # no temp files
    assert "*.lock" in (lockdir / ".gitignore").read_text().splitlines()
    (lockdir / ".gitignore").unlink()  # a user's deletion is respected once the directory exists
    merge_entries(lockfile_path(lockdir, "gpu"), {"b::k": make_entry()}, DEVICE)
    assert not (lockdir / ".gitignore").exists()


_WORKER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from pytest_autotune.lock.lockfile import merge_entries
    path, worker, n, go = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
    deadline = time.monotonic() + 30
    while not go.exists():  # start together, to collide as much as possible
        if time.monotonic() > deadline:
            sys.exit("never got the go signal")
        time.sleep(0.001)
    device = {"model": "Test GPU", "kind": "cuda", "slug": "test-gpu"}
    for i in range(n):
        entry = {
            "params": {"worker": worker, "i": i},
            "stats": {"median": 1.0 + i, "mean": 1.0 + i, "min": 1.0, "iqr": 0.0, "n": 1},
            "samples": [1.0 + i],
            "hashes": {"source": "s", "space": "p", "problem": "q"},
        }
        merge_entries(path, {f"tests/test_w{worker}.py::test[{i}]::k": entry}, device, timeout=30)
    """
)


def test_concurrent_processes_never_lose_entries(tmp_path):
    workers, per_worker = 4, 10
    path = tmp_path / "autotune.lock" / "test-gpu.json"
    go = tmp_path / "go"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(pytest_autotune.__file__).parent.parent), os.environ.get("PYTHONPATH", "")]))
    procs = [
        subprocess.Popen([sys.executable, "-c", _WORKER, str(path), str(w), str(per_worker), str(go)], env=env, stderr=subprocess.PIPE, text=True)
        for w in range(workers)
    ]
    time.sleep(0.3)  # let the interpreters start and reach the barrier
    go.touch()
    for p in procs:
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
    final = read_lockfile(path)  # valid JSON and valid schema
    expected = {f"tests/test_w{w}.py::test[{i}]::k" for w in range(workers) for i in range(per_worker)}
    assert set(final.entries) == expected
    assert all(final.entries[f"tests/test_w{w}.py::test[{i}]::k"]["params"] == {"worker": w, "i": i} for w in range(workers) for i in range(per_worker))
    assert not [n for n in listing(path.parent) if n.endswith(".tmp")]


def test_lock_timeout_is_a_clear_error(tmp_path):
    path = tmp_path / "gpu.json"
    merge_entries(path, {"a::k": make_entry()}, DEVICE)
    before = path.read_bytes()
    with filelock.FileLock(str(path) + ".lock"):
        t0 = time.monotonic()
        with pytest.raises(LockTimeoutError) as info:
            merge_entries(path, {"b::k": make_entry()}, DEVICE, timeout=0.2)
        assert time.monotonic() - t0 < 5
    assert str(path) + ".lock" in str(info.value) and "0.2 s" in str(info.value)
    assert isinstance(info.value, LockfileError) and info.value.path == path
    assert path.read_bytes() == before


# --------------------------------------------------------------------------- files we must not touch

_VALID = serialize(Lockfile(device=DEVICE, entries={"a::k": make_entry()}))

CORRUPT = {
    "truncated": _VALID[: len(_VALID) // 2],
    "empty": "",
    "merge-conflict": _VALID.replace('"entries": {', '"entries": {\n<<<<<<< HEAD\n=======\n>>>>>>> other\n', 1),
    "top-level-list": "[1, 2, 3]\n",
    "duplicate-key": '{"schema": 1, "schema": 1, "device": {}, "entries": {}}\n',
    "nan": _VALID.replace('"iqr": 0.002', '"iqr": NaN'),
    "no-schema": '{"device": {}, "entries": {}}\n',
    "schema-zero": '{"schema": 0, "device": {}, "entries": {}}\n',
    "schema-string": '{"schema": "1", "device": {}, "entries": {}}\n',
    "entries-list": '{"schema": 1, "device": {}, "entries": []}\n',
    "unknown-top-level": '{"schema": 1, "device": {}, "entries": {}, "extra": 1}\n',
    "entry-missing-stats": json.dumps({"schema": 1, "device": {}, "entries": {"a::k": {"params": {}, "samples": [], "hashes": {}}}}),
}


@pytest.mark.parametrize("name", sorted(CORRUPT))
def test_corrupt_file_raises_naming_path_and_is_never_modified(tmp_path, name):
    path = tmp_path / "gpu.json"
    path.write_text(CORRUPT[name])
    before = path.read_bytes()
    with pytest.raises(LockfileError) as info:
        read_lockfile(path)
    assert str(path) in str(info.value) and info.value.path == path
    with pytest.raises(LockfileError):
        merge_entries(path, {"b::k": make_entry()}, DEVICE)
    with pytest.raises(LockfileError):
        merge_entries(path, {}, DEVICE, remove=["a::k"])
    assert path.read_bytes() == before
    assert not [n for n in listing(tmp_path) if n.endswith(".tmp")]


def test_corrupt_file_messages_are_specific(tmp_path):
    path = tmp_path / "gpu.json"
    path.write_text(CORRUPT["merge-conflict"])
    with pytest.raises(LockfileError, match="merge conflict"):
        read_lockfile(path)
    path.write_text(CORRUPT["duplicate-key"])
    with pytest.raises(LockfileError, match="duplicate key 'schema'"):
        read_lockfile(path)
    path.write_text(CORRUPT["entry-missing-stats"])
    with pytest.raises(InvalidEntryError, match=r"entry 'a::k': stats: is required") as info:
        read_lockfile(path)
    assert info.value.key == "a::k"
    path.write_text(CORRUPT["nan"])
    with pytest.raises(InvalidEntryError, match=r"entry 'a::k': stats.iqr: must be a finite number"):
        read_lockfile(path)
    path.write_text('{"schema": 1, "device": {"clock": Infinity}, "entries": {}}')
    with pytest.raises(LockfileError, match=r"device.clock: must be a finite number"):
        read_lockfile(path)
    path.write_bytes(b'{"schema": 1, "device": {"model": "\xff"}, "entries": {}}')
    with pytest.raises(LockfileError, match="not UTF-8"):
        read_lockfile(path)


def test_newer_schema_is_refused_and_untouched(tmp_path):
    path = tmp_path / "gpu.json"
    data = json.loads(_VALID)
    data["schema"] = SCHEMA_VERSION + 1
    path.write_text(json.dumps(data))
    before = path.read_bytes()
    with pytest.raises(NewerSchemaError) as info:
        read_lockfile(path)
    assert "newer pytest-autotune" in str(info.value) and "upgrade" in str(info.value) and str(path) in str(info.value)
    assert info.value.found == SCHEMA_VERSION + 1
    with pytest.raises(NewerSchemaError):
        merge_entries(path, {"b::k": make_entry()}, DEVICE)
    assert path.read_bytes() == before


def test_errors_survive_pickling(tmp_path):
    for exc in [
        LockfileError(tmp_path / "x.json", "bad"),
        InvalidEntryError(tmp_path / "x.json", "a::k", "stats: is required"),
        NewerSchemaError(tmp_path / "x.json", 7),
        LockTimeoutError(tmp_path / "x.json", str(tmp_path / "x.json.lock"), 1.5),
    ]:
        back = pickle.loads(pickle.dumps(exc))
        assert type(back) is type(exc) and str(back) == str(exc) and back.path == exc.path


# --------------------------------------------------------------------------- atomic write


def test_failed_replace_keeps_original_and_leaves_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "gpu.json"
    merge_entries(path, {"a::k": make_entry(1.0)}, DEVICE)
    before_bytes, before_files = path.read_bytes(), listing(tmp_path)

    def boom(src, dst):
        assert Path(src).exists() and Path(src).parent == path.parent  # temp file is next to the target
        raise OSError("disk on fire")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(LockfileError, match="cannot be written: disk on fire; the lockfile was left untouched"):
        merge_entries(path, {"b::k": make_entry(2.0)}, DEVICE)
    assert path.read_bytes() == before_bytes
    assert listing(tmp_path) == before_files


def test_failed_fsync_on_new_file_creates_nothing(tmp_path, monkeypatch):
    path = tmp_path / "gpu.json"

    def boom(fd):
        raise OSError("fsync failed")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(LockfileError, match="cannot be written: fsync failed"):
        merge_entries(path, {"a::k": make_entry()}, DEVICE)
    monkeypatch.undo()
    assert not path.exists()
    assert [n for n in listing(tmp_path) if not n.endswith(".lock")] == []  # temp file removed
    merge_entries(path, {"a::k": make_entry()}, DEVICE)  # the lock was released despite the failure
    assert "a::k" in read_lockfile(path).entries


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions")
def test_written_file_is_not_private(tmp_path):
    path = tmp_path / "gpu.json"
    merge_entries(path, {"a::k": make_entry()}, DEVICE)
    assert path.stat().st_mode & 0o044 == 0o044  # mkstemp's 0600 must not leak into a committed file


# --------------------------------------------------------------------------- entry validation

INVALID = [
    ("params", lambda e: e.pop("params"), "params: is required"),
    ("params", lambda e: e.update(params=[1, 2]), "params: must be an object"),
    ("stats", lambda e: e.pop("stats"), "stats: is required"),
    ("stats.median", lambda e: e["stats"].update(median="fast"), "stats.median: must be a number"),
    ("stats.iqr", lambda e: e["stats"].pop("iqr"), "stats.iqr: is required"),
    ("stats.n", lambda e: e["stats"].update(n=0), "stats.n: must be a positive integer"),
    ("stats.n", lambda e: e["stats"].update(n=2.5), "stats.n: must be a positive integer"),
    ("samples", lambda e: e.pop("samples"), "samples: is required"),
    ("samples", lambda e: e.update(samples=[1.0, "x"]), "samples: must be a list of numbers"),
    ("samples[1]", lambda e: e.update(samples=[1.0, float("nan")]), "samples[1]: must be a finite number"),
    ("hashes.source", lambda e: e["hashes"].pop("source"), "hashes.source: must be a non-empty string"),
    ("hashes.problem", lambda e: e["hashes"].update(problem=3), "hashes.problem: must be a non-empty string"),
    ("runners_up[0].median", lambda e: e.update(runners_up=[{"params": {}}]), "runners_up[0].median: is required"),
    ("runners_up", lambda e: e.update(runners_up={"a": 1}), "runners_up: must be a list"),
    ("strategy.name", lambda e: e.update(strategy={"seed": 1}), "strategy.name: must be a non-empty string"),
    ("strategy.seed", lambda e: e.update(strategy={"name": "random", "seed": "1"}), "strategy.seed: must be an integer"),
    ("evaluations.failed", lambda e: e.update(evaluations={"total": 3, "failed": {"compile": -1}}), "evaluations.failed"),
    ("timestamp", lambda e: e.update(timestamp="yesterday"), "timestamp: is not ISO 8601"),
    ("timestamp", lambda e: e.update(timestamp="2024-05-01T12:00:00+02:00"), "timestamp: must be in UTC"),
    ("unit", lambda e: e.update(unit=5), "unit: must be a string"),
    # Not representable in a JSON file, so only reachable from Python:
    ("geometry", lambda e: e.update(geometry={"block": object()}), "geometry.block: is not JSON data"),
    ("params", lambda e: e.update(params={1: 2}), "params: keys must be strings"),
]
IN_MEMORY_ONLY = 2


@pytest.mark.parametrize("field, mutate, message", INVALID, ids=[f"{i}-{f}" for i, (f, _, _) in enumerate(INVALID)])
def test_invalid_entry_rejected_naming_file_and_key(tmp_path, field, mutate, message):
    path = tmp_path / "gpu.json"
    key = "tests/test_mm.py::test_mm[64]::matmul"
    entry = full_entry()
    mutate(entry)
    with pytest.raises(InvalidEntryError) as info:
        merge_entries(path, {key: entry, "tests/ok.py::t::k": make_entry()}, DEVICE)
    text = str(info.value)
    assert str(path) in text and repr(key) in text and message in text, text
    assert info.value.key == key
    assert not path.exists()  # validation happens before anything is written
    if INVALID.index((field, mutate, message)) >= len(INVALID) - IN_MEMORY_ONLY:
        return
    # The same entry in a file on disk is reported on read.
    data = json.loads(_VALID)
    data["entries"] = {key: entry}
    path.write_text(json.dumps(data, allow_nan=True))
    with pytest.raises(LockfileError) as info:
        read_lockfile(path)
    assert str(path) in str(info.value) and repr(key) in str(info.value)


def test_stale_hashes_names_what_changed():
    entry = make_entry()
    assert stale_hashes(entry, entry["hashes"]) == []
    assert stale_hashes(entry, dict(entry["hashes"], source="new", problem="new")) == ["problem", "source"]


# --------------------------------------------------------------------------- hashing


def test_hashes_are_short_stable_hex_with_pinned_values():
    # Pinned: a change here silently invalidates every committed lockfile, so it must be deliberate.
    assert hash_source("__global__ void k() {}\n") == "a89bed23265421be"
    assert stable_hash({"a": [1, 2.5, "x", None, True]}) == "498108e1182b9eee"
    assert hash_space({"x": [1, 2], "y": [4, 8]}, ["x * y <= 8"], {"max_threads": 1024}) == "f8e213f46f9e0f83"
    assert hash_problem(1024, [np.zeros((4, 8), np.float32), np.int32(5), 2.0]) == "f234e87c393bacd3"


def test_hash_source_sensitivity():
    src = "__global__ void k(float *x) {\n  x[threadIdx.x] = 1.0f;\n}\n"
    assert hash_source(src) == hash_source(src.replace("\n", "\r\n")) == hash_source(src.replace("\n", "\r"))
    assert hash_source(src) == hash_source(src.encode())
    assert hash_source(src) != hash_source(src.replace("1.0f", "2.0f"))
    assert hash_source(src) != hash_source(src + "\n")
    with pytest.raises(TypeError):
        hash_source(42)


def test_stable_hash_semantics():
    assert stable_hash({"a": 1, "b": 2}) == stable_hash({"b": 2, "a": 1})
    assert stable_hash((1, 2)) == stable_hash([1, 2]) == stable_hash(np.array([1, 2]))
    assert stable_hash([1, 2]) != stable_hash([2, 1])
    assert stable_hash(1) != stable_hash(1.0) != stable_hash("1")
    assert stable_hash({1: "a"}.get(1)) == stable_hash("a")
    with pytest.raises(TypeError):
        stable_hash({1: "a"})
    with pytest.raises(TypeError):
        stable_hash(object())


def test_hash_stable_across_processes():
    code = (
        "import numpy as np; from pytest_autotune.lock.hashing import hash_problem, hash_space; "
        "print(hash_space({'b': [1, 2], 'a': ['x']}, ['b < 2'], {'c': 1}), hash_problem((4, 4), {'x': np.ones(3), 'n': 3}))"
    )
    env = dict(os.environ, PYTHONPATH=str(Path(pytest_autotune.__file__).parent.parent), PYTHONHASHSEED="12345")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.split()
    assert out == [hash_space({"b": [1, 2], "a": ["x"]}, ["b < 2"], {"c": 1}), hash_problem((4, 4), {"x": np.ones(3), "n": 3})]


def test_hash_space_sensitivity():
    params = {"bx": [16, 32, 64], "by": [1, 2, 4]}
    base = hash_space(params, ["bx * by <= 128"], {"max_threads": 1024})
    assert base == hash_space({"bx": (16, 32, 64), "by": np.array([1, 2, 4])}, ["bx * by <= 128"], {"max_threads": 1024})
    assert base == hash_space(params, [" bx * by <= 128 "], {"max_threads": 1024})
    assert base != hash_space({"by": [1, 2, 4], "bx": [16, 32, 64]}, ["bx * by <= 128"], {"max_threads": 1024})  # param order
    assert base != hash_space({"bx": [64, 32, 16], "by": [1, 2, 4]}, ["bx * by <= 128"], {"max_threads": 1024})  # value order
    assert base != hash_space({"bx": [16, 32], "by": [1, 2, 4]}, ["bx * by <= 128"], {"max_threads": 1024})
    assert base != hash_space(params, ["bx * by <= 256"], {"max_threads": 1024})
    assert base != hash_space(params, ["bx * by <= 128"], {"max_threads": 512})
    assert base != hash_space(params, ["bx * by <= 128"])
    assert hash_space(params, None, {"a": 1, "b": 2}) == hash_space(params, [], {"b": 2, "a": 1})  # constants are a mapping
    assert hash_space(params, "bx > 16") == hash_space(params, ["bx > 16"])


def _restriction_a(p):
    return p["bx"] * p["by"] <= 128


def _restriction_b(p):
    return p["bx"] * p["by"] <= 256


def test_hash_space_callable_restrictions_by_name_and_source():
    params = {"bx": [16, 32], "by": [1, 2]}
    assert hash_space(params, [_restriction_a]) == hash_space(params, [_restriction_a])
    assert hash_space(params, [_restriction_a]) != hash_space(params, [_restriction_b])
    assert describe_callable(_restriction_a) == {"callable": "_restriction_a", "source": "def _restriction_a(p):\n    return p[\"bx\"] * p[\"by\"] <= 128\n"}
    # A lambda is hashed by its own text, not by the statement around it: editing the budget
    # next to it in a marker call must not look like a changed search space.
    def tune(**kwargs):  # stands in for pytest.mark.tune
        return kwargs

    mark_a = tune(params=params, restrictions=[lambda p: p["bx"] > p["by"], lambda p: p["bx"] < 64], budget=10)
    mark_b = tune(
        params=params,
        restrictions=[lambda p: p["bx"] > p["by"],
                      lambda p: p["bx"] < 64],
        budget=99,
    )
    ra, rb = mark_a["restrictions"], mark_b["restrictions"]
    assert describe_callable(ra[0])["source"] == 'lambda p: p["bx"] > p["by"]'
    assert describe_callable(ra[1])["source"] == 'lambda p: p["bx"] < 64'
    assert hash_space(params, ra) == hash_space(params, rb)
    assert hash_space(params, ra[:1]) != hash_space(params, ra[1:])
    # Partials and callable objects are described without their (address-bearing) repr.
    part = functools.partial(_restriction_a)
    assert hash_space(params, [part]) == hash_space(params, [functools.partial(_restriction_a)])
    assert "0x" not in json.dumps(describe_callable(part))
    with pytest.raises(TypeError):
        hash_space(params, [42])


def test_hash_problem_sensitivity():
    a = np.random.default_rng(0).random((64, 32), dtype=np.float32)
    b = np.random.default_rng(1).random((64, 32), dtype=np.float32)
    base = hash_problem((64, 32), [a, np.int32(64), 1.5])
    assert base == hash_problem((64, 32), [b, np.int32(64), 1.5])  # contents do not matter
    assert base == hash_problem([64, 32], (a.copy(), np.int32(64), 1.5))
    assert base != hash_problem((64, 32), [a.reshape(32, 64), np.int32(64), 1.5])  # shape
    assert base != hash_problem((64, 32), [a.astype(np.float64), np.int32(64), 1.5])  # dtype
    assert base != hash_problem((64, 32), [a, np.int64(64), 1.5])  # scalar dtype
    assert base != hash_problem((64, 32), [a, np.int32(65), 1.5])  # scalar value
    assert base != hash_problem((64, 32), [a, np.int32(64), 2.5])
    assert base != hash_problem((64, 64), [a, np.int32(64), 1.5])  # problem size
    assert base != hash_problem((64, 32), [np.int32(64), a, 1.5])  # argument order
    assert hash_problem(8, {"x": a, "n": 3}) == hash_problem(8, {"n": 3, "x": b})  # named args: order-free
    # a CUDA kernel's constant memory counts as its arguments do: by symbol, shape and dtype, never contents
    f = np.ones(289, np.float32)
    assert hash_problem((64, 32), [a, np.int32(64), 1.5], {}) == base  # none: the hash of before
    with_filter = hash_problem((64, 32), [a, np.int32(64), 1.5], {"d_filter": f})
    assert with_filter != base and with_filter == hash_problem((64, 32), [a, np.int32(64), 1.5], {"d_filter": f * 2})
    assert with_filter != hash_problem((64, 32), [a, np.int32(64), 1.5], {"d_filter": np.ones(81, np.float32)})
    assert with_filter != hash_problem((64, 32), [a, np.int32(64), 1.5], {"d_weights": f})

    class Opaque:
        pass

    assert hash_problem(8, [Opaque()]) == hash_problem(8, [Opaque()])  # by type, never by repr/address
