"""OpenCL device choice, identity and limits (pyopencl is passed in, never imported here).

Which device: an explicit ``device=`` runner option, else
``$PYTEST_AUTOTUNE_DEVICE`` (set per pytest-xdist worker by
``--autotune-devices``), else ``$PYOPENCL_CTX`` (PyOpenCL's own convention),
else the first GPU, then accelerator, then CPU device in platform order. A
selector is ``"P:D"`` (platform index, device index on it), ``"D"`` (index
into the list of all devices, simulators excluded) or text matched against
``"<platform> <device>"`` (case-insensitive). The Oclgrind simulator is never
picked by default: it checks kernels (``check="races"``), it does not time them.

A device that cannot build is no device: before one is chosen it builds and
runs a trivial kernel (:func:`probe_device`, once per process). The default
choice passes over a device that fails while another works; when none works
(PyOpenCL's bundled PoCL 3.0 / LLVM 14 on a CPU its LLVM does not know, e.g.
Zen 5: ``error: unknown target CPU 'generic'``), or the selected one fails,
:class:`~pytest_autotune.errors.BackendUnavailable` names the device, its
first build error, the PoCL and LLVM versions and the remedy, so the plugin
reports "no usable device" instead of spending a budget on compile failures.

Restriction constants: the OpenCL names (``max_work_group_size``,
``max_work_item_size_x/y/z`` (``CL_DEVICE_MAX_WORK_ITEM_SIZES``, one name per
axis because restrictions do not index), ``local_mem_size``,
``compute_units``...) and the
CUDA runner's names where the meaning is the same, so one restriction list
serves both backends: ``max_threads`` = max work-group size,
``max_block_dim_x/y/z`` = max work-item sizes, ``max_shared_memory_per_block``
= ``max_shared_memory`` = local memory per work-group, ``sm_count`` = compute
units, ``l2_cache_size`` = global memory cache size, and ``warp_size`` where the
device reports one (NVIDIA's warp, AMD's wavefront).
"""
from __future__ import annotations

import os
import platform as _platform
import re
from typing import Any, Sequence

import numpy as np

from ..execution.device import DeviceInfo
from ..errors import BackendUnavailable, SpecError

SIMULATOR_PLATFORMS = ("Oclgrind",)
DEVICE_ENV = ("PYTEST_AUTOTUNE_DEVICE", "PYOPENCL_CTX")
# What a user typed to set each variable, for the error when its selector matches nothing.
_ENV_ORIGIN = {"PYTEST_AUTOTUNE_DEVICE": "--autotune-devices (PYTEST_AUTOTUNE_DEVICE)"}
_SELECTOR = re.compile(r"\s*(\d+)\s*(?::\s*(\d+)\s*)?\Z")

# OpenCL constant name -> the CUDA runner's name for the same limit
CUDA_ALIASES = {
    "max_work_group_size": "max_threads",
    "local_mem_size": "max_shared_memory_per_block",
    "compute_units": "sm_count",
    "global_mem_cache_size": "l2_cache_size",
}
CONSTANT_NAMES = (
    "max_work_group_size",
    "max_work_item_size_x",
    "max_work_item_size_y",
    "max_work_item_size_z",
    "local_mem_size",
    "compute_units",
    "global_mem_cache_size",
    "global_mem_size",
    "max_mem_alloc_size",
    "warp_size",
)


PROBE_SOURCE = "__kernel void probe(__global int *out) { out[get_global_id(0)] = 42 + (int)get_global_id(0); }"
POCL_REMEDY = "install your distribution's PoCL, e.g. apt-get install pocl-opencl-icd"
_probed: dict[tuple[str, str, int], str | None] = {}  # per process: each device is built on once


def _first_error(text: str) -> str:
    """The compiler's first error line of a build failure (not PyOpenCL's repeated status line)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    useful = [line for line in lines if not line.startswith(("clBuildProgram failed", "Build on <"))]
    error = next((line for line in useful if re.search(r"\berror\b", line, re.I)), None)
    return (error or (useful or lines or ["unknown error"])[0])[:300]


def runtime_versions(device: Any) -> str:
    """``"PoCL 3.0-rc2, LLVM 14.0.6"`` from the platform's version string; else the platform's version."""
    text = f"{device.platform.version} {getattr(device, 'version', '')}"
    found = [f"{name} {m.group(1)}" for name, pattern in (("PoCL", r"\bPoCL\s+(\d[^\s,]*)"),
                                                           ("LLVM", r"\bLLVM\s+(\d[^\s,]*)"))
             if (m := re.search(pattern, text, re.I))]
    return ", ".join(found) or " ".join(str(device.platform.version).split())


def is_pocl(device: Any) -> bool:
    return "portable computing language" in device.platform.name.lower() or "pocl" in \
        str(getattr(device.platform, "vendor", "")).lower()


def probe_device(cl: Any, device: Any) -> str | None:
    """``None`` when ``device`` builds and runs a trivial kernel, else the first error (cached per process).

    Costs about 0.1 s once; a device whose compiler rejects every program would
    otherwise cost a whole tuning budget of compile failures.
    """
    key = (device.platform.name.strip(), device.name.strip(), int(getattr(device, "int_ptr", 0) or id(device)))
    if key in _probed:
        return _probed[key]
    try:
        context = cl.Context([device])
        queue = cl.CommandQueue(context)
        program = cl.Program(context, PROBE_SOURCE).build()
        kernel = cl.Kernel(program, "probe")
        out = np.zeros(2, dtype=np.int32)
        buffer = cl.Buffer(context, cl.mem_flags.WRITE_ONLY, out.nbytes)
        kernel.set_args(buffer)
        cl.enqueue_nd_range_kernel(queue, kernel, (2,), None)
        cl.enqueue_copy(queue, out, buffer)
        queue.finish()
        reason = None if out.tolist() == [42, 43] else f"a trivial kernel returned {out.tolist()}, not [42, 43]"
    except Exception as exc:  # any failure at all: this device cannot run kernels here
        reason = _first_error(str(exc)) or type(exc).__name__
    _probed[key] = reason
    return reason


def unusable_reason(device: Any, error: str) -> str:
    """What a user reads about a device that failed the probe: which, why, which versions, what to do."""
    remedy = POCL_REMEDY if is_pocl(device) else f"check the OpenCL driver of {device.platform.name.strip()!r}"
    return (f"OpenCL device {device.name.strip()!r} ({runtime_versions(device)}) cannot build a kernel: "
            f"{error}; {remedy}")


def is_simulator(device: Any) -> bool:
    return device.platform.name.strip() in SIMULATOR_PLATFORMS


def _type_rank(cl: Any, device: Any) -> int:
    kinds = cl.device_type
    for rank, kind in enumerate((kinds.GPU, kinds.ACCELERATOR, kinds.CPU)):
        if device.type & kind:
            return rank
    return 3


def list_devices(cl: Any) -> list[tuple[int, int, Any]]:
    """Every device as ``(platform index, device index, device)``; an ICD loader without platforms yields []."""
    try:
        platforms = cl.get_platforms()
    except cl.Error:
        return []  # PLATFORM_NOT_FOUND_KHR: no OpenCL runtime installed
    found = []
    for p, plat in enumerate(platforms):
        try:
            devices = plat.get_devices()
        except cl.Error:
            continue
        found.extend((p, d, dev) for d, dev in enumerate(devices))
    return found


def selector_from_env() -> tuple[str, str] | None:
    """``(variable, value)`` of the first device variable that is set, or None."""
    for name in DEVICE_ENV:
        value = os.environ.get(name, "").strip()
        if value:
            return name, value
    return None


def select_device(cl: Any, selector: str | int | None = None, *, where: str = "device") -> Any:
    """The device ``selector`` names (see the module doc), or the default device.

    Raises BackendUnavailable when there is no OpenCL device at all, and
    SpecError naming ``where`` (the option or variable) for a selector that
    matches nothing.
    """
    devices = list_devices(cl)
    if not devices:
        raise BackendUnavailable("no OpenCL platform or device found (pip install pocl-binary-distribution "
                                 "gives a CPU device)")
    if selector is None:
        env = selector_from_env()
        if env is not None:
            where, selector = _ENV_ORIGIN.get(env[0], env[0]), env[1]
    if selector is None:
        usable = [entry for entry in devices if not is_simulator(entry[2])]
        if not usable:
            raise BackendUnavailable("only the Oclgrind simulator is installed; it checks kernels but does not "
                                     "time them (pip install pocl-binary-distribution for a CPU device)")
        failures = []
        for _, _, device in sorted(usable, key=lambda entry: _type_rank(cl, entry[2])):  # stable: platform order
            error = probe_device(cl, device)
            if error is None:
                return device
            failures.append(unusable_reason(device, error))
        raise BackendUnavailable("; ".join(failures))
    text = str(selector)
    match = _SELECTOR.match(text)
    if match and match.group(2) is not None:
        p, d = int(match.group(1)), int(match.group(2))
        chosen = [dev for pi, di, dev in devices if (pi, di) == (p, d)]
    elif match:
        real = [dev for _, _, dev in devices if not is_simulator(dev)]
        index = int(match.group(1))
        chosen = real[index:index + 1]
    else:
        needle = text.lower()
        chosen = [dev for _, _, dev in devices if needle in f"{dev.platform.name} {dev.name}".lower()][:1]
    if not chosen:
        listing = "; ".join(device_names(devices))
        raise SpecError(f"{where}={text!r} matches no OpenCL device; available: {listing}")
    error = None if is_simulator(chosen[0]) else probe_device(cl, chosen[0])
    if error is not None:
        raise BackendUnavailable(f"{where}={text!r}: {unusable_reason(chosen[0], error)}")
    return chosen[0]


# Platform vendor families: who wrote the compiler (it sets the timings), not a driver release's wording.
_FAMILIES = (("PoCL", ("portable computing language", "pocl")), ("Oclgrind", ("oclgrind",)),
             ("NVIDIA", ("nvidia",)), ("AMD", ("advanced micro devices", "amd accelerated parallel", "amd")),
             ("Intel", ("intel",)), ("Apple", ("apple",)), ("Mesa", ("mesa", "rusticl", "clover")),
             ("ARM", ("arm",)), ("Qualcomm", ("qualcomm",)))
# PoCL's CPU device names: "<driver>-[<code-generation variant>-]<CPU model>", e.g. "pthread-AMD EPYC"
# (PyOpenCL's bundled PoCL 3.0) and "pthread-skylake-avx512-AMD EPYC" (Debian's PoCL 3.1, built with
# CPU variants); PoCL 4 and later name the driver "cpu".
_POCL_DRIVER = re.compile(r"^(?:pthread|cpu-minimal|cpu-tbb|cpu|basic|tbb)-")
_VARIANT_TOKEN = re.compile(r"[a-z0-9_.]+")


def platform_family(platform_name: str, platform_vendor: str = "") -> str:
    """``"PoCL"``, ``"NVIDIA"``, ``"Intel"``...: the platform vendor family (else the platform's first word)."""
    text = f"{platform_name} {platform_vendor}".lower()
    for family, needles in _FAMILIES:
        if any(re.search(rf"\b{re.escape(n)}\b", text) for n in needles):
            return family
    words = (platform_vendor or platform_name).split()
    return words[0] if words else "unknown"


def split_pocl_name(name: str) -> tuple[str, str]:
    """``(hardware, variant)`` of a PoCL CPU device name: ``"pthread-skylake-avx512-AMD EPYC"`` ->
    ``("AMD EPYC", "skylake-avx512")``; a name without PoCL's prefix is returned whole."""
    name = " ".join(name.split())
    rest = _POCL_DRIVER.sub("", name, count=1)
    if rest == name:
        return name, ""
    tokens = rest.split("-")
    # variant tokens are LLVM CPU names (lower case, no spaces); the model starts at the first other one
    cut = 0
    while cut < len(tokens) - 1 and _VARIANT_TOKEN.fullmatch(tokens[cut]):
        cut += 1
    return "-".join(tokens[cut:]), "-".join(tokens[:cut])


def device_identity(platform_name: str, platform_vendor: str, device_name: str) -> tuple[str, str, str]:
    """``(family, hardware, variant)``: what a lockfile is named by (family and hardware) and what is only
    recorded (PoCL's code-generation variant, which another PoCL build of the same CPU names otherwise)."""
    family = platform_family(platform_name, platform_vendor)
    hardware, variant = split_pocl_name(device_name) if family == "PoCL" else (" ".join(device_name.split()), "")
    return family, hardware, variant


def identity_model(family: str, hardware: str) -> str:
    """``"PoCL AMD EPYC"``, ``"NVIDIA GeForce RTX 3090"`` (the family is not repeated)."""
    return hardware if hardware.lower().startswith(family.lower()) else f"{family} {hardware}"


def device_model(device: Any) -> str:
    """The device's identity as a name: platform vendor family + hardware name (see :func:`device_identity`).

    A different driver release (PyOpenCL's PoCL 3.0 or Debian's 3.1 on the same CPU) keeps the name, and so
    the lockfile; the compiler's family is part of it (PoCL and Intel's CPU runtime time differently).
    """
    family, hardware, _ = device_identity(device.platform.name, str(getattr(device.platform, "vendor", "")),
                                          device.name)
    return identity_model(family, hardware)


def recorded_model(properties: dict[str, Any]) -> str | None:
    """The identity of a device as a lockfile records it (``properties`` of its device block), older
    versions' included (they lack ``platform_vendor``); None when it records too little."""
    if not properties.get("platform") or not properties.get("device_name"):
        return None
    family, hardware, _ = device_identity(properties["platform"], str(properties.get("platform_vendor", "")),
                                          properties["device_name"])
    return identity_model(family, hardware)


def _warp_size(cl: Any, device: Any) -> int | None:
    """The SIMD width the vendor reports through its extension, if any (NVIDIA warp, AMD wavefront)."""
    extensions = device.extensions.split()
    try:
        if "cl_nv_device_attribute_query" in extensions:
            return int(device.warp_size_nv)
        if "cl_amd_device_attribute_query" in extensions:
            return int(device.wavefront_width_amd)
    except (cl.Error, AttributeError):
        pass
    return None


def detect_opencl_device(cl: Any, device: Any) -> DeviceInfo:
    """Identity and limits of ``device``; ``properties`` hold every restriction constant."""
    sizes = [int(s) for s in device.max_work_item_sizes]
    sizes += [1] * (3 - len(sizes))
    family, _, variant = device_identity(device.platform.name, str(getattr(device.platform, "vendor", "")),
                                         device.name)
    properties: dict[str, Any] = {
        "platform": device.platform.name.strip(),
        "platform_vendor": str(getattr(device.platform, "vendor", "")).strip(),
        "vendor": device.vendor.strip(),
        "device_name": device.name.strip(),
        "device_type": " | ".join(t for t in ("GPU", "ACCELERATOR", "CPU", "CUSTOM")
                                  if device.type & getattr(cl.device_type, t, 0)) or str(device.type),
        "max_work_group_size": int(device.max_work_group_size),
        "max_work_item_sizes": sizes,
        "max_work_item_size_x": sizes[0], "max_work_item_size_y": sizes[1], "max_work_item_size_z": sizes[2],
        "local_mem_size": int(device.local_mem_size),
        "compute_units": int(device.max_compute_units),
        "global_mem_cache_size": int(device.global_mem_cache_size),
        "global_mem_size": int(device.global_mem_size),
        "max_mem_alloc_size": int(device.max_mem_alloc_size),
    }
    warp = _warp_size(cl, device)
    if warp:
        properties["warp_size"] = warp
    versions = {
        "platform": device.platform.version.strip(),
        "driver": device.driver_version.strip(),
        "device": device.version.strip(),
        "opencl_c": device.opencl_c_version.strip(),
        "pyopencl": cl.VERSION_TEXT,
        "python": _platform.python_version(),
    }
    if family == "PoCL":  # what the name no longer says: the build and its code-generation target
        text = f"{versions['platform']} {versions['device']}"
        for name, pattern in (("pocl", r"\bPoCL\s+(\d[^\s,]*)"), ("llvm", r"\bLLVM\s+(\d[^\s,]*)")):
            if m := re.search(pattern, text, re.I):
                versions[name] = m.group(1)
        target = re.search(r"HSTR:\s*\S*?-linux-gnu-(\S+)", versions["device"])
        versions["cpu_variant"] = variant or (target.group(1) if target else "")
    return DeviceInfo(model=device_model(device), kind="opencl", versions=versions, properties=properties)


def opencl_constants(info: DeviceInfo) -> dict[str, Any]:
    """Restriction constants: the OpenCL names plus the CUDA runner's names for the same limits."""
    props = info.properties
    constants = {k: props[k] for k in CONSTANT_NAMES if k in props}
    for name, alias in CUDA_ALIASES.items():
        if name in props:
            constants[alias] = props[name]
    constants["max_shared_memory"] = props["local_mem_size"]
    for axis, size in zip("xyz", props["max_work_item_sizes"]):
        constants[f"max_block_dim_{axis}"] = size
    return constants


def device_names(devices: Sequence[tuple[int, int, Any]]) -> list[str]:
    """``"P:D platform / device"`` for each device: what a selector can name."""
    return [f"{p}:{d} {dev.platform.name.strip()} / {dev.name.strip()}" for p, d, dev in devices]
