"""Recorded gate sessions (bench_gate_robust.py --trace) replayed through the gate (benchmarks/replay_gate.py):
the gate as it is gives back each recorded verdict, and a varied rule is judged on the same rounds."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
for folder in (ROOT, ROOT / "benchmarks"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from benchmarks import replay_gate  # noqa: E402
from benchmarks import bench_gate_robust  # noqa: E402
from benchmarks.bench_gate_robust import Recorded, look_ahead, measurement_json, trace_header, trace_line  # noqa: E402
from pytest_autotune.gate import verdict  # noqa: E402
from pytest_autotune.results import Measurement  # noqa: E402
from test_trust_units import _m, _probes  # noqa: E402

LOCK = {"params": {"B": 2}, "samples": _m(1.0).samples, "stats": {"median": 1.0}, "machine": _probes(1.0, 1.0)}


@pytest.fixture(autouse=True)
def _no_round_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verdict, "ROUND_PAUSES_S", (0.0,) * len(verdict.ROUND_PAUSES_S))
    monkeypatch.setattr(verdict, "MORE_ROUND_PAUSES_S", (0.0,) * len(verdict.MORE_ROUND_PAUSES_S))
    monkeypatch.setattr(bench_gate_robust, "LOOK_AHEAD_PAUSES_S", (0.0,))


def _record(scenario: str, kernel_scale: float, machine: float, ahead: int = 0) -> tuple[str, str]:
    """A gate session measured live (synthetic kernel and probes) through the benchmark's recorder, as its trace
    line (with ``ahead`` look-ahead rounds), and the verdict it got."""
    rec = Recorded(lambda: _m(kernel_scale), lambda: _probes(machine, 1.0))
    m = _m(kernel_scale)
    out = verdict.run_gate("k", "bench", LOCK, m, 0.1, 0.01, remeasure=rec.measure, probe=rec.probe)
    cpus = [r["cpu"] for r in out.rounds] + look_ahead(rec, None, len(out.rounds), ahead)
    return trace_line({"run": 0, "kernel": "k", "scenario": scenario, "condition": "quiet"}, m, rec, out,
                      cpus), out.verdict


def _trace(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "t.jsonl"
    path.write_text(trace_header({"k": LOCK}, 0.1, 0.01) + "".join(lines))
    return path


def test_replay_gives_back_every_recorded_verdict_and_judges_a_variant_on_the_same_rounds(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    # x1.5 on a machine whose probes read 1.3x in every round: squared, the machine explains 1.69x
    line_nc, got_nc = _record("env x1.5", 1.5, 1.3)
    line_pass, got_pass = _record("unchanged", 1.0, 1.0)
    line_slow, got_slow = _record("env x3", 3.0, 1.0)
    assert (got_nc, got_pass, got_slow) == ("incomparable", "pass", "slower")
    trace = _trace(tmp_path, line_nc, line_pass, line_slow)
    out = tmp_path / "r.json"
    assert replay_gate.main([str(trace), "--variants", "as-recorded,as-is,exponent=1", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "0 of 3 sessions replayed as recorded differ" in printed
    rows = {(r["variant"], r["scenario"]): r["verdicts"] for r in json.loads(out.read_text())["results"]}
    assert rows[("as-is", "env x1.5")] == {"incomparable": 1}
    assert rows[("exponent=1", "env x1.5")] == {"slower": 1}  # 1.5 / 1.3 = +15 %: beyond the tolerance
    assert rows[("exponent=1", "unchanged")] == {"pass": 1}
    assert verdict.MISMATCH_EXPONENT == 2.0  # the variant's rule is restored after the replay


def test_a_variant_that_needs_rounds_the_session_did_not_take_ends_undecided(tmp_path: Path) -> None:
    line, got = _record("env x1.5", 1.5, 1.0)  # like-for-like rounds: slower after MIN_ROUNDS (6)
    assert got == "slower"
    session, header = replay_gate.load([str(_trace(tmp_path, line))])[0]
    assert len(session["measures"]) == verdict.MIN_ROUNDS
    with replay_gate.patched({"MIN_ROUNDS": verdict.MIN_ROUNDS + 2}):
        assert replay_gate.replay(session, header) == "trace ended"
    with replay_gate.patched({}):
        assert replay_gate.replay(session, header) == "slower"
    # the benchmark's look-ahead rounds (measured after the verdict, for the trace) let that variant decide
    line, got = _record("env x1.5", 1.5, 1.0, ahead=2)
    session, header = replay_gate.load([str(_trace(tmp_path, line))])[0]
    assert len(session["measures"]) == verdict.MIN_ROUNDS + 2 and session["rounds_judged"] == verdict.MIN_ROUNDS
    with replay_gate.patched({"MIN_ROUNDS": verdict.MIN_ROUNDS + 2}):
        assert replay_gate.replay(session, header) == "slower"
    with replay_gate.patched({}):
        assert replay_gate.replay(session, header) == "slower"


def test_replay_reports_a_trace_the_gate_no_longer_agrees_with(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture) -> None:
    line, _ = _record("env x3", 3.0, 1.0)
    doctored = json.loads(line)
    doctored["verdict"] = "pass"
    trace = _trace(tmp_path, json.dumps(doctored) + "\n")
    assert replay_gate.main([str(trace), "--variants", "as-recorded", "--json", str(tmp_path / "r.json")]) == 1
    assert "1 of 1 sessions replayed as recorded differ" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="unknown rule 'exponnent'"):
        replay_gate.parse_variant("exponnent=1")


def test_as_recorded_replays_a_trace_with_the_rules_it_was_recorded_with(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture) -> None:
    """A trace from before ONE_CPU_ROUNDS (its header names no rules): +30 % like-for-like on CPU 0 in every
    round, CPU 1 1.6x slower throughout. Recorded 'incomparable' (like-for-like rounds on one CPU only); the
    gate as it is now calls it a regression once its 20 rounds are used."""
    rounds = len(verdict.ROUND_PAUSES_S) + len(verdict.MORE_ROUND_PAUSES_S)
    session = {"run": 0, "kernel": "k", "scenario": "env x1.3", "condition": "busy2", "verdict": "incomparable",
               "first": measurement_json(_m(1.3)), "rounds_judged": rounds, "cpus": [i % 2 for i in range(rounds)],
               "measures": [measurement_json(_m(2.1 if i % 2 else 1.3)) for i in range(rounds)],
               "probes": [_probes(1.6 if i % 2 else 1.0, 1.0) for i in range(rounds) for _ in "ab"]}
    old_header = json.dumps({"locks": {"k": LOCK}, "tolerance": 0.1, "alpha": 0.01})
    trace = tmp_path / "old.jsonl"
    trace.write_text(old_header + "\n" + json.dumps(session) + "\n")
    out = tmp_path / "r.json"
    assert replay_gate.main([str(trace), "--variants", "as-recorded,as-is", "--json", str(out)]) == 0
    assert "0 of 1 sessions replayed as recorded differ" in capsys.readouterr().out
    rows = {r["variant"]: r["verdicts"] for r in json.loads(out.read_text())["results"]}
    assert rows == {"as-recorded": {"incomparable": 1}, "as-is": {"slower": 1}}
    # a new trace names the rules it was recorded with
    header = json.loads(trace_header({"k": LOCK}, 0.1, 0.01))
    assert header["rules"]["ONE_CPU_ROUNDS"] == verdict.ONE_CPU_ROUNDS
    assert replay_gate.recorded_rules(header)["MISMATCH_EXPONENT"] == verdict.MISMATCH_EXPONENT


def test_recorded_failures_replay_as_failures() -> None:
    m = Measurement.failed({}, replay_gate.FailureKind.RUNTIME, "segfault")
    back = replay_gate.measurement(json.loads(json.dumps(measurement_json(m))))
    assert not back.ok and back.failure == replay_gate.FailureKind.RUNTIME and back.detail == "segfault"
    assert np.isclose(replay_gate.measurement({"value": 1.0, "samples": [1.0, 2.0]}).value, 1.0)


def test_bench_gate_robust_merges_runs_into_one_table_per_cell_and_per_condition(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    def run(path: Path, slower: int, nc: int, rounds: float) -> str:
        rows = [{"kernel": k, "scenario": "env x1.3", "condition": "busy2", "gate": "new", "runs": slower + nc,
                 "verdicts": {"slower": slower, "incomparable": nc}, "fresh_rounds_mean": rounds}
                for k in ("compute", "memory")]
        path.write_text(json.dumps({"results": rows}))
        return str(path)

    out = tmp_path / "merged.json"
    assert bench_gate_robust.main(["--merge", run(tmp_path / "a.json", 40, 4, 8.0), run(tmp_path / "b.json", 5, 1, 2.0),
                                   "--json", str(out)]) == 0
    assert "per condition, kernels pooled" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    cell = next(r for r in doc["results"] if r["kernel"] == "memory")
    assert cell["runs"] == 50 and cell["failures"] == 45 and cell["fresh_rounds_mean"] == 7.28  # (44*8 + 6*2) / 50
    assert doc["per_condition"] == [{"scenario": "env x1.3", "condition": "busy2", "gate": "new",
                                     "verdicts": {"slower": 90, "incomparable": 10}}]
