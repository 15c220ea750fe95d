"""Is a configuration that came from outside (a lockfile, a warm start) a point of the declared space?

A committed lockfile is untrusted input: its ``params`` are pasted into
kernel source as ``#define NAME value`` lines. So a value from outside is
never used itself: each one is matched, by type and value, to a value the
marker declares, and the declared value is what reaches a build. The
restrictions are then checked on that one point (a one-configuration space,
so expressions and callables mean exactly what they mean in the search),
without building the whole space.
"""
from __future__ import annotations

import numbers
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from .errors import SearchSpaceError

__all__ = ["NotInSpace", "declared_configuration", "value_kind"]


class NotInSpace(SearchSpaceError):
    """A configuration from outside is not a point of the declared space; ``field`` names the part at fault
    (``params.CHUNK``, ``params``), ``reason`` says why."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field} {reason}")
        self.args = (field, reason)
        self.field = field
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.field} {self.reason}"


def value_kind(value: Any) -> str | None:
    """``bool``, ``int``, ``float`` or ``str`` (numpy scalars by their kind); ``None`` for anything else.
    2 and 2.0 and True are different values to a kernel (``#define``) and to a restriction."""
    if isinstance(value, (bool, np.bool_)):
        return "bool"
    if isinstance(value, numbers.Integral):
        return "int"
    if isinstance(value, numbers.Real):
        return "float"
    if isinstance(value, str):
        return "str"
    return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _declared(name: str, value: Any, values: Sequence[Any], where: str) -> Any:
    kind = value_kind(value)
    if kind is None:
        raise NotInSpace(f"{where}.{name}", f"= {_short(value)} is not a parameter value (a number, string or "
                                            "boolean)")
    for declared in values:
        if value_kind(declared) == kind and declared == value:
            return declared.item() if isinstance(declared, np.generic) else declared
    raise NotInSpace(f"{where}.{name}", f"= {_short(value)} is not a value of the marker's space")


def declared_configuration(config: Any, params: Mapping[str, Sequence[Any]],
                           restrictions: Iterable[Any] | None = None, constants: Mapping[str, Any] | None = None,
                           *, where: str = "params") -> dict[str, Any]:
    """The declared values of ``config`` (in the order of ``params``), when it names every parameter once, each
    value is one the marker lists (same type and value) and the restrictions allow the point.

    Raises :class:`NotInSpace` naming the field (``where`` is its prefix, e.g. ``runners_up[2].params``).
    """
    from .searchspace import SearchSpace

    if not isinstance(config, Mapping):
        raise NotInSpace(where, f"must be an object of parameter values, got {_short(config)}")
    unknown = sorted(str(k) for k in config if k not in params)
    if unknown:
        raise NotInSpace(f"{where}.{unknown[0]}", "is not a parameter of the marker's space"
                         + (f" (nor are {', '.join(unknown[1:])})" if len(unknown) > 1 else ""))
    missing = [n for n in params if n not in config]
    if missing:
        raise NotInSpace(where, f"lacks the marker's parameter(s) {', '.join(missing)}")
    point = {name: _declared(name, config[name], list(values), where) for name, values in params.items()}
    rules = list(restrictions or [])
    if rules:
        consts = {k: v for k, v in (constants or {}).items() if k not in params}
        try:
            SearchSpace({n: [v] for n, v in point.items()}, rules, consts)
        except SearchSpaceError:
            raise NotInSpace(where, f"{_short(point)} is not allowed by the marker's restrictions "
                                    f"({_failing(point, rules, consts)})") from None
    return point


def _failing(point: Mapping[str, Any], rules: list[Any], constants: Mapping[str, Any]) -> str:
    """The first restriction that rejects the point, as the user wrote it."""
    from .searchspace import SearchSpace

    for rule in rules:
        try:
            SearchSpace({n: [v] for n, v in point.items()}, [rule], constants)
        except SearchSpaceError:
            text = rule if isinstance(rule, str) else getattr(rule, "__name__", repr(rule))
            return f"fails {_short(text)}"
    return "fails them together"
