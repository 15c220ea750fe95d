"""The defaults of every tunable setting, and their ranges: one place for the plugin's ini options, the
marker, the lifecycle's script entry points and the engine's ``tune()``."""
from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["STRATEGY", "BUDGET", "TOLERANCE", "ALPHA", "LOCKDIR", "MISSING", "INCOMPARABLE", "is_tolerance", "is_alpha",
           "TOLERANCE_RANGE", "ALPHA_RANGE", "STATIC", "STATIC_POLICIES", "STATIC_TOLERANCE",
           "INTERPRETER_TIMING", "INTERPRETER_TIMING_POLICIES", "Effort", "EFFORT", "EFFORTS", "effort",
           "KERNEL_GATE_BUDGET", "SESSION_GATE_BUDGET"]

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
KERNEL_GATE_BUDGET = "30s"
"""The wall time one kernel's gate may take (first measurement, fresh rounds, probes, pauses, A/B) before what is
still undecided is "not comparable": a CI job's minutes, not a busy neighbour's whim. ``none`` = no limit.
30 s, not 10: the persistence rule needs six fresh rounds beside the probes (2.1 s of pauses alone), which took
14-19 s (median) on the shared 2-core host at load 3-9, so 10 s left almost every slowdown undecided (x3 caught
0 of 6 against 5 of 6 unbudgeted); 30 s caught what the unbudgeted gate caught (benchmarks/results/
bench_gate_robust_budget.json)."""
SESSION_GATE_BUDGET = "none"
"""The wall time all gates of a session may take together, shared out fairly (``--autotune-gate-budget=5m``)."""

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


@dataclass(frozen=True)
class Effort:
    """How much a tuning spends, in one place: the search's share of the budget, and how much of what follows the
    search (finalists re-timed, their rounds, runners-up kept, the lock's rounds beside the probes) it keeps.

    ``full`` is the marker's budget and every default as it is. ``quick`` is for a developer who wants a good
    configuration in a minute: a small search that starts from other devices' winners and the scratch cache, half
    of everything after it, and no paused lock rounds; its entry says ``"effort": "quick"`` and a later full
    tuning replaces it. The engine (``tune()``), the lifecycle and the lock's rounds (:mod:`.gate.rounds` callers)
    all read their sizes from here."""

    name: str
    budget_share: float = 1.0  # of the marker's budget (evaluations or seconds)
    max_evaluations: int | None = None  # a cap on the search's evaluations
    least_evaluations: int = 1  # a floor under the share (a share of a small budget is no search)
    max_seconds: float | None = None  # a cap on a time budget
    after_search_share: float = 1.0  # finalists, their rounds, runners-up and the lock's rounds, scaled alike
    lock_pauses: bool = True  # the lock's further rounds after pauses (see gate.rounds.lock_pauses)
    warm_start_always: bool = False  # other devices' winners as seeds even where this device has an entry

    def evaluations(self, n: int | None) -> int | None:
        """The search's evaluations out of a budget of ``n`` (None: no limit by count)."""
        if n is None:
            return self.max_evaluations
        scaled = max(min(n, self.least_evaluations), math.ceil(n * self.budget_share))
        return min(scaled, self.max_evaluations) if self.max_evaluations is not None else scaled

    def seconds(self, s: float | None) -> float | None:
        """The search's seconds out of a time budget of ``s`` (None: no limit by time)."""
        if s is None:
            return None
        scaled = s * self.budget_share
        return min(scaled, self.max_seconds) if self.max_seconds is not None else scaled

    def scaled(self, n: int, least: int = 1) -> int:
        """``n`` finalists, rounds or runners-up at this effort (never under ``least``, never over ``n``)."""
        return n if self.after_search_share >= 1.0 else min(n, max(least, math.ceil(n * self.after_search_share)))

    @property
    def recorded(self) -> bool:
        """Whether the lock entry names this effort (a full tuning's entry stays as it always was)."""
        return self.name != EFFORT


EFFORT = "full"
"""The effort of a run without ``--autotune-effort``."""
EFFORTS = {
    "full": Effort("full"),
    # a quarter of the budget (at least 8 evaluations, at most 20, or 30 s); half of the finalists, rounds and
    # runners-up
    "quick": Effort("quick", budget_share=0.25, max_evaluations=20, least_evaluations=8, max_seconds=30.0,
                    after_search_share=0.5,
                    lock_pauses=False, warm_start_always=True),
}


def effort(name: "str | Effort") -> Effort:
    """The :class:`Effort` named ``name`` (ValueError naming the choices for another)."""
    if isinstance(name, Effort):
        return name
    try:
        return EFFORTS[name]
    except (KeyError, TypeError):
        raise ValueError(f"effort {name!r}: choose from {', '.join(EFFORTS)}") from None
