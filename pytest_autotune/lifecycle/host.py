"""What the lifecycle needs from whoever runs it (the pytest plugin, a script, another test runner)."""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = ["Host"]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


@dataclass
class Host:
    """The caller's side of one kernel call.

    ``test`` names the call in the lock (a pytest node id, or any stable name a script chooses: entries are
    keyed ``<test>::<kernel>``). ``say`` writes one line now; ``progress(label, budget)`` returns a
    per-evaluation callback, or ``None`` for none; ``lockfile_name(device)`` may name the device's lockfile
    (the ``pytest_autotune_lockfile_name`` hook), ``None`` for the device's own slug; ``gone(test)`` says that
    a test the lock knows no longer exists (a renamed test's entry is then taken over).
    """

    test: str
    say: Callable[[str], None] = _stderr
    progress: Callable[[str, "int | None"], Any] = field(default=lambda label, budget: None)
    lockfile_name: Callable[[Any], "str | None"] = field(default=lambda device: None)
    gone: Callable[[str], bool] = field(default=lambda test: False)
