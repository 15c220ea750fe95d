"""What the OpenCL tests share: whether a real OpenCL device is here, and a skip that CI never takes.

The test extra installs PoCL (a CPU OpenCL device) and Oclgrind, so CI runs
every OpenCL test for real; a developer machine without them (no Linux x86-64
wheels) skips with the reason. Under CI (``$CI`` set) a missing device is a
failure instead, so a broken install cannot pass as a green run.
"""
from __future__ import annotations

import functools
import os

import pytest


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
