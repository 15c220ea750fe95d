"""Hooks a project can implement in its ``conftest.py`` to adapt the plugin."""
from __future__ import annotations

from typing import Any

import pytest


@pytest.hookspec(firstresult=True)
def pytest_autotune_lockfile_name(config: pytest.Config, device: Any) -> str | None:
    """Return the lockfile name (without ``.json``) for ``device`` (a DeviceInfo).

    Default: ``device.slug`` (e.g. ``nvidia-h100-80gb-hbm3``). Return a shared
    name to let several GPU variants share one lockfile, or a finer one to
    split by driver version.
    """
