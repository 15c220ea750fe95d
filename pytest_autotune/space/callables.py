"""Callable restrictions: how to call one is read from its signature, as Kernel Tuner users expect.

* Arguments named after tuning parameters (``lambda block_size_x, block_size_y: ...``,
  ``def f(tile_size_x): ...``, any subset of the parameters): called with those
  values, by keyword, or by position where an argument is positional-only. Such
  a restriction reads only its own parameters, so it joins the vectorised
  construction like an expression (a one-parameter callable shrinks that
  parameter's value list before anything is enumerated).
* One argument that is not a parameter name (``lambda p: p["block_size_x"] > 1``):
  called with the configuration dict.
* Only ``**kwargs``: called with every parameter by name (Kernel Tuner's ``restrict(**params)``);
  arguments named after parameters and ``**kwargs`` (``def f(tile_size_x, **rest)``): likewise, so
  ``rest`` holds the other parameters.

Any other signature is an error that lists these forms, rather than a guess that
silently builds the wrong space.
"""
from __future__ import annotations

import difflib
import inspect
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from .errors import SearchSpaceError

ACCEPTED_FORMS = (
    "an expression string over the parameters, e.g. 'block_size_x * block_size_y <= 1024' "
    "(arithmetic, comparisons, and/or/not, x if c else y, 'in' with a tuple/list of expressions or with range(...), "
    "(x, y) in ((1, 2), (2, 4)), min/max/abs/int/float/round)",
    "a callable whose arguments are parameter names, called with their values, "
    "e.g. lambda block_size_x, block_size_y: block_size_x * block_size_y <= 1024",
    "a callable of one argument that is not a parameter name, called with the configuration dict, "
    "e.g. lambda p: p['block_size_x'] > 1",
    "a callable taking only **kwargs, called with every parameter by name",
)


def accepted_forms() -> str:
    """The accepted restriction forms, one per line, for error messages."""
    return "accepted restriction forms:\n" + "\n".join(f"  - {form}" for form in ACCEPTED_FORMS)


def as_restriction_list(restrictions: Any) -> list:
    """A bare string or callable is one restriction (as in Kernel Tuner), not a sequence of them."""
    if restrictions is None:
        return []
    if type(restrictions) is list:
        return list(restrictions)
    if isinstance(restrictions, str) or callable(restrictions):
        return [restrictions]
    if isinstance(restrictions, (bytes, Mapping)) or not isinstance(restrictions, Iterable):
        raise SearchSpaceError(f"restrictions must be a list of expression strings or callables, "
                               f"got {type(restrictions).__name__}; {accepted_forms()}")
    return list(restrictions)


def label_of(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)


def refused_restriction(restriction: Any) -> str:
    """Why ``restriction`` (neither a string nor a callable) is refused, with what to write instead."""
    why = f"restriction {restriction!r} must be a string or a callable"
    if isinstance(restriction, tuple) and len(restriction) == 2 and isinstance(restriction[1], (list, tuple)) \
            and (callable(restriction[0]) or isinstance(restriction[0], str)):
        why += ("; a (callable, [parameter names]) tuple is Kernel Tuner's internal form: "
                "name the callable's arguments after the parameters instead (lambda tile_size_x, tile_size_y: ...), "
                "or pass the expression string alone")
    return f"{why}; {accepted_forms()}"


def _python_constraint(fn: Any) -> str | None:
    """The class name of a python-constraint ``Constraint`` (Kernel Tuner passes them on), else None."""
    cls = type(fn)
    if cls.__module__.split(".")[0] == "constraint" and callable(getattr(cls, "__call__", None)):
        return cls.__name__
    return None


class CallableRestriction:
    """A user callable with its calling convention; ``names`` are the parameters it reads."""

    def __init__(self, fn: Callable[..., Any], style: str, names: Sequence[str], positional: Sequence[str] = ()):
        self.fn = fn
        self.style = style  # "values" (arguments named after parameters), "dict" or "kwargs"
        self.names = tuple(names)
        self.positional = tuple(positional)  # positional-only arguments, passed in this order
        self.label = label_of(fn)
        self.source = f"callable {self.label}"
        self._memo: dict[tuple, bool] = {}  # values of ``names`` -> verdict, over the whole construction

    def call(self, config: Mapping[str, Any]) -> Any:
        """Call with a configuration dict, in the convention the signature asks for."""
        if self.style == "dict":
            return self.fn(config)
        if self.style == "kwargs":
            return self.fn(**config)
        return self.fn(*(config[n] for n in self.positional),
                       **{n: config[n] for n in self.names if n not in self.positional})

    def checked_call(self, config: Mapping[str, Any]) -> bool:
        try:
            return bool(self.call(config))
        except Exception as exc:
            raise SearchSpaceError(f"callable restriction {self.label} raised {type(exc).__name__}: {exc} "
                                   f"on configuration {dict(config)}") from exc

    # -- the Restriction interface, for "values" callables in the vectorised construction --------
    def for_values(self, spans: Mapping[str, Any]) -> "CallableRestriction":
        return self  # called with Python values: exact already

    def evaluate(self, env: Mapping[str, Any]) -> np.ndarray:
        """Boolean mask broadcast over ``env``'s arrays; one call per distinct combination of values."""
        memo, names = self._memo, self.names

        def one(*values: Any) -> bool:
            hit = memo.get(values)
            if hit is None:
                hit = memo[values] = self.checked_call(dict(zip(names, values)))
            return hit

        out = np.frompyfunc(one, len(names), 1)(*(env[n] for n in names))
        return np.asarray(out, dtype=bool)


def classify_callable(fn: Callable[..., Any], parameters: Sequence[str]) -> CallableRestriction:
    """Decide how ``fn`` is called from its signature; an error listing the accepted forms otherwise."""
    label = label_of(fn)
    constraint = _python_constraint(fn)
    if constraint is not None:
        raise SearchSpaceError(f"restriction {fn!r}: python-constraint object {constraint} (a Kernel Tuner form) "
                               "is not accepted; write the rule as an expression string over the parameters instead, "
                               "e.g. 'block_size_x * block_size_y <= 1024' for MaxProdConstraint(1024) on those two; "
                               f"{accepted_forms()}")
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: the long-standing dict convention
        return CallableRestriction(fn, "dict", parameters)
    known = set(parameters)
    every = list(signature.parameters.values())
    has_varargs = any(a.kind is a.VAR_POSITIONAL for a in every)
    has_kwargs = any(a.kind is a.VAR_KEYWORD for a in every)
    args = [a for a in every if a.kind not in (a.VAR_POSITIONAL, a.VAR_KEYWORD)]
    required = [a for a in args if a.default is a.empty]
    named = [a for a in args if a.name in known]
    strangers = [a for a in required if a.name not in known]
    by_position = [a for a in args if a.kind is a.POSITIONAL_ONLY]
    last_named = max((i for i, a in enumerate(by_position) if a.name in known), default=-1)
    if named and not strangers and not has_varargs and all(a.name in known for a in by_position[:last_named]):
        # with **kwargs as well, every parameter is passed: the named ones to their arguments, the rest to **kwargs
        return CallableRestriction(fn, "values", list(parameters) if has_kwargs else [a.name for a in named],
                                   [a.name for a in by_position[: last_named + 1]])
    first = next((a for a in args if a.kind in (a.POSITIONAL_ONLY, a.POSITIONAL_OR_KEYWORD)), None)
    if not named and not has_varargs and first is not None and all(a is first for a in required):
        return CallableRestriction(fn, "dict", parameters)
    if not args and has_kwargs and not has_varargs:
        return CallableRestriction(fn, "kwargs", parameters)
    why = f"callable restriction {label}{signature}: "
    if has_varargs:
        why += "*args cannot say which value is which parameter"
    elif not args:
        why += "it takes no arguments"
    elif strangers:
        hints = []
        for a in strangers:
            close = difflib.get_close_matches(a.name, list(parameters), n=1)
            hints.append(f"{a.name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        why += (f"required argument(s) {', '.join(hints)} are not parameter names "
                f"(parameters are {', '.join(parameters)})")
    else:
        why += "its arguments fit none of the forms"
    raise SearchSpaceError(f"{why}; {accepted_forms()}")
