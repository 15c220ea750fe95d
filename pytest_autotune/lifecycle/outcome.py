"""What one kernel call came to: a status, a summary row, the result the caller gets back, and what to do.

The lifecycle returns an :class:`Outcome`; the pytest glue turns it into
``pytest.fail``/``pytest.skip`` and a summary row, a script reads it as it
is. The row is the one record the terminal table, the JSON report, the job
summary and the compile check share (:class:`SummaryRow`).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields
from typing import Any

from ..engine.evaluator import SearchHistory
from ..gate.verdict import GateOutcome
from ..measure.timing import TimingStats

__all__ = ["Mode", "Status", "Action", "SummaryRow", "KernelResult", "Outcome", "TUNE_STATUS"]


class Mode(str, enum.Enum):
    """What was done with a kernel: tuned, gated, left alone (``--autotune-only=missing``) or compiled."""

    TUNE = "tune"
    GATE = "gate"
    LOCKED = "locked"
    COMPILE = "compile"
    STATIC = "static"  # the static gate: today's binary against the lock's profile, without the GPU


class Status(str, enum.Enum):
    """A kernel's status, as the summary table and the JSON report spell it."""

    PASS = "pass"
    FASTER = "faster"
    REGRESSION = "REGRESSION"
    BROKEN = "BROKEN"
    INCOMPARABLE = "incomparable"
    STALE_RANKING = "stale-ranking"
    REFUSED = "refused"  # a lock entry whose contents may not reach a build
    MISSING = "missing"
    STALE = "stale"
    NO_DEVICE = "no device"
    LEFT_ALONE = "left alone"
    FIRST_LOCK = "first lock"
    NEW_WINNER = "new winner"
    KEPT_LOCK = "kept lock"
    FAILED = "failed"  # a tuning that found nothing
    COMPILED = "compiled"  # --autotune-compile
    COMPILE_FAILED = "FAILED"
    CHANGED = "changed"  # static: a different binary, not worse; a GPU run must time it
    WORSE = "WORSE"  # static: a binary worse than the lock's (spills, occupancy, instructions)
    ACCEPTED = "accepted"  # static: a changed binary's profile recorded (--autotune-accept-static)
    RECORDED = "recorded"  # static: a baseline recorded (--autotune-record-static)
    INFO = "info"  # a timing reported, never a verdict (Triton's interpreter)
    SESSION_BUDGET = "session budget"  # not gated: the session's gate budget (--autotune-gate-budget) was spent


# The summary's status of a tuned kernel, by what happened to its lock entry (see gate.retune.decide).
TUNE_STATUS = {"first": Status.FIRST_LOCK, "new": Status.NEW_WINNER, "kept": Status.KEPT_LOCK,
               "refreshed": Status.KEPT_LOCK, "updated": Status.KEPT_LOCK}


class Action(enum.Enum):
    """What the caller does with the outcome: nothing, fail the test, or skip it."""

    PASS = "pass"
    FAIL = "fail"
    SKIP = "skip"


@dataclass
class SummaryRow:
    """One kernel's line in the summary, the JSON report and the job summary.

    Only the fields a row was made with appear in :meth:`as_dict` (a tuned kernel has no p-value, a gate has
    no evaluation count), so the report reads as before; every field has a name and a type here.
    """

    test: str
    kernel: str
    mode: Mode
    status: Status
    params: dict[str, Any] | None = None
    time_ms: float | None = None  # a median: for a tuning, the one its lock entry holds (stats.median)
    measured_ms: float | None = None  # a tuning: the median of this run's samples of the winner
    locked_ms: float | None = None
    change_pct: float | None = None
    # "a/b" (side by side), "lock" (a gate: against the locked samples) or "now" (a tuning: this run's
    # timing of the winner against the previous entry's median)
    change_kind: str | None = None
    p_value: float | None = None
    absolute_change_pct: float | None = None
    method: str | None = None
    machine: dict[str, float] | None = None
    evaluations: int | None = None
    budget: Any = None
    strategy: str | None = None
    failures: dict[str, int] | None = None
    failure_examples: dict[str, Any] | None = None
    spills: Any = None
    compile_ahead: dict[str, Any] | None = None
    compile: dict[str, Any] | None = None
    best_so_far: list[float | None] | None = None
    resumed: int | None = None
    stop_reason: str | None = None
    message: str | None = None
    note: str | None = None
    stale_ranking: list[dict[str, Any]] | None = None
    lockfile: str | None = None
    lock_written: bool | None = None
    device: str | None = None
    new_lockfile_beside: list[str] | None = None
    incomparable_policy: str | None = None
    required: bool | None = None
    arch: str | None = None  # static rows: the architecture compared ("sm_90")
    static: dict[str, Any] | None = None  # static rows: the comparison, with both profiles
    seconds: float | None = None  # static and compile rows: the time the check took
    configurations: list[dict[str, Any]] | None = None  # compile rows: each that passed, its compile time, resources
    gate_seconds: float | None = None  # the wall time the gate took (first measurement to verdict)
    gate_budget_s: float | None = None  # the budget it had (its own, or its share of the session's)
    # a tuning on Ray (--autotune-ray): the devices searching at the end, their nodes, the devices lost (each with
    # its error), those of another model refused, those that joined mid-run, evaluations retried elsewhere
    ray_devices: int | None = None
    ray_nodes: list[str] | None = None
    ray_lost: list[str] | None = None
    ray_refused: list[str] | None = None
    ray_joined: int | None = None
    ray_retried: int | None = None
    samples: list[float] | None = None  # a gate's fresh samples
    locked_samples: list[float] | None = None  # the lock entry's, beside them
    given: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    @classmethod
    def make(cls, test: str, kernel: str, mode: Mode, status: Status, **values: Any) -> "SummaryRow":
        """A row with exactly these fields set (an unknown field name is a TypeError, as a typo should be)."""
        return cls(test, kernel, Mode(mode), Status(status), **values, given=frozenset(values))

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"test": self.test, "kernel": self.kernel, "mode": self.mode.value,
                               "status": self.status.value}
        for f in fields(self):
            if f.name in self.given:
                out[f.name] = getattr(self, f.name)
        return out


@dataclass
class KernelResult:
    """What a test gets back: the winner (tuned or locked), its timing and outputs."""

    kernel: str
    mode: str  # "tune" | "gate" | "locked" (left alone by --autotune-only=missing) | "compile" (--autotune-compile)
    params: dict[str, Any]
    stats: TimingStats
    outputs: list[Any] | None = None
    history: SearchHistory | None = None  # tune mode only
    gate: GateOutcome | None = None  # gate mode only
    entry: dict[str, Any] = field(default_factory=dict)  # the lock entry written or read


@dataclass
class Outcome:
    """One kernel call, decided: what to do (``action``, with ``message``), the row, and the result."""

    action: Action
    message: str = ""
    row: SummaryRow | None = None
    result: KernelResult | None = None
    traceback: bool = False  # a failure of the test's own call: show the test's line (pytest's pytrace)
    more_rows: list[SummaryRow] = field(default_factory=list)  # one call, several verdicts (static, per arch)

    @property
    def rows(self) -> list[SummaryRow]:
        """Every row of the call: its own, then the static gate's (one per architecture)."""
        return ([self.row] if self.row is not None else []) + list(self.more_rows)

    @property
    def status(self) -> Status | None:
        return self.row.status if self.row is not None else None

    @classmethod
    def passed(cls, result: KernelResult, row: SummaryRow | None = None, message: str = "") -> "Outcome":
        return cls(Action.PASS, message, row, result)

    @classmethod
    def failed(cls, message: str, row: SummaryRow | None = None, *, traceback: bool = False) -> "Outcome":
        return cls(Action.FAIL, message, row, None, traceback)

    @classmethod
    def skipped(cls, message: str, row: SummaryRow | None = None) -> "Outcome":
        return cls(Action.SKIP, message, row)
