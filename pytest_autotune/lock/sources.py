"""The exact kernel sources the lock entries were tuned with, content-addressed beside the lockfiles.

``<lockdir>/sources/<hash>.<ext>``: committed with the lock, readable in a
diff, one file per distinct source text however many entries and devices
use it (a kernel of a few KB costs a few KB per edit that was re-tuned;
``pytest-autotune prune`` removes the ones no entry references). When a
kernel is edited, the gate builds this locked source and the current one at
the locked parameters and times them side by side (see :mod:`..gate`).
The local headers a kernel includes (:mod:`..execution.includes`) are stored the
same way, one file per header text, and named in the entry's ``headers``: an
edited header is A/B-gated like an edited kernel file.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import tempfile
from pathlib import Path
from typing import Iterable, Mapping

from .lockfile import LockfileError, ensure_lock_directory
from .names import SOURCES_DIR, STORED_NAME, is_header_name, is_stored_name

MAX_SOURCE_BYTES = 16 << 20
"""A stored source larger than this is refused, not read: no kernel source is 16 MiB, and a lock from a pull
request must not be able to exhaust the runner's memory."""


def _normal(code: str) -> str:
    return code.replace("\r\n", "\n").replace("\r", "\n")


def _digest(code: str) -> str:
    return hashlib.sha256(_normal(code).encode("utf-8", "surrogatepass")).hexdigest()[:16]


def source_name(code: str, suffix: str) -> str:
    """``sources/<sha256[:16]>.<ext>`` of the source text (line endings normalised)."""
    return f"{SOURCES_DIR}/{_digest(code)}{suffix if suffix.startswith('.') else '.' + suffix}"


def sources_folder(lockdir: str | os.PathLike[str]) -> Path:
    """``<lockdir>/sources``, refused when it is a link or anything but a folder: nothing is read, written or
    deleted through a link out of the lock directory."""
    folder = Path(lockdir) / SOURCES_DIR
    try:
        info = folder.lstat()
    except FileNotFoundError:
        return folder
    if stat.S_ISLNK(info.st_mode):
        raise LockfileError(folder, "is a symbolic link; pytest-autotune never reads or writes stored sources "
                                    "through a link out of the lock directory: replace it by a folder")
    if not stat.S_ISDIR(info.st_mode):
        raise LockfileError(folder, "is not a folder; stored kernel sources live in this folder: remove it")
    return folder


def store_source(lockdir: str | os.PathLike[str], code: str, suffix: str) -> str:
    """Write the source once (atomically; concurrent writers write the same bytes); return its relative name."""
    name = source_name(code, suffix)
    folder = sources_folder(lockdir)
    path = Path(lockdir) / name
    text = _normal(code)
    with contextlib.suppress(LockfileError):
        if _read_stored(Path(lockdir), name) == text:
            return name
    try:
        ensure_lock_directory(Path(lockdir))
        folder.mkdir(exist_ok=True)
        sources_folder(lockdir)  # created by a concurrent writer as a link: refuse it here too
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
                fh.write(text)
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)  # replaces a link of that name, never writes through it
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError as exc:
        raise LockfileError(path, f"cannot be written ({exc.strerror or exc}); the lockfile was left "
                                  "untouched") from None
    return name


def _read_stored(lockdir: Path, name: str) -> str | None:
    """The text of a stored source, checked: a regular file in ``sources/`` (no link), at most
    :data:`MAX_SOURCE_BYTES`, holding the text its name is the digest of. ``None`` when it is missing."""
    folder = sources_folder(lockdir)
    path = folder / name.split("/", 1)[1]
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return None
    except OSError as exc:
        if path.is_symlink():
            raise LockfileError(path, "is a symbolic link; a stored source must be a file in the lock "
                                      "directory") from None
        raise LockfileError(path, f"cannot be read ({exc.strerror or exc})") from None
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise LockfileError(path, "is not a regular file; a stored source must be a file")
        if info.st_size > MAX_SOURCE_BYTES:
            raise LockfileError(path, f"is {info.st_size} bytes, more than a stored source may be "
                                      f"({MAX_SOURCE_BYTES}); it was not read")
        raw = fh.read(MAX_SOURCE_BYTES + 1)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LockfileError(path, f"is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    digest = STORED_NAME.match(name)
    if digest is not None and _digest(text) != digest.group(1):
        raise LockfileError(path, "does not hold the text its name is the digest of (edited by hand?); restore it "
                                  "from version control, or re-tune the kernel with pytest --autotune")
    return text


def load_source(lockdir: str | os.PathLike[str], name: str) -> str | None:
    """The stored source, or ``None`` when it is missing (an entry older than this feature, a pruned file).

    A name that is not a stored source's (a path, ``..``), a link, a file that is not one or is too large, or
    a text that does not match its name raise :class:`~.lockfile.LockfileError`: what the gate would build
    must be exactly what was locked."""
    if not name:
        return None
    if not is_stored_name(name):
        raise LockfileError(Path(lockdir), f"stored source {name!r} is not a name in {SOURCES_DIR}/; entries "
                                           "name their sources by digest")
    return _read_stored(Path(lockdir), name)


def unreferenced_sources(lockdir: str | os.PathLike[str], referenced: Iterable[str]) -> list[Path]:
    """Stored sources no entry names any more: regular files named like stored sources, in ``sources/``
    itself (never a link, never a file reached through one, never anything else a user keeps there)."""
    folder = sources_folder(lockdir)
    keep = {str(name) for name in referenced}
    if not folder.is_dir():
        return []
    out = []
    for entry in os.scandir(folder):
        name = f"{SOURCES_DIR}/{entry.name}"
        if is_stored_name(name) and name not in keep and entry.is_file(follow_symlinks=False):
            out.append(folder / entry.name)
    return sorted(out)


def materialize_headers(headers: Mapping[str, str]) -> Path:
    """The locked headers written to a folder named by their contents (a build of the same locked headers
    hits the build cache again), laid out as they were included, inside this user's private temporary
    folder. Names are checked again here: a header is written only below that folder."""
    digest = hashlib.sha256(repr(sorted(headers.items())).encode("utf-8", "surrogateescape")).hexdigest()[:16]
    root = _private_temp()
    folder = root / f"headers-{digest}"
    for name, text in headers.items():
        if not is_header_name(name):
            raise LockfileError(None, f"header name {name!r} is not a relative path inside the kernel's folders")
        target = folder.joinpath(*name.split("/"))
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.parent.resolve().is_relative_to(folder.resolve()):
            raise LockfileError(target, "is reached through a link out of the locked headers' folder")
        if target.is_symlink() or (target.exists() and
                                   target.read_text(encoding="utf-8", errors="surrogateescape") != text):
            target.unlink()
        if not target.exists():
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
            with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as fh:
                fh.write(text or "")
    return folder


def _private_temp() -> Path:
    """``<tmp>/pytest-autotune-<uid>``: this user's own folder (mode 0700), refused when it is a link or
    belongs to someone else, so no other user of the machine can prepare what a build reads from it."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    root = Path(tempfile.gettempdir()) / f"pytest-autotune-{uid}"
    with contextlib.suppress(FileExistsError):
        root.mkdir(mode=0o700)
    info = root.lstat()
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode) or \
            (hasattr(os, "getuid") and info.st_uid != uid):
        raise LockfileError(root, "is not this user's own folder (a link, or another user's); remove it")
    return root
