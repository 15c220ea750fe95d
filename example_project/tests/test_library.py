"""The library function the project ships runs the kernel with the parameters its lock holds for this machine."""
import json
import warnings

import numpy as np
import pytest

import example_kernels
from example_kernels import LOCKDIR, MATMUL_DEFAULT, MATMUL_N, blocked_matmul, matmul_reference, rng


def _locked_matmul_for_this_machine():
    """The matmul entry of this machine's lockfile, read directly (None when this CPU was never tuned)."""
    from pytest_autotune.lock.devices import find_lockfile
    from pytest_autotune.execution.device import detect_cpu_device

    # as locked_params finds it: this CPU's lockfile name, or a lockfile whose recorded device is this CPU
    path = find_lockfile(LOCKDIR, detect_cpu_device().slug)
    if not path.exists():
        return None
    entries = json.loads(path.read_text())["entries"]
    return next((e["params"] for e in entries.values() if e.get("kernel") == "matmul"), None)


def test_blocked_matmul_uses_the_locked_parameters(monkeypatch):
    used = []
    run = example_kernels._run_matmul
    monkeypatch.setattr(example_kernels, "_run_matmul", lambda a, b, params: used.append(params) or run(a, b, params))
    a = rng(5).random((MATMUL_N, MATMUL_N), dtype=np.float32)
    b = rng(6).random((MATMUL_N, MATMUL_N), dtype=np.float32)
    locked = _locked_matmul_for_this_machine()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        c = blocked_matmul(a, b)
    np.testing.assert_allclose(c, matmul_reference(a, b), rtol=1e-4, atol=1e-3)
    if locked is not None:
        assert used == [locked]
    else:  # a machine the lock does not know: the default configuration, and a warning saying so
        assert used == [MATMUL_DEFAULT]
        assert any("using the default parameters" in str(w.message) for w in caught)


def test_blocked_matmul_rejects_non_square_input():
    with pytest.raises(ValueError, match="square matrices"):
        blocked_matmul(np.zeros((4, 3), np.float32), np.zeros((3, 4), np.float32))


def test_blocked_matmul_falls_back_to_the_default_without_a_lock(monkeypatch, tmp_path):
    used = []
    run = example_kernels._run_matmul
    monkeypatch.setattr(example_kernels, "_run_matmul", lambda a, b, params: used.append(params) or run(a, b, params))
    monkeypatch.setattr(example_kernels, "LOCKDIR", tmp_path)  # a machine (or checkout) with no lock
    a = rng(7).random((40, 40), dtype=np.float32)
    with pytest.warns(UserWarning, match="no entry for 'matmul'.*using the default parameters"):
        c = blocked_matmul(a, a.T)
    np.testing.assert_allclose(c, matmul_reference(a, a.T), rtol=1e-4, atol=1e-3)
    assert used == [MATMUL_DEFAULT]


def test_blocked_matmul_uses_this_machines_entry_of_the_lock(monkeypatch, tmp_path):
    """Whatever machine runs it: the committed entry, re-filed under this machine's lockfile name with another
    blocking, is what blocked_matmul runs, for the tuned size and (nearest size) for another."""
    from pytest_autotune.execution.device import detect_cpu_device

    # the committed CPU lockfile (recorded on whichever machine tuned it last; any CPU lockfile will do)
    committed = next((lock for lock in (json.loads(p.read_text()) for p in sorted(LOCKDIR.glob("cpu-*.json")))
                      if any(e.get("kernel") == "matmul" for e in lock["entries"].values())), None)
    if committed is None:
        pytest.skip(f"no CPU lockfile in {LOCKDIR} holds a matmul entry (tune first: pytest --autotune)")
    (key, entry), = [(k, e) for k, e in committed["entries"].items() if e.get("kernel") == "matmul"]
    tuned = {"BLOCK_I": 16, "BLOCK_J": 32, "BLOCK_K": 8, "UNROLL": 4, "LOOP_ORDER": "kij"}
    assert tuned != MATMUL_DEFAULT and tuned != entry["params"]
    committed["entries"] = {key: {**entry, "params": tuned}}
    (tmp_path / f"{detect_cpu_device().slug}.json").write_text(json.dumps(committed))
    # on a GPU machine the CUDA lockfile holds tests/test_cuda_kernels.py's "matmul" too: never the C kernel's
    from pytest_autotune.lock import lookup

    monkeypatch.setitem(lookup._DETECTORS, "cuda", lambda: "fake-gpu")
    cuda_entry = {**entry, "params": {"block_size_x": 16, "block_size_y": 16, "tile_size_x": 2, "tile_size_y": 2},
                  "problem": {"size": [MATMUL_N], "args": entry["problem"]["args"]}}
    (tmp_path / "fake-gpu.json").write_text(json.dumps({**committed, "entries": {key: cuda_entry}}))
    monkeypatch.setattr(example_kernels, "LOCKDIR", tmp_path)
    used = []
    run = example_kernels._run_matmul
    monkeypatch.setattr(example_kernels, "_run_matmul", lambda a, b, params: used.append(params) or run(a, b, params))
    a = rng(8).random((MATMUL_N, MATMUL_N), dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the tuned size: no fallback warning
        np.testing.assert_allclose(blocked_matmul(a, a.T), matmul_reference(a, a.T), rtol=1e-4, atol=1e-3)
    small = a[:100, :100]
    with pytest.warns(UserWarning, match="nearest tuned size 192"):
        np.testing.assert_allclose(blocked_matmul(small, small), matmul_reference(small, small), rtol=1e-4, atol=1e-3)
    assert used == [tuned, tuned]
