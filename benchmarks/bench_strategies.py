#!/usr/bin/env python
"""Strategy benchmark: score search strategies on recorded GPU search spaces, side by side with references.

Every measured space under ``--spaces`` (default ``../shared/data/spaces`` from
the project root; T4 files take their definition from ``t1/<kernel>.json``,
Kernel Tuner caches and KTT files define themselves) is replayed: a strategy
gets the budget ``B`` of the space (:meth:`benchmarks.scoring.SpaceStats.budget`)
and its evaluation order is scored with
:func:`benchmarks.scoring.score_run` (0 = random search, 1 = the optimum at
once). Each (space, strategy) pair runs ``--runs`` seeds (at least 10 for
numbers worth reporting; seeds ``--seed0 .. --seed0+runs-1``).

Strategies
    ``--strategies`` takes a comma-separated list of registry names
    (``pytest_autotune.strategies.available_strategies()``; default: all).
    A name may carry hyperparameters, ``name:key=value;key=value`` (values as
    JSON, else a string: ``bayes:acquisition=ei``,
    ``genetic:constraint_aware=false``) or be a JSON dict
    ``{"name": "bayes", "acquisition": "ei"}``, so variants run side by side
    under distinct labels. ``kt:<name>[:opts]`` is a Kernel Tuner 1.5.0
    strategy and ``optuna:tpe`` Optuna's default TPE sampler (see
    :mod:`benchmarks.anchors`); ``--kernel-tuner`` adds the ten Kernel Tuner
    strategies of the comparison (or the comma-separated list given) and
    ``--optuna`` adds Optuna's TPE. Without the ``bench`` extra installed they
    are skipped with a note. ``--import MOD`` imports modules that register
    further strategies.

Budgets
    ``--budgets 25,50,100,B`` sweeps budgets in one run: every strategy is told
    min(B, b) per space and scored over it; the JSON's ``budget_sweep`` holds
    each budget's results, with leave-one-family-out and leave-one-GPU-out
    reports (:mod:`benchmarks.generalisation`). ``--max-budget LABEL=N`` leaves
    a strategy out where its budget exceeds N.

Outputs
    A table on stdout (rows = strategies sorted by their aggregate, columns =
    aggregate mean +/- standard error over the 13 measured spaces (T4 + Kernel
    Tuner caches) and over all, the number of spaces where the strategy is
    best or within one standard error of the best, its own compute per step
    (mean / max ms), then the mean score per space); ``--json`` with
    everything (per space per strategy: scores, seeds, mean, std, se, budget B,
    N, optimum, compute; aggregates; targets); ``--sequences`` a JSONL file
    with one line per run: ``{"space", "strategy", "seed", "sequence": [config
    dicts in evaluation order, failed and invalid ones included]}``.

Statistics
    Per space: mean, sample standard deviation (ddof 1) and standard error
    (std / sqrt(runs)) over seeds. Aggregate: the mean over spaces of the
    per-space means; its ``std`` is the standard deviation over seeds of the
    per-seed aggregate (seed i's scores averaged over the spaces) and its
    ``se`` is propagated from the per-space standard errors,
    sqrt(sum se_s^2) / n_spaces. "Best or within one SE" on a space: the
    strategy's mean is at least the best mean minus the best strategy's
    standard error.

Compute per step
    Ours and Optuna: :attr:`SearchHistory.strategy_seconds` (the time the
    strategy's generator takes to produce each proposal, free re-proposals
    included). Kernel Tuner: its own ``strategy_time`` per served result (time
    spent in the strategy between runner calls, amortised over the batch);
    the wall time per unique evaluation of the whole simulated run is kept as
    well (``wall_ms_per_eval``).

Runtime
    Runs are spread over ``--jobs`` processes (default 2). Reference (anchor)
    runs are cached in ``anchor_cache.jsonl`` under ``$AUTOTUNE_ANCHOR_CACHE`` (default
    ``~/.cache/pytest-autotune/anchors/``; filled by the first run) keyed by the
    space files' hash, strategy label, seed, budget and library versions
    (``--no-anchor-cache`` to recompute, ``--anchor-cache PATH`` to move it).
    Progress goes to stderr.

Example::

    python benchmarks/bench_strategies.py --spaces ../shared/data/spaces --strategies auto,genetic,random \\
        --runs 10 --kernel-tuner --optuna --json out.json --sequences out.jsonl
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import contextlib
import dataclasses
import gc
import hashlib
import importlib
import json
import math
import sys
import time
import traceback
from collections import Counter, defaultdict
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

import numpy as np  # noqa: E402

from benchmarks import anchors, generalisation  # noqa: E402
from benchmarks.scoring import SpaceStats, score_run  # noqa: E402
from pytest_autotune import datasets  # noqa: E402
from pytest_autotune.engine.evaluator import Evaluator  # noqa: E402
from pytest_autotune.results import Measurement  # noqa: E402
from pytest_autotune.strategies import (available_strategies, make_strategy, strategy_class,
                                        validate_strategy_spec)  # noqa: E402
from pytest_autotune.strategies.base import StrategyError  # noqa: E402

DEFAULT_SPACES = _ROOT.parent / "shared" / "data" / "spaces"
from benchmarks._common import anchor_cache_dir  # noqa: E402

DEFAULT_ANCHOR_CACHE = anchor_cache_dir() / "anchor_cache.jsonl"  # regenerated when absent
ANCHOR_CACHE_VERSION = {"kernel_tuner": "1", "optuna": "2"}  # bump a kind's version when its protocol changes
MEASURED_FORMATS = ("t4", "kerneltuner")  # the 13 scored spaces; KTT files are reported in "all"
GROUPS = ("measured", "all")


# -- strategy specifications -------------------------------------------------------------------------------


@dataclass(frozen=True)
class StrategySpec:
    """A strategy to benchmark: kind ("ours", "kernel_tuner", "optuna"), name, hyperparameters and its label."""

    kind: str
    name: str
    hyper: tuple[tuple[str, Any], ...] = ()

    @property
    def hyperparameters(self) -> dict[str, Any]:
        return dict(self.hyper)

    @property
    def label(self) -> str:
        prefix = {"ours": "", "kernel_tuner": "kt:", "optuna": "optuna:"}[self.kind]
        text = prefix + self.name
        if self.hyper:
            text += ":" + ";".join(f"{k}={_format_value(v)}" for k, v in self.hyper)
        return text

    @property
    def is_anchor(self) -> bool:
        return self.kind != "ours"

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "hyperparameters": self.hyperparameters}


def _format_value(v: Any) -> str:
    if isinstance(v, str):
        return v
    return json.dumps(v, separators=(",", ":"))


def parse_value(text: str) -> Any:
    """A hyperparameter value: JSON (numbers, true/false/null, lists, quoted strings), Python's True/False/None, else the string."""
    text = text.strip()
    try:
        return json.loads(text)
    except ValueError:
        pass
    return {"True": True, "False": False, "None": None}.get(text, text)


def split_outside(text: str, sep: str) -> list[str]:
    """Split on ``sep`` outside brackets, braces and quotes (JSON values stay whole); empty parts dropped."""
    out: list[str] = []
    depth, quote, start = 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            if ch == quote and text[i - 1] != "\\":
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        elif ch == sep and depth == 0:
            out.append(text[start:i])
            start = i + 1
    out.append(text[start:])
    return [s.strip() for s in out if s.strip()]


def split_specs(text: str) -> list[str]:
    """Split a comma-separated strategy list."""
    return split_outside(text, ",")


def _kind_of(name: str) -> tuple[str, str]:
    for prefix, kind in (("kt:", "kernel_tuner"), ("kernel_tuner:", "kernel_tuner"), ("optuna:", "optuna")):
        if name.startswith(prefix):
            return kind, name[len(prefix):]
    if name == "optuna":
        return "optuna", "tpe"
    return "ours", name


def parse_strategy_spec(text: str | Mapping[str, Any]) -> StrategySpec:
    """``name``, ``name:key=value;key=value``, ``kt:name[:...]``, ``optuna:tpe`` or a JSON dict with ``name``."""
    if isinstance(text, Mapping):
        doc = dict(text)
    elif text.strip().startswith("{"):
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise StrategyError(f"strategy {text!r} is not valid JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise StrategyError(f"strategy {text!r} must be a JSON object")
    else:
        text = text.strip()
        kind, rest = _kind_of(text)
        name, _, params = rest.partition(":")
        hyper: list[tuple[str, Any]] = []
        for item in split_hyper(params):
            key, eq, value = item.partition("=")
            if not eq or not key.strip():
                raise StrategyError(f"strategy {text!r}: hyperparameter {item!r} is not key=value")
            hyper.append((key.strip(), parse_value(value)))
        if not name:
            raise StrategyError(f"strategy {text!r} has no name")
        return StrategySpec(kind, name.strip(), tuple(hyper))
    if "name" not in doc:
        raise StrategyError(f"strategy {doc!r} needs a 'name' key")
    kind, name = _kind_of(str(doc.pop("name")))
    return StrategySpec(kind, name, tuple(doc.items()))


def split_hyper(text: str) -> list[str]:
    """Split ``k=v;k=v``."""
    return split_outside(text, ";")


def validate_spec(spec: StrategySpec) -> None:
    if spec.kind == "ours":
        validate_strategy_spec({"name": spec.name, **spec.hyperparameters})
    elif spec.kind == "kernel_tuner":
        if anchors.have_kernel_tuner():
            from kernel_tuner.interface import strategy_map
            if spec.name not in strategy_map:
                raise StrategyError(f"Kernel Tuner has no strategy {spec.name!r}; known: {', '.join(strategy_map)}")
    elif spec.kind == "optuna":
        if spec.name != "tpe":
            raise StrategyError(f"optuna:{spec.name}: only optuna:tpe (Optuna's default sampler) is supported")
        anchors.OptunaTPE.Hyperparameters(**spec.hyperparameters).validate()


# -- spaces --------------------------------------------------------------------------------------------------


@dataclass
class SpaceInfo:
    name: str
    path: str
    format: str
    n_configs: int
    n_valid: int
    budget: int
    optimum: float
    median: float
    fingerprint: str  # sha256 of the file (and its T1 definition)
    definition: str | None = None
    has_counters: bool = False  # hardware counters recorded (KTT with ProfilingData): profile-based strategies

    @property
    def measured(self) -> bool:
        return self.format in MEASURED_FORMATS

    def as_json(self) -> dict[str, Any]:
        return {"file": self.path, "format": self.format, "N": self.n_configs, "valid": self.n_valid,
                "budget": self.budget, "optimum": self.optimum, "median": self.median,
                "in_measured_13": self.measured, "definition": self.definition, "sha256": self.fingerprint,
                "counters": self.has_counters}


def _sha256(paths: Iterable[Path]) -> str:
    h = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def space_name(path: str | Path) -> str:
    name = Path(path).name
    for suffix in (".gz", ".json"):
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
    return name


def load_space_info(path: Path) -> SpaceInfo:
    rec = datasets.load_dataset(path)
    stats = SpaceStats.from_times(rec.times)
    files = [path] + ([Path(rec.definition)] if rec.definition else [])
    return SpaceInfo(name=space_name(path), path=str(path), format=rec.format, n_configs=rec.n_configs,
                     n_valid=rec.n_valid, budget=stats.budget(), optimum=stats.optimum, median=stats.median,
                     fingerprint=_sha256(files), definition=str(rec.definition) if rec.definition else None,
                     has_counters=bool(rec.counters))


# -- one run (executed in worker processes) ---------------------------------------------------------------

_KT_SPACES: dict[str, anchors.KernelTunerSpace] = {}


def _close_kt_spaces() -> None:
    for s in _KT_SPACES.values():
        s.close()
    _KT_SPACES.clear()


def _stats(path: str) -> tuple[Any, SpaceStats]:
    rec = datasets.load_dataset(path)
    return rec, SpaceStats.from_times(rec.times)


def _objective(rec: Any):
    space = rec.space

    def objective(params: Mapping[str, Any]) -> Measurement:
        row = space.find(dict(params))
        return rec.measurement(row, params)

    return objective


def _profiler(rec: Any):
    """Recorded hardware counters of a configuration, like the replay runner's ``profile``."""
    if not rec.counters:
        raise RuntimeError(f"{rec.name}: the recording has no hardware counters")

    def profile(params: Mapping[str, Any]) -> dict[str, float]:
        counters = rec.counters_of(rec.space.find(dict(params)))
        if not counters:
            raise RuntimeError(f"{rec.name}: configuration {dict(params)} has no recorded counters")
        return counters

    return profile


def requires_profiling(spec: StrategySpec) -> bool:
    if spec.kind != "ours":
        return False
    return bool(getattr(strategy_class(spec.name), "requires_profiling", False))


def _compute(seconds: Sequence[float], cpu_seconds: Sequence[float] | None = None) -> dict[str, Any]:
    """Per-step compute: wall time, and (ours) the strategy thread's CPU time, which preemption does not inflate."""
    ms = np.asarray(seconds, dtype=float) * 1e3
    if len(ms) == 0:
        return {"mean_ms": None, "max_ms": None, "steps": 0, "sum_ms": 0.0}
    out = {"mean_ms": float(ms.mean()), "max_ms": float(ms.max()), "steps": int(len(ms)), "sum_ms": float(ms.sum())}
    if cpu_seconds:
        cpu = np.asarray(cpu_seconds, dtype=float) * 1e3
        out.update(cpu_mean_ms=float(cpu.mean()), cpu_max_ms=float(cpu.max()))
    return out


def run_one(task: dict[str, Any]) -> dict[str, Any]:
    """Run one (space, strategy, seed); returns the scored run (``seq``: rows, or value-index lists when invalid)."""
    t0, c0 = time.perf_counter(), time.process_time()
    spec: StrategySpec = task["spec"]
    out = {"space": task["space"], "label": spec.label, "seed": task["seed"], "budget": task["budget"],
           "key": task.get("key"), "budget_label": task.get("budget_label", "B")}
    try:
        rec, stats = _stats(task["path"])
        # Everything alive now (the recorded space, the anchor cache, earlier results) is long-lived: without
        # this, Python's full collections scan it and charge ~50-100 ms to whichever strategy step they hit.
        gc.freeze()
        budget = int(task["budget"])
        if spec.kind == "optuna" and spec.hyperparameters.get("repeats", "cost") == "cost":
            strategy = anchors.OptunaTPE(rec.space, seed=task["seed"], **spec.hyperparameters)

            def outcome(row: int) -> float | None:
                return None if rec.failures[row] is not None else float(rec.times[row])

            trial_run = anchors.drive_counting_repeats(strategy, outcome, budget)
            seq, values = trial_run.seq, trial_run.values
            compute = _compute(trial_run.step_seconds)
            compute["how"] = "ask + suggestions + tell per trial (perf_counter)"
            out["stop_reason"] = f"{budget} trials, {trial_run.repeats} repeated an evaluated configuration"
        elif spec.kind in ("ours", "optuna"):
            if spec.kind == "ours":
                strategy = make_strategy({"name": spec.name, **spec.hyperparameters}, rec.space, seed=task["seed"])
                if getattr(strategy, "requires_profiling", False):
                    strategy.profiler = _profiler(rec)  # type: ignore[attr-defined]
            else:
                strategy = anchors.OptunaTPE(rec.space, seed=task["seed"], **spec.hyperparameters)
            history = Evaluator(rec.space, _objective(rec), budget=budget).run(strategy)
            seq: list[Any] = []
            values: list[float | None] = []
            for r in history.records:
                if r.row >= 0:
                    seq.append(int(r.row))
                else:
                    seq.append([int(i) for i in rec.space.value_indices(r.params)])
                values.append(r.value)
            compute = _compute(history.strategy_seconds, history.strategy_cpu_seconds)
            compute["how"] = "SearchHistory.strategy_seconds (wall) and strategy_cpu_seconds (thread CPU), per proposal"
            out["stop_reason"] = history.stop_reason
        elif spec.kind == "kernel_tuner":
            kt = _KT_SPACES.get(task["path"])
            if kt is None:
                kt = _KT_SPACES[task["path"]] = anchors.KernelTunerSpace(rec)
            run = kt.run(spec.name, task["seed"], budget, spec.hyperparameters)
            seq, values = list(run.rows), list(run.values)
            compute = _compute(np.asarray(run.strategy_ms) / 1e3)
            compute["how"] = "Kernel Tuner strategy_time per served result (amortised over its batch)"
            compute["wall_ms_per_eval"] = 1e3 * run.wall_s / max(1, len(seq))
            out["stop_reason"] = f"{len(seq)} unique of {run.served} served"
            out["kt_restrictions"] = kt.restriction_source
        else:  # pragma: no cover - validated before
            raise StrategyError(f"unknown strategy kind {spec.kind!r}")
        if len(values) > budget:
            seq, values = seq[:budget], values[:budget]
        out.update(seq=seq, values=values, score=float(score_run(stats, values, budget)), compute=compute,
                   evaluations=len(values))
    except Exception as exc:  # noqa: BLE001 - reported per run, the benchmark goes on
        out["error"] = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
    out["wall_s"] = time.perf_counter() - t0
    out["cpu_s"] = time.process_time() - c0  # this process's CPU time: the cost on an idle machine
    return out


_THREAD_LIMITS: list[Any] = []


def _worker_init(limit_threads: bool) -> None:
    anchors.quiet_optuna()
    if limit_threads:  # two processes on two cores: no BLAS/OpenMP oversubscription inside each
        with contextlib.suppress(Exception):
            from threadpoolctl import threadpool_limits
            _THREAD_LIMITS.append(threadpool_limits(1))
    import atexit
    atexit.register(_close_kt_spaces)


# -- the anchor cache ---------------------------------------------------------------------------------------


def anchor_key(space: SpaceInfo, spec: StrategySpec, seed: int, budget: int) -> str:
    lib = {"kernel_tuner": anchors.kernel_tuner_version(), "optuna": anchors.optuna_version()}.get(spec.kind)
    return "|".join([ANCHOR_CACHE_VERSION[spec.kind], space.fingerprint[:16], spec.label, str(seed), str(budget), str(lib)])


class AnchorCache:
    """JSONL of scored anchor runs keyed by :func:`anchor_key` (the last line of a key wins)."""

    def __init__(self, path: Path | None):
        self.path = path
        self.entries: dict[str, dict[str, Any]] = {}
        if path is not None and path.is_file():
            with open(path) as f:
                for line in f:
                    line = line.strip()
                    if not line:
                        continue
                    try:
                        doc = json.loads(line)
                        self.entries[doc["key"]] = doc
                    except (ValueError, KeyError, TypeError):
                        continue  # a torn line from an interrupted run

    def get(self, key: str, rec: Any) -> dict[str, Any] | None:
        doc = self.entries.get(key)
        if doc is None:
            return None
        # sanity: the stored rows must still carry the stored outcomes (row numbering of the space engine)
        n = len(rec.space)
        for item, v in zip(doc["seq"], doc["values"]):
            if isinstance(item, int):
                if not 0 <= item < n:
                    return None
                t = rec.times[item]
                if (v is None) != bool(np.isnan(t)) or (v is not None and abs(float(t) - v) > 1e-9 * max(1.0, abs(v))):
                    return None
            elif v is not None:
                return None
        return doc

    def add(self, result: dict[str, Any]) -> None:
        if self.path is None:
            return
        doc = {k: result[k] for k in ("key", "space", "label", "seed", "budget", "seq", "values", "score", "compute",
                                      "evaluations", "wall_s", "cpu_s", "stop_reason") if k in result}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps(doc, separators=(",", ":")) + "\n"
        with open(self.path, "a") as f:  # one write per line, under an exclusive lock (concurrent benchmarks)
            try:
                import fcntl
                fcntl.flock(f, fcntl.LOCK_EX)
            except (ImportError, OSError):  # pragma: no cover - not POSIX
                pass
            f.write(line)
            f.flush()
        self.entries[doc["key"]] = doc


# -- statistics and reports -----------------------------------------------------------------------------------


FIXED_EVALUATIONS = (20, 50, 100, 220)  # the published BO comparisons report results at budgets up to 220


def fraction_of_optimum_at(runs: Sequence[Sequence[float | None]], optimum: float, budget: int) -> dict[str, Any]:
    """Mean over runs of ``optimum / best`` after k evaluations, for the k of :data:`FIXED_EVALUATIONS` <= B.

    The view of the BO papers (quality after a fixed, small number of
    evaluations) next to the anytime score. A run shorter than k keeps its
    last best (the metric's rule); nothing valid yet counts as 0.
    """
    out: dict[str, Any] = {}
    for k in FIXED_EVALUATIONS:
        if k > budget:
            continue
        fractions = []
        for values in runs:
            valid = [v for v in values[:k] if v is not None]
            fractions.append(optimum / min(valid) if valid else 0.0)
        out[str(k)] = float(np.mean(fractions)) if fractions else None
    return out


def mean_std_se(scores: Sequence[float]) -> tuple[float, float, float]:
    a = np.asarray(scores, dtype=float)
    if len(a) == 0:
        return math.nan, math.nan, math.nan
    mean = float(a.mean())
    std = float(a.std(ddof=1)) if len(a) > 1 else 0.0
    return mean, std, std / math.sqrt(len(a))


def _total_cpu(rs: Sequence[Mapping[str, Any]]) -> float | None:
    """Summed CPU seconds of runs; None when some run (an older cache entry) did not record it."""
    vals = [r.get("cpu_s") for r in rs]
    return None if any(v is None for v in vals) else float(sum(vals))


def summarise(spaces: Sequence[SpaceInfo], specs: Sequence[StrategySpec], runs: Mapping[tuple[str, str], list],
              seeds: Sequence[int]) -> dict[str, Any]:
    """Per-space statistics, aggregates, best-or-within-SE counts, compute, targets."""
    results: dict[str, dict[str, Any]] = {}
    for sp in spaces:
        per: dict[str, Any] = {}
        for spec in specs:
            rs = sorted((r for r in runs.get((sp.name, spec.label), []) if "error" not in r), key=lambda r: r["seed"])
            if not rs:
                continue
            scores = [r["score"] for r in rs]
            mean, std, se = mean_std_se(scores)
            steps = sum(r["compute"]["steps"] for r in rs)
            total = sum(r["compute"]["sum_ms"] for r in rs)
            maxes = [r["compute"]["max_ms"] for r in rs if r["compute"]["max_ms"] is not None]
            cpu_maxes = [r["compute"]["cpu_max_ms"] for r in rs if r["compute"].get("cpu_max_ms") is not None]
            entry = {"scores": scores, "seeds": [r["seed"] for r in rs], "mean": mean, "std": std, "se": se,
                     "budget": sp.budget, "N": sp.n_configs, "optimum": sp.optimum,
                     "evaluations": [r["evaluations"] for r in rs],
                     "stop_reasons": dict(Counter(str(r.get("stop_reason", "")) for r in rs)),
                     "compute": {"mean_ms": total / steps if steps else None, "max_ms": max(maxes) if maxes else None,
                                 "cpu_max_ms": max(cpu_maxes) if cpu_maxes else None,
                                 "how": rs[0]["compute"].get("how")},
                     "wall_s": sum(r["wall_s"] for r in rs), "cpu_s": _total_cpu(rs),
                     "cached_runs": sum(1 for r in rs if r.get("cached"))}
            entry["fraction_of_optimum_at"] = fraction_of_optimum_at([r["values"] for r in rs], sp.optimum,
                                                                     sp.budget)
            wpe = [r["compute"]["wall_ms_per_eval"] for r in rs if "wall_ms_per_eval" in r["compute"]]
            if wpe:
                entry["compute"]["wall_ms_per_eval"] = float(np.mean(wpe))
            per[spec.label] = entry
        # best, or within one standard error of the best
        if per:
            best_label = max(per, key=lambda k: per[k]["mean"])
            threshold = per[best_label]["mean"] - per[best_label]["se"]
            for label, e in per.items():
                e["best"] = label == best_label
                e["best_or_within_se"] = e["mean"] >= threshold
        results[sp.name] = per

    aggregate: dict[str, dict[str, Any]] = {g: {} for g in GROUPS}
    for group in GROUPS:
        members = [sp for sp in spaces if group == "all" or sp.measured]
        for spec in specs:
            have = [sp for sp in members if spec.label in results[sp.name]]
            if not have:
                continue
            entries = [results[sp.name][spec.label] for sp in have]
            means = [e["mean"] for e in entries]
            se = math.sqrt(sum(e["se"] ** 2 for e in entries)) / len(entries)
            by_seed: dict[int, list[float]] = defaultdict(list)
            for e in entries:
                for s, v in zip(e["seeds"], e["scores"]):
                    by_seed[s].append(v)
            per_seed = [float(np.mean(v)) for s, v in sorted(by_seed.items()) if len(v) == len(entries)]
            std = float(np.std(per_seed, ddof=1)) if len(per_seed) > 1 else 0.0
            wins = [sp.name for sp, e in zip(have, entries) if e.get("best_or_within_se")]
            aggregate[group][spec.label] = {
                "mean": float(np.mean(means)), "se": se, "std": std, "per_seed": per_seed,
                "n_spaces": len(have), "complete": len(have) == len(members),
                "best_or_within_se": {"count": len(wins), "of": len(have),
                                      "percent": 100.0 * len(wins) / len(have), "spaces": wins},
                "best": sum(1 for e in entries if e.get("best")),
                "fraction_of_optimum_at": {
                    str(k): float(np.mean(f)) if f else None
                    for k in FIXED_EVALUATIONS
                    for f in [[e["fraction_of_optimum_at"][str(k)] for e in entries
                               if e["fraction_of_optimum_at"].get(str(k)) is not None]]}}

    compute: dict[str, Any] = {}
    for spec in specs:
        steps = total = 0.0
        mx: float | None = None
        gemm_max: float | None = None
        cpu_mx: float | None = None
        gemm_cpu_max: float | None = None
        how = None
        for sp in spaces:
            e = results[sp.name].get(spec.label)
            if e is None:
                continue
            rs = [r for r in runs.get((sp.name, spec.label), []) if "error" not in r]
            steps += sum(r["compute"]["steps"] for r in rs)
            total += sum(r["compute"]["sum_ms"] for r in rs)
            how = how or e["compute"]["how"]
            m = e["compute"]["max_ms"]
            if m is not None:
                mx = m if mx is None else max(mx, m)
                if sp.name.lower().startswith("gemm"):
                    gemm_max = m if gemm_max is None else max(gemm_max, m)
            c = e["compute"].get("cpu_max_ms")
            if c is not None:
                cpu_mx = c if cpu_mx is None else max(cpu_mx, c)
                if sp.name.lower().startswith("gemm"):
                    gemm_cpu_max = c if gemm_cpu_max is None else max(gemm_cpu_max, c)
        mine = [r for sp in spaces for r in runs.get((sp.name, spec.label), []) if "error" not in r]
        wall = sum(r["wall_s"] for r in mine)
        cpu = _total_cpu(mine)
        compute[spec.label] = {"mean_ms": total / steps if steps else None, "max_ms": mx, "gemm_max_ms": gemm_max,
                               "gemm_under_50ms": None if gemm_max is None else gemm_max < 50.0,
                               "cpu_max_ms": cpu_mx, "gemm_cpu_max_ms": gemm_cpu_max,
                               "gemm_cpu_under_50ms": None if gemm_cpu_max is None else gemm_cpu_max < 50.0, "how": how,
                               "run_wall_s": wall, "run_cpu_s": cpu}

    return {"results": results, "aggregate": aggregate, "compute": compute,
            "targets": targets(aggregate, results, specs, [sp.name for sp in spaces if sp.measured])}


def targets(aggregate: Mapping[str, Any], results: Mapping[str, Any], specs: Sequence[StrategySpec],
            measured: Sequence[str] = ()) -> dict[str, Any]:
    agg = aggregate["measured"]
    out: dict[str, Any] = {}
    if "random" in agg:
        r = agg["random"]
        out["random_is_zero"] = {"mean": r["mean"], "se": r["se"], "within_0.05": abs(r["mean"]) <= 0.05}
    kt = {s.label: agg[s.label] for s in specs if s.kind == "kernel_tuner" and s.label in agg}
    if kt:
        best_kt = max(kt, key=lambda k: kt[k]["mean"])
        out["best_kernel_tuner"] = {"strategy": best_kt, "mean": kt[best_kt]["mean"], "se": kt[best_kt]["se"]}
        if "auto" in agg:
            a = agg["auto"]
            diff = a["mean"] - kt[best_kt]["mean"]
            se = math.sqrt(a["se"] ** 2 + kt[best_kt]["se"] ** 2)
            out["auto_vs_best_kernel_tuner"] = {"auto": a["mean"], "best_kt": kt[best_kt]["mean"], "difference": diff,
                                                "se": se, "z": diff / se if se > 0 else None}
    if "auto" in agg:
        out["auto_best_or_within_se"] = aggregate["measured"]["auto"]["best_or_within_se"]
        out["auto_vs_everything"] = _within_se_among(results, [s.label for s in specs], "auto", list(results))
        out["auto_reaches_0.58"] = agg["auto"]["mean"] >= 0.58
        references = [s.label for s in specs if s.kind in ("kernel_tuner", "optuna")]
        if references:
            out["auto_vs_references"] = {group: _within_se_among(results, ["auto", *references], "auto", names)
                                         for group, names in (("measured", list(measured)),
                                                              ("all", list(results)))}
    return out


def _within_se_among(results: Mapping[str, Any], labels: Sequence[str], who: str,
                     spaces: Sequence[str]) -> dict[str, Any]:
    """Spaces where ``who`` is best, or within one SE of the best (the best's SE), among ``labels`` only."""
    from scipy.stats import ttest_ind

    wins, have, worse = [], [], {}
    for name in spaces:
        per = {k: v for k, v in results.get(name, {}).items() if k in labels}
        if who not in per:
            continue
        have.append(name)
        best = max(per, key=lambda k: per[k]["mean"])
        if per[who]["mean"] >= per[best]["mean"] - per[best]["se"]:
            wins.append(name)
        # The best of many noisy means is biased upwards (winner's curse): is ``who`` *significantly* worse
        # than the best other one? Welch's t-test, one-sided, alpha 0.05.
        others = [k for k in per if k != who]
        if others:
            rival = max(others, key=lambda k: per[k]["mean"])
            a, b = per[who]["scores"], per[rival]["scores"]
            if len(a) > 1 and len(b) > 1 and np.std(a) + np.std(b) > 0:
                p = float(ttest_ind(a, b, equal_var=False, alternative="less").pvalue)
                if p < 0.05:
                    worse[name] = {"best_other": rival, "p": p}
    return {"among": list(labels), "count": len(wins), "of": len(have),
            "percent": 100.0 * len(wins) / len(have) if have else None, "spaces": wins,
            "significantly_worse": worse}


_SHORT = (("KTConvolutionOutput", "kttconv"), ("convolution_milo", "conv"), ("convolution", "conv"), ("RTX_", ""),
          ("_laptop", "L"), ("_Ti", "Ti"))


def short_name(name: str) -> str:
    for a, b in _SHORT:
        name = name.replace(a, b)
    return name[:14]


def _pm(mean: float, se: float) -> str:
    return f"{mean:+.3f}±{se:.3f}"


def format_table(spaces: Sequence[SpaceInfo], specs: Sequence[StrategySpec], summary: Mapping[str, Any]) -> str:
    agg = summary["aggregate"]
    results = summary["results"]
    comp = summary["compute"]
    has_extra = any(not sp.measured for sp in spaces)
    n_measured = sum(sp.measured for sp in spaces)

    def sort_key(spec: StrategySpec) -> float:
        e = agg["measured"].get(spec.label) or agg["all"].get(spec.label)
        return -e["mean"] if e else math.inf

    ordered = sorted(specs, key=sort_key)
    header = ["strategy", f"agg{n_measured} mean±SE"]
    if has_extra:
        header.append(f"all{len(spaces)} mean±SE")
    header += ["best/≤1SE", "ms/step mean", "max", "cpu max"]
    header += [short_name(sp.name) for sp in spaces]
    rows = [header]
    for spec in ordered:
        label = spec.label
        m = agg["measured"].get(label)
        a = agg["all"].get(label)
        row = [label, _pm(m["mean"], m["se"]) + ("" if m["complete"] else "†") if m else "-"]
        if has_extra:
            row.append(_pm(a["mean"], a["se"]) + ("" if a["complete"] else "†") if a else "-")
        bw = a["best_or_within_se"] if a else None
        row.append(f"{bw['count']}/{bw['of']}" if bw else "-")
        c = comp.get(label, {})
        row.append(f"{c['mean_ms']:.2f}" if c.get("mean_ms") is not None else "-")
        row.append(f"{c['max_ms']:.1f}" if c.get("max_ms") is not None else "-")
        row.append(f"{c['cpu_max_ms']:.1f}" if c.get("cpu_max_ms") is not None else "-")
        for sp in spaces:
            e = results[sp.name].get(label)
            row.append("-" if e is None else f"{e['mean']:+.2f}" + ("*" if e.get("best_or_within_se") else ""))
        rows.append(row)
    budget = ["budget B", "", *([""] if has_extra else []), "", "", "", ""] + [str(sp.budget) for sp in spaces]
    rows.append(budget)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = []
    for k, r in enumerate(rows):
        lines.append("  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(r)))
        if k == 0:
            lines.append("-" * len(lines[0]))
    notes = [f"agg{n_measured}: mean over the {n_measured} measured spaces (T4 + Kernel Tuner caches) of the mean "
             "score over seeds; ± is the standard error. best/≤1SE: spaces where the strategy is best or within one "
             "standard error of the best (over all spaces; * per space). ms/step: the strategy's own compute per "
             "proposal, wall time (Kernel Tuner: its strategy_time per result); cpu max: the largest step in the "
             "strategy thread's CPU time (ours only; wall maxima include preemption by other processes)."]
    if any(not e["complete"] for g in GROUPS for e in agg[g].values()):
        notes.append("†: over the subset of the spaces where the strategy ran (a profile-based strategy needs "
                     "recorded counters; or runs failed)")
    fixed = ["opt/best after k evaluations, mean over the measured spaces with B >= k (the BO papers' view): "
             + "; ".join(f"{spec.label} " + " ".join(
                 f"{k}:{v:.3f}" for k, v in agg["measured"][spec.label]["fraction_of_optimum_at"].items()
                 if v is not None)
                 for spec in ordered if spec.label in agg["measured"])]
    t = summary.get("targets", {})
    if "random_is_zero" in t:
        r = t["random_is_zero"]
        z = abs(r["mean"]) / r["se"] if r["se"] > 0 else 0.0
        notes.append(f"check of the metric: random scores {r['mean']:+.3f} ± {r['se']:.3f} (|mean| <= 0.05: "
                     f"{'yes' if r['within_0.05'] else 'no'}; {z:.1f} SE from 0)")
    if "auto_vs_best_kernel_tuner" in t:
        d = t["auto_vs_best_kernel_tuner"]
        notes.append(f"auto {d['auto']:+.3f} vs best Kernel Tuner ({t['best_kernel_tuner']['strategy']}) "
                     f"{d['best_kt']:+.3f}: difference {d['difference']:+.3f} ± {d['se']:.3f}")
    if "auto_best_or_within_se" in t:
        b = t["auto_best_or_within_se"]
        notes.append(f"auto is best or within one SE of the best on {b['count']}/{b['of']} measured spaces "
                     f"({b['percent']:.0f}%)")
    for group, r in t.get("auto_vs_references", {}).items():
        notes.append(f"against the references only (Kernel Tuner, Optuna): auto is best or within one SE of the "
                     f"best on {r['count']}/{r['of']} {'measured ' if group == 'measured' else ''}spaces "
                     f"({r['percent']:.0f}%)")
    for what, r in (("every other strategy", t.get("auto_vs_everything")),
                    ("the references", t.get("auto_vs_references", {}).get("all"))):
        if r is not None:
            worse = r["significantly_worse"]
            notes.append(f"auto is significantly worse (Welch t-test, one-sided p < 0.05) than the best of {what} on "
                         f"{len(worse)}/{r['of']} spaces" + (f": {', '.join(worse)}" if worse else ""))
    return "\n".join(lines) + "\n\n" + "\n".join(notes) + "\n" + "\n".join(fixed)


def format_sweep(specs: Sequence[StrategySpec], summaries: Mapping[str, Mapping[str, Any]]) -> str:
    """Per budget: the mean over all spaces, per family, and the leave-one-out scores of the selector."""
    lines = []
    for b, sm in summaries.items():
        gen = sm["generalisation"]
        fams = sorted(gen["family"]["folds"])
        header = ["budget " + b, "all", *fams, "LOGO sel."]
        rows = [header]
        for spec in specs:
            e = sm["aggregate"]["all"].get(spec.label)
            row = [spec.label, "-" if e is None else f"{e['mean']:+.3f}" + ("" if e["complete"] else "†")]
            for f in fams:
                m = gen["family"]["folds"][f]["means"].get(spec.label)
                row.append("-" if m is None else f"{m:+.3f}")
            row.append("")
            rows.append(row)
        sel = ["selected (LOO)", "", *(f"{gen['family']['folds'][f]['means'].get('selected') or 0:+.3f} "
                                       f"({gen['family']['folds'][f].get('selected', '-')})" for f in fams)]
        logo = gen["gpu"]["loo_mean"].get("selected")
        sel.append("-" if logo is None else f"{logo:+.3f}")
        rows.append(sel)
        widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
        lines += ["  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(r))
                  for r in rows]
        lofo = gen["family"]["loo_mean"].get("selected")
        lines.append(f"leave-one-family-out mean of the selector: {'-' if lofo is None else f'{lofo:+.3f}'}; "
                     f"leave-one-GPU-out: {'-' if logo is None else f'{logo:+.3f}'}")
        lines.append("")
    return "\n".join(lines)


def parse_budgets(text: str) -> list[str]:
    """``25,50,100,B`` -> ['25', '50', '100', 'B'] (positive integers or B, no repeats)."""
    out: list[str] = []
    for item in split_specs(text):
        b = item.strip()
        if b.upper() == "B":
            b = "B"
        elif not (b.isdigit() and int(b) >= 1):
            raise ValueError(f"--budgets: {item!r} is neither a positive number of evaluations nor 'B'")
        else:
            b = str(int(b))
        if b in out:
            raise ValueError(f"--budgets: {b} is given twice")
        out.append(b)
    if not out:
        raise ValueError("--budgets: no budget given")
    return out


def parse_max_budget(items: Sequence[str]) -> dict[str, int]:
    """``LABEL=N`` items -> {label: N}."""
    out: dict[str, int] = {}
    for item in items:
        label, eq, n = item.rpartition("=")
        if not eq or not label or not n.strip().isdigit():
            raise ValueError(f"--max-budget: {item!r} is not LABEL=N (N a number of evaluations)")
        out[label.strip()] = int(n)
    return out


# -- driver ---------------------------------------------------------------------------------------------------


def build_specs(args: argparse.Namespace) -> tuple[list[StrategySpec], list[str]]:
    notes: list[str] = []
    texts: list[str] = []
    for s in args.strategies or []:
        texts += split_specs(s)
    if args.strategies is None:  # every registered strategy that runs with its defaults
        texts = []
        for name in available_strategies():
            try:
                validate_strategy_spec(name)
            except StrategyError as exc:
                notes.append(f"skipped {name} (not runnable with its default hyperparameters: {exc})")
                continue
            texts.append(name)
    texts = [t for t in texts if t.lower() != "none"]
    if args.kernel_tuner:
        names = anchors.KERNEL_TUNER_STRATEGIES if args.kernel_tuner == "all" else split_specs(args.kernel_tuner)
        texts += [n if n.startswith("kt:") else f"kt:{n}" for n in names]
    if args.optuna:
        texts.append("optuna:tpe")
    specs: list[StrategySpec] = []
    for t in texts:
        spec = parse_strategy_spec(t)
        if spec.kind == "kernel_tuner" and not anchors.have_kernel_tuner():
            notes.append(f"skipped {spec.label}: kernel_tuner is not installed (pip install .[bench])")
            continue
        if spec.kind == "optuna" and not anchors.have_optuna():
            notes.append(f"skipped {spec.label}: optuna is not installed (pip install .[bench])")
            continue
        validate_spec(spec)
        if spec.label in {s.label for s in specs}:
            continue
        specs.append(spec)
    return specs, notes


def select_files(root: Path, patterns: str | None) -> list[Path]:
    files = datasets.discover(root)
    if patterns:
        pats = split_specs(patterns)
        files = [f for f in files if any(fnmatch(space_name(f), p) or p in space_name(f) for p in pats)]
    return files


def _cost(task: dict[str, Any]) -> float:
    spec: StrategySpec = task["spec"]
    slow = spec.kind == "optuna" or spec.name in ("bayes_opt", "bayes", "dual_annealing")
    return task["budget"] * (20.0 if slow else 1.0)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--spaces", type=Path, default=DEFAULT_SPACES,
                   help="folder laid out like ../shared/data/spaces (default: %(default)s); skipped when absent")
    p.add_argument("--only", default=None, help="comma-separated space names or globs to keep (e.g. 'gemm*,pnpoly_RTX_3090')")
    p.add_argument("--strategies", action="append", default=None,
                   help="comma-separated strategies, 'name:key=value;key=value' or a JSON dict; 'none' for none "
                        "(default: every registered strategy)")
    p.add_argument("--kernel-tuner", nargs="?", const="all", default=None,
                   help="add Kernel Tuner strategies (all ten of the comparison, or a comma-separated list)")
    p.add_argument("--optuna", action="store_true", help="add Optuna's default TPE sampler")
    p.add_argument("--import", dest="imports", action="append", default=[],
                   help="import a module that registers more strategies (repeatable)")
    p.add_argument("--runs", type=int, default=10, help="seeds per space and strategy (default 10)")
    p.add_argument("--seed0", type=int, default=0, help="first seed (default 0)")
    p.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--budget-cap", type=int, default=None,
                   help="score every space with budget min(B, CAP): the small-budget regime on every space "
                        "(the metric is defined for any budget; anchors are cached per budget)")
    p.add_argument("--budgets", default=None,
                   help="budget sweep: comma-separated budgets, each an integer (every space gets min(B, it)) or 'B' "
                        "(the space's own), e.g. '25,50,100,B'; every strategy is told the budget and scored over it; "
                        "the JSON's top level is the last budget, 'budget_sweep' holds each")
    p.add_argument("--max-budget", action="append", default=[], metavar="LABEL=N",
                   help="skip LABEL's runs where its budget exceeds N (a strategy too slow at long budgets; its "
                        "aggregates then cover the spaces it ran on, marked †); repeatable")
    p.add_argument("--json", type=Path, default=None, help="write everything as JSON here")
    p.add_argument("--sequences", type=Path, default=None, help="write every run's evaluation order as JSONL here")
    p.add_argument("--anchor-cache", type=Path, default=DEFAULT_ANCHOR_CACHE,
                   help="cache of Kernel Tuner / Optuna runs (default: %(default)s)")
    p.add_argument("--no-anchor-cache", action="store_true", help="recompute anchor runs (and refresh the cache)")
    p.add_argument("--cached-only", action="store_true",
                   help="report the anchor runs already in the cache without running the missing ones")
    args = p.parse_args(argv)

    if args.runs < 1:
        p.error("--runs must be at least 1")
    if args.runs < 10:
        _log(f"note: {args.runs} seeds per space; use --runs 10 or more for numbers worth reporting")
    if args.budget_cap is not None and args.budget_cap < 1:
        _log(f"--budget-cap must be a positive number of evaluations, got {args.budget_cap}")
        return 2
    try:
        budgets = parse_budgets(args.budgets) if args.budgets is not None else None
        max_budget = parse_max_budget(args.max_budget)
    except ValueError as exc:
        _log(str(exc))
        return 2
    if budgets is not None and args.budget_cap is not None:
        _log("--budgets and --budget-cap exclude each other (--budgets 25 is --budget-cap 25)")
        return 2
    for mod in args.imports:
        importlib.import_module(mod)
    try:
        specs, notes = build_specs(args)
    except StrategyError as exc:
        p.error(str(exc))
    for n in notes:
        _log(f"note: {n}")
    if not specs:
        _log("nothing to run: no strategies")
        return 2
    if not args.spaces.is_dir():
        _log(f"skipped: no folder of recorded spaces at {args.spaces}")
        return 0
    files = select_files(args.spaces, args.only)
    if not files:
        _log(f"skipped: no measured space files under {args.spaces}")
        return 0

    started = time.time()
    spaces: list[SpaceInfo] = []
    for f in files:
        try:
            spaces.append(load_space_info(f))
        except (datasets.DatasetError, ValueError, OSError) as exc:
            _log(f"note: skipped {f}: {exc}")
    if not spaces:
        _log("skipped: no space could be loaded")
        return 0
    if args.budget_cap is not None:
        spaces = [dataclasses.replace(sp, budget=min(sp.budget, args.budget_cap)) for sp in spaces]
    sweep = {"B": spaces} if budgets is None else {
        str(b): spaces if b == "B" else [dataclasses.replace(sp, budget=min(sp.budget, int(b))) for sp in spaces]
        for b in budgets}
    unknown = sorted(set(max_budget) - {s.label for s in specs})
    if unknown:
        _log(f"--max-budget names {', '.join(unknown)}, not a strategy of this run")
        return 2
    seeds = list(range(args.seed0, args.seed0 + args.runs))
    _log(f"{len(spaces)} spaces, {len(specs)} strategies, {len(seeds)} seeds, budgets {', '.join(sweep)}: "
         f"{', '.join(s.label for s in specs)}")

    cache = AnchorCache(None if args.anchor_cache is None else args.anchor_cache)
    # (budget label, space, strategy label) -> runs
    runs_by: dict[str, dict[tuple[str, str], list[dict[str, Any]]]] = {b: defaultdict(list) for b in sweep}
    todo: list[dict[str, Any]] = []
    cached = 0
    skipped_budget = 0
    by_name = {sp.name: sp for sp in spaces}
    for blabel, sp in ((b, sp) for b, sps in sweep.items() for sp in sps):
        runs = runs_by[blabel]
        rec = None
        for spec in specs:
            if requires_profiling(spec) and not sp.has_counters:
                continue  # a profile-based strategy needs recorded counters (reported on the spaces that have them)
            if spec.label in max_budget and sp.budget > max_budget[spec.label]:
                skipped_budget += len(seeds)
                continue
            for seed in seeds:
                task = {"space": sp.name, "path": sp.path, "spec": spec, "seed": seed, "budget": sp.budget,
                        "budget_label": blabel}
                if spec.is_anchor:
                    task["key"] = anchor_key(sp, spec, seed, sp.budget)
                    if not args.no_anchor_cache:
                        rec = rec or datasets.load_dataset(sp.path)
                        hit = cache.get(task["key"], rec)
                        if hit is not None:
                            runs[(sp.name, spec.label)].append({**hit, "space": sp.name, "label": spec.label,
                                                                "cached": True})
                            cached += 1
                            continue
                if spec.is_anchor and args.cached_only:
                    continue
                todo.append(task)
    todo.sort(key=_cost, reverse=True)
    if len(sweep) > 1:  # the same (space, strategy, seed, budget) asked by two budgets of the sweep: run it once
        seen_tasks: dict[tuple, dict[str, Any]] = {}
        aliases: dict[tuple, list[str]] = defaultdict(list)
        for t in todo:
            k = (t["space"], t["spec"].label, t["seed"], t["budget"])
            aliases[k].append(t["budget_label"])
            seen_tasks.setdefault(k, t)
        todo = list(seen_tasks.values())
    else:
        aliases = defaultdict(list)
    _log(f"{len(todo)} runs to do, {cached} anchor runs from the cache ({args.anchor_cache})"
         + (f", {skipped_budget} left out by --max-budget" if skipped_budget else ""))

    seq_file = None
    if args.sequences is not None:
        args.sequences.parent.mkdir(parents=True, exist_ok=True)
        seq_file = open(args.sequences, "w")

    def write_sequence(result: dict[str, Any]) -> None:
        if seq_file is None or "error" in result:
            return
        space = datasets.load_dataset(by_name[result["space"]].path).space
        sequence = [space.get(item) if isinstance(item, int) else space.vector_to_config(item)
                    for item in result["seq"]]
        seq_file.write(json.dumps({"space": result["space"], "strategy": result["label"], "seed": result["seed"],
                                   "sequence": sequence}, default=_json_default, separators=(",", ":")) + "\n")

    for key_runs in [r for runs in runs_by.values() for r in runs.values()]:
        for r in key_runs:
            write_sequence(r)

    errors: list[dict[str, Any]] = []
    done = 0
    t_run = time.time()

    def finished(result: dict[str, Any]) -> None:
        nonlocal done
        done += 1
        if "error" in result:
            errors.append(result)
            _log(f"[{done}/{len(todo)}] {result['space']} {result['label']} seed {result['seed']}: ERROR "
                 f"{result['error'].splitlines()[0]}")
            return
        k = (result["space"], result["label"], result["seed"], result["budget"])
        for blabel in aliases.get(k) or [result["budget_label"]]:
            runs_by[blabel][(result["space"], result["label"])].append(result)
        if result.get("key") is not None:
            cache.add(result)
        write_sequence(result)
        elapsed = time.time() - t_run
        eta = elapsed / done * (len(todo) - done)
        _log(f"[{done}/{len(todo)}] {result['space']} {result['label']} seed {result['seed']}: "
             f"score {result['score']:+.3f} ({result['evaluations']} evals, {result['wall_s']:.1f}s; "
             f"elapsed {elapsed:.0f}s, eta {eta:.0f}s)")

    try:
        if args.jobs <= 1 or len(todo) <= 1:
            _worker_init(False)
            for task in todo:
                finished(run_one(task))
        else:
            with cf.ProcessPoolExecutor(max_workers=args.jobs, initializer=_worker_init,
                                        initargs=(True,)) as pool:
                futures = [pool.submit(run_one, t) for t in todo]
                for fut in cf.as_completed(futures):
                    finished(fut.result())
    finally:
        if seq_file is not None:
            seq_file.close()
        _close_kt_spaces()

    summaries = {b: summarise(sweep[b], specs, runs_by[b], seeds) for b in sweep}
    last = list(sweep)[-1]
    summary, spaces = summaries[last], sweep[last]
    candidates = [s.label for s in specs if s.kind == "ours" and s.name not in ("random", "brute_force")]
    anchor_labels = [s.label for s in specs if s.is_anchor]
    for b, sm in summaries.items():
        sm["generalisation"] = generalisation.leave_one_out(sm["results"], [s.label for s in specs], candidates,
                                                            anchor_labels)
    elapsed = time.time() - started
    doc = {
        "meta": {"command": sys.argv if argv is None else ["bench_strategies.py", *argv],
                 "spaces_dir": str(args.spaces), "runs": args.runs, "seeds": seeds, "jobs": args.jobs,
                 "elapsed_s": elapsed, "runs_done": len(todo), "anchor_runs_cached": cached,
                 "versions": {"kernel_tuner": anchors.kernel_tuner_version(), "optuna": anchors.optuna_version(),
                              "numpy": np.__version__, "python": sys.version.split()[0]},
                 "notes": notes, "errors": [{k: e[k] for k in ("space", "label", "seed", "error")} for e in errors],
                 "statistics": "per space: mean, std (ddof 1), se = std/sqrt(runs); aggregate: mean over spaces of "
                               "per-space means, se = sqrt(sum se^2)/n_spaces, std over seeds of the per-seed "
                               "aggregate; best_or_within_se: mean >= best mean - best se",
                 "groups": {"measured": [sp.name for sp in spaces if sp.measured],
                            "all": [sp.name for sp in spaces]}},
        "spaces": {sp.name: sp.as_json() for sp in spaces},
        "strategies": {s.label: s.as_json() for s in specs},
        **summary,
    }
    if len(sweep) > 1 or budgets is not None:
        doc["meta"]["budgets"] = list(sweep)
        doc["meta"]["max_budget"] = max_budget
        doc["meta"]["generalisation"] = generalisation.__doc__.strip().split("\n\n")[0]
        doc["meta"]["selector_candidates"] = candidates
        doc["budget_sweep"] = {b: {"budgets": {sp.name: sp.budget for sp in sweep[b]}, **sm}
                               for b, sm in summaries.items()}
    print(format_table(spaces, specs, summary))
    print()
    print(format_sweep(specs, summaries))
    if errors:
        print(f"\n{len(errors)} run(s) failed; first: {errors[0]['space']} {errors[0]['label']} seed "
              f"{errors[0]['seed']}:\n{errors[0]['error']}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1, default=_json_default)
    _log(f"done in {elapsed:.0f}s")
    return 1 if errors else 0


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"{type(o).__name__} is not JSON serialisable")


if __name__ == "__main__":
    sys.exit(main())
