"""The lock-and-gate lifecycle without pytest: a kernel call tuned and locked, gated, refused, not gated,
each decided as a typed Outcome (the fixture only maps it to pytest). Recorded measurements (the replay
runner) make every verdict exact."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_autotune.lifecycle import Action, Host, Kernels, Mode, Outcome, Status, SummaryRow
from pytest_autotune.lock.lockfile import read_lockfile

PARAMS = {"block_size_x": [32, 64, 128, 256], "tile": [1, 2, 4]}


def recording(path: Path, scale: float = 1.0) -> Path:
    """A Kernel Tuner cache of 12 configurations, optimum (128, 2) at 1.0 ms, 7 runs each."""
    cache = {}
    for bx in PARAMS["block_size_x"]:
        for tile in PARAMS["tile"]:
            t = scale * (1.0 + abs(bx - 128) / 128 + 0.3 * (tile - 2) ** 2)
            cache[f"{bx},{tile}"] = {"block_size_x": bx, "tile": tile, "time": t,
                                     "times": [t * (1 + 0.01 * k) for k in range(-3, 4)]}
    path.write_text(json.dumps({"device_name": "Fake GPU 9000", "kernel_name": "fake", "tune_params": PARAMS,
                                "tune_params_keys": list(PARAMS), "cache": cache}))
    return path


def kernels(tmp_path: Path, mode: str | None = None, lines: list[str] | None = None, **options: Any) -> Kernels:
    host = Host("bench/fake.py", say=(lines.append if lines is not None else lambda line: None))
    return Kernels.create("bench/fake.py", params=PARAMS, strategy="brute_force", mode=mode,
                          lockdir=tmp_path / "autotune.lock", scratch_dir=tmp_path / "scratch", host=host, **options)


def test_a_tuning_locks_the_winner_and_the_gate_passes_it(tmp_path: Path) -> None:
    data = recording(tmp_path / "fake.json")
    tuned = kernels(tmp_path, mode="all").replay(data, name="fake")
    assert tuned.action is Action.PASS and tuned.status is Status.FIRST_LOCK
    assert tuned.result.params == {"block_size_x": 128, "tile": 2} and tuned.row.mode is Mode.TUNE
    [path] = (tmp_path / "autotune.lock").glob("*.json")
    entry = read_lockfile(path).entries["bench/fake.py::fake"]
    assert entry.params == {"block_size_x": 128, "tile": 2} and entry.test == "bench/fake.py"

    gated = kernels(tmp_path).replay(data, name="fake")
    assert gated.action is Action.PASS and gated.status is Status.PASS and gated.row.mode is Mode.GATE
    assert gated.row.locked_samples == entry.samples and gated.result.gate.verdict == "pass"


def test_a_slower_kernel_is_a_regression_with_its_message(tmp_path: Path) -> None:
    kernels(tmp_path, mode="all").replay(recording(tmp_path / "fake.json"), name="fake")
    slower = kernels(tmp_path).replay(recording(tmp_path / "slow.json", scale=3.0), name="fake")
    assert slower.action is Action.FAIL and slower.status is Status.REGRESSION and slower.result is None
    assert "slower" in slower.message and slower.row.change_pct == pytest.approx(200.0, rel=0.05)


def test_no_entry_skips_or_fails_by_the_missing_policy(tmp_path: Path) -> None:
    data = recording(tmp_path / "fake.json")
    skipped = kernels(tmp_path).replay(data, name="fake")
    assert skipped.action is Action.SKIP and skipped.status is Status.MISSING
    assert "no lock entry for 'bench/fake.py::fake'" in skipped.message
    failed = kernels(tmp_path, missing="fail").replay(data, name="fake")
    assert failed.action is Action.FAIL and failed.status is Status.MISSING


def test_an_entry_outside_the_space_is_refused_and_re_tuned_by_a_tuning(tmp_path: Path) -> None:
    data = recording(tmp_path / "fake.json")
    kernels(tmp_path, mode="all").replay(data, name="fake")
    [path] = (tmp_path / "autotune.lock").glob("*.json")
    lock = json.loads(path.read_text())
    lock["entries"]["bench/fake.py::fake"]["params"]["tile"] = 3  # not a value of the space
    path.write_text(json.dumps(lock))
    before = path.read_bytes()
    refused = kernels(tmp_path).replay(data, name="fake")
    assert refused.action is Action.FAIL and refused.status is Status.REFUSED
    assert "params.tile = 3 is not a value of the marker's space" in refused.message
    assert path.read_bytes() == before
    lines: list[str] = []
    retuned = kernels(tmp_path, mode="all", lines=lines).replay(data, name="fake")
    assert retuned.action is Action.PASS and any("tuning it afresh" in line for line in lines)
    assert read_lockfile(path).entries["bench/fake.py::fake"].params["tile"] == 2


def test_a_kernel_name_used_twice_fails_and_bad_arguments_fail_at_the_call(tmp_path: Path) -> None:
    data = recording(tmp_path / "fake.json")
    k = kernels(tmp_path, mode="all")
    assert k.replay(data, name="fake").action is Action.PASS
    twice = k.replay(data, name="fake")
    assert twice.action is Action.FAIL and twice.traceback and "used twice" in twice.message
    missing = k.replay(tmp_path / "nothing.json")
    assert missing.action is Action.FAIL and missing.row is None and "autotune.replay(" in missing.message
    assert k.function("not callable").action is Action.FAIL  # type: ignore[arg-type]


def test_the_summary_row_is_a_typed_record_that_keeps_only_what_it_was_given() -> None:
    row = SummaryRow.make("t.py::t", "k", Mode.GATE, Status.PASS, time_ms=1.5, p_value=None)
    assert row.as_dict() == {"test": "t.py::t", "kernel": "k", "mode": "gate", "status": "pass", "time_ms": 1.5,
                             "p_value": None}
    with pytest.raises(TypeError):
        SummaryRow.make("t", "k", Mode.GATE, Status.PASS, no_such_field=1)
    assert Outcome.skipped("why").status is None


def test_options_are_checked_where_they_are_given() -> None:
    with pytest.raises(ValueError, match="mode='often'"):
        Kernels.create("t", params=PARAMS, mode="often")
    with pytest.raises(ValueError, match="missing='ignore'"):
        Kernels.create("t", params=PARAMS, missing="ignore")
    with pytest.raises(ValueError, match="static='strict'.*fail-on-worse"):
        Kernels.create("t", params=PARAMS, static="strict")
    assert Kernels.create("t", params=PARAMS, static="warn").options.static == "warn"
    from pytest_autotune.lifecycle import MarkerError

    with pytest.raises(MarkerError) as info:
        Kernels.create("t", params=PARAMS, tolerance=-1)
    assert info.value.argument == "tolerance"
    with pytest.raises(MarkerError) as info:
        Kernels.create("t", params=PARAMS, restrictions=["no_such_name > 1"])
    assert info.value.argument == "restrictions"
    with pytest.raises(MarkerError) as info:
        Kernels.create("t", params={"x": []})
    assert info.value.argument == "params"


def test_the_script_entry_points_are_importable_from_the_package_beside_its_gate_subpackage() -> None:
    import pytest_autotune.gate.verdict  # noqa: F401  (the subpackage pytest_autotune.gate, loaded first)
    from pytest_autotune import Kernels as K, TuneOptions, gate_kernel

    assert callable(gate_kernel) and K is Kernels and TuneOptions().budget == 200
