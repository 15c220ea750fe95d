"""Progress lines of a tuning: evaluations so far, the best, failures, elapsed time and an ETA."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from ..engine.evaluator import EvaluationRecord, Evaluator


def eta(done: int, budget: int | None, elapsed: float) -> str:
    """``", ETA 12s"`` from the mean time per evaluation so far; empty when it cannot be known."""
    if not budget or done <= 0 or done >= budget:
        return ""
    left = (budget - done) * elapsed / done
    return f", ETA {left:.0f}s" if left < 120 else f", ETA {left / 60:.1f}min"


@dataclass
class Progress:
    """A live progress line per tuned kernel: evaluations/budget, best so far, failures, elapsed."""

    write_line: Callable[[str], None] | None
    label: str
    budget: int | None
    every: float = 3.0  # seconds between lines
    started: float = field(default_factory=time.perf_counter)
    last: float = float("-inf")  # the first record always prints (perf_counter may start near 0)
    failures: int = 0

    def __call__(self, record: EvaluationRecord, evaluator: Evaluator) -> None:
        if record.measurement.failure is not None:
            self.failures += 1
        now = time.perf_counter()
        done = evaluator.evaluations
        final = self.budget is not None and done >= self.budget
        if self.write_line is None or (now - self.last < self.every and not final):
            return
        self.last = now
        best = evaluator.history.best
        best_text = f"{best.value:.4g} ms" if best is not None else "-"
        budget = self.budget if self.budget is not None else "-"
        elapsed = now - self.started
        self.write_line(f"autotune {self.label}: {done}/{budget} evaluations, best {best_text}, "
                        f"{self.failures} failed, {elapsed:.1f}s{eta(done, self.budget, elapsed)}")
