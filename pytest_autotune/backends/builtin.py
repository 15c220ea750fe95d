"""The built-in backends' records: CUDA (CuPy, PyCUDA), C/C++, OpenCL, Triton, callables and replay.

Registered by :mod:`.registry` on its first query. A record imports nothing of its backend: the runner
factories import their module on first use, inside the process that owns the device, and the
availability checks look for a library or a compiler without importing it.
"""
from __future__ import annotations

import importlib
import importlib.util
import shutil
from typing import Any, Callable

from .registry import Backend, Language, register

BACKENDS_PACKAGE = "pytest_autotune.backends"


def _lazy(module: str, cls: str) -> Callable[..., Any]:
    """A factory that imports ``module`` (relative to this package, or a full dotted path) on first use."""
    def factory(spec: Any, **options: Any) -> Any:
        path = module if "." in module else f"{BACKENDS_PACKAGE}.{module}"
        return getattr(importlib.import_module(path), cls)(spec, **options)

    factory.__name__ = f"make_{module.rsplit('.', 1)[-1]}"
    return factory


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


# -- languages --------------------------------------------------------------------------------------

def _cuda_toolchain() -> dict[str, str]:
    """NVRTC's version for a CUDA kernel (the device's versions name the driver, runtime and CuPy/PyCUDA)."""
    try:
        nvrtc = importlib.import_module(f"{BACKENDS_PACKAGE}.nvrtc")
        return {"nvrtc": ".".join(str(v) for v in nvrtc.nvrtc_version())}
    except Exception:  # no NVRTC here (PyCUDA with nvcc, or no CUDA at all): nothing to record
        return {}


CUDA = Language("cuda", aliases=("cu",), suffixes=(".cu", ".cuh"), toolchain=_cuda_toolchain, gpu_probes=True)
C = Language("c", suffixes=(".c", ".h"))
CXX = Language("c++", aliases=("cpp", "cxx", "cc"), suffixes=(".cpp", ".cc", ".cxx", ".c++", ".hpp"))
OPENCL = Language("opencl", aliases=("cl",), suffixes=(".cl",))

# -- device limits handed to restrictions (see execution.device) ---------------------------------------

CUDA_CONSTANTS = (
    "max_threads", "max_shared_memory_per_block", "max_shared_memory", "max_registers_per_block",
    "max_static_shared_memory_per_block", "max_shared_memory_per_block_default",
    "warp_size", "sm_count", "compute_capability", "max_block_dim_x", "max_block_dim_y", "max_block_dim_z",
)
CPU_CONSTANTS = ("cpu_count", "l1d_cache", "l2_cache", "l3_cache",  # the C runner's cache sizes
                 "l1_cache_size", "l2_cache_size", "l3_cache_size")


def _opencl_constants() -> tuple[str, ...]:
    from .opencl_device import CONSTANT_NAMES

    return tuple(CONSTANT_NAMES)


# -- this machine's device per lockfile kind (lock.lookup caches them) -------------------------------

def _cuda_slug_with(module: str, detector: str) -> Callable[[], str | None]:
    def detect() -> str | None:
        if importlib.util.find_spec(module) is None:
            return None
        from ..execution import device as devices

        try:
            return getattr(devices, detector)(0).slug
        except Exception:  # noqa: BLE001 - no driver, no GPU, broken install: this backend cannot say
            return None

    detect.__name__ = f"_{module}_slug"
    return detect


def _cpu_slug() -> str:
    from ..execution.device import detect_cpu_device

    return detect_cpu_device().slug


def _opencl_slug() -> str | None:
    """The OpenCL runner's default device (``$PYTEST_AUTOTUNE_DEVICE``/``$PYOPENCL_CTX`` respected), if any."""
    if importlib.util.find_spec("pyopencl") is None:
        return None
    try:
        import pyopencl as cl

        from .opencl_device import detect_opencl_device, select_device

        return detect_opencl_device(cl, select_device(cl)).slug
    except Exception:  # noqa: BLE001 - no platform, no device, a selector that matches nothing
        return None


def _triton_slug() -> str | None:
    """Where the triton runner tunes here: torch's GPU 0, else Triton's interpreter on this CPU."""
    if importlib.util.find_spec("triton") is None or importlib.util.find_spec("torch") is None:
        return None
    triton_kernel = importlib.import_module(f"{BACKENDS_PACKAGE}.triton_kernel")
    interpreter_device = importlib.import_module(f"{BACKENDS_PACKAGE}.triton_runner").interpreter_device
    if triton_kernel.interpreter_requested() or not triton_kernel.gpu_device_present():
        return interpreter_device().slug
    try:
        import torch

        from ..execution.device import slugify

        return slugify(torch.cuda.get_device_name(0)) if torch.cuda.is_available() else interpreter_device().slug
    except Exception:  # noqa: BLE001 - a broken driver: this backend cannot say
        return None


# -- runner factories ------------------------------------------------------------------------------

def _make_opencl(spec: Any, **options: Any) -> Any:
    """The opencl runner; with ``check=`` the one that runs each configuration under Oclgrind first."""
    from ..execution.kernel import KernelSpec

    if isinstance(spec, KernelSpec) and spec.check is not None:
        return _lazy("oclgrind", "CheckedOpenCLRunner")(spec, **options)
    return _lazy("opencl_runner", "OpenCLRunner")(spec, **options)


def _make_callable(spec: Any, **options: Any) -> Any:
    """``make_runner(launch)`` or ``make_runner(None, runner="callable", launch=launch)``."""
    if "launch" in options:
        if spec is not None:
            from ..errors import SpecError

            raise SpecError("pass the launch function either as the spec or as launch=, not both")
        spec = options.pop("launch")
    return _lazy("callable_runner", "CallableRunner")(spec, **options)


CUDA_HINT = ("this kernel is CUDA, but neither CuPy nor PyCUDA (with nvcc) is installed: "
             "pip install cupy-cuda13x for a CUDA 13 driver, cupy-cuda12x for CUDA 12 (or pycuda)")

register(Backend(
    "cupy", _lazy("cupy_runner", "CupyRunner"), languages=(CUDA,), available=lambda: _has_module("cupy"),
    install_hint=CUDA_HINT, check_when_named=True, device_kinds=("cuda",), gpu=True, constants=CUDA_CONSTANTS,
    lock_kind="cuda", detect=_cuda_slug_with("cupy", "detect_cuda_device_cupy")))
register(Backend(
    "pycuda", _lazy("pycuda_runner", "PycudaRunner"), languages=(CUDA,),
    available=lambda: _has_module("pycuda") and shutil.which("nvcc") is not None,
    install_hint=CUDA_HINT, check_when_named=True, device_kinds=("cuda",), gpu=True, constants=CUDA_CONSTANTS,
    lock_kind="cuda", detect=_cuda_slug_with("pycuda", "detect_cuda_device_pycuda")))
register(Backend(
    "c", _lazy("c_runner", "CRunner"), languages=(C, CXX),
    available=lambda: shutil.which("gcc") is not None or shutil.which("cc") is not None,
    install_hint="install a C compiler (gcc or cc)", check_when_named=True, device_kinds=("cpu",),
    cpu_kinds=("cpu",), constants=CPU_CONSTANTS, lock_kind="cpu", detect=_cpu_slug))
register(Backend(
    "opencl", _make_opencl, languages=(OPENCL,), available=lambda: _has_module("pyopencl"),
    install_hint="pip install pyopencl (and an OpenCL platform: a GPU driver, pocl or oclgrind)",
    check_when_named=True, device_kinds=("opencl",), constants=_opencl_constants(), lock_kind="opencl",
    detect=_opencl_slug, checks=True, local_memory=True))
register(Backend(
    # a TritonSpec (@triton.jit kernels; GPU or interpreter)
    "triton", _lazy("triton_runner", "TritonRunner"), available=lambda: _has_module("triton") and _has_module("torch"),
    install_hint="pip install triton torch", device_kinds=("cuda", "triton-interpreter"),
    cpu_kinds=("triton-interpreter",),  # Triton's interpreter runs on this CPU
    lock_kind="triton", detect=_triton_slug))
register(Backend("callable", _make_callable, device_kinds=("cpu",)))
# The replay runner answers from recorded spaces on the simulated clock, a layer above the backends: it is
# named by module path and imported on first use, the one deliberate exception to the layering.
register(Backend("replay", _lazy("pytest_autotune.simulation.replay", "ReplayRunner"),  # make_runner(path, runner="replay")
                 device_kinds=("replay",)))
