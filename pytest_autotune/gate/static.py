"""The static verdict: today's binary of a locked configuration against the profile the lock recorded.

A lock entry's timing describes one binary on one GPU. Rebuilt today for that
GPU's architecture, the binary is either the same machine code (the timing
still describes it), or different: then what changed says whether it can be
worse before any GPU times it (more spills, more local memory, lower
occupancy, more memory or math instructions beyond a tolerance) or only
different (registers, instruction order). :func:`compare_profiles` says which,
in one line of deltas; :func:`static_decision` turns that into pass or fail by
the run's policy (``--autotune-static``). Nothing here compiles or runs.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Mapping

from .. import defaults as DEFAULTS
from ..static.profile import MATH_CLASSES, MEMORY_CLASSES, StaticProfile

__all__ = ["StaticVerdict", "StaticComparison", "compare_profiles", "static_decision", "toolchain_deltas",
           "evidence_note"]

# Instruction classes named in the deltas line, in this order, by their readable names.
_CLASS_NAMES = {"global_load": "global loads", "global_store": "global stores", "global_atomic": "global atomics",
                "shared_load": "shared loads", "shared_store": "shared stores", "local_load": "local loads",
                "local_store": "local stores", "fp32": "FP32 math", "fp16": "FP16 math", "fp64": "FP64 math",
                "tensor": "tensor-core math", "control": "control flow", "barrier": "barriers"}


class StaticVerdict(str, enum.Enum):
    IDENTICAL = "identical"  # the same machine code: the lock's timing still describes it
    CHANGED = "changed"  # different code, nothing in it worse: a GPU run must time it
    WORSE = "worse"  # different code, worse in the static sense


@dataclass(frozen=True)
class StaticComparison:
    """The lock's profile against today's, for one architecture."""

    verdict: StaticVerdict
    deltas: tuple[str, ...] = ()  # every difference, one phrase each ("registers 64 -> 96")
    worse: tuple[str, ...] = ()  # the deltas that make it worse
    toolchain: tuple[str, ...] = ()  # "nvrtc 13.0 -> 13.5"
    locked: StaticProfile | None = field(default=None, repr=False)
    now: StaticProfile | None = field(default=None, repr=False)

    @property
    def identical(self) -> bool:
        return self.verdict is StaticVerdict.IDENTICAL

    def line(self, what: str = "lock") -> str:
        """The deltas, worse ones first, in one line (what the summary's note and the failure show); ``what`` the
        profile was recorded by ("lock", "static baseline")."""
        if self.identical:
            return f"binary identical to the {what}'s"
        rest = [d for d in self.deltas if d not in self.worse]
        text = ", ".join([*self.worse, *rest]) or "machine code differs (same resources and instruction mix)"
        return text + (f" (toolchain: {', '.join(self.toolchain)})" if self.toolchain else "")

    def as_dict(self) -> dict[str, object]:
        return {"verdict": self.verdict.value, "deltas": list(self.deltas), "worse": list(self.worse),
                "toolchain": list(self.toolchain),
                "locked": self.locked.to_dict() if self.locked else None,
                "now": self.now.to_dict() if self.now else None}


def _pct(old: int, new: int) -> str:
    return f"{(new - old) / old * 100:+.0f}%" if old else f"0 -> {new}"


def toolchain_deltas(locked: Mapping[str, str], now: Mapping[str, str]) -> tuple[str, ...]:
    """Each tool whose version differs, ``name old -> new`` (a tool missing on one side is named as such)."""
    out = []
    for name in sorted(set(locked) | set(now)):
        old, new = locked.get(name), now.get(name)
        if old != new:
            out.append(f"{name} {old or 'none'} -> {new or 'none'}")
    return tuple(out)


def compare_profiles(locked: StaticProfile, now: StaticProfile,
                     tolerance: float = DEFAULTS.STATIC_TOLERANCE) -> StaticComparison:
    """Say whether ``now`` is the lock's binary, a different one, or a worse one.

    Worse: spills stores or loads grew, the stack frame (local memory) grew, the theoretical occupancy fell, or
    the memory or math instructions grew by more than ``tolerance`` of the lock's count. Registers, shared
    memory and other classes are shown but decide nothing by themselves (their cost is the occupancy's).
    """
    tools = toolchain_deltas(locked.toolchain, now.toolchain)
    if locked.arch != now.arch:
        raise ValueError(f"profiles of different architectures: sm_{locked.arch} and sm_{now.arch}")
    if locked.fingerprint == now.fingerprint and locked.threads == now.threads \
            and locked.dynamic_shared == now.dynamic_shared:
        return StaticComparison(StaticVerdict.IDENTICAL, toolchain=tools, locked=locked, now=now)
    deltas: list[str] = []
    worse: list[str] = []

    def note(text: str, bad: bool) -> None:
        deltas.append(text)
        if bad:
            worse.append(text)

    if now.registers != locked.registers:
        note(f"registers {locked.registers} -> {now.registers}", False)
    if now.occupancy != locked.occupancy:
        note(f"occupancy {locked.occupancy:.0%} -> {now.occupancy:.0%}"
             + (f" ({now.occupancy_limiter})" if now.occupancy < locked.occupancy else ""),
             now.occupancy < locked.occupancy)
    old_spills, new_spills = locked.spill_stores + locked.spill_loads, now.spill_stores + now.spill_loads
    if (now.spill_stores, now.spill_loads) != (locked.spill_stores, locked.spill_loads):
        note(f"spills {old_spills} -> {new_spills} B",
             now.spill_stores > locked.spill_stores or now.spill_loads > locked.spill_loads)
    if now.stack_frame != locked.stack_frame:
        note(f"local memory {locked.stack_frame} -> {now.stack_frame} B", now.stack_frame > locked.stack_frame)
    for name, old, new in (("static shared memory", locked.static_shared, now.static_shared),
                           ("dynamic shared memory", locked.dynamic_shared, now.dynamic_shared),
                           ("threads per block", locked.threads, now.threads)):
        if old != new:
            note(f"{name} {old} -> {new}" + (" B" if "memory" in name else ""), False)
    for kind, classes, old, new in (("memory", MEMORY_CLASSES, locked.memory_instructions(),
                                     now.memory_instructions()),
                                    ("math", MATH_CLASSES, locked.math_instructions(), now.math_instructions())):
        grew = new > old * (1 + tolerance) if old else new > 0
        for cls in classes:
            a, b = locked.instructions.get(cls, 0), now.instructions.get(cls, 0)
            if a != b:
                note(f"{_CLASS_NAMES.get(cls, cls)} {_pct(a, b)}", grew and b > a)
        if grew:  # the class deltas above say which; the sum is what the tolerance is about
            note(f"{kind} instructions {_pct(old, new)}", True)
    for cls in ("control", "barrier"):
        a, b = locked.instructions.get(cls, 0), now.instructions.get(cls, 0)
        if a != b:
            note(f"{_CLASS_NAMES[cls]} {_pct(a, b)}", False)
    total_old, total_new = locked.instructions.get("total", 0), now.instructions.get("total", 0)
    if total_old != total_new:
        note(f"instructions {total_old} -> {total_new}", False)
    return StaticComparison(StaticVerdict.WORSE if worse else StaticVerdict.CHANGED, tuple(deltas), tuple(worse),
                            tools, locked, now)


def static_decision(comparison: StaticComparison, policy: str) -> bool:
    """Whether the comparison fails the test under ``policy`` (``--autotune-static``)."""
    if policy not in DEFAULTS.STATIC_POLICIES:
        raise ValueError(f"unknown static policy {policy!r}; choose from {', '.join(DEFAULTS.STATIC_POLICIES)}")
    if comparison.identical or policy in ("warn", "off"):
        return False
    if policy == "fail-on-change":
        return True
    return comparison.verdict is StaticVerdict.WORSE


def evidence_note(comparison: StaticComparison) -> str:
    """What the static comparison says about a timed gate's slowdown on the GPU (the gate's message)."""
    if comparison.identical and not comparison.toolchain:
        return ("static: binary and toolchain identical to the lock's: a slowdown is the machine, the data or "
                "the driver, not the code")
    if comparison.identical:
        return f"static: binary identical to the lock's ({', '.join(comparison.toolchain)})"
    return f"static: {comparison.verdict.value}: {comparison.line()}"
