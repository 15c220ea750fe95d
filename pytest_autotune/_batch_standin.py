"""TEMPORARY sequential stand-in for strategies/batch.py (issue20-batch), same interface; removed at the merge."""
from __future__ import annotations

from typing import Any

import numpy as np


def proposal_key(space, proposal):
    if isinstance(proposal, (int, np.integer)):
        return int(proposal), int(proposal)
    vec = np.asarray(proposal, dtype=np.int64)
    row = space.find_indices(vec)
    return (row if row >= 0 else tuple(int(x) for x in vec)), row


class BatchSearch:
    def __init__(self, strategy, budget: int, batch_size: int = 1) -> None:
        self.strategy, self.space, self.budget = strategy, strategy.space, int(budget)
        self._gen = strategy.run(self.budget)
        self._started = False
        self._pending: dict[Any, Any] = {}
        self._results: dict[Any, Any] = {}
        self._awaiting: Any = None
        self._done = False
        self.stop_reason = ""

    @property
    def pending(self):
        return list(self._pending.values())

    @property
    def finished(self):
        return self._done

    def ask(self, k=None):
        if self._pending or self._done or len(self._results) >= self.budget:
            return []
        free = 0
        while True:
            try:
                if not self._started:
                    self._started = True
                    p = next(self._gen)
                else:
                    p = self._gen.send(self._results[self._awaiting])
            except StopIteration:
                self._done, self.stop_reason = True, "strategy finished"
                return []
            key, _ = proposal_key(self.space, p)
            self._awaiting = key
            if key in self._results:
                free += 1
                if free > 10_000:
                    self._done, self.stop_reason = True, "strategy stalled"
                    return []
                continue
            self._pending[key] = p
            return [p]

    def tell(self, proposal, value):
        key, _ = proposal_key(self.space, proposal)
        del self._pending[key]
        self._results[key] = value

    def close(self):
        self._gen.close()
