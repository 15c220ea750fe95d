"""A fused row softmax in Triton, tuned by tests/test_triton_kernels.py, and the function the project ships.

Each program normalises ``ROWS`` rows of ``BLOCK_COLS`` columns (a power of two at least the row length,
masked). Without a GPU, pytest-autotune runs it in Triton's interpreter (``TRITON_INTERPRET=1``); the
lockfile is then the interpreter's, never a GPU's.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import triton
import triton.language as tl

from . import LOCKDIR

SOFTMAX_SHAPE = (16, 100)  # rows, columns: small, the interpreter runs every program in Python
SOFTMAX_PARAMS = {"BLOCK_COLS": [128, 256], "ROWS": [1, 2, 4], "num_warps": [1, 2, 4], "num_stages": [1, 2]}
# a program's tile must fit the registers of its warps: at most 8 elements per thread (28 of 36 left)
SOFTMAX_RESTRICTIONS = ["BLOCK_COLS * ROWS <= num_warps * warp_size * 8"]
SOFTMAX_DEFAULT = {"BLOCK_COLS": 128, "ROWS": 1, "num_warps": 4, "num_stages": 1}


@triton.jit
def softmax_kernel(out_ptr, in_ptr, n_rows, n_cols, BLOCK_COLS: tl.constexpr, ROWS: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_COLS)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    offsets = rows[:, None] * n_cols + cols[None, :]
    x = tl.load(in_ptr + offsets, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=1)[:, None]
    e = tl.exp(x)
    tl.store(out_ptr + offsets, e / tl.sum(e, axis=1)[:, None], mask=mask)


def softmax_grid(n_rows: int) -> Any:
    """The launch grid of a configuration (Triton's convention: a callable of the meta-parameters)."""
    return lambda meta: (triton.cdiv(n_rows, meta["ROWS"]),)


def softmax_reference(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).astype(x.dtype)


def softmax(x: Any) -> Any:
    """Row softmax of a 2-D float32 torch tensor with the configuration the lock holds for this device
    (the default configuration, with a warning, on a device the lock does not know)."""
    import torch

    from pytest_autotune import locked_triton_config

    n_rows, n_cols = x.shape
    config = locked_triton_config("softmax_kernel", problem_size=None, lockdir=LOCKDIR, default=SOFTMAX_DEFAULT)
    if config.kwargs["BLOCK_COLS"] < n_cols:  # tuned for narrower rows: the smallest tile that holds a row
        config.kwargs["BLOCK_COLS"] = triton.next_power_of_2(n_cols)
    out = torch.empty_like(x)
    softmax_kernel[softmax_grid(n_rows)](out, x, n_rows, n_cols, **config.all_kwargs())
    return out
