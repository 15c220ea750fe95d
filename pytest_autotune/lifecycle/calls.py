"""One kernel call, as the lifecycle needs it: what the lock entry pins, how to build the runner, the source.

A :class:`KernelCall` is made from what a test (or a script) passes for a
source kernel, a Python-driven one, a Triton kernel or a recording; from
then on the lifecycle treats them alike.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..backends import registry as backend_registry
from ..gate.probes import probe_measure
from ..lock.entry import LockEntry
from ..lock.hashing import describe_callable, hash_problem, hash_source, hash_space, kernel_source_hash, stable_hash
from ..lock.problem import describe_problem
from ..runners import make_runner
from ..execution.kernel import KernelSpec, spec_headers, thread_block_restriction, with_code
from .settings import TuneSettings

__all__ = ["KernelCall", "source_call", "function_call", "triton_call", "replay_call", "space_hash",
           "implicit_restrictions", "with_restrictions"]

@dataclass
class KernelCall:
    """One kernel call of a test: its name in the lock, what its entry pins, and how to run it."""

    label: str
    hashes: dict[str, str]  # what the lock entry pins (source, space, problem)
    outcome_inputs: dict[str, Any]  # everything else that decides an evaluation's outcome (scratch key)
    make_runner: Callable[[], Any]
    # Source kernels only: what the entry records of the source (stored beside the lock at tune time), and
    # a runner of the same kernel built from a locked source text (the gate's A/B comparison of an edit).
    source: dict[str, Any] | None = None
    make_locked_runner: Callable[..., Any] | None = None
    problem: dict[str, Any] = field(default_factory=dict)  # readable problem (lock.problem), for lookups
    footprint: int = 0  # bytes of the arguments: the size of the memory-bandwidth probe
    toolchain: dict[str, str] = field(default_factory=dict)  # what builds it beyond the device's versions (flags)
    probe_make: Callable[..., Any] | None = None  # the kernel's runner factory, for device (GPU) probes
    # GPU kernels only: build a configuration for an architecture as a runner would, without a GPU
    # (``(params, arch, runner name) -> static.build.BuiltKernel``): the static gate's evidence
    static_build: Callable[[Mapping[str, Any], int, str | None], Any] | None = None
    lang: str = ""  # "cuda", "opencl", "c", ... for source kernels; "triton"; "" for the others
    # The kernel's implicit restrictions beside the marker's (the thread-block limit): applied wherever the
    # space is, never in the space hash, as they remove only configurations the device could not launch
    restrictions: list[str] = field(default_factory=list)


def _static_build(runner: str | None, spec: Any, params: Mapping[str, Any], arch: int) -> Any:
    """The static gate's build (imported on use: it loads NVRTC, nvcc's or Triton's compiler)."""
    from ..static.build import build_for_runner

    return build_for_runner(runner, spec, params, arch)


BLOCK_LIMIT_LANGS = ("cuda", "opencl")


def implicit_restrictions(spec: KernelSpec, settings: TuneSettings) -> list[str]:
    """Kernel Tuner's thread-block limit for a CUDA or OpenCL kernel (unless the marker says
    ``block_limit=False``): the product of the tuned block sizes at most the device's ``max_threads``."""
    if not settings.block_limit or spec.lang not in BLOCK_LIMIT_LANGS:
        return []
    restriction = thread_block_restriction(spec, settings.params)
    return [restriction] if restriction else []


def with_restrictions(settings: TuneSettings, restrictions: Sequence[Any]) -> TuneSettings:
    """The marker's settings with a kernel's implicit restrictions after its own."""
    return replace(settings, restrictions=[*settings.restrictions, *restrictions]) if restrictions else settings


def space_hash(settings: TuneSettings) -> str:
    return hash_space(settings.params, settings.restrictions, settings.constants)


def footprint(args: Sequence[Any]) -> int:
    """Bytes of the kernel's array arguments: what a memory-bound kernel moves at least once."""
    return sum(int(getattr(a, "nbytes", 0) or 0) for a in args if hasattr(a, "shape"))


def source_call(spec: KernelSpec, settings: TuneSettings, label: str, *, runner: str | None = None,
                atol: float | None = None, rtol: float | None = None, verify: Callable[..., Any] | None = None,
                shared_mem: Any = None, runner_options: Mapping[str, Any] | None = None) -> KernelCall:
    """A source kernel (CUDA, OpenCL, C/C++): its source, headers and options are what the lock pins."""
    options = dict(runner_options or {})
    headers = spec_headers(spec)
    hashes = {"source": kernel_source_hash(spec.code, spec.kernel_name, spec.compiler_options, headers),
              "space": space_hash(settings),
              "problem": hash_problem(spec.problem_size, spec.args, spec.constant_memory)}
    inputs = {"expected": spec.expected, "atol": atol, "rtol": rtol, "verify": verify, "runner": runner,
              "lang": spec.lang, "geometry": [spec.grid_div_x, spec.grid_div_y, spec.grid_div_z,
                                              list(spec.block_size_names), shared_mem],
              "constant_memory": spec.constant_memory, "runner_options": options}
    language = backend_registry.language(spec.lang)
    suffix = spec.source_file.suffix if spec.source_file is not None else language.suffix if language else ".txt"
    source = {"code": spec.code, "suffix": suffix, "kernel_name": spec.kernel_name,
              "compiler_options": list(spec.compiler_options), "headers": headers,
              "file": spec.source_file.name if spec.source_file is not None else ""}
    measure = settings.measure

    def locked_runner(code: str, entry: LockEntry, headers_dir: Path | None = None) -> Any:
        # the locked headers (written to headers_dir) come before the kernel's folder on the include path
        first = ([] if headers_dir is None else
                 ["-iquote", str(headers_dir)] if spec.lang in ("c", "c++") else [f"-I{headers_dir}"])
        options_locked = entry.compiler_options
        locked = with_code(spec, code, entry.kernel_name or spec.kernel_name,
                           [*first, *(options_locked if options_locked is not None else spec.compiler_options)])
        return make_runner(locked, runner=runner, measure=measure, **options)

    flags = [*options.get("flags", ()), *spec.compiler_options]
    return KernelCall(
        label, hashes, inputs, lambda: make_runner(spec, runner=runner, measure=measure, **options), source=source,
        make_locked_runner=locked_runner,
        problem=describe_problem(spec.problem_size, spec.args, spec.constant_memory),
        footprint=footprint(spec.args),
        toolchain={**({"flags": " ".join(flags)} if flags else {}), **(language.toolchain() if language else {})},
        probe_make=(lambda probe: make_runner(probe, runner=runner, measure=probe_measure(), **options))
        if language is not None and language.gpu_probes else None,
        static_build=(lambda params, arch, tuned_with: _static_build(tuned_with or runner, spec, params, arch))
        if spec.lang == "cuda" else None, lang=spec.lang, restrictions=implicit_restrictions(spec, settings))


def function_call(launch: Callable[[Mapping[str, Any]], Any], settings: TuneSettings, label: str, *,
                  args: Sequence[Any] = (), expected: Sequence[Any] | None = None, atol: float | None = None,
                  rtol: float | None = None, verify: Callable[..., Any] | None = None,
                  sync: Callable[[], None] | None = None, problem_size: Any = None,
                  runner_options: Mapping[str, Any] | None = None) -> KernelCall:
    """A Python-driven kernel: ``launch(params)`` runs it; its source text is what the lock pins."""
    options = dict(runner_options or {})
    try:
        source = inspect.getsource(launch)
    except (OSError, TypeError):
        source = stable_hash(describe_callable(launch))
    hashes = {"source": hash_source(source), "space": space_hash(settings),
              "problem": hash_problem(problem_size, list(args))}
    inputs = {"expected": expected, "atol": atol, "rtol": rtol, "verify": verify, "sync": sync,
              "runner_options": options}
    measure = settings.measure
    return KernelCall(label, hashes, inputs, lambda: make_runner(
        None, runner="callable", launch=launch, expected=expected, atol=atol, rtol=rtol, verify=verify,
        sync=sync, measure=measure, **options),
        problem=describe_problem(problem_size, list(args)), footprint=footprint(args))


def triton_call(call: Any, settings: TuneSettings, label: str, grid: Any, *, atol: float | None = None,
                rtol: float | None = None, verify: Callable[..., Any] | None = None, shared_mem: Any = None,
                runner_options: Mapping[str, Any] | None = None) -> KernelCall:
    """A Triton kernel (a :class:`~..backends.triton_runner.TritonCall`)."""
    options = dict(runner_options or {})
    described = call.described_args()
    hashes = {"source": kernel_source_hash(call.code, call.qualname), "space": space_hash(settings),
              "problem": hash_problem(call.problem_size, described)}
    inputs = {"expected": call.spec.expected, "atol": atol, "rtol": rtol, "verify": verify, "runner": "triton",
              "grid": describe_callable(grid) if callable(grid) else list(grid), "shared_mem": str(shared_mem),
              "runner_options": options}
    source = {"code": call.code, "suffix": ".py", "kernel_name": call.qualname, "compiler_options": []}
    measure = settings.measure
    return KernelCall(label, hashes, inputs, lambda: call.runner(measure, **options), source=source,
                      make_locked_runner=lambda code, entry: call.locked_runner(code, measure, **options),
                      problem=describe_problem(call.problem_size, described),
                      # the tensors' bytes size the triad probe, as a source kernel's arrays do (without it the
                      # triad took its 16 MiB default: 48 MB a run, beside a kernel of a few hundred KiB)
                      footprint=footprint(call.spec.args),
                      static_build=lambda params, arch, _tuned_with: _static_build("triton", call.spec, params, arch),
                      lang="triton")


def replay_call(path: Path, recorded: Any, settings: TuneSettings, label: str, *, scale: float = 1.0,
                noise: float = 0.0, seed: int | None = None, definition: Any = None) -> KernelCall:
    """Recorded measurements (a Kernel Tuner cache, T4 or KTT file) standing for a kernel on a device."""
    from ..simulation.replay import ReplayRunner

    # The recording stands for the kernel *and* the hardware: its identity (kernel, format,
    # parameters, restrictions) is the "source"; its times are what the gate compares. Hashing
    # the file's bytes would turn every re-recorded (slower, faster, re-ranked) file into a
    # stale entry, and the gate could never see it.
    identity = {"format": recorded.format, "kernel": recorded.kernel, "params": recorded.params,
                "restrictions": [str(r) for r in recorded.restrictions]}
    hashes = {"source": hash_source(stable_hash(identity)), "space": space_hash(settings),
              "problem": hash_problem(None, [])}
    stat = path.stat()
    inputs = {"recording": [str(path), stat.st_size, stat.st_mtime_ns], "scale": scale, "noise": noise,
              "seed": seed, "definition": str(definition)}
    return KernelCall(label, hashes, inputs, lambda: ReplayRunner(recorded, noise=noise, scale=scale, seed=seed),
                      problem=describe_problem(None, []))
