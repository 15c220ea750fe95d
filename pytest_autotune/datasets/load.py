"""Loading a recorded space from any supported file (memoised), and finding the files in a folder."""
from __future__ import annotations

import contextlib
import gc
import json
import os
import re
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, Mapping

from .common import (MEASURED_FORMATS, DatasetError, PathLike, _open_text, _orjson, _read_json, default_spaces_root,
                     detect_format)
from .kerneltuner import _kt_records
from .ktt import _ktt_records
from .recorded import RecordedSpace, _assemble
from .t1 import SpaceDefinition, find_definition, load_definition
from .t4 import _t4_records

@contextlib.contextmanager
def _gc_paused():
    """Pause the cyclic garbage collector while building large acyclic JSON trees (half the parse time)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _load_uncached(path: Path, definition: PathLike | Mapping | SpaceDefinition | None) -> RecordedSpace:
    with _gc_paused():
        return _parse(path, definition)


def _parse(path: Path, definition: PathLike | Mapping | SpaceDefinition | None) -> RecordedSpace:
    doc = _read_json(path)
    try:
        fmt = detect_format(doc)
    except DatasetError as exc:
        raise DatasetError(f"{path}: {exc}") from None
    defn = None
    if definition is not None:
        defn = load_definition(definition)
    if fmt == "t1":
        raise DatasetError(f"{path}: a T1 search-space definition without measurements; load it with "
                           "load_definition(), or load a measured file (T4, Kernel Tuner cache, KTT)")
    if fmt == "t4":
        if defn is None:
            defn = load_definition(find_definition(path))
        records = _t4_records(doc, path, defn)
    elif fmt == "kerneltuner":
        records = _kt_records(doc, path)
    else:
        records = _ktt_records(doc, path)
    return _assemble(records, path, fmt, defn)


_CACHE: "OrderedDict[tuple, tuple[RecordedSpace, tuple | None]]" = OrderedDict()
_CACHE_SIZE = 32
_CACHE_LOCK = threading.Lock()


def _file_key(path: Path) -> tuple:
    st = path.stat()
    return (str(path.resolve()), st.st_mtime_ns, st.st_size)


def load_dataset(path: PathLike, definition: PathLike | Mapping[str, Any] | SpaceDefinition | None = None, *,
                 cache: bool = True) -> RecordedSpace:
    """Load a recorded space in any supported format (detected from the content).

    ``definition`` (a T1 path, parsed T1 document or :class:`SpaceDefinition`)
    is required for T4 files, found automatically when the T1 file sits in
    ``<root>/t1/<kernel>.json`` for ``<root>/t4/<kernel>_<gpu>.json[.gz]``.
    Given for a Kernel Tuner or KTT file, the space is built from it and the
    file must record exactly its valid configurations; otherwise the space is
    exactly the configurations the file records.

    Results are memoised by path, modification time and size of the file
    (and of the T1 file a T4 file found by itself; the last 32 loads), and
    shared: their arrays are read-only. ``cache=False`` always reads the file.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no recorded space at {path}")
    key = None
    if cache:
        if definition is None:
            dkey: Any = None
        elif isinstance(definition, (str, os.PathLike)):
            dkey = _file_key(Path(definition))
        else:
            dkey = ("object", id(definition))
            cache = False  # a mutable in-memory definition is not a safe cache key
        key = (_file_key(path), dkey)
    if cache:
        with _CACHE_LOCK:
            hit = _CACHE.get(key)
        if hit is not None:
            recorded, dependency = hit
            # a T4 file found its T1 definition itself: reuse only while that file is unchanged too
            if dependency is None or (recorded.definition.is_file() and _file_key(recorded.definition) == dependency):
                with _CACHE_LOCK:
                    if key in _CACHE:
                        _CACHE.move_to_end(key)
                return recorded
    recorded = _load_uncached(path, definition)
    if cache:
        dependency = _file_key(recorded.definition) if definition is None and recorded.definition else None
        with _CACHE_LOCK:
            _CACHE[key] = (recorded, dependency)
            while len(_CACHE) > _CACHE_SIZE:
                _CACHE.popitem(last=False)
    return recorded


def clear_cache() -> None:
    """Forget every memoised load."""
    with _CACHE_LOCK:
        _CACHE.clear()


# -- discovery ------------------------------------------------------------------------------------

_SNIFF_BYTES = 1 << 18
_SNIFF = [
    ("t4", re.compile(rb'"results"\s*:\s*\[')),
    ("kerneltuner", re.compile(rb'"tune_params"\s*:')),
    ("ktt", re.compile(rb'"Results"\s*:\s*\[')),
    ("t1", re.compile(rb'"ConfigurationSpace"\s*:')),
]


def sniff_format(path: PathLike) -> str | None:
    """Format of a file from its first bytes, without parsing a large file; ``None`` when unrecognised."""
    path = Path(path)
    try:
        with _open_text(path) as f:
            head = f.read(_SNIFF_BYTES + 1)
    except (OSError, EOFError):
        return None
    if len(head) <= _SNIFF_BYTES:  # the whole file: decide exactly
        try:
            return detect_format(_orjson.loads(head) if _orjson is not None else json.loads(head))
        except (ValueError, DatasetError):
            return None
    hits = {fmt: m.start() for fmt, rx in _SNIFF for m in [rx.search(head)] if m}
    if "kerneltuner" in hits and not re.search(rb'"cache"\s*:\s*\{', head):
        # a Kernel Tuner cache writes tune_params before the cache; without it, guess nothing
        hits.pop("kerneltuner")
    if not hits:
        return None
    return min(hits, key=hits.get)


def discover(root: PathLike | None = None) -> list[Path]:
    """Every measured space file (T4, Kernel Tuner cache, KTT) under ``root``, sorted.

    ``root`` defaults to :func:`default_spaces_root`. Files are recognised by
    content, so any folder layout works; T1 definitions and unrelated JSON
    files are left out.
    """
    root = Path(root) if root is not None else default_spaces_root()
    if not root.is_dir():
        raise FileNotFoundError(f"no folder of recorded spaces at {root}")
    found = []
    for f in sorted(root.rglob("*")):
        if f.is_file() and (f.name.endswith(".json") or f.name.endswith(".json.gz")):
            if sniff_format(f) in MEASURED_FORMATS:
                found.append(f)
    return found
