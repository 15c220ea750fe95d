"""The CI regression gate: re-time the locked winner and decide pass, fail or "faster".

Two ways to decide, by what changed since the lock:

* **the kernel source was edited**: :func:`run_ab_gate` builds the locked
  source and the current one at the locked parameters and times them in
  interleaved rounds (ABAB...) on this machine. "The edit made it slower" is
  decided from those samples alone, whatever this machine's speed relative
  to the lock's; the comparison with the locked samples is reported beside it.
* **the source is unchanged**: :func:`run_gate` compares fresh samples with
  the locked ones. A suspected regression must persist in fresh rounds
  before it fails (a preemption burst does not). This machine's probes
  (:mod:`.probes`), measured round by round beside those rounds, bound how
  much of the change the machine explains; the verdict is judged beyond
  that bound. A machine difference corrects the verdict, it never vetoes it:
  "not comparable" is left only for a change the machine could explain.

Kept free of pytest so the decision can be tested (and reused) on its own:
the plugin turns a :class:`GateOutcome` into ``pytest.fail`` or a summary row.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..lock.problem import problem_change
from ..measure.timing import Comparison, compare_samples
from .probes import MachineComparison, compare_machines, pool_probes
from ..results import Measurement

AB_ROUNDS = 3  # interleaved rounds of locked and current source
CONFIRM_ROUNDS = 2  # fresh measurements a suspected regression must survive
AB_CONFIRM_BLOCKS = 2  # further A/B blocks a suspected regression of an edit must survive
CONFIRM_PAUSE_S = 0.1
"""Pause before each confirmation. Measurements taken back to back share one scheduling window: on a
shared 2-core host, two worker processes stayed on unequal CPUs for a whole A/B block and read 1.5x
apart with identical sources (about one block in ten, at load 5); 0.1-0.2 s later the same pair read
1.0x. Samples within a window are not independent; pausing lets the next window be a new draw."""

PERSIST_PAUSES_S = (0.5, 1.0, 2.0)
"""Before a slowdown the machine does not explain becomes a regression, it must persist in one more round
after each of these pauses (with the probes beside it). Load only ever adds time: a real regression of the
kernel stays slower in every round, while a neighbour that competed for caches or cores for a few seconds
(what the probes, sized to the kernel, can miss) is gone in one of them. Costs seconds only on a suspected
regression."""

Measure = Callable[[], Measurement]


@dataclass
class GateOutcome:
    """What the gate found for one kernel.

    ``method`` is ``absolute`` (fresh samples against the locked ones) or
    ``a/b`` (locked against current source, side by side on this machine);
    ``absolute`` keeps the comparison with the locked samples in both cases.
    """

    verdict: str  # "pass" | "slower" | "faster" | "broken" | "incomparable"
    comparison: Comparison | None
    measurement: Measurement
    message: str = ""
    stale_ranking: list[dict[str, Any]] = field(default_factory=list)  # runners-up that now beat the winner
    method: str = "absolute"
    absolute: Comparison | None = None
    machine: MachineComparison | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.verdict in ("slower", "broken")


@dataclass(frozen=True)
class EntryCheck:
    """Can a lock entry be gated, and what changed since it was written?

    ``stale`` (why the entry cannot be gated) is set only when the locked
    configuration cannot be run as it was measured: the problem changed, or
    the locked parameters are no longer in the search space. An edited
    kernel (source or compiler options) is gated: kernel edits are what the
    gate exists for. ``changed`` lists what differs from the lock all the same.
    """

    stale: str | None
    changed: tuple[str, ...] = ()

    @property
    def notes(self) -> str:
        return "; ".join(f"{name} changed since lock" for name in self.changed)


def check_entry(entry: Mapping[str, Any], hashes: Mapping[str, str], locked_in_space: Callable[[], bool],
                problem: Mapping[str, Any] | None = None) -> EntryCheck:
    """Classify ``entry`` against the current ``hashes``; ``locked_in_space()`` is asked only when needed.
    With the current readable ``problem``, a changed problem's reason says which part changed."""
    recorded = entry.get("hashes") or {}
    changed = tuple(sorted(name for name, value in hashes.items() if recorded.get(name) != value))
    if "problem" in changed:
        change = problem_change(entry.get("problem"), problem) if problem is not None else ""
        return EntryCheck(f"the problem changed: {change}" if change else
                          "the problem changed (problem size, argument shapes, dtypes or scalar values)", changed)
    if "space" in changed and not locked_in_space():
        return EntryCheck("the locked configuration is no longer in the search space", changed)
    return EntryCheck(None, changed)


def retune_command(nodeid: str) -> str:
    return f"pytest --autotune {nodeid}"


def regression_message(kernel: str, nodeid: str, entry: Mapping[str, Any], cmp: Comparison,
                       machine: "MachineComparison | None" = None, corrected: Comparison | None = None) -> str:
    """Reads like pytest-benchmark's comparison failure: what, how much, how sure, what to do. With the
    machine's share bounded by the probes, both numbers: the change and what the machine explains of it."""
    lines = [
        f"autotune regression: kernel {kernel!r} in {nodeid} got slower than its lock allows",
        f"  locked median {cmp.locked_median:.6g} ms (n={cmp.n_locked})  ->  now {cmp.new_median:.6g} ms "
        f"(n={cmp.n_new}): {cmp.change_pct:+.1f}%",
    ]
    if machine is not None and corrected is not None:
        lines.append(f"  {cmp.change_pct:+.0f}% against the lock; {machine.explains()}: "
                     f"{corrected.change_pct:+.0f}% beyond it")
    shown = corrected if corrected is not None else cmp
    lines += [
        f"  tolerance {shown.tolerance_pct:.3g}%, Mann-Whitney U one-sided p = {shown.p_value:.3g} "
        f"(alpha {shown.alpha:g})",
        f"  locked params: {dict(entry['params'])}",
        f"  if the slowdown is expected, re-tune with: {retune_command(nodeid)}",
    ]
    return "\n".join(lines)


def _samples(m: Measurement) -> list[float]:
    return list(m.samples) if m.samples else [float(m.value)]  # type: ignore[arg-type]


def _broken(kernel: str, nodeid: str, entry: Mapping[str, Any], measurement: Measurement, what: str = "") -> GateOutcome:
    return GateOutcome("broken", None, measurement,
                       f"autotune: the locked configuration of kernel {kernel!r} in {nodeid} no longer works{what} "
                       f"({measurement.failure}): {measurement.detail.strip()[:2000]}\n"
                       f"  locked params: {dict(entry['params'])}\n  re-tune with: {retune_command(nodeid)}")


def _faster_message(kernel: str, nodeid: str, cmp: Comparison, against: str = "locked", extra: str = "") -> str:
    return (f"kernel {kernel!r} is {-cmp.change_pct:.1f}% faster than {against} (p = {cmp.p_value:.3g}){extra}; "
            f"consider updating the lock: {retune_command(nodeid)}")


Probe = Callable[[], "Mapping[str, Any] | None"]


def run_gate(kernel: str, nodeid: str, entry: Mapping[str, Any], measurement: Measurement, tolerance: float,
             alpha: float, measure_runner_up: Callable[[Mapping[str, Any]], Measurement] | None = None, *,
             remeasure: Measure | None = None,
             machine: MachineComparison | Callable[[], MachineComparison | None] | None = None,
             probe: Probe | None = None,
             confirm_rounds: int = CONFIRM_ROUNDS, pause_s: float = CONFIRM_PAUSE_S) -> GateOutcome:
    """Compare a fresh measurement of the locked winner with the lock, corrected by the machine.

    ``tolerance`` is a fraction (0.10 = 10 %). With ``remeasure``, a
    suspected regression is measured again ``confirm_rounds`` times, each
    after a pause of ``pause_s``, and is judged on those fresh samples.
    ``probe`` measures this machine's probes once (same sizes as the
    entry's ``machine`` record); it runs round by round beside those
    confirmations, so the probes see the conditions the kernel saw. The
    probes bound how much slower (or faster) this machine is than the lock's
    (:class:`MachineComparison`), and the verdict is judged *beyond* that
    bound: a slowdown still beyond the tolerance, and significant, once the
    machine's most is taken off, is a regression naming both numbers; one the
    machine could explain is ``incomparable``. ``machine`` gives the
    comparison directly instead (a callable is asked only when needed). Without
    either, the comparison with the lock decides alone.

    With ``measure_runner_up`` the recorded runners-up are re-timed; one that
    now beats the winner significantly marks the ranking stale (a re-tune is
    due). It never excuses a slowdown: a slowdown the winner and its
    runner-up share is what a toolchain, header, flag or environment
    regression looks like, since it hits every configuration of the kernel.
    """
    if not measurement.ok:
        return _broken(kernel, nodeid, entry, measurement)
    new_samples: Sequence[float] = _samples(measurement)
    locked_used, new_used = list(entry["samples"]), list(new_samples)
    cmp = compare_samples(locked_used, new_used, tolerance * 100.0, alpha)
    outcome = GateOutcome("pass", cmp, measurement, absolute=cmp)
    probe_runs: list[Mapping[str, Any]] = []
    if cmp.slower and remeasure is not None and confirm_rounds > 0:
        fresh: list[float] = []
        for _ in range(confirm_rounds):
            time.sleep(pause_s)
            if probe is not None:
                probe_runs.append(probe() or {})
            again = remeasure()
            if not again.ok:
                return _broken(kernel, nodeid, entry, again)
            fresh.extend(_samples(again))
        # the faster half of each, as in the A/B: load only ever adds time, and the confirmation decides
        # (the verdict is judged on these; the message keeps the lock's median and the first measurement's)
        locked_used, new_used = faster_half(entry["samples"]), faster_half(fresh)
        confirmed = compare_samples(locked_used, new_used, tolerance * 100.0, alpha)
        if not confirmed.slower:
            outcome.notes.append(f"a suspected regression ({cmp.change_pct:+.1f}%) did not persist in "
                                 f"{confirm_rounds} fresh rounds ({confirmed.change_pct:+.1f}%)")
            cmp = outcome.comparison = outcome.absolute = confirmed
    if (cmp.slower or cmp.faster) and machine is None and probe is not None:
        if not probe_runs:
            probe_runs.append(probe() or {})
        machine = compare_machines(entry.get("machine"), pool_probes(probe_runs), tolerance)
    elif (cmp.slower or cmp.faster) and callable(machine):
        machine = machine()
    mc = machine if isinstance(machine, MachineComparison) else None
    outcome.machine = mc
    if cmp.slower:
        corrected = None
        if mc is not None:
            # the fresh samples with the machine's most taken off: what is left is the kernel's own
            corrected = compare_samples(locked_used, [x / mc.slowdown for x in new_used], tolerance * 100.0, alpha)
        if corrected is not None and not corrected.slower:
            outcome.verdict = "incomparable"
            outcome.message = _incomparable_message(kernel, nodeid, cmp, mc)  # type: ignore[arg-type]
        elif remeasure is not None and (faded := _fades(entry, remeasure, probe, tolerance, outcome, cmp)):
            outcome.verdict, later = faded
            if later is not None:  # what is left of the slowdown in that round, the machine explains
                outcome.machine = later
                outcome.message = _incomparable_message(kernel, nodeid, cmp, later)
        else:
            outcome.verdict = "slower"
            outcome.message = regression_message(kernel, nodeid, entry, cmp, mc, corrected)
    elif cmp.faster:
        if mc is not None and not compare_samples(locked_used, [x / mc.speedup for x in new_used],
                                                  tolerance * 100.0, alpha).faster:
            outcome.notes.append(f"{-cmp.change_pct:.1f}% faster than locked, which the machine could explain "
                                 f"({mc.explains(slower=False)})")
        else:
            outcome.verdict = "faster"
            outcome.message = _faster_message(
                kernel, nodeid, cmp, extra=f"; {mc.explains(slower=False)}" if mc is not None else "")
    if measure_runner_up is not None:
        for up in entry.get("runners_up", []) or []:
            m = measure_runner_up(up["params"])
            if not m.ok:
                continue
            # "faster" here means the runner-up beats the winner's fresh samples significantly.
            rival = compare_samples(new_samples, m.samples or [m.value], tolerance * 100.0, alpha)
            if rival.faster:
                outcome.stale_ranking.append({"params": dict(up["params"]), "median": rival.new_median,
                                              "change_pct": rival.change_pct, "p_value": rival.p_value})
        if outcome.stale_ranking:
            outcome.notes.append(f"the winner lost its rank: runner-up {outcome.stale_ranking[0]['params']} now "
                                 f"beats it ({outcome.stale_ranking[0]['change_pct']:+.0f}%); re-tune: "
                                 f"{retune_command(nodeid)}")
    return outcome


def _fades(entry: Mapping[str, Any], remeasure: Measure, probe: "Probe | None", tolerance: float,
           outcome: GateOutcome, cmp: Comparison) -> "tuple[str, MachineComparison | None] | None":
    """Whether a slowdown beyond the machine fades in a later round (:data:`PERSIST_PAUSES_S`): that round's
    faster half, corrected by the probes run beside it, is back within the tolerance of the lock's.

    Returns None when it persists in every round (a round that fails to measure settles nothing), else the
    verdict of the round where it faded: ``("pass", None)`` when the kernel itself is back within the
    tolerance, ``("incomparable", machine)`` when what is left of its slowdown that round's machine explains.
    """
    locked = float(np.median(faster_half(entry["samples"])))
    pauses = PERSIST_PAUSES_S  # read at call time: tests shorten it
    for i, pause in enumerate(pauses, 1):
        time.sleep(pause)
        runs = [probe() or {}] if probe is not None else []
        again = remeasure()
        if not again.ok:
            return None
        fresh = float(np.median(faster_half(_samples(again))))
        machine = compare_machines(entry.get("machine"), pool_probes(runs), tolerance) if runs else None
        slowdown = machine.slowdown if machine is not None else 1.0
        # one round is too few samples for a rank test; its faster half's median back within the tolerance
        # of the lock's is the evidence (load cannot make a slower kernel run at the lock's speed)
        raw, corrected = fresh / locked - 1.0, fresh / slowdown / locked - 1.0
        if corrected <= tolerance:
            outcome.notes.append(f"a slowdown beyond the machine ({cmp.change_pct:+.1f}%) faded in a later round "
                                 f"({i} of {len(pauses)}, {100 * corrected:+.1f}% corrected): a passing load")
            return ("pass", None) if raw <= tolerance or machine is None else ("incomparable", machine)
    return None


def _incomparable_message(kernel: str, nodeid: str, cmp: Comparison, machine: MachineComparison) -> str:
    return (f"autotune: kernel {kernel!r} in {nodeid} not comparable with its lock: {cmp.change_pct:+.1f}% against "
            f"the locked samples, and {machine.explains()}; {machine.describe()} (probes {_fmt_changes(machine)}). "
            "Beyond the machine the kernel is within its tolerance. Gate on a machine like the "
            "lock's, or add a lockfile for this one (the pytest_autotune_lockfile_name hook)")


def _fmt_changes(machine: MachineComparison) -> str:
    return ", ".join(f"{name} {change:+.0f}%" for name, change in sorted(machine.changes.items()))


def faster_half(samples: Sequence[float]) -> list[float]:
    """The faster half of the samples (at least 4): what is left after the time others took."""
    ordered = sorted(samples)
    return ordered[:max(4, (len(ordered) + 1) // 2)]


def interleaved(measure_a: Measure, measure_b: Measure, rounds: int, warmup_rounds: int = 1
                ) -> tuple[list[float], list[float], Measurement | None, Measurement | None]:
    """Rounds of A and B, alternating the order (AB, BA, AB, ...): pooled samples of each side and the
    first failed measurement of each (or None).

    Interleaving puts both sides under the same conditions (load, clocks, neighbours) within a few hundred
    milliseconds of each other, and alternating the order cancels a drift within a round. The first
    ``warmup_rounds`` are discarded: a freshly started worker's first measurement runs on cold pages and
    clocks (measured: 30 % slower than the next ones for a 0.1 ms kernel), enough to hide a real change."""
    a: list[float] = []
    b: list[float] = []
    for i in range(warmup_rounds + rounds):
        first, second = (measure_a, measure_b) if i % 2 == 0 else (measure_b, measure_a)
        m1, m2 = first(), second()
        ma, mb = (m1, m2) if i % 2 == 0 else (m2, m1)
        if not ma.ok or not mb.ok:
            return a, b, (ma if not ma.ok else None), (mb if not mb.ok else None)
        if i >= warmup_rounds:
            a.extend(_samples(ma))
            b.extend(_samples(mb))
    return a, b, None, None


def ab_message(kernel: str, nodeid: str, entry: Mapping[str, Any], cmp: Comparison, rounds: int,
               absolute: Comparison | None, blocks: int = 1) -> str:
    where = f"{rounds} interleaved rounds" + (f", slower in each of {blocks} blocks (the weakest shown)"
                                               if blocks > 1 else "")
    lines = [
        f"autotune regression: kernel {kernel!r} in {nodeid} got slower with the source edit",
        f"  A/B on this machine at the locked params, {where}: locked source "
        f"{cmp.locked_median:.6g} ms (n={cmp.n_locked})  ->  current source {cmp.new_median:.6g} ms "
        f"(n={cmp.n_new}): {cmp.change_pct:+.1f}%",
        f"  tolerance {cmp.tolerance_pct:.3g}%, Mann-Whitney U one-sided p = {cmp.p_value:.3g} (alpha {cmp.alpha:g})",
    ]
    if absolute is not None:
        lines.append(f"  against the lock's samples: {absolute.change_pct:+.1f}% (includes any machine difference)")
    lines += [f"  locked params: {dict(entry['params'])}",
              f"  if the slowdown is expected, re-tune with: {retune_command(nodeid)}"]
    return "\n".join(lines)


def run_ab_gate(kernel: str, nodeid: str, entry: Mapping[str, Any], measure_locked: Measure, measure_current: Measure,
                tolerance: float, alpha: float, rounds: int = AB_ROUNDS, *, confirm_blocks: int = AB_CONFIRM_BLOCKS,
                pause_s: float = CONFIRM_PAUSE_S) -> GateOutcome:
    """The edited kernel against its locked source, side by side at the locked parameters.

    Fails when the current source is slower than the locked one by more than
    ``tolerance`` and significantly so (the gate's statistics on the
    interleaved samples), in the first block of ``rounds`` and again in each
    of ``confirm_blocks`` further blocks, each after a pause of ``pause_s``:
    a block's samples share one scheduling window, so a block is one draw of
    the machine's conditions, however many samples it holds. If the locked
    source no longer builds or runs here, :class:`LockedSourceUnusable` is
    raised and the caller falls back to :func:`run_gate`.
    """
    blocks: list[Comparison] = []
    b: list[float] = []
    while True:
        if blocks:
            time.sleep(pause_s)
        a, b, failed_a, failed_b = interleaved(measure_locked, measure_current, rounds,
                                               warmup_rounds=0 if blocks else 1)
        if failed_b is not None:
            return _broken(kernel, nodeid, entry, failed_b, " with the edited source")
        if failed_a is not None:
            raise LockedSourceUnusable(f"{failed_a.failure}: {failed_a.detail.strip()[:300]}")
        # The faster half of each side: preemption and a busy neighbour only ever add time, and they add
        # it to both sides alike, which compresses the ratio of medians (a +30 % edit read +13..+26 % at
        # load 8); the lower quartile keeps the kernels' own cost.
        blocks.append(compare_samples(faster_half(a), faster_half(b), tolerance * 100.0, alpha))
        if not blocks[-1].slower or len(blocks) > confirm_blocks:
            break
    # a regression is reported at its weakest block; a pass by the block that cleared it
    cmp = blocks[-1] if not blocks[-1].slower else min(blocks, key=lambda c: c.change_pct)
    absolute = compare_samples(entry["samples"], b, tolerance * 100.0, alpha)
    current = Measurement(params=dict(entry["params"]), value=cmp.new_median, samples=b)
    outcome = GateOutcome("pass", cmp, current, method="a/b", absolute=absolute)
    if len(blocks) > 1 and not cmp.slower:
        outcome.notes.append(f"a suspected slowdown ({blocks[0].change_pct:+.1f}%) did not persist in a later "
                             f"A/B block ({cmp.change_pct:+.1f}%)")
    if cmp.slower:
        outcome.verdict = "slower"
        outcome.message = ab_message(kernel, nodeid, entry, cmp, rounds, absolute, len(blocks))
    elif cmp.faster:
        outcome.verdict = "faster"
        outcome.message = _faster_message(kernel, nodeid, cmp, "its locked source (A/B)")
    return outcome


class LockedSourceUnusable(Exception):
    """The locked source no longer builds or runs here (a header changed, say): no A/B comparison."""
