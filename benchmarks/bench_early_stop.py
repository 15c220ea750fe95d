#!/usr/bin/env python
"""Early-stopping benchmark: replay the recorded per-run times along the strategies' real evaluation orders.

For every recorded space whose configurations keep their individual timed
runs (T4 ``times.runtimes[]``, Kernel Tuner caches ``times[]``; KTT files
have one duration per configuration and are skipped), every strategy of
``--strategies`` and every seed:

1. the strategy searches the space through the :class:`~pytest_autotune.engine.evaluator.Evaluator`
   with the recorded outcomes and the space's budget ``B`` (the same as
   ``bench_strategies.py``): its real evaluation order;
2. every rule of the grid (``--runs-grid`` k x ``--factors`` c: stop when the
   fastest of the first k runs is above c times the best fully timed value
   so far) is replayed along that order: a stopped configuration is charged
   its first k runs only and does not become the best so far;
3. the product path: the same search with ``early_stop`` on, the
   :class:`~pytest_autotune.simulation.replay.ReplayRunner` applying the default
   rule (:data:`~pytest_autotune.measure.timing.EARLY_STOP_RUNS`,
   :data:`~pytest_autotune.measure.timing.EARLY_STOP_FACTOR`); here the strategy sees
   the partial values, so its order may differ from 1.

Reported per rule (and per space for the default rule):

* ``saved``: device run time saved, as a fraction of the timed runs of all
  valid evaluations (compile and verification are not in the recordings'
  per-run times and are not counted);
* ``stopped``: fraction of valid evaluations stopped;
* ``false_stops``: stopped configurations whose recorded time is within 5% of
  the best the run found without stopping (``false_stops_opt``: within 5% of
  the space's optimum); the target is none;
* product path: the same, plus the strategy score (``bench_strategies``'s
  metric, 0 = random, 1 = optimum at once) with and without early stopping.

Example::

    python benchmarks/bench_early_stop.py --spaces ../shared/data/spaces --runs 5 \\
        --json benchmarks/results/early_stop.json
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from benchmarks._common import environment, print_table, write_json  # noqa: E402
from benchmarks.scoring import SpaceStats, score_run  # noqa: E402
from pytest_autotune import datasets  # noqa: E402
from pytest_autotune.engine.evaluator import Evaluator  # noqa: E402
from pytest_autotune.measure.timing import EARLY_STOP_FACTOR, EARLY_STOP_RUNS, MeasureOptions  # noqa: E402
from pytest_autotune.results import Measurement  # noqa: E402
from pytest_autotune.simulation.replay import ReplayRunner  # noqa: E402
from pytest_autotune.strategies import make_strategy  # noqa: E402

DEFAULT_STRATEGIES = "random,genetic,simulated_annealing,pso,tpe,auto"
NEAR = 1.05  # "within 5% of the best"


def has_runs(rec: datasets.RecordedSpace) -> bool:
    """Whether the valid configurations keep more than one timed run each."""
    rows = np.flatnonzero(rec.ok)
    return len(rows) > 0 and all(rec.samples[r] is not None and len(rec.samples[r]) > 1 for r in rows[:50])


def recorded_objective(rec: datasets.RecordedSpace):
    def objective(params: Mapping[str, Any]) -> Measurement:
        return rec.measurement(rec.space.find(dict(params)), params)

    return objective


def our_runs(samples: np.ndarray, options: MeasureOptions = MeasureOptions()) -> np.ndarray:
    """The runs our timing loop would take of this configuration (:func:`~pytest_autotune.measure.timing.time_runs`
    with ``options``: at least ``min_iterations``, more until ``time_budget_s``), the recording's runs in
    order, repeated when it holds fewer."""
    taken, spent = [], 0.0
    i = 0
    while len(taken) < options.max_iterations:
        taken.append(float(samples[i % len(samples)]))
        spent += taken[-1]
        i += 1
        if len(taken) >= options.min_iterations and spent >= options.time_budget_s * 1e3:
            break
    return np.asarray(taken)


def worst_first_runs(rec: datasets.RecordedSpace, runs: int) -> float:
    """How far the fastest of a configuration's first ``runs`` runs lies above its own recorded time, at worst."""
    return max(float(rec.samples[r][:runs].min() / rec.times[r]) for r in np.flatnonzero(rec.ok))


def replay_rule(rec: datasets.RecordedSpace, rows: Sequence[int], runs: int, factor: float,
                ours_of: Mapping[int, np.ndarray] | None = None) -> dict[str, Any]:
    """Charge the order ``rows`` under one rule; what it saved and whom it stopped.

    ``saved``: of the recorded runs; ``saved_ours``: of the runs our own timing loop would take."""
    best = None
    total = saved = total_ours = saved_ours = 0.0
    stopped: list[int] = []
    valid = [r for r in rows if r >= 0 and rec.failures[r] is None]
    for r in valid:
        s = rec.samples[r]
        ours = ours_of[r] if ours_of is not None else our_runs(s)
        total += float(s.sum())
        total_ours += float(ours.sum())
        if best is not None and len(s) >= runs and float(s[:runs].min()) > factor * best:
            stopped.append(r)
            saved += float(s[runs:].sum())
            saved_ours += float(ours[runs:].sum())
            continue
        best = float(rec.times[r]) if best is None else min(best, float(rec.times[r]))
    found = min(float(rec.times[r]) for r in valid) if valid else float("nan")
    return {"saved": saved / total if total else 0.0, "saved_ours": saved_ours / total_ours if total_ours else 0.0,
            "stopped": len(stopped) / max(1, len(valid)),
            "false_stops": sum(rec.times[r] <= NEAR * found for r in stopped),
            "false_stops_opt": sum(rec.times[r] <= NEAR * rec.optimum for r in stopped),
            "lost_best": bool(valid) and min(float(rec.times[r]) for r in valid if r not in set(stopped)) > found}


def run_one(task: Mapping[str, Any]) -> dict[str, Any]:
    rec = datasets.load_dataset(task["path"])
    stats = SpaceStats.from_times(rec.times)
    budget, name, seed = task["budget"], task["strategy"], task["seed"]
    t0 = time.perf_counter()
    history = Evaluator(rec.space, recorded_objective(rec), budget=budget).run(
        make_strategy(name, rec.space, seed=seed))
    rows = [r.row for r in history.records]
    ours_of = {r: our_runs(rec.samples[r]) for r in rows if r >= 0 and rec.failures[r] is None}
    grid = {f"k{k}c{c:g}": replay_rule(rec, rows, k, c, ours_of) for k in task["runs_grid"] for c in task["factors"]}
    plain_score = float(score_run(stats, [r.value for r in history.records], budget))

    runner = ReplayRunner(rec)
    stopping = Evaluator(rec.space, runner.evaluate, budget=budget, early_stop=True).run(
        make_strategy(name, rec.space, seed=seed))
    records = [r for r in stopping.records if r.value is not None]
    stopped = [r for r in records if r.measurement.early_stopped]
    found = min(float(rec.times[r.row]) for r in records)
    total = sum(float(rec.samples[r.row].sum()) for r in records)
    charged = sum(float(sum(r.measurement.samples)) for r in records)
    product = {"saved": 1.0 - charged / total, "stopped": len(stopped) / max(1, len(records)),
               "false_stops": sum(rec.times[r.row] <= NEAR * found for r in stopped),
               "false_stops_opt": sum(rec.times[r.row] <= NEAR * rec.optimum for r in stopped),
               "score": float(score_run(stats, [r.value if r.eligible else None for r in stopping.records], budget)),
               "score_without": plain_score,
               "same_order": [r.row for r in stopping.records] == rows}
    return {"space": task["space"], "strategy": name, "seed": seed, "grid": grid, "product": product,
            "evaluations": len(rows), "wall_s": time.perf_counter() - t0}


def slim(run: Mapping[str, Any], rule: str) -> dict[str, Any]:
    """A run for the JSON: the product path and the default rule's replay (the grid is in the summary)."""
    return {**{k: v for k, v in run.items() if k != "grid"}, "replay": run["grid"][rule]}


def factors_of(rule: str) -> tuple[int, float]:
    k, c = rule[1:].split("c")
    return int(k), float(c)


def _mean(xs: Sequence[float]) -> float:
    return float(np.mean(xs)) if len(xs) else float("nan")


def summarise(results: Sequence[Mapping[str, Any]], rules: Sequence[str],
              worst: Mapping[int, float]) -> dict[str, Any]:
    spaces = sorted({r["space"] for r in results})
    by_space = {s: [r for r in results if r["space"] == s] for s in spaces}
    grid = {}
    for rule in rules:
        per_space = {s: {"saved": _mean([r["grid"][rule]["saved"] for r in rs]),
                         "saved_ours": _mean([r["grid"][rule]["saved_ours"] for r in rs]),
                         "stopped": _mean([r["grid"][rule]["stopped"] for r in rs]),
                         "false_stops": int(sum(r["grid"][rule]["false_stops"] for r in rs)),
                         "false_stops_opt": int(sum(r["grid"][rule]["false_stops_opt"] for r in rs)),
                         "runs_with_false_stop": int(sum(r["grid"][rule]["false_stops"] > 0 for r in rs)),
                         "lost_best": int(sum(r["grid"][rule]["lost_best"] for r in rs)),
                         "runs": len(rs)}
                     for s, rs in by_space.items()}
        grid[rule] = {"spaces": per_space,
                      "saved_mean_over_spaces": _mean([v["saved"] for v in per_space.values()]),
                      "saved_min_over_spaces": float(min(v["saved"] for v in per_space.values())),
                      "saved_ours_mean_over_spaces": _mean([v["saved_ours"] for v in per_space.values()]),
                      "false_stops": int(sum(v["false_stops"] for v in per_space.values())),
                      "false_stops_opt": int(sum(v["false_stops_opt"] for v in per_space.values())),
                      "runs_with_false_stop": int(sum(v["runs_with_false_stop"] for v in per_space.values())),
                      "runs": len(results),
                      # c over the factor that could stop a configuration within 5% of the best in some order
                      "margin": float(factors_of(rule)[1] / (NEAR * worst[factors_of(rule)[0]]))}
    product = {}
    for s, rs in by_space.items():
        product[s] = {key: _mean([r["product"][key] for r in rs]) for key in ("saved", "stopped", "score",
                                                                             "score_without")}
        product[s].update(false_stops=int(sum(r["product"]["false_stops"] for r in rs)),
                          false_stops_opt=int(sum(r["product"]["false_stops_opt"] for r in rs)),
                          same_order=int(sum(r["product"]["same_order"] for r in rs)), runs=len(rs))
    strategies = sorted({r["strategy"] for r in results})
    per_strategy = {st: {"saved": _mean([r["product"]["saved"] for r in results if r["strategy"] == st]),
                         "false_stops": int(sum(r["product"]["false_stops"] for r in results if r["strategy"] == st)),
                         "score": _mean([r["product"]["score"] for r in results if r["strategy"] == st]),
                         "score_without": _mean([r["product"]["score_without"] for r in results
                                                 if r["strategy"] == st])}
                    for st in strategies}
    return {"grid": grid, "product": {"spaces": product, "strategies": per_strategy,
                                      "saved_mean_over_spaces": _mean([v["saved"] for v in product.values()]),
                                      "false_stops": int(sum(v["false_stops"] for v in product.values())),
                                      "false_stops_opt": int(sum(v["false_stops_opt"] for v in product.values()))}}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--spaces", type=Path, default=datasets.default_spaces_root())
    p.add_argument("--strategies", default=DEFAULT_STRATEGIES, help=f"comma-separated (default {DEFAULT_STRATEGIES})")
    p.add_argument("--runs", type=int, default=5, help="seeds per space and strategy (default 5)")
    p.add_argument("--seed0", type=int, default=0)
    p.add_argument("--runs-grid", default="1,2,3,4", help="k values of the rule grid (default 1,2,3,4)")
    p.add_argument("--factors", default="1.5,2,2.5,3,4", help="c values of the rule grid (default 1.5,2,2.5,3,4)")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    runs_grid = [int(x) for x in args.runs_grid.split(",")]
    factors = [float(x) for x in args.factors.split(",")]
    rules = [f"k{k}c{c:g}" for k in runs_grid for c in factors]
    default_rule = f"k{EARLY_STOP_RUNS}c{EARLY_STOP_FACTOR:g}"
    if default_rule not in rules:
        rules.append(default_rule)
        runs_grid, factors = sorted({*runs_grid, EARLY_STOP_RUNS}), sorted({*factors, EARLY_STOP_FACTOR})
        rules = [f"k{k}c{c:g}" for k in runs_grid for c in factors]
    spaces = []
    worst_by_space: dict[str, dict[int, float]] = {}
    for path in datasets.discover(args.spaces):
        rec = datasets.load_dataset(path)
        if not has_runs(rec):
            print(f"skip {rec.name}: no per-run times recorded", file=sys.stderr)
            continue
        spaces.append((rec.name, str(path), SpaceStats.from_times(rec.times).budget()))
        worst_by_space[rec.name] = {k: worst_first_runs(rec, k) for k in runs_grid}
    worst = {k: max(w[k] for w in worst_by_space.values()) for k in runs_grid}
    tasks = [{"space": name, "path": path, "budget": budget, "strategy": st, "seed": seed,
              "runs_grid": runs_grid, "factors": factors}
             for name, path, budget in spaces for st in args.strategies.split(",")
             for seed in range(args.seed0, args.seed0 + args.runs)]
    t0 = time.perf_counter()
    results = []
    with cf.ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for i, res in enumerate(pool.map(run_one, tasks), 1):
            results.append(res)
            print(f"[{i}/{len(tasks)}] {res['space']} {res['strategy']} seed {res['seed']}: saved "
                  f"{res['product']['saved']:.2f}, false stops {res['product']['false_stops']} "
                  f"({time.perf_counter() - t0:.0f}s)", file=sys.stderr)
    summary = summarise(results, rules, worst)
    summary["worst_first_runs"] = {"all": worst, "spaces": worst_by_space}

    rows = [[rule, f"{g['saved_mean_over_spaces']:.3f}", f"{g['saved_min_over_spaces']:.3f}",
             f"{g['saved_ours_mean_over_spaces']:.3f}", str(g["false_stops"]), str(g["runs_with_false_stop"]),
             str(g["false_stops_opt"]), f"{g['margin']:.2f}"] for rule, g in summary["grid"].items()]
    print_table(rows, ["rule", "saved (mean)", "saved (worst space)", "saved (our loop)", "false stops",
                       "runs with one", "within 5% of opt", "margin"],
                title=f"Rule grid (stop when min of the first k runs > c x best so far), {len(results)} runs:")
    prod = summary["product"]
    print()
    rows = [[s, f"{v['saved']:.3f}", f"{v['stopped']:.3f}", str(v["false_stops"]), f"{v['score_without']:.3f}",
             f"{v['score']:.3f}", f"{v['same_order']}/{v['runs']}"] for s, v in prod["spaces"].items()]
    rows.append(["mean", f"{prod['saved_mean_over_spaces']:.3f}", "", str(prod["false_stops"]), "", "", ""])
    print_table(rows, ["space", "saved", "stopped", "false stops", "score without", "score with", "same order"],
                title=f"Default rule {default_rule} through the product path (ReplayRunner; the strategy sees "
                      "partial values):")
    rows = [[st, f"{v['saved']:.3f}", str(v["false_stops"]), f"{v['score_without']:.3f}", f"{v['score']:.3f}"]
            for st, v in prod["strategies"].items()]
    print()
    print_table(rows, ["strategy", "saved", "false stops", "score without", "score with"], title="Per strategy:")
    if args.json is not None:
        write_json(args.json, {"meta": {"command": ["benchmarks/bench_early_stop.py", *(argv or sys.argv[1:])],
                                        "spaces_dir": str(args.spaces), "strategies": args.strategies.split(","),
                                        "seeds": list(range(args.seed0, args.seed0 + args.runs)),
                                        "default_rule": default_rule, "near": NEAR,
                                        "elapsed_s": time.perf_counter() - t0, **environment()},
                               "summary": summary, "runs": [slim(r, default_rule) for r in results]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
