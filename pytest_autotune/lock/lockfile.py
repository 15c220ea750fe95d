"""Per-device lockfiles: the tuned winners a project commits to version control.

One JSON file per device model, ``<lockdir>/<device slug>.json``::

    {"device": {...DeviceInfo.as_dict()...}, "entries": {key: entry}, "schema": 2}

Schema 2 added the entry field ``problem`` (the readable problem, see
:mod:`.problem`); schema-1 files are read as they are (their entries lack it)
and are written as schema 2 on the next merge.

The serialisation is canonical (sorted keys, two-space indent, one key per
line, numeric arrays on one line, floats in timing fields rounded to
:data:`SIGNIFICANT_DIGITS`, newline at the end) so that re-writing an
unchanged entry changes no byte and a diff shows exactly which kernels changed.

Writers go through :func:`merge_entries`: it takes a file lock, re-reads the
current file, replaces only its own entries and writes atomically, so parallel
writers (pytest-xdist workers, CI jobs sharing a checkout) never lose each
other's entries. A file this version cannot understand (corrupt JSON, newer
schema, invalid entry) raises :class:`LockfileError` and is never modified.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import stat
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, Union

import filelock

from .entry import MAX_DEPTH, SIGNIFICANT_DIGITS, InvalidField, LockEntry, describe_value, normalize_entry, plain_data
from .errors import SCHEMA_VERSION, InvalidEntryError, LockfileError, LockTimeoutError, NewerSchemaError

__all__ = [
    "SCHEMA_VERSION",
    "SIGNIFICANT_DIGITS",
    "DEFAULT_LOCK_TIMEOUT",
    "LockfileError",
    "InvalidEntryError",
    "NewerSchemaError",
    "LockTimeoutError",
    "Lockfile",
    "LockEntry",
    "entry_key",
    "lockfile_path",
    "parse_lockfile",
    "read_lockfile",
    "read_lock_text",
    "get_entry",
    "stale_hashes",
    "merge_entries",
    "locked_rewrite",
    "normalize_entry",
    "serialize",
    "utc_timestamp",
]


DEFAULT_LOCK_TIMEOUT = 60.0
"""Seconds :func:`merge_entries` waits for another writer before giving up (a merge takes milliseconds)."""

KEY_SEPARATOR = "::"

MAX_LOCKFILE_BYTES = 64 << 20
"""A lockfile larger than this is refused unread (a lock of a few hundred kernels is a few MB)."""

_GITIGNORE = (
    "# Created by pytest-autotune. The *.json files are meant to be committed;\n"
    "# the *.lock files only serialise concurrent writers on one machine.\n"
    "*.lock\n"
)


# --------------------------------------------------------------------------- model


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


class _AsDict(Protocol):
    """What a :class:`~pytest_autotune.execution.device.DeviceInfo` offers (kept structural so the
    lockfile layer does not import the runners package)."""

    def as_dict(self) -> dict[str, Any]: ...


DeviceLike = Union[Mapping[str, Any], _AsDict]


@dataclass
class Lockfile:
    """Contents of one lockfile: the device it was tuned on and the entries by key."""

    schema: int = SCHEMA_VERSION
    device: dict[str, Any] = field(default_factory=dict)  # DeviceInfo.as_dict() of the latest writer
    entries: dict[str, LockEntry] = field(default_factory=dict)

    def get(self, key: str) -> LockEntry | None:
        return self.entries.get(key)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": self.schema, "device": self.device, "entries": self.entries}


def entry_key(nodeid: str, kernel: str) -> str:
    """Key of one tuned kernel: the pytest node id plus the kernel name.

    One test may tune several kernels, and the node id alone is what a
    developer greps for, so the key is readable rather than hashed.
    """
    if not isinstance(nodeid, str) or not nodeid:
        raise ValueError(f"entry_key: nodeid must be a non-empty string, got {nodeid!r}")
    if not isinstance(kernel, str) or not kernel:
        raise ValueError(f"entry_key: kernel name must be a non-empty string, got {kernel!r}")
    return f"{nodeid}{KEY_SEPARATOR}{kernel}"


def lockfile_path(lockdir: str | os.PathLike[str], device_slug: str) -> Path:
    """``<lockdir>/<device_slug>.json``; the slug must be a plain file name (hooks may supply it)."""
    if (
        not isinstance(device_slug, str)
        or not device_slug
        or device_slug in {".", ".."}
        or any(sep in device_slug for sep in ("/", "\\", "\0"))
    ):
        raise ValueError(f"device slug {device_slug!r} is not usable as a file name")
    return Path(lockdir) / f"{device_slug}.json"


def utc_timestamp(now: _dt.datetime | None = None) -> str:
    """ISO 8601 UTC timestamp to the second (``2024-05-01T12:00:00Z``), the form entries store."""
    now = now or _dt.datetime.now(_dt.timezone.utc)
    if now.tzinfo is None:
        raise ValueError("utc_timestamp needs a timezone-aware datetime")
    return now.astimezone(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _normalize_device(device: DeviceLike, path: str | os.PathLike[str] | None) -> dict[str, Any]:
    as_dict = getattr(device, "as_dict", None)  # accept a DeviceInfo as well as its dict
    if callable(as_dict):
        device = as_dict()
    if not isinstance(device, Mapping):
        raise LockfileError(path, f"device must be an object, got {describe_value(device)}")
    try:
        return plain_data(device, "device")
    except InvalidField as exc:
        raise LockfileError(path, str(exc)) from None


# --------------------------------------------------------------------------- serialisation


def _dump_scalar(value: Any) -> str:
    if isinstance(value, float):
        return repr(value)  # shortest repr that round-trips: stable across platforms and versions
    return json.dumps(value, ensure_ascii=True)


def _dump(value: Any, indent: int) -> str:
    if isinstance(value, dict):
        if not value:
            return "{}"
        pad = "  " * (indent + 1)
        items = (f"{pad}{json.dumps(k, ensure_ascii=True)}: {_dump(value[k], indent + 1)}" for k in sorted(value))
        return "{\n" + ",\n".join(items) + "\n" + "  " * indent + "}"
    if isinstance(value, list):
        if all(not isinstance(v, (dict, list)) for v in value):
            return "[" + ", ".join(_dump_scalar(v) for v in value) + "]"  # samples: one line
        pad = "  " * (indent + 1)
        return "[\n" + ",\n".join(pad + _dump(v, indent + 1) for v in value) + "\n" + "  " * indent + "]"
    return _dump_scalar(value)


def serialize(lockfile: Lockfile) -> str:
    """Canonical text of a lockfile: identical data gives identical bytes, whatever the insertion order.

    Entries are validated and normalised first, so what is written is exactly what a
    later :func:`read_lockfile` returns.
    """
    if not _is_int(lockfile.schema) or not 1 <= lockfile.schema <= SCHEMA_VERSION:
        raise LockfileError(None, f"cannot write schema {lockfile.schema!r}; this version writes 1 to {SCHEMA_VERSION}")
    entries = {}
    for key, entry in lockfile.entries.items():
        if not isinstance(key, str) or not key:
            raise LockfileError(None, f"entry keys must be non-empty strings, got {key!r}")
        entries[key] = normalize_entry(entry, key)
    data = {"schema": lockfile.schema, "device": _normalize_device(lockfile.device, None), "entries": entries}
    return _dump(data, 0) + "\n"


# --------------------------------------------------------------------------- reading


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:  # typically a botched merge of two branches; json.loads would silently keep one
            raise ValueError(f"duplicate key {k!r}")
        out[k] = v
    return out


def parse_lockfile(text: str, path: str | os.PathLike[str] | None = None) -> Lockfile:
    """Parse and validate lockfile text (``path`` only names the source in errors).

    Useful for content that is not on disk, e.g. ``git show main:autotune.lock/x.json``.
    """
    try:
        # NaN/Infinity (not JSON, but Python writes them) parse here and are rejected by the
        # validation below, which can say in which entry and field they are.
        data = json.loads(text, object_pairs_hook=_reject_duplicates)
    except RecursionError:
        raise LockfileError(path, f"not a valid lockfile: nested more than {MAX_DEPTH} levels deep") from None
    except json.JSONDecodeError as exc:
        hint = " (unresolved version-control merge conflict?)" if "\n<<<<<<< " in "\n" + text else ""
        raise LockfileError(
            path, f"not valid JSON{hint}: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except ValueError as exc:
        raise LockfileError(path, f"not a valid lockfile: {exc}") from None
    if not isinstance(data, dict):
        raise LockfileError(path, f"expected a JSON object at the top level, got {type(data).__name__}")
    schema = data.get("schema")
    if not _is_int(schema) or schema < 1:
        raise LockfileError(path, f"missing or invalid 'schema' (expected an integer, got {describe_value(schema)})")
    if schema > SCHEMA_VERSION:
        raise NewerSchemaError(path, schema)
    unknown = sorted(set(data) - {"schema", "device", "entries"})
    if unknown:  # would be dropped by a re-write, so refuse rather than lose them
        raise LockfileError(path, f"unknown top-level field(s) {', '.join(map(repr, unknown))}")
    device = data.get("device")
    if not isinstance(device, dict):
        raise LockfileError(path, f"'device' must be an object, got {describe_value(device)}")
    device = _normalize_device(device, path)
    raw_entries = data.get("entries")
    if not isinstance(raw_entries, dict):
        raise LockfileError(path, f"'entries' must be an object, got {describe_value(raw_entries)}")
    entries = {}
    for key, entry in raw_entries.items():
        if not key:
            raise LockfileError(path, "entry keys must be non-empty strings")
        entries[key] = LockEntry.read(entry, key, path)
    return Lockfile(schema=schema, device=device, entries=entries)


def read_lock_text(path: Path) -> str | None:
    """The file's text, read without following a link out of its folder, from a regular file of at most
    :data:`MAX_LOCKFILE_BYTES` (a FIFO or device would hang or exhaust the reader)."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise LockfileError(path, f"cannot be read ({exc.strerror or exc})") from None
    if stat.S_ISLNK(info.st_mode):
        target = path.resolve()
        if not target.is_relative_to(path.parent.resolve()):
            raise LockfileError(path, f"is a symbolic link to {target}, outside the lock directory; lockfiles are "
                                      "read only from the lock directory itself")
        try:
            info = target.stat()
        except OSError:
            return None  # a dangling link: no lockfile
    if stat.S_ISDIR(info.st_mode):
        raise LockfileError(path, "is a directory, expected a lockfile")
    if not stat.S_ISREG(info.st_mode):
        raise LockfileError(path, "is not a regular file, expected a lockfile")
    if info.st_size > MAX_LOCKFILE_BYTES:
        raise LockfileError(path, f"is {info.st_size} bytes, larger than a lockfile may be ({MAX_LOCKFILE_BYTES}); "
                                  "it was not read")
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_LOCKFILE_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise LockfileError(path, f"cannot be read ({exc.strerror or exc})") from None
    if len(raw) > MAX_LOCKFILE_BYTES:
        raise LockfileError(path, f"is larger than a lockfile may be ({MAX_LOCKFILE_BYTES} bytes); it was not read")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LockfileError(path, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def read_lockfile(path: str | os.PathLike[str]) -> Lockfile | None:
    """Read and validate a lockfile; ``None`` when it does not exist (nothing tuned on this device yet)."""
    path = Path(path)
    text = read_lock_text(path)
    return None if text is None else parse_lockfile(text, path)


def get_entry(lockfile: Lockfile | None, nodeid: str, kernel: str) -> LockEntry | None:
    """The entry for one kernel of one test, or ``None`` (no lockfile yet, or never tuned)."""
    if lockfile is None:
        return None
    return lockfile.entries.get(entry_key(nodeid, kernel))


def renamed_entry(lockfile: Lockfile | None, nodeid: str, kernel: str, hashes: Mapping[str, str],
                  gone: Callable[[str], bool] = lambda test: True) -> tuple[str, dict[str, Any]] | None:
    """The entry a renamed test left behind: ``(key, entry)`` of the one entry of another test id for the
    same kernel with the same problem and search space (and, among several, the same source), or ``None``.

    ``gone(test_id)`` says whether that test no longer exists (an entry of a test that does is never taken).
    Entries are keyed by test id, so renaming ``test_transpose`` to ``test_transpose_tiled`` would leave
    the kernel ungated; the kernel, its problem and its space identify it as well."""
    if lockfile is None:
        return None
    found = [(key, e) for key, e in sorted(lockfile.entries.items())
             if e.get("kernel") == kernel and e.get("test") != nodeid and gone(str(e.get("test")))
             and all((e.get("hashes") or {}).get(h) == hashes.get(h) for h in ("problem", "space"))]
    if len(found) > 1:
        found = [(key, e) for key, e in found if (e.get("hashes") or {}).get("source") == hashes.get("source")]
    return found[0] if len(found) == 1 else None


def stale_hashes(entry: Mapping[str, Any], hashes: Mapping[str, str]) -> list[str]:
    """Names of the hashes (``source``, ``space``, ``problem``, ...) that differ from the entry's.

    An empty list means the locked winner still applies; otherwise the kernel, its
    search space or its problem changed since tuning and the entry should be re-tuned.
    """
    recorded = entry.get("hashes") or {}
    return sorted(name for name, value in hashes.items() if recorded.get(name) != value)


# --------------------------------------------------------------------------- writing


def _fsync_directory(directory: Path) -> None:
    # Makes the rename itself durable; not possible on every platform (Windows), hence best effort.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _atomic_write(path: Path, text: str) -> None:
    """Write via a temporary file in the same directory + fsync + ``os.replace``.

    Readers see the old or the new file, never a torn one; on any failure the
    temporary file is removed and the original is untouched.
    """
    data = text.encode("utf-8")
    try:
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o644  # mkstemp's 0600 would hide a committed file from other users of the checkout
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp_name, mode)
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise
    _fsync_directory(path.parent)


def ensure_lock_directory(directory: Path) -> None:
    """Create the lock directory, with a ``.gitignore`` for the write-lock files, if it does not exist."""
    if directory.is_dir():
        return
    directory.mkdir(parents=True, exist_ok=True)
    gitignore = directory / ".gitignore"
    with contextlib.suppress(FileExistsError):
        with open(gitignore, "x", encoding="utf-8") as fh:
            fh.write(_GITIGNORE)


def merge_entries(
    path: str | os.PathLike[str],
    entries: Mapping[str, Mapping[str, Any]],
    device: DeviceLike,
    remove: Iterable[str] = (),
    *,
    timeout: float = DEFAULT_LOCK_TIMEOUT,
) -> Lockfile:
    """Replace (or add) ``entries`` and drop ``remove`` in the lockfile at ``path``; keep everything else.

    Under a ``filelock`` on ``path + ".lock"`` the current file is re-read, so
    concurrent writers each contribute their own entries instead of overwriting
    one another. ``device`` replaces the file's device block (latest writer wins;
    per-entry ``versions`` keep what each entry was tuned with). The write is
    atomic and skipped when the bytes would not change. A corrupt or newer-schema
    file raises :class:`LockfileError` and is left exactly as it was.
    Returns the lockfile as written.
    """
    path = Path(path)
    remove = [remove] if isinstance(remove, str) else list(remove)
    for key in remove:
        if not isinstance(key, str):
            raise TypeError(f"keys to remove must be strings, got {key!r}")
    both = sorted(set(remove) & set(entries))
    if both:
        raise ValueError(f"{path}: keys both written and removed: {', '.join(map(repr, both))}")
    # Validate everything before touching the disk: an invalid entry writes nothing at all.
    new_entries: dict[str, LockEntry] = {}
    for key, entry in entries.items():
        if not isinstance(key, str) or not key:
            raise InvalidEntryError(path, str(key), "entry keys must be non-empty strings")
        new_entries[key] = LockEntry.read(entry, key, path)
    device_data = _normalize_device(device, path)
    written: list[Lockfile] = []

    def update(old_text: str | None) -> str | None:
        current = parse_lockfile(old_text, path) if old_text is not None else None
        merged = dict(current.entries) if current is not None else {}
        for key in remove:
            merged.pop(key, None)
        merged.update(new_entries)
        result = Lockfile(schema=SCHEMA_VERSION, device=device_data, entries=merged)
        written.append(result)
        if current is None and not merged:
            return None  # nothing to record: do not create an empty file
        return serialize(result)

    locked_rewrite(path, update, timeout=timeout)
    return written[-1]


def locked_rewrite(path: Path, update: Callable[[str | None], str | None], *,
                   timeout: float = DEFAULT_LOCK_TIMEOUT) -> None:
    """Rewrite the file at ``path`` as ``update(current text or None)`` says, under a file lock on
    ``path + ".lock"``, atomically, and only when the text changes (``None``: leave it as it is).

    What every writer of the lock directory goes through: concurrent writers wait for each other and each
    re-reads what the last one wrote; a file ``update`` refuses (by raising) is left exactly as it was.
    """
    lock_path = str(path) + ".lock"
    try:
        ensure_lock_directory(path.parent)
        if os.path.islink(lock_path):  # filelock opens it with O_TRUNC: through a link it would truncate the target
            raise LockfileError(path, f"its write lock {lock_path} is a symbolic link; pytest-autotune never writes "
                                      "through a link: delete it (the lockfile was left untouched)")
        lock = filelock.FileLock(lock_path, timeout=timeout)
        lock.acquire()
    except filelock.Timeout:
        raise LockTimeoutError(path, lock_path, timeout) from None
    except OSError as exc:
        raise _unwritable(path, exc) from None
    try:
        old_text = read_lock_text(path)
        text = update(old_text)
        if text is not None and text != old_text:
            try:
                _atomic_write(path, text)
            except OSError as exc:
                raise _unwritable(path, exc) from None
    finally:
        lock.release()


def _unwritable(path: Path, exc: OSError) -> LockfileError:
    """A lockfile that cannot be written (disk full, read-only, immutable, permissions): said as such."""
    where = f" ({exc.filename})" if exc.filename and str(exc.filename) != str(path) else ""
    return LockfileError(path, f"cannot be written: {exc.strerror or exc}{where}; the lockfile was left untouched "
                               "(nothing of this run's result was recorded)")
