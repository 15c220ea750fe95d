"""Search strategies: one module per family, all registered by name.

Importing this package registers every strategy; use
:func:`make_strategy` with a name (or a dict with ``name`` and
hyperparameters) and :func:`available_strategies` to list them.
"""
from .base import SearchGenerator, Strategy, StrategyError
from .registry import available_strategies, make_strategy, register, strategy_class, validate_strategy_spec
from . import simple  # noqa: F401  (registers brute_force, random)

__all__ = ["Strategy", "StrategyError", "SearchGenerator", "available_strategies", "make_strategy", "register",
           "strategy_class", "validate_strategy_spec"]
