#!/usr/bin/env python
"""Replay recorded gate sessions (bench_gate_robust.py --trace) through the gate, as it is or with its rules varied.

A rule of the gate is measured on the very rounds the machine produced: each session's first measurement, its
fresh rounds' samples and probe records and the CPU of each round come from the trace, in the order the gate
asked for them, with no pauses. ``as-recorded`` (the gate with the rules the trace's header names) must give
back every recorded verdict (the replay's self-check); ``as-is`` is the gate as it is now; a
variant that asks for more rounds than the session recorded ends ``trace ended`` (counted as undecided: the
machine was not asked). A session that passed on its first measurement passes under every variant that keeps
the tolerance, so unchanged kernels' false alarms are measured exactly.

    python benchmarks/replay_gate.py TRACE.jsonl [TRACE2.jsonl ...] [--variants as-recorded,as-is,exponent=1.5]
                                     [--locks locks_6_rounds]
                                     [--json benchmarks/results/replay_gate.json]

A variant is ``name=value`` of a constant of pytest_autotune.gate.verdict (``exponent`` is MISMATCH_EXPONENT,
``like_rounds``, ``min_rounds``, ``one_cpu_rounds``), for one kernel only as ``name.KERNEL=value``,
``probes=NAME`` (the machine judged by that probe alone, e.g. ``probes=bandwidth_gbs``) or
``divisor=continuous`` (see DIVISORS); several joined by ``+``.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table, write_json  # noqa: E402

from pytest_autotune.gate import rounds as rounds_module  # noqa: E402
from pytest_autotune.gate import verdict as verdict_module  # noqa: E402
from pytest_autotune.gate.probes import PROBES  # noqa: E402
from pytest_autotune.results import FailureKind, Measurement  # noqa: E402

CONSTANTS = {"exponent": "MISMATCH_EXPONENT", "like_rounds": "LIKE_ROUNDS", "min_rounds": "MIN_ROUNDS",
             "one_cpu_rounds": "ONE_CPU_ROUNDS"}


def _continuous(factor: float, like: bool) -> float:
    """The exponent only on the part of the factor beyond the like-for-like threshold (10 %): no step there."""
    edge = 1.10
    return factor if factor <= edge else factor * (factor / edge) ** (verdict_module.MISMATCH_EXPONENT - 1)


RULES_BEFORE_HEADERS_NAMED_THEM = {"ONE_CPU_ROUNDS": 10**6}
"""The rules of a trace whose header has no ``rules``: recorded before ONE_CPU_ROUNDS existed."""

DIVISORS = {"continuous": _continuous}
"""Alternatives to verdict.round_divisor, by name (``divisor=continuous``)."""


class TraceEnded(Exception):
    """The variant asked for a round the session did not record."""


def measurement(record: dict[str, Any]) -> Measurement:
    if "failure" in record:
        return Measurement.failed({}, FailureKind(record["failure"]), record.get("detail", ""))
    return Measurement({}, value=record["value"], samples=list(record["samples"]))


def load(paths: list[str]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(session, its trace's header) for every session of the traces."""
    sessions = []
    for path in paths:
        header = None
        for line in Path(path).expanduser().read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            record = json.loads(line)
            if "locks" in record:
                header = record
            elif header is not None:
                sessions.append((record, header))
    return sessions


def parse_variant(text: str) -> dict[str, Any]:
    """``exponent=1.5+min_rounds.memory=4`` -> ``{"MISMATCH_EXPONENT": 1.5, "MIN_ROUNDS.memory": 4}``."""
    if text == "as-is":
        return {}
    patch: dict[str, Any] = {}
    for part in text.split("+"):
        key, _, value = part.partition("=")
        if key == "probes":
            patch["probes"] = tuple(value.split("/"))
            continue
        if key == "divisor":
            if value not in DIVISORS:
                raise SystemExit(f"replay_gate: unknown divisor {value!r} (known: {', '.join(DIVISORS)})")
            patch["round_divisor"] = DIVISORS[value]
            continue
        rule, _, kernel = key.partition(".")
        if rule not in CONSTANTS:
            raise SystemExit(f"replay_gate: unknown rule {rule!r} in variant {text!r} "
                             f"(known: {', '.join(CONSTANTS)}, probes)")
        patch[CONSTANTS[rule] + (f".{kernel}" if kernel else "")] = float(value) if rule == "exponent" else int(value)
    return patch


def recorded_rules(header: dict[str, Any]) -> dict[str, Any]:
    """The gate's rules the trace was recorded with, as a patch (for the ``as-recorded`` self-check)."""
    rules = header.get("rules", RULES_BEFORE_HEADERS_NAMED_THEM)
    return {k: v for k, v in rules.items() if k in CONSTANTS.values()}


def for_kernel(patch: dict[str, Any], kernel: str) -> dict[str, Any]:
    """The variant's rules for one kernel: its own values over the common ones."""
    common = {k: v for k, v in patch.items() if "." not in k}
    return {**common, **{k.partition(".")[0]: v for k, v in patch.items() if k.endswith(f".{kernel}")}}


@contextmanager
def patched(patch: dict[str, Any]) -> Iterator[None]:
    """The gate's rules with ``patch`` applied and its pauses at zero, restored after."""
    patch = dict(patch)
    probes = patch.pop("probes", None)
    saved = {k: getattr(verdict_module, k)
             for k in [*patch, "ROUND_PAUSES_S", "MORE_ROUND_PAUSES_S", "compare_machines"]}
    saved_cpu = rounds_module._pinned_cpu
    try:
        for k, v in patch.items():
            setattr(verdict_module, k, v)
        if probes:
            compare = saved["compare_machines"]
            verdict_module.compare_machines = lambda locked, current, *a, **kw: compare(
                {k: v for k, v in (locked or {}).items() if k not in PROBES or k in probes}, current, *a, **kw)
        verdict_module.ROUND_PAUSES_S = tuple(0.0 for _ in saved["ROUND_PAUSES_S"])
        verdict_module.MORE_ROUND_PAUSES_S = tuple(0.0 for _ in saved["MORE_ROUND_PAUSES_S"])
        yield
    finally:
        for k, v in saved.items():
            setattr(verdict_module, k, v)
        rounds_module._pinned_cpu = saved_cpu


def replay(session: dict[str, Any], header: dict[str, Any], locks: str = "locks") -> str:
    """The verdict of the gate (as patched now) on the recorded session, against the header's ``locks``."""
    measures, probes, cpus = iter(session["measures"]), iter(session["probes"]), list(session["cpus"])
    current: list[int | None] = [None]

    def remeasure() -> Measurement:
        try:
            return measurement(next(measures))
        except StopIteration:
            raise TraceEnded from None

    def probe() -> dict[str, Any]:
        try:
            return next(probes)
        except StopIteration:
            raise TraceEnded from None

    @contextmanager
    def pin(i: int) -> Iterator[None]:  # a round beyond the recorded ones ends at its first measure or probe
        current[0] = cpus[i] if i < len(cpus) else None
        yield

    rounds_module._pinned_cpu = lambda: current[0]
    try:
        outcome = verdict_module.run_gate(session["kernel"], "replay", header[locks][session["kernel"]],
                                          measurement(session["first"]), header["tolerance"], header["alpha"],
                                          remeasure=remeasure, probe=probe, pin=pin)
    except TraceEnded:
        return "trace ended"
    return outcome.verdict


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="+")
    parser.add_argument("--variants", default="as-recorded,as-is,exponent=1.5,exponent=1")
    parser.add_argument("--locks", default="locks",
                        help="the trace header's lock entries to gate against (locks_6_rounds: the lock before "
                             "its further rounds; the self-check applies to 'locks' only)")
    parser.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "replay_gate.json"))
    args = parser.parse_args(argv)
    sessions = [(s, h) for s, h in load(args.traces) if args.locks in h]
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    counts: dict[tuple[str, str, str, str], Counter] = defaultdict(Counter)
    mismatches = 0
    for variant in variants:
        patch = None if variant == "as-recorded" else parse_variant(variant)  # as recorded: per trace header
        for session, header in sessions:
            with patched(for_kernel(recorded_rules(header) if patch is None else patch, session["kernel"])):
                got = replay(session, header, args.locks)
                counts[(variant, session["kernel"], session["scenario"], session["condition"])][got] += 1
                if variant == "as-recorded" and args.locks == "locks" and got != session["verdict"]:
                    mismatches += 1
    header_row = ["variant", "kernel", "scenario", "cond", "runs", "slower", "pass", "n.c.", "other", "rate"]
    table, rows = [], []
    for (variant, kernel, scenario, condition), c in sorted(counts.items()):
        runs = sum(c.values())
        other = runs - c["slower"] - c["pass"] - c["incomparable"]
        kind = "false alarms" if scenario == "unchanged" else "detected"
        table.append([variant, kernel, scenario, condition, str(runs), str(c["slower"]), str(c["pass"]),
                      str(c["incomparable"]), str(other), f"{c['slower'] / runs:.0%} {kind}"])
        rows.append({"variant": variant, "kernel": kernel, "scenario": scenario, "condition": condition,
                     "runs": runs, "verdicts": dict(c)})
    print_table(table, header_row, title=f"replayed {len(sessions)} gate sessions from {len(args.traces)} trace(s)")
    if "as-recorded" in variants and args.locks == "locks":
        print(f"\nself-check: {mismatches} of {len(sessions)} sessions replayed as recorded differ from their "
              f"recorded verdict")
    path = write_json(Path(args.json), {"benchmark": "replay_gate", "traces": [Path(t).name for t in args.traces],
                                        "sessions": len(sessions),
                                        "locks": args.locks,
                                        "as_recorded_mismatches": mismatches if "as-recorded" in variants else None,
                                        "results": rows})
    print(f"written {path}")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
