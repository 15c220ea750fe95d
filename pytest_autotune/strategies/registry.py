"""Strategies by name, for the marker's ``strategy=`` (a name, or a dict with a name and hyperparameters)."""
from __future__ import annotations

import dataclasses
import difflib
from typing import Any, Mapping, Union

from ..space import SearchSpace
from .base import Strategy, StrategyError

StrategySpec = Union[str, Mapping[str, Any], Strategy]

_REGISTRY: dict[str, type[Strategy]] = {}


def register(cls: type[Strategy]) -> type[Strategy]:
    """Class decorator: make a strategy available by its ``name``."""
    if not cls.name:
        raise TypeError(f"{cls.__qualname__} needs a name")
    _REGISTRY[cls.name] = cls
    return cls


def available_strategies() -> list[str]:
    return sorted(_REGISTRY)


def _split(spec: StrategySpec) -> tuple[str, dict[str, Any]]:
    if isinstance(spec, str):
        return spec, {}
    if isinstance(spec, Mapping):
        if "name" not in spec:
            raise StrategyError(f"strategy dict {dict(spec)!r} needs a 'name' key; known: {', '.join(available_strategies())}")
        rest = {k: v for k, v in spec.items() if k != "name"}
        return str(spec["name"]), rest
    raise StrategyError(f"strategy must be a name or a dict with 'name', got {type(spec).__name__}")


def strategy_class(name: str) -> type[Strategy]:
    if name not in _REGISTRY:
        close = difflib.get_close_matches(name, available_strategies(), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise StrategyError(f"unknown strategy {name!r}{hint}; known: {', '.join(available_strategies())}")
    return _REGISTRY[name]


def validate_strategy_spec(spec: StrategySpec) -> tuple[str, dict[str, Any]]:
    """Check name and hyperparameters without a space (collection-time validation)."""
    if isinstance(spec, Strategy):
        return spec.name, spec.hyperparameters()
    name, hyper = _split(spec)
    cls = strategy_class(name)
    fields = {f.name for f in dataclasses.fields(cls.Hyperparameters)}
    unknown = sorted(set(hyper) - fields)
    if unknown:
        raise StrategyError(f"strategy {name!r} has no hyperparameter(s) {unknown}; known: {', '.join(sorted(fields)) or 'none'}")
    cls.Hyperparameters(**hyper).validate()
    return name, hyper


def check_nested_spec(field: str, spec: object) -> type[Strategy]:
    """Validate a strategy given as a hyperparameter of another (``auto``'s choice, a chain's phases)."""
    if not (isinstance(spec, Mapping) and "name" in spec):
        raise StrategyError(f"hyperparameter {field!r}: must be a dict with a 'name' (and hyperparameters), got {spec!r}")
    try:
        cls = strategy_class(str(spec["name"]))
        cls.Hyperparameters(**{k: v for k, v in spec.items() if k != "name"}).validate()
    except (TypeError, StrategyError) as exc:
        raise StrategyError(f"hyperparameter {field!r}: {exc}") from None
    return cls


def make_strategy(spec: StrategySpec, space: SearchSpace, seed: int | None = None) -> Strategy:
    """A ready strategy instance for ``space`` from a name, a dict, or an instance."""
    if isinstance(spec, Strategy):
        return spec
    name, hyper = _split(spec)
    return strategy_class(name)(space, seed=seed, **hyper)
