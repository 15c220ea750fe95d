#!/usr/bin/env python
"""Cost of ``locked_params``: the first call (reads and parses the lockfile) and every later one (cached).

A lock directory with ``--entries`` entries spread over ``--kernels`` kernels
(each tuned for several problem sizes) on one device is written to a
temporary directory; then

* ``first``: ``locked_params`` on a cold cache (parse + index), best of ``--repeat``;
* ``exact``: a later call for a tuned problem size;
* ``nearest``: a later call for an untuned size (the nearest-size search; its
  warning is filtered, as a library would after the first);
* ``default``: a later call for a device without a lockfile (the ``default`` path);
* ``detected``: ``exact`` without ``device=``: the lockfile of this machine's
  detected device (what shipped code calls; the same file copied under its name).

Per-call times are the best of ``--repeat`` loops of ``--number`` calls, as
wall time and as thread CPU time. Prints a table; ``--json`` writes it.

Example::

    python benchmarks/bench_lookup.py --json benchmarks/results/bench_lookup.json
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import warnings
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

import numpy as np  # noqa: E402

from pytest_autotune.lock import lookup  # noqa: E402
from pytest_autotune.lock.lockfile import merge_entries  # noqa: E402
from pytest_autotune.lock.problem import describe_problem  # noqa: E402


def write_lock(lockdir: Path, kernels: int, entries: int) -> list[int]:
    sizes = [2 ** (8 + i) for i in range(max(1, entries // kernels))]
    data = {}
    for k in range(kernels):
        for n in sizes:
            data[f"tests/test_k{k}.py::test_k[{n}]::kernel{k}"] = {
                "kernel": f"kernel{k}", "test": f"tests/test_k{k}.py::test_k[{n}]",
                "params": {"block_size_x": 128, "block_size_y": 4, "tile": 2, "unroll": 4},
                "stats": {"median": 1.0, "mean": 1.0, "min": 1.0, "iqr": 0.0, "n": 32}, "samples": [1.0] * 32,
                "runners_up": [{"params": {"block_size_x": 64, "block_size_y": 8, "tile": 1, "unroll": 2},
                                "median": 1.1, "samples": [1.1] * 32}] * 3,
                "hashes": {"source": "s" * 16, "space": "t" * 16, "problem": f"{n:016x}"},
                "problem": describe_problem((n, n), [np.zeros(1, np.float32)] * 3 + [np.int32(n)]),
            }
    merge_entries(lockdir / "bench-gpu.json", data, {"model": "Bench GPU", "kind": "cuda"})
    return sizes


def per_call_us(fn, number: int, repeat: int) -> dict[str, float]:
    """Best of ``repeat`` loops: wall time and this thread's CPU time per call (the CPU time is what a
    shared, busy machine does not inflate)."""
    wall = cpu = float("inf")
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.thread_time()
        for _ in range(number):
            fn()
        wall = min(wall, (time.perf_counter() - t0) / number)
        cpu = min(cpu, (time.thread_time() - c0) / number)
    return {"wall_us": wall * 1e6, "cpu_us": cpu * 1e6}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kernels", type=int, default=20)
    parser.add_argument("--entries", type=int, default=100, help="entries in the lockfile (spread over the kernels)")
    parser.add_argument("--number", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        lockdir = Path(tmp)
        sizes = write_lock(lockdir, args.kernels, args.entries)
        size_bytes = (lockdir / "bench-gpu.json").stat().st_size

        def first() -> None:
            lookup.clear_cache()
            lookup.locked_params("kernel0", (sizes[0], sizes[0]), lockdir, device="bench-gpu")

        first_call = per_call_us(first, 1, args.repeat)
        exact = lambda: lookup.locked_params("kernel3", (sizes[-1], sizes[-1]), lockdir, device="bench-gpu")  # noqa: E731
        nearest = lambda: lookup.locked_params("kernel3", (1000, 3000), lockdir, device="bench-gpu")  # noqa: E731
        default = lambda: lookup.locked_params("kernel3", 64, lockdir, device="other-gpu", default={"x": 1})  # noqa: E731
        mine = lookup.detect_device_slugs()[0]
        (lockdir / f"{mine}.json").write_bytes((lockdir / "bench-gpu.json").read_bytes())
        detected = lambda: lookup.locked_params("kernel3", (sizes[-1], sizes[-1]), lockdir)  # noqa: E731
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            results = {"first": first_call,
                       "exact": per_call_us(exact, args.number, args.repeat),
                       "nearest": per_call_us(nearest, args.number, args.repeat),
                       "default": per_call_us(default, args.number, args.repeat),
                       "detected": per_call_us(detected, args.number, args.repeat)}
    n_entries = args.kernels * len(sizes)
    print(f"locked_params on a lockfile of {n_entries} entries ({args.kernels} kernels, {size_bytes / 1024:.0f} KiB):")
    print(f"{'call':<10} {'wall us':>10} {'cpu us':>10}")
    for name, value in results.items():
        print(f"{name:<10} {value['wall_us']:10.1f} {value['cpu_us']:10.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"entries": n_entries, "kernels": args.kernels, "bytes": size_bytes,
                                               "number": args.number, "repeat": args.repeat, **results},
                                              indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
