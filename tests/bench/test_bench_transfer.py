"""The transfer benchmark's own logic: seeds from source entries, the exact early stop, the summary."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks import bench_transfer  # noqa: E402
from benchmarks.scoring import SpaceStats, score_run  # noqa: E402
from pytest_autotune import datasets  # noqa: E402


def test_a_run_seeded_with_the_optimum_scores_one_and_stops(spaces_dir: Path) -> None:
    target = str(spaces_dir / "kerneltuner" / "pnpoly_RTX_3090.json.gz")
    best = bench_transfer.ranked_configs(target, 1)  # as if another GPU's lock held this GPU's optimum
    result = bench_transfer.run_one({"family": "pnpoly", "target": target, "sources": ["x"], "source_locks": [best],
                                     "budget": "25", "runners_up": 0, "seed": 0, "strategy": "random"})
    assert result["n_seeds"] == 1 and result["best_seed_fraction"] == 1.0 and result["score"] == 1.0


def test_the_early_stop_does_not_change_the_score(spaces_dir: Path) -> None:
    target = str(spaces_dir / "kerneltuner" / "pnpoly_RTX_3090.json.gz")
    rec = datasets.load_dataset(target)
    stats = SpaceStats.from_times(rec.times)
    values = [float(rec.times[r]) if rec.failures[r] is None else None
              for r in [rec.best_row] + list(range(30))]  # the optimum first, then anything
    assert score_run(stats, values[:1], 25) == score_run(stats, values[:25], 25) == 1.0


def test_main_writes_a_table_and_json(spaces_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "transfer.json"
    assert bench_transfer.main(["--spaces", str(spaces_dir), "--families", "ktt_convolution", "--runs", "2",
                                "--budgets", "10", "--runners-up", "1", "--sources", "converged", "--jobs", "1",
                                "--json", str(out)]) == 0
    table = capsys.readouterr().out
    assert "ktt_convolution" in table and "warm:1" in table
    data = json.loads(out.read_text())
    assert set(data["spaces"]) == {"KTConvolutionOutput_2080Ti", "KTConvolutionOutput_3090"}
    cell = data["spaces"]["KTConvolutionOutput_3090"]["10"]
    assert len(cell["cold"]["scores"]) == len(cell["warm:1"]["scores"]) == 2
    assert "gain_at_25" not in data["targets"]["warm:1"]  # only the budgets that ran are judged
