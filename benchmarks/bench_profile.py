#!/usr/bin/env python
"""Profile-based searcher vs random search: evaluations until a configuration within 1.1x of the optimum.

The paper's setting (Filipovič et al., JPDC 2022): a counter model learnt on
one space measured with counters steers the search of a space whose counters
the searcher reads only for the configurations it profiles. Here::

    python benchmarks/bench_profile.py --train KTT_FILE --search KTT_FILE --train-fraction 0.5 --runs 200 \\
        --json OUT.json

Per run ``i`` (seed ``--seed0 + i``):

* the model (one decision tree per counter, :func:`pytest_autotune.strategies._counters.train_model`)
  is trained on a random ``--train-fraction`` of the training file's
  configurations (drawn **per run** from the run's seed; failed
  configurations in the draw have no counters and are skipped);
* the profile searcher (``profile`` strategy, ``--batch`` steps between
  profilings, ``--reference``) searches the whole ``--search`` space through
  the real :class:`~pytest_autotune.engine.evaluator.Evaluator` and a
  :class:`~pytest_autotune.simulation.replay.ReplayRunner`, whose ``profile``
  returns the recorded counters of the configurations the searcher profiles
  and nothing else;
* random search (the ``random`` strategy, same seed) runs on the same space.

A run stops at its first configuration with a time <= ``--target`` x the
optimum; its cost is the number of unique evaluations up to and including it
(failed configurations count: they cost a compilation and a launch).
Profiling re-runs an evaluated configuration and is counted separately
(``profiles``). The expected cost of random search is also given exactly:
(N + 1) / (K + 1) for K target configurations among N.

Compute: ``setup_ms`` is the strategy's construction (the model's
predictions for every row), ``max_step_ms_per_run`` the slowest proposal of
each run (scoring every unevaluated configuration happens once per batch).

Statistics: mean, standard deviation (ddof 1), standard error (std /
sqrt(runs)), median; ratio = random mean / profile mean, its standard error by
the delta method from both standard errors (and against the exact random
expectation, from the profile SE alone).

When the search file carries no counters (the RTX 3090 KTT file holds
durations only), the searcher cannot profile there: the setting is reported as
not measurable (``"measurable": false`` with the reason) and only random
search is run.
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path
from typing import Any, Sequence

_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

import numpy as np  # noqa: E402

from pytest_autotune.datasets import load_dataset  # noqa: E402
from pytest_autotune.engine.evaluator import Budget, Evaluator  # noqa: E402
from pytest_autotune.simulation.replay import ReplayRunner  # noqa: E402
from pytest_autotune.strategies._counters import train_model  # noqa: E402
from pytest_autotune.strategies.profile import ProfileSearch  # noqa: E402
from pytest_autotune.strategies.simple import RandomSearch  # noqa: E402

PAPER = {"convolution_rtx2080_dt_model": 11.8, "convolution_rtx2080_exact_counters": 14.6}
TARGET_RATIO = 4.0


def run_until(space: Any, runner: ReplayRunner, strategy: Any, target: float) -> tuple[int, bool, float]:
    """Unique evaluations until the first time <= target (the evaluator's budget is cut there), found, max step ms."""

    def stop(record: Any, evaluator: Evaluator) -> None:
        if record.value is not None and record.value <= target:
            evaluator.budget = Budget(max_evaluations=evaluator.evaluations)

    history = Evaluator(space, runner.evaluate, budget=len(space), on_record=stop).run(strategy)
    found = any(r.value is not None and r.value <= target for r in history.records)
    return len(history.records), found, 1000 * max(history.strategy_seconds, default=0.0)


def summary(values: Sequence[float]) -> dict[str, float]:
    a = np.asarray(values, dtype=np.float64)
    std = float(a.std(ddof=1)) if len(a) > 1 else 0.0
    return {"mean": float(a.mean()), "std": std, "se": std / math.sqrt(len(a)), "median": float(np.median(a)),
            "min": float(a.min()), "max": float(a.max())}


def ratio(num: dict[str, float], den: dict[str, float]) -> dict[str, float]:
    r = num["mean"] / den["mean"]
    rel = math.hypot(num["se"] / num["mean"] if num["mean"] else 0.0, den["se"] / den["mean"] if den["mean"] else 0.0)
    return {"ratio": r, "se": r * rel}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train", required=True, help="KTT file with counters to train the counter model on")
    ap.add_argument("--search", required=True, help="KTT file of the space to search")
    ap.add_argument("--train-fraction", type=float, default=0.5,
                    help="fraction of the training file's configurations the model sees, drawn per run (default 0.5)")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--seed0", type=int, default=0)
    ap.add_argument("--target", type=float, default=1.1, help="within this factor of the optimum (default 1.1)")
    ap.add_argument("--batch", type=int, default=5, help="weighted-random steps between profilings (n, default 5)")
    ap.add_argument("--reference", choices=("batch", "best"), default="batch")
    ap.add_argument("--max-depth", type=int, default=None, help="depth limit of the trees (default: none)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    if not 0 < args.train_fraction <= 1:
        ap.error("--train-fraction must be in (0, 1]")
    if args.runs < 2:
        ap.error("--runs must be at least 2")

    started = time.time()
    train_rec = load_dataset(args.train)
    search_rec = load_dataset(args.search)
    space = search_rec.space
    n = len(space)
    target = args.target * search_rec.optimum
    k_target = int(np.count_nonzero(search_rec.times <= target))
    random_expected = (n + 1) / (k_target + 1)
    same_file = Path(args.train).resolve() == Path(args.search).resolve()
    if train_rec.counters is None:
        print(f"error: {args.train} carries no hardware counters: no counter model can be trained on it",
              file=sys.stderr)
        return 2
    measurable = search_rec.counters is not None
    reason = "" if measurable else (
        f"{search_rec.name} ({search_rec.device}) records durations only, no hardware counters: the searcher "
        "profiles the configuration it stands on at every step, and a replay has nothing to give it, so the "
        "profile searcher cannot run there; feeding it another GPU's counters would measure something else "
        "than the paper's cross-GPU setting (counters read on the GPU searched)")
    if set(train_rec.space.names) != set(space.names):
        print(f"error: the training file's parameters {sorted(train_rec.space.names)} differ from the search "
              f"space's {sorted(space.names)}", file=sys.stderr)
        return 2

    prof_evals: list[int] = []
    prof_profiles: list[int] = []
    prof_found: list[bool] = []
    rand_evals: list[int] = []
    train_sizes: list[int] = []
    setup_ms: list[float] = []
    step_ms: list[float] = []
    n_train_space = len(train_rec.space)
    n_draw = max(2, int(round(args.train_fraction * n_train_space)))
    for i in range(args.runs):
        seed = args.seed0 + i
        runner = ReplayRunner(search_rec)
        rand_n, _, _ = run_until(space, runner, RandomSearch(space, seed=seed), target)
        rand_evals.append(rand_n)
        if not measurable:
            continue
        rng = np.random.default_rng([seed, 0x7EA1])
        rows = rng.permutation(n_train_space)[:n_draw]
        model = train_model(train_rec, rows, max_depth=args.max_depth, seed=0)
        train_sizes.append(int(model.metadata["n_train"]))
        t0 = time.perf_counter()
        strategy = ProfileSearch(space, seed=seed, model=model, batch=args.batch, reference=args.reference)
        setup_ms.append(1000 * (time.perf_counter() - t0))
        runner = ReplayRunner(search_rec)
        strategy.profiler = runner.profile
        evals, found, slowest = run_until(space, runner, strategy, target)
        step_ms.append(slowest)
        prof_evals.append(evals)
        prof_found.append(found)
        prof_profiles.append(runner.profiles)
        if (i + 1) % 20 == 0:
            print(f"  {i + 1}/{args.runs} runs, profile mean {np.mean(prof_evals):.1f}, random mean "
                  f"{np.mean(rand_evals):.1f}", file=sys.stderr)

    rand = summary(rand_evals)
    result: dict[str, Any] = {
        "benchmark": "profile-based searcher vs random search",
        "train_file": str(args.train), "search_file": str(args.search), "same_file": same_file,
        "train_device": train_rec.device, "search_device": search_rec.device,
        "train_fraction": args.train_fraction,
        "training_half": "drawn per run (seeded by the run's seed)" if same_file else
                         "a fraction of the training file, drawn per run",
        "runs": args.runs, "seed0": args.seed0, "target": args.target, "batch": args.batch,
        "reference": args.reference, "max_depth": args.max_depth,
        "n_configs": n, "n_target_configs": k_target, "optimum_ms": search_rec.optimum,
        "measurable": measurable, "reason_not_measurable": reason or None,
        "random_mean_evals": rand["mean"], "random": rand, "random_expected_evals": random_expected,
        "random_evals": rand_evals,
        "profile_mean_evals": None,
        "paper_speedup_vs_random": PAPER, "target_speedup": TARGET_RATIO,
        "python": platform.python_version(), "seconds": None,
    }
    if measurable:
        prof = summary(prof_evals)
        r = ratio(rand, prof)
        r_exact = {"ratio": random_expected / prof["mean"],
                   "se": random_expected / prof["mean"] * (prof["se"] / prof["mean"])}
        result.update({
            "profile_mean_evals": prof["mean"], "profile": prof, "profile_evals": prof_evals,
            "profile_found_all": bool(all(prof_found)),
            "profiles_per_run": summary(prof_profiles), "train_configs_with_counters": summary(train_sizes),
            "speedup_vs_random": r, "speedup_vs_random_expected": r_exact,
            "setup_ms": summary(setup_ms), "max_step_ms_per_run": summary(step_ms),
        })
    result["seconds"] = round(time.time() - started, 1)

    print(f"\ntrain {Path(args.train).name} ({train_rec.device}), fraction {args.train_fraction} per run; search "
          f"{Path(args.search).name} ({search_rec.device}): N = {n}, {k_target} configurations within "
          f"{args.target}x of the optimum; {args.runs} runs")
    print(f"{'searcher':<26}{'mean evals':>12}{'SE':>8}{'median':>9}{'ratio vs random':>20}{'profiles/run':>14}")
    if measurable:
        print(f"{'profile (batch=' + str(args.batch) + ', ' + args.reference + ')':<26}{prof['mean']:>12.1f}"
              f"{prof['se']:>8.1f}{prof['median']:>9.1f}{r['ratio']:>13.1f} +/- {r['se']:<4.1f}"
              f"{np.mean(prof_profiles):>14.1f}")
    else:
        print(f"{'profile':<26}{'not measurable here':>40}")
    print(f"{'random':<26}{rand['mean']:>12.1f}{rand['se']:>8.1f}{rand['median']:>9.1f}{1.0:>13.1f}")
    print(f"{'random (exact expectation)':<26}{random_expected:>12.1f}")
    if not measurable:
        print(f"\nprofile searcher not measurable: {reason}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
