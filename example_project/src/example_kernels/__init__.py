"""A small kernel library: numpy references and problem set-up for the tuned kernels in ``kernels/``.

The tests in ``tests/`` tune the kernels with pytest-autotune and verify every
candidate against these references.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

KERNELS = Path(__file__).resolve().parents[2] / "kernels"


MATMUL_N = 192  # matrix size: large enough that loop order and blocking matter, small enough to tune quickly
MATMUL_PARAMS = {
    "BLOCK_I": [8, 16, 32, 64, MATMUL_N],
    "BLOCK_J": [16, 32, 64, MATMUL_N],
    "BLOCK_K": [8, 16, 32, 64, MATMUL_N],
    "UNROLL": [1, 4],
    "LOOP_ORDER": ["ijk", "ikj", "jik", "jki", "kij", "kji"],
}
# keep a block of A and a block of B within a 256 KiB L2-sized budget
MATMUL_RESTRICTIONS = ["(BLOCK_I * BLOCK_K + BLOCK_K * BLOCK_J) * 4 <= 262144"]


def kernel_path(name: str) -> str:
    """Absolute path of a kernel source shipped with the project."""
    return str(KERNELS / name)


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def matmul_reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)


def matmul_problem() -> tuple[list, list]:
    """Arguments of ``matmul.c`` (``c``, ``a``, ``b``, ``n``) and the expected outputs aligned with them."""
    n = MATMUL_N
    a = rng(1).random((n, n), dtype=np.float32)
    b = rng(2).random((n, n), dtype=np.float32)
    c = np.zeros((n, n), dtype=np.float32)
    return [c, a, b, np.int32(n)], [matmul_reference(a, b), None, None, None]


def stencil_reference(grid: np.ndarray, steps: int) -> np.ndarray:
    """Five-point Jacobi sweeps; the border stays fixed."""
    cur = grid.astype(np.float32).copy()
    for _ in range(steps):
        nxt = cur.copy()
        nxt[1:-1, 1:-1] = np.float32(0.2) * (cur[1:-1, 1:-1] + cur[1:-1, :-2] + cur[1:-1, 2:]
                                             + cur[:-2, 1:-1] + cur[2:, 1:-1])
        cur = nxt
    return cur


def convolution_reference(padded: np.ndarray, filt: np.ndarray) -> np.ndarray:
    """Cross-correlation of a padded image with a filter ('valid' mode)."""
    windows = sliding_window_view(padded.astype(np.float64), filt.shape)
    return np.einsum("ijkl,kl->ij", windows, filt.astype(np.float64)).astype(np.float32)
