"""Machine probes: is the machine running the gate the one the lock was measured on?

When a kernel's source is unchanged, the gate's only signal is the absolute
comparison with the locked samples, and that confounds a regression with a
different machine: cloud machines of one nominal model differ by tens of
percent. So every lock entry written on a CPU records two small probes,
measured in the same session as its samples, and the gate measures them again:

* ``bandwidth_gbs``: a STREAM-style triad over three 16 MiB arrays (well
  beyond the per-core caches): what a memory-bound kernel feels;
* ``compute_gflops``: eight independent multiply-add chains on registers:
  what a compute-bound kernel feels (clock, turbo, neighbours on the core).

Both run through the C runner itself (same compiler, flags, timing), so they
see the machine the way the tuned kernels do. Each reports its *best* run:
preemption and a passing burst only ever add time, so the fastest of many
runs is what the machine can do, and it is far steadier than a median on a
shared host (a sustained neighbour on a sibling core still shows). When a probe differs from the
lock's by more than the gate's tolerance, an absolute comparison says
nothing about the kernel, and the gate reports "not comparable" instead of a
verdict. Probes exist for CPU devices (the C and callable runners); GPU
runners record none yet (a device-side copy/FMA probe needs a GPU to
validate), and their gate works as before.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

PROBE_VERSION = "c-triad-fma-best-1"
TRIAD_N = 1 << 22  # floats per array: 16 MiB each, 48 MiB moved per run
FMA_ITERATIONS = 1 << 20  # per chain; 8 chains x 2 flops

PROBE_SOURCE = r"""
void triad(float *a, const float *b, const float *c, float s, int n) {
    for (int i = 0; i < n; i++)
        a[i] = b[i] + s * c[i];
}

void fma_chains(float *out, int iterations) {
    float x0 = out[0], x1 = out[1], x2 = out[2], x3 = out[3], x4 = out[4], x5 = out[5], x6 = out[6], x7 = out[7];
    const float m = 0.999999f, k = 1e-7f;
    for (int i = 0; i < iterations; i++) {
        x0 = x0 * m + k; x1 = x1 * m + k; x2 = x2 * m + k; x3 = x3 * m + k;
        x4 = x4 * m + k; x5 = x5 * m + k; x6 = x6 * m + k; x7 = x7 * m + k;
    }
    out[0] = x0; out[1] = x1; out[2] = x2; out[3] = x3; out[4] = x4; out[5] = x5; out[6] = x6; out[7] = x7;
}
"""

PROBES = ("bandwidth_gbs", "compute_gflops")
PROBE_NAMES = {"bandwidth_gbs": "memory bandwidth", "compute_gflops": "compute throughput"}


def _best_ms(source: str, name: str, args: list[Any]) -> float:
    from ..measure.timing import MeasureOptions
    from ..runners import KernelSpec, make_runner

    spec = KernelSpec(source, name, 1, args, lang="c")
    runner = make_runner(spec, runner="c", isolate=False,
                         measure=MeasureOptions(warmup=2, min_iterations=15, max_iterations=40, time_budget_s=0.3))
    try:
        m = runner.evaluate({})
    finally:
        runner.close()
    if not m.ok:
        raise RuntimeError(f"machine probe {name!r} failed ({m.failure}): {m.detail[:500]}")
    return float(np.min(m.samples))


def measure_cpu_probes() -> dict[str, Any]:
    """Measure both probes now (about a second)."""
    a, b, c = (np.full(TRIAD_N, v, dtype=np.float32) for v in (0.0, 1.0, 2.0))
    triad_ms = _best_ms(PROBE_SOURCE, "triad", [a, b, c, np.float32(0.5), np.int32(TRIAD_N)])
    chains = np.ones(8, dtype=np.float32)
    fma_ms = _best_ms(PROBE_SOURCE, "fma_chains", [chains, np.int32(FMA_ITERATIONS)])
    return {
        "probe": PROBE_VERSION,
        "bandwidth_gbs": round(3 * 4 * TRIAD_N / (triad_ms * 1e-3) / 1e9, 3),
        "compute_gflops": round(8 * 2 * FMA_ITERATIONS / (fma_ms * 1e-3) / 1e9, 3),
    }


@functools.lru_cache(maxsize=1)
def cpu_probes() -> dict[str, Any]:
    """This process's probes, measured once (a session gates many kernels on one machine)."""
    return measure_cpu_probes()


def probes_for(device_kind: str) -> dict[str, Any] | None:
    """Probes of the machine a runner of this device kind runs on; ``None`` where none are defined."""
    if device_kind not in ("cpu", "triton-interpreter"):  # Triton's interpreter runs on this CPU
        return None
    try:
        return cpu_probes()
    except Exception:  # no compiler: the gate falls back to the absolute comparison alone
        return None


@dataclass(frozen=True)
class MachineComparison:
    """How this machine's probes compare with those recorded in a lock entry."""

    changes: dict[str, float]  # probe -> relative change in percent (this machine vs the lock's)
    tolerance_pct: float

    @property
    def comparable(self) -> bool:
        return all(abs(c) <= self.tolerance_pct for c in self.changes.values())

    def describe(self) -> str:
        """``this machine's memory bandwidth is 31% lower than the lock's``, for the worst probe."""
        name, change = max(self.changes.items(), key=lambda kv: abs(kv[1]))
        return (f"this machine's {PROBE_NAMES.get(name, name)} is {abs(change):.0f}% "
                f"{'lower' if change < 0 else 'higher'} than the lock's machine's")


def compare_machines(locked: Mapping[str, Any] | None, current: Mapping[str, Any] | None,
                     tolerance: float) -> MachineComparison | None:
    """``None`` when either side has no probes (or they were measured by another probe version)."""
    if not locked or not current or locked.get("probe") != current.get("probe"):
        return None
    changes = {name: (float(current[name]) / float(locked[name]) - 1.0) * 100.0
               for name in PROBES if locked.get(name) and current.get(name)}
    return MachineComparison(changes, tolerance * 100.0) if changes else None
