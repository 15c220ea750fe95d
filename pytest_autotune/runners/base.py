"""The one protocol every runner implements (cupy, pycuda, c, callable, replay)."""
from __future__ import annotations

from typing import Any, Mapping, Protocol, runtime_checkable

from ..results import Measurement


@runtime_checkable
class Runner(Protocol):
    """Compiles, launches, times and verifies one configuration at a time.

    Life cycle: ``constants()`` (device limits handed to the search space as
    restriction constants) -> ``evaluate(params)`` many times -> ``close()``.
    ``evaluate`` never raises for a bad configuration: it returns a failed
    :class:`Measurement` of the right :class:`~pytest_autotune.results.FailureKind`.
    """

    name: str

    def device(self) -> "DeviceInfo": ...

    def constants(self) -> dict[str, Any]: ...

    def evaluate(self, params: Mapping[str, Any]) -> Measurement: ...

    def close(self) -> None: ...


class ProfilingRunner(Runner, Protocol):
    """A runner that can also read hardware performance counters."""

    def profile(self, params: Mapping[str, Any]) -> dict[str, float]: ...


def supports_profiling(runner: object) -> bool:
    return callable(getattr(runner, "profile", None)) and bool(getattr(runner, "can_profile", True))


from .device import DeviceInfo  # noqa: E402  (re-export for type hints)
