"""Batch proposals: drive a strategy's search generator with up to k configurations pending at once.

A pipeline (compile ahead, measure later) needs the next candidates before
the current results are in. :class:`BatchSearch` turns the one-at-a-time
generator protocol of :mod:`.base` into ``ask`` / ``tell``:

* a strategy that batches **natively** yields a :class:`Batch` (a list of
  proposals) and receives the list of their values, in the same order, once
  every one is known (populations yield a generation, local search the next
  few neighbours of the current point). Strategies yield batches only when
  their ``batch_size`` is above 1, so batch size 1 runs today's code;
* any other proposal is answered with a **lie** while the batch has room:
  ``None``, "failed, for now", so the generator goes on to propose more
  (a constant liar; ``None`` is the one value every strategy already
  handles without inventing a number, and it keeps a strategy away from
  the pending point, as a local penalty would). When the truth arrives,
  the strategy's ``observed`` record is corrected and
  :meth:`Strategy.revise` lets it correct its internal state (a model's
  training data). A strategy that must see a result first yields a batch
  of one: a batch is never answered with lies;
* nothing pending is handed out twice, an evaluated configuration is
  answered from memory without being handed out (free), and at most
  ``budget`` configurations are ever handed out.
"""
from __future__ import annotations

import time
from collections import OrderedDict, deque
from typing import Any, Hashable

import numpy as np

from ..space import SearchSpace
from .base import Batch, Proposal, Strategy

# A strategy that keeps proposing evaluated configurations without progress is stalled.
MAX_FREE_PROPOSALS = 10_000

Key = Hashable


def proposal_key(space: SearchSpace, proposal: Proposal) -> tuple[Key, int]:
    """Memo key and row of a proposal: a row number, or (constraint-unaware) an index vector that may be invalid."""
    if isinstance(proposal, (int, np.integer)):
        row = int(proposal)
        if not 0 <= row < len(space):
            raise IndexError(f"strategy proposed row {row} outside the space of {len(space)}")
        return row, row
    vec = np.asarray(proposal, dtype=np.int64)
    row = space.find_indices(vec)
    return (row if row >= 0 else tuple(int(x) for x in vec)), row


class BatchSearch:
    """Drives a Strategy's search generator with up to k pending (proposed, not yet told) configurations."""

    def __init__(self, strategy: Strategy, budget: int, batch_size: int = 1, devices: int = 1) -> None:
        for name, value in (("batch_size", batch_size), ("devices", devices)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        self.strategy = strategy
        self.space = strategy.space
        self.budget = int(budget)
        self.batch_size = int(batch_size)
        strategy.batch_size = self.batch_size
        strategy.devices = int(devices)  # the devices that measure the proposals (a cluster: several)
        strategy.stand_ins = self._stand_ins = set()  # rows answered with a lie, shared with the strategy
        self._gen = strategy.run(self.budget)
        self._started = False
        self._done = False
        self.stop_reason = ""
        self._queue: deque[tuple[Key, Proposal]] = deque()  # proposed by the generator, not handed out yet
        self._pending: OrderedDict[Key, Proposal] = OrderedDict()  # handed out, result not told yet
        self._results: dict[Key, float | None] = {}  # every told (or remembered) result
        self._awaiting: list[Key] | Key | None = None  # what the generator waits for: a key, or a batch's keys
        self._lied: set[Key] = set()  # answered with a lie, truth still to come
        self._free = 0  # consecutive proposals that were evaluated already
        self._seconds: dict[Key, float] = {}
        self.step_seconds: list[float] = []  # the generator's wall time per proposal step (free ones included)
        self.step_cpu_seconds: list[float] = []  # the same as this thread's CPU time

    # -- the interface ---------------------------------------------------------------------------------
    @property
    def pending(self) -> list[Proposal]:
        """Handed out by :meth:`ask`, result not told yet, oldest first."""
        return list(self._pending.values())

    @property
    def finished(self) -> bool:
        """The strategy has ended (or stalled) and everything it proposed has been handed out."""
        return self._done and not self._queue

    @property
    def evaluated(self) -> int:
        return len(self._results)

    def ask(self, k: int | None = None) -> list[Proposal]:
        """Up to k (default: batch_size minus the pending count) new proposals; [] when the strategy
        must see results first or has finished. Never returns a configuration already pending."""
        room = self.batch_size - len(self._pending) if k is None else int(k)
        room = min(room, self.budget - len(self._results) - len(self._pending))
        out: list[Proposal] = []
        while len(out) < room:
            if self._queue:
                key, proposal = self._queue.popleft()
                self._pending[key] = proposal
                out.append(proposal)
                continue
            if self._done:
                break
            if not self._started:
                self._started = True
                self._step(None, first=True)
                continue
            ready, value = self._answer()
            if not ready:
                break
            self._step(value)
        return out

    def tell(self, proposal: Proposal, value: float | None) -> None:
        """The result of one pending proposal (None = failed), in any order."""
        key, row = proposal_key(self.space, proposal)
        if key not in self._pending:
            raise KeyError(f"proposal {proposal!r} is not pending")
        del self._pending[key]
        self._results[key] = value
        if row >= 0:  # the generator is suspended: it sees this only when it resumes (as it would have)
            self.strategy.observed[row] = value
        if key in self._lied:
            self._lied.discard(key)
            self._stand_ins.discard(row)
            if row >= 0:
                self.strategy.revise(row, value)

    def resize(self, k: int) -> None:
        """Keep up to ``k`` pending from now on (the strategy reads the new size at its next decision).

        Proposals already pending stay; a smaller size only means fewer new ones until they are told.
        """
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"batch_size must be a positive integer, got {k!r}")
        if int(k) != self.batch_size:
            self.batch_size = int(k)
            self.strategy.batch_size = self.batch_size

    def remember(self, proposal: Proposal, value: float | None) -> None:
        """A result measured outside this search (a seed, an earlier run): proposing it again is free."""
        key, _ = proposal_key(self.space, proposal)
        self._results[key] = value

    def seconds(self, proposal: Proposal) -> float:
        """The strategy's own compute time for the step that proposed ``proposal``."""
        return self._seconds.get(proposal_key(self.space, proposal)[0], 0.0)

    def close(self) -> None:
        self._gen.close()

    # -- driving the generator -------------------------------------------------------------------------
    def _answer(self) -> tuple[bool, Any]:
        """Whether the generator can be answered now, and with what."""
        awaiting = self._awaiting
        if isinstance(awaiting, list):  # a batch: every value, in order, once all are known
            if all(k in self._results for k in awaiting):
                return True, [self._results[k] for k in awaiting]
            return False, None
        if awaiting in self._results:
            return True, self._results[awaiting]
        if self.batch_size > 1 and awaiting not in self._lied:
            # room in the batch: go on with a lie, corrected when the truth arrives (once per configuration:
            # a strategy that proposes a lied one again waits for its truth)
            self._lied.add(awaiting)
            if isinstance(awaiting, int):  # a row (an invalid index vector is never observed)
                self._stand_ins.add(awaiting)
            return True, None
        return False, None

    def _step(self, value: Any, first: bool = False) -> None:
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            proposal = next(self._gen) if first else self._gen.send(value)
        except StopIteration:
            self._done, self.stop_reason = True, "strategy finished"
            return
        finally:
            spent = time.perf_counter() - t0
            self.step_seconds.append(spent)
            self.step_cpu_seconds.append(time.thread_time() - c0)
        queued = len(self._queue)
        if isinstance(proposal, Batch):
            self._awaiting = [self._take(p, spent) for p in proposal]
        else:
            self._awaiting = self._take(proposal, spent)
        fresh = len(self._queue) > queued
        self._free = 0 if fresh else self._free + 1
        if self._free > MAX_FREE_PROPOSALS:
            self._done, self.stop_reason = True, "strategy stalled (kept proposing evaluated configurations)"

    def _take(self, proposal: Proposal, spent: float) -> Key:
        """Queue a new proposal for handing out; evaluated, pending or queued ones are not queued again."""
        key, _ = proposal_key(self.space, proposal)
        if key not in self._results and key not in self._pending and all(key != k for k, _ in self._queue):
            self._queue.append((key, proposal))
            self._seconds[key] = spent
        return key
