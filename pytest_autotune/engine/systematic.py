"""Stop a tune early on a failure that does not depend on the parameters.

A kernel with a syntax error, a missing symbol or a wrong argument count
fails every configuration the same way; without this check the search spends
its whole budget (a minute of compiles on a CPU, far more on a cluster) to
report what the first evaluation already said.

The rule: when the first :data:`FIRST_K` evaluations all failed (compile,
launch or runtime) with the same message once numbers, paths and the
configuration's own values are blanked, and nothing has succeeded yet, one
*contrast* configuration is tried: the one in the space that shares the fewest
values with them. If it fails alike, the failure is systematic and the tune
stops with that one message. Failures confined to part of the space (too
many threads, too much local memory) differ in the contrast, which then runs
or fails otherwise, and the search goes on; the check is made once.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from ..results import FailureKind, Measurement
from ..space import SearchSpace

FIRST_K = 4
SYSTEMATIC_KINDS = (FailureKind.COMPILE, FailureKind.LAUNCH, FailureKind.RUNTIME)
STOP_PREFIX = "systematic failure"
_MAX_ROWS = 200_000  # contrast candidates scanned (a seeded sample of larger spaces)

_PATH = re.compile(r"(?:[A-Za-z]:)?(?:[\w.~+-]*/)+[\w.+-]*")
_NUMBER = re.compile(r"(?<![A-Za-z_])(?:0x[0-9a-fA-F]+|\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)")


def normalize(message: str, params: Mapping[str, Any]) -> str:
    """``message`` with the configuration's values, paths and numbers blanked: what configurations share."""
    text = _PATH.sub("<path>", message)  # first: a value may occur inside a temporary path
    # numeric values become "#" with every other number (a column number may equal one of them)
    values = sorted({str(v) for v in params.values() if str(v) and not _NUMBER.fullmatch(str(v))}, key=len,
                    reverse=True)
    for value in values:
        if re.fullmatch(r"[\w.+-]+", value):
            text = re.sub(rf"(?<![\w.]){re.escape(value)}(?![\w])", "<v>", text)
    text = _NUMBER.sub("#", text)
    return " ".join(text.split())


def first_line(message: str) -> str:
    """The compiler's first error line (what a user reads first), else the first line."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    return next((line for line in lines if re.search(r"\berror\b", line, re.I)), lines[0] if lines else "")


@dataclass
class SystematicWatch:
    """Watches the first evaluations of one search; see the module docstring."""

    space: SearchSpace
    first_k: int = FIRST_K
    seed: int = 0
    failed: list[tuple[int, Measurement]] = field(default_factory=list)
    settled: bool = False  # decided (a success, a differing failure, or the contrast ran): never again
    contrast_row: int | None = None
    message: str = ""

    def _signature(self, m: Measurement) -> tuple[str, str] | None:
        if m.failure not in SYSTEMATIC_KINDS:
            return None
        return str(m.failure), normalize(m.detail or "", m.params)

    def observe(self, row: int, measurement: Measurement) -> None:
        """Record one evaluation, in the order they happened."""
        if self.settled:
            return
        if row == self.contrast_row:
            self.settled = True
            first = self.failed[0][1]
            if self._signature(measurement) == self._signature(first):
                self.message = (f"{STOP_PREFIX}: the first {len(self.failed)} configurations and a contrast "
                                f"sharing the fewest values with them all fail with the same {first.failure} "
                                f"error, whatever the parameters: {first_line(first.detail or '')}")
            return
        signature = self._signature(measurement) if row >= 0 else None
        if signature is None or (self.failed and signature != self._signature(self.failed[0][1])):
            self.settled = True  # a success, an ordinary failure, or a failure of another kind
            return
        self.failed.append((row, measurement))

    def contrast(self, seen: Sequence[int]) -> int | None:
        """The row to try next (once ``first_k`` failed alike), else None."""
        if self.settled or self.contrast_row is not None or len(self.failed) < self.first_k:
            return None
        n = len(self.space)
        rows = np.arange(n) if n <= _MAX_ROWS else np.random.default_rng(self.seed).choice(n, _MAX_ROWS, replace=False)
        rows = rows[~np.isin(rows, np.asarray(list(seen), dtype=np.int64))]
        if rows.size == 0:
            self.settled = True
            return None
        indices = self.space.indices[rows]
        shared = np.zeros(rows.size, dtype=np.int64)
        for row, _ in self.failed:
            shared += (indices == self.space.indices[row]).sum(axis=1)
        self.contrast_row = int(rows[int(np.argmin(shared))])
        return self.contrast_row

    @property
    def stop(self) -> bool:
        return bool(self.message)
