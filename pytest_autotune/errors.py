"""Exceptions of the runner layer.

Two families, kept apart on purpose: a *user* mistake (a malformed spec, an
unknown parameter name in an expression, a missing backend) raises and stops
the tuning run loudly; a *configuration* the device cannot run is an ordinary
outcome, recorded as a failed :class:`~pytest_autotune.results.Measurement`.
"""
from __future__ import annotations


class AutotuneError(Exception):
    """The root of every error pytest-autotune raises: ``except AutotuneError`` catches the plugin's own
    errors (bad input, a lock that cannot be used, a backend missing) and nothing else."""


class SpecError(AutotuneError, ValueError):
    """The kernel specification or a runner option is wrong (raised, never recorded)."""


class BackendUnavailable(AutotuneError, RuntimeError):
    """The requested runner cannot work here (library, compiler or device missing)."""


class InvalidConfiguration(AutotuneError):
    """A configuration the device cannot run; recorded as ``FailureKind.INVALID``.

    Raise it from a ``callable`` runner's ``launch`` to reject a configuration
    without it counting as a crash.
    """


class ArtefactUnusable(AutotuneError):
    """A compile pool's artefact (a cubin) that the device refused to load, with the driver's error.

    Raised by an executor's ``load``; the executor then compiles the configuration inline and marks
    the measurement ``extra["fallback"]`` with the error, so a compile-ahead pipeline that is not in
    use (an NVRTC newer than the driver) shows in the record and the report instead of passing silently.
    """
