"""Helpers shared by the CUDA runners (cupy, pycuda): error triage, symbol lookup, the common executor part.

Kept free of cupy/pycuda imports so it can be tested without a GPU.
"""
from __future__ import annotations

import importlib
import re
from typing import Any, Callable

import numpy as np

from ..results import FailureKind
from ..execution.device import DeviceInfo
from ..execution.executor import CompiledKernelExecutor, RunFailure, check_kernel_resources
from ..errors import SpecError
from ..execution.kernel import Geometry, KernelSpec
from ..execution.kernel import split_template

# Errors after which the CUDA context is unusable ("sticky"): the worker
# process must be replaced. Matched on the error text with everything but
# letters removed, so driver names (CuPy's CUDADriverError
# "CUDA_ERROR_ILLEGAL_ADDRESS: ..."), runtime names (CuPy's CUDARuntimeError
# "cudaErrorIllegalAddress: ...") and PyCUDA's messages, which carry only
# cuGetErrorString's text ("cuCtxSynchronize failed: an illegal memory access
# was encountered", pycuda src/cpp/cuda.hpp error::make_message), all match.
_STICKY = (
    "illegaladdress",
    "illegalmemoryaccess",
    "illegalinstruction",
    "misalignedaddress",
    "invalidpc",
    "invalidprogramcounter",
    "launchfailed",
    "launchfailure",
    "hardwarestackerror",
    "launchtimeout",
    "launchtimedout",  # cuGetErrorString: "the launch timed out and was terminated"
    "assert",
    "exceptionduringkernel",
)
# Errors that reject a launch without harming the context: the enum names and
# cuGetErrorString's texts (PyCUDA reports only the text: CUDA_ERROR_INVALID_VALUE
# reads "cuLaunchKernel failed: invalid argument").
_LAUNCH_CONFIG = (
    "outofresources",
    "toomanyresources",
    "invalidvalue",
    "invalidargument",
    "invalidconfiguration",
    "invalidresourcehandle",
    "cooperativelaunchtoolarge",
    "toomanyblocksincooperativelaunch",
)


def _letters(text: str) -> str:
    return re.sub(r"[^a-z]", "", text.lower())


def cuda_failure(exc: BaseException, stage: str) -> RunFailure:
    """Classify a CUDA exception raised during ``stage`` ("launch" or "run").

    Sticky errors are RUNTIME and poison the process. Resource/configuration
    errors at launch are LAUNCH and leave the context usable. Anything else
    after a launch is treated as RUNTIME and, to be safe, as poisoning.
    """
    if isinstance(exc, RunFailure):
        return exc
    text = f"{type(exc).__name__}: {exc}"
    letters = _letters(text)
    if any(token in letters for token in _STICKY):
        return RunFailure(FailureKind.RUNTIME, text, poisoned=True)
    if stage == "launch":
        poisoned = not any(token in letters for token in _LAUNCH_CONFIG)
        return RunFailure(FailureKind.LAUNCH, text, poisoned=poisoned)
    return RunFailure(FailureKind.RUNTIME, text, poisoned=True)


# ----------------------------------------------------------------------------
# Finding a kernel's symbol in a cubin (PyCUDA compiles with nvcc, which does
# not report mangled names the way NVRTC's name expressions do).
# ----------------------------------------------------------------------------
_TYPE_CODES = {
    "void": "v", "bool": "b", "char": "c", "signed char": "a", "unsigned char": "h",
    "short": "s", "unsigned short": "t", "int": "i", "unsigned": "j", "unsigned int": "j",
    "long": "l", "unsigned long": "m", "long long": "x", "unsigned long long": "y",
    "float": "f", "double": "d", "__half": "6__half", "half": "6__half",
    "int8_t": "a", "uint8_t": "h", "int16_t": "s", "uint16_t": "t", "int32_t": "i",
    "uint32_t": "j", "int64_t": "l", "uint64_t": "m", "size_t": "m",
}


def split_top_level(text: str) -> list[str]:
    """Split template arguments at commas outside nested <>, () and []."""
    parts, depth, current = [], 0, []
    for ch in text:
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    if "".join(current).strip():
        parts.append("".join(current).strip())
    return parts


def _mangled_arg_pattern(arg: str) -> str:
    arg = " ".join(arg.split())
    if re.fullmatch(r"-?\d+[uUlL]*", arg):
        digits = arg.rstrip("uUlL")
        neg = digits.startswith("-")
        return f"L[a-z]{'n' if neg else ''}{digits.lstrip('-')}E"
    if arg in ("true", "false"):
        return f"Lb{1 if arg == 'true' else 0}E"
    if arg in _TYPE_CODES:
        return re.escape(_TYPE_CODES[arg])
    return ".+?"


def mangled_prefix_pattern(name_expr: str) -> re.Pattern[str]:
    """Regex for the Itanium-mangled prefix of a global-scope kernel expression."""
    base, targs = split_template(name_expr)
    head = f"_Z{len(base)}{re.escape(base)}"
    if targs is None:
        return re.compile(head + r"(?!I)")
    args = "".join(_mangled_arg_pattern(a) for a in split_top_level(targs))
    return re.compile(head + "I" + args + "E")


def find_kernel_symbol(binary: bytes, name_expr: str) -> str:
    """Symbol of ``name_expr`` (``vadd`` or ``matmul<16, 8>``) in a cubin/ELF image.

    An ``extern "C"`` kernel appears under its plain name; a C++ one under a
    mangled name matched by :func:`mangled_prefix_pattern`. Kernels must be
    at global scope (no namespaces).
    """
    base, targs = split_template(name_expr)
    if targs is None and (b"\0" + base.encode() + b"\0") in binary:
        return base
    candidates = sorted(
        {m.decode() for m in re.findall(rb"_Z%d%s[A-Za-z0-9_]*" % (len(base), re.escape(base.encode())), binary)}
    )
    pattern = mangled_prefix_pattern(name_expr)
    matching = [c for c in candidates if pattern.match(c)]
    if len(matching) == 1:
        return matching[0]
    if not matching:
        raise LookupError(f"kernel {name_expr!r} not found in the compiled module (symbols: {candidates or 'none'})")
    raise LookupError(f"kernel {name_expr!r} is ambiguous in the compiled module: {matching}")


def instantiation_reference(name_expr: str) -> str:
    """Source line that makes nvcc instantiate (and emit) a kernel template.

    Taking the address in host code is what a ``kernel<...><<<>>>`` launch
    does, so the device side emits the instance, without the runner having to
    repeat the kernel's signature in an explicit instantiation. ``unused``
    keeps nvcc from remarking "declared but never referenced" (#177-D), which
    PyCUDA would turn into a UserWarning for every configuration.
    """
    return f"\nstatic void* const pytest_autotune_instance_ __attribute__((unused)) = (void*)&{name_expr};\n"


def exception_text(exc: Any) -> str:
    return f"{type(exc).__name__}: {exc}"


_C_TYPES = {"float32": "float", "float64": "double", "int32": "int", "uint32": "unsigned int", "int64": "long long",
            "uint64": "unsigned long long", "int16": "short", "uint16": "unsigned short", "int8": "signed char",
            "uint8": "unsigned char", "float16": "__half"}


def _c_type(dtype: Any) -> str:
    return _C_TYPES.get(np.dtype(dtype).name, np.dtype(dtype).name)


def constant_symbol_size(module_handle: int, name: str) -> int | None:
    """Bytes of a ``__constant__`` symbol by the driver's ``cuModuleGetGlobal`` through cuda-bindings (CuPy's
    ``get_global`` does not say: its pointer has size 0); None without cuda-bindings or a driver to ask."""
    try:
        driver = importlib.import_module("cuda.bindings.driver")
        err, _, size = driver.cuModuleGetGlobal(driver.CUmodule(module_handle), name.encode())
    except Exception:  # no cuda-bindings, no libcuda, another handle type: no size, no check
        return None
    return int(size) if err == driver.CUresult.CUDA_SUCCESS else None


def check_cuda_spec(spec: Any, runner: str) -> None:
    """A CUDA runner's spec must be a :class:`KernelSpec` of CUDA source (``runner``: "cupy", "pycuda")."""
    if not isinstance(spec, KernelSpec):
        raise SpecError(f"{runner.capitalize()}Runner needs a KernelSpec, got {type(spec).__name__}")
    if spec.lang != "cuda":
        raise SpecError(f"the {runner} runner compiles CUDA source, not {spec.lang!r}")


class CudaExecutor(CompiledKernelExecutor):
    """What the cupy and pycuda executors share; each supplies its library's calls.

    Subclasses set ``_device``, ``_constants`` and ``default_smem`` and
    implement :meth:`kernel_info`, :meth:`_launch`, :meth:`_synchronize` and
    :meth:`_allow_dynamic_smem`.
    """

    _device: DeviceInfo
    _constants: dict[str, Any]
    default_smem: int

    def device(self) -> DeviceInfo:
        return self._device

    def constants(self) -> dict[str, Any]:
        return dict(self._constants)

    def classify(self, exc: BaseException, stage: str) -> RunFailure:
        return cuda_failure(exc, stage)

    def _launch(self, fn: Any, geometry: Geometry) -> None:
        raise NotImplementedError

    def _synchronize(self) -> None:
        raise NotImplementedError

    def _allow_dynamic_smem(self, fn: Any, smem: int) -> None:
        """Raise the kernel's dynamic shared memory limit to ``smem`` (cudaFuncAttributeMaxDynamicSharedMemorySize)."""
        raise NotImplementedError

    def _constant_symbol(self, kernel: Any, name: str) -> tuple[int | None, Callable[[np.ndarray], None]]:
        """The size of the compiled module's ``__constant__`` symbol ``name`` (None where the library does not
        say) and a function that copies a host array into it; the library's error when there is no such symbol."""
        raise NotImplementedError

    def fill_constant_memory(self, kernel: Any) -> None:
        """Copy the spec's ``constant_memory`` into the module's ``__constant__`` symbols.

        Once per compiled module, before its first launch: nothing on the device
        writes constant memory, so every run of the configuration reads the same
        values. An array smaller than its symbol fills its start (Kernel Tuner's
        convolution passes a 17x17 filter for ``d_filter[33*33]``); a larger one
        or a missing symbol is the test's error, named.
        """
        for name, value in self.spec.constant_memory.items():
            try:
                size, write = self._constant_symbol(kernel, name)
            except Exception as exc:
                if "notfound" not in _letters(str(exc)):
                    raise cuda_failure(exc, "launch") from None
                raise SpecError(f"constant_memory[{name!r}]: the compiled module has no __constant__ symbol "
                                f"{name!r} ({exception_text(exc)}); declare it at file scope, e.g. "
                                f"__constant__ {_c_type(value.dtype)} {name}[{value.size}];") from None
            if size is not None and value.nbytes > size:
                raise SpecError(f"constant_memory[{name!r}] has {value.nbytes} bytes ({value.dtype} of shape "
                                f"{value.shape}) but __constant__ {name} holds only {size} bytes")
            try:
                write(value)
            except Exception as exc:
                raise cuda_failure(exc, "launch") from None

    def check_compiled(self, kernel: Any, geometry: Geometry) -> str | None:
        info = self.kernel_info(kernel)
        _, block, smem = geometry
        reason = check_kernel_resources(
            threads=block[0] * block[1] * block[2],
            static_smem=info["static_shared_mem"],
            dynamic_smem=smem,
            registers_per_thread=info["registers"],
            kernel_max_threads=info["max_threads_per_block"],
            limits=self._constants,
        )
        # The driver's rule is static + dynamic <= the default 48 KiB unless the kernel
        # opts in, and the attribute is the dynamic part alone: a kernel with 16 KiB of
        # static and 40 KiB of dynamic shared memory needs the opt-in too.
        if reason is None and info["static_shared_mem"] + smem > self.default_smem:
            try:
                self._allow_dynamic_smem(kernel[1], smem)
            except Exception as exc:
                raise cuda_failure(exc, "launch") from None
        if reason is None:
            self.fill_constant_memory(kernel)
        return reason

    def run_once(self, kernel: Any, geometry: Geometry) -> None:
        try:
            self._launch(kernel[1], geometry)
        except Exception as exc:
            raise cuda_failure(exc, "launch") from None
        try:
            self._synchronize()
        except Exception as exc:
            raise cuda_failure(exc, "run") from None
