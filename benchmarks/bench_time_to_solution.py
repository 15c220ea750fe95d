#!/usr/bin/env python
"""Time to solution on the simulated clock: wall time until the best found is within 5% / 1% of the optimum.

Every measured space under ``--spaces`` (any folder laid out like
``../shared/data/spaces``; files are recognised by content) is replayed on the
simulated clock of :mod:`pytest_autotune.simulation`, which charges each
evaluation its recorded costs (compile; verification, every timed iteration
and framework overhead) plus the strategy's own compute, measured while it
runs here (ours and Optuna: the CPU time of the thread driving the search, so
other processes on a shared machine do not inflate it; Kernel Tuner: its own
``strategy_time``, wall time).

Ours (``--strategies``, default ``auto``) runs at every ``--workers`` count P
through the replay runner's clock and the batch search: P compile workers
compile ahead, one device verifies and times, and as many proposals are
pending as keep the device busy (:mod:`pytest_autotune.engine.pipeline_depth`, at
most P + 1: one on the device, one per compile worker), as the product does;
the device takes whichever pending candidate is compiled first; labels
``auto@8``, ``bayes@1`` (``--window full``: always P + 1, ``auto+@8``;
``--order proposal``: the oldest pending first, ``auto=@8``).

The anchors run sequentially, as they do: each evaluation costs its compile,
verification, all its timed runs and framework overhead, one after another,
plus the tuner's own compute before it. ``kt:<strategy>@1`` are Kernel Tuner
1.5.0's strategies (simulation mode on the same records, seeded as in
:mod:`benchmarks.anchors`; compute: Kernel Tuner's own ``strategy_time``);
``optuna:tpe@1`` is Optuna's TPE driven as our strategies are (compute:
measured around each ask). Anchor runs are cached per seed in
``--anchor-cache`` (only their evaluation order up to the 1% target and their
compute), so separate invocations add up.

Runs
    ``--runs`` seeds from ``--seed0``. A run ends when a result within 1% of the
    optimum is known, when the strategy ends, or after the evaluation cap
    ``min(N, max(--budget-factor * B, --min-budget))`` (B: the space's budget
    of the strategy benchmark, where random search is expected 95% of the way
    from the median to the optimum). A run that never gets within 5% (1%) is
    censored for that target: counted and reported, and a median over seeds
    that falls on a censored run is reported as censored (``null``).

Aggregate
    Per label: the median over spaces of the per-space medians (censored =
    infinitely slow). Speed-up of ours over an anchor on a space: the anchor's
    t5 median / ours (both censored: left out; only ours censored: 0). The
    issue's targets: at 8 workers at least 5x faster (median over spaces) than
    Kernel Tuner's best strategy (the ``kt:`` label with the lowest aggregate
    t5), 10x at 16, and at 1 worker faster than every Kernel Tuner strategy.

Example::

    python benchmarks/bench_time_to_solution.py --spaces ../shared/data/spaces --workers 1,4,8,16 --runs 20 \\
        --json benchmarks/results/time_to_solution.json
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import gc
import json
import math
import os
import sys
import time
import traceback
from collections import defaultdict
from pathlib import Path
from typing import Any, Mapping, Sequence

_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

import numpy as np  # noqa: E402

from benchmarks import anchors  # noqa: E402
from benchmarks._common import anchor_cache_dir, environment, print_table, write_json  # noqa: E402
from benchmarks.bench_strategies import (DEFAULT_SPACES, SpaceInfo, StrategySpec, load_space_info,  # noqa: E402
                                         parse_strategy_spec, select_files, split_specs, validate_spec)
from pytest_autotune import datasets  # noqa: E402
from pytest_autotune.simulation.replay import ReplayRunner  # noqa: E402
from pytest_autotune.engine.pipeline_depth import PipelineDepth  # noqa: E402
from pytest_autotune.simulation import (CostModel, Pipeline, SimulatedRun, replay_sequence,  # noqa: E402
                                       simulate_fleet_search, simulate_search)
from pytest_autotune.strategies import make_strategy  # noqa: E402
from pytest_autotune.strategies.base import StrategyError  # noqa: E402

DEFAULT_JSON = _ROOT / "benchmarks" / "results" / "time_to_solution.json"
DEFAULT_ANCHOR_CACHE = anchor_cache_dir() / "tts_anchor_cache.jsonl"  # regenerated when absent
CACHE_VERSION = "1"
TARGETS = {"t5": 1.05, "t1": 1.01}
#: Kernel Tuner's strategies run by default: all ten but bayes_opt (minutes of compute per run; ``--kernel-tuner all``)
DEFAULT_KT = tuple(s for s in anchors.KERNEL_TUNER_STRATEGIES if s != "bayes_opt")


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def parse_workers(text: str) -> list[int]:
    try:
        out = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise SystemExit(f"--workers: {text!r} is not a comma-separated list of integers") from None
    if not out or out[0] < 1:
        raise SystemExit(f"--workers: every worker count must be at least 1, got {text!r}")
    return out


def parse_devices(text: str) -> list[int]:
    try:
        out = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise SystemExit(f"--devices: {text!r} is not a comma-separated list of integers") from None
    if not out or out[0] < 1:
        raise SystemExit(f"--devices: every device count must be at least 1, got {text!r}")
    return out


def label_of(base: str, workers: int, devices: int) -> str:
    """``auto@8`` on one device (the labels of earlier results), ``auto@8x4`` on 4 devices of 8 compile workers each."""
    return f"{base}@{workers}" if devices == 1 else f"{base}@{workers}x{devices}"


def cap_of(space: SpaceInfo, factor: float, minimum: int) -> int:
    """The evaluation cap of a run on ``space``."""
    return int(min(space.n_configs, max(math.ceil(factor * space.budget), minimum)))


# -- one run (in worker processes) ---------------------------------------------------------------------------

_KT_SPACES: dict[str, anchors.KernelTunerSpace] = {}


def _summary(run: SimulatedRun, optimum: float) -> dict[str, Any]:
    out: dict[str, Any] = {"evaluations": len(run.rows), "sim_wall_s": run.wall_s, "busy_s": run.busy_s,
                           "stop_reason": run.stop_reason}
    for name, factor in TARGETS.items():
        out[name] = run.time_to(factor * optimum)
        out[f"{name}_evals"] = run.evaluations_to(factor * optimum)
    return out


def _truncate_at_target(rows: list[int], step_ms: list[float], values: list[float | None], limit: float):
    for i, v in enumerate(values):
        if v is not None and v <= limit:
            return rows[: i + 1], step_ms[: i + 1]
    return rows, step_ms


def run_task(task: Mapping[str, Any]) -> dict[str, Any]:
    """One (space, label, seed): the simulated times to 5% and 1% of the optimum."""
    t0 = time.perf_counter()
    spec: StrategySpec = task["spec"]
    out: dict[str, Any] = {"space": task["space"], "label": task["label"], "seed": task["seed"], "cap": task["cap"]}
    try:
        rec = datasets.load_dataset(task["path"])
        gc.collect()
        gc.freeze()  # long-lived data out of the collector's way: its pauses would be charged as compute
        optimum = rec.optimum
        stop = TARGETS["t1"] * optimum
        cached = task.get("cached")
        if spec.kind == "kernel_tuner" or (spec.kind == "optuna" and cached is not None):
            if cached is None:
                kt = _KT_SPACES.get(task["path"])
                if kt is None:
                    kt = _KT_SPACES[task["path"]] = anchors.KernelTunerSpace(rec)
                kt_run = kt.run(spec.name, task["seed"], task["cap"], spec.hyperparameters, stop_below=stop)
                rows, step_ms = _truncate_at_target(kt_run.rows, kt_run.step_ms, kt_run.values, stop)
                out["anchor"] = {"rows": rows, "step_ms": step_ms}
            else:
                rows, step_ms = cached["rows"], cached["step_ms"]
            run = replay_sequence(rec, rows, np.asarray(step_ms) / 1e3, workers=1, stop_below=stop)
        else:
            workers = int(task["workers"])
            if spec.kind == "optuna":
                strategy = anchors.OptunaTPE(rec.space, seed=task["seed"], **spec.hyperparameters)
            else:
                strategy = make_strategy({"name": spec.name, **spec.hyperparameters}, rec.space, seed=task["seed"])
            devices = int(task.get("devices", 1))
            # D devices of `workers` compile workers each (a cluster, driven as engine/fleet.py drives one)
            clock = workers if devices == 1 else Pipeline(workers * devices, devices=devices, host_waits=False)
            runner = ReplayRunner(rec, clock=clock)
            runner.charger.timer = time.thread_time  # the host's CPU time: contention on this machine not charged
            batch = 1 if spec.kind == "optuna" else devices * (workers + 1)
            depth = PipelineDepth(batch, devices=devices) \
                if task.get("window", "adaptive") == "adaptive" and batch > 1 else None
            simulate = simulate_search if devices == 1 else simulate_fleet_search
            run = simulate(strategy, runner, task["cap"], batch_size=batch, stop_below=stop, depth=depth,
                           ready_first=task.get("order", "first-ready") == "first-ready",
                           early_stop=task.get("early_stop", True))
            out["score_at_B"] = _score_at(run, task["B"], rec.optimum, task["median"])
            if spec.kind == "optuna":  # cache the order and the measured compute, as for Kernel Tuner
                out["anchor"] = _optuna_record(run, runner)
        out.update(_summary(run, optimum))
    except Exception as exc:  # noqa: BLE001 - reported per run, the benchmark goes on
        out["error"] = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
    finally:
        gc.unfreeze()
    out["real_s"] = time.perf_counter() - t0
    return out


def _score_at(run: SimulatedRun, evaluations: int, optimum: float, median: float) -> float | None:
    """Search quality per evaluation: (median - best of the first ``evaluations``) / (median - optimum), the
    strategy benchmark's score (1 = the optimum; a run that stopped at the 1% target keeps its best)."""
    found = [v for v in run.values[:evaluations] if v is not None]
    if not found or median <= optimum:
        return None
    return float((median - min(found)) / (median - optimum))


def _optuna_record(run: SimulatedRun, runner: ReplayRunner) -> dict[str, Any]:
    """The order and per-evaluation host compute of a sequential run, for the anchor cache."""
    think: dict[int, float] = defaultdict(float)
    index = {row: i for i, row in enumerate(run.rows)}
    pending = 0.0
    for span in runner.charger.pipeline.spans:
        if span.what == "think":
            pending += span.end - span.start
        elif span.what == "compile" and span.key in index:
            think[index[span.key]] += pending
            pending = 0.0
    return {"rows": [int(r) for r in run.rows], "step_ms": [1e3 * think[i] for i in range(len(run.rows))]}


def _worker_init() -> None:
    anchors.quiet_optuna()
    try:
        from threadpoolctl import threadpool_limits
        _LIMITS.append(threadpool_limits(1))  # one thread per process: no BLAS oversubscription on shared cores
    except Exception:  # noqa: BLE001 - optional
        pass


_LIMITS: list[Any] = []


# -- anchor cache ------------------------------------------------------------------------------------------------


class AnchorCache:
    """JSONL of anchor runs (order up to the 1% target, per-evaluation compute), keyed per seed."""

    def __init__(self, path: Path | None):
        self.path = path
        self.entries: dict[str, dict[str, Any]] = {}
        if path is not None and path.is_file():
            for line in path.read_text().splitlines():
                try:
                    doc = json.loads(line)
                    self.entries[doc["key"]] = doc
                except (ValueError, KeyError, TypeError):
                    continue  # a torn line from an interrupted run

    @staticmethod
    def key(space: SpaceInfo, spec: StrategySpec, seed: int, cap: int) -> str:
        lib = anchors.kernel_tuner_version() if spec.kind == "kernel_tuner" else anchors.optuna_version()
        return "|".join([CACHE_VERSION, space.fingerprint[:16], spec.label, str(seed), str(cap), str(lib)])

    def add(self, key: str, record: Mapping[str, Any]) -> None:
        self.entries[key] = {"key": key, **record}
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a") as f:
                f.write(json.dumps(self.entries[key], separators=(",", ":")) + "\n")


# -- summaries ---------------------------------------------------------------------------------------------------


def censored_median(values: Sequence[float | None]) -> float | None:
    """Median with censored runs (None) as infinitely slow; None when the median falls on one."""
    arr = np.sort(np.array([np.inf if v is None else float(v) for v in values]))
    if len(arr) == 0:
        return None
    m = float(np.median(arr)) if np.isfinite(arr).all() else _median_with_inf(arr)
    return m if math.isfinite(m) else None


def _median_with_inf(arr: np.ndarray) -> float:
    n = len(arr)
    mid = arr[n // 2] if n % 2 else (arr[n // 2 - 1] + arr[n // 2]) / 2
    return float(mid)


def summarise(results: Sequence[Mapping[str, Any]], labels: Sequence[str],
              spaces: Sequence[SpaceInfo]) -> dict[str, Any]:
    by: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for r in results:
        if "error" not in r:
            by[(r["space"], r["label"])].append(r)
    per_space: dict[str, dict[str, Any]] = {}
    for s in spaces:
        entry: dict[str, Any] = {}
        for label in labels:
            runs = by.get((s.name, label), [])
            if not runs:
                continue
            cell: dict[str, Any] = {"runs": len(runs)}
            for name in TARGETS:
                cell[f"{name}_median_s"] = censored_median([r[name] for r in runs])
                evals = [r[f"{name}_evals"] for r in runs]
                cell[f"{name}_median_evals"] = censored_median(evals)
            cell["censored"] = {name: sum(1 for r in runs if r[name] is None) for name in TARGETS}
            cell["seeds"] = [r["seed"] for r in runs]
            cell["t5_s"] = [r["t5"] for r in runs]
            cell["t1_s"] = [r["t1"] for r in runs]
            cell["real_s_mean"] = float(np.mean([r["real_s"] for r in runs]))
            scores = [r["score_at_B"] for r in runs if r.get("score_at_B") is not None]
            if scores:
                cell["score_at_B_median"] = float(np.median(scores))
            entry[label] = cell
        per_space[s.name] = entry
    aggregate: dict[str, Any] = {}
    for label in labels:
        cells = [per_space[s.name][label] for s in spaces if label in per_space[s.name]]
        if not cells:
            continue
        aggregate[label] = {
            "spaces": len(cells),
            **{f"{name}_median_s": censored_median([c[f"{name}_median_s"] for c in cells]) for name in TARGETS},
            "censored": {name: sum(c["censored"][name] for c in cells) for name in TARGETS},
            "runs": sum(c["runs"] for c in cells),
        }
    return {"spaces": per_space, "aggregate": aggregate}


def speedups(per_space: Mapping[str, Mapping[str, Any]], ours: str, anchor: str, target: str = "t5") -> list[float]:
    """Per space: the anchor's median time / ours (inf where only the anchor is censored, 0 where only ours)."""
    out = []
    for cells in per_space.values():
        if ours not in cells or anchor not in cells:
            continue
        a, o = cells[anchor][f"{target}_median_s"], cells[ours][f"{target}_median_s"]
        if a is None and o is None:
            continue
        if o is None:  # only ours never got there
            out.append(0.0)
        elif a is None or o == 0:  # only the anchor never got there
            out.append(math.inf)
        else:
            out.append(a / o)
    return out


def _median(xs: Sequence[float]) -> float | None:
    return float(np.median(xs)) if xs else None


def targets(summary: Mapping[str, Any], ours_labels: Sequence[str], kt_labels: Sequence[str],
            workers: Sequence[int]) -> dict[str, Any]:
    agg, per_space = summary["aggregate"], summary["spaces"]
    kt_present = [k for k in kt_labels if k in agg]
    if not kt_present:
        return {"note": "no Kernel Tuner strategies in this run"}

    def agg_key(label: str) -> float:
        v = agg[label]["t5_median_s"]
        return math.inf if v is None else v

    best_kt = min(kt_present, key=agg_key)
    out: dict[str, Any] = {"kt_best_strategy": best_kt, "kt_best_t5_median_s": agg[best_kt]["t5_median_s"],
                           "checks": []}
    for label in ours_labels:
        name, _, w = label.rpartition("@")
        w = int(w)
        row: dict[str, Any] = {"ours": label, "workers": w}
        row["speedup_vs_kt_best_median"] = _median(speedups(per_space, label, best_kt))
        row["speedup_vs_each_kt_median"] = {k: _median(speedups(per_space, label, k)) for k in kt_present}
        if w == 8:
            row["target"] = ">= 5x vs Kernel Tuner's best strategy"
            row["met"] = (row["speedup_vs_kt_best_median"] or 0) >= 5
        elif w == 16:
            row["target"] = ">= 10x vs Kernel Tuner's best strategy (aim)"
            row["met"] = (row["speedup_vs_kt_best_median"] or 0) >= 10
        elif w == 1:
            row["target"] = "faster than every Kernel Tuner strategy (median speed-up > 1 against each)"
            row["met"] = all((v or 0) > 1 for v in row["speedup_vs_each_kt_median"].values())
        out["checks"].append(row)
    return out


def scaling(summary: Mapping[str, Any], fleet: Sequence[tuple[str, int, int]], kt_best: str | None) -> list[dict]:
    """Per label on D devices: speed-up in time to 5% over the same strategy and workers on one device (median over
    spaces of the per-space ratio), its fraction of linear, the speed-up over Kernel Tuner's best sequential
    strategy, evaluations to 5% and the score after B evaluations (what a wider batch costs in search quality)."""
    agg, per_space = summary["aggregate"], summary["spaces"]
    one = {(lab.rsplit("@", 1)[0], w): lab for lab, w, d in fleet if d == 1}
    rows = []
    for label, w, d in fleet:
        if label not in agg:
            continue
        base = one.get((label.rsplit("@", 1)[0], w))
        cells = [c[label] for c in per_space.values() if label in c]
        row: dict[str, Any] = {"label": label, "devices": d, "workers_per_device": w,
                               "t5_median_s": agg[label]["t5_median_s"], "t1_median_s": agg[label]["t1_median_s"],
                               "t5_median_evals": _median([c["t5_median_evals"] for c in cells
                                                           if c["t5_median_evals"] is not None]),
                               "score_at_B_median": _median([c["score_at_B_median"] for c in cells
                                                             if "score_at_B_median" in c])}
        if base is not None and base in agg:
            sp = _median(speedups(per_space, label, base))
            row["speedup_over_1_device"] = sp
            row["fraction_of_linear"] = None if sp is None else sp / d
        if kt_best is not None:
            row["speedup_vs_kt_best"] = _median(speedups(per_space, label, kt_best))
        if d == 8:
            row["target"] = ">= 0.6 of linear over 1 device and >= 25x Kernel Tuner's best sequential strategy"
            row["met"] = (row.get("fraction_of_linear") or 0) >= 0.6 and (row.get("speedup_vs_kt_best") or 0) >= 25
        rows.append(row)
    return rows


def format_scaling(rows: Sequence[Mapping[str, Any]], kt_best: str | None) -> None:
    def f(v: Any, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)

    table = [[r["label"], str(r["devices"]), _fmt_s(r["t5_median_s"]), f(r.get("speedup_over_1_device"), ".2f"),
              f(r.get("fraction_of_linear"), ".2f"), f(r.get("speedup_vs_kt_best"), ".1f"),
              f(r["t5_median_evals"], ".0f"), f(r["score_at_B_median"], ".3f"),
              {True: "met", False: "NOT met"}.get(r.get("met"), "")] for r in rows]
    print_table(table, ["ours", "D", "t5 med", "x 1 dev", "of linear", f"x {kt_best or 'kt'}", "evals to 5%",
                        "score@B", "target"],
                title="scaling over D devices (time to 5%: medians over spaces of per-space medians)")


# -- output ------------------------------------------------------------------------------------------------------


def _fmt_s(v: float | None) -> str:
    if v is None:
        return "cens."
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 1 else f"{v:.2f}"


def format_table(summary: Mapping[str, Any], labels: Sequence[str], spaces: Sequence[SpaceInfo]) -> None:
    agg = summary["aggregate"]
    shown = [lab for lab in labels if lab in agg]

    def sort_key(label: str) -> float:
        v = agg[label]["t5_median_s"]
        return math.inf if v is None else v

    shown.sort(key=sort_key)
    short = [s.name.replace("convolution_milo_", "conv_").replace("KTConvolutionOutput_", "ktt_") for s in spaces]
    rows = []
    for label in shown:
        a = agg[label]
        cells = [label, _fmt_s(a["t5_median_s"]), _fmt_s(a["t1_median_s"]), f"{a['censored']['t5']}/{a['runs']}",
                 f"{a['censored']['t1']}/{a['runs']}"]
        for s in spaces:
            c = summary["spaces"][s.name].get(label)
            cells.append("-" if c is None else _fmt_s(c["t5_median_s"]))
        rows.append(cells)
    print_table(rows, ["strategy", "t5 med", "t1 med", "cens5", "cens1"] + short,
                title="simulated seconds to within 5% (t5) / 1% (t1) of the optimum: medians over seeds; "
                      "aggregate = median over spaces; per-space columns: t5")


def format_targets(t: Mapping[str, Any]) -> None:
    if "checks" not in t:
        print(t.get("note", ""))
        return
    rows = []
    for c in t["checks"]:
        worst = min(c["speedup_vs_each_kt_median"].items(), key=lambda kv: kv[1] if kv[1] is not None else -1)
        rows.append([c["ours"], f"{c['speedup_vs_kt_best_median']:.2f}x" if c["speedup_vs_kt_best_median"] is not None
                     else "-", f"{worst[0]} {worst[1]:.2f}x" if worst[1] is not None else "-",
                     c.get("target", ""), {True: "met", False: "NOT met"}.get(c.get("met"), "")])
    print_table(rows, ["ours", f"vs {t['kt_best_strategy']}", "worst vs any kt", "target", ""],
                title=f"speed-up in time to 5% (median over spaces); Kernel Tuner's best strategy by aggregate t5: "
                      f"{t['kt_best_strategy']}", align="lrlll")


# -- main ----------------------------------------------------------------------------------------------------------


def build_labels(args: argparse.Namespace, workers: Sequence[int],
                 devices: Sequence[int] = (1,)) -> list[tuple[str, StrategySpec, int, int]]:
    """(label, strategy, compile workers per device, devices) of every configuration to run."""
    out: list[tuple[str, StrategySpec, int, int]] = []
    for text in split_specs(args.strategies) if args.strategies.strip() else []:
        spec = parse_strategy_spec(text)
        if spec.kind != "ours":
            raise StrategyError(f"--strategies takes our strategies; use --kernel-tuner / --optuna for {text!r}")
        validate_spec(spec)
        mark = ("+" if args.window == "full" else "") + ("=" if args.order == "proposal" else "")
        out.extend((label_of(f"{spec.label}{mark}", w, d), spec, w, d) for d in devices for w in workers)
    if args.kernel_tuner != "none":
        if not anchors.have_kernel_tuner():
            _log("Kernel Tuner is not installed (pip install -e '.[bench]'): its strategies are skipped")
        else:
            names = anchors.KERNEL_TUNER_STRATEGIES if args.kernel_tuner == "all" else (
                DEFAULT_KT if args.kernel_tuner == "default" else split_specs(args.kernel_tuner))
            for name in names:
                spec = parse_strategy_spec(f"kt:{name}")
                validate_spec(spec)
                out.append((f"{spec.label}@1", spec, 1, 1))
    if args.optuna:
        if not anchors.have_optuna():
            _log("Optuna is not installed (pip install -e '.[bench]'): optuna:tpe is skipped")
        else:
            spec = parse_strategy_spec("optuna:tpe")
            out.append(("optuna:tpe@1", spec, 1, 1))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n", 2)[2])
    p.add_argument("--spaces", type=Path, default=DEFAULT_SPACES,
                   help="folder laid out like ../shared/data/spaces (default: %(default)s); skipped when absent")
    p.add_argument("--only", help="comma-separated glob patterns of space names")
    p.add_argument("--workers", default="1,4,8,16", help="compile-worker counts for ours, per device "
                   "(default: %(default)s)")
    p.add_argument("--devices", default="1", help="device counts for ours: a simulated cluster of D devices with "
                   "--workers compile workers each, driven as the Ray backend drives one; labels auto@8x4 "
                   "(default: %(default)s)")
    p.add_argument("--strategies", default="auto", help="our strategies, comma-separated (default: %(default)s)")
    p.add_argument("--kernel-tuner", default="default", metavar="LIST",
                   help="Kernel Tuner strategies: 'default' (all but bayes_opt), 'all', 'none' or a list")
    p.add_argument("--optuna", action=argparse.BooleanOptionalAction, default=True, help="run optuna:tpe@1")
    p.add_argument("--anchor-runs", type=int, help="seeds for Kernel Tuner's strategies (default: --runs)")
    p.add_argument("--optuna-runs", type=int, help="seeds for optuna:tpe@1 (default: --anchor-runs; the slowest runs)")
    p.add_argument("--window", choices=("adaptive", "full"), default="adaptive",
                   help="ours: pending proposals just enough to keep the device busy, 1 + ceil(compile / device) "
                        "from what was measured, at most workers + 1, as the product does ('adaptive'), or always "
                        "workers + 1 ('full'; labels get '+')")
    p.add_argument("--order", choices=("first-ready", "proposal"), default="first-ready",
                   help="ours: the device takes the first compiled pending candidate, as the product does "
                        "('first-ready'), or the oldest ('proposal'; labels get '=')")
    p.add_argument("--early-stop", action=argparse.BooleanOptionalAction, default=True,
                   help="ours stops timing hopeless candidates as the product does (default: on)")
    p.add_argument("--runs", type=int, default=20, help="seeds per (space, strategy) (default: %(default)s)")
    p.add_argument("--seed0", type=int, default=0)
    p.add_argument("--budget-factor", type=float, default=4.0,
                   help="evaluation cap = min(N, max(factor * B, --min-budget)) (default: %(default)s)")
    p.add_argument("--min-budget", type=int, default=400, help="(default: %(default)s)")
    p.add_argument("--jobs", type=int, default=2, help="processes (default: %(default)s)")
    p.add_argument("--json", type=Path, default=DEFAULT_JSON, help="output (default: %(default)s)")
    p.add_argument("--anchor-cache", type=Path, default=DEFAULT_ANCHOR_CACHE)
    p.add_argument("--no-anchor-cache", action="store_true", help="recompute the anchors (and do not store them)")
    p.add_argument("--anchors-from-cache", action="store_true",
                   help="anchor runs only from the cache: a seed not cached is left out (each cell reports its runs)")
    args = p.parse_args(argv)
    optional = [n for n in (args.anchor_runs, args.optuna_runs) if n is not None]
    if min([args.runs, args.jobs, args.min_budget] + optional) < 1 or \
            not args.budget_factor > 0:
        p.error("--runs, --anchor-runs, --optuna-runs, --jobs, --min-budget and --budget-factor must be positive")
    workers = parse_workers(args.workers)
    devices = parse_devices(args.devices)
    if not args.spaces.is_dir():
        print(f"no folder of recorded spaces at {args.spaces}: nothing to do")
        return 0
    try:
        labelled = build_labels(args, workers, devices)
    except StrategyError as exc:
        p.error(str(exc))
    files = select_files(args.spaces, args.only)
    if not files:
        print(f"no measured spaces under {args.spaces}" + (f" matching {args.only!r}" if args.only else ""))
        return 0
    spaces = [load_space_info(f) for f in files]
    cache = AnchorCache(None if args.no_anchor_cache else args.anchor_cache)
    tasks, costs_info, skipped = [], {}, 0
    seeds = range(args.seed0, args.seed0 + args.runs)
    anchor_runs = args.anchor_runs if args.anchor_runs is not None else args.runs
    seeds_of = {"kernel_tuner": anchor_runs, "optuna": args.optuna_runs if args.optuna_runs is not None else anchor_runs}
    for s, f in zip(spaces, files):
        rec = datasets.load_dataset(f)
        model = CostModel(rec)
        charges = [model.charge(r) for r in range(rec.n_configs)]
        costs_info[s.name] = {
            "median_compile_s": float(np.median([c.compile for c in charges])),
            "median_device_s": float(np.median([c.device() for c in charges if c.reaches_device] or [0.0])),
            "assumptions": model.assumptions,
            "cost_fields": dict(rec.costs.fields) if rec.costs is not None else {},
            "cap": cap_of(s, args.budget_factor, args.min_budget), "B": s.budget, "N": s.n_configs,
            "optimum_ms": s.optimum,
        }
        for label, spec, w, d in labelled:
            for seed in seeds[:seeds_of.get(spec.kind, args.runs)]:
                cap = cap_of(s, args.budget_factor, args.min_budget)
                task = {"space": s.name, "path": str(f), "label": label, "spec": spec, "workers": w, "devices": d,
                        "seed": seed, "B": s.budget, "median": s.median,
                        "cap": cap, "window": args.window, "order": args.order, "early_stop": args.early_stop}
                if spec.is_anchor:
                    task["key"] = AnchorCache.key(s, spec, seed, cap)
                    task["cached"] = cache.entries.get(task["key"])
                    if task["cached"] is None and args.anchors_from_cache:
                        skipped += 1
                        continue
                tasks.append(task)
    tasks.sort(key=lambda t: t["seed"])  # seed by seed: an interrupted run leaves whole seeds in the anchor cache
    _log(f"{len(tasks)} runs on {len(spaces)} spaces ({sum(1 for t in tasks if t.get('cached'))} anchors cached, "
         f"{skipped} anchor runs not cached and left out)")
    results: list[dict[str, Any]] = []
    t0 = time.perf_counter()

    def finished(r: dict[str, Any], task: Mapping[str, Any]) -> None:
        if "error" in r:
            _log(f"ERROR {r['space']} {r['label']} seed {r['seed']}: {r['error'].splitlines()[0]}")
        elif "anchor" in r and task.get("key") and not task.get("cached") and not args.no_anchor_cache:
            cache.add(task["key"], {"space": r["space"], "label": r["label"], "seed": r["seed"], **r["anchor"]})
        r.pop("anchor", None)
        results.append(r)
        if len(results) % 50 == 0:
            _log(f"  {len(results)}/{len(tasks)} runs, {time.perf_counter() - t0:.0f} s")

    if args.jobs == 1:
        _worker_init()
        for task in tasks:
            finished(run_task(task), task)
    else:
        with cf.ProcessPoolExecutor(args.jobs, initializer=_worker_init) as pool:
            futures = {pool.submit(run_task, t): t for t in tasks}
            for fut in cf.as_completed(futures):
                finished(fut.result(), futures[fut])
    labels = [lab for lab, _, _, _ in labelled]
    summary = summarise(results, labels, spaces)
    ours_labels = [lab for lab, spec, _, d in labelled if spec.kind == "ours" and d == 1]
    kt_labels = [lab for lab, spec, _, _ in labelled if spec.kind == "kernel_tuner"]
    fleet = [(lab, w, d) for lab, spec, w, d in labelled if spec.kind == "ours"]
    target_report = targets(summary, ours_labels, kt_labels, workers)
    format_table(summary, labels, spaces)
    print()
    format_targets(target_report)
    kt_best = target_report.get("kt_best_strategy")
    scaling_rows = scaling(summary, fleet, kt_best) if len(devices) > 1 else []
    if scaling_rows:
        print()
        format_scaling(scaling_rows, kt_best)
    errors = [r for r in results if "error" in r]
    payload = {
        "meta": {"command": " ".join(sys.argv), "runs": args.runs, "seed0": args.seed0, "workers": workers,
                 "devices": devices,
                 "anchor_runs": seeds_of["kernel_tuner"], "optuna_runs": seeds_of["optuna"],
                 "budget_factor": args.budget_factor, "min_budget": args.min_budget,
                 "batch_size": "ours: up to workers + 1 (see window); 1 for the anchors", "window": args.window,
                 "order": args.order,
                 "early_stop": args.early_stop,
                 "clock": "pytest_autotune.simulation: P compile workers, one serial device (verify + timed runs + "
                          "framework), host compute measured; anchors sequential",
                 "errors": len(errors), "real_s": time.perf_counter() - t0, "anchor_runs_left_out": skipped,
                 "environment": environment(["kernel_tuner", "optuna", "numpy", "scikit-learn"])},
        "costs": costs_info,
        **summary,
        "targets": target_report,
        "scaling": scaling_rows,
        "error_samples": [e["error"] for e in errors[:5]],
    }
    write_json(args.json, payload)
    _log(f"wrote {args.json}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
