"""The ``triton`` runner: ``@triton.jit`` kernels, on a GPU or in Triton's interpreter.

One configuration = the kernel's tuned ``tl.constexpr`` arguments plus the
launch options (``num_warps``, ``num_stages``, ...). The evaluation follows
the compiled runners' order, so a Triton kernel fails the same way for the
same reason as a CUDA one:

    pruned by ``early_config_prune``, bad launch option, grid beyond limits -> INVALID
    compile (GPU: ``kernel.warmup``)                                          -> COMPILE
    Triton's ``OutOfResources`` (GPU), or the ``shared_mem=`` estimate above
    ``max_shared_memory_per_block`` (interpreter)                            -> RESOURCES
    verification run                                                          -> LAUNCH / RUNTIME
    compare outputs                                                           -> WRONG_OUTPUT
    warm-up + timed runs (GPU: CUDA events, optional L2 flush; interpreter: wall clock)

With ``TRITON_INTERPRET=1`` (set by the plugin when Triton is installed and
no GPU is present) Triton runs kernels on the CPU through numpy: there is no
compile stage, ``num_warps``/``num_stages`` change nothing, and shared memory
is never allocated, so its limit can only be checked from the test's own
estimate. The device is then ``triton-interpreter <cpu>``: its lockfile is
never a GPU's. torch and triton are imported only in the process that owns
the device (the isolated worker by default).
"""
from __future__ import annotations

import platform
from time import perf_counter, perf_counter_ns
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import BackendUnavailable, SpecError
from ..measure.timing import EarlyStop, MeasureOptions, time_runs
from ..measure.verify import verify_outputs
from ..results import FailureKind, Measurement
from ..execution.device import DeviceInfo, cpu_count, cpu_model
from ..execution.executor import Executor, format_exception, output_copies
from ..execution.isolation import HostedRunner
from .triton_kernel import (KNOWN_LAUNCH_OPTIONS, AutotuneSettings, interpreter_requested, KernelInfo, KernelRef, Portable,
                            autotune_settings, config_params, jit_function, kernel_info, key_values, triton_version)

INTERPRETER_KIND = "triton-interpreter"
# The interpreter emulates no particular GPU; restrictions still need limits to read. These are the
# portable CUDA limits every NVIDIA GPU since sm_20 meets (48 KiB is the shared memory a block gets
# without opting in); compute_capability 0 says "no GPU architecture" (num_ctas > 1 needs sm_90).
INTERPRETER_LIMITS = {"max_threads": 1024, "warp_size": 32, "max_shared_memory_per_block": 48 * 1024,
                      "compute_capability": 0, "max_grid_dim_x": 2**31 - 1, "max_grid_dim_y": 65535,
                      "max_grid_dim_z": 65535}


def interpreter_device() -> DeviceInfo:
    """The interpreter on this CPU (its lockfile: ``triton-interpreter-<cpu>.json``)."""
    versions = {"triton": triton_version(), "python": platform.python_version(), "numpy": np.__version__,
                "os": f"{platform.system()} {platform.release()}"}
    try:
        from importlib.metadata import version

        versions["torch"] = version("torch")
    except Exception:  # noqa: BLE001
        pass
    return DeviceInfo(model=f"triton-interpreter {cpu_model()}", kind=INTERPRETER_KIND, versions=versions,
                      properties={**INTERPRETER_LIMITS, "cpu_count": cpu_count(), "machine": platform.machine()})


def gpu_device(torch: Any, index: int = 0) -> DeviceInfo:
    """The GPU Triton launches on, with the limits Triton itself checks (its driver's device properties)."""
    import triton

    props = torch.cuda.get_device_properties(index)
    limits: dict[str, Any] = {}
    try:
        from triton.runtime import driver

        limits = dict(driver.active.utils.get_device_properties(index))
    except Exception:  # noqa: BLE001 - an older Triton: torch's view of the device below
        pass
    smem = int(limits.get("max_shared_mem") or getattr(props, "shared_memory_per_block_optin", 0) or 48 * 1024)
    properties = {
        "compute_capability": props.major * 10 + props.minor,
        "compute_capability_str": f"{props.major}.{props.minor}",
        "sm_count": props.multi_processor_count,
        "total_memory": props.total_memory,
        "max_threads": 1024,
        "warp_size": int(limits.get("warpSize") or getattr(props, "warp_size", 32) or 32),
        "max_shared_memory_per_block": smem,
        "max_registers_per_block": int(limits.get("max_num_regs") or 65536),
        "l2_cache_size": int(getattr(props, "L2_cache_size", 0) or 0),
        "max_grid_dim_x": 2**31 - 1, "max_grid_dim_y": 65535, "max_grid_dim_z": 65535,
    }
    versions = {"triton": triton.__version__, "torch": torch.__version__, "cuda": str(torch.version.cuda),
                "python": platform.python_version()}
    return DeviceInfo(model=torch.cuda.get_device_name(index), kind="cuda", versions=versions, properties=properties)


def bind_arguments(info: KernelInfo, tuned: Sequence[str], args: Sequence[Any],
                   kwargs: Mapping[str, Any] | None) -> tuple[tuple[str, ...], list[Any]]:
    """The untuned arguments given positionally (``args``, in order) and by name (``kwargs``), as
    ``(names, values)`` in the kernel's order; SpecError naming what is unknown, tuned, given twice or missing.

    Positional arguments take the untuned names in order, keywords any untuned name after them (as Python
    binds a call); an argument left out must have a default in the kernel.
    """
    free = [n for n in info.arg_names if n not in tuned]
    kwargs = dict(kwargs or {})
    if not all(isinstance(k, str) for k in kwargs):
        raise SpecError(f"kwargs must map argument names (strings) to values, got keys {list(kwargs)!r}")
    if len(args) > len(free):
        raise SpecError(f"{len(args)} arguments given, but {info.name}() takes {len(free)} that are not "
                        f"tuned ({', '.join(free)})")
    unknown = [k for k in kwargs if k not in info.arg_names]
    if unknown:
        raise SpecError(f"kwargs names {', '.join(map(repr, unknown))}, not an argument of {info.name}() "
                        f"(its arguments: {', '.join(info.arg_names)})")
    tuned_too = [k for k in kwargs if k in tuned]
    if tuned_too:
        raise SpecError(f"kwargs gives {', '.join(map(repr, tuned_too))}, which the marker's params tune; an "
                        "argument is either tuned or passed, not both")
    twice = [k for k in kwargs if k in free[:len(args)]]
    if twice:
        raise SpecError(f"{', '.join(map(repr, twice))} given both in args (by position) and in kwargs")
    missing = [n for n in free[len(args):] if n not in kwargs and n not in info.defaults]
    if missing:
        raise SpecError(f"{info.name}() argument(s) {', '.join(missing)} are neither given in args or kwargs nor "
                        "tuned (params) nor defaulted")
    names = [*free[:len(args)], *(n for n in free[len(args):] if n in kwargs)]
    return tuple(names), [*args, *(kwargs[n] for n in names[len(args):])]


def _as_tensor(value: Any, torch: Any) -> Any:
    return torch.from_numpy(np.array(value, copy=True)) if isinstance(value, np.ndarray) else value


def to_numpy(value: Any) -> Any:
    """A torch tensor (any device) as a numpy array; anything else as it is."""
    if hasattr(value, "detach") and hasattr(value, "cpu"):
        value = value.detach().cpu()
        if str(value.dtype) == "torch.bfloat16":  # numpy has no bfloat16
            value = value.float()
        return value.numpy()
    return value


class TritonSpec:
    """A Triton kernel call, as the runner needs it (picklable: the kernel travels as a reference).

    ``args`` are the kernel's arguments that are not tuned, in order (torch tensors, numpy arrays,
    scalars); ``kwargs`` more of them by name (an untuned ``tl.constexpr`` such as ``ACTIVATION``, as
    Triton users pass it). ``expected`` is aligned with ``args`` (``None`` where an argument is not
    compared). Inside, ``arg_names``/``args`` hold both in the kernel's order (``args`` first: keywords
    can only name what follows them), so a call written positionally or by keyword is one problem.
    """

    def __init__(self, kernel: Any, grid: Any, args: Sequence[Any], *, tuned: Sequence[str],
                 kwargs: Mapping[str, Any] | None = None, own_space: bool = False,
                 expected: Sequence[Any] | None = None, atol: float | None = None, rtol: float | None = None,
                 verify: Any = None, shared_mem: Any = None, isolate: bool = True) -> None:
        import torch

        self.info = kernel_info(kernel)
        self.tuned = tuple(tuned)
        self.settings: AutotuneSettings = autotune_settings(kernel)
        self.kernel: Any = KernelRef.of(kernel) if isolate else jit_function(kernel)
        names, values = bind_arguments(self.info, self.tuned, args, kwargs)
        self.arg_names = names
        self.args = [_as_tensor(a, torch) for a in values]
        if isinstance(grid, (list, tuple)):
            self.grid: Any = tuple(grid)
        elif callable(grid):
            self.grid = Portable(grid)
        else:
            raise SpecError(f"grid must be a tuple or a callable of the configuration (lambda meta: ...), got {grid!r}")
        if shared_mem is not None and not callable(shared_mem) and not isinstance(shared_mem, int):
            raise SpecError(f"shared_mem must be bytes (an int) or a callable of the configuration, got {shared_mem!r}")
        self.shared_mem = Portable(shared_mem) if callable(shared_mem) else shared_mem
        if expected is not None:
            if not isinstance(expected, (list, tuple)):
                raise SpecError(f"expected must be a list aligned with args (None where an argument is not "
                                f"compared), got a {type(expected).__name__}; wrap it: expected=[None, ..., ref]")
            if len(expected) != len(args):
                raise SpecError(f"expected has {len(expected)} entries but there are {len(args)} args; align them "
                                "(None where an argument is not compared)")
            expected = [to_numpy(e) for e in expected] + [None] * (len(values) - len(args))  # kwargs: not compared
        self.expected = list(expected) if expected is not None else None
        self.atol, self.rtol, self.verify = atol, rtol, verify
        tensors = [i for i, a in enumerate(self.args) if hasattr(a, "data_ptr")]
        if self.expected is not None:
            self.outputs = [i for i in tensors if self.expected[i] is not None]
        else:
            self.outputs = list(tensors)
        by_name = {n: i for i, n in enumerate(self.arg_names)}
        for what, names in (("reset_to_zero", self.settings.reset_to_zero),
                            ("restore_value", self.settings.restore_value)):
            absent = [n for n in names if n not in by_name]
            if absent:
                raise SpecError(f"@triton.autotune({what}=...) names {', '.join(absent)}, not among the given args")
        self.reset = [by_name[n] for n in self.settings.reset_to_zero]
        self.restore = sorted(set(self.outputs) | set(self.reset) | {by_name[n] for n in self.settings.restore_value})
        # The decorator's configurations are the space: early_config_prune judges that list once, as Triton
        # calls it. The marker's own params are (own_space): it judges each configuration tried, alone; the
        # decorator's list would refuse every value it does not hold, whatever the hook says.
        prune = self.settings.early_config_prune
        self.prune_each = Portable(prune) if own_space and prune is not None else None
        self.allowed = None if own_space else self._pruned()

    def named_args(self) -> dict[str, Any]:
        return dict(zip(self.arg_names, self.args))

    def __getstate__(self) -> dict[str, Any]:
        """The worker needs the wrapper's argument lists, not its hooks (already applied here)."""
        state = dict(self.__dict__)
        s = self.settings
        state["settings"] = AutotuneSettings(s.key, s.reset_to_zero, s.restore_value)
        # torch registers shared-memory reductions with multiprocessing's pickler, which the worker's
        # connection uses; its file-descriptor hand-off needs a multiprocessing parent. Send bytes instead.
        state["args"] = [_TensorBytes(a) if hasattr(a, "data_ptr") else a for a in self.args]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state["args"] = [a.load() if isinstance(a, _TensorBytes) else a for a in state["args"]]
        self.__dict__.update(state)

    def _pruned(self) -> list[dict[str, Any]] | None:
        """The configurations ``early_config_prune`` keeps (called once, here, as Triton calls it)."""
        prune = self.settings.early_config_prune
        if prune is None:
            return None
        try:
            kept = prune(list(self.settings.configs), self.named_args())
        except Exception as exc:  # noqa: BLE001 - the user's hook
            raise SpecError(f"@triton.autotune early_config_prune raised {format_exception(exc)}") from None
        if not kept:
            raise SpecError("@triton.autotune early_config_prune kept no configuration")
        return [config_params(c) for c in kept]

    def problem_size(self) -> Any:
        """The values of the ``@triton.autotune`` key arguments (tensors by shape): the problem they tune for."""
        return key_values(self.settings.key, self.named_args()) or None


class _TensorBytes:
    """A CPU tensor as ``torch.save`` bytes (every dtype, bfloat16 included)."""

    def __init__(self, tensor: Any) -> None:
        import io

        import torch

        buffer = io.BytesIO()
        torch.save(tensor.detach().cpu(), buffer)
        self.data = buffer.getvalue()

    def load(self) -> Any:
        import io

        import torch

        return torch.load(io.BytesIO(self.data), weights_only=True)


def kept_by_prune(params: Mapping[str, Any], kept: Sequence[Mapping[str, Any]] | None) -> bool:
    """``params`` agrees with a configuration ``early_config_prune`` kept (on the names both have), or nothing
    was pruned: the space may tune fewer names than the @triton.autotune configs set."""
    if kept is None:
        return True
    return any(all(config[k] == v for k, v in params.items() if k in config) for config in kept)


def pruned_alone(prune: Any, params: Mapping[str, Any], named: Mapping[str, Any]) -> str | None:
    """Why ``early_config_prune`` drops ``params`` judged alone (``None`` when it keeps it): a marker's own space."""
    import triton

    kwargs = dict(params)
    launch = {n: kwargs.pop(n) for n in KNOWN_LAUNCH_OPTIONS if n in kwargs}
    try:
        kept = prune([triton.Config(kwargs, **launch)], dict(named))
    except Exception as exc:  # noqa: BLE001 - the user's hook
        return f"@triton.autotune's early_config_prune raised {format_exception(exc)}"
    return None if kept else "pruned by @triton.autotune's early_config_prune"


def _pow2(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x > 0 and x & (x - 1) == 0


class TritonExecutor(Executor):
    """In-process half of :class:`TritonRunner` (lives in the isolated worker by default)."""

    name = "triton"

    def __init__(self, spec: TritonSpec, measure: MeasureOptions | None = None) -> None:
        super().__init__()
        try:
            import torch
            import triton  # noqa: F401
        except ImportError as exc:
            raise BackendUnavailable(f"the triton runner needs triton and torch (pip install "
                                     f"'pytest-autotune[triton]'): {exc}") from None
        self.torch = torch
        self.spec = spec
        self.measure = MeasureOptions.coerce(measure)
        self.interpret = interpreter_requested()
        if not self.interpret and not torch.cuda.is_available():
            raise BackendUnavailable("Triton needs a GPU that torch can use, or its interpreter: no CUDA device is "
                                     "usable here and TRITON_INTERPRET is not set (pytest-autotune sets it when no "
                                     "GPU is present and triton was not imported before the plugin)")
        self.kernel = spec.kernel.resolve() if isinstance(spec.kernel, KernelRef) else spec.kernel
        if self.interpret != (type(self.kernel).__name__ == "InterpretedFunction"):
            raise BackendUnavailable(f"kernel {spec.info.name}() was decorated {'without' if self.interpret else 'in'} "
                                     "interpreter mode: TRITON_INTERPRET must be set before triton is imported")
        self._device = interpreter_device() if self.interpret else gpu_device(torch)
        self._constants = {k: v for k, v in self._device.properties.items() if isinstance(v, (int, float))
                           and k not in ("total_memory",)}
        where = "cpu" if self.interpret else "cuda"
        self.args = [a.to(where) if hasattr(a, "data_ptr") else a for a in spec.args]
        self.pristine = {i: self.args[i].clone() for i in spec.restore}
        self.allowed = spec.allowed
        self._flush: Any = None
        if not self.interpret:
            self.start_event = torch.cuda.Event(enable_timing=True)
            self.end_event = torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()

    def device(self) -> DeviceInfo:
        return self._device

    def constants(self) -> dict[str, Any]:
        return dict(self._constants)

    # -- steps -------------------------------------------------------------------
    def _grid(self, params: Mapping[str, Any]) -> tuple[int, ...]:
        meta = {**dict(zip(self.spec.arg_names, self.args)), **params}
        grid = self.spec.grid(meta) if callable(self.spec.grid) else self.spec.grid
        if isinstance(grid, int):
            grid = (grid,)
        grid = tuple(int(g) for g in grid)
        if not 1 <= len(grid) <= 3:
            raise ValueError(f"the grid has {len(grid)} dimensions; Triton takes 1 to 3")
        return grid

    def _invalid(self, params: Mapping[str, Any], grid: tuple[int, ...]) -> str | None:
        limits = self._constants
        warps = params.get("num_warps")
        if warps is not None:
            if not _pow2(warps):
                return f"num_warps={warps!r} is not a power of two (Triton requires one)"
            threads = warps * int(limits.get("warp_size", 32))
            if threads > int(limits.get("max_threads", 1024)):
                return (f"num_warps={warps} is {threads} threads per block, beyond max_threads = "
                        f"{limits.get('max_threads', 1024)}")
        stages = params.get("num_stages")
        if stages is not None and (not isinstance(stages, int) or stages < 1):
            return f"num_stages={stages!r} must be a whole number >= 1"
        ctas = params.get("num_ctas")
        if ctas is not None and (not _pow2(ctas) or ctas > 16):
            return f"num_ctas={ctas!r} must be a power of two up to 16"
        for axis, size in zip("xyz", grid):
            limit = limits.get(f"max_grid_dim_{axis}")
            if size < 1:
                return f"grid dimension {axis} = {size}: every dimension needs at least one program"
            if limit and size > limit:
                return f"grid dimension {axis} = {size} exceeds the device limit of {limit}"
        return None

    def _shared_estimate(self, params: Mapping[str, Any]) -> str | None:
        """Interpreter only: the test's ``shared_mem=`` estimate against the limit (nothing is allocated)."""
        hint = self.spec.shared_mem
        if hint is None:
            return None
        meta = {**dict(zip(self.spec.arg_names, self.args)), **params}
        need = int(hint(meta) if callable(hint) else hint)
        limit = int(self._constants.get("max_shared_memory_per_block", 0))
        if limit and need > limit:
            return (f"out of resource: shared memory, {need} bytes (estimated by shared_mem=) exceed "
                    f"max_shared_memory_per_block = {limit}")
        return None

    def _launch_kwargs(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return {**dict(zip(self.spec.arg_names, self.args)), **params}

    def _compile(self, params: Mapping[str, Any], grid: tuple[int, ...]) -> dict[str, Any]:
        """GPU: compile (or load from Triton's cache) and create the launcher, where OutOfResources is raised."""
        compiled = self.kernel.warmup(grid=grid, **self._launch_kwargs(params))
        compiled._init_handles()
        meta = getattr(compiled, "metadata", None)
        return {k: v for k, v in (("registers", getattr(compiled, "n_regs", None)),
                                  ("spills", getattr(compiled, "n_spills", None)),
                                  ("shared_mem", getattr(meta, "shared", None))) if v is not None}

    def _run(self, params: Mapping[str, Any], grid: tuple[int, ...]) -> None:
        self.kernel[grid](**self._launch_kwargs(params))

    def _prepare(self) -> None:
        for i, src in self.pristine.items():
            self.args[i].copy_(src)
        for i in self.spec.reset:
            self.args[i].zero_()
        if not self.interpret and self.measure.flush_l2:
            self._flush_l2()

    def _flush_l2(self) -> None:
        if self._flush is None:
            l2 = int(self._constants.get("l2_cache_size") or 64 << 20)
            self._flush = self.torch.empty(2 * l2, dtype=self.torch.uint8, device="cuda")
        self._flush.zero_()

    def _sync(self) -> None:
        if not self.interpret:
            self.torch.cuda.synchronize()

    def _timed(self, params: Mapping[str, Any], grid: tuple[int, ...]) -> float:
        if self.interpret:
            t0 = perf_counter_ns()
            self._run(params, grid)
            return (perf_counter_ns() - t0) * 1e-6
        self.start_event.record()
        self._run(params, grid)
        self.end_event.record()
        self.end_event.synchronize()
        return float(self.start_event.elapsed_time(self.end_event))

    def _outputs(self) -> list[Any]:
        return [to_numpy(a) if hasattr(a, "data_ptr") else a for a in self.args]

    # -- flow --------------------------------------------------------------------
    def evaluate(self, params: Mapping[str, Any], keep_outputs: bool = False, artefact: Any = None,
                 stop: EarlyStop | None = None) -> Measurement:
        """Verify and time one configuration; ``artefact``: the compile pool warmed Triton's cache for it, so
        the compile here only loads (its compile time is the pool's)."""
        params = dict(params)
        start = perf_counter()
        timings: dict[str, float] = {}
        extra: dict[str, Any] = {}

        def failed(kind: FailureKind, detail: str) -> Measurement:
            timings["total_s"] = perf_counter() - start
            m = Measurement.failed(params, kind, detail, **timings)
            m.extra.update(extra)
            return m

        if not self.healthy:
            return failed(FailureKind.RUNTIME, "the CUDA context is unusable after an earlier crash (use isolate=True)")
        self.heartbeat("setup")
        if not kept_by_prune(params, self.allowed):
            return failed(FailureKind.INVALID, "pruned by @triton.autotune's early_config_prune")
        if getattr(self.spec, "prune_each", None) is not None:
            reason = pruned_alone(self.spec.prune_each, params, dict(zip(self.spec.arg_names, self.args)))
            if reason:
                return failed(FailureKind.INVALID, reason)
        try:
            grid = self._grid(params)
        except Exception as exc:  # noqa: BLE001 - the test's grid callable
            return failed(FailureKind.INVALID, f"grid: {format_exception(exc)}")
        extra["grid"] = list(grid)
        reason = self._invalid(params, grid)
        if reason:
            return failed(FailureKind.INVALID, reason)
        if self.interpret:
            try:
                reason = self._shared_estimate(params)
            except Exception as exc:  # noqa: BLE001 - the test's estimate
                return failed(FailureKind.INVALID, f"shared_mem: {format_exception(exc)}")
            if reason:
                return failed(FailureKind.RESOURCES, reason)
        else:
            self.heartbeat("compile")
            t = perf_counter()
            try:
                extra.update(self._compile(params, grid))
            except Exception as exc:  # noqa: BLE001 - classified below
                timings["compile_s"] = perf_counter() - t
                kind = FailureKind.RESOURCES if type(exc).__name__ == "OutOfResources" else FailureKind.COMPILE
                return failed(kind, format_exception(exc))
            if artefact is None:
                timings["compile_s"] = perf_counter() - t
            else:
                timings["compile_s"], timings["load_s"] = artefact.seconds, perf_counter() - t
                extra.update(artefact.extra)
        self.heartbeat("run")
        t = perf_counter()
        try:
            self._prepare()
            self._run(params, grid)
            self._sync()
            outputs = self._outputs()
        except Exception as exc:  # noqa: BLE001
            text = format_exception(exc)
            if not self.interpret and ("CUDA error" in text or "illegal" in text.lower()):
                self.healthy = False  # sticky: the isolated worker is restarted
            return failed(FailureKind.RUNTIME, text)
        finally:
            self.heartbeat("idle")
        check = getattr(self, "check_outputs", True)  # False: the parent runs an unpicklable verify=
        if check and (self.spec.expected is not None or self.spec.verify is not None):
            result = verify_outputs(outputs, self.spec.expected, atol=self.spec.atol, rtol=self.spec.rtol,
                                    verify=self.spec.verify)
            if not result.ok:
                timings["verify_s"] = perf_counter() - t
                return failed(FailureKind.WRONG_OUTPUT, result.message)
        timings["verify_s"] = perf_counter() - t
        if keep_outputs or not check:
            extra["outputs"] = output_copies(outputs)
        t = perf_counter()
        try:
            with self.timing_window():
                samples = time_runs(lambda: self._timed(params, grid), self.measure, prepare=self._prepare,
                                    on_run=lambda: self.heartbeat("run"), stop=stop)
        except Exception as exc:  # noqa: BLE001
            return failed(FailureKind.RUNTIME, format_exception(exc))
        finally:
            self.heartbeat("idle")
        timings["bench_s"] = perf_counter() - t
        return self._timed_measurement(params, samples, self.measure, timings, extra, start, stop)

    def close(self) -> None:
        self.args, self.pristine, self._flush = [], {}, None


class TritonCompileStage:
    """GPU only: compile configurations ahead in this process, filling Triton's on-disk cache.

    ``kernel.warmup`` compiles exactly what a launch with these arguments would (same specialisation,
    same cache key), so the device stage's own compile in the worker only loads the cached binary.
    Loading it here too (``_init_handles``) raises Triton's ``OutOfResources`` before the device stage
    is asked, as the CUDA runners' static resource checks do. Threads suffice: Triton runs ptxas as a
    child process. In the interpreter there is nothing to compile, and no stage.
    """

    pause_while_timing = False  # the compilers run on the CPU, the kernel being timed on the GPU

    def __init__(self, spec: TritonSpec, limits: Mapping[str, Any]) -> None:
        self.spec = spec
        self.kernel = spec.kernel.resolve() if isinstance(spec.kernel, KernelRef) else spec.kernel
        self.limits = dict(limits)
        self.allowed = spec.allowed

    def compile(self, params: Mapping[str, Any], processes: Any = None) -> Any:
        from ..execution.compile_pool import CompiledArtefact

        params = dict(params)
        reason = None if kept_by_prune(params, self.allowed) else "pruned by @triton.autotune's early_config_prune"
        if reason is None and getattr(self.spec, "prune_each", None) is not None:
            reason = pruned_alone(self.spec.prune_each, params, dict(zip(self.spec.arg_names, self.spec.args)))
        if reason:
            return CompiledArtefact(False, failure=FailureKind.INVALID, detail=reason)
        t = perf_counter()
        try:
            compiled = self.kernel.warmup(grid=(1,), **dict(zip(self.spec.arg_names, self.spec.args)), **params)
            compiled._init_handles()
        except Exception as exc:  # noqa: BLE001 - classified as the device stage would
            kind = FailureKind.RESOURCES if type(exc).__name__ == "OutOfResources" else FailureKind.COMPILE
            return CompiledArtefact(False, failure=kind, detail=format_exception(exc), seconds=perf_counter() - t)
        return CompiledArtefact(True, seconds=perf_counter() - t, extra={"compiled_ahead": True})


class TritonRunner(HostedRunner):
    """Tune a ``@triton.jit`` kernel (see the module docstring). Options: ``isolate`` (default True), ``measure``."""

    name = "triton"
    executor_target = "pytest_autotune.backends.triton_runner:TritonExecutor"

    def __init__(self, spec: TritonSpec, *, isolate: bool = True,
                 measure: MeasureOptions | dict[str, Any] | None = None) -> None:
        if not isinstance(spec, TritonSpec):
            raise SpecError(f"the triton runner needs a TritonSpec, got {type(spec).__name__}")
        self.spec = spec
        super().__init__(isolate=isolate, measure=measure, spec=spec)

    def compile_stage(self) -> TritonCompileStage | None:
        """Warm Triton's cache ahead on a GPU; None in the interpreter (nothing is compiled there)."""
        if self.device().kind != "cuda":
            return None
        return TritonCompileStage(self.spec, self.constants())


# --------------------------------------------------------------------------- what the plugin's fixture calls
class TritonCall:
    """One ``autotune.triton(...)`` call, prepared: the spec, what the lock pins, and the locked-source rebuild."""

    def __init__(self, kernel: Any, grid: Any, args: Sequence[Any], tuned: Sequence[str], *,
                 problem_size: Any = None, isolate: bool = True, **spec_options: Any) -> None:
        from .triton_kernel import check_param_names, module_source

        info = kernel_info(kernel)
        check_param_names(list(tuned), info)
        self.spec = TritonSpec(kernel, grid, args, tuned=tuned, isolate=isolate, **spec_options)
        self.label = info.name
        self.qualname = jit_function(kernel).fn.__qualname__
        self.code, self.file = module_source(kernel)
        self.problem_size = problem_size if problem_size is not None else self.spec.problem_size()
        self.isolate = isolate

    def described_args(self) -> list[Any]:
        """The arguments as the lock describes them (tensors by shape and dtype, scalars by value)."""
        return list(self.spec.args)

    def runner(self, measure: Any, **options: Any) -> TritonRunner:
        return TritonRunner(self.spec, isolate=self.isolate, measure=measure, **options)

    def locked_runner(self, code: str, measure: Any, **options: Any) -> TritonRunner:
        """The same call with the kernel taken from ``code``, a locked copy of its module (the gate's A/B)."""
        import copy
        import hashlib
        import tempfile
        from pathlib import Path

        digest = hashlib.sha256(code.encode()).hexdigest()[:16]
        folder = Path(tempfile.gettempdir()) / "pytest-autotune-triton"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"locked_{digest}.py"
        if not path.exists() or path.read_text(encoding="utf-8") != code:
            path.write_text(code, encoding="utf-8")
        spec = copy.copy(self.spec)
        spec.kernel = KernelRef(f"_autotune_locked_{digest}", self.qualname, str(path))
        return TritonRunner(spec, isolate=self.isolate, measure=measure, **options)
