"""The gate's time budget: the wall time one kernel's gate may take, and a session's, shared out fairly.

The persistence rule keeps measuring while a busy machine makes a slowdown look real (254 s for one Triton
kernel beside a neighbour, issue 39); a CI job whose length varies 40x gets a timeout, and then the gate is
switched off. So a gate has a budget of wall time: the first measurement, the fresh rounds and their
pauses, the probes, the A/B blocks and the runners-up all count. It is checked before each further round or
block (a running measurement is never interrupted): a round starts only when its pause and the length of the
round before it still fit. What the evidence has not decided when the budget is spent is *not comparable*,
with the evidence so far, never a pass or a fail by exhaustion.

A session budget (``--autotune-gate-budget``) is shared out as the gates come: each gets at most
``min(its own budget, what the session has left / the kernels still to gate)``; kernels reached after it is
spent are not gated. The clock and the sleep are injectable so a test (or a replay) can let a gate be slow
without waiting for it.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..engine.evaluator import parse_duration

__all__ = ["GateBudget", "SessionGateBudget", "parse_gate_budget", "format_seconds"]

Clock = Callable[[], float]
Sleep = Callable[[float], None]
OFF_WORDS = ("none", "off", "0", "")


def parse_gate_budget(value: Any) -> float | None:
    """``"10s"``, ``"5m"``, ``90`` (seconds) -> seconds; ``None``/``"none"``/``"off"`` -> no budget.
    Reuses the tuning budget's duration syntax (:func:`~pytest_autotune.engine.evaluator.parse_duration`)."""
    if value is None or (isinstance(value, str) and value.strip().lower() in OFF_WORDS):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{value!r} must be a duration such as '10s' or '5m' (or 'none')")
    try:
        seconds = parse_duration(value)
    except ValueError:
        raise ValueError(f"{value!r} must be a duration such as '10s' or '5m' (or 'none')") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{value!r} must be a positive duration such as '10s' or '5m' (or 'none')")
    return float(seconds)


def format_seconds(seconds: float) -> str:
    """``10 s``, ``2.5 s``, ``5 min``: how a budget reads in a message."""
    if seconds >= 120 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:.3g} s"


@dataclass
class GateBudget:
    """The wall time one gate may take (``seconds``; None: no limit), from :meth:`start`.

    ``source`` says where the limit came from, for the message (``gate_budget=10s``, ``its share of
    --autotune-gate-budget=5m``)."""

    seconds: float | None = None
    source: str = ""
    clock: Clock = time.monotonic
    sleep: Sleep = time.sleep
    started: float | None = None
    stopped: bool = field(default=False)
    """Set by the gate when the budget ended its rounds with the verdict undecided."""

    def start(self) -> "GateBudget":
        self.started = self.clock()
        return self

    @property
    def elapsed(self) -> float:
        return 0.0 if self.started is None else self.clock() - self.started

    def allows(self, seconds: float) -> bool:
        """Whether ``seconds`` more (a pause and the round after it) still fit in the budget."""
        return self.seconds is None or self.elapsed + max(0.0, seconds) <= self.seconds

    @property
    def limited(self) -> bool:
        return self.seconds is not None

    def describe(self) -> str:
        """``its gate budget of 10 s (gate_budget=10s)``."""
        return f"its gate budget of {format_seconds(self.seconds or 0.0)}" + (f" ({self.source})" if self.source else "")


UNLIMITED = GateBudget()


@dataclass
class SessionGateBudget:
    """A session's gate budget for this process, shared out as the gates come.

    ``seconds`` is this process's part: under pytest-xdist the session budget divided by the workers (each
    worker gates its own kernels, in parallel, so each has the whole wall time's share of the CPU it runs
    on). ``expected`` is the kernels this process is expected to gate (the marked tests collected, divided
    by the workers); each gate gets what is left divided by the kernels still expected (at least one)."""

    seconds: float
    expected: int = 1
    flag: str = "--autotune-gate-budget"
    clock: Clock = time.monotonic
    started: float | None = None
    gated: int = 0
    spent_s: float = 0.0

    def left(self) -> float:
        return max(0.0, self.seconds - self.spent_s)

    @property
    def spent(self) -> bool:
        return self.spent_s >= self.seconds

    def share(self) -> float:
        """What the next gate may take of the session: what is left over the kernels still to gate."""
        return self.left() / max(1, self.expected - self.gated)

    def take(self, own: float | None, own_source: str, clock: Clock | None = None,
             sleep: Sleep | None = None) -> GateBudget:
        """The budget of the next gate: its own (``own``, from ``own_source``), or its fair share of the
        session where that is less. Call :meth:`done` with it when the gate ends."""
        share = self.share()
        chosen = GateBudget(own, own_source) if own is not None and own <= share else \
            GateBudget(share, f"its share of {self.flag}")
        if clock is not None:
            chosen.clock = clock
        if sleep is not None:
            chosen.sleep = sleep
        return chosen

    def done(self, budget: GateBudget) -> None:
        """A gate ended: its wall time is the session's."""
        self.gated += 1
        self.spent_s += budget.elapsed
