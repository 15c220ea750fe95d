"""Leave-one-out reporting (benchmarks/generalisation.py) and the budget sweep of bench_strategies.py."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import bench_strategies as bench  # noqa: E402
from benchmarks import generalisation as gen  # noqa: E402

from test_bench_strategies import write_kt_cache, write_t1_t4  # noqa: E402

SPACES = ["convolution_milo_A100", "convolution_milo_MI250X", "KTConvolutionOutput_2080Ti", "KTConvolutionOutput_3090",
          "gemm_RTX_2080_Ti", "gemm_RTX_3090", "pnpoly_RTX_3090", "pnpoly_RTX_3060_laptop", "pnpoly_RTX_Titan"]


def test_families_and_gpus_of_the_recorded_spaces():
    assert [gen.family_of(s) for s in SPACES] == ["convolution"] * 4 + ["gemm"] * 2 + ["pnpoly"] * 3
    assert [gen.gpu_of(s) for s in SPACES] == ["A100", "MI250X", "RTX_2080_Ti", "RTX_3090", "RTX_2080_Ti",
                                               "RTX_3090", "RTX_3090", "RTX_3060_laptop", "RTX_Titan"]


def _results(table):
    return {s: {lab: {"mean": m} for lab, m in per.items()} for s, per in table.items()}


def test_the_selector_is_scored_only_where_it_was_not_fitted():
    # "wide" wins on gemm and pnpoly but loses on convolution; "narrow" the reverse, by less
    table = {}
    for s in SPACES:
        fam = gen.family_of(s)
        table[s] = {"wide": 0.9 if fam != "convolution" else 0.1, "narrow": 0.5 if fam != "convolution" else 0.6,
                    "kt:x": 0.3}
    out = gen.leave_one_out(_results(table), ["wide", "narrow", "kt:x"], ["wide", "narrow"], ["kt:x"])
    folds = out["family"]["folds"]
    # holding out convolution, the training spaces (gemm, pnpoly) pick "wide": 0.1 on the held-out convolution
    assert folds["convolution"]["selected"] == "wide"
    assert folds["convolution"]["means"]["selected"] == pytest.approx(0.1)
    # holding out gemm: wide's training mean (4 conv at 0.1, 3 pnpoly at 0.9) 0.443 < narrow's 0.557
    assert folds["gemm"]["selected"] == "narrow"
    assert folds["gemm"]["means"]["selected"] == pytest.approx(0.5)
    assert folds["gemm"]["best_anchor"] == {"label": "kt:x", "mean": pytest.approx(0.3)}
    assert folds["gemm"]["margin_over_best_anchor"]["selected"] == pytest.approx(0.2)
    # each space held out once: the selector's leave-one-out mean is below the in-sample best's pooled mean
    held = [0.1] * 4 + [0.5] * 2 + [0.5] * 3  # pnpoly held out: conv 0.1 x4 vs narrow 0.6 x4, gemm 0.9 vs 0.5
    assert out["family"]["loo_mean"]["selected"] == pytest.approx(np.mean(held))
    assert out["pooled"]["wide"] == pytest.approx(np.mean([table[s]["wide"] for s in SPACES]))
    assert set(out["gpu"]["folds"]) == {"A100", "MI250X", "RTX_2080_Ti", "RTX_3090", "RTX_3060_laptop", "RTX_Titan"}


def test_a_strategy_missing_on_a_space_has_no_fold_score_there():
    table = {s: {"a": 0.5, "b": 0.4} for s in SPACES}
    del table["gemm_RTX_3090"]["a"]
    out = gen.leave_one_out(_results(table), ["a", "b"], ["a", "b"], [])
    assert out["family"]["folds"]["gemm"]["means"]["a"] is None
    assert out["family"]["folds"]["pnpoly"]["selected"] == "b"  # "a" is incomplete on the training spaces
    assert out["pooled"]["a"] is None


@pytest.mark.parametrize("text, message", [("25,x", "'x'"), ("0", "'0'"), ("25,25", "given twice"), (",", "no budget")])
def test_bad_budgets_are_named(text, message):
    with pytest.raises(ValueError, match=message):
        bench.parse_budgets(text)


def test_budgets_parse():
    assert bench.parse_budgets("25, 50,100,b") == ["25", "50", "100", "B"]
    assert bench.parse_max_budget(["kt:hybrid_vndx=450"]) == {"kt:hybrid_vndx": 450}
    with pytest.raises(ValueError, match="LABEL=N"):
        bench.parse_max_budget(["kt:hybrid_vndx"])


def test_budget_sweep_end_to_end(tmp_path, capsys):
    rng = np.random.default_rng(5)
    root = tmp_path / "spaces"
    write_t1_t4(root, rng)
    write_kt_cache(root / "kerneltuner" / "pnpoly_RTX_3090.json.gz", rng)
    out = tmp_path / "out.json"
    argv = ["--spaces", str(root), "--strategies", "random,lfbo", "--runs", "2", "--jobs", "1", "--no-anchor-cache",
            "--budgets", "3,B", "--max-budget", "lfbo=3", "--json", str(out)]
    assert bench.main(argv) == 0
    doc = json.loads(out.read_text())
    assert doc["meta"]["budgets"] == ["3", "B"]
    sweep = doc["budget_sweep"]
    for name, b in sweep["3"]["budgets"].items():
        assert b == min(3, doc["spaces"][name]["budget"])
        assert sweep["3"]["results"][name]["random"]["evaluations"] == [b, b]  # told the budget, spends it
        assert sweep["3"]["results"][name]["lfbo"]["evaluations"] == [b, b]
    for name, b in sweep["B"]["budgets"].items():
        assert b == doc["spaces"][name]["budget"]
        # --max-budget: lfbo left out where its budget exceeds 3
        assert ("lfbo" in sweep["B"]["results"][name]) == (b <= 3)
    assert doc["aggregate"] == sweep["B"]["aggregate"]  # the top level is the last budget
    fam = sweep["3"]["generalisation"]["family"]
    assert set(fam["folds"]) == {"pnpoly", "toy"}
    assert fam["folds"]["pnpoly"]["selected"] in ("lfbo",)  # random is never a candidate
    assert "leave-one-family-out" in capsys.readouterr().out
    assert bench.main(argv[:-2] + ["--max-budget", "nobody=3"]) == 2
    assert "nobody" in capsys.readouterr().err
    assert bench.main(argv + ["--budget-cap", "3"]) == 2
