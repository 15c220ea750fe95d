"""The problem a kernel was tuned for, in a form people and :func:`locked_params` can read.

The lock entry's ``hashes.problem`` says *whether* the problem changed; the
entry's ``problem`` field (schema 2) says *what* it was::

    "problem": {"size": [4096, 4096],
                "args": [{"shape": [4096, 4096], "dtype": "float32"}, ..., {"dtype": "int32", "value": 4096}]}

Arrays contribute shape and dtype (never their contents), scalars their type
and value, anything else its type name. Lookups match problems on ``size``
(exactly, or the nearest in log space) and on the array dtypes.
"""
from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["describe_problem", "normalize_size", "array_dtypes", "problem_distance", "size_distance",
           "size_label", "problem_error", "problem_change"]


def _plain_scalar(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)  # JSON cannot hold NaN/inf; a readable stand-in is enough here
    return value


def normalize_size(problem_size: Any) -> list[Any] | None:
    """``4096`` -> ``[4096]``, ``(64, 32)`` -> ``[64, 32]``; expressions (strings) are kept as written."""
    if problem_size is None:
        return None
    if isinstance(problem_size, (str, bytes)) or not isinstance(problem_size, Sequence) and not hasattr(problem_size, "tolist"):
        problem_size = [problem_size]
    elif hasattr(problem_size, "tolist"):
        problem_size = problem_size.tolist()
        if not isinstance(problem_size, list):
            problem_size = [problem_size]
    out: list[Any] = []
    for dim in problem_size:
        if hasattr(dim, "item") and not isinstance(dim, (int, float, str)):
            dim = dim.item()  # numpy scalar
        if isinstance(dim, bool) or not isinstance(dim, (int, float, str)):
            dim = str(dim)
        elif isinstance(dim, float) and dim.is_integer():
            dim = int(dim)
        out.append(_plain_scalar(dim))
    return out


def _describe_arg(arg: Any) -> dict[str, Any]:
    if isinstance(arg, enum.Enum):
        arg = arg.value
    if arg is None or isinstance(arg, (bool, int, float, str)):
        return {"type": type(arg).__name__, "value": _plain_scalar(arg)}
    shape, dtype = getattr(arg, "shape", None), getattr(arg, "dtype", None)
    if shape is not None and dtype is not None:
        if tuple(shape) == () and callable(getattr(arg, "tolist", None)):
            return {"dtype": str(dtype), "value": _plain_scalar(arg.tolist())}
        return {"shape": [int(s) for s in shape], "dtype": str(dtype)}
    if isinstance(arg, (bytes, bytearray)):
        return {"type": "bytes", "length": len(arg)}
    cls = type(arg)
    return {"type": f"{cls.__module__}.{cls.__qualname__}"}


def describe_problem(problem_size: Any, args: Sequence[Any] | Mapping[str, Any] | None = (),
                     constant_memory: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The readable problem of a lock entry: its size and what each argument is (see the module doc); a CUDA
    kernel's ``__constant__`` arrays, when it has any, under ``constant_memory`` by symbol."""
    if isinstance(args, Mapping):
        described: Any = {str(k): _describe_arg(v) for k, v in sorted(args.items(), key=lambda kv: str(kv[0]))}
    else:
        described = [_describe_arg(a) for a in (args or ())]
    problem = {"size": normalize_size(problem_size), "args": described}
    if constant_memory:
        problem["constant_memory"] = {str(k): _describe_arg(v) for k, v in sorted(constant_memory.items())}
    return problem


def array_dtypes(problem: Mapping[str, Any]) -> list[str]:
    """Dtypes of the array arguments, in order (what a nearest-size fallback must agree on)."""
    args = problem.get("args") or []
    items = args.values() if isinstance(args, Mapping) else args
    return [a["dtype"] for a in items if isinstance(a, Mapping) and "shape" in a and "dtype" in a]


def _numeric(size: Any) -> list[float] | None:
    if not isinstance(size, list) or not size:
        return None
    if not all(isinstance(d, (int, float)) and not isinstance(d, bool) and d > 0 for d in size):
        return None
    return [float(d) for d in size]


def size_distance(a: Any, b: Any) -> float | None:
    """Euclidean distance of two sizes in log space; ``None`` for different dimensions or non-numeric sizes.

    Log space, because a kernel's best configuration follows the *ratio* of
    sizes: 1024 is as far from 2048 as 2048 from 4096.
    """
    sa, sb = _numeric(a), _numeric(b)
    if sa is None or sb is None or len(sa) != len(sb):
        return None
    return math.sqrt(sum((math.log(x) - math.log(y)) ** 2 for x, y in zip(sa, sb)))


def problem_distance(a: Mapping[str, Any], b: Mapping[str, Any]) -> float | None:
    """:func:`size_distance` of two problems, ``None`` also when their array arguments' dtypes differ."""
    if array_dtypes(a) != array_dtypes(b):
        return None
    return size_distance(a.get("size"), b.get("size"))


def problem_error(value: Any) -> str | None:
    """Why ``value`` is not a readable problem (``None`` when it is one): the lockfile's validation."""
    if not isinstance(value, Mapping):
        return f"must be an object with 'size' and 'args', got {type(value).__name__}"
    size = value.get("size")
    if size is not None and (not isinstance(size, list)
                             or not all(isinstance(d, (int, float, str)) and not isinstance(d, bool) for d in size)):
        return f"size must be null or a list of numbers or expressions, got {size!r}"
    args = value.get("args", [])
    if not isinstance(args, (list, Mapping)):
        return f"args must be a list or an object, got {args!r}"
    items = args.values() if isinstance(args, Mapping) else args
    if not all(isinstance(a, Mapping) for a in items):
        return "args must describe each argument as an object"
    constants = value.get("constant_memory", {})
    if not isinstance(constants, Mapping) or not all(isinstance(a, Mapping) for a in constants.values()):
        return f"constant_memory must map symbol names to described arrays, got {constants!r}"
    return None


def size_label(size: Sequence[Any] | None) -> str:
    """``[512, 256]`` -> ``"512x256"`` (``""`` without a size): how exports and messages name a problem."""
    return "x".join(str(d) for d in size) if size else ""


def _arg_change(a: Any, b: Any) -> str:
    """``"shape (4096,) -> (2048,)"``, ``"value 4096 -> 2048"``: only what differs of one argument."""
    if isinstance(a, Mapping) and isinstance(b, Mapping) and set(a) == set(b):
        return ", ".join(f"{key} {_plain(a[key])} -> {_plain(b[key])}" for key in sorted(a) if a[key] != b[key])
    return f"{a} -> {b}"


def _plain(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def problem_change(old: Any, new: Mapping[str, Any]) -> str:
    """What differs between a lock entry's readable problem and the current one, e.g.
    ``"size 4096 -> 2048; argument 3: value 4096 -> 2048"``; ``""`` when the entry has no
    readable problem (schema 1) or the difference is not visible in it."""
    if old is None or problem_error(old) is not None:
        return ""
    parts = []
    if old.get("size") != new.get("size"):
        parts.append(f"size {size_label(old.get('size')) or 'none'} -> {size_label(new.get('size')) or 'none'}")
    before, after = old.get("args") or [], new.get("args") or []
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        pairs = [(f"argument {n!r}", before.get(n), after.get(n)) for n in sorted(set(before) | set(after))]
    elif isinstance(before, list) and isinstance(after, list):
        if len(before) != len(after):
            parts.append(f"{len(before)} arguments -> {len(after)}")
        pairs = [(f"argument {i}", a, b) for i, (a, b) in enumerate(zip(before, after))]
    else:
        pairs = []
    parts += [f"{name}: {_arg_change(a, b)}" for name, a, b in pairs if a != b]
    before, after = old.get("constant_memory") or {}, new.get("constant_memory") or {}
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        parts += [f"constant_memory {n!r}: {_arg_change(before.get(n), after.get(n))}"
                  for n in sorted(set(before) | set(after)) if before.get(n) != after.get(n)]
    return "; ".join(parts)
