"""What the summary says is what the lock holds, and it reads on an 80-column CI log (issue 40): every row names
its test, nothing is cut, and a kept lock's timing now is not dressed as a regression."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="the C runner needs gcc")

MATMUL_C = r"""
void matmul(float *out, const float *in, int n) {
    for (int i = 0; i < n; i += BLOCK_SIZE_I * BLOCK_SIZE_J * UNROLL_FACTOR) out[i] = in[i] * 2.0f;
}
"""
TEST = '''
import numpy as np
import pytest


@pytest.mark.tune(params={{"BLOCK_SIZE_I": [1], "BLOCK_SIZE_J": [1], "UNROLL_FACTOR": [1]}}, strategy="brute_force")
def {name}(autotune):
    x = np.arange(4096, dtype=np.float32)
    autotune.kernel({source!r}, "matmul", 4096, [np.zeros_like(x), x, np.int32(4096)], expected=[2 * x, None, None])
'''
TESTS = {"test_cpu_kernels": "test_blocked_matmul", "test_cuda_kernels": "test_tiled_matmul",
         "test_opencl_kernels": "test_opencl_tiled_matmul"}  # the example project's three matmuls' names
WINNER = "BLOCK_SIZE_I=1, BLOCK_SIZE_J=1, UNROLL_FACTOR=1"


def _summary(lines: list[str]) -> list[str]:
    start = next(i for i, line in enumerate(lines) if "autotune summary" in line)
    end = next(i for i, line in enumerate(lines) if i > start and re.match(r"=+ \d+ passed", line))
    return lines[start + 1:end]


def _entries(pytester: pytest.Pytester) -> dict:
    (path,) = (pytester.path / "autotune.lock").glob("*.json")
    return json.loads(path.read_text())["entries"]


def test_the_summary_prints_the_locked_median_and_fits_80_and_wide_columns(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PYTEST_AUTOTUNE_CACHE_DIR", str(tmp_path / "c-cache"))
    pytester.makeini("[pytest]\n")
    pytester.makefile(".c", matmul=MATMUL_C)
    pytester.mkdir("tests")
    for stem, name in TESTS.items():
        (pytester.path / "tests" / f"{stem}.py").write_text(TEST.format(name=name, source=str(pytester.path / "matmul.c")))
    ids = {f"tests/{stem}.py::{name}::matmul": f"{stem}::{name}::matmul" for stem, name in TESTS.items()}

    # 1. A first tuning in an 80-column CI log
    monkeypatch.setenv("COLUMNS", "80")
    result = pytester.runpytest("-p", "no:hypothesispytest", "--autotune", "--autotune-report=first.json")
    result.assert_outcomes(passed=3)
    summary = _summary(result.stdout.lines)
    assert max(map(len, summary)) <= 80, "\n".join(summary)
    assert "…" not in "\n".join(summary)
    for short in ids.values():  # each row's own line names its test: the three matmuls are told apart
        assert short in summary, "\n".join(summary)
    assert summary.count(f"    winner: {WINNER}") == 3, "\n".join(summary)  # the winner whole
    entries = _entries(pytester)
    rows = {f"{r['test']}::{r['kernel']}": r for r in json.loads((pytester.path / "first.json").read_text())["kernels"]}
    for key, row in rows.items():
        # the summary's time is the median the lock holds (on a CPU the winner is re-timed beside the probes
        # after the search), and the search's own median is kept beside it
        assert row["time_ms"] == pytest.approx(entries[key]["stats"]["median"], rel=1e-9), (row, entries[key]["stats"])
        assert row["measured_ms"] > 0
    assert "median" in summary[1].split()  # the header says which statistic

    # 2. The same tuning again on a wide terminal: the locked winner (the only configuration) stays
    monkeypatch.setenv("COLUMNS", "400")
    result = pytester.runpytest("-p", "no:hypothesispytest", "--autotune", "--autotune-report=again.json")
    result.assert_outcomes(passed=3)
    summary = _summary(result.stdout.lines)
    entries = _entries(pytester)
    table = [line for line in summary if line.startswith("tests/")]
    assert len(table) == 3, "\n".join(summary)  # one line per kernel, the whole node id, the whole winner
    for key, row in ((f"{r['test']}::{r['kernel']}", r)
                     for r in json.loads((pytester.path / "again.json").read_text())["kernels"]):
        assert row["status"] == "kept lock" and row["time_ms"] == pytest.approx(entries[key]["stats"]["median"], rel=1e-9), row
        assert row["change_kind"] == "now"  # this run's timing against the previous entry: not a verdict
        line = next(line for line in table if line.startswith(key))
        assert WINNER in line and re.search(r"  now [+-]\d+\.\d%  ", line), line
