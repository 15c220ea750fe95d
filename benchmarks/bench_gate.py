#!/usr/bin/env python
"""False alarms and detection of the regression gate, on the C runner (no GPU needed).

A C kernel whose amount of work is *data* (a repeat count in an input array)
is tuned once with ``pytest --autotune`` (a real run, in a subprocess), which
writes the lock entry. Then the gate re-times the locked winner many times.
Two sizes of the same kernel (``--kernels``):

* ``l2``    16 Ki floats a side (the arrays stay in L2), 100 repeats: ~0.2 ms,
            compute bound, 32 samples per measurement;
* ``dram``  4 Mi floats a side (32 MiB, beyond the L3 of one socket), 5
            repeats: ~15 ms, memory bound and exposed to other tenants'
            memory traffic; the 0.25 s time budget leaves 7-16 samples.

Scenarios:

* ``unchanged``  the same repeat count: the gate should never fail (a failure
                 is a false alarm);
* ``slowed``     the repeat count raised by ``--slowdown`` (default 20 %): the
                 source, space and problem hashes are unchanged, the kernel is
                 really that much slower, and the gate should fail every time.

Two paths per scenario, interleaved (unchanged, slowed, unchanged, ...) so a
change of machine load hits both alike:

* ``engine``  what the fixture does in a gate run, without pytest: a fresh C
              runner (a fresh worker process, as in a new pytest session),
              ``runner.evaluate(locked params)``, ``gate.run_gate(...)`` with
              the default tolerance and alpha, ``--runs`` times;
* ``pytest``  ``python -m pytest`` on the project, ``--pytest-runs`` times:
              the full gate path (lockfile, hashes, fixture, message, exit
              status), the verdict and numbers read from ``--autotune-report``.

Printed: a table (scenario, path, runs, failures, false-alarm / detection
rate, median change %, change range, p-value range) and the lock; written:
JSON with every run. Defaults under test: :class:`MeasureOptions` (32 samples
within 0.25 s, median), tolerance 10 %, alpha 0.01 (one-sided Mann-Whitney U).

    python benchmarks/bench_gate.py [--runs 50] [--pytest-runs 5] [--slowdown 0.2] [--kernels l2,dram]
                                    [--json benchmarks/results/bench_gate.json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import environment, print_table, write_json  # noqa: E402

from pytest_autotune.gate.verdict import run_gate  # noqa: E402
from pytest_autotune.lifecycle.settings import parse_marker  # noqa: E402
from pytest_autotune.runners import KernelSpec, make_runner  # noqa: E402

# name: (elements per array, repeats of the unchanged kernel); time is linear in the repeat count
KERNELS = {"l2": (16384, 100), "dram": (4 << 20, 5)}

KERNEL = r"""
/* out = out * 0.5 + in, reps[0] times: the work is data, so a slower kernel keeps its lock entry valid. */
void work(float *out, const float *in, const int *reps, int n) {
    int r = reps[0];
    for (int k = 0; k < r; k++)
        for (int i = 0; i < n; i += UNROLL)
            for (int j = 0; j < UNROLL && i + j < n; j++)
                out[i + j] = out[i + j] * 0.5f + in[i + j];
}
"""

HEADER = '''
import pathlib

import numpy as np
import pytest

HERE = pathlib.Path(__file__).parent
'''

TEST = '''

@pytest.mark.tune(params={{"UNROLL": [1, 2, 4, 8]}}, strategy="brute_force", measure={measure!r})
def test_{name}(autotune):
    n, reps = {n}, int((HERE / "reps_{name}.txt").read_text())
    a = np.linspace(0, 1, n, dtype=np.float32)
    out = np.zeros(n, dtype=np.float32)
    autotune.kernel("work.c", "work", n, [out, a, np.array([reps], dtype=np.int32), np.int32(n)])
'''


def make_project(directory: Path, kernels: list[str], measure: dict[str, Any]) -> None:
    (directory / "work.c").write_text(KERNEL)
    tests = "".join(TEST.format(name=k, n=KERNELS[k][0], measure=measure) for k in kernels)
    (directory / "test_gate.py").write_text(HEADER + tests)
    (directory / "pytest.ini").write_text("[pytest]\n")


def pytest_run(directory: Path, kernel: str, reps: int, *args: str) -> tuple[int, dict[str, Any] | None, str]:
    """``python -m pytest`` on one test of the project; the exit status, the summary row and the output."""
    (directory / f"reps_{kernel}.txt").write_text(str(reps))
    report = directory / "report.json"
    report.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:benchmark", "-p", "no:hypothesispytest",
           "-p", "no:cacheprovider", f"--autotune-report={report}", f"test_gate.py::test_{kernel}", *args]
    proc = subprocess.run(cmd, cwd=directory, capture_output=True, text=True, timeout=600)
    row = None
    if report.exists():
        rows = json.loads(report.read_text())["kernels"]
        row = rows[0] if rows else None
    return proc.returncode, row, proc.stdout + proc.stderr


def engine_gate(directory: Path, kernel: str, reps: int, entry: dict[str, Any], settings: Any) -> dict[str, Any]:
    """One gate run as the fixture does it: fresh runner (worker process), evaluate, run_gate."""
    n = KERNELS[kernel][0]
    a = np.linspace(0, 1, n, dtype=np.float32)
    spec = KernelSpec(source=directory / "work.c", kernel_name="work", problem_size=n,
                      args=[np.zeros(n, np.float32), a, np.array([reps], dtype=np.int32), np.int32(n)])
    runner = make_runner(spec, runner="c", measure=settings.measure)
    try:
        m = runner.evaluate(entry["params"])
    finally:
        runner.close()
    out = run_gate("work", f"test_gate.py::test_{kernel}", entry, m, settings.tolerance, settings.alpha)
    cmp = out.comparison
    return {"failed": out.failed, "verdict": out.verdict, "change_pct": cmp.change_pct if cmp else None,
            "p_value": cmp.p_value if cmp else None, "median_ms": cmp.new_median if cmp else None,
            "n": cmp.n_new if cmp else 0}


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    changes = [r["change_pct"] for r in runs if r["change_pct"] is not None]
    ps = [r["p_value"] for r in runs if r["p_value"] is not None]
    failures = sum(bool(r["failed"]) for r in runs)
    return {"runs": len(runs), "failures": failures, "failure_rate": failures / len(runs) if runs else None,
            "median_change_pct": statistics.median(changes) if changes else None,
            "min_change_pct": min(changes) if changes else None, "max_change_pct": max(changes) if changes else None,
            "min_p": min(ps) if ps else None, "max_p": max(ps) if ps else None,
            "verdicts": {v: sum(r["verdict"] == v for r in runs) for v in sorted({r["verdict"] for r in runs})}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50, help="engine gate runs per scenario")
    parser.add_argument("--pytest-runs", type=int, default=5, help="real `python -m pytest` gate runs per scenario")
    parser.add_argument("--slowdown", type=float, default=0.20, help="relative slowdown of the 'slowed' scenario")
    parser.add_argument("--kernels", default="l2,dram", help=f"comma-separated, from {', '.join(KERNELS)}")
    parser.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "bench_gate.json"))
    parser.add_argument("--keep", action="store_true", help="keep the temporary project (its path is printed)")
    parser.add_argument("--measure", default="{}", type=json.loads,
                        help='marker measure= overrides as JSON, e.g. \'{"time_budget_s": 2}\' (default: none)')
    parser.add_argument("--tolerance", type=float, default=0.10, help="gate tolerance (default: the plugin\'s 0.10)")
    parser.add_argument("--alpha", type=float, default=0.01, help="gate alpha (default: the plugin\'s 0.01)")
    parser.add_argument("--label", default="defaults",
                        help="name of this configuration in the JSON file (other labels there are kept)")
    args = parser.parse_args(argv)
    kernels = [k.strip() for k in args.kernels.split(",") if k.strip()]
    unknown = [k for k in kernels if k not in KERNELS]
    if unknown:
        parser.error(f"unknown kernel(s) {unknown}; choose from {', '.join(KERNELS)}")

    settings = parse_marker((), {"params": {"UNROLL": [1, 2, 4, 8]}, "strategy": "brute_force",
                                 "measure": args.measure}, {"tolerance": args.tolerance, "alpha": args.alpha})
    env_before = environment(["numpy", "scipy", "pytest"])
    started = time.perf_counter()
    directory = Path(tempfile.mkdtemp(prefix="bench-gate-"))
    make_project(directory, kernels, args.measure)
    os.environ.setdefault("PYTEST_AUTOTUNE_CACHE_DIR", str(directory / ".c-cache"))
    print(f"project: {directory}")

    gate_flags = (f"--autotune-tolerance={args.tolerance}", f"--autotune-alpha={args.alpha}")
    # scenario key: (kernel, scenario name) -> repeat count
    scenarios: dict[tuple[str, str], int] = {}
    locks: dict[str, dict[str, Any]] = {}
    entries: dict[str, dict[str, Any]] = {}
    for kernel in kernels:
        reps = KERNELS[kernel][1]
        scenarios[(kernel, "unchanged")] = reps
        scenarios[(kernel, f"slowed {args.slowdown:.0%}")] = round(reps * (1 + args.slowdown))
        rc, row, out = pytest_run(directory, kernel, reps, "--autotune", *gate_flags)
        if rc != 0 or row is None:
            print(out)
            raise SystemExit(f"tuning run of {kernel} failed (exit status {rc})")
        lockfile = next((directory / "autotune.lock").glob("*.json"))
        entry = json.loads(lockfile.read_text())["entries"][f"test_gate.py::test_{kernel}::work"]
        entries[kernel] = entry
        locks[kernel] = {"params": entry["params"], "median_ms": entry["stats"]["median"],
                         "iqr_ms": entry["stats"]["iqr"], "n": entry["stats"]["n"], "lockfile": lockfile.name,
                         "elements": KERNELS[kernel][0], "reps": reps}
        print(f"locked {kernel}: {entry['params']}  median {entry['stats']['median']:.4g} ms  "
              f"iqr {entry['stats']['iqr']:.3g} ms  n={entry['stats']['n']}")

    runs: dict[tuple[str, str, str], list[dict[str, Any]]] = {
        (k, s, p): [] for (k, s) in scenarios for p in ("engine", "pytest")}
    for i in range(args.runs):
        for (kernel, name), reps in scenarios.items():  # interleaved: load changes hit every scenario alike
            runs[(kernel, name, "engine")].append(engine_gate(directory, kernel, reps, entries[kernel], settings))
        if (i + 1) % 10 == 0:
            done = {f"{k[0]} {k[1]}": sum(r["failed"] for r in v) for k, v in runs.items() if k[2] == "engine"}
            print(f"  engine: {i + 1}/{args.runs} rounds, failures so far {done}", flush=True)
    for i in range(args.pytest_runs):
        for (kernel, name), reps in scenarios.items():
            rc, row, out = pytest_run(directory, kernel, reps, *gate_flags)
            if rc not in (0, 1) or row is None:
                print(out)
                raise SystemExit(f"gate run failed unexpectedly (exit status {rc})")
            failed = rc == 1
            if failed:  # the failure must be the gate's, with its message
                assert "autotune regression: kernel 'work'" in out, out
            runs[(kernel, name, "pytest")].append({"failed": failed, "verdict": row["status"], "exit_status": rc,
                                                   "change_pct": row.get("change_pct"),
                                                   "p_value": row.get("p_value"), "median_ms": row.get("time_ms")})

    header = ["kernel", "scenario", "path", "runs", "failures", "rate", "median change", "change range", "p range"]
    table, results = [], []
    for (kernel, name, path), rs in runs.items():
        if not rs:
            continue
        s = summarise(rs)
        rate_name = "false alarms" if name == "unchanged" else "detection"
        table.append([kernel, name, path, str(s["runs"]), str(s["failures"]), f"{s['failure_rate']:.0%} {rate_name}",
                      f"{s['median_change_pct']:+.1f}%", f"{s['min_change_pct']:+.1f}% .. {s['max_change_pct']:+.1f}%",
                      f"{s['min_p']:.2g} .. {s['max_p']:.2g}"])
        results.append({"kernel": kernel, "scenario": name, "path": path, "reps": scenarios[(kernel, name)], **s,
                        "runs_detail": rs})
    print()
    print_table(table, header, title=f"regression gate on the C runner: tolerance {settings.tolerance:.0%}, "
                                     f"alpha {settings.alpha:g}, {settings.measure.max_iterations} samples max")
    payload = {
        "label": args.label,
        "command": "python benchmarks/bench_gate.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "settings": {"tolerance": settings.tolerance, "alpha": settings.alpha,
                     "measure": {k: getattr(settings.measure, k) for k in settings.measure.__dataclass_fields__},
                     "runs": args.runs, "pytest_runs": args.pytest_runs, "slowdown": args.slowdown,
                     "kernels": {k: {"elements": KERNELS[k][0], "reps": KERNELS[k][1]} for k in kernels}},
        "lock": locks,
        "results": results,
        "environment_before": env_before,
        "environment_after": environment(),
        "wall_s": time.perf_counter() - started,
    }
    path = Path(args.json)
    document = {"benchmark": "bench_gate",
                "description": "false-alarm and detection rate of the regression gate on the C runner",
                "configurations": {}}
    if path.exists():  # keep the other configurations (labels) already recorded
        try:
            old = json.loads(path.read_text())
            if isinstance(old.get("configurations"), dict):
                document["configurations"] = old["configurations"]
        except (ValueError, AttributeError):
            pass
    document["configurations"][args.label] = payload
    path = write_json(path, document)
    print(f"\nwritten {path} ({payload['wall_s']:.0f} s)")
    if not args.keep:
        import shutil

        shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":  # the C runner's worker processes re-import the main module
    sys.exit(main())
