"""Search strategies: one module per family, all registered by name.

Importing this package registers every strategy; use
:func:`make_strategy` with a name (or a dict with ``name`` and
hyperparameters) and :func:`available_strategies` to list them.
"""
from .base import SearchGenerator, Strategy, StrategyError
from .registry import available_strategies, make_strategy, register, strategy_class, validate_strategy_spec
from . import simple  # noqa: F401  (registers brute_force, random)
from . import bayes, diff_evo, genetic, local, swarm  # noqa: F401,E401  (register by import)
from . import tpe  # noqa: F401,E402  (registers "tpe")
from . import shrinking_sample  # noqa: F401,E402  (registers "shrinking_sample")
from . import profile  # noqa: F401,E402  (registers "profile"; needs a runner that can profile)
from . import lfbo  # noqa: F401,E402  (registers "lfbo")
from . import chain  # noqa: F401,E402  (registers "chain")
from . import auto  # noqa: F401,E402  (after the strategies it may delegate to)

__all__ = ["Strategy", "StrategyError", "SearchGenerator", "available_strategies", "make_strategy", "register",
           "strategy_class", "validate_strategy_spec"]
