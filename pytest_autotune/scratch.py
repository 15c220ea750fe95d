"""Scratch cache of evaluated configurations, so an interrupted ``--autotune`` run resumes.

One JSON-lines file per kernel and hash set, appended after every
evaluation (a crash loses at most the configuration in flight), outside
version control (pytest's cache directory). It is deleted once the kernel's
lock entry is written: a later ``--autotune`` is a deliberate re-tune and
must measure again.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping

from .hashing import stable_hash
from .results import FailureKind, Measurement
from .space import SearchSpace


class ScratchCache:
    def __init__(self, directory: Path, key: str, hashes: Mapping[str, str]):
        self.path = Path(directory) / f"{stable_hash({'key': key, 'hashes': dict(hashes)})}.jsonl"

    def load(self, space: SearchSpace) -> dict[int, Measurement]:
        """Measurements of this space already taken (rows), skipping lines a crash truncated."""
        found: dict[int, Measurement] = {}
        if not self.path.exists():
            return found
        with open(self.path, encoding="utf-8") as fh:
            for line in fh:
                try:
                    data = json.loads(line)
                except json.JSONDecodeError:
                    continue
                row = space.find(data.get("params", {}))
                if row < 0:
                    continue
                failure = FailureKind(data["failure"]) if data.get("failure") else None
                found[row] = Measurement(params=data["params"], value=data.get("value"),
                                         samples=list(data.get("samples", [])), failure=failure,
                                         detail=data.get("detail", ""), timings=dict(data.get("timings", {})))
        return found

    def append(self, m: Measurement) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        record: dict[str, Any] = {"params": dict(m.params), "value": m.value, "samples": list(m.samples),
                                  "failure": str(m.failure) if m.failure else None, "detail": m.detail[:2000],
                                  "timings": dict(m.timings)}
        line = (json.dumps(record, default=str) + "\n").encode("utf-8")
        with open(self.path, "ab+") as fh:
            # A crash mid-write leaves a torn last line: start on a fresh one, or the first
            # record of the resumed run would be glued to it and lost too.
            if fh.seek(0, os.SEEK_END) > 0:
                fh.seek(-1, os.SEEK_END)
                if fh.read(1) != b"\n":
                    line = b"\n" + line
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())

    def clear(self) -> None:
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
