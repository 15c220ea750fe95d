"""Replay runner: answers with recorded measurements instead of running a kernel.

Behind the ordinary :class:`~pytest_autotune.runners.base.Runner` protocol, so
the whole engine (strategies, evaluator, regression gate, lockfile) runs
against brute-forced GPU data without a GPU::

    runner = ReplayRunner("../shared/data/spaces/kerneltuner/pnpoly_RTX_3090.json.gz")
    runner.evaluate({"between_method": 0, "block_size_x": 32, "tile_size": 1, "use_method": 0})

``scale`` multiplies every time (a slower or faster "kernel" for the
regression gate); ``noise`` multiplies each sample by an independent factor
``1 + noise * N(0, 1)`` (clipped at :data:`MIN_NOISE_FACTOR`), drawn from one
generator seeded by ``seed``, so the same sequence of evaluations gives the
same numbers. The measurement's value is the recorded value times ``scale``
times the mean noise factor of its samples, so with ``noise=0`` it is the
recorded value exactly and with noise it moves with its samples.

``clock`` puts the runner on a simulated clock (:mod:`pytest_autotune.simulation`):
a number of compile workers or a :class:`~pytest_autotune.simulation.Pipeline`.
Each evaluation is then charged its recorded costs (compile on a worker;
verification, the timed runs and framework overhead on the one device; the
host's own time between calls as measured), :meth:`ReplayRunner.prefetch`
starts compiling candidates ahead (the evaluator's ``prefetch`` hook), and
``measurement.extra["simulated"]`` holds what was charged and when its result
was known. ``runner.simulated_seconds`` is the simulated wall time so far.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..errors import AutotuneError
from ..datasets import RecordedSpace, SpaceDefinition, load_dataset
from ..measure.timing import EarlyStop
from ..results import FailureKind, Measurement
from .clock import CostCharger, Pipeline
from ..runners.base import Capabilities
from ..execution.device import DeviceInfo
from ..errors import BackendUnavailable, SpecError

__all__ = ["ReplayRunner", "ReplayError", "MIN_NOISE_FACTOR"]

MIN_NOISE_FACTOR = 1e-3
"""Noise never makes a time smaller than this fraction of the recorded one (times stay positive)."""


class ReplayError(AutotuneError, LookupError):
    """A query the recording cannot answer (profiling an unrecorded or failed configuration)."""


class ReplayRunner:
    """A runner that returns the recorded outcome of each configuration."""

    name = "replay"
    # keep_outputs is accepted (a recording has none to keep); prefetch and first_ready drive the simulated clock
    capabilities = Capabilities(keeps_outputs=True, stops_early=True, picks_ready=True, profiles=True)

    def __init__(self, recorded: RecordedSpace | str | os.PathLike, noise: float = 0.0, scale: float = 1.0,
                 seed: int | np.random.SeedSequence | np.random.Generator | None = None, *,
                 definition: str | os.PathLike | Mapping[str, Any] | SpaceDefinition | None = None,
                 clock: "int | Pipeline | None" = None):
        if isinstance(recorded, RecordedSpace):
            if definition is not None:
                raise SpecError("ReplayRunner: definition= applies only when the recording is given as a path")
            self.recorded = recorded
        elif isinstance(recorded, (str, os.PathLike)):
            self.recorded = load_dataset(Path(recorded), definition)
        else:
            raise SpecError(f"ReplayRunner: recorded must be a RecordedSpace or a path, got {type(recorded).__name__}")
        try:
            noise, scale = float(noise), float(scale)
        except (TypeError, ValueError):
            raise SpecError(f"ReplayRunner: noise and scale must be numbers, got {noise!r} and {scale!r}") from None
        if not (math.isfinite(noise) and noise >= 0):
            raise SpecError(f"ReplayRunner: noise must be a finite number >= 0, got {noise}")
        if not (math.isfinite(scale) and scale > 0):
            raise SpecError(f"ReplayRunner: scale must be a finite number > 0, got {scale}")
        self.noise = noise
        self.scale = scale
        self.seed = seed
        self._rng = np.random.default_rng(seed)
        self._names = set(self.recorded.space.names)
        self.charger: CostCharger | None = None
        if clock is not None:
            try:
                self.charger = CostCharger(self.recorded, clock)
            except ValueError as exc:
                raise SpecError(f"ReplayRunner: clock: {exc}") from None
        self.evaluations = 0
        self.profiles = 0
        self.closed = False

    # -- identity -------------------------------------------------------------------------------
    @property
    def source(self) -> str:
        rec = self.recorded
        return str(rec.path) if rec.path is not None else rec.name

    @property
    def can_profile(self) -> bool:
        """Whether the recording carries hardware counters (KTT files with profiling data)."""
        return self.recorded.counters is not None

    def device(self) -> DeviceInfo:
        rec = self.recorded
        return DeviceInfo(
            model=rec.device,
            kind="replay",
            versions={"recording_format": rec.format},
            properties={
                "recording": rec.name,
                "kernel": rec.kernel,
                "source": self.source,
                "configurations": rec.n_configs,
                "valid_configurations": rec.n_valid,
                "scale": self.scale,
                "noise": self.noise,
                "counters": sorted(rec.counters) if rec.counters is not None else [],
            },
        )

    def constants(self) -> dict[str, Any]:
        """No device limits: a recording's restrictions are already in its space."""
        return {}

    # -- evaluation -------------------------------------------------------------------------------
    def _explain_unknown(self, params: Mapping[str, Any]) -> str:
        space = self.recorded.space
        missing = [n for n in space.names if n not in params]
        extra = sorted(str(k) for k in params if k not in self._names)
        parts = []
        if missing:
            parts.append(f"lacks parameter(s) {missing}")
        if extra:
            parts.append(f"sets parameter(s) {extra} that the recording does not have")
        if not parts:
            for n in space.names:
                v = params[n]
                try:
                    known = v in space.values[n]
                except TypeError:
                    known = False
                if not known:
                    parts.append(f"{n}={v!r} is not among the recorded values {list(space.values[n])}")
        if not parts:
            parts.append("this combination of values is not among the recorded configurations")
        return f"configuration not in the recording {self.recorded.name} ({self.source}): " + "; ".join(parts)

    def _row(self, params: Mapping[str, Any]) -> int:
        if not isinstance(params, Mapping) or any(k not in self._names for k in params):
            return -1
        return self.recorded.space.find(params)

    def evaluate(self, params: Mapping[str, Any], keep_outputs: bool = False,
                 stop: EarlyStop | None = None) -> Measurement:
        """The recorded measurement of ``params`` (scaled, with noise); never raises for a bad configuration.

        ``keep_outputs`` is accepted for the tuner's sake; a recording has no kernel outputs to keep.
        With ``stop``, a configuration whose first recorded runs are hopeless returns only those
        runs (their median as the value), flagged ``early_stopped``.
        """
        self.evaluations += 1
        if not isinstance(params, Mapping):
            return Measurement.failed({}, FailureKind.INVALID,
                                      detail=f"parameters must be a mapping of name -> value, got {params!r}")
        row = self._row(params)
        if row < 0:
            return Measurement.failed(params, FailureKind.INVALID, detail=self._explain_unknown(params))
        m = self.recorded.measurement(row, params)
        if not m.ok:
            if self.charger is not None:
                m.extra["simulated"] = self.charger.charge(row)
            return m
        recorded = np.asarray(m.samples, dtype=np.float64)
        factors = np.ones(len(recorded))
        if self.noise > 0:
            factors = np.maximum(1.0 + self.noise * self._rng.standard_normal(len(recorded)), MIN_NOISE_FACTOR)
        m.samples = (recorded * self.scale * factors).tolist()
        m.value = float(m.value * self.scale * factors.mean())
        m.extra.update(scale=self.scale, noise=self.noise)
        if stop is not None and stop.hopeless(m.samples):
            m.samples = m.samples[:stop.runs]
            m.value, m.early_stopped = float(np.median(m.samples)), True
        if self.charger is not None:  # an early-stopped configuration is charged only the runs it made
            m.extra["simulated"] = self.charger.charge(row, iterations=len(m.samples) if m.early_stopped else None)
        return m

    # -- simulated clock ------------------------------------------------------------------------------
    def prefetch(self, configs: list[Mapping[str, Any]]) -> None:
        """Start compiling ``configs`` on the simulated compile workers (no-op without a clock)."""
        if self.charger is not None:
            self.charger.prefetch([self._row(p) if isinstance(p, Mapping) else -1 for p in configs])

    def first_ready(self, configs: list[Mapping[str, Any]]) -> int:
        """Which pending configuration the simulated device takes next: the first compiled (0 without a clock)."""
        if self.charger is None:
            return 0
        return self.charger.first_ready([self._row(p) if isinstance(p, Mapping) else -1 for p in configs])

    @property
    def simulated_seconds(self) -> float:
        """Simulated wall time so far (0 without a clock)."""
        return self.charger.pipeline.now if self.charger is not None else 0.0

    def profile(self, params: Mapping[str, Any]) -> dict[str, float]:
        """Recorded hardware counters (counter name -> value) of a configuration that ran.

        Raises :class:`~pytest_autotune.errors.BackendUnavailable` when the
        recording has no counters and :class:`ReplayError` for a configuration
        that is not recorded or has no counters (failed configurations never do).
        """
        self.profiles += 1
        if not self.can_profile:
            raise BackendUnavailable(f"replay of {self.source}: the recording has no hardware counters "
                                     f"(format {self.recorded.format!r}); only KTT output with ProfilingData has them")
        row = self._row(params)
        if row < 0:
            raise ReplayError(f"cannot profile: {self._explain_unknown(params)}")
        counters = self.recorded.counters_of(row)
        if not counters:
            kind = self.recorded.failures[row]
            why = f"it failed ({kind.value})" if kind is not None else "none were recorded for it"
            raise ReplayError(f"replay of {self.source}: configuration {dict(params)} has no hardware counters: {why}")
        return counters

    def close(self) -> None:
        self.closed = True

    def __enter__(self) -> "ReplayRunner":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"ReplayRunner({self.recorded.name!r}, device={self.recorded.device!r}, scale={self.scale}, "
                f"noise={self.noise}, evaluations={self.evaluations})")
