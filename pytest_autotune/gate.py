"""The CI regression gate: re-time the locked winner and decide pass, fail or "faster".

Kept free of pytest so the decision can be tested (and reused) on its own:
the plugin turns a :class:`GateOutcome` into ``pytest.fail`` or a summary row.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from .measure import Comparison, compare_samples
from .results import Measurement


@dataclass
class GateOutcome:
    """What the gate found for one kernel."""

    verdict: str  # "pass" | "slower" | "faster" | "broken"
    comparison: Comparison | None
    measurement: Measurement
    message: str = ""
    stale_ranking: list[dict[str, Any]] = field(default_factory=list)  # runners-up that now beat the winner

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


def check_entry(entry: Mapping[str, Any], hashes: Mapping[str, str], locked_in_space: Callable[[], bool]) -> EntryCheck:
    """Classify ``entry`` against the current ``hashes``; ``locked_in_space()`` is asked only when needed."""
    recorded = entry.get("hashes") or {}
    changed = tuple(sorted(name for name, value in hashes.items() if recorded.get(name) != value))
    if "problem" in changed:
        return EntryCheck("the problem changed (problem size, argument shapes, dtypes or scalar values)", changed)
    if "space" in changed and not locked_in_space():
        return EntryCheck("the locked configuration is no longer in the search space", changed)
    return EntryCheck(None, changed)


def retune_command(nodeid: str) -> str:
    # "--autotune=all", not "--autotune <nodeid>": the option takes an optional value, so argparse
    # would read the node id as that value and reject it.
    return f"pytest --autotune=all {nodeid}"


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


def run_gate(kernel: str, nodeid: str, entry: Mapping[str, Any], measurement: Measurement, tolerance: float,
             alpha: float, measure_runner_up: Callable[[Mapping[str, Any]], Measurement] | None = None) -> GateOutcome:
    """Compare a fresh measurement of the locked winner with the lock.

    ``tolerance`` is a fraction (0.10 = 10 %). With ``measure_runner_up``
    the recorded runners-up are re-timed too, and any that now beats the
    winner significantly marks the lock stale (the optimum moved).
    """
    if not measurement.ok:
        return GateOutcome("broken", None, measurement,
                           f"autotune: the locked configuration of kernel {kernel!r} in {nodeid} no longer works "
                           f"({measurement.failure}): {measurement.detail.strip()[:2000]}\n"
                           f"  locked params: {dict(entry['params'])}\n  re-tune with: {retune_command(nodeid)}")
    new_samples: Sequence[float] = measurement.samples or [measurement.value]  # type: ignore[list-item]
    cmp = compare_samples(entry["samples"], new_samples, tolerance * 100.0, alpha)
    outcome = GateOutcome("pass", cmp, measurement)
    if cmp.slower:
        outcome.verdict = "slower"
        outcome.message = regression_message(kernel, nodeid, entry, cmp)
    elif cmp.faster:
        outcome.verdict = "faster"
        outcome.message = (f"kernel {kernel!r} is {-cmp.change_pct:.1f}% faster than locked "
                           f"(p = {cmp.p_value:.3g}); consider updating the lock: {retune_command(nodeid)}")
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
