"""pytest-autotune: auto-tune GPU kernels inside a project's own test suite.

The engine (``space``, ``strategies``, ``runners``, ``measure``, ``verify``,
``lockfile``) is usable from plain Python; the pytest plugin is one client.
"""
__version__ = "0.1.0"
