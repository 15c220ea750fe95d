"""Construction time of the search-space engine at two git revisions, on the spaces of bench_searchspace.py.

Why: a change to the engine (exact integers, new restriction forms) must not
slow down the usual spaces. Timing one revision today against a JSON file
taken on another day compares machine loads as much as code, so both engines
are timed here, in alternating rounds, each in its own interpreter (the
``before`` revision is extracted with ``git archive`` into a temporary
folder). Each round takes the best of ``--repeat`` constructions in process
CPU time (less sensitive than wall time to other work on a shared machine);
the table shows the best round of each side and their ratio, and checks that
both build the same number of valid configurations.

Run from the repository root::

    python benchmarks/bench_searchspace_ab.py --before 1afbb75^        # the engine before issue 17
    python benchmarks/bench_searchspace_ab.py --before HEAD~3 --rounds 3 --only gemm_milo

Figures go to ``benchmarks/results/bench_searchspace_ab.json`` (``--json``).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from _common import environment, print_table, write_json  # noqa: E402

# One side's round: ENGINE (a folder holding pytest_autotune) builds each space REPEAT times.
_ROUND = """
import json, sys, time
engine, bench, spaces, repeat, only = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5:]
sys.path[:0] = [engine, bench]
from pathlib import Path
import pytest_autotune.space as sp
assert sp.__file__.startswith(engine), sp.__file__
import bench_searchspace
out = {}
for name, load in bench_searchspace.all_spaces(Path(spaces)).items():
    if only and name not in only:
        continue
    params, restrictions = load()
    best, size = float("inf"), None
    for _ in range(repeat):
        start = time.process_time()
        size = len(sp.SearchSpace(params, restrictions))
        best = min(best, time.process_time() - start)
    out[name] = [best, size]
print(json.dumps(out))
"""


def extract(revision: str, into: Path) -> Path:
    """The engine (pytest_autotune/) of ``revision`` under ``into``."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", revision, "pytest_autotune"],
                             check=True, capture_output=True).stdout
    into.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def one_round(engine: Path, spaces: Path, repeat: int, only: list[str]) -> dict[str, list]:
    done = subprocess.run([sys.executable, "-c", _ROUND, str(engine), str(HERE), str(spaces), str(repeat), *only],
                          check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="git revision of the engine to compare with")
    parser.add_argument("--after", default=None, help="git revision (default: this working tree)")
    parser.add_argument("--spaces", type=Path,
                        default=Path(os.environ.get("AUTOTUNE_SPACES", REPO.parent / "shared" / "data" / "spaces")))
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds per side (best round reported)")
    parser.add_argument("--repeat", type=int, default=6, help="constructions per round (best of)")
    parser.add_argument("--only", action="append", default=[], help="run only this space (repeatable)")
    parser.add_argument("--json", type=Path, default=HERE / "results" / "bench_searchspace_ab.json")
    args = parser.parse_args(argv)
    load_at_start = os.getloadavg()

    with tempfile.TemporaryDirectory() as tmp:
        before = extract(args.before, Path(tmp) / "before")
        after = REPO if args.after is None else extract(args.after, Path(tmp) / "after")
        sides: dict[str, list[dict]] = {"before": [], "after": []}
        for _ in range(args.rounds):
            for side, engine in (("before", before), ("after", after)):
                sides[side].append(one_round(engine, args.spaces, args.repeat, args.only))

    rows, spaces = [], {}
    for name in sides["after"][0]:
        best = {side: min(r[name][0] for r in rounds) for side, rounds in sides.items()}
        sizes = {side: {r[name][1] for r in rounds} for side, rounds in sides.items()}
        same = sizes["before"] == sizes["after"] and len(sizes["after"]) == 1
        ratio = best["after"] / best["before"] if best["before"] > 0 else None
        spaces[name] = {"valid": sorted(sizes["after"]), "same_valid_count": same,
                        "before_cpu_s": best["before"], "after_cpu_s": best["after"], "after_over_before": ratio,
                        "rounds": {side: [r[name][0] for r in rounds] for side, rounds in sides.items()}}
        rows.append([name, f"{sorted(sizes['after'])[0]:,}", f"{best['before'] * 1e3:.2f}",
                     f"{best['after'] * 1e3:.2f}", f"{ratio:.2f}" if ratio else "-", "yes" if same else "NO"])
    print_table(rows, ["space", "valid", "before (ms CPU)", "after (ms CPU)", "after/before", "same size"],
                title=f"Construction, best of {args.rounds} rounds x {args.repeat}: {args.before} -> "
                      f"{args.after or 'working tree'}")
    payload = {"benchmark": "searchspace_ab", "environment": environment(["numpy"]),
               "load_average_at_start": load_at_start,
               "settings": {"before": args.before, "after": args.after or "working tree", "rounds": args.rounds,
                            "repeat": args.repeat, "only": args.only},
               "spaces": spaces}
    print(f"wrote {write_json(args.json, payload)}")
    return 0 if all(s["same_valid_count"] for s in spaces.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
