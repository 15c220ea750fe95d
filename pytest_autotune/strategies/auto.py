"""``auto``: the default strategy, chosen by the evidence of ``benchmarks/bench_strategies.py``.

It delegates to the strategy (with hyperparameters) that scored best on the
brute-forced GPU spaces in ``../shared/data/spaces``; see
``benchmarks/results/strategies.json`` and the README's strategy section.
The delegate sees the same space, seed, budget and observations, so ``auto``
is exactly as reproducible as the strategy it picks.

Evidence (10 seeds, 13 measured spaces, metric 0 = random, 1 = optimum at
once): simulated_annealing 0.59 +/- 0.05, mls 0.56, genetic 0.55, diff_evo 0.54,
pso 0.54, ils 0.52,
tpe 0.43, bayes 0.37, shrinking_sample 0.29; Kernel Tuner 1.5.0's best in the
same run: pso 0.45. On the two KTT spaces its defaults were not tuned on it
scores 0.63 and 0.71 (tpe 0.84 and 0.81 is better there). Smaller random starts for small budgets were
measured and rejected (0.25 -> about 0.0 on the six smallest-budget spaces).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .base import SearchGenerator, Strategy, StrategyError, check
from .registry import register, strategy_class

# The benchmark's winner (see module docstring).
DEFAULT_CHOICE: dict[str, Any] = {"name": "simulated_annealing"}


@register
class Auto(Strategy):
    """Delegates to the benchmark's best strategy; ``choice`` overrides it (name + hyperparameters)."""

    name = "auto"

    @dataclass
    class Hyperparameters:
        choice: dict = field(default_factory=lambda: dict(DEFAULT_CHOICE))

        def validate(self) -> None:
            check(isinstance(self.choice, dict) and "name" in self.choice, "choice",
                  "must be a dict with a 'name' (and hyperparameters)")
            check(self.choice["name"] != "auto", "choice", "cannot delegate to itself")
            try:
                cls = strategy_class(self.choice["name"])
                cls.Hyperparameters(**{k: v for k, v in self.choice.items() if k != "name"}).validate()
            except (TypeError, StrategyError) as exc:
                raise StrategyError(f"hyperparameter 'choice': {exc}") from None

    def __init__(self, space: Any, seed: int | None = None, **hyperparameters: Any):
        super().__init__(space, seed=seed, **hyperparameters)
        spec = dict(self.hp.choice)
        self.delegate = strategy_class(spec.pop("name"))(space, seed=seed, **spec)
        self.delegate.observed = self.observed  # one view of what has been seen

    def search(self) -> SearchGenerator:
        self.delegate.budget = self.budget
        return (yield from self.delegate.search())
