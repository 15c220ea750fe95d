"""Timing statistics, the run loop, and the regression test of the CI gate."""
from __future__ import annotations

import time

import numpy as np
import pytest
from scipy.stats import mannwhitneyu

from pytest_autotune.measure.timing import Comparison, MeasureOptions, TimingStats, compare_samples, time_runs


# -- statistics -----------------------------------------------------------------
def test_timing_stats_from_samples():
    stats = TimingStats.from_samples([3.0, 1.0, 100.0, 2.0, 4.0])
    assert stats.median == 3.0
    assert stats.mean == pytest.approx(22.0)
    assert stats.min == 1.0 and stats.max == 100.0
    assert stats.iqr == pytest.approx(2.0)  # 75th (4) - 25th (2) percentile
    assert stats.n == 5
    assert stats.samples == [3.0, 1.0, 100.0, 2.0, 4.0]  # every sample kept, in order


def test_objectives_select_the_statistic():
    stats = TimingStats.from_samples([1.0, 2.0, 9.0])
    assert stats.objective("median") == 2.0
    assert stats.objective("min") == 1.0
    assert stats.objective("mean") == 4.0
    with pytest.raises(ValueError):
        stats.objective("p99")
    with pytest.raises(ValueError):
        TimingStats.from_samples([])
    assert "samples" not in stats.as_dict(samples=False)


def test_measure_options_validation_and_coercion():
    assert MeasureOptions.coerce(None) == MeasureOptions()
    opts = MeasureOptions.coerce({"min_iterations": 3, "max_iterations": 5, "objective": "min"})
    assert (opts.min_iterations, opts.max_iterations, opts.objective) == (3, 5, "min")
    assert MeasureOptions.coerce(opts) is opts
    with pytest.raises(ValueError, match="unknown"):
        MeasureOptions.coerce({"iterations": 7})
    with pytest.raises(ValueError):
        MeasureOptions(min_iterations=10, max_iterations=5)
    with pytest.raises(ValueError):
        MeasureOptions(objective="p99")
    with pytest.raises(ValueError):
        MeasureOptions(watchdog_s=0)
    with pytest.raises(TypeError):
        MeasureOptions.coerce(7)


# -- run loop -------------------------------------------------------------------
class Recorder:
    def __init__(self, duration_s: float = 0.0):
        self.events: list[str] = []
        self.duration_s = duration_s

    def prepare(self):
        self.events.append("prepare")

    def run(self):
        self.events.append("run")
        if self.duration_s:
            time.sleep(self.duration_s)
        return float(len(self.events))


def test_time_runs_warmup_discarded_and_prepare_before_every_run():
    rec = Recorder()
    beats = []
    opts = MeasureOptions(warmup=2, min_iterations=4, max_iterations=4, time_budget_s=0)
    samples = time_runs(rec.run, opts, prepare=rec.prepare, on_run=lambda: beats.append(1))
    assert len(samples) == 4
    assert rec.events == ["prepare", "run"] * 6  # 2 warm-up + 4 timed
    assert samples == [6.0, 8.0, 10.0, 12.0]  # warm-up values are not in the samples
    assert len(beats) == 6  # heartbeat after every launch, warm-up included


def test_time_runs_fast_kernel_fills_max_iterations():
    opts = MeasureOptions(warmup=0, min_iterations=3, max_iterations=50, time_budget_s=10.0)
    assert len(time_runs(lambda: 1.0, opts)) == 50


def test_time_runs_slow_kernel_stops_at_the_budget_but_not_below_min():
    rec = Recorder(duration_s=0.01)
    opts = MeasureOptions(warmup=0, min_iterations=2, max_iterations=1000, time_budget_s=0.05)
    samples = time_runs(rec.run, opts)
    assert 2 <= len(samples) <= 10
    rec = Recorder(duration_s=0.01)
    opts = MeasureOptions(warmup=0, min_iterations=5, max_iterations=1000, time_budget_s=0.0)
    assert len(time_runs(rec.run, opts)) == 5


# -- regression test --------------------------------------------------------------
def _samples(seed, center, n=30, spread=0.01):
    return list(np.random.default_rng(seed).normal(center, spread, n))


def test_clearly_slower_is_slower():
    locked, new = _samples(1, 1.0), _samples(2, 1.2)
    result = compare_samples(locked, new, tolerance=5.0, alpha=0.01)
    assert isinstance(result, Comparison)
    assert result.verdict == "slower" and result.slower
    assert result.change_pct == pytest.approx(20.0, abs=1.5)
    assert result.p_value < 1e-6
    expected_p = mannwhitneyu(new, locked, alternative="greater").pvalue
    assert result.p_value == pytest.approx(expected_p)
    assert "slower" in result.describe() and "%" in result.describe()


def test_clearly_faster_is_faster():
    result = compare_samples(_samples(1, 1.0), _samples(2, 0.8), tolerance=5.0, alpha=0.01)
    assert result.verdict == "faster" and result.faster
    assert result.change_pct == pytest.approx(-20.0, abs=1.5)
    assert result.p_value < 1e-6


def test_identical_distributions_are_unchanged():
    result = compare_samples(_samples(1, 1.0), _samples(2, 1.0), tolerance=5.0, alpha=0.05)
    assert result.verdict == "unchanged"
    assert abs(result.change_pct) < 2.0
    same = compare_samples([1.0] * 10, [1.0] * 10)
    assert same.verdict == "unchanged" and same.change_pct == 0.0 and same.p_value == 1.0


def test_significant_but_within_tolerance_is_unchanged():
    locked, new = _samples(1, 1.00, spread=0.001), _samples(2, 1.02, spread=0.001)
    result = compare_samples(locked, new, tolerance=5.0, alpha=0.05)
    assert result.p_value < 1e-6  # the shift is real...
    assert result.verdict == "unchanged"  # ...but smaller than the tolerance
    assert compare_samples(locked, new, tolerance=1.0, alpha=0.05).verdict == "slower"


def test_large_change_without_evidence_is_unchanged():
    result = compare_samples([1.0], [2.0], tolerance=5.0, alpha=0.05)
    assert result.change_pct == pytest.approx(100.0)
    assert result.p_value >= 0.05
    assert result.verdict == "unchanged"


def test_noisy_samples_need_significance_not_just_a_median_shift():
    # medians differ by +16% (beyond tolerance) but 8 noisy samples per side give p ~ 0.04
    locked = _samples(3, 1.0, n=8, spread=0.2)
    new = _samples(4, 1.1, n=8, spread=0.2)
    strict = compare_samples(locked, new, tolerance=5.0, alpha=0.01)
    assert strict.change_pct > 5.0
    assert 0.01 < strict.p_value < 0.05
    assert strict.verdict == "unchanged"
    assert compare_samples(locked, new, tolerance=5.0, alpha=0.05).verdict == "slower"


def test_compare_samples_argument_checks():
    with pytest.raises(ValueError):
        compare_samples([], [1.0])
    with pytest.raises(ValueError):
        compare_samples([1.0], [1.0], alpha=0)
    with pytest.raises(ValueError):
        compare_samples([1.0], [1.0], tolerance=-1)
