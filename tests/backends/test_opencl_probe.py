"""A device that cannot build is no device: the probe, the choice it steers, and what a user on a
host where PyOpenCL's bundled PoCL fails every build (Zen 5: ``unknown target CPU 'generic'``) reads.

The Zen 5 failure is reproduced with a stand-in: a fake ``cl`` module (unit tests), or the real PoCL whose
``Program.build`` raises PoCL's real message (the end-to-end test)."""
from __future__ import annotations

import json
import re
import sys
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from opencl_support import pocl  # noqa: F401  (fixture)
from pytest_autotune.errors import BackendUnavailable
from pytest_autotune.backends import opencl_device
from pytest_autotune.backends.opencl_device import probe_device, select_device

# What PyOpenCL raises on a Zen 5 host for every program PoCL 3.0-rc2 / LLVM 14 builds.
POCL_ZEN5 = ("clBuildProgram failed: BUILD_PROGRAM_FAILURE - clBuildProgram failed: BUILD_PROGRAM_FAILURE - "
             "clBuildProgram failed: BUILD_PROGRAM_FAILURE\n\nBuild on <pyopencl.Device 'pthread-AMD EPYC' on "
             "'Portable Computing Language' at 0x55d0c4b0a2c0>:\n\nerror: unknown target CPU 'generic'\n"
             "note: valid target CPU values are: nocona, core2, penryn, bonnell, atom, silvermont, znver3\n"
             "Device pthread-AMD EPYC failed to build the program\n\n(options: -I /site-packages/pyopencl/cl)")
BUNDLED = "OpenCL 3.0 PoCL 3.0-rc2  Linux, Release, RELOC, LLVM 14.0.6, SLEEF, DISTRO, POCL_DEBUG"


class FakeCL:
    """Just enough of pyopencl for the probe and the choice: devices whose builds fail or work."""

    class Error(Exception):
        pass

    device_type = SimpleNamespace(GPU=4, ACCELERATOR=8, CPU=2)
    mem_flags = SimpleNamespace(WRITE_ONLY=2)

    def __init__(self, *devices: SimpleNamespace) -> None:
        self.devices = devices
        self.builds: list[str] = []

    def get_platforms(self) -> list[Any]:
        platforms: dict[str, list[Any]] = {}
        for d in self.devices:
            platforms.setdefault(d.platform.name, []).append(d)
        return [SimpleNamespace(get_devices=lambda ds=ds: ds) for ds in platforms.values()]

    def Context(self, devices: list[Any]) -> Any:  # noqa: N802 (pyopencl's names)
        return SimpleNamespace(device=devices[0])

    def CommandQueue(self, context: Any) -> Any:  # noqa: N802
        return SimpleNamespace(finish=lambda: None)

    def Program(self, context: Any, source: str) -> Any:  # noqa: N802
        def build(options: Any = None) -> Any:
            self.builds.append(context.device.name)
            if context.device.fails:
                raise FakeCL.Error(POCL_ZEN5)
            return SimpleNamespace()
        return SimpleNamespace(build=build)

    def Kernel(self, program: Any, name: str) -> Any:  # noqa: N802
        return SimpleNamespace(set_args=lambda *a: None)

    def Buffer(self, context: Any, flags: int, size: int) -> Any:  # noqa: N802
        return None

    def enqueue_nd_range_kernel(self, *args: Any) -> None:
        pass

    def enqueue_copy(self, queue: Any, out: np.ndarray, buffer: Any) -> None:
        out[:] = [42, 43]


def device(name: str, *, fails: bool, kind: int = 2, platform: str = "Portable Computing Language",
           version: str = BUNDLED) -> SimpleNamespace:
    vendor = "The pocl project" if platform == "Portable Computing Language" else "A GPU vendor"
    plat = SimpleNamespace(name=platform, version=version, vendor=vendor)
    return SimpleNamespace(name=name, platform=plat, type=kind, fails=fails, int_ptr=id(name) + hash(platform),
                           version="OpenCL 3.0 PoCL HSTR: pthread-x86_64-unknown-linux-gnu-generic")


@pytest.fixture(autouse=True)
def fresh_probe_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(opencl_device, "_probed", {})
    monkeypatch.delenv("PYTEST_AUTOTUNE_DEVICE", raising=False)
    monkeypatch.delenv("PYOPENCL_CTX", raising=False)


def test_no_device_builds_names_the_error_the_versions_and_the_remedy() -> None:
    cl = FakeCL(device("pthread-AMD EPYC", fails=True))
    with pytest.raises(BackendUnavailable) as info:
        select_device(cl)
    text = str(info.value)
    assert text == ("OpenCL device 'pthread-AMD EPYC' (PoCL 3.0-rc2, LLVM 14.0.6) cannot build a kernel: "
                    "error: unknown target CPU 'generic'; install your distribution's PoCL, e.g. "
                    "apt-get install pocl-opencl-icd")


def test_a_failing_device_is_passed_over_while_another_works() -> None:
    gpu = device("Broken GPU", fails=True, kind=4, platform="Vendor GPU")
    cpu = device("pthread-skylake-avx512-AMD EPYC", fails=False)
    cl = FakeCL(gpu, cpu)
    assert select_device(cl) is cpu  # the GPU ranks first, but cannot build
    assert select_device(cl) is cpu
    assert cl.builds == ["Broken GPU", "pthread-skylake-avx512-AMD EPYC"]  # each probed once per process
    with pytest.raises(BackendUnavailable, match=r"device='0:0': OpenCL device 'Broken GPU' .* cannot build a "
                                                 r"kernel: error: unknown target CPU 'generic'; check the OpenCL "
                                                 r"driver of 'Vendor GPU'"):
        select_device(cl, "0:0")  # chosen explicitly: said, never silently replaced


def test_the_real_pocl_device_passes_the_probe(pocl) -> None:
    cl = pytest.importorskip("pyopencl")
    chosen = select_device(cl)
    assert probe_device(cl, chosen) is None


PROJECT_CONFTEST = f'''
import pyopencl

def _zen5_build(self, *args, **kwargs):  # the bundled PoCL on a Zen 5 host: every build fails like this
    raise pyopencl.RuntimeError({POCL_ZEN5!r})

pyopencl.Program.build = _zen5_build
'''

PROJECT_TEST = '''
import numpy as np
import pytest

@pytest.mark.tune(params={"block_size_x": [16, 32, 64]}, budget=3)
def test_scale(autotune):
    a = np.linspace(0, 1, 1024, dtype=np.float32)
    autotune.kernel("scale.cl", "scale", 1024, [np.zeros_like(a), a], expected=[2 * a, None], isolate=False)
'''

SCALE_CL = "__kernel void scale(__global float *o, __global const float *a) { int i = get_global_id(0); o[i] = 2 * a[i]; }"


def test_zen5_user_sees_no_usable_device_and_no_budget_spent(pocl, pytester: pytest.Pytester) -> None:
    """The bundled PoCL failing every build: the kernel is skipped as ``no usable device`` with the first
    build error, PoCL's and LLVM's versions and the remedy, named in NOT TUNED / NOT GATED; nothing failed."""
    pytester.makeconftest(PROJECT_CONFTEST)
    pytester.makepyfile(test_k=PROJECT_TEST)
    (pytester.path / "scale.cl").write_text(SCALE_CL)
    pytester.makeini("[pytest]\naddopts = -p no:randomly -p no:cacheprovider\n")
    for flags, line in ((["--autotune"], "NOT TUNED"), ([], "NOT GATED")):
        result = pytester.runpytest_subprocess("-rs", "--autotune-report=r.json", *flags)
        result.assert_outcomes(skipped=1)
        print(result.stdout.str(), file=sys.stderr)
        out = " ".join(result.stdout.str().split())  # the summary wraps long lines at the terminal's width
        assert (f"autotune: 1 kernel(s) {line}: test_k.py::test_scale::scale (no usable device for this kernel: "
                "OpenCL device 'pthread-") in out
        assert ("cannot build a kernel: error: unknown target CPU 'generic'; install your distribution's PoCL, "
                "e.g. apt-get install pocl-opencl-icd)") in out
        assert re.search(r"OpenCL device 'pthread-[^']+' \(PoCL \d[^,]*, LLVM \d+\.\d+\.\d+\) cannot build", out)
        (row,) = json.loads((pytester.path / "r.json").read_text())["kernels"]
        assert row["status"] == "no device" and "evaluations" not in row
        assert not list(pytester.path.glob("autotune.lock/*.json"))
