"""What the OpenCL tests share: whether a real OpenCL device is here, and a skip that CI never takes.

The test extra installs PoCL (a CPU OpenCL device) and Oclgrind, so CI runs
every OpenCL test for real; a developer machine without them (no Linux x86-64
wheels) skips with the reason. Under CI (``$CI`` set) a missing device is a
failure instead, so a broken install cannot pass as a green run.
"""
from __future__ import annotations

import functools
import os

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
def platforms() -> tuple[str, ...]:
    """Names of the OpenCL platforms that have devices (empty without PyOpenCL or a runtime)."""
    try:
        import pyopencl as cl
    except ImportError:
        return ()
    from pytest_autotune.runners.opencl_device import list_devices

    return tuple(sorted({dev.platform.name.strip() for _, _, dev in list_devices(cl)}))


def require(platform: str, why: str) -> None:
    """Skip (fail under CI) unless ``platform`` is installed."""
    if platform in platforms():
        return
    message = f"needs the {platform} OpenCL platform ({why}); pip install -e '.[test]' installs it"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture
def pocl() -> None:
    require("Portable Computing Language", "PoCL, a CPU OpenCL device")


@pytest.fixture
def oclgrind() -> None:
    require("Portable Computing Language", "PoCL, a CPU OpenCL device")
    require("Oclgrind", "the Oclgrind simulator that checks for races")
