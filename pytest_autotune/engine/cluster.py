"""One tuning over many devices and machines, on Ray (``tune(..., cluster="ray")``, ``--autotune-ray``).

Each device is a Ray actor (:class:`~pytest_autotune.execution.remote.DeviceStage`)
holding one GPU (``num_gpus=1``, CUDA runners) or one unit of the declared
custom resource ``autotune_device`` (C, OpenCL and replay runners: declare
as many as the node has devices to time on, ``ray start --resources
'{"autotune_device": 4}'``). It runs the same isolated device stage as a
local tuning. Compiles run as Ray tasks on the cluster's CPUs
(:func:`~pytest_autotune.execution.remote.compile_and_ship`) and their
artefacts travel as bytes, through Ray's object store, to the actor that
times them. Ray does the placing, shipping and failure detection; this
module only keeps the books for one search (:class:`RayFleet`, driven by
:class:`~.fleet.FleetEvaluator`):

* every device must be the same model: the first ones are checked before
  the search (mixed models: :class:`ClusterError` naming them), and a device
  that joins later with another model is refused and reported;
* a node that joins mid-run is used: the fleet polls the cluster's resource
  total and starts an actor for each new device (also a replacement for
  one that died);
* an actor (or its node) that dies mid-evaluation: the evaluation is retried
  once on another device, then recorded as a runtime failure of that
  configuration, never dropped;
* :meth:`RayFleet.close` kills the actors and cancels the compiles (also
  on Ctrl-C: the driver writes no lock), and shuts down a Ray instance it
  started itself.
"""
from __future__ import annotations

import itertools
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Mapping

from ..errors import AutotuneError
from ..errors import BackendUnavailable, SpecError
from ..measure.timing import EarlyStop
from ..results import FailureKind, Measurement
from ..execution.compile_pool import config_key
from ..execution.device import DeviceInfo
from ..runners.base import capabilities, measure_of
from ..execution.remote import DeviceStage, compile_and_ship, holds_gpu, runner_recipe
from .fleet import ClusterRun

__all__ = ["ClusterError", "ClusterSpec", "RayFleet", "SingleDevice", "parse_cluster", "RESOURCE", "check_same_model",
           "tune_on_cluster"]

RESOURCE = "autotune_device"
"""The custom Ray resource one CPU/OpenCL/replay device actor holds (CUDA runners hold a GPU)."""
POLL_S = 0.2  # longest wait inside ray.wait: Ctrl-C and joining nodes are seen this often
GROW_EVERY_S = 1.0  # how often the cluster's resource total is read for joining devices
START_TIMEOUT_S = 300.0  # the first device must answer within this (an actor's runner starts, a GPU initialises)
START_GRACE_S = 3.0  # the others answering within this much more are checked before the search; later ones join
ATTEMPTS = 2  # an evaluation whose device died is retried once on another device


class ClusterError(AutotuneError, RuntimeError):
    """The cluster cannot run this tuning: Ray missing, no device, devices of different models, all lost."""


@dataclass(frozen=True)
class ClusterSpec:
    """Where and on what a tuning runs: ``address`` of a running Ray cluster (None: the one ``RAY_ADDRESS``
    names, the one this process is connected to, else a local instance), ``resource`` of a non-CUDA device,
    ``devices`` (at most this many; None: every one), ``compile_cpus`` per compile task."""

    address: str | None = None
    resource: str = RESOURCE
    devices: int | None = None
    compile_cpus: float = 1.0


def parse_cluster(value: Any) -> ClusterSpec:
    """``"ray"`` (or ``True``, ``"auto"``, ``""``): the cluster Ray finds; an address (``"10.0.0.1:6379"``,
    ``"ray://head:10001"``); or a :class:`ClusterSpec`."""
    if isinstance(value, ClusterSpec):
        return value
    if value is True or (isinstance(value, str) and value.strip().lower() in ("ray", "auto", "")):
        return ClusterSpec()
    if isinstance(value, str):
        return ClusterSpec(address=value.strip())
    raise SpecError(f"cluster={value!r}: expected 'ray', a Ray address such as 'head-node:6379', or a ClusterSpec")


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise BackendUnavailable("tuning on a cluster needs Ray: pip install 'pytest-autotune[ray]'") from None
    return ray


def check_same_model(infos: Mapping[str, DeviceInfo]) -> str:
    """The one device model of ``infos`` (name -> device); ClusterError naming every model found otherwise."""
    models = Counter(info.model for info in infos.values())
    if len(models) > 1:
        found = ", ".join(f"{n} x {model!r}" for model, n in models.most_common())
        raise ClusterError(f"one tuning needs devices of one model (its lock is per model), found {found}; "
                           "limit the cluster to one model (a resource per model, or one cluster each)")
    return next(iter(models))


@dataclass
class _Device:
    actor: Any
    name: str  # host:pid
    info: DeviceInfo
    job: Hashable | None = None


@dataclass
class _Job:
    params: dict[str, Any]
    stop: EarlyStop | None
    compiled: Any  # the compile task's ObjectRef, or None
    ref: Any = None
    device: _Device | None = None
    attempts: int = 0
    lost_on: list[str] = field(default_factory=list)
    keep_outputs: bool = False


class RayFleet:
    """The devices of one cluster tuning (a :class:`~.fleet.Fleet`): actors, compile tasks, faults, growth."""

    def __init__(self, runner: Any, spec: ClusterSpec | str | bool = "ray") -> None:
        self.spec = parse_cluster(spec)
        ray = self.ray = _ray()
        self.started_here = False
        if not ray.is_initialized():
            local = self.spec.address is None and not os.environ.get("RAY_ADDRESS")
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            if local:  # a local instance: this machine's one device
                kwargs["resources"] = {self.spec.resource: 1}
            try:
                ray.init(address=self.spec.address, **kwargs)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise ClusterError(f"cannot connect to the Ray cluster at {self.spec.address or 'RAY_ADDRESS'}: "
                                   f"{exc}") from None
            self.started_here = True
        self.runner_name = runner.name
        self.gpu = holds_gpu(runner)
        self.resource = "GPU" if self.gpu else self.spec.resource
        where = {"num_gpus": 1} if self.gpu else {"resources": {self.resource: 1}}
        self._actor_class = ray.remote(DeviceStage).options(num_cpus=0, max_restarts=0, **where)
        self._recipe = ray.put(runner_recipe(runner))
        stage = runner.compile_stage() if capabilities(runner).compiles_ahead else None
        self._stage = ray.put(stage) if stage is not None else None
        self._compile_task = ray.remote(compile_and_ship).options(num_cpus=self.spec.compile_cpus, max_retries=1)
        self._devices: list[_Device] = []
        self._starting: list[tuple[Any, Any]] = []  # (actor, its describe() ref)
        self._compiles: dict[str, Any] = {}
        self._jobs: dict[Hashable, _Job] = {}
        self._retry: list[Hashable] = []
        self._tickets = itertools.count()
        self._grown_at = 0.0
        self.model: str | None = None
        self.info: DeviceInfo | None = None
        self.constants: dict[str, Any] = {}
        self.lost: list[str] = []  # devices that died
        self.refused: list[str] = []  # devices of another model that joined
        self.retried = 0
        self.joined = 0
        self._closed = False
        try:
            self._start_devices()
        except BaseException:
            self.close()
            raise

    # -- devices ---------------------------------------------------------------------------------------------
    def _wanted(self) -> int:
        total = int(self.ray.cluster_resources().get(self.resource, 0))
        return total if self.spec.devices is None else min(total, self.spec.devices)

    def _grow(self, force: bool = False) -> None:
        """Start an actor for each device the cluster has and this fleet does not (joined, or replacing one
        lost); take in those that answered."""
        now = time.monotonic()
        if force or now - self._grown_at >= GROW_EVERY_S:
            self._grown_at = now
            for _ in range(self._wanted() - len(self._devices) - len(self._starting)):
                actor = self._actor_class.remote(self._recipe)
                self._starting.append((actor, actor.describe.remote()))
        if self._starting:
            ready, _ = self.ray.wait([ref for _, ref in self._starting], num_returns=len(self._starting), timeout=0)
            for actor, ref in [pair for pair in self._starting if pair[1] in ready]:
                self._starting.remove((actor, ref))
                self._admit(actor, ref)

    def _admit(self, actor: Any, ref: Any) -> None:
        try:
            info, constants, host, pid = self.ray.get(ref)
        except self.ray.exceptions.RayError as exc:
            self.lost.append(f"a device that failed to start: {_first_line(exc)}")
            return
        name = f"{host}:{pid}"
        if self.model is not None and info.model != self.model:
            self.refused.append(f"{name} ({info.model})")
            self.ray.kill(actor, no_restart=True)
            return
        self.joined += 1
        self._devices.append(_Device(actor, name, info))

    def _start_devices(self) -> None:
        if self._wanted() < 1:
            what = "no GPU" if self.gpu else f"no {self.resource!r} resource"
            hint = ("" if self.gpu else f"; declare the devices each node times on: ray start "
                    f"--resources='{{\"{self.resource}\": N}}' (or ray.init(resources=...))")
            raise ClusterError(f"the Ray cluster has {what} for the {self.runner_name!r} runner's devices{hint}")
        self._grow(force=True)
        refs = {ref: actor for actor, ref in self._starting}
        self._starting.clear()
        # the first device may take long (a GPU initialising); the others get a moment more, then join when
        # they answer (a device busy with another job, or not placed yet, must not hold the search up)
        ready, waiting = self.ray.wait(list(refs), num_returns=1, timeout=START_TIMEOUT_S)
        if ready and waiting:
            more, waiting = self.ray.wait(waiting, num_returns=len(waiting), timeout=START_GRACE_S)
            ready = ready + more
        answers: dict[str, tuple[Any, Any]] = {}
        for ref in ready:
            try:
                info, constants, host, pid = self.ray.get(ref)
            except self.ray.exceptions.RayError as exc:
                raise ClusterError(f"a device actor failed to start its {self.runner_name!r} runner: "
                                   f"{_first_line(exc)}") from None
            answers[f"{host}:{pid}"] = (refs[ref], (info, constants))
        self._starting = [(refs[ref], ref) for ref in waiting]  # still starting (a busy node): admitted later
        if not answers:
            raise ClusterError(f"no device actor started within {START_TIMEOUT_S:g} s")
        self.model = check_same_model({name: pair[1][0] for name, pair in answers.items()})
        for name, (actor, (info, constants)) in answers.items():
            if self.info is None:
                self.info, self.constants = info, constants
            self._devices.append(_Device(actor, name, info))

    @property
    def devices(self) -> int:
        return len(self._devices)

    @property
    def cpus(self) -> int:
        """CPUs of the cluster (compile tasks run there)."""
        return int(self.ray.cluster_resources().get("CPU", 1))

    def idle(self) -> int:
        self._grow()
        if not self._devices and not self._starting:
            raise ClusterError(f"every device of the cluster is lost ({'; '.join(self.lost) or 'none left'})")
        self._restart_retries()
        return sum(1 for d in self._devices if d.job is None)

    # -- compiles ----------------------------------------------------------------------------------------------
    def prefetch(self, configurations: list[dict[str, Any]]) -> None:
        if self._stage is None:
            return
        for params in configurations:
            key = config_key(params)
            if key not in self._compiles:
                self._compiles[key] = self._compile_task.remote(self._stage, params)

    def first_ready(self, configurations: list[dict[str, Any]]) -> int:
        refs = [self._compiles.get(config_key(p)) for p in configurations]
        if any(ref is None for ref in refs):
            return next(i for i, ref in enumerate(refs) if ref is None)
        while True:
            done, _ = self.ray.wait(refs, num_returns=1, timeout=POLL_S)  # interruptible: Ctrl-C gets through
            if done:
                done_all, _ = self.ray.wait(refs, num_returns=len(refs), timeout=0)
                ready = set(done_all) | set(done)
                return next(i for i, ref in enumerate(refs) if ref in ready)

    # -- evaluations ---------------------------------------------------------------------------------------------
    def start(self, params: Mapping[str, Any], stop: EarlyStop | None, keep_outputs: bool = False) -> Hashable:
        ticket = next(self._tickets)
        job = _Job(dict(params), stop, self._compiles.pop(config_key(params), None), keep_outputs=keep_outputs)
        self._jobs[ticket] = job
        device = next(d for d in self._devices if d.job is None)
        self._send(ticket, job, device)
        return ticket

    def _send(self, ticket: Hashable, job: _Job, device: _Device) -> None:
        device.job, job.device = ticket, device
        job.ref = device.actor.evaluate.remote(job.params, job.compiled, job.stop, job.keep_outputs)

    def _restart_retries(self) -> None:
        while self._retry:
            device = next((d for d in self._devices if d.job is None), None)
            if device is None:
                return
            ticket = self._retry.pop(0)
            self._send(ticket, self._jobs[ticket], device)

    def next_result(self) -> tuple[Hashable, Measurement]:
        while True:
            self._restart_retries()
            running = {job.ref: ticket for ticket, job in self._jobs.items() if job.ref is not None}
            if not running:
                if self._retry and not self._devices and not self._starting:
                    ticket = self._retry.pop(0)
                    return ticket, self._give_up(ticket, "no device left to retry on")
                self._grow()
                time.sleep(POLL_S)
                continue
            done, _ = self.ray.wait(list(running), num_returns=1, timeout=POLL_S)
            if not done:
                self._grow()
                continue
            ticket = running[done[0]]
            job = self._jobs[ticket]
            device, job.device, job.ref = job.device, None, None
            assert device is not None
            device.job = None
            try:
                measurement = self.ray.get(done[0])
            except self.ray.exceptions.RayError as exc:
                dead = isinstance(exc, (self.ray.exceptions.RayActorError, self.ray.exceptions.ActorUnavailableError))
                job.attempts += 1
                job.lost_on.append(f"{device.name}: {_first_line(exc)}")
                if dead:
                    self._lose(device, exc)
                else:
                    job.compiled = None  # a failed compile task: let the device compile it itself
                if job.attempts >= ATTEMPTS:
                    return ticket, self._give_up(ticket, "")
                self.retried += 1
                self._retry.append(ticket)
                continue
            del self._jobs[ticket]
            return ticket, measurement

    def _lose(self, device: _Device, exc: BaseException) -> None:
        if device in self._devices:
            self._devices.remove(device)
            self.lost.append(f"{device.name} ({_first_line(exc)})")
            try:
                self.ray.kill(device.actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass

    def _give_up(self, ticket: Hashable, why: str) -> Measurement:
        job = self._jobs.pop(ticket)
        detail = (f"the device evaluating it was lost {len(job.lost_on)} time(s), so it is recorded as failed: "
                  + "; ".join(job.lost_on) + (f"; {why}" if why else ""))
        return Measurement.failed(job.params, FailureKind.RUNTIME, detail)

    def running(self) -> list[tuple[str, dict[str, Any]]]:
        """(device ``host:pid``, configuration) of every evaluation running now (progress, monitoring)."""
        return [(d.name, dict(self._jobs[d.job].params)) for d in self._devices if d.job is not None]

    def describe(self) -> ClusterRun:
        """What the summary and the report keep about the cluster."""
        nodes = tuple(sorted({d.name.rsplit(":", 1)[0] for d in self._devices}))
        return ClusterRun(model=str(self.model or "-"), devices=len(self._devices), nodes=nodes,
                          resource=self.resource, lost=tuple(self.lost), joined=self.joined,
                          refused=tuple(self.refused), retried=self.retried)

    def close(self) -> None:
        """Kill the actors, cancel the compiles; shut down a Ray instance this fleet started. Idempotent."""
        if self._closed:
            return
        self._closed = True
        ray = self.ray
        for ref in list(self._compiles.values()):
            try:
                ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 - finished, or already gone
                pass
        actors = [d.actor for d in self._devices] + [actor for actor, _ in self._starting]
        for actor in actors:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self._devices.clear()
        self._starting.clear()
        self._compiles.clear()
        self._jobs.clear()
        if self.started_here and ray.is_initialized():
            ray.shutdown()

    def __enter__(self) -> "RayFleet":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


class SingleDevice:
    """The fleet as a one-device runner: the finalists are re-timed side by side on one device, as a local
    tuning's confirmation rounds do, so the winner never depends on which device timed what."""

    def __init__(self, fleet: RayFleet, runner: Any) -> None:
        self.fleet = fleet
        self.name = runner.name
        self.measure = measure_of(runner)
        self._device: _Device | None = None

    def device(self) -> DeviceInfo:
        assert self.fleet.info is not None
        return self.fleet.info

    def constants(self) -> dict[str, Any]:
        return dict(self.fleet.constants)

    def evaluate(self, params: Mapping[str, Any], keep_outputs: bool = False,
                 stop: EarlyStop | None = None) -> Measurement:
        fleet = self.fleet
        while True:
            if self._device is None or self._device not in fleet._devices:
                if not fleet._devices:
                    raise ClusterError(f"every device of the cluster is lost ({'; '.join(fleet.lost)})")
                self._device = fleet._devices[0]
            device = self._device
            ref = device.actor.evaluate.remote(dict(params), None, stop, keep_outputs)
            try:
                while True:
                    done, _ = fleet.ray.wait([ref], timeout=POLL_S)
                    if done:
                        return fleet.ray.get(ref)
            except (fleet.ray.exceptions.RayActorError, fleet.ray.exceptions.ActorUnavailableError) as exc:
                fleet._lose(device, exc)  # the rest is re-timed on the next device (reported: lost)

    def close(self) -> None:
        self.fleet.close()


def tune_on_cluster(runner: Any, cluster: Any, space: Any, search: Any, budget: Any, *, cache: Any,
                    on_record: Any, seeds: Any, early_stop: bool,
                    finish: Callable[[Any, Any, ClusterRun], Any], stop_systematic: bool = True) -> Any:
    """``tune()``'s search on a cluster: every device searching at once (:class:`~.fleet.FleetEvaluator`),
    then ``finish(history, one device, what it ran on)`` re-times the finalists on one device. The devices are freed
    however it ends (Ctrl-C included: then nothing is returned, so no lock is written)."""
    from .fleet import FleetEvaluator
    from .pipeline_depth import PipelineDepth

    fleet = RayFleet(runner, cluster)
    try:
        most = fleet.devices + max(1, fleet.cpus)  # one on each device, one compiling on each CPU
        one = SingleDevice(fleet, runner)
        evaluator = FleetEvaluator(space, fleet, budget, objective=one.evaluate, cache=cache, on_record=on_record,
                                   seeds=seeds, batch_size=most, early_stop=early_stop,
                                   depth=PipelineDepth(most, devices=fleet.devices) if most > 1 else None,
                                   stop_systematic=stop_systematic)
        history = evaluator.run(search)
        return finish(history, one, fleet.describe())
    finally:
        fleet.close()
