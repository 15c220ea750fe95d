"""The batch-size benchmark (benchmarks/bench_batch.py) end to end on a tiny folder of synthetic spaces."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import bench_batch  # noqa: E402
from benchmarks import bench_strategies  # noqa: E402
from test_bench_strategies import write_kt_cache, write_t1_t4  # noqa: E402


def test_batch_table_json_and_merge(tmp_path: Path, capsys) -> None:
    rng = np.random.default_rng(11)
    root = tmp_path / "spaces"
    write_t1_t4(root, rng)
    write_kt_cache(root / "kerneltuner" / "toy_cache_FakeGPU.json.gz", rng)
    first, second, merged = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "m.json"
    common = ["--spaces", str(root), "--strategies", "genetic,mls", "--batch-sizes", "1,4", "--jobs", "1",
              "--runs", "2", "--reference", str(tmp_path / "none.json")]
    assert bench_batch.main([*common, "--json", str(first)]) == 0
    table = capsys.readouterr().out
    assert "batch 1" in table and "batch 4" in table and "genetic" in table
    doc = json.loads(first.read_text())
    assert set(doc["spaces"]) == {"toy_FakeGPU", "toy_cache_FakeGPU"}
    for space, info in doc["spaces"].items():
        for label in ("genetic", "mls"):
            entry = doc["results"][space][label]["1"]
            # batch size 1 is the sequential search: the same scores as bench_strategies.py's runs
            for seed, score in zip(entry["seeds"], entry["scores"]):
                ref = bench_strategies.run_one({"space": space, "path": info["file"], "seed": seed,
                                                "spec": bench_strategies.parse_strategy_spec(label),
                                                "budget": info["budget"]})
                assert ref["score"] == score
            assert len(doc["results"][space][label]["4"]["scores"]) == 2
    assert set(doc["aggregate"]["measured"]["genetic"]) == {"1", "4"}

    assert bench_batch.main([*common[:-4], "--runs", "1", "--seed0", "2", "--reference", str(first),
                             "--json", str(second)]) == 0
    capsys.readouterr()
    assert bench_batch.main(["--merge", str(first), str(second), "--json", str(merged),
                             "--reference", str(tmp_path / "none.json")]) == 0
    doc = json.loads(merged.read_text())
    assert doc["meta"]["seeds"] == [0, 1, 2]
    assert doc["results"]["toy_FakeGPU"]["mls"]["4"]["seeds"] == [0, 1, 2]
