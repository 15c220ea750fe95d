"""Every bad input gets a SearchSpaceError that names the culprit."""
from __future__ import annotations

import re

import numpy as np
import pytest

from pytest_autotune.space import SearchSpace, SearchSpaceError, compile_restriction, literal_values

BLOCKS = {"block_size_x": [16, 32, 64, 128], "block_size_y": [1, 2, 4, 8], "tile_size": [1, 2, 4]}


def error_of(params, restrictions=None, **kwargs) -> str:
    with pytest.raises(SearchSpaceError) as info:
        SearchSpace(params, restrictions, **kwargs)
    return str(info.value)


# -- restrictions -----------------------------------------------------------------------------

@pytest.mark.parametrize("text, unknown, suggestion", [
    ("block_sizex * block_size_y <= 1024", "block_sizex", "block_size_x"),
    ("block_size_x * blocksize_y <= 1024", "blocksize_y", "block_size_y"),
    ("tile_sise > 1", "tile_sise", "tile_size"),
    ("max_threds >= block_size_x", "max_threds", "max_threads"),  # constants are suggested too
])
def test_unknown_name_suggests_the_closest_parameter(text, unknown, suggestion):
    message = error_of(BLOCKS, [text], constants={"max_threads": 1024})
    assert repr(text) in message
    assert f"unknown name {unknown!r}" in message
    assert f"did you mean {suggestion!r}?" in message


def test_unknown_name_without_a_close_match_lists_the_parameters():
    message = error_of(BLOCKS, ["zzz > 1"])
    assert "unknown name 'zzz'" in message
    assert "parameters are block_size_x, block_size_y, tile_size" in message
    assert message.endswith("; no constants")


def test_unknown_name_without_a_close_match_lists_the_constants_too():
    """A GPU limit under the C runner: the message says which limits this device does offer."""
    message = error_of(BLOCKS, ["block_size_x <= max_threads"],
                       constants={"cpu_count": 2, "l1d_cache": 32768, "l2_cache": 1 << 20, "l3_cache": 1 << 25})
    assert "unknown name 'max_threads'; parameters are block_size_x, block_size_y, tile_size; " \
           "constants are cpu_count, l1d_cache, l2_cache, l3_cache" in message


@pytest.mark.parametrize("text", ["block_size_x >> > 1", "block_size_x * (block_size_y", "x = 1",
                                  "block_size_x < 3 <", "if block_size_x: 1"])
def test_syntax_error_shows_the_expression(text):
    message = error_of(BLOCKS, [text])
    assert repr(text) in message
    assert "is not a valid Python expression" in message


@pytest.mark.parametrize("text, construct", [
    ("block_size_x.real > 3", "Attribute is not allowed"),
    ("block_size_x.bit_length() > 3", "call of 'block_size_x.bit_length' is not allowed"),
    ("len(str(block_size_x)) > 2", "call of 'len' is not allowed"),
    ("__import__('os')", "call of '__import__' is not allowed"),
    ("(lambda v: v)(block_size_x) > 1", "call of 'lambda v: v' is not allowed"),
    ("[v for v in (1, 2)] == 1", "ListComp is not allowed"),
    ("block_size_x in tile_size", "'in' with Name on its right"),
    ("block_size_x in range(64, step=2)", "range() takes 1 to 3 plain positional arguments"),
    ("range(3) == tile_size", "range(...) is allowed only on the right of 'in'"),
    ("block_size_x is 16", "comparison Is is not allowed"),
    ("block_size_x @ tile_size", "operator MatMult is not allowed"),
    ("{block_size_x: 1}", "Dict is not allowed"),
    ("(t := tile_size) > 1", "NamedExpr is not allowed"),
    ("f'{tile_size}' == '1'", "JoinedStr is not allowed"),
    ("max(*(1, 2)) > tile_size", "plain positional arguments only"),
    ("min(block_size_x, key=abs) > 1", "plain positional arguments only"),
    ("__debug__ or tile_size", "name '__debug__' is not allowed"),
    ("tile_size == None", "constant None of type NoneType is not allowed"),
    ("tile_size < 3j", "of type complex is not allowed"),
])
def test_disallowed_constructs_are_named(text, construct):
    message = error_of(BLOCKS, [text])
    assert repr(text) in message, message
    assert construct in message
    # the message also lists the accepted forms, where a construct is refused
    if "is not allowed" in construct and not construct.startswith(("constant", "name", "of type")) or "'in' with" in construct:
        assert "accepted restriction forms:" in message and "lambda block_size_x, block_size_y" in message


def test_too_deep_and_too_long():
    assert "nested deeper than 64 levels" in error_of(BLOCKS, ["not " * 100 + "tile_size"])
    assert "longer than 10000" in error_of(BLOCKS, ["tile_size > 1 and " * 1000 + "True"])


def test_evaluation_errors_name_the_restriction():
    params = {"s": ["a", "b"], "x": [1, 2]}
    message = error_of(params, ["s < x"])
    assert "restriction 's < x' failed to evaluate" in message
    message = error_of(params, ["min(x) > 1"])
    assert "restriction 'min(x) > 1'" in message and "at least two arguments" in message


def test_restriction_of_the_wrong_type():
    assert "must be a string or a callable" in error_of(BLOCKS, [42])
    with pytest.raises(SearchSpaceError, match="must be a string"):
        compile_restriction(b"tile_size > 1", list(BLOCKS))


def test_callable_restriction_that_raises_names_itself_and_the_configuration():
    def picky(config):
        if config["tile_size"] == 4:
            raise KeyError("boom")
        return True

    message = error_of(BLOCKS, [picky])
    assert "picky" in message and "KeyError" in message and "'tile_size': 4" in message


# -- parameters -------------------------------------------------------------------------------

def test_empty_value_list_names_the_parameter():
    assert "parameter 'tile_size' has an empty value list" in error_of({**BLOCKS, "tile_size": []})
    assert "parameter 'tile_size' has an empty value list" in error_of({**BLOCKS, "tile_size": range(0)})


@pytest.mark.parametrize("values, shown", [([1, 2, 1], "1"), ([1, 1.0], "1.0"), (["a", "b", "a"], "'a'"),
                                           ([True, 1], "1"), ([0.5, 0.25, 0.5], "0.5")])
def test_duplicate_values_name_the_parameter_and_the_value(values, shown):
    message = error_of({"x": [1, 2], "tile": values})
    assert f"parameter 'tile' lists the value {shown} more than once" in message


def test_distinct_values_of_different_types_are_not_duplicates():
    space = SearchSpace({"x": [1, "1", 2.5]})
    assert len(space) == 3
    assert space.find({"x": "1"}) != space.find({"x": 1})


@pytest.mark.parametrize("params, fragment", [
    ({}, "non-empty mapping"),
    ([("x", [1])], "non-empty mapping"),
    ({"block size": [1, 2]}, "parameter name 'block size' is not a valid identifier"),
    ({"1x": [1, 2]}, "parameter name '1x' is not a valid identifier"),
    ({"x": "abc"}, "parameter 'x': values must be a list"),
    ({"x": 5}, "parameter 'x': values must be a list"),
    ({"x": [1, None]}, "parameter 'x': value None of type NoneType is not allowed"),
    ({"x": [1, [2]]}, "parameter 'x': value [2] of type list is not allowed"),
])
def test_bad_parameters(params, fragment):
    assert fragment in error_of(params)


def test_constant_clashing_with_a_parameter():
    assert "same name as a parameter" in error_of(BLOCKS, [], constants={"tile_size": 3})


def test_cartesian_size_beyond_int64_keys_is_refused_before_construction():
    message = error_of({f"p{i}": [0, 1, 2, 3] for i in range(32)})
    assert "beyond 2**62" in message


def test_too_many_configurations_is_an_error_not_a_crash():
    params = {f"p{i}": list(range(100)) for i in range(6)}
    message = error_of(params)
    assert "1,000,000,000,000 valid configurations" in message and "the limit is 50,000,000" in message
    # a limit raised beyond what int64 row arithmetic allows still ends in an error, not a crash
    assert "too many to enumerate" in error_of(params, max_configurations=10**13)


# -- empty spaces: say what killed them ---------------------------------------------------------

def test_empty_space_reports_survivors_per_restriction():
    params = {"x": [1, 2, 3, 4], "y": [1, 2, 3, 4], "z": [0, 1]}
    restrictions = ["x + y > 6", "x * y < 10", "z == 0 or x > 0"]
    message = error_of(params, restrictions)
    assert message.startswith("the search space is empty")
    # each restriction on its own, so the user sees which one is too strict
    assert "'x + y > 6': 3 of 16" in message
    assert "'x * y < 10': 13 of 16" in message
    assert "'z == 0 or x > 0': 8 of 8" in message
    # and the construction step at which nothing survived
    assert re.search(r"applying 'x \* y < 10'.*: 0 of \d+", message) or re.search(
        r"applying 'x \+ y > 6'.*: 0 of \d+", message), message


def test_empty_space_from_a_single_parameter_restriction_names_it():
    message = error_of(BLOCKS, ["block_size_x * block_size_y <= 1024", "tile_size > 8"])
    assert "restriction 'tile_size > 8' excludes every value of parameter 'tile_size'" in message


def test_empty_space_from_an_always_false_restriction():
    message = error_of(BLOCKS, ["1 > 2"])
    assert "'1 > 2' is always false" in message


def test_empty_space_from_callables_says_how_many_they_saw():
    message = error_of(BLOCKS, ["block_size_x * block_size_y <= 256", lambda c: False])
    n = len(SearchSpace(BLOCKS, ["block_size_x * block_size_y <= 256"]))
    assert f"rejected every one of the {n} configurations" in message


def test_empty_space_where_division_by_zero_rejects_everything():
    message = error_of({"x": [1, 2], "y": [0]}, ["x % y == 0"])
    assert "empty" in message and "x % y == 0" in message


# -- queries ------------------------------------------------------------------------------------

def test_query_errors():
    space = SearchSpace(BLOCKS, ["block_size_x * block_size_y <= 256"])
    with pytest.raises(SearchSpaceError, match="unknown neighbour method 'manhattan'"):
        space.neighbours(0, "manhattan")
    with pytest.raises(SearchSpaceError, match=r"lacks parameter\(s\) \['tile_size'\]"):
        space.value_indices({"block_size_x": 16, "block_size_y": 1})
    with pytest.raises(SearchSpaceError, match="3 values for 2 parameters|2 values for 3 parameters"):
        space.value_indices((16, 1))
    with pytest.raises(SearchSpaceError, match="value 3 is not among the values of parameter 'tile_size'"):
        space.value_indices({"block_size_x": 16, "block_size_y": 1, "tile_size": 3})
    with pytest.raises(SearchSpaceError, match="at least one configuration"):
        SearchSpace.from_configurations(BLOCKS, [])
    with pytest.raises(SearchSpaceError, match="not among the values"):
        SearchSpace.from_configurations(BLOCKS, [{"block_size_x": 17, "block_size_y": 1, "tile_size": 1}])
    with pytest.raises(SearchSpaceError, match="params are required"):
        SearchSpace.from_configurations(None, [(16, 1, 1)])
    # but membership queries never raise: an unknown configuration is simply not a member
    assert space.find({"block_size_x": 17, "block_size_y": 1, "tile_size": 1}) == -1
    assert space.find([17, 1, 1]) == -1
    assert space.find_indices(np.array([9, 9, 9])) == -1


# -- value lists --------------------------------------------------------------------------------

@pytest.mark.parametrize("text, fragment", [
    ("[2**i for i in range(n)]", "unknown name 'n'"),
    ("[2**i for i in rang(6)]", "Call is not allowed"),
    ("[1, 2", "is not a valid expression"),
    ("[x.real for x in range(3)]", "Attribute is not allowed"),
    ("sorted([3, 1])", "Call is not allowed"),
    ("range(10**7)", "too many elements"),
    ("[2**100 for i in range(3)]", "exponent too large"),
    ("[1] * 3", "only + joins lists"),
    ("1 / 0", "ZeroDivisionError"),
    ("range('a')", "TypeError"),
])
def test_value_list_errors(text, fragment):
    with pytest.raises(SearchSpaceError) as info:
        literal_values(text)
    assert "value list" in str(info.value)
    assert fragment in str(info.value)


@pytest.mark.parametrize("text, values", [
    ("[2**i for i in range(6)]", [1, 2, 4, 8, 16, 32]),
    ("[1, 2, 4, 8, 16] + list(range(32, 129, 32))", [1, 2, 4, 8, 16, 32, 64, 96, 128]),
    ("[i for i in range(1, 11) if i % 2 == 0]", [2, 4, 6, 8, 10]),
    ("['a', 'b']", ["a", "b"]),
    ("4096", [4096]),
    ("(1, 2.5)", [1, 2.5]),
])
def test_value_lists_that_must_work(text, values):
    assert literal_values(text) == values
