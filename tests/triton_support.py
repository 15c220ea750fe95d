"""What the Triton tests share: Triton and torch are present, or the test fails where the test extra installs them.

The test extra pins triton and a CPU torch on Linux x86-64 (the platforms with wheels, see pyproject.toml),
and the plugin runs Triton's interpreter there when no GPU is present, so CI tunes Triton kernels for real.
There (or under CI, ``$CI`` set) a missing Triton or torch is a failure, so a broken install cannot pass as
a green run; elsewhere the tests skip with the reason.
"""
from __future__ import annotations

import importlib.util
import os
import platform
import sys

import pytest


def installed_by_test_extra() -> bool:
    """Whether ``pip install -e '.[test]'`` installs triton and torch here (their wheels' platforms)."""
    return sys.platform.startswith("linux") and platform.machine() == "x86_64"


def require_triton() -> None:
    """Skip without triton/torch; fail instead where the test extra installs them, or under CI."""
    missing = [m for m in ("triton", "torch") if importlib.util.find_spec(m) is None]
    if not missing:
        return
    message = f"needs {' and '.join(missing)}; pip install -e '.[test]' installs them (Linux x86-64)"
    if installed_by_test_extra() or os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message, allow_module_level=True)


def interpreter() -> bool:
    """Kernels run in Triton's interpreter in this process (no GPU, or TRITON_INTERPRET set)."""
    from pytest_autotune.backends.triton_kernel import interpreter_requested

    return interpreter_requested()


def expected_lockfile() -> str:
    """The lockfile the triton runner writes here: the interpreter's, else the GPU's."""
    from pytest_autotune.lock.lookup import _triton_slug

    slug = _triton_slug()
    assert slug, "triton and torch are installed but no Triton device was found"
    return f"{slug}.json"
