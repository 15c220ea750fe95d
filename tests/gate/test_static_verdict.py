"""The static verdict: which differences between the lock's binary profile and today's are worse, which only
different, and what each policy of ``--autotune-static`` fails."""
from __future__ import annotations

import dataclasses

import pytest

from pytest_autotune.gate.static import StaticVerdict, compare_profiles, evidence_note, static_decision
from pytest_autotune.static.profile import INSTRUCTION_CLASSES, StaticProfile

FP = "sha256:" + "a" * 64


def profile(**overrides: object) -> StaticProfile:
    counts = {c: 0 for c in INSTRUCTION_CLASSES}
    counts.update({"global_load": 8, "global_store": 2, "fp32": 40, "control": 6, "integer": 20, "total": 80})
    counts.update(overrides.pop("counts", {}))  # type: ignore[arg-type]
    base = dict(arch=90, fingerprint=FP, registers=64, spill_stores=0, spill_loads=0, stack_frame=0,
                static_shared=4096, dynamic_shared=0, threads=256, blocks_per_sm=4, occupancy=0.5,
                occupancy_limiter="registers", instructions=counts,
                toolchain={"compiler": "nvrtc 13.5", "nvdisasm": "13.5.37"})
    base.update(overrides)
    return StaticProfile(**base)  # type: ignore[arg-type]


def test_the_same_machine_code_is_identical_whatever_else_was_recorded() -> None:
    c = compare_profiles(profile(), profile())
    assert c.verdict is StaticVerdict.IDENTICAL and c.line() == "binary identical to the lock's"
    assert not static_decision(c, "fail-on-change")


def test_a_new_toolchain_is_named_even_when_the_code_is_the_same() -> None:
    c = compare_profiles(profile(), profile(toolchain={"compiler": "nvrtc 13.6", "nvdisasm": "13.5.37"}))
    assert c.identical and c.toolchain == ("compiler nvrtc 13.5 -> nvrtc 13.6",)
    assert "nvrtc 13.6" in evidence_note(c)


@pytest.mark.parametrize("change, phrase", [
    ({"spill_stores": 128, "spill_loads": 128}, "spills 0 -> 256 B"),
    ({"stack_frame": 256}, "local memory 0 -> 256 B"),
    ({"occupancy": 0.25, "blocks_per_sm": 2, "registers": 128}, "occupancy 50% -> 25%"),
    ({"counts": {"global_load": 10, "total": 82}}, "memory instructions +20%"),
    ({"counts": {"fp32": 60, "total": 100}}, "math instructions +50%"),
])
def test_what_makes_a_binary_worse(change: dict, phrase: str) -> None:
    c = compare_profiles(profile(), profile(fingerprint="sha256:" + "b" * 64, **change))
    assert c.verdict is StaticVerdict.WORSE, c
    assert any(phrase in w for w in c.worse), c.worse
    assert c.line().startswith(c.worse[0])  # the worse deltas first
    assert static_decision(c, "fail-on-worse") and static_decision(c, "fail-on-change")
    assert not static_decision(c, "warn")


@pytest.mark.parametrize("change", [
    {"registers": 72},  # more registers, same occupancy
    {"counts": {"global_load": 8, "integer": 30, "total": 90}},  # more address arithmetic: neither memory nor math
    {"counts": {"fp32": 43, "total": 83}},  # math within the 10 % tolerance
    {"occupancy": 0.75, "registers": 40},  # better
    {"spill_stores": 0},  # only the code moved
])
def test_a_different_binary_that_is_not_worse_is_changed(change: dict) -> None:
    c = compare_profiles(profile(), profile(fingerprint="sha256:" + "c" * 64, **change))
    assert c.verdict is StaticVerdict.CHANGED, c
    assert not c.worse and not static_decision(c, "fail-on-worse") and static_decision(c, "fail-on-change")


def test_the_tolerance_decides_instruction_growth() -> None:
    now = profile(fingerprint="sha256:" + "d" * 64, counts={"fp32": 43, "total": 83})
    assert compare_profiles(profile(), now, tolerance=0.10).verdict is StaticVerdict.CHANGED
    assert compare_profiles(profile(), now, tolerance=0.05).verdict is StaticVerdict.WORSE


def test_the_deltas_line_reads_like_the_issue_asks() -> None:
    now = profile(fingerprint="sha256:" + "e" * 64, registers=96, occupancy=0.3333, spill_stores=128,
                  counts={"global_load": 9, "total": 81})
    line = compare_profiles(profile(), now).line()
    assert "registers 64 -> 96" in line and "occupancy 50% -> 33%" in line and "spills 0 -> 128 B" in line
    assert "global loads +12%" in line


def test_profiles_of_two_architectures_are_not_compared() -> None:
    with pytest.raises(ValueError, match="different architectures"):
        compare_profiles(profile(), dataclasses.replace(profile(), arch=80))


def test_an_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="fail-on-worse"):
        static_decision(compare_profiles(profile(), profile(fingerprint="sha256:" + "f" * 64)), "strict")
