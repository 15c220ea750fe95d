"""What the OpenCL tests share: whether a real OpenCL device is here, and a skip that CI never takes.

The test extra installs PoCL (a CPU OpenCL device) and Oclgrind, so CI runs
every OpenCL test for real. Where their wheels exist (Linux x86-64, the
markers in pyproject.toml) or under CI (``$CI`` set) a missing platform is a
failure, so a broken install cannot pass as a green run; elsewhere the
OpenCL tests skip with the reason.
"""
from __future__ import annotations

import functools
import os
import platform as _platform
import sys

import numpy as np
import pytest

# Pairs of work-items share their left element through local memory. The barrier is skipped for
# work-groups of at most 16 items (a "SIMD width" shortcut): those race, the wider ones do not.
# On a CPU device the items of a group run in order, so the racing configurations still give the
# right answer there. Group sizes are even, so pairs never straddle groups and the expected output
# is the same for every size.
PAIRS_CL = r"""
__kernel void pairs(__global float *out, __global const float *in) {
    __local float tile[block_size_x];
    const int lid = get_local_id(0), gid = get_global_id(0);
    tile[lid] = in[gid];
#if block_size_x > 16
    barrier(CLK_LOCAL_MEM_FENCE);
#endif
    out[gid] = 0.5f * (tile[lid] + tile[lid - lid % 2]);
}
"""
RACING_SIZES, SAFE_SIZES = (2, 4, 8, 16), (32, 64)


def pairs_expected(a: np.ndarray) -> np.ndarray:
    i = np.arange(a.size)
    return (0.5 * (a + a[i - i % 2])).astype(np.float32)


@functools.lru_cache(maxsize=None)
def probed() -> dict[str, str | None]:
    """Each OpenCL platform with devices: ``None`` when one of them builds and runs a kernel, else why not
    (empty without PyOpenCL or a runtime). A PoCL that cannot build a kernel here is no platform."""
    try:
        import pyopencl as cl
    except ImportError:
        return {}
    from pytest_autotune.backends.opencl_device import list_devices, probe_device, unusable_reason

    found: dict[str, str | None] = {}
    for _, _, dev in list_devices(cl):
        name = dev.platform.name.strip()
        if found.get(name, "") is not None:  # not yet seen, or no device of it built so far
            error = probe_device(cl, dev)
            found[name] = None if error is None else unusable_reason(dev, error)
    return found


def platforms() -> tuple[str, ...]:
    """Names of the OpenCL platforms with a device that builds and runs a kernel."""
    return tuple(sorted(name for name, error in probed().items() if error is None))


def installed_by_test_extra() -> bool:
    """Whether ``pip install -e '.[test]'`` installs PoCL and Oclgrind here (their wheels' platforms)."""
    return sys.platform.startswith("linux") and _platform.machine() == "x86_64"


def must_run() -> bool:
    """Whether a missing OpenCL platform is a failure here rather than a skip."""
    return installed_by_test_extra() or bool(os.environ.get("CI"))


def require(platform: str, why: str) -> None:
    """Skip unless ``platform`` is installed; fail instead where the test extra installs it, or under CI."""
    if platform in platforms():
        return
    broken = probed().get(platform)
    message = (f"needs the {platform} OpenCL platform ({why}); " +
               (broken if broken else "pip install -e '.[test]' installs it"))
    if must_run():
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture
def pocl() -> None:
    require("Portable Computing Language", "PoCL, a CPU OpenCL device")


@pytest.fixture
def oclgrind() -> None:
    require("Portable Computing Language", "PoCL, a CPU OpenCL device")
    require("Oclgrind", "the Oclgrind simulator that checks for races")
