"""Machine probes: how much slower or faster is the machine running the gate than the lock's?

When a kernel's source is unchanged, the gate's only signal is the comparison
with the locked samples, and that confounds a regression with a different
(or busier) machine. So every lock entry records two small probes, measured in
the same session as its samples, and the gate measures them again:

* ``bandwidth_gbs``: a STREAM-style triad over three arrays sized to the
  kernel's footprint (its arguments' bytes): what a memory-bound kernel feels;
* ``compute_gflops``: eight independent multiply-add chains on registers,
  their length set so one run lasts about as long as the kernel: what a
  compute-bound kernel feels (clock, turbo, neighbours on the core).

Both run through the C runner itself (same compiler, flags, timing), so they
see the machine the way the tuned kernels do. Every run's time is kept, so
the gate can bound, with a bootstrap (:func:`scipy.stats.bootstrap`), how
much of a kernel's slowdown the machine explains: a *correction* of the
verdict (:mod:`.verdict`), never a veto. CPU devices (the C and callable
runners) are probed through the C runner; CUDA devices through the kernel's own
runner factory (CuPy or PyCUDA): a device stream and FMA chains
(:func:`measure_gpu_probes`). OpenCL devices record none yet.
"""
from __future__ import annotations

import atexit
import functools
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from ..measure.reference import TRIAD_SOURCE

PROBE_VERSION = "c-triad-fma-samples-2"
TRIAD_N = 1 << 22  # floats per array when the footprint is unknown: 16 MiB each
TRIAD_N_RANGE = (1 << 14, 1 << 23)
FMA_ITERATIONS = 1 << 20  # per chain when the kernel's duration is unknown; 8 chains x 2 flops
FMA_ITERATIONS_RANGE = (1 << 12, 1 << 24)
FMA_NS_PER_ITERATION = 1.0  # about, on a 3 GHz core: sizes the chain to the kernel's duration
CONFIDENCE = 0.98  # two-sided: each bound is a 99 % one-sided bound
N_RESAMPLES = 2000
QUANTILE = 25  # the probes' lower quartile: the gate judges the kernel on the faster half of its samples too

PROBE_SOURCE = TRIAD_SOURCE + r"""
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
def cpu_kinds() -> tuple[str, ...]:
    """Device kinds probed through the C runner: those the backends declare run on this CPU (``cpu``; Triton's
    interpreter)."""
    from ..backends import cpu_probed_kinds

    return cpu_probed_kinds()


CPU_KINDS = ("cpu", "triton-interpreter")  # the built-ins' cpu_kinds(), for code that imported the constant
PROBE_NAMES = {"bandwidth_gbs": "memory bandwidth", "compute_gflops": "compute throughput"}


def _pow2_clamp(x: float, lo: int, hi: int) -> int:
    return int(min(hi, max(lo, 1 << max(0, int(round(np.log2(max(x, 1.0))))))))


def probe_sizes(footprint_bytes: int | None = None, duration_ms: float | None = None,
                ns_per_iteration: float = FMA_NS_PER_ITERATION) -> dict[str, int]:
    """The probes' sizes for a kernel: the triad moves about the kernel's footprint, the chain lasts
    about as long as the kernel (powers of two, so that nearby kernels share one cached probe).

    ``ns_per_iteration``: the chains' time per iteration. The nominal 1 ns made the CPU chain about 4x the
    kernel's duration on the CI host (a 20 ms Triton kernel got a 69 ms chain, run 15 times each side of
    every lock round), so CPU locks pass this machine's, :func:`fma_ns_per_iteration`."""
    triad_n = _pow2_clamp(footprint_bytes / 12.0, *TRIAD_N_RANGE) if footprint_bytes else TRIAD_N
    fma = (_pow2_clamp(duration_ms * 1e6 / ns_per_iteration, *FMA_ITERATIONS_RANGE)
           if duration_ms and duration_ms > 0 else FMA_ITERATIONS)
    return {"triad_n": triad_n, "fma_iterations": fma}


FMA_CALIBRATION_ITERATIONS = 1 << 16  # about 0.25 ms a run: the calibration costs a few milliseconds


@functools.lru_cache(maxsize=1)
def fma_ns_per_iteration() -> float:
    """This machine's time per iteration of the chains (ns), from the fastest of a few short runs; the
    nominal :data:`FMA_NS_PER_ITERATION` where the probe does not build."""
    from ..measure.timing import MeasureOptions

    try:
        samples = _samples_ms("fma_chains", FMA_CALIBRATION_ITERATIONS,
                              MeasureOptions(warmup=2, min_iterations=5, max_iterations=5, time_budget_s=0.05))
    except Exception:  # no compiler: the probes will not run either
        return FMA_NS_PER_ITERATION
    return max(0.05, min(samples) * 1e6 / FMA_CALIBRATION_ITERATIONS)


def probe_measure() -> Any:
    """How a probe is timed: at least 15 runs (the bootstrap needs repeated runs), at most 40 or 0.3 s."""
    from ..measure.timing import MeasureOptions

    return MeasureOptions(warmup=2, min_iterations=15, max_iterations=40, time_budget_s=0.3)


def _probe_args(name: str, size: int) -> list[Any]:
    """The arguments of probe ``name`` at ``size`` (the triad's floats per array, the chains' iterations)."""
    if name == "triad":
        a, b, c = (np.full(size, v, dtype=np.float32) for v in (0.0, 1.0, 2.0))
        return [a, b, c, np.float32(0.5), np.int32(size)]
    return [np.ones(8, dtype=np.float32), np.int32(size)]


_RUNNERS: dict[tuple[str, int, Any], Any] = {}


def _samples_ms(name: str, size: int, measure: Any = None) -> list[float]:
    """Every run's time of probe ``name`` at ``size``, on a runner built once per probe and size in this
    process: a lock's or a gate's rounds probe the machine a dozen times or more, and building the runner
    each time (the compile cache's lookup, loading the library, the buffers) took about half of each probe."""
    from ..runners import KernelSpec, make_runner

    key = (name, size, measure)
    runner = _RUNNERS.get(key)
    if runner is None:
        if len(_RUNNERS) >= 16:  # the sizes are powers of two: a session needs a few
            _close_runners()
        spec = KernelSpec(PROBE_SOURCE, name, 1, _probe_args(name, size), lang="c")
        runner = make_runner(spec, runner="c", isolate=False, measure=measure or probe_measure())
        _RUNNERS[key] = runner
    m = runner.evaluate({})
    if not m.ok:
        raise RuntimeError(f"machine probe {name!r} failed ({m.failure}): {m.detail[:500]}")
    return [float(x) for x in m.samples]


def _close_runners() -> None:
    """Close the probes' runners (at the interpreter's exit, or when too many sizes were kept)."""
    for runner in _RUNNERS.values():
        try:
            runner.close()
        except Exception:  # noqa: BLE001 - a runner that cannot close is left to the OS
            pass
    _RUNNERS.clear()


atexit.register(_close_runners)


def measure_cpu_probes(triad_n: int = TRIAD_N, fma_iterations: int = FMA_ITERATIONS) -> dict[str, Any]:
    """Measure both probes now (well under a second at the default sizes), keeping every run's time."""
    triad = _samples_ms("triad", triad_n)
    fma = _samples_ms("fma_chains", fma_iterations)
    return _summarise(triad_n, fma_iterations, {"bandwidth_gbs": triad, "compute_gflops": fma})



def _summarise(triad_n: int, fma_iterations: int, samples: Mapping[str, Sequence[float]]) -> dict[str, Any]:
    work = {"bandwidth_gbs": 3 * 4 * triad_n, "compute_gflops": 8 * 2 * fma_iterations}  # bytes, flops
    return {
        "probe": PROBE_VERSION, "triad_n": triad_n, "fma_iterations": fma_iterations,
        **{name: round(work[name] / (float(np.median(samples[name])) * 1e-3) / 1e9, 3) for name in PROBES},
        "samples_ms": {name: [float(f"{x:.5g}") for x in samples[name]] for name in PROBES},
    }


def pool_probes(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Probe runs of one size, measured round by round beside the kernel, as one record."""
    runs = [r for r in runs if r]
    if not runs:
        return None
    first = runs[0]
    pooled = {name: [x for r in runs for x in r["samples_ms"][name]] for name in PROBES}
    # the same work per run (one probe version and size): the rate scales with the median time
    return {**first, **{name: round(first[name] * float(np.median(first["samples_ms"][name]))
                                    / float(np.median(pooled[name])), 3) for name in PROBES},
            "samples_ms": pooled}


@functools.lru_cache(maxsize=8)
def cpu_probes(triad_n: int = TRIAD_N, fma_iterations: int = FMA_ITERATIONS) -> dict[str, Any]:
    """This process's probes of one size, measured once (a tuning session records many kernels)."""
    return measure_cpu_probes(triad_n, fma_iterations)


def probes_for(device_kind: str, sizes: Mapping[str, int] | None = None, *, fresh: bool = False,
               make: Any = None) -> dict[str, Any] | None:
    """Probes of the machine a runner of this device kind runs on; ``None`` where none are defined.
    ``fresh`` measures again (the gate pairs probe runs with the kernel's confirmation rounds). CUDA
    devices are probed through ``make(spec)``, the kernel's own runner factory; without it, not at all."""
    size = dict(sizes or probe_sizes())
    try:
        if device_kind == "cuda" and make is not None:
            return measure_gpu_probes(make, **size)
        if device_kind not in cpu_kinds():
            return None
        return measure_cpu_probes(**size) if fresh else cpu_probes(**size)
    except Exception:  # no compiler, a probe that does not build: the gate compares with the lock alone
        return None


def _time_point(then: Sequence[float], now: Sequence[float]) -> float:
    """(probe time now) / (probe time then): the ratio of lower quartiles."""
    return float(np.percentile(np.asarray(now, dtype=float), QUANTILE)
                 / np.percentile(np.asarray(then, dtype=float), QUANTILE))


def _time_ratio_bounds(then: Sequence[float], now: Sequence[float]) -> tuple[float, float]:
    """Bounds on (probe time now) / (probe time then), the ratio of lower quartiles, by a percentile bootstrap.
    With one sample a side (an entry of an older probe), the point ratio is both bounds."""
    from scipy.stats import bootstrap

    a, b = np.asarray(then, dtype=float), np.asarray(now, dtype=float)
    point = _time_point(then, now)
    if a.size < 3 or b.size < 3:
        return point, point
    def ratio(x: np.ndarray, y: np.ndarray, axis: int) -> np.ndarray:
        return np.percentile(y, QUANTILE, axis=axis) / np.percentile(x, QUANTILE, axis=axis)

    res = bootstrap((a, b), ratio,
                    n_resamples=N_RESAMPLES, confidence_level=CONFIDENCE, method="percentile",
                    vectorized=True, random_state=np.random.default_rng(0))
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return min(lo, point), max(hi, point)


@dataclass(frozen=True)
class MachineComparison:
    """This machine's probes against those recorded with a lock entry.

    ``changes``: probe -> change of the probe's *speed* in percent (point estimate, -18 = 18 % slower);
    ``time_ratio``: probe -> (low, high) bounds on how many times longer the probe takes here;
    ``time_point``: probe -> the point estimate of that (the ratio of lower quartiles).
    """

    changes: dict[str, float]
    tolerance_pct: float
    time_ratio: dict[str, tuple[float, float]] = field(default_factory=dict)
    time_point: dict[str, float] = field(default_factory=dict)

    def _points(self) -> dict[str, float]:
        """Each probe's time ratio (point estimate): the lower quartiles', else the rates'."""
        return self.time_point or {k: 1 / (1 + c / 100) for k, c in self.changes.items()}

    @property
    def factor(self) -> float:
        """How many times longer the slowest-moving probe takes here than with the lock (point estimate)."""
        return max(self._points().values())

    @property
    def like_the_locks(self) -> bool:
        """Neither probe is slower than with the lock by more than the tolerance: like-for-like conditions."""
        return self.factor <= 1 + self.tolerance_pct / 100

    @property
    def comparable(self) -> bool:
        return all(abs(c) <= self.tolerance_pct for c in self.changes.values())

    def _bound(self, slower: bool) -> tuple[str, float]:
        ratios = self.time_ratio or {k: (v, v) for k, v in self._points().items()}
        if slower:
            return max(((k, hi) for k, (_, hi) in ratios.items()), key=lambda kv: kv[1])
        return min(((k, lo) for k, (lo, _) in ratios.items()), key=lambda kv: kv[1])

    @property
    def slowdown(self) -> float:
        """The most this machine explains of a slower kernel, as a time factor (>= 1)."""
        return max(1.0, self._bound(True)[1])

    @property
    def speedup(self) -> float:
        """The most this machine explains of a faster kernel, as a time factor (<= 1)."""
        return min(1.0, self._bound(False)[1])

    def explains(self, slower: bool = True, exponent: float = 1.0) -> str:
        """``the machine explains at most +18% (memory bandwidth probe, 99% bound over 40 probe runs)``;
        with ``exponent`` 2, the probe's slowdown squared (see :data:`.verdict.MISMATCH_EXPONENT`)."""
        name, ratio = self._bound(slower)
        ratio = max(1.0, ratio) if slower else min(1.0, ratio)
        if exponent != 1.0:
            return (f"the machine explains at most {(ratio ** exponent - 1) * 100:+.0f}% "
                    f"({PROBE_NAMES.get(name, name)} probe {(ratio - 1) * 100:+.0f}%, to the power "
                    f"{exponent:g}: a kernel can feel contention more than its probe)")
        kind = (f"{(1 - (1 - CONFIDENCE) / 2):.0%} bound" if self.time_ratio else
                "point estimate" if self.time_point else "single values")
        return f"the machine explains at most {(ratio - 1) * 100:+.0f}% ({PROBE_NAMES.get(name, name)} probe, {kind})"

    def describe(self) -> str:
        """``this machine's memory bandwidth is 31% lower than the lock's machine's``, for the worst probe."""
        name, change = max(self.changes.items(), key=lambda kv: abs(kv[1]))
        return (f"this machine's {PROBE_NAMES.get(name, name)} is {abs(change):.0f}% "
                f"{'lower' if change < 0 else 'higher'} than the lock's machine's")


def compare_machines(locked: Mapping[str, Any] | None, current: Mapping[str, Any] | None,
                     tolerance: float, bounds: bool = True) -> MachineComparison | None:
    """``None`` when either side has no probes, or probes of another version or size. ``bounds=False``
    skips the bootstrap (a round's point estimate is all the gate's rounds need)."""
    if not locked or not current or locked.get("probe") != current.get("probe"):
        return None
    if any(locked.get(k) != current.get(k) for k in ("triad_n", "fma_iterations")):
        return None
    changes = {name: (float(current[name]) / float(locked[name]) - 1.0) * 100.0
               for name in PROBES if locked.get(name) and current.get(name)}
    then, now = locked.get("samples_ms") or {}, current.get("samples_ms") or {}
    if not changes:
        return None
    timed = [name for name in changes if then.get(name) and now.get(name)]
    if len(timed) < len(changes):  # an older record without each run's time: the rates' point estimates
        return MachineComparison(changes, tolerance * 100.0)
    return MachineComparison(changes, tolerance * 100.0,
                             {name: _time_ratio_bounds(then[name], now[name]) for name in timed} if bounds else {},
                             {name: _time_point(then[name], now[name]) for name in timed})


# --------------------------------------------------------------------------- GPU probes

GPU_PROBE_VERSION = "cuda-stream-fma-1"
GPU_PROBE_SOURCE = r"""
extern "C" __global__ void probe_stream(float *out, const float *a, const float *b, int n) {
    int i = blockIdx.x * block_size_x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}

extern "C" __global__ void probe_fma(float *out, const float *a, const float *b, int n) {
    int i = blockIdx.x * block_size_x + threadIdx.x;
    if (i >= n) return;
    float x0 = a[i], x1 = b[i], x2 = x0 + 1.0f, x3 = x1 + 1.0f;
    for (int k = 0; k < FMA_ITERS; k++) {
        x0 = x0 * 0.999999f + 1e-7f; x1 = x1 * 0.999999f + 1e-7f;
        x2 = x2 * 0.999999f + 1e-7f; x3 = x3 * 0.999999f + 1e-7f;
    }
    out[i] = x0 + x1 + x2 + x3;
}
"""
GPU_FMA_THREADS = 1 << 16


def measure_gpu_probes(make: Any, triad_n: int = TRIAD_N, fma_iterations: int = FMA_ITERATIONS) -> dict[str, Any]:
    """A device stream (two reads, one write per element) and FMA chains, through ``make(spec)``: the same
    runner factory (CuPy or PyCUDA, device, options) as the kernel's, so the probes see the device as it does.
    ``fma_iterations`` is scaled down by the threads that share it (a GPU runs the chains in parallel)."""
    from ..runners import KernelSpec

    iters = max(16, fma_iterations // 64)
    samples = {}
    for probe, name, n, params in (("bandwidth_gbs", "probe_stream", triad_n, {"block_size_x": 256}),
                                   ("compute_gflops", "probe_fma", GPU_FMA_THREADS,
                                    {"block_size_x": 256, "FMA_ITERS": iters})):
        args = [np.zeros(n, np.float32), np.ones(n, np.float32), np.ones(n, np.float32), np.int32(n)]
        runner = make(KernelSpec(GPU_PROBE_SOURCE, name, n, args, lang="cuda"))
        try:
            m = runner.evaluate(params)
        finally:
            runner.close()
        if not m.ok:
            raise RuntimeError(f"device probe {name!r} failed ({m.failure}): {m.detail[:500]}")
        samples[probe] = [float(x) for x in m.samples]
    work = {"bandwidth_gbs": 3 * 4 * triad_n, "compute_gflops": GPU_FMA_THREADS * 4 * 2 * iters}
    return {"probe": GPU_PROBE_VERSION, "triad_n": triad_n, "fma_iterations": fma_iterations,
            **{p: round(work[p] / (float(np.median(samples[p])) * 1e-3) / 1e9, 3) for p in PROBES},
            "samples_ms": {p: [float(f"{x:.5g}") for x in samples[p]] for p in PROBES}}
