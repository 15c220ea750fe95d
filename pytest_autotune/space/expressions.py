"""Restriction strings compiled to vectorised numpy functions, never ``eval``.

A restriction such as ``"block_size_x * block_size_y <= max_threads"`` is
parsed with :mod:`ast`, checked against a whitelist (arithmetic, comparisons,
boolean logic, ``in``/``not in`` with a tuple/list of expressions or a
``range(...)``, conditional expressions and
``min``/``max``/``abs``/``int``/``float``/``round``), and turned into a tree
of closures that evaluates on numpy arrays. Broadcasting is what makes space
construction fast: bound parameters arrive as ``(n, 1)`` columns and the newly
bound one as a ``(1, m)`` row, so each restriction is tested on the whole
``n x m`` block without materialising the repeated columns.

Division, floor division and modulo by zero (and ``0 ** -1``, a ``range``
step of 0) make the configuration invalid (Python would raise) rather than
crash the build, but only where Python would evaluate them: ``y == 0 or x % y
== 0`` keeps ``y == 0``, as does ``x / y if y else 0``. Otherwise the
semantics are Python's: ``and``/``or`` yield an operand, booleans do integer
arithmetic, ``in`` compares like ``==``, and integers are exact. Integers are
int64 where :mod:`.bounds` proves, from the parameters' values, that int64
cannot overflow (the usual case); a restriction where it could is compiled a
second time with Python integers (:mod:`.exact`), whose growth is capped
(no ``1 << 10**10`` allocating gigabytes). String repetition is capped.
"""
from __future__ import annotations

import ast
import difflib
import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from . import bounds
from . import exact as exact_mod
from .callables import accepted_forms
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
_UNARY: dict[type, Callable[[Any], Any]] = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert}
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
    if isinstance(x, np.ndarray):
        return x.astype(np.int64) if x.dtype.kind in "biu" else np.trunc(x).astype(np.int64)
    return int(x)


def _np_float(x: Any) -> Any:
    return np.asarray(x, dtype=np.float64) if isinstance(x, np.ndarray) else float(x)


def _reduce(fn: Callable[[Any, Any], Any], name: str) -> Callable[..., Any]:
    def apply(*args: Any) -> Any:
        if len(args) < 2:
            raise SearchSpaceError(f"{name}() needs at least two arguments here")
        out = args[0]
        for arg in args[1:]:
            out = fn(out, arg)
        return out

    return apply


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "min": _reduce(np.minimum, "min"),
    "max": _reduce(np.maximum, "max"),
    "abs": np.abs,
    "int": _np_int,
    "float": _np_float,
    "round": _np_round,
}
EXACT_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "min": _reduce(exact_mod.FUNCTIONS["min"], "min"),
    "max": _reduce(exact_mod.FUNCTIONS["max"], "max"),
    "abs": exact_mod.FUNCTIONS["abs"],
    "int": exact_mod.FUNCTIONS["int"],
    "float": exact_mod.FUNCTIONS["float"],
    "round": lambda x, *nd: exact_mod.FUNCTIONS["round2" if nd else "round1"](x, *nd),
}


def _power(base: Any, exp: Any) -> Any:
    """``**`` on int64/float64; :mod:`.bounds` has sent every case that could overflow int64 to Python ints."""
    b, e = np.asarray(base), np.asarray(exp)
    if b.dtype.kind in "iub" and e.dtype.kind in "iub" and np.all(e >= 0):
        return np.power(b.astype(np.int64), e.astype(np.int64))
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


_mul_objects = np.frompyfunc(exact_mod.mul_one, 2, 1)


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
    """``np.where`` that keeps strings and Python ints as Python objects instead of promoting them."""
    if _needs_objects(a) or _needs_objects(b):
        a, b = np.asarray(a, dtype=object), np.asarray(b, dtype=object)
    return np.where(cond, a, b)


def _needs_objects(x: Any) -> bool:
    return _is_text(x) or (isinstance(x, int) and not -(2**63) <= x < 2**63)


def _truth(x: Any) -> Any:
    return x.astype(bool) if isinstance(x, np.ndarray) and x.dtype != bool else (x if isinstance(x, np.ndarray) else bool(x))


def _without_zero(b: Any, zero: Any) -> Any:
    """``b`` with its zeros replaced by 1 (their configurations are marked invalid instead)."""
    if isinstance(b, np.ndarray):
        return np.where(zero, 1, b)
    return 1 if zero else b


def _refused(what: str) -> str:
    return f"{what} is not allowed in a restriction; {accepted_forms()}"


class _Compiler:
    """Turns a whitelisted AST into closures; records the names it reads.

    ``exact`` compiles for Python integers (object arrays) instead of int64.
    """

    def __init__(self, text: str, parameters: Iterable[str], constants: Mapping[str, Any], exact: bool = False):
        self.text = text
        self.parameters = list(parameters)
        self.constants = dict(constants)
        self.exact = exact
        self.num = exact_mod.python_values if exact else _num
        self.less = exact_mod.COMPARE["Lt"] if exact else np.less
        self.lazy = exact_mod.lazy if exact else _lazy
        self.used: list[str] = []
        self.used_constants: set[str] = set()

    def fail(self, why: str) -> SearchSpaceError:
        return SearchSpaceError(f"restriction {self.text!r}: {why}")

    def compile(self, node: ast.AST, depth: int = 0) -> Node:
        if depth > MAX_DEPTH:
            raise self.fail(f"nested deeper than {MAX_DEPTH} levels")
        method = getattr(self, "_" + type(node).__name__, None)
        if method is None:
            raise self.fail(_refused(type(node).__name__))
        return method(node, depth + 1)

    # -- leaves -------------------------------------------------------------
    def _Constant(self, node: ast.Constant, depth: int) -> Node:
        value = node.value
        if not isinstance(value, (bool, int, float, str)):
            raise self.fail(f"constant {value!r} of type {type(value).__name__} is not allowed")
        if isinstance(value, int) and not isinstance(value, bool) and not self.exact \
                and -(2**63) <= value < 2**63:
            value = np.int64(value)  # int64 arithmetic; a larger constant leaves the restriction to Python ints
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
            self.used_constants.add(name)
            return lambda env, bad: value
        known = self.parameters + list(self.constants)
        close = difflib.get_close_matches(name, known, n=1)
        if close:
            hint = f"; did you mean {close[0]!r}?"
        else:  # a device limit of another runner (max_threads under the C runner) needs the names at hand
            hint = f"; parameters are {', '.join(self.parameters)}"
            hint += f"; constants are {', '.join(sorted(self.constants))}" if self.constants else "; no constants"
        raise self.fail(f"unknown name {name!r}{hint}")

    # -- operators ----------------------------------------------------------
    def _BinOp(self, node: ast.BinOp, depth: int) -> Node:
        left, right = self.compile(node.left, depth), self.compile(node.right, depth)
        op = type(node.op)
        num = self.num
        if op is ast.Mult:
            mul = exact_mod.multiply if self.exact else _multiply
            return lambda env, bad: mul(num(left(env, bad)), num(right(env, bad)))
        if op in _BINOPS:
            fn = exact_mod.BINOPS[op.__name__] if self.exact else _BINOPS[op]
            if op in (ast.BitAnd, ast.BitOr, ast.BitXor) and not self.exact:  # bool & bool stays bool, as in Python
                return lambda env, bad: fn(left(env, bad), right(env, bad))
            return lambda env, bad: fn(num(left(env, bad)), num(right(env, bad)))
        if op is ast.Pow:
            pow_fn = exact_mod.power if self.exact else _power

            def power(env: Env, bad: list) -> Any:
                a, b = num(left(env, bad)), num(right(env, bad))
                zero = np.logical_and(_is_zero(a), _truth(self.less(b, 0)))  # 0 ** -1 raises in Python
                if np.any(zero):
                    bad.append(zero)
                    a = _without_zero(a, zero)
                return pow_fn(a, b)

            return power
        if op in _DIVISIONS:
            div = exact_mod.BINOPS[op.__name__] if self.exact else _DIVISIONS[op]

            def divide(env: Env, bad: list) -> Any:
                a, b = num(left(env, bad)), num(right(env, bad))
                zero = _is_zero(b)
                if np.any(zero):
                    bad.append(zero)
                    b = _without_zero(b, zero)
                return div(a, b)

            return divide
        raise self.fail(_refused(f"operator {op.__name__}"))

    def _UnaryOp(self, node: ast.UnaryOp, depth: int) -> Node:
        operand = self.compile(node.operand, depth)
        op = type(node.op)
        num = self.num
        if op is ast.Not:
            return lambda env, bad: np.logical_not(_truth(operand(env, bad)))
        fn = exact_mod.UNARY[op.__name__] if self.exact else _UNARY[op]
        return lambda env, bad: fn(num(operand(env, bad)))

    def _BoolOp(self, node: ast.BoolOp, depth: int) -> Node:
        parts = [self.compile(v, depth) for v in node.values]
        is_and = isinstance(node.op, ast.And)
        lazy = self.lazy

        # Python semantics: the value is an operand (not a bool), and an operand
        # is evaluated (its divisions by zero count) only where the earlier ones
        # did not decide the result.
        def boolop(env: Env, bad: list) -> Any:
            out = parts[0](env, bad)
            for part in parts[1:]:
                go = _truth(out) if is_and else np.logical_not(_truth(out))
                if not np.any(go):
                    break
                nxt = lazy(part, env, bad, go)
                out = _select(go, nxt, out)
            return out

        return boolop

    def _Compare(self, node: ast.Compare, depth: int) -> Node:
        if isinstance(node.left, ast.Tuple) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn)):
            return self._tuple_membership(node.left, node.comparators[0], isinstance(node.ops[0], ast.NotIn), depth)
        first = self.compile(node.left, depth)
        steps: list[tuple[Callable[[Any, Any], Any], Node]] = []
        for i, (op, comparator) in enumerate(zip(node.ops, node.comparators)):
            kind = type(op)
            if kind in (ast.In, ast.NotIn) and i < len(node.ops) - 1:
                raise self.fail("a chain may not go on after 'in'/'not in' (Python would compare the tuple or "
                                "range itself); join two comparisons with 'and' instead")
            if kind in (ast.In, ast.NotIn):
                steps.append(self._membership(comparator, kind is ast.NotIn, depth))
            elif kind in _COMPARE:
                fn = exact_mod.COMPARE[kind.__name__] if self.exact else _COMPARE[kind]
                steps.append((fn, self.compile(comparator, depth)))
            else:
                raise self.fail(_refused(f"comparison {kind.__name__}"))

        lazy = self.lazy

        def compare(env: Env, bad: list) -> Any:
            left = first(env, bad)
            out: Any = True
            for i, (fn, right_node) in enumerate(steps):
                if i and not np.any(out):
                    break  # a < b < c: Python stops at the first false link
                right = right_node(env, bad) if i == 0 else lazy(right_node, env, bad, out)
                out = np.logical_and(out, _truth(fn(left, right)))
                left = right
            return out

        return compare

    # -- 'in' and 'not in' ----------------------------------------------------
    def _membership(self, node: ast.AST, negate: bool, depth: int) -> tuple[Callable[[Any, Any], Any], Node]:
        """``(test, right operand)`` for ``x in <node>``: a tuple/list/set of expressions, or ``range(...)``."""
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range":
            return self._range(node, negate, depth)
        if not isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            raise self.fail(_refused(f"'in' with {type(node).__name__} on its right (use a tuple or list, "
                                     "e.g. x in (1, 2, 4) or x in (y, 2 * y), or range(...))"))
        literals = self._literal_collection(node)
        if literals is not None and not self.exact:
            def member(a: Any, b: Any) -> Any:
                hit = np.isin(a, b) if isinstance(a, np.ndarray) else a in b
                return np.logical_not(hit) if negate else hit

            return member, (lambda env, bad, m=literals: m)
        elements = [self.compile(e, depth) for e in node.elts]
        equal = exact_mod.COMPARE["Eq"] if self.exact else operator.eq

        def any_equal(a: Any, values: list) -> Any:
            hit: Any = False
            for v in values:  # Python's 'in' on a tuple: == with each element in turn
                hit = np.logical_or(hit, _truth(equal(a, v)))
            return np.logical_not(hit) if negate else hit

        return any_equal, (lambda env, bad: [e(env, bad) for e in elements])

    def _tuple_membership(self, left: ast.Tuple, right: ast.AST, negate: bool, depth: int) -> Node:
        """``(x, y) in ((1, 2), (2, 4 * x))``: Python's tuple equality, element by element, with each tuple."""
        if not isinstance(right, (ast.Tuple, ast.List, ast.Set)) or not all(isinstance(e, ast.Tuple) for e in right.elts):
            raise self.fail("a tuple on the left of 'in' needs a tuple/list of tuples on its right, "
                            f"e.g. (x, y) in ((1, 2), (2, 4)); {accepted_forms()}")
        xs = [self.compile(e, depth) for e in left.elts]
        rows = [[self.compile(e, depth) for e in row.elts] for row in right.elts]
        equal = exact_mod.COMPARE["Eq"] if self.exact else operator.eq

        def member(env: Env, bad: list) -> Any:
            left_values = [x(env, bad) for x in xs]
            hit: Any = False
            for row in [[e(env, bad) for e in row] for row in rows]:  # Python builds the whole right side first
                if len(row) != len(left_values):
                    continue  # tuples of another length are never equal
                same: Any = True
                for a, b in zip(left_values, row):
                    same = np.logical_and(same, _truth(equal(a, b)))
                hit = np.logical_or(hit, same)
            return np.logical_not(hit) if negate else hit

        return member

    def _literal_collection(self, node: ast.Tuple | ast.List | ast.Set) -> list | np.ndarray | None:
        """The elements when all are literal numbers/strings (an np.isin table), else None."""
        values = []
        for elt in node.elts:
            if isinstance(elt, ast.UnaryOp) and isinstance(elt.op, ast.USub) and isinstance(elt.operand, ast.Constant) \
                    and isinstance(elt.operand.value, (int, float)):
                elt = ast.Constant(-elt.operand.value)
            if not isinstance(elt, ast.Constant) or not isinstance(elt.value, (bool, int, float, str)):
                return None
            values.append(elt.value)
        if len({isinstance(v, str) for v in values}) > 1:
            return np.array(values, dtype=object)  # np.isin would turn [1, 'a'] into strings
        return values

    def _range(self, node: ast.Call, negate: bool, depth: int) -> tuple[Callable[[Any, Any], Any], Node]:
        if node.keywords or not 1 <= len(node.args) <= 3 or any(isinstance(a, ast.Starred) for a in node.args):
            raise self.fail("range() takes 1 to 3 plain positional arguments, e.g. x in range(1, n + 1)")
        args = [self.compile(a, depth) for a in node.args]
        num = self.num

        def range_args(env: Env, bad: list) -> tuple:
            values = [num(a(env, bad)) for a in args]
            if len(values) == 1:
                values = [0] + values
            start, stop, step = values if len(values) == 3 else values + [1]
            zero = _is_zero(step)
            if np.any(zero):  # range(a, b, 0) raises in Python: invalid there
                bad.append(zero)
                step = _without_zero(step, zero)
            return start, stop, step

        in_range = exact_mod.in_range if self.exact else _in_range

        def member(x: Any, b: tuple) -> Any:
            hit = _truth(in_range(x, *b))
            return np.logical_not(hit) if negate else hit

        return member, range_args

    def _IfExp(self, node: ast.IfExp, depth: int) -> Node:
        test, body, orelse = (self.compile(n, depth) for n in (node.test, node.body, node.orelse))
        lazy = self.lazy

        def ifexp(env: Env, bad: list) -> Any:
            t = _truth(test(env, bad))
            if np.all(t):
                return lazy(body, env, bad, t)
            if not np.any(t):
                return lazy(orelse, env, bad, np.logical_not(t))
            return _select(t, lazy(body, env, bad, t), lazy(orelse, env, bad, np.logical_not(t)))

        return ifexp

    def _Call(self, node: ast.Call, depth: int) -> Node:
        if isinstance(node.func, ast.Name) and node.func.id == "range":
            raise self.fail("range(...) is allowed only on the right of 'in' / 'not in', e.g. x in range(1, 9)")
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            shown = ast.unparse(node.func) if hasattr(ast, "unparse") else "?"
            raise self.fail(_refused(f"call of {shown!r}"))
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            raise self.fail("function calls take plain positional arguments only")
        fn = (EXACT_FUNCTIONS if self.exact else FUNCTIONS)[node.func.id]
        args = [self.compile(a, depth) for a in node.args]
        return lambda env, bad: fn(*(a(env, bad) for a in args))


def _in_range(x: Any, start: Any, stop: Any, step: Any) -> Any:
    """Vectorised ``x in range(start, stop, step)`` on int64/float64 (step never 0 here)."""
    if _is_text(x) or any(_is_text(v) for v in (start, stop, step)):
        return exact_mod.in_range(x, start, stop, step)
    for v in (start, stop, step):
        if np.asarray(v).dtype.kind not in "biu":
            raise SearchSpaceError(f"range() arguments must be integers, got {np.asarray(v).dtype.name} values")
    x = _num(x)
    up = np.greater(step, 0)
    inside = np.where(up, np.logical_and(np.less_equal(start, x), np.less(x, stop)),
                      np.logical_and(np.less(stop, x), np.less_equal(x, start)))
    on_step = np.equal(np.mod(np.subtract(x, start), step), 0)
    if np.asarray(x).dtype.kind == "f":  # 2.0 in range(5) is True, 2.5 is not
        on_step = np.logical_and(on_step, np.equal(np.floor(x), x))
    return np.logical_and(inside, on_step)


@dataclass
class Restriction:
    """One compiled restriction: the parameters it reads and a vectorised test.

    :meth:`for_values` gives the version to evaluate over given parameter
    values: this one (int64) or, where int64 could overflow, a twin compiled
    for Python integers.
    """

    source: str
    names: tuple[str, ...]
    _fn: Node
    tree: ast.AST | None = None
    constants: Mapping[str, Any] = field(default_factory=dict)
    constant_spans: Mapping[str, bounds.Span] = field(default_factory=dict)  # of the constants it reads
    growth: tuple[int, int] | None = None  # bounds.growth of the tree: the quick overflow test
    exact: bool = False
    _twin: "Restriction | None" = field(default=None, repr=False, compare=False)

    def for_values(self, spans: Mapping[str, bounds.Span]) -> "Restriction":
        """The restriction to evaluate when its parameters range over ``spans`` (:func:`.bounds.spans_of`)."""
        if self.exact or self.tree is None:
            return self
        reads = {**self.constant_spans, **{n: spans[n] for n in self.names}}
        if bounds.fits_quickly(self.growth, reads) or bounds.int64_is_exact(self.tree, reads, key=self.source):
            return self
        return self.exact_twin()

    def exact_twin(self) -> "Restriction":
        """This restriction compiled for Python values, evaluated entry by entry and only where Python would."""
        if self.exact or self.tree is None:
            return self
        if self._twin is None:
            compiler = _Compiler(self.source, self.names, self.constants, exact=True)
            self._twin = Restriction(self.source, self.names, compiler.compile(self.tree), self.tree, self.constants,
                                     self.constant_spans, self.growth, exact=True)
        return self._twin

    def evaluate(self, env: Env) -> np.ndarray:
        """Boolean mask (broadcast over ``env``'s arrays); invalid where a divisor was zero."""
        if self.exact or self.tree is None:
            return self._evaluate(env)
        try:
            return self._evaluate(env)
        except SearchSpaceError:
            # The vectorised evaluation computes both sides of and/or/if everywhere, so its error may come
            # from a value Python never computes ("n < 10 and s * n == 'aa'"): Python-value evaluation,
            # which leaves untaken sides out, decides (and raises only where Python would).
            return self.exact_twin()._evaluate(env)

    def _evaluate(self, env: Env) -> np.ndarray:
        bad: list = []
        shape = None
        if self.exact:  # flat object arrays, so that untaken branches can be left out entry by entry
            shape = np.broadcast_shapes(*(np.shape(v) for v in env.values()))
            env = {n: np.broadcast_to(exact_mod.python_values(v), shape).ravel() for n, v in env.items()}
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
            mask = np.logical_and(mask, np.logical_not(np.asarray(zero, dtype=bool)))
        return mask.reshape(shape) if shape is not None and mask.ndim else mask


def compile_restriction(text: str, parameters: Iterable[str], constants: Mapping[str, Any] | None = None) -> Restriction:
    """Parse and whitelist ``text``; raise :class:`SearchSpaceError` naming the fault."""
    if not isinstance(text, str):
        raise SearchSpaceError(f"restriction {text!r} must be a string or a callable; {accepted_forms()}")
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
    spans = {n: bounds.span_of_values([compiler.constants[n]]) for n in compiler.used_constants}
    return Restriction(text, tuple(compiler.used), fn, tree.body, compiler.constants, spans,
                       bounds.growth(tree.body, key=text))


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
