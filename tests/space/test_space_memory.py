"""Search-space construction in bounded memory.

A large constrained space used to exhaust a CI runner's memory at
collection: 4 parameters of 100 values and two binary ones (4e8
configurations before the restrictions) took several GiB to build, and a
marker whose restrictions read device limits enumerated the whole Cartesian
product just to check its value lists. Construction now needs memory in
proportion to the valid configurations (8-byte keys, one-byte indices) and a
space beyond ``max_configurations`` (ini ``autotune_max_configurations``) is
refused before it is built. The memory checks run in a subprocess under an
address-space limit, so a regression is a MemoryError there, not a killed
test run.
"""
from __future__ import annotations

import os
import resource
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

import pytest_autotune
from pytest_autotune.space import DEFAULT_MAX_CONFIGURATIONS, SearchSpace, SearchSpaceError, SearchSpaceTooLarge
from pytest_autotune.space import searchspace as searchspace_module

REPO = Path(pytest_autotune.__file__).resolve().parent.parent
GIB = 1 << 30
V100 = list(range(1, 101))
BIG = {"A": V100, "B": V100, "C": V100, "D": V100, "E": [0, 1], "F": [0, 1]}  # 4e8 before restrictions
BIG_OVER = ["A*B <= 1024", "C+D < 150"]  # 113,455,920 valid: over the default limit


def _limited(address_space: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
    return apply


def run_limited(args: list[str], address_space: int, cwd: Path | None = None,
                timeout: float = 600) -> subprocess.CompletedProcess:
    """``python args`` with this checkout first on the path, under an address-space limit."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
               OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, preexec_fn=_limited(address_space),
                          capture_output=True, text=True, timeout=timeout)


def test_the_4e8_space_builds_in_2_gib_of_address_space():
    # a group of three parameters bound by one restriction, E and F by another with A and D:
    # 37,897,286 valid of 4e8; it used to peak near 3 GiB (int64 columns, argsort and gathers)
    script = textwrap.dedent("""
        import numpy as np
        from pytest_autotune.space import SearchSpace
        V = list(range(1, 101))
        s = SearchSpace({"A": V, "B": V, "C": V, "D": V, "E": [0, 1], "F": [0, 1]},
                        ["A*B*C <= 4000 + 40*D", "E <= F or A < D"])
        rows = np.random.default_rng(0).choice(len(s), 1000, replace=False)
        ok = all(c["A"] * c["B"] * c["C"] <= 4000 + 40 * c["D"] and (c["E"] <= c["F"] or c["A"] < c["D"])
                 for c in map(s.get, rows))
        print(len(s), s.indices.dtype, ok, bool(np.all(s._keys[1:] > s._keys[:-1])))
    """)
    done = run_limited(["-c", script], 2 * GIB)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["37897286", "uint8", "True", "True"]


def test_a_space_beyond_the_limit_is_refused_before_anything_of_its_size_is_allocated():
    tracemalloc.start()
    try:
        with pytest.raises(SearchSpaceTooLarge) as info:
            SearchSpace(BIG, BIG_OVER)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20  # the blocks only: 3,263 and 8,674 rows, not 113 million
    message = str(info.value)
    assert "the search space has 113,455,920 valid configurations" in message
    assert f"the limit is {DEFAULT_MAX_CONFIGURATIONS:,}" in message
    assert "autotune_max_configurations" in message and "Add restrictions" in message
    assert (info.value.size, info.value.limit) == (113_455_920, DEFAULT_MAX_CONFIGURATIONS)


def test_the_limit_is_an_argument():
    params = {"x": list(range(10)), "y": list(range(10))}
    assert len(SearchSpace(params, max_configurations=100)) == 100
    with pytest.raises(SearchSpaceTooLarge, match="has 100 valid configurations; the limit is 99"):
        SearchSpace(params, max_configurations=99)
    with pytest.raises(SearchSpaceTooLarge, match="has 55 valid"):
        SearchSpace(params, ["x <= y"], max_configurations=54)
    for bad in (0, -5, 1.5, True, "100"):
        with pytest.raises(SearchSpaceError, match="max_configurations must be a positive integer"):
            SearchSpace(params, max_configurations=bad)


def test_a_construction_step_beyond_the_limit_is_refused_and_says_which_parameters():
    # one restriction over four parameters: the first three are enumerated before it can apply
    params = {p: list(range(20)) for p in "abcd"}
    with pytest.raises(SearchSpaceTooLarge, match=r"partial configurations of \w, \w, \w before the restrictions"):
        SearchSpace(params, ["a + b + c + d < 5"], max_configurations=7999)
    assert len(SearchSpace(params, ["a + b + c + d < 5"], max_configurations=8000)) == 70


def test_callable_restrictions_are_counted_before_they_run():
    calls = []

    def keep(config):
        calls.append(1)
        return True

    with pytest.raises(SearchSpaceTooLarge, match="leave 1,000 configurations for the callable restrictions"):
        SearchSpace({"x": list(range(100)), "y": list(range(10))}, [keep], max_configurations=999)
    assert not calls


def test_find_on_a_large_space_needs_no_dict_of_every_configuration(monkeypatch):
    monkeypatch.setattr(searchspace_module, "TUPLE_INDEX_ROWS", 1000)
    space = SearchSpace({"a": list(range(40)), "b": [1.5, "x", 3], "c": list(range(30))}, ["a + c < 50"])
    assert len(space) > 1000
    rows = np.random.default_rng(1).choice(len(space), 200, replace=False)
    assert [space.find(space.get(r)) for r in rows] == list(rows)
    assert [space.find(space.tuple(r)) for r in rows] == list(rows)
    assert space.find({"a": 39, "b": "x", "c": 29}) == -1  # a + c >= 50
    assert space.find({"a": 1, "b": "y", "c": 2}) == -1 and space.find({"a": 1}) == -1
    assert space.find({"a": 1, "b": [1], "c": 2}) == -1  # unhashable
    assert space._row_of_tuple is None


# -- the plugin: collection ---------------------------------------------------------------------

MARKED = """
import pytest
V = list(range(1, 101))

@pytest.mark.tune(params={{"A": V, "B": V, "C": V, "D": V, "E": [0, 1], "F": [0, 1]}},
                  restrictions={restrictions!r})
def test_big(autotune):
    pass
"""


def _collect(tmp_path: Path, restrictions: list[str], ini: str = "") -> subprocess.CompletedProcess:
    (tmp_path / "pytest.ini").write_text("[pytest]\n" + ini)
    (tmp_path / "test_big.py").write_text(MARKED.format(restrictions=restrictions))
    return run_limited(["-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q", "test_big.py"],
                       2 * GIB, cwd=tmp_path)


def test_collect_only_refuses_a_space_beyond_the_limit_naming_the_test(tmp_path):
    done = _collect(tmp_path, BIG_OVER)
    out = done.stdout + done.stderr
    assert done.returncode == 2, out[-3000:]
    assert ("test_big.py::test_big: tune marker argument 'params': the search space has 113,455,920 valid "
            "configurations; the limit is 50,000,000") in out
    assert "Traceback" not in out and "MemoryError" not in out


def test_collect_only_does_not_enumerate_a_space_whose_restrictions_read_device_limits(tmp_path):
    # its restrictions can only apply at run time; the check at collection used to build the 4e8
    # unrestricted product instead (~8 GiB)
    done = _collect(tmp_path, ["A*B <= max_threads", "C+D < 150"])
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "1 test collected" in done.stdout


SMALL = """
import pytest

@pytest.mark.tune(params={"x": list(range(30)), "y": list(range(30))}, restrictions=["x <= y"])
def test_small(autotune):
    pass
"""


@pytest.mark.parametrize("ini, collected", [("autotune_max_configurations = 465", True),
                                            ("autotune_max_configurations = 464", False),
                                            ("autotune_max_configurations = 4.64e2", False),
                                            ("", True)])
def test_the_ini_option_sets_the_limit(pytester: pytest.Pytester, ini: str, collected: bool):
    pytester.makeini("[pytest]\n" + ini + "\n")
    pytester.makepyfile(test_small=SMALL)
    result = pytester.runpytest("--collect-only", "-q")
    if collected:
        result.assert_outcomes()
        result.stdout.fnmatch_lines(["*1 test collected*"])
    else:
        result.stdout.fnmatch_lines(["*test_small.py::test_small: tune marker argument 'params': the search space "
                                     "has 465 valid configurations; the limit is 464 (the ini option "
                                     "autotune_max_configurations*"])


@pytest.mark.parametrize("value", ["0", "lots", "1.5", "-3"])
def test_a_bad_ini_limit_is_a_usage_error(pytester: pytest.Pytester, value: str):
    pytester.makeini(f"[pytest]\nautotune_max_configurations = {value}\n")
    pytester.makepyfile(test_small=SMALL)
    result = pytester.runpytest("--collect-only", "-q")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*ini option autotune_max_configurations={value}: expected a positive whole*"])
