"""Kernel specification: what to compile, with which arguments, launched how.

Everything a runner needs to reproduce one configuration exactly is a pure
function of ``(spec, params)``: :func:`render_source` (the compiled text),
:func:`instantiated_name` (the kernel symbol, templates substituted) and
:func:`launch_geometry` (grid, block, dynamic shared memory; :func:`ndrange`
turns it into OpenCL's global and local sizes). Runners never invent anything
else, so a lockfile entry can be replayed byte for byte.

Expressions in ``grid_div_*``, ``block_size_names``, ``problem_size`` and
``shared_mem`` are parsed with :mod:`ast` and evaluated over a whitelist
(numbers, parameter names, ``+ - * / // % **``, unary minus, parentheses);
user strings are never passed to ``eval``.
"""
from __future__ import annotations

import ast
import copy
import functools
import hashlib
import math
import operator
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, Union

import numpy as np

from ..backends import registry
from ..errors import InvalidConfiguration, SpecError
from .includes import headers_digest, include_dirs, local_headers

Number = Union[int, float]
Expr = Union[str, int]
Geometry = tuple[tuple[int, int, int], tuple[int, int, int], int]
Dim3 = tuple[int, int, int]

DEFAULT_BLOCK_SIZE_NAMES = ("block_size_x", "block_size_y", "block_size_z")
CHECKS = ("races", "memory")  # KernelSpec.check: what Oclgrind looks for before a configuration is timed
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_KERNEL_NAME = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*)\s*(<.*>)?\s*\Z", re.S)
_IDENT_IN_TEXT = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*\b")
_AXES = ("x", "y", "z")
_MAX_EXPR_LEN = 1000
_MAX_EXPONENT = 64


# ----------------------------------------------------------------------------
# Safe arithmetic expressions
# ----------------------------------------------------------------------------
_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARYOPS: dict[type, Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}


@functools.lru_cache(maxsize=4096)
def _parse_expr(text: str) -> ast.expr:
    """Parse and whitelist-check once; evaluation of a cached tree is cheap."""
    if len(text) > _MAX_EXPR_LEN:
        raise SpecError(f"expression longer than {_MAX_EXPR_LEN} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as exc:
        raise SpecError(f"cannot parse expression {text!r}: {exc.msg}") from None
    for node in ast.walk(tree):
        if isinstance(node, (ast.BinOp, ast.UnaryOp, ast.Name, ast.Load)):
            if isinstance(node, ast.BinOp) and type(node.op) not in _BINOPS:
                raise SpecError(f"operator {type(node.op).__name__} not allowed in {text!r}")
            if isinstance(node, ast.UnaryOp) and type(node.op) not in _UNARYOPS:
                raise SpecError(f"operator {type(node.op).__name__} not allowed in {text!r}")
            continue
        if type(node) in _BINOPS or type(node) in _UNARYOPS:
            continue
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            continue
        raise SpecError(
            f"{type(node).__name__} not allowed in expression {text!r}: "
            "only numbers, parameter names and + - * / // % ** are"
        )
    return tree


def _eval_node(node: ast.expr, params: Mapping[str, Any], text: str) -> Number:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in params:
            raise SpecError(f"expression {text!r} names {node.id!r}, which is not a tunable parameter")
        value = params[node.id]
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise SpecError(f"parameter {node.id!r} = {value!r} is not a number (in {text!r})")
        return value.item() if isinstance(value, np.generic) else value
    if isinstance(node, ast.UnaryOp):
        return _UNARYOPS[type(node.op)](_eval_node(node.operand, params, text))
    if isinstance(node, ast.BinOp):
        left = _eval_node(node.left, params, text)
        right = _eval_node(node.right, params, text)
        if isinstance(node.op, ast.Pow) and abs(right) > _MAX_EXPONENT:
            raise SpecError(f"exponent {right} too large in {text!r}")
        try:
            return _BINOPS[type(node.op)](left, right)
        except ZeroDivisionError:
            raise InvalidConfiguration(f"division by zero in {text!r}") from None
    raise SpecError(f"cannot evaluate {text!r}")  # pragma: no cover - whitelist forbids


def eval_expr(expr: Expr, params: Mapping[str, Any]) -> Number:
    """Evaluate a whitelisted arithmetic expression (or a plain number) over ``params``."""
    if isinstance(expr, (bool, np.bool_)):
        raise SpecError(f"boolean {expr!r} is not a size")
    if isinstance(expr, (int, np.integer)):
        return int(expr)
    if isinstance(expr, (float, np.floating)):
        return float(expr)
    if not isinstance(expr, str):
        raise SpecError(f"expected an expression string or a number, got {expr!r}")
    value = _eval_node(_parse_expr(expr), params, expr)
    if isinstance(value, complex):
        raise InvalidConfiguration(f"expression {expr!r} has no real value for these parameters")
    return value


def expr_names(expr: Expr) -> set[str]:
    """Parameter names an expression refers to (validates the expression)."""
    if not isinstance(expr, str):
        return set()
    return {n.id for n in ast.walk(_parse_expr(expr)) if isinstance(n, ast.Name)}


def _as_positive_int(value: Number, what: str) -> int:
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            raise InvalidConfiguration(f"{what} = {value} is not a whole number")
        value = int(value)
    if value <= 0:
        raise InvalidConfiguration(f"{what} = {value} must be positive")
    return int(value)


@dataclass(frozen=True)
class LocalMemory:
    """A ``__local`` pointer argument of an OpenCL kernel: ``nbytes`` of work-group local memory.

    ``nbytes`` is a number or an expression over the tunable parameters
    (``"block_size_x * 4"``), evaluated per configuration, so the local
    memory can follow the work-group size the way CUDA's dynamic shared
    memory follows ``shared_mem``.
    """

    nbytes: Expr

    def __post_init__(self) -> None:
        if isinstance(self.nbytes, (bool, np.bool_)) or not isinstance(self.nbytes, (int, np.integer, str)):
            raise SpecError(f"LocalMemory size must be an int or an expression string, got {self.nbytes!r}")
        expr_names(self.nbytes)  # validate early

    def size(self, params: Mapping[str, Any]) -> int:
        """Bytes for ``params``; InvalidConfiguration when the expression is not a positive whole number."""
        return _as_positive_int(eval_expr(self.nbytes, params), f"LocalMemory({self.nbytes!r})")


# ----------------------------------------------------------------------------
# Specification
# ----------------------------------------------------------------------------
@dataclass
class KernelSpec:
    """One tunable kernel: source, arguments, problem size and how to launch it.

    ``source`` is a file path (``.cu``, ``.c``, ``.cpp``...) or the source text.
    ``args`` are numpy arrays and numpy scalars in kernel order (numpy scalars,
    not Python numbers, so the C type is never guessed), and for OpenCL
    :class:`LocalMemory` for a ``__local`` pointer. ``grid_div_x/y/z``
    list parameter names or expressions the problem size is divided by
    (rounding up); ``None`` means "the matching block-size parameter if it is
    tunable". ``expected`` is aligned with ``args`` (``None`` skips one);
    array arguments with an expected value are the outputs: restored before
    every run and returned. Without ``expected`` every array is treated as an
    output.
    """

    source: Union[str, os.PathLike]
    kernel_name: str
    problem_size: Union[Expr, Sequence[Expr]]
    args: Sequence[Any]
    grid_div_x: Sequence[Expr] | None = None
    grid_div_y: Sequence[Expr] | None = None
    grid_div_z: Sequence[Expr] | None = None
    block_size_names: Sequence[Expr] = ("block_size_x", "block_size_y", "block_size_z")
    compiler_options: Sequence[str] = ()
    shared_mem: Expr | None = None
    expected: Sequence[Any] | None = None
    atol: float | None = None
    rtol: float | None = None
    verify: Callable[[Sequence[Any] | None, Sequence[Any]], Any] | None = None
    lang: str | None = None
    check: str | None = None
    constant_memory: Mapping[str, Any] | None = None

    code: str = field(init=False, repr=False)
    source_file: Path | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.code, self.source_file = _load_source(self.source)
        self.lang = _infer_language(self.lang, self.source_file, self.code, self.kernel_name)
        if not _KERNEL_NAME.match(self.kernel_name or ""):
            raise SpecError(f"kernel_name {self.kernel_name!r} is not a function name or a template expression")
        self.args = [_check_arg(i, a) for i, a in enumerate(self.args)]
        self.compiler_options = tuple(str(o) for o in self.compiler_options)
        size = self.problem_size
        size = (size,) if isinstance(size, (int, str, np.integer)) else tuple(size)
        if not 1 <= len(size) <= 3:
            raise SpecError(f"problem_size must have 1 to 3 dimensions, got {self.problem_size!r}")
        self.problem_size = tuple(int(s) if isinstance(s, np.integer) else s for s in size)
        for s in self.problem_size:
            if not isinstance(s, (int, str)) or isinstance(s, bool):
                raise SpecError(f"problem_size entries must be ints or expressions, got {s!r}")
            expr_names(s)  # validate early
        names = (self.block_size_names,) if isinstance(self.block_size_names, str) else tuple(self.block_size_names)
        if not 1 <= len(names) <= 3:
            raise SpecError(f"block_size_names needs one to three entries (x, y, z), got {self.block_size_names!r}")
        # as Kernel Tuner does, the axes not named keep their default names
        self.block_size_names = names + DEFAULT_BLOCK_SIZE_NAMES[len(names):]
        for entry in (*self.block_size_names, self.shared_mem):
            expr_names(entry) if entry is not None else None
        for axis in _AXES:
            divs = getattr(self, f"grid_div_{axis}")
            if divs is not None:
                divs = [divs] if isinstance(divs, (str, int)) else list(divs)
                for d in divs:
                    expr_names(d)
                setattr(self, f"grid_div_{axis}", tuple(divs))
        if self.verify is not None and not callable(self.verify):
            raise SpecError("verify must be a callable verify(expected, outputs) -> bool")
        if self.expected is not None:
            self.expected = _check_expected(self.args, self.expected, custom=self.verify is not None)
        if self.check is not None and self.check not in CHECKS:
            raise SpecError(f"check={self.check!r} is not a known check; use one of {', '.join(map(repr, CHECKS))}")
        self.constant_memory = _check_constant_memory(self.constant_memory, self.lang)

    # -- derived facts -------------------------------------------------------
    @property
    def base_name(self) -> str:
        """Function name without template arguments (``matmul`` of ``matmul<tx, ty>``)."""
        return split_template(self.kernel_name)[0]

    @property
    def is_template(self) -> bool:
        return split_template(self.kernel_name)[1] is not None

    @property
    def output_indices(self) -> tuple[int, ...]:
        """Array arguments the kernel may write: restored before each run, returned, verified."""
        arrays = [i for i, a in enumerate(self.args) if isinstance(a, np.ndarray)]
        if self.expected is None:
            return tuple(arrays)
        return tuple(i for i in arrays if self.expected[i] is not None)

    def source_hash(self) -> str:
        """sha256 of the kernel source text (what a lockfile entry pins)."""
        return hashlib.sha256(self.code.encode()).hexdigest()

    def problem_signature(self) -> dict[str, Any]:
        """Problem size and argument shapes/dtypes: what makes two problems the same."""
        return {
            "problem_size": list(self.problem_size),
            "args": [
                {"shape": list(a.shape), "dtype": a.dtype.str} if isinstance(a, np.ndarray)
                else {"local_memory": str(a.nbytes)} if isinstance(a, LocalMemory)
                else {"scalar": np.asarray(a).dtype.str}
                for a in self.args
            ],
        }

    def grid_div(self, axis: int) -> tuple[Expr, ...] | None:
        return getattr(self, f"grid_div_{_AXES[axis]}")


def with_code(spec: KernelSpec, code: str, kernel_name: str | None = None,
              compiler_options: Sequence[str] | None = None) -> KernelSpec:
    """The same kernel built from another source text (a locked version of an edited file).

    Arguments, launch geometry and verification stay; the source file's folder
    stays too, so ``#include`` of a neighbouring header resolves as before.
    """
    other = copy.copy(spec)
    other.code = code
    if kernel_name is not None:
        if not _KERNEL_NAME.match(kernel_name):
            raise SpecError(f"kernel_name {kernel_name!r} is not a function name or a template expression")
        other.kernel_name = kernel_name
    if compiler_options is not None:
        other.compiler_options = tuple(str(o) for o in compiler_options)
    return other


def _looks_like_path(source: str) -> bool:
    return "\n" not in source and "{" not in source and len(source) < 4096


def locate_source(source: Any, folders: Sequence[tuple[Path, str]]) -> Any:
    """A relative kernel path found in the first of ``folders`` (``(folder, what it is)``) that has it.

    Source text, absolute paths and anything that is not a path are returned
    as they are. A relative path with a kernel suffix found in none of the
    folders is a :class:`SpecError` naming every place looked at. Only where
    the file is read changes: the lock stores sources by content, never by path.
    """
    if isinstance(source, os.PathLike):
        path = Path(source)
    elif isinstance(source, str) and _looks_like_path(source):
        path = Path(source)
    else:
        return source
    if path.is_absolute() or not folders:
        return source
    for folder, _ in folders:
        candidate = folder / path
        if candidate.is_file():
            return candidate
    if isinstance(source, os.PathLike) or (registry.for_suffix(path.suffix) is not None
                                           and path.suffix == path.suffix.lower()):
        tried = " and ".join(f"{folder / path} ({what})" for folder, what in folders)
        raise SpecError(f"kernel source file {str(source)!r} does not exist: looked for {tried}")
    return source


def _load_source(source: Union[str, os.PathLike]) -> tuple[str, Path | None]:
    if isinstance(source, os.PathLike):
        path = Path(source)
    elif isinstance(source, str):
        if not _looks_like_path(source):
            return source, None
        path = Path(source)
        if not path.is_file():
            if registry.for_suffix(path.suffix) is not None and path.suffix == path.suffix.lower():
                raise SpecError(f"kernel source file {source!r} does not exist")
            return source, None
    else:
        raise SpecError(f"source must be a path or source text, got {type(source).__name__}")
    try:
        return path.read_text(), path.resolve()
    except OSError as exc:
        raise SpecError(f"cannot read kernel source {str(path)!r}: {exc}") from None


def _infer_language(lang: str | None, path: Path | None, code: str, kernel_name: str) -> str:
    if lang is not None:
        known = registry.language(lang)
        if known is None:
            names = ", ".join(repr(x.name) for x in registry.languages())
            raise SpecError(f"unknown lang {lang!r}; use one of {names}") from None
        return known.name
    by_suffix = registry.for_suffix(path.suffix) if path is not None else None
    if path is not None and by_suffix is not None:
        if path.suffix.lower() in (".c", ".h") and "__global__" in code:
            return "cuda"
        return by_suffix.name
    if "__global__" in code:
        return "cuda"
    if re.search(r"\b__kernel\b", code):
        return "opencl"
    if "<" in kernel_name or re.search(r"\b(template|namespace|extern\s+\"C\")", code):
        return "c++"
    return "c"


def _check_arg(i: int, arg: Any) -> Any:
    if isinstance(arg, np.ndarray):
        if arg.ndim == 0:
            return arg[()]
        if arg.dtype.hasobject:
            raise SpecError(f"argument {i} is an object array; kernels need numeric dtypes")
        return np.ascontiguousarray(arg)
    if isinstance(arg, (np.generic, LocalMemory)):
        return arg
    if hasattr(arg, "__cuda_array_interface__"):
        raise SpecError(f"argument {i} is a device array; pass host numpy arrays, the runner allocates device buffers")
    if isinstance(arg, (bool, int, float, complex)):
        raise SpecError(
            f"argument {i} is a Python {type(arg).__name__} ({arg!r}); pass a numpy scalar "
            "such as np.int32(n) or np.float32(x) so the C type is unambiguous"
        )
    raise SpecError(f"argument {i} has unsupported type {type(arg).__name__}; use numpy arrays or numpy scalars")


def _check_constant_memory(values: Any, lang: str | None) -> dict[str, np.ndarray]:
    """``{symbol: contiguous array}``; refused for other languages, with what to do there instead."""
    if values is None:
        return {}
    if not isinstance(values, Mapping):
        raise SpecError(f"constant_memory must be a dict of __constant__ symbol name -> numpy array, got "
                        f"{type(values).__name__}")
    if values and lang != "cuda":
        where = ("an OpenCL __constant pointer is an ordinary buffer argument: pass the array in args"
                 if lang == "opencl" else f"{lang} kernels have none: pass the array in args")
        raise SpecError(f"constant_memory fills CUDA __constant__ symbols; {where}")
    out: dict[str, np.ndarray] = {}
    for name, value in values.items():
        if not isinstance(name, str) or not _IDENT.match(name):
            raise SpecError(f"constant_memory key {name!r} is not a C identifier (the __constant__ symbol's name)")
        if isinstance(value, np.generic):
            value = np.asarray(value)
        if not isinstance(value, np.ndarray):
            raise SpecError(f"constant_memory[{name!r}] is a {type(value).__name__}; pass a numpy array (or numpy "
                            "scalar) of the symbol's type, e.g. np.asarray(values, dtype=np.float32)")
        if value.dtype.hasobject or value.size == 0:
            raise SpecError(f"constant_memory[{name!r}] must be a non-empty numeric array, got "
                            f"{value.dtype} of shape {value.shape}")
        out[name] = np.ascontiguousarray(value)
    return out


def describe_expected(expected: Any) -> str:
    """What was passed as ``expected`` when it is not a list (for the error that says to wrap it)."""
    if isinstance(expected, np.ndarray):
        return f"an array of shape {expected.shape}"
    return f"a {type(expected).__name__}"


def _wrapped_hint(args: Sequence[Any], expected: Any) -> str:
    """``[None, ref, None]`` with ``ref`` where the only argument of the reference's shape sits."""
    shape = getattr(expected, "shape", None)
    same = [i for i, a in enumerate(args) if isinstance(a, np.ndarray) and a.shape == shape]
    at = same[0] if len(same) == 1 else 0
    items = ["ref" if i == at else "None" for i in range(len(args))]
    return "[" + ", ".join(items if len(items) <= 6 else [*items[:at + 1], "..."]) + "]"


def _check_expected(args: Sequence[Any], expected: Sequence[Any], custom: bool = False) -> list[Any]:
    """``expected`` aligned with ``args``; with a ``verify`` callable (``custom``) its entries are the callable's
    business (Kernel Tuner's ``answer=[numpy.sum(x), None]``): only the alignment is checked, no shape or dtype."""
    if isinstance(expected, np.ndarray) or not isinstance(expected, (list, tuple)):
        raise SpecError(f"expected must be a list with one entry per argument ({len(args)} here), got "
                        f"{describe_expected(expected)}; wrap the array: expected={_wrapped_hint(args, expected)} "
                        "(None where an argument is not an output)")
    expected = list(expected)
    if len(expected) != len(args):
        raise SpecError(f"expected has {len(expected)} entries but there are {len(args)} arguments; use None to skip one")
    out: list[Any] = []
    for i, (arg, exp) in enumerate(zip(args, expected)):
        if exp is None:
            out.append(None)
            continue
        if custom or not isinstance(arg, np.ndarray):
            out.append(exp)
            continue
        exp_arr = np.asarray(exp)
        if exp_arr.shape != arg.shape:
            raise SpecError(f"expected[{i}] has shape {exp_arr.shape} but argument {i} has shape {arg.shape}")
        if exp_arr.dtype != arg.dtype:
            raise SpecError(
                f"expected[{i}] has dtype {exp_arr.dtype} but argument {i} is {arg.dtype}; "
                f"convert the reference with .astype(np.{arg.dtype.name})"
            )
        out.append(exp_arr)
    return out


# ----------------------------------------------------------------------------
# Per-configuration rendering
# ----------------------------------------------------------------------------
def split_template(name: str) -> tuple[str, str | None]:
    """``"matmul<tx, ty>"`` -> ``("matmul", "tx, ty")``; ``"vadd"`` -> ``("vadd", None)``."""
    match = _KERNEL_NAME.match(name)
    if not match:
        raise SpecError(f"kernel_name {name!r} is not a function name or a template expression")
    base, targs = match.group(1), match.group(2)
    return base, (targs[1:-1].strip() if targs else None)


def template_parameters(spec: KernelSpec) -> set[str]:
    """Identifiers used in the kernel name's template argument list."""
    targs = split_template(spec.kernel_name)[1]
    return set(_IDENT_IN_TEXT.findall(targs)) if targs else set()


def format_value(value: Any) -> str:
    """How a parameter value appears in C/C++/CUDA source."""
    if isinstance(value, (bool, np.bool_)):
        return "1" if value else "0"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        if not math.isfinite(float(value)):
            raise SpecError(f"parameter value {value!r} cannot be written as a C literal")
        return repr(float(value))
    if isinstance(value, str) and value and "\n" not in value:
        return value
    raise SpecError(f"parameter value {value!r} of type {type(value).__name__} cannot be written into source")


def instantiated_name(spec: KernelSpec, params: Mapping[str, Any]) -> str:
    """Kernel name with template arguments substituted: ``matmul<16, 8>``."""
    base, targs = split_template(spec.kernel_name)
    if targs is None:
        return base

    def substitute(match: re.Match[str]) -> str:
        word = match.group(0)
        return format_value(params[word]) if word in params else word

    return f"{base}<{_IDENT_IN_TEXT.sub(substitute, targs)}>"


def render_source(spec: KernelSpec, params: Mapping[str, Any]) -> str:
    """Exact source compiled for ``params``.

    Every parameter becomes ``#define NAME value`` (sorted by name, so the text
    does not depend on dict order), except those used as template arguments of
    the kernel name: a macro named like a template parameter would rewrite the
    template's own declaration. A ``#line 1`` directive follows so compiler
    messages point at the user's own line numbers.
    """
    skip = template_parameters(spec)
    lines = []
    for name in sorted(params):
        if not _IDENT.match(name):
            raise SpecError(f"parameter name {name!r} is not a valid C identifier")
        if name not in skip:
            lines.append(f"#define {name} {format_value(params[name])}")
    filename = spec.source_file.name if spec.source_file else f"kernel{_default_suffix(spec.lang)}"
    lines.append(f'#line 1 "{filename}"')
    code = spec.code if spec.code.endswith("\n") else spec.code + "\n"
    # the local headers' digests at the end (line numbers stay): every build cache keys on this text
    tail = headers_digest(spec_headers(spec))
    return "\n".join(lines) + "\n" + code + (tail + "\n" if tail else "")


def spec_headers(spec: KernelSpec) -> dict[str, str]:
    """The local headers the kernel's source reaches (see :mod:`.includes`)."""
    if '#' not in spec.code or 'include' not in spec.code:
        return {}
    return local_headers(spec.code, include_dirs(spec.source_file, spec.compiler_options))


def _default_suffix(lang: str | None) -> str:
    known = registry.language(lang)
    return known.suffix if known is not None and known.suffixes else ".c"


def problem_dims(spec: KernelSpec, params: Mapping[str, Any]) -> tuple[int, int, int]:
    """Problem size as three ints (missing dimensions are 1)."""
    dims = [eval_expr(s, params) for s in spec.problem_size]
    dims += [1] * (3 - len(dims))
    return tuple(_as_positive_int(d, f"problem size {_AXES[i]}") for i, d in enumerate(dims))  # type: ignore[return-value]


def block_dims(spec: KernelSpec, params: Mapping[str, Any]) -> tuple[int, int, int]:
    """Thread-block shape; a block-size name that is not tunable means 1."""
    dims = []
    for axis, entry in zip(_AXES, spec.block_size_names):
        if isinstance(entry, str) and _IDENT.match(entry.strip()) and entry.strip() not in params:
            dims.append(1)
        else:
            dims.append(_as_positive_int(eval_expr(entry, params), f"block size {axis}"))
    return tuple(dims)  # type: ignore[return-value]


def thread_block_restriction(spec: KernelSpec, params: Mapping[str, Any]) -> str | None:
    """``"block_size_x * block_size_y <= max_threads"``: Kernel Tuner's implicit restriction over the block-size
    entries that are tuned (by ``block_size_names``), ``None`` when none is. ``max_threads`` is the device's limit
    (a restriction constant: every GPU runner and architecture table has it)."""
    tuned = []
    for entry in spec.block_size_names:
        names = expr_names(entry) if isinstance(entry, str) else set()
        if names and names <= set(params):
            tuned.append(entry.strip() if _IDENT.match(entry.strip()) else f"({entry.strip()})")
    return f"{' * '.join(tuned)} <= max_threads" if tuned else None


def grid_divisors(spec: KernelSpec, params: Mapping[str, Any], axis: int) -> tuple[Expr, ...]:
    divs = spec.grid_div(axis)
    if divs is not None:
        return tuple(divs)
    default = spec.block_size_names[axis]
    return (default,) if isinstance(default, str) and default in params else ()


def launch_geometry(spec: KernelSpec, params: Mapping[str, Any]) -> Geometry:
    """``(grid, block, dynamic_shared_mem_bytes)`` for ``params``.

    Grid dimension = ceil(problem size / product of the divisors). Raises
    :class:`InvalidConfiguration` for a zero/negative/non-integral result and
    :class:`SpecError` for an expression that names an unknown parameter.
    """
    problem = problem_dims(spec, params)
    grid = []
    for axis in range(3):
        divisor: Number = 1
        for d in grid_divisors(spec, params, axis):
            divisor = divisor * eval_expr(d, params)
        if divisor <= 0:
            raise InvalidConfiguration(f"grid divisor for {_AXES[axis]} is {divisor}, must be positive")
        if isinstance(divisor, int):
            grid.append(-(-problem[axis] // divisor))
        else:
            grid.append(math.ceil(problem[axis] / divisor))
    smem = 0
    if spec.shared_mem is not None:
        value = eval_expr(spec.shared_mem, params)
        if value < 0:
            raise InvalidConfiguration(f"shared memory size {value} is negative")
        smem = int(math.ceil(value))
    return tuple(grid), block_dims(spec, params), smem  # type: ignore[return-value]


def ndrange(geometry: Geometry) -> tuple[Dim3, Dim3]:
    """OpenCL's ``(global, local)`` work sizes for a launch geometry.

    OpenCL counts work-items, not work-groups: global = grid * block on each
    axis, so a kernel tuned with ``block_size_*`` and ``grid_div_*`` gets the
    same decomposition on an OpenCL device as on a CUDA one.
    """
    grid, block, _ = geometry
    return tuple(g * b for g, b in zip(grid, block)), tuple(block)  # type: ignore[return-value]
