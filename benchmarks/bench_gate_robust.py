#!/usr/bin/env python
"""Today's gate against the robust one, same run: false alarms with a noisy neighbour, detection of slower
source edits, and a lock recorded under other conditions (a cross-machine simulation).

Kernels (C runner, no GPU): ``compute`` (16 Ki floats, in L2, 100 sweeps: compute bound), ``memory``
(4 Mi floats a side, beyond the L3: memory bound), and the example project's blocked ``matmul`` and
``stencil`` at the parameters of its committed lock. The synthetic kernels carry their amount of work in
the source (``#define REPS``), so an edit that adds 30 % (or 15 %) work is a real source edit.

The lock is recorded once per kernel on the quiet machine (samples and machine probes). Then, in
interleaved rounds, the gate runs under two conditions: ``quiet`` and ``neighbour`` (a background process
keeping one of the two cores busy: on a 2-core machine, a noisy tenant; against a lock recorded quietly, a
machine other than the lock's). Per round and condition:

* unchanged kernel: ``today`` = fresh samples against the locked ones (one measurement, the gate before
  this change); ``robust`` = the same measurement, re-measured in fresh rounds before a failure, and
  "incomparable" when this session's probes differ from the lock's beyond the tolerance, or when the
  lock's runner-up (recorded in the lock session), timed beside the winner now, slowed alike;
* slower edit (synthetic kernels): ``today`` = the edited kernel's samples against the locked ones;
  ``robust`` = A/B as the gate does it: a runner per source, both workers pinned to one CPU, interleaved
  rounds, and a suspected slowdown confirmed in two more blocks.

A failure of an unchanged kernel is a false alarm; a failure of a slowed one a detection. "incomparable"
is neither (the robust gate's default policy warns and passes).

    python benchmarks/bench_gate_robust.py [--runs 50] [--edit-runs 20] [--edits 0.30,0.15]
                                           [--json benchmarks/results/bench_gate_robust.json]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "example_project" / "src"))

from _common import environment, print_table, write_json  # noqa: E402

from pytest_autotune.gate.verdict import run_ab_gate, run_gate  # noqa: E402
from pytest_autotune.measure.timing import MeasureOptions  # noqa: E402
from pytest_autotune.gate.probes import compare_machines, measure_cpu_probes  # noqa: E402
from pytest_autotune.runners import KernelSpec, make_runner  # noqa: E402
from pytest_autotune.runners.isolation import sharing_one_cpu  # noqa: E402
from pytest_autotune.runners.kernel import with_code  # noqa: E402
from pytest_autotune.engine.tuner import CONFIRM_ROUNDS, confirm, params_key  # noqa: E402

SYNTHETIC = r"""
#define REPS {reps}
void work(float *out, const float *in, int n) {{
    for (int k = 0; k < REPS; k++)
        for (int i = 0; i < n; i += UNROLL)
            for (int j = 0; j < UNROLL && i + j < n; j++)
                out[i + j] = out[i + j] * 0.5f + in[i + j];
}}
"""
SYNTHETIC_SIZES = {"compute": (16384, 100), "memory": (4 << 20, 5)}


def example_specs() -> dict[str, tuple[KernelSpec, dict[str, Any]]]:
    """The example project's matmul and square stencil, at the parameters of its committed lock."""
    from example_kernels import kernel_path, matmul_problem, rng, stencil_reference

    lock = json.loads((ROOT / "example_project" / "autotune.lock" / "cpu-amd-epyc.json").read_text())["entries"]
    args, expected = matmul_problem()
    matmul = KernelSpec(kernel_path("matmul.c"), "matmul", 192, args, expected=expected, rtol=1e-4, atol=1e-3)
    grid = rng(3).random((512, 512), dtype=np.float32)
    out, tmp = np.zeros_like(grid), np.zeros_like(grid)
    stencil = KernelSpec(kernel_path("stencil.c"), "stencil", (512, 512),
                         [out, tmp, grid, np.int32(512), np.int32(512), np.int32(4)],
                         expected=[stencil_reference(grid, 4), None, None, None, None, None], rtol=1e-5, atol=1e-5)
    return {"matmul": (matmul, lock["tests/test_cpu_kernels.py::test_blocked_matmul::matmul"]),
            "stencil": (stencil, lock["tests/test_cpu_kernels.py::test_stencil_square_and_wide::stencil_square"])}


def synthetic_spec(name: str, reps: int) -> KernelSpec:
    n = SYNTHETIC_SIZES[name][0]
    return KernelSpec(SYNTHETIC.format(reps=reps), "work", n,
                      [np.zeros(n, np.float32), np.linspace(0, 1, n, dtype=np.float32), np.int32(n)], lang="c")


def measure(spec: KernelSpec, params: dict[str, Any]) -> Callable[[], Any]:
    """A fresh runner (a new worker process, as in a new pytest session) for each call."""
    def run() -> Any:
        runner = make_runner(spec, runner="c", measure=MeasureOptions())
        try:
            return runner.evaluate(params)
        finally:
            runner.close()
    return run


def ab_gate(name: str, entry: dict[str, Any], locked: KernelSpec, edited: KernelSpec, params: dict[str, Any],
            tolerance: float, alpha: float) -> str:
    """The product's A/B: one runner per source, alive for the comparison, both pinned to one CPU."""
    with make_runner(locked, runner="c", measure=MeasureOptions()) as a, \
            make_runner(edited, runner="c", measure=MeasureOptions()) as b, sharing_one_cpu(a, b):
        return run_ab_gate(name, "bench", entry, lambda: a.evaluate(params), lambda: b.evaluate(params),
                           tolerance, alpha).verdict


class Neighbour:
    """A background process keeping one core busy (a noisy tenant on a 2-core machine)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> "Neighbour":
        self.proc = subprocess.Popen([sys.executable, "-c", "while True:\n    pass"])
        time.sleep(0.3)
        return self

    def __exit__(self, *exc: Any) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50, help="gate runs of each unchanged kernel per condition")
    parser.add_argument("--edit-runs", type=int, default=20, help="gate runs of each slowed edit per condition")
    parser.add_argument("--edits", default="0.30,0.15", help="slowdowns by source edit (synthetic kernels)")
    parser.add_argument("--kernels", default="compute,memory,matmul,stencil")
    parser.add_argument("--tolerance", type=float, default=0.10)
    parser.add_argument("--alpha", type=float, default=0.01)
    parser.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "bench_gate_robust.json"))
    args = parser.parse_args(argv)
    edits = [float(x) for x in args.edits.split(",") if x.strip()]
    chosen = [k.strip() for k in args.kernels.split(",") if k.strip()]
    env_before = environment(["numpy", "scipy", "pytest"])
    started = time.perf_counter()

    kernels: dict[str, tuple[KernelSpec, dict[str, Any]]] = {}
    runner_up: dict[str, dict[str, Any]] = {}  # the configuration the robust gate times beside the winner
    for name in chosen:
        if name in SYNTHETIC_SIZES:
            kernels[name] = (synthetic_spec(name, SYNTHETIC_SIZES[name][1]), {"UNROLL": 1})
            runner_up[name] = {"UNROLL": 2}
    for name, (spec, entry) in example_specs().items():
        if name in chosen:
            kernels[name] = (spec, entry["params"])
            runner_up[name] = entry["runners_up"][0]["params"]

    # The lock: quiet machine, one session (probes and samples side by side), recorded as ``tune()`` records
    # it: the winner and its runner-up re-timed in interleaved confirmation rounds in one worker.
    lock_probes = measure_cpu_probes()
    entries = {}
    for name, (spec, params) in kernels.items():
        with make_runner(spec, runner="c", measure=MeasureOptions()) as session:
            session.evaluate(params)  # the tuning session's worker is warm by the time it confirms
            pooled = confirm(session, [params, runner_up[name]], CONFIRM_ROUNDS)
        samples, up_samples = pooled[params_key(params)], pooled[params_key(runner_up[name])]
        assert samples and up_samples, (name, "a configuration failed in the lock's confirmation rounds")
        entries[name] = {"params": params, "samples": samples, "stats": {"median": float(np.median(samples))},
                         "runners_up": [{"params": runner_up[name], "samples": up_samples}]}
        print(f"locked {name}: {params}  median {entries[name]['stats']['median']:.4g} ms  n={len(samples)}, runner-up n={len(up_samples)}")
    print(f"lock probes: {lock_probes}")

    results: dict[tuple[str, str, str, str], list[str]] = defaultdict(list)  # (kernel, scenario, condition, gate)
    probes_seen: dict[str, list[dict[str, Any]]] = defaultdict(list)
    seen: list[dict[str, Any]] = []  # the robust gate's non-passing verdicts of unchanged kernels
    for i in range(args.runs):
        for condition in ("quiet", "neighbour"):
            ctx = Neighbour() if condition == "neighbour" else None
            if ctx:
                ctx.__enter__()
            try:
                probes = measure_cpu_probes()  # once per gate session
                probes_seen[condition].append(probes)
                machine = compare_machines(lock_probes, probes, args.tolerance)
                for name, (spec, params) in kernels.items():
                    # one runner per gate session, as the plugin has: first measurement, confirmation rounds
                    # and the runner-up beside the winner all in its worker
                    with make_runner(spec, runner="c", measure=MeasureOptions()) as session:
                        m = session.evaluate(params)
                        today = run_gate(name, "bench", entries[name], m, args.tolerance, args.alpha)
                        robust = run_gate(name, "bench", entries[name], m, args.tolerance, args.alpha,
                                          remeasure=lambda: session.evaluate(params), machine=machine,
                                          reference=session.evaluate)
                    results[(name, "unchanged", condition, "today")].append(today.verdict)
                    results[(name, "unchanged", condition, "robust")].append(robust.verdict)
                    if robust.verdict in ("slower", "incomparable"):  # what the robust gate saw, for the note
                        seen.append({"kernel": name, "condition": condition, "round": i, "verdict": robust.verdict,
                                     "change_pct": round(robust.comparison.change_pct, 1), "notes": robust.notes})
                    if name not in SYNTHETIC_SIZES or i >= args.edit_runs:
                        continue
                    for edit in edits:
                        edited = with_code(spec, SYNTHETIC.format(reps=round(SYNTHETIC_SIZES[name][1] * (1 + edit))))
                        slow = measure(edited, params)
                        scenario = f"edit +{edit:.0%}"
                        results[(name, scenario, condition, "today")].append(
                            run_gate(name, "bench", entries[name], slow(), args.tolerance, args.alpha).verdict)
                        results[(name, scenario, condition, "robust")].append(
                            ab_gate(name, entries[name], spec, edited, params, args.tolerance, args.alpha))
            finally:
                if ctx:
                    ctx.__exit__(None, None, None)
        print(f"  round {i + 1}/{args.runs} ({time.perf_counter() - started:.0f} s)", flush=True)

    header = ["kernel", "scenario", "condition", "gate", "runs", "fail", "rate", "incomparable", "verdicts"]
    table, rows = [], []
    for (name, scenario, condition, gate), verdicts in sorted(results.items()):
        counts = Counter(verdicts)
        fails = counts["slower"] + counts["broken"]
        kind = "false alarms" if scenario == "unchanged" else "detected"
        table.append([name, scenario, condition, gate, str(len(verdicts)), str(fails),
                      f"{fails / len(verdicts):.0%} {kind}", str(counts["incomparable"]),
                      ", ".join(f"{k}:{v}" for k, v in sorted(counts.items()))])
        rows.append({"kernel": name, "scenario": scenario, "condition": condition, "gate": gate,
                     "runs": len(verdicts), "failures": fails, "verdicts": dict(counts)})
    print()
    print_table(table, header, title=f"gate today vs robust: tolerance {args.tolerance:.0%}, alpha {args.alpha:g}")
    probe_summary = {c: {p: [round(float(np.min([x[p] for x in v])), 3), round(float(np.median([x[p] for x in v])), 3),
                             round(float(np.max([x[p] for x in v])), 3)] for p in ("bandwidth_gbs", "compute_gflops")}
                     for c, v in probes_seen.items()}
    print(f"lock probes {lock_probes}; gate probes min/median/max {probe_summary}")
    payload = {"benchmark": "bench_gate_robust",
               "command": "python benchmarks/bench_gate_robust.py " + " ".join(argv if argv is not None else sys.argv[1:]),
               "settings": {"runs": args.runs, "edit_runs": args.edit_runs, "edits": edits, "tolerance": args.tolerance, "alpha": args.alpha,
                            "kernels": {k: v[1] for k, v in kernels.items()}},
               "lock": {k: {"params": e["params"], "median_ms": e["stats"]["median"]} for k, e in entries.items()},
               "lock_probes": lock_probes, "gate_probes": probe_summary, "results": rows,
               "robust_unchanged_not_passing": seen,
               "environment_before": env_before, "environment_after": environment(),
               "wall_s": time.perf_counter() - started}
    print(f"\nwritten {write_json(Path(args.json), payload)} ({payload['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
