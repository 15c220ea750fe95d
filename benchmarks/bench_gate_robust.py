#!/usr/bin/env python
"""Today's gate beside the new one (issue 27), same run: unchanged kernels, slowdowns made without touching the
source (x1.3 and x3, through the build's flags), and a header edit, quiet and with one and two busy neighbours.

Kernels (C runner, no GPU): ``compute`` (16 Ki floats, in L2, 100 sweeps: compute bound) and ``memory``
(2 Mi floats a side, 16 MiB: beyond L2, memory bound where the L3 is smaller; 10 sweeps). Their amount of
work is ``REPS``, set by ``#define`` in a header (``reps.h``, found through ``-I``) unless the build's flags set it (``-DREPS=...``): a slowdown x1.3 or
x3 made that way leaves source, headers and arguments as they were, as a toolchain, flag or environment
regression does. A header edit (+30 % work in ``reps.h``) is gated A/B, like an edited kernel file.

The lock is recorded once per kernel on the machine as it is when the benchmark starts, each gate's way:
``today``'s as ``tune()`` recorded it then (winner and runner-up re-timed in interleaved confirmation rounds
in one worker, default-size probes in this process), ``new``'s as the plugin records it now (the same, then
the rounds beside the probes sized to the kernel, on each CPU in turn, keeping the machine's best state:
pytest_autotune.gate.rounds). Then, in rounds, each condition (``quiet``, ``busy1``, ``busy2``: one or two
processes spinning on the 2 cores) runs a gate session per kernel and scenario, and both gates judge the
same first measurement: ``today`` (benchmarks/_gate_today.py: the probes' best runs veto "slower" into
"incomparable" beyond the tolerance, and so does a runner-up that slowed alike) and ``new`` (the product's
run_gate: fresh rounds beside the probes on the kernel's CPU, like-for-like rounds compared as they are,
the others corrected; runner-up no excuse).

``budget`` (issue 39) is the new gate with a time budget (``--budget``, default the product's per-kernel default,
10 s; more budgets, comma-separated, are columns ``budget 30s``, ...): the very rounds the ``new`` gate measured, replayed through ``run_gate`` with that budget on a clock that
advances by what each measurement, probe and pause took then (:class:`Replay`). A budgeted gate measures a
prefix of the unbudgeted one's rounds, so this is its verdict on the same machine states, and the difference
between the two columns is the budget's alone. ``gate s`` is each gate's wall time (median and max), the first
measurement included.

A failure of an unchanged kernel is a false alarm; of a slowed one a detection; "incomparable" is neither.
"rounds" is the new gate's mean count of fresh rounds (its cost beyond the first measurement); the JSON keeps
each wrong or undecided verdict of the new gate with its rounds (CPU, like-for-like, probes, change).

``--trace FILE`` (JSON lines, kept outside the repository: tens of MB) records everything the new gate was given:
the locks, then per gate session its first measurement, every fresh round's samples, probe records and CPU, and
after a gate that did not pass ``--look-ahead`` more rounds (8), which its verdict did not see.
benchmarks/replay_gate.py replays it through the gate as it is now, or through a variant of its rules, so a rule
is measured on the very rounds the machine produced (same verdicts for the same rules).

    python benchmarks/bench_gate_robust.py [--runs 50] [--edit-runs 10] [--kernels compute,memory]
                                           [--conditions quiet,busy1,busy2] [--scenarios unchanged,env]
                                           [--slowdowns 1.3,3] [--budget 10s]
                                           [--json benchmarks/results/bench_gate_robust.json]
                                           [--trace ~/.cache/pytest-autotune/gate-traces/NAME.jsonl]
    python benchmarks/bench_gate_robust.py --merge A.json B.json ... --json MERGED.json
    python benchmarks/bench_gate_robust.py --grid [--cells 2M/memory/1.7,...] [--conditions quiet,spin1,...]

``--grid`` (issue 43) is the gate over working sets from L1 to DRAM, compute- and memory-bound kernels of
0.05-20 ms, beside neighbours that spin, stream or both on 1 or 2 cores, the gate before issue 43 beside
today's: benchmarks/_gate_grid.py.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "example_project" / "src"))

from _common import environment, print_table, write_json  # noqa: E402
from _gate_today import machine_differs, run_gate_today  # noqa: E402

from pytest_autotune.engine.tuner import CONFIRM_ROUNDS, confirm, params_key  # noqa: E402
from pytest_autotune.gate.probes import measure_cpu_probes, probe_sizes  # noqa: E402
from pytest_autotune.gate.rounds import LOCK_MORE_PAUSES_S, best_state_rounds, measure_round, rotating_pin  # noqa: E402
from pytest_autotune import defaults as DEFAULTS  # noqa: E402
from pytest_autotune.gate import verdict as gate_verdict  # noqa: E402
from pytest_autotune.gate.budget import GateBudget, parse_gate_budget  # noqa: E402
from pytest_autotune.gate.verdict import MORE_ROUND_PAUSES_S, run_ab_gate, run_gate  # noqa: E402
from pytest_autotune.measure.timing import MeasureOptions  # noqa: E402
from pytest_autotune.runners import KernelSpec, make_runner  # noqa: E402
from pytest_autotune.execution.isolation import sharing_one_cpu  # noqa: E402

KERNEL = r"""
#include "reps.h"
void work(float *out, const float *in, int n) {
    for (int k = 0; k < REPS; k++)
        for (int i = 0; i < n; i += UNROLL)
            for (int j = 0; j < UNROLL && i + j < n; j++)
                out[i + j] = out[i + j] * 0.5f + in[i + j];
}
"""
HEADER = "#ifndef REPS\n#define REPS {reps}\n#endif\n"
SIZES = {"compute": (16384, 100), "memory": (2 << 20, 10),  # floats, sweeps (REPS): x1.3 exact
         "cache": (1 << 18, 10)}  # issue 43: 2 MiB in all (in L3), about 1.7 ms: the false alarms beside a neighbour
SLOWDOWNS = (1.3, 3.0)  # through the build's flags (-DREPS), source and headers untouched
HEADER_EDIT = 0.30
LOOK_AHEAD_PAUSES_S = MORE_ROUND_PAUSES_S  # as the gate's further rounds are paused
CONDITIONS = {"quiet": 0, "busy1": 1, "busy2": 2}
LOCKED, RUNNER_UP = {"UNROLL": 1}, {"UNROLL": 2}


def spec_in(folder: Path, name: str, reps: int) -> KernelSpec:
    """The kernel with its header in ``folder``/include (``reps`` written there)."""
    inc = folder / "include"
    inc.mkdir(parents=True, exist_ok=True)
    (inc / "reps.h").write_text(HEADER.format(reps=reps))
    (folder / "work.c").write_text(KERNEL)
    n = SIZES[name][0]
    return KernelSpec(str(folder / "work.c"), "work", n,
                      [np.zeros(n, np.float32), np.linspace(0, 1, n, dtype=np.float32), np.int32(n)],
                      compiler_options=[f"-I{inc}"])


def runner(spec: KernelSpec, reps: int | None = None) -> Any:
    flags = ("-O3",) + ((f"-DREPS={reps}",) if reps is not None else ())
    return make_runner(spec, runner="c", measure=MeasureOptions(), flags=flags)


class Recorded:
    """A measure and a probe that keep what they return, for the trace (see --trace)."""

    def __init__(self, measure: Any, probe: Any) -> None:
        self._measure, self._probe = measure, probe
        self.measures: list[Any] = []
        self.probes: list[Any] = []

    def measure(self) -> Any:
        m = self._measure()
        self.measures.append(measurement_json(m))
        return m

    def probe(self) -> Any:
        p = self._probe()
        self.probes.append(p)
        return p


class Timed:
    """A measure and a probe that keep what they return and when each ended (seconds since ``began``, the
    first measurement's start), in call order, for a replay."""

    def __init__(self, measure: Any, probe: Any, began: float) -> None:
        self._measure, self._probe, self.began = measure, probe, began
        self.calls: list[tuple[str, Any, float]] = []

    def _call(self, kind: str, fn: Any) -> Any:
        value = fn()
        self.calls.append((kind, value, time.monotonic() - self.began))
        return value

    def measure(self) -> Any:
        return self._call("measure", self._measure)

    def probe(self) -> Any:
        return self._call("probe", self._probe)


class Replay:
    """The calls a :class:`Timed` recorded, returned again in order, on a clock that reads, after each, the time
    the unbudgeted gate had then (pauses, pinning and statistics included): the budgeted gate on the rounds
    the unbudgeted one measured, at the moments it measured them, without measuring again."""

    def __init__(self, timed: Timed, started_at: float) -> None:
        self.calls, self.at, self.now = timed.calls, 0, started_at

    def _next(self, kind: str) -> Any:
        got, value, ended = self.calls[self.at]
        assert got == kind, (got, kind, self.at)
        self.at += 1
        self.now = max(self.now, ended)
        return value

    def measure(self) -> Any:
        return self._next("measure")

    def probe(self) -> Any:
        return self._next("probe")

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def trace_header(locks: dict[str, Any], tolerance: float, alpha: float, **more: Any) -> str:
    """The trace's first line: the lock entries the sessions after it are gated against, and the gate's rules
    (its numeric constants) that judged them."""
    rules = {k: v for k, v in vars(gate_verdict).items() if k.isupper() and isinstance(v, (int, float))}
    return json.dumps({"locks": locks, "tolerance": tolerance, "alpha": alpha, "rules": rules,
                       "started": time.time(), **more}, default=float) + "\n"


def trace_line(where: dict[str, Any], first: Any, rec: Recorded, outcome: Any, cpus: list[Any] | None = None) -> str:
    """One gate session: its first measurement, what its rounds measured (in order) and on which CPU (``cpus``:
    the gate's rounds and any look-ahead rounds after them)."""
    return json.dumps({**where, "verdict": outcome.verdict, "first": measurement_json(first), "measures": rec.measures,
                       "probes": rec.probes, "rounds_judged": len(outcome.rounds),
                       "cpus": [r["cpu"] for r in outcome.rounds] if cpus is None else cpus}, default=float) + "\n"


def look_ahead(rec: Recorded, pin: Any, start: int, count: int) -> list[Any]:
    """``count`` more rounds after a gate that did not pass, for the trace only (the verdict is already given):
    a replayed rule that needs more rounds than the gate took then finds them. Returns their CPUs."""
    cpus = []
    for j in range(count):
        r = measure_round(start + j, [rec.measure], rec.probe, pin, LOOK_AHEAD_PAUSES_S[j % len(LOOK_AHEAD_PAUSES_S)])
        if r.failed is not None:
            break
        cpus.append(r.cpu)
    return cpus


def measurement_json(m: Any) -> dict[str, Any]:
    return ({"value": m.value, "samples": list(m.samples)} if m.ok else
            {"failure": m.failure.value, "detail": m.detail[:200]})


class Neighbours:
    """Background processes each keeping one core busy (noisy tenants on a 2-core machine)."""

    def __init__(self, count: int) -> None:
        self.count, self.procs = count, []

    def __enter__(self) -> "Neighbours":
        # each spins until its parent is gone: a benchmark stopped early leaves no neighbour behind
        spin = "import os\nparent = os.getppid()\nwhile os.getppid() == parent:\n    pass"
        self.procs = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(self.count)]
        if self.procs:
            time.sleep(0.3)
        return self

    def __exit__(self, *exc: Any) -> None:
        for p in self.procs:
            p.kill()
            p.wait()


def record_locks(specs: dict[str, KernelSpec], tolerance: float) -> tuple[Any, dict, dict, dict, dict]:
    """The lock, as tune() records it: winner and runner-up in confirmation rounds in one worker, the probes
    sized to the kernel (new gate) and at the default size (today's gate) measured in the same session, then
    (new gate) the rounds at the machine's best, in 6 rounds as before LOCK_MORE_PAUSES_S and as now (with all
    its further rounds, as after a tuning of 73 s or more: rounds.lock_pauses). Returns the
    default-size probes, both gates' entries, the probe sizes and the 6-round entries (for replay_gate
    --locks locks_6_rounds)."""
    lock_default_probes = measure_cpu_probes()
    entries, today_entries, sizes, six_rounds = {}, {}, {}, {}
    for name, spec in specs.items():
        footprint = sum(a.nbytes for a in spec.args if hasattr(a, "shape"))
        with runner(spec) as session:
            session.evaluate(LOCKED)
            pooled = confirm(session, [LOCKED, RUNNER_UP], CONFIRM_ROUNDS)
            samples, up = pooled[params_key(LOCKED)], pooled[params_key(RUNNER_UP)]
            assert samples and up, (name, "a configuration failed in the lock's confirmation rounds")
            today_entries[name] = {"params": LOCKED, "samples": samples, "stats": {"median": float(np.median(samples))},
                                   "runners_up": [{"params": RUNNER_UP, "samples": up}]}
            sizes[name] = probe_sizes(footprint, float(np.median(samples)))
            measures = [lambda: session.evaluate(LOCKED), lambda: session.evaluate(RUNNER_UP)]
            probe, pin = (lambda: measure_cpu_probes(**sizes[name])), rotating_pin(session)
            # first the lock as it was before its further rounds (6 rounds, for replays against it), then now
            six = best_state_rounds(measures, probe, pin, tolerance)
            rounds = best_state_rounds(measures, probe, pin, tolerance, more_pauses_s=LOCK_MORE_PAUSES_S)
            assert rounds is not None and six is not None, (name, "a configuration failed in the lock's rounds")
        for kind, ((samples, up), machine, kept) in (("six", six), ("new", rounds)):
            (entries if kind == "new" else six_rounds)[name] = {
                "params": LOCKED, "samples": samples, "stats": {"median": float(np.median(samples))},
                "runners_up": [{"params": RUNNER_UP, "samples": up}], "machine": machine}
        print(f"locked {name}: median {entries[name]['stats']['median']:.4g} ms n={len(samples)} ({kept} rounds "
              f"kept; in 6 rounds: {six_rounds[name]['stats']['median']:.4g} ms; as tune() did: "
              f"{today_entries[name]['stats']['median']:.4g} ms); probes {sizes[name]}", flush=True)
    return lock_default_probes, entries, today_entries, sizes, six_rounds


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--grid" in argv:  # issue 43: the kernels' space beside real neighbours (benchmarks/_gate_grid.py)
        from _gate_grid import main as grid
        return grid([a for a in argv if a != "--grid"])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50, help="gate runs per kernel, scenario and condition")
    parser.add_argument("--edit-runs", type=int, default=10, help="runs of the header edit (A/B) per condition")
    parser.add_argument("--kernels", default="compute,memory")
    parser.add_argument("--conditions", default="quiet,busy1,busy2")
    parser.add_argument("--scenarios", default="unchanged,env",
                        help="unchanged (false alarms), env (slowdowns through the flags); the header edit "
                             "runs its --edit-runs either way")
    parser.add_argument("--slowdowns", default=list(SLOWDOWNS),
                        type=factors, help="the env scenario's slowdown factors (through -DREPS)")
    parser.add_argument("--lock-every", type=int, default=0,
                        help="record the locks again every N runs (0: once, at the start)")
    parser.add_argument("--look-ahead", type=int, default=8,
                        help="with --trace: rounds measured after a gate that did not pass, for replays of rules "
                             "that need more rounds")
    parser.add_argument("--budget", default=DEFAULTS.KERNEL_GATE_BUDGET,
                        help="the budgeted gate's per-kernel budget (a duration, e.g. 10s); more, comma-separated "
                             "(10s,30s), are replayed on the same rounds as columns 'budget 30s', ...")
    parser.add_argument("--tolerance", type=float, default=0.10)
    parser.add_argument("--alpha", type=float, default=0.01)
    parser.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "bench_gate_robust.json"))
    parser.add_argument("--trace", default="", help="JSON lines of every new-gate session, for replay_gate.py "
                                                    "(keep it outside the repository)")
    parser.add_argument("--merge", nargs="+", default=None, metavar="JSON",
                        help="no runs: combine earlier --json outputs (of one gate version) into one table")
    args = parser.parse_args(argv)
    args.budgets = [b.strip() for b in args.budget.split(",") if b.strip()]
    args.budget_s = parse_gate_budget(args.budgets[0])
    if args.merge:
        return merge(args.merge, Path(args.json), argv)
    chosen = [k.strip() for k in args.kernels.split(",") if k.strip()]
    conditions = [c.strip() for c in args.conditions.split(",") if c.strip()]
    scenarios = {c.strip() for c in args.scenarios.split(",") if c.strip()}
    env_before = environment(["numpy", "scipy", "pytest"])
    load_before = os.getloadavg()
    started = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="bench-gate-robust-"))

    specs = {name: spec_in(tmp / name, name, SIZES[name][1]) for name in chosen}
    trace = None
    if args.trace:
        Path(args.trace).expanduser().parent.mkdir(parents=True, exist_ok=True)
        trace = open(Path(args.trace).expanduser(), "a", encoding="utf-8")
    locks: dict[str, list[float]] = defaultdict(list)  # each lock's median (--lock-every)
    results: dict[tuple[str, str, str, str], list[str]] = defaultdict(list)
    new_failures: list[dict[str, Any]] = []  # the new gate's wrong or undecided verdicts, round by round
    fresh_rounds: dict[tuple[str, str, str], list[int]] = defaultdict(list)  # the new gate's cost, in rounds
    loads: dict[str, list[float]] = defaultdict(list)
    gate_seconds: dict[tuple[str, str, str, str], list[float]] = defaultdict(list)
    for i in range(args.runs):
        if i == 0 or (args.lock_every and i % args.lock_every == 0):  # a new lock: its state is a draw too
            lock_default_probes, entries, today_entries, sizes, six_rounds = record_locks(specs, args.tolerance)
            for name, e in entries.items():
                locks[name].append(round(e["stats"]["median"], 5))
            if trace is not None:
                trace.write(trace_header(entries, args.tolerance, args.alpha, sizes=sizes, locks_6_rounds=six_rounds))
        for condition in conditions:
            with Neighbours(CONDITIONS[condition]):
                loads[condition].append(os.getloadavg()[0])
                other_machine = {}  # today's gate: default-size probes once per session
                today_probes = measure_cpu_probes()
                for name in chosen:
                    other_machine[name] = machine_differs(lock_default_probes, today_probes, args.tolerance)
                    base = SIZES[name][1]
                    for scenario, reps in [*([("unchanged", None)] if "unchanged" in scenarios else []),
                                           *((f"env x{f:g}", round(base * f)) for f in args.slowdowns
                                             if "env" in scenarios)]:
                        with runner(specs[name], reps) as session:
                            began = time.monotonic()
                            m = session.evaluate(LOCKED)
                            first_s = time.monotonic() - began
                            today = run_gate_today(today_entries[name], m, args.tolerance, args.alpha,
                                                   lambda: session.evaluate(LOCKED), other_machine[name],
                                                   session.evaluate)
                            rec = Recorded(lambda: session.evaluate(LOCKED),
                                           lambda: measure_cpu_probes(**sizes[name]))
                            timed = Timed(rec.measure, rec.probe, began)
                            pin = rotating_pin(session)
                            unlimited = GateBudget(None)
                            unlimited.started = began
                            new = run_gate(name, "bench", entries[name], m, args.tolerance, args.alpha,
                                           remeasure=timed.measure, probe=timed.probe, pin=pin, budget=unlimited)
                            gate_seconds[(name, scenario, condition, "new")].append(unlimited.elapsed)
                            for k, text in enumerate(args.budgets):  # each budget on the same rounds
                                replay = Replay(timed, first_s)
                                limited = GateBudget(parse_gate_budget(text), f"--budget={text}",
                                                     clock=replay.clock, sleep=replay.sleep)
                                limited.started = 0.0
                                budgeted = run_gate(name, "bench", entries[name], m, args.tolerance, args.alpha,
                                                    remeasure=replay.measure, probe=replay.probe, pin=pin,
                                                    budget=limited)
                                column = "budget" if k == 0 else f"budget {text}"
                                gate_seconds[(name, scenario, condition, column)].append(limited.elapsed)
                                results[(name, scenario, condition, column)].append(budgeted.verdict)
                            cpus = [r["cpu"] for r in new.rounds]
                            if trace is not None and new.verdict in ("slower", "incomparable"):
                                cpus += look_ahead(rec, pin, len(cpus), args.look_ahead)
                        if trace is not None:
                            trace.write(trace_line({"run": i, "kernel": name, "scenario": scenario,
                                                    "condition": condition}, m, rec, new, cpus))
                            trace.flush()
                        results[(name, scenario, condition, "today")].append(today)
                        results[(name, scenario, condition, "new")].append(new.verdict)
                        fresh_rounds[(name, scenario, condition)].append(len(new.rounds))
                        if (new.verdict != "pass") if scenario == "unchanged" else (new.verdict != "slower"):
                            new_failures.append({"kernel": name, "scenario": scenario, "condition": condition,
                                                 "round": i, "verdict": new.verdict,
                                                 "message": new.message.splitlines()[:3], "rounds": new.rounds})
                    if i < args.edit_runs:  # the header edit, A/B as the product does it (locked header first)
                        edited = spec_in(tmp / f"{name}-edit", name, round(base * (1 + HEADER_EDIT)))
                        with runner(specs[name]) as a, runner(edited) as b, sharing_one_cpu(a, b):
                            ab_budget = GateBudget(args.budget_s, f"--budget={args.budget}").start()
                            verdict = run_ab_gate(name, "bench", entries[name], lambda: a.evaluate(LOCKED),
                                                  lambda: b.evaluate(LOCKED), args.tolerance, args.alpha,
                                                  budget=ab_budget).verdict
                        edit = f"header +{HEADER_EDIT:.0%}"
                        results[(name, edit, condition, "budget")].append(verdict)  # measured with the budget
                        gate_seconds[(name, edit, condition, "budget")].append(ab_budget.elapsed)
        print(f"  round {i + 1}/{args.runs} ({time.perf_counter() - started:.0f} s, load {os.getloadavg()[0]:.1f})",
              flush=True)
        # written after every round: a run stopped early (a shared machine's time is short) keeps its rounds
        summarise(args, argv, results, entries, today_entries, sizes, loads, load_before, new_failures, env_before,
                  started, rounds=i + 1, final=i + 1 == args.runs, fresh_rounds=fresh_rounds, locks=locks,
                  gate_seconds=gate_seconds)
    if trace is not None:
        trace.close()
    return 0


def factors(text: str) -> list[float]:
    """``1.3,3`` -> ``[1.3, 3.0]`` (--slowdowns)."""
    return [float(f) for f in text.split(",") if f.strip()]


def failures(verdicts: Counter) -> int:
    """A gate's failures among its verdicts: a false alarm for an unchanged kernel, a detection for a slowed one."""
    return verdicts["slower"] + verdicts["broken"]


def merge(paths: list[str], out: Path, argv: list[str] | None) -> int:
    """The cells of several runs' JSON summed (runs, verdicts, the new gate's rounds weighted by runs), printed
    per cell and per condition with both kernels pooled (the issue's targets are per condition)."""
    cells: dict[tuple[str, str, str, str], Counter] = defaultdict(Counter)
    rounds: dict[tuple[str, str, str, str], float] = defaultdict(float)
    seconds: dict[tuple[str, str, str, str], list[float]] = defaultdict(list)
    for path in paths:
        for row in json.loads(Path(path).read_text(encoding="utf-8"))["results"]:
            key = (row["kernel"], row["scenario"], row["condition"], row["gate"])
            cells[key].update(row["verdicts"])
            rounds[key] += row.get("fresh_rounds_mean", 0.0) * row["runs"]
            seconds[key] += row.get("gate_seconds", [])
    rows, table = [], []
    for key, c in sorted(cells.items()):
        runs, fails = sum(c.values()), failures(c)
        rows.append({"kernel": key[0], "scenario": key[1], "condition": key[2], "gate": key[3], "runs": runs,
                     "failures": fails, "verdicts": dict(c),
                     **({"fresh_rounds_mean": round(rounds[key] / runs, 2)} if rounds[key] else {}),
                     **({"gate_seconds": seconds[key], "gate_seconds_median": round(float(np.median(seconds[key])), 2),
                         "gate_seconds_max": max(seconds[key])} if seconds[key] else {})})
        table.append([*key, f"{fails}/{runs}", str(c["incomparable"]),
                      f"{rounds[key] / runs:.1f}" if rounds[key] else "-"])
    print_table(table, ["kernel", "scenario", "condition", "gate", "fail/runs", "n.c.", "rounds"],
                title=f"bench_gate_robust: {len(paths)} runs merged")
    pooled: dict[tuple[str, str, str], Counter] = defaultdict(Counter)
    for (_, scenario, condition, gate), c in cells.items():
        pooled[(scenario, condition, gate)].update(c)
    print()
    print_table([[*key, f"{failures(c)}/{sum(c.values())}", str(c["incomparable"])]
                 for key, c in sorted(pooled.items())], ["scenario", "condition", "gate", "fail/runs", "n.c."],
                title="per condition, kernels pooled")
    write_json(out, {"benchmark": "bench_gate_robust", "merged": [Path(p).name for p in paths],
                     "command": "python benchmarks/bench_gate_robust.py " + " ".join(argv or sys.argv[1:]),
                     "results": rows,
                     "per_condition": [{"scenario": k[0], "condition": k[1], "gate": k[2], "verdicts": dict(c)}
                                       for k, c in sorted(pooled.items())]})
    print(f"\nwritten {out}")
    return 0


def summarise(args: Any, argv: list[str] | None, results: Any, entries: Any, today_entries: Any, sizes: Any,
              loads: Any, load_before: Any, new_failures: Any, env_before: Any, started: float, rounds: int,
              final: bool, fresh_rounds: Any, locks: Any = None, gate_seconds: Any = None) -> None:
    header = ["kernel", "scenario", "condition", "gate", "runs", "fail", "rate", "incomparable", "rounds",
              "gate s (median/max)"]
    table, rows = [], []
    for (name, scenario, condition, gate), verdicts in sorted(results.items()):
        counts = Counter(verdicts)
        fails = failures(counts)
        kind = "false alarms" if scenario == "unchanged" else "detected"
        used = fresh_rounds.get((name, scenario, condition)) if gate == "new" else None
        took = (gate_seconds or {}).get((name, scenario, condition, gate))
        table.append([name, scenario, condition, gate, str(len(verdicts)), str(fails),
                      f"{fails / len(verdicts):.0%} {kind}", str(counts["incomparable"]),
                      f"{np.mean(used):.1f}" if used else "-",
                      f"{np.median(took):.1f}/{max(took):.1f}" if took else "-"])
        rows.append({"kernel": name, "scenario": scenario, "condition": condition, "gate": gate,
                     "runs": len(verdicts), "failures": fails, "verdicts": dict(counts),
                     **({"fresh_rounds_mean": round(float(np.mean(used)), 2), "fresh_rounds_max": max(used)}
                        if used else {}),
                     **({"gate_seconds_median": round(float(np.median(took)), 2),
                         "gate_seconds_max": round(max(took), 2),
                         "gate_seconds": [round(x, 2) for x in took]} if took else {})})
    if final:
        print()
        print_table(table, header, title=f"gate today vs new: tolerance {args.tolerance:.0%}, alpha {args.alpha:g}")
    payload = {"benchmark": "bench_gate_robust",
               "command": "python benchmarks/bench_gate_robust.py " + " ".join(argv if argv is not None else sys.argv[1:]),
               "rounds_done": rounds,
               "settings": {"runs": args.runs, "edit_runs": args.edit_runs, "tolerance": args.tolerance,
                            "alpha": args.alpha, "kernels": list(entries), "conditions": list(loads),
                            "slowdowns": args.slowdowns,
                            "header_edit": HEADER_EDIT,
                            "scenarios": args.scenarios, "budget": args.budget},
               "lock": {k: {"median_ms": round(e["stats"]["median"], 5), "probe_sizes": sizes[k]}
                        for k, e in entries.items()},
               "lock_today": {k: {"median_ms": round(e["stats"]["median"], 5)} for k, e in today_entries.items()},
               "lock_medians_ms": locks or {},
               "load_1min": {"before": round(load_before[0], 2),
                             **{c: [round(min(v), 2), round(float(np.median(v)), 2), round(max(v), 2)]
                                for c, v in loads.items()}},
               "results": rows, "new_gate_wrong_or_undecided": new_failures[:200],
               "environment_before": env_before, "wall_s": round(time.perf_counter() - started, 1)}
    path = write_json(Path(args.json), payload)
    if final:
        print(f"\nwritten {path} ({payload['wall_s']:.0f} s)")


if __name__ == "__main__":
    sys.exit(main())
