#!/usr/bin/env python
"""Batch-size benchmark: what proposing k configurations before their results are in costs a strategy.

A pipeline (compile the next candidates while the current one is timed)
needs proposals ahead of results: the evaluator keeps ``batch_size``
proposals pending (:class:`pytest_autotune.strategies.batch.BatchSearch`).
Each pending proposal is chosen without the results of the others, so a
strategy may need more evaluations to get as far. This benchmark measures
that cost on the recorded spaces with the metric of
``benchmarks/bench_strategies.py`` (:func:`benchmarks.scoring.score_run`: 0 =
random search, 1 = the optimum at once; per space the budget B of the
space), per strategy and batch size, over ``--runs`` seeds. The pending
proposals are measured in proposal order and each result is told as it
arrives, as the evaluator does.

Batch size 1 is the sequential search: its column must equal
``bench_strategies.py``'s scores for the same seeds (checked against
``--reference``, default ``benchmarks/results/strategies.json``, where the
seeds overlap; the differences are printed and stored).

``--merge A.json B.json ...`` combines earlier ``--json`` outputs (for
example seeds 0-4 and 5-9 run apart) into one table and JSON, without
running anything.

Outputs: a table on stdout (rows = strategies, columns = the aggregate over
the 13 measured spaces, mean +/- SE, per batch size, then the change from
batch size 1) and ``--json`` with every score (per space, strategy, batch
size: scores, seeds, mean, std, se) and the aggregates (statistics as in
``bench_strategies.py``).

Example::

    python benchmarks/bench_batch.py --strategies auto,bayes,tpe,genetic,diff_evo,simulated_annealing,mls,ils \\
        --batch-sizes 1,4,8,16 --runs 20 --json benchmarks/results/batch.json
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import gc
import json
import math
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Sequence

_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from benchmarks.bench_strategies import (DEFAULT_SPACES, SpaceInfo, StrategySpec, _objective, _stats,  # noqa: E402
                                         _worker_init, load_space_info, mean_std_se, parse_strategy_spec,
                                         select_files, short_name, split_specs, validate_spec)
from benchmarks.scoring import score_run  # noqa: E402
from pytest_autotune.engine.evaluator import Evaluator  # noqa: E402
from pytest_autotune.strategies import make_strategy  # noqa: E402
from pytest_autotune.strategies.base import StrategyError  # noqa: E402

DEFAULT_STRATEGIES = "auto,bayes,tpe,genetic,diff_evo,pso,simulated_annealing,mls,ils"
DEFAULT_REFERENCE = _ROOT / "benchmarks" / "results" / "strategies.json"


def run_one(task: dict[str, Any]) -> dict[str, Any]:
    """One (space, strategy, seed, batch size): the scored evaluation order."""
    spec: StrategySpec = task["spec"]
    out = {"space": task["space"], "label": spec.label, "seed": task["seed"], "batch": task["batch"]}
    t0 = time.process_time()
    try:
        rec, stats = _stats(task["path"])
        gc.freeze()
        budget = int(task["budget"])
        strategy = make_strategy({"name": spec.name, **spec.hyperparameters}, rec.space, seed=task["seed"])
        history = Evaluator(rec.space, _objective(rec), budget=budget, batch_size=task["batch"]).run(strategy)
        values = [r.value for r in history.records][:budget]
        out.update(score=float(score_run(stats, values, budget)), evaluations=len(values),
                   stop_reason=history.stop_reason, strategy_ms=1e3 * sum(history.strategy_cpu_seconds))
    except Exception as exc:  # noqa: BLE001 - reported per run, the benchmark goes on
        out["error"] = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
    out["cpu_s"] = time.process_time() - t0
    return out


def summarise(spaces: Sequence[SpaceInfo], labels: Sequence[str], batches: Sequence[int],
              runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per space / strategy / batch size statistics and the aggregates over the measured spaces and all."""
    by: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for r in runs:
        if "error" not in r:
            by.setdefault((r["space"], r["label"], r["batch"]), []).append(r)
    results: dict[str, Any] = {}
    for sp in spaces:
        for label in labels:
            for b in batches:
                rs = sorted(by.get((sp.name, label, b), []), key=lambda r: r["seed"])
                if not rs:
                    continue
                scores = [r["score"] for r in rs]
                mean, std, se = mean_std_se(scores)
                results.setdefault(sp.name, {}).setdefault(label, {})[str(b)] = {
                    "scores": scores, "seeds": [r["seed"] for r in rs], "mean": mean, "std": std, "se": se,
                    "evaluations": [r["evaluations"] for r in rs], "budget": sp.budget,
                    "strategy_cpu_ms_mean": sum(r["strategy_ms"] for r in rs) / len(rs)}
    aggregate: dict[str, Any] = {}
    for group, members in (("measured", [s for s in spaces if s.measured]), ("all", list(spaces))):
        for label in labels:
            for b in batches:
                entries = [results.get(s.name, {}).get(label, {}).get(str(b)) for s in members]
                entries = [e for e in entries if e is not None]
                if not entries or len(entries) < len(members):
                    continue
                n_seeds = min(len(e["scores"]) for e in entries)
                per_seed = [sum(e["scores"][i] for e in entries) / len(entries) for i in range(n_seeds)]
                mean = sum(e["mean"] for e in entries) / len(entries)
                se = math.sqrt(sum(e["se"] ** 2 for e in entries)) / len(entries)
                std = mean_std_se(per_seed)[1] if len(per_seed) > 1 else 0.0
                aggregate.setdefault(group, {}).setdefault(label, {})[str(b)] = {
                    "mean": mean, "se": se, "std": std, "spaces": len(entries)}
    return {"results": results, "aggregate": aggregate}


def runs_from_json(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """An earlier ``--json`` output: its payload, and its runs rebuilt from the per-space scores."""
    payload = json.loads(path.read_text())
    runs = []
    for space, per in payload["results"].items():
        for label, by_batch in per.items():
            for b, entry in by_batch.items():
                for seed, score, evaluations in zip(entry["seeds"], entry["scores"], entry["evaluations"]):
                    runs.append({"space": space, "label": label, "batch": int(b), "seed": seed, "score": score,
                                 "evaluations": evaluations, "strategy_ms": entry["strategy_cpu_ms_mean"]})
    return payload, runs


def merge(paths: Sequence[Path]) -> tuple[list[SpaceInfo], list[str], list[int], list[int], list[dict[str, Any]]]:
    """Spaces, strategy labels, batch sizes, seeds and runs of several ``--json`` outputs (duplicates refused)."""
    spaces: dict[str, SpaceInfo] = {}
    labels: list[str] = []
    batches: set[int] = set()
    runs: list[dict[str, Any]] = []
    seen: set[tuple[str, str, int, int]] = set()
    for path in paths:
        payload, some = runs_from_json(path)
        for name, info in payload["spaces"].items():
            spaces.setdefault(name, SpaceInfo(name=name, path=info["file"], format=info["format"], n_configs=info["N"],
                                              n_valid=info["valid"], budget=info["budget"], optimum=info["optimum"],
                                              median=info["median"], fingerprint=info["sha256"],
                                              definition=info["definition"], has_counters=info["counters"]))
        for r in some:
            key = (r["space"], r["label"], r["batch"], r["seed"])
            if key in seen:
                raise ValueError(f"{path}: run {key} is in more than one file")
            seen.add(key)
            runs.append(r)
            if r["label"] not in labels:
                labels.append(r["label"])
            batches.add(r["batch"])
    return list(spaces.values()), labels, sorted(batches), sorted({r["seed"] for r in runs}), runs


def compare_reference(summary: dict[str, Any], reference: Path | None) -> dict[str, Any]:
    """Batch size 1 against ``bench_strategies.py``'s stored scores for the same seeds: the largest difference."""
    if reference is None or not reference.exists():
        return {"reference": None, "note": "no reference file"}
    ref = json.loads(reference.read_text())["results"]
    compared, worst, mismatches = 0, 0.0, []
    for space, per in summary["results"].items():
        for label, by_batch in per.items():
            ours = by_batch.get("1")
            theirs = ref.get(space, {}).get(label)
            if isinstance(theirs, dict) and "1" in theirs:  # another bench_batch output
                theirs = theirs["1"]
            if ours is None or theirs is None or "seeds" not in theirs:
                continue
            stored = dict(zip(theirs["seeds"], theirs["scores"]))
            for seed, score in zip(ours["seeds"], ours["scores"]):
                if seed in stored:
                    compared += 1
                    diff = abs(score - stored[seed])
                    worst = max(worst, diff)
                    if diff > 1e-9:
                        mismatches.append({"space": space, "strategy": label, "seed": seed, "batch_1": score,
                                           "reference": stored[seed]})
    return {"reference": str(reference), "runs_compared": compared, "max_abs_difference": worst,
            "mismatches": mismatches}


def format_table(labels: Sequence[str], batches: Sequence[int], aggregate: dict[str, Any], group: str) -> str:
    agg = aggregate.get(group, {})
    head = f"{'strategy':<22}" + "".join(f"{'batch ' + str(b):>17}" for b in batches)
    head += "".join(f"{'d' + str(b):>9}" for b in batches[1:])
    lines = [f"aggregate score over the {group} spaces (mean ± SE; dK = batch K minus batch 1)", head]
    for label in sorted(labels, key=lambda lb: -agg.get(lb, {}).get(str(batches[0]), {}).get("mean", -9)):
        row = agg.get(label, {})
        cells = [f"{row[str(b)]['mean']:+.3f}±{row[str(b)]['se']:.3f}" if str(b) in row else "-" for b in batches]
        base = row.get(str(batches[0]), {}).get("mean")
        deltas = [f"{row[str(b)]['mean'] - base:+.3f}" if base is not None and str(b) in row else "-"
                  for b in batches[1:]]
        lines.append(f"{label:<22}" + "".join(f"{c:>17}" for c in cells) + "".join(f"{d:>9}" for d in deltas))
    return "\n".join(lines)


def format_spaces(spaces: Sequence[SpaceInfo], labels: Sequence[str], batches: Sequence[int],
                  results: dict[str, Any]) -> str:
    lines = ["per space: mean score at batch " + " / ".join(map(str, batches))]
    lines.append(f"{'strategy':<22}" + "".join(f" {short_name(s.name):>23}" for s in spaces))
    for label in labels:
        cells = []
        for s in spaces:
            by_batch = results.get(s.name, {}).get(label, {})
            cells.append("/".join(f"{by_batch[str(b)]['mean']:.2f}" if str(b) in by_batch else "-" for b in batches))
        lines.append(f"{label:<22}" + "".join(f" {c:>23}" for c in cells))
    return "\n".join(lines)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--spaces", type=Path, default=DEFAULT_SPACES, help="folder laid out like ../shared/data/spaces")
    p.add_argument("--only", default=None, help="comma-separated space names or globs to keep")
    p.add_argument("--strategies", default=DEFAULT_STRATEGIES,
                   help="comma-separated strategies, 'name:key=value;...' as in bench_strategies (default: %(default)s)")
    p.add_argument("--batch-sizes", default="1,4,8,16", help="comma-separated batch sizes (default: %(default)s)")
    p.add_argument("--runs", type=int, default=10, help="seeds per space, strategy and batch size (default 10)")
    p.add_argument("--seed0", type=int, default=0, help="first seed (default 0)")
    p.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--reference", type=Path, default=DEFAULT_REFERENCE,
                   help="bench_strategies.py JSON whose scores batch size 1 must equal (default: %(default)s)")
    p.add_argument("--json", type=Path, default=None, help="write everything as JSON here")
    p.add_argument("--merge", type=Path, nargs="+", default=None,
                   help="combine earlier --json outputs (different seeds) instead of running")
    args = p.parse_args(argv)
    if args.merge:
        try:
            spaces, labels, batches, seeds, runs = merge(args.merge)
        except (OSError, KeyError, ValueError) as exc:
            p.error(f"--merge: {exc}")
        return report(args, spaces, labels, batches, seeds, runs, 0.0, argv)

    try:
        batches = [int(b) for b in args.batch_sizes.split(",") if b.strip()]
    except ValueError:
        p.error(f"--batch-sizes must be comma-separated positive integers, got {args.batch_sizes!r}")
    if not batches or min(batches) < 1:
        p.error(f"--batch-sizes must be comma-separated positive integers, got {args.batch_sizes!r}")
    if args.runs < 1:
        p.error("--runs must be at least 1")
    try:
        specs = [parse_strategy_spec(s) for s in split_specs(args.strategies)]
        for spec in specs:
            if spec.kind != "ours":
                raise StrategyError(f"--strategies: {spec.label!r} is not one of ours (batches are ours only)")
            validate_spec(spec)
    except StrategyError as exc:
        p.error(str(exc))
    if not args.spaces.is_dir():
        _log(f"spaces folder {args.spaces} not found: nothing to benchmark")
        return 0
    spaces = [load_space_info(f) for f in select_files(args.spaces, args.only)]
    if not spaces:
        _log(f"no recorded spaces under {args.spaces}")
        return 0
    seeds = list(range(args.seed0, args.seed0 + args.runs))
    tasks = [{"space": sp.name, "path": sp.path, "budget": sp.budget, "spec": spec, "seed": seed, "batch": b}
             for sp in spaces for spec in specs for b in batches for seed in seeds]
    tasks.sort(key=lambda t: -t["budget"] * (20 if t["spec"].name in ("auto", "bayes", "chain") else 1))
    _log(f"{len(tasks)} runs on {len(spaces)} spaces, {args.jobs} processes")
    t0 = time.perf_counter()
    runs: list[dict[str, Any]] = []
    if args.jobs <= 1:
        _worker_init(False)
        runs = [run_one(t) for t in tasks]
    else:
        with cf.ProcessPoolExecutor(args.jobs, initializer=_worker_init, initargs=(True,)) as pool:
            for i, r in enumerate(pool.map(run_one, tasks, chunksize=1)):
                runs.append(r)
                if (i + 1) % 200 == 0:
                    _log(f"{i + 1}/{len(tasks)} runs, {time.perf_counter() - t0:.0f} s")
    errors = [r for r in runs if "error" in r]
    for r in errors[:5]:
        _log(f"error in {r['space']} {r['label']} seed {r['seed']} batch {r['batch']}: {r['error']}")
    return report(args, spaces, [s.label for s in specs], batches, seeds, runs, time.perf_counter() - t0, argv)


def report(args: argparse.Namespace, spaces: Sequence[SpaceInfo], labels: Sequence[str], batches: Sequence[int],
           seeds: Sequence[int], runs: list[dict[str, Any]], elapsed: float, argv: Sequence[str] | None) -> int:
    """Print the tables and write the JSON; 1 when a run failed."""
    errors = [r for r in runs if "error" in r]
    summary = summarise(spaces, labels, batches, runs)
    reference = compare_reference(summary, args.reference) if 1 in batches else {"note": "batch size 1 not run"}
    print(format_table(labels, batches, summary["aggregate"], "measured"))
    print()
    print(format_spaces(spaces, labels, batches, summary["results"]))
    if reference.get("runs_compared"):
        print(f"\nbatch size 1 against {reference['reference']}: {reference['runs_compared']} runs compared, "
              f"largest difference {reference['max_abs_difference']:.2e} ({len(reference['mismatches'])} differ)")
    if args.json is not None:
        payload = {"meta": {"command": ["benchmarks/bench_batch.py", *(argv if argv is not None else sys.argv[1:])],
                            "spaces_dir": str(args.spaces), "runs": len(seeds), "seeds": list(seeds),
                            "batch_sizes": list(batches), "jobs": args.jobs, "elapsed_s": elapsed,
                            "errors": len(errors), "cpu_s": sum(r.get("cpu_s", 0.0) for r in runs),
                            "merged_from": [str(m) for m in args.merge or []],
                            "statistics": "as bench_strategies.py: per space mean/std/se over seeds; aggregate mean "
                                          "over spaces, se propagated, std over per-seed aggregates"},
                   "spaces": {s.name: s.as_json() for s in spaces}, "strategies": list(labels),
                   "batch_1_vs_reference": reference, **summary}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(payload, indent=1))
        _log(f"wrote {args.json}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
