"""Local headers of a kernel: the files its ``#include "..."`` lines reach, recursively.

A header the kernel includes is part of the kernel: an edit to ``tile.h`` can
make it 3x slower as surely as an edit to the ``.cu`` file. So the headers
found here enter the kernel's source fingerprint (:mod:`..lock.hashing`), are
stored with the locked source, and their digests are appended to every
rendered source (:func:`~.kernel.render_source`), which keys every build cache
(the C runner's libraries, NVRTC's cubins, CuPy's and PyCUDA's own caches).

Resolution follows the compilers' order for quoted includes: the including
file's own folder, then ``-iquote`` folders, then the kernel file's folder,
then ``-I`` folders. ``#include <...>`` (system and toolkit headers) is left
out: those belong to the toolchain, recorded with each entry.
"""
from __future__ import annotations

import hashlib
import posixpath
import re
from pathlib import Path
from typing import Iterable, Sequence

_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"\n]+)"', re.M)
MAX_HEADERS = 256  # a runaway include tree is cut here, not followed forever


def include_dirs(source_file: Path | None, options: Sequence[str]) -> list[Path]:
    """The folders a quoted include is looked up in, in the compilers' order."""
    quote: list[Path] = []
    plain: list[Path] = []
    opts = list(options)
    for i, opt in enumerate(opts):
        for flag, into in (("-iquote", quote), ("--include-path=", plain), ("-I", plain)):
            if opt == flag.rstrip("=") and i + 1 < len(opts):
                into.append(Path(opts[i + 1]))
                break
            if opt.startswith(flag) and len(opt) > len(flag):
                into.append(Path(opt[len(flag):].lstrip("=")))
                break
    own = [source_file.parent] if source_file is not None else []
    return [*quote, *own, *plain]


def local_headers(code: str, dirs: Iterable[Path]) -> dict[str, str]:
    """``{name: text}`` of every local header ``code`` reaches; ``name`` is the path relative to the
    folder it was found in (``tile.h``, ``detail/pack.h``). Headers not found are left to the compiler."""
    search = [Path(d) for d in dirs]
    found: dict[str, str] = {}
    todo: list[tuple[str, str]] = [("", code)]  # (name of the including header, its text)
    while todo and len(found) < MAX_HEADERS:
        parent, text = todo.pop(0)
        for include in _INCLUDE.findall(text):
            name = _resolve(include, parent, search)
            if name is None or name[0] in found:
                continue
            found[name[0]] = name[1]
            todo.append(name)
    return dict(sorted(found.items()))


def _resolve(include: str, parent: str, search: list[Path]) -> tuple[str, str] | None:
    candidates: list[tuple[str, Path]] = []
    if parent:  # a header's own includes look in that header's folder first
        rel = posixpath.normpath(posixpath.join(posixpath.dirname(parent), include))
        candidates += [(rel, d / rel) for d in search]
    candidates += [(posixpath.normpath(include), d / include) for d in search]
    for name, path in candidates:
        if path.is_file() and not name.startswith(".."):
            try:
                return name, path.read_text(encoding="utf-8", errors="surrogateescape")
            except OSError:
                continue
    return None


def headers_digest(headers: dict[str, str]) -> str:
    """One line naming each header and a digest of its text: appended to a rendered source, it keys
    every build cache by the headers too."""
    parts = [f"{name}={hashlib.sha256(text.encode('utf-8', 'surrogateescape')).hexdigest()[:16]}"
             for name, text in sorted(headers.items())]
    return "// pytest-autotune local headers: " + " ".join(parts) if parts else ""
