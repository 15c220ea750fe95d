"""Timing: warm-up, repeated runs, robust statistics, and the regression test.

Runners supply the clock (CUDA events on a GPU, ``perf_counter_ns`` around a
CPU call); this module decides how many runs to take, summarises them and
compares two sample sets for the CI gate.

Why the :class:`MeasureOptions` defaults (two measurements of one
configuration should agree closely, at a cost a search can afford):

* ``warmup=1`` plus the verification run, which every runner does first and
  which doubles as a warm-up: two discarded runs absorb first-launch effects
  (module load, page faults, cold instruction/data caches, clock ramp-up).
* ``objective="median"``: one preempted or throttled run moves the mean by
  its full excess but leaves the median alone (breakdown point 50 %).
* ``min_iterations=7`` (the Kernel Tuner default, so comparisons are like for
  like) bounds the cost of slow kernels; with a median of 7 up to 3 outliers
  are tolerated.
* ``max_iterations=32`` within ``time_budget_s=0.25``: fast kernels (the
  common case: microseconds) get 32 samples for almost no time, which halves
  the standard error of the median relative to 7 (sqrt(32/7) ~ 2.1) and gives
  the Mann-Whitney gate enough samples for small p-values.
* ``flush_l2=False``: a kernel is usually called with warm caches in its
  application; flushing is an opt-in for kernels whose inputs are cold there.
* ``watchdog_s=10``: no single launch of a tunable kernel should take 10 s;
  the limit is per launch (a heartbeat restarts it), not per configuration.
* ``early_stop=True``: during a search, a configuration whose first
  :data:`EARLY_STOP_RUNS` timed runs are all slower than
  :data:`EARLY_STOP_FACTOR` times the best objective so far stops being
  timed (:class:`EarlyStop`; k=4, c=2, the evidence is at :data:`EARLY_STOP_FACTOR`).
* ``output_cap=16384``: an isolated worker forwards at most 8 KiB from the
  start and 8 KiB from the end of what the kernel prints during one
  evaluation (the rest is counted): enough for a compiler's or a runtime's
  error, while a kernel printing 40 MB per call once made a 1.68 GB log.
* ``worker_memory="auto"``: an isolated worker that holds more than half of
  the machine's memory (shared among pytest-xdist workers) is stopped and
  its configuration fails as ``resources`` (:mod:`.bounds`).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from time import perf_counter
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .bounds import check_memory_limit, parse_size

OBJECTIVES = ("median", "min", "mean")


@dataclass(frozen=True)
class MeasureOptions:
    """How one configuration is timed (see the module docstring for the defaults)."""

    warmup: int = 1  # extra discarded runs after the verification run
    min_iterations: int = 7  # timed runs always taken
    max_iterations: int = 32  # timed runs at most
    time_budget_s: float = 0.25  # stop adding runs past min_iterations after this long
    objective: str = "median"  # "median" | "min" | "mean" of the samples
    flush_l2: bool = False  # overwrite a buffer larger than the last-level cache before each run
    watchdog_s: float = 10.0  # a launch without progress for this long is a TIMEOUT
    compile_timeout_s: float = 300.0  # same, while compiling
    early_stop: bool = True  # a search may stop timing a hopeless configuration (see EarlyStop)
    output_cap: int = 16384  # bytes of a worker's output kept per evaluation (half head, half tail)
    worker_memory: str | int | None = "auto"  # an isolated worker's memory limit (see measure/bounds.py)

    def __post_init__(self) -> None:
        if self.warmup < 0:
            raise ValueError("warmup must be >= 0")
        if self.min_iterations < 1:
            raise ValueError("min_iterations must be >= 1")
        if self.max_iterations < self.min_iterations:
            raise ValueError("max_iterations must be >= min_iterations")
        if self.time_budget_s < 0:
            raise ValueError("time_budget_s must be >= 0")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {OBJECTIVES}, got {self.objective!r}")
        if self.watchdog_s <= 0 or self.compile_timeout_s <= 0:
            raise ValueError("watchdog_s and compile_timeout_s must be positive")
        try:
            object.__setattr__(self, "output_cap", parse_size(self.output_cap))  # "64KiB" from a marker
        except ValueError as exc:
            raise ValueError(f"output_cap: {exc}") from None
        try:
            check_memory_limit(self.worker_memory)
        except ValueError as exc:
            raise ValueError(f"worker_memory: {exc}") from None

    @classmethod
    def coerce(cls, value: "MeasureOptions | Mapping[str, Any] | None") -> "MeasureOptions":
        """Accept an instance, a dict of overrides (e.g. from a pytest marker) or None."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, Mapping):
            unknown = set(value) - set(cls.__dataclass_fields__)
            if unknown:
                raise ValueError(f"unknown measure option(s): {', '.join(sorted(unknown))}")
            return cls(**value)
        raise TypeError(f"measure options must be MeasureOptions or a dict, got {type(value).__name__}")

    def with_(self, **changes: Any) -> "MeasureOptions":
        return replace(self, **changes)


@dataclass
class TimingStats:
    """Summary of all timed runs of one configuration, in milliseconds."""

    median: float
    mean: float
    min: float
    max: float
    iqr: float  # interquartile range: the spread the gate and reports show
    n: int
    samples: list[float] = field(default_factory=list)

    @classmethod
    def untimed(cls) -> "TimingStats":
        """The stats of a result nothing timed (a compile check, a static verdict): NaN, no samples."""
        nan = float("nan")
        return cls(median=nan, mean=nan, min=nan, max=nan, iqr=nan, n=0, samples=[])

    @classmethod
    def from_samples(cls, samples: Sequence[float]) -> "TimingStats":
        data = np.asarray(samples, dtype=float)
        if data.size == 0:
            raise ValueError("no samples")
        q1, med, q3 = np.percentile(data, [25, 50, 75])
        return cls(
            median=float(med),
            mean=float(data.mean()),
            min=float(data.min()),
            max=float(data.max()),
            iqr=float(q3 - q1),
            n=int(data.size),
            samples=[float(x) for x in data],
        )

    def objective(self, name: str = "median") -> float:
        if name not in OBJECTIVES:
            raise ValueError(f"objective must be one of {OBJECTIVES}, got {name!r}")
        return float(getattr(self, name))

    def as_dict(self, samples: bool = True) -> dict[str, Any]:
        data = asdict(self)
        if not samples:
            data.pop("samples")
        return data


def time_runs(
    run: Callable[[], float],
    options: MeasureOptions,
    *,
    prepare: Callable[[], None] | None = None,
    on_run: Callable[[], None] | None = None,
    stop: EarlyStop | None = None,
) -> list[float]:
    """Warm up, then repeat ``prepare(); run()`` until the count or the budget is met.

    ``run`` returns the duration of one run in ms, measured by the backend's
    own clock; ``prepare`` (restore outputs, flush caches) is outside that
    clock but inside the time budget. ``on_run`` is the watchdog heartbeat.
    With ``stop`` (and ``options.early_stop``), timing ends after
    ``stop.runs`` runs when they are all hopeless.
    """
    if not options.early_stop:
        stop = None
    for _ in range(options.warmup):
        if prepare is not None:
            prepare()
        run()
        if on_run is not None:
            on_run()
    samples: list[float] = []
    start = perf_counter()
    while len(samples) < options.max_iterations:
        if prepare is not None:
            prepare()
        samples.append(float(run()))
        if on_run is not None:
            on_run()
        if stop is not None and len(samples) == stop.runs and stop.hopeless(samples):
            break
        if len(samples) >= options.min_iterations and perf_counter() - start >= options.time_budget_s:
            break
    return samples


# ----------------------------------------------------------------------------
# Early stopping of hopeless configurations
# ----------------------------------------------------------------------------
EARLY_STOP_RUNS = 4
"""Timed runs a configuration gets before it may be stopped (``k``; see :data:`EARLY_STOP_FACTOR`)."""

EARLY_STOP_FACTOR = 2.0
"""A configuration whose first ``k`` runs are all above this multiple of the best so far is hopeless (``c``).

Chosen from the per-run times of the 13 recorded GPU spaces that keep them
(``../shared/data/spaces``), replayed along the strategies' real evaluation
orders by ``benchmarks/bench_early_stop.py`` (``results/early_stop.json``).
The danger is a configuration whose first runs are slower than its later
ones: the fastest of its first k runs lies, at worst over every configuration
of every space, 2.85x (k=2), 2.06x (k=3), 1.32x (k=4) above its own recorded
time (AMD W6600: the first three runs of the optimum itself are 3.4x, 2.3x
and 2.1x its later ones, a clock ramp-up; our runners discard a warm-up and
the verification run first, the recordings do not). A configuration within
5% of the best can only be stopped when c < 1.05 x that ratio, whatever the
order. The rule keeps a margin of at least 1.4 over that bound (for noise
in the best so far and kernels ramping up worse than any recorded one) and,
among such rules, saves the most of what our own timing loop would run
(at least 7 runs, up to 32 within 0.25 s): k=4, c=2 (margin 1.44) saves more
than k=3, c=3 (1.39) or k=5, c=2 (1.44), and stops no configuration within
5% of the best on any recorded space and order.
"""


@dataclass(frozen=True)
class EarlyStop:
    """Stop timing once the first ``runs`` timed runs are all above ``above_ms`` (the configuration is hopeless).

    Built per evaluation from the best objective so far (:meth:`after_best`);
    it travels to the runner (and its worker process), so it is plain data.
    """

    runs: int
    above_ms: float

    def __post_init__(self) -> None:
        if self.runs < 1:
            raise ValueError("EarlyStop.runs must be >= 1")

    @classmethod
    def after_best(cls, best: float | None, runs: int = EARLY_STOP_RUNS,
                   factor: float = EARLY_STOP_FACTOR) -> "EarlyStop | None":
        """The cutoff ``factor * best`` after ``runs`` runs; ``None`` while nothing valid was measured."""
        if best is None or not math.isfinite(best) or best <= 0:
            return None
        return cls(runs, factor * float(best))

    def hopeless(self, samples: Sequence[float]) -> bool:
        """Whether the first ``runs`` samples are all above the cutoff (needs at least ``runs`` samples)."""
        return len(samples) >= self.runs and min(samples[:self.runs]) > self.above_ms


# ----------------------------------------------------------------------------
# Regression test used by the CI gate
# ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Comparison:
    """Outcome of :func:`compare_samples`: the gate fails on ``verdict == "slower"``."""

    verdict: str  # "slower" | "faster" | "unchanged"
    change_pct: float  # (new median - locked median) / locked median * 100
    p_value: float  # one-sided Mann-Whitney U p-value in the direction of the change
    locked_median: float
    new_median: float
    tolerance_pct: float
    alpha: float
    n_locked: int
    n_new: int

    @property
    def slower(self) -> bool:
        return self.verdict == "slower"

    @property
    def faster(self) -> bool:
        return self.verdict == "faster"

    def describe(self) -> str:
        return (
            f"{self.verdict}: {self.change_pct:+.1f}% (median {self.new_median:.4g} ms vs "
            f"{self.locked_median:.4g} ms locked; tolerance {self.tolerance_pct:g}%, "
            f"p={self.p_value:.3g}, alpha={self.alpha:g}, n={self.n_new}/{self.n_locked})"
        )


def faster_half(samples: Sequence[float]) -> list[float]:
    """The faster half of the samples (at least 4): what is left after the time others took."""
    ordered = sorted(samples)
    return ordered[:max(4, (len(ordered) + 1) // 2)]


OFFCPU_MS = 0.02
"""A timed run off its CPU longer than this (plus :data:`OFFCPU_SHARE` of the run) was preempted: another task
ran on its CPU, or the host took the CPU, during the run. Reading the thread's CPU time around a run costs a few
microseconds outside the timed window, so an undisturbed run reads at most about 0.01 ms off."""
OFFCPU_SHARE = 0.01
MIN_UNPREEMPTED = 4  # unpreempted runs a round needs to be judged on them alone (faster_half keeps 4)


def unpreempted(samples: Sequence[float], offcpu: Sequence[float] | None) -> tuple[list[float], int]:
    """The runs no other task interrupted, and how many were left out. A preempted run measured the neighbour's
    time slice, not the kernel: on the 2-core CI host one running beside a spinner on its CPU read 8 ms more
    than the kernel's 1.7 ms. Where too few runs were undisturbed (the CPU shared throughout) every run is kept,
    so the round is judged as it was measured. ``offcpu`` aligned with ``samples`` (None: no accounting)."""
    mask = unpreempted_mask(samples, offcpu)
    if mask is None:
        return list(samples), 0
    return [x for x, keep in zip(samples, mask) if keep], mask.count(False)


def unpreempted_mask(samples: Sequence[float], offcpu: Sequence[float] | None) -> list[bool] | None:
    """Which runs :func:`unpreempted` keeps (None: every run, no accounting or too few undisturbed runs)."""
    hit = interrupted(samples, offcpu)
    if hit is None or hit.count(False) < MIN_UNPREEMPTED:
        return None
    return [not h for h in hit]


def interrupted(samples: Sequence[float], offcpu: Sequence[float] | None) -> list[bool] | None:
    """Which runs another task interrupted (off their CPU beyond :data:`OFFCPU_MS` + :data:`OFFCPU_SHARE`);
    None without accounting aligned with ``samples``."""
    if not offcpu or len(offcpu) != len(samples):
        return None
    return [off > OFFCPU_MS + OFFCPU_SHARE * x for x, off in zip(samples, offcpu)]


def compare_samples(
    locked_samples: Sequence[float],
    new_samples: Sequence[float],
    tolerance: float = 5.0,
    alpha: float = 0.05,
) -> Comparison:
    """Is ``new`` slower, faster or unchanged relative to ``locked``?

    ``tolerance`` is in percent of the locked median. "slower" needs both a
    practically relevant change (median up by more than ``tolerance``) and a
    statistically significant one (one-sided Mann-Whitney U, p < ``alpha``);
    "faster" is symmetric; anything else is "unchanged". The rank test needs
    no normality and is robust to outliers; with fewer than ~4 samples per
    side it cannot reach small p-values, so such a gate never fails.
    """
    from scipy.stats import mannwhitneyu

    old = np.asarray(locked_samples, dtype=float)
    new = np.asarray(new_samples, dtype=float)
    if old.size == 0 or new.size == 0:
        raise ValueError("compare_samples needs at least one sample on each side")
    if tolerance < 0 or not 0 < alpha < 1:
        raise ValueError("tolerance must be >= 0 and 0 < alpha < 1")
    old_med, new_med = float(np.median(old)), float(np.median(new))
    if old_med > 0:
        change = (new_med - old_med) / old_med * 100.0
    else:
        change = 0.0 if new_med == old_med else math.copysign(math.inf, new_med - old_med)
    alternative = "greater" if change >= 0 else "less"
    p = float(mannwhitneyu(new, old, alternative=alternative).pvalue)
    if math.isnan(p):
        p = 1.0
    verdict = "unchanged"
    if change > tolerance and p < alpha:
        verdict = "slower"
    elif change < -tolerance and p < alpha:
        verdict = "faster"
    return Comparison(
        verdict=verdict,
        change_pct=float(change),
        p_value=p,
        locked_median=old_med,
        new_median=new_med,
        tolerance_pct=float(tolerance),
        alpha=float(alpha),
        n_locked=int(old.size),
        n_new=int(new.size),
    )
