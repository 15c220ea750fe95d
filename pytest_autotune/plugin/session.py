"""Run-wide state of the plugin: the resolved options, the terminal, the collected summary rows."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import pytest

from ..lifecycle import INCOMPARABLE_POLICIES, MISSING_POLICIES, Options, Progress

__all__ = ["INCOMPARABLE_POLICIES", "MISSING_POLICIES", "Options", "SessionState", "STATE_KEY"]


@dataclass
class SessionState:
    options: Options
    write_line: Callable[[str], None] | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)
    collected: set[str] = field(default_factory=set)  # every test id collected, before deselection (renames)

    def say(self, line: str) -> None:
        """One line on the terminal now (not under -q, not from xdist workers)."""
        if self.write_line is not None and self.options.verbosity >= 0 and not self.options.is_worker:
            self.write_line(line)

    def progress(self, label: str, budget: int | None) -> Progress:
        quiet = self.options.verbosity < 0 or self.options.is_worker
        return Progress(None if quiet else self.write_line, label, budget)


STATE_KEY = pytest.StashKey[SessionState]()
"""Where the session's state lives on ``config.stash`` (the hooks, the fixture and prune read it)."""
