"""Outcome types shared by runners, the evaluator, strategies and the lockfile.

A runner turns one configuration into a :class:`Measurement`; the evaluator
records measurements in order; strategies only ever see the objective value or
``None`` for a failure (never a fake penalty number).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Mapping


class FailureKind(str, enum.Enum):
    """Why a configuration produced no usable objective value."""

    INVALID = "invalid"  # rejected before launch (device limits, restrictions)
    COMPILE = "compile"  # the compiler refused the source
    RESOURCES = "resources"  # the compiled kernel exceeds a device limit (registers, shared memory); never launched
    LAUNCH = "launch"  # the launch itself failed (resources, bad geometry)
    RUNTIME = "runtime"  # crashed while running (illegal address, trap, segfault)
    TIMEOUT = "timeout"  # exceeded the watchdog limit
    WRONG_OUTPUT = "wrong_output"  # ran, but the output differs from the reference
    RACE = "race"  # a data race the checker (Oclgrind) found: the output may be right here, wrong elsewhere
    OUT_OF_BOUNDS = "out_of_bounds"  # an access outside a buffer or array the checker found

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.value


@dataclass
class Measurement:
    """One evaluated configuration.

    ``value`` is the objective (lower is better; milliseconds for time) or
    ``None`` when ``failure`` is set. ``samples`` keeps every timed run so the
    regression gate can test distributions, not just medians.
    ``early_stopped``: timing ended after the first runs because they were far
    slower than the best so far (:class:`~pytest_autotune.measure.timing.EarlyStop`);
    ``value`` and ``samples`` are what was measured, and such a configuration
    is never a winner nor a runner-up.
    """

    params: Mapping[str, Any]
    value: float | None = None
    samples: list[float] = field(default_factory=list)
    failure: FailureKind | None = None
    detail: str = ""  # compiler log, error message, largest verification error
    timings: dict[str, float] = field(default_factory=dict)  # compile_s, verify_s, bench_s, ...
    extra: dict[str, Any] = field(default_factory=dict)  # runner specific (counters, geometry)
    early_stopped: bool = False

    @property
    def ok(self) -> bool:
        return self.failure is None and self.value is not None

    @classmethod
    def failed(cls, params: Mapping[str, Any], kind: FailureKind, detail: str = "", **timings: float) -> "Measurement":
        return cls(params=dict(params), failure=FailureKind(kind), detail=detail, timings=dict(timings))
