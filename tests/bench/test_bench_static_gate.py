"""benchmarks/bench_static_gate.py: its edits apply to the committed kernels, and one kernel end to end (NVRTC)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
for path in (ROOT, ROOT / "example_project" / "src"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from benchmarks import bench_static_gate as bench  # noqa: E402
from pytest_autotune.backends.nvrtc import nvrtc_unavailable_reason  # noqa: E402


def nvdisasm_missing() -> str | None:
    try:
        from pytest_autotune.static.disasm import find_nvdisasm

        find_nvdisasm()
    except Exception as exc:  # noqa: BLE001 - BackendUnavailable, or no cuda-pathfinder
        return str(exc)
    return None


def test_every_edit_changes_what_it_says_on_the_committed_kernels() -> None:
    """A text edit whose pattern is gone from a kernel would silently compile the lock's source: each must apply."""
    seen = set()
    for case in bench.cases():
        for edit, how in case.edits:
            if isinstance(how, str):
                assert how.startswith("n/a: ")
                continue
            variant = how(case)
            seen.add((case.base, edit.key))
            if edit.kind == "copy":
                assert variant.code == case.code and variant.params is None
            elif variant.params is not None:  # a configuration edit
                assert variant.params != bench.LOCKED[case.base] and variant.code is None
            elif variant.options is not None:
                assert variant.options and variant.code is None
            elif edit.key.startswith("header"):
                assert variant.code == case.code and variant.headers != case.headers
            else:
                assert variant.code is not None and variant.code != case.code, (case.kernel, edit.key)
    assert {("matmul", "spill_large"), ("softmax", "num_warps_down"), ("vector_add", "header_code")} <= seen


def test_an_edit_pattern_that_is_not_there_is_an_error() -> None:
    with pytest.raises(AssertionError, match="found 0 times"):
        bench.replace("int x;", "float y;", "double y;")


@pytest.mark.skipif(bool(nvrtc_unavailable_reason() or nvdisasm_missing()),
                    reason=f"needs NVRTC and nvdisasm: {nvrtc_unavailable_reason() or nvdisasm_missing()}")
def test_vector_add_on_sm_90(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "static_gate.json"
    assert bench.main(["--only", "vector_add", "--arch", "sm_90", "--compilers", "nvrtc", "--timed",
                       "--json", str(out)]) == 0
    table = capsys.readouterr().out
    assert "comments + blank lines" in table and "edits that do not apply" in table
    doc = json.loads(out.read_text())
    rows = {(r["kernel"], r["edit"]): r for r in doc["rows"]}
    assert rows["vector_add", "comment"]["verdict"] == rows["vector_add", "copy"]["verdict"] == "identical"
    assert rows["vector_add (header)", "header_comment"]["verdict"] == "identical"
    spill = rows["vector_add", "spill"]
    assert spill["verdict"] == "worse" and spill["regression"] and "local memory" in spill["deltas"]
    assert rows["vector_add (header)", "header_code"]["verdict"] in ("changed", "worse")
    timed = bench.NO_GPU if bench.gpu_reason() else "not run"  # this version never times on a GPU
    assert all(r["timed"] == timed for r in doc["rows"])
    assert any(s["edit"] == "wider tile" for s in doc["not_applicable"])
    summary = doc["summary"]
    assert summary["comment_only_identical"] == [2, 2] and summary["regressions_caught"] == [1, 1]
    assert summary["check_seconds"]["n"] == len(doc["rows"])
