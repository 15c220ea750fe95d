"""Recorded per-configuration costs besides the timed runs: compile, verification, framework overhead.

The simulated clock (:mod:`pytest_autotune.simulation`) charges each evaluation
what it cost when the space was recorded. The timed iterations themselves are
:attr:`RecordedSpace.samples <pytest_autotune.datasets.RecordedSpace.samples>`;
the other stages live here, in milliseconds like every time of a recorded
space, read from these fields:

==============  =========================  =======================  ==========================================
stage           T4 (``times.*``)           Kernel Tuner cache       KTT (microseconds in the file)
==============  =========================  =======================  ==========================================
``compile``     ``compilation``            ``compile_time``         ``TotalOverhead`` minus the three below
``verify``      ``validation``             ``verification_time``    ``ValidationOverhead``
``framework``   ``framework``              ``framework_time``       ``DataMovementOverhead``
==============  =========================  =======================  ==========================================

KTT 2.1 records one lump, ``TotalOverhead`` (compilation, launch overhead,
data movement, validation, its searcher, and the profiling passes of a run
that collects counters). The named parts are taken out; its searcher's share
(``SearcherOverhead``) is dropped because a simulated run charges the
strategy's own measured compute instead; the rest is charged as compilation,
which it mostly is on a file without counters (on the RTX 2080 Ti file it
also holds the profiling passes).

A value that is absent, not a number, negative or not finite is *missing*
(NaN here); what the clock assumes for it is decided there, not here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

STAGES = ("compile", "verify", "framework")
"""Cost stages besides the timed runs, in the order an evaluation goes through them."""


def cost_number(value: Any) -> float | None:
    """A recorded cost as a float; None when it is absent, not a number, negative or not finite."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) and value >= 0 else None


class RecordCosts:
    """Costs collected while a file is read, in file order (NaN where a record lacks one)."""

    def __init__(self, n: int, fields: Mapping[str, str]):
        self.values = {stage: np.full(n, np.nan) for stage in STAGES}
        self.fields = dict(fields)  # stage -> the file's field name, for reports

    def set(self, i: int, stage: str, value: Any, factor: float = 1.0) -> None:
        """Record ``value * factor`` (ms) for record ``i``; a value that is not a usable number stays missing."""
        number = cost_number(value)
        if number is not None:
            self.values[stage][i] = number * factor

    def aligned(self, rows: np.ndarray, n: int) -> "CostTable":
        """The table indexed by the space's rows (record ``i`` becomes row ``rows[i]``)."""
        out = {}
        for stage, values in self.values.items():
            col = np.full(n, np.nan)
            col[rows] = values
            col.flags.writeable = False
            out[stage] = col
        return CostTable(fields=self.fields, **out)


@dataclass(frozen=True, eq=False)
class CostTable:
    """Recorded costs (ms) per row of a recorded space; NaN where the file does not record one."""

    compile: np.ndarray
    verify: np.ndarray
    framework: np.ndarray
    fields: dict[str, str] = field(default_factory=dict)  # stage -> the file field it was read from

    def stage(self, name: str) -> np.ndarray:
        if name not in STAGES:
            raise KeyError(f"unknown cost stage {name!r}; stages: {', '.join(STAGES)}")
        return getattr(self, name)

    def recorded(self, name: str) -> bool:
        """Whether the file records this stage for at least one configuration."""
        return bool(np.any(~np.isnan(self.stage(name))))

    def of(self, row: int) -> dict[str, float]:
        """The recorded costs of one row (stages it lacks are left out)."""
        return {s: float(self.stage(s)[row]) for s in STAGES if not math.isnan(self.stage(s)[row])}
