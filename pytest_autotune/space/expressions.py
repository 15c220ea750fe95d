"""Restriction strings compiled to vectorised numpy functions, never ``eval``.

A restriction such as ``"block_size_x * block_size_y <= max_threads"`` is
parsed with :mod:`ast`, checked against a whitelist (arithmetic, comparisons,
boolean logic, ``in`` over literal tuples/lists, conditional expressions and
``min``/``max``/``abs``/``int``/``float``/``round``), and turned into a tree
of closures that evaluates on numpy arrays. Broadcasting is what makes space
construction fast: bound parameters arrive as ``(n, 1)`` columns and the newly
bound one as a ``(1, m)`` row, so each restriction is tested on the whole
``n x m`` block without materialising the repeated columns.

Division, floor division and modulo by zero (and ``0 ** -1``) make the
configuration invalid (Python would raise) rather than crash the build, but
only where Python would evaluate them: ``y == 0 or x % y == 0`` keeps
``y == 0``, as does ``x / y if y else 0``. Otherwise the semantics are
Python's: ``and``/``or`` yield an operand, booleans do integer arithmetic,
``in`` compares like ``==``. Integers are int64 (no unbounded Python
integers, so no ``1 << 10**10`` allocating gigabytes); ``**`` turns to
float64 where int64 would overflow; string repetition is capped.
"""
from __future__ import annotations

import ast
import difflib
import operator
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from .errors import SearchSpaceError

MAX_EXPRESSION_LENGTH = 10_000
MAX_DEPTH = 64

Env = Mapping[str, Any]
Node = Callable[[Env, list], Any]

_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_,
    ast.BitXor: operator.xor,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
}
_DIVISIONS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Div: np.true_divide,
    ast.FloorDiv: np.floor_divide,
    ast.Mod: np.mod,
}
_COMPARE: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}


def _np_round(x: Any, ndigits: Any = 0) -> Any:
    return np.round(x, int(ndigits))


def _np_int(x: Any) -> Any:
    return np.trunc(x).astype(np.int64) if isinstance(x, np.ndarray) else int(x)


def _np_float(x: Any) -> Any:
    return np.asarray(x, dtype=np.float64) if isinstance(x, np.ndarray) else float(x)


def _reduce(fn: Callable[[Any, Any], Any]) -> Callable[..., Any]:
    def apply(*args: Any) -> Any:
        if len(args) < 2:
            raise SearchSpaceError(f"{fn.__name__.replace('imum', '')}() needs at least two arguments here")
        out = args[0]
        for arg in args[1:]:
            out = fn(out, arg)
        return out

    return apply


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "min": _reduce(np.minimum),
    "max": _reduce(np.maximum),
    "abs": np.abs,
    "int": _np_int,
    "float": _np_float,
    "round": _np_round,
}


def _power(base: Any, exp: Any) -> Any:
    """``**`` without Python's unbounded integers: int64, or float64 where int64 would overflow; never a hang."""
    b, e = np.asarray(base), np.asarray(exp)
    if b.dtype.kind in "iub" and e.dtype.kind in "iub" and np.all(e >= 0):
        exact = np.power(b.astype(np.int64), e.astype(np.int64))
        approx = np.float_power(b, e)
        if np.all(np.abs(approx) < 2.0**62):
            return exact
        return np.where(np.abs(approx) < 2.0**62, exact, approx)
    return np.float_power(b, e)


def _is_zero(x: Any) -> Any:
    return x == 0


def _num(x: Any) -> Any:
    """Booleans as integers for arithmetic, as Python does (numpy's ``True + True`` is ``True``)."""
    if isinstance(x, np.ndarray) and x.dtype == bool:
        return x.astype(np.int64)
    return int(x) if isinstance(x, np.bool_) else x


def _is_text(x: Any) -> bool:
    return isinstance(x, str) or (isinstance(x, np.ndarray) and x.dtype == object)


MAX_TEXT_LENGTH = 1 << 16


def _mul_one(a: Any, b: Any) -> Any:
    for s, n in ((a, b), (b, a)):
        if isinstance(s, str) and isinstance(n, (int, np.integer)) and n * len(s) > MAX_TEXT_LENGTH:
            raise SearchSpaceError(f"string repetition longer than {MAX_TEXT_LENGTH} characters")
    return a * b


_mul_objects = np.frompyfunc(_mul_one, 2, 1)


def _multiply(a: Any, b: Any) -> Any:
    """``*`` with Python's semantics for strings, but no gigabyte strings from ``'a' * 10**10``."""
    if _is_text(a) or _is_text(b):
        return _mul_objects(a, b)
    return a * b


def _lazy(node: Node, env: Env, bad: list, active: Any) -> Any:
    """Evaluate ``node`` whose divisions by zero count only where ``active``: where Python evaluates it."""
    sub: list = []
    value = node(env, sub)
    for zero in sub:
        bad.append(np.logical_and(active, zero))
    return value


def _select(cond: Any, a: Any, b: Any) -> Any:
    """``np.where`` that keeps strings as Python objects instead of promoting to numpy strings."""
    if _is_text(a) or _is_text(b):
        a, b = np.asarray(a, dtype=object), np.asarray(b, dtype=object)
    return np.where(cond, a, b)


def _truth(x: Any) -> Any:
    return x.astype(bool) if isinstance(x, np.ndarray) and x.dtype != bool else (x if isinstance(x, np.ndarray) else bool(x))


class _Compiler:
    """Turns a whitelisted AST into closures; records the names it reads."""

    def __init__(self, text: str, parameters: Iterable[str], constants: Mapping[str, Any]):
        self.text = text
        self.parameters = list(parameters)
        self.constants = dict(constants)
        self.used: list[str] = []

    def fail(self, why: str) -> SearchSpaceError:
        return SearchSpaceError(f"restriction {self.text!r}: {why}")

    def compile(self, node: ast.AST, depth: int = 0) -> Node:
        if depth > MAX_DEPTH:
            raise self.fail(f"nested deeper than {MAX_DEPTH} levels")
        method = getattr(self, "_" + type(node).__name__, None)
        if method is None:
            raise self.fail(f"{type(node).__name__} is not allowed in a restriction "
                            "(allowed: arithmetic, comparisons, and/or/not, 'in' with literal lists, "
                            "x if c else y, min/max/abs/int/float/round)")
        return method(node, depth + 1)

    # -- leaves -------------------------------------------------------------
    def _Constant(self, node: ast.Constant, depth: int) -> Node:
        value = node.value
        if not isinstance(value, (bool, int, float, str)):
            raise self.fail(f"constant {value!r} of type {type(value).__name__} is not allowed")
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**62:
            raise self.fail(f"integer constant {value} is too large")
        if isinstance(value, int) and not isinstance(value, bool):
            value = np.int64(value)  # int64 arithmetic: no unbounded Python integers (1 << 10**10)
        return lambda env, bad: value

    def _Name(self, node: ast.Name, depth: int) -> Node:
        name = node.id
        if name.startswith("__"):
            raise self.fail(f"name {name!r} is not allowed")
        if name in self.parameters:
            if name not in self.used:
                self.used.append(name)
            return lambda env, bad: env[name]
        if name in self.constants:
            value = self.constants[name]
            return lambda env, bad: value
        known = self.parameters + list(self.constants)
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; parameters are {', '.join(self.parameters)}"
        raise self.fail(f"unknown name {name!r}{hint}")

    # -- operators ----------------------------------------------------------
    def _BinOp(self, node: ast.BinOp, depth: int) -> Node:
        left, right = self.compile(node.left, depth), self.compile(node.right, depth)
        op = type(node.op)
        if op is ast.Mult:
            return lambda env, bad: _multiply(_num(left(env, bad)), _num(right(env, bad)))
        if op in _BINOPS:
            fn = _BINOPS[op]
            if op in (ast.BitAnd, ast.BitOr, ast.BitXor):  # bool & bool stays bool, as in Python
                return lambda env, bad: fn(left(env, bad), right(env, bad))
            return lambda env, bad: fn(_num(left(env, bad)), _num(right(env, bad)))
        if op is ast.Pow:
            def power(env: Env, bad: list) -> Any:
                a, b = _num(left(env, bad)), _num(right(env, bad))
                zero = np.logical_and(_is_zero(a), np.less(b, 0))  # 0 ** -1 raises in Python
                if np.any(zero):
                    bad.append(zero)
                    a = np.where(zero, 1, a)
                return _power(a, b)

            return power
        if op in _DIVISIONS:
            div = _DIVISIONS[op]

            def divide(env: Env, bad: list) -> Any:
                a, b = _num(left(env, bad)), _num(right(env, bad))
                zero = _is_zero(b)
                if np.any(zero):
                    bad.append(zero)
                    b = np.where(zero, 1, b)
                return div(a, b)

            return divide
        raise self.fail(f"operator {op.__name__} is not allowed")

    def _UnaryOp(self, node: ast.UnaryOp, depth: int) -> Node:
        operand = self.compile(node.operand, depth)
        op = type(node.op)
        if op is ast.Not:
            return lambda env, bad: np.logical_not(operand(env, bad))
        if op is ast.USub:
            return lambda env, bad: -_num(operand(env, bad))
        if op is ast.UAdd:
            return lambda env, bad: _num(operand(env, bad))
        if op is ast.Invert:
            return lambda env, bad: ~_num(operand(env, bad))
        raise self.fail(f"unary operator {op.__name__} is not allowed")  # pragma: no cover

    def _BoolOp(self, node: ast.BoolOp, depth: int) -> Node:
        parts = [self.compile(v, depth) for v in node.values]
        is_and = isinstance(node.op, ast.And)

        # Python semantics: the value is an operand (not a bool), and an operand
        # is evaluated (its divisions by zero count) only where the earlier ones
        # did not decide the result.
        def boolop(env: Env, bad: list) -> Any:
            out = parts[0](env, bad)
            for part in parts[1:]:
                go = _truth(out) if is_and else np.logical_not(_truth(out))
                if not np.any(go):
                    break
                nxt = _lazy(part, env, bad, go)
                out = _select(go, nxt, out)
            return out

        return boolop

    def _Compare(self, node: ast.Compare, depth: int) -> Node:
        first = self.compile(node.left, depth)
        steps: list[tuple[Callable[[Any, Any], Any], Node]] = []
        for op, comparator in zip(node.ops, node.comparators):
            kind = type(op)
            if kind in (ast.In, ast.NotIn):
                members = self._literal_collection(comparator)
                negate = kind is ast.NotIn

                def member(a: Any, b: Any, negate: bool = negate) -> Any:
                    hit = np.isin(a, b) if isinstance(a, np.ndarray) else a in b
                    return np.logical_not(hit) if negate else hit

                steps.append((member, (lambda env, bad, m=members: m)))
            elif kind in _COMPARE:
                steps.append((_COMPARE[kind], self.compile(comparator, depth)))
            else:
                raise self.fail(f"comparison {kind.__name__} is not allowed")

        def compare(env: Env, bad: list) -> Any:
            left = first(env, bad)
            out: Any = True
            for i, (fn, right_node) in enumerate(steps):
                if i and not np.any(out):
                    break  # a < b < c: Python stops at the first false link
                right = right_node(env, bad) if i == 0 else _lazy(right_node, env, bad, out)
                out = np.logical_and(out, fn(left, right))
                left = right
            return out

        return compare

    def _literal_collection(self, node: ast.AST) -> list:
        if not isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            raise self.fail("'in' needs a literal tuple or list on its right, e.g. x in (1, 2, 4)")
        values = []
        for elt in node.elts:
            if isinstance(elt, ast.UnaryOp) and isinstance(elt.op, ast.USub) and isinstance(elt.operand, ast.Constant):
                elt = ast.Constant(-elt.operand.value)
            if not isinstance(elt, ast.Constant) or not isinstance(elt.value, (bool, int, float, str)):
                raise self.fail("'in' lists may hold only literal numbers and strings")
            values.append(elt.value)
        if len({isinstance(v, str) for v in values}) > 1:
            return np.array(values, dtype=object)  # np.isin would turn [1, 'a'] into strings
        return values

    def _IfExp(self, node: ast.IfExp, depth: int) -> Node:
        test, body, orelse = (self.compile(n, depth) for n in (node.test, node.body, node.orelse))

        def ifexp(env: Env, bad: list) -> Any:
            t = _truth(test(env, bad))
            if np.all(t):
                return _lazy(body, env, bad, t)
            if not np.any(t):
                return _lazy(orelse, env, bad, np.logical_not(t))
            return _select(t, _lazy(body, env, bad, t), _lazy(orelse, env, bad, np.logical_not(t)))

        return ifexp

    def _Call(self, node: ast.Call, depth: int) -> Node:
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            shown = ast.unparse(node.func) if hasattr(ast, "unparse") else "?"
            raise self.fail(f"call of {shown!r} is not allowed (allowed functions: {', '.join(FUNCTIONS)})")
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            raise self.fail("function calls take plain positional arguments only")
        fn = FUNCTIONS[node.func.id]
        args = [self.compile(a, depth) for a in node.args]
        return lambda env, bad: fn(*(a(env, bad) for a in args))


@dataclass
class Restriction:
    """One compiled restriction: the parameters it reads and a vectorised test."""

    source: str
    names: tuple[str, ...]
    _fn: Node

    def evaluate(self, env: Env) -> np.ndarray:
        """Boolean mask (broadcast over ``env``'s arrays); invalid where a divisor was zero."""
        bad: list = []
        with np.errstate(all="ignore"):
            try:
                out = self._fn(env, bad)
            except SearchSpaceError as exc:  # e.g. min() of one argument: say which restriction
                raise SearchSpaceError(f"restriction {self.source!r}: {exc}") from None
            except Exception as exc:  # type errors between values, e.g. "abc" < 3
                raise SearchSpaceError(f"restriction {self.source!r} failed to evaluate: {exc}") from exc
        mask = np.asarray(out)
        if mask.dtype != bool:
            mask = mask.astype(bool)
        for zero in bad:
            mask = np.logical_and(mask, np.logical_not(zero))
        return mask


def compile_restriction(text: str, parameters: Iterable[str], constants: Mapping[str, Any] | None = None) -> Restriction:
    """Parse and whitelist ``text``; raise :class:`SearchSpaceError` naming the fault."""
    if not isinstance(text, str):
        raise SearchSpaceError(f"restriction {text!r} must be a string or a callable")
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise SearchSpaceError(f"restriction of {len(text)} characters is longer than {MAX_EXPRESSION_LENGTH}")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise SearchSpaceError(f"restriction {text!r} is not a valid Python expression: {exc.msg}") from None
    except (RecursionError, MemoryError, ValueError) as exc:
        raise SearchSpaceError(f"restriction {text[:80]!r}... could not be parsed: {type(exc).__name__}") from None
    compiler = _Compiler(text, parameters, constants or {})
    try:
        fn = compiler.compile(tree.body)
    except RecursionError:
        raise compiler.fail(f"nested deeper than {MAX_DEPTH} levels") from None
    return Restriction(text, tuple(compiler.used), fn)


# -- safe literal values (T1 "Values" strings such as "[2**i for i in range(6)]") --------


_VALUE_LIMIT = 1_000_000


def literal_values(text: str) -> list:
    """Evaluate a parameter value-list expression safely.

    Accepts list/tuple literals, ``range``/``list`` calls, ``+`` concatenation,
    arithmetic on numbers, and single-generator list comprehensions over them,
    which is what search-space definition files use.
    """

    budget = [2 * _VALUE_LIMIT]  # elements produced in all (ranges + comprehension steps): no runaway nesting

    def spend(n: int) -> None:
        budget[0] -= n
        if budget[0] < 0:
            raise SearchSpaceError(f"value list {text[:80]!r}: too many elements (limit {_VALUE_LIMIT} values)")

    def ev(node: ast.AST, scope: dict) -> Any:
        if isinstance(node, ast.Constant) and isinstance(node.value, (bool, int, float, str)):
            return node.value
        if isinstance(node, (ast.List, ast.Tuple)):
            return [ev(e, scope) for e in node.elts]
        if isinstance(node, ast.Name):
            if node.id in scope:
                return scope[node.id]
            raise SearchSpaceError(f"value list {text!r}: unknown name {node.id!r}")
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = ev(node.operand, scope)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp) and type(node.op) in (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow):
            a, b = ev(node.left, scope), ev(node.right, scope)
            if isinstance(node.op, ast.Pow) and (abs(b) > 64 or abs(a) > 2**20):
                raise SearchSpaceError(f"value list {text!r}: exponent too large")
            if isinstance(node.op, ast.Mult) and (isinstance(a, str) or isinstance(b, str)):
                raise SearchSpaceError(f"value list {text!r}: string repetition is not allowed")
            if isinstance(a, list) or isinstance(b, list):
                if not isinstance(node.op, ast.Add) or not (isinstance(a, list) and isinstance(b, list)):
                    raise SearchSpaceError(f"value list {text!r}: only + joins lists")
                return a + b
            return {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
                    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}[type(node.op)](a, b)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
            args = [ev(a, scope) for a in node.args]
            if node.func.id == "range":
                r = range(*args)
                spend(len(r))
                return list(r)
            if node.func.id == "list" and len(args) == 1:
                return list(args[0])
        if isinstance(node, ast.ListComp) and len(node.generators) == 1:
            gen = node.generators[0]
            if not isinstance(gen.target, ast.Name) or gen.is_async:
                raise SearchSpaceError(f"value list {text!r}: unsupported comprehension")
            out = []
            for item in ev(gen.iter, scope):
                spend(1)
                inner = {**scope, gen.target.id: item}
                if all(ev(cond, inner) for cond in gen.ifs):
                    out.append(ev(node.elt, inner))
            return out
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
            return _COMPARE[type(node.ops[0])](ev(node.left, scope), ev(node.comparators[0], scope))
        raise SearchSpaceError(f"value list {text!r}: {type(node).__name__} is not allowed")

    if not isinstance(text, str) or len(text) > MAX_EXPRESSION_LENGTH:
        raise SearchSpaceError(f"value list {str(text)[:80]!r}: must be a string of at most {MAX_EXPRESSION_LENGTH} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise SearchSpaceError(f"value list {text!r} is not a valid expression: {exc.msg}") from None
    except (RecursionError, MemoryError, ValueError) as exc:
        raise SearchSpaceError(f"value list {text[:80]!r} could not be parsed: {type(exc).__name__}") from None
    try:
        result = ev(tree.body, {})
    except SearchSpaceError:
        raise
    except (TypeError, ValueError, ArithmeticError, RecursionError, MemoryError) as exc:
        raise SearchSpaceError(f"value list {text[:80]!r} failed to evaluate: {type(exc).__name__}: {exc}") from None
    if not isinstance(result, list):
        result = [result]
    return result
