"""The assembled :class:`RecordedSpace`: a file's records aligned with the rows of its search space."""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ..results import FailureKind, Measurement
from ..space import SearchSpace, SearchSpaceError
from .common import DatasetError, _Records, _stem, _value_key
from .costs import CostTable
from .t1 import SpaceDefinition



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
    costs: CostTable | None = None  # recorded compile / verification / framework costs (ms), when the file has them

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
    costs = records.costs.aligned(rows, n) if records.costs is not None else None
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
        samples=samples, counters=counters, statuses=_readonly(statuses), costs=costs,
        kernel=records.kernel or (definition.kernel if definition is not None else ""), format=fmt, path=path,
        definition=definition.path if definition is not None else None)


def _configs_of(idx: np.ndarray, params: Mapping[str, list], names: Sequence[str]) -> list[tuple]:
    """Value tuples of value-index rows."""
    cols = [np.asarray(params[n], dtype=object)[idx[:, k]].tolist() for k, n in enumerate(names)]
    return list(zip(*cols))

