"""Recorded (brute-forced) GPU tuning data, loaded into the engine's own types.

Three community formats are read, recognised from their content rather than
their folder or extension (``.json`` and gzip-compressed ``.json.gz`` alike):

* **T4** results (``results[]``): every configuration with ``invalidity``,
  ``measurements[]`` (the entry named ``time``) and ``times.runtimes[]``. T4
  files carry no search-space definition; that comes from the T1 file of the
  same kernel (``ConfigurationSpace.TuningParameters[]`` and ``Conditions[]``).
* **Kernel Tuner cache** (``tune_params``, ``tune_params_keys``, ``cache``
  keyed by the comma-joined values; ``time`` a number or a failure string).
* **KTT** output (``Results[].Configuration[]``, ``ComputationResults[]`` with
  ``Duration`` in ``Metadata.TimeUnit`` (microseconds by default),
  ``Status``, optional ``ProfilingData.Counters[]``).

Each becomes a :class:`RecordedSpace`: a :class:`~pytest_autotune.space.SearchSpace`
plus per-row arrays aligned with the space's rows (row ``r`` of ``times`` is
the configuration ``space.get(r)``). Times are always milliseconds.

Failure mapping (to :class:`~pytest_autotune.results.FailureKind`):

================================  ==============================================
source                            kind
================================  ==============================================
T4 ``invalidity``                 ``correct`` -> ok; ``compile`` -> COMPILE;
                                  ``runtime`` -> RUNTIME; ``timeout`` -> TIMEOUT;
                                  ``correctness`` -> WRONG_OUTPUT (it ran, the
                                  output was wrong); ``constraints`` -> INVALID
                                  (rejected before launch); anything else -> the
                                  kind of the ``time`` measurement's failure
                                  string when it has one, else RUNTIME.
Kernel Tuner ``time`` string      ``InvalidConfig`` -> INVALID;
                                  ``CompilationFailedConfig`` -> COMPILE;
                                  ``RuntimeFailedConfig`` -> RUNTIME; any other
                                  string -> RUNTIME.
KTT ``Status``                    ``Ok`` -> ok; ``ComputationFailed`` -> RUNTIME;
                                  ``CompilationFailed`` -> COMPILE;
                                  ``ValidationFailed`` -> WRONG_OUTPUT;
                                  ``DeviceLimitsExceeded`` -> INVALID;
                                  anything else -> RUNTIME.
================================  ==============================================

A configuration recorded as successful whose time is missing, not a number or
not finite is recorded as RUNTIME too: ``times`` is finite exactly where
``failures`` is ``None``.
"""
from __future__ import annotations

import contextlib
import gc
import gzip
import json
import math
import os
import re
import threading
import zlib
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence, Union

import numpy as np

from .results import FailureKind, Measurement
from .space import SearchSpace, SearchSpaceError, literal_values

try:  # orjson parses the large caches about twice as fast; the standard library is the fallback
    import orjson as _orjson
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None

__all__ = [
    "DatasetError",
    "RecordedSpace",
    "SpaceDefinition",
    "SPACES_ENV",
    "MEASURED_FORMATS",
    "default_spaces_root",
    "detect_format",
    "discover",
    "find_definition",
    "kernel_tuner_cache",
    "load_dataset",
    "load_definition",
    "clear_cache",
    "sniff_format",
]

PathLike = Union[str, "os.PathLike[str]"]

SPACES_ENV = "AUTOTUNE_SPACES"
"""Environment variable naming the folder of recorded spaces (overrides the default)."""

MEASURED_FORMATS = ("t4", "kerneltuner", "ktt")
"""Formats that hold measurements (``t1`` holds definitions only)."""

T4_FAILURES: dict[str, FailureKind | None] = {
    "correct": None,
    "compile": FailureKind.COMPILE,
    "runtime": FailureKind.RUNTIME,
    "timeout": FailureKind.TIMEOUT,
    "correctness": FailureKind.WRONG_OUTPUT,
    "constraints": FailureKind.INVALID,
}
KERNEL_TUNER_FAILURES: dict[str, FailureKind] = {
    "InvalidConfig": FailureKind.INVALID,
    "CompilationFailedConfig": FailureKind.COMPILE,
    "RuntimeFailedConfig": FailureKind.RUNTIME,
}
KERNEL_TUNER_FAILURE_TEXT: dict[FailureKind, str] = {
    **{kind: text for text, kind in KERNEL_TUNER_FAILURES.items()},
    FailureKind.RESOURCES: "InvalidConfig",  # Kernel Tuner skips a launch over the device's resources as invalid
}
KTT_FAILURES: dict[str, FailureKind | None] = {
    "Ok": None,
    "ComputationFailed": FailureKind.RUNTIME,
    "CompilationFailed": FailureKind.COMPILE,
    "ValidationFailed": FailureKind.WRONG_OUTPUT,
    "DeviceLimitsExceeded": FailureKind.INVALID,
}


class DatasetError(ValueError):
    """A recorded-data file that cannot be read or does not agree with its definition; names the file."""


# -- small helpers --------------------------------------------------------------------------------


def default_spaces_root() -> Path:
    """``$AUTOTUNE_SPACES`` when set, else ``<repository root>/../shared/data/spaces``."""
    env = os.environ.get(SPACES_ENV)
    if env:
        return Path(env).expanduser()
    return Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "spaces"


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


# -- T1 definitions -------------------------------------------------------------------------------


@dataclass
class SpaceDefinition:
    """Parameters and restrictions of a search space, from a T1 file."""

    name: str
    params: dict[str, list]
    restrictions: list[str]
    kernel: str = ""
    path: Path | None = None

    def build(self, constants: Mapping[str, Any] | None = None) -> SearchSpace:
        return SearchSpace(self.params, self.restrictions, constants)


def _definition_from_doc(doc: Any, where: str, name: str, path: Path | None) -> SpaceDefinition:
    try:
        cs = doc["ConfigurationSpace"]
        tps = cs["TuningParameters"]
    except (KeyError, TypeError):
        raise DatasetError(f"{where}: not a T1 definition (no ConfigurationSpace.TuningParameters)") from None
    params: dict[str, list] = {}
    for tp in tps:
        try:
            pname, raw = tp["Name"], tp["Values"]
        except (KeyError, TypeError):
            raise DatasetError(f"{where}: tuning parameter {tp!r} lacks Name or Values") from None
        try:
            values = literal_values(raw) if isinstance(raw, str) else list(raw)
        except (SearchSpaceError, TypeError) as exc:
            raise DatasetError(f"{where}: parameter {pname!r}: {exc}") from exc
        params[pname] = values
    restrictions = []
    for cond in cs.get("Conditions") or []:
        expr = cond.get("Expression") if isinstance(cond, Mapping) else cond
        if not isinstance(expr, str):
            raise DatasetError(f"{where}: condition {cond!r} has no Expression string")
        restrictions.append(expr)
    kernel = (doc.get("General") or {}).get("BenchmarkName") or (doc.get("KernelSpecification") or {}).get(
        "KernelName") or name
    return SpaceDefinition(name=name, params=params, restrictions=restrictions, kernel=str(kernel), path=path)


def load_definition(definition: PathLike | Mapping[str, Any] | SpaceDefinition) -> SpaceDefinition:
    """A T1 definition from a path, a parsed T1 document, or a :class:`SpaceDefinition` (returned as is)."""
    if isinstance(definition, SpaceDefinition):
        return definition
    if isinstance(definition, Mapping):
        name = str((definition.get("General") or {}).get("BenchmarkName") or "definition")
        return _definition_from_doc(definition, f"T1 definition {name!r}", name, None)
    path = Path(definition)
    return _definition_from_doc(_read_json(path), str(path), _stem(path), path)


def find_definition(path: PathLike) -> Path:
    """The T1 definition of a T4 file ``<root>/t4/<kernel>_<gpu>.json.gz``: ``<root>/t1/<kernel>.json``.

    Looks in ``<root>/t1``, then a ``t1`` folder beside the file, then the
    file's own folder; the longest ``<kernel>`` that prefixes the file name
    (followed by ``_`` or nothing) wins, and only files that really are T1
    definitions count.
    """
    path = Path(path)
    name = _stem(path)
    candidates: list[tuple[int, int, Path]] = []
    dirs = [path.parent.parent / "t1", path.parent / "t1", path.parent]
    seen: set[Path] = set()
    for order, d in enumerate(dirs):
        if not d.is_dir() or d.resolve() in seen:
            continue
        seen.add(d.resolve())
        for f in d.iterdir():
            if not f.is_file() or f.resolve() == path.resolve():
                continue
            if not (f.name.endswith(".json") or f.name.endswith(".json.gz")):
                continue
            kernel = _stem(f)
            if name == kernel or name.startswith(kernel + "_"):
                candidates.append((-len(kernel), order, f))
    for _, _, f in sorted(candidates):
        try:
            if detect_format(_read_json(f)) == "t1":
                return f
        except DatasetError:
            continue
    raise DatasetError(f"{path}: T4 results carry no search-space definition and no T1 file named after a prefix "
                       f"of {name!r} was found in {', '.join(str(d) for d in dirs[:2])} or beside the file; "
                       "pass definition=<path to the T1 .json>")


# -- the recorded space ---------------------------------------------------------------------------


def _readonly(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


@dataclass(eq=False)
class RecordedSpace:
    """A brute-forced space: every configuration of ``space`` with its recorded outcome.

    All per-row arrays are aligned with ``space`` rows and read-only (loaded
    spaces are shared through the load cache).
    """

    name: str
    device: str
    params: dict[str, list]
    restrictions: list[str]
    space: SearchSpace
    times: np.ndarray  # float64 ms per row, NaN where failed
    failures: np.ndarray  # object: FailureKind or None per row
    samples: list  # per row: float64 array of the individual runs (ms), or None when not recorded
    counters: dict[str, np.ndarray] | None = None  # counter name -> float64 per row, NaN where absent
    statuses: np.ndarray | None = None  # object: the file's own failure label per row (None when ok)
    kernel: str = ""
    format: str = ""
    path: Path | None = None
    definition: Path | None = None  # the T1 file a T4 space was built from

    # -- sizes ------------------------------------------------------------------------------------
    @property
    def n_configs(self) -> int:
        """All recorded configurations, valid and failed (the N of the benchmark metric)."""
        return len(self.space)

    @property
    def ok(self) -> np.ndarray:
        """Boolean mask of rows with a valid time."""
        return ~np.isnan(self.times)

    @property
    def n_valid(self) -> int:
        return int(np.count_nonzero(self.ok))

    def __len__(self) -> int:
        return self.n_configs

    def __repr__(self) -> str:
        return (f"RecordedSpace({self.name!r}, device={self.device!r}, format={self.format!r}, "
                f"{self.n_configs} configs, {self.n_valid} valid)")

    # -- objective ----------------------------------------------------------------------------------
    def valid_times(self) -> np.ndarray:
        """Times (ms) of the configurations that ran, in row order."""
        return self.times[self.ok]

    @property
    def best_row(self) -> int:
        if self.n_valid == 0:
            raise DatasetError(f"{self._where}: no configuration has a valid time")
        return int(np.nanargmin(self.times))

    @property
    def optimum(self) -> float:
        """Smallest recorded time (ms)."""
        return float(self.times[self.best_row])

    def failure_counts(self) -> dict[FailureKind, int]:
        """How many rows failed with each kind (kinds that never occur are left out)."""
        counts = Counter(f for f in self.failures.tolist() if f is not None)
        return {kind: counts[kind] for kind in FailureKind if counts[kind]}

    # -- per configuration ----------------------------------------------------------------------------
    @property
    def _where(self) -> str:
        return str(self.path) if self.path is not None else self.name

    def params_of(self, row: int) -> dict[str, Any]:
        return self.space.get(row)

    def row_of(self, params: Mapping[str, Any] | Sequence[Any]) -> int:
        """Row of a configuration (dict or tuple of values); -1 when it is not recorded."""
        return self.space.find(params if isinstance(params, Mapping) else tuple(params))

    def samples_of(self, row: int) -> np.ndarray | None:
        return self.samples[int(row)]

    def counters_of(self, row: int) -> dict[str, float]:
        """Recorded counters of a row (those present); empty when the file or the row has none."""
        if self.counters is None:
            return {}
        row = int(row)
        return {k: float(v[row]) for k, v in self.counters.items() if not math.isnan(v[row])}

    def measurement(self, row: int, params: Mapping[str, Any] | None = None) -> Measurement:
        """The recorded outcome of ``row`` as a :class:`Measurement` (samples: the recorded runs)."""
        row = int(row)
        config = dict(params) if params is not None else self.params_of(row)
        kind = self.failures[row]
        extra = {"recording": self.name, "row": row}
        if kind is not None:
            label = self.statuses[row] if self.statuses is not None else None
            shown = f" ({label})" if label and label != kind.value else ""
            m = Measurement.failed(config, kind, detail=f"recorded as a {kind.value} failure{shown} in {self.name}")
            m.extra.update(extra)
            return m
        value = float(self.times[row])
        runs = self.samples[row]
        samples = runs.tolist() if runs is not None and len(runs) else [value]
        return Measurement(params=config, value=value, samples=samples, extra=extra)


# -- loading --------------------------------------------------------------------------------------


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


def _fail_kind_of_time(value: Any) -> FailureKind | None:
    """Kernel Tuner convention: a string time is a failure; a non-finite number is a runtime failure."""
    if isinstance(value, str):
        return KERNEL_TUNER_FAILURES.get(value, FailureKind.RUNTIME)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return FailureKind.RUNTIME
    return None


def _t4_records(doc: Mapping, path: Path, definition: SpaceDefinition) -> _Records:
    meta = doc.get("metadata") or {}
    factor = _time_factor(meta.get("timeunit", meta.get("time_unit")), path, 1.0)
    names = list(definition.params)
    n_names = len(names)
    results = doc["results"]
    columns: list[list] = [[None] * len(results) for _ in names]
    times = np.full(len(results), np.nan)
    failures: list = [None] * len(results)
    statuses: list = [None] * len(results)
    samples: list = [None] * len(results)
    for i, rec in enumerate(results):
        try:
            cfg = rec["configuration"]
            for k, n in enumerate(names):
                columns[k][i] = cfg[n]
        except KeyError as exc:
            raise DatasetError(f"{path}: result #{i} lacks {exc.args[0]!r} (its configuration must name the "
                               f"parameters of the definition {definition.path or definition.name}: "
                               f"{', '.join(names)})") from None
        except TypeError:
            raise DatasetError(f"{path}: result #{i} has no configuration object") from None
        if len(cfg) != n_names:
            extra = sorted(set(cfg) - set(names))
            raise DatasetError(f"{path}: result #{i} has parameter(s) {extra} that the definition "
                               f"{definition.path or definition.name} does not know")
        t = None
        for m in rec.get("measurements") or ():
            if m.get("name") == "time":
                t = m.get("value")
                break
        invalidity = rec.get("invalidity")
        kind = _fail_kind_of_time(t)
        if invalidity is not None and invalidity != "correct":
            kind = T4_FAILURES.get(invalidity) or kind or FailureKind.RUNTIME
        if kind is None:
            times[i] = float(t) * factor
            runs = (rec.get("times") or {}).get("runtimes")
            if runs:
                samples[i] = np.asarray(runs, dtype=np.float64) * factor
        else:
            failures[i] = kind
            statuses[i] = invalidity if invalidity not in (None, "correct") else (t if isinstance(t, str) else
                                                                                  "no valid time")
    device = meta.get("device") or meta.get("device_name") or meta.get("gpu")
    return _Records(names, definition.params, columns, times, failures, statuses, samples,
                    kernel=definition.kernel, device=device)


def kernel_tuner_cache(tune_params: Mapping[str, Sequence[Any]],
                       results: Iterable[tuple[Mapping[str, Any], float | None, FailureKind | None, Mapping[str, Any]]],
                       **meta: Any) -> dict[str, Any]:
    """A Kernel Tuner cache document (the format :func:`load_dataset` reads) from measured configurations.

    ``results`` holds ``(configuration, time, failure, extra fields)``; a
    failure is written as Kernel Tuner's string for it (``RuntimeFailedConfig``
    for kinds it has no string for). ``meta`` adds top-level fields
    (``device_name``, ``kernel_name``...).
    """
    names = list(tune_params)
    cache: dict[str, Any] = {}
    for config, time, failure, extra in results:
        values = [config[n] for n in names]
        entry: dict[str, Any] = dict(zip(names, values))
        entry["time"] = float(time) if failure is None else KERNEL_TUNER_FAILURE_TEXT.get(failure, "RuntimeFailedConfig")
        entry.update(extra)
        cache[",".join(str(v) for v in values)] = entry
    return {**meta, "tune_params_keys": names, "tune_params": {n: list(v) for n, v in tune_params.items()},
            "objective": "time", "cache": cache}


def _kt_records(doc: Mapping, path: Path) -> _Records:
    tp = doc["tune_params"]
    names = list(doc.get("tune_params_keys") or tp)
    missing = [n for n in names if n not in tp]
    if missing:
        raise DatasetError(f"{path}: tune_params_keys names {missing} that tune_params lacks")
    params = {n: list(tp[n]) for n in names}
    cache = doc["cache"]
    n = len(cache)
    columns: list[list] = [[None] * n for _ in names]
    times = np.full(n, np.nan)
    failures: list = [None] * n
    statuses: list = [None] * n
    samples: list = [None] * n
    by_text = None
    for i, (key, entry) in enumerate(cache.items()):
        try:
            for k, name in enumerate(names):
                columns[k][i] = entry[name]
        except KeyError:
            # an entry without its parameter fields: parse the comma-joined key
            if by_text is None:
                by_text = [{str(v): v for v in params[name]} for name in names]
            parts = str(key).split(",")
            if len(parts) != len(names):
                raise DatasetError(f"{path}: cache key {key!r} has {len(parts)} values for "
                                   f"{len(names)} parameters") from None
            for k, text in enumerate(parts):
                if text not in by_text[k]:
                    raise DatasetError(f"{path}: cache key {key!r}: {text!r} is not a value of "
                                       f"parameter {names[k]!r}") from None
                columns[k][i] = by_text[k][text]
        except TypeError:
            raise DatasetError(f"{path}: cache entry {key!r} is not an object") from None
        t = entry.get("time")
        kind = _fail_kind_of_time(t)
        if kind is None:
            times[i] = float(t)
            runs = entry.get("times")
            if runs:
                samples[i] = np.asarray(runs, dtype=np.float64)
        else:
            failures[i] = kind
            statuses[i] = t if isinstance(t, str) else "no valid time"
    return _Records(names, params, columns, times, failures, statuses, samples,
                    kernel=str(doc.get("kernel_name") or ""), device=doc.get("device_name"))


def _ktt_records(doc: Mapping, path: Path) -> _Records:
    meta = doc.get("Metadata") or {}
    factor = _time_factor(meta.get("TimeUnit"), path, 1e-3)
    results = doc["Results"]
    if not results:
        raise DatasetError(f"{path}: KTT output with no Results")
    try:
        names = [c["Name"] for c in results[0]["Configuration"]]
    except (KeyError, TypeError):
        raise DatasetError(f"{path}: Results[0] has no Configuration list of Name/Value pairs") from None
    position = {name: k for k, name in enumerate(names)}
    n = len(results)
    columns: list[list] = [[None] * n for _ in names]
    times = np.full(n, np.nan)
    failures: list = [None] * n
    statuses: list = [None] * n
    samples: list = [None] * n
    counter_index: dict[str, int] = {}
    layouts: dict[tuple, list[int]] = {}
    c_rows: list[int] = []
    c_cols: list[int] = []
    c_vals: list[float] = []
    kernel = ""
    for i, rec in enumerate(results):
        try:
            conf = rec["Configuration"]
            for c in conf:
                columns[position[c["Name"]]][i] = c["Value"]
        except KeyError as exc:
            raise DatasetError(f"{path}: Results[{i}]: configuration entry {exc.args[0]!r} unknown or missing "
                               f"(parameters of the first result: {', '.join(names)})") from None
        if len(conf) != len(names):
            got = sorted(c.get("Name") for c in conf)
            raise DatasetError(f"{path}: Results[{i}] sets parameters {got}, the first result {sorted(names)}")
        kernel = kernel or rec.get("KernelName") or ""
        status = rec.get("Status")
        kind = KTT_FAILURES.get(status, FailureKind.RUNTIME)
        crs = rec.get("ComputationResults") or []
        if kind is None:
            durations = [cr.get("Duration") for cr in crs]
            if durations and all(isinstance(d, (int, float)) and math.isfinite(d) for d in durations):
                t = float(sum(durations)) * factor
                times[i] = t
                samples[i] = np.array([t])
            else:
                kind, status = FailureKind.RUNTIME, "no valid Duration"
        if kind is not None:
            failures[i] = kind
            statuses[i] = status
            continue
        multi = len(crs) > 1
        for cr in crs:
            listed = (cr.get("ProfilingData") or {}).get("Counters")
            if not listed:
                continue
            prefix = f"{cr.get('KernelFunction', '')}." if multi else ""
            try:
                layout = (prefix, tuple([c["Name"] for c in listed]))
                values = [c["Value"] for c in listed]
            except (KeyError, TypeError):
                raise DatasetError(f"{path}: Results[{i}]: a profiling counter lacks Name or Value") from None
            cols = layouts.get(layout)
            if cols is None:  # files repeat one counter layout: resolve its columns once
                cols = [counter_index.setdefault(prefix + str(name), len(counter_index)) for name in layout[1]]
                layouts[layout] = cols
            c_rows.extend([i] * len(cols))
            c_cols.extend(cols)
            c_vals.extend(values)
    counters = None
    if counter_index:
        try:
            vals = np.asarray(c_vals, dtype=np.float64)
        except (TypeError, ValueError):
            bad = next(v for v in c_vals if not isinstance(v, (int, float)))
            raise DatasetError(f"{path}: a profiling counter has the non-numeric value {bad!r}") from None
        dense = np.full((len(counter_index), n), np.nan)
        dense[np.asarray(c_cols), np.asarray(c_rows)] = vals
        counters = {name: dense[k] for name, k in counter_index.items()}
    params = {name: _sorted_values(col) for name, col in zip(names, columns)}
    return _Records(names, params, columns, times, failures, statuses, samples, counters=counters,
                    kernel=kernel, device=meta.get("Device"))


def _index_matrix(records: _Records, params: Mapping[str, list], path: Path, source: str) -> np.ndarray:
    """Value indices of every record (records x parameters), vectorised per column."""
    n = len(records.times)
    idx = np.empty((n, len(records.names)), dtype=np.int64)
    for k, name in enumerate(records.names):
        lut = {_value_key(v): j for j, v in enumerate(params[name])}
        col = records.columns[k]
        try:
            idx[:, k] = [lut.get((type(v) is str, v), -1) for v in col]
        except TypeError:  # an unhashable value (a list, an object)
            bad = next(v for v in col if not isinstance(v, (str, int, float, bool)))
            raise DatasetError(f"{path}: parameter {name!r} has the value {bad!r}, not a number or string") from None
        unknown = np.flatnonzero(idx[:, k] < 0)
        if len(unknown):
            v = col[int(unknown[0])]
            raise DatasetError(f"{path}: {len(unknown)} record(s) give parameter {name!r} a value that {source} "
                               f"does not list, e.g. {v!r} (listed: {list(params[name])})")
    return idx


def _describe(names: Sequence[str], params: Mapping[str, list], idx_row: np.ndarray) -> str:
    return "{" + ", ".join(f"{n}: {params[n][int(j)]!r}" for n, j in zip(names, idx_row)) + "}"


def _assemble(records: _Records, path: Path, fmt: str, definition: SpaceDefinition | None) -> RecordedSpace:
    name = _stem(path)
    if definition is not None:
        if set(definition.params) != set(records.names):
            raise DatasetError(f"{path}: parameters {sorted(records.names)} differ from those of the definition "
                               f"{definition.path or definition.name}: {sorted(definition.params)}")
        # the definition fixes the parameter order and the value order
        order = [records.names.index(p) for p in definition.params]
        records.names = list(definition.params)
        records.columns = [records.columns[k] for k in order]
        params = {p: list(v) for p, v in definition.params.items()}
        restrictions = list(definition.restrictions)
        source = f"the definition {definition.path or definition.name}"
    else:
        params = records.params
        restrictions = []
        source = "the file's parameter list"
    idx = _index_matrix(records, params, path, source)
    try:
        if definition is not None:
            space = SearchSpace(params, restrictions)
        else:
            space = SearchSpace.from_configurations(params, _configs_of(idx, params, records.names))
    except SearchSpaceError as exc:
        raise DatasetError(f"{path}: cannot build the search space: {exc}") from exc
    rows = space.rows_of(idx) if len(idx) else np.empty(0, dtype=np.int64)
    n = len(space)
    if definition is not None:
        where = f"{path}: the configurations recorded in the file do not match the valid configurations of " \
                f"{source}"
        outside = np.flatnonzero(rows < 0)
        if len(outside):
            raise DatasetError(f"{where}: {len(outside)} recorded configuration(s) violate its restrictions, "
                               f"e.g. {_describe(records.names, params, idx[outside[0]])}")
    counts = np.bincount(rows, minlength=n) if n else np.zeros(0, dtype=np.int64)
    dup = np.flatnonzero(counts > 1)
    if len(dup):
        raise DatasetError(f"{path}: {len(dup)} configuration(s) are recorded more than once, "
                           f"e.g. {space.get(int(dup[0]))}")
    absent = np.flatnonzero(counts == 0)
    if len(absent):
        raise DatasetError(f"{path}: the configurations recorded in the file do not match the valid configurations "
                           f"of {source}: {len(absent)} valid configuration(s) of {n} have no record, "
                           f"e.g. {space.get(int(absent[0]))}")

    times = np.empty(n)
    times[rows] = records.times
    failures = np.empty(n, dtype=object)
    failures[rows] = np.array(records.failures + [None], dtype=object)[:-1]
    statuses = np.empty(n, dtype=object)
    statuses[rows] = np.array(records.statuses + [None], dtype=object)[:-1]
    samples: list = [None] * n
    for i, r in enumerate(rows.tolist()):
        s = records.samples[i]
        if s is not None:
            samples[r] = _readonly(s)
    counters = None
    if records.counters is not None:
        counters = {}
        for cname, values in records.counters.items():
            col = np.empty(n)
            col[rows] = values
            counters[cname] = _readonly(col)

    device = records.device
    if not device:
        kernel_prefix = definition.name if definition is not None else ""
        if kernel_prefix and name.startswith(kernel_prefix + "_"):
            device = name[len(kernel_prefix) + 1:]
        elif "_" in name:
            device = name.split("_", 1)[1]
        else:
            device = name
        device = device.replace("_", " ")
    return RecordedSpace(
        name=name, device=str(device), params={p: list(v) for p, v in params.items()},
        restrictions=restrictions, space=space, times=_readonly(times), failures=_readonly(failures),
        samples=samples, counters=counters, statuses=_readonly(statuses),
        kernel=records.kernel or (definition.kernel if definition is not None else ""), format=fmt, path=path,
        definition=definition.path if definition is not None else None)


def _configs_of(idx: np.ndarray, params: Mapping[str, list], names: Sequence[str]) -> list[tuple]:
    """Value tuples of value-index rows."""
    cols = [np.asarray(params[n], dtype=object)[idx[:, k]].tolist() for k, n in enumerate(names)]
    return list(zip(*cols))


@contextlib.contextmanager
def _gc_paused():
    """Pause the cyclic garbage collector while building large acyclic JSON trees (half the parse time)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _load_uncached(path: Path, definition: PathLike | Mapping | SpaceDefinition | None) -> RecordedSpace:
    with _gc_paused():
        return _parse(path, definition)


def _parse(path: Path, definition: PathLike | Mapping | SpaceDefinition | None) -> RecordedSpace:
    doc = _read_json(path)
    try:
        fmt = detect_format(doc)
    except DatasetError as exc:
        raise DatasetError(f"{path}: {exc}") from None
    defn = None
    if definition is not None:
        defn = load_definition(definition)
    if fmt == "t1":
        raise DatasetError(f"{path}: a T1 search-space definition without measurements; load it with "
                           "load_definition(), or load a measured file (T4, Kernel Tuner cache, KTT)")
    if fmt == "t4":
        if defn is None:
            defn = load_definition(find_definition(path))
        records = _t4_records(doc, path, defn)
    elif fmt == "kerneltuner":
        records = _kt_records(doc, path)
    else:
        records = _ktt_records(doc, path)
    return _assemble(records, path, fmt, defn)


_CACHE: "OrderedDict[tuple, tuple[RecordedSpace, tuple | None]]" = OrderedDict()
_CACHE_SIZE = 32
_CACHE_LOCK = threading.Lock()


def _file_key(path: Path) -> tuple:
    st = path.stat()
    return (str(path.resolve()), st.st_mtime_ns, st.st_size)


def load_dataset(path: PathLike, definition: PathLike | Mapping[str, Any] | SpaceDefinition | None = None, *,
                 cache: bool = True) -> RecordedSpace:
    """Load a recorded space in any supported format (detected from the content).

    ``definition`` (a T1 path, parsed T1 document or :class:`SpaceDefinition`)
    is required for T4 files, found automatically when the T1 file sits in
    ``<root>/t1/<kernel>.json`` for ``<root>/t4/<kernel>_<gpu>.json[.gz]``.
    Given for a Kernel Tuner or KTT file, the space is built from it and the
    file must record exactly its valid configurations; otherwise the space is
    exactly the configurations the file records.

    Results are memoised by path, modification time and size of the file
    (and of the T1 file a T4 file found by itself; the last 32 loads), and
    shared: their arrays are read-only. ``cache=False`` always reads the file.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no recorded space at {path}")
    key = None
    if cache:
        if definition is None:
            dkey: Any = None
        elif isinstance(definition, (str, os.PathLike)):
            dkey = _file_key(Path(definition))
        else:
            dkey = ("object", id(definition))
            cache = False  # a mutable in-memory definition is not a safe cache key
        key = (_file_key(path), dkey)
    if cache:
        with _CACHE_LOCK:
            hit = _CACHE.get(key)
        if hit is not None:
            recorded, dependency = hit
            # a T4 file found its T1 definition itself: reuse only while that file is unchanged too
            if dependency is None or (recorded.definition.is_file() and _file_key(recorded.definition) == dependency):
                with _CACHE_LOCK:
                    if key in _CACHE:
                        _CACHE.move_to_end(key)
                return recorded
    recorded = _load_uncached(path, definition)
    if cache:
        dependency = _file_key(recorded.definition) if definition is None and recorded.definition else None
        with _CACHE_LOCK:
            _CACHE[key] = (recorded, dependency)
            while len(_CACHE) > _CACHE_SIZE:
                _CACHE.popitem(last=False)
    return recorded


def clear_cache() -> None:
    """Forget every memoised load."""
    with _CACHE_LOCK:
        _CACHE.clear()


# -- discovery ------------------------------------------------------------------------------------

_SNIFF_BYTES = 1 << 18
_SNIFF = [
    ("t4", re.compile(rb'"results"\s*:\s*\[')),
    ("kerneltuner", re.compile(rb'"tune_params"\s*:')),
    ("ktt", re.compile(rb'"Results"\s*:\s*\[')),
    ("t1", re.compile(rb'"ConfigurationSpace"\s*:')),
]


def sniff_format(path: PathLike) -> str | None:
    """Format of a file from its first bytes, without parsing a large file; ``None`` when unrecognised."""
    path = Path(path)
    try:
        with _open_text(path) as f:
            head = f.read(_SNIFF_BYTES + 1)
    except (OSError, EOFError):
        return None
    if len(head) <= _SNIFF_BYTES:  # the whole file: decide exactly
        try:
            return detect_format(_orjson.loads(head) if _orjson is not None else json.loads(head))
        except (ValueError, DatasetError):
            return None
    hits = {fmt: m.start() for fmt, rx in _SNIFF for m in [rx.search(head)] if m}
    if "kerneltuner" in hits and not re.search(rb'"cache"\s*:\s*\{', head):
        # a Kernel Tuner cache writes tune_params before the cache; without it, guess nothing
        hits.pop("kerneltuner")
    if not hits:
        return None
    return min(hits, key=hits.get)


def discover(root: PathLike | None = None) -> list[Path]:
    """Every measured space file (T4, Kernel Tuner cache, KTT) under ``root``, sorted.

    ``root`` defaults to :func:`default_spaces_root`. Files are recognised by
    content, so any folder layout works; T1 definitions and unrelated JSON
    files are left out.
    """
    root = Path(root) if root is not None else default_spaces_root()
    if not root.is_dir():
        raise FileNotFoundError(f"no folder of recorded spaces at {root}")
    found = []
    for f in sorted(root.rglob("*")):
        if f.is_file() and (f.name.endswith(".json") or f.name.endswith(".json.gz")):
            if sniff_format(f) in MEASURED_FORMATS:
                found.append(f)
    return found
