"""Kernel Tuning Toolkit (KTT) output (``Results[]``), with hardware counters where it has them."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Mapping

import numpy as np

from ..results import FailureKind
from .common import DatasetError, _Records, _sorted_values, _time_factor
from .costs import RecordCosts, cost_number

KTT_FAILURES: dict[str, FailureKind | None] = {
    "Ok": None,
    "ComputationFailed": FailureKind.RUNTIME,
    "CompilationFailed": FailureKind.COMPILE,
    "ValidationFailed": FailureKind.WRONG_OUTPUT,
    "DeviceLimitsExceeded": FailureKind.INVALID,
}
KTT_COST_FIELDS = {"compile": "TotalOverhead - DataMovementOverhead - ValidationOverhead - SearcherOverhead",
                   "verify": "ValidationOverhead", "framework": "DataMovementOverhead"}
"""Cost stage -> where it comes from (see :mod:`pytest_autotune.datasets.costs` for why)."""


def _read_costs(rec: Mapping, i: int, costs: RecordCosts, factor: float) -> None:
    """A KTT result's costs: its named overheads, and the rest of ``TotalOverhead`` as compilation."""
    costs.set(i, "verify", rec.get("ValidationOverhead"), factor)
    costs.set(i, "framework", rec.get("DataMovementOverhead"), factor)
    total = cost_number(rec.get("TotalOverhead"))
    if total is not None:
        named = sum(cost_number(rec.get(name)) or 0.0
                    for name in ("DataMovementOverhead", "ValidationOverhead", "SearcherOverhead"))
        costs.set(i, "compile", max(total - named, 0.0), factor)


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
    costs = RecordCosts(n, KTT_COST_FIELDS)
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
        _read_costs(rec, i, costs, factor)
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
    return _Records(names, params, columns, times, failures, statuses, samples, counters=counters, costs=costs,
                    kernel=kernel, device=meta.get("Device"))

