"""``pytest-autotune prune``: remove lock entries that belong to no collected test.

Renamed or deleted tests leave entries behind that nothing gates. Which tests
exist is what pytest collects, so pruning runs pytest's collection (no test
is executed) with the project's own configuration, then drops every entry
whose test is not a collected ``tune``-marked test. It refuses to prune when
collection reports an error (an import error would make every entry look
orphaned) or collects nothing. Entries of test files outside the collected
paths are kept, unless their file no longer exists.
"""
from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pytest

from ..errors import AutotuneError
from ..lifecycle import Collected, Orphan, Rename, find_orphans, find_renames, orphaned_sources, rekey, \
    remove_orphans, space_hash


class PruneError(AutotuneError):
    """Pruning was refused; the message says why and nothing was written."""


@dataclass(eq=False)  # registered as a pytest plugin: must stay hashable
class _Collected(Collected):
    """The :class:`~..lifecycle.prune.Collected` record, filled in by pytest's collection hooks."""

    # pytest hooks (this object is registered as a plugin for one collection run)
    def pytest_itemcollected(self, item: pytest.Item) -> None:  # before -k/-m deselection
        self.files.add(item.nodeid.split("::", 1)[0])
        if item.get_closest_marker("tune") is not None:
            self.marked.add(item.nodeid)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.errors.append(report.nodeid or "<session>")

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        from .session import STATE_KEY

        from . import SETTINGS_KEY

        self.rootdir = Path(str(session.config.rootpath))
        self.lockdir = session.config.stash[STATE_KEY].options.lockdir
        for item in session.items:
            settings = item.stash.get(SETTINGS_KEY, None)
            if settings is not None:
                self.spaces[item.nodeid] = space_hash(settings)


def collect(pytest_args: Sequence[str] = ()) -> _Collected:
    """Run pytest's collection only, quietly, and return what it found."""
    found = _Collected()
    output = io.StringIO()  # pytest's per-file counts are not prune's output; shown only when collection fails
    with contextlib.redirect_stdout(output):
        code = pytest.main(["--collect-only", "-qq", "-p", "no:cacheprovider", *pytest_args], plugins=[found])
    if found.errors or code not in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        raise PruneError(f"collection failed ({', '.join(found.errors) or f'pytest exit code {int(code)}'}); "
                         "fix it first: entries of tests that did not import would look orphaned\n"
                         + output.getvalue().strip()[-4000:])
    if not found.files or found.lockdir is None:
        raise PruneError("pytest collected no tests here; run prune from the project (or pass its test paths)")
    return found


__all__ = ["PruneError", "collect", "find_orphans", "find_renames", "rekey", "orphaned_sources",
           "remove_orphans", "Orphan", "Rename"]
