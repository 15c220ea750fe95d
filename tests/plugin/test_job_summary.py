"""The Markdown job summary (``$GITHUB_STEP_SUMMARY`` or ``--autotune-report-md=PATH``): rendered from the
summary rows, regressions first with their message, cells escaped, appended never overwritten; and a real
run (the replay runner: exact numbers, no GPU) that writes it, read back."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from pytest_autotune.plugin import job_summary
from test_plugin_e2e import REPLAY_TEST, c_cache, fake_recording, project, run  # noqa: F401  (fixtures)

ROWS = [
    {"test": "t.py::test_ok", "kernel": "k1", "mode": "gate", "status": "pass", "params": {"bx": 128},
     "time_ms": 1.01, "change_pct": 1.0, "change_kind": "lock"},
    {"test": "t.py::test_pipe", "kernel": "k|2", "mode": "gate", "status": "REGRESSION", "params": {"bx": 64},
     "time_ms": 1.3, "change_pct": 30.0, "message": "got slower | line one\nline two with ``` fence"},
    {"test": "t.py::test_new", "kernel": "k3", "mode": "gate", "status": "missing", "message": "no lock entry"},
]


def _table(markdown: str) -> list[list[str]]:
    lines = [line for line in markdown.splitlines() if line.startswith("| ")]
    # split on unescaped pipes only
    return [[c.strip() for c in __import__("re").split(r"(?<!\\)\|", line)[1:-1]] for line in lines]


def test_regressions_come_first_with_their_message() -> None:
    md = job_summary.render(ROWS, {"mode": "gate"})
    table = _table(md)
    assert table[0][:7] == ["test", "kernel", "mode", "status", "winner", "median", "vs lock"]
    assert [r[0] for r in table[2:]] == ["t.py::test_pipe", "t.py::test_new", "t.py::test_ok"]
    assert all(len(r) == len(table[0]) for r in table)  # the | in the kernel name stays in its cell
    assert table[2][1] == "k\\|2" and "**REGRESSION**" in table[2][3] and table[2][6] == "+30.0%"
    assert md.startswith("## ❌ autotune: 1 of 3 kernel(s) failed")
    # the message, whole, in a fence longer than the ``` inside it
    assert "````text\ngot slower | line one\nline two with ``` fence\n````" in md
    assert "no lock entry" in md.split("<details>", 1)[1]


def test_a_cell_is_one_line() -> None:
    assert job_summary.cell("a|b\nc\r\nd") == "a\\|b<br>c<br>d"
    assert job_summary.cell("") == "-"


def test_the_static_column_appears_only_with_a_verdict() -> None:
    assert "static" not in _table(job_summary.render(ROWS))[0]
    rows = [*ROWS, {**ROWS[0], "test": "t.py::test_s", "static_verdict": {"verdict": "same SASS"}}]
    table = _table(job_summary.render(rows))
    assert table[0][-1] == "static" and ["same SASS"] == [r[-1] for r in table if r[0] == "t.py::test_s"]


def test_append_never_overwrites(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "summary.md"
    job_summary.append(path, "# first\n")
    job_summary.append(path, "# second\n")
    assert path.read_text() == "# first\n\n# second\n"


def test_target_prefers_the_flag(tmp_path: Path) -> None:
    assert job_summary.target(None, {}) is None
    assert job_summary.target(None, {"GITHUB_STEP_SUMMARY": "/x/s.md"}) == Path("/x/s.md")
    assert job_summary.target("o.md", {"GITHUB_STEP_SUMMARY": "/x/s.md"}) == Path("o.md")


def test_a_run_appends_its_summary_to_github_step_summary(project: pytest.Pytester,  # noqa: F811
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    recording = project.path / "fake_gpu.json"
    recording.write_text(json.dumps(fake_recording()))
    (project.path / "scale.txt").write_text("1.0")
    project.makepyfile(test_replay=REPLAY_TEST)
    summary = project.path / "step_summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    run(project, "--autotune").assert_outcomes(passed=1)
    tuned = summary.read_text()
    assert tuned.startswith("earlier step\n\n## ✅ autotune: 1 kernel(s), none failed")
    (row,) = _table(tuned)[2:]
    assert row[:4] == ["test_replay.py::test_replay", "fake_gpu", "tune", "🔒 first lock"]
    assert row[4] == "block_size_x=128, tile=2" and row[5] == "1 ms"

    # The winner 25 % slower: a regression, first, with the gate's message; plots linked from a file summary.
    recording.write_text(json.dumps(fake_recording({(128, 2): 1.25})))
    monkeypatch.delenv("GITHUB_STEP_SUMMARY")
    result = run(project, "-q", "--autotune-report-md=out/summary.md", "--autotune-plots=out/plots")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["autotune: Markdown summary appended to out/summary.md"])
    md = (project.path / "out" / "summary.md").read_text()
    (row,) = _table(md)[2:]
    assert row[2:4] == ["gate", "❌ **REGRESSION**"] and row[6].startswith("+25.")
    assert "### REGRESSION: `test_replay.py::test_replay::fake_gpu`" in md
    assert "got slower than its lock allows" in md and "re-tune with: pytest --autotune" in md
    if importlib.util.find_spec("matplotlib") is not None:
        plot = project.path / "out" / "plots" / "test_replay.py_test_replay__fake_gpu__samples.png"
        assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert "(plots/test_replay.py_test_replay__fake_gpu__samples.png)" in md
