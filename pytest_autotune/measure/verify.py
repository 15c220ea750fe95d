"""Output verification: is a configuration's answer the reference answer?

Every configuration is checked before it is timed; a fast wrong kernel must
never win. Either compare against ``expected`` (a list aligned with the
kernel arguments, ``None`` to skip one) with dtype-aware tolerances, or hand
``expected`` and the outputs to a user ``verify(expected, outputs)`` callable
that returns a bool (``None`` counts as success, for assert-style functions)
or raises ``AssertionError`` with a message.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

# (atol, rtol) per floating kind. rtol is a few hundred to a thousand ulps:
# enough for tuned kernels that reassociate sums (unrolling, tiling, atomics)
# on ~1e6 terms, far too small for a wrong index or a missing element to pass.
# float16 has only ~3 decimal digits, so it gets a percent. Integers and
# booleans are exact: a reordering cannot change an integer result.
_FLOAT_TOLERANCE = {
    2: (1e-3, 1e-2),  # float16 / complex32
    4: (1e-6, 1e-4),  # float32 / complex64
    8: (1e-12, 1e-9),  # float64 / complex128
}


@dataclass
class VerifyResult:
    """Pass/fail of one verification, with the worst offender when it failed."""

    ok: bool
    message: str = ""
    arg: int | None = None  # index of the failing argument
    max_error: float | None = None  # largest absolute error
    index: tuple[int, ...] | None = None  # where the largest error is

    def __bool__(self) -> bool:
        return self.ok


def default_tolerance(dtype: Any) -> tuple[float, float]:
    """``(atol, rtol)`` for comparing values of ``dtype``."""
    dt = np.dtype(dtype)
    if dt.kind in "biu":
        return 0.0, 0.0
    if dt.kind == "f":
        return _FLOAT_TOLERANCE.get(min(dt.itemsize, 8), _FLOAT_TOLERANCE[8])
    if dt.kind == "c":
        return _FLOAT_TOLERANCE.get(min(dt.itemsize // 2, 8), _FLOAT_TOLERANCE[8])
    return 0.0, 0.0


def _fmt(value: Any) -> str:
    return np.format_float_positional(value, precision=8, trim="-") if isinstance(value, np.floating) else repr(
        value.item() if isinstance(value, np.generic) else value
    )


def compare_array(
    expected: Any,
    actual: Any,
    *,
    atol: float | None = None,
    rtol: float | None = None,
    label: str = "output",
) -> VerifyResult:
    """Compare one output with its reference; report shape, dtype, NaN and value errors."""
    exp = np.asarray(expected)
    act = np.asarray(actual)
    if exp.shape != act.shape:
        return VerifyResult(False, f"{label}: shape mismatch: expected {exp.shape}, got {act.shape}")
    if exp.dtype != act.dtype:
        return VerifyResult(False, f"{label}: dtype mismatch: expected {exp.dtype}, got {act.dtype}")
    d_atol, d_rtol = default_tolerance(act.dtype)
    atol = d_atol if atol is None else float(atol)
    rtol = d_rtol if rtol is None else float(rtol)
    inexact = act.dtype.kind in "fc"
    if inexact:
        if np.array_equal(act, exp, equal_nan=True):
            return VerifyResult(True)
        bad = ~np.isclose(act, exp, atol=atol, rtol=rtol, equal_nan=True)
        with np.errstate(invalid="ignore", over="ignore"):
            err = np.abs(act.astype(np.complex128 if act.dtype.kind == "c" else np.float64) - exp)
        nan_bad = np.isnan(act) & ~np.isnan(exp)
        err = np.where(nan_bad | np.isnan(err), np.inf, err)
    else:
        bad = act != exp
        if not bad.any():
            return VerifyResult(True)
        err = np.abs(act.astype(np.float64) - exp.astype(np.float64))
        nan_bad = np.zeros(act.shape, dtype=bool)
    if not np.any(bad):
        return VerifyResult(True)
    masked = np.where(bad, err, -1.0)
    flat = int(np.argmax(masked))
    index = tuple(int(i) for i in np.unravel_index(flat, act.shape)) if act.ndim else ()
    worst = float(masked.flat[flat])
    count = int(np.count_nonzero(bad))
    tol = f"atol={atol:g}, rtol={rtol:g}" if inexact else "exact comparison"
    message = (
        f"{label}: {count} of {act.size} elements differ ({tol}); largest error {worst:.6g} "
        f"at index {index}: got {_fmt(act[index])}, expected {_fmt(exp[index])}"
    )
    n_nan = int(np.count_nonzero(nan_bad))
    if n_nan:
        first = tuple(int(i) for i in np.unravel_index(int(np.argmax(nan_bad)), act.shape)) if act.ndim else ()
        message += f"; {n_nan} unexpected NaN value(s), first at index {first}"
    return VerifyResult(False, message, max_error=worst, index=index)


def verify_outputs(
    outputs: Sequence[Any],
    expected: Sequence[Any] | None = None,
    *,
    atol: float | None = None,
    rtol: float | None = None,
    verify: Callable[[Sequence[Any] | None, Sequence[Any]], Any] | None = None,
) -> VerifyResult:
    """Check ``outputs`` (aligned with the kernel arguments) against the reference.

    A ``verify`` callable takes precedence and receives ``expected`` as given.
    """
    if verify is not None:
        try:
            verdict = verify(expected, outputs)
        except AssertionError as exc:
            return VerifyResult(False, f"verify callable failed: {exc}" if str(exc) else "verify callable failed")
        except Exception as exc:  # a broken verify is reported, not fatal to the run
            return VerifyResult(False, f"verify callable raised {type(exc).__name__}: {exc}")
        if verdict is None or bool(verdict):
            return VerifyResult(True)
        return VerifyResult(False, "verify callable returned False")
    if expected is None:
        return VerifyResult(True)
    if len(expected) != len(outputs):
        return VerifyResult(False, f"expected has {len(expected)} entries but there are {len(outputs)} outputs")
    for i, (exp, out) in enumerate(zip(expected, outputs)):
        if exp is None:
            continue
        if out is None:
            return VerifyResult(False, f"argument {i}: no output produced", arg=i)
        result = compare_array(exp, out, atol=atol, rtol=rtol, label=f"argument {i}")
        if not result.ok:
            result.arg = i
            return result
    return VerifyResult(True)
