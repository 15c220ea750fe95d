"""benchmarks/record_cpu_space.py: a brute-forced recording as a Kernel Tuner cache the benchmark reads back."""
from __future__ import annotations

import gzip
import json
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import bench_strategies as bench  # noqa: E402
from benchmarks.record_cpu_space import recording  # noqa: E402
from pytest_autotune.datasets import load_dataset  # noqa: E402
from pytest_autotune.engine.evaluator import Evaluator  # noqa: E402
from pytest_autotune.results import FailureKind, Measurement  # noqa: E402
from pytest_autotune.space import SearchSpace  # noqa: E402
from pytest_autotune.strategies import make_strategy  # noqa: E402

PARAMS = {"BLOCK": [8, 16, 32, 64], "UNROLL": [1, 4], "ORDER": ["ijk", "ikj", "kij"]}
RESTRICTIONS = ["BLOCK * UNROLL <= 128"]


def _objective(params):
    if params["BLOCK"] == 8 and params["ORDER"] == "ijk":
        return Measurement.failed(params, FailureKind.COMPILE, "synthetic")
    t = 1.0 + abs(math.log2(params["BLOCK"]) - 5) + (0.5 if params["ORDER"] == "ijk" else 0.0) / params["UNROLL"]
    return Measurement(params, value=t, samples=[t, t * 1.01, t * 0.99])


def test_recording_round_trips_through_the_benchmark(tmp_path):
    space = SearchSpace(PARAMS, RESTRICTIONS)
    history = Evaluator(space, _objective, budget=10**6).run(make_strategy("brute_force", space))
    assert len(history.records) == len(space) == 21  # 4 x 2 x 3 minus BLOCK=64 with UNROLL=4
    doc = recording(history.records, PARAMS, RESTRICTIONS, "matmul", [192], "Test CPU")
    path = tmp_path / "kerneltuner" / "matmul_cpu_test.json.gz"
    path.parent.mkdir()
    with gzip.open(path, "wt") as f:
        json.dump(doc, f)

    rec = load_dataset(path)
    assert len(rec.space) == 21 and rec.space.names == tuple(PARAMS)
    for r in history.records:
        row = rec.space.find(r.params)
        if r.value is None:
            assert np.isnan(rec.times[row]) and rec.failures[row] == FailureKind.COMPILE
        else:
            assert rec.times[row] == r.value
    info = bench.load_space_info(path)
    assert info.n_configs == 21 and info.n_valid == 19 and info.budget >= 1 and info.measured  # BLOCK=8 with ijk fails
    # the replayed space has the same unordered parameter as the original
    assert rec.space.categorical.tolist() == [False, False, True]
