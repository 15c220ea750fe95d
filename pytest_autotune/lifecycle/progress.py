"""Progress lines of a tuning and a gate: evaluations so far, the best, failures, elapsed time and an ETA; then
each phase that follows the search (finalists re-timed, the lock's rounds, the gate's rounds) in the same form.

A kernel's lines share one throttle (:attr:`Progress.every`): a line at most every few seconds, and no phase
silent for longer than that plus one of its steps (a re-timing, a round)."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from ..engine.evaluator import EvaluationRecord, Evaluator


def eta(done: int, budget: int | None, elapsed: float, *, at_most: bool = False) -> str:
    """``", ETA 12s"`` from the mean time per step so far; empty when it cannot be known. ``at_most``: the
    steps may stop early (the gate's rounds), so the ETA is a bound."""
    if not budget or done <= 0 or done >= budget:
        return ""
    left = (budget - done) * elapsed / done
    bound = "at most " if at_most else ""
    return f", ETA {bound}{left:.0f}s" if left < 120 else f", ETA {bound}{left / 60:.1f}min"


@dataclass
class Progress:
    """A live progress line per tuned kernel: evaluations/budget, best so far, failures, elapsed; and
    :meth:`phase` for what follows the search."""

    write_line: Callable[[str], None] | None
    label: str
    budget: int | None
    every: float = 3.0  # seconds between lines
    clock: Callable[[], float] = time.perf_counter
    started: float | None = None  # None: now, by ``clock``
    last: float = float("-inf")  # the first record always prints (perf_counter may start near 0)
    failures: int = 0

    def __post_init__(self) -> None:
        if self.started is None:
            self.started = self.clock()

    def __call__(self, record: EvaluationRecord, evaluator: Evaluator) -> None:
        if record.measurement.failure is not None:
            self.failures += 1
        now = self.clock()
        done = evaluator.evaluations
        final = self.budget is not None and done >= self.budget
        if self.write_line is None or (now - self.last < self.every and not final):
            return
        self.last = now
        best = evaluator.history.best
        best_text = f"{best.value:.4g} ms" if best is not None else "-"
        budget = self.budget if self.budget is not None else "-"
        elapsed = now - (self.started or 0.0)
        self.write_line(f"autotune {self.label}: {done}/{budget} evaluations, best {best_text}, "
                        f"{self.failures} failed, {elapsed:.1f}s{eta(done, self.budget, elapsed)}")

    def phase(self, what: str, *, at_most: bool = False) -> "Callable[[int, int], None] | None":
        """A ``(done, total)`` callback for a phase after the search (``what``: "finalists re-timed",
        "lock rounds", "gate rounds"), or None when nothing is shown (-q, an xdist worker)."""
        if self.write_line is None:
            return None
        return PhaseProgress(self, what, at_most, self.clock())


@dataclass
class PhaseProgress:
    """The lines of one phase: ``autotune <kernel>: lock rounds 3/8, 2.1s, ETA 3s``. Throttled with the
    kernel's other lines; a phase that showed a line also shows its last step, so it is seen to end."""

    parent: Progress
    what: str
    at_most: bool
    started: float
    shown: bool = False

    def __call__(self, done: int, total: int) -> None:
        p = self.parent
        now = p.clock()
        final = done >= total
        if p.write_line is None or (now - p.last < p.every and not (final and self.shown)):
            return
        p.last, self.shown = now, True
        elapsed = now - self.started
        of = f" of at most {total}" if self.at_most and not final else f"/{total}"
        p.write_line(f"autotune {p.label}: {self.what} {done}{of}, {elapsed:.1f}s"
                     f"{eta(done, total, elapsed, at_most=self.at_most)}")
