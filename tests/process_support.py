"""What the worker-process tests ask of a process id (shared by tests/execution/)."""
from __future__ import annotations

import os
from pathlib import Path


def exited(pid: int) -> bool:
    """The process is gone, or a zombie nobody reaps (no init in a container): it has exited either way."""
    try:
        os.kill(pid, 0)
        status = Path(f"/proc/{pid}/status").read_text()
    except (ProcessLookupError, FileNotFoundError):
        return True
    return "\nState:\tZ" in status
