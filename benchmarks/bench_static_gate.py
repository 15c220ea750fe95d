#!/usr/bin/env python
"""The static gate (issue 38) against edits made on purpose: does the binary say what the edit did?

For each example kernel as its runner builds it (``vector_add``, ``matmul``,
``convolution``, ``reduction`` through NVRTC as the cupy runner does;
``vector_add`` through nvcc as the pycuda runner does; ``vector_add`` with a
local header, both compilers; the Triton ``softmax_kernel``) a fixed *locked*
configuration (:data:`LOCKED`: a representative winner, valid in the example's
space under each architecture's limits, checked) is built from the kernel as
committed and profiled as a lock entry records it. Then each edit is applied as
a text transformation of the source (an edited copy in a temporary folder: the
committed files are never touched), or as a changed compiler option or
configuration, and the locked configuration is rebuilt, profiled and compared
with :func:`pytest_autotune.lifecycle.static_gate.build_profile` and
:func:`pytest_autotune.gate.static.compare_profiles`, the gate's own calls.
The seconds of a row are that rebuild + profile + compare: what the gate costs
per kernel and architecture.

Each edit carries its expectation, fixed here before the run and never
adjusted to a result: ``identical``, ``changed/worse`` (the code must differ),
``worse``, or ``report`` (no prediction: launch-bound changes). An edit that
does not apply to a kernel is listed as n/a with the reason, not faked. A
*spill/occupancy regression* is a row whose build has more local-memory
instructions (``LDL``/``STL`` in the SASS), more spilled bytes, a larger stack
frame or a lower theoretical occupancy than the lock's; the summary says how
many of them the gate called ``worse``.

``--timed`` would put the timed gate's verdict beside each row on a GPU; this
version does not time anything (without a GPU it says so and every row reads
"no GPU").

    PYTHONPATH=example_project/src python benchmarks/bench_static_gate.py [--arch sm_80,sm_90] [--only vector_add]
        [--timed] [--json benchmarks/results/bench_static_gate.json]
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import environment, print_table, write_json  # noqa: E402

from pytest_autotune.backends.cuda_arch import arch_limits  # noqa: E402
from pytest_autotune.gate.static import compare_profiles  # noqa: E402
from pytest_autotune.lifecycle.calls import KernelCall, _static_build  # noqa: E402
from pytest_autotune.lifecycle.compile_check import parse_arch_list  # noqa: E402
from pytest_autotune.lifecycle.static_gate import build_profile  # noqa: E402
from pytest_autotune.space import SearchSpace  # noqa: E402
from pytest_autotune.static.profile import StaticProfile  # noqa: E402

IDENTICAL, DIFFERS, WORSE, REPORT = "identical", "changed/worse", "worse", "report"
ACCEPTED = {IDENTICAL: {"identical"}, DIFFERS: {"changed", "worse"}, WORSE: {"worse"}}
DELTAS_WIDTH = 72  # characters of the deltas line in the printed table (the JSON has all of it)
NO_GPU = "no GPU"

# The locked configurations: representative winners (not the first of each space, which is the smallest
# block and tile and would leave the tile edits nothing to show), each checked to be in the space.
LOCKED: dict[str, dict[str, Any]] = {
    "vector_add": {"block_size_x": 256, "WORK_PER_THREAD": 4},
    "matmul": {"block_size_x": 16, "block_size_y": 16, "tile_size_x": 4, "tile_size_y": 4, "TILE_K": 16, "UNROLL": 4},
    "convolution": {"block_size_x": 32, "block_size_y": 8, "tile_size_x": 2, "tile_size_y": 2, "use_shmem": 1,
                    "FH": 7, "FW": 7},
    "reduction": {"block_size_x": 256, "ELEMS_PER_THREAD": 4, "USE_SHUFFLE": 1},
    "softmax": {"BLOCK_COLS": 128, "ROWS": 2, "num_warps": 2, "num_stages": 1},
}


class NotApplicable(Exception):
    """The edit has no meaning for this kernel (the reason is the message)."""


@dataclass(frozen=True)
class Variant:
    """What an edit changes: the source text and its local headers, the compiler options, the configuration.
    ``None`` keeps the lock's."""

    code: str | None = None  # CUDA source, or the Triton kernel's module
    headers: Mapping[str, str] = field(default_factory=dict)
    options: tuple[str, ...] | None = None
    params: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Edit:
    """One edit made on purpose, with what the static gate should say of it (decided before any run)."""

    key: str
    label: str
    expected: str  # IDENTICAL, DIFFERS, WORSE, REPORT
    kind: str  # "comment", "copy", "loop", "spill", "occupancy", "launch_bounds", "header", "flag", "config"
    why: str = ""  # why this expectation for this kernel (flags that cannot reach the code, ...)


@dataclass
class Case:
    """A kernel as one runner builds it, and the edits that mean something for it."""

    kernel: str  # the row's name
    base: str  # key of LOCKED / CUDA_KERNELS
    compiler: str  # nvrtc, nvcc, triton
    runner: str  # the runner whose build is reproduced: cupy, pycuda, triton
    code: str  # the committed source (or module) text
    file: str  # its file name (kept in the edited copies: #line and the runner's -I folder use it)
    edits: list[tuple[Edit, Callable[["Case"], Variant] | str]]  # a transformation, or "n/a: reason"
    headers: Mapping[str, str] = field(default_factory=dict)  # the lock's local headers (the header case)
    path: str | None = None  # the committed file the lock is built from (None: written to a folder)


# -- text edits ----------------------------------------------------------------------------------------


def replace(code: str, old: str, new: str, count: int = 1) -> str:
    """``code`` with ``old`` replaced ``count`` times; an error when it occurs another number of times (an edit
    that silently changes nothing would read as "identical")."""
    found = code.count(old)
    if found != count:
        raise AssertionError(f"edit pattern found {found} times, expected {count}: {old!r}")
    return code.replace(old, new)


def add_comments(code: str, style: str = "c") -> str:
    """A comment-only edit: a comment block at the top, and after every line that ends a statement or opens a
    block a blank line and a comment line (never after a preprocessor line or a continued one)."""
    mark = "//" if style == "c" else "#"
    out = [f"{mark} Reviewed: comments and blank lines only.", f"{mark} (bench_static_gate.py's comment edit)", ""]
    for line in code.splitlines():
        out.append(line)
        stripped = line.rstrip()
        if style == "c" and stripped.endswith((";", "{")) and not stripped.lstrip().startswith("#") \
                and not stripped.endswith("\\"):
            indent = line[:len(line) - len(line.lstrip())]
            out.extend(["", f"{indent}// a note on the line above"])
        elif style == "py" and stripped and not stripped.endswith(("\\", ",", "(")) \
                and stripped.lstrip().startswith(("x =", "e =", "rows =", "cols =", "mask =", "offsets =")):
            indent = line[:len(line) - len(line.lstrip())]
            out.extend(["", f"{indent}# a note on the line above"])
    return "\n".join(out) + "\n"


def full_occupancy_bounds(threads: str) -> str:
    """``__launch_bounds__`` asking for full occupancy on sm_80/sm_90 (2,048 threads an SM): at most 32
    registers a thread at any block size."""
    return f"__launch_bounds__({threads}, 2048 / ({threads}))"


def config(**changes: Any) -> Callable[[Case], Variant]:
    return lambda case: Variant(params={**LOCKED[case.base], **changes})


def options(*flags: str) -> Callable[[Case], Variant]:
    return lambda case: Variant(options=tuple(flags))


def source(fn: Callable[[str], str]) -> Callable[[Case], Variant]:
    return lambda case: Variant(code=fn(case.code), headers=dict(case.headers))


COPY = Edit("copy", "no edit, another folder", IDENTICAL, "copy")
COMMENT = Edit("comment", "comments + blank lines", IDENTICAL, "comment")
LOOP = Edit("loop", "loop doubled", DIFFERS, "loop")
SPILL = Edit("spill", "per-thread array, run-time index", WORSE, "spill")
WIDER = Edit("wider", "wider tile", WORSE, "occupancy")
BOUNDS = Edit("bounds", "launch bounds: full occupancy", REPORT, "launch_bounds")
UNBOUND = Edit("unbounded", "launch bounds removed", REPORT, "launch_bounds")
FAST = Edit("fast_math", "flag -use_fast_math", DIFFERS, "flag")
FAST_NO_EFFECT = Edit("fast_math", "flag -use_fast_math", IDENTICAL, "flag",
                      "no division, sqrt or transcendental, and NVRTC builds with -ftz=true already")
FMAD = Edit("fmad", "flag --fmad=false", DIFFERS, "flag")
FMAD_NO_EFFECT = Edit("fmad", "flag --fmad=false", IDENTICAL, "flag", "no floating-point multiply to fuse")
HEADER_COMMENT = Edit("header_comment", "header: comments only", IDENTICAL, "comment")
HEADER_CODE = Edit("header_code", "header: code changed (ReLU)", DIFFERS, "header")

NO_TILE = "n/a: no tile or shared memory to widen"
NO_BOUNDS = "n/a: the kernel has no __launch_bounds__ to remove"
NO_HEADER = "n/a: includes no local header (see vector_add (header))"

# vector_add ------------------------------------------------------------------------------------------

VADD_LOOP = "for (int w = 0; w < WORK_PER_THREAD; w++) {"


def vadd_loop(code: str) -> str:
    """The main loop run for twice WORK_PER_THREAD elements."""
    return replace(code, VADD_LOOP, "for (int w = 0; w < 2 * WORK_PER_THREAD; w++) {")


def vadd_spill(code: str) -> str:
    """Two-phase: every element of a loaded into a 64-float per-thread array first, then added in a loop whose
    trip count is known at run time only (how many were in bounds): the array goes to local memory."""
    code = replace(code, "    const int base =", "    float staged[64];  /* a's elements, loaded first */\n"
                   "    int m = 0;\n    const int base =")
    code = replace(code, "        if (i < n) c[i] = a[i] + b[i];\n    }",
                   "        if (i < n) staged[m++] = a[i];\n    }\n"
                   "    for (int w = 0; w < m; w++) {\n        const int i = base + w * block_size_x;\n"
                   "        c[i] = staged[w] + b[i];\n    }")
    return code


def vadd_bounds(code: str) -> str:
    return replace(code, '__global__ void vector_add(',
                   f'__global__ void {full_occupancy_bounds("block_size_x")} vector_add(')


VADD_HEADER = '''/* The element operation of vector_add.cu (bench_static_gate.py's header case). */
#pragma once
__device__ __forceinline__ float vadd_op(float x, float y) { return x + y; }
'''


def vadd_with_header(code: str) -> str:
    """vector_add with its element operation in a local header, ``vadd_op.h``."""
    code = replace(code, 'extern "C"', '#include "vadd_op.h"\n\nextern "C"')
    return replace(code, "c[i] = a[i] + b[i];", "c[i] = vadd_op(a[i], b[i]);")


def header_comment(case: Case) -> Variant:
    text = case.headers["vadd_op.h"]
    text = replace(text, "#pragma once\n", "#pragma once\n\n/* Adds two floats.\n * (comment-only edit) */\n")
    return Variant(code=case.code, headers={"vadd_op.h": text + "\n/* end of vadd_op.h */\n"})


def header_code(case: Case) -> Variant:
    """A ReLU fused into the header's operation. (A first version added in double precision,
    ``(float)((double)x + (double)y)``: the compiler rightly folds that back to one FP32 add, the same binary.)"""
    text = replace(case.headers["vadd_op.h"], "return x + y;", "return fmaxf(x + y, 0.0f);")
    return Variant(code=case.code, headers={"vadd_op.h": text})


def vector_add_edits(compiler: str) -> list[tuple[Edit, Any]]:
    fast = FAST_NO_EFFECT if compiler == "nvrtc" else Edit(
        "fast_math", "flag -use_fast_math", DIFFERS, "flag", "nvcc builds without -ftz: fast math flushes denormals")
    return [(COPY, source(lambda c: c)), (COMMENT, source(add_comments)), (LOOP, source(vadd_loop)),
            (SPILL, source(vadd_spill)), (WIDER, NO_TILE), (BOUNDS, source(vadd_bounds)), (UNBOUND, NO_BOUNDS),
            (HEADER_COMMENT, NO_HEADER), (HEADER_CODE, NO_HEADER),
            (fast, options("-use_fast_math")), (FMAD_NO_EFFECT, options("--fmad=false"))]


# matmul ----------------------------------------------------------------------------------------------

MATMUL_FMA = "for (int j = 0; j < tile_size_x; j++) acc[i][j] += a * Bs[k][tx + j * block_size_x];"
MATMUL_INNER_I = "#pragma unroll\n            for (int i = 0; i < tile_size_y; i++) {\n                const float a"
MATMUL_BOUNDS = "__launch_bounds__(block_size_x * block_size_y, 1)"


def matmul_loop(code: str) -> str:
    """The accumulation done twice per k."""
    return replace(code, MATMUL_FMA, "for (int j = 0; j < tile_size_x; j++) {\n"
                   "                    acc[i][j] += a * Bs[k][tx + j * block_size_x];\n"
                   "                    acc[i][j] += a * Bs[k][tx + j * block_size_x];\n                }")


def matmul_spill(code: str) -> str:
    """The inner product's row loop no longer unrolled: the accumulator array (16 floats at the lock's 4x4 tile)
    is indexed at run time."""
    return replace(code, MATMUL_INNER_I, MATMUL_INNER_I.replace("#pragma unroll\n", "#pragma unroll 1\n", 1))


MATMUL_K_LOOP = "        __syncthreads();\n        PRAGMA_UNROLL(UNROLL)\n        for (int k = 0; k < TILE_K; k++) {\n"


def matmul_spill_large(code: str) -> str:
    """This thread's rows of the A tile copied into a per-thread array (tile_size_y * TILE_K floats: 64 at the
    lock's configuration) and read in a k loop that is no longer unrolled: a run-time index into 64 floats."""
    code = replace(code, MATMUL_K_LOOP, "        __syncthreads();\n"
                   "        float a_frag[tile_size_y * TILE_K];  /* this thread's rows of A */\n#pragma unroll\n"
                   "        for (int f = 0; f < tile_size_y * TILE_K; f++)\n"
                   "            a_frag[f] = As[ty + (f / TILE_K) * block_size_y][f % TILE_K];\n#pragma unroll 1\n"
                   "        for (int k = 0; k < TILE_K; k++) {\n")
    return replace(code, "const float a = As[ty + i * block_size_y][k];", "const float a = a_frag[i * TILE_K + k];")


# convolution -----------------------------------------------------------------------------------------

CONV_FMA = "for (int j = 0; j < FW; j++) sum += INPUT(y + i, x + j) * filter[i * FW + j];"
CONV_ROWS = "                for (int i = 0; i < FH; i++)\n"


def conv_loop(code: str) -> str:
    return replace(code, CONV_FMA, "for (int j = 0; j < FW; j++) {\n"
                   "                        sum += INPUT(y + i, x + j) * filter[i * FW + j];\n"
                   "                        sum += INPUT(y + i, x + j) * filter[i * FW + j];\n                    }")


def conv_spill(code: str) -> str:
    """The filter cached in a per-thread array of FH * FW floats, its row loop not unrolled: run-time index."""
    code = replace(code, "    const int x0 = blockIdx.x * TILE_W, y0 = blockIdx.y * TILE_H;\n",
                   "    const int x0 = blockIdx.x * TILE_W, y0 = blockIdx.y * TILE_H;\n"
                   "    float w[FH * FW];  /* the filter, per thread */\n"
                   "    for (int f = 0; f < FH * FW; f++) w[f] = filter[f];\n")
    code = replace(code, CONV_ROWS, "#pragma unroll 1\n" + CONV_ROWS)
    return replace(code, "* filter[i * FW + j];", "* w[i * FW + j];")


def conv_bounds(code: str) -> str:
    return replace(code, "__global__ void convolution(",
                   f"__global__ void {full_occupancy_bounds('block_size_x * block_size_y')} convolution(")


# reduction -------------------------------------------------------------------------------------------

def red_loop(code: str) -> str:
    """The accumulation done twice (s += x[i] twice; the load is one)."""
    return replace(code, "if (i < n) s += x[i];", "if (i < n) { s += x[i]; s += x[i]; }")


def red_spill(code: str) -> str:
    """The loaded values kept in a 64-float per-thread array, summed over the count in bounds (known at run
    time only)."""
    code = replace(code, "    float s = 0.0f;\n", "    float s = 0.0f;\n    float v[64];  /* the loaded values */\n"
                   "    int m = 0;\n")
    code = replace(code, "if (i < n) s += x[i];\n    }\n", "if (i < n) v[m++] = x[i];\n    }\n"
                   "    for (int e = 0; e < m; e++) s += v[e];\n")
    return code


def red_bounds(code: str) -> str:
    return replace(code, "__global__ void reduce_sum(", f"__global__ void {full_occupancy_bounds('block_size_x')} "
                   "reduce_sum(")


# Triton softmax --------------------------------------------------------------------------------------

def softmax_loop(code: str) -> str:
    """The row-max shift done twice (a second reduction over the shifted rows; the result is the same)."""
    line = "    x = x - tl.max(x, axis=1)[:, None]\n"
    return replace(code, line, line * 2)


def softmax_edits() -> list[tuple[Edit, Any]]:
    return [
        (COPY, source(lambda c: c)),
        (Edit("comment", "comments + blank lines (module and kernel)", IDENTICAL, "comment"),
         source(lambda c: add_comments(c, "py"))),
        (Edit("loop", "row-max reduction done twice", DIFFERS, "loop"), source(softmax_loop)),
        (Edit("num_warps_down", "config num_warps 2 -> 1", WORSE, "occupancy",
              "32-thread programs: at most 32 blocks, 1,024 threads an SM (50 %)"), config(num_warps=1)),
        (Edit("num_warps_up", "config num_warps 2 -> 4", DIFFERS, "config"), config(num_warps=4)),
        (Edit("block", "config BLOCK_COLS 128 -> 256", DIFFERS, "config"), config(BLOCK_COLS=256)),
        (Edit("spill", "config BLOCK_COLS 128 -> 8192 (256 values a thread)", WORSE, "spill",
              "outside the space's restriction, which exists to stop exactly this"), config(BLOCK_COLS=8192)),
        (Edit("bounds", "launch bounds", REPORT, "launch_bounds"), "n/a: Triton has no __launch_bounds__ "
         "(num_warps is the block; see the num_warps rows)"),
        (Edit("header", "edited header", DIFFERS, "header"), "n/a: the kernel uses no helper from another file"),
        (Edit("flag", "compiler flag", DIFFERS, "flag"), "n/a: a Triton kernel has no compiler_options"),
    ]


def cases() -> list[Case]:
    """Every kernel and compiler with its edits (needs the example project on the path)."""
    import example_kernels
    from example_kernels import kernel_path

    softmax_file = str(Path(example_kernels.__file__).parent / "triton_softmax.py")  # read, not imported (Triton)

    def committed(file: str) -> tuple[str, str]:
        path = kernel_path(file)
        return Path(path).read_text(), path

    vadd, vadd_path = committed("vector_add.cu")
    matmul, matmul_path = committed("matmul.cu")
    conv, conv_path = committed("convolution.cu")
    red, red_path = committed("reduction.cu")
    out = [Case("vector_add", "vector_add", c, r, vadd, "vector_add.cu", vector_add_edits(c), path=vadd_path)
           for c, r in (("nvrtc", "cupy"), ("nvcc", "pycuda"))]
    out += [Case("vector_add (header)", "vector_add", c, r, vadd_with_header(vadd), "vector_add.cu",
                 [(COPY, source(lambda x: x)), (HEADER_COMMENT, header_comment), (HEADER_CODE, header_code)],
                 headers={"vadd_op.h": VADD_HEADER}) for c, r in (("nvrtc", "cupy"), ("nvcc", "pycuda"))]
    out.append(Case("matmul", "matmul", "nvrtc", "cupy", matmul, "matmul.cu", [
        (COPY, source(lambda c: c)), (COMMENT, source(add_comments)),
        (Edit("loop", "accumulation done twice", DIFFERS, "loop"), source(matmul_loop)),
        (Edit("spill", "accumulator (16 floats) indexed at run time", WORSE, "spill"), source(matmul_spill)),
        (Edit("spill_large", "A rows in 64 floats a thread, run-time index", WORSE, "spill"),
         source(matmul_spill_large)),
        (Edit("wider", "config wider tile: tile_size_x 4 -> 8", WORSE, "occupancy"), config(tile_size_x=8)),
        (Edit("bounds", "launch bounds (.., 1) -> full occupancy", REPORT, "launch_bounds"),
         source(lambda c: replace(c, MATMUL_BOUNDS, full_occupancy_bounds("block_size_x * block_size_y")))),
        (UNBOUND, source(lambda c: replace(c, MATMUL_BOUNDS + "\n", ""))),
        (HEADER_COMMENT, NO_HEADER), (HEADER_CODE, NO_HEADER),
        (FAST_NO_EFFECT, options("-use_fast_math")),
        (Edit("fmad", "flag --fmad=false", DIFFERS, "flag", "acc += a * b: every FFMA splits"),
         options("--fmad=false"))], path=matmul_path))
    out.append(Case("convolution", "convolution", "nvrtc", "cupy", conv, "convolution.cu", [
        (COPY, source(lambda c: c)), (COMMENT, source(add_comments)),
        (Edit("loop", "accumulation done twice", DIFFERS, "loop"), source(conv_loop)),
        (Edit("spill", "filter in a per-thread array, run-time index", WORSE, "spill"), source(conv_spill)),
        (Edit("wider", "config wider tile: 2x2 -> 4x4 outputs", WORSE, "occupancy"),
         config(tile_size_x=4, tile_size_y=4)),
        (BOUNDS, source(conv_bounds)), (UNBOUND, NO_BOUNDS), (HEADER_COMMENT, NO_HEADER), (HEADER_CODE, NO_HEADER),
        (FAST_NO_EFFECT, options("-use_fast_math")),
        (Edit("fmad", "flag --fmad=false", DIFFERS, "flag", "sum += in * filter: every FFMA splits"),
         options("--fmad=false"))], path=conv_path))
    out.append(Case("reduction", "reduction", "nvrtc", "cupy", red, "reduction.cu", [
        (COPY, source(lambda c: c)), (COMMENT, source(add_comments)),
        (Edit("loop", "accumulation done twice", DIFFERS, "loop"), source(red_loop)),
        (SPILL, source(red_spill)),
        (WIDER, "n/a: no tile; its shared buffer is one float a thread"),
        (BOUNDS, source(red_bounds)), (UNBOUND, NO_BOUNDS), (HEADER_COMMENT, NO_HEADER), (HEADER_CODE, NO_HEADER),
        (FAST_NO_EFFECT, options("-use_fast_math")), (FMAD_NO_EFFECT, options("--fmad=false"))], path=red_path))
    out.append(Case("softmax", "softmax", "triton", "triton", Path(softmax_file).read_text(), "triton_softmax.py",
                    softmax_edits(), path=softmax_file))
    return out


# -- building ------------------------------------------------------------------------------------------


def cuda_spec(case: Case, folder: Path | None, variant: Variant) -> Any:
    """The example's KernelSpec of ``case`` from the committed file (``folder`` None) or from an edited copy
    written to ``folder`` (same file name, headers beside it)."""
    from example_kernels.cuda import CUDA_KERNELS, compile_spec_arguments

    from pytest_autotune.execution.kernel import KernelSpec

    arguments = compile_spec_arguments(CUDA_KERNELS[case.base])
    if (folder is None or variant.code is None) and case.path is not None:
        path = case.path  # the committed file: the lock's build, and the option and configuration edits
    else:
        folder = folder or Path(tempfile.mkdtemp(prefix="bench-static-gate-"))
        folder.mkdir(parents=True, exist_ok=True)
        (folder / case.file).write_text(variant.code if variant.code is not None else case.code)
        for name, text in (variant.headers or case.headers).items():
            (folder / name).write_text(text)
        path = str(folder / case.file)
    return KernelSpec(**{**arguments, "source": path, "lang": "cuda",
                         "compiler_options": variant.options if variant.options is not None else ()})


_MODULES = [0]


def triton_spec(case: Case, folder: Path | None, variant: Variant) -> Any:
    """The example's TritonSpec (as tests/test_triton_kernels.py calls it) of the committed kernel, or of an
    edited copy of its module written to ``folder`` and imported under a name of its own."""
    import numpy as np

    from example_kernels import triton_softmax
    from pytest_autotune.backends.triton_runner import TritonSpec

    module: Any = triton_softmax
    if folder is not None and variant.code is not None:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / case.file
        # the copy imports the package's LOCKDIR absolutely (it is no longer inside the package); same line count
        path.write_text(replace(variant.code, "from . import LOCKDIR", "from example_kernels import LOCKDIR"))
        _MODULES[0] += 1
        name = f"bench_static_gate_softmax_{_MODULES[0]}"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # the kernel's reference resolves by module name
        spec.loader.exec_module(module)
    n_rows, n_cols = triton_softmax.SOFTMAX_SHAPE
    x = np.zeros(triton_softmax.SOFTMAX_SHAPE, np.float32)
    return TritonSpec(module.softmax_kernel, module.softmax_grid(n_rows), [np.zeros_like(x), x, n_rows, n_cols],
                      tuned=list(triton_softmax.SOFTMAX_PARAMS))


def kernel_call(case: Case, spec: Any) -> KernelCall:
    """A KernelCall with the static build the plugin gives this kernel (lifecycle.calls)."""
    return KernelCall(case.kernel, {}, {}, lambda: None,
                      static_build=lambda params, arch, runner: _static_build(runner or case.runner, spec, params, arch))


def profile(case: Case, folder: Path | None, variant: Variant, arch: int) -> StaticProfile:
    """Build the configuration (the variant's, else the lock's) for ``arch`` as the runner does and profile it."""
    make = triton_spec if case.compiler == "triton" else cuda_spec
    spec = make(case, folder, variant)
    params = dict(variant.params if variant.params is not None else LOCKED[case.base])
    return build_profile(kernel_call(case, spec), params, arch, case.runner)


def check_locked(arch: int, names: set[str]) -> None:
    """Each locked configuration of ``names`` is a point of the example's space under ``arch``'s limits."""
    from example_kernels.cuda import CUDA_KERNELS

    limits = arch_limits(arch)
    spaces = {name: SearchSpace(k.params, k.restrictions, limits) for name, k in CUDA_KERNELS.items() if name in names}
    if "softmax" in names:
        from example_kernels.triton_softmax import SOFTMAX_PARAMS, SOFTMAX_RESTRICTIONS

        spaces["softmax"] = SearchSpace(SOFTMAX_PARAMS, SOFTMAX_RESTRICTIONS, {**limits, "warp_size": 32})
    for name, space in spaces.items():
        if LOCKED[name] not in space:
            raise SystemExit(f"bench_static_gate.py: the locked {name} configuration {LOCKED[name]} is not in its "
                             f"space for sm_{arch}")


# -- the timed gate (a GPU machine only) ---------------------------------------------------------------


def gpu_reason() -> str | None:
    """Why the timed gate cannot run here (None: a CUDA device is present)."""
    try:
        from cuda.bindings import driver
    except ImportError:
        return "no CUDA driver bindings"
    try:
        (err,) = driver.cuInit(0)
        if err != driver.CUresult.CUDA_SUCCESS:
            return f"no GPU (cuInit: {err.name})"
        err, count = driver.cuDeviceGetCount()
        return None if err == driver.CUresult.CUDA_SUCCESS and count > 0 else "no GPU"
    except Exception as exc:  # noqa: BLE001 - no libcuda.so: no GPU
        return f"no GPU ({type(exc).__name__})"


def timed_verdict(case: Case, edit: Edit, arch: int, enabled: bool) -> str:
    """The timed gate's verdict for this row on a GPU of ``arch``: what ``--timed`` would fill in. Not run in
    this version: without a GPU every row reads "no GPU"."""
    return NO_GPU if not enabled else "not run"


# -- one row -------------------------------------------------------------------------------------------


def local_memory(p: StaticProfile) -> int:
    return p.instructions.get("local_load", 0) + p.instructions.get("local_store", 0)


def regression(locked: StaticProfile, now: StaticProfile) -> list[str]:
    """What makes ``now`` a spill/occupancy regression against ``locked``, from the two builds (empty: none)."""
    found = []
    if local_memory(now) > local_memory(locked):
        found.append(f"LDL/STL {local_memory(locked)} -> {local_memory(now)}")
    if now.spill_stores + now.spill_loads > locked.spill_stores + locked.spill_loads:
        found.append("spills")
    if now.stack_frame > locked.stack_frame:
        found.append("stack frame")
    if now.occupancy < locked.occupancy:
        found.append("occupancy")
    return found


def short(text: str, width: int = DELTAS_WIDTH) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def run_case(case: Case, archs: list[int], work: Path, timed: bool) -> tuple[list[dict[str, Any]], list[dict]]:
    """The lock's profile of ``case`` for each architecture, then every edit's row; and the n/a edits."""
    rows, skipped = [], []
    locked: dict[int, StaticProfile] = {}
    lock_seconds: dict[int, float] = {}
    for arch in archs:
        start = time.perf_counter()
        folder = work / f"{slug(case)}-lock" if case.path is None else None
        locked[arch] = profile(case, folder, Variant(), arch)
        lock_seconds[arch] = time.perf_counter() - start
    for edit, how in case.edits:
        if isinstance(how, str):
            skipped.append({"kernel": case.kernel, "compiler": case.compiler, "edit": edit.label, "why": how})
            continue
        variant = how(case)
        for arch in archs:
            folder = work / f"{slug(case)}-{edit.key}-sm_{arch}"
            start = time.perf_counter()
            error = None
            try:
                now = profile(case, folder, variant, arch)
                comparison = compare_profiles(locked[arch], now)
            except Exception as exc:  # noqa: BLE001 - a build error is a result of the edit, shown in the row
                error = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
            seconds = time.perf_counter() - start
            if error is not None:
                verdict, deltas, found, details = "error", error, [], {}
            else:
                verdict, deltas = comparison.verdict.value, comparison.line()
                found = regression(locked[arch], now)
                details = comparison.as_dict()
            ok = None if edit.expected == REPORT else verdict in ACCEPTED[edit.expected]
            rows.append({"kernel": case.kernel, "compiler": case.compiler, "arch": f"sm_{arch}", "edit": edit.key,
                         "label": edit.label, "kind": edit.kind, "expected": edit.expected, "why": edit.why,
                         "verdict": verdict, "ok": ok, "deltas": deltas, "regression": found,
                         "seconds": round(seconds, 3), "lock_seconds": round(lock_seconds[arch], 3),
                         "timed": timed_verdict(case, edit, arch, timed),
                         "params": dict(variant.params or LOCKED[case.base]),
                         "options": list(variant.options or ()), "static": details})
            print(f"  {case.kernel} [{case.compiler}] sm_{arch} {edit.label}: {verdict} ({seconds:.2f} s)",
                  file=sys.stderr, flush=True)
    return rows, skipped


def slug(case: Case) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", f"{case.kernel}_{case.compiler}").strip("_")


# -- summary -------------------------------------------------------------------------------------------


def pct(part: int, whole: int) -> str:
    return f"{part}/{whole} ({part / whole:.0%})" if whole else "-"


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The targets: comment-only edits identical, spill/occupancy regressions caught, seconds per check."""
    comments = [r for r in rows if r["kind"] == "comment"]
    copies = [r for r in rows if r["kind"] == "copy"]
    regressions = [r for r in rows if r["regression"]]
    designed = [r for r in rows if r["kind"] in ("spill", "occupancy")]
    seconds = [r["seconds"] for r in rows if r["verdict"] != "error"]
    unedited = [r["seconds"] for r in copies if r["verdict"] != "error"]
    per_compiler = {}
    for compiler in sorted({r["compiler"] for r in rows}):
        s = [r["seconds"] for r in rows if r["compiler"] == compiler and r["verdict"] != "error"]
        per_compiler[compiler] = {"median_s": statistics.median(s), "max_s": max(s), "n": len(s)} if s else {}
    expected = [r for r in rows if r["ok"] is not None]
    timed = [r for r in rows if r["timed"] in ("pass", "regression")]
    return {
        "comment_only_identical": [sum(r["verdict"] == "identical" for r in comments), len(comments)],
        "copies_identical": [sum(r["verdict"] == "identical" for r in copies), len(copies)],
        "regressions_caught": [sum(r["verdict"] == "worse" for r in regressions), len(regressions)],
        "designed_regressions_present": [sum(bool(r["regression"]) for r in designed), len(designed)],
        "designed_regressions_missing": [f"{r['kernel']} [{r['compiler']}] {r['arch']} {r['label']}"
                                         for r in designed if not r["regression"]],
        "expectations_met": [sum(bool(r["ok"]) for r in expected), len(expected)],
        "expectations_failed": [f"{r['kernel']} [{r['compiler']}] {r['arch']} {r['label']}: {r['verdict']} "
                                f"(expected {r['expected']})" for r in expected if not r["ok"]],
        "check_seconds": {"median": statistics.median(seconds) if seconds else None,
                          "max": max(seconds) if seconds else None, "n": len(seconds),
                          "under_2s": sum(s < 2.0 for s in seconds)},
        "check_seconds_by_compiler": per_compiler,
        "unedited_check_seconds": {"median": statistics.median(unedited) if unedited else None,
                                   "max": max(unedited) if unedited else None, "n": len(unedited)},
        "over_2s": [f"{r['kernel']} [{r['compiler']}] {r['arch']} {r['label']}: {r['seconds']:.2f} s"
                    for r in rows if r["seconds"] >= 2.0],
        "timed": ("no GPU run: how often identical predicted a timed pass and worse a timed regression is not "
                  "measured" if not timed else {
                      "identical_then_pass": [sum(r["timed"] == "pass" for r in timed if r["verdict"] == "identical"),
                                              sum(r["verdict"] == "identical" for r in timed)],
                      "worse_then_regression": [sum(r["timed"] == "regression" for r in timed
                                                    if r["verdict"] == "worse"),
                                                sum(r["verdict"] == "worse" for r in timed)]}),
    }


def print_results(rows: list[dict[str, Any]], skipped: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    table = []
    for r in rows:
        ok = "-" if r["ok"] is None else "yes" if r["ok"] else "NO"
        table.append([r["kernel"], r["compiler"], r["arch"], r["label"], r["verdict"], r["expected"], ok,
                      "yes" if r["regression"] else "", r["timed"], f"{r['seconds']:.2f}",
                      short("identical" if r["verdict"] == "identical" else r["deltas"])])
    print_table(table, ["kernel", "compiler", "arch", "edit", "verdict", "expected", "ok", "regr.", "timed",
                        "s", "deltas"], title="static verdict of each edit (regr.: the build spills more, uses more "
                        "local memory or lowers occupancy)", align="lllllllllrl")
    if skipped:
        print()
        print_table([[s["kernel"], s["compiler"], s["edit"], s["why"][len("n/a: "):]] for s in skipped],
                    ["kernel", "compiler", "edit", "n/a because"], title="edits that do not apply", align="llll")
    s = summary
    print()
    lines = [
        ("comment-only edits identical", pct(*s["comment_only_identical"])),
        ("unedited copies identical", pct(*s["copies_identical"])),
        ("spill/occupancy regressions caught (worse)", pct(*s["regressions_caught"])),
        ("designed spill/occupancy edits that regressed", pct(*s["designed_regressions_present"])),
        ("expectations met", pct(*s["expectations_met"])),
        ("seconds per kernel check, median / max", f"{s['check_seconds']['median']:.2f} / "
                                                   f"{s['check_seconds']['max']:.2f} (under 2 s: "
                                                   f"{s['check_seconds']['under_2s']}/{s['check_seconds']['n']})"),
    ]
    for compiler, c in s["check_seconds_by_compiler"].items():
        if c:
            lines.append((f"  {compiler}, median / max", f"{c['median_s']:.2f} / {c['max_s']:.2f} s ({c['n']})"))
    u = s["unedited_check_seconds"]
    if u["n"]:
        lines.append(("  unedited kernel (copy rows), median / max", f"{u['median']:.2f} / {u['max']:.2f} s ({u['n']})"))
    lines.append(("timed gate", s["timed"] if isinstance(s["timed"], str) else str(s["timed"])))
    print_table(lines, ["summary", ""], align="ll")
    for failed in s["expectations_failed"]:
        print(f"expectation failed: {failed}")
    for missing in s["designed_regressions_missing"]:
        print(f"designed spill/occupancy edit without that regression in the build: {missing}")
    for slow in s["over_2s"]:
        print(f"over 2 s: {slow}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", type=parse_arch_list, default=[80, 90])
    p.add_argument("--only", default=None, help="comma-separated kernels (vector_add, matmul, convolution, "
                   "reduction, softmax; vector_add includes its header case)")
    p.add_argument("--compilers", default="nvrtc,nvcc,triton", help="comma-separated: nvrtc, nvcc, triton")
    p.add_argument("--timed", action="store_true", help="the timed gate's verdict beside each row (a GPU machine)")
    p.add_argument("--json", type=Path, default=Path("benchmarks/results/bench_static_gate.json"))
    p.add_argument("--keep", type=Path, default=None, help="write the edited copies here and keep them")
    args = p.parse_args(argv)
    try:
        all_cases = cases()
    except ImportError as exc:
        print(f"bench_static_gate.py needs the example project and Triton: pip install -e ./example_project (or "
              f"PYTHONPATH=example_project/src), pip install 'pytest-autotune[triton]' ({exc})", file=sys.stderr)
        return 2
    wanted = set(args.only.split(",")) if args.only else None
    compilers = set(args.compilers.split(","))
    chosen = [c for c in all_cases if (wanted is None or c.base in wanted) and c.compiler in compilers]
    if not chosen:
        print(f"bench_static_gate.py: no kernel matches --only {args.only} --compilers {args.compilers}",
              file=sys.stderr)
        return 2
    for arch in args.arch:
        check_locked(arch, {c.base for c in chosen})
    timed = False
    if args.timed:
        reason = gpu_reason()
        if reason:
            print(f"bench_static_gate.py: timed gate not run: {reason}; the timed column reads '{NO_GPU}'",
                  file=sys.stderr)
        else:
            print("bench_static_gate.py: timed gate not run: this version does not time the edits on the GPU",
                  file=sys.stderr)
            timed = True
    work = args.keep or Path(tempfile.mkdtemp(prefix="bench-static-gate-"))
    before = os.environ.get("TRITON_CACHE_DIR")
    os.environ["TRITON_CACHE_DIR"] = str(work / "triton-cache")  # a cold Triton cache, as on a fresh CI runner
    rows: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    try:
        for case in chosen:
            done, na = run_case(case, args.arch, work, timed)
            rows += done
            skipped += na
    finally:
        if before is None:
            os.environ.pop("TRITON_CACHE_DIR", None)
        else:
            os.environ["TRITON_CACHE_DIR"] = before
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    summary = summarise(rows)
    print_results(rows, skipped, summary)
    from pytest_autotune.backends.nvrtc import nvrtc_version

    write_json(args.json, {
        "environment": environment(["cuda-bindings", "nvidia-cuda-nvrtc", "nvidia-cuda-nvdisasm", "nvidia-cuda-nvcc",
                                    "triton", "torch"]),
        "command": " ".join(sys.argv), "archs": [f"sm_{a}" for a in args.arch], "nvrtc": list(nvrtc_version()),
        "locked": LOCKED, "summary": summary, "rows": rows, "not_applicable": skipped})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
