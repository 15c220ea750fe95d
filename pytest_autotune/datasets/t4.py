"""T4 results files (``results[]``); their space comes from the T1 definition of the same kernel."""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np

from ..results import FailureKind
from .common import DatasetError, _Records, _time_factor
from .costs import RecordCosts
from .kerneltuner import _fail_kind_of_time
from .t1 import SpaceDefinition

T4_FAILURES: dict[str, FailureKind | None] = {
    "correct": None,
    "compile": FailureKind.COMPILE,
    "runtime": FailureKind.RUNTIME,
    "timeout": FailureKind.TIMEOUT,
    "correctness": FailureKind.WRONG_OUTPUT,
    "constraints": FailureKind.INVALID,
}
T4_COST_FIELDS = {"compile": "compilation", "verify": "validation", "framework": "framework"}
"""Cost stage -> the field of a result's ``times`` object (in the file's time unit, milliseconds by default)."""


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
    costs = RecordCosts(len(results), {stage: f"times.{name}" for stage, name in T4_COST_FIELDS.items()})
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
        recorded_times = rec.get("times")
        if isinstance(recorded_times, Mapping):
            for stage, name in T4_COST_FIELDS.items():
                costs.set(i, stage, recorded_times.get(name), factor)
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
            runs = recorded_times.get("runtimes") if isinstance(recorded_times, Mapping) else None
            if runs:
                samples[i] = np.asarray(runs, dtype=np.float64) * factor
        else:
            failures[i] = kind
            statuses[i] = invalidity if invalidity not in (None, "correct") else (t if isinstance(t, str) else
                                                                                  "no valid time")
    device = meta.get("device") or meta.get("device_name") or meta.get("gpu")
    return _Records(names, definition.params, columns, times, failures, statuses, samples,
                    kernel=definition.kernel, device=device, costs=costs)

