"""Compile one CUDA configuration with NVRTC for an explicit architecture, without a GPU.

The CuPy runner compiles through CuPy, which asks the device which
architecture to target; this module does the same compile with NVIDIA's own
bindings (``cuda.bindings.nvrtc``, wheels ``cuda-bindings`` and
``nvidia-cuda-nvrtc``, CUDA 13, or ``nvidia-cuda-nvrtc-cu12``, CUDA 12) for
an architecture named by the caller, so CI machines without a GPU or driver
can prove kernels compile. It reproduces what the CuPy runner hands NVRTC:

* the source of :func:`~.kernel.render_source` (``#define`` lines, ``#line 1``),
* the kernel name of :func:`~.kernel.instantiated_name` as a name expression,
  resolved to the lowered (mangled) name the runner launches,
* the options: the spec's own, ``-I<source folder>``, then what CuPy 14 adds
  (``cupy/_core/core.pyx`` ``assemble_cupy_compiler_options`` and
  ``cupy/cuda/compiler.py``): ``--std=c++17`` unless a standard is given,
  the CCCL and CUDA runtime header folders (:func:`cuda_header_dirs`),
  ``-ftz=true``, ``-arch=sm_XX`` and ``--device-as-default-execution-space``.
  CuPy's own header folder is left out (kernels that include CuPy's headers
  need it on ``compiler_options``).

``-Xptxas=-v`` is added so ptxas writes registers, shared memory, stack and
spills of every kernel into the program log (:func:`parse_ptxas_log`); it
does not change the generated code.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from time import perf_counter
from typing import Any, Mapping, Sequence

from ..results import FailureKind
from ..execution.compile_pool import CompiledArtefact, artefact_cache_dir
from .cuda_arch import parse_arch
from .cuda_toolkit import cuda_header_dirs, find_header_dir  # noqa: F401 - re-exported: where NVRTC's headers are
from ..errors import BackendUnavailable, InvalidConfiguration
from ..execution.executor import check_kernel_resources, check_launch_limits
from ..execution.kernel import KernelSpec, instantiated_name, launch_geometry, render_source

# What ptxas says about local memory, per thread: recorded with each measurement the compile stage served.
SPILL_FACTS = ("spill_stores", "spill_loads", "stack_frame")
INSTALL_HINT = ('pip install "pytest-autotune[nvrtc]" (CUDA 13: cuda-bindings nvidia-cuda-nvrtc; '
                'for CUDA 12: "pytest-autotune[nvrtc12]")')
OLDER_NVRTC = ('an older NVRTC (NVRTC 13 dropped sm_70/sm_72): pip install "pytest-autotune[nvrtc12]" '
               '(cuda-bindings<13, nvidia-cuda-nvrtc-cu12)')
NEWER_NVRTC = 'a newer NVRTC: pip install -U "cuda-bindings>=13" nvidia-cuda-nvrtc'


def arch_remedy(archs: Sequence[int], supported: Sequence[int]) -> str:
    """What to install so an NVRTC that knows ``supported`` can compile for ``archs``: an older NVRTC for an
    architecture it dropped (below its oldest, as NVRTC 13 dropped sm_70/72), a newer one for any other."""
    if not supported:
        return f"install {NEWER_NVRTC}"
    dropped = [a for a in archs if a < min(supported)]
    unknown = [a for a in archs if a not in dropped]
    parts = []
    if dropped:
        parts.append(f"{', '.join(f'sm_{a}' for a in dropped)} needs {OLDER_NVRTC}")
    if unknown:
        parts.append(f"{', '.join(f'sm_{a}' for a in unknown)} needs {NEWER_NVRTC}")
    return "; ".join(parts)


@dataclass
class KernelResources:
    """What ptxas reports for one compiled kernel (per thread unless named otherwise)."""

    registers: int = 0
    shared_mem: int = 0  # static __shared__ bytes per block
    stack_frame: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    barriers: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"registers": self.registers, "static_shared_mem": self.shared_mem, "stack_frame": self.stack_frame,
                "spill_stores": self.spill_stores, "spill_loads": self.spill_loads}


@dataclass
class NvrtcResult:
    """Outcome of one NVRTC compile: ``ok`` with the kernel's resources, or the compiler log."""

    ok: bool
    arch: int
    name_expression: str
    lowered_name: str | None
    log: str
    options: tuple[str, ...]
    resources: KernelResources | None = None
    seconds: float = 0.0
    kernels: dict[str, KernelResources] = field(default_factory=dict)  # every kernel ptxas compiled
    cubin: bytes | None = None  # only when asked for (keep_cubin=True)
    program_log: str = ""  # NVRTC's program log alone (what CuPy's CompileException carries)


# -- availability ------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _nvrtc_module() -> Any:
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:
        raise BackendUnavailable(f"compiling without a GPU needs NVIDIA's NVRTC bindings ({INSTALL_HINT}): {exc}") \
            from None
    try:
        err, major, minor = nvrtc.nvrtcVersion()
    except Exception as exc:  # the bindings load libnvrtc lazily: a missing library fails here
        raise BackendUnavailable(f"the NVRTC library could not be loaded ({INSTALL_HINT}): {exc}") from None
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise BackendUnavailable(f"nvrtcVersion failed: {err}")
    return nvrtc


def nvrtc_version() -> tuple[int, int]:
    """(major, minor) of the loaded NVRTC; BackendUnavailable without it."""
    nvrtc = _nvrtc_module()
    _, major, minor = nvrtc.nvrtcVersion()
    return int(major), int(minor)


def nvrtc_unavailable_reason() -> str | None:
    """Why NVRTC cannot be used here, or None when it can."""
    try:
        _nvrtc_module()
    except BackendUnavailable as exc:
        return str(exc)
    return None


@lru_cache(maxsize=1)
def supported_archs() -> tuple[int, ...]:
    """Architectures the loaded NVRTC can generate code for (``nvrtcGetSupportedArchs``)."""
    nvrtc = _nvrtc_module()
    err, count = nvrtc.nvrtcGetNumSupportedArchs()
    _check(nvrtc, err, "nvrtcGetNumSupportedArchs")
    err, archs = nvrtc.nvrtcGetSupportedArchs()
    _check(nvrtc, err, "nvrtcGetSupportedArchs")
    return tuple(int(a) for a in archs[:count])


# -- options -----------------------------------------------------------------------------------------


def cupy_options(spec: KernelSpec, arch: int | str) -> tuple[str, ...]:
    """The NVRTC options the CuPy runner's compile of ``spec`` ends up with on an ``arch`` device.

    In CuPy's order (``assemble_cupy_compiler_options``, then
    ``compile_with_cache``): CCCL's folder first, the spec's options, the
    default standard, the CUDA runtime headers' folder, then CuPy's flags.
    CCCL is the installed one where CuPy uses its bundled copy.
    """
    user = tuple(spec.compiler_options) + ((f"-I{spec.source_file.parent}",) if spec.source_file else ())
    has_std = any("-std=" in o for o in user)
    cccl, cudart = cuda_header_dirs()
    return ((f"-I{cccl}",) * bool(cccl) + user + (() if has_std else ("--std=c++17",)) + (f"-I{cudart}",) * bool(cudart)
            + ("-ftz=true", f"-arch=sm_{parse_arch(arch)}", "--device-as-default-execution-space"))


# -- the ptxas log -----------------------------------------------------------------------------------

_ENTRY = re.compile(r"Compiling entry function '([^']+)' for 'sm_\w+'")
_PROPS = re.compile(r"Function properties for (\S+)")
_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_BARRIERS = re.compile(r"used (\d+) barriers")


def parse_ptxas_log(log: str) -> dict[str, KernelResources]:
    """Resources of every entry function in a ``ptxas -v`` log (as NVRTC returns it), by lowered name.

    Understands the layouts of ptxas 11.x to 12.x: ``Used 80 registers, used 1
    barriers, 8192 bytes smem`` (12.x) and ``Used 80 registers, 8192 bytes
    smem, 352 bytes cmem[0]`` (older), each preceded by ``Compiling entry
    function '<name>'`` and the ``N bytes stack frame, N bytes spill stores,
    N bytes spill loads`` line of ``Function properties for <name>``.
    """
    kernels: dict[str, KernelResources] = {}
    current: str | None = None
    props_for: str | None = None
    for line in log.splitlines():
        entry = _ENTRY.search(line)
        if entry:
            current = entry.group(1)
            kernels.setdefault(current, KernelResources())
            continue
        props = _PROPS.search(line)
        if props:
            props_for = props.group(1)
            continue
        stack = _STACK.search(line)
        if stack and (props_for or current):
            res = kernels.setdefault(props_for or current, KernelResources())  # type: ignore[arg-type]
            res.stack_frame, res.spill_stores, res.spill_loads = (int(g) for g in stack.groups())
            continue
        used = _USED.search(line)
        if used and current:
            res = kernels[current]
            res.registers = int(used.group(1))
            smem = _SMEM.search(line)
            res.shared_mem = int(smem.group(1)) if smem else 0
            bars = _BARRIERS.search(line)
            res.barriers = int(bars.group(1)) if bars else 0
    return kernels


# -- compiling ---------------------------------------------------------------------------------------


def _check(nvrtc: Any, err: Any, call: str) -> None:
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, text = nvrtc.nvrtcGetErrorString(err)
        raise RuntimeError(f"{call} failed: {text.decode() if isinstance(text, bytes) else text}")


def _read(nvrtc: Any, prog: Any, what: str) -> bytes:
    """The program's ``what`` ("ProgramLog", "CUBIN"): nvrtcGet<what>Size, then nvrtcGet<what> into a buffer."""
    err, size = getattr(nvrtc, f"nvrtcGet{what}Size")(prog)
    _check(nvrtc, err, f"nvrtcGet{what}Size")
    buf = b" " * size
    (err,) = getattr(nvrtc, f"nvrtcGet{what}")(prog, buf)
    _check(nvrtc, err, f"nvrtcGet{what}")
    return buf


def _program_log(nvrtc: Any, prog: Any) -> str:
    return _read(nvrtc, prog, "ProgramLog").rstrip(b"\0 ").decode(errors="replace").strip()


def compile_source(source: str, name_expression: str, options: Sequence[str], *, arch: int | str,
                   filename: str = "kernel.cu", keep_cubin: bool = False) -> NvrtcResult:
    """Compile ``source`` to a cubin for ``arch`` and look up ``name_expression``'s lowered name.

    ``options`` are passed as given, plus ``-Xptxas=-v``; an ``-arch`` in
    them must name ``arch``. Never raises for a source that does not
    compile: that is ``ok=False`` with NVRTC's log. BackendUnavailable when
    NVRTC is missing, ValueError for an architecture it cannot target.
    """
    nvrtc = _nvrtc_module()
    cc = parse_arch(arch)
    if cc not in supported_archs():
        known = ", ".join(f"sm_{a}" for a in supported_archs())
        raise ValueError(f"NVRTC {'.'.join(map(str, nvrtc_version()))} cannot compile for sm_{cc}; it knows {known}; "
                         f"{arch_remedy([cc], supported_archs())}")
    opts = tuple(options) + ("-Xptxas=-v",)
    if not any(o.startswith(("-arch", "--gpu-architecture")) for o in opts):
        opts = (f"--gpu-architecture=sm_{cc}",) + opts
    start = perf_counter()
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), filename.encode(), 0, [], [])
    _check(nvrtc, err, "nvrtcCreateProgram")
    try:
        (err,) = nvrtc.nvrtcAddNameExpression(prog, name_expression.encode())
        _check(nvrtc, err, "nvrtcAddNameExpression")
        (result,) = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        log = _program_log(nvrtc, prog)
        if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            _, text = nvrtc.nvrtcGetErrorString(result)
            label = text.decode() if isinstance(text, bytes) else str(text)
            return NvrtcResult(False, cc, name_expression, None, f"{label}\n{log}".strip(), opts,
                               seconds=perf_counter() - start, program_log=log)
        err, lowered = nvrtc.nvrtcGetLoweredName(prog, name_expression.encode())
        _check(nvrtc, err, "nvrtcGetLoweredName")
        lowered_name = lowered.decode() if isinstance(lowered, bytes) else str(lowered)
        cubin = _read(nvrtc, prog, "CUBIN") if keep_cubin else None
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    kernels = parse_ptxas_log(log)
    return NvrtcResult(True, cc, name_expression, lowered_name, log, opts, kernels.get(lowered_name),
                       perf_counter() - start, kernels, cubin, log)


def compile_configuration(spec: KernelSpec, params: Mapping[str, Any], arch: int | str, *,
                          keep_cubin: bool = False) -> NvrtcResult:
    """Compile one configuration of ``spec`` exactly as the CuPy runner would on an ``arch`` device."""
    source = render_source(spec, params)
    filename = spec.source_file.name if spec.source_file else "kernel.cu"
    return compile_source(source, instantiated_name(spec, params), cupy_options(spec, arch), arch=arch,
                          filename=filename, keep_cubin=keep_cubin)


# -- the cupy runner's compile stage ------------------------------------------------------------------


class NvrtcCompileStage:
    """The cupy runner's compile stage: NVRTC to a cubin for the device's architecture, in the calling process.

    Compiles what the CuPy runner would (:func:`cupy_options`, the same
    source and name expression), so the device stage only loads the cubin
    (``cupy.RawModule(path=...)``) under the lowered name. What never reaches
    the device: a launch geometry beyond the device's limits (INVALID), a
    source NVRTC rejects (COMPILE, with NVRTC's program log, CuPy's message),
    and a kernel whose ptxas-reported registers or static shared memory
    exceed the device's limits for the block (RESOURCES, the device stage's
    message). Spill stores/loads and the stack frame ptxas reports go into
    ``extra``, hence into the measurement. NVRTC releases the GIL while it compiles, so pool threads
    compile in parallel. Cubins are cached on disk by a hash of NVRTC's
    version, the options, the name and the source.
    """

    pause_while_timing = False  # the device times with CUDA events; host compiles do not disturb it

    def __init__(self, spec: KernelSpec, arch: int | str, limits: Mapping[str, Any],
                 cache_dir: str | os.PathLike | None = None) -> None:
        self.spec = spec
        self.arch = parse_arch(arch)
        self.limits = dict(limits)
        self.options = cupy_options(spec, self.arch)
        self.cache_dir = Path(cache_dir) if cache_dir else artefact_cache_dir("cubin")
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        self.filename = spec.source_file.name if spec.source_file else "kernel.cu"

    @classmethod
    def for_device(cls, spec: KernelSpec, arch: int | None, limits: Mapping[str, Any]) -> "NvrtcCompileStage | None":
        """A stage for a device of ``arch``, or None when NVRTC is missing here or cannot target it
        (the device stage then compiles through CuPy, as without a pool)."""
        if arch is None or nvrtc_unavailable_reason() is not None or parse_arch(arch) not in supported_archs():
            return None
        return cls(spec, arch, limits)

    def compile(self, params: Mapping[str, Any], processes: Any = None) -> CompiledArtefact:
        extra: dict[str, Any] = {}
        try:
            geometry = launch_geometry(self.spec, params)
            extra.update(grid=list(geometry[0]), block=list(geometry[1]), shared_mem=geometry[2])
            reason = check_launch_limits(geometry, self.limits)
            if reason:
                return CompiledArtefact(False, failure=FailureKind.INVALID, detail=reason, extra=extra)
            source = render_source(self.spec, params)
            name = instantiated_name(self.spec, params)
        except InvalidConfiguration as exc:
            return CompiledArtefact(False, failure=FailureKind.INVALID, detail=str(exc), extra=extra)
        extra.update(kernel_name=name, source_sha256=hashlib.sha256(source.encode()).hexdigest())
        start = perf_counter()
        key = hashlib.sha256(json.dumps([nvrtc_version(), self.options, name, source]).encode()).hexdigest()[:32]
        path, meta_path = self.cache_dir / f"{key}.cubin", self.cache_dir / f"{key}.json"
        if path.exists() and meta_path.exists():
            meta = json.loads(meta_path.read_text())
        else:
            result = compile_source(source, name, self.options, arch=self.arch, filename=self.filename,
                                    keep_cubin=True)
            if not result.ok:
                return CompiledArtefact(False, failure=FailureKind.COMPILE, detail=result.program_log,
                                        seconds=perf_counter() - start, extra=extra)
            res = result.resources or KernelResources()
            meta = {"lowered_name": result.lowered_name, "registers": res.registers,
                    "static_shared_mem": res.shared_mem, **{k: getattr(res, k) for k in SPILL_FACTS}}
            _write_atomically(path, result.cubin or b"")
            _write_atomically(meta_path, json.dumps(meta).encode())
        extra.update({k: meta[k] for k in SPILL_FACTS if k in meta})  # the measurement records them
        _, block, smem = geometry
        reason = check_kernel_resources(threads=block[0] * block[1] * block[2], static_smem=meta["static_shared_mem"],
                                        dynamic_smem=smem, registers_per_thread=meta["registers"],
                                        kernel_max_threads=None, limits=self.limits)
        seconds = perf_counter() - start
        if reason:
            return CompiledArtefact(False, failure=FailureKind.RESOURCES, detail=reason, seconds=seconds, extra=extra)
        return CompiledArtefact(True, path=str(path), symbol=meta["lowered_name"], seconds=seconds, extra=extra)


def _write_atomically(path: Path, data: bytes) -> None:
    """Write to a temporary file beside ``path``, then rename: a reader never sees half a file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
