"""The ``c`` runner: C/C++ on the CPU, compiled with gcc/g++, called through ctypes.

Each configuration is compiled with ``-O3 -shared -fPIC`` into a shared
library kept in an on-disk cache named by the hash of compiler, flags and the
rendered source (which carries every parameter as a ``#define``), so a second
run of the same configuration skips the compiler. Array arguments are passed
as pointers to buffers the runner owns (allocated once per runner); numpy
scalars by value with the matching ctypes type. The runner times each call
from outside with ``perf_counter_ns``; the C function need not time itself.

C++ and templates: for a C++ source the runner appends an ``extern "C"``
accessor that returns the address of the kernel expression, e.g.
``&vadd<4, 2>``. Taking the address instantiates the template, and the
runner never has to know a mangled name or parse a signature; non-template
C++ functions work the same way, with or without ``extern "C"``.
"""
from __future__ import annotations

import _ctypes
import ctypes
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from time import perf_counter, perf_counter_ns, thread_time_ns
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..measure.reference import CHAIN_ITERATIONS, REFERENCE_SOURCE, triad_repeats
from ..measure.timing import MeasureOptions
from ..results import FailureKind
from ..execution.compile_pool import CompiledArtefact, CompilerProcesses, artefact_cache_dir
from ..execution.device import DeviceInfo, compiler_version, cpu_constants, detect_cpu_device
from ..errors import ArtefactUnusable, BackendUnavailable, SpecError
from ..execution.executor import CompileFailed, CompiledKernelExecutor
from ..execution.isolation import HostedRunner
from ..execution.kernel import Geometry, KernelSpec, instantiated_name, render_source

ACCESSOR = "pytest_autotune_kernel_address"
DEFAULT_FLAGS = ("-O3",)
_MAX_LOG = 20000


def default_cache_dir() -> Path:
    """``$PYTEST_AUTOTUNE_CACHE_DIR/c``, else ``$XDG_CACHE_HOME/pytest-autotune/c``, else ``~/.cache/...``."""
    return artefact_cache_dir("c")


CompilerRun = Callable[[Sequence[str], float], "subprocess.CompletedProcess[str]"]


def run_compiler(cmd: Sequence[str], timeout: float) -> "subprocess.CompletedProcess[str]":
    """Run a compiler in the calling thread (the device stage's own compiles)."""
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)


def ctype_of(value: Any) -> Any:
    """ctypes type passing a numpy scalar by value."""
    dtype = np.asarray(value).dtype
    if dtype == np.bool_:
        return ctypes.c_bool
    try:
        return np.ctypeslib.as_ctypes_type(dtype)
    except NotImplementedError:
        raise SpecError(f"numpy scalar of dtype {dtype} has no C equivalent for the C runner") from None


class CCompileStage:
    """The c runner's compile stage: render, gcc/g++ into the shared-library cache, return the library's path.

    Pure CPU work, no kernel arguments needed, so a compile pool runs it in the
    calling process while the device stage (:class:`CExecutor`) times another
    configuration; the executor uses the same stage for its own compiles, so
    both name and build a library identically.
    """

    pause_while_timing = True  # the compilers share the CPU with the timed kernel

    def __init__(self, spec: KernelSpec, *, compiler: str | None = None, flags: Sequence[str] = DEFAULT_FLAGS,
                 cache_dir: str | os.PathLike | None = None, compile_timeout_s: float = 300.0) -> None:
        if spec.lang not in ("c", "c++"):
            raise SpecError(f"the c runner compiles C or C++, not {spec.lang!r} source")
        self.spec = spec
        self.cxx = spec.lang == "c++"
        if spec.is_template and not self.cxx:
            raise SpecError(f"template kernel name {spec.kernel_name!r} needs C++ source (.cpp or lang='c++')")
        self.compiler = compiler or os.environ.get("CXX" if self.cxx else "CC") or ("g++" if self.cxx else "gcc")
        if shutil.which(self.compiler) is None:
            raise BackendUnavailable(f"compiler {self.compiler!r} not found on PATH")
        self.compiler_id = compiler_version(self.compiler)
        includes = [f"-I{spec.source_file.parent}"] if spec.source_file else []
        self.flags = [*flags, "-shared", "-fPIC", *includes, *spec.compiler_options]
        self.cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        self.compile_timeout_s = compile_timeout_s

    def full_source(self, source: str, name: str) -> str:
        if not self.cxx:
            return source
        return source + f'\nextern "C" void* {ACCESSOR}(void) {{ return reinterpret_cast<void*>(&{name}); }}\n'

    def cache_key(self, source: str, name: str) -> str:
        blob = json.dumps([self.compiler, self.compiler_id, self.flags, self.spec.lang, name, source])
        return hashlib.sha256(blob.encode()).hexdigest()[:32]

    def library(self, source: str, name: str, run: CompilerRun = run_compiler) -> tuple[Path, bool]:
        """The shared library of ``source`` (built unless cached) and whether it was cached; CompileFailed."""
        text = self.full_source(source, name)
        library = self.cache_dir / f"{self.cache_key(text, name)}.so"
        if library.exists():
            return library, True
        self._build(text, library, run)
        return library, False

    def _build(self, text: str, library: Path, run: CompilerRun) -> None:
        suffix = ".cpp" if self.cxx else ".c"
        with tempfile.TemporaryDirectory(prefix="autotune-c-", dir=self.cache_dir) as tmp:
            src = Path(tmp) / f"{library.stem}{suffix}"
            src.write_text(text)
            out = Path(tmp) / library.name
            cmd = [self.compiler, *self.flags, "-o", str(out), str(src)]
            try:
                proc = run(cmd, self.compile_timeout_s)
            except subprocess.TimeoutExpired:
                raise CompileFailed(f"compiler timed out after {self.compile_timeout_s:g} s") from None
            if proc.returncode != 0:
                log = (proc.stderr or proc.stdout or "").strip()
                raise CompileFailed(f"$ {' '.join(cmd)}\n{log[-_MAX_LOG:]}")
            os.replace(out, library)  # atomic: concurrent runners never load a half-written file
            src_keep = library.with_suffix(suffix)
            os.replace(src, src_keep)  # the exact source stays next to its library

    def compile(self, params: Mapping[str, Any], processes: CompilerProcesses) -> CompiledArtefact:
        """One configuration, compiled ahead by a pool (the compiler is pausable through ``processes``)."""
        source = render_source(self.spec, params)
        name = instantiated_name(self.spec, params)
        extra = {"kernel_name": name, "source_sha256": hashlib.sha256(source.encode()).hexdigest()}
        t = perf_counter()
        try:
            library, hit = self.library(source, name, processes.run)
        except CompileFailed as exc:
            return CompiledArtefact(False, failure=FailureKind.COMPILE, detail=exc.log, seconds=perf_counter() - t,
                                    extra=extra)
        return CompiledArtefact(True, path=str(library), symbol=name, seconds=perf_counter() - t,
                                extra={**extra, "cache_hit": hit})


class CExecutor(CompiledKernelExecutor):
    """In-process half of :class:`CRunner`."""

    name = "c"
    uses_geometry = False

    def __init__(
        self,
        spec: KernelSpec,
        measure: MeasureOptions | None = None,
        *,
        compiler: str | None = None,
        flags: Sequence[str] = DEFAULT_FLAGS,
        cache_dir: str | os.PathLike | None = None,
        unload: bool | None = None,
    ) -> None:
        super().__init__(spec, measure)
        self.offcpu = []  # a C kernel runs on this thread: each timed run's time off the CPU
        self.stage = CCompileStage(spec, compiler=compiler, flags=flags, cache_dir=cache_dir,
                                   compile_timeout_s=self.measure.compile_timeout_s)
        self.cxx, self.compiler, self.flags = self.stage.cxx, self.stage.compiler, self.stage.flags
        self.cache_dir = self.stage.cache_dir
        # dlclose after each configuration keeps long runs from piling up mappings;
        # OpenMP runtimes are known to crash when their user library is unloaded.
        uses_openmp = "#pragma omp" in spec.code or any("openmp" in f for f in self.flags)
        self.unload = (not uses_openmp) if unload is None else unload

        self.buffers = list(spec.args)
        for i, arg in enumerate(self.buffers):
            if isinstance(arg, np.ndarray):
                self.buffers[i] = np.array(arg, copy=True, order="C")
        self.outputs = spec.output_indices
        self.pristine = {i: self.buffers[i].copy() for i in self.outputs}
        self.argtypes = [ctypes.c_void_p if isinstance(a, np.ndarray) else ctype_of(a) for a in self.buffers]
        self.cargs = [
            ctypes.c_void_p(a.ctypes.data) if isinstance(a, np.ndarray) else t(a.item())
            for a, t in zip(self.buffers, self.argtypes)
        ]
        self._device = detect_cpu_device(self.compiler)
        self._flush: np.ndarray | None = None
        self._flush_value = 0
        self.cache_hits = 0
        self.cache_misses = 0
        self._last_cache_hit = False
        self._reference: ReferenceRun | None = None

    def device(self) -> DeviceInfo:
        return self._device

    def constants(self) -> dict[str, Any]:
        return cpu_constants(self._device)

    # -- compile ---------------------------------------------------------------
    def compile(self, source: str, name: str) -> Any:
        library, hit = self.stage.library(source, name)
        self._count(hit)
        return self._open(library)

    def load(self, artefact: Any, source: str, name: str) -> Any:
        """The library the compile stage built; one that does not load is :class:`ArtefactUnusable` (compiled
        again inline, the measurement marked as a fallback)."""
        try:
            library = self._open(Path(artefact.path))
        except CompileFailed as exc:
            raise ArtefactUnusable(exc.log) from None
        self._count(bool(artefact.extra.get("cache_hit")))
        return library

    def _count(self, hit: bool) -> None:
        self._last_cache_hit = hit
        if hit:
            self.cache_hits += 1
        else:
            self.cache_misses += 1

    def _open(self, library: Path) -> Any:
        try:
            lib = ctypes.CDLL(str(library), mode=os.RTLD_LOCAL | os.RTLD_NOW)
        except OSError as exc:
            raise CompileFailed(f"cannot load the compiled library {library}: {exc}") from None
        try:
            if self.cxx:
                address_of = getattr(lib, ACCESSOR)
                address_of.restype = ctypes.c_void_p
                address_of.argtypes = []
                fn = ctypes.CFUNCTYPE(None, *self.argtypes)(address_of())
            else:
                fn = getattr(lib, self.spec.base_name)
                fn.argtypes = self.argtypes
                fn.restype = None
        except AttributeError:
            self._unload(lib)
            raise CompileFailed(
                f"function {self.spec.base_name!r} not found in the compiled library; "
                "check kernel_name (and, in C, that the function is not static)"
            ) from None
        return lib, fn

    def kernel_info(self, kernel: Any) -> dict[str, Any]:
        return {"cache_hit": self._last_cache_hit}

    def release(self, kernel: Any) -> None:
        lib, _ = kernel
        if self.unload:
            self._unload(lib)

    @staticmethod
    def _unload(lib: Any) -> None:
        try:
            _ctypes.dlclose(lib._handle)
        except OSError:
            pass

    # -- run -------------------------------------------------------------------
    def restore_outputs(self) -> None:
        for i in self.outputs:
            np.copyto(self.buffers[i], self.pristine[i])

    def flush_cache(self) -> None:
        if self._flush is None:
            llc = max([v for k, v in self.constants().items() if k.endswith("_cache")] or [32 << 20])
            self._flush = np.empty(2 * llc, dtype=np.uint8)
        self._flush_value = (self._flush_value + 1) & 0xFF
        self._flush.fill(self._flush_value)

    def prepare_run(self) -> None:
        super().prepare_run()
        if self.reference_n:  # the machine's state just before this run (measure/reference.py)
            try:
                self.reference.append(self._reference_run().run())
            except (CompileFailed, BackendUnavailable):  # no reference here: the runs are judged as they are
                self.reference_n = 0
                self.reference.clear()

    def _reference_run(self) -> "ReferenceRun":
        if self._reference is None or self._reference.n != self.reference_n:
            self._reference = ReferenceRun(self.reference_n, self.cache_dir)
        return self._reference

    def run_once(self, kernel: Any, geometry: Geometry) -> None:
        kernel[1](*self.cargs)

    def timed_run(self, kernel: Any, geometry: Geometry) -> float:
        fn, args = kernel[1], self.cargs
        c0 = thread_time_ns()
        t0 = perf_counter_ns()
        fn(*args)
        t1 = perf_counter_ns()
        c1 = thread_time_ns()
        if self.offcpu is not None:  # the thread's CPU time covers the clock reads too: never more than the wall
            self.offcpu.append(max(0.0, ((t1 - t0) - (c1 - c0)) * 1e-6))
        return (t1 - t0) * 1e-6

    def fetch_outputs(self) -> list[Any]:
        views = []
        for value in self.buffers:
            if isinstance(value, np.ndarray):
                value = value.view()
                value.flags.writeable = False
            views.append(value)
        return views


class ReferenceRun:
    """The reference run (:mod:`~pytest_autotune.measure.reference`): a triad over three arrays of ``n`` floats
    (repeated where ``n`` is small) and about 40 us of multiply-add chains, built with the default compiler and
    flags whatever the kernel's build uses, so that a change of the kernel's toolchain or flags does not move it."""

    def __init__(self, n: int, cache_dir: str | os.PathLike | None = None) -> None:
        self.n, self.repeats = int(n), triad_repeats(int(n))
        self.arrays = [np.zeros(self.n, np.float32), np.ones(self.n, np.float32), np.full(self.n, 2.0, np.float32)]
        self.chain_state = np.ones(4, np.float32)
        spec = KernelSpec(REFERENCE_SOURCE, "triad", 1, [*self.arrays, np.float32(1.5), np.int32(self.n)], lang="c")
        library, _ = CCompileStage(spec, cache_dir=cache_dir).library(REFERENCE_SOURCE, "triad")
        try:
            self._lib = ctypes.CDLL(str(library), mode=os.RTLD_LOCAL | os.RTLD_NOW)
        except OSError as exc:
            raise CompileFailed(f"cannot load the reference run {library}: {exc}") from None
        self._triad, self._chains = self._lib.triad, self._lib.chains
        self._triad.restype = self._chains.restype = None
        self._triad.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_float, ctypes.c_int]
        self._chains.argtypes = [ctypes.c_void_p, ctypes.c_int]
        self._triad_args = [*(a.ctypes.data for a in self.arrays), 1.5, self.n]
        self._chain_args = [self.chain_state.ctypes.data, CHAIN_ITERATIONS]

    def run(self) -> tuple[float, float]:
        """One run of each: the triad's (its repeats) and the chains' wall times (ms)."""
        t0 = perf_counter_ns()
        for _ in range(self.repeats):
            self._triad(*self._triad_args)
        t1 = perf_counter_ns()
        self._chains(*self._chain_args)
        t2 = perf_counter_ns()
        return (t1 - t0) * 1e-6, (t2 - t1) * 1e-6


class CRunner(HostedRunner):
    """Tune C/C++ functions on the CPU.

    Options: ``isolate`` (default True: segfaults and endless loops cost one
    configuration), ``measure`` (:class:`MeasureOptions` or a dict),
    ``compiler`` (default ``$CC``/``$CXX`` or gcc/g++), ``flags`` (default
    ``("-O3",)``; ``-shared -fPIC`` are always added), ``cache_dir``.
    """

    name = "c"
    executor_target = "pytest_autotune.backends.c_runner:CExecutor"

    def __init__(
        self,
        spec: KernelSpec,
        *,
        isolate: bool = True,
        measure: MeasureOptions | dict[str, Any] | None = None,
        compiler: str | None = None,
        flags: Sequence[str] = DEFAULT_FLAGS,
        cache_dir: str | os.PathLike | None = None,
        unload: bool | None = None,
    ) -> None:
        if not isinstance(spec, KernelSpec):
            raise SpecError(f"CRunner needs a KernelSpec, got {type(spec).__name__}")
        if spec.lang not in ("c", "c++"):
            raise SpecError(f"the c runner compiles C or C++, not {spec.lang!r} source")
        if spec.is_template and spec.lang != "c++":
            raise SpecError(f"template kernel name {spec.kernel_name!r} needs C++ source (.cpp or lang='c++')")
        comp = compiler or os.environ.get("CXX" if spec.lang == "c++" else "CC") or (
            "g++" if spec.lang == "c++" else "gcc"
        )
        if shutil.which(comp) is None:
            raise BackendUnavailable(f"the c runner needs a C compiler; {comp!r} is not on PATH")
        self.spec = spec
        super().__init__(
            isolate=isolate,
            measure=measure,
            spec=spec,
            compiler=compiler,
            flags=tuple(flags),
            cache_dir=str(cache_dir) if cache_dir else None,
            unload=unload,
        )

    def compile_stage(self) -> CCompileStage:
        kwargs = self.recipe.kwargs
        return CCompileStage(self.spec, compiler=kwargs["compiler"], flags=kwargs["flags"],
                             cache_dir=kwargs["cache_dir"], compile_timeout_s=self.measure.compile_timeout_s)
