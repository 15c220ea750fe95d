"""The exact kernel sources the lock entries were tuned with, content-addressed beside the lockfiles.

``<lockdir>/sources/<hash>.<ext>``: committed with the lock, readable in a
diff, one file per distinct source text however many entries and devices
use it (a kernel of a few KB costs a few KB per edit that was re-tuned;
``pytest-autotune prune`` removes the ones no entry references). When a
kernel is edited, the gate builds this locked source and the current one at
the locked parameters and times them side by side (see :mod:`..gate`).
The local headers a kernel includes (:mod:`..runners.includes`) are stored the
same way, one file per header text, and named in the entry's ``headers``: an
edited header is A/B-gated like an edited kernel file.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Iterable

from .lockfile import ensure_lock_directory

SOURCES_DIR = "sources"


def source_name(code: str, suffix: str) -> str:
    """``sources/<sha256[:16]>.<ext>`` of the source text (line endings normalised)."""
    text = code.replace("\r\n", "\n").replace("\r", "\n")
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{SOURCES_DIR}/{digest}{suffix if suffix.startswith('.') else '.' + suffix}"


def store_source(lockdir: str | os.PathLike[str], code: str, suffix: str) -> str:
    """Write the source once (atomically; concurrent writers write the same bytes); return its relative name."""
    name = source_name(code, suffix)
    path = Path(lockdir) / name
    if path.exists():
        return name
    ensure_lock_directory(Path(lockdir))
    path.parent.mkdir(exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(code.replace("\r\n", "\n").replace("\r", "\n"))
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return name


def load_source(lockdir: str | os.PathLike[str], name: str) -> str | None:
    """The stored source, or ``None`` when it is missing (an entry older than this feature, a pruned file)."""
    if not name or Path(name).is_absolute() or ".." in Path(name).parts:
        return None
    try:
        return (Path(lockdir) / name).read_text(encoding="utf-8")
    except OSError:
        return None


def unreferenced_sources(lockdir: str | os.PathLike[str], referenced: Iterable[str]) -> list[Path]:
    """Stored sources no entry names any more."""
    keep = {str(Path(lockdir) / name) for name in referenced}
    folder = Path(lockdir) / SOURCES_DIR
    return sorted(p for p in folder.glob("*") if p.is_file() and str(p) not in keep) if folder.is_dir() else []
