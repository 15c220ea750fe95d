"""The errors of the lock layer: a lockfile or an entry that cannot be used as is, never modified."""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import AutotuneError

__all__ = ["LockfileError", "InvalidEntryError", "NewerSchemaError", "LockTimeoutError", "SCHEMA_VERSION"]

SCHEMA_VERSION = 2
"""Schema this version reads and writes; a file with a higher one is refused, never rewritten."""


class LockfileError(AutotuneError):
    """A lockfile that cannot be used as is; the file is reported and never modified.

    ``path`` is the offending file (``None`` for data not read from or bound for a file).
    The arguments are kept in ``args`` so the error survives pickling (xdist, multiprocessing).
    """

    def __init__(self, path: str | os.PathLike[str] | None, reason: str) -> None:
        super().__init__(path, reason)
        self.path = Path(path) if path is not None else None
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}" if self.path is not None else self.reason


class InvalidEntryError(LockfileError, ValueError):
    """An entry (read from a file or about to be written) does not match the schema."""

    def __init__(self, path: str | os.PathLike[str] | None, key: str, reason: str) -> None:
        super().__init__(path, f"entry {key!r}: {reason}")
        self.args = (path, key, reason)
        self.key = key


class NewerSchemaError(LockfileError):
    """The file was written by a newer pytest-autotune with a schema we do not know."""

    def __init__(self, path: str | os.PathLike[str] | None, found: int) -> None:
        super().__init__(
            path,
            f"schema {found} was written by a newer pytest-autotune (this version reads schema "
            f"{SCHEMA_VERSION}); upgrade pytest-autotune",
        )
        self.args = (path, found)
        self.found = found


class LockTimeoutError(LockfileError, TimeoutError):
    """Another process held the write lock for longer than the timeout."""

    def __init__(self, path: str | os.PathLike[str] | None, lock_path: str, timeout: float) -> None:
        super().__init__(
            path,
            f"could not acquire the write lock {lock_path} within {timeout:g} s; another pytest-autotune "
            "process is writing this lockfile (if none is running, the lock file is stale: delete it)",
        )
        self.args = (path, lock_path, timeout)
        self.lock_path = lock_path
        self.timeout = timeout
