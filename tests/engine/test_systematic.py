"""Failures that do not depend on the parameters stop the tune early: a syntax error costs a few
compiles, not the budget; failures confined to part of the space never stop it."""
from __future__ import annotations

import json
import re
import shutil
from typing import Any, Mapping

import numpy as np
import pytest

from pytest_autotune.engine.evaluator import Evaluator
from pytest_autotune.engine.systematic import normalize
from pytest_autotune.engine.tuner import TuneError, tune
from pytest_autotune.results import FailureKind, Measurement
from pytest_autotune.space import SearchSpace
from pytest_autotune.strategies import make_strategy

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="the C runner needs gcc")
PARAMS = {"UNROLL": [1, 2, 4, 8], "BLOCK": [16, 32, 64, 128], "ORDER": ["ijk", "kji"]}


def test_normalize_blanks_values_paths_and_numbers() -> None:
    a = normalize("$ gcc -DUNROLL=2 -DORDER=ijk -o /tmp/autotune-c-x1/ab12.so\nkernel.c:3:60: error: expected ';'",
                  {"UNROLL": 2, "ORDER": "ijk"})
    b = normalize("$ gcc -DUNROLL=8 -DORDER=kji -o /tmp/autotune-c-q9/ff00.so\nkernel.c:3:60: error: expected ';'",
                  {"UNROLL": 8, "ORDER": "kji"})
    assert a == b == "$ gcc -DUNROLL=# -DORDER=<v> -o <path> kernel.c:#:#: error: expected ';'"
    assert normalize("error: 'x' undeclared", {}) != normalize("error: 'y' undeclared", {})


def _search(objective: Any, seeds: list[dict[str, Any]] = (), budget: int = 30) -> Evaluator:
    space = SearchSpace(PARAMS)
    evaluator = Evaluator(space, objective, budget, seeds=[space.find(s) for s in seeds], stop_systematic=True)
    evaluator.run(make_strategy("random", space, seed=3))
    return evaluator


def test_the_same_failure_everywhere_stops_after_a_contrast() -> None:
    seen: list[dict[str, Any]] = []

    def objective(params: Mapping[str, Any]) -> Measurement:
        seen.append(dict(params))
        return Measurement.failed(params, FailureKind.COMPILE,
                                  f"/tmp/k{params['BLOCK']}/kernel.c:7:3: error: 'tile' undeclared (UNROLL={params['UNROLL']})")

    evaluator = _search(objective)
    history = evaluator.history
    assert len(history.records) == 5 and len(seen) == 5
    assert history.stop_reason.startswith("systematic failure: the first 4 configurations and a contrast")
    assert re.search(r"same compile error, whatever the parameters: .*kernel.c:7:3: error: 'tile' undeclared "
                     r"\(UNROLL=\d\)$", history.stop_reason)
    # the contrast shares the fewest values with the four before it
    contrast, first = seen[4], seen[:4]
    shared = [sum(c[k] == f[k] for f in first for k in PARAMS) for c in SearchSpace(PARAMS)
              if c not in first]
    assert sum(contrast[k] == f[k] for f in first for k in PARAMS) == min(shared)


def test_failures_confined_to_part_of_the_space_never_stop_it() -> None:
    """The first four fail alike (all with large blocks), the contrast (a small block) runs: search on."""
    def objective(params: Mapping[str, Any]) -> Measurement:
        if params["BLOCK"] >= 64:
            return Measurement.failed(params, FailureKind.LAUNCH, f"{params['BLOCK']} threads exceed the limit of 32")
        return Measurement(params=dict(params), value=1.0 + params["UNROLL"], samples=[1.0 + params["UNROLL"]])

    big = [{"UNROLL": u, "BLOCK": b, "ORDER": o} for u, b, o in
           ((1, 64, "ijk"), (2, 128, "ijk"), (4, 64, "ijk"), (8, 128, "ijk"))]
    evaluator = _search(objective, seeds=big, budget=30)
    assert len(evaluator.history.records) == 30
    assert not evaluator.history.stop_reason.startswith("systematic")
    assert evaluator.history.records[4].params["BLOCK"] < 64 and evaluator.history.records[4].params["ORDER"] == "kji"


def test_a_success_first_never_stops_it() -> None:
    calls = iter(range(1000))

    def objective(params: Mapping[str, Any]) -> Measurement:
        if next(calls) == 0:
            return Measurement(params=dict(params), value=1.0, samples=[1.0])
        return Measurement.failed(params, FailureKind.RUNTIME, "segmentation fault")

    assert len(_search(objective, budget=12).history.records) == 12


SYNTAX_ERROR_C = r"""
void scale(float *out, const float *a, int n) {
    for (int i = 0; i < n; i += UNROLL) { out[i] = BLOCK * a[i] }
}
"""


@needs_gcc
def test_a_c_kernel_with_a_syntax_error_stops_after_a_few_configurations() -> None:
    from pytest_autotune.runners import make_runner
    from pytest_autotune.execution.kernel import KernelSpec

    a = np.ones(256, np.float32)
    spec = KernelSpec(source=SYNTAX_ERROR_C, kernel_name="scale", problem_size=256,
                      args=[np.zeros_like(a), a, np.int32(256)], lang="c")
    with make_runner(spec, isolate=False) as runner, pytest.raises(TuneError) as info:
        tune(runner, params=PARAMS, budget=32, seed=1)
    assert len(info.value.history.records) == 5
    assert str(info.value).startswith("stopped after 5 evaluations (compile: 5): systematic failure: ")
    assert re.search(r"kernel.c:3:\d+: error: expected .;. before .}. token$", str(info.value))


@needs_gcc
def test_the_report_row_is_failed_with_the_one_message(pytester: pytest.Pytester) -> None:
    (pytester.path / "broken.c").write_text(SYNTAX_ERROR_C)
    pytester.makepyfile(test_broken='''
import numpy as np
import pytest

@pytest.mark.tune(params={"UNROLL": [1, 2, 4, 8], "BLOCK": [16, 32, 64, 128]}, budget=16)
def test_broken(autotune):
    a = np.ones(256, np.float32)
    autotune.kernel("broken.c", "scale", 256, [np.zeros_like(a), a, np.int32(256)])
''')
    pytester.makeini("[pytest]\n")
    result = pytester.runpytest_subprocess("-p", "no:randomly", "--autotune", "--autotune-report=r.json")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*autotune: test_broken.py::test_broken::scale: stopped after 5 evaluations "
                                 "(compile: 5): systematic failure: *error: expected*"])
    (row,) = json.loads((pytester.path / "r.json").read_text())["kernels"]
    assert row["status"] == "failed" and row["evaluations"] == 5 and row["budget"] == 16
    assert "systematic failure" in row["message"] and "error: expected" in row["message"]
