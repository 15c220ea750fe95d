"""Compile a kernel's configurations for GPU architectures without a GPU (``pytest --autotune-compile=sm_80,sm_90``).

Most CI machines have no GPU, so a kernel change that breaks some
configurations would only show on the next tuning run. This check compiles,
with the kernel's runner's own compiler and no driver (the ``cupy`` runner's
NVRTC with CuPy's options, the ``pycuda`` runner's nvcc command line: the
builders of :mod:`..static.build`), for each named architecture:

* the locked winner of every lockfile whose device has that architecture,
* the search space's valid configurations under that architecture's limits
  (:func:`~pytest_autotune.backends.cuda_arch.arch_limits`): all of them when
  there are at most ``sample``, else a seeded sample of ``sample``,

and reports each one that the restrictions allow but that does not compile
(``compile``) or exceeds the architecture's static limits (``resources``:
registers x threads, static and static + dynamic shared memory, block shape;
the limit is named). Each configuration's compile time and ptxas resources are recorded.

:func:`check_kernel` is the engine entry point (plain Python);
:func:`check_in_test` is the thin adapter the ``autotune`` fixture calls.
"""
from __future__ import annotations

import argparse
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ..measure.timing import TimingStats
from .outcome import KernelResult, Mode, Outcome, Status, SummaryRow
from ..backends.cuda_arch import ARCH_LIMITS, arch_limits, parse_arch
from ..lock.devices import device_arch
from ..errors import BackendUnavailable, InvalidConfiguration
from ..execution.executor import check_kernel_resources, check_launch_limits
from ..execution.kernel import KernelSpec, launch_geometry
from ..space.membership import NotInSpace, declared_configuration
from ..space import SearchSpace
from ..static.build import StaticBuildError, build_for_runner, find_nvcc, nvcc_toolchain

DEFAULT_SAMPLE = 64
STATUSES = ("ok", "compile", "resources", "invalid")
# A CCCL header (CUB, Thrust, libcu++) that was not found: nvcc's host preprocessor ("cub/cub.cuh: No such file or
# directory"), or NVRTC's and cudafe's front end ('cannot open source file "cub/cub.cuh"')
_NO_CCCL = re.compile(r"""\b(?:cub|thrust|cuda|nv)/[\w/.]+: No such file|cannot open source file "(?:cub|thrust|cuda|nv)/""")
CCCL_HINT = ("CCCL's headers (CUB, Thrust, libcu++) are not installed where the compiler looks: pip install "
             "nvidia-cuda-cccl (its include/cccl folder beside the nvidia-cuda-nvcc and -nvrtc wheels' headers), or "
             "use a CUDA toolkit that has include/cccl")
_TOO_MUCH_SHARED = re.compile(r"uses too much shared data \((0x[0-9a-fA-F]+) bytes, (0x[0-9a-fA-F]+) max\)")


@dataclass
class ConfigCheck:
    """One configuration compiled for one architecture."""

    arch: int
    params: dict[str, Any]
    origin: str  # "locked" (a lockfile's winner) or "space"
    status: str  # one of STATUSES
    detail: str = ""
    # ptxas's registers, static_shared_mem, stack_frame (local memory per thread), spill_stores, spill_loads; and
    # the launch's threads and dynamic_shared_mem with the theoretical occupancy they give
    resources: dict[str, Any] | None = None
    lowered_name: str | None = None
    seconds: float = 0.0  # wall time of the compile (of the attempt, for one that failed)
    compiler: str = ""  # "nvrtc 13.0", "nvcc 13.0.88": what built it

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def spills(self) -> bool:
        return bool(self.resources and (self.resources["spill_stores"] or self.resources["spill_loads"]))

    def as_dict(self) -> dict[str, Any]:
        return {"arch": f"sm_{self.arch}", "params": self.params, "origin": self.origin, "status": self.status,
                "detail": self.detail, "resources": self.resources, "lowered_name": self.lowered_name,
                "seconds": round(self.seconds, 4)}

    def passed_dict(self) -> dict[str, Any]:
        """What the JSON report keeps of a configuration that passed: where, what, how long, its resources."""
        return {"arch": f"sm_{self.arch}", "params": self.params, "origin": self.origin,
                "seconds": round(self.seconds, 4), "resources": self.resources}


@dataclass
class CompileCheckReport:
    """Every configuration checked for one kernel, and the size of each architecture's valid space."""

    kernel: str
    checks: list[ConfigCheck] = field(default_factory=list)
    space_sizes: dict[int, int] = field(default_factory=dict)

    def failures(self) -> list[ConfigCheck]:
        return [c for c in self.checks if not c.ok]

    def counts(self) -> dict[str, dict[str, Any]]:
        """Per architecture: configurations compiled, failures by status, configurations that spill, the
        compile time of them all (seconds) and the compiler that built them."""
        out: dict[str, dict[str, Any]] = {}
        for arch, size in self.space_sizes.items():
            mine = [c for c in self.checks if c.arch == arch]
            row: dict[str, Any] = {"valid_configurations": size, "compiled": len(mine)}
            row.update({s: sum(c.status == s for c in mine) for s in STATUSES if s != "ok"})
            row["spilling"] = sum(c.spills for c in mine)
            row["seconds"] = round(sum(c.seconds for c in mine), 3)
            row["compiler"] = next((c.compiler for c in mine if c.compiler), "")
            out[f"sm_{arch}"] = row
        return out

    def passed(self) -> list[ConfigCheck]:
        return [c for c in self.checks if c.ok]

    def failure_message(self, limit: int = 5) -> str:
        bad = self.failures()
        lines = [f"{len(bad)} of {len(self.checks)} configurations of {self.kernel} that the restrictions allow "
                 "cannot work:"]
        for c in bad[:limit]:
            params = ", ".join(f"{k}={v}" for k, v in c.params.items())
            first = _first_lines(c.detail)
            lines.append(f"  sm_{c.arch} {c.origin} {{{params}}}: {c.status}: {first}")
        if len(bad) > limit:
            lines.append(f"  ... and {len(bad) - limit} more")
        return "\n".join(lines)


def _first_lines(text: str, n: int = 3) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and "ptxas info" not in ln
             and not ln.lstrip().startswith("ptxas         .")]
    return " | ".join(lines[:n])


# -- one configuration --------------------------------------------------------------------------------


def check_configuration(spec: KernelSpec, params: Mapping[str, Any], arch: int | str, *,
                        limits: Mapping[str, Any] | None = None, origin: str = "space", runner: str | None = None,
                        nvcc: str | None = None) -> ConfigCheck:
    """Compile ``params`` for ``arch`` as ``runner`` compiles it (:func:`compiler_runner`) and check the result
    against the architecture's static limits. BackendUnavailable when the compiler is missing or cannot target
    ``arch`` (the check cannot be made here: no configuration's fault)."""
    cc = parse_arch(arch)
    limits = dict(limits) if limits is not None else arch_limits(cc)
    params = dict(params)
    try:
        geometry = launch_geometry(spec, params)
    except InvalidConfiguration as exc:
        return ConfigCheck(cc, params, origin, "invalid", str(exc))
    reason = check_launch_limits(geometry, limits)
    if reason:
        return ConfigCheck(cc, params, origin, "resources", reason)
    start = time.perf_counter()
    try:
        built = build_for_runner(compiler_runner(runner), spec, params, cc, nvcc=nvcc)
    except StaticBuildError as exc:
        seconds = time.perf_counter() - start
        log = exc.log or exc.message
        too_much = _TOO_MUCH_SHARED.search(log)
        if too_much:
            used, cap = (int(v, 16) for v in too_much.groups())
            return ConfigCheck(cc, params, origin, "resources",
                               f"{used} bytes of static shared memory exceed max_static_shared_memory_per_block = "
                               f"{cap} (ptxas: {too_much.group(0)})", seconds=seconds)
        if _NO_CCCL.search(log):  # a CCCL header not found: what is missing is an install, not a fix
            log = f"{CCCL_HINT}\n{log}"
        return ConfigCheck(cc, params, origin, "compile", log, seconds=seconds)
    seconds = time.perf_counter() - start
    res = built.resources
    reason = check_kernel_resources(threads=built.threads, static_smem=res.shared_mem,
                                    dynamic_smem=built.dynamic_shared, registers_per_thread=res.registers,
                                    kernel_max_threads=None, limits=limits)
    return ConfigCheck(cc, params, origin, "resources" if reason else "ok", reason or "",
                       built.report(occupancy=not reason), built.symbol, seconds,
                       built.toolchain.get("compiler", ""))


def compiler_runner(runner: str | None) -> str:
    """The runner whose compiler builds a CUDA kernel of ``runner``: ``pycuda`` -> nvcc, PyCUDA's command line;
    ``cupy`` or a runner without a build of its own -> NVRTC, CuPy's. None named: the runner a plain run here
    would pick (CuPy's, else PyCUDA's where only PyCUDA is installed), NVRTC where neither is."""
    if runner is None:
        from ..backends import registry

        installed = [b.name for b in registry.for_language("cuda") if b.available()]
        runner = installed[0] if installed else "cupy"
    return "pycuda" if runner == "pycuda" else "cupy"


# -- a kernel's configurations ------------------------------------------------------------------------


def configurations_to_check(space: SearchSpace, sample: int = DEFAULT_SAMPLE, seed: int = 0) -> list[dict[str, Any]]:
    """All of ``space`` when it has at most ``sample`` configurations, else a seeded sample of ``sample``."""
    if sample < 1:
        raise ValueError(f"sample must be at least 1, got {sample}")
    n = len(space)
    rows: Iterable[int] = range(n) if n <= sample else np.sort(np.random.default_rng(seed).choice(n, sample,
                                                                                                 replace=False))
    return [space.get(int(r)) for r in rows]


def check_kernel(spec: KernelSpec, params: Mapping[str, Sequence[Any]], restrictions: Sequence[Any] | None,
                 archs: Sequence[int | str], *, constants: Mapping[str, Any] | None = None,
                 locked: Mapping[int, Sequence[Mapping[str, Any]]] | None = None, sample: int = DEFAULT_SAMPLE,
                 seed: int = 0, name: str | None = None, max_configurations: int | None = None,
                 runner: str | None = None, nvcc: str | None = None) -> CompileCheckReport:
    """Compile ``spec``'s locked winners and valid configurations for every architecture in ``archs``, with
    ``runner``'s compiler (:func:`check_configuration`).

    The space is built per architecture with that architecture's limits as
    restriction constants (``constants`` override them, as a marker's do).
    ``locked`` maps an architecture to the winners locked for it.
    """
    report = CompileCheckReport(name or spec.kernel_name)
    for arch in archs:
        cc = parse_arch(arch)
        limits = arch_limits(cc)
        space = SearchSpace(dict(params), list(restrictions or []), {**limits, **(constants or {})},
                            max_configurations=max_configurations)
        report.space_sizes[cc] = len(space)
        todo = []
        for i, winner in enumerate((locked or {}).get(cc, [])):
            # a lockfile is data: only the marker's own values of a point of its space are compiled
            try:
                todo.append((declared_configuration(winner, params, list(restrictions or []),
                                                    {**limits, **(constants or {})}, where="params"), "locked"))
            except NotInSpace as exc:
                report.checks.append(ConfigCheck(cc, {k: str(v)[:40] for k, v in dict(winner).items()}
                                                 if isinstance(winner, Mapping) else {}, "locked", "invalid",
                                                 f"the locked winner was not compiled: {exc}"))
        todo += [(p, "space") for p in configurations_to_check(space, sample, seed)]
        for config, origin in todo:
            report.checks.append(check_configuration(spec, config, cc, limits=limits, origin=origin, runner=runner,
                                                     nvcc=nvcc))
    return report


def locked_winners(lockdir: str | Path, nodeid: str, kernel: str, archs: Sequence[int]) -> dict[int, list[dict]]:
    """Winners of ``nodeid``'s ``kernel`` in every lockfile under ``lockdir`` whose device has one of ``archs``."""
    from ..lock.lockfile import get_entry, read_lockfile

    found: dict[int, list[dict]] = {}
    for path in sorted(Path(lockdir).glob("*.json")) if Path(lockdir).is_dir() else ():
        lock = read_lockfile(path)
        cc = device_arch(lock.device) if lock else None
        if cc not in archs:
            continue
        entry = get_entry(lock, nodeid, kernel)
        if entry is not None:
            found.setdefault(int(cc), []).append(entry.params)
    return found


# -- command line -------------------------------------------------------------------------------------


def parse_arch_list(text: str) -> list[int]:
    """``--autotune-compile`` value: ``"sm_80,sm_90"`` -> ``[80, 90]``; argparse error naming the bad entry."""
    archs = []
    for part in (p.strip() for p in str(text).split(",")):
        if not part:
            continue
        try:
            cc = parse_arch(part)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        if cc not in ARCH_LIMITS:
            known = ", ".join(f"sm_{a}" for a in sorted(ARCH_LIMITS))
            raise argparse.ArgumentTypeError(f"no device limits for {part!r}; known architectures: {known}")
        archs.append(cc)
    if not archs:
        raise argparse.ArgumentTypeError("expected a comma-separated list of architectures such as sm_80,sm_90")
    return list(dict.fromkeys(archs))


def positive_sample(text: str) -> int:
    """``--autotune-compile-sample`` value: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of configurations >= 1, got {text!r}")
    return value


# -- the lifecycle's compile mode ------------------------------------------------------------------------


def compile_outcome(spec: KernelSpec, settings: Any, options: Any, test: str, label: str,
                    runner: str | None = None, nvcc: str | None = None) -> Outcome:
    """What ``autotune.kernel`` does under ``--autotune-compile``: check, a summary row, a failure for a bad one.

    The kernel is built by its runner's compiler (:func:`compiler_runner`; ``nvcc``: the pycuda runner's
    ``nvcc`` option, None for its default). The sample is the marker's ``compile_sample``, else the flag's.
    The result's params are the configuration the test gets back: a locked winner, else the first valid
    configuration (no timings: nothing ran).
    """
    from ..lock.lockfile import LockfileError

    started = time.perf_counter()
    archs: list[int] = list(options.compile_archs)
    sample: int = settings.compile_sample or options.compile_sample or DEFAULT_SAMPLE
    flag = "--autotune-compile=" + ",".join(f"sm_{cc}" for cc in archs)
    compiler = compiler_runner(runner)
    # The check was asked for: without the compiler it fails (a skip would let a broken CI job pass green).
    unusable = _nvcc_unusable(nvcc) if compiler == "pycuda" else _nvrtc_unusable(archs, flag)
    if unusable:
        return Outcome.failed(unusable)
    try:
        locked = locked_winners(options.lockdir, test, label, archs)
    except LockfileError as exc:
        return Outcome.failed(f"autotune: {exc}")
    try:
        report = check_kernel(spec, settings.params, settings.restrictions, archs, constants=settings.constants,
                              locked=locked, sample=sample, seed=settings.seed or 0, name=label,
                              max_configurations=settings.max_configurations, runner=compiler, nvcc=nvcc)
    except BackendUnavailable as exc:  # nvcc that cannot target an architecture asked for
        return Outcome.failed(f"autotune: {flag}: {exc}")
    failures = report.failures()
    chosen = next((c.params for c in report.checks if c.ok), {})
    recorded = _record_static(spec, settings, options, test, label, compiler, report) if options.record_static else []
    row = SummaryRow.make(test, label, Mode.COMPILE, Status.COMPILE_FAILED if failures else Status.COMPILED,
                          params=chosen, evaluations=len(report.checks), budget=len(report.checks),
                          strategy="nvcc" if compiler == "pycuda" else "nvrtc",
                          failures={k: v for k, v in _failure_totals(report).items() if v}, compile=report.counts(),
                          spills=[c.as_dict() for c in report.checks if c.spills],
                          configurations=[c.passed_dict() for c in report.passed()],
                          seconds=round(time.perf_counter() - started, 3),
                          message=report.failure_message() if failures else "",
                          **({"note": "static baseline: " + "; ".join(recorded)} if recorded else {}))
    if failures:
        return Outcome.failed(f"autotune: {report.failure_message()}", row)
    return Outcome.passed(KernelResult(label, "compile", dict(chosen), TimingStats.untimed()), row)


def _nvrtc_unusable(archs: Sequence[int], flag: str) -> str:
    """Why NVRTC cannot make the check here (missing, or an architecture it cannot target); empty when it can."""
    from ..backends import nvrtc

    reason = nvrtc.nvrtc_unavailable_reason()
    if reason:
        return f"autotune: --autotune-compile needs NVRTC: {reason}"
    unknown = [cc for cc in archs if cc not in nvrtc.supported_archs()]
    if not unknown:
        return ""
    version = ".".join(map(str, nvrtc.nvrtc_version()))
    known = ", ".join(f"sm_{cc}" for cc in nvrtc.supported_archs())
    return (f"autotune: {flag}: NVRTC {version} cannot compile for {', '.join(f'sm_{cc}' for cc in unknown)} "
            f"(it knows {known}); {nvrtc.arch_remedy(unknown, nvrtc.supported_archs())}")


def _nvcc_unusable(nvcc: str | None) -> str:
    """Why the pycuda runner's nvcc cannot be run here; empty when it can."""
    try:
        nvcc_toolchain(find_nvcc(nvcc))
    except BackendUnavailable as exc:
        return f"autotune: --autotune-compile needs nvcc for the pycuda runner: {exc}"
    return ""


def _record_static(spec: KernelSpec, settings: Any, options: Any, test: str, label: str, runner: str | None,
                   report: CompileCheckReport) -> list[str]:
    """``--autotune-record-static``: per architecture, the profile of the configuration the kernel ships with
    there (its lock entry's winner, else the first configuration of its space that compiled)."""
    from .calls import source_call
    from .static_gate import record_static_baselines

    chosen: dict[int, dict[str, Any]] = {}
    origins: dict[int, str] = {}
    for origin, name in (("locked", "lock entry"), ("space", "first configuration")):
        for c in report.checks:
            if c.ok and c.origin == origin and c.arch not in chosen:
                chosen[c.arch], origins[c.arch] = c.params, name
    k = source_call(spec, settings, label, runner=runner)
    return record_static_baselines(k, test, list(report.space_sizes), chosen, origins, runner, options.lockdir)


def _failure_totals(report: CompileCheckReport) -> dict[str, int]:
    return {s: sum(c.status == s for c in report.checks) for s in STATUSES if s != "ok"}
