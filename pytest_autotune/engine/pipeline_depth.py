"""How many proposals a compile-ahead pipeline keeps pending: just enough that the device never waits.

With P compile workers a pipeline can keep P + 1 proposals pending: one on
the device, one compiling on each worker. But each pending proposal was
chosen without the results still outstanding, and that speculation costs
search quality (``benchmarks/bench_batch.py``: ``auto`` scores 0.79 at batch
size 1, 0.75 at 8 and 0.69 at 16). It buys nothing where the device is the
bottleneck: when a candidate compiles faster than the device verifies and
times one (the recorded GEMM spaces: 35-77 ms against 470-930 ms), one
candidate compiling while another is timed keeps the device busy, and more
only blind the strategy.

So the depth follows what was measured: ``1 + ceil(compile / device)``
(enough compile workers busy that a compiled candidate is ready whenever
the device frees up), between 1 and P + 1; the medians over the evaluations
so far (compile over every candidate that compiled, device over those that
reached it), so a few outliers do not swing it. Until ``warmup``
evaluations are in it is P + 1: a search's first proposals are an initial
design that does not depend on results anyway.

With ``D`` devices (a cluster, :mod:`~pytest_autotune.engine.fleet`) each
device needs the same: ``D * (1 + ceil(compile / device))``, at most
``most`` (``D`` devices plus every compile worker of the cluster).
"""
from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from ..results import Measurement

__all__ = ["PipelineDepth", "split_stages", "stage_seconds"]


def split_stages(stages: Mapping[str, float]) -> tuple[float, float]:
    """(compile, device) seconds of the simulated clock's per-stage charge (every stage but compile is on
    the device)."""
    return float(stages["compile"]), float(sum(v for k, v in stages.items() if k != "compile"))


def stage_seconds(measurement: Measurement) -> tuple[float, float] | None:
    """(compile, device) seconds one evaluation cost, or None when the runner did not say.

    The simulated clock's charge where there is one (the replay runner), else the
    runner's own timings: ``compile_s``, and ``verify_s`` + ``bench_s`` on the device.
    """
    simulated = measurement.extra.get("simulated")
    if simulated is not None:
        return split_stages(simulated["stages_s"])
    timings = measurement.timings
    if "compile_s" not in timings and "bench_s" not in timings:
        return None
    return float(timings.get("compile_s", 0.0)), float(timings.get("verify_s", 0.0) + timings.get("bench_s", 0.0))


class PipelineDepth:
    """The pending depth for a pipeline of ``most - 1`` compile workers, from the stage costs measured so far."""

    def __init__(self, most: int, warmup: int = 3, devices: int = 1):
        for name, value in (("most", most), ("devices", devices)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        self.most = int(most)
        self.devices = int(devices)
        self.warmup = int(warmup)
        self._compile: list[float] = []
        self._device: list[float] = []
        self._observed = 0

    def observe(self, compile_s: float, device_s: float) -> None:
        """One evaluation's compile and device seconds (device 0: it never reached the device)."""
        self._observed += 1
        if compile_s > 0:
            self._compile.append(float(compile_s))
        if device_s > 0:
            self._device.append(float(device_s))

    def observe_measurement(self, measurement: Measurement) -> None:
        """:meth:`observe` what ``measurement`` cost, when its runner said (see :func:`stage_seconds`)."""
        spent = stage_seconds(measurement)
        if spent is not None:
            self.observe(*spent)

    @property
    def depth(self) -> int:
        if self._observed < self.warmup or not self._device:
            return self.most
        compile_s = float(np.median(self._compile)) if self._compile else 0.0
        per_device = 1 + math.ceil(compile_s / float(np.median(self._device)))
        return int(min(self.most, self.devices * per_device))

    def describe(self) -> dict[str, Any]:
        """What the depth rests on (for reports and benchmarks)."""
        return {"depth": self.depth, "most": self.most, "devices": self.devices, "evaluations": self._observed,
                "median_compile_s": float(np.median(self._compile)) if self._compile else None,
                "median_device_s": float(np.median(self._device)) if self._device else None}
