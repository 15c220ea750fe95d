"""What the gate says: its failure messages and notes, worded from what it decided.

Apart from the decision (:mod:`.verdict`, :mod:`.evidence`) so that the rules read without the wording and
the wording without the rules. The text is what users grep CI logs for: change it knowingly.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..measure.timing import Comparison
from ..results import Measurement
from .budget import GateBudget, format_seconds
from .evidence import (Faded, GateCase, MachineExplains, NeighbourShared, NotSignificant, SlowerBeyondMachine,
                       SlowerLikeForLike)
from .probes import MachineComparison


def retune_command(nodeid: str) -> str:
    return f"pytest --autotune {nodeid}"


def regression(case: GateCase, cmp: Comparison, machine: MachineComparison | None = None,
               corrected: Comparison | None = None, *, like_for_like: str = "", exponent: float = 1.0) -> str:
    """Reads like pytest-benchmark's comparison failure: what, how much, how sure, what to do. ``cmp`` is the
    first measurement against the lock; ``corrected`` the comparison that decided: in ``like_for_like``
    rounds (the machine as the lock's, within the tolerance), or beyond the most the machine explains."""
    lines = [
        f"autotune regression: kernel {case.kernel!r} in {case.nodeid} got slower than its lock allows",
        f"  locked median {cmp.locked_median:.6g} ms (n={cmp.n_locked})  ->  now {cmp.new_median:.6g} ms "
        f"(n={cmp.n_new}): {cmp.change_pct:+.1f}%" + (" (first measurement, all samples)" if corrected else ""),
    ]
    if machine is not None and corrected is not None:
        lines.append(f"  {cmp.change_pct:+.0f}% against the lock; {machine.explains(exponent=exponent)}")
    if corrected is not None and (machine is not None or like_for_like):
        lines.append(f"  {corrected.change_pct:+.1f}% {'beyond it' if machine is not None else 'against the lock'}"
                     + (f" in {like_for_like} (faster halves {corrected.locked_median:.6g} ms -> "
                        f"{corrected.new_median:.6g} ms)" if like_for_like else ""))
    shown = corrected if corrected is not None else cmp
    lines += [
        f"  tolerance {shown.tolerance_pct:.3g}%, Mann-Whitney U one-sided p = {shown.p_value:.3g} "
        f"(alpha {shown.alpha:g})",
        f"  locked params: {case.entry.params}",
        f"  if the slowdown is expected, re-tune with: {retune_command(case.nodeid)}",
    ]
    return "\n".join(lines)


def like_for_like_rounds(decided: SlowerLikeForLike) -> str:
    """Which rounds showed the slowdown: ``3 like-for-like rounds``, ``6 fresh rounds`` (no probes), or
    those of one CPU with why no other decided."""
    if decided.one_cpu:
        return (f"{decided.like_rounds} like-for-like rounds, all on CPU {decided.cpu}: no other CPU read like "
                f"the lock's in {decided.rounds} rounds")
    return f"{decided.like_rounds} {'like-for-like' if decided.probed else 'fresh'} rounds"


def slower_like_for_like(case: GateCase, first: Comparison, decided: SlowerLikeForLike) -> str:
    return regression(case, first, decided.machine, decided.comparison, like_for_like=like_for_like_rounds(decided))


def slower_beyond_machine(case: GateCase, first: Comparison, decided: SlowerBeyondMachine) -> str:
    text = regression(case, first, decided.machine, decided.comparison, exponent=decided.exponent)
    if decided.state is None:
        return text
    lines = text.split("\n")
    said = [f"  {state_explains(decided.state, decided.exponent)}"]
    if decided.machine is None:  # the probes said nothing: the change beyond the state is said here
        said.append(f"  {decided.comparison.change_pct:+.1f}% beyond it")
    return "\n".join(lines[:2] + said + lines[2:])


def state_explains(state: float, exponent: float) -> str:
    """``the reference runs beside the kernel's read the machine 1.92x slower than the lock's ...``: a round out
    of the lock's state, and the most that state explains (measure/reference.py)."""
    return (f"the reference run before each of the kernel's runs read this CPU {state:.2f}x slower than in the "
            f"lock's rounds (a neighbour shared this CPU, or the host ran slower): that explains at most "
            f"{(state ** exponent - 1) * 100:+.0f}%")


def incomparable(case: GateCase, cmp: Comparison, machine: MachineComparison, exponent: float = 1.0) -> str:
    return (f"autotune: kernel {case.kernel!r} in {case.nodeid} not comparable with its lock: {cmp.change_pct:+.1f}% "
            f"against the locked samples, and {machine.explains(exponent=exponent)}; {machine.describe()} "
            f"(probes {_fmt_changes(machine)}). "
            "Beyond the machine the kernel is within its tolerance. Gate on a machine like the "
            "lock's, or add a lockfile for this one (the pytest_autotune_lockfile_name hook)")


def machine_explains(case: GateCase, first: Comparison, decided: MachineExplains) -> str:
    if decided.machine is not None and (decided.state is None or not decided.machine.like_the_locks):
        return incomparable(case, first, decided.machine, decided.exponent)  # the probes see another machine
    assert decided.state is not None
    return (f"autotune: kernel {case.kernel!r} in {case.nodeid} not comparable (a neighbour shared this CPU, or "
            f"the host ran slower): {first.change_pct:+.1f}% against the locked samples, and "
            f"{state_explains(decided.state, decided.exponent)}. Beyond it the kernel is within its tolerance. "
            "Gate on a quieter machine, or give the gate more time to meet the lock's state (the tune marker's "
            "gate_budget=, --autotune-kernel-gate-budget)")


def neighbour_shared(case: GateCase, first: Comparison, decided: NeighbourShared) -> str:
    return (f"autotune: kernel {case.kernel!r} in {case.nodeid} not comparable (a neighbour shared this CPU): "
            f"{first.change_pct:+.1f}% against the locked samples, but in each of {decided.rounds} fresh round"
            f"{'s' if decided.rounds != 1 else ''} another task interrupted nearly every run ({decided.preempted} "
            "runs in all), so the rounds timed its time slices with the kernel's. Gate where the kernel's CPU is "
            "not shared (fewer parallel jobs than CPUs, e.g. pytest -n), or give the gate more time "
            "(gate_budget=)")


def undecided(case: GateCase, first: Comparison, evidence: str, budget: GateBudget,
              first_what: str = "the first measurement") -> str:
    """The budget was spent with the verdict undecided: what the rounds had shown, and what to do."""
    return (f"autotune: kernel {case.kernel!r} in {case.nodeid} not comparable (undecided within the budget: "
            f"{evidence}): {budget.describe()} was spent after {format_seconds(budget.elapsed)}, before the "
            f"rounds could tell a regression from a busy machine ({first.change_pct:+.1f}% in {first_what}). "
            "Neither a pass nor a fail: give the gate more time (the tune marker's gate_budget=, "
            "--autotune-kernel-gate-budget, --autotune-gate-budget) or gate on a quieter machine")


def _fmt_changes(machine: MachineComparison) -> str:
    return ", ".join(f"{name} {change:+.0f}%" for name, change in sorted(machine.changes.items()))


def faded(first: Comparison, decided: Faded) -> str:
    return (f"a suspected regression ({first.change_pct:+.1f}%) did not persist: "
            f"{100 * decided.change:+.1f}% in fresh round {decided.round_number}")


def not_significant(decided: NotSignificant) -> str:
    return (f"slower in {decided.like_rounds} like-for-like rounds, but not significantly "
            f"({decided.comparison.change_pct:+.1f}%, p = {decided.comparison.p_value:.3g})")


def broken(case: GateCase, measurement: Measurement, what: str = "") -> str:
    return (f"autotune: the locked configuration of kernel {case.kernel!r} in {case.nodeid} no longer works{what} "
            f"({measurement.failure}): {measurement.detail.strip()[:2000]}\n"
            f"  locked params: {case.entry.params}\n  re-tune with: {retune_command(case.nodeid)}")


def faster(case: GateCase, cmp: Comparison, against: str = "locked", extra: str = "") -> str:
    return (f"kernel {case.kernel!r} is {-cmp.change_pct:.1f}% faster than {against} (p = {cmp.p_value:.3g}){extra}; "
            f"consider updating the lock: {retune_command(case.nodeid)}")


def faster_explained(cmp: Comparison, machine: MachineComparison) -> str:
    return (f"{-cmp.change_pct:.1f}% faster than locked, which the machine could explain "
            f"({machine.explains(slower=False)})")


def lost_rank(stale_ranking: Sequence[Mapping[str, Any]], nodeid: str) -> str:
    return (f"the winner lost its rank: runner-up {stale_ranking[0]['params']} now "
            f"beats it ({stale_ranking[0]['change_pct']:+.0f}%); re-tune: {retune_command(nodeid)}")


def ab_regression(case: GateCase, cmp: Comparison, rounds: int, absolute: Comparison | None, blocks: int = 1) -> str:
    where = f"{rounds} interleaved rounds" + (f", slower in each of {blocks} blocks (the weakest shown)"
                                               if blocks > 1 else "")
    lines = [
        f"autotune regression: kernel {case.kernel!r} in {case.nodeid} got slower with the source edit",
        f"  A/B on this machine at the locked params, {where}: locked source "
        f"{cmp.locked_median:.6g} ms (n={cmp.n_locked})  ->  current source {cmp.new_median:.6g} ms "
        f"(n={cmp.n_new}): {cmp.change_pct:+.1f}%",
        f"  tolerance {cmp.tolerance_pct:.3g}%, Mann-Whitney U one-sided p = {cmp.p_value:.3g} (alpha {cmp.alpha:g})",
    ]
    if absolute is not None:
        lines.append(f"  against the lock's samples: {absolute.change_pct:+.1f}% (includes any machine difference)")
    lines += [f"  locked params: {case.entry.params}",
              f"  if the slowdown is expected, re-tune with: {retune_command(case.nodeid)}"]
    return "\n".join(lines)


def ab_faded(first_block: Comparison, cmp: Comparison) -> str:
    return (f"a suspected slowdown ({first_block.change_pct:+.1f}%) did not persist in a later "
            f"A/B block ({cmp.change_pct:+.1f}%)")
