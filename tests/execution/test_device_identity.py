"""Device identity that survives a driver change: OpenCL lockfiles are named by platform vendor
family + hardware, older names are still found, CPU entries record their generation, the gate notes another
one, and a new lockfile beside others of its kind is announced."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from pytest_autotune.lock.devices import cpu_generation_note, find_lockfile, recorded_slug
from pytest_autotune.execution.device import DeviceInfo, cpu_signature
from pytest_autotune.backends.opencl_device import device_identity, identity_model

EXAMPLE_LOCKS = Path(__file__).resolve().parents[2] / "example_project" / "autotune.lock"
LEGACY_OPENCL = "opencl-portable-computing-language-pthread-amd-epyc.json"
needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="the C runner needs gcc")


def slug(platform: str, vendor: str, name: str) -> str:
    family, hardware, _ = device_identity(platform, vendor, name)
    return DeviceInfo(model=identity_model(family, hardware), kind="opencl").slug


def test_two_pocl_builds_on_one_cpu_are_one_device() -> None:
    bundled = slug("Portable Computing Language", "The pocl project", "pthread-AMD EPYC")
    debian = slug("Portable Computing Language", "The pocl project", "pthread-skylake-avx512-AMD EPYC")
    pocl6 = slug("Portable Computing Language", "The pocl project", "cpu-znver5-AMD EPYC")
    assert bundled == debian == pocl6 == "opencl-pocl-amd-epyc"
    assert device_identity("Portable Computing Language", "The pocl project",
                           "pthread-skylake-avx512-AMD EPYC") == ("PoCL", "AMD EPYC", "skylake-avx512")
    # another compiler on the same chip is another lockfile; a GPU's name is kept whole
    assert slug("Intel(R) OpenCL", "Intel(R) Corporation", "AMD EPYC") == "opencl-intel-amd-epyc"
    assert slug("NVIDIA CUDA", "NVIDIA Corporation", "NVIDIA GeForce RTX 3090") == "opencl-nvidia-geforce-rtx-3090"


def test_a_lockfile_under_its_older_name_is_still_found(tmp_path: Path) -> None:
    shutil.copy(EXAMPLE_LOCKS / LEGACY_OPENCL, tmp_path)
    device = json.loads((tmp_path / LEGACY_OPENCL).read_text())["device"]
    assert recorded_slug(device) == "opencl-pocl-amd-epyc"
    assert find_lockfile(tmp_path, "opencl-pocl-amd-epyc") == tmp_path / LEGACY_OPENCL
    assert find_lockfile(tmp_path, "opencl-pocl-intel-xeon") == tmp_path / "opencl-pocl-intel-xeon.json"
    (tmp_path / "opencl-pocl-amd-epyc.json").write_text((tmp_path / LEGACY_OPENCL).read_text())
    assert find_lockfile(tmp_path, "opencl-pocl-amd-epyc") == tmp_path / "opencl-pocl-amd-epyc.json"


def test_cpu_generation_note() -> None:
    zen3 = {"cpu_vendor": "AuthenticAMD", "cpu_family": 25, "cpu_model": 1, "cpu_stepping": 1,
            "l1d_cache": 32768, "l2_cache": 524288, "l3_cache": 33554432}
    zen5 = DeviceInfo("AMD EPYC", "cpu", properties={**zen3, "cpu_family": 26, "cpu_model": 2, "cpu_stepping": 0,
                                                     "l1d_cache": 49152, "l2_cache": 1 << 20})
    assert cpu_generation_note(zen3, zen5) == ("another CPU generation than the lock's (family 25 model 1 -> "
                                               "family 26 model 2, L1D 32 KiB -> 48 KiB, L2 512 KiB -> 1 MiB)")
    assert cpu_generation_note(zen3, DeviceInfo("AMD EPYC", "cpu", properties={**zen3, "cpu_stepping": 2})) == ""
    # the committed example lock records caches only (written before entries recorded their CPU)
    legacy = json.loads((EXAMPLE_LOCKS / "cpu-amd-epyc.json").read_text())["device"]["properties"]
    assert "L1D 32 KiB -> 48 KiB" in cpu_generation_note(legacy, zen5)


def test_cpu_signature_reads_proc_cpuinfo() -> None:
    if not Path("/proc/cpuinfo").exists() or "cpu family" not in Path("/proc/cpuinfo").read_text():
        pytest.skip("no x86 /proc/cpuinfo here")
    signature = cpu_signature()
    assert isinstance(signature["cpu_family"], int) and isinstance(signature["cpu_model"], int)


KERNEL_C = r"""
void twice(float *out, const float *a, int n) {
    for (int i = 0; i < n; i += UNROLL)
        for (int j = 0; j < UNROLL && i + j < n; j++) out[i + j] = 2.0f * a[i + j];
}
"""

KERNEL_TEST = '''
import numpy as np
import pytest

@pytest.mark.tune(params={"UNROLL": [1, 2]}, strategy="brute_force", tolerance=5.0)
def test_twice(autotune):
    a = np.linspace(0, 1, 4096, dtype=np.float32)
    autotune.kernel("twice.c", "twice", 4096, [np.zeros_like(a), a, np.int32(4096)], expected=[2 * a, None, None])
'''


@needs_gcc
def test_cpu_entries_record_their_cpu_and_a_new_lockfile_beside_others_is_named(pytester: pytest.Pytester) -> None:
    (pytester.path / "twice.c").write_text(KERNEL_C)
    pytester.makepyfile(test_twice=KERNEL_TEST)
    pytester.makeini("[pytest]\naddopts = -p no:randomly -p no:cacheprovider\n")
    lockdir = pytester.path / "autotune.lock"
    lockdir.mkdir()
    # another machine's lock: relabelled, so that it is another model whatever CPU runs this test
    other = json.loads((EXAMPLE_LOCKS / "cpu-amd-epyc.json").read_text())
    other["device"].update(model="Other CPU 9000", slug="cpu-other-cpu-9000")
    (lockdir / "cpu-other-machine.json").write_text(json.dumps(other))
    result = pytester.runpytest_subprocess("--autotune")
    result.assert_outcomes(passed=1)
    (written,) = [p for p in lockdir.glob("*.json") if p.name != "cpu-other-machine.json"]
    said = " ".join(line.strip() for line in result.outlines)  # wrapped at the terminal's width
    assert re.search(rf"autotune: started a new lockfile {re.escape(written.name)} for .*; lockfiles of the same "
                     r"kind exist: cpu-other-machine\.json \(Other CPU 9000\)", said), result.outlines
    lock = json.loads(written.read_text())
    (entry,) = lock["entries"].values()
    assert set(entry["cpu"]) >= {"l1d_cache", "l2_cache"}
    assert entry["cpu"] == {k: v for k, v in lock["device"]["properties"].items() if k in entry["cpu"]}

    # the same lock on "another generation": the gate says so in its note (and still gates)
    entry["cpu"] = {**entry["cpu"], "cpu_family": 999, "cpu_model": 99, "cpu_vendor": "GenuineTestCPU",
                    "l1d_cache": 12345}  # a generation no host has
    written.write_text(json.dumps(lock))
    gated = pytester.runpytest_subprocess("--autotune-report=r.json")
    gated.assert_outcomes(passed=1)
    (row,) = json.loads((pytester.path / "r.json").read_text())["kernels"]
    assert row["mode"] == "gate" and "another CPU generation than the lock's (" in row["note"]
    assert "L1D 12345 B -> " in row["note"]
    assert "started a new lockfile" not in gated.stdout.str()
