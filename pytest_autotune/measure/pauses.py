"""The pauses between the lock's and the gate's rounds, and the one setting that shortens them.

The pauses spread the rounds over time, so that a host's slow state (which lasts seconds) meets some rounds and
not others (docs/explanation/gate-machine-differences.md). A test suite that checks a project's wiring (that a
kernel tunes, locks and gates, not how robust the gate is) spends most of a gate sleeping in them:
``PYTEST_AUTOTUNE_PAUSE_SCALE=0`` removes them, ``0.5`` halves them. Not for a CI gate: without the pauses the
rounds meet one state of the host, and a lock recorded so is likelier to be one of its slow states.
"""
from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping

from ..errors import SpecError

__all__ = ["PAUSE_SCALE_ENV", "PAUSE_SCALE_RANGE", "pause_scale", "scaled", "pause"]

PAUSE_SCALE_ENV = "PYTEST_AUTOTUNE_PAUSE_SCALE"
PAUSE_SCALE_RANGE = (0.0, 10.0)  # [low, high]: 10x the pauses is a gate of minutes, more is a mistake


def pause_scale(environ: Mapping[str, str] | None = None) -> float:
    """The factor every pause is multiplied by (1 where the variable is unset or empty).

    A value that is not a number in the range is an error naming the variable (the environment is input)."""
    raw = (os.environ if environ is None else environ).get(PAUSE_SCALE_ENV, "").strip()
    if not raw:
        return 1.0
    low, high = PAUSE_SCALE_RANGE
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and low <= value <= high):
        raise SpecError(f"{PAUSE_SCALE_ENV}={raw[:40]!r}: expected a number from {low:g} to {high:g} "
                        f"(0 removes the pauses between the lock's and the gate's rounds, 1 keeps them)")
    return value


def scaled(seconds: float) -> float:
    """A pause of ``seconds`` as this process takes it."""
    return seconds * pause_scale() if seconds > 0 else 0.0


def pause(seconds: float, sleep: Callable[[float], object] | None = None) -> None:
    """Sleep for the pause of ``seconds``, scaled; nothing for a pause scaled to 0 (``sleep``: time.sleep)."""
    s = scaled(seconds)
    if s > 0:
        (sleep or time.sleep)(s)
