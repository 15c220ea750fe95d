"""Ground truth: the engine's valid set equals the configurations recorded in brute-forced spaces.

The spaces live beside the project (``<repo>/../shared/data/spaces``, or the
folder named by ``AUTOTUNE_SPACES``): every valid configuration of each space
was compiled and timed on a GPU, so the set of configurations in a file is
exactly the set a correct engine must construct from the space's definition.
"""
from __future__ import annotations

import functools
import gzip
import json
import os
from pathlib import Path

import numpy as np
import pytest

from benchmarks.anchors import GEMM_RESTRICTIONS  # the data README's CLBlast GEMM restrictions
from pytest_autotune.space import SearchSpace, literal_values

REPO = Path(__file__).resolve().parents[2]
SPACES = Path(os.environ.get("AUTOTUNE_SPACES", REPO.parent / "shared" / "data" / "spaces"))


def _files(pattern: str) -> list[str]:
    return sorted(p.name for p in SPACES.glob(pattern)) if SPACES.is_dir() else []


def _need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"ground-truth spaces not found at {path} (set AUTOTUNE_SPACES to the spaces folder)")
    return path


@functools.lru_cache(maxsize=None)
def _json(path: Path) -> dict:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)


@functools.lru_cache(maxsize=None)
def t1_space(name: str) -> tuple[dict, list[str]]:
    """Parameters (value lists evaluated safely) and restrictions of a T1 definition."""
    space = _json(_need(SPACES / "t1" / name))["ConfigurationSpace"]
    params = {p["Name"]: literal_values(p["Values"]) for p in space["TuningParameters"]}
    return params, [c["Expression"] for c in space.get("Conditions", [])]


@functools.lru_cache(maxsize=None)
def t4_configurations(name: str) -> frozenset:
    results = _json(_need(SPACES / "t4" / name))["results"]
    return frozenset(tuple(sorted(r["configuration"].items())) for r in results)


@functools.lru_cache(maxsize=None)
def kerneltuner_cache(name: str) -> tuple[dict, frozenset]:
    data = _json(_need(SPACES / "kerneltuner" / name))
    params = data["tune_params"]
    configs = set()
    for key, entry in data["cache"].items():
        values = tuple(entry[p] for p in params)
        assert ",".join(map(str, values)) == key, "cache key and entry disagree"
        configs.add(values)
    return params, frozenset(configs)


def valid_set(space: SearchSpace) -> set[tuple]:
    return {space.tuple(r) for r in range(len(space))}


def assert_same(space: SearchSpace, expected: frozenset | set, label: str) -> None:
    got = valid_set(space)
    missing, extra = expected - got, got - expected
    assert not missing and not extra, (f"{label}: {len(missing)} recorded configurations missing "
                                       f"(e.g. {sorted(missing)[:3]}), {len(extra)} extra (e.g. {sorted(extra)[:3]})")
    assert len(space) == len(expected)


@pytest.fixture(scope="session")
def convolution_space() -> SearchSpace:
    params, restrictions = t1_space("convolution_milo.json")
    return SearchSpace(params, restrictions)


@pytest.mark.parametrize("name", _files("t4/convolution_milo_*.json.gz") or ["convolution_milo_A100.json.gz"])
def test_t1_convolution_against_t4_results(name, convolution_space):
    recorded = t4_configurations(name)
    names = convolution_space.names
    as_tuples = set()
    for items in recorded:
        config = dict(items)
        assert set(config) == set(names), f"{name}: parameters differ from the T1 definition"
        as_tuples.add(tuple(config[n] for n in names))
    assert_same(convolution_space, as_tuples, name)
    # membership of every recorded configuration, through the dict path the runners use
    assert all(convolution_space.find(dict(items)) >= 0 for items in recorded)


@pytest.mark.parametrize("name", _files("kerneltuner/gemm_*.json.gz") or ["gemm_RTX_3090.json.gz"])
def test_gemm_restrictions_against_kerneltuner_cache(name):
    params, recorded = kerneltuner_cache(name)
    space = SearchSpace(params, GEMM_RESTRICTIONS)
    assert_same(space, recorded, name)
    # restrictions matter here: the recorded set is a strict subset of the Cartesian product
    assert len(space) < space.cartesian_size


@pytest.mark.parametrize("name", _files("kerneltuner/pnpoly_*.json.gz") or ["pnpoly_RTX_3090.json.gz"])
def test_pnpoly_cartesian_product_against_kerneltuner_cache(name):
    params, recorded = kerneltuner_cache(name)
    space = SearchSpace(params)
    assert len(space) == space.cartesian_size
    assert_same(space, recorded, name)


@pytest.mark.parametrize("name", _files("kerneltuner/gemm_*.json.gz")[:1] or ["gemm_RTX_3090.json.gz"])
def test_from_configurations_of_a_cache_equals_the_constructed_space(name):
    params, recorded = kerneltuner_cache(name)
    constructed = SearchSpace(params, GEMM_RESTRICTIONS)
    loaded = SearchSpace.from_configurations(params, sorted(recorded))
    np.testing.assert_array_equal(loaded.indices, constructed.indices)
    rng = np.random.default_rng(0)
    for row in rng.choice(len(constructed), size=20, replace=False):
        for method in ("hamming", "adjacent", "strictly-adjacent"):
            np.testing.assert_array_equal(loaded.neighbours(int(row), method), constructed.neighbours(int(row), method))
