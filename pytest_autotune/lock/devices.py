"""Which lockfile a device uses, and what of the device each entry records.

A lockfile is named by the device's identity (:attr:`DeviceInfo.slug`). For
OpenCL that identity is the platform vendor family plus the hardware name
(:func:`~pytest_autotune.backends.opencl_device.device_identity`); older
versions named the file after the driver's device string, so a different PoCL
build on the same CPU started a new lockfile. A lockfile under such an older
name is still found: through the device recorded in it.

A CPU's lockfile name is its model name, which VMs share across generations
(``AMD EPYC``); each CPU entry therefore records the family/model/stepping and
cache sizes (:func:`cpu_record`), and the gate notes a generation unlike the
lock's (:func:`cpu_generation_note`).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from ..execution.device import DeviceInfo
from ..backends.cuda_arch import parse_arch
from ..backends.opencl_device import recorded_model
from .lockfile import LockfileError, lockfile_path, read_lock_text

CPU_RECORD = ("cpu_vendor", "cpu_family", "cpu_model", "cpu_stepping", "l1d_cache", "l2_cache", "l3_cache")
_GENERATION = ("cpu_vendor", "cpu_family", "cpu_model")  # stepping alone is a revision, not another design
_CACHES = ("l1d_cache", "l2_cache", "l3_cache")


def _recorded_device(path: Path) -> Mapping[str, Any] | None:
    try:  # read as a lockfile is (no link out of the folder, no FIFO, bounded), parsed only for its device
        text = read_lock_text(path)
        data = json.loads(text) if text is not None else None
    except (LockfileError, ValueError, RecursionError):
        return None
    device = data.get("device") if isinstance(data, Mapping) else None
    return device if isinstance(device, Mapping) else None


def recorded_slug(device: Mapping[str, Any]) -> str | None:
    """The lockfile name the recorded ``device`` has today (an OpenCL device's identity is recomputed from
    its recorded platform and name, so a file written under an older name still matches)."""
    kind = device.get("kind")
    properties = device.get("properties") or {}
    if kind == "opencl" and isinstance(properties, Mapping):
        model = recorded_model(dict(properties))
        if model:
            return DeviceInfo(model=model, kind="opencl").slug
    slug = device.get("slug")
    return slug if isinstance(slug, str) else None


def find_lockfile(lockdir: str | Path, slug: str) -> Path:
    """``<lockdir>/<slug>.json``, or an existing lockfile under an older name whose recorded device has
    the identity ``slug`` names (the file keeps its name: the committed lock stays the one in use)."""
    path = lockfile_path(lockdir, slug)
    if path.exists():
        return path
    for other in sorted(Path(lockdir).glob("*.json")):
        device = _recorded_device(other)
        if device is not None and recorded_slug(device) == slug:
            return other
    return path


def same_kind_lockfiles(lockdir: str | Path, kind: str, exclude: Path) -> list[tuple[Path, str]]:
    """Other lockfiles of devices of ``kind`` (``(path, model)``), for "a new lockfile while these exist"."""
    found = []
    for other in sorted(Path(lockdir).glob("*.json")):
        device = _recorded_device(other)
        if other != exclude and device is not None and device.get("kind") == kind:
            found.append((other, str(device.get("model", "?"))))
    return found


def cpu_record(device: DeviceInfo) -> dict[str, Any]:
    """What a CPU entry records of its CPU: family/model/stepping and cache sizes (empty for other kinds)."""
    if device.kind != "cpu":
        return {}
    return {k: device.properties[k] for k in CPU_RECORD if k in device.properties}


def _size(n: Any) -> str:
    if not isinstance(n, int):
        return str(n)
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def cpu_generation_note(locked: Mapping[str, Any] | None, current: DeviceInfo) -> str:
    """A note when this CPU is another generation than the lock's (family/model, or L1d/L2 sizes), else ""."""
    if current.kind != "cpu" or not locked:
        return ""
    now = cpu_record(current)
    changes = []
    if all(k in locked and k in now for k in _GENERATION) and any(locked[k] != now[k] for k in _GENERATION):
        changes.append(f"family {locked['cpu_family']} model {locked['cpu_model']} -> "
                       f"family {now['cpu_family']} model {now['cpu_model']}")
    for key in _CACHES[:2]:  # L3 is shared and sliced by VMs; L1d and L2 are the core's
        if key in locked and key in now and locked[key] != now[key]:
            changes.append(f"{key.split('_')[0].upper()} {_size(locked[key])} -> {_size(now[key])}")
    if not changes:
        return ""
    return f"another CPU generation than the lock's ({', '.join(changes)})"


def device_arch(device: Mapping[str, Any] | None) -> int | None:
    """Architecture of a lockfile's device: ``compute_capability`` 90, ``[9, 0]`` or ``"9.0"``; None if unknown."""
    props = (device or {}).get("properties") or {}
    value = props.get("compute_capability", props.get("compute_capability_str"))
    try:
        if isinstance(value, (list, tuple)) and len(value) == 2:
            return int(value[0]) * 10 + int(value[1])
        return parse_arch(value) if isinstance(value, (int, str)) and not isinstance(value, bool) else None
    except (TypeError, ValueError):
        return None
