"""Objectives and a constrained space shared by the strategy tests."""
from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from pytest_autotune.results import FailureKind, Measurement
from pytest_autotune.space import SearchSpace

TARGET = np.array([6, 2, 3, 3])  # valid in sparse_space: 6 + 2 <= 9, 8 * 4 <= 256, (6 + 3) % 3 == 0


def sparse_space() -> SearchSpace:
    """About a third of a 4,096-point Cartesian product is valid (restrictions across parameters)."""
    params = {"a": list(range(8)), "b": list(range(8)), "c": [1, 2, 4, 8, 16, 32, 64, 128], "d": list(range(8))}
    return SearchSpace(params, ["a + b <= 9", "c * (d + 1) <= 256", "(a + d) % 3 != 1"])


def measured(value_of: Callable[[Mapping[str, Any]], float], fail: Callable[[Mapping[str, Any]], bool] = lambda p: False):
    """An objective returning ``value_of(params)`` as a measurement, or a runtime failure where ``fail``."""
    def objective(params):
        if fail(params):
            return Measurement.failed(params, FailureKind.RUNTIME, "synthetic failure")
        return Measurement(params, value=value_of(params))

    return objective


def bowl(space: SearchSpace, fail=None):
    """Separable bowl over value indices (optimum at TARGET); ``fail(v)`` True makes a configuration fail."""
    target = TARGET[: space.n_params]
    return measured(lambda p: 1.0 + float(np.sum((space.value_indices(p) - target) ** 2)),
                    (lambda p: False) if fail is None else (lambda p: fail(space.value_indices(p))))
