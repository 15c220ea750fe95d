"""The one protocol every runner implements (cupy, pycuda, c, opencl, triton, callable, replay), and the
capabilities a runner declares for the optional parts of it."""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Protocol, runtime_checkable

from ..results import Measurement

if TYPE_CHECKING:
    from ..measure.timing import EarlyStop, MeasureOptions
    from ..execution.compile_pool import CompiledArtefact, CompileStage


@dataclass(frozen=True)
class Capabilities:
    """What a runner can do beyond ``device``/``constants``/``evaluate(params)``/``close``, declared by the
    runner (its ``capabilities`` attribute) so that the engine asks instead of probing:

    * ``keeps_outputs``: ``evaluate(params, keep_outputs=True)`` returns the outputs in ``extra["outputs"]``;
    * ``stops_early``: ``evaluate(params, stop=EarlyStop(...))`` ends hopeless timings early;
    * ``compiles_ahead``: ``compile_stage()``, ``start_compile_ahead(workers)``, ``prefetch(configurations)``
      and ``stop_compile_ahead()`` (:mod:`.compile_pool`) and ``evaluate_compiled(params, artefact, ...)``,
      the device stage alone for an artefact compiled elsewhere (a cluster's compile task);
    * ``picks_ready``: ``first_ready(configurations)`` says which pending one to measure next;
    * ``profiles``: ``can_profile`` and ``profile(params)`` (hardware counters, :class:`ProfilingRunner`).
    """

    keeps_outputs: bool = False
    stops_early: bool = False
    compiles_ahead: bool = False
    picks_ready: bool = False
    profiles: bool = False


NONE = Capabilities()
HOSTED = Capabilities(keeps_outputs=True, stops_early=True, compiles_ahead=True, picks_ready=True)


@runtime_checkable
class Runner(Protocol):
    """Compiles, launches, times and verifies one configuration at a time.

    Life cycle: ``constants()`` (device limits handed to the search space as
    restriction constants) -> ``evaluate(params)`` many times -> ``close()``.
    ``evaluate`` never raises for a bad configuration: it returns a failed
    :class:`Measurement` of the right :class:`~pytest_autotune.results.FailureKind`.

    A runner declares what it can do beyond that as a class attribute ``capabilities`` (a
    :class:`Capabilities`; the engine reads it through :func:`capabilities`); ``evaluate``'s optional
    arguments and the methods of :class:`CompilingRunner`, :class:`ReadyPickingRunner` and
    :class:`ProfilingRunner` exist where it declares them. ``measure`` (its
    :class:`~pytest_autotune.measure.timing.MeasureOptions`) is read where present (:func:`measure_of`).
    """

    name: str

    def device(self) -> "DeviceInfo": ...

    def constants(self) -> dict[str, Any]: ...

    def evaluate(self, params: Mapping[str, Any], keep_outputs: bool = False,  # keeps_outputs
                 stop: "EarlyStop | None" = None) -> Measurement: ...  # stops_early

    def close(self) -> None: ...


class CompilingRunner(Runner, Protocol):
    """A runner that ``compiles_ahead``: a CPU-only compile stage apart from its device stage."""

    def compile_stage(self) -> "CompileStage | None": ...

    def start_compile_ahead(self, workers: int) -> bool: ...

    def prefetch(self, configurations: list[dict[str, Any]]) -> None: ...

    def stop_compile_ahead(self) -> None: ...

    def evaluate_compiled(self, params: Mapping[str, Any], artefact: "CompiledArtefact", keep_outputs: bool = False,
                          stop: "EarlyStop | None" = None) -> Measurement: ...


class ReadyPickingRunner(Runner, Protocol):
    """A runner that ``picks_ready``."""

    def first_ready(self, configurations: list[dict[str, Any]]) -> int: ...


class ProfilingRunner(Runner, Protocol):
    """A runner that ``profiles``: it can also read hardware performance counters (when ``can_profile``)."""

    can_profile: bool

    def profile(self, params: Mapping[str, Any]) -> dict[str, float]: ...


def capabilities(runner: object) -> Capabilities:
    """The capabilities ``runner`` declares (its ``capabilities`` attribute).

    Every runner of the package declares them. An object of the caller's written before they were declared
    (no ``capabilities``) is read here, once per call and in this one place, as the engine used to read it:
    ``keep_outputs`` and ``stop`` parameters of ``evaluate``, and the optional methods it has."""
    declared = getattr(runner, "capabilities", None)
    if isinstance(declared, Capabilities):
        return declared
    return _undeclared(runner)


def _undeclared(runner: object) -> Capabilities:
    try:
        taken = inspect.signature(runner.evaluate).parameters  # type: ignore[attr-defined]
    except (AttributeError, TypeError, ValueError):
        taken = {}  # type: ignore[assignment]
    anything = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in taken.values())
    has = lambda method: callable(getattr(runner, method, None))  # noqa: E731
    return Capabilities(keeps_outputs=anything or "keep_outputs" in taken, stops_early="stop" in taken,
                        compiles_ahead=has("start_compile_ahead") and has("evaluate_compiled"),
                        picks_ready=has("first_ready"),
                        profiles=has("profile") and bool(getattr(runner, "can_profile", True)))


def measure_of(runner: object) -> "MeasureOptions | None":
    """The runner's measure options (None where it has none)."""
    return getattr(runner, "measure", None)


def supports_profiling(runner: object) -> bool:
    """Whether ``runner`` can read hardware counters now (it ``profiles`` and ``can_profile``: ncu installed,
    a recording with counters)."""
    caps = capabilities(runner)
    if caps is not getattr(runner, "capabilities", None):
        return caps.profiles  # undeclared: can_profile was read with the rest
    return caps.profiles and bool(runner.can_profile)  # type: ignore[attr-defined]


from ..execution.device import DeviceInfo  # noqa: E402  (re-export for type hints)
