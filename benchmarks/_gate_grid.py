"""bench_gate_robust.py --grid (issue 43): the gate over the space of real kernels, beside real neighbours.

Kernels (C runner): a working set from L1 to DRAM sizes, compute- or memory-bound, a run of a chosen length,
made by one generated source (``WS`` bytes in two arrays; ``memory``: one multiply-add per element and sweep,
``compute``: 32 dependent ones), its sweeps (``REPS``) calibrated once so that a run lasts about the duration
asked for. A cell is ``SIZE/CLASS/DURATION``, e.g. ``2M/memory/1.7``.

Neighbours (compiled C, never pinned: the scheduler places them, as another job's on a shared runner):
``spin`` (a register loop), ``stream`` (a 256 MiB triad: the memory bus and the last-level cache), on 1 or 2
of the cores; ``both`` is one of each. ``quiet`` has none.

Per cell the lock is recorded as ``tune()`` records it now (the winner's rounds beside the probes sized to
the kernel, on each CPU in turn, keeping the machine's best state) twice in the same minute: ``new`` with
the runs' accounting (time off the CPU, the reference run before each run: measure/reference.py), and
``before`` as the gate before issue 43 read it (the same rounds' measurements without either). Then, in
interleaved order, each condition runs gate sessions of the unchanged kernel and of slowdowns made through
the build's flags (``-DREPS``: x1.3 and x3, source untouched), each judged by both gates on measurements of
its own (the product's run_gate with its default per-kernel budget, 10 s; ``before`` on measurements with
the accounting stripped, against the ``before`` lock). ``--lock-condition busy1`` records the locks beside
a spinning neighbour instead ("a lock recorded on a loaded machine").

A failure of an unchanged kernel is a false alarm; of a slowed one a detection; ``incomparable`` is neither.
"""
from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Callable

import numpy as np

from _common import environment, print_table, write_json

from pytest_autotune.gate.budget import GateBudget, parse_gate_budget
from pytest_autotune.gate.probes import fma_ns_per_iteration, measure_cpu_probes, probe_sizes
from pytest_autotune.gate.rounds import LOCK_ROUNDS, best_state_rounds, reference_runs, rotating_pin
from pytest_autotune.gate.verdict import run_gate
from pytest_autotune import defaults as DEFAULTS
from pytest_autotune.results import Measurement
from pytest_autotune.runners import KernelSpec, make_runner

KERNEL = r"""
void work(float *out, const float *in, int n) {
    for (int k = 0; k < REPS; k++)
        for (int i = 0; i < n; i++) {
            float x = out[i];
            for (int c = 0; c < CHAIN; c++)
                x = x * 0.999f + in[i];
            out[i] = x;
        }
}
"""
CHAIN = {"memory": 1, "compute": 32}
SIZES = {"32K": 32 << 10, "1M": 1 << 20, "2M": 2 << 20, "8M": 8 << 20, "64M": 64 << 20}
DEFAULT_CELLS = ("32K/compute/0.05", "1M/compute/1", "2M/memory/1.7", "8M/memory/5", "64M/memory/20",
                 "1M/memory/0.3")
CONDITIONS = {"quiet": (), "spin1": ("spin",), "spin2": ("spin", "spin"), "stream1": ("stream",),
              "stream2": ("stream", "stream"), "both": ("spin", "stream")}
NEIGHBOUR_SOURCE = {
    "spin": "int main(void) { volatile double x = 1.0; for (;;) x = x * 1.0000001 + 1e-9; }\n",
    "stream": ("#include <stdlib.h>\nint main(void) { long n = 1L << 24; float *a = malloc(4 * n), *b = malloc(4 * n),"
               " *c = malloc(4 * n); for (long i = 0; i < n; i++) { a[i] = 0; b[i] = 1; c[i] = 2; }\n"
               " for (;;) for (long i = 0; i < n; i++) a[i] = b[i] + 1.5f * c[i]; }\n"),
}
LOCKED = {}


def strip(m: Measurement) -> Measurement:
    """The measurement as the gate before issue 43 read it: no time off the CPU, no reference runs."""
    if isinstance(m.extra, dict):
        m.extra = {k: v for k, v in m.extra.items() if k not in ("offcpu_ms", "reference_ms")}
    return m


class Cell:
    """One kernel of the grid: its source in ``folder``, its sweeps calibrated to ``duration_ms``."""

    def __init__(self, name: str, folder: Path) -> None:
        size, self.kind, duration = name.split("/")
        self.name, self.bytes, self.duration_ms = name, SIZES[size], float(duration)
        self.n = self.bytes // 8
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "work.c").write_text(KERNEL)
        self.spec = KernelSpec(str(folder / "work.c"), "work", self.n,
                               [np.zeros(self.n, np.float32), np.linspace(0, 1, self.n, dtype=np.float32),
                                np.int32(self.n)])
        with self.runner(1) as r:
            one = min(r.evaluate(LOCKED).value for _ in range(3))
        self.reps = max(3, int(round(self.duration_ms / one)))

    def runner(self, reps: int) -> Any:
        return make_runner(self.spec, runner="c", flags=("-O2", f"-DREPS={reps}", f"-DCHAIN={CHAIN[self.kind]}"))


class Neighbours:
    """Compiled neighbour processes, each until the benchmark ends it (or its parent goes away)."""

    def __init__(self, kinds: tuple[str, ...], binaries: dict[str, str]) -> None:
        self.kinds, self.binaries, self.procs = kinds, binaries, []

    def __enter__(self) -> "Neighbours":
        self.procs = [subprocess.Popen([self.binaries[k]]) for k in self.kinds]
        if self.procs:
            time.sleep(0.5 if "stream" in self.kinds else 0.2)  # the streamer fills its 192 MiB first
        return self

    def __exit__(self, *exc: Any) -> None:
        for p in self.procs:
            p.kill()
            p.wait()


def build_neighbours(folder: Path) -> dict[str, str]:
    out = {}
    for kind, source in NEIGHBOUR_SOURCE.items():
        (folder / f"{kind}.c").write_text(source)
        subprocess.run(["gcc", "-O2", "-o", str(folder / kind), str(folder / f"{kind}.c")], check=True)
        out[kind] = str(folder / kind)
    return out


def record_lock(cell: Cell, tolerance: float) -> tuple[dict[str, Any], dict[str, Any], dict[str, int]]:
    """Both gates' entries, as the product records them now (``new``) and before issue 43 (``before``)."""
    with cell.runner(cell.reps) as session:
        session.evaluate(LOCKED)
        median = float(np.median(session.evaluate(LOCKED).samples))
        sizes = probe_sizes(cell.bytes, median, ns_per_iteration=fma_ns_per_iteration())
        probe, pin = (lambda: measure_cpu_probes(**sizes)), rotating_pin(session)
        entries = {}
        for gate in ("new", "before"):
            measure: Callable[[], Measurement] = (lambda: session.evaluate(LOCKED)) if gate == "new" else \
                (lambda: strip(session.evaluate(LOCKED)))
            with reference_runs(session, sizes["triad_n"] if gate == "new" else None):
                rounds = best_state_rounds([measure], probe, pin, tolerance, rounds=LOCK_ROUNDS)
            assert rounds is not None, (cell.name, "the kernel failed in the lock's rounds")
            (samples,), machine, _ = rounds
            if gate == "new" and machine and "reference_ms" in machine:
                machine["reference_n"] = sizes["triad_n"]
            entries[gate] = {"params": LOCKED, "samples": samples, "stats": {"median": float(np.median(samples))},
                             "machine": machine}
    return entries["new"], entries["before"], sizes


def gate_once(cell: Cell, reps: int, entry: dict[str, Any], sizes: dict[str, int], gate: str, tolerance: float,
              alpha: float, budget_s: float) -> tuple[str, float, list[dict[str, Any]]]:
    """One gate session of ``gate`` (new | before) on a fresh worker: its verdict, wall time and rounds."""
    with cell.runner(reps) as session:
        measure = (lambda: session.evaluate(LOCKED)) if gate == "new" else (lambda: strip(session.evaluate(LOCKED)))
        with reference_runs(session, entry["machine"].get("reference_n")):
            budget = GateBudget(budget_s, "--budget").start()
            first = measure()
            outcome = run_gate(cell.name, "bench", entry, first, tolerance, alpha, remeasure=measure,
                               probe=lambda: measure_cpu_probes(**sizes), pin=rotating_pin(session), budget=budget)
    return outcome.verdict, budget.elapsed, outcome.rounds


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench_gate_robust.py --grid", description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", default=",".join(DEFAULT_CELLS))
    parser.add_argument("--conditions", default="quiet,spin1,spin2,stream1,stream2,both")
    parser.add_argument("--runs", type=int, default=8, help="unchanged-kernel gates per cell, condition and gate")
    parser.add_argument("--slowed-runs", type=int, default=3, help="gates of each slowdown per cell and condition")
    parser.add_argument("--slowdowns", default="1.3,3")
    parser.add_argument("--lock-condition", default="quiet", choices=sorted(CONDITIONS))
    parser.add_argument("--budget", default=DEFAULTS.KERNEL_GATE_BUDGET)
    parser.add_argument("--tolerance", type=float, default=0.10)
    parser.add_argument("--alpha", type=float, default=0.01)
    parser.add_argument("--json", default=str(Path(__file__).resolve().parent / "results" / "bench_gate_grid.json"))
    args = parser.parse_args(argv)
    budget_s = parse_gate_budget(args.budget)
    slowdowns = [float(f) for f in args.slowdowns.split(",") if f.strip()]
    conditions = [c.strip() for c in args.conditions.split(",") if c.strip()]
    tmp = Path(tempfile.mkdtemp(prefix="bench-gate-grid-"))
    binaries = build_neighbours(tmp)
    started, env = time.perf_counter(), environment(["numpy", "scipy"])
    verdicts: dict[tuple[str, str, str, str], Counter] = defaultdict(Counter)
    seconds: dict[tuple[str, str, str, str], list[float]] = defaultdict(list)
    wrong: list[dict[str, Any]] = []
    locks: dict[str, Any] = {}
    for name in [c.strip() for c in args.cells.split(",") if c.strip()]:
        cell = Cell(name, tmp / name.replace("/", "_"))
        with Neighbours(CONDITIONS[args.lock_condition], binaries):
            new_entry, before_entry, sizes = record_lock(cell, args.tolerance)
        locks[name] = {"reps": cell.reps, "new_median_ms": round(new_entry["stats"]["median"], 5),
                       "before_median_ms": round(before_entry["stats"]["median"], 5), "probe_sizes": sizes,
                       "reference_ms": new_entry["machine"].get("reference_ms")}
        print(f"{name}: REPS={cell.reps}, locked {new_entry['stats']['median']:.4g} ms "
              f"(before issue 43: {before_entry['stats']['median']:.4g} ms)", flush=True)
        plan = [("unchanged", cell.reps)] * args.runs + [
            (f"x{f:g}", max(cell.reps + 1, int(round(cell.reps * f)))) for f in slowdowns for _ in range(args.slowed_runs)]
        for condition in conditions:
            with Neighbours(CONDITIONS[condition], binaries):
                for i, (scenario, reps) in enumerate(plan):
                    for gate in (("new", "before") if i % 2 == 0 else ("before", "new")):  # alternate who goes first
                        entry = new_entry if gate == "new" else before_entry
                        verdict, took, rounds = gate_once(cell, reps, entry, sizes, gate, args.tolerance, args.alpha,
                                                          budget_s)
                        key = (name, scenario, condition, gate)
                        verdicts[key][verdict] += 1
                        seconds[key].append(round(took, 2))
                        if (verdict != "pass") if scenario == "unchanged" else (verdict != "slower"):
                            wrong.append({"cell": name, "scenario": scenario, "condition": condition, "gate": gate,
                                          "verdict": verdict, "rounds": rounds[:12]})
            print(f"  {name} {condition}: done ({time.perf_counter() - started:.0f} s)", flush=True)
        summarise(args, argv, verdicts, seconds, wrong, locks, env, started)
    return 0


def failures(c: Counter) -> int:
    return c["slower"] + c["broken"]


def summarise(args: Any, argv: list[str], verdicts: Any, seconds: Any, wrong: list, locks: Any, env: Any,
              started: float) -> None:
    rows, table = [], []
    for (name, scenario, condition, gate), c in sorted(verdicts.items()):
        runs, took = sum(c.values()), seconds[(name, scenario, condition, gate)]
        rows.append({"cell": name, "scenario": scenario, "condition": condition, "gate": gate, "runs": runs,
                     "failures": failures(c), "verdicts": dict(c), "gate_seconds_median": float(np.median(took)),
                     "gate_seconds_max": max(took)})
    pooled: dict[tuple[str, str, str], Counter] = defaultdict(Counter)
    for (name, scenario, condition, gate), c in verdicts.items():
        pooled[(scenario if scenario == "unchanged" else "slowed " + scenario, condition, gate)].update(c)
    for (scenario, condition, gate), c in sorted(pooled.items()):
        table.append([scenario, condition, gate, f"{failures(c)}/{sum(c.values())}", str(c["incomparable"])])
    print()
    print_table(table, ["scenario", "condition", "gate", "fail/runs", "n.c."],
                title=f"gate grid: {len(locks)} kernels pooled, lock {args.lock_condition}, budget {args.budget}")
    write_json(Path(args.json), {
        "benchmark": "bench_gate_robust --grid", "command": "python benchmarks/bench_gate_robust.py --grid " + " ".join(argv),
        "settings": {k: v for k, v in vars(args).items() if k != "json"}, "locks": locks, "results": rows,
        "pooled": [{"scenario": k[0], "condition": k[1], "gate": k[2], "verdicts": dict(c)} for k, c in sorted(pooled.items())],
        "wrong_or_undecided": wrong[:300], "environment": env, "wall_s": round(time.perf_counter() - started, 1)})
