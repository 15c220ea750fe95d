"""Adding a backend is one module and one registration: a toy backend defined outside the package,
in the inner project below, is registered from its conftest and tuned, locked, looked up and gated end to end.

The toy "kernel language" is a Python expression of the parameters in a ``.toy`` file; its runner evaluates
it as the configuration's time in milliseconds (exact, as a replay is), on a device of its own kind
("toy", its own lockfile), with a device limit (``toy_lanes``) that restrictions may name at collection.
Nothing of the package names the toy backend: suffix, language, runner, device constants, lockfile kind
and detection all come from its record.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_autotune.backends import registry
from pytest_autotune.lock.lookup import clear_cache, locked_params

from tests.plugin.test_plugin_e2e import INNER_ARGS, run_report

TOY_BACKEND = '''
"""A toy backend: the kernel is a Python expression of the parameters, its value the time in ms."""
import numpy as np

from pytest_autotune.backends import Backend, Language
from pytest_autotune.measure.timing import MeasureOptions
from pytest_autotune.results import Measurement
from pytest_autotune.runners.base import Capabilities
from pytest_autotune.execution.device import DeviceInfo

DEVICE = DeviceInfo(model="Toy Device 1", kind="toy", versions={"toy": "1.0"})
TOY = Language("toy", aliases=("toylang",), suffixes=(".toy",), toolchain=lambda: {"toyc": "1.0"})


class ToyRunner:
    name = "toy"
    capabilities = Capabilities(keeps_outputs=True)  # declared: the engine never probes

    def __init__(self, spec, *, measure=None, isolate=None):
        self.spec = spec
        self.measure = MeasureOptions.coerce(measure)
        self.evaluations = 0

    def device(self):
        return DEVICE

    def constants(self):
        return {"toy_lanes": 64}

    def evaluate(self, params, keep_outputs=False):
        self.evaluations += 1
        cost = float(eval(self.spec.code, {"__builtins__": {}}, dict(params)))
        slow = self.spec.source_file.parent / "slow.txt"  # "block factor": one configuration slowed down
        if slow.exists():
            block, factor = slow.read_text().split()
            if params["block"] == int(block):
                cost *= float(factor)
        samples = [cost * (1 + 0.002 * k) for k in range(-3, 4)]
        m = Measurement(dict(params), value=float(np.median(samples)), samples=samples)
        if keep_outputs:
            m.extra["outputs"] = [np.copy(a) for a in self.spec.args]
        return m

    def close(self):
        pass


BACKEND = Backend("toy", ToyRunner, languages=(TOY,), device_kinds=("toy",), constants=("toy_lanes",),
                  lock_kind="toy", detect=lambda: DEVICE.slug, install_hint="nothing to install")
'''

CONFTEST = '''
import toy_backend

from pytest_autotune.backends import register, unregister


def pytest_configure(config):
    register(toy_backend.BACKEND)  # the one registration


def pytest_unconfigure(config):
    unregister("toy")
'''

TEST_TOY = '''
import numpy as np
import pytest


@pytest.mark.tune(params={"block": [16, 32, 48, 64, 96, 256]}, restrictions=["block <= 2 * toy_lanes"],
                  strategy="brute_force", tolerance=0.5)
def test_toy(autotune):
    r = autotune.kernel("cost.toy", "cost", 1, [np.zeros(4, np.float32)])
    assert r.params["block"] in (16, 32, 48, 64, 96)
'''


@pytest.fixture
def toy_project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("COLUMNS", "400")
    monkeypatch.syspath_prepend(str(pytester.path))
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(toy_backend=TOY_BACKEND, conftest=CONFTEST, test_toy=TEST_TOY)
    (pytester.path / "cost.toy").write_text("(block - 48) ** 2 / 256 + 1\n")
    return pytester


def test_a_backend_registered_from_outside_tunes_locks_and_gates(toy_project: pytest.Pytester) -> None:
    # 1. --autotune: the toy backend runs the .toy kernel; the winner is locked in the toy device's lockfile
    result, rows = run_report(toy_project, "--autotune")  # INNER_ARGS, and the JSON report's rows
    result.assert_outcomes(passed=1)
    (row,) = rows.values()
    assert list(rows) == ["test_toy.py::test_toy::cost"] and (row["mode"], row["status"]) == ("tune", "first lock")
    files = sorted((toy_project.path / "autotune.lock").glob("*.json"))
    assert [f.name for f in files] == ["toy-device-1.json"]
    lock = json.loads(files[0].read_text())
    (entry,) = lock["entries"].values()
    assert entry["params"] == {"block": 48}
    assert "toyc" in json.dumps(entry)  # the language's toolchain versions are recorded
    assert registry.get("toy") is None  # the inner session's conftest unregistered it

    # 2. plain pytest: the gate re-times the locked configuration and passes
    result, rows = run_report(toy_project)
    result.assert_outcomes(passed=1)
    row = rows["test_toy.py::test_toy::cost"]
    assert (row["mode"], row["status"]) == ("gate", "pass")

    # 3. the locked configuration alone 4x slower: a regression
    (toy_project.path / "slow.txt").write_text("48 4")
    result = toy_project.runpytest(*INNER_ARGS)
    result.assert_outcomes(failed=1)
    assert "autotune regression: kernel 'cost' in test_toy.py::test_toy got slower" in "\n".join(result.outlines)


def test_a_registered_backend_is_found_by_language_suffix_and_lock_kind(tmp_path: Path) -> None:
    import importlib.util

    spec = importlib.util.spec_from_loader("toy_backend_module", loader=None)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    exec(TOY_BACKEND, module.__dict__)
    from pytest_autotune.lifecycle import DEVICE_CONSTANTS
    from pytest_autotune.runners import KernelSpec, infer_runner, make_runner

    registry.register(module.BACKEND)
    try:
        assert registry.for_suffix(".toy").name == "toy" and registry.language("TOYLANG").name == "toy"
        assert [b.name for b in registry.for_language("toy")] == ["toy"]
        assert "toy_lanes" in registry.device_constants() and "toy_lanes" not in DEVICE_CONSTANTS
        (tmp_path / "k.toy").write_text("block * 2\n")
        kernel = KernelSpec(tmp_path / "k.toy", "k", 1, [])
        assert kernel.lang == "toy" and infer_runner(kernel) == "toy"
        runner = make_runner(kernel)
        assert runner.evaluate({"block": 3}).value == pytest.approx(6.0)
        assert runner.made_with[0] is kernel
        with pytest.raises(ValueError, match="already registered"):
            registry.register(module.BACKEND)
        # locked_params(kind="toy") searches the toy device's lockfile alone
        clear_cache()
        lockdir = tmp_path / "autotune.lock"
        lockdir.mkdir()
        with pytest.raises(Exception, match="toy-device-1"):
            locked_params("k", 1, lockdir, kind="toy")
    finally:
        registry.unregister("toy")
        clear_cache()
    assert registry.language("toy") is None and registry.for_suffix(".toy") is None
    with pytest.raises(ValueError, match="not a device kind"):
        locked_params("k", 1, tmp_path, kind="toy")
