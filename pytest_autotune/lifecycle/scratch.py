"""Scratch cache of evaluated configurations, so an interrupted ``--autotune`` run resumes.

One JSON-lines file per kernel and hash set, appended after every
evaluation (a crash loses at most the configuration in flight), outside
version control (pytest's cache directory). It is deleted once the kernel's
lock entry is written: a later ``--autotune`` is a deliberate re-tune and
must measure again.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..lock.hashing import describe_callable, stable_hash
from ..results import FailureKind, Measurement
from ..space import SearchSpace


def _content(value: Any) -> Any:
    """JSON data standing for ``value``'s content: arrays by a digest of their bytes, callables by source."""
    if isinstance(value, np.ndarray):
        data = np.ascontiguousarray(value)
        return {"array": hashlib.sha256(data.view(np.uint8).reshape(-1).tobytes()).hexdigest()[:16],
                "shape": list(data.shape), "dtype": data.dtype.str}
    if isinstance(value, np.generic):
        return {"scalar": value.dtype.str, "value": value.item()}
    if isinstance(value, Mapping):
        return {str(k): _content(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_content(v) for v in value]
    if callable(value):
        return describe_callable(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "__dataclass_fields__"):
        import dataclasses

        return {type(value).__name__: _content(dataclasses.asdict(value))}
    # A default repr carries a memory address, different in every run: drop it, or nothing would resume.
    text = re.sub(r" at 0x[0-9a-fA-F]+", "", repr(value))[:200]
    return {"object": f"{type(value).__module__}.{type(value).__qualname__}", "repr": text}


def fingerprint(inputs: Mapping[str, Any]) -> str:
    """Digest of everything besides the lock's hashes that decides an evaluation's outcome: expected
    outputs (their values, not only shapes), tolerances, the verify function, measure options, runner."""
    return stable_hash(_content(dict(inputs)))


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
                                         detail=data.get("detail", ""), timings=dict(data.get("timings", {})),
                                         early_stopped=bool(data.get("early_stopped", False)))
        return found

    def append(self, m: Measurement) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        record: dict[str, Any] = {"params": dict(m.params), "value": m.value, "samples": list(m.samples),
                                  "failure": str(m.failure) if m.failure else None, "detail": m.detail[:2000],
                                  "timings": dict(m.timings), "early_stopped": m.early_stopped}
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
