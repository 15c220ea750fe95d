"""The strategy protocol: a generator that proposes configurations and is told their cost.

A strategy is pure search logic (no I/O, no timing, no pytest). Its
:meth:`Strategy.search` is a generator: ``value = yield proposal`` where the
proposal is a row of the :class:`~pytest_autotune.space.SearchSpace` (a valid
configuration) or, for constraint-unaware variants only, a value-index vector
that may be invalid. ``value`` comes back as the objective (lower is better)
or ``None`` when the configuration failed; failures are never turned into a
fake number for a model.

The :class:`~pytest_autotune.engine.evaluator.Evaluator` drives the generator
through a :class:`~.batch.BatchSearch`: it memoises (asking again for an
evaluated configuration is free and returns the cached value), enforces the
budget and records everything. Strategies keep their own view of what they
have seen in :attr:`Strategy.observed`.

Batches (``batch_size`` above 1: a pipeline wants the next candidates before
the current results are in). The strategy finds the batch size in
:attr:`Strategy.batch_size` (which may change between two proposals) and may then

* ``values = yield Batch([p1, p2, ...])``: propose several configurations at
  once and receive the list of their values, in order, when all are known
  (a population's generation, the next neighbours of the current point);
* ``value = yield p`` as before: while the batch has room, the answer is a
  lie, ``None`` ("failed, for now"), so the strategy goes on proposing; when
  the truth arrives :attr:`observed` is corrected and :meth:`Strategy.revise`
  is called, where a strategy with a model corrects it. A strategy that must
  see a result before it goes on yields a batch of one.

At batch size 1 no lie is ever told and strategies yield single proposals,
so the evaluation order is exactly the sequential one.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, ClassVar, Generator, Iterable, Sequence, Union

import numpy as np

from ..errors import AutotuneError
from ..space import SearchSpace

Proposal = Union[int, np.integer, np.ndarray, tuple]


class Batch(list):
    """Several proposals yielded at once; the generator receives the list of their values, in order."""


SearchGenerator = Generator[Union[Proposal, Batch], Union[float, None, list], None]


class StrategyError(AutotuneError, ValueError):
    """Unknown strategy, unknown or invalid hyperparameter; the message lists what exists."""


@dataclasses.dataclass
class NoHyperparameters:
    """Strategies without tunable knobs."""

    def validate(self) -> None:
        return None


def check(condition: bool, field: str, message: str) -> None:
    """Validation helper for hyperparameter dataclasses."""
    if not condition:
        raise StrategyError(f"hyperparameter {field!r}: {message}")


def check_choice(value: object, field: str, choices: Sequence[str]) -> None:
    check(value in choices, field, f"must be one of {', '.join(map(repr, choices))}, got {value!r}")


class Strategy:
    """Base class: seeded RNG, validated hyperparameters, observation bookkeeping.

    Subclasses set ``name``, a ``Hyperparameters`` dataclass (defaults +
    ``validate()``), and implement :meth:`search`.
    """

    name: ClassVar[str] = ""
    Hyperparameters: ClassVar[type] = NoHyperparameters
    # Strategies steered by hardware counters set this; the tuner then hands them
    # ``profiler(params) -> {counter: value}`` (a runner's ``profile``) before the search.
    requires_profiling: ClassVar[bool] = False
    # Strategies that pick up where another left off (start from, and learn from, what is already in
    # ``observed``) set this; only they can be the second phase of a ``chain``.
    continues_from_observations: ClassVar[bool] = False

    def __init__(self, space: SearchSpace, seed: int | None = None, **hyperparameters: Any):
        self.space = space
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        fields = {f.name for f in dataclasses.fields(self.Hyperparameters)}
        unknown = sorted(set(hyperparameters) - fields)
        if unknown:
            known = ", ".join(sorted(fields)) or "none"
            raise StrategyError(f"strategy {self.name!r} has no hyperparameter(s) {unknown}; known: {known}")
        try:
            self.hp = self.Hyperparameters(**hyperparameters)
        except TypeError as exc:  # pragma: no cover - dataclass signature errors
            raise StrategyError(f"strategy {self.name!r}: {exc}") from None
        self.hp.validate()
        self.observed: dict[int, float | None] = {}  # row -> objective or None (failure)
        # Rows of ``observed`` measured first because another device's lock suggested them (a warm start,
        # set by the evaluator): observations like any other, except where a strategy says otherwise.
        self.transferred: set[int] = set()
        self.profiler: Callable[[dict[str, Any]], dict[str, float]] | None = None
        self.budget: int = len(space)
        self._batch_size = 1
        self._stand_ins: set[int] = set()
        self._devices = 1

    @property
    def batch_size(self) -> int:
        """Configurations the evaluator keeps pending at once (see the module docstring); set by BatchSearch.

        It may change during a search (the evaluator keeps just enough pending
        to keep the device busy, :mod:`pytest_autotune.engine.pipeline_depth`), so a
        strategy reads it where it decides, not once at the start.
        """
        return self._batch_size

    @batch_size.setter
    def batch_size(self, k: int) -> None:
        self._batch_size = int(k)
        for member in self.members():
            member.batch_size = self._batch_size

    @property
    def devices(self) -> int:
        """Devices measuring this search's proposals at once (a cluster, :mod:`pytest_autotune.engine.fleet`); set by
        BatchSearch. With several, a round that waits for its slowest compile leaves all of them idle, so
        ``auto`` searches differently (see :mod:`.chain`); with one it searches as it always has."""
        return self._devices

    @devices.setter
    def devices(self, d: int) -> None:
        self._devices = int(d)
        for member in self.members():
            member.devices = self._devices

    @property
    def stand_ins(self) -> set[int]:
        """Rows of :attr:`observed` that hold a batch's stand-in (``None``, "failed, for now"), truth still to come.

        Kept by :class:`~.batch.BatchSearch` (empty at batch size 1). A strategy
        that counts its evaluations (a stale walk's patience) must not count
        these: with many proposals pending they are not observations yet.
        """
        return self._stand_ins

    @stand_ins.setter
    def stand_ins(self, rows: set[int]) -> None:
        self._stand_ins = rows
        for member in self.members():
            member.stand_ins = rows

    def members(self) -> Sequence["Strategy"]:
        """Strategies this one delegates to (``auto``, ``chain``): they share its batch size."""
        return ()

    # -- the protocol --------------------------------------------------------------
    def search(self) -> SearchGenerator:
        """Yield proposals; receive their objective (``None`` on failure)."""
        raise NotImplementedError

    def run(self, budget: int | None = None) -> SearchGenerator:
        """The generator the evaluator drives: wraps :meth:`search` and records observations."""
        self.budget = len(self.space) if budget is None else int(budget)
        inner = self.search()
        try:
            proposal = next(inner)
            while True:
                value = yield proposal
                if isinstance(proposal, Batch):
                    for member, member_value in zip(proposal, value):
                        if isinstance(member, (int, np.integer)):
                            self.observed.setdefault(int(member), member_value)
                elif isinstance(proposal, (int, np.integer)):
                    self.observed.setdefault(int(proposal), value)
                proposal = inner.send(value)
        except StopIteration:
            return

    def revise(self, row: int, value: float | None) -> None:
        """The true value of ``row``, answered earlier with a lie (``None``) to let a batch fill up.

        :attr:`observed` already holds the truth; strategies that keep a model
        of their observations correct it here. The default does nothing."""

    # -- helpers for subclasses ---------------------------------------------------------
    @property
    def best(self) -> tuple[int, float] | None:
        """Best (row, value) observed so far, or None."""
        valid = [(v, r) for r, v in self.observed.items() if v is not None]
        if not valid:
            return None
        value, row = min(valid)
        return row, value

    def unevaluated(self, rows: Iterable[int]) -> list[int]:
        return [int(r) for r in rows if int(r) not in self.observed]

    def random_unevaluated(self, k: int = 1) -> list[int]:
        """Up to ``k`` random rows not evaluated yet (empty when the space is exhausted)."""
        n = len(self.space)
        left = n - len(self.observed)
        if left <= 0:
            return []
        k = min(k, left)
        if left > 4 * k and left > 64:
            out: list[int] = []
            while len(out) < k:
                for r in self.rng.integers(0, n, size=2 * (k - len(out)) + 8):
                    r = int(r)
                    if r not in self.observed and r not in out:
                        out.append(r)
                        if len(out) == k:
                            break
            return out
        mask = np.ones(n, dtype=bool)
        mask[list(self.observed)] = False
        return [int(r) for r in self.rng.choice(np.flatnonzero(mask), size=k, replace=False)]

    def hyperparameters(self) -> dict[str, Any]:
        return dataclasses.asdict(self.hp)
