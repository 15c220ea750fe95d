#!/usr/bin/env python
"""Compile ahead on the real pipeline: ``pytest --autotune`` on the example's C kernels with 1 and 2 compile
workers in the same run, the winners' medians, the gate's false alarms, and whether timing is disturbed.

Three parts, all on the example project's C kernels (``example_project/tests/test_cpu_kernels.py``:
blocked ``matmul``, budget 40, strategy auto; ``stencil`` on two grids, budget 30 each, genetic):

1. **Wall time.** ``--repeats`` rounds; each round runs ``pytest --autotune`` once per worker count, in
   alternating order (1, 2, then 2, 1, ...) so drifting machine load hits both alike, with the round's
   number as the strategies' seed (``--autotune-seed``), the same for both. Every run starts
   from an empty lock directory (a first tune: no incumbent, no warm start) and an empty compile cache
   (every configuration really compiles). The console's load average is recorded around each run.
2. **Winners and the gate.** After each tune, plain ``pytest`` runs ``--gates`` times against the lock it
   just wrote, with nothing changed: a failing kernel is a false alarm. The winners' locked medians of
   the two worker counts are compared as ratios.
3. **Timing disturbance.** One fixed configuration (the committed lock's matmul winner) is timed
   ``--disturb`` times in each of three conditions, interleaved: ``alone`` (no compiler running), ``paused``
   (a compile pool of 2 workers compiling other configurations, stopped during each timed window, as the
   product does) and ``unpaused`` (the same pool left running: what pausing prevents). Medians per
   condition and their ratio to ``alone``.

    python benchmarks/bench_compile_pool.py [--repeats 3] [--gates 2] [--disturb 12]
                                            [--json benchmarks/results/compile_pool.json]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "example_project"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(EXAMPLE / "src"))

from _common import environment, print_table, write_json  # noqa: E402

TESTS = "tests/test_cpu_kernels.py"
WORKERS = (1, 2)


def load() -> float:
    return os.getloadavg()[0]


def fresh_project(where: Path) -> Path:
    """A copy of the example project with an empty lock directory."""
    project = where / "project"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("autotune.lock", "__pycache__", "*.egg-info"))
    (project / "autotune.lock").mkdir()
    return project


def pytest_run(project: Path, args: list[str], cache: Path) -> tuple[int, float]:
    env = {**os.environ, "PYTEST_AUTOTUNE_CACHE_DIR": str(cache)}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args], cwd=project,
                          env=env, capture_output=True, text=True)
    return proc.returncode, time.perf_counter() - start


def tune_once(workers: int, gates: int, seed: int) -> dict[str, Any]:
    """One ``pytest --autotune`` from scratch with ``workers`` compile workers, then ``gates`` plain runs."""
    with tempfile.TemporaryDirectory(prefix="bench-pool-") as tmp:
        project = fresh_project(Path(tmp))
        cache = Path(tmp) / "cache"
        report = Path(tmp) / "tune.json"
        load_before = load()
        code, wall = pytest_run(project, ["--autotune", TESTS, f"--autotune-compile-workers={workers}",
                                          f"--autotune-seed={seed}", f"--autotune-report={report}"], cache)
        load_after = load()
        rows = json.loads(report.read_text())["kernels"] if report.exists() else []
        winners = {r["kernel"]: {"median_ms": r.get("time_ms"), "params": r.get("params"),
                                 "evaluations": r.get("evaluations"), "failures": r.get("failures")} for r in rows}
        alarms: list[list[str]] = []
        withheld: list[list[str]] = []
        for _ in range(gates):
            gate_report = Path(tmp) / "gate.json"
            gate_code, _ = pytest_run(project, [TESTS, f"--autotune-report={gate_report}"], cache)
            gate_rows = json.loads(gate_report.read_text())["kernels"] if gate_report.exists() else []
            # a failing gate (REGRESSION, BROKEN) of an unchanged kernel is a false alarm; "incomparable" (a
            # "slower" verdict withheld because the machine probes moved) passes, and is counted apart
            alarms.append(sorted(r["kernel"] for r in gate_rows if r.get("status") in ("REGRESSION", "BROKEN")))
            withheld.append(sorted(r["kernel"] for r in gate_rows if r.get("status") == "incomparable"))
            if gate_code not in (0, 1):
                alarms[-1].append(f"pytest exit {gate_code}")
        return {"workers": workers, "exit": code, "wall_s": wall, "load_before": load_before,
                "load_after": load_after, "winners": winners, "gate_false_alarms": alarms, "gate_incomparable": withheld,
                "gate_runs": gates * max(1, len(winners))}


def disturbance(runs: int) -> dict[str, Any]:
    """Medians of one fixed configuration: alone, with a paused pool compiling, with an unpaused one."""
    from example_kernels import MATMUL_N, MATMUL_PARAMS, MATMUL_RESTRICTIONS, kernel_path, matmul_problem

    from pytest_autotune.lock.lockfile import read_lockfile
    from pytest_autotune.runners import KernelSpec, make_runner
    from pytest_autotune.space import SearchSpace

    lock = read_lockfile(next((EXAMPLE / "autotune.lock").glob("cpu-*.json")))
    fixed = next(e["params"] for k, e in lock.entries.items() if k.endswith("::matmul"))
    args, expected = matmul_problem()
    spec = KernelSpec(kernel_path("matmul.c"), "matmul", MATMUL_N, args, expected=expected, rtol=1e-4, atol=1e-3)
    space = SearchSpace(MATMUL_PARAMS, MATMUL_RESTRICTIONS)
    others = [space.get(i) for i in range(0, len(space), max(1, len(space) // 400))]
    samples: dict[str, list[float]] = {"alone": [], "paused": [], "unpaused": []}
    with tempfile.TemporaryDirectory(prefix="bench-pool-cache-") as cache:
        os.environ["PYTEST_AUTOTUNE_CACHE_DIR"] = cache
        with make_runner(spec) as runner:
            runner.evaluate(fixed)  # compiled once; every later run is a cache hit (a load)
            feed = iter(others)
            for _ in range(runs):
                for condition in ("alone", "paused", "unpaused"):
                    if condition != "alone":
                        runner.start_compile_ahead(2)
                        runner.compile_pool.stage.pause_while_timing = condition == "paused"
                        runner.prefetch([next(feed) for _ in range(4)])
                        deadline = time.monotonic() + 5
                        while runner.compile_pool.processes.running < 2 and time.monotonic() < deadline:
                            time.sleep(0.005)  # both workers have a compiler running
                    m = runner.evaluate(fixed)
                    runner.stop_compile_ahead()
                    if m.ok:
                        samples[condition].append(m.value)
        os.environ.pop("PYTEST_AUTOTUNE_CACHE_DIR", None)
    medians = {c: statistics.median(v) for c, v in samples.items() if v}
    return {"params": fixed, "runs": runs, "median_ms": medians,
            "ratio_to_alone": {c: medians[c] / medians["alone"] for c in medians},
            "samples_ms": samples}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--gates", type=int, default=2, help="plain pytest runs after each tune")
    parser.add_argument("--disturb", type=int, default=12, help="timings per condition in part 3 (0 skips it)")
    parser.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "compile_pool.json"))
    opts = parser.parse_args()

    runs: list[dict[str, Any]] = []
    for r in range(opts.repeats):
        for workers in (WORKERS if r % 2 == 0 else WORKERS[::-1]):
            run = tune_once(workers, opts.gates, seed=r)  # both worker counts of a round search with one seed
            run["round"] = r
            runs.append(run)
            print(f"round {r} workers {workers}: {run['wall_s']:.1f} s (load {run['load_before']:.1f} -> "
                  f"{run['load_after']:.1f}), exit {run['exit']}, false alarms {run['gate_false_alarms']}",
                  flush=True)

    by_workers = {w: [r for r in runs if r["workers"] == w] for w in WORKERS}
    kernels = sorted({k for r in runs for k in r["winners"]})
    summary: dict[str, Any] = {}
    for w, mine in by_workers.items():
        summary[str(w)] = {
            "wall_s_median": statistics.median(r["wall_s"] for r in mine),
            "load_median": statistics.median((r["load_before"] + r["load_after"]) / 2 for r in mine),
            "winner_median_ms": {k: statistics.median(r["winners"][k]["median_ms"] for r in mine
                                                      if k in r["winners"] and r["winners"][k]["median_ms"])
                                 for k in kernels},
            "false_alarms": sum(len(a) for r in mine for a in r["gate_false_alarms"]),
            "incomparable": sum(len(a) for r in mine for a in r["gate_incomparable"]),
            "gated_kernels": sum(r["gate_runs"] for r in mine),
        }
    paired = [(a["wall_s"], b["wall_s"]) for a, b in
              ((next(x for x in runs if x["round"] == r and x["workers"] == 1),
                next(x for x in runs if x["round"] == r and x["workers"] == 2)) for r in range(opts.repeats))]
    ratio = statistics.median(two / one for one, two in paired)

    rows = [[str(w), f"{s['wall_s_median']:.1f}", f"{s['load_median']:.1f}",
             *(f"{s['winner_median_ms'].get(k, float('nan')):.4f}" for k in kernels),
             f"{s['false_alarms']}/{s['gated_kernels']}", f"{s['incomparable']}/{s['gated_kernels']}"]
            for w, s in summary.items()]
    print()
    print_table(rows, ["workers", "wall s (median)", "load", *[f"{k} ms" for k in kernels], "gate false alarms", "incomparable"])
    print(f"wall time, 2 workers / 1 worker, median of {opts.repeats} paired rounds: {ratio:.3f}")

    disturb = disturbance(opts.disturb) if opts.disturb else None
    if disturb:
        print()
        print_table([[c, f"{disturb['median_ms'][c]:.4f}", f"{disturb['ratio_to_alone'][c]:.3f}"]
                     for c in disturb["median_ms"]], ["condition", "median ms", "ratio to alone"])
    write_json(opts.json, {"environment": environment(), "uptime_load_at_start": runs[0]["load_before"],
                           "runs": runs, "summary": summary, "wall_ratio_2_over_1": ratio,
                           "paired_wall_s": paired, "disturbance": disturb,
                           "command": " ".join(sys.argv)})
    print(f"results written to {opts.json}")


if __name__ == "__main__":
    main()
