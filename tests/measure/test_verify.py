"""Output verification: tolerances by dtype, NaN/shape/dtype reporting, callables."""
from __future__ import annotations

import numpy as np
import pytest

from pytest_autotune.measure.verify import compare_array, default_tolerance, verify_outputs


def test_default_tolerances_follow_precision():
    f16, f32, f64 = (default_tolerance(t) for t in (np.float16, np.float32, np.float64))
    assert f16[1] > f32[1] > f64[1]
    assert f16[0] > f32[0] > f64[0]
    assert default_tolerance(np.complex64) == f32
    for t in (np.int8, np.int32, np.uint64, np.bool_):
        assert default_tolerance(t) == (0.0, 0.0)


def test_equal_arrays_pass_and_small_float_noise_is_tolerated():
    x = np.linspace(0, 1, 1000, dtype=np.float32)
    assert compare_array(x, x.copy()).ok
    noisy = x * np.float32(1 + 1e-6)  # a few ulps: reassociation-sized
    assert compare_array(x, noisy).ok
    half = x.astype(np.float16)
    assert compare_array(half, (half * np.float16(1.001)).astype(np.float16)).ok  # fp16 is looser


def test_wrong_value_reports_largest_error_and_its_index():
    expected = np.arange(10, dtype=np.float32)
    actual = expected.copy()
    actual[3] += 0.5
    actual[7] -= 2.0
    result = compare_array(expected, actual, label="argument 0")
    assert not result.ok
    assert result.index == (7,)
    assert result.max_error == pytest.approx(2.0)
    assert "2 of 10 elements differ" in result.message
    assert "index (7,)" in result.message and "argument 0" in result.message


def test_index_is_reported_in_the_array_shape():
    expected = np.zeros((4, 5), np.float64)
    actual = expected.copy()
    actual[2, 3] = 1.0
    result = compare_array(expected, actual)
    assert result.index == (2, 3)


def test_float32_error_beyond_tolerance_fails():
    x = np.ones(100, np.float32)
    assert not compare_array(x, x * np.float32(1.001)).ok
    assert compare_array(x, x * np.float32(1.001), rtol=1e-2).ok  # explicit rtol wins
    assert compare_array(np.zeros(3, np.float32), np.full(3, 0.5, np.float32), atol=1.0).ok


def test_integers_are_exact():
    x = np.arange(100, dtype=np.int32)
    y = x.copy()
    y[50] += 1
    result = compare_array(x, y)
    assert not result.ok and result.index == (50,) and result.max_error == 1.0
    assert "exact" in result.message
    big = np.array([2**40], dtype=np.int64)
    assert not compare_array(big, big + 1).ok  # no relative slack for large integers


def test_nan_is_reported_as_nan():
    expected = np.ones(8, np.float32)
    actual = expected.copy()
    actual[5] = np.nan
    result = compare_array(expected, actual)
    assert not result.ok
    assert "NaN" in result.message and result.index == (5,)
    assert result.max_error == float("inf")
    both = np.array([1.0, np.nan], np.float64)
    assert compare_array(both, both.copy()).ok  # NaN where NaN is expected is fine


def test_shape_and_dtype_mismatch_are_reported_as_such():
    result = compare_array(np.zeros(4, np.float32), np.zeros(5, np.float32))
    assert not result.ok and "shape mismatch" in result.message
    result = compare_array(np.zeros(4, np.float32), np.zeros(4, np.float64))
    assert not result.ok and "dtype mismatch" in result.message


def test_verify_outputs_skips_none_and_names_the_failing_argument():
    out = [np.ones(3, np.float32), np.int32(3), np.zeros(3, np.int64)]
    assert verify_outputs(out, [np.ones(3, np.float32), None, None]).ok
    assert verify_outputs(out, None).ok
    result = verify_outputs(out, [None, None, np.ones(3, np.int64)])
    assert not result.ok and result.arg == 2 and "argument 2" in result.message
    assert not verify_outputs(out, [None]).ok  # misaligned reference
    assert not verify_outputs([None], [np.ones(1)]).ok


def test_verify_callable_bool_none_and_assertion():
    out = [np.ones(3)]
    seen = {}

    def ok(expected, outputs):
        seen["args"] = (expected, outputs)
        return True

    assert verify_outputs(out, ["ref"], verify=ok).ok
    assert seen["args"] == (["ref"], out)  # gets expected as given and the outputs
    assert not verify_outputs(out, verify=lambda e, o: False).ok
    assert verify_outputs(out, verify=lambda e, o: None).ok  # assert-style function

    def asserting(expected, outputs):
        assert outputs[0].sum() == 5, "sum is off by two"

    result = verify_outputs(out, verify=asserting)
    assert not result.ok and "sum is off by two" in result.message

    def broken(expected, outputs):
        raise KeyError("oops")

    result = verify_outputs(out, verify=broken)
    assert not result.ok and "KeyError" in result.message


def test_verify_callable_takes_precedence_over_expected():
    out = [np.ones(3)]
    assert verify_outputs(out, [np.zeros(3)], verify=lambda e, o: True).ok
