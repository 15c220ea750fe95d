"""The two halves of an evaluation as they run on a Ray cluster (:mod:`pytest_autotune.engine.cluster`).

* :func:`compile_and_ship` is the compile stage (:mod:`.compile_pool`'s
  :class:`~.compile_pool.CompileStage`) run as a Ray task on any CPU of the
  cluster; the artefact it built (a shared library, a cubin) travels back as
  bytes inside a :class:`ShippedArtefact`, since the device that times it may
  be on another machine with another disk.
* :class:`DeviceStage` is the body of one device actor: it rebuilds the
  caller's runner on its node (:class:`RunnerRecipe`) and runs the same
  device stage as a local tuning (load, verify, time, early stop; isolated
  in a worker process for compiled kernels), writing shipped artefacts into
  its own cache first.

Nothing here imports Ray: the engine wraps these in ``ray.remote``, so a
machine without Ray never needs it.
"""
from __future__ import annotations

import os
import socket
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from ..backends import registry
from ..errors import SpecError
from ..measure.timing import EarlyStop
from ..results import Measurement
from ..runners.base import capabilities
from .compile_pool import CompiledArtefact, CompilerProcesses, artefact_cache_dir
from .device import DeviceInfo

__all__ = ["RunnerRecipe", "runner_recipe", "ShippedArtefact", "compile_and_ship", "DeviceStage", "holds_gpu"]


def holds_gpu(runner: Any) -> bool:
    """Whether ``runner``'s device is a CUDA GPU: its actors hold one (``num_gpus=1``); the others a declared
    resource. The backend says so (cupy, pycuda), else the device it reports (Triton on a GPU)."""
    backend = registry.get(runner.name)
    return (backend is not None and backend.gpu) or getattr(runner.device(), "kind", "") == "cuda"


@dataclass
class RunnerRecipe:
    """How a device actor builds the caller's runner: ``make_runner(spec, runner=name, **options)``, or the
    caller's runner object itself where it travels as it is (the replay runner)."""

    name: str
    spec: Any = None
    options: dict[str, Any] = field(default_factory=dict)
    runner: Any = None

    def build(self) -> Any:
        if self.runner is not None:
            return self.runner
        from ..runners import make_runner

        return make_runner(self.spec, runner=self.name, **self.options)


def runner_recipe(runner: Any) -> RunnerRecipe:
    """The recipe of ``runner`` for a device actor; SpecError naming the runner when it cannot travel."""
    made = getattr(runner, "made_with", None)  # set by make_runner
    if made is not None:
        spec, options = made
        return RunnerRecipe(runner.name, spec, dict(options))
    if getattr(runner, "name", None) == "replay":
        charger = getattr(runner, "charger", None)
        if charger is not None:
            raise SpecError("a replay runner on a simulated clock cannot tune on a cluster (the clock is this "
                            "process's); simulate a cluster with Pipeline(..., devices=D) instead")
        return RunnerRecipe("replay", runner=runner)
    raise SpecError(f"the {getattr(runner, 'name', type(runner).__name__)!r} runner cannot be rebuilt on a cluster "
                    "device: build it with pytest_autotune.runners.make_runner(...) (or the autotune fixture)")


@dataclass
class ShippedArtefact:
    """A :class:`~.compile_pool.CompiledArtefact` with its file's bytes, for a device on another machine."""

    artefact: CompiledArtefact
    name: str = ""  # the file's name in the compile node's cache (a content hash): the same name here
    data: bytes | None = None
    node: str = ""  # where it was compiled

    def unpack(self, folder: Path) -> CompiledArtefact:
        """The artefact with its file written into ``folder`` (once: the name is a content hash)."""
        if self.data is None or not self.artefact.ok:
            return self.artefact
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / self.name
        if not path.exists():
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".shipping-")
            with os.fdopen(fd, "wb") as handle:
                handle.write(self.data)
            os.replace(tmp, path)  # atomic: another actor on this node may write the same file
        return replace(self.artefact, path=str(path))


def compile_and_ship(stage: Any, params: Mapping[str, Any]) -> ShippedArtefact | None:
    """Run ``stage.compile(params)`` here (a Ray task) and pack the artefact with its bytes.

    None when the stage raised, as a compile pool does: the device stage then compiles the configuration
    itself and records (or raises) what went wrong.
    """
    processes = CompilerProcesses()
    try:
        artefact = stage.compile(dict(params), processes)
    except Exception:
        return None
    finally:
        processes.close()
    if not artefact.ok or not artefact.path:
        return ShippedArtefact(artefact, node=socket.gethostname())
    path = Path(artefact.path)
    return ShippedArtefact(artefact, path.name, path.read_bytes(), socket.gethostname())


class DeviceStage:
    """One device of a cluster tuning (the body of a Ray actor): the caller's runner, rebuilt on this node."""

    def __init__(self, recipe: RunnerRecipe) -> None:
        self.runner = recipe.build()
        self.node = socket.gethostname()
        self.folder = artefact_cache_dir("shipped")
        self._stops = capabilities(self.runner).stops_early

    def describe(self) -> tuple[DeviceInfo, dict[str, Any], str, int]:
        """(device, restriction constants, host name, process id): what the driver checks before using it."""
        return self.runner.device(), dict(self.runner.constants()), self.node, os.getpid()

    def evaluate(self, params: Mapping[str, Any], shipped: ShippedArtefact | None = None,
                 stop: EarlyStop | None = None, keep_outputs: bool = False) -> Measurement:
        """Load (a shipped artefact) or compile, verify and time ``params``; never raises for a bad one."""
        more: dict[str, Any] = {"stop": stop} if stop is not None and self._stops else {}
        if keep_outputs:
            more["keep_outputs"] = True
        if shipped is not None and capabilities(self.runner).compiles_ahead:
            measurement = self.runner.evaluate_compiled(params, shipped.unpack(self.folder), **more)
        else:
            measurement = self.runner.evaluate(params, **more)
        measurement.extra["cluster_device"] = f"{self.node}:{os.getpid()}"  # which device timed it
        return measurement

    def close(self) -> None:
        self.runner.close()
