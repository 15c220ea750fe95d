#!/usr/bin/env python
"""Shrinking sample against its published claim: fraction of the optimum reached, evaluations used.

The claim (shrinking-sample search for GPU auto-tuning): 97-99.97% of the
brute-force performance with 1-10% of the evaluations. Here, on every
recorded space of ``--spaces`` (a folder laid out like
``../shared/data/spaces``; skipped when absent), per setting of ``k`` and
``v_th`` and per seed::

    python benchmarks/bench_shrinking.py --runs 10 --settings "k=2,v_th=1;k=4,v_th=1" --json OUT.json

* **procedure**: the published procedure runs to its end (the exhaustive
  search of the final section), driven by the recorded times (a failed
  configuration costs an evaluation and is never the best). Reported: the
  evaluations it used (count and % of the space's N configurations) and
  ``opt / best`` at that point (1.0 = the optimum; the published
  "performance relative to brute force");
* **at 1% / 10% of N**: ``opt / best`` after that many evaluations of the
  whole strategy (procedure, then its continuation), the ends of the
  published evaluation range.

The table prints means over seeds per space and the mean over spaces; the
JSON holds every run.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np

_ROOT = Path(__file__).resolve().parent.parent
for _p in (_ROOT, _ROOT / "benchmarks"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from _common import environment, print_table, write_json  # noqa: E402
from bench_strategies import (DEFAULT_SPACES, _stats, load_space_info, parse_value,  # noqa: E402
                                         select_files, split_hyper)
from pytest_autotune.strategies.shrinking_sample import ShrinkingSample  # noqa: E402

PUBLISHED = {"fraction_of_optimum": [0.97, 0.9997], "evaluations_percent": [1.0, 10.0]}
CHECKPOINTS = (0.01, 0.10)  # fractions of N


def parse_settings(text: str) -> list[dict[str, Any]]:
    """``"k=2,v_th=1;k=4,v_th=1"`` -> hyperparameter dicts (validated by the strategy)."""
    out = []
    for part in filter(None, (s.strip() for s in text.split(";"))):
        hp = {}
        for item in split_hyper(part.replace(",", ";")):
            key, _, value = item.partition("=")
            hp[key.strip()] = parse_value(value.strip())
        out.append(hp)
    return out


def run_once(rec: Any, optimum: float, hp: dict[str, Any], seed: int) -> dict[str, Any]:
    """One run: the procedure's end, and opt/best at 1% and 10% of N evaluations."""
    n = len(rec.space)
    marks = sorted({max(1, math.ceil(f * n)) for f in CHECKPOINTS})
    strategy = ShrinkingSample(rec.space, seed=seed, **hp)
    gen = strategy.run(n)
    best, evals = math.inf, 0
    out: dict[str, Any] = {"seed": seed}
    at: dict[str, float] = {}
    value: float | None = None
    try:
        proposal = next(gen)
        while True:
            row = int(proposal)
            value = None if rec.failures[row] is not None else float(rec.times[row])
            evals += 1
            if value is not None:
                best = min(best, value)
            for frac, mark in zip(CHECKPOINTS, marks):
                if evals == mark:
                    at[f"{frac:.0%}"] = optimum / best if best < math.inf else 0.0
            if strategy.procedure_evaluations is not None and len(at) == len(marks):
                break
            proposal = gen.send(value)
    except StopIteration:
        pass
    finally:
        gen.close()
    proc_best = strategy.procedure_best
    out["procedure_evaluations"] = strategy.procedure_evaluations
    out["procedure_percent"] = None if strategy.procedure_evaluations is None else 100.0 * strategy.procedure_evaluations / n
    out["procedure_fraction"] = None if proc_best is None else optimum / proc_best[1]
    out["at"] = at
    return out


def mean_of(xs: Sequence[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return float(np.mean(vals)) if vals else None


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spaces", type=Path, default=DEFAULT_SPACES)
    ap.add_argument("--only", default=None, help="comma-separated space names or globs")
    ap.add_argument("--settings", default="k=2,v_th=1;k=2,v_th=2;k=4,v_th=1",
                    help="';'-separated settings of comma-separated key=value (default: %(default)s)")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--seed0", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if not args.spaces.is_dir():
        print(f"spaces folder {args.spaces} not found: nothing to measure (skipped)")
        return 0
    settings = parse_settings(args.settings)
    files = select_files(args.spaces, args.only)
    results: dict[str, Any] = {}
    rows = []
    per_setting: dict[str, list[dict[str, float | None]]] = {}
    for path in files:
        info = load_space_info(path)
        rec, stats = _stats(str(path))
        results[info.name] = {"N": len(rec.space), "optimum": stats.optimum, "settings": {}}
        for hp in settings:
            label = ",".join(f"{k}={v}" for k, v in hp.items())
            runs = [run_once(rec, stats.optimum, hp, args.seed0 + i) for i in range(args.runs)]
            summary = {
                "procedure_evaluations": mean_of([r["procedure_evaluations"] for r in runs]),
                "procedure_percent": mean_of([r["procedure_percent"] for r in runs]),
                "procedure_fraction": mean_of([r["procedure_fraction"] for r in runs]),
                "procedure_fraction_min": min((r["procedure_fraction"] for r in runs if r["procedure_fraction"]),
                                              default=None),
                **{f"fraction_at_{k}": mean_of([r["at"].get(k) for r in runs]) for k in ("1%", "10%")},
            }
            results[info.name]["settings"][label] = {"summary": summary, "runs": runs}
            per_setting.setdefault(label, []).append(summary)
            rows.append([info.name, label, f"{summary['procedure_evaluations']:.0f}",
                         f"{summary['procedure_percent']:.2f}%", f"{summary['procedure_fraction']:.3f}",
                         f"{summary['procedure_fraction_min']:.3f}", f"{summary['fraction_at_1%']:.3f}",
                         f"{summary['fraction_at_10%']:.3f}"])
    aggregate = {}
    for label, sums in per_setting.items():
        aggregate[label] = {key: mean_of([s[key] for s in sums]) for key in sums[0]}
        a = aggregate[label]
        rows.append(["MEAN over spaces", label, f"{a['procedure_evaluations']:.0f}", f"{a['procedure_percent']:.2f}%",
                     f"{a['procedure_fraction']:.3f}", f"{a['procedure_fraction_min']:.3f}",
                     f"{a['fraction_at_1%']:.3f}", f"{a['fraction_at_10%']:.3f}"])
    rows.append(["published claim", "", "", "1-10%", "0.97-0.9997", "", "", ""])
    print_table(rows, ["space", "setting", "proc. evals", "% of N", "opt/best", "worst", "at 1% N", "at 10% N"],
                title="shrinking sample: end of the published procedure, and opt/best at 1% and 10% of N")
    if args.json:
        write_json(args.json, {"meta": {"command": sys.argv, "runs": args.runs, "seed0": args.seed0,
                                        "environment": environment()},
                               "published": PUBLISHED, "aggregate": aggregate, "spaces": results})
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
