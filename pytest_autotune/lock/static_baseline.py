"""Static baselines: the static profile of the configuration each kernel ships with, where no GPU lock exists.

A team that never tunes on a GPU in CI still wants "no new spills, no lower
occupancy" on every pull request. ``pytest --autotune-compile=sm_90
--autotune-record-static`` records, per architecture, the profile of the
configuration each kernel would ship with into ``<lockdir>/static/sm_90.json``::

    {"schema": 1, "arch": "sm_90", "entries": {"<test>::<kernel>": {
        "test": ..., "kernel": ..., "params": {...}, "runner": "cupy",
        "hashes": {...}, "static": {...StaticProfile...}, "origin": "first configuration",
        "timestamp": "...Z", "versions": {...}}}}

These files hold no timing, so they live beside the lockfiles, not among
them: every reader of ``<lockdir>/*.json`` (the gate, the warm start, the
lookup, the export) sees only timed entries. They are untrusted input like a
lockfile (read through :func:`~.lockfile.read_lock_text`, validated field by
field) and written like one (:func:`~.lockfile.locked_rewrite`).
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..backends.cuda_arch import parse_arch
from ..static.profile import StaticProfile
from .entry import InvalidField, _check_params, describe_value, plain_data
from .errors import LockfileError
from .lockfile import _dump, _reject_duplicates, locked_rewrite, read_lock_text

__all__ = ["BASELINE_DIR", "BaselineEntry", "baseline_path", "read_baselines", "read_baseline", "record_baseline"]

BASELINE_DIR = "static"
BASELINE_SCHEMA = 1
_ARCH_FILE = re.compile(r"sm_\d{2,3}\.json\Z")
_ORIGINS = ("lock entry", "first configuration")


@dataclass(frozen=True)
class BaselineEntry:
    """One kernel's static baseline on one architecture."""

    test: str
    kernel: str
    params: dict[str, Any]
    runner: str
    hashes: dict[str, str]
    profile: StaticProfile
    origin: str  # "lock entry" (its GPU lock's winner on that architecture) or "first configuration"
    timestamp: str = ""
    versions: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"test": self.test, "kernel": self.kernel, "params": dict(self.params), "runner": self.runner,
                "hashes": dict(self.hashes), "static": self.profile.to_dict(), "origin": self.origin,
                "timestamp": self.timestamp, "versions": dict(self.versions)}

    @classmethod
    def read(cls, raw: Any, where: str) -> "BaselineEntry":
        """Validate untrusted data (``where`` names the file and entry in errors)."""
        try:
            data = plain_data(raw, "")
            if not isinstance(data, dict):
                raise InvalidField("", f"must be an object, got {describe_value(data)}")
            for name in ("test", "kernel", "runner", "origin", "timestamp"):
                if not isinstance(data.get(name), str) or len(data[name]) > 4096 or "\n" in data[name]:
                    raise InvalidField(name, f"must be a single-line string, got {describe_value(data.get(name))}")
            if data["origin"] not in _ORIGINS:
                raise InvalidField("origin", f"must be one of {', '.join(_ORIGINS)}, got {data['origin']!r}")
            _check_params(data.get("params"), "params")
            hashes = data.get("hashes")
            if not isinstance(hashes, dict) or not all(isinstance(v, str) for v in hashes.values()):
                raise InvalidField("hashes", f"must map names to strings, got {describe_value(hashes)}")
            versions = data.get("versions", {})
            if not isinstance(versions, dict) or not all(isinstance(v, str) for v in versions.values()):
                raise InvalidField("versions", f"must map names to strings, got {describe_value(versions)}")
            try:
                profile = StaticProfile.from_dict(data.get("static"))
            except ValueError as exc:
                raise InvalidField("static", str(exc)) from None
        except InvalidField as exc:
            raise LockfileError(None, f"{where}: {exc}") from None
        return cls(data["test"], data["kernel"], dict(data["params"]), data["runner"], dict(hashes), profile,
                   data["origin"], data["timestamp"], dict(versions))


def _baseline_dir(lockdir: str | os.PathLike[str]) -> Path:
    folder = Path(lockdir) / BASELINE_DIR
    if folder.is_symlink():
        raise LockfileError(folder, "is a symbolic link; static baselines are read and written only inside the "
                                    "lock directory itself")
    return folder


def baseline_path(lockdir: str | os.PathLike[str], arch: int | str) -> Path:
    """``<lockdir>/static/sm_90.json``."""
    return _baseline_dir(lockdir) / f"sm_{parse_arch(arch)}.json"


def _parse(text: str, path: Path) -> dict[str, BaselineEntry]:
    try:
        data = json.loads(text, object_pairs_hook=_reject_duplicates)
    except RecursionError:
        raise LockfileError(path, "not a valid static baseline: nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError included
        raise LockfileError(path, f"not a valid static baseline: {exc}") from None
    if not isinstance(data, dict) or set(data) != {"schema", "arch", "entries"}:
        raise LockfileError(path, "not a static baseline: expected exactly the fields schema, arch and entries")
    if data["schema"] != BASELINE_SCHEMA:
        raise LockfileError(path, f"static baseline schema {describe_value(data['schema'])}; this version reads "
                                  f"{BASELINE_SCHEMA}")
    if data["arch"] != path.stem:
        raise LockfileError(path, f"arch {describe_value(data['arch'])} does not match the file's name")
    if not isinstance(data["entries"], dict):
        raise LockfileError(path, f"'entries' must be an object, got {describe_value(data['entries'])}")
    out = {}
    for key, raw in data["entries"].items():
        entry = BaselineEntry.read(raw, f"{path}: entry {key!r}")
        if key != f"{entry.test}::{entry.kernel}":
            raise LockfileError(path, f"entry {key!r} is recorded for {entry.test}::{entry.kernel}")
        if entry.profile.arch != parse_arch(path.stem):
            raise LockfileError(path, f"entry {key!r}: a profile for sm_{entry.profile.arch} in {path.name}")
        out[key] = entry
    return out


def read_baseline(path: Path) -> dict[str, BaselineEntry]:
    """The entries of one baseline file by key; empty when it does not exist."""
    text = read_lock_text(path)
    return {} if text is None else _parse(text, path)


def read_baselines(lockdir: str | os.PathLike[str]) -> dict[int, tuple[Path, dict[str, BaselineEntry]]]:
    """Every architecture's baseline file under ``lockdir``: ``{90: (path, entries)}``."""
    folder = _baseline_dir(lockdir)
    if not folder.is_dir():
        return {}
    out = {}
    for path in sorted(folder.iterdir()):
        if _ARCH_FILE.match(path.name):
            out[parse_arch(path.stem)] = (path, read_baseline(path))
    return out


def _serialize(arch: int, entries: Mapping[str, BaselineEntry]) -> str:
    data = {"schema": BASELINE_SCHEMA, "arch": f"sm_{arch}",
            "entries": {key: entries[key].to_dict() for key in sorted(entries)}}
    return _dump(data, 0) + "\n"


def record_baseline(lockdir: str | os.PathLike[str], entry: BaselineEntry) -> Path:
    """Add or replace ``entry`` in its architecture's baseline file, under the file lock; other entries kept.
    A corrupt file raises :class:`LockfileError` and is left as it was."""
    arch = entry.profile.arch
    path = baseline_path(lockdir, arch)

    def update(old: str | None) -> str:
        entries = dict(_parse(old, path)) if old is not None else {}
        entries[f"{entry.test}::{entry.kernel}"] = entry
        return _serialize(arch, entries)

    locked_rewrite(path, update)
    return path
