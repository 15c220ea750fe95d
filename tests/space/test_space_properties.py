"""Property-based tests: the search-space engine against a plain brute-force reference.

Random small spaces (1-5 parameters of ints, floats, strings, bools or mixed
int/float/str values, in random order) and random restrictions drawn from a
typed grammar (arithmetic, comparisons, chained comparisons, and/or/not, ``in``,
conditional expressions, min/max/abs/int/float/round) are built by the engine
and by ``itertools.product`` + Python's own evaluation of the same text. Division
or modulo by zero makes a configuration invalid (the engine's documented rule),
so the reference maps ``ZeroDivisionError`` to "invalid"; Python's short-circuit
evaluation decides whether a guarded division happens at all.

Every query (membership, the four neighbour methods, sampling, repair,
nearest, encode/decode, from_configurations) is checked against a
brute-force definition written here from the documented semantics.
"""
from __future__ import annotations

import itertools
from contextlib import contextmanager

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from pytest_autotune.space import SearchSpace, SearchSpaceError
from pytest_autotune.space import neighbours as nb

NAMES = ("a", "b", "c", "d", "e")
INTS = list(range(-4, 13))
FLOATS = [-1.5, -0.5, 0.0, 0.25, 0.5, 1.0, 2.0, 3.5, 6.0]
STRS = ["a", "b", "c", "ab", ""]
MIXED = [0, 1, 2.5, "a", "b"]
FUNCS = {"min": min, "max": max, "abs": abs, "int": int, "float": float, "round": round, "range": range}

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
                derandomize=False)


# -- strategies -------------------------------------------------------------------------------

@st.composite
def parameter_lists(draw):
    """Name -> (kind, values): 1-5 parameters, 1-5 distinct values each, in random order."""
    n = draw(st.integers(1, 5))
    params = {}
    for name in NAMES[:n]:
        kind = draw(st.sampled_from(["int", "int", "float", "str", "bool", "mixed"]))
        pool = {"int": INTS, "float": FLOATS, "str": STRS, "bool": [False, True], "mixed": MIXED}[kind]
        values = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=min(5, len(pool)), unique=True))
        params[name] = (kind, values)
    return params


def _numeric_leaf(draw, kinds):
    names = [n for n, k in kinds.items() if k in ("int", "float", "bool")]
    options = ["int", "float"] + (["name"] * 4 if names else [])
    pick = draw(st.sampled_from(options))
    if pick == "name":
        return draw(st.sampled_from(names))
    if pick == "int":
        return str(draw(st.integers(-3, 8)))
    return repr(draw(st.sampled_from([0.5, 1.5, 2.0, -0.5, 0.0])))


def _text(draw, kinds):
    names = [n for n, k in kinds.items() if k == "str"]
    if names and draw(st.booleans()):
        return draw(st.sampled_from(names))
    return repr(draw(st.sampled_from(STRS)))


def numeric(draw, kinds, depth):
    if depth <= 0 or draw(st.integers(0, 3)) == 0:
        return _numeric_leaf(draw, kinds)
    form = draw(st.sampled_from(["bin", "bin", "bin", "neg", "pow", "minmax", "abs", "int", "round", "float",
                                 "ifexp", "andor"]))
    sub = lambda: numeric(draw, kinds, depth - 1)  # noqa: E731
    if form == "bin":
        op = draw(st.sampled_from(["+", "-", "*", "/", "//", "%"]))
        return f"({sub()} {op} {sub()})"
    if form == "neg":
        return f"(-{sub()})"
    if form == "pow":  # leaves only and a small exponent: no int64 overflow, no complex results
        return f"({_numeric_leaf(draw, kinds)} ** {draw(st.integers(0, 3))})"
    if form == "minmax":
        fn = draw(st.sampled_from(["min", "max"]))
        args = [sub() for _ in range(draw(st.integers(2, 3)))]
        return f"{fn}({', '.join(args)})"
    if form in ("abs", "int", "round", "float"):
        return f"{form}({sub()})"
    if form == "ifexp":
        return f"({sub()} if {condition(draw, kinds, depth - 1)} else {sub()})"
    return f"({sub()} {draw(st.sampled_from(['and', 'or']))} {sub()})"


def _int_expr(draw, kinds):
    names = [n for n, k in kinds.items() if k in ("int", "bool")]
    leaf = lambda: draw(st.sampled_from(names)) if names and draw(st.booleans()) else str(draw(st.integers(-3, 8)))  # noqa: E731
    return leaf() if draw(st.booleans()) else f"({leaf()} {draw(st.sampled_from(['+', '-', '*', '//']))} {leaf()})"


def condition(draw, kinds, depth):
    cmp_ops = ["==", "!=", "<", "<=", ">", ">="]
    forms = ["cmp", "cmp", "cmp", "chain", "in", "inexpr", "range", "truth"]
    if depth > 0:
        forms += ["and", "or", "not", "ifexp"]
    if any(k == "str" for k in kinds.values()):
        forms += ["str", "strin"]
    if any(k == "mixed" for k in kinds.values()):
        forms += ["mixed"]
    if any(k == "bool" for k in kinds.values()):
        forms += ["flag"]
    form = draw(st.sampled_from(forms))
    d = depth - 1
    if form == "cmp":
        return f"{numeric(draw, kinds, d)} {draw(st.sampled_from(cmp_ops))} {numeric(draw, kinds, d)}"
    if form == "chain":
        ops = [draw(st.sampled_from(cmp_ops)) for _ in range(2)]
        return f"{numeric(draw, kinds, d)} {ops[0]} {numeric(draw, kinds, d)} {ops[1]} {numeric(draw, kinds, d)}"
    if form == "in":
        members = draw(st.lists(st.sampled_from([-2, 0, 1, 2, 3, 4, 8, 0.5, 2.0, "a"]), min_size=1, max_size=4))
        neg = draw(st.sampled_from(["in", "not in"]))
        return f"{numeric(draw, kinds, d)} {neg} ({', '.join(map(repr, members))},)"
    if form == "inexpr":  # a tuple/list of expressions over the parameters
        members = [numeric(draw, kinds, d) for _ in range(draw(st.integers(1, 3)))]
        neg = draw(st.sampled_from(["in", "not in"]))
        left, right = ("[", "]") if draw(st.booleans()) else ("(", ",)")
        return f"{numeric(draw, kinds, d)} {neg} {left}{', '.join(members)}{right}"
    if form == "range":  # integer arguments (expressions over int parameters), a step of 0 now and then
        args = [_int_expr(draw, kinds) for _ in range(draw(st.integers(1, 3)))]
        return f"{numeric(draw, kinds, d)} {draw(st.sampled_from(['in', 'not in']))} range({', '.join(args)})"
    if form == "truth":
        return numeric(draw, kinds, d)
    if form in ("and", "or"):
        return f"({condition(draw, kinds, d)} {form} {condition(draw, kinds, d)})"
    if form == "not":
        return f"(not {condition(draw, kinds, d)})"
    if form == "ifexp":
        return f"({condition(draw, kinds, d)} if {condition(draw, kinds, d)} else {condition(draw, kinds, d)})"
    if form == "str":
        left = _text(draw, kinds)
        if draw(st.booleans()):
            left = f"({left} + {_text(draw, kinds)})"
        return f"{left} {draw(st.sampled_from(cmp_ops))} {_text(draw, kinds)}"
    if form == "strin":
        members = draw(st.lists(st.sampled_from(STRS), min_size=1, max_size=3))
        return f"{_text(draw, kinds)} in ({', '.join(map(repr, members))},)"
    if form == "mixed":
        name = draw(st.sampled_from([n for n, k in kinds.items() if k == "mixed"]))
        if draw(st.booleans()):
            return f"{name} {draw(st.sampled_from(['==', '!=']))} {draw(st.sampled_from(MIXED + [True]))!r}"
        members = draw(st.lists(st.sampled_from(MIXED), min_size=1, max_size=3))
        return f"{name} {draw(st.sampled_from(['in', 'not in']))} ({', '.join(map(repr, members))},)"
    name = draw(st.sampled_from([n for n, k in kinds.items() if k == "bool"]))
    return draw(st.sampled_from([name, f"not {name}", f"{name} + {name} == 2", f"-{name} < 0"]))


@st.composite
def spaces(draw, max_restrictions=3):
    """(params, restrictions); mostly with a non-empty valid set (restrictions that empty it are dropped),
    but about one in eight is left empty on purpose."""
    params = draw(parameter_lists())
    kinds = {n: k for n, (k, _) in params.items()}
    restrictions = [condition(draw, kinds, draw(st.integers(0, 3)))
                    for _ in range(draw(st.integers(0, max_restrictions)))]
    values = {n: v for n, (_, v) in params.items()}
    if draw(st.integers(0, 7)):
        while restrictions and not len(reference(values, restrictions).valid):
            restrictions.pop()
    return values, restrictions


# -- the brute-force reference -------------------------------------------------------------------

class Reference:
    """All configurations of the Cartesian product, the valid ones by Python evaluation."""

    def __init__(self, params: dict, restrictions: list[str]):
        self.params = params
        self.names = list(params)
        self.sizes = np.array([len(v) for v in params.values()])
        codes = [compile(r, "<restriction>", "eval") for r in restrictions]
        self.all_vectors = np.array(list(itertools.product(*[range(len(v)) for v in params.values()])),
                                    dtype=np.int64).reshape(-1, len(params))
        self.valid_mask = np.zeros(len(self.all_vectors), dtype=bool)
        self.errors: list[Exception] = []
        for i, vec in enumerate(self.all_vectors):
            config = self.config(vec)
            ok = True
            for code in codes:
                try:
                    ok = bool(eval(code, {"__builtins__": {}, **FUNCS}, dict(config)))  # noqa: S307 - test reference
                except ZeroDivisionError:
                    ok = False
                except ValueError as exc:
                    if "must not be zero" not in str(exc):  # range(a, b, 0): invalid like a zero division
                        self.errors.append(exc)
                    ok = False
                except Exception as exc:  # a grammar slip (type error): the example is rejected below
                    self.errors.append(exc)
                    ok = False
                if not ok:
                    break
            self.valid_mask[i] = ok
        # value-index vectors of the valid configurations, lexicographic (product order is lexicographic)
        self.valid = self.all_vectors[self.valid_mask]
        self.row_of = {tuple(v): r for r, v in enumerate(self.valid.tolist())}

    def config(self, vec) -> dict:
        return {n: self.params[n][int(i)] for n, i in zip(self.names, vec)}

    def values(self, vec) -> tuple:
        return tuple(self.params[n][int(i)] for n, i in zip(self.names, vec))

    # neighbour definitions, written from the documented semantics
    def neighbours(self, v: np.ndarray, method: str) -> np.ndarray:
        V = self.valid
        diff = V - v
        not_self = np.any(diff != 0, axis=1)
        if method == "strictly-adjacent":
            mask = np.all(np.abs(diff) <= 1, axis=1)
        elif method == "adjacent":  # Kernel Tuner 1.5: nearest positive/negative difference over ALL valid rows
            big = np.iinfo(np.int64).max
            upper = np.array([diff[:, p][diff[:, p] > 0].min(initial=big) for p in range(V.shape[1])])
            lower = np.array([diff[:, p][diff[:, p] < 0].max(initial=-big) for p in range(V.shape[1])])
            mask = np.all((diff <= upper) & (diff >= lower), axis=1)
        elif method == "hamming":
            mask = np.count_nonzero(diff, axis=1) == 1
        elif method == "index-distance":
            dist = np.abs(diff).sum(axis=1)
            positive = dist[dist > 0]
            mask = dist == positive.min() if len(positive) else np.zeros(len(V), dtype=bool)
        else:  # pragma: no cover
            raise AssertionError(method)
        return np.flatnonzero(mask & not_self)

    def nearest(self, v: np.ndarray) -> set[int]:
        dist = np.abs(self.valid - v).sum(axis=1)
        return set(np.flatnonzero(dist == dist.min()).tolist())


_REFERENCES: dict[str, Reference] = {}


def reference(params: dict, restrictions: list[str]) -> Reference:
    """The reference of a case, computed once (the strategy and the test both need it)."""
    key = repr((params, restrictions))
    if key not in _REFERENCES:
        if len(_REFERENCES) > 512:
            _REFERENCES.clear()
        _REFERENCES[key] = Reference(params, restrictions)
    return _REFERENCES[key]


def build(params, restrictions):
    """(engine space or None when it reports an empty space, reference)."""
    ref = reference(params, restrictions)
    assume(not ref.errors)
    if not len(ref.valid):
        with pytest.raises(SearchSpaceError, match="empty"):
            SearchSpace(params, restrictions)
        return None, ref
    return SearchSpace(params, restrictions), ref


def invalid_vectors(ref: Reference, k: int = 6) -> np.ndarray:
    return ref.all_vectors[~ref.valid_mask][:k]


# -- tests ---------------------------------------------------------------------------------------

@settings(max_examples=200, **SETTINGS)
@given(spaces())
def test_valid_set_and_membership(case):
    params, restrictions = case
    space, ref = build(params, restrictions)
    if space is None:
        return
    assert space.names == tuple(params)
    assert space.cartesian_size == int(np.prod(ref.sizes))
    assert len(space) == len(ref.valid)
    # Row r of the engine is row r of the lexicographically sorted reference.
    np.testing.assert_array_equal(space.indices.astype(np.int64), ref.valid)
    assert {space.tuple(r) for r in range(len(space))} == {ref.values(v) for v in ref.valid}
    for r in range(len(space)):
        assert space.get(r) == ref.config(ref.valid[r])
        assert space.tuple(r) == ref.values(ref.valid[r])

    # Membership of every configuration of the Cartesian product, in every form.
    expected = np.full(len(ref.all_vectors), -1)
    expected[ref.valid_mask] = np.arange(len(ref.valid))
    np.testing.assert_array_equal(space.rows_of(ref.all_vectors), expected)
    for vec, row in zip(ref.all_vectors, expected):
        config = ref.config(vec)
        assert space.find(config) == row
        assert space.find(ref.values(vec)) == row
        assert space.find(list(ref.values(vec))) == row
        assert space.find_indices(vec) == row
        assert (config in space) == (row >= 0)
    # Out of range or unknown values are simply not members.
    outside = np.vstack([ref.sizes, -np.ones_like(ref.sizes)])
    np.testing.assert_array_equal(space.rows_of(outside), [-1, -1])
    assert space.find_indices(ref.sizes) == -1
    assert space.find({n: object() for n in space.names}) == -1
    assert space.find({n: "no-such-value" for n in space.names}) == -1
    assert space.find(tuple(["no-such-value"] * len(space.names))) == -1
    assert space.find({}) == -1


@contextmanager
def engine_mode(mode: str):
    """Force one of the engine's query paths, whatever the space size.

    ``scan``: small spaces scan their columns; ``walk``: the trie walk with its
    cheap defaults; ``walk-checked``: the walk checking prefixes at every level;
    ``fallback``: the walk gives up at once and scans.
    """
    saved = nb.SCAN_LIMIT, nb.SCAN_LIMIT_SPARSE, nb.CHECK_AT, nb.MAX_FRONTIER, nb.DENSE_LIMIT
    try:
        if mode != "scan":
            nb.SCAN_LIMIT = nb.SCAN_LIMIT_SPARSE = -1
        if mode == "walk-checked":
            nb.CHECK_AT = 0
        if mode == "fallback":
            nb.MAX_FRONTIER = 0
        if mode == "walk-sparse":  # no dense key table: binary searches
            nb.DENSE_LIMIT = -1
        yield
    finally:
        nb.SCAN_LIMIT, nb.SCAN_LIMIT_SPARSE, nb.CHECK_AT, nb.MAX_FRONTIER, nb.DENSE_LIMIT = saved


@settings(max_examples=150, **SETTINGS)
@given(spaces(), st.randoms(use_true_random=False),
       st.sampled_from(["scan", "walk", "walk-checked", "walk-sparse", "fallback"]))
def test_neighbours_match_brute_force(case, rnd, mode):
    params, restrictions = case
    with engine_mode(mode):
        space, ref = build(params, restrictions)
        if space is not None:
            check_neighbours(space, ref, rnd)


def check_neighbours(space, ref, rnd):
    rows = list(range(len(space))) if len(space) <= 64 else rnd.sample(range(len(space)), 24)
    for method in ("strictly-adjacent", "adjacent", "hamming", "index-distance"):
        for r in rows:
            want = ref.neighbours(ref.valid[r], method)
            got = space.neighbours(r, method)
            np.testing.assert_array_equal(got, want, err_msg=f"{method} of row {r} {space.get(r)}")
            assert r not in got
        if rows:  # the same answer for a vector, a numpy integer row and a dict
            r = rows[0]
            want = ref.neighbours(ref.valid[r], method)
            np.testing.assert_array_equal(space.neighbours(ref.valid[r], method), want)
            np.testing.assert_array_equal(space.neighbours(np.int64(r), method), want)
            np.testing.assert_array_equal(space.neighbours(space.get(r), method), want)
        for v in invalid_vectors(ref):  # invalid configurations have neighbours too
            np.testing.assert_array_equal(space.neighbours(v, method), ref.neighbours(v, method),
                                          err_msg=f"{method} of invalid {ref.config(v)}")


STRUCTURED = [  # sparse spaces whose prefixes often have a single completion, at either end of the suffix
    ({"a": list(range(6)), "b": list(range(6)), "c": list(range(4))}, ["a + b + c == 7"]),
    ({"a": list(range(6)), "b": list(range(6)), "c": list(range(4))}, ["a == b or c == 3"]),
    ({"a": list(range(5)), "b": list(range(5)), "c": list(range(4)), "d": [0, 1]}, ["(a * b) % 5 == c", "d == a % 2"]),
    ({"a": [3, 1, 2], "b": [0, 1], "c": list(range(5)), "d": [7]}, ["c == a + b or c == 0", "d > c"]),
    ({"a": list(range(4)), "b": ["x", "y", "z"], "c": list(range(4))}, ["(b == 'z') == (a + c == 3)"]),
    ({"a": list(range(300)), "b": [0, 1, 2], "c": [5, 4]}, ["a % 7 == b or a > 290", "c == 5 or a < 20"]),  # uint16
]


@pytest.mark.parametrize("mode", ["scan", "walk", "walk-checked", "walk-sparse", "fallback"])
@pytest.mark.parametrize("case", range(len(STRUCTURED)))
def test_neighbours_exhaustively_on_structured_spaces(case, mode):
    params, restrictions = STRUCTURED[case]
    with engine_mode(mode):
        space = SearchSpace(params, restrictions)
        ref = Reference(params, restrictions)
        vectors = ref.all_vectors  # every configuration, valid or not, where there are few
        if len(vectors) > 500:
            vectors = vectors[np.random.default_rng(case).choice(len(vectors), 150, replace=False)]
        rows = range(len(space)) if len(space) <= 300 else np.random.default_rng(case).choice(len(space), 150)
        for method in ("strictly-adjacent", "adjacent", "hamming", "index-distance"):
            for v in vectors:
                np.testing.assert_array_equal(space.neighbours(v, method), ref.neighbours(v, method),
                                              err_msg=f"{mode} {method} of {ref.config(v)}")
            for r in rows:
                np.testing.assert_array_equal(space.neighbours(int(r), method), ref.neighbours(ref.valid[r], method))


@settings(max_examples=100, **SETTINGS)
@given(spaces(), st.integers(0, 2**32 - 1), st.integers(0, 40))
def test_sampling(case, seed, k):
    params, restrictions = case
    space, ref = build(params, restrictions)
    if space is None:
        return
    n = len(space)
    for sample in (space.sample(k, seed), space.lhs_sample(k, seed), space.lhs_sample(k, seed, maximin=False)):
        sample = np.asarray(sample)
        assert len(sample) == min(k, n)
        assert len(set(sample.tolist())) == len(sample), "rows must be distinct"
        assert np.all((sample >= 0) & (sample < n))
        assert np.issubdtype(sample.dtype, np.integer)
    # Seeded draws are reproducible.
    np.testing.assert_array_equal(space.sample(k, seed), space.sample(k, seed))
    np.testing.assert_array_equal(space.lhs_sample(k, seed), space.lhs_sample(k, seed))


@settings(max_examples=120, **SETTINGS)
@given(spaces(), st.integers(0, 2**32 - 1))
def test_repair_nearest_encode_decode(case, seed):
    params, restrictions = case
    with engine_mode("walk-sparse" if seed % 2 else "scan"):
        space, ref = build(params, restrictions)
        if space is not None:
            check_repair_nearest_encode_decode(space, ref, params, seed)


def check_repair_nearest_encode_decode(space, ref, params, seed):
    rng = np.random.default_rng(seed)
    # Valid vectors repair to / are nearest to themselves.
    for r in rng.choice(len(space), size=min(len(space), 5), replace=False):
        assert space.repair(ref.valid[r], rng) == r
        assert space.nearest(ref.valid[r], rng) == r
    # Invalid vectors, including out-of-range ones, which are clipped first.
    vectors = list(invalid_vectors(ref, 8))
    vectors += [rng.integers(-2, ref.sizes + 2) for _ in range(4)]
    for v in vectors:
        clipped = np.clip(v, 0, ref.sizes - 1)
        row = space.nearest(v, rng)
        assert 0 <= row < len(space)
        assert row in ref.nearest(clipped), "nearest must be at minimal index distance"
        fixed = space.repair(v, rng)
        assert 0 <= fixed < len(space)
        own = ref.row_of.get(tuple(clipped.tolist()))
        if own is not None:
            assert fixed == own
            continue
        for method in ("strictly-adjacent", "adjacent", "hamming"):
            candidates = ref.neighbours(clipped, method)
            if len(candidates):
                assert fixed in set(candidates.tolist()), f"repair must pick a {method} neighbour"
                break
        else:
            assert fixed in ref.nearest(clipped)

    # encode/decode: a round trip, points in the unit cube, and decode of any point is a nearest valid row.
    rows = np.arange(len(space))
    x = space.encode(rows)
    assert x.shape == (len(space), len(params))
    assert np.all((x >= 0) & (x <= 1))
    np.testing.assert_array_equal(space.decode(x, rng), rows)
    np.testing.assert_array_equal(space.encode(), x)
    points = rng.random((10, len(params)))
    decoded = space.decode(points, rng)
    for p, row in zip(points, decoded):
        v = np.rint(p * (ref.sizes - 1)).astype(np.int64)
        assert row in ref.nearest(v)


@settings(max_examples=100, **SETTINGS)
@given(spaces(), st.randoms(use_true_random=False))
def test_from_configurations(case, rnd):
    params, restrictions = case
    space, ref = build(params, restrictions)
    if space is None:
        return
    configs = [ref.config(v) for v in ref.valid]
    shuffled = configs + rnd.sample(configs, min(3, len(configs)))  # duplicates collapse
    rnd.shuffle(shuffled)
    again = SearchSpace.from_configurations(params, shuffled)
    np.testing.assert_array_equal(again.indices, space.indices)
    assert again.cartesian_size == space.cartesian_size
    as_tuples = SearchSpace.from_configurations(params, [tuple(c.values()) for c in shuffled])
    np.testing.assert_array_equal(as_tuples.indices, space.indices)
    for r in rnd.sample(range(len(space)), min(5, len(space))):
        for method in ("hamming", "adjacent"):
            np.testing.assert_array_equal(again.neighbours(r, method), space.neighbours(r, method))
    # Without params the value lists are inferred (sorted); the set of configurations is the same.
    inferred = SearchSpace.from_configurations(None, shuffled)
    assert {inferred.tuple(r) for r in range(len(inferred))} == {space.tuple(r) for r in range(len(space))}


def test_grammar_exercises_the_tricky_semantics():
    """Guard against a vacuous grammar: the reference must see the cases the engine once got wrong."""
    params = {"a": [0, 1, 2], "b": [0, 1, 2, 3], "f": [False, True], "s": ["", "a"]}
    cases = {
        "b == 0 or a % b == 0": 9 * 2 * 2,        # guarded modulo: b == 0 stays valid
        "(a / b if b != 0 else 0) < 1": 9 * 4,    # untaken branch divides by zero
        "f + f == 2": 12 * 2,                     # bool arithmetic is integer arithmetic
        "(a or b) == 2": 5 * 4,                   # `or` yields an operand, not a bool
        "b in (1, 'a')": 3 * 2 * 2,               # mixed literal list
        "2 ** (a * 35) > 1": 2 * 4 * 2 * 2,       # no silent int64 overflow
        "(s or 'z') == 'z'": 12 * 2,
    }
    for text, count in cases.items():
        ref = Reference(params, [text])
        assert not ref.errors
        assert len(ref.valid) == count, text
        space = SearchSpace(params, [text])
        np.testing.assert_array_equal(space.indices.astype(np.int64), ref.valid, err_msg=text)


@pytest.mark.parametrize("seed", range(3))
def test_large_random_space_matches_reference(seed):
    """A larger space (chunked construction, several components) against the reference."""
    rng = np.random.default_rng(seed)
    params = {n: sorted(rng.choice(np.arange(1, 40), size=6, replace=False).tolist()) for n in "abcdef"}
    restrictions = ["a % b == 0 or b % a == 0", "c * d <= 300", "(e + f) % 3 != 1", "a + c > d - 10"]
    ref = Reference(params, restrictions)
    for chunk in (1 << 22, 7):
        space = SearchSpace(params, restrictions, chunk_rows=chunk)
        np.testing.assert_array_equal(space.indices.astype(np.int64), ref.valid)


def test_lhs_gives_every_value_an_equal_share_end_values_included():
    """Rounding [0,1] to value indices gives the first and last value half a share; the design must not."""
    space = SearchSpace({"a": [0, 1, 2], "b": [10, 20, 30, 40], "c": list(range(5)), "d": list(range(7)),
                         "e": list(range(11)), "f": list(range(13))})  # large: few duplicate points
    k = 60
    for seed in range(5):
        rows = space.lhs_sample(k, seed, maximin=False)
        counts = [np.bincount(space.indices[rows, j], minlength=s) for j, s in enumerate(space.sizes)]
        assert counts[0].min() >= 18 and counts[0].max() <= 22, counts[0]  # 20 each (rounding gave 15/30/15)
        assert counts[1].min() >= 13 and counts[1].max() <= 17, counts[1]  # 15 each (rounding: 10/20/20/10)
        for c in counts:
            assert c.max() - c.min() <= 4, counts
    # bin_indices: each value owns an equal share of [0, 1]
    pts = (np.arange(12)[:, None] + 0.5) / 12 * np.ones((1, 6))
    np.testing.assert_array_equal(np.bincount(space.bin_indices(pts)[:, 0], minlength=3), [4, 4, 4])
    np.testing.assert_array_equal(space.bin_indices(np.ones((1, 6))), [[2, 3, 4, 6, 10, 12]])


def test_categorical_marks_parameters_whose_values_are_not_numbers():
    space = SearchSpace({"n": [1, 2, 4], "f": [0.5, 1.5], "flag": [True, False], "order": ["ijk", "kij"],
                         "mixed": [1, "two"]})
    assert space.categorical.tolist() == [False, False, False, True, True]
    listed = SearchSpace.from_configurations({"order": ["ijk", "kij"], "n": [1, 2]},
                                             [{"order": "ijk", "n": 1}, {"order": "kij", "n": 2}])
    assert listed.categorical.tolist() == [True, False]
