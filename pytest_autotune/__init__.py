"""pytest-autotune: auto-tune GPU kernels inside a project's own test suite.

The engine (``space``, ``strategies``, ``runners``, ``measure``, ``engine``,
``lock``) is usable from plain Python; the pytest plugin is one client.
"""
from ._version import __version__

__all__ = ["tune", "TuneOptions", "TuneResult", "gate_kernel", "Kernels", "locked_params", "locked_triton_config", "locked_triton_configs", "use_lock", "__version__"]


def __getattr__(name: str):
    """``tune``, ``TuneResult``, ``gate_kernel``, ``Kernels`` and ``locked_params`` on first use (importing the package for the pytest plugin stays cheap)."""
    if name in ("tune", "TuneOptions", "TuneResult"):
        from .engine import tuner

        return getattr(tuner, name)
    if name in ("gate_kernel", "Kernels"):  # the lock-and-gate lifecycle for scripts and other test runners
        from . import lifecycle

        return getattr(lifecycle, name)
    if name == "locked_params":  # the run-time lookup for shipped code: no pytest, no CUDA library
        from .lock.lookup import locked_params

        return locked_params
    if name in ("locked_triton_config", "locked_triton_configs"):  # the same lookup, as a triton.Config
        from .lock import triton_config

        return getattr(triton_config, name)
    if name == "use_lock":  # an @triton.autotune kernel launches the lock's configuration per key, never tunes
        from .lock.triton_lock import use_lock

        return use_lock
    raise AttributeError(f"module 'pytest_autotune' has no attribute {name!r}")
