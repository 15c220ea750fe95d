"""Python-integer primitives for restrictions whose int64 evaluation could differ from Python's.

:mod:`.bounds` decides when a restriction needs them; :mod:`.expressions`
then compiles it with these primitives. Integers travel as Python ints in
object arrays, so every operation is Python's own. The operations that can
grow an integer without bound (``*``, ``**``, ``<<``) are guarded: a result
of more than :data:`MAX_INT_BITS` bits is an error naming the restriction,
where Python would hang or exhaust memory (``9**9**9**9``).
"""
from __future__ import annotations

import operator
from typing import Any, Callable

import numpy as np

from .errors import SearchSpaceError

MAX_INT_BITS = 1 << 16
MAX_TEXT_LENGTH = 1 << 16


def _too_big(what: str) -> SearchSpaceError:
    return SearchSpaceError(f"{what} would be an integer of more than {MAX_INT_BITS} bits")


def _is_int(x: Any) -> bool:
    return isinstance(x, int)


def mul_one(a: Any, b: Any) -> Any:
    """``a * b`` of Python values; no gigabyte strings, no integers beyond :data:`MAX_INT_BITS`."""
    for s, n in ((a, b), (b, a)):
        if isinstance(s, str) and _is_int(n) and n * len(s) > MAX_TEXT_LENGTH:
            raise SearchSpaceError(f"string repetition longer than {MAX_TEXT_LENGTH} characters")
    if _is_int(a) and _is_int(b) and a.bit_length() + b.bit_length() > MAX_INT_BITS:
        raise _too_big(f"{_short(a)} * {_short(b)}")
    return a * b


def pow_one(a: Any, b: Any) -> Any:
    if _is_int(a) and _is_int(b) and b > 0 and abs(a) > 1 and (abs(a).bit_length() - 1) * b >= MAX_INT_BITS:
        raise _too_big(f"{_short(a)} ** {_short(b)}")
    return a ** b


def lshift_one(a: Any, b: Any) -> Any:
    if _is_int(a) and _is_int(b) and a != 0 and b > 0 and a.bit_length() + b > MAX_INT_BITS:
        raise _too_big(f"{_short(a)} << {_short(b)}")
    return a << b


def _short(x: Any) -> str:
    text = str(x) if not _is_int(x) or x.bit_length() < 200 else f"<{x.bit_length()}-bit integer>"
    return text[:80]


class _Skip:
    """Stands for a value Python never computes (the untaken side of ``and``/``or``/``if``): every
    operation on it yields it again, and it is false, so it can neither raise nor leak into a result."""

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "SKIP"


SKIP = _Skip()


def elementwise(fn: Callable[..., Any], nargs: int) -> Callable[..., Any]:
    """``fn`` over scalars and (object) arrays alike, operands made Python values first."""
    def skipping(*args: Any) -> Any:
        for a in args:
            if a is SKIP:
                return SKIP
        return fn(*args)

    ufunc = np.frompyfunc(skipping, nargs, 1)

    def apply(*args: Any) -> Any:
        return ufunc(*(python_values(a) for a in args))

    return apply


def python_values(x: Any) -> Any:
    """Numpy integers and booleans as Python ints/bools (object arrays): no wrap-around from here on."""
    if isinstance(x, np.ndarray):
        return x.astype(object) if x.dtype.kind in "biu" else x
    if isinstance(x, np.generic):
        return x.item()
    return x


multiply = elementwise(mul_one, 2)
power = elementwise(pow_one, 2)
BINOPS: dict[str, Callable[[Any, Any], Any]] = {
    "Add": elementwise(operator.add, 2), "Sub": elementwise(operator.sub, 2), "BitAnd": elementwise(operator.and_, 2),
    "BitOr": elementwise(operator.or_, 2), "BitXor": elementwise(operator.xor, 2),
    "RShift": elementwise(operator.rshift, 2), "LShift": elementwise(lshift_one, 2),
    "Div": elementwise(operator.truediv, 2), "FloorDiv": elementwise(operator.floordiv, 2),
    "Mod": elementwise(operator.mod, 2),
}
COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    name: elementwise(op, 2) for name, op in (("Eq", operator.eq), ("NotEq", operator.ne), ("Lt", operator.lt),
                                              ("LtE", operator.le), ("Gt", operator.gt), ("GtE", operator.ge))
}
UNARY: dict[str, Callable[[Any], Any]] = {
    "USub": elementwise(operator.neg, 1), "UAdd": elementwise(operator.pos, 1), "Invert": elementwise(operator.invert, 1),
}


def lazy(node: Callable[[Any, list], Any], env: dict, bad: list, active: Any) -> Any:
    """Evaluate ``node`` only on the ``active`` entries of flat ``env`` arrays (where Python evaluates it).

    Inactive entries hold :data:`SKIP`; zero divisions count only on active ones.
    """
    active = np.asarray(active, dtype=bool)
    if active.ndim == 0:
        if not active:
            return SKIP
        return node(env, bad)
    if active.all():
        return node(env, bad)
    sub_env = {n: v[active] if isinstance(v, np.ndarray) and v.ndim else v for n, v in env.items()}
    sub_bad: list = []
    value = node(sub_env, sub_bad)

    def scatter(part: Any) -> np.ndarray:
        full = np.full(active.shape, SKIP, dtype=object)
        full[active] = part
        return full

    # the right of 'in' is a list of elements or range arguments: each is scattered back
    value = type(value)(map(scatter, value)) if isinstance(value, (list, tuple)) else scatter(value)
    for zero in sub_bad:
        flat = np.zeros(active.shape, dtype=bool)
        flat[active] = zero
        bad.append(flat)
    return value


def _min(a: Any, b: Any) -> Any:
    return min(a, b)


def _max(a: Any, b: Any) -> Any:
    return max(a, b)


def _round(x: Any, ndigits: Any = None) -> Any:
    return round(x) if ndigits is None else round(x, ndigits)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "min": elementwise(_min, 2),
    "max": elementwise(_max, 2),
    "abs": elementwise(abs, 1),
    "int": elementwise(int, 1),
    "float": elementwise(float, 1),
    "round1": elementwise(_round, 1),
    "round2": elementwise(_round, 2),
}


def in_range_one(x: Any, start: Any, stop: Any, step: Any) -> bool:
    """``x in range(start, stop, step)`` for one value; a float counts where it equals an integer."""
    for bound in (start, stop, step):  # Python builds the range first: range(2.5) raises whatever x is
        if not _is_int(bound):
            raise SearchSpaceError(f"range() arguments must be integers, got {type(bound).__name__} {_short(bound)}")
    if isinstance(x, float):
        if not x.is_integer():
            return False
        x = int(x)
    elif not _is_int(x):
        return False  # a string is never in a range
    return x in range(start, stop, step)


in_range = elementwise(in_range_one, 4)
