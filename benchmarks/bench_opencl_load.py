#!/usr/bin/env python
"""Why the example's OpenCL matmul times about twice its lock on a busy machine.

PoCL's CPU device runs the work-groups of a launch on one thread per core
(``compute_units``). On the 2-core machine of the committed lock, one other
CPU-bound process leaves the kernel a single core and its time doubles; the
gate then reads "not comparable" (the runner-up slows as much). This
benchmark times the example's locked configuration (the lock's params, N=128,
64 profiling-event-timed runs after 3 warm-ups, one fresh runner per row)
under each condition, each in its own process (PoCL reads its variables when
it loads):

``quiet``          as the machine is (its load average is recorded)
``1 thread``       ``POCL_MAX_PTHREAD_COUNT=1``: PoCL itself on one thread
``N busy``         with N spinning Python processes of our own beside it

A doubling under ``1 busy`` that matches ``1 thread``, with the PoCL version
of the lock, says load, not a regression of the kernel or of PoCL.

    python benchmarks/bench_opencl_load.py [--busy 1,2] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import environment, print_table, write_json  # noqa: E402

LOCK = ROOT / "example_project" / "autotune.lock" / "opencl-portable-computing-language-pthread-amd-epyc.json"
ENTRY = "tests/test_opencl_kernels.py::test_opencl_tiled_matmul::matmul"
SPIN = "while True: pass"

# Run in a child process: times the locked configuration and prints one JSON line.
CHILD = r"""
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from example_kernels import kernel_path, matmul_reference, rng
from pytest_autotune.measure.timing import MeasureOptions
from pytest_autotune.runners import KernelSpec, make_runner

N = 128
a, b = rng(1).random((N, N), dtype=np.float32), rng(2).random((N, N), dtype=np.float32)
spec = KernelSpec(str(kernel_path("matmul.cl")), "matmul", (N, N), [np.zeros((N, N), np.float32), a, b, np.int32(N)],
                  expected=[matmul_reference(a, b), None, None, None], rtol=1e-4, atol=1e-3,
                  grid_div_x=["block_size_x", "tile_size_x"], grid_div_y=["block_size_y", "tile_size_y"])
with make_runner(spec, measure=MeasureOptions(warmup=3, min_iterations=64, max_iterations=64)) as runner:
    m = runner.evaluate(json.loads(sys.argv[2]))
    driver = runner.device().versions["driver"]
assert m.ok, m.detail
print(json.dumps({"samples": m.samples, "driver": driver}))
"""


def time_locked(params: dict, env: dict[str, str], busy: int) -> dict:
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(busy)]
    try:
        time.sleep(0.5 if busy else 0)
        done = subprocess.run([sys.executable, "-c", CHILD, str(ROOT / "example_project" / "src"), json.dumps(params)],
                              env={**os.environ, **env}, capture_output=True, text=True, check=True, timeout=300)
    finally:
        for p in spinners:
            p.kill()
            p.wait()
    return json.loads(done.stdout.strip().splitlines()[-1])


def summarise(label: str, found: dict, locked_median: float) -> dict:
    samples = sorted(found["samples"])
    median = samples[len(samples) // 2]
    return {"condition": label, "median_ms": median, "min_ms": samples[0], "vs_lock": median / locked_median - 1,
            "share_over_1.5x_lock": sum(s > 1.5 * locked_median for s in samples) / len(samples),
            "pocl_driver": found["driver"], "load_average": os.getloadavg()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--busy", default="1,2", help="numbers of spinning neighbours to try (comma-separated)")
    parser.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "opencl_load.json"))
    args = parser.parse_args()
    entry = json.loads(LOCK.read_text())["entries"][ENTRY]
    locked_median = entry["stats"]["median"]
    conditions = [("quiet", {}, 0), ("1 thread", {"POCL_MAX_PTHREAD_COUNT": "1"}, 0)]
    conditions += [(f"{n} busy", {}, n) for n in (int(x) for x in args.busy.split(",") if x.strip())]
    rows = [summarise(label, time_locked(entry["params"], env, busy), locked_median) for label, env, busy in conditions]
    print_table([[r["condition"], f"{r['median_ms']:.3f}", f"{r['min_ms']:.3f}", f"{r['vs_lock']:+.0%}",
                  f"{r['share_over_1.5x_lock']:.0%}", r["pocl_driver"], f"{r['load_average']:.1f}"] for r in rows],
                ["condition", "median ms", "min ms", "vs lock", "runs > 1.5x lock", "PoCL", "load 1 min"],
                title=f"example OpenCL matmul, locked {entry['params']}, lock median {locked_median} ms "
                      f"(PoCL {entry['versions']['driver']}), {os.cpu_count()} cores")
    write_json(args.json, {"environment": environment(["pyopencl", "pocl-binary-distribution"]),
                           "locked_median_ms": locked_median, "locked_pocl": entry["versions"]["driver"], "rows": rows})


if __name__ == "__main__":
    main()
