"""Short, stable fingerprints of what a tuned winner depends on.

A lock entry records hashes of the kernel source, the search space and the
problem (shapes and dtypes of the arguments). When one of them changes the
locked winner may no longer be the best, so the entry is stale. The hashes
must therefore be identical across processes, machines, operating systems and
Python versions (no ``hash()``, no ``repr`` of arbitrary objects, no
bytecode), change when what they describe changes, and ignore what does not
matter (line endings, dictionary order of constants, the contents of arrays).
"""
from __future__ import annotations

import ast
import enum
import functools
import hashlib
import inspect
import io
import json
import textwrap
import tokenize
from collections.abc import Mapping, Sequence
from typing import Any, Callable

__all__ = ["HASH_LENGTH", "stable_hash", "hash_source", "hash_space", "hash_problem", "describe_callable"]

HASH_LENGTH = 16
"""Hex digits kept from the sha256 (64 bits): short enough to read in a diff, ample against collisions."""


def _digest(tag: str, payload: bytes) -> str:
    # The tag keeps hashes of different kinds apart: a source and a space never share a fingerprint.
    return hashlib.sha256(tag.encode("ascii") + b"\0" + payload).hexdigest()[:HASH_LENGTH]


def _jsonable(obj: Any, where: str = "value") -> Any:
    """Plain JSON data from ``obj``: tuples as lists, numpy scalars/arrays via ``tolist``, enums by value."""
    if isinstance(obj, enum.Enum):
        obj = obj.value
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return float(obj)
    if isinstance(obj, Mapping):
        out = {}
        for k, v in obj.items():
            k = k.value if isinstance(k, enum.Enum) else k
            if not isinstance(k, str):
                # JSON would turn 1 into "1" and make {1: x} and {"1": x} collide.
                raise TypeError(f"stable_hash: {where} has a non-string key {k!r}")
            out[str(k)] = _jsonable(v, f"{where}[{k!r}]")
        return out
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v, f"{where}[{i}]") for i, v in enumerate(obj)]
    tolist = getattr(obj, "tolist", None)
    if callable(tolist) and hasattr(obj, "dtype"):
        return _jsonable(tolist(), where)
    raise TypeError(f"stable_hash: {where} is not JSON data: {type(obj).__qualname__}")


def _canonical(obj: Any) -> bytes:
    # sort_keys: mapping order is never meaningful here; floats use repr (shortest round trip).
    return json.dumps(_jsonable(obj), sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def stable_hash(obj: Any) -> str:
    """Hash of JSON-able data (dicts with string keys, lists/tuples, str, numbers, bool, None).

    Dict key order is ignored; list order, types (``1`` vs ``1.0``) and values are not.
    Raises ``TypeError`` for anything else rather than hashing an unstable ``repr``.
    """
    return _digest("json", _canonical(obj))


def _normalize_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def hash_source(text: str | bytes) -> str:
    """Hash of kernel source; a checkout with CRLF line endings gives the same hash as one with LF."""
    if isinstance(text, bytes):
        data = text.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    elif isinstance(text, str):
        data = _normalize_newlines(text).encode("utf-8", "surrogatepass")
    else:
        raise TypeError(f"hash_source expects str or bytes, got {type(text).__qualname__}")
    return _digest("source", data)


def kernel_source_hash(code: str, kernel_name: str, compiler_options: Sequence[str] = (),
                       headers: Mapping[str, str] | None = None) -> str:
    """The ``hashes.source`` of a source kernel (``autotune.kernel``): its code, the kernel it
    launches, the compiler options and the local headers it includes (name and text), since each of
    them can change the best configuration. Without headers the hash is what it always was."""
    text = code + "\n#kernel " + kernel_name + "\n" + "\n".join(compiler_options)
    for name, header in sorted((headers or {}).items()):
        text += f"\n#header {name}\n" + _normalize_newlines(header)
    return hash_source(text)


# --------------------------------------------------------------------------- callables


_OPEN_FOR = {")": "f(", "]": "[", "}": "{"}  # "f(" so that keyword arguments parse as a call
_CLOSE_FOR = {"(": ")", "[": "]", "{": "}"}


def _parse_fragment(source: str) -> tuple[ast.AST, str] | None:
    """Parse the lines ``inspect.getsource`` returns for a lambda, which may start or end
    mid-expression (``restrictions=[lambda p: ..., lambda q: ...],`` across lines): brackets
    left open or closed are balanced by adding their partners around the text."""
    lines = _normalize_newlines(source).strip().splitlines()
    if not lines:
        return None
    fragment = "\n".join([lines[0].lstrip().lstrip("@"), *lines[1:]])  # a decorator line parses as a call
    stack: list[str] = []
    missing_openers: list[str] = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(fragment).readline):
            if tok.type == tokenize.OP and tok.string in _CLOSE_FOR:
                stack.append(tok.string)
            elif tok.type == tokenize.OP and tok.string in _OPEN_FOR:
                if stack:
                    stack.pop()
                else:
                    missing_openers.append(_OPEN_FOR[tok.string])
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass  # an unclosed bracket at the end: what the stack holds is all we need
    prefix = "".join(reversed(missing_openers))
    suffix = "".join(_CLOSE_FOR[b] for b in reversed(stack))
    body = prefix + fragment + suffix
    for candidate in (body, body.rstrip().rstrip(",;\\").rstrip()):
        try:
            return ast.parse(candidate), candidate
        except SyntaxError:
            continue
    return None


def _lambda_source(func: Callable[..., Any], source: str) -> str:
    """The text of just this lambda, when it can be told apart on its source line(s).

    ``inspect.getsource`` of a lambda returns the whole statement around it (e.g. the
    ``@pytest.mark.tune(...)`` call), which would make unrelated edits on that line
    change the space hash.
    """
    parsed = _parse_fragment(source)
    if parsed is None:
        return source
    tree, fragment = parsed
    code = getattr(func, "__code__", None)
    if code is None:
        return source
    argnames = list(code.co_varnames[: code.co_argcount + code.co_kwonlyargcount])
    segments = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Lambda):
            args = node.args
            names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
            if names == argnames:
                segment = ast.get_source_segment(fragment, node)
                if segment:
                    segments.append(segment)
    if len(set(segments)) == 1:
        return segments[0]
    # Several lambdas with the same signature on one line: pick the one that compiles to this code.
    matching = []
    for segment in set(segments):
        try:
            compiled = compile(segment, "<lambda>", "eval")
        except SyntaxError:  # pragma: no cover - segments come from a successful parse
            continue
        inner = [c for c in compiled.co_consts if inspect.iscode(c)]
        if inner and inner[0].co_code == code.co_code and inner[0].co_consts == code.co_consts:
            matching.append(segment)
    return matching[0] if len(matching) == 1 else source


def describe_callable(func: Callable[..., Any]) -> dict[str, Any]:
    """Stable description of a callable: qualified name and, when available, its source text.

    Never its ``repr`` (it contains a memory address) or bytecode (it changes across
    Python versions).
    """
    if isinstance(func, functools.partial):
        return {
            "partial": describe_callable(func.func),
            "args": _describe_value(list(func.args)),
            "keywords": _describe_value(dict(func.keywords)),
        }
    target = func if (inspect.isroutine(func) or inspect.isclass(func)) else type(func)  # instance -> its class
    target = getattr(target, "__func__", target)  # bound method -> function
    name = getattr(target, "__qualname__", None) or type(target).__qualname__
    try:
        source: str | None = inspect.getsource(target)
    except (OSError, TypeError):
        source = None
    if source is None:
        # Without source, the module is what tells two same-named callables apart. With it, the
        # module is left out: pytest's import mode decides whether a test module is "tests.test_x"
        # or "test_x", and that must not change the hash.
        name = f"{getattr(target, '__module__', None) or '?'}.{name}"
        code = getattr(target, "__code__", None)
        if code is not None:
            # Defined in a REPL or exec'd string: the code itself is all there is to tell lambdas apart.
            # (Bytecode differs across Python versions, but so does nothing else that is stable here.)
            consts = [repr(c) for c in code.co_consts if isinstance(c, (int, float, str, bytes, tuple, type(None)))]
            return {"callable": name, "source": None, "code": [code.co_code.hex(), list(code.co_names), consts]}
    if source is not None:
        source = textwrap.dedent(_normalize_newlines(source))
        if getattr(target, "__name__", "") == "<lambda>":
            source = _lambda_source(target, source)
    return {"callable": name, "source": source}


def _describe_value(value: Any) -> Any:
    if isinstance(value, functools.partial) or (callable(value) and not isinstance(value, type)):
        return describe_callable(value)
    if isinstance(value, Mapping):
        return {str(k): _describe_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_describe_value(v) for v in value]
    return _jsonable(value)


# --------------------------------------------------------------------------- space and problem


def hash_space(
    params: Mapping[str, Sequence[Any]],
    restrictions: str | Callable[..., Any] | Sequence[str | Callable[..., Any]] | None = None,
    constants: Mapping[str, Any] | None = None,
) -> str:
    """Hash of a search space definition.

    Parameter order and the order of each parameter's values matter (they define
    the index encoding strategies search over); restrictions are hashed as written
    (strings verbatim modulo surrounding whitespace, callables by qualified name and
    source); constants are a mapping, so their order does not matter.
    """
    if not isinstance(params, Mapping):
        raise TypeError(f"hash_space: params must be a mapping of name -> values, got {type(params).__qualname__}")
    param_list = []
    for name, values in params.items():
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) and not hasattr(values, "tolist"):
            values = [values]
        param_list.append([str(name), _jsonable(list(values), f"params[{name!r}]")])
    if restrictions is None:
        restriction_list: list[Any] = []
    elif isinstance(restrictions, str) or callable(restrictions):
        restriction_list = [restrictions]
    else:
        restriction_list = list(restrictions)
    described = []
    for r in restriction_list:
        if isinstance(r, str):
            described.append(r.strip())
        elif callable(r):
            described.append(describe_callable(r))
        else:
            raise TypeError(f"hash_space: a restriction must be a string or a callable, got {type(r).__qualname__}")
    payload = {"params": param_list, "restrictions": described, "constants": _jsonable(dict(constants or {}), "constants")}
    return _digest("space", _canonical(payload))


def _describe_arg(arg: Any) -> Any:
    if isinstance(arg, enum.Enum):
        arg = arg.value
    if arg is None or isinstance(arg, (bool, int, float, str)):
        return {"type": type(arg).__name__ if not isinstance(arg, bool) else "bool", "value": _jsonable(arg)}
    shape = getattr(arg, "shape", None)
    dtype = getattr(arg, "dtype", None)
    if dtype is not None and shape is not None:
        if shape == () and callable(getattr(arg, "tolist", None)):
            # numpy scalar or 0-d array: a kernel scalar argument, whose value matters.
            return {"scalar": str(dtype), "value": _jsonable(arg.tolist())}
        return {"array": [int(s) for s in shape], "dtype": str(dtype)}  # never the contents
    if isinstance(arg, Mapping):
        return {"mapping": {str(k): _describe_arg(v) for k, v in sorted(arg.items(), key=lambda kv: str(kv[0]))}}
    if isinstance(arg, (list, tuple)):
        return {"sequence": [_describe_arg(v) for v in arg]}
    if isinstance(arg, (bytes, bytearray)):
        return {"bytes": len(arg)}
    cls = type(arg)
    return {"object": f"{cls.__module__}.{cls.__qualname__}"}


def hash_problem(problem_size: Any, args: Sequence[Any] | Mapping[str, Any] = (),
                 constant_memory: Mapping[str, Any] | None = None) -> str:
    """Hash of the problem a kernel was tuned for.

    Arrays contribute their shape and dtype (the values are test data and do not
    change the best configuration); scalars contribute their type and value (``n``,
    ``alpha``: they do). Objects of other types contribute only their type.
    ``constant_memory`` (a CUDA kernel's ``__constant__`` arrays) counts as the
    arguments do, by symbol; none leaves the hash as it was before there was any.
    """
    payload = {"problem_size": _describe_arg(problem_size), "args": _describe_arg(args)}
    if constant_memory:
        payload["constant_memory"] = _describe_arg(dict(constant_memory))
    return _digest("problem", _canonical(payload))
