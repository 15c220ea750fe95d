"""A small kernel library: numpy references and problem set-up for the tuned kernels in ``kernels/``.

The tests in ``tests/`` tune the kernels with pytest-autotune and verify every
candidate against these references. :func:`blocked_matmul` is the library
function the project ships: it runs ``matmul.c`` with the parameters the lock
holds for this machine (``locked_params``), or a default configuration.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

KERNELS = Path(__file__).resolve().parents[2] / "kernels"
LOCKDIR = Path(__file__).resolve().parents[2] / "autotune.lock"  # committed next to the tests that fill it


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
# what blocked_matmul runs on a machine the lock knows nothing about: a reasonable, untuned choice
MATMUL_DEFAULT = {"BLOCK_I": 64, "BLOCK_J": 64, "BLOCK_K": 64, "UNROLL": 1, "LOOP_ORDER": "ikj"}


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


# --------------------------------------------------------------------------- the shipped library function


def matmul_params(n: int) -> dict[str, Any]:
    """The tuned parameters of ``matmul.c`` for this machine and size ``n`` (nearest tuned size, else the default).

    ``kind="cpu"``: the C runner's lockfile only; the CUDA and OpenCL matmuls of the tests are also named
    ``matmul``, and on a GPU machine the GPU's lockfile would be searched first."""
    from pytest_autotune import locked_params  # no pytest, no CUDA library: fine in production code

    return locked_params("matmul", problem_size=n, lockdir=LOCKDIR, default=MATMUL_DEFAULT, kind="cpu")


def _run_matmul(a: np.ndarray, b: np.ndarray, params: dict[str, Any]) -> np.ndarray:
    """Compile ``matmul.c`` with ``params`` (cached on disk by the C runner) and run it once."""
    from pytest_autotune.measure.timing import MeasureOptions
    from pytest_autotune.runners import make_runner
    from pytest_autotune.execution.kernel import KernelSpec

    n = a.shape[0]
    c = np.zeros((n, n), dtype=np.float32)
    spec = KernelSpec(source=kernel_path("matmul.c"), kernel_name="matmul", problem_size=n,
                      args=[c, a, b, np.int32(n)])
    once = MeasureOptions(warmup=0, min_iterations=1, max_iterations=1, time_budget_s=0.0)
    runner = make_runner(spec, runner="c", isolate=False, measure=once)
    try:
        result = runner.evaluate(params, keep_outputs=True)
    finally:
        runner.close()
    if not result.ok:
        raise RuntimeError(f"matmul.c with {params} failed: {result.detail}")
    return np.array(result.extra["outputs"][0])


def blocked_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` for square float32 matrices, by the C kernel with this machine's tuned blocking."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    b = np.ascontiguousarray(b, dtype=np.float32)
    if a.ndim != 2 or a.shape[0] != a.shape[1] or a.shape != b.shape:
        raise ValueError(f"blocked_matmul: a and b must be square matrices of one size, got {a.shape} and {b.shape}")
    return _run_matmul(a, b, matmul_params(a.shape[0]))
