"""What every format reader shares: the error type, file reading, time units, the record container."""
from __future__ import annotations

import gzip
import json
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Union

import numpy as np

from ..errors import AutotuneError
from .costs import RecordCosts

try:  # orjson parses the large caches about twice as fast; the standard library is the fallback
    import orjson as _orjson
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None

PathLike = Union[str, "os.PathLike[str]"]

SPACES_ENV = "AUTOTUNE_SPACES"
"""Environment variable naming the folder of recorded spaces (overrides the default)."""

MEASURED_FORMATS = ("t4", "kerneltuner", "ktt")
"""Formats that hold measurements (``t1`` holds definitions only)."""


class DatasetError(AutotuneError, ValueError):
    """A recorded-data file that cannot be read or does not agree with its definition; names the file."""


# -- small helpers --------------------------------------------------------------------------------


def default_spaces_root() -> Path:
    """``$AUTOTUNE_SPACES`` when set, else ``<repository root>/../shared/data/spaces``."""
    env = os.environ.get(SPACES_ENV)
    if env:
        return Path(env).expanduser()
    return Path(__file__).resolve().parents[3] / "shared" / "data" / "spaces"


def _stem(path: Path) -> str:
    """File name without ``.gz`` and ``.json``: ``gemm_RTX_3090.json.gz`` -> ``gemm_RTX_3090``."""
    name = path.name
    for suffix in (".gz", ".json"):
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
    return name


def _open_text(path: Path):
    """Binary stream of the file's JSON text, decompressing gzip by its magic bytes (not its name)."""
    f = open(path, "rb")
    magic = f.read(2)
    f.seek(0)
    if magic == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=f, mode="rb")
    return f


def _read_json(path: Path) -> Any:
    try:
        data = path.read_bytes()
        if data[:2] == b"\x1f\x8b":  # gzip, recognised by its magic bytes rather than the file name
            data = gzip.decompress(data)  # one shot: several times faster than streaming through GzipFile
    except FileNotFoundError:
        raise
    except (OSError, EOFError, zlib.error) as exc:
        raise DatasetError(f"{path}: cannot read ({type(exc).__name__}: {exc})") from exc
    try:
        return _orjson.loads(data) if _orjson is not None else json.loads(data)
    except ValueError as exc:
        raise DatasetError(f"{path}: not valid JSON ({exc})") from exc


def _time_factor(unit: Any, path: Path, default: float) -> float:
    """Multiplier from a file's time unit to milliseconds (tolerates ``miliseconds``)."""
    if unit is None:
        return default
    text = str(unit).strip().lower()
    if text in ("ms",) or text.startswith(("mili", "milli")):
        return 1.0
    if text in ("us", "µs") or text.startswith("micro"):
        return 1e-3
    if text in ("ns",) or text.startswith("nano"):
        return 1e-6
    if text in ("s", "sec", "secs") or text.startswith("second"):
        return 1e3
    raise DatasetError(f"{path}: unknown time unit {unit!r}")


def _value_key(v: Any) -> tuple:
    """Lookup key of a parameter value; the same convention as :class:`SearchSpace` (``"1"`` != ``1``)."""
    if isinstance(v, np.generic):
        v = v.item()
    return (type(v) is str, v)


def _sorted_values(values: Iterable[Any]) -> list:
    return sorted(set(values), key=lambda v: (isinstance(v, str), v))


def detect_format(doc: Any) -> str:
    """``"t4"``, ``"kerneltuner"``, ``"ktt"`` or ``"t1"`` from a parsed document's keys."""
    if isinstance(doc, Mapping):
        if isinstance(doc.get("results"), list):
            return "t4"
        if isinstance(doc.get("cache"), Mapping) and "tune_params" in doc:
            return "kerneltuner"
        if isinstance(doc.get("Results"), list):
            return "ktt"
        if isinstance(doc.get("ConfigurationSpace"), Mapping):
            return "t1"
    raise DatasetError("unrecognised format: expected a T4 results file (results[]), a Kernel Tuner cache "
                       "(tune_params + cache), a KTT output (Results[]) or a T1 definition (ConfigurationSpace)")


@dataclass
class _Records:
    """A file's records in file order, before alignment with the space's rows."""

    names: list[str]
    params: dict[str, list]
    columns: list[list]  # per parameter: the value of each record
    times: np.ndarray
    failures: list
    statuses: list
    samples: list
    counters: dict[str, np.ndarray] | None = None
    kernel: str = ""
    device: str | None = None
    labels: list[str] = field(default_factory=list)  # a readable label per record, for error messages
    costs: RecordCosts | None = None  # per record: compile / verification / framework (ms), when recorded
