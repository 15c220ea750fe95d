"""Static baselines and the static fields of a lock entry are untrusted input: read field by field, written under
the lock directory's file lock, a corrupt file reported and left as it was."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from pytest_autotune.lock.entry import LockEntry
from pytest_autotune.lock.errors import InvalidEntryError, LockfileError
from pytest_autotune.lock.static_baseline import BaselineEntry, baseline_path, read_baselines, record_baseline
from tests.gate.test_static_verdict import profile

VALID = {"params": {"block_size_x": 128}, "stats": {"median": 1.0, "mean": 1.0, "min": 1.0, "iqr": 0.0, "n": 3},
         "samples": [1.0, 1.0, 1.0], "hashes": {"source": "a", "space": "b", "problem": "c"}}


def baseline(kernel: str = "vadd", **overrides: object) -> BaselineEntry:
    fields = dict(test="tests/test_k.py::test_k", kernel=kernel, params={"block_size_x": 128}, runner="cupy",
                  hashes={"source": "a"}, profile=profile(), origin="first configuration",
                  timestamp="2026-12-01T00:00:00Z", versions={"pytest_autotune": "0.1.0"})
    fields.update(overrides)
    return BaselineEntry(**fields)  # type: ignore[arg-type]


def test_baselines_merge_and_read_back(tmp_path: Path) -> None:
    record_baseline(tmp_path, baseline("vadd"))
    path = record_baseline(tmp_path, baseline("scale"))
    assert path == tmp_path / "static" / "sm_90.json"
    (arch, (where, entries)), = read_baselines(tmp_path).items()
    assert arch == 90 and where == path
    assert set(entries) == {"tests/test_k.py::test_k::vadd", "tests/test_k.py::test_k::scale"}
    assert entries["tests/test_k.py::test_k::vadd"] == baseline("vadd")
    text = path.read_text()
    record_baseline(tmp_path, baseline("vadd"))
    assert path.read_text() == text  # canonical: recording the same again changes no byte


@pytest.mark.parametrize("mangle, named", [
    (lambda d: d.update(arch="sm_80"), "does not match the file's name"),
    (lambda d: d["entries"]["tests/test_k.py::test_k::vadd"]["static"].update(registers=-1), "static: registers"),
    (lambda d: d["entries"]["tests/test_k.py::test_k::vadd"]["static"].update(occupancy=float("nan")),
     "occupancy"),
    (lambda d: d["entries"]["tests/test_k.py::test_k::vadd"].update(params={"x; rm -rf": 1}), "params.x; rm -rf"),
    (lambda d: d["entries"]["tests/test_k.py::test_k::vadd"].update(origin="trust me"), "origin"),
    (lambda d: d["entries"].update({"other::key": d["entries"]["tests/test_k.py::test_k::vadd"]}),
     "is recorded for"),
    (lambda d: d.update(schema=9), "schema 9"),
    (lambda d: d.update(extra=1), "exactly the fields"),
])
def test_a_hostile_baseline_is_refused_naming_what_is_wrong_and_never_rewritten(tmp_path: Path, mangle,
                                                                                  named: str) -> None:
    path = record_baseline(tmp_path, baseline())
    data = json.loads(path.read_text())
    mangle(data)
    text = json.dumps(data)  # NaN written as JSON's extension: refused when read
    path.write_text(text)
    with pytest.raises(LockfileError, match=re.escape(named)) as info:
        read_baselines(tmp_path)
    assert str(path) in str(info.value)
    with pytest.raises(LockfileError):
        record_baseline(tmp_path, baseline("scale"))
    assert path.read_text() == text  # a corrupt file is reported, not overwritten


def test_a_linked_baseline_folder_is_never_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    record_baseline(elsewhere, baseline())
    lockdir = tmp_path / "lock"
    lockdir.mkdir()
    os.symlink(elsewhere / "static", lockdir / "static")
    with pytest.raises(LockfileError, match="symbolic link"):
        read_baselines(lockdir)
    with pytest.raises(LockfileError, match="symbolic link"):
        baseline_path(lockdir, 90)


@pytest.mark.parametrize("static, named", [
    ({**profile().to_dict(), "spill_stores": True}, "static: spill_stores"),
    ({**profile().to_dict(), "fingerprint": "md5:00"}, "static: fingerprint"),
    ({**profile().to_dict(), "toolchain": {"compiler": "x" * 10_000}}, "static: toolchain"),
    ("sha256", "static"),
])
def test_a_lock_entrys_static_profile_is_checked_when_read(static: object, named: str) -> None:
    with pytest.raises(InvalidEntryError, match=named):
        LockEntry.read({**VALID, "static": static}, "t::k", "lock.json")


def test_a_lock_entrys_static_fields_are_read_typed() -> None:
    entry = LockEntry.read({**VALID, "static": profile().to_dict(),
                            "static_accepted": {"timed_fingerprint": "sha256:" + "b" * 64,
                                                "timestamp": "2026-12-01T00:00:00Z"}})
    assert entry.static == profile() and entry.timed_fingerprint == "sha256:" + "b" * 64
    assert LockEntry.read(VALID).static is None and LockEntry.read(VALID).timed_fingerprint is None
    with pytest.raises(InvalidEntryError, match="static_accepted.timed_fingerprint"):
        LockEntry.read({**VALID, "static_accepted": {"timed_fingerprint": "../../etc/passwd"}})
