"""Exact integers: restrictions follow Python's integer semantics at any size.

The engine evaluates restrictions on int64 arrays where interval analysis over
the parameters' values proves that nothing can overflow, and with Python
integers elsewhere. Random spaces whose values sit near the int64 limits are
checked against Python's own evaluation of the same text, and integer values
beyond int64 stay exact in the value tables, membership, lookups and neighbours.
"""
from __future__ import annotations

import ast
import itertools
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from pytest_autotune.datasets import load_definition
from pytest_autotune.space import SearchSpace, SearchSpaceError, compile_restriction
from pytest_autotune.space.bounds import growth, spans_of
from pytest_autotune.space.searchspace import _value_table

LIMIT = 2**63
NEAR_LIMITS = [LIMIT - 1, LIMIT, LIMIT + 1, -LIMIT, -LIMIT + 1, -LIMIT - 1, 2**62, -(2**62), 2**64, 2**53 + 1,
               2**31, 2**32, 2**33, 3037000499, 3037000500, 0, 1, -1, 2, 3, 7]
INTEGERS = st.one_of(st.sampled_from(NEAR_LIMITS), st.integers(-(2**65), 2**65),
                     st.integers(-3, 3).map(lambda d: LIMIT + d), st.integers(-3, 3).map(lambda d: -LIMIT + d))


def python_valid(params: dict, restrictions: list[str]) -> set[tuple] | None:
    """The valid configurations by Python's own evaluation; None when Python raises anything but a zero division."""
    names = list(params)
    valid = set()
    env = {"min": min, "max": max, "abs": abs, "int": int, "float": float, "round": round, "range": range}
    for values in itertools.product(*params.values()):
        config = dict(zip(names, values))
        ok = True
        for text in restrictions:
            try:
                ok = bool(eval(text, {"__builtins__": {}, **env}, config))  # noqa: S307 - the reference
            except ZeroDivisionError:
                ok = False
            except ValueError as exc:
                if "must not be zero" not in str(exc):  # range(a, b, 0): invalid, as a division by zero
                    return None
                ok = False
            except Exception:
                return None
            if not ok:
                break
        if ok:
            valid.add(values)
    return valid


def engine_valid(params: dict, restrictions: list[str]) -> set[tuple]:
    try:
        space = SearchSpace(params, restrictions)
    except SearchSpaceError as exc:
        assert "empty" in str(exc), exc
        return set()
    return {space.tuple(r) for r in range(len(space))}


# -- values and products beyond int64 ---------------------------------------------------------------

def test_products_beyond_int64_do_not_wrap():
    values = [2**31, 2**32, 2**33]
    space = SearchSpace({"x": values, "y": values, "z": values}, ["x * y * z > 0"])
    assert len(space) == 27  # int64 wrapped 2**96 to 0: the space was empty


def test_comparison_with_a_constant_beyond_int64():
    space = SearchSpace({"n": [2**20, 2**21, 2**22]}, ["n * n * n * 4 <= 2**64"])
    assert [c["n"] for c in space] == [2**20]  # wrapped int64 said 3 valid


def test_values_beyond_int64_stay_distinct_and_exact():
    big = [2**63, 2**63 + 1, -(2**63) - 1, 5]
    space = SearchSpace({"v": big, "w": [1, 2]}, ["v + w != 2**63 + 2"])
    assert space.values["v"] == tuple(big)
    assert all(type(v) is int for v in space.values["v"])
    assert len(space) == 6  # only (2**63 + 1, 1) and (2**63, 2) sum to 2**63 + 2
    assert (2**63 + 1, 1) not in space and (2**63, 2) not in space
    assert space.find({"v": 2**63 + 1, "w": 2}) >= 0 and space.find({"v": 2**63, "w": 1}) >= 0
    assert space.find({"v": 2**63 + 2, "w": 1}) == -1  # not a value: float64 tables made it 2**63's twin
    row = space.find((2**63 + 1, 2))
    assert space.get(row) == {"v": 2**63 + 1, "w": 2} and space.tuple(row) == (2**63 + 1, 2)
    hamming = {space.tuple(r) for r in space.neighbours(row, "hamming")}
    assert hamming == {(-(2**63) - 1, 2), (5, 2)}
    adjacent = {space.tuple(r) for r in space.neighbours(row, "adjacent")}
    assert adjacent and all(t in space for t in adjacent)
    assert not space.categorical.any()  # big integers are still ordered numbers


def test_parameters_beyond_int64_in_arithmetic():
    values = [2**63 - 1, 2**63, 2**64 + 3]
    space = SearchSpace({"a": values, "b": [1, 2, 3]}, ["(a + b) % 2 == 0", "a // b > 2**62", "-a < -(2**63) + b"])
    assert engine_valid({"a": values, "b": [1, 2, 3]}, ["(a + b) % 2 == 0", "a // b > 2**62", "-a < -(2**63) + b"]) \
        == python_valid({"a": values, "b": [1, 2, 3]}, ["(a + b) % 2 == 0", "a // b > 2**62", "-a < -(2**63) + b"])
    assert len(space) > 0


def test_int64_edge_values_without_overflow_stay_on_the_fast_path():
    """Int64 values whose arithmetic cannot overflow are evaluated vectorised; one step further is exact."""
    tables = {"x": np.array([-(2**62), 2**62], dtype=np.int64)}
    assert not compile_restriction("x + x // 2 > 0", ["x"]).for_values(spans_of(tables)).exact
    assert compile_restriction("x + x > 0", ["x"]).for_values(spans_of(tables)).exact  # 2**63 overflows int64
    assert compile_restriction("abs(x - 2**62) >= 0", ["x"]).for_values(spans_of(tables)).exact
    assert compile_restriction("x * 1.0 == x", ["x"]).for_values(spans_of(tables)).exact  # beyond 2**53 meets a float
    assert [c["x"] for c in SearchSpace({"x": [2**62, 2**62 + 1]}, ["x * 1.0 == x"])] == [2**62]


SPACES = Path(os.environ.get("AUTOTUNE_SPACES", Path(__file__).resolve().parents[3] / "shared" / "data" / "spaces"))


def test_usual_spaces_never_take_the_exact_path():
    """Every restriction of the recorded T1 spaces stays int64: no slowdown for the usual spaces."""
    files = sorted((SPACES / "t1").glob("*.json"))
    if not files:
        pytest.skip(f"T1 spaces not found at {SPACES}")
    for path in files:
        definition = load_definition(path)
        tables = {n: _value_table(n, v) for n, v in definition.params.items()}
        for text in definition.restrictions:
            restriction = compile_restriction(text, list(definition.params))
            assert not restriction.for_values(spans_of(tables)).exact, (path.name, text)


def test_gigantic_integers_are_an_error_not_a_hang():
    with pytest.raises(SearchSpaceError, match=r"'x \*\* 10\*\*18 > 1'.*more than 65536 bits"):
        SearchSpace({"x": [1, 2, 3]}, ["x ** 10**18 > 1"])
    # where Python never evaluates the giant, neither does the engine
    assert len(SearchSpace({"x": [1, 2, 3]}, ["x < 4 or 9**9**9**9 > 0"])) == 3
    assert len(SearchSpace({"x": [3, 10**6]}, ["x > 100 or 2 ** x > 5", "x > 100 or 7 ** x > 0"])) == 2
    assert len(SearchSpace({"x": [3, 10**6]}, ["2 ** x > 5 if x < 100 else x % 2 == 0"])) == 2
    assert len(SearchSpace({"x": [1, 2, 3]}, ["2**60000 > x"])) == 3  # big but bounded: exact


def test_shifts_follow_python():
    params = {"x": [1, 3, -5, 2**40], "s": [0, 1, 63, 64, 100]}
    for text in ["x << s > 2**63", "x >> s == 0", "(x << s) >> s == x", "x >> s == -1"]:
        assert engine_valid(params, [text]) == python_valid(params, [text]), text


def test_true_division_and_float_comparisons_beyond_2_53():
    params = {"x": [2**53, 2**53 + 1, 2**60 + 1, 3], "y": [1, 3, 2**53 + 1]}
    for text in ["x / y == x // y", "x == float(x)", "x / 1 < x", "min(x, 1e300) == x", "x in (2.0**53, 3.0)",
                 "x in range(2**53 - 1, 2**61, 2)"]:
        assert engine_valid(params, [text]) == python_valid(params, [text]), text


# -- random spaces near the int64 limits ----------------------------------------------------------

NAMES = ("x", "y", "z")


def leaf(draw, names, consts=INTEGERS):
    if draw(st.integers(0, 2)):
        return draw(st.sampled_from(names))
    return str(draw(consts))


def int_expr(draw, names, depth, consts=INTEGERS):
    if depth <= 0 or draw(st.integers(0, 3)) == 0:
        return leaf(draw, names, consts)
    sub = lambda: int_expr(draw, names, depth - 1, consts)  # noqa: E731
    form = draw(st.sampled_from(["bin", "bin", "bin", "pow", "shift", "unary", "call", "ifexp", "andor"]))
    if form == "bin":
        return f"({sub()} {draw(st.sampled_from(['+', '-', '*', '//', '%', '&', '|', '^']))} {sub()})"
    if form == "pow":
        return f"({leaf(draw, names, consts)} ** {draw(st.integers(0, 3))})"
    if form == "shift":
        return f"({sub()} {draw(st.sampled_from(['<<', '>>']))} {draw(st.sampled_from([0, 1, 2, 31, 62, 63, 64, 70]))})"
    if form == "unary":
        return f"({draw(st.sampled_from(['-', '~', '+']))}{sub()})"
    if form == "call":
        fn = draw(st.sampled_from(["abs", "min", "max", "int"]))
        return f"{fn}({sub()}, {sub()})" if fn in ("min", "max") else f"{fn}({sub()})"
    if form == "ifexp":
        return f"({sub()} if {cond(draw, names, depth - 1, consts)} else {sub()})"
    return f"({sub()} {draw(st.sampled_from(['and', 'or']))} {sub()})"


def cond(draw, names, depth, consts=INTEGERS):
    form = draw(st.sampled_from(["cmp", "cmp", "cmp", "in", "range", "not", "float", "pairs"]))
    e = lambda: int_expr(draw, names, depth, consts)  # noqa: E731
    if form == "cmp":
        ops = [draw(st.sampled_from(['==', '!=', '<', '<=', '>', '>='])),
               draw(st.sampled_from(['==', '!=', '<', '<=', '>', '>=', 'in', 'not in']))]
        right = lambda op: f"({e()}, {e()})" if op.endswith("in") else e()  # noqa: E731
        if draw(st.booleans()):  # a chain: its later links are evaluated only where the earlier hold
            return f"{e()} {ops[0]} {right(ops[0])} {ops[1]} {right(ops[1])}"
        return f"{e()} {draw(st.sampled_from(['==', '!=', '<', '<=', '>', '>=']))} {e()}"
    if form == "in":
        elements = ", ".join(e() for _ in range(draw(st.integers(1, 3))))
        return f"{e()} {draw(st.sampled_from(['in', 'not in']))} ({elements},)"
    if form == "range":
        args = ", ".join(e() for _ in range(draw(st.integers(1, 3))))
        return f"{e()} {draw(st.sampled_from(['in', 'not in']))} range({args})"
    if form == "pairs":  # tuples of expressions compared with tuples, one of another length
        return (f"({e()}, {e()}) {draw(st.sampled_from(['in', 'not in']))} "
                f"(({e()}, {e()}), ({e()},), ({e()}, {e()}))")
    if form == "float":  # ints beyond 2**53 meeting floats: Python compares exactly
        return f"{e()} {draw(st.sampled_from(['<', '==', '>=']))} {draw(st.sampled_from(['1e19', '9.3e18', '-9.3e18', '0.5']))}"
    return f"not ({cond(draw, names, depth - 1, consts) if depth > 0 else e()})"


@st.composite
def near_limit_spaces(draw):
    names = NAMES[: draw(st.integers(1, 3))]
    params = {n: draw(st.lists(INTEGERS, min_size=1, max_size=4, unique=True)) for n in names}
    restrictions = [cond(draw, names, draw(st.integers(0, 2))) for _ in range(draw(st.integers(1, 2)))]
    return params, restrictions


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(near_limit_spaces())
@example(({"x": [2**31, 2**32, 2**33], "y": [2**31, 2**32], "z": [2**33]}, ["x * y * z > 0"]))
@example(({"x": [2**63 - 1, -(2**63)]}, ["-x > 0", "abs(x) > 2**62"]))
@example(({"x": [2**63, 2**63 + 1]}, ["x in range(2**63, 2**63 + 2, 1)", "x % 2 == 1"]))
@example(({"x": [-(2**63), 2], "y": [-1, 1]}, ["x // y != 0"]))
@example(({"x": [2**63, 1, 2**64], "y": [2**63 + 1, 2]}, ["2**62 < x < y in (x + 1, 2**64)", "1 < y not in range(x, 2**65, x)"]))
def test_random_near_limit_spaces_match_python(case):
    params, restrictions = case
    expected = python_valid(params, restrictions)
    assume(expected is not None)  # Python raised (e.g. a negative shift count): not a comparable case
    assert engine_valid(params, restrictions) == expected, (params, restrictions)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.data())
def test_quick_growth_bound_holds_for_every_subexpression(data):
    """bounds.growth: no integer anywhere in the expression has more than a * B + c bits (B: the parameters' bits)."""
    names = NAMES[: data.draw(st.integers(1, 3))]
    text = cond(data.draw, names, data.draw(st.integers(0, 3)), st.integers(-9, 9))
    tree = ast.parse(text, mode="eval").body
    bound = growth(tree)
    assume(bound is not None)
    params = {n: data.draw(st.lists(st.integers(-(2**20), 2**20), min_size=1, max_size=3)) for n in names}
    b = max([1] + [abs(v).bit_length() for vs in params.values() for v in vs])
    subexpressions = [ast.unparse(node) for node in ast.walk(tree) if isinstance(node, ast.expr)
                      and not isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Call))]
    env = {"min": min, "max": max, "abs": abs, "int": int, "float": float, "round": round, "range": range}
    for values in itertools.product(*params.values()):
        config = dict(zip(names, values))
        for sub in subexpressions:
            try:
                value = eval(sub, {"__builtins__": {}, **env}, config)  # noqa: S307 - the reference
            except (ArithmeticError, ValueError, TypeError):
                continue
            if type(value) is int:
                assert value.bit_length() <= bound[0] * b + bound[1], (text, sub, config, bound)


def test_integers_among_floats_stay_integers():
    """Kernel Tuner's own mixed list: 1, 2 and 3 are handed back (and to restrictions) as ints, not 1.0, 2.0, 3.0."""
    params = {"x": [1, 1.5, 2, 3], "y": [4, 5.5], "z": ["string_1", "string_2"]}
    space = SearchSpace(params, ["y % x == 1"])
    assert len(space) == 6  # Kernel Tuner 1.5.0's test_size
    assert [type(v) for v in space.values["x"]] == [int, float, int, int]
    assert {type(c["x"]) for c in space if c["x"] != 1.5} == {int}
    assert space.find({"x": 3, "y": 4, "z": "string_1"}) >= 0 and space.find({"x": 3.0, "y": 4, "z": "string_1"}) >= 0
    assert list(space.categorical) == [False, False, True]
    seen = set()
    assert len(SearchSpace(params, [lambda x: seen.add(type(x)) or True, "x in range(y // 1 if y == 4 else 2)"])) \
        == (3 + 1) * 2  # range(4) holds 1, 2, 3 (not 1.5), range(2) holds 1; two values of z
    assert seen == {int, float}
