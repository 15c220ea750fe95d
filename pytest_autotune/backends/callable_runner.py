"""The ``callable`` runner: the test supplies ``launch(params)``; we time and verify it.

For code the other runners cannot compile themselves (a library call, a
Triton/CuPy-elementwise kernel, a whole pipeline): ``launch(params)`` runs one
configuration and returns its outputs (a sequence aligned with ``expected``,
a single array, or ``None``). ``sync()``, if given, waits for asynchronous
work (e.g. ``cupy.cuda.Device().synchronize``) and is inside the timed
region. Timing is wall clock (``perf_counter_ns``) around ``launch`` +
``sync``. Device arrays in the outputs (anything with ``.get()`` and
``__cuda_array_interface__``) are copied to the host before comparison.

In-process by default: test-supplied closures usually cannot be pickled into
a worker. ``isolate=True`` works when ``launch``/``sync``/``verify`` are
module-level functions. Raise :class:`~.errors.InvalidConfiguration` from
``launch`` to reject a configuration (recorded as INVALID).
"""
from __future__ import annotations

import sys
from time import perf_counter, perf_counter_ns
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..measure.timing import EarlyStop, MeasureOptions, time_runs
from ..results import FailureKind, Measurement
from ..measure.verify import verify_outputs
from ..execution.device import DeviceInfo, cpu_constants, cuda_constants, detect_cpu_device, detect_cuda_device_cupy
from ..errors import InvalidConfiguration, SpecError
from ..execution.executor import Executor, format_exception, output_copies
from ..execution.isolation import HostedRunner
from ..execution.kernel import describe_expected

Launch = Callable[[Mapping[str, Any]], Any]


def _to_host(value: Any) -> Any:
    if hasattr(value, "__cuda_array_interface__") and callable(getattr(value, "get", None)):
        return value.get()
    return value


def _normalise(outputs: Any) -> list[Any] | None:
    if outputs is None:
        return None
    if isinstance(outputs, (list, tuple)):
        return [_to_host(o) for o in outputs]
    return [_to_host(outputs)]


def resolve_device(device: DeviceInfo | str | None) -> DeviceInfo:
    """``"cpu"``, ``"cuda"`` (via CuPy), a DeviceInfo, or ``None``/``"auto"``.

    ``auto`` means CUDA when CuPy is already imported (the launch code uses
    it), else the CPU.
    """
    if isinstance(device, DeviceInfo):
        return device
    if device in (None, "auto"):
        device = "cuda" if "cupy" in sys.modules else "cpu"
    if device == "cuda":
        try:
            return detect_cuda_device_cupy()
        except Exception:
            if sys.modules.get("cupy") is None:
                raise SpecError("device='cuda' needs CuPy to identify the GPU; pass a DeviceInfo instead") from None
            return detect_cpu_device()
    if device == "cpu":
        return detect_cpu_device()
    raise SpecError(f"device must be 'auto', 'cpu', 'cuda' or a DeviceInfo, got {device!r}")


class CallableExecutor(Executor):
    """Times and verifies a user ``launch`` function."""

    name = "callable"

    def __init__(
        self,
        launch: Launch,
        measure: MeasureOptions | None = None,
        *,
        sync: Callable[[], Any] | None = None,
        expected: Sequence[Any] | None = None,
        atol: float | None = None,
        rtol: float | None = None,
        verify: Callable[[Sequence[Any] | None, Sequence[Any]], Any] | None = None,
        constants: Mapping[str, Any] | None = None,
        device: DeviceInfo | str | None = None,
    ) -> None:
        super().__init__()
        if not callable(launch):
            raise SpecError("the callable runner needs launch(params) -> outputs")
        self.launch = launch
        self.sync = sync
        self.measure = MeasureOptions.coerce(measure)
        self.expected = list(expected) if expected is not None else None
        self.atol, self.rtol, self.verify = atol, rtol, verify
        self._device = resolve_device(device)
        base = cuda_constants(self._device) if self._device.kind == "cuda" else cpu_constants(self._device)
        self._constants = {**base, **dict(constants or {})}

    def device(self) -> DeviceInfo:
        return self._device

    def constants(self) -> dict[str, Any]:
        return dict(self._constants)

    def _call(self, params: Mapping[str, Any]) -> Any:
        outputs = self.launch(params)
        if self.sync is not None:
            self.sync()
        return outputs

    def evaluate(self, params: Mapping[str, Any], keep_outputs: bool = False,
                 stop: EarlyStop | None = None) -> Measurement:
        params = dict(params)
        start = perf_counter()
        timings: dict[str, float] = {}

        def failed(kind: FailureKind, detail: str) -> Measurement:
            timings["total_s"] = perf_counter() - start
            return Measurement.failed(params, kind, detail, **timings)

        self.heartbeat("run")
        try:
            outputs = _normalise(self._call(params))
        except InvalidConfiguration as exc:
            return failed(FailureKind.INVALID, str(exc))
        except (SpecError, KeyboardInterrupt):
            raise
        except Exception as exc:
            return failed(FailureKind.RUNTIME, format_exception(exc))
        if self.expected is not None or self.verify is not None:
            if outputs is None and self.verify is None:
                return failed(FailureKind.WRONG_OUTPUT, "launch returned None but there is a reference to compare with")
            result = verify_outputs(
                outputs or [], self.expected, atol=self.atol, rtol=self.rtol, verify=self.verify
            )
            if not result.ok:
                return failed(FailureKind.WRONG_OUTPUT, result.message)
        timings["verify_s"] = perf_counter() - start
        extra: dict[str, Any] = {}
        if keep_outputs:
            extra["outputs"] = output_copies(outputs) if outputs is not None else None

        def run() -> float:
            t0 = perf_counter_ns()
            self._call(params)
            return (perf_counter_ns() - t0) * 1e-6

        t = perf_counter()
        try:
            samples = time_runs(run, self.measure, on_run=lambda: self.heartbeat("run"), stop=stop)
        except InvalidConfiguration as exc:
            return failed(FailureKind.INVALID, str(exc))
        except (SpecError, KeyboardInterrupt):
            raise
        except Exception as exc:
            return failed(FailureKind.RUNTIME, format_exception(exc))
        finally:
            self.heartbeat("idle")
        timings["bench_s"] = perf_counter() - t
        return self._timed_measurement(params, samples, self.measure, timings, extra, start, stop)


class CallableRunner(HostedRunner):
    """Tune a Python ``launch(params)`` function (see the module docstring)."""

    name = "callable"
    executor_target = "pytest_autotune.backends.callable_runner:CallableExecutor"

    def __init__(
        self,
        launch: Launch,
        *,
        sync: Callable[[], Any] | None = None,
        expected: Sequence[Any] | None = None,
        atol: float | None = None,
        rtol: float | None = None,
        verify: Callable[[Sequence[Any] | None, Sequence[Any]], Any] | None = None,
        constants: Mapping[str, Any] | None = None,
        device: DeviceInfo | str | None = None,
        measure: MeasureOptions | dict[str, Any] | None = None,
        isolate: bool = False,
    ) -> None:
        if not callable(launch):
            raise SpecError("the callable runner needs launch(params) -> outputs")
        if expected is not None:
            if isinstance(expected, np.ndarray) or not isinstance(expected, (list, tuple)):
                # list() of an array would split it into its rows: one "entry" per element, every
                # configuration then failing verification with a count that explains nothing
                raise SpecError(f"expected must be a list with one entry per output of launch, got "
                                f"{describe_expected(expected)}; wrap the array: expected=[ref] "
                                "(None where an output is not compared)")
            expected = [np.asarray(e) if isinstance(e, np.ndarray) else e for e in expected]
        super().__init__(
            isolate=isolate, measure=measure, launch=launch, sync=sync, expected=expected, atol=atol,
            rtol=rtol, verify=verify, constants=constants, device=device,
        )
