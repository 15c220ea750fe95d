"""The fixture's calls for any caller: :class:`Kernels` (tune, lock, gate) and :func:`gate_kernel` for a script.

``Kernels`` is what the ``autotune`` fixture is made of, without pytest:
``kernel()``, ``function()``, ``triton()`` and ``replay()`` build the
kernel call and run its lifecycle, each returning an :class:`~.outcome.Outcome`.
A script gates a kernel against the committed lock in one line::

    from pytest_autotune import gate_kernel

    outcome = gate_kernel("kernels/scale.c", "scale", n, [out, x, np.int32(n)], test="bench/scale.py",
                   params={"CHUNK": [64, 256, 1024]}, expected=[2 * x, None, None])
    if outcome.action.value == "fail":
        raise SystemExit(outcome.message)
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from .. import defaults as DEFAULTS
from ..errors import SpecError
from ..execution.kernel import KernelSpec
from .calls import KernelCall, function_call, replay_call, source_call, triton_call
from .host import Host
from .outcome import Action, Outcome
from .run import KernelLifecycle
from .settings import INCOMPARABLE_POLICIES, MARKER_ARGS, MISSING_POLICIES, Options, TuneSettings, parse_marker

__all__ = ["Kernels", "gate_kernel", "kernel_spec"]

_MODES = (None, "all", "missing")


def kernel_spec(source: Any, kernel_name: str, problem_size: Any, args: Sequence[Any], *,
                block_size_names: Sequence[str] | None = None, **fields: Any) -> KernelSpec:
    """The :class:`~..execution.kernel.KernelSpec` of a source kernel call (``SpecError`` or ``TypeError`` for bad
    arguments, naming them)."""
    if block_size_names is not None:
        fields["block_size_names"] = block_size_names
    return KernelSpec(source=source, kernel_name=kernel_name, problem_size=problem_size, args=args, **fields)


class Kernels:
    """The kernel calls of one test (or one script's named group of kernels), each run through its lifecycle."""

    def __init__(self, settings: TuneSettings, options: Options, host: Host) -> None:
        self.settings = settings
        self.options = options
        self.host = host
        self.lifecycle = KernelLifecycle(settings, options, host)
        self.labels: set[str] = set()

    @classmethod
    def create(cls, test: str, *, params: Any, restrictions: Any = None, mode: str | None = None,
               lockdir: str | Path = DEFAULTS.LOCKDIR, missing: str = DEFAULTS.MISSING,
               incomparable: str = DEFAULTS.INCOMPARABLE, static: str = DEFAULTS.STATIC,
               ranking: bool = False, fresh: bool = False, scratch_dir: str | Path | None = None,
               host: Host | None = None, effort: str = DEFAULTS.EFFORT, **marker: Any) -> "Kernels":
        """From the marker's arguments (``params``, ``restrictions``, ``strategy``, ``budget``, ``tolerance``,
        ``alpha``, ``seed``, ``constants``, ``measure``; validated as the marker is) and the run's options:
        ``mode`` ``None`` gates, ``"all"`` tunes and locks, ``"missing"`` tunes what has no valid entry; ``static``
        is the static gate's policy where the kernel's GPU is missing (``--autotune-static``); ``effort``
        ``"full"`` or ``"quick"`` (a small tuning whose entry a full one replaces, see
        :class:`~pytest_autotune.defaults.Effort`)."""
        if mode not in _MODES:
            raise ValueError(f"mode={mode!r}: use None (gate), 'all' (tune and lock) or 'missing'")
        if missing not in MISSING_POLICIES:
            raise ValueError(f"missing={missing!r}: use one of {', '.join(MISSING_POLICIES)}")
        if effort not in DEFAULTS.EFFORTS:
            raise ValueError(f"effort={effort!r}: use one of {', '.join(DEFAULTS.EFFORTS)}")
        if incomparable not in INCOMPARABLE_POLICIES:
            raise ValueError(f"incomparable={incomparable!r}: use one of {', '.join(INCOMPARABLE_POLICIES)}")
        if static not in DEFAULTS.STATIC_POLICIES:
            raise ValueError(f"static={static!r}: use one of {', '.join(DEFAULTS.STATIC_POLICIES)}")
        settings = parse_marker((), {"params": params, "restrictions": restrictions or [], **marker}, {})
        lockdir = Path(lockdir)
        scratch = Path(scratch_dir) if scratch_dir is not None else \
            Path(tempfile.gettempdir()) / "pytest-autotune-scratch"
        options = Options(mode=mode, missing=missing, fresh=fresh, lockdir=lockdir, scratch_dir=scratch,
                          ranking=ranking, report=None, plots=None, devices=[], defaults={},
                          incomparable=incomparable, static=static, effort=effort)
        return cls(settings, options, host or Host(test))

    # -- the four kinds of kernel ------------------------------------------------------
    def kernel(self, source: Any, kernel_name: str, problem_size: Any, args: Sequence[Any], *,
               expected: Sequence[Any] | None = None, atol: float | None = None, rtol: float | None = None,
               verify: Callable[..., Any] | None = None, grid_div_x: Any = None, grid_div_y: Any = None,
               grid_div_z: Any = None, block_size_names: Sequence[str] | None = None,
               compiler_options: Sequence[str] = (), shared_mem: Any = None, runner: str | None = None,
               lang: str | None = None, name: str | None = None, check: str | None = None,
               constant_memory: Mapping[str, Any] | None = None, **runner_options: Any) -> Outcome:
        """A source kernel: CUDA (CuPy or PyCUDA), OpenCL, or C/C++ on the CPU."""
        try:
            spec = kernel_spec(source, kernel_name, problem_size, args, grid_div_x=grid_div_x,
                               grid_div_y=grid_div_y, grid_div_z=grid_div_z, compiler_options=compiler_options,
                               shared_mem=shared_mem, expected=expected, atol=atol, rtol=rtol, verify=verify,
                               lang=lang, check=check, block_size_names=block_size_names,
                                   constant_memory=constant_memory)
        except (SpecError, TypeError) as exc:
            return Outcome.failed(f"autotune.kernel({kernel_name!r}): {exc}", traceback=True)
        return self.source(spec, name or kernel_name.split("<")[0].strip(), runner=runner, atol=atol, rtol=rtol,
                           verify=verify, shared_mem=shared_mem, runner_options=runner_options)

    def source(self, spec: KernelSpec, label: str, **call: Any) -> Outcome:
        """A source kernel whose spec is built already (see :func:`kernel_spec`)."""
        return self.run(source_call(spec, self.settings, label, **call))

    def function(self, launch: Callable[[Mapping[str, Any]], Any], *, name: str | None = None,
                 args: Sequence[Any] = (), expected: Sequence[Any] | None = None, atol: float | None = None,
                 rtol: float | None = None, verify: Callable[..., Any] | None = None,
                 sync: Callable[[], None] | None = None, problem_size: Any = None, **runner_options: Any) -> Outcome:
        """A Python-driven kernel: ``launch(params)`` runs it and returns its outputs."""
        if not callable(launch):
            return Outcome.failed(f"autotune.function: launch must be a callable launch(params), got {launch!r}",
                                  traceback=True)
        label = name or getattr(launch, "__name__", "function")
        return self.run(function_call(launch, self.settings, label, args=args, expected=expected, atol=atol,
                                      rtol=rtol, verify=verify, sync=sync, problem_size=problem_size,
                                      runner_options=runner_options))

    def triton(self, kernel: Any, grid: Any, args: Sequence[Any], *, kwargs: Mapping[str, Any] | None = None,
               expected: Sequence[Any] | None = None, atol: float | None = None, rtol: float | None = None,
               verify: Callable[..., Any] | None = None, shared_mem: Any = None, problem_size: Any = None,
               name: str | None = None, isolate: bool = True, **runner_options: Any) -> Outcome:
        """A ``@triton.jit`` (or ``@triton.autotune``) kernel; the params are its constexprs and launch options,
        ``args`` and ``kwargs`` its other arguments, by position and by name."""
        try:
            from ..backends.triton_runner import TritonCall

            if kwargs is not None and not isinstance(kwargs, Mapping):
                raise SpecError(f"kwargs must be a dict of argument name -> value, got {type(kwargs).__name__}")
            call = TritonCall(kernel, grid, args, list(self.settings.params), problem_size=problem_size,
                              isolate=bool(isolate), kwargs=kwargs, own_space=not self._decorators_space(kernel),
                              expected=expected, atol=atol, rtol=rtol, verify=verify, shared_mem=shared_mem)
        except SpecError as exc:
            return Outcome.failed(f"autotune.triton({getattr(kernel, '__name__', kernel)!r}): {exc}", traceback=True)
        except ImportError as exc:
            return Outcome.skipped(f"autotune.triton: {exc}")
        return self.run(triton_call(call, self.settings, name or call.label, grid, atol=atol, rtol=rtol,
                                    verify=verify, shared_mem=shared_mem, runner_options=runner_options))

    def _decorators_space(self, kernel: Any) -> bool:
        """The marker's params are ``kernel``'s own ``@triton.autotune`` configurations (``params=kernel``)."""
        from ..backends.triton_kernel import is_autotuner, space_from_configs

        if not is_autotuner(kernel):
            return False
        try:
            return space_from_configs(kernel)[0] == dict(self.settings.params)
        except SpecError:
            return False

    def replay(self, recording: Any, *, name: str | None = None, scale: float = 1.0, noise: float = 0.0,
               seed: int | None = None, definition: Any = None, root: str | Path = ".") -> Outcome:
        """Recorded measurements (a Kernel Tuner cache, T4 or KTT file); a relative path is below ``root``."""
        from ..datasets import load_dataset

        path = Path(recording)
        if not path.is_absolute():
            path = Path(root) / path
        label = name or path.name.split(".")[0]
        try:
            recorded = load_dataset(path, definition)
        except (OSError, ValueError) as exc:
            return Outcome.failed(f"autotune.replay({str(recording)!r}): {exc}", traceback=True)
        return self.run(replay_call(path, recorded, self.settings, label, scale=scale, noise=noise, seed=seed,
                                    definition=definition))

    def run(self, call: KernelCall) -> Outcome:
        """The lifecycle of one call; a kernel name used twice in one test is refused (its lock key would be)."""
        if call.label in self.labels:
            return Outcome.failed(f"autotune: kernel name {call.label!r} is used twice in {self.host.test}; "
                                  "pass name= to tell them apart", traceback=True)
        outcome = self.lifecycle.run(call)
        if outcome.action is Action.PASS:
            self.labels.add(call.label)
        return outcome


def gate_kernel(source: Any, kernel_name: str, problem_size: Any, args: Sequence[Any], *, test: str, params: Any,
         restrictions: Any = None, lockdir: str | Path = DEFAULTS.LOCKDIR, tolerance: float = DEFAULTS.TOLERANCE,
         alpha: float = DEFAULTS.ALPHA, missing: str = "fail", incomparable: str = DEFAULTS.INCOMPARABLE,
         constants: Mapping[str, Any] | None = None,
         **kernel: Any) -> Outcome:
    """Gate one source kernel against its entry in the lock (``<test>::<kernel>``), as plain ``pytest`` does.

    ``params``/``restrictions``/``constants`` (and ``measure=``, ``seed=``, the other marker arguments) are the tune
    marker's, the rest what ``autotune.kernel`` takes (``expected=``, ``runner=``, ``name=``, ...). A missing entry fails by default (``missing="skip"`` to skip).
    The outcome's ``action`` says pass, fail or skip; ``message`` why; ``row`` the summary row (``rows`` all of
    them: the static gate adds one per architecture).
    """
    marker = {name: kernel.pop(name) for name in list(kernel) if name in MARKER_ARGS}  # measure=, seed=, ...
    kernels = Kernels.create(test, params=params, restrictions=restrictions, lockdir=lockdir, missing=missing,
                             incomparable=incomparable, tolerance=tolerance, alpha=alpha, constants=constants or {},
                             **marker)
    return kernels.kernel(source, kernel_name, problem_size, args, **kernel)
