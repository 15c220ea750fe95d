"""The gate as it was before issue 27 (main at 740d031), kept only so that bench_gate_robust.py can run it
beside the new one in the same session on the same machine: fresh samples against the locked ones,
confirmed in fresh rounds; a "slower" verdict vetoed into "incomparable" when the default-size probes
(best of runs) differ from the lock's beyond the tolerance, or when the lock's runner-up, timed beside
the winner, slowed alike. Not part of the product."""
from __future__ import annotations

import time
from typing import Any, Callable, Mapping

import numpy as np

from pytest_autotune.gate.verdict import AB_ROUNDS, interleaved
from pytest_autotune.measure.timing import faster_half
from pytest_autotune.measure.timing import compare_samples

PROBES = ("bandwidth_gbs", "compute_gflops")
CONFIRM_ROUNDS, CONFIRM_PAUSE_S = 2, 0.1  # as they were then


def machine_differs(locked: Mapping[str, Any], current: Mapping[str, Any], tolerance: float) -> bool:
    """Today's rule: any probe's best run differs from the lock's by more than the tolerance."""
    for name in PROBES:
        then, now = min(locked["samples_ms"][name]), min(current["samples_ms"][name])
        if abs(then / now - 1.0) > tolerance:
            return True
    return False


def run_gate_today(entry: Mapping[str, Any], measurement: Any, tolerance: float, alpha: float,
                   remeasure: Callable[[], Any], other_machine: bool, reference: Callable[[Mapping[str, Any]], Any],
                   pause_s: float = CONFIRM_PAUSE_S) -> str:
    """Today's verdict: pass | slower | faster | broken | incomparable."""
    if not measurement.ok:
        return "broken"
    cmp = compare_samples(entry["samples"], measurement.samples, tolerance * 100.0, alpha)
    if cmp.slower:
        fresh: list[float] = []
        for _ in range(CONFIRM_ROUNDS):
            time.sleep(pause_s)
            again = remeasure()
            if not again.ok:
                return "broken"
            fresh.extend(again.samples)
        confirmed = compare_samples(faster_half(entry["samples"]), faster_half(fresh), tolerance * 100.0, alpha)
        if not confirmed.slower:
            cmp = confirmed
    if cmp.slower and other_machine:
        return "incomparable"
    if cmp.slower:
        ups = [u for u in entry.get("runners_up") or [] if u.get("samples")]
        if ups:
            time.sleep(pause_s)
            up = dict(ups[0]["params"])
            w, r, fw, fr = interleaved(remeasure, lambda: reference(up), AB_ROUNDS)
            if fw is None and fr is None and w and r:
                med = lambda xs: float(np.median(faster_half(xs)))  # noqa: E731
                r_then, r_now = med(ups[0]["samples"]), med(r)
                corrected = compare_samples(faster_half(entry["samples"]), [x * r_then / r_now for x in faster_half(w)],
                                            tolerance * 100.0, alpha)
                winner = compare_samples(faster_half(entry["samples"]), faster_half(w), tolerance * 100.0, alpha)
                if not winner.slower:
                    return "pass"
                if not corrected.slower:
                    return "incomparable"
        return "slower"
    return "faster" if cmp.faster else "pass"
