"""Runners: compile, launch, time and verify one configuration at a time.

``make_runner(spec, runner=None, **options)`` is the one entry point the
tuner and the plugin use. ``RUNNERS`` maps a name to a factory
``factory(spec, **options) -> Runner``; other runners (``replay``) join with
:func:`register_runner`. Backend libraries (cupy, pycuda, pyopencl) are
imported only inside the process that owns the device.
"""
from __future__ import annotations

import importlib
import importlib.util
import shutil
from typing import Any, Callable

from .base import Runner
from ..errors import BackendUnavailable, InvalidConfiguration, SpecError
from .kernel import KernelSpec, LocalMemory, instantiated_name, launch_geometry, render_source

RunnerFactory = Callable[..., Runner]


def _lazy(module: str, cls: str) -> RunnerFactory:
    """A factory that imports ``module`` (relative to this package, or a full dotted path) on first use."""
    def factory(spec: Any, **options: Any) -> Runner:
        path = module if "." in module else f"{__name__}.{module}"
        return getattr(importlib.import_module(path), cls)(spec, **options)

    factory.__name__ = f"make_{module.rsplit('.', 1)[-1]}"
    return factory


def _make_opencl(spec: Any, **options: Any) -> Runner:
    """The opencl runner; with ``check=`` the one that runs each configuration under Oclgrind first."""
    if isinstance(spec, KernelSpec) and spec.check is not None:
        from .oclgrind import CheckedOpenCLRunner

        return CheckedOpenCLRunner(spec, **options)
    from .opencl_runner import OpenCLRunner

    return OpenCLRunner(spec, **options)


def _make_callable(spec: Any, **options: Any) -> Runner:
    """``make_runner(launch)`` or ``make_runner(None, runner="callable", launch=launch)``."""
    if "launch" in options:
        if spec is not None:
            raise SpecError("pass the launch function either as the spec or as launch=, not both")
        spec = options.pop("launch")
    from .callable_runner import CallableRunner

    return CallableRunner(spec, **options)


RUNNERS: dict[str, RunnerFactory] = {
    "cupy": _lazy("cupy_runner", "CupyRunner"),
    "pycuda": _lazy("pycuda_runner", "PycudaRunner"),
    "c": _lazy("c_runner", "CRunner"),
    "opencl": _make_opencl,
    "triton": _lazy("triton_runner", "TritonRunner"),  # a TritonSpec (@triton.jit kernels; GPU or interpreter)
    "callable": _make_callable,
    # The replay runner answers from recorded spaces on the simulated clock, a layer above the runners: it is
    # named by module path and imported on first use, the one deliberate exception to the layering.
    "replay": _lazy("pytest_autotune.simulation.replay", "ReplayRunner"),  # make_runner(path, runner="replay")
}


def register_runner(name: str, factory: RunnerFactory, *, replace: bool = False) -> None:
    """Make ``make_runner(spec, runner=name)`` call ``factory(spec, **options)``."""
    if name in RUNNERS and not replace:
        raise ValueError(f"a runner named {name!r} is already registered")
    RUNNERS[name] = factory


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def backend_available(name: str) -> bool:
    """Cheap check (no import, no device access) that a runner's library/compiler exists."""
    if name == "cupy":
        return _has_module("cupy")
    if name == "pycuda":
        return _has_module("pycuda") and shutil.which("nvcc") is not None
    if name == "c":
        return shutil.which("gcc") is not None or shutil.which("cc") is not None
    if name == "opencl":
        return _has_module("pyopencl")
    if name == "triton":
        return _has_module("triton") and _has_module("torch")
    return name in RUNNERS


def infer_runner(spec: Any) -> str:
    """Runner name for a spec: CUDA -> cupy (else pycuda), OpenCL -> opencl, C/C++ -> c, a callable -> callable."""
    if not isinstance(spec, KernelSpec):
        if callable(spec):
            return "callable"
        raise SpecError(f"cannot pick a runner for {type(spec).__name__}; pass a KernelSpec or a launch callable")
    if spec.lang == "cuda":
        for name in ("cupy", "pycuda"):
            if backend_available(name):
                return name
        raise BackendUnavailable(
            "this kernel is CUDA, but neither CuPy nor PyCUDA (with nvcc) is installed: "
            "pip install cupy-cuda13x for a CUDA 13 driver, cupy-cuda12x for CUDA 12 (or pycuda)"
        )
    if spec.lang == "opencl":
        return "opencl"
    return "c"


def _check_opencl_only(spec: Any, name: str) -> None:
    """``check=`` and ``LocalMemory`` arguments mean something to the opencl runner alone."""
    if name == "opencl" or not isinstance(spec, KernelSpec):
        return
    if spec.check is not None:
        raise SpecError(f"check={spec.check!r} runs the kernel under Oclgrind, which only the opencl runner "
                        f"can do; the {name!r} runner cannot")
    for i, arg in enumerate(spec.args):
        if isinstance(arg, LocalMemory):
            raise SpecError(f"argument {i} is LocalMemory, an OpenCL __local argument; the {name!r} runner "
                            "has no such thing (CUDA: shared_mem=)")


def make_runner(spec: Any, runner: str | None = None, **options: Any) -> Runner:
    """Build the runner for ``spec`` (a :class:`KernelSpec` or, for ``callable``, a launch function).

    ``runner`` picks by name, else :func:`infer_runner` decides. ``options``
    go to the runner: ``isolate``, ``measure`` (:class:`~pytest_autotune.measure.timing.MeasureOptions`
    or a dict), and backend ones (``device_id``, ``compiler``, ``flags``,
    ``cache_dir``, ``sync``, ``expected``...). Raises BackendUnavailable with
    the reason when the backend cannot work here.
    """
    name = runner or infer_runner(spec)
    try:
        factory = RUNNERS[name]
    except KeyError:
        raise SpecError(f"unknown runner {name!r}; known: {', '.join(sorted(RUNNERS))}") from None
    if runner is not None and name in ("cupy", "pycuda", "c", "opencl") and not backend_available(name):
        raise BackendUnavailable(f"runner {name!r} is not available here (library or compiler missing)")
    _check_opencl_only(spec, name)
    made = factory(spec, **options)
    try:  # how to build it again elsewhere: a cluster device (runners/remote.py)
        made.made_with = (spec, dict(options))  # type: ignore[attr-defined]
    except AttributeError:
        pass
    return made


__all__ = [
    "RUNNERS",
    "BackendUnavailable",
    "InvalidConfiguration",
    "KernelSpec",
    "LocalMemory",
    "Runner",
    "SpecError",
    "backend_available",
    "infer_runner",
    "instantiated_name",
    "launch_geometry",
    "make_runner",
    "register_runner",
    "render_source",
]
