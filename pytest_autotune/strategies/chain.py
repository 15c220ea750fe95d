"""``chain``: one strategy for the first evaluations, another for the rest, on the same observations.

Different strategies win at different points of a search. A model of a
handful of observations searched globally finds good regions fastest: with
every recorded space cut to its first 25 or 50 evaluations
(``bench_strategies.py --budget-cap``), ``tpe`` and ``bayes`` lead and
annealing is close to random search. Over the full budgets, annealing guided
by a model of every observation leads: walking neighbourhoods refines what a
model found. A chain runs ``first`` for ``evaluations`` unique evaluations
(sized to that budget: Bayesian optimisation's initial sample is 20% of it),
then ``then`` for the rest, which starts from the best configuration observed
so far and learns from every earlier observation. Only strategies that
continue from existing observations (``continues_from_observations``:
``simulated_annealing``) can be ``then``.

Both phases share one record of observations, so nothing is evaluated twice,
and their seeds derive from the chain's (``seed`` and ``seed + 1``), so a
chain is as reproducible as its members. The defaults are ``auto``'s choice;
the evidence is in :mod:`.auto`.

On several devices (a cluster, ``devices`` above 1) with an asynchronous
``then`` the first phase is left out: it is two rounds that wait for their
slowest compile (its initial design, then every one of its results before
``then`` starts), and with tens of proposals pending its model chooses on
stand-ins anyway. Its space-filling design (``first.design_for``) goes out
instead as ``then``'s start, asynchronously: the walk begins at the first
valid result and later ones move it when better. On the simulated cluster
(15 recorded spaces, 10 seeds, 8 compile workers per device) this took the
median time to 5% of the optimum at 8 devices from 11.6 s to 3.8 s (one
device: 31.1 s; docs/how-to/ray.md has the table and what it costs); one
device searches exactly as before.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .base import Batch, SearchGenerator, Strategy, check
from .local import _is_int
from .registry import available_strategies, check_nested_spec, register, strategy_class


# The benchmark's best second phase (see the ``auto`` module): guided annealing that restarts afresh when stale.
THEN = {"name": "simulated_annealing", "guide": True, "guide_probability": 0.75, "stale_gain": 0.02,
        "stale_restart": "fresh", "restart_samples": 12}


def _continuing() -> list[str]:
    return [n for n in available_strategies() if strategy_class(n).continues_from_observations]


@register
class Chain(Strategy):
    """``first`` for ``evaluations`` unique evaluations, then ``then`` from the best found."""

    name = "chain"

    @dataclass
    class Hyperparameters:
        first: dict = field(default_factory=lambda: {"name": "bayes"})
        evaluations: int = 20
        then: dict = field(default_factory=lambda: dict(THEN))

        def validate(self) -> None:
            check_nested_spec("first", self.first)
            then = check_nested_spec("then", self.then)
            check(then.continues_from_observations, "then",
                  f"strategy {self.then['name']!r} does not continue from earlier observations; "
                  f"those that do: {', '.join(_continuing())}")
            check(_is_int(self.evaluations) and self.evaluations >= 0, "evaluations",
                  f"must be a non-negative integer (unique evaluations of the first phase), got {self.evaluations!r}")

    def __init__(self, space: Any, seed: int | None = None, **hyperparameters: Any):
        super().__init__(space, seed=seed, **hyperparameters)
        self.phases: list[Strategy] = []
        for i, spec in enumerate((self.hp.first, self.hp.then)):
            spec = dict(spec)
            self.phases.append(strategy_class(spec.pop("name"))(space, seed=None if seed is None else seed + i, **spec))
        self.requires_profiling = any(phase.requires_profiling for phase in self.phases)

    def search(self) -> SearchGenerator:
        first, then = self.phases
        for phase in self.phases:  # set late: auto rebinds ``observed``, the tuner sets ``profiler``
            phase.observed, phase.profiler = self.observed, self.profiler
            phase.transferred = self.transferred
        first.budget = min(self.budget, int(self.hp.evaluations))
        if first.budget > 0 and self._wide(then):
            # Several devices: the first phase would be rounds that wait for their slowest compile (its initial
            # design, then all its results before ``then`` starts) while the devices idle, and with tens pending
            # its model proposals are chosen on stand-ins anyway. Its space-filling design starts ``then`` instead,
            # asynchronously (see SimulatedAnnealing._start_async).
            design = getattr(first, "design_for", None)
            if design is not None:
                then.start_design = [int(r) for r in design(int(getattr(then.hp, "start_samples", first.budget)))]
        elif first.budget > 0:
            phase = first.search()
            spent = 0  # new configurations proposed (a re-proposed evaluated row is free)
            proposed: list[int] = []  # rows the first phase proposed
            try:
                proposal = next(phase)
                while True:
                    members = proposal if isinstance(proposal, Batch) else [proposal]
                    spent += sum(not isinstance(p, (int, np.integer)) or int(p) not in self.observed for p in members)
                    proposed.extend(int(p) for p in members if isinstance(p, (int, np.integer)))
                    value = yield proposal
                    if spent >= first.budget:
                        break
                    proposal = phase.send(value)
            except StopIteration:
                pass  # the first strategy ended early (space exhausted): the second goes on
            phase.close()
            if self.batch_size > 1 and proposed:
                # Batching, some of the first phase's results are still pending: wait for them (a batch of what
                # it proposed; the known ones are free), or the second phase starts from the best of too little.
                yield Batch(proposed)
        then.budget = self.budget
        return (yield from then.search())

    def _wide(self, then: Strategy) -> bool:
        """Whether ``then`` runs alone from a design: on several devices, when it starts asynchronously."""
        wide = getattr(then, "_wide", None)
        return self.devices > 1 and wide is not None and bool(wide())

    def members(self) -> list[Strategy]:
        return self.phases

    def revise(self, row: int, value: float | None) -> None:
        for phase in self.phases:  # the first phase's stand-in may reach the second through ``observed``
            phase.revise(row, value)
