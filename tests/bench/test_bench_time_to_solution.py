"""The time-to-solution benchmark: its command line, a tiny run on files it has never seen, its statistics."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks import bench_time_to_solution as bench  # noqa: E402
from tests.datasets.test_datasets import write_json  # noqa: E402


def toy_cache(n: int = 12, offset: float = 0.0) -> dict:
    """A Kernel Tuner cache of n configurations with every cost recorded (ms)."""
    cache = {}
    for c in range(n):
        t = 1.0 + abs(c - 7) + offset  # the optimum at c = 7
        cache[str(c)] = {"c": c, "time": t, "times": [t] * 5, "compile_time": 200.0, "verification_time": 5.0,
                         "framework_time": 1.0}
    return {"tune_params_keys": ["c"], "tune_params": {"c": list(range(n))}, "cache": cache, "device_name": "Toy"}


def test_help_describes_the_benchmark(capsys):
    with pytest.raises(SystemExit) as exc:
        bench.main(["--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    for flag in ("--spaces", "--workers", "--runs", "--json", "--kernel-tuner", "--optuna"):
        assert flag in text


def test_a_tiny_run_on_unseen_files(tmp_path, capsys):
    spaces = tmp_path / "my_spaces"
    write_json(spaces / "anything" / "toy_A.json", toy_cache())
    write_json(spaces / "toy_B.json.gz", toy_cache(offset=1.0))
    out = tmp_path / "tts.json"
    code = bench.main(["--spaces", str(spaces), "--workers", "1,2", "--runs", "3", "--strategies", "random",
                       "--kernel-tuner", "none", "--no-optuna", "--jobs", "1", "--json", str(out),
                       "--no-anchor-cache"])
    assert code == 0
    table = capsys.readouterr().out
    assert "random@1" in table and "random@2" in table and "toy_A" in table
    data = json.loads(out.read_text())
    assert set(data["spaces"]) == {"toy_A", "toy_B"}
    cell = data["spaces"]["toy_A"]["random@2"]
    assert cell["runs"] == 3 and cell["censored"] == {"t5": 0, "t1": 0}  # the cap is N: the optimum is always found
    assert 0 < cell["t5_median_s"] <= cell["t1_median_s"]
    assert data["aggregate"]["random@1"]["spaces"] == 2
    assert data["costs"]["toy_A"]["median_compile_s"] == pytest.approx(0.2)
    assert data["costs"]["toy_A"]["assumptions"] == []


def test_a_missing_folder_is_not_an_error(tmp_path, capsys):
    assert bench.main(["--spaces", str(tmp_path / "absent"), "--json", str(tmp_path / "x.json")]) == 0
    assert "no folder" in capsys.readouterr().out


def test_bad_worker_counts_are_refused():
    with pytest.raises(SystemExit, match="--workers"):
        bench.parse_workers("1,0")


def test_censored_median_and_speedups():
    assert bench.censored_median([1.0, 2.0, None]) == 2.0
    assert bench.censored_median([1.0, None, None]) is None  # the median run never got there
    assert bench.censored_median([1.0, 3.0]) == 2.0
    per_space = {"a": {"ours": {"t5_median_s": 2.0}, "kt": {"t5_median_s": 10.0}},
                 "b": {"ours": {"t5_median_s": None}, "kt": {"t5_median_s": 4.0}},  # ours censored: 0
                 "c": {"ours": {"t5_median_s": 1.0}, "kt": {"t5_median_s": None}},  # theirs censored: inf
                 "d": {"ours": {"t5_median_s": None}, "kt": {"t5_median_s": None}}}  # both: left out
    assert bench.speedups(per_space, "ours", "kt") == [5.0, 0.0, math.inf]


def test_a_kernel_tuner_anchor_is_replayed_sequentially(tmp_path):
    pytest.importorskip("kernel_tuner")
    path = write_json(tmp_path / "toy.json", toy_cache())
    info = bench.load_space_info(path)
    spec = bench.parse_strategy_spec("kt:random_sample")
    task = {"space": info.name, "path": str(path), "label": "kt:random_sample@1", "spec": spec, "workers": 1,
            "seed": 0, "cap": 12}
    result = bench.run_task(task)
    assert "error" not in result, result.get("error")
    rows = result["anchor"]["rows"]
    assert 1 <= len(rows) <= 12 and len(result["anchor"]["step_ms"]) == len(rows)
    # sequential: every evaluation costs 200 + 5 + 5 * t + 1 ms, one after another, plus KT's compute
    from pytest_autotune.datasets import load_dataset
    rec = load_dataset(path)
    recorded = sum(0.206 + 5 * float(rec.times[r]) / 1e3 for r in rows)
    assert result["t1"] == pytest.approx(recorded + sum(result["anchor"]["step_ms"]) / 1e3)
