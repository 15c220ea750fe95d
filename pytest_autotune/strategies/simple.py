"""The two baselines every other strategy is measured against."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .base import SearchGenerator, Strategy, check
from .registry import register


@register
class BruteForce(Strategy):
    """Every valid configuration, in space order (or shuffled, to spread a time budget)."""

    name = "brute_force"

    @dataclass
    class Hyperparameters:
        shuffle: bool = False

        def validate(self) -> None:
            check(isinstance(self.shuffle, bool), "shuffle", "must be true or false")

    def search(self) -> SearchGenerator:
        order = self.rng.permutation(len(self.space)) if self.hp.shuffle else np.arange(len(self.space))
        for row in order:
            yield int(row)


@register
class RandomSearch(Strategy):
    """Uniform sampling without replacement over valid configurations."""

    name = "random"

    def search(self) -> SearchGenerator:
        for row in self.rng.permutation(len(self.space))[: self.budget]:
            yield int(row)
