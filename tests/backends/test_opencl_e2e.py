"""The opencl runner through the plugin (pytester inner sessions) on the CPU OpenCL device (PoCL):
an OpenCL kernel tunes with the race check, verifies, locks into its own opencl-* lockfile and gates;
--autotune-devices picks the OpenCL device of each pytest-xdist worker."""
from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
from opencl_support import PAIRS_CL, oclgrind  # noqa: F401  (fixture)

# As in test_plugin_e2e: keep one copy of these modules across the inner sessions pytester runs.
for _name in ("multiprocessing.heap", "multiprocessing.sharedctypes", "multiprocessing.forkserver",
              "multiprocessing.popen_forkserver", "pytest_autotune.backends.opencl_runner",
              "pytest_autotune.backends.oclgrind", "scipy.stats"):
    importlib.import_module(_name)

PAIRS_TEST = '''
import numpy as np
import pytest

N = 4096


# microsecond kernels on a shared CPU: the tolerance keeps this about the plumbing, not the noise
@pytest.mark.tune(params={"block_size_x": [2, 4, 8, 16, 32, 64]}, strategy="brute_force", tolerance=5.0,
                  measure={"warmup": 0, "min_iterations": 5, "max_iterations": 5})
def test_pairs(autotune):
    a = np.linspace(0, 1, N, dtype=np.float32)
    expected = (0.5 * (a + a[np.arange(N) - np.arange(N) % 2])).astype(np.float32)
    result = autotune.kernel("pairs.cl", "pairs", N, [np.zeros_like(a), a], expected=[expected, None],
                             check=CHECK)
    assert result.params["block_size_x"] in (32, 64)
'''


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("COLUMNS", "400")  # a wide terminal: the summary table keeps whole test ids
    pytester.makeini("[pytest]\n")
    pytester.makefile(".cl", pairs=PAIRS_CL)
    return pytester


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-rs", "-p", "no:unraisableexception", "-p", "no:hypothesispytest", *args)


def the_lockfile(pytester: pytest.Pytester) -> tuple[Path, dict]:
    files = sorted((pytester.path / "autotune.lock").glob("*.json"))
    assert len(files) == 1, files
    return files[0], json.loads(files[0].read_text())


def test_opencl_kernel_tunes_with_the_race_check_locks_and_gates(project: pytest.Pytester, oclgrind) -> None:
    project.makepyfile(test_pairs=PAIRS_TEST.replace("CHECK", '"races"'))
    result = run(project, "--autotune")
    result.assert_outcomes(passed=1)
    path, lock = the_lockfile(project)
    assert path.name.startswith("opencl-pocl-") and lock["device"]["kind"] == "opencl"
    entry = lock["entries"]["test_pairs.py::test_pairs::pairs"]
    assert entry["runner"] == "opencl" and entry["params"]["block_size_x"] in (32, 64)
    assert entry["evaluations"]["failed"] == {"race": 4} and entry["evaluations"]["total"] == 6
    assert all(u["params"]["block_size_x"] in (32, 64) for u in entry["runners_up"])  # no racing runner-up
    result.stdout.re_match_lines([r"test_pairs.py::test_pairs::pairs\s+tune\s+first lock\s.*race:4"])
    locked = path.read_bytes()

    result = run(project)  # the gate: the locked winner is checked, verified and re-timed
    result.assert_outcomes(passed=1)
    result.stdout.re_match_lines([r"test_pairs.py::test_pairs::pairs\s+gate\s+(pass|faster)\s"])
    assert path.read_bytes() == locked


@pytest.mark.slow  # an xdist worker starts its own interpreter
def test_autotune_devices_selects_the_opencl_device_of_each_worker(project: pytest.Pytester, oclgrind) -> None:
    pytest.importorskip("xdist")
    project.makepyfile(test_pairs=PAIRS_TEST.replace('"block_size_x": [2, 4, 8, 16, 32, 64]', '"block_size_x": [32]')
                       .replace("CHECK", "None"))
    # Oclgrind is never chosen by default; naming it in --autotune-devices makes the worker time on it.
    result = run(project, "-n", "1", "--autotune", "--autotune-devices=Oclgrind")
    result.assert_outcomes(passed=1)
    path, lock = the_lockfile(project)
    assert path.name == "opencl-oclgrind-simulator.json", path.name
    assert lock["device"]["properties"]["platform"] == "Oclgrind"
