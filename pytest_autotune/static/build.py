"""Build one locked configuration for a GPU architecture without a GPU, as its runner builds it on the device.

The static gate compares a lock entry's recorded binary profile with today's build on a CPU-only runner;
that comparison means something only if the build here is the build the tuning runner made. So each
builder reproduces its runner's compile, with the architecture given instead of asked from a device:

* :func:`build_nvrtc` (the ``cupy`` runner): :func:`~..backends.nvrtc.compile_configuration`, the CuPy
  runner's source, name expression and options;
* :func:`build_nvcc` (the ``pycuda`` runner): the nvcc command line ``pycuda.compiler.compile`` runs;
* :func:`build_triton` (the ``triton`` runner): the specialisation and options ``JITFunction.run`` computes
  for the launch, compiled with ``triton.compile`` for ``GPUTarget("cuda", arch, 32)``; in a kept child
  process without ``TRITON_INTERPRET`` when this one runs Triton's interpreter.

Each also asks ptxas for its ``-v`` report, which only adds the ptxas command line to the cubin's
``.note.nv.tkinfo`` note (NVRTC, nvcc; Triton passes ``-v`` itself): the machine code is the runner's.
Compilers are imported or looked up on the first call only, so the module imports on any machine.
"""
from __future__ import annotations

import atexit
import contextlib
import dataclasses
import io
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import traceback
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from time import perf_counter
from typing import Any, Mapping

from ..backends.cuda_arch import parse_arch
from ..backends.cuda_toolkit import _toolkit_roots
from ..backends.cuda_common import check_cuda_spec, find_kernel_symbol, instantiation_reference
from ..backends.nvrtc import KernelResources, compile_configuration, nvrtc_version, parse_ptxas_log
from ..backends.triton_kernel import KernelRef
from ..errors import AutotuneError, BackendUnavailable, SpecError
from ..execution.kernel import KernelSpec, instantiated_name, launch_geometry, render_source
from .occupancy import theoretical_occupancy

STATIC_RUNNERS = ("cupy", "pycuda", "triton")  # the runners whose configurations can be built here
LOG_LINES = 20  # compiler log lines a StaticBuildError's message shows (the whole log is on ``.log``)
NVCC_HINT = ("pip install nvidia-cuda-nvcc nvidia-cuda-crt nvidia-cuda-runtime nvidia-cuda-cccl (CUDA 13's nvcc, the "
             "headers it compiles with, and CUB, Thrust and libcu++, which no nvcc wheel brings), or put a CUDA "
             "toolkit's nvcc on PATH")
TRITON_HINT = "pip install 'pytest-autotune[triton]'"
# Where NVIDIA's wheels put nvcc under a site-packages folder (CUDA 13's shared layout, CUDA 12's own folder).
WHEEL_NVCC = ("nvidia/cu13/bin/nvcc", "nvidia/cuda_nvcc/bin/nvcc")


@dataclass(frozen=True)
class BuiltKernel:
    """One configuration's cubin and what :func:`~.profile.profile_cubin` needs besides it."""

    cubin: bytes
    symbol: str  # the entry function's name in the cubin (lowered/mangled)
    arch: int
    threads: int  # threads per block at this configuration's launch
    dynamic_shared: int  # bytes of dynamic shared memory at launch
    resources: KernelResources  # from ptxas -v's log
    toolchain: dict[str, str] = field(default_factory=dict)  # what built it (compiler, ptxas versions)
    seconds: float = 0.0

    def report(self, occupancy: bool = True) -> dict[str, Any]:
        """What a report says of this build: ptxas's registers, static shared memory, stack frame (local memory
        per thread) and spills, the launch's threads and dynamic shared memory, and the theoretical occupancy
        they give (``occupancy=False`` for a build over the architecture's limits, where none fits)."""
        res = self.resources
        out: dict[str, Any] = {**res.as_dict(), "dynamic_shared_mem": self.dynamic_shared, "threads": self.threads}
        if occupancy:
            out["occupancy"] = round(theoretical_occupancy(
                self.arch, threads=self.threads, registers=res.registers,
                shared_per_block=res.shared_mem + self.dynamic_shared, barriers=res.barriers).occupancy, 4)
        return out


class StaticBuildError(AutotuneError):
    """A configuration that does not compile; the message carries the compiler log's first lines."""

    def __init__(self, message: str, log: str = "") -> None:
        self.message, self.log = message, log
        lines = log.strip().splitlines()
        shown = "\n".join(lines[:LOG_LINES]) + (f"\n... ({len(lines) - LOG_LINES} more lines)"
                                                if len(lines) > LOG_LINES else "")
        super().__init__(f"{message}:\n{shown}" if shown else message)

    def __reduce__(self) -> tuple[Any, ...]:  # pickled with its log (a child process, a pool)
        return (type(self), (self.message, self.log))


def _resources(log: str, symbol: str, compiler: str) -> KernelResources:
    """The entry's resources in a ptxas -v log; an error when ptxas did not report it (a log we misread)."""
    found = parse_ptxas_log(log).get(symbol)
    if found is None:
        raise StaticBuildError(f"{compiler}: ptxas -v reported no resources for {symbol!r}", log)
    return found


# -- NVRTC: the cupy runner --------------------------------------------------------------------------


def build_nvrtc(spec: KernelSpec, params: Mapping[str, Any], arch: int) -> BuiltKernel:
    """``params`` of ``spec`` compiled by NVRTC as the CuPy runner compiles it on an ``arch`` device.

    BackendUnavailable without NVRTC, or when the installed NVRTC cannot target ``arch`` (with what to
    install); StaticBuildError with NVRTC's log for a source that does not compile.
    """
    check_cuda_spec(spec, "cupy")
    cc = parse_arch(arch)
    start = perf_counter()
    _, block, smem = launch_geometry(spec, params)
    try:
        result = compile_configuration(spec, params, cc, keep_cubin=True)
    except ValueError as exc:  # an architecture this NVRTC does not know: the compiler's limit, not the config's
        raise BackendUnavailable(str(exc)) from None
    name = instantiated_name(spec, params)
    if not result.ok or not result.cubin or not result.lowered_name:
        raise StaticBuildError(f"NVRTC could not compile {name} for sm_{cc}", result.log)
    major, minor = nvrtc_version()
    return BuiltKernel(result.cubin, result.lowered_name, cc, block[0] * block[1] * block[2], smem,
                       _resources(result.log, result.lowered_name, "NVRTC"), {"compiler": f"nvrtc {major}.{minor}"},
                       perf_counter() - start)


# -- nvcc: the pycuda runner -------------------------------------------------------------------------


def find_nvcc(nvcc: str | None = None) -> str:
    """The nvcc to build with: ``nvcc`` as given (a path, or a name looked up on PATH), else ``nvcc`` on PATH,
    else the ``nvidia-cuda-nvcc`` wheel's (found as ``cuda.pathfinder`` finds it, else in ``site-packages``),
    else a toolkit's not on PATH (``$CUDA_PATH/bin``, ``$CUDA_HOME/bin``, ``/usr/local/cuda/bin``).

    The pycuda runner runs ``nvcc`` from PATH; the wheel is the fallback for a CI runner without a toolkit.
    BackendUnavailable, naming what was looked for, when none is found.
    """
    if nvcc is not None:
        found = shutil.which(nvcc)
        if found is None:
            raise BackendUnavailable(f"nvcc {nvcc!r} was not found or is not executable ({NVCC_HINT})")
        return found
    found = shutil.which("nvcc")
    if found:
        return found
    with contextlib.suppress(Exception):  # no cuda-pathfinder, or one that fails: our own look below
        from cuda.pathfinder import find_nvidia_binary_utility

        found = find_nvidia_binary_utility("nvcc")
        if found:
            return str(found)
    candidates = [Path(root or ".") / rel for root in sys.path for rel in WHEEL_NVCC]
    for candidate in candidates + [Path(root) / "bin" / "nvcc" for root in _toolkit_roots()]:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    raise BackendUnavailable(f"no nvcc on PATH, in the nvidia-cuda-nvcc wheel nor in $CUDA_PATH, $CUDA_HOME or "
                             f"/usr/local/cuda ({NVCC_HINT})")


_RELEASE = re.compile(r"release \S+, V(\S+)")
_BUILD = re.compile(r"^Build (\S+)", re.MULTILINE)


@lru_cache(maxsize=None)
def _tool_version(path: str) -> tuple[str, str]:
    """``(version, build)`` of an NVIDIA tool from its ``--version`` ("13.5.37", "cuda_13.5.r13.5/...")."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, check=False).stdout
    except OSError as exc:
        raise BackendUnavailable(f"{path} --version failed: {exc}") from None
    release, build = _RELEASE.search(out), _BUILD.search(out)
    return (release.group(1) if release else "unknown"), (build.group(1) if build else "unknown")


def nvcc_toolchain(nvcc: str) -> dict[str, str]:
    """nvcc's release and build, and the version of the ptxas beside it (the one nvcc runs)."""
    version, build = _tool_version(nvcc)
    toolchain = {"compiler": f"nvcc {version}", "build": build}
    ptxas = Path(nvcc).resolve().parent / "ptxas"
    if ptxas.is_file():
        toolchain["ptxas"] = f"ptxas {_tool_version(str(ptxas))[0]}"
    return toolchain


def pycuda_command(nvcc: str, spec: KernelSpec, arch: int) -> list[str]:
    """The command ``pycuda.compiler.compile`` runs for the pycuda runner, in its order, on Linux.

    PyCUDA (``compile`` then ``compile_plain``) runs ``nvcc --cubin <options> kernel.cu`` in a temporary
    folder, its options being the runner's ``options`` (the spec's ``compiler_options``), ``-arch
    sm_XX`` (the device's, here ``arch``), then ``-I`` for each include folder: the runner's (the
    source file's folder) and PyCUDA's own header folder ``pycuda/cuda``, left out here because PyCUDA
    is not installed (kernels that include PyCUDA's headers cannot build). ``CUDA_DEBUGGING`` builds
    of PyCUDA add ``-g -G``; ``-m64`` is added on 64-bit macOS/Windows only. ``--resource-usage`` is
    appended for ptxas's report on stderr (it only adds ``-v`` to the command line noted in the cubin).
    """
    includes = [str(spec.source_file.parent)] if spec.source_file else []
    return [nvcc, "--cubin", *spec.compiler_options, "-arch", f"sm_{arch}", *(f"-I{d}" for d in includes),
            "--resource-usage", "kernel.cu"]


def build_nvcc(spec: KernelSpec, params: Mapping[str, Any], arch: int, *, nvcc: str | None = None) -> BuiltKernel:
    """``params`` of ``spec`` compiled by nvcc as the pycuda runner compiles it on an ``arch`` device.

    The source is the runner's (:func:`render_source`, plus :func:`instantiation_reference` for a
    template), not wrapped in ``extern "C"`` (the runner passes ``no_extern_c=True``); the symbol is
    found in the cubin as the runner finds it (:func:`find_kernel_symbol`). BackendUnavailable when
    nvcc is missing or cannot target ``arch``; StaticBuildError with nvcc's log otherwise.
    """
    check_cuda_spec(spec, "pycuda")
    cc = parse_arch(arch)
    path = find_nvcc(nvcc)
    start = perf_counter()
    _, block, smem = launch_geometry(spec, params)
    name = instantiated_name(spec, params)
    source = render_source(spec, params) + (instantiation_reference(name) if spec.is_template else "")
    command = pycuda_command(path, spec, cc)
    with tempfile.TemporaryDirectory(prefix="pytest-autotune-nvcc-") as folder:
        (Path(folder) / "kernel.cu").write_text(source)
        try:
            done = subprocess.run(command, cwd=folder, capture_output=True, text=True, check=False)
        except OSError as exc:
            raise BackendUnavailable(f"nvcc {path} could not be run: {exc} ({NVCC_HINT})") from None
        log = (done.stdout + done.stderr).strip()
        output = Path(folder) / "kernel.cubin"
        cubin = output.read_bytes() if output.is_file() else b""
    if done.returncode != 0 or not cubin:
        if "Unsupported gpu architecture" in log:
            raise BackendUnavailable(f"nvcc {_tool_version(path)[0]} ({path}) cannot compile for sm_{cc}: {log}")
        raise StaticBuildError(f"nvcc could not compile {name} for sm_{cc}", log)
    try:
        symbol = find_kernel_symbol(cubin, name)
    except LookupError as exc:
        raise StaticBuildError(f"nvcc compiled {name} for sm_{cc}, but {exc}", log) from None
    return BuiltKernel(cubin, symbol, cc, block[0] * block[1] * block[2], smem, _resources(log, symbol, "nvcc"),
                       nvcc_toolchain(path), perf_counter() - start)


# -- Triton: the triton runner -----------------------------------------------------------------------


def _import_triton() -> Any:
    try:
        import triton
        import triton.compiler  # noqa: F401 - ASTSource, make_backend
    except ImportError as exc:
        raise BackendUnavailable(f"building Triton kernels needs triton ({TRITON_HINT}): {exc}") from None
    return triton


def launch_arguments(spec: Any, params: Mapping[str, Any]) -> dict[str, Any]:
    """The runner's launch keywords (``kernel[grid](**named_args, **params)``), each tensor as ``(dtype, shape)``.

    The runner moves every tensor to the GPU (``.to("cuda")``), a fresh allocation, so each pointer is
    16-byte aligned and specialised as such: a Triton ``MockTensor`` of the dtype (data pointer 0) says
    the same without memory (:func:`triton_compile` makes it).
    """
    named = dict(zip(spec.arg_names, spec.args))
    for key, value in named.items():
        if hasattr(value, "data_ptr") and hasattr(value, "dtype") and hasattr(value, "shape"):
            named[key] = _Tensor(value.dtype, tuple(int(s) for s in value.shape))
    return {**named, **params}


@dataclass(frozen=True)
class _Tensor:
    """A tensor argument by its dtype and shape (what specialises a launch; picklable to a child process)."""

    dtype: Any
    shape: tuple[int, ...]


def triton_compile(kernel: Any, arguments: Mapping[str, Any], arch: int) -> Any:
    """``triton.compile`` of a ``JITFunction`` for ``GPUTarget("cuda", arch, 32)`` with what a launch with
    ``arguments`` compiles, without a driver.

    ``JITFunction.run`` asks the driver for the target, binds the arguments with a binder from
    ``create_function_from_signature`` (each argument's type and its ``tt.divisibility=16``
    specialisation, by Triton's ``specialize_impl``), adds ``debug``, ``instrumentation_mode`` and
    ``fpsan_homomorphic_casts`` from ``triton.knobs`` and packs it all (``_pack_args``) into the
    options, signature, constexprs and attributes of an ``ASTSource``. The same calls are made here
    for the given target's backend.
    """
    triton = _import_triton()
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import JITFunction, MockTensor, create_function_from_signature

    if not isinstance(kernel, JITFunction):
        raise SpecError(f"{kernel!r} is not a JITFunction (an InterpretedFunction compiles in a child process)")
    target = GPUTarget("cuda", arch, 32)
    backend = make_backend(target)
    kwargs = {k: MockTensor(v.dtype, list(v.shape)) if isinstance(v, _Tensor) else v for k, v in arguments.items()}
    kwargs["debug"] = kwargs.get("debug", kernel.debug) or knobs.runtime.debug
    kwargs["instrumentation_mode"] = getattr(knobs.compilation, "instrumentation_mode", "")
    kwargs["fpsan_homomorphic_casts"] = getattr(knobs.compilation, "fpsan_homomorphic_casts", False)
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    bound, specialization, options = binder(**kwargs)
    options, signature, constexprs, attrs = kernel._pack_args(backend, kwargs, bound, specialization, options)
    return triton.compile(ASTSource(kernel, signature, constexprs, attrs), target=target, options=options.__dict__)


def _ptxas_command(tool: str, options: Any, arch: int, ptx: str, out: str) -> list[str]:
    """The ptxas command Triton's NVIDIA backend (``make_cubin``, Triton 3.9) runs for these options."""
    from triton import knobs
    from triton.backends.nvidia.compiler import sm_arch_from_capability

    if knobs.compilation.disable_line_info:
        debug = ["-lineinfo", "-suppress-debug-info"]
    else:
        debug = ["-g"] if knobs.nvidia.disable_ptxas_opt else ["-lineinfo"]
    return [tool, *debug, *([] if options.enable_fp_fusion else ["--fmad=false"]), "-v",
            *(["--opt-level", "0"] if knobs.nvidia.disable_ptxas_opt else []), "--regAllocOptLevel=2",
            *(options.ptx_options.split(" ") if options.ptx_options else []),
            f"--gpu-name={sm_arch_from_capability(arch)}", ptx, "-o", out]


def _triton_ptxas_log(compiled: Any, kernel: Any, arguments: Mapping[str, Any], arch: int) -> tuple[Any, str]:
    """``(compiled, log)``: the ptxas ``-v`` log of ``compiled``'s cubin.

    Triton runs ptxas with ``-v`` but keeps the log only in a deleted file, and runs nothing on a cache
    hit. So its ptxas is re-run on the kernel's PTX with the flags Triton uses, and the log counts only
    when the cubin that run writes is byte for byte Triton's. Where it is not (a Triton whose flags
    differ, or no PTX kept), the kernel is compiled afresh (``always_compile``) with
    ``dump_ptxas_log``, and the log is read from what Triton prints.
    """
    from triton import knobs
    from triton.backends.nvidia.compiler import get_ptxas

    tool, source = get_ptxas(arch).path, compiled.asm.get("ptx")  # no PTX kept under store_binary_only
    named = re.fullmatch(r"sm(\d+)", str(compiled.metadata.arch))  # TRITON_OVERRIDE_ARCH names another --gpu-name
    gpu = int(named.group(1)) if named else arch
    with tempfile.TemporaryDirectory(prefix="pytest-autotune-ptxas-") as folder:
        ptx, out = os.path.join(folder, "kernel.ptx"), os.path.join(folder, "kernel.cubin")
        if source is not None:
            Path(ptx).write_text(source)
            done = subprocess.run(_ptxas_command(tool, compiled.metadata, gpu, ptx, out), capture_output=True,
                                  text=True, check=False)
            if done.returncode == 0 and Path(out).read_bytes() == compiled.asm["cubin"]:
                return compiled, done.stdout + done.stderr
    printed = io.StringIO()
    with knobs.compilation.scope(), knobs.nvidia.scope(), contextlib.redirect_stdout(printed):
        knobs.compilation.always_compile = True
        knobs.nvidia.dump_ptxas_log = True
        compiled = triton_compile(kernel, arguments, arch)
    return compiled, printed.getvalue()


def triton_toolchain(arch: int) -> dict[str, str]:
    """Triton's version and that of the ptxas it runs for ``arch`` (``ptxas-blackwell`` from sm_90 on in 3.9)."""
    import triton
    from triton.backends.nvidia.compiler import get_ptxas

    tool = get_ptxas(arch).path
    return {"compiler": f"triton {triton.__version__}", "ptxas": f"{Path(tool).name} {_tool_version(tool)[0]}"}


def _build_jit(kernel: Any, arguments: Mapping[str, Any], arch: int, label: str) -> BuiltKernel:
    """Build a ``JITFunction`` in this process (see :func:`build_triton`)."""
    start = perf_counter()
    try:
        compiled = triton_compile(kernel, arguments, arch)
        compiled, log = _triton_ptxas_log(compiled, kernel, arguments, arch)
    except AutotuneError:
        raise
    except Exception as exc:  # noqa: BLE001 - Triton's CompilationError, PTXASError, option checks...
        raise StaticBuildError(f"Triton could not compile {label} for sm_{arch}", f"{type(exc).__name__}: {exc}") \
            from None
    meta = compiled.metadata
    return BuiltKernel(compiled.asm["cubin"], meta.name, arch, int(meta.num_warps) * int(meta.warp_size),
                       int(meta.shared), _resources(log, meta.name, "Triton"), triton_toolchain(arch),
                       perf_counter() - start)


class _TritonChild:
    """A Python without ``TRITON_INTERPRET`` that builds Triton kernels for this one, started once and kept.

    Under the interpreter every ``@triton.jit`` of the process is an ``InterpretedFunction``: the kernel,
    its helpers and ``triton.language``'s own (``tl.max``, ``tl.sum``, ...), none of which Triton's
    compiler takes, and Triton reads the variable once, at decoration. The child imports the kernel by
    its reference (module, else file), as the runner's isolated worker does, and shares Triton's
    on-disk cache. Importing torch and Triton there takes seconds, hence one child for all builds.
    Each request carries this process's environment (without ``TRITON_INTERPRET``), working folder
    and ``sys.path``. Pickles go over the child's stdin and a copy of its stdout; what the child
    prints goes to its stderr, a file read back when it dies.
    """

    CODE = "from pytest_autotune.static.build import _serve; _serve()"

    def __init__(self) -> None:
        self.errors = tempfile.TemporaryFile()
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)  # to import this package as here
        self.process = subprocess.Popen([sys.executable, "-c", self.CODE], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=self.errors, env=env)

    def build(self, ref: KernelRef, arguments: Mapping[str, Any], arch: int, label: str) -> tuple[str, Any]:
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        try:  # pickled before anything is written: a value that does not pickle leaves the stream intact
            request = pickle.dumps((env, os.getcwd(), list(sys.path), ref, dict(arguments), arch, label))
        except Exception as exc:  # noqa: BLE001 - pickle raises more than PicklingError
            raise SpecError(f"the arguments of {label} cannot be sent to the Triton build process: {exc}") from None
        assert self.process.stdin is not None and self.process.stdout is not None
        try:
            self.process.stdin.write(request)
            self.process.stdin.flush()
            return pickle.load(self.process.stdout)
        except (OSError, EOFError, pickle.UnpicklingError):
            self.close()
            self.errors.seek(0)
            text = self.errors.read().decode(errors="replace")
            raise StaticBuildError(f"the child process building {label} for sm_{arch} died "
                                   f"(exit status {self.process.returncode})", text) from None

    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            if self.process.stdin is not None:
                self.process.stdin.close()  # end of input: the child returns
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


_CHILD: list[_TritonChild] = []
_CHILD_LOCK = threading.Lock()


@atexit.register
def _close_child() -> None:
    while _CHILD:
        _CHILD.pop().close()


def _build_in_child(ref: KernelRef, arguments: Mapping[str, Any], arch: int, label: str) -> BuiltKernel:
    """Build in the :class:`_TritonChild` (started on first use, again after it died)."""
    with _CHILD_LOCK:
        if _CHILD and not _CHILD[0].alive():
            _CHILD.pop().close()
        if not _CHILD:
            _CHILD.append(_TritonChild())
        outcome, value = _CHILD[0].build(ref, arguments, arch, label)
    if outcome == "ok":
        return value
    kind, message, log = value
    if kind == "BackendUnavailable":
        raise BackendUnavailable(message)
    if kind == "SpecError":
        raise SpecError(message)
    raise StaticBuildError(message, log)


def _file_signature(path: str | None) -> tuple[str, int, int] | None:
    try:
        info = os.stat(path) if path else None
    except OSError:
        return None
    return (os.path.realpath(path), info.st_mtime_ns, info.st_size) if info and path else None


def _forget_if_changed(ref: KernelRef, loaded: dict[str, tuple[str, int, int]]) -> None:
    """The child lives for the whole session: a kernel's module imported for an earlier build is imported again
    when its file was edited since, or when the module of that name is another file (two folders' ``kernels.py``):
    a build is of the kernel as it is now, never of a stale copy."""
    signature = _file_signature(ref.file)
    module = sys.modules.get(ref.module)
    known = getattr(module, "__file__", None) if module is not None else None
    if module is not None and (signature is None or loaded.get(ref.module) != signature
                               or _file_signature(known) is None
                               or _file_signature(known)[0] != signature[0]):  # type: ignore[index]
        del sys.modules[ref.module]
    if signature is not None:
        loaded[ref.module] = signature


def _serve() -> None:
    """The child's loop: a request from stdin, the kernel or the error to the saved stdout, until end of input."""
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # prints (Python's and C's) go to stderr, never into the replies
    sys.stdout = sys.stderr
    requests = sys.stdin.buffer
    loaded: dict[str, tuple[str, int, int]] = {}
    while True:
        try:
            env, cwd, path, ref, arguments, arch, label = pickle.load(requests)
        except EOFError:
            return
        os.environ.clear()
        os.environ.update(env)
        with contextlib.suppress(OSError):
            os.chdir(cwd)
        sys.path[:] = path
        _forget_if_changed(ref, loaded)
        try:
            outcome: tuple[str, Any] = ("ok", _build_jit(ref.resolve(), arguments, arch, label))
        except StaticBuildError as exc:
            outcome = ("error", ("StaticBuildError", exc.message, exc.log))
        except Exception as exc:  # noqa: BLE001 - a kernel that does not import, a SpecError...: reported
            outcome = ("error", (type(exc).__name__, f"{type(exc).__name__}: {exc}", traceback.format_exc()))
        pickle.dump(outcome, replies)
        replies.flush()


def build_triton(spec: Any, params: Mapping[str, Any], arch: int) -> BuiltKernel:
    """``params`` of a :class:`~..backends.triton_runner.TritonSpec` compiled as the triton runner's launch
    on an ``arch`` GPU compiles it (:func:`triton_compile`), without a GPU or a driver.

    A ``JITFunction`` builds in this process; a kernel decorated under ``TRITON_INTERPRET=1`` builds
    in a child process without it (:func:`_build_in_child`; it must then be importable: defined at a
    module's top level). Both use Triton's on-disk cache as a launch does. ``threads`` is
    ``num_warps`` times the warp size, the block Triton's launcher starts (``num_ctas`` multiplies the
    grid, not the block); ``dynamic_shared`` is the metadata's ``shared``, the launch's dynamic shared
    memory. StaticBuildError for a configuration Triton rejects (its message), BackendUnavailable
    without Triton.
    """
    _import_triton()
    from triton.runtime.jit import JITFunction

    cc = parse_arch(arch)
    start = perf_counter()
    kernel = spec.kernel.resolve() if isinstance(spec.kernel, KernelRef) else spec.kernel
    arguments = launch_arguments(spec, params)
    label = f"{spec.info.name}{dict(params)}"
    if isinstance(kernel, JITFunction):
        built = _build_jit(kernel, arguments, cc, label)
    else:
        try:
            ref = spec.kernel if isinstance(spec.kernel, KernelRef) else KernelRef.of(kernel)
        except SpecError as exc:
            raise SpecError(f"under TRITON_INTERPRET=1 a Triton kernel builds in a child process, which imports "
                            f"it: define it at a module's top level ({exc})") from None
        built = _build_in_child(ref, arguments, cc, label)
    return dataclasses.replace(built, seconds=perf_counter() - start)


# -- by runner ---------------------------------------------------------------------------------------


def build_for_runner(runner: str | None, spec: Any, params: Mapping[str, Any], arch: int, *,
                     nvcc: str | None = None) -> BuiltKernel:
    """Build with the compiler of the runner that tuned the entry: ``cupy`` (or no runner named, for a CUDA
    :class:`KernelSpec`) -> NVRTC, ``pycuda`` -> nvcc (``nvcc``: the runner's own, else :func:`find_nvcc`'s),
    ``triton`` (or none, for a TritonSpec) -> Triton.
    SpecError for a runner without a static build (:data:`STATIC_RUNNERS`)."""
    if runner is None:
        if isinstance(spec, KernelSpec) and spec.lang == "cuda":
            runner = "cupy"
        elif type(spec).__name__ == "TritonSpec":
            runner = "triton"
    if runner == "cupy":
        return build_nvrtc(spec, params, arch)
    if runner == "pycuda":
        return build_nvcc(spec, params, arch, nvcc=nvcc)
    if runner == "triton":
        return build_triton(spec, params, arch)
    raise SpecError(f"no static build for the {runner or type(spec).__name__!r} runner; "
                    f"the static gate builds {', '.join(STATIC_RUNNERS)}")
