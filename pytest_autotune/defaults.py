"""The defaults of every tunable setting, and their ranges: one place for the plugin's ini options, the
marker, the lifecycle's script entry points and the engine's ``tune()``."""
from __future__ import annotations


__all__ = ["STRATEGY", "BUDGET", "TOLERANCE", "ALPHA", "LOCKDIR", "MISSING", "INCOMPARABLE", "is_tolerance", "is_alpha",
           "TOLERANCE_RANGE", "ALPHA_RANGE", "STATIC", "STATIC_POLICIES", "STATIC_TOLERANCE",
           "INTERPRETER_TIMING", "INTERPRETER_TIMING_POLICIES"]

STRATEGY = "auto"
"""The search strategy of a marker without ``strategy=`` (see :mod:`.strategies.auto`)."""
BUDGET = 200
"""Unique evaluations of a marker without ``budget=``."""
TOLERANCE = 0.10
"""The slowdown the gate allows, as a fraction of the locked median (0.10 = 10 %)."""
ALPHA = 0.01
"""The significance level of the gate's Mann-Whitney U test."""
LOCKDIR = "autotune.lock"
"""The lock directory, relative to the rootdir (pytest) or the working directory (scripts)."""
MISSING = "skip"
"""What the gate does without a valid entry: skip, fail or tune."""
INCOMPARABLE = "warn"
"""What the gate does on a machine its probes find unlike the lock's: warn, skip or fail."""

STATIC = "fail-on-worse"
"""What the static gate does with a rebuilt binary unlike the lock's: fail when it is worse (spills, occupancy,
instructions), pass a change that is not worse; ``warn`` never fails, ``fail-on-change`` fails any change, ``off``
leaves GPU kernels ungated on a machine without their GPU."""
STATIC_POLICIES = ("off", "warn", "fail-on-worse", "fail-on-change")
STATIC_TOLERANCE = 0.10
"""The growth in memory or math instructions (a fraction of the lock's count) the static gate calls worse."""
INTERPRETER_TIMING = "info"
"""A Triton kernel timed in Triton's interpreter: its timing is reported (``info``), never a failure, unless
``gate``: an interpreter's timing says nothing about a GPU."""
INTERPRETER_TIMING_POLICIES = ("info", "gate")

TOLERANCE_RANGE = (0.0, 10.0)  # [low, high): 10 = a kernel 11x slower passes, more is no gate
ALPHA_RANGE = (0.0, 1.0)  # (low, high)


def is_tolerance(value: float) -> bool:
    """A usable tolerance: a fraction in [0, 10) (10 = a kernel 11x slower still passes; more is no gate)."""
    low, high = TOLERANCE_RANGE
    return low <= value < high


def is_alpha(value: float) -> bool:
    """A usable significance level: strictly between 0 and 1."""
    low, high = ALPHA_RANGE
    return low < value < high
