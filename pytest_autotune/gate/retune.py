"""What a re-tune does with the lock entry it finds: the lock must never silently get worse.

Kept free of pytest (like :mod:`.gate`): given the existing entry, the
current hashes and a :class:`~pytest_autotune.engine.tuner.TuneResult` in which the
locked winner was measured as a candidate, decide whether to write a new
entry or keep the old one byte for byte.

The rules:

* no entry yet: write it (``first lock``);
* the search found a winner that beats the locked one *significantly*, by the
  gate's own statistics (median faster by more than the tolerance and a
  one-sided Mann-Whitney U test at ``alpha``) on samples taken side by side
  in this session: write it (``new winner, x% faster than lock``);
* otherwise keep the locked winner. When nothing the entry depends on
  changed, the entry stays byte-identical: noise must not churn the lock,
  and a slower machine must not lower its numbers. Only when this machine
  measures the locked winner significantly *faster* than the lock says are
  its timings refreshed (the gate would otherwise report "faster" for ever).
* when the source, space or problem changed, or the entry lacks what this
  version records (machine probes, the stored source), the entry is rewritten
  with the kept winner's fresh samples (measured next to the probes).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ..lock.entry import as_entry
from ..measure.timing import Comparison, compare_samples


@dataclass(frozen=True)
class RetuneDecision:
    """``action``: ``first`` | ``new`` | ``kept`` | ``refreshed`` | ``updated``; ``write``: rewrite the entry."""

    action: str
    params: dict[str, Any]  # the winner to lock (the new one, or the locked one kept)
    samples: list[float]  # its samples for the entry (unused when the entry is kept)
    message: str
    change_pct: float | None = None  # winner vs the locked winner, both measured now
    comparison: Comparison | None = None

    @property
    def write(self) -> bool:
        return self.action != "kept"


def decide(old: Mapping[str, Any] | None, rewrite_reasons: Sequence[str], winner: Mapping[str, Any],
           winner_samples: Sequence[float], locked_samples_now: Sequence[float] | None, tolerance: float,
           alpha: float) -> RetuneDecision:
    """Choose between the search's winner and the locked winner (see the module docstring).

    ``locked_samples_now`` are the locked winner's samples taken in this
    session next to the winner's (``None`` when the locked configuration is
    no longer in the space or failed now: then the search's winner is taken).
    """
    winner = dict(winner)
    if old is None:
        return RetuneDecision("first", winner, list(winner_samples), "first lock")
    old = as_entry(old)
    locked = old.params
    if not locked_samples_now:
        why = "the locked winner no longer runs or is outside the space"
        return RetuneDecision("new", winner, list(winner_samples), f"new winner ({why})")
    if _same(winner, locked):
        cmp = None
    else:
        cmp = compare_samples(locked_samples_now, winner_samples, tolerance * 100.0, alpha)
        if cmp.faster:
            return RetuneDecision("new", winner, list(winner_samples),
                                  f"new winner, {-cmp.change_pct:.1f}% faster than lock", cmp.change_pct, cmp)
    change = cmp.change_pct if cmp is not None else None
    challenger = "" if cmp is None else f" (best challenger {cmp.change_pct:+.1f}%, not significant)"
    if rewrite_reasons:
        return RetuneDecision("updated", locked, list(locked_samples_now),
                              f"kept locked winner{challenger}; entry updated: {', '.join(rewrite_reasons)}",
                              change, cmp)
    against_lock = compare_samples(old.samples, locked_samples_now, tolerance * 100.0, alpha)
    if against_lock.faster:
        return RetuneDecision("refreshed", locked, list(locked_samples_now),
                              f"kept locked winner{challenger}; timings refreshed, "
                              f"{-against_lock.change_pct:.1f}% faster than locked", change, cmp)
    note = ""
    if against_lock.slower:
        note = (f"; this machine measures it {against_lock.change_pct:+.1f}% against the lock "
                "(lock left as it was)")
    return RetuneDecision("kept", locked, list(locked_samples_now), f"kept locked winner{challenger}{note}",
                          change, cmp)


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return {str(k): v for k, v in a.items()} == {str(k): v for k, v in b.items()}
