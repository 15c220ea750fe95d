"""Runners: compile, launch, time and verify one configuration at a time.

``make_runner(spec, runner=None, **options)`` is the one entry point the
tuner and the plugin use. The backends are records in
:mod:`pytest_autotune.backends` (``register(Backend(...))``); ``RUNNERS`` is a
view of them by name (``factory(spec, **options) -> Runner``) and
:func:`register_runner` adds a bare one. Backend libraries (cupy, pycuda,
pyopencl) are imported only inside the process that owns the device.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from collections.abc import Iterator, MutableMapping
from typing import Any, Callable

from .base import Capabilities, Runner, capabilities
from ..backends import registry
from ..errors import BackendUnavailable, InvalidConfiguration, SpecError
from ..execution.kernel import KernelSpec, LocalMemory, instantiated_name, launch_geometry, render_source

RunnerFactory = Callable[..., Runner]

# Where the modules of this package went (issue 37): ``import pytest_autotune.runners.kernel`` and the other
# old paths still work, and name the same module objects as the new paths.
MOVED = {
    **{name: "pytest_autotune.backends." + name for name in (
        "c_runner", "callable_runner", "cuda_arch", "cuda_common", "cuda_toolkit", "cupy_runner", "ncu", "nvrtc",
        "oclgrind", "opencl_device", "opencl_runner", "pycuda_runner", "triton_kernel", "triton_runner")},
    **{name: "pytest_autotune.execution." + name for name in (
        "compile_pool", "device", "executor", "includes", "isolation", "kernel", "remote", "worker",
        "worker_bounds")},
}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``pytest_autotune.runners.<old name>`` -> the module at its new path (imported on first use)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        prefix, _, name = fullname.rpartition(".")
        if prefix != __name__ or name not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: Any) -> Any:
        return importlib.import_module(MOVED[spec.name.rpartition(".")[2]])

    def exec_module(self, module: Any) -> None:
        pass


if not any(isinstance(f, _MovedModules) for f in sys.meta_path):
    sys.meta_path.append(_MovedModules())


class _Runners(MutableMapping[str, RunnerFactory]):
    """The registered backends' runner factories by name (a view of :mod:`pytest_autotune.backends`)."""

    def __getitem__(self, name: str) -> RunnerFactory:
        backend = registry.get(name)
        if backend is None:
            raise KeyError(name)
        return backend.make_runner

    def __setitem__(self, name: str, factory: RunnerFactory) -> None:
        registry.register(registry.Backend(name, factory), replace=True)

    def __delitem__(self, name: str) -> None:
        if registry.unregister(name) is None:
            raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return (b.name for b in registry.backends())

    def __len__(self) -> int:
        return sum(1 for _ in registry.backends())


RUNNERS: MutableMapping[str, RunnerFactory] = _Runners()


def register_runner(name: str, factory: RunnerFactory, *, replace: bool = False) -> None:
    """Make ``make_runner(spec, runner=name)`` call ``factory(spec, **options)`` (a backend with nothing else
    declared; :func:`pytest_autotune.backends.register` declares the rest)."""
    registry.register(registry.Backend(name, factory), replace=replace)


def backend_available(name: str) -> bool:
    """Cheap check (no import, no device access) that a runner's library/compiler exists."""
    backend = registry.get(name)
    return backend is not None and bool(backend.available())


def infer_runner(spec: Any) -> str:
    """Runner name for a spec: the first available backend of its language (CUDA -> cupy, else pycuda;
    OpenCL -> opencl; C/C++ -> c), a callable -> callable."""
    if not isinstance(spec, KernelSpec):
        if callable(spec):
            return "callable"
        raise SpecError(f"cannot pick a runner for {type(spec).__name__}; pass a KernelSpec or a launch callable")
    candidates = registry.for_language(spec.lang)
    if not candidates:
        raise SpecError(f"no backend runs {spec.lang!r} kernels")
    if len(candidates) == 1:  # its own runner says what is missing
        return candidates[0].name
    for backend in candidates:
        if backend.available():
            return backend.name
    raise BackendUnavailable(candidates[0].install_hint or f"no backend for {spec.lang!r} kernels is installed")


def _check_backend_options(spec: Any, backend: registry.Backend) -> None:
    """``check=`` and ``LocalMemory`` arguments mean something to the backends that declare them alone."""
    if not isinstance(spec, KernelSpec):
        return
    name = backend.name
    if spec.check is not None and not backend.checks:
        raise SpecError(f"check={spec.check!r} runs the kernel under Oclgrind, which only the opencl runner "
                        f"can do; the {name!r} runner cannot")
    if not backend.local_memory:
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
    backend = registry.get(name)
    if backend is None:
        raise SpecError(f"unknown runner {name!r}; known: {', '.join(sorted(RUNNERS))}")
    if runner is not None and backend.check_when_named and not backend.available():
        raise BackendUnavailable(f"runner {name!r} is not available here (library or compiler missing)")
    _check_backend_options(spec, backend)
    made = backend.make_runner(spec, **options)
    try:  # how to build it again elsewhere: a cluster device (execution/remote.py)
        made.made_with = (spec, dict(options))  # type: ignore[attr-defined]
    except AttributeError:
        pass
    return made


__all__ = [
    "RUNNERS",
    "BackendUnavailable",
    "Capabilities",
    "InvalidConfiguration",
    "KernelSpec",
    "LocalMemory",
    "Runner",
    "SpecError",
    "backend_available",
    "capabilities",
    "infer_runner",
    "instantiated_name",
    "launch_geometry",
    "make_runner",
    "register_runner",
    "render_source",
]
