"""A lock entry: its validation, its canonical form, and the typed record every reader takes.

A lockfile comes from a pull request, so an entry is checked field by field
when it is read (:func:`normalize_entry`) and handed on as a
:class:`LockEntry`: the gate, the lookup, the warm start, the export and the
CLI read its fields (``entry.params``, ``entry.samples``, ...), never a
string key of raw data. Unknown fields are kept (a newer pytest-autotune of
the same schema may add some), so a rewrite drops nothing.
"""
from __future__ import annotations

import datetime as _dt
import enum
import math
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ..defaults import EFFORT, EFFORTS
from ..errors import AutotuneError
from .errors import InvalidEntryError
from .names import is_header_name, is_stored_name
from .problem import problem_error

__all__ = ["LockEntry", "RunnerUp", "as_entry", "normalize_entry", "plain_data", "describe_value", "InvalidField",
           "SIGNIFICANT_DIGITS", "MAX_DEPTH"]

SIGNIFICANT_DIGITS = 6
"""Timing fields (``samples``, ``stats``, runner-up medians/samples) are rounded to this many
significant digits: far below measurement noise, and re-serialising a value read back is a no-op."""



class InvalidField(AutotuneError):
    """A validation failure at a dotted location inside an entry (the reader turns it into an
    :class:`~.errors.InvalidEntryError` naming the file and the entry)."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"{where}: {reason}" if where else reason)


def _join(where: str, part: str | int) -> str:
    if isinstance(part, int):
        return f"{where}[{part}]"
    return f"{where}.{part}" if where else part


def describe_value(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _round_sig(x: float) -> float:
    return float(format(x, f".{SIGNIFICANT_DIGITS}g"))


MAX_DEPTH = 32
"""Nesting deeper than this is refused: no field of an entry nests more than a few levels, and a lock from a
pull request must not exhaust the reader's stack."""


def plain_data(value: Any, where: str, *, round_floats: bool = False, depth: int = 0) -> Any:
    """Convert to plain JSON data (dict/list/str/int/float/bool/None), rejecting what JSON cannot hold
    faithfully: non-string keys, NaN/infinity, arbitrary objects. numpy scalars and arrays, tuples and
    enums are converted, so the plugin can hand over what its runners produce."""
    if depth > MAX_DEPTH:
        raise InvalidField(where, f"is nested more than {MAX_DEPTH} levels deep")
    if isinstance(value, enum.Enum):
        value = value.value
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        x = float(value)
        if not math.isfinite(x):
            raise InvalidField(where, f"must be a finite number, got {x!r}")
        return _round_sig(x) if round_floats else x
    if isinstance(value, str):
        return str(value)
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if isinstance(k, enum.Enum):
                k = k.value
            if not isinstance(k, str):
                raise InvalidField(where, f"keys must be strings, got {describe_value(k)}")
            out[str(k)] = plain_data(v, _join(where, str(k)), round_floats=round_floats, depth=depth + 1)
        return out
    if isinstance(value, (list, tuple)):
        return [plain_data(v, _join(where, i), round_floats=round_floats, depth=depth + 1) for i, v in enumerate(value)]
    tolist = getattr(value, "tolist", None)  # numpy (and cupy-on-host) arrays and scalars
    if callable(tolist) and hasattr(value, "dtype"):
        return plain_data(tolist(), where, round_floats=round_floats, depth=depth)
    raise InvalidField(where, f"is not JSON data: {type(value).__name__} {describe_value(value)}")


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _need_mapping(entry: dict[str, Any], name: str, where: str | None = None) -> dict[str, Any]:
    value = entry.get(name)
    where = where or name
    if name not in entry:
        raise InvalidField(where, "is required")
    if not isinstance(value, dict):
        raise InvalidField(where, f"must be an object, got {describe_value(value)}")
    return value


def _need_number(obj: dict[str, Any], name: str, where: str) -> None:
    if name not in obj:
        raise InvalidField(_join(where, name), "is required")
    if not _is_number(obj[name]):
        raise InvalidField(_join(where, name), f"must be a number, got {describe_value(obj[name])}")


def _check_samples(value: Any, where: str, *, empty: bool = False) -> None:
    if not isinstance(value, list) or not all(_is_number(x) for x in value):
        raise InvalidField(where, f"must be a list of numbers, got {describe_value(value)}")
    if not value and not empty:
        raise InvalidField(where, "must hold at least one measurement, got []")
    if any(x < 0 for x in value):
        raise InvalidField(where, f"must hold measurements (numbers >= 0), got {describe_value(min(value))}")


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
MAX_TEXT = 4096  # characters of a parameter value or a name: longer is no kernel's


def _check_params(value: Any, where: str) -> None:
    """Parameter names are identifiers and values are scalars: what ``#define NAME value`` can hold at all
    (whether a value is one the marker declares is decided where the space is known, :mod:`..gate.trust`)."""
    if not isinstance(value, dict):
        raise InvalidField(where, f"must be an object, got {describe_value(value)}")
    for name, v in value.items():
        if not _IDENTIFIER.match(name):
            raise InvalidField(_join(where, name), "is not a parameter name (an identifier)")
        if isinstance(v, str):
            if len(v) > MAX_TEXT or any(c in v for c in "\n\r\0"):
                raise InvalidField(_join(where, name), f"= {describe_value(v)} is not a single-line value")
        elif not (v is None or isinstance(v, (bool, int, float))) or v is None:
            raise InvalidField(_join(where, name), f"must be a number, string or boolean, got {describe_value(v)}")


def _check_str(entry: dict[str, Any], name: str) -> None:
    if name in entry and (not isinstance(entry[name], str) or len(entry[name]) > MAX_TEXT):
        raise InvalidField(name, f"must be a string, got {describe_value(entry[name])}")


def _check_timestamp(value: Any) -> None:
    if not isinstance(value, str):
        raise InvalidField("timestamp", f"must be an ISO 8601 UTC string, got {describe_value(value)}")
    text = value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value
    try:
        parsed = _dt.datetime.fromisoformat(text)
    except ValueError:
        raise InvalidField("timestamp", f"is not ISO 8601: {value!r}") from None
    if parsed.utcoffset() != _dt.timedelta(0):
        raise InvalidField("timestamp", f"must be in UTC (ending in Z or +00:00): {value!r}")


def _check_source_fields(out: dict[str, Any]) -> None:
    """``source_file`` and the ``headers`` values name stored sources (``sources/<digest>.<ext>``), header names
    are relative paths inside the kernel's folders: nothing an entry names can point out of the lock."""
    if "source_file" in out and out["source_file"] != "" and not is_stored_name(out["source_file"]):
        raise InvalidField("source_file", f"= {describe_value(out['source_file'])} is not a stored source's name "
                                      "(sources/<digest>.<ext>)")
    if "headers" in out:
        for name, stored in _need_mapping(out, "headers").items():
            if not is_header_name(name):
                raise InvalidField(_join("headers", name), "is not a relative header path inside the kernel's "
                                                       "folders (no '..', no absolute path)")
            if not is_stored_name(stored):
                raise InvalidField(_join("headers", name), f"= {describe_value(stored)} is not a stored source's name "
                                                       "(sources/<digest>.<ext>)")
    _check_str(out, "kernel_name")
    if "compiler_options" in out:
        options = out["compiler_options"]
        if not isinstance(options, list) or not all(isinstance(o, str) and len(o) <= MAX_TEXT for o in options):
            raise InvalidField("compiler_options", f"must be a list of strings, got {describe_value(options)}")


_FINGERPRINT = re.compile(r"sha256:[0-9a-f]{64}\Z")


def _check_static_accepted(accepted: dict[str, Any]) -> None:
    """``static_accepted``: when a reviewed change of the binary was accepted without a GPU run
    (``--autotune-accept-static``), and the binary the entry's timing was measured on (absent when the entry had
    no profile before)."""
    if "timed_fingerprint" in accepted and (not isinstance(accepted["timed_fingerprint"], str)
                                            or not _FINGERPRINT.match(accepted["timed_fingerprint"])):
        raise InvalidField("static_accepted.timed_fingerprint",
                           f"must be sha256:<64 hex digits>, got {describe_value(accepted.get('timed_fingerprint'))}")
    if "timestamp" in accepted:
        try:
            _check_timestamp(accepted["timestamp"])
        except InvalidField as exc:
            raise InvalidField("static_accepted.timestamp", str(exc).split(": ", 1)[-1]) from None


# Fields whose floats are measurements (rounded); everything else (params, tolerance, ...) is kept exact.
_ROUNDED_FIELDS = ("stats", "samples")
_REQUIRED_STATS = ("median", "mean", "min", "iqr")


def _normalize_entry(entry: Any) -> dict[str, Any]:
    if not isinstance(entry, Mapping):
        raise InvalidField("", f"must be an object, got {describe_value(entry)}")
    out: dict[str, Any] = {}
    for name, value in entry.items():
        if isinstance(name, enum.Enum):
            name = name.value
        if not isinstance(name, str):
            raise InvalidField("", f"field names must be strings, got {describe_value(name)}")
        if name == "runners_up" and isinstance(value, (list, tuple)):
            # Each runner-up's median/samples are measurements (rounded); its params stay exact.
            items = []
            for i, item in enumerate(value):
                where = _join("runners_up", i)
                if not isinstance(item, Mapping):
                    raise InvalidField(where, f"must be an object, got {describe_value(item)}")
                plain = plain_data({k: v for k, v in item.items() if k not in ("median", "samples")}, where)
                for k in ("median", "samples"):
                    if k in item:
                        plain[k] = plain_data(item[k], _join(where, k), round_floats=True)
                items.append(plain)
            out[name] = items
        else:
            out[name] = plain_data(value, name, round_floats=name in _ROUNDED_FIELDS)

    # Required fields.
    _need_mapping(out, "params")
    _check_params(out["params"], "params")
    stats = _need_mapping(out, "stats")
    for name in _REQUIRED_STATS:
        _need_number(stats, name, "stats")
    if not stats["median"] > 0:
        raise InvalidField("stats.median", f"must be a positive time, got {describe_value(stats['median'])}")
    if "n" not in stats:
        raise InvalidField("stats.n", "is required")
    if not _is_int(stats["n"]) or stats["n"] < 1:
        raise InvalidField("stats.n", f"must be a positive integer, got {describe_value(stats['n'])}")
    for name, value in stats.items():
        if not _is_number(value):
            raise InvalidField(_join("stats", name), f"must be a number, got {describe_value(value)}")
    if "samples" not in out:
        raise InvalidField("samples", "is required")
    _check_samples(out["samples"], "samples")
    hashes = _need_mapping(out, "hashes")
    for name in ("source", "space", "problem"):
        if not isinstance(hashes.get(name), str) or not hashes[name]:
            raise InvalidField(_join("hashes", name), f"must be a non-empty string, got {describe_value(hashes.get(name))}")

    # Optional fields: checked only when present.
    if "runners_up" in out:
        if not isinstance(out["runners_up"], list):
            raise InvalidField("runners_up", f"must be a list, got {describe_value(out['runners_up'])}")
        for i, item in enumerate(out["runners_up"]):
            where = _join("runners_up", i)
            _need_mapping(item, "params", _join(where, "params"))
            _check_params(item["params"], _join(where, "params"))
            _need_number(item, "median", where)
            if "samples" in item:
                _check_samples(item["samples"], _join(where, "samples"), empty=True)
    for name in ("objective", "unit", "runner", "test", "kernel", "stats_kind"):
        _check_str(out, name)
    if "effort" in out and out["effort"] not in EFFORTS:  # a quick tuning's entry: a full tuning replaces it
        raise InvalidField("effort", f"must be one of {', '.join(map(repr, EFFORTS))}, got {describe_value(out['effort'])}")
    _check_source_fields(out)
    if "machine" in out:
        machine = _need_mapping(out, "machine")
        for name in ("triad_n", "fma_iterations", "reference_n"):
            if name in machine and (not _is_int(machine[name]) or machine[name] < 1):
                raise InvalidField(_join("machine", name), f"must be a positive integer, got {describe_value(machine[name])}")
        for name in ("reference_ms", "reference_chains_ms"):  # the lock's reference runs' medians (measure/reference.py)
            if name in machine:
                _need_number(machine, name, "machine")
                if not 0 < machine[name] < float("inf"):
                    raise InvalidField(_join("machine", name), f"must be a positive time (ms), got {describe_value(machine[name])}")
    if "cpu" in out:
        _need_mapping(out, "cpu")
    if "strategy" in out:
        strategy = _need_mapping(out, "strategy")
        if not isinstance(strategy.get("name"), str) or not strategy["name"]:
            raise InvalidField("strategy.name", f"must be a non-empty string, got {describe_value(strategy.get('name'))}")
        if "hyperparameters" in strategy and not isinstance(strategy["hyperparameters"], dict):
            raise InvalidField("strategy.hyperparameters", f"must be an object, got {describe_value(strategy['hyperparameters'])}")
        if strategy.get("seed") is not None and not _is_int(strategy["seed"]):
            raise InvalidField("strategy.seed", f"must be an integer or null, got {describe_value(strategy['seed'])}")
    if "evaluations" in out:
        evaluations = _need_mapping(out, "evaluations")
        if "total" in evaluations and (not _is_int(evaluations["total"]) or evaluations["total"] < 0):
            raise InvalidField("evaluations.total", f"must be a non-negative integer, got {describe_value(evaluations['total'])}")
        if "failed" in evaluations:
            failed = evaluations["failed"]
            if not isinstance(failed, dict) or not all(_is_int(c) and c >= 0 for c in failed.values()):
                raise InvalidField("evaluations.failed", f"must map failure kinds to counts, got {describe_value(failed)}")
    if "versions" in out:
        for name, value in _need_mapping(out, "versions").items():
            if not isinstance(value, (str, int, float, bool)):
                raise InvalidField(_join("versions", name), f"must be a version string, got {describe_value(value)}")
    if "timestamp" in out:
        _check_timestamp(out["timestamp"])
    if "static" in out:
        from ..static.profile import StaticProfile  # the compiled binary's profile (issue: the static gate)

        try:
            StaticProfile.from_dict(out["static"])
        except ValueError as exc:
            raise InvalidField("static", str(exc)) from None
    if "static_accepted" in out:
        _check_static_accepted(_need_mapping(out, "static_accepted"))
    if "problem" in out and (reason := problem_error(out["problem"])):
        raise InvalidField("problem", reason)
    return out


def normalize_entry(entry: Mapping[str, Any], key: str = "<entry>", path: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Validate an entry and return it as plain, canonical JSON data (timing floats rounded).

    Raises :class:`InvalidEntryError` naming ``path`` and ``key``. Unknown fields are
    kept, so an older pytest-autotune re-writing a file does not drop what a newer
    one added within the same schema.
    """
    try:
        return _normalize_entry(entry)
    except InvalidField as exc:
        raise InvalidEntryError(path, key, str(exc)) from None


# --------------------------------------------------------------------------- the typed record


def as_entry(entry: Mapping[str, Any]) -> "LockEntry":
    """``entry`` as a :class:`LockEntry` (one read from a lockfile is one already; data built in memory, by a
    test or a replay, is wrapped as it is, unvalidated)."""
    return entry if isinstance(entry, LockEntry) else LockEntry(entry)


@dataclass(frozen=True)
class RunnerUp:
    """A runner-up of the locked winner: its parameters and median, re-timed beside the winner or not."""

    params: dict[str, Any]
    median: float | None  # always there in an entry read from a lockfile
    median_kind: str | None = None  # "re-timed" (comparable with the winner's samples) or "search"
    samples: tuple[float, ...] = ()


class LockEntry(Mapping):
    """One validated lock entry: typed fields for its readers, and a read-only mapping of all its data
    (unknown fields included) for what writes it back or shows it whole."""

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, Any]) -> None:
        self._data = dict(data)

    @classmethod
    def read(cls, raw: Any, key: str = "<entry>", path: str | os.PathLike[str] | None = None) -> "LockEntry":
        """Validate ``raw`` (see :func:`normalize_entry`) and wrap it."""
        return cls(normalize_entry(raw, key, path))

    # -- the mapping (the whole data) -------------------------------------------------
    def __getitem__(self, name: str) -> Any:
        return self._data[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"LockEntry(test={self.test!r}, kernel={self.kernel!r}, params={self.params!r})"

    def to_dict(self) -> dict[str, Any]:
        return dict(self._data)

    def replace(self, **fields: Any) -> "LockEntry":
        """The same entry with ``fields`` replaced (the gate's checked copy of what reaches a build)."""
        return LockEntry({**self._data, **fields})

    # -- the fields readers use ----------------------------------------------------------
    @property
    def params(self) -> dict[str, Any]:
        return dict(self._data["params"])

    @property
    def samples(self) -> list[float]:
        return list(self._data["samples"])

    @property
    def stats(self) -> dict[str, float]:
        return dict(self._data["stats"])

    @property
    def median(self) -> float:
        return float(self._data["stats"]["median"])

    @property
    def runners_up(self) -> list[RunnerUp]:
        return [RunnerUp(dict(r["params"]), float(r["median"]) if r.get("median") is not None else None,
                         r.get("median_kind"), tuple(r.get("samples") or ()))
                for r in self._data.get("runners_up") or ()]

    @property
    def hashes(self) -> dict[str, str]:
        return dict(self._data.get("hashes") or {})

    @property
    def test(self) -> str | None:
        return self._data.get("test")

    @property
    def kernel(self) -> str | None:
        return self._data.get("kernel")

    @property
    def problem(self) -> dict[str, Any] | None:
        problem = self._data.get("problem")
        return dict(problem) if isinstance(problem, Mapping) else None

    @property
    def static(self) -> Any:
        """The winner's :class:`~pytest_autotune.static.profile.StaticProfile`, or None (not a GPU entry, or one
        locked before profiles were recorded)."""
        from ..static.profile import StaticProfile

        data = self._data.get("static")
        return StaticProfile.from_dict(data) if isinstance(data, Mapping) else None

    @property
    def timed_fingerprint(self) -> str | None:
        """The fingerprint of the binary the timing was measured on, where it is not the profile's own."""
        accepted = self._data.get("static_accepted")
        return accepted.get("timed_fingerprint") if isinstance(accepted, Mapping) else None

    @property
    def machine(self) -> dict[str, Any]:
        return dict(self._data.get("machine") or {})

    @property
    def cpu(self) -> dict[str, Any] | None:
        cpu = self._data.get("cpu")
        return dict(cpu) if cpu else None

    @property
    def source_file(self) -> str:
        return self._data.get("source_file") or ""

    @property
    def headers(self) -> dict[str, str]:
        return dict(self._data.get("headers") or {})

    @property
    def kernel_name(self) -> str | None:
        return self._data.get("kernel_name")

    @property
    def compiler_options(self) -> list[str] | None:
        options = self._data.get("compiler_options")
        return list(options) if options is not None else None

    @property
    def strategy(self) -> dict[str, Any]:
        return dict(self._data.get("strategy") or {})

    @property
    def strategy_name(self) -> str | None:
        return self.strategy.get("name")

    @property
    def effort(self) -> str:
        """How the entry was tuned: ``"quick"`` (``--autotune-effort=quick``, replaced by a full tuning) or
        ``"full"`` (an entry without the field)."""
        return str(self._data.get("effort") or EFFORT)

    @property
    def evaluations(self) -> dict[str, Any]:
        return dict(self._data.get("evaluations") or {})

    @property
    def unit(self) -> str | None:
        return self._data.get("unit")

    @property
    def versions(self) -> dict[str, Any]:
        return dict(self._data.get("versions") or {})

    @property
    def timestamp(self) -> str | None:
        return self._data.get("timestamp")
