"""Could int64/float64 evaluation of a restriction differ from Python's? Interval analysis says.

Restrictions are evaluated on numpy int64 arrays because that is fast; Python
integers never overflow. Before a restriction is evaluated over a space, the
possible values of each of its subexpressions are bounded (interval arithmetic
over the parameters' value lists and the constants). The fast evaluation is
used only where the bounds prove it exact:

* every integer stays within int64;
* integers beyond 2**53 never meet a float (numpy compares and selects int64
  against float64 by rounding the integer; Python compares exactly) nor a true
  division (Python rounds the exact quotient once, numpy each operand first);
* shift counts are within 0..63.

Otherwise the restriction is evaluated with Python integers (:mod:`.exact`).
The analysis is conservative: it may send an exact-safe restriction to the
slower path, never the reverse. Two levels keep it cheap: :func:`growth`
reads from the syntax alone how many bits an expression can grow to
(``a * B + c`` for parameters of at most B bits), which clears the usual
restriction over small values with one multiplication; only what that cannot
clear gets the interval walk (:class:`Analysis`), memoised per restriction
and value ranges.
"""
from __future__ import annotations

import ast
import math
from typing import Any, Iterable, Mapping, NamedTuple

import numpy as np

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
FLOAT_EXACT = 2**53
CLAMP = 2**80  # bounds are clamped here: far enough beyond int64 to stay "unsafe", cheap to compute with


class Span(NamedTuple):
    """Possible values of a subexpression: an integer range, a float range, and whether anything else."""

    ilo: int | None = None  # integers (booleans count as 0/1); None: no integer possible
    ihi: int | None = None
    flo: float | None = None  # floats; None: no float possible
    fhi: float | None = None
    other: bool = False  # strings or values of unknown kind

    @property
    def ints(self) -> bool:
        return self.ilo is not None

    @property
    def floats(self) -> bool:
        return self.flo is not None

    def imag(self) -> int:
        return max(abs(self.ilo), abs(self.ihi)) if self.ints else 0  # type: ignore[arg-type]

    def fmag(self) -> float:
        return max(abs(self.flo), abs(self.fhi)) if self.floats else 0.0  # type: ignore[arg-type]


UNKNOWN = Span(other=True)
BOOL = Span(0, 1)


def _clamp(v: int) -> int:
    return max(-CLAMP, min(CLAMP, v))


def _ints(lo: int, hi: int) -> Span:
    return Span(_clamp(lo), _clamp(hi))


def _floats(lo: float, hi: float) -> Span:
    if math.isnan(lo) or math.isnan(hi):
        lo, hi = -math.inf, math.inf
    return Span(flo=lo, fhi=hi)


def _union(*spans: Span) -> Span:
    ints = [s for s in spans if s.ints]
    floats = [s for s in spans if s.floats]
    return Span(min(s.ilo for s in ints) if ints else None, max(s.ihi for s in ints) if ints else None,  # type: ignore
                min(s.flo for s in floats) if floats else None, max(s.fhi for s in floats) if floats else None,  # type: ignore
                any(s.other for s in spans))


def _as_float(s: Span) -> tuple[float, float] | None:
    """The span's numbers as one float range (integers convert, as Python converts them in mixed arithmetic)."""
    parts = []
    if s.ints:
        parts.append((float(s.ilo), float(s.ihi)))  # type: ignore[arg-type]
    if s.floats:
        parts.append((s.flo, s.fhi))
    if not parts:
        return None
    return min(p[0] for p in parts), max(p[1] for p in parts)  # type: ignore[return-value]


def _products(a: tuple, b: tuple) -> tuple:
    with np.errstate(all="ignore"):
        values = [x * y for x in a for y in b]
    if any(isinstance(v, float) and math.isnan(v) for v in values):
        return -math.inf, math.inf
    return min(values), max(values)


def span_of_values(values: Iterable[Any]) -> Span:
    """Span of a parameter's value list or of one constant."""
    ints, floats, other = [], [], False
    for v in values:
        v = v.item() if isinstance(v, np.generic) else v
        if isinstance(v, int):  # bool included
            ints.append(int(v))
        elif isinstance(v, float):
            floats.append(v)
        else:
            other = True
    return Span(min(ints) if ints else None, max(ints) if ints else None,
                min(floats) if floats else None, max(floats) if floats else None, other)


def spans_of(tables: Mapping[str, np.ndarray]) -> dict[str, Span]:
    """Span of each parameter's value table."""
    return {name: span_of_table(table) for name, table in tables.items()}


def span_of_table(table: np.ndarray) -> Span:
    if table.dtype.kind in "biu":
        values = table.tolist()  # Python's min/max beat numpy's reductions on short value lists
        return Span(int(min(values)), int(max(values)))
    if table.dtype.kind == "f":
        values = table.tolist()
        return _floats(min(values), max(values))
    return span_of_values(table.tolist())


class Analysis:
    """Walks a restriction's AST over parameter spans; ``safe`` says whether int64 evaluation is exact."""

    def __init__(self, names: Mapping[str, Span]):
        self.names = names
        self.max_int = 0
        self.any_float = False
        self.true_division = False
        self.unsafe = False

    @property
    def safe(self) -> bool:
        if self.unsafe or self.max_int > INT64_MAX:
            return False
        return not (self.max_int > FLOAT_EXACT and (self.any_float or self.true_division))

    def visit(self, node: ast.AST) -> Span:
        method = _METHODS.get(type(node))
        span = method(self, node) if method is not None else UNKNOWN
        if span.ilo is not None:
            magnitude = max(-span.ilo, span.ihi)  # type: ignore[operator]
            if magnitude > self.max_int:
                self.max_int = magnitude
        if span.flo is not None:
            self.any_float = True
        return span

    def _Constant(self, node: ast.Constant) -> Span:
        value = node.value
        if type(value) is int:
            return Span(value, value)
        return span_of_values([value])

    def _Name(self, node: ast.Name) -> Span:
        return self.names.get(node.id, UNKNOWN)

    def _Tuple(self, node: ast.Tuple) -> Span:  # the right of 'in'
        return _union(*(self.visit(e) for e in node.elts)) if node.elts else UNKNOWN

    _List = _Set = _Tuple

    def _UnaryOp(self, node: ast.UnaryOp) -> Span:
        s = self.visit(node.operand)
        if isinstance(node.op, ast.Not):
            return BOOL
        lo, hi = (s.ilo, s.ihi) if s.ints else (None, None)
        if isinstance(node.op, ast.USub):
            return Span(-hi if s.ints else None, -lo if s.ints else None,  # type: ignore[operator]
                        -s.fhi if s.floats else None, -s.flo if s.floats else None, s.other)  # type: ignore
        if isinstance(node.op, ast.Invert):
            return Span(-hi - 1 if s.ints else None, -lo - 1 if s.ints else None, None, None,  # type: ignore
                        s.other or s.floats)
        return s

    def _BinOp(self, node: ast.BinOp) -> Span:
        a, b = self.visit(node.left), self.visit(node.right)
        op = type(node.op)
        other = a.other or b.other
        if op is ast.Div:
            self.true_division = True
            return Span(other=other, flo=-math.inf, fhi=math.inf) if (a.ints or a.floats) else UNKNOWN
        if op in (ast.LShift, ast.RShift, ast.BitAnd, ast.BitOr, ast.BitXor):
            if not (a.ints and b.ints):
                return Span(other=True)
            if op is ast.LShift:
                if b.ilo < 0 or b.ihi > 64:  # type: ignore[operator]
                    self.unsafe = True
                    return _ints(-CLAMP, CLAMP)
                return _ints(min(a.ilo << b.ihi, a.ilo), max(a.ihi << b.ihi, a.ihi))  # type: ignore[operator]
            if op is ast.RShift:
                if b.ilo < 0 or b.ihi > 62:  # type: ignore[operator]
                    self.unsafe = True
                return _ints(min(a.ilo, 0), max(a.ihi, 0))  # type: ignore[type-var]
            top = 1 << (max(a.imag(), b.imag()).bit_length() + 1)
            return _ints(-top, top)
        if op is ast.Pow:
            return self._power(a, b)
        ints = None
        if a.ints and b.ints:
            x, y = (a.ilo, a.ihi), (b.ilo, b.ihi)
            if op is ast.Add:
                ints = (x[0] + y[0], x[1] + y[1])
            elif op is ast.Sub:
                ints = (x[0] - y[1], x[1] - y[0])
            elif op is ast.Mult:
                ints = _products(x, y)
            elif op is ast.FloorDiv:  # monotonic in each operand on either side of 0: the extremes are corners
                divisors = [d for d in (y[0], y[1], -1, 1) if d != 0 and y[0] <= d <= y[1]]
                ints = (min(q // d for q in x for d in divisors), max(q // d for q in x for d in divisors)) \
                    if divisors else (0, 0)
            elif op is ast.Mod:
                ints = (-b.imag(), b.imag())
        floats = None
        if (a.floats and (b.ints or b.floats)) or (b.floats and (a.ints or a.floats)):
            fa, fb = _as_float(a), _as_float(b)
            if op is ast.Add:
                floats = (fa[0] + fb[0], fa[1] + fb[1])  # type: ignore[index]
            elif op is ast.Sub:
                floats = (fa[0] - fb[1], fa[1] - fb[0])  # type: ignore[index]
            elif op is ast.Mult:
                floats = _products(fa, fb)
            elif op is ast.FloorDiv:
                floats = (-math.inf, math.inf)
            elif op is ast.Mod:
                m = max(abs(fb[0]), abs(fb[1]))  # type: ignore[index]
                floats = (-m, m)
        strings = other or (op is ast.Mult and (a.other or b.other))
        return Span(_clamp(ints[0]) if ints else None, _clamp(ints[1]) if ints else None,
                    floats[0] if floats else None, floats[1] if floats else None, strings)

    def _power(self, a: Span, b: Span) -> Span:
        if not (a.ints or a.floats) or not (b.ints or b.floats):
            return UNKNOWN
        span = Span(flo=-math.inf, fhi=math.inf) if (a.floats or b.floats or (b.ints and b.ilo < 0)) else Span()
        if a.ints and b.ints and b.ihi >= 0:  # type: ignore[operator]
            base = a.imag()
            if base <= 1:
                top = 1
            elif (base.bit_length() - 1) * b.ihi > 80:  # type: ignore[operator]
                top = CLAMP
            else:
                top = base ** b.ihi  # type: ignore[operator]
            span = _union(span, _ints(-top, top)) if span.floats else _ints(-top, top)
        return span

    def _BoolOp(self, node: ast.BoolOp) -> Span:
        return _union(*(self.visit(v) for v in node.values))

    def _Compare(self, node: ast.Compare) -> Span:
        self.visit(node.left)
        for op, right in zip(node.ops, node.comparators):
            if isinstance(right, ast.Call) and isinstance(right.func, ast.Name) and right.func.id == "range":
                spans = [self.visit(a) for a in right.args]
                x = self.visit(node.left)
                # the membership test computes x - start
                start = spans[0] if len(spans) > 1 else Span(0, 0)
                if x.ints and start.ints:
                    self.max_int = max(self.max_int, abs(x.ilo - start.ihi), abs(x.ihi - start.ilo))  # type: ignore
            else:
                self.visit(right)
        return BOOL

    def _IfExp(self, node: ast.IfExp) -> Span:
        self.visit(node.test)
        return _union(self.visit(node.body), self.visit(node.orelse))

    def _Call(self, node: ast.Call) -> Span:
        args = [self.visit(a) for a in node.args]
        name = node.func.id if isinstance(node.func, ast.Name) else ""
        if not args:
            return UNKNOWN
        if name in ("min", "max"):
            return _union(*args)
        s = args[0]
        if name == "abs":
            return Span(0 if s.ints else None, s.imag() if s.ints else None, 0.0 if s.floats else None,
                        s.fmag() if s.floats else None, s.other)
        if name == "float":
            f = _as_float(s)
            return Span(flo=-math.inf, fhi=math.inf, other=s.other) if f is None else _floats(*f)
        if name == "round" and len(args) > 1:  # round(x, -k) stays within 2 * |x|
            top = 2 * s.imag()
            return Span(-top if s.ints else None, top if s.ints else None, s.flo, s.fhi, s.other)
        if name in ("int", "round"):
            if s.floats:
                lo, hi = s.flo, s.fhi
                lo = -CLAMP if not math.isfinite(lo) or abs(lo) > CLAMP else int(lo) - 1  # type: ignore[arg-type]
                hi = CLAMP if not math.isfinite(hi) or abs(hi) > CLAMP else int(hi) + 1  # type: ignore[arg-type]
                return _union(Span(s.ilo, s.ihi), _ints(lo, hi)) if s.ints else _ints(lo, hi)
            return Span(s.ilo, s.ihi, other=s.other)
        return UNKNOWN


_METHODS = {getattr(ast, name[1:]): method for name, method in vars(Analysis).items()
            if name[:2] != "__" and name[0] == "_" and name[1].isupper() and hasattr(ast, name[1:])}


class _NeedsSpans(Exception):
    """The quick bound does not apply (powers/shifts by non-constants, int()/round()/float() calls)."""


_GROWTH: dict[str, tuple[int, int] | None] = {}


def growth(tree: ast.AST, key: str | None = None) -> tuple[int, int] | None:
    """``(a, c)``: no integer in ``tree`` has more than ``a * B + c`` bits when no parameter it reads has more than B.

    Computed once per restriction from its syntax alone (memoised by ``key``,
    its text), so that the usual restriction over small values is cleared with
    one multiplication at build time; None where only the full
    :class:`Analysis` can tell.
    """
    if key is not None and key in _GROWTH:
        return _GROWTH[key]
    envelope = [0, 0]

    def note(a: int, c: int) -> tuple[int, int]:
        envelope[0], envelope[1] = max(envelope[0], a), max(envelope[1], c)
        return a, c

    def bits(node: ast.AST) -> tuple[int, int]:
        if isinstance(node, ast.Constant):
            v = node.value
            return note(0, abs(v).bit_length() if type(v) is int else 1)
        if isinstance(node, ast.Name):
            return note(1, 0)  # a parameter, or a constant (whose bits join B)
        if isinstance(node, ast.UnaryOp):
            a, c = bits(node.operand)
            return note(0, 1) if isinstance(node.op, ast.Not) else note(a, c + 1)
        if isinstance(node, ast.BinOp):
            op = type(node.op)
            if op in (ast.Pow, ast.LShift, ast.RShift):
                k = node.right.value if isinstance(node.right, ast.Constant) else None
                if type(k) is not int or not 0 <= k <= 62:
                    raise _NeedsSpans
                note(0, k.bit_length())
                a, c = bits(node.left)
                if op is ast.Pow:
                    return note(a * k, max(c * k, 1))  # x ** 0 is 1
                return note(a, c + k if op is ast.LShift else c)
            (a1, c1), (a2, c2) = bits(node.left), bits(node.right)
            if op is ast.Mult:
                return note(a1 + a2, c1 + c2)
            if op is ast.FloorDiv:
                return note(a1, c1 + 1)  # |x // y| <= |x| + 1 for any divisor (a float one makes a float)
            if op is ast.Mod:
                return note(a2, c2)
            if op is ast.Div:
                return note(0, 0)  # a float
            return note(max(a1, a2), max(c1, c2) + 1)
        if isinstance(node, (ast.BoolOp, ast.Tuple, ast.List, ast.Set)):
            parts = [bits(v) for v in (node.values if isinstance(node, ast.BoolOp) else node.elts)] or [(0, 0)]
            return note(max(p[0] for p in parts), max(p[1] for p in parts))
        if isinstance(node, ast.IfExp):
            bits(node.test)
            (a1, c1), (a2, c2) = bits(node.body), bits(node.orelse)
            return note(max(a1, a2), max(c1, c2))
        if isinstance(node, ast.Compare):
            a, c = bits(node.left)
            for right in node.comparators:
                if isinstance(right, ast.Call):  # range(...): x - start is computed
                    for arg in right.args:
                        a2, c2 = bits(arg)
                        note(max(a, a2), max(c, c2) + 1)
                else:
                    bits(right)
            return note(0, 1)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("min", "max", "abs"):
            parts = [bits(arg) for arg in node.args] or [(0, 0)]
            return note(max(p[0] for p in parts), max(p[1] for p in parts) + 1)
        raise _NeedsSpans

    try:
        bits(tree)
        found: tuple[int, int] | None = (envelope[0], envelope[1])
    except (_NeedsSpans, RecursionError):
        found = None
    if key is not None:
        if len(_GROWTH) > 4096:
            _GROWTH.clear()
        _GROWTH[key] = found
    return found


def fits_quickly(growth_bound: tuple[int, int] | None, names: Mapping[str, Span]) -> bool:
    """The quick test: every integer stays within 53 bits (exact in int64 and in float64 alike)."""
    if growth_bound is None:
        return False
    b = 1
    for span in names.values():
        if span.ilo is not None:
            b = max(b, (-span.ilo).bit_length(), span.ihi.bit_length())  # type: ignore[union-attr]
    a, c = growth_bound
    return a * b + c <= 53


_VERDICTS: dict[tuple, bool] = {}  # (restriction text, spans it reads) -> verdict: rebuilding a space is free


def int64_is_exact(tree: ast.AST, names: Mapping[str, Span], key: str | None = None) -> bool:
    """True when the numpy (int64/float64) evaluation of ``tree`` gives Python's results for these spans.

    ``key`` (the restriction's text) memoises the verdict for the same spans.
    """
    if key is not None:
        memo_key = (key, tuple(sorted(names.items())))
        verdict = _VERDICTS.get(memo_key)
        if verdict is not None:
            return verdict
    analysis = Analysis(names)
    analysis.visit(tree)
    if key is not None:
        if len(_VERDICTS) > 4096:
            _VERDICTS.clear()
        _VERDICTS[memo_key] = analysis.safe
    return analysis.safe
