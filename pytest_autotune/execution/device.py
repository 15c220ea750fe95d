"""Device identity: what a lockfile is keyed by, and what a lock entry records."""
from __future__ import annotations

import functools
import os
import platform
import re
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


def slugify(model: str) -> str:
    """Stable, file-name-safe slug of a device model name.

    ``"NVIDIA H100 80GB HBM3"`` -> ``"nvidia-h100-80gb-hbm3"``;
    ``"Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz"`` -> ``"intel-xeon-platinum-8481c"``.
    """
    text = model.lower()
    text = re.sub(r"\((r|tm|c)\)", " ", text)
    text = re.sub(r"\b(cpu|processor)\b", " ", text)
    text = re.sub(r"@.*$", " ", text)  # clock speed is not part of the model
    text = re.sub(r"[^a-z0-9]+", "-", text).strip("-")
    return text or "unknown-device"


@dataclass
class DeviceInfo:
    """Identity and limits of the device a runner measures on."""

    model: str  # human name, e.g. "NVIDIA H100 80GB HBM3"
    kind: str  # "cuda", "cpu", "opencl", "replay", ...
    versions: dict[str, str] = field(default_factory=dict)  # driver, cuda, cupy, pycuda, compiler, ...
    properties: dict[str, Any] = field(default_factory=dict)  # compute capability, SMs, memory, limits

    @property
    def slug(self) -> str:
        """Lockfile name: the model's slug, prefixed by the kind for CPU and OpenCL devices.

        An OpenCL device is a different lockfile from the same chip under the C
        or CUDA runner: another compiler, other timings.
        """
        prefix = f"{self.kind}-" if self.kind in ("cpu", "opencl") else ""
        model = slugify(self.model)
        return model if not prefix or model.startswith(self.kind) else prefix + model

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["slug"] = self.slug
        return data


# ----------------------------------------------------------------------------
# Detection. Each function returns a DeviceInfo whose ``properties`` hold the
# limits the runner exposes as restriction constants. The CUDA ones (the same
# keys as the per-architecture table in :mod:`.cuda_arch`):
#   max_threads                          threads per block
#   max_shared_memory_per_block          static + dynamic shared memory of a block after the kernel
#                                        opts in (sharedMemPerBlockOptin): 227 KiB on H100
#   max_shared_memory_per_block_default  static + dynamic without the opt-in (sharedMemPerBlock, 48 KiB)
#   max_static_shared_memory_per_block   __shared__ arrays sized at compile time: 48 KiB, ptxas
#                                        refuses more; bound static tiles by this one, not the opt-in
#   max_shared_memory                    shared memory per multiprocessor
#   max_registers_per_block              registers per thread x threads per block must fit
# ----------------------------------------------------------------------------
STATIC_SHARED_MEMORY_LIMIT = 48 * 1024  # every architecture from sm_20 to sm_120 (see cuda_arch)

_CUDA_CONSTANT_KEYS = (
    "max_threads",
    "max_shared_memory_per_block",
    "max_shared_memory_per_block_default",
    "max_static_shared_memory_per_block",
    "max_shared_memory",
    "max_registers_per_block",
    "warp_size",
    "sm_count",
    "compute_capability",
    "l2_cache_size",
    "max_block_dim_x",
    "max_block_dim_y",
    "max_block_dim_z",
    "max_grid_dim_x",
    "max_grid_dim_y",
    "max_grid_dim_z",
)


def format_cuda_version(version: int) -> str:
    """CUDA's integer versions (``12040``) as ``"12.4"``."""
    return f"{version // 1000}.{(version % 1000) // 10}" if version else "unknown"


def cpu_model() -> str:
    """CPU model name from /proc/cpuinfo, else :func:`platform.processor`."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        text = ""
    for key in ("model name", "Model Name", "Hardware", "cpu model", "Processor"):
        for line in text.splitlines():
            name, sep, value = line.partition(":")
            if sep and name.strip() == key and value.strip():
                return value.strip()
    return platform.processor() or platform.machine() or "unknown cpu"


def cpu_signature() -> dict[str, Any]:
    """``cpu_vendor``, ``cpu_family``, ``cpu_model``, ``cpu_stepping`` of CPU 0 from /proc/cpuinfo (x86).

    VMs report ``AMD EPYC`` for several generations; family/model/stepping tell Zen 3 (25/1) from Zen 5
    (26/2) where the model name does not. Empty where /proc/cpuinfo does not say (other systems, ARM).
    """
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace").split("\n\n", 1)[0]
    except OSError:
        return {}
    keys = {"vendor_id": "cpu_vendor", "cpu family": "cpu_family", "model": "cpu_model", "stepping": "cpu_stepping"}
    out: dict[str, Any] = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        key = keys.get(name.strip())
        if sep and key and value.strip():
            value = value.strip()
            out[key] = int(value) if value.isdigit() else value
    return out


def cpu_count() -> int:
    """CPUs this process may run on (affinity-aware, unlike os.cpu_count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


def _parse_size(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(text[-1:], 1)
    digits = text[:-1] if scale != 1 else text
    return int(digits) * scale


def cpu_cache_sizes() -> dict[str, int]:
    """Data/unified cache sizes of CPU 0 in bytes (``l1d_cache``, ``l2_cache``, ``l3_cache``), from /sys."""
    sizes: dict[str, int] = {}
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for index in sorted(base.glob("index*")) if base.is_dir() else ():
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            size = _parse_size((index / "size").read_text())
        except (OSError, ValueError):
            continue
        if kind == "Instruction":
            continue
        sizes["l1d_cache" if level == 1 else f"l{level}_cache"] = size
    return sizes


@functools.lru_cache(maxsize=None)
def compiler_version(compiler: str) -> str:
    """First line of ``compiler --version`` (empty when the compiler is missing)."""
    try:
        out = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""


def detect_cpu_device(compiler: str = "gcc") -> DeviceInfo:
    """Identity of the host CPU, for the C runner."""
    import numpy

    caches = cpu_cache_sizes()
    properties: dict[str, Any] = {"cpu_count": cpu_count(), "machine": platform.machine(), **caches,
                                  **cpu_signature()}
    versions = {
        "compiler": compiler_version(compiler),
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "os": f"{platform.system()} {platform.release()}",
    }
    return DeviceInfo(model=cpu_model(), kind="cpu", versions=versions, properties=properties)


def cpu_constants(info: DeviceInfo) -> dict[str, Any]:
    """Restriction constants of a CPU: core count and cache sizes."""
    keys = ("cpu_count", "l1d_cache", "l2_cache", "l3_cache")
    return {k: info.properties[k] for k in keys if k in info.properties}


def cuda_constants(info: DeviceInfo) -> dict[str, Any]:
    """Restriction constants of a CUDA device (``max_threads``, ``max_shared_memory_per_block``...)."""
    return {k: info.properties[k] for k in _CUDA_CONSTANT_KEYS if k in info.properties}


def detect_cuda_device_cupy(device_id: int = 0) -> DeviceInfo:
    """Identity and limits of a CUDA device through CuPy (creates a context: call it where the device lives)."""
    import cupy

    rt = cupy.cuda.runtime
    p = rt.getDeviceProperties(device_id)
    name = p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])
    block = tuple(p.get("maxThreadsDim", (1024, 1024, 64)))
    grid = tuple(p.get("maxGridSize", (2**31 - 1, 65535, 65535)))
    properties = {
        "compute_capability": p["major"] * 10 + p["minor"],
        "compute_capability_str": f"{p['major']}.{p['minor']}",
        "sm_count": p["multiProcessorCount"],
        "total_memory": p["totalGlobalMem"],
        "max_threads": p["maxThreadsPerBlock"],
        "max_shared_memory_per_block": p.get("sharedMemPerBlockOptin") or p["sharedMemPerBlock"],
        "max_shared_memory_per_block_default": p["sharedMemPerBlock"],
        "max_static_shared_memory_per_block": min(p["sharedMemPerBlock"], STATIC_SHARED_MEMORY_LIMIT),
        "max_shared_memory": p.get("sharedMemPerMultiprocessor", p["sharedMemPerBlock"]),
        "max_registers_per_block": p["regsPerBlock"],
        "warp_size": p["warpSize"],
        "l2_cache_size": p.get("l2CacheSize", 0),
        "max_block_dim_x": block[0], "max_block_dim_y": block[1], "max_block_dim_z": block[2],
        "max_grid_dim_x": grid[0], "max_grid_dim_y": grid[1], "max_grid_dim_z": grid[2],
    }
    from ..backends.cuda_toolkit import installed_cuda_runtime_version, nvrtc_versions

    cupy_runtime = format_cuda_version(rt.runtimeGetVersion())
    versions = {
        "driver": format_cuda_version(rt.driverGetVersion()),
        "cuda_runtime": installed_cuda_runtime_version() or cupy_runtime,  # the installed one, not CuPy's build
        "cuda_runtime_cupy": cupy_runtime,
        **nvrtc_versions(cupy),
        "cupy": cupy.__version__,
        "python": platform.python_version(),
    }
    return DeviceInfo(model=name, kind="cuda", versions=versions, properties=properties)


def detect_cuda_device_pycuda(device_id: int = 0) -> DeviceInfo:
    """Identity and limits of a CUDA device through PyCUDA (needs ``driver.init()`` done)."""
    import pycuda
    import pycuda.driver as drv

    drv.init()
    dev = drv.Device(device_id)
    a = drv.device_attribute

    def attr(name: str, default: int = 0) -> int:
        try:
            return int(dev.get_attribute(getattr(a, name)))
        except (AttributeError, drv.Error):
            return default

    major, minor = dev.compute_capability()
    smem_block = attr("MAX_SHARED_MEMORY_PER_BLOCK")
    properties = {
        "compute_capability": major * 10 + minor,
        "compute_capability_str": f"{major}.{minor}",
        "sm_count": attr("MULTIPROCESSOR_COUNT"),
        "total_memory": int(dev.total_memory()),
        "max_threads": attr("MAX_THREADS_PER_BLOCK"),
        "max_shared_memory_per_block": attr("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", smem_block) or smem_block,
        "max_shared_memory_per_block_default": smem_block,
        "max_static_shared_memory_per_block": min(smem_block, STATIC_SHARED_MEMORY_LIMIT),
        "max_shared_memory": attr("MAX_SHARED_MEMORY_PER_MULTIPROCESSOR", smem_block),
        "max_registers_per_block": attr("MAX_REGISTERS_PER_BLOCK"),
        "warp_size": attr("WARP_SIZE", 32),
        "l2_cache_size": attr("L2_CACHE_SIZE"),
        "max_block_dim_x": attr("MAX_BLOCK_DIM_X"), "max_block_dim_y": attr("MAX_BLOCK_DIM_Y"),
        "max_block_dim_z": attr("MAX_BLOCK_DIM_Z"),
        "max_grid_dim_x": attr("MAX_GRID_DIM_X"), "max_grid_dim_y": attr("MAX_GRID_DIM_Y"),
        "max_grid_dim_z": attr("MAX_GRID_DIM_Z"),
    }
    versions = {
        "driver": format_cuda_version(drv.get_driver_version()),
        "cuda_runtime": ".".join(str(v) for v in drv.get_version()[:2]),
        "pycuda": pycuda.VERSION_TEXT,
        "python": platform.python_version(),
    }
    return DeviceInfo(model=dev.name(), kind="cuda", versions=versions, properties=properties)
