"""Export a lock directory for other build systems: a C/C++/CUDA header, or flat JSON.

``pytest-autotune export LOCKDIR --format header|json [--kernel NAME] [-o FILE]``.

Header naming (predictable, so build files and sources can use it without
reading the lock):

* device symbol ``AUTOTUNE_DEVICE_<SLUG>``: the lockfile name (device slug)
  upper-cased, every run of characters other than ``A-Z0-9`` replaced by ``_``
  (``nvidia-h100-80gb-hbm3`` -> ``AUTOTUNE_DEVICE_NVIDIA_H100_80GB_HBM3``);
  the build passes ``-DAUTOTUNE_DEVICE_<SLUG>`` (at most one);
* value ``AUTOTUNE_<KERNEL>[_<SIZE>]_<PARAM>``: kernel name and parameter
  treated the same way, ``<SIZE>`` the tuned problem size joined by ``X``
  (``matmul`` tuned at 4096x4096 -> ``AUTOTUNE_MATMUL_4096X4096_BLOCK_SIZE_X``;
  left out for kernels tuned without a size);
* values are written as the kernel runners write them into source (ints,
  floats, ``1``/``0`` for booleans, strings as bare tokens);
* include guard ``AUTOTUNE_PARAMS_H``, or ``AUTOTUNE_PARAMS_<KERNEL>_H`` with
  ``--kernel`` (the headers of several kernels can be included together);
* with no device symbol defined, the default block applies: it defines
  ``AUTOTUNE_NO_DEVICE`` and the values of ``--default-device`` when given,
  otherwise no value (guard your own defaults with ``#ifndef``).

Two different kernels/problems/parameters that map to one name, two devices
that map to one symbol, or one kernel and problem tuned by two tests with
different values are errors (:class:`ExportError`), never a silent choice.

JSON (``"format": "pytest-autotune-export"``, ``"version": 1``)::

    {"devices": {"<slug>": {"model": "...", "kernels": {"<kernel>": {"<size label or ''>":
        {"params": {...}, "problem": {...}, "test": "<node id>"}}}}}, ...}

Both are deterministic: sorted, no timestamps, so a diff shows exactly what changed.
"""
from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import AutotuneError
from .lockfile import read_lockfile
from .problem import normalize_size, size_label

__all__ = ["ExportError", "Tuned", "collect", "to_header", "to_json", "symbol"]

EXPORT_FORMAT = "pytest-autotune-export"
EXPORT_VERSION = 1


class ExportError(AutotuneError, ValueError):
    """The lock cannot be exported unambiguously (a name collision, no lockfiles, an unknown kernel)."""


@dataclass(frozen=True)
class Tuned:
    """One exported value set: a kernel tuned for one problem on one device."""

    device: str
    model: str
    kernel: str
    size: str  # problem size label, "" without one
    problem: Mapping[str, Any] | None
    params: Mapping[str, Any]
    test: str


def symbol(*parts: str) -> str:
    """``symbol("AUTOTUNE", "matmul", "block_x")`` -> ``AUTOTUNE_MATMUL_BLOCK_X`` (see the module doc)."""
    return "_".join(p for p in (re.sub(r"[^A-Z0-9]+", "_", str(p).upper()).strip("_") for p in parts) if p)


def collect(lockdir: str | os.PathLike[str], kernel: str | None = None) -> list[Tuned]:
    """Every entry of every lockfile in ``lockdir`` (sorted by device, kernel, problem), one per kernel and problem."""
    directory = Path(lockdir)
    if not directory.is_dir():
        raise ExportError(f"{directory}: not a directory of lockfiles")
    files = sorted(directory.glob("*.json"))
    if not files:
        raise ExportError(f"{directory}: no lockfiles (*.json) in this directory")
    found: dict[tuple[str, str, str], Tuned] = {}
    for path in files:
        lock = read_lockfile(path)  # LockfileError names the file
        if lock is None:
            continue
        for key, entry in sorted(lock.entries.items()):
            name = entry.kernel if isinstance(entry.kernel, str) else key.rsplit("::", 1)[-1]
            if kernel is not None and name != kernel:
                continue
            problem = entry.problem
            size = size_label(normalize_size(problem.get("size"))) if problem else ""
            test = entry.test if isinstance(entry.test, str) else key.rsplit("::", 1)[0]
            tuned = Tuned(path.stem, str(lock.device.get("model") or path.stem), name, size, problem,
                          entry.params, test)
            other = found.get((path.stem, name, size))
            if other is not None and other.params != tuned.params:
                raise ExportError(
                    f"{path}: kernel {name!r} is tuned for problem {size or '(no size)'} by two tests with different "
                    f"parameters: {other.test} and {test}; give one of them another kernel name (name=)")
            found.setdefault((path.stem, name, size), tuned)
    if kernel is not None and not found:
        raise ExportError(f"--kernel {kernel!r}: no lockfile in {directory} has an entry for this kernel")
    return [found[k] for k in sorted(found)]


_TOKEN_VALUE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?: [A-Za-z_][A-Za-z0-9_]*)*\Z")
"""A string value a header may hold: names (``float``, ``unsigned int``, ``ikj``), never an expression, a
comment, a string literal or a directive: the values come from a lockfile, which is data."""


def comment_text(text: Any) -> str:
    """``text`` safe inside a ``/* ... */`` comment on one line: no comment end, no line break."""
    return re.sub(r"[\x00-\x1f\x7f]", "?", str(text)).replace("*/", "* /").replace("/*", "/ *")


def _value(value: Any, where: str) -> str:
    from ..execution.kernel import format_value  # how the runners write parameters into source
    from ..errors import SpecError

    if isinstance(value, str) and not _TOKEN_VALUE.match(value):
        raise ExportError(f"{where} = {value[:60]!r} cannot be written into a header: a string value must be "
                          "a name or names (float, unsigned int), not an expression")
    try:
        return format_value(value)
    except SpecError as exc:
        raise ExportError(f"{where}: cannot write into a header: {exc}") from None


def _defines(tuned: list[Tuned], owner: dict[str, str]) -> list[str]:
    """``#define`` lines of one device, with a comment per kernel and problem. ``owner`` (name -> what it
    stands for, shared by all devices) makes two different things under one name an error."""
    lines: list[str] = []
    for t in tuned:
        lines.append(f"/* {comment_text(t.kernel + (', problem ' + t.size if t.size else '') + f' ({t.test})')} */")
        for param in sorted(t.params):
            name = symbol("AUTOTUNE", t.kernel, t.size, param)
            what = f"kernel {t.kernel!r}{' problem ' + t.size if t.size else ''} parameter {param!r}"
            if name in owner and owner[name] != what:
                raise ExportError(f"header name collision: {name} stands for {owner[name]} and for {what} "
                                  f"({t.device}); rename a kernel (name=) or a parameter")
            owner[name] = what
            lines.append(f"#define {name} {_value(t.params[param], f'{t.device}: {t.test}::{t.kernel} params.{param}')}")
    return lines


def to_header(tuned: list[Tuned], source: str, default_device: str | None = None, kernel: str | None = None) -> str:
    """The header text (see the module doc for the names); ``source``, ``kernel`` and ``default_device`` are
    also how its comment says to regenerate it."""
    if not tuned:
        raise ExportError(f"{source}: the lockfiles hold no entries")
    devices: dict[str, list[Tuned]] = {}
    for t in tuned:
        devices.setdefault(t.device, []).append(t)
    if default_device is not None and default_device not in devices:
        raise ExportError(f"--default-device {default_device!r}: no lockfile of that name among "
                          f"{', '.join(sorted(devices)) or 'none'}")
    symbols: dict[str, str] = {}
    for device in devices:
        sym = symbol("AUTOTUNE_DEVICE", device)
        if sym in symbols:
            raise ExportError(f"device symbol collision: lockfiles {symbols[sym]!r} and {device!r} both map to {sym}")
        symbols[sym] = device
    guard = symbol("AUTOTUNE_PARAMS", kernel or "", "H")  # one per --kernel: such headers go into one build
    again = f"pytest-autotune export {source} --format header" + (f" --kernel {kernel}" if kernel else "") + \
        (f" --default-device {default_device}" if default_device else "")
    out = [f"/* Tuned parameters exported by pytest-autotune from {comment_text(source)}. Do not edit: re-run",
           f" *   {comment_text(again)}",
           " * Select a device with -DAUTOTUNE_DEVICE_<SLUG>:",
           *(f" *   {sym}  ({comment_text(devices[d][0].model)})" for sym, d in sorted(symbols.items())),
           " * Names: AUTOTUNE_<KERNEL>[_<SIZE>]_<PARAM>. */",
           f"#ifndef {guard}", f"#define {guard}", ""]
    syms = sorted(symbols)
    if len(syms) > 1:
        out += [f"#if {' + '.join(f'defined({s})' for s in syms)} > 1",
                "#error \"pytest-autotune: define at most one AUTOTUNE_DEVICE_<SLUG>\"", "#endif", ""]
    owner: dict[str, str] = {}
    for i, sym in enumerate(syms):
        out.append(f"{'#if' if i == 0 else '#elif'} defined({sym})")
        out += _defines(devices[symbols[sym]], owner)
    out.append("#else")
    if default_device is not None:
        out.append(f"/* default block: no AUTOTUNE_DEVICE_<SLUG> defined; the values of {comment_text(default_device)} */")
        out += _defines(devices[default_device], owner)
    else:
        out.append("/* default block: no AUTOTUNE_DEVICE_<SLUG> defined; guard your defaults with #ifndef */")
    out += ["#define AUTOTUNE_NO_DEVICE 1", "#endif", "", f"#endif /* {guard} */", ""]
    return "\n".join(out)


def to_json(tuned: list[Tuned]) -> str:
    """The flat JSON export (see the module doc): device -> kernel -> problem -> params."""
    devices: dict[str, Any] = {}
    for t in tuned:
        device = devices.setdefault(t.device, {"model": t.model, "kernels": {}})
        device["kernels"].setdefault(t.kernel, {})[t.size] = {
            "params": dict(t.params), "problem": dict(t.problem) if t.problem else None, "test": t.test}
    data = {"format": EXPORT_FORMAT, "version": EXPORT_VERSION, "devices": devices}
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=True) + "\n"
