"""Reference runs interleaved with the kernel's: the machine's state at each run, as a kernel of its class feels it.

A shared CI host is not one machine from run to run. On the 2-core host a 2 MiB C kernel's runs fall in two
states, 0.18-0.22 ms and 0.35-0.45 ms, switching within a second on the same CPU, invisible to the guest's
counters (schedstat, /proc/stat, pressure: a busy sibling on the host, most likely). Probes measured before
and after a block of runs read one state while the kernel, between them, met the other: a slowdown of the
machine became one of the kernel (issue 43).

So where the kernel runs on this thread (the C runner), a *reference* run precedes every timed run: a
triad over the probes' arrays (sized to the kernel's footprint, so it lives at the kernel's cache level), with
the default compiler and flags whatever the kernel's build uses (a regression in the kernel's toolchain or
flags must not move the yardstick). Measured on that host, the triad run just before a kernel run told the
run's state in 98 % of 6,000 runs, and the kernel-to-reference ratio moved 6 % between the states where the
kernel moved 2.1x. The gate keeps the runs whose reference read the lock's state
(:func:`in_reference_state`); the lock records its reference's median beside its samples.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

TRIAD_SOURCE = r"""
void triad(float *a, const float *b, const float *c, float s, int n) {
    for (int i = 0; i < n; i++)
        a[i] = b[i] + s * c[i];
}
"""

MIN_IN_STATE = 4
"""Runs in the lock's state a measurement needs to be judged on them alone (as :data:`~.timing.MIN_UNPREEMPTED`)."""


def in_reference_state(samples: Sequence[float], reference: Sequence[float] | None, locked_ms: float | None,
                       tolerance: float) -> tuple[list[float], float | None]:
    """The runs whose reference read the lock's state (within ``tolerance`` of ``locked_ms``, or faster), and
    the machine's state over all of them (their references' median over the lock's; None without references).

    With fewer than :data:`MIN_IN_STATE` such runs the machine was not in the lock's state for this
    measurement: every run is returned, and the factor says by how much it differed. ``reference`` is aligned
    with ``samples`` (None, or misaligned: no reference, every run counts)."""
    if not reference or len(reference) != len(samples) or not locked_ms or locked_ms <= 0:
        return list(samples), None
    kept = [x for x, r in zip(samples, reference) if r <= locked_ms * (1 + tolerance)]
    if len(kept) >= MIN_IN_STATE:
        state = [r for r in reference if r <= locked_ms * (1 + tolerance)]
        return kept, float(np.median(state)) / locked_ms
    return list(samples), float(np.median(reference)) / locked_ms
