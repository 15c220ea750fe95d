"""What changed since a lock entry was written, said for the gate's message: files, toolchain, CPU."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from ..lock.entry import LockEntry
from ..lock.lockfile import LockfileError, read_lockfile
from ..lock.sources import source_name
from .calls import KernelCall

__all__ = ["TOOLCHAIN_IGNORED", "toolchain_changes", "changed_files", "locked_device_properties"]

TOOLCHAIN_IGNORED = ("pytest_autotune", "os", "python", "numpy")  # the machine's, or not the build's


def toolchain_changes(entry: LockEntry, current: Mapping[str, Any]) -> list[str]:
    """``toolchain changed: compiler gcc 12.2.0 -> 13.1.0`` for each recorded tool (compiler, NVRTC/CUDA,
    CuPy, PyCUDA, PyOpenCL, PoCL, driver, flags) whose version here differs from the entry's."""
    recorded = {k: str(v) for k, v in entry.versions.items() if k not in TOOLCHAIN_IGNORED}
    now = {k: str(v) for k, v in current.items() if k not in TOOLCHAIN_IGNORED}
    if not recorded:
        return []
    return [f"toolchain changed: {name} {_short_version(recorded.get(name, '(none)'))} -> "
            f"{_short_version(now.get(name, '(none)'))}"
            for name in sorted(set(recorded) | set(now)) if recorded.get(name) != now.get(name)
            and not (name == "flags" and name not in recorded)]


def _short_version(text: str) -> str:
    """``gcc (Debian 12.2.0-14) 12.2.0`` -> ``gcc 12.2.0``: the tool and its version, not the vendor's string."""
    words = text.split()
    if len(words) > 2 and "(" in text and words[-1][:1].isdigit():
        return f"{words[0]} {words[-1]}"
    return text


def changed_files(k: KernelCall, entry: LockEntry) -> list[str]:
    """Which of the kernel's files differ from the locked ones: the kernel file (by its name), its headers."""
    if k.source is None or not entry.source_file:
        return []
    changed = []
    if source_name(k.source["code"], k.source["suffix"]) != entry.source_file:
        changed.append(k.source.get("file") or "kernel file")
    locked = entry.headers
    now = k.source.get("headers") or {}
    for name in sorted(set(locked) | set(now)):
        if name not in now:
            changed.append(f"{name} (no longer included)")
        elif name not in locked:
            changed.append(f"{name} (newly included)")
        elif source_name(now[name], Path(name).suffix or ".h") != locked[name]:
            changed.append(name)
    return changed


def locked_device_properties(path: Path) -> Mapping[str, Any] | None:
    """The lockfile's device block (for entries written before they recorded their CPU)."""
    try:
        lock = read_lockfile(path)
    except LockfileError:
        return None
    return (lock.device or {}).get("properties") if lock is not None else None
