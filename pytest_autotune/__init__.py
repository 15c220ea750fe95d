"""pytest-autotune: auto-tune GPU kernels inside a project's own test suite.

The engine (``space``, ``strategies``, ``runners``, ``measure``, ``verify``,
``lock``) is usable from plain Python; the pytest plugin is one client.
"""
__version__ = "0.1.0"

__all__ = ["tune", "TuneResult", "__version__"]


def __getattr__(name: str):
    """``tune`` and ``TuneResult`` on first use (importing the package for the pytest plugin stays cheap)."""
    if name in ("tune", "TuneResult"):
        from . import tuner

        return getattr(tuner, name)
    raise AttributeError(f"module 'pytest_autotune' has no attribute {name!r}")
