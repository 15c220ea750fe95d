"""The names a lock entry may hold for files: stored sources and the headers a kernel includes.

Both are checked where an entry is read (:mod:`.lockfile`) and again where a
file is opened or written (:mod:`.sources`): nothing a lockfile names can
reach outside the lock directory.
"""
from __future__ import annotations

import posixpath
import re

SOURCES_DIR = "sources"
STORED_NAME = re.compile(r"sources/([0-9a-f]{16})(\.[A-Za-z0-9_+-]{0,16})\Z")
"""What :func:`~.sources.source_name` produces, and all that an entry may name: no folder, no ``..``."""
_HEADER_NAME = re.compile(r"[^/\\\x00-\x1f]+(?:/[^/\\\x00-\x1f]+)*\Z")
MAX_HEADER_NAME = 512


def is_stored_name(name: object) -> bool:
    """``name`` is a name a stored source can have (what ``source_file`` and ``headers`` values must be)."""
    return isinstance(name, str) and STORED_NAME.match(name) is not None


def is_header_name(name: object) -> bool:
    """A header's name as :mod:`..execution.includes` records it: relative, normalised, without ``..``."""
    return (isinstance(name, str) and len(name) <= MAX_HEADER_NAME and _HEADER_NAME.match(name) is not None
            and posixpath.normpath(name) == name and not any(part in (".", "..") for part in name.split("/")))
