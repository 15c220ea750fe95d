"""Kernel Tuner cache files: reading them (``tune_params``, ``cache``) and writing one from measurements."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ..results import FailureKind
from .common import DatasetError, _Records
from .costs import RecordCosts

KERNEL_TUNER_FAILURES: dict[str, FailureKind] = {
    "InvalidConfig": FailureKind.INVALID,
    "CompilationFailedConfig": FailureKind.COMPILE,
    "RuntimeFailedConfig": FailureKind.RUNTIME,
}
KERNEL_TUNER_FAILURE_TEXT: dict[FailureKind, str] = {
    **{kind: text for text, kind in KERNEL_TUNER_FAILURES.items()},
    FailureKind.RESOURCES: "InvalidConfig",  # Kernel Tuner skips a launch over the device's resources as invalid
}

KERNEL_TUNER_COST_FIELDS = {"compile": "compile_time", "verify": "verification_time", "framework": "framework_time"}
"""Cost stage -> the cache entry's field (milliseconds, as every time in a Kernel Tuner cache)."""


def _fail_kind_of_time(value: Any) -> FailureKind | None:
    """Kernel Tuner convention: a string time is a failure; a non-finite number is a runtime failure."""
    if isinstance(value, str):
        return KERNEL_TUNER_FAILURES.get(value, FailureKind.RUNTIME)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return FailureKind.RUNTIME
    return None


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
    costs = RecordCosts(n, KERNEL_TUNER_COST_FIELDS)
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
        for stage, name in KERNEL_TUNER_COST_FIELDS.items():
            costs.set(i, stage, entry.get(name))
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
                    kernel=str(doc.get("kernel_name") or ""), device=doc.get("device_name"), costs=costs)

