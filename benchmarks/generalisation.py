"""Leave-one-out reporting for the strategy benchmark: scores on kernel families and GPUs a choice never saw.

A strategy with fixed hyperparameters scores the same on a space whether or
not the space is "held out"; a strategy whose hyperparameters are *fitted on
spaces* (here: :func:`selector`, which picks, from the candidate strategies
of the run, the one with the best mean score on the training spaces) must be
scored only on spaces it was not fitted on. Two cross-validations:

* leave one kernel family out (:func:`family_of`): convolution (the T4
  convolution of six GPUs *and* KTT's convolution: the same 2-D convolution,
  another implementation and parameter set, so fitting on one and scoring on
  the other would not be an unseen kernel), GEMM, pnpoly;
* leave one GPU out (:func:`gpu_of`): the 10 GPUs, each fold every space
  recorded on that GPU, whatever its kernel.

Every space is held out exactly once per cross-validation; a strategy's
leave-one-out score is the mean over spaces of its score when held out (for
a fixed strategy: its pooled mean).
"""
from __future__ import annotations

import re
from typing import Any, Callable, Mapping, Sequence

import numpy as np

FAMILIES = ("convolution", "gemm", "pnpoly")


def family_of(space: str) -> str:
    """Kernel family of a recorded space's name (KTT's convolution joins the T4 convolution)."""
    name = space.lower()
    if name.startswith("gemm"):
        return "gemm"
    if name.startswith("pnpoly"):
        return "pnpoly"
    if "convolution" in name:
        return "convolution"
    return name.split("_", 1)[0]


_GPU_ALIASES = {"2080ti": "RTX_2080_Ti", "3090": "RTX_3090", "titan": "RTX_Titan", "3060_laptop": "RTX_3060_laptop"}


def gpu_of(space: str) -> str:
    """The GPU a space was recorded on, spelt one way for every format (KTT's ``2080Ti`` is ``RTX_2080_Ti``)."""
    m = re.match(r"(?:gemm|pnpoly|convolution_milo|KTConvolutionOutput)_(.+)$", space)
    gpu = m.group(1) if m else space.rsplit("_", 1)[-1]
    key = gpu.lower().removeprefix("rtx_").replace("_ti", "ti")
    return _GPU_ALIASES.get(key, gpu)


GROUPINGS: dict[str, Callable[[str], str]] = {"family": family_of, "gpu": gpu_of}


def selector(train_means: Mapping[str, float]) -> str:
    """The candidate with the best mean over the training spaces (ties: the first name in order)."""
    return max(sorted(train_means), key=lambda k: train_means[k])


def _means(results: Mapping[str, Mapping[str, Any]], label: str, spaces: Sequence[str]) -> float | None:
    vals = [results[s][label]["mean"] for s in spaces if label in results.get(s, {})]
    return float(np.mean(vals)) if len(vals) == len(spaces) and vals else None


def leave_one_out(results: Mapping[str, Mapping[str, Any]], labels: Sequence[str],
                  candidates: Sequence[str], anchors: Sequence[str]) -> dict[str, Any]:
    """Per grouping: fold scores of every label and of the selector over ``candidates``, pooled beside them.

    ``results``: space -> label -> {"mean", "scores", ...} (``summarise``'s
    results); a label missing on some space of a fold has no score there.
    ``anchors`` (the references) name the best anchor per fold, and the
    margin of every label over it.
    """
    spaces = sorted(results)
    out: dict[str, Any] = {"pooled": {lab: _means(results, lab, spaces) for lab in labels}}
    for grouping, key in GROUPINGS.items():
        folds: dict[str, list[str]] = {}
        for s in spaces:
            folds.setdefault(key(s), []).append(s)
        per_fold: dict[str, Any] = {}
        held_out: dict[str, float] = {}  # space -> the selector's score when that space was held out
        for fold, test in sorted(folds.items()):
            train = [s for s in spaces if s not in test]
            train_means = {c: m for c in candidates if (m := _means(results, c, train)) is not None}
            entry: dict[str, Any] = {"spaces": test, "means": {lab: _means(results, lab, test) for lab in labels}}
            if train_means:
                choice = selector(train_means)
                entry["selected"] = choice
                entry["selected_train_mean"] = train_means[choice]
                entry["means"]["selected"] = _means(results, choice, test)
                for s in test:
                    if choice in results[s]:
                        held_out[s] = results[s][choice]["mean"]
            scored = {a: entry["means"][a] for a in anchors if entry["means"].get(a) is not None}
            if scored:
                best = max(scored, key=lambda a: scored[a])
                entry["best_anchor"] = {"label": best, "mean": scored[best]}
                entry["margin_over_best_anchor"] = {lab: (m - scored[best] if m is not None else None)
                                                    for lab, m in entry["means"].items()}
            per_fold[fold] = entry
        loo = {lab: _means(results, lab, spaces) for lab in labels}
        loo["selected"] = float(np.mean(list(held_out.values()))) if len(held_out) == len(spaces) else None
        out[grouping] = {"folds": per_fold, "loo_mean": loo}
    return out
