"""Profile-based searcher: hardware counters of the current configuration steer the next steps.

Method of Filipovič et al., *Using hardware performance counters to speed up
autotuning convergence on GPUs* (JPDC 160, 2022; KTT's profile-based
searcher). A model learnt beforehand on a space measured with counters
(possibly on another GPU or input) predicts each configuration's operation
counters (PC_ops) from its tuning parameters. The search then loops:

1. profile the current configuration (PC_stress and PC_ops, through the
   runner's ``profile``), and turn its counters into a bottleneck vector with
   the expert-system equations (:func:`~._counters.analyze_bottlenecks`);
2. turn the bottlenecks into required counter changes dPC
   (:func:`~._counters.compute_changes`);
3. score every unevaluated configuration c by
   ``sum_p dPC_p * (pc_p(c) - pc_p(a)) / (pc_p(c) + pc_p(a))`` with the model's
   predictions for c and for the profiled configuration a, and normalise the
   scores into weights (``(1 + s/s_max)^8`` above 0, ``(1 - s/s_min)^8`` between
   gamma = -0.25 and 0, else 0.0001);
4. take ``batch`` (n = 5) weighted-random steps without profiling, then
   profile the fastest of them and go to 2.

The first configuration is random (random again until one runs). When no
configuration of a batch runs, the previous profile stays the reference.
``reference="best"`` profiles the best configuration found so far instead of
the batch's fastest (the paper and KTT use the batch's fastest, the default).
Every configuration is profiled at most once; profiling re-runs a measured
configuration and costs no evaluation of the budget.

The strategy needs counters: it sets ``requires_profiling``, so the tuner
hands it the runner's ``profile`` (and refuses a runner without one). The
model comes from ``model`` (a file written by
:meth:`~._counters.CounterModel.save`, or a :class:`~._counters.CounterModel`)
or is trained at start-up from ``train`` (a KTT file with counters).
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

import numpy as np

from ._counters import (DEFAULT_CUTOFF, DEFAULT_EXPONENT, DEFAULT_INST_REACTION, CounterModel, CounterModelError,
                        analyze_bottlenecks, compute_changes, normalise_scores, score_candidates, train_model)
from .base import Batch, SearchGenerator, Strategy, StrategyError, check
from .registry import register

# A profiler that fails this many configurations in a row, never having succeeded, is broken, not unlucky.
MAX_PROFILE_FAILURES = 3


def _is_path(v: Any) -> bool:
    return isinstance(v, (str, os.PathLike))


@register
class ProfileSearch(Strategy):
    """Weighted random walk steered by the bottlenecks that hardware counters reveal."""

    name = "profile"
    requires_profiling = True

    @dataclass
    class Hyperparameters:
        model: Union[str, os.PathLike, CounterModel, None] = None  # saved model file (JSON) or a CounterModel
        train: Union[str, os.PathLike, None] = None  # KTT file with counters to train the model on at start-up
        batch: int = 5  # weighted-random steps between two profiled configurations (n)
        exponent: float = DEFAULT_EXPONENT  # e of the score normalisation
        cutoff: float = DEFAULT_CUTOFF  # gamma: negative scores at or below it get the floor weight
        inst_reaction: float = DEFAULT_INST_REACTION  # instruction bottlenecks count only above it
        cores: Union[int, None] = None  # CUDA cores of the GPU searched on (thread-parallelism term)
        reference: str = "batch"  # profile the batch's fastest ("batch", the paper) or the best so far ("best")
        max_depth: Union[int, None] = None  # depth limit of the trees trained from ``train``

        def validate(self) -> None:
            check((self.model is None) != (self.train is None), "model",
                  "give exactly one of 'model' (a saved counter model file) and 'train' (a KTT file with "
                  "hardware counters to train one on)")
            if self.model is not None:
                check(isinstance(self.model, CounterModel) or _is_path(self.model), "model",
                      f"must be the path of a saved counter model or a CounterModel, got {type(self.model).__name__}")
                if _is_path(self.model):
                    check(Path(self.model).is_file(), "model", f"no counter model file at {os.fspath(self.model)}")
            if self.train is not None:
                check(_is_path(self.train), "train", f"must be the path of a KTT file, got {type(self.train).__name__}")
                check(Path(self.train).is_file(), "train", f"no file at {os.fspath(self.train)}")
            check(isinstance(self.batch, int) and not isinstance(self.batch, bool) and self.batch >= 1, "batch",
                  "must be an integer >= 1")
            check(isinstance(self.exponent, (int, float)) and not isinstance(self.exponent, bool)
                  and 0 < self.exponent <= 64, "exponent", "must be a number in (0, 64]")
            check(isinstance(self.cutoff, (int, float)) and not isinstance(self.cutoff, bool) and self.cutoff < 0,
                  "cutoff", "must be a negative number")
            check(isinstance(self.inst_reaction, (int, float)) and not isinstance(self.inst_reaction, bool)
                  and 0 <= self.inst_reaction < 1, "inst_reaction", "must be a number in [0, 1)")
            check(self.cores is None or (isinstance(self.cores, int) and not isinstance(self.cores, bool)
                                         and self.cores > 0), "cores", "must be a positive integer or None")
            check(self.reference in ("batch", "best"), "reference", "must be 'batch' or 'best'")
            check(self.max_depth is None or (isinstance(self.max_depth, int) and not isinstance(self.max_depth, bool)
                                             and self.max_depth >= 1), "max_depth",
                  "must be a positive integer or None")

    def __init__(self, space: Any, seed: int | None = None, **hyperparameters: Any):
        super().__init__(space, seed, **hyperparameters)
        self.model_: CounterModel | None = None
        self.predictions: np.ndarray | None = None  # model predictions for every row (rows x model counters)
        self.profiles: dict[int, dict[str, float]] = {}  # row -> measured counters
        self.profile_failures: dict[int, str] = {}  # row -> why profiling it failed
        self.trace: list[dict[str, Any]] = []  # one entry per profiled reference: row, bottlenecks
        # Load (or train) the model and predict every row now: a wrong model file or a model that does not fit
        # the space fails here, before any evaluation, and the one-off cost stays out of the search steps.
        self.load_model()

    def hyperparameters(self) -> dict[str, Any]:
        """JSON-ready hyperparameters (paths as strings; an in-memory model described by its training source)."""
        hp = {f.name: getattr(self.hp, f.name) for f in dataclasses.fields(self.hp)}
        for key in ("model", "train"):
            if isinstance(hp[key], CounterModel):
                hp[key] = f"<CounterModel trained on {hp[key].metadata.get('source') or 'unknown data'}>"
            elif hp[key] is not None:
                hp[key] = os.fspath(hp[key])
        return hp

    # -- model ----------------------------------------------------------------------------------------
    def load_model(self) -> CounterModel:
        """The counter model of this search (loaded or trained once, then kept)."""
        if self.model_ is None:
            hp = self.hp
            try:
                if isinstance(hp.model, CounterModel):
                    model = hp.model
                elif hp.model is not None:
                    model = CounterModel.load(hp.model)
                else:
                    model = train_model(hp.train, max_depth=hp.max_depth, seed=0)
                self.predictions = model.predict_space(self.space)
            except (CounterModelError, ValueError, OSError) as exc:  # DatasetError is a ValueError
                raise StrategyError(f"strategy 'profile': {exc}") from None
            self.model_ = model
        return self.model_

    # -- profiling ------------------------------------------------------------------------------------
    def _profile(self, row: int) -> dict[str, float] | None:
        """Measured counters of ``row`` (cached), or None when the profiler could not read them."""
        if row in self.profiles:
            return self.profiles[row]
        if row in self.profile_failures:
            return None
        try:
            counters = self.profiler(self.space.get(row))  # type: ignore[misc]
        except Exception as exc:
            from ..errors import BackendUnavailable

            if isinstance(exc, BackendUnavailable):
                raise
            self.profile_failures[row] = f"{type(exc).__name__}: {exc}"
            if not self.profiles and len(self.profile_failures) >= MAX_PROFILE_FAILURES:
                raise StrategyError(f"strategy 'profile': profiling failed for {len(self.profile_failures)} "
                                    f"configurations and never succeeded; last error: {self.profile_failures[row]}"
                                    ) from exc
            return None
        if not counters:
            self.profile_failures[row] = "the profiler returned no counters"
            return None
        self.profiles[row] = {str(k): float(v) for k, v in counters.items()}
        return self.profiles[row]

    # -- scoring ----------------------------------------------------------------------------------------
    def weights(self, reference: int, counters: dict[str, float], candidates: np.ndarray) -> np.ndarray:
        """Sampling weights of ``candidates`` (rows) given the profiled ``reference`` row and its counters."""
        model = self.load_model()
        hp = self.hp
        bottlenecks = analyze_bottlenecks(counters, cores=hp.cores, inst_reaction=hp.inst_reaction)
        changes = compute_changes(bottlenecks, inst_reaction=hp.inst_reaction)
        self.trace.append({"row": int(reference), "bottlenecks": bottlenecks})
        assert self.predictions is not None
        raw = score_candidates(changes, model.counters, self.predictions[reference], self.predictions[candidates])
        return normalise_scores(raw, exponent=hp.exponent, cutoff=hp.cutoff)

    def _unevaluated(self) -> np.ndarray:
        mask = np.ones(len(self.space), dtype=bool)
        if self.observed:
            mask[np.fromiter(self.observed, dtype=np.int64, count=len(self.observed))] = False
        return np.flatnonzero(mask)

    # -- the search ---------------------------------------------------------------------------------------
    def search(self) -> SearchGenerator:
        if self.profiler is None:
            raise StrategyError("strategy 'profile' needs hardware counters: run it through tune() with a runner "
                                "that can profile (the replay runner on a recording with counters, or a CUDA runner "
                                "with Nsight Compute), or set strategy.profiler = runner.profile")
        self.load_model()
        n = len(self.space)
        reference: int | None = None
        ref_counters: dict[str, float] | None = None

        # 1. a random configuration that runs, profiled
        while ref_counters is None:
            left = self.random_unevaluated(1)
            if not left:
                return
            row = left[0]
            # batching, wait for this one's result (a batch of one): a stand-in would never profile
            value = (yield Batch([row]))[0] if self.batch_size > 1 else (yield row)
            if value is not None:
                counters = self._profile(row)
                if counters is not None:
                    reference, ref_counters = row, counters

        while len(self.observed) < n:
            # 2.-3. score every unevaluated configuration against the profiled reference
            candidates = self._unevaluated()
            if candidates.size == 0:
                return
            w = self.weights(reference, ref_counters, candidates)  # type: ignore[arg-type]
            k = min(self.hp.batch, candidates.size)
            chosen = self.rng.choice(candidates, size=k, replace=False, p=w / w.sum())
            # 4. n steps without profiling
            batch: list[tuple[float, int]] = []
            # batching, the n steps go out together: none of them depends on another's result
            values = (yield Batch([int(r) for r in chosen])) if self.batch_size > 1 else None
            for i, row in enumerate(chosen):
                value = values[i] if values is not None else (yield int(row))
                if value is not None:
                    batch.append((value, int(row)))
            # the next reference: the batch's fastest (or the best so far) that can be profiled
            if self.hp.reference == "best":
                ranked = sorted((v, r) for r, v in self.observed.items() if v is not None)
            else:
                ranked = sorted(batch)
            for _, row in ranked:
                if row == reference:
                    break
                counters = self._profile(row)
                if counters is not None:
                    reference, ref_counters = row, counters
                    break
            # no configuration of the batch ran or could be profiled: keep the previous reference
