"""Reference runs interleaved with the kernel's: the machine's state at each run, as a kernel of its class feels it.

A shared CI host is not one machine from run to run. On the 2-core host a 2 MiB C kernel's runs fall in two
states, 0.18-0.22 ms and 0.35-0.45 ms, switching within a second on the same CPU, invisible to the guest's
counters (schedstat, /proc/stat, pressure: a busy sibling on the host, most likely). Probes measured before
and after a block of runs read one state while the kernel, between them, met the other: a slowdown of the
machine became one of the kernel (issue 43).

So where the kernel runs on this thread (the C runner), a *reference* run precedes every timed run: a
triad over the probes' arrays (sized to the kernel's footprint, so it lives at the kernel's cache level; repeated
to about 50 us where the footprint is small) and about 40 us of dependent multiply-add chains (what a compute-bound kernel feels: the core's clock and
what shares it), built with the default compiler and flags whatever the kernel's build uses (a regression in
the kernel's toolchain or flags must not move the yardstick). Measured on that host, the triad run just before
a kernel run told a 2 MiB kernel's state in 98 % of 6,000 runs, and the kernel-to-reference ratio moved 6 %
between the states where the kernel moved 2.1x; a 32 KiB compute-bound kernel's slower state the triad alone
missed in a third of the rounds, hence the chains. A run's state is the slower of its two references against
the lock's (:func:`run_states`), a measurement's the median of its runs' (:func:`round_state`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

REFERENCE_SOURCE = r"""
void triad(float *a, const float *b, const float *c, float s, int n) {
    for (int i = 0; i < n; i++)
        a[i] = b[i] + s * c[i];
}

void chains(float *out, int iterations) {
    float x0 = out[0], x1 = out[1], x2 = out[2], x3 = out[3];
    for (int i = 0; i < iterations; i++) {
        x0 = x0 * 0.999999f + 1e-7f; x1 = x1 * 0.999999f + 1e-7f;
        x2 = x2 * 0.999999f + 1e-7f; x3 = x3 * 0.999999f + 1e-7f;
    }
    out[0] = x0; out[1] = x1; out[2] = x2; out[3] = x3;
}
"""
TRIAD_SOURCE = REFERENCE_SOURCE.split("\nvoid chains")[0] + "\n"
"""The triad alone (the machine probes' memory probe)."""

CHAIN_ITERATIONS = 32768
"""Iterations of the reference's four chains: about 40 us. At 4 us (4,096) the chains, like a 5 us triad, read
"states" of 1.2-2.8x in quiet rounds where a 0.3 ms kernel beside them read none: too short to describe it."""
TRIAD_BYTES_PER_RUN = 2_000_000
"""About how many bytes the reference's triad moves per run (50-60 us from the L2 cache here): a small footprint's triad
is repeated up to that (:func:`triad_repeats`), so that it lasts long enough to describe the state too."""


def triad_repeats(n: int) -> int:
    """How often the triad over three arrays of ``n`` floats runs in one reference run: a power of two, 1 to 64,
    set by ``n`` alone so that the lock and the gate repeat it alike."""
    wanted = TRIAD_BYTES_PER_RUN / max(1, 12 * n)
    return int(min(64, max(1, 2 ** int(np.floor(np.log2(max(1.0, wanted)))))))

@dataclass(frozen=True)
class LockedReference:
    """The lock's reference runs: their medians (ms), as its entry's ``machine`` records them."""

    triad_ms: float
    chains_ms: float | None = None

    @classmethod
    def of(cls, machine: Mapping[str, Any]) -> "LockedReference | None":
        """From an entry's ``machine`` record; None where it has none (or none usable)."""
        triad, chains = machine.get("reference_ms"), machine.get("reference_chains_ms")
        if not _positive(triad):
            return None
        return cls(float(triad), float(chains) if _positive(chains) else None)

    def record(self) -> dict[str, float]:
        return {"reference_ms": round(self.triad_ms, 6),
                **({"reference_chains_ms": round(self.chains_ms, 6)} if self.chains_ms else {})}

    def states(self, triad_ms: Sequence[float], chains_ms: Sequence[float] | None) -> list[float]:
        return run_states(triad_ms, chains_ms, self.triad_ms, self.chains_ms)


def _positive(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and 0 < x < float("inf")


def run_states(triad_ms: Sequence[float], chains_ms: Sequence[float] | None, locked_triad_ms: float,
               locked_chains_ms: float | None) -> list[float]:
    """Each run's state against the lock's: the slower of its two references' ratios (1.0: the lock's)."""
    states = [t / locked_triad_ms for t in triad_ms]
    if chains_ms is not None and locked_chains_ms and len(chains_ms) == len(states):
        states = [max(s, c / locked_chains_ms) for s, c in zip(states, chains_ms)]
    return states


def round_state(states: Sequence[float] | None) -> float | None:
    """A measurement's state against the lock's: its runs' states' median (None without states).

    The runs are not filtered by their own state: keeping only those whose reference read the lock's state
    biased the kept runs fast (their lucky moments), and slowdowns of 1.3x read as passes in 16 of 16 gates
    of the 32 KiB and 2 MiB kernels (benchmarks/results/bench_gate_grid_issue43_run_filter.json)."""
    if not states:
        return None
    return float(np.median(states))
