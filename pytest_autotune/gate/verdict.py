"""The CI regression gate: re-time the locked winner and decide pass, fail or "faster".

Two ways to decide, by what changed since the lock:

* **the kernel source was edited**: :func:`run_ab_gate` builds the locked
  source and the current one at the locked parameters and times them in
  interleaved rounds (ABAB...) on this machine. "The edit made it slower" is
  decided from those samples alone, whatever this machine's speed relative
  to the lock's; the comparison with the locked samples is reported beside it.
* **the source is unchanged**: :func:`run_gate` compares fresh samples with
  the locked ones. A suspected regression must persist in fresh rounds
  before it fails (a preemption burst does not), and when this machine's
  probes (:mod:`.probes`) differ from the lock's beyond the tolerance, a
  "slower" verdict becomes "incomparable": a different machine, not a regression.

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
from .probes import MachineComparison
from ..results import Measurement

AB_ROUNDS = 3  # interleaved rounds of locked and current source
CONFIRM_ROUNDS = 2  # fresh measurements a suspected regression must survive
AB_CONFIRM_BLOCKS = 2  # further A/B blocks a suspected regression of an edit must survive
CONFIRM_PAUSE_S = 0.1
"""Pause before each confirmation. Measurements taken back to back share one scheduling window: on a
shared 2-core host, two worker processes stayed on unequal CPUs for a whole A/B block and read 1.5x
apart with identical sources (about one block in ten, at load 5); 0.1-0.2 s later the same pair read
1.0x. Samples within a window are not independent; pausing lets the next window be a new draw."""

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


def regression_message(kernel: str, nodeid: str, entry: Mapping[str, Any], cmp: Comparison) -> str:
    """Reads like pytest-benchmark's comparison failure: what, how much, how sure, what to do."""
    return "\n".join([
        f"autotune regression: kernel {kernel!r} in {nodeid} got slower than its lock allows",
        f"  locked median {cmp.locked_median:.6g} ms (n={cmp.n_locked})  ->  now {cmp.new_median:.6g} ms "
        f"(n={cmp.n_new}): {cmp.change_pct:+.1f}%",
        f"  tolerance {cmp.tolerance_pct:.3g}%, Mann-Whitney U one-sided p = {cmp.p_value:.3g} (alpha {cmp.alpha:g})",
        f"  locked params: {dict(entry['params'])}",
        f"  if the slowdown is expected, re-tune with: {retune_command(nodeid)}",
    ])


def _samples(m: Measurement) -> list[float]:
    return list(m.samples) if m.samples else [float(m.value)]  # type: ignore[arg-type]


def _broken(kernel: str, nodeid: str, entry: Mapping[str, Any], measurement: Measurement, what: str = "") -> GateOutcome:
    return GateOutcome("broken", None, measurement,
                       f"autotune: the locked configuration of kernel {kernel!r} in {nodeid} no longer works{what} "
                       f"({measurement.failure}): {measurement.detail.strip()[:2000]}\n"
                       f"  locked params: {dict(entry['params'])}\n  re-tune with: {retune_command(nodeid)}")


def _faster_message(kernel: str, nodeid: str, cmp: Comparison, against: str = "locked") -> str:
    return (f"kernel {kernel!r} is {-cmp.change_pct:.1f}% faster than {against} (p = {cmp.p_value:.3g}); "
            f"consider updating the lock: {retune_command(nodeid)}")


def run_gate(kernel: str, nodeid: str, entry: Mapping[str, Any], measurement: Measurement, tolerance: float,
             alpha: float, measure_runner_up: Callable[[Mapping[str, Any]], Measurement] | None = None, *,
             remeasure: Measure | None = None,
             machine: MachineComparison | Callable[[], MachineComparison | None] | None = None,
             confirm_rounds: int = CONFIRM_ROUNDS, pause_s: float = CONFIRM_PAUSE_S,
             reference: Callable[[Mapping[str, Any]], Measurement] | None = None) -> GateOutcome:
    """Compare a fresh measurement of the locked winner with the lock.

    ``tolerance`` is a fraction (0.10 = 10 %). With ``remeasure``, a
    suspected regression is measured again ``confirm_rounds`` times, each
    after a pause of ``pause_s``, and fails only when those fresh samples
    alone are slower too. ``machine``
    (this machine's probes against the lock's) turns a "slower" verdict into
    ``incomparable`` when the machines differ beyond the tolerance; given as a
    callable, it is asked only then (probing the machine takes about a
    second, wasted on the usual passing run). ``reference`` measures the
    lock's first runner-up on this machine: given only when nothing the
    kernel's speed depends on changed since the lock (source, options,
    problem, toolchain versions), it turns a slowdown that the runner-up
    shares into ``incomparable`` (:func:`shared_slowdown`). With
    ``measure_runner_up`` the recorded runners-up are re-timed too, and any
    that now beats the winner significantly marks the lock stale.
    """
    if not measurement.ok:
        return _broken(kernel, nodeid, entry, measurement)
    new_samples: Sequence[float] = _samples(measurement)
    cmp = compare_samples(entry["samples"], new_samples, tolerance * 100.0, alpha)
    outcome = GateOutcome("pass", cmp, measurement, absolute=cmp)
    if cmp.slower and remeasure is not None and confirm_rounds > 0:
        fresh: list[float] = []
        for _ in range(confirm_rounds):
            time.sleep(pause_s)
            again = remeasure()
            if not again.ok:
                return _broken(kernel, nodeid, entry, again)
            fresh.extend(_samples(again))
        # the faster half of each, as in the A/B: load only ever adds time, and the confirmation decides
        confirmed = compare_samples(faster_half(entry["samples"]), faster_half(fresh), tolerance * 100.0, alpha)
        if not confirmed.slower:
            outcome.notes.append(f"a suspected regression ({cmp.change_pct:+.1f}%) did not persist in "
                                 f"{confirm_rounds} fresh rounds ({confirmed.change_pct:+.1f}%)")
            cmp = outcome.comparison = outcome.absolute = confirmed
    if cmp.slower and callable(machine):
        machine = machine()
    outcome.machine = machine if isinstance(machine, MachineComparison) else None
    other_machine = isinstance(machine, MachineComparison) and not machine.comparable
    shared = None
    if cmp.slower and not other_machine and reference is not None and remeasure is not None:
        shared = shared_slowdown(entry, remeasure, reference, tolerance, alpha, pause_s)
        if shared is not None and not shared.persisted:
            # timed once more beside its runner-up, the winner is within its lock: a passing slowdown
            outcome.notes.append(f"a suspected regression ({cmp.change_pct:+.1f}%) did not persist when timed "
                                 f"beside its runner-up ({shared.winner.change_pct:+.1f}%)")
            cmp = outcome.comparison = shared.winner
            shared = None
    if cmp.slower and other_machine:
        assert isinstance(machine, MachineComparison)
        # Only a verdict of "slower" is withheld: a pass or "faster" on another machine says as much as
        # it says on the lock's (bench_gate_robust: this VM's bandwidth probe alone varies by -20..+38 %).
        outcome.verdict = "incomparable"
        outcome.message = _incomparable_message(kernel, nodeid, cmp, f"{machine.describe()} (probes "
                                                f"{_fmt_changes(machine)})")
    elif cmp.slower and shared is not None and shared.shared:
        outcome.verdict = "incomparable"
        outcome.message = _incomparable_message(kernel, nodeid, cmp, shared.describe())
        outcome.notes.append(shared.describe())
    elif cmp.slower:
        if shared is not None:
            outcome.notes.append(shared.describe())
        outcome.verdict = "slower"
        outcome.message = regression_message(kernel, nodeid, entry, cmp)
    elif cmp.faster:
        outcome.verdict = "faster"
        outcome.message = _faster_message(kernel, nodeid, cmp)
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
    return outcome


def _incomparable_message(kernel: str, nodeid: str, cmp: Comparison, why: str) -> str:
    return (f"autotune: kernel {kernel!r} in {nodeid} not comparable with its lock: {why}; against the locked "
            f"samples {cmp.change_pct:+.1f}%, which says nothing about the kernel here. Gate on a machine like the "
            "lock's, or add a lockfile for this one (the pytest_autotune_lockfile_name hook)")


@dataclass(frozen=True)
class SharedSlowdown:
    """The locked winner and its runner-up, timed side by side now, against their ratio in the lock."""

    winner_pct: float  # the winner now against its locked samples
    runner_up_pct: float  # the runner-up now against its locked samples
    relative_pct: float  # the winner's time relative to the runner-up's, now against then
    tolerance_pct: float
    corrected: Comparison  # the gate's test on the winner's samples corrected by the runner-up's slowdown
    winner: Comparison  # the gate's test on the winner's samples of this block, uncorrected

    @property
    def persisted(self) -> bool:
        """The winner is still slower than its lock in this block (else the slowdown was a passing one)."""
        return self.winner.slower

    @property
    def shared(self) -> bool:
        """Both slowed alike: the conditions (machine, load), not this configuration."""
        return not self.corrected.slower

    def describe(self) -> str:
        if self.shared:
            return (f"the runner-up is slower here too ({self.runner_up_pct:+.0f}%, the winner "
                    f"{self.winner_pct:+.0f}%, timed side by side): this machine or its load, not the kernel")
        return (f"the winner slowed relative to its runner-up ({self.relative_pct:+.0f}%; runner-up "
                f"{self.runner_up_pct:+.0f}%, winner {self.winner_pct:+.0f}%, timed side by side)")


def shared_slowdown(entry: Mapping[str, Any], measure_winner: Measure,
                    measure_params: Callable[[Mapping[str, Any]], Measurement],
                    tolerance: float, alpha: float, pause_s: float = CONFIRM_PAUSE_S) -> SharedSlowdown | None:
    """Is a slowdown of an unchanged kernel shared by its runner-up? ``None`` when it cannot be told.

    With nothing the kernel depends on changed since the lock, a slower winner means slower conditions
    (another machine, a neighbour on the memory bus) unless the winner slowed *relative to* another
    configuration of the same kernel measured in the same session. The lock keeps the runner-up's
    samples from the tuning session; timing both now, interleaved in one worker, compares like with
    like. (A toolchain update can slow every configuration alike: the caller passes a reference only
    when the recorded versions are unchanged.)
    """
    ups = [u for u in entry.get("runners_up") or [] if u.get("samples")]
    if not ups or not entry.get("samples"):
        return None
    time.sleep(pause_s)
    up = dict(ups[0]["params"])
    w, r, failed_w, failed_r = interleaved(measure_winner, lambda: measure_params(up), AB_ROUNDS)
    if failed_w is not None or failed_r is not None or not w or not r:
        return None
    med = lambda xs: float(np.median(faster_half(xs)))  # noqa: E731
    w_now, r_now = med(w), med(r)
    w_then, r_then = med(entry["samples"]), med(ups[0]["samples"])
    relative = (w_now / r_now) / (w_then / r_then) - 1.0
    # The winner's samples of now, scaled by how much the runner-up slowed, against the locked ones, with
    # the gate's own test: "slower relative to the runner-up" must be beyond the tolerance and significant
    # (a 7-sample runner-up of a 6 ms memory-bound kernel reads +-10 % by itself).
    corrected = compare_samples(faster_half(entry["samples"]), [x * r_then / r_now for x in faster_half(w)],
                                tolerance * 100.0, alpha)
    winner = compare_samples(faster_half(entry["samples"]), faster_half(w), tolerance * 100.0, alpha)
    return SharedSlowdown((w_now / w_then - 1) * 100.0, (r_now / r_then - 1) * 100.0, relative * 100.0,
                          tolerance * 100.0, corrected, winner)


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
