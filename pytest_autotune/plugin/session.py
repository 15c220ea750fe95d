"""Run-wide state of the plugin: resolved options, progress output, collected summary rows."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pytest

from ..engine.evaluator import EvaluationRecord, Evaluator

MISSING_POLICIES = ("skip", "fail", "tune")
INCOMPARABLE_POLICIES = ("warn", "skip", "fail")  # the gate on a machine unlike the lock's


@dataclass
class Options:
    """Command-line flags and ini options after resolution (flag beats ini beats built-in default)."""

    mode: str | None  # None = gate, "all" = tune every selected test, "missing" = tune tests without a valid entry
    missing: str  # skip | fail | tune
    fresh: bool
    lockdir: Path
    scratch_dir: Path
    ranking: bool
    report: Path | None
    plots: Path | None
    devices: list[str]
    defaults: dict[str, Any]  # marker defaults: strategy, budget, tolerance, alpha, seed, worker bounds
    verbosity: int = 0
    is_worker: bool = False
    incomparable: str = "warn"  # warn (pass, loudly) | skip | fail
    compile_workers: int = 1  # compile workers ahead of the device stage (1 = compile inline)
    require_device: bool = False  # no usable device fails the test (tune and gate) instead of skipping it
    cluster: str | None = None  # --autotune-ray: "ray" or a Ray address (tune on every device of the cluster)


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


@dataclass
class SessionState:
    options: Options
    write_line: Callable[[str], None] | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)
    collected: set[str] = field(default_factory=set)  # every test id collected, before deselection (renames)

    def say(self, line: str) -> None:
        """One line on the terminal now (not under -q, not from xdist workers)."""
        if self.write_line is not None and self.options.verbosity >= 0 and not self.options.is_worker:
            self.write_line(line)

    def progress(self, label: str, budget: int | None) -> Progress:
        quiet = self.options.verbosity < 0 or self.options.is_worker
        return Progress(None if quiet else self.write_line, label, budget)


STATE_KEY = pytest.StashKey[SessionState]()
"""Where the session's state lives on ``config.stash`` (the hooks, the fixture and prune read it)."""
