"""Restriction forms people bring from Kernel Tuner and pyATF are accepted and read as written.

Each form is checked against Python's own evaluation of the same rule over the
Cartesian product, so a form that is accepted but misread fails here.
"""
from __future__ import annotations

import itertools

import pytest

from pytest_autotune.lifecycle.settings import MarkerError, parse_marker
from pytest_autotune.space import SearchSpace, SearchSpaceError
from pytest_autotune.engine.tuner import build_space

PARAMS = {"block_size_x": [16, 32, 64, 128], "block_size_y": [1, 2, 4, 8],
          "tile_size_x": [1, 2, 3, 4], "tile_size_y": [1, 2, 3, 4, 6, 8]}


def valid_by_python(params: dict, rule) -> set[tuple]:
    """Configurations (as value tuples) for which ``rule(config_dict)`` is true."""
    names = list(params)
    return {values for values in itertools.product(*params.values()) if rule(dict(zip(names, values)))}


def configurations(space: SearchSpace) -> set[tuple]:
    return {space.tuple(r) for r in range(len(space))}


# -- 1. callables named after parameters ----------------------------------------------------------

def test_one_argument_named_after_a_parameter_gets_its_value():
    def no_three(tile_size_x):
        return tile_size_x != 3

    space = SearchSpace(PARAMS, [no_three])
    assert configurations(space) == valid_by_python(PARAMS, lambda c: c["tile_size_x"] != 3)
    assert len(space) == 4 * 4 * 3 * 6  # the dict would always be "true": all 4 * 4 * 4 * 6 configurations


def test_callables_over_a_subset_of_parameters_by_keyword_and_by_position():
    def fits(block_size_x, block_size_y):  # Kernel Tuner style
        return block_size_x * block_size_y <= 256

    def pos_only(tile_size_y, tile_size_x, /):  # positional-only: passed in its own order
        return tile_size_y % tile_size_x == 0

    def kw_only(*, tile_size_x, block_size_x):
        return block_size_x // tile_size_x >= 16

    def with_default(tile_size_y, limit=6):  # a default that is not a parameter keeps its value
        return tile_size_y <= limit

    space = SearchSpace(PARAMS, [fits, pos_only, kw_only, with_default, lambda tile_size_x, tile_size_y: tile_size_x
                                 <= tile_size_y])
    expected = valid_by_python(PARAMS, lambda c: c["block_size_x"] * c["block_size_y"] <= 256
                               and c["tile_size_y"] % c["tile_size_x"] == 0
                               and c["block_size_x"] // c["tile_size_x"] >= 16 and c["tile_size_y"] <= 6
                               and c["tile_size_x"] <= c["tile_size_y"])
    assert configurations(space) == expected
    strings = SearchSpace(PARAMS, ["block_size_x * block_size_y <= 256", "tile_size_y % tile_size_x == 0",
                                   "block_size_x // tile_size_x >= 16", "tile_size_y <= 6",
                                   "tile_size_x <= tile_size_y"])
    assert configurations(strings) == expected


def test_dict_and_kwargs_callables_keep_working():
    def by_dict(config):
        return config["block_size_x"] > config["tile_size_x"] * 16

    def by_kwargs(**p):
        return p["block_size_y"] != 2

    space = SearchSpace(PARAMS, [by_dict, by_kwargs, lambda p: p["tile_size_y"] > 1])
    assert configurations(space) == valid_by_python(
        PARAMS, lambda c: c["block_size_x"] > c["tile_size_x"] * 16 and c["block_size_y"] != 2 and c["tile_size_y"] > 1)


def test_named_callables_are_called_once_per_distinct_combination_with_python_values():
    seen: list[tuple] = []

    def record(tile_size_x, tile_size_y):
        seen.append((type(tile_size_x), type(tile_size_y), tile_size_x, tile_size_y))
        return tile_size_x <= tile_size_y

    space = SearchSpace(PARAMS, [record])
    assert len(space) == len(valid_by_python(PARAMS, lambda c: c["tile_size_x"] <= c["tile_size_y"]))
    assert len(seen) == len(set(seen)) == 4 * 6  # once per (tile_size_x, tile_size_y), not per configuration
    assert {(a, b) for a, b, _, _ in seen} == {(int, int)}
    big = SearchSpace({"n": [2**64 + 1, 2**64], "m": [1, 2]}, [lambda n, m: (n + m) % 2 == 0])
    assert configurations(big) == {(2**64 + 1, 1), (2**64, 2)}


def test_callable_that_raises_names_itself_and_the_values():
    def picky(tile_size_x):
        if tile_size_x == 3:
            raise ValueError("no threes")
        return True

    with pytest.raises(SearchSpaceError, match=r"callable restriction .*picky raised ValueError: no threes on "
                                               r"configuration \{'tile_size_x': 3\}"):
        SearchSpace(PARAMS, [picky])


@pytest.mark.parametrize("fn, fragment", [
    (lambda: True, "it takes no arguments"),
    (lambda *values: True, "*args cannot say which value is which parameter"),
    (lambda first, second: True, "required argument(s) 'first', 'second' are not parameter names"),
    (lambda block_size_x, tile_sise_x: True, "'tile_sise_x' (did you mean 'tile_size_x'?)"),
    (lambda *, config: True, "required argument(s) 'config' are not parameter names"),
])
def test_callable_with_an_unusable_signature_lists_the_accepted_forms(fn, fragment):
    with pytest.raises(SearchSpaceError) as info:
        SearchSpace(PARAMS, [fn])
    message = str(info.value)
    assert "callable restriction" in message and fragment in message
    assert "accepted restriction forms:" in message
    assert "arguments are parameter names" in message and "called with the configuration dict" in message


# -- 2. 'in' / 'not in' with expressions and range(...) ---------------------------------------------

@pytest.mark.parametrize("text, rule", [
    ("tile_size_y in (tile_size_x, 2 * tile_size_x)", lambda c: c["tile_size_y"] in (c["tile_size_x"], 2 * c["tile_size_x"])),
    ("tile_size_y not in [tile_size_x, tile_size_x + 1, 8]",
     lambda c: c["tile_size_y"] not in [c["tile_size_x"], c["tile_size_x"] + 1, 8]),
    ("block_size_x in (16, 2 ** (tile_size_x + 4))", lambda c: c["block_size_x"] in (16, 2 ** (c["tile_size_x"] + 4))),
    ("tile_size_x in range(3)", lambda c: c["tile_size_x"] in range(3)),
    ("tile_size_y in range(tile_size_x, 7)", lambda c: c["tile_size_y"] in range(c["tile_size_x"], 7)),
    ("tile_size_y in range(tile_size_x, 4 * tile_size_x + 1, tile_size_x)",
     lambda c: c["tile_size_y"] in range(c["tile_size_x"], 4 * c["tile_size_x"] + 1, c["tile_size_x"])),
    ("tile_size_y not in range(8, tile_size_x, -2)", lambda c: c["tile_size_y"] not in range(8, c["tile_size_x"], -2)),
    ("block_size_y in range(tile_size_x - 2, tile_size_y, tile_size_x - 2)",  # step 0 raises in Python: invalid
     lambda c: c["tile_size_x"] != 2 and c["block_size_y"] in range(c["tile_size_x"] - 2, c["tile_size_y"],
                                                                     c["tile_size_x"] - 2)),
    ("block_size_x / 16 in range(1, 5)", lambda c: c["block_size_x"] / 16 in range(1, 5)),  # 2.0 in range(5)
    ("block_size_x / 32 in range(2, 5)", lambda c: c["block_size_x"] / 32 in range(2, 5)),  # 0.5 is not
    ("1 < tile_size_x in range(tile_size_y)", lambda c: 1 < c["tile_size_x"] in range(c["tile_size_y"])),
])
def test_membership_with_expressions_and_ranges(text, rule):
    expected = valid_by_python(PARAMS, rule)
    assert configurations(SearchSpace(PARAMS, [text])) == expected


def test_membership_of_strings():
    params = {"s": ["a", "b", "ab"], "t": ["a", "b"], "n": [0, 1, 2]}
    space = SearchSpace(params, ["s in (t, t + 'b')", "s not in range(n)"])
    assert configurations(space) == valid_by_python(params, lambda c: c["s"] in (c["t"], c["t"] + "b"))


def test_a_chain_may_not_go_on_after_in():
    with pytest.raises(SearchSpaceError, match="a chain may not go on after 'in'/'not in'"):
        SearchSpace(PARAMS, ["tile_size_x in (1, 2) == tile_size_y"])


def test_range_arguments_must_be_integers():
    with pytest.raises(SearchSpaceError, match=r"restriction 'tile_size_x in range\(block_size_x / 2\)'.*integers"):
        SearchSpace(PARAMS, ["tile_size_x in range(block_size_x / 2)"])


# -- 3. a bare string or callable -------------------------------------------------------------------

def test_a_bare_string_or_callable_is_one_restriction():
    by_list = configurations(SearchSpace(PARAMS, ["block_size_x * tile_size_x <= 128"]))
    assert configurations(SearchSpace(PARAMS, "block_size_x * tile_size_x <= 128")) == by_list
    assert configurations(SearchSpace(PARAMS, lambda block_size_x, tile_size_x: block_size_x * tile_size_x <= 128)) \
        == by_list
    assert configurations(SearchSpace(PARAMS, lambda p: p["block_size_x"] * p["tile_size_x"] <= 128)) == by_list
    assert configurations(build_space(PARAMS, "block_size_x * tile_size_x <= 128")) == by_list  # tune()'s path
    with pytest.raises(SearchSpaceError, match="restrictions must be a list .* got int"):
        SearchSpace(PARAMS, 5)


def test_the_marker_accepts_every_form_and_names_the_argument_when_one_is_wrong():
    settings = parse_marker((), {"params": PARAMS, "restrictions": lambda tile_size_x: tile_size_x != 3}, {})
    assert len(SearchSpace(settings.params, settings.restrictions)) == 4 * 4 * 3 * 6
    settings = parse_marker((), {"params": PARAMS, "restrictions": "tile_size_y in range(tile_size_x, 9, 2)"}, {})
    assert len(SearchSpace(settings.params, settings.restrictions)) > 0
    with pytest.raises(MarkerError, match=r"tune marker argument 'restrictions': callable restriction .*"
                                          r"not parameter names"):
        parse_marker((), {"params": PARAMS, "restrictions": [lambda x, y: x < y]}, {})


# -- 5. refused forms say what is accepted ------------------------------------------------------------

@pytest.mark.parametrize("text, culprit", [
    ("block_size_x.bit_length() > 3", "call of 'block_size_x.bit_length'"),
    ("len(str(block_size_x)) > 2", "call of 'len'"),
    ("block_size_x.real > 3", "Attribute"),
    ("block_size_x[0] > 3", "Subscript"),
    ("[t for t in (1, 2)] == 1", "ListComp"),
    ("tile_size_x in tile_size_y", "'in' with Name on its right"),
])
def test_refused_forms_list_the_accepted_ones(text, culprit):
    with pytest.raises(SearchSpaceError) as info:
        SearchSpace(PARAMS, [text])
    message = str(info.value)
    assert repr(text) in message and culprit in message and "is not allowed" in message
    assert "accepted restriction forms:" in message
    assert "'in' with a tuple/list of expressions or with range(...)" in message


# -- audit additions ----------------------------------------------------------------------------------

def test_named_arguments_with_kwargs_get_every_parameter():
    """``def f(tile_size_x, **rest)`` is called like ``f(**config)``: ``rest`` holds the other parameters."""
    def rest_too(tile_size_x, **rest):
        return tile_size_x <= rest["tile_size_y"] and rest.get("block_size_y", 1) != 2

    space = SearchSpace(PARAMS, [rest_too])
    assert configurations(space) == valid_by_python(
        PARAMS, lambda c: c["tile_size_x"] <= c["tile_size_y"] and c["block_size_y"] != 2)


@pytest.mark.parametrize("params, text, rule", [
    # the untaken side of and/or/if is never evaluated by Python, so it cannot make the restriction fail
    ({"s": ["a", "bb"], "n": [1, 2, 2**40]}, "n < 10 and s * n == 'aa'", lambda c: c["n"] < 10 and c["s"] * c["n"] == "aa"),
    ({"x": [1, 2, 3], "y": [2, 2.5]}, "y == 2.5 or x in range(y)", lambda c: c["y"] == 2.5 or c["x"] in range(c["y"])),
    ({"x": [1, 2, 3], "y": [2, 2.5]}, "x in range(y) if y != 2.5 else x > 1",
     lambda c: c["x"] in range(c["y"]) if c["y"] != 2.5 else c["x"] > 1),
    ({"s": ["12", "3"], "n": [1, 2]}, "int(s) > n", lambda c: int(c["s"]) > c["n"]),  # int('12') is Python's
])
def test_what_python_does_not_evaluate_raises_no_error(params, text, rule):
    assert configurations(SearchSpace(params, [text])) == valid_by_python(params, rule)


def test_an_error_where_python_evaluates_is_still_an_error():
    with pytest.raises(SearchSpaceError, match=r"restriction 'y == 2 or x in range\(y\)': range\(\) arguments must be integers, got float 2.5"):
        SearchSpace({"x": [1, 2, 3], "y": [2, 2.5]}, ["y == 2 or x in range(y)"])


def test_kernel_tuner_objects_get_a_pointed_error():
    """Kernel Tuner's internal (callable, [names]) tuples and python-constraint objects: say what to write instead."""
    with pytest.raises(SearchSpaceError) as info:
        SearchSpace(PARAMS, [(lambda a, b: a <= b, ["tile_size_x", "tile_size_y"])])
    message = str(info.value)
    assert "(callable, [parameter names])" in message and "name the callable's arguments after the parameters" in message
    assert "accepted restriction forms:" in message

    class MaxProdConstraint:  # the shape of python-constraint's constraints, as Kernel Tuner users pass them
        __module__ = "constraint.constraints"

        def __call__(self, variables, domains, assignments, forwardcheck=False):
            return True

    with pytest.raises(SearchSpaceError) as info:
        SearchSpace(PARAMS, [MaxProdConstraint()])
    message = str(info.value)
    assert "python-constraint object MaxProdConstraint" in message and "write the rule as an expression" in message
    assert "accepted restriction forms:" in message


def test_the_marker_points_kernel_tuner_tuples_to_the_accepted_forms():
    with pytest.raises(MarkerError, match=r"tune marker argument 'restrictions': restriction .*\(callable, \[parameter "
                                          r"names\]\) tuple .*accepted restriction forms:"):
        parse_marker((), {"params": PARAMS, "restrictions": [(lambda a, b: a < b, ["tile_size_x", "tile_size_y"])]}, {})
    # where a restriction reads a device limit, the space is built later, but the forms are still checked now
    with pytest.raises(MarkerError, match=r"callable restriction .*'first', 'second' are not parameter names"):
        parse_marker((), {"params": PARAMS, "restrictions": ["block_size_x <= max_threads",
                                                               lambda first, second: first < second]}, {})
    with pytest.raises(MarkerError, match="accepted restriction forms:"):
        parse_marker((), {"params": PARAMS, "restrictions": ["block_size_x <= max_threads", ("tile_size_x < 3", [])]},
                     {})


def test_pyatf_style_constraints_as_its_users_write_them():
    """pyATF's SGEMM example: one lambda per parameter, named after it and earlier parameters, closing over
    sizes and device limits. The reference walks the parameters in definition order and calls each
    constraint by keyword as soon as its parameter is bound, as pyATF's SearchSpace does."""
    M = N = K = 4
    max_wi_sizes, max_wg_size, local_mem_size = (4, 4, 64), 8, 96
    params = {"MWG": list(range(1, M + 1)), "NWG": list(range(1, N + 1)), "KWG": list(range(1, K + 1)),
              "MDIMC": list(range(1, M + 1)), "NDIMC": list(range(1, N + 1)), "MDIMA": list(range(1, M + 1)),
              "NDIMB": list(range(1, N + 1)), "KWI": list(range(1, K + 1)), "VWM": [1, 2, 4, 8], "VWN": [1, 2, 4, 8],
              "STRM": [0, 1], "SA": [0, 1], "SB": [0, 1]}
    constraints = {
        "MWG": lambda MWG: M % MWG == 0,
        "NWG": lambda NWG: N % NWG == 0,
        "KWG": lambda KWG: K % KWG == 0,
        "MDIMC": lambda MDIMC, MWG: MWG % MDIMC == 0 and MDIMC <= max_wi_sizes[0],
        "NDIMC": lambda NDIMC, NWG, MDIMC: NWG % NDIMC == 0 and NDIMC <= max_wi_sizes[1]
        and MDIMC * NDIMC <= max_wg_size,
        "MDIMA": lambda MDIMA, MWG, NDIMC, KWG, MDIMC: MWG % MDIMA == 0 and (MDIMC * NDIMC) % MDIMA == 0
        and KWG % ((MDIMC * NDIMC) / MDIMA) == 0,
        "NDIMB": lambda NDIMB, NWG, NDIMC, KWG, MDIMC: NWG % NDIMB == 0 and (MDIMC * NDIMC) % NDIMB == 0
        and KWG % ((MDIMC * NDIMC) / NDIMB) == 0,
        "KWI": lambda KWI, KWG: KWG % KWI == 0,
        "VWM": lambda VWM, MWG, MDIMC, MDIMA: (MWG / MDIMC) % VWM == 0 and (MWG / MDIMA) % VWM == 0,
        "VWN": lambda VWN, NWG, NDIMC, NDIMB: (NWG / NDIMC) % VWN == 0 and (NWG / NDIMB) % VWN == 0,
        "SB": lambda SB, SA, KWG, MWG, VWM, NWG, VWN:
            ((SA * KWG * MWG / VWM) + (SB * KWG * NWG / VWN)) * 8 <= local_mem_size,
    }

    def pyatf_order(i: int = 0, bound: dict | None = None):
        bound = bound or {}
        if i == len(params):
            yield tuple(bound[n] for n in params)
            return
        name = list(params)[i]
        fn = constraints.get(name)
        for value in params[name]:
            here = {**bound, name: value}
            if fn is None or fn(**{a: here[a] for a in fn.__code__.co_varnames[:fn.__code__.co_argcount]}):
                yield from pyatf_order(i + 1, here)

    expected = set(pyatf_order())
    space = SearchSpace(params, list(constraints.values()))
    assert configurations(space) == expected and 0 < len(expected) < space.cartesian_size


KT_PARAMS = {"block_size_x": [16, 32, 48, 64, 128], "block_size_y": [1, 2, 4, 16, 32, 64], "tile_size_y": [1, 2, 4],
             "use_padding": [0, 1]}


def _kt_args_style(block_size_x, block_size_y, tile_size_y, use_padding):  # Kernel Tuner's "args-style" restriction
    return block_size_x // block_size_y >= 2 and (use_padding == 0 or block_size_x % 32 != 0)


@pytest.mark.parametrize("restrictions, rule", [
    # Kernel Tuner 1.5.0's tutorial, examples and tests, as written there
    (["block_size_x==block_size_y"], lambda c: c["block_size_x"] == c["block_size_y"]),
    (lambda p: p["block_size_x"] == p["block_size_y"], lambda c: c["block_size_x"] == c["block_size_y"]),
    (["block_size_x==block_size_y*tile_size_y"], lambda c: c["block_size_x"] == c["block_size_y"] * c["tile_size_y"]),
    (["use_padding==0 or (block_size_x % 32 != 0)", "block_size_x*block_size_y >= 32"],
     lambda c: (c["use_padding"] == 0 or c["block_size_x"] % 32 != 0) and c["block_size_x"] * c["block_size_y"] >= 32),
    ([lambda p: p["block_size_x"] <= 64, "block_size_x > 16"], lambda c: 16 < c["block_size_x"] <= 64),
    (["32 <= block_size_x*block_size_y <= 512", f"block_size_x*block_size_y <= {1024}"],
     lambda c: 32 <= c["block_size_x"] * c["block_size_y"] <= 512),
    (_kt_args_style, lambda c: _kt_args_style(**c)),
    ([_kt_args_style, lambda p: p["tile_size_y"] != 2], lambda c: _kt_args_style(**c) and c["tile_size_y"] != 2),
])
def test_kernel_tuner_forms_as_its_users_write_them(restrictions, rule):
    assert configurations(SearchSpace(KT_PARAMS, restrictions)) == valid_by_python(KT_PARAMS, rule)


@pytest.mark.parametrize("text, rule", [
    # pairs of parameters, as Kernel Tuner users write them in strings (Python compares the tuples)
    ("(block_size_x, block_size_y) in [(16, 8), (32, 4), (64, 2), (128, 1)]",
     lambda c: (c["block_size_x"], c["block_size_y"]) in [(16, 8), (32, 4), (64, 2), (128, 1)]),
    ("(tile_size_x, tile_size_y) not in ((1, 1), (2, 2 * tile_size_x), (3,), (4, 6, 8))",
     lambda c: (c["tile_size_x"], c["tile_size_y"]) not in ((1, 1), (2, 2 * c["tile_size_x"]), (3,), (4, 6, 8))),
    ("(tile_size_x, block_size_y // tile_size_x) in ((1, 2), (2, 2), (4, 1))",
     lambda c: (c["tile_size_x"], c["block_size_y"] // c["tile_size_x"]) in ((1, 2), (2, 2), (4, 1))),
])
def test_membership_of_parameter_tuples(text, rule):
    assert configurations(SearchSpace(PARAMS, [text])) == valid_by_python(PARAMS, rule)


def test_membership_of_a_tuple_needs_tuples_on_the_right():
    with pytest.raises(SearchSpaceError, match=r"tuple on the left of 'in' needs a tuple/list of tuples on its right.*"
                                               r"accepted restriction forms:"):
        SearchSpace(PARAMS, ["(tile_size_x, tile_size_y) in range(3)"])
