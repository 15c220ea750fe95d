#!/usr/bin/env python
"""Transfer benchmark: does warm-starting a search from other GPUs' lock entries pay off?

Leave-one-GPU-out within each kernel family of the recorded spaces (the six
T4 convolution GPUs, the three GEMM GPUs, the four pnpoly GPUs, the two KTT
convolution GPUs): for every target GPU, every other GPU of its family
stands for a lockfile whose entry holds that GPU's winner and ``R``
runners-up. ``--sources tuned`` (the default) makes that entry the way
``pytest --autotune`` would: the same strategy searched the source GPU with
its own budget ``B`` (seed ``1000 + run seed``), and its ``1 + R`` best
evaluations are the entry's winner and runners-up; ``--sources converged``
takes the source's ``1 + R`` fastest recorded configurations (a lock tuned to
convergence). The target is then searched

* ``cold``: the strategy alone;
* ``warm:R``: the seeds :func:`pytest_autotune.lock.transfer.interleave`
  builds from those entries (every source's winner, then every source's
  first runner-up, ...), evaluated first and counted in the budget, then the
  same strategy, which sees them as observations (exactly what
  ``pytest --autotune`` does through ``tune(seeds=...)``).

Budgets 10, 25, 50 evaluations and the space's own budget ``B``; each run is
scored with :func:`benchmarks.scoring.score_run` at that budget (the metric of
``bench_strategies.py``: 0 = random search, 1 = the optimum at once). Seeds
``--seed0 .. --seed0 + runs - 1`` per (target, budget, variant). A run stops
once it has evaluated the space's optimum: every later checkpoint's best is
then the optimum, which is what ``score_run`` assumes for a run that ended
early, so the score is exactly that of the full run, at a fraction of the compute.

Outputs a table (mean score per family, budget and variant, and the gain of
each warm variant over cold) and, with ``--json``, everything per space:
scores, mean, standard error, the best seed's fraction of the target's
optimum, and the two targets of issue 18 (budget 25: mean gain >= 0.15;
budget B: no space worse than cold by more than cold's standard error).

Example::

    python benchmarks/bench_transfer.py --runs 20 --runners-up 0,1,3,5 --json benchmarks/results/transfer.json
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import math
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Mapping, Sequence

_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

import numpy as np  # noqa: E402

from benchmarks.bench_strategies import _objective, mean_std_se, space_name  # noqa: E402
from benchmarks.scoring import SpaceStats, score_run  # noqa: E402
from pytest_autotune import datasets  # noqa: E402
from pytest_autotune.engine.evaluator import Evaluator  # noqa: E402
from pytest_autotune.lock.transfer import interleave  # noqa: E402
from pytest_autotune.strategies import make_strategy  # noqa: E402

DEFAULT_SPACES = _ROOT.parent / "shared" / "data" / "spaces"
FAMILIES = {  # family -> glob under the spaces root
    "convolution": "t4/convolution_milo_*.json.gz",
    "gemm": "kerneltuner/gemm_*.json.gz",
    "pnpoly": "kerneltuner/pnpoly_*.json.gz",
    "ktt_convolution": "ktt/KTConvolutionOutput_*.json.gz",
}
BUDGETS = ("10", "25", "50", "B")


def ranked_configs(path: str, k: int) -> list[dict[str, Any]]:
    """The ``k`` fastest valid configurations of a recorded space (a converged lock's winner and runners-up)."""
    rec = datasets.load_dataset(path)
    times = np.where(np.isfinite(rec.times), rec.times, np.inf)
    order = np.argsort(times, kind="stable")[:k]
    return [rec.params_of(int(r)) for r in order if np.isfinite(times[r])]


SOURCE_SEED_OFFSET = 1000  # the source's search uses another seed than the target's


def tuned_lock(task: Mapping[str, Any]) -> dict[str, Any]:
    """The winner and runners-up a search with the source's own budget B would lock (best first)."""
    rec = datasets.load_dataset(task["path"])
    budget = SpaceStats.from_times(rec.times).budget()
    strategy = make_strategy(task["strategy"], rec.space, seed=task["seed"] + SOURCE_SEED_OFFSET)
    history = Evaluator(rec.space, _objective(rec), budget=budget).run(strategy)
    ranked = [dict(r.params) for r in history.ranked(task["k"])]
    return {"path": task["path"], "seed": task["seed"], "ranked": ranked}


def seed_rows(target: str, source_locks: Sequence[Sequence[Mapping[str, Any]]], runners_up: int) -> list[int]:
    """Rows of the target's space to evaluate first (configurations outside it are dropped, as tune() does)."""
    rec = datasets.load_dataset(target)
    seeds = interleave([list(lock)[:1 + runners_up] for lock in source_locks])
    return [row for row in (rec.space.find(p) for p in seeds) if row >= 0]


class _FoundOptimum(Exception):
    """Raised once a run has evaluated the space's optimum: the rest of it cannot change its score."""


def run_one(task: Mapping[str, Any]) -> dict[str, Any]:
    rec = datasets.load_dataset(task["target"])
    stats = SpaceStats.from_times(rec.times)
    budget = stats.budget() if task["budget"] == "B" else int(task["budget"])
    rows = [] if task["runners_up"] is None else seed_rows(task["target"], task["source_locks"], task["runners_up"])
    strategy = make_strategy(task["strategy"], rec.space, seed=task["seed"])

    def stop_at_optimum(record: Any, evaluator: Any) -> None:
        # Exact, and it saves most of the compute: after the optimum, every checkpoint's best is the
        # optimum, which is what score_run assumes for a run that ended early.
        if record.value is not None and record.value <= stats.optimum:
            raise _FoundOptimum

    evaluator = Evaluator(rec.space, _objective(rec), budget=budget, seeds=rows, on_record=stop_at_optimum)
    try:
        evaluator.run(strategy)
    except _FoundOptimum:
        pass
    values = [r.value for r in evaluator.history.records][:budget]
    seeded = [v for v in values[:len(rows)] if v is not None]
    return {**task, "budget_evals": budget, "score": float(score_run(stats, values, budget)),
            "n_seeds": len(rows),
            "best_seed_fraction": (stats.optimum / min(seeded)) if seeded else 0.0}


def variant_label(runners_up: int | None) -> str:
    return "cold" if runners_up is None else f"warm:{runners_up}"


def build_tasks(spaces: Path, runners_ups: Sequence[int], runs: int, seed0: int, strategy: str,
                families: Sequence[str], budgets: Sequence[str] = BUDGETS) -> tuple[dict[str, list[str]], list[dict[str, Any]]]:
    members = {f: [str(p) for p in sorted(spaces.glob(FAMILIES[f]))] for f in families}
    tasks = []
    for family, paths in members.items():
        for target in paths:
            sources = [p for p in paths if p != target]
            for budget in budgets:
                for runners_up in [None, *runners_ups]:
                    for seed in range(seed0, seed0 + runs):
                        tasks.append({"family": family, "target": target, "sources": sources, "budget": budget,
                                      "runners_up": runners_up, "seed": seed, "strategy": strategy})
    return members, tasks


def summarise(results: Sequence[Mapping[str, Any]], runners_ups: Sequence[int]) -> dict[str, Any]:
    by: dict[tuple, list[float]] = defaultdict(list)
    fractions: dict[tuple, list[float]] = defaultdict(list)
    for r in results:
        by[(r["family"], space_name(r["target"]), r["budget"], variant_label(r["runners_up"]))].append(r["score"])
        if r["runners_up"] is not None and r["budget"] == "B":
            fractions[(space_name(r["target"]), variant_label(r["runners_up"]))].append(r["best_seed_fraction"])
    seed_fraction = {k: float(np.mean(v)) for k, v in fractions.items()}  # mean over the runs' source entries
    spaces: dict[str, Any] = {}
    for (family, space, budget, variant), scores in sorted(by.items()):
        mean, std, se = mean_std_se(scores)
        spaces.setdefault(space, {"family": family})
        spaces[space].setdefault(budget, {})[variant] = {"mean": mean, "std": std, "se": se, "scores": scores}
    for space, data in spaces.items():
        data["best_seed_fraction_of_optimum"] = {v: f for (s, v), f in seed_fraction.items() if s == space}
    variants = ["cold", *(variant_label(r) for r in runners_ups)]
    families: dict[str, Any] = {}
    for fam in sorted({d["family"] for d in spaces.values()} | {"all"}):
        members = [s for s, d in spaces.items() if fam in ("all", d["family"])]
        families[fam] = {}
        for budget in BUDGETS:
            for v in variants:
                cells = [spaces[s][budget][v] for s in members if v in spaces[s].get(budget, {})]
                if cells:
                    families[fam].setdefault(budget, {})[v] = {
                        "mean": float(np.mean([c["mean"] for c in cells])),
                        "se": math.sqrt(sum(c["se"] ** 2 for c in cells)) / len(cells), "spaces": len(cells)}
    targets = {}
    for v in variants[1:]:
        targets[v] = {}
        if "25" in families["all"]:
            gain25 = families["all"]["25"][v]["mean"] - families["all"]["25"]["cold"]["mean"]
            targets[v].update(gain_at_25=gain25, gain_at_25_ok=gain25 >= 0.15)
        if "B" in families["all"]:
            worse = [s for s, d in spaces.items() if d["B"][v]["mean"] < d["B"]["cold"]["mean"] - d["B"]["cold"]["se"]]
            targets[v].update(spaces_worse_than_one_se_at_B=worse, full_budget_ok=not worse)
    return {"spaces": spaces, "families": families, "targets": targets, "variants": variants}


def format_table(summary: Mapping[str, Any]) -> str:
    variants = summary["variants"]
    lines = []
    header = f"{'family':<16} {'budget':>6}  " + "  ".join(f"{v:>13}" for v in variants) + "  " + \
        "  ".join(f"{'gain ' + v[5:]:>8}" for v in variants[1:])
    lines += [header, "-" * len(header)]
    for fam, per_budget in summary["families"].items():
        for budget in BUDGETS:
            cells = per_budget.get(budget, {})
            if "cold" not in cells:
                continue
            text = "  ".join(f"{cells[v]['mean']:6.3f}+-{cells[v]['se']:.3f}" if v in cells else f"{'-':>13}"
                             for v in variants)
            gains = "  ".join(f"{cells[v]['mean'] - cells['cold']['mean']:+8.3f}" if v in cells else f"{'-':>8}"
                              for v in variants[1:])
            lines.append(f"{fam:<16} {budget:>6}  {text}  {gains}")
    lines.append("")
    budgets = [b for b in BUDGETS if b in next(iter(summary["spaces"].values()))]
    lines.append(f"per space, cold -> warm at budgets {' / '.join(budgets)} (best seed's fraction of the optimum):")
    for space, d in summary["spaces"].items():
        parts = []
        for v in variants[1:]:
            moves = " / ".join(f"{d[b]['cold']['mean']:.2f}->{d[b][v]['mean']:.2f}" for b in budgets)
            parts.append(f"{v}: {moves} (seed {d['best_seed_fraction_of_optimum'].get(v, 0):.2f})")
        lines.append(f"  {space:<32} " + "; ".join(parts))
    lines.append("")
    for v, t in summary["targets"].items():
        text = []
        if "gain_at_25" in t:
            text.append(f"gain at 25 = {t['gain_at_25']:+.3f} ({'ok' if t['gain_at_25_ok'] else 'MISSED'})")
        if "full_budget_ok" in t:
            text.append(f"spaces more than one SE worse at B: {t['spaces_worse_than_one_se_at_B'] or 'none'}")
        lines.append(f"targets {v}: " + "; ".join(text))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spaces", default=str(DEFAULT_SPACES), help="root of the recorded spaces")
    parser.add_argument("--runs", type=int, default=20, help="seeds per (target, budget, variant)")
    parser.add_argument("--seed0", type=int, default=0)
    parser.add_argument("--runners-up", default="0,1,3,5",
                        help="comma-separated runners-up per source entry to compare (warm:R variants)")
    parser.add_argument("--strategy", default="auto", help="the strategy, with and without the warm start")
    parser.add_argument("--families", default=",".join(FAMILIES), help=f"subset of {', '.join(FAMILIES)}")
    parser.add_argument("--sources", choices=("tuned", "converged"), default="tuned",
                        help="source entries: a search with the source's budget B, or its fastest recorded configurations")
    parser.add_argument("--budgets", default=",".join(BUDGETS), help="subset of 10,25,50,B (B: the space's own)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--json", default=None, help="write everything to this JSON file")
    args = parser.parse_args(argv)
    runners_ups = [int(x) for x in args.runners_up.split(",") if x.strip()]
    families = [f.strip() for f in args.families.split(",") if f.strip()]
    for f in families:
        if f not in FAMILIES:
            parser.error(f"--families: unknown family {f!r} (known: {', '.join(FAMILIES)})")
    budgets = [b.strip() for b in args.budgets.split(",") if b.strip()]
    for b in budgets:
        if b not in BUDGETS:
            parser.error(f"--budgets: unknown budget {b!r} (choose from {', '.join(BUDGETS)})")
    members, tasks = build_tasks(Path(args.spaces), runners_ups, args.runs, args.seed0, args.strategy, families,
                                 budgets)
    missing = [f for f, paths in members.items() if len(paths) < 2]
    if missing:
        parser.error(f"--spaces {args.spaces}: families {missing} need at least two recorded GPUs")
    # Full-budget runs first (the long ones), so the two workers finish together.
    tasks.sort(key=lambda t: (t["budget"] != "B", t["target"]))
    started = time.perf_counter()
    results = []
    k = 1 + max(runners_ups, default=0)
    with cf.ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        locks: dict[tuple[str, int], list[dict[str, Any]]] = {}
        if args.sources == "tuned":
            jobs = sorted({(p, t["seed"]) for t in tasks for p in t["sources"]})
            for lock in pool.map(tuned_lock, [{"path": p, "seed": sd, "strategy": args.strategy, "k": k}
                                              for p, sd in jobs]):
                locks[(lock["path"], lock["seed"])] = lock["ranked"]
            print(f"[bench_transfer] {len(jobs)} source entries tuned, {time.perf_counter() - started:.0f} s",
                  file=sys.stderr, flush=True)
        else:
            locks = {(p, t["seed"]): ranked_configs(p, k) for t in tasks for p in t["sources"]}
        for t in tasks:
            t["source_locks"] = [locks[(p, t["seed"])] for p in t["sources"]]
        for i, result in enumerate(pool.map(run_one, tasks, chunksize=4), 1):
            results.append(result)
            if i % 50 == 0 or i == len(tasks):
                print(f"[bench_transfer] {i}/{len(tasks)} runs, {time.perf_counter() - started:.0f} s",
                      file=sys.stderr, flush=True)
    summary = summarise(results, runners_ups)
    print(format_table(summary))
    if args.json:
        meta = {"runs": args.runs, "seed0": args.seed0, "strategy": args.strategy, "runners_up": runners_ups,
                "budgets": budgets, "families": {f: [space_name(p) for p in ps] for f, ps in members.items()},
                "sources": args.sources, "source_seed_offset": SOURCE_SEED_OFFSET,
                "wall_s": time.perf_counter() - started}
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"meta": meta, **summary}, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
