"""Record a whole search space on this machine: the example project's blocked matmul, by brute force.

The GPU recordings in ``../shared/data/spaces`` are the ground truth the
strategies were chosen on. This records a space of another kind, measured
here: a CPU kernel (``example_project/kernels/matmul.c`` on the C runner,
gcc), 1,188 configurations with a categorical loop order, every candidate
verified against the numpy reference as the plugin does. The result is a
Kernel Tuner cache file (median time in ms, every sample, failures as
Kernel Tuner writes them), so ``bench_strategies.py --spaces DIR`` scores
every strategy, Kernel Tuner's and Optuna's on it exactly as on the GPU
recordings: a check on a space that played no part in any choice.

    python benchmarks/record_cpu_space.py --out benchmarks/spaces     # about 3 minutes here
    python benchmarks/bench_strategies.py --spaces benchmarks/spaces --strategies auto,... --runs 20 ...

Timing on a shared machine is noisy; run it with nothing else running. The
recording is what it is: the benchmark scores strategies on the recorded
numbers, not on the machine.
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from pytest_autotune import tune
from pytest_autotune.runners import KernelSpec, make_runner
from pytest_autotune.execution.device import slugify
from pytest_autotune.datasets import kernel_tuner_cache

def recording(records: list[Any], params: Mapping[str, Sequence[Any]], restrictions: Sequence[str], kernel: str,
              problem_size: Sequence[int], device: str) -> dict[str, Any]:
    """Evaluation records (:class:`~pytest_autotune.engine.evaluator.EvaluationRecord`) as a Kernel Tuner cache document."""
    results = ((r.params, r.measurement.value, None if r.measurement.ok else r.measurement.failure,
                {"times": [float(x) for x in r.measurement.samples]} if r.measurement.ok else {}) for r in records)
    return kernel_tuner_cache(params, results, device_name=device, kernel_name=kernel,
                              problem_size=list(problem_size), restrictions=list(restrictions))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("benchmarks/spaces"),
                   help="folder laid out like ../shared/data/spaces (the file goes to OUT/kerneltuner/)")
    args = p.parse_args(argv)
    try:
        from example_kernels import MATMUL_N, MATMUL_PARAMS, MATMUL_RESTRICTIONS, kernel_path, matmul_problem
    except ImportError:
        print("record_cpu_space.py needs the example project: pip install -e ./example_project", file=sys.stderr)
        return 2
    problem, expected = matmul_problem()
    runner = make_runner(KernelSpec(kernel_path("matmul.c"), "matmul", MATMUL_N, problem, expected=expected,
                                    rtol=1e-4, atol=1e-3))
    records: list[Any] = []
    t0 = time.perf_counter()

    def progress(rec: Any, _evaluator: Any) -> None:
        records.append(rec)
        if len(records) % 100 == 0:
            print(f"{len(records)} configurations, {time.perf_counter() - t0:.0f} s", flush=True)

    try:
        result = tune(runner, MATMUL_PARAMS, MATMUL_RESTRICTIONS, strategy="brute_force", budget=10**9,
                      on_record=progress, keep_outputs=False)
    finally:
        runner.close()
    device = result.device.model
    doc = recording(records, MATMUL_PARAMS, MATMUL_RESTRICTIONS, "matmul", [MATMUL_N], device)
    out = args.out / "kerneltuner" / f"matmul_cpu_{slugify(device)}.json.gz"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    with gzip.open(tmp, "wt") as f:
        json.dump(doc, f)
    tmp.replace(out)
    failed = sum(not r.measurement.ok for r in records)
    print(f"{out}: {len(records)} configurations ({failed} failed) in {time.perf_counter() - t0:.0f} s; "
          f"best {result.value:.4f} ms {result.params}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
