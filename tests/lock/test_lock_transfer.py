"""Warm start: a device without an entry starts its search from the other devices' winners and runners-up."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_autotune.lock.lockfile import merge_entries, read_lockfile
from pytest_autotune.lock.transfer import WarmStart, candidates_of, interleave, warm_start


def _entry(params: dict, runners_up: list[dict] = (), *, kernel: str = "k", space: str = "S", problem: str = "P",
           size: list | None = None) -> dict:
    return {"kernel": kernel, "test": "t::test", "params": params,
            "stats": {"median": 1.0, "mean": 1.0, "min": 1.0, "iqr": 0.0, "n": 1}, "samples": [1.0],
            "runners_up": [{"params": p, "median": 2.0} for p in runners_up],
            "hashes": {"source": "s", "space": space, "problem": problem}, "problem": {"size": size, "args": []}}


def test_interleave_is_round_robin_without_duplicates() -> None:
    a = [{"x": 1}, {"x": 2}, {"x": 3}]
    b = [{"x": 4}, {"x": 1}]
    assert interleave([a, b]) == [{"x": 1}, {"x": 4}, {"x": 2}, {"x": 3}]
    assert interleave([]) == []


def test_warm_start_takes_the_same_kernel_and_space_from_other_lockfiles(tmp_path: Path) -> None:
    merge_entries(tmp_path / "gpu-a.json", {"t::test::k": _entry({"x": 1}, [{"x": 2}, {"x": 3}]),
                                           "t::test::other": _entry({"x": 9}, kernel="other")}, {"model": "A"})
    merge_entries(tmp_path / "gpu-b.json", {"t::test::k": _entry({"x": 4}, [{"x": 1}])}, {"model": "B"})
    merge_entries(tmp_path / "gpu-c.json", {"t::test::k": _entry({"x": 7}, space="changed")}, {"model": "C"})
    merge_entries(tmp_path / "me.json", {"t::test::k": _entry({"x": 8})}, {"model": "me"})
    (tmp_path / "broken.json").write_text("{")  # unreadable: skipped, the search still runs
    warm = warm_start(tmp_path, tmp_path / "me.json", "k", {"space": "S", "problem": "P"})
    assert warm.devices == ["gpu-a", "gpu-b"]
    assert warm.seeds == [{"x": 1}, {"x": 4}, {"x": 2}, {"x": 3}]
    assert warm.note() == "warm start from 2 devices"
    assert WarmStart([{"x": 1}], ["a"]).note() == "warm start from 1 device" and WarmStart().note() == ""
    assert warm_start(tmp_path / "none", tmp_path / "me.json", "k", {"space": "S"}).seeds == []


def test_warm_start_prefers_the_same_problem_then_the_nearest_size(tmp_path: Path) -> None:
    merge_entries(tmp_path / "gpu-a.json", {
        "t::a[64]::k": _entry({"x": 64}, problem="P64", size=[64]),
        "t::a[4096]::k": _entry({"x": 4096}, problem="P4096", size=[4096]),
        "t::a[1024]::k": _entry({"x": 1024}, problem="P1024", size=[1024]),
    }, {"model": "A"})
    own = tmp_path / "me.json"
    assert warm_start(tmp_path, own, "k", {"space": "S", "problem": "P4096"}).seeds == [{"x": 4096}]
    assert warm_start(tmp_path, own, "k", {"space": "S", "problem": "new"}, {"size": [2000], "args": []}).seeds \
        == [{"x": 1024}]
    assert candidates_of(_entry({"x": 1}, [{"x": 2}])) == [{"x": 1}, {"x": 2}]


# ------------------------------------------------------------------------------------------ end to end (replay)
RECORDING = {  # a Kernel Tuner cache: 12 configurations, the optimum (128, 2) at 1.0 ms
    "device_name": "Fake GPU 9000", "kernel_name": "fake_kernel", "tune_params_keys": ["block_size_x", "tile"],
    "tune_params": {"block_size_x": [32, 64, 128, 256], "tile": [1, 2, 4]},
    "cache": {f"{bx},{tile}": {"block_size_x": bx, "tile": tile, "time": t, "times": [t] * 5}
              for bx in (32, 64, 128, 256) for tile in (1, 2, 4)
              for t in [1.0 + abs(bx - 128) / 128 + 0.3 * (tile - 2) ** 2]},
}
TEST = '''
import pathlib
import pytest

BUDGET = int((pathlib.Path(__file__).parent / "budget.txt").read_text())


@pytest.mark.tune(params={"block_size_x": [32, 64, 128, 256], "tile": [1, 2, 4]}, strategy="random", seed=7,
                  budget=BUDGET)
def test_replay(autotune):
    autotune.replay("fake_gpu.json")
'''
CONFTEST = '''
import pathlib

def pytest_autotune_lockfile_name(config, device):
    return (pathlib.Path(__file__).parent / "device.txt").read_text().strip()
'''
KEY = "test_replay.py::test_replay::fake_gpu"


def _tune_as(pytester: pytest.Pytester, device: str, budget: int) -> dict:
    """Tune as ``device``; the report's row, with ``summary``: the kernel's line of the terminal summary."""
    (pytester.path / "device.txt").write_text(device)
    (pytester.path / "budget.txt").write_text(str(budget))
    result = pytester.runpytest("-p", "no:hypothesispytest", "-p", "no:unraisableexception", "--autotune",
                                "--autotune-report=report.json")
    result.assert_outcomes(passed=1)
    (row,) = json.loads((pytester.path / "report.json").read_text())["kernels"]
    table = result.stdout.str().split("autotune summary", 1)[1]
    row["summary"] = next(line for line in table.splitlines() if "fake_gpu" in line)
    return row


def _configs(entry: dict) -> list[tuple]:
    return [tuple(sorted(p.items())) for p in [entry["params"], *(r["params"] for r in entry["runners_up"])]]


def test_tuning_a_new_device_starts_from_the_other_devices_locks(pytester: pytest.Pytester,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # a terminal wide enough for the summary's whole note
    pytester.makeini("[pytest]\n")
    (pytester.path / "fake_gpu.json").write_text(json.dumps(RECORDING))
    pytester.makepyfile(test_replay=TEST)
    pytester.makeconftest(CONFTEST)
    lockdir = pytester.path / "autotune.lock"

    row = _tune_as(pytester, "gpu-a", 12)  # the whole space: the true ranking
    assert row["note"] == ""  # nothing to start from
    a = read_lockfile(lockdir / "gpu-a.json").entries[KEY]
    assert a["params"] == {"block_size_x": 128, "tile": 2} and len(a["runners_up"]) == 5

    # One evaluation on a new device: it is gpu-a's winner, evaluated first.
    row = _tune_as(pytester, "gpu-b", 1)
    assert row["note"] == "warm start from 1 device" and row["evaluations"] == 1
    assert row["summary"].rstrip().endswith("warm start from 1 device"), row["summary"]
    assert read_lockfile(lockdir / "gpu-b.json").entries[KEY]["params"] == {"block_size_x": 128, "tile": 2}

    # An entry of the same kernel with another search space is no source.
    other_space = dict(a, hashes={**a["hashes"], "space": "0" * 16}, params={"block_size_x": 32, "tile": 1},
                       runners_up=[])
    merge_entries(lockdir / "gpu-x.json", {KEY: other_space}, {"model": "X"})

    # Four evaluations: gpu-a's winner and its first three runners-up (gpu-b's winner is the same configuration).
    row = _tune_as(pytester, "gpu-c", 4)
    assert row["note"] == "warm start from 2 devices"
    assert row["summary"].rstrip().endswith("warm start from 2 devices"), row["summary"]
    assert sorted(_configs(read_lockfile(lockdir / "gpu-c.json").entries[KEY])) == sorted(_configs(a)[:4])

    # A device that has an entry re-tunes from its own lock, not from the others.
    row = _tune_as(pytester, "gpu-c", 4)
    assert "warm start" not in (row["note"] or "")
