"""The strategy benchmark (benchmarks/bench_strategies.py): metric, spec parsing, end-to-end CLI on a tiny folder."""
from __future__ import annotations

import gzip
import importlib.util
import itertools
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import bench_strategies as bench  # noqa: E402
from benchmarks.scoring import SpaceStats, score_run  # noqa: E402
from pytest_autotune.strategies.base import StrategyError  # noqa: E402

HAVE_KT = importlib.util.find_spec("kernel_tuner") is not None
HAVE_OPTUNA = importlib.util.find_spec("optuna") is not None


# -- the metric on a hand-made space ------------------------------------------------------------------------


def test_metric_by_hand():
    # five configurations, one failed: valid times 1, 2, 3, 4
    stats = SpaceStats.from_times([4.0, 1.0, float("nan"), 3.0, 2.0])
    assert stats.n_configs == 5 and stats.optimum == 1.0 and stats.median == 2.5
    # E_1 is the mean where a failed draw leaves t_V = 4: (4 + 1 + 4 + 3 + 2) / 5
    assert stats.expected_best(1) == pytest.approx(2.8)
    # E_2 = 1 + C(4,2)/C(5,2) + C(3,2)/C(5,2) + C(2,2)/C(5,2) = 1 + .6 + .3 + .1
    assert stats.expected_best(2) == pytest.approx(2.0)
    assert stats.expected_best(3) == pytest.approx(1.5)  # 1 + 4/10 + 1/10
    assert stats.expected_best(4) == pytest.approx(1.2)  # 1 + 1/5
    assert stats.expected_best(5) == pytest.approx(1.0)
    # target = med - 0.95 (med - opt) = 1.075: only E_5 gets there
    assert stats.budget() == 5
    assert stats.checkpoints() == [1] * 4 + [2] * 4 + [3] * 4 + [4] * 4 + [5] * 4
    # the optimum first: 1 at every checkpoint (t = 5 has E_t = opt and is skipped)
    assert score_run(stats, [1.0, None, 4.0, 3.0, 2.0], 5) == pytest.approx(1.0)
    # failed first, then worst to best: best_t = 4, 4, 3, 2 at t = 1..4
    expected = ((2.8 - 4) / 1.8 + (2.0 - 4) / 1.0 + (1.5 - 3) / 0.5 + (1.2 - 2) / 0.2) / 4
    assert score_run(stats, [None, 4.0, 3.0, 2.0, 1.0], 5) == pytest.approx(expected)
    # a run that stopped early keeps its last value
    assert score_run(stats, [2.0], 5) == pytest.approx(((2.8 - 2) / 1.8 + 0 + (1.5 - 2) / 0.5 + (1.2 - 2) / 0.2) / 4)


# -- synthetic folders ------------------------------------------------------------------------------------


def _times(rng: np.random.Generator, n: int, fail: float) -> list:
    t = np.exp(rng.normal(0.0, 0.6, n)) + 0.5
    return [None if rng.random() < fail else float(x) for x in t]


def write_kt_cache(path: Path, rng: np.random.Generator, subset: bool = True) -> int:
    """A Kernel Tuner cache without restrictions; with ``subset`` only part of the Cartesian product is recorded."""
    tune_params = {"bx": [16, 32, 64, 128], "tile": [1, 2, 4], "unroll": [0, 1], "vec": [1, 2, 4]}
    names = list(tune_params)
    configs = [c for c in itertools.product(*tune_params.values()) if not subset or c[0] * c[1] <= 256]
    cache = {}
    for c, t in zip(configs, _times(rng, len(configs), 0.1)):
        entry = dict(zip(names, c))
        entry["time"] = t if t is not None else "RuntimeFailedConfig"
        cache[",".join(map(str, c))] = entry
    doc = {"device_name": "Fake GPU", "kernel_name": "k", "problem_size": [64], "tune_params_keys": names,
           "tune_params": tune_params, "cache": cache}
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        json.dump(doc, f)
    return len(configs)


def write_t1_t4(root: Path, rng: np.random.Generator) -> int:
    params = {"block_size_x": [16, 32, 64, 128, 256], "block_size_y": [1, 2, 4, 8], "tile": [1, 2, 3], "pad": [0, 1]}
    conditions = ["block_size_x*block_size_y<=256", "pad==0 or block_size_x % 32 != 0"]
    t1 = {"General": {"BenchmarkName": "toy", "OutputFormat": "JSON"},
          "ConfigurationSpace": {"TuningParameters": [{"Name": n, "Type": "int", "Values": repr(v), "Default": v[0]}
                                                      for n, v in params.items()],
                                 "Conditions": [{"Expression": c, "Parameters": []} for c in conditions]}}
    (root / "t1").mkdir(parents=True, exist_ok=True)
    (root / "t1" / "toy.json").write_text(json.dumps(t1))
    valid = [c for c in itertools.product(*params.values())
             if c[0] * c[1] <= 256 and (c[3] == 0 or c[0] % 32 != 0)]
    results = []
    for c, t in zip(valid, _times(rng, len(valid), 0.05)):
        ok = t is not None
        results.append({"configuration": dict(zip(params, c)), "invalidity": "correct" if ok else "runtime",
                        "measurements": [{"name": "time", "value": t if ok else "RuntimeFailedConfig", "unit": "ms"}],
                        "times": {"runtimes": [t] if ok else []}})
    (root / "t4").mkdir(parents=True, exist_ok=True)
    with gzip.open(root / "t4" / "toy_FakeGPU.json.gz", "wt") as f:
        json.dump({"schema_version": "1.0.0", "metadata": {}, "results": results}, f)
    return len(valid)


# -- random scores zero -----------------------------------------------------------------------------------


def test_random_scores_zero_on_synthetic_space(tmp_path):
    rng = np.random.default_rng(3)
    path = tmp_path / "kerneltuner" / "toy_cache.json.gz"
    n = write_kt_cache(path, rng)
    info = bench.load_space_info(path)
    assert info.n_configs == n and info.format == "kerneltuner"
    spec = bench.parse_strategy_spec("random")
    scores = []
    for seed in range(300):
        out = bench.run_one({"space": info.name, "path": str(path), "spec": spec, "seed": seed,
                             "budget": info.budget})
        assert "error" not in out, out.get("error")
        assert out["evaluations"] == info.budget and len(set(out["seq"])) == info.budget
        scores.append(out["score"])
    mean, std, se = bench.mean_std_se(scores)
    assert abs(mean) < max(0.05, 3 * se), (mean, se)
    assert std > 0.05  # it is a noisy per-run score, not a constant


# -- strategy specifications ----------------------------------------------------------------------------------


def test_parse_strategy_specs():
    s = bench.parse_strategy_spec("bayes:acquisition=ei")
    assert (s.kind, s.name, s.hyperparameters, s.label) == ("ours", "bayes", {"acquisition": "ei"}, "bayes:acquisition=ei")
    g = bench.parse_strategy_spec("genetic:constraint_aware=false;pop_size=20;rate=0.5")
    assert g.hyperparameters == {"constraint_aware": False, "pop_size": 20, "rate": 0.5}
    assert g.label == "genetic:constraint_aware=false;pop_size=20;rate=0.5"
    j = bench.parse_strategy_spec('{"name": "genetic", "constraint_aware": false, "pop_size": 20, "rate": 0.5}')
    assert j == g and j.label == g.label
    assert bench.parse_strategy_spec({"name": "bayes", "acquisition": "ei"}) == s
    assert bench.parse_strategy_spec("x:flag=True;name2=\"a;b\"").hyperparameters == {"flag": True, "name2": "a;b"}
    assert bench.parse_strategy_spec("x:values=[1,2,3]").hyperparameters == {"values": [1, 2, 3]}
    kt = bench.parse_strategy_spec("kt:diff_evo:popsize=30")
    assert (kt.kind, kt.name, kt.hyperparameters, kt.label) == ("kernel_tuner", "diff_evo", {"popsize": 30},
                                                                "kt:diff_evo:popsize=30")
    assert bench.parse_strategy_spec("optuna:tpe").kind == "optuna"
    assert bench.split_specs('auto, genetic:a=1;b=[1,2],{"name": "bayes", "x": [1, 2]},random') == [
        "auto", "genetic:a=1;b=[1,2]", '{"name": "bayes", "x": [1, 2]}', "random"]
    with pytest.raises(StrategyError):
        bench.parse_strategy_spec("random:oops")
    with pytest.raises(StrategyError):
        bench.parse_strategy_spec('{"acquisition": "ei"}')
    # names and hyperparameters are checked against the registry
    bench.validate_spec(bench.parse_strategy_spec("brute_force:shuffle=true"))
    with pytest.raises(StrategyError):
        bench.validate_spec(bench.parse_strategy_spec("random:nonsense=1"))
    with pytest.raises(StrategyError):
        bench.validate_spec(bench.parse_strategy_spec("no_such_strategy"))
    with pytest.raises(StrategyError):
        bench.validate_spec(bench.parse_strategy_spec("optuna:cmaes"))


def test_summary_statistics_and_within_se():
    spaces = [bench.SpaceInfo("a", "a", "t4", 10, 10, 5, 1.0, 2.0, "x"),
              bench.SpaceInfo("b", "b", "ktt", 10, 10, 5, 1.0, 2.0, "y")]
    specs = [bench.parse_strategy_spec("p"), bench.parse_strategy_spec("q")]
    comp = {"steps": 2, "sum_ms": 2.0, "max_ms": 1.5, "mean_ms": 1.0}

    def runs(scores):
        return [{"seed": i, "score": s, "evaluations": 5, "compute": comp, "wall_s": 0.1, "values": [3.0, None, 1.0]}
                for i, s in enumerate(scores)]

    data = {("a", "p"): runs([0.5, 0.7]), ("a", "q"): runs([0.4, 0.5]),
            ("b", "p"): runs([0.1, 0.1]), ("b", "q"): runs([0.3, 0.5])}
    out = bench.summarise(spaces, specs, data, [0, 1])
    a = out["results"]["a"]
    assert a["p"]["mean"] == pytest.approx(0.6) and a["p"]["std"] == pytest.approx(math.sqrt(0.02))
    assert a["p"]["se"] == pytest.approx(0.1) and a["p"]["best"]
    assert not a["q"]["best_or_within_se"]  # 0.45 < 0.6 - 0.1
    assert a["p"]["best_or_within_se"] and not a["q"]["best"]
    b = out["results"]["b"]
    assert b["q"]["best"] and not b["p"]["best_or_within_se"]  # 0.1 < 0.4 - 0.1
    assert out["aggregate"]["all"]["q"]["best_or_within_se"]["count"] == 1
    assert out["aggregate"]["measured"]["p"]["mean"] == pytest.approx(0.6)  # only "a" is measured (t4)
    allp = out["aggregate"]["all"]["p"]
    assert allp["mean"] == pytest.approx(0.35)
    assert allp["se"] == pytest.approx(math.sqrt(0.1 ** 2 + 0.0 ** 2) / 2)
    assert allp["per_seed"] == pytest.approx([0.3, 0.4])
    assert out["compute"]["p"]["mean_ms"] == pytest.approx(1.0) and out["compute"]["p"]["max_ms"] == 1.5


# -- the command line, end to end -----------------------------------------------------------------------------


def test_cli_end_to_end(tmp_path, capsys):
    rng = np.random.default_rng(7)
    root = tmp_path / "spaces"
    n_t4 = write_t1_t4(root, rng)
    n_kt = write_kt_cache(root / "kerneltuner" / "toy_cache_FakeGPU.json.gz", rng)
    (root / "README.md").write_text("not a space")
    out_json, out_seq, cache = tmp_path / "o" / "out.json", tmp_path / "o" / "seq.jsonl", tmp_path / "ac.jsonl"
    anchors_args = []
    if HAVE_KT:
        anchors_args += ["--kernel-tuner", "random_sample,genetic_algorithm"]
    if HAVE_OPTUNA:
        anchors_args += ["--optuna"]
    argv = ["--spaces", str(root), "--strategies", "random,brute_force:shuffle=true", "--runs", "2", "--jobs", "1",
            "--json", str(out_json), "--sequences", str(out_seq), "--anchor-cache", str(cache), *anchors_args]
    assert bench.main(argv) == 0
    table = capsys.readouterr().out
    doc = json.loads(out_json.read_text())
    labels = ["random", "brute_force:shuffle=true"]
    labels += ["kt:random_sample", "kt:genetic_algorithm"] if HAVE_KT else []
    labels += ["optuna:tpe"] if HAVE_OPTUNA else []
    assert set(doc["strategies"]) == set(labels)
    assert set(doc["spaces"]) == {"toy_FakeGPU", "toy_cache_FakeGPU"}
    assert doc["spaces"]["toy_FakeGPU"]["N"] == n_t4 and doc["spaces"]["toy_cache_FakeGPU"]["N"] == n_kt
    for space, per in doc["results"].items():
        assert set(per) == set(labels)
        for label, e in per.items():
            assert len(e["scores"]) == 2 and e["seeds"] == [0, 1]
            assert e["mean"] == pytest.approx(np.mean(e["scores"]))
            assert e["std"] == pytest.approx(np.std(e["scores"], ddof=1))
            assert e["se"] == pytest.approx(e["std"] / math.sqrt(2))
            assert e["budget"] == doc["spaces"][space]["budget"] and e["N"] == doc["spaces"][space]["N"]
            assert e["optimum"] == doc["spaces"][space]["optimum"]
            assert e["compute"]["max_ms"] is not None
            if not label.startswith(("kt:", "optuna:")):  # ours: the strategy thread's CPU time per step too
                assert 0 <= e["compute"]["cpu_max_ms"] <= e["compute"]["max_ms"] + 1.0
    for group in ("measured", "all"):
        assert set(doc["aggregate"][group]) == set(labels)
    assert doc["targets"]["random_is_zero"]["mean"] == doc["aggregate"]["measured"]["random"]["mean"]
    for label in labels:
        assert label in table

    lines = [json.loads(x) for x in out_seq.read_text().splitlines()]
    assert len(lines) == 2 * len(labels) * 2
    assert {(d["space"], d["strategy"], d["seed"]) for d in lines} == {
        (s, lab, seed) for s in doc["spaces"] for lab in labels for seed in (0, 1)}
    for d in lines:
        assert set(d) == {"space", "strategy", "seed", "sequence"}
        budget = doc["spaces"][d["space"]]["budget"]
        assert 0 < len(d["sequence"]) <= budget
        names = {"toy_FakeGPU": {"block_size_x", "block_size_y", "tile", "pad"},
                 "toy_cache_FakeGPU": {"bx", "tile", "unroll", "vec"}}[d["space"]]
        assert all(isinstance(c, dict) and set(c) == names for c in d["sequence"])
        if d["strategy"] != "optuna:tpe":  # Optuna may propose restricted configurations
            assert len({tuple(sorted(c.items())) for c in d["sequence"]}) == len(d["sequence"])
        if d["strategy"] in ("random", "brute_force:shuffle=true", "kt:random_sample"):
            assert len(d["sequence"]) == budget

    if HAVE_KT or HAVE_OPTUNA:  # the anchors come from the cache the second time, with the same scores
        assert bench.main(argv) == 0
        capsys.readouterr()
        again = json.loads(out_json.read_text())
        assert again["meta"]["runs_done"] == 2 * 2 * 2  # only ours ran again
        assert again["meta"]["anchor_runs_cached"] == 2 * (len(labels) - 2) * 2
        for space, per in doc["results"].items():
            for label in labels[2:]:
                assert again["results"][space][label]["scores"] == per[label]["scores"]


def test_budget_cap_scores_every_space_on_the_smaller_budget(tmp_path, capsys):
    rng = np.random.default_rng(3)
    root = tmp_path / "spaces"
    write_t1_t4(root, rng)
    out = tmp_path / "out.json"
    base = ["--spaces", str(root), "--strategies", "random", "--runs", "2", "--jobs", "1", "--no-anchor-cache"]
    assert bench.main(base + ["--json", str(out)]) == 0
    full = json.loads(out.read_text())["spaces"]["toy_FakeGPU"]["budget"]
    assert full > 3
    assert bench.main(base + ["--json", str(out), "--budget-cap", "3"]) == 0
    doc = json.loads(out.read_text())
    assert doc["spaces"]["toy_FakeGPU"]["budget"] == 3
    assert doc["results"]["toy_FakeGPU"]["random"]["evaluations"] == [3, 3]  # random search spends the budget
    assert bench.main(base + ["--budget-cap", "0"]) == 2
    assert "--budget-cap" in capsys.readouterr().err


def test_cli_skips_missing_folder(tmp_path, capsys):
    assert bench.main(["--spaces", str(tmp_path / "absent"), "--strategies", "random"]) == 0
    assert "skipped" in capsys.readouterr().err


def test_shrinking_benchmark_end_to_end(tmp_path, capsys):
    """``bench_shrinking.py``: the procedure's end and opt/best at 1% / 10% of N, per setting, table and JSON."""
    from benchmarks import bench_shrinking

    rng = np.random.default_rng(11)
    root = tmp_path / "spaces"
    n = write_kt_cache(root / "kerneltuner" / "toy_cache_FakeGPU.json.gz", rng)
    out = tmp_path / "shrink.json"
    argv = ["--spaces", str(root), "--runs", "3", "--settings", "k=2,v_th=1;k=3,v_th=2", "--json", str(out)]
    assert bench_shrinking.main(argv) == 0
    table = capsys.readouterr().out
    assert "published claim" in table and "k=3,v_th=2" in table
    doc = json.loads(out.read_text())
    space = doc["spaces"]["toy_cache_FakeGPU"]
    assert space["N"] == n and set(space["settings"]) == {"k=2,v_th=1", "k=3,v_th=2"}
    for label, entry in space["settings"].items():
        assert [r["seed"] for r in entry["runs"]] == [0, 1, 2]
        for r in entry["runs"]:
            assert 0 < r["procedure_evaluations"] <= n
            assert 0 < r["procedure_fraction"] <= 1.0
            assert 0 <= r["at"]["1%"] <= r["at"]["10%"] <= 1.0  # 0: nothing valid yet
        assert entry["summary"]["procedure_fraction"] == pytest.approx(
            np.mean([r["procedure_fraction"] for r in entry["runs"]]))
    assert set(doc["aggregate"]) == {"k=2,v_th=1", "k=3,v_th=2"}
    assert bench_shrinking.main(["--spaces", str(tmp_path / "absent")]) == 0
    assert "skipped" in capsys.readouterr().out


def test_auto_within_one_se_among_references_only():
    def e(mean, se, scores=(0.0, 0.0)):
        return {"mean": mean, "se": se, "scores": list(scores)}

    res = {"a": {"auto": e(0.50, 0.05, [0.4, 0.6]), "kt:pso": e(0.60, 0.05, [0.55, 0.65]), "tpe": e(0.90, 0.01)},
           "b": {"auto": e(0.50, 0.05, [0.45, 0.55]), "kt:pso": e(0.54, 0.05, [0.49, 0.59])},
           "c": {"auto": e(0.70, 0.05, [0.69, 0.70, 0.71]), "optuna:tpe": e(0.10, 0.30, [0.99, 1.0, 1.01])}}
    r = bench._within_se_among(res, ["auto", "kt:pso", "optuna:tpe"], "auto", ["a", "b", "c", "absent"])
    assert (r["count"], r["of"], r["spaces"]) == (2, 3, ["b", "c"])  # ours (tpe) do not count; a: 0.50 < 0.55
    # significance is judged on the scores (Welch, one-sided): c's scores put optuna clearly ahead
    assert set(r["significantly_worse"]) == {"c"} and r["significantly_worse"]["c"]["best_other"] == "optuna:tpe"


def test_fraction_of_optimum_after_fixed_evaluations():
    runs = [[None, 4.0, 2.0] + [1.0] * 30, [None] * 25 + [2.0]]
    out = bench.fraction_of_optimum_at(runs, optimum=1.0, budget=60)
    assert set(out) == {"20", "50"}  # 100 and 220 are beyond the budget
    assert out["20"] == pytest.approx((1.0 + 0.0) / 2)  # the second run has nothing valid in its first 20
    assert out["50"] == pytest.approx((1.0 + 0.5) / 2)  # a short run keeps its last best
