"""CPU kernels tuned with the C runner (gcc): this is what runs on a machine without a GPU."""
import numpy as np
import pytest

from example_kernels import (MATMUL_N, MATMUL_PARAMS, MATMUL_RESTRICTIONS, kernel_path, matmul_problem, rng,
                             stencil_reference)


@pytest.mark.tune(params=MATMUL_PARAMS, restrictions=MATMUL_RESTRICTIONS, budget=40)
def test_blocked_matmul(autotune):
    args, expected = matmul_problem()
    result = autotune.kernel(kernel_path("matmul.c"), "matmul", MATMUL_N, args, expected=expected,
                             rtol=1e-4, atol=1e-3)
    # the winner was verified against the reference; the test may inspect it
    assert result.params["LOOP_ORDER"] in ("ijk", "ikj", "jik", "jki", "kij", "kji")
    assert result.stats.median > 0


@pytest.mark.tune(
    params={"TILE_X": [16, 64, 256, 1024], "TILE_Y": [4, 16, 64, 256], "UNROLL": [1, 2, 4], "TRAVERSAL": [0, 1]},
    restrictions=["TILE_X * TILE_Y <= 65536"],
    strategy={"name": "genetic", "constraint_aware": True},  # a non-default strategy, with a hyperparameter
    budget=30,
)
def test_stencil_square_and_wide(autotune):
    """Two kernels in one test: the same stencil on two grid shapes, each with its own lock entry."""
    steps = 4
    for name, (ny, nx) in {"stencil_square": (512, 512), "stencil_wide": (64, 4096)}.items():
        grid = rng(3).random((ny, nx), dtype=np.float32)
        out, tmp = np.zeros_like(grid), np.zeros_like(grid)
        result = autotune.kernel(kernel_path("stencil.c"), "stencil", (nx, ny),
                                 [out, tmp, grid, np.int32(nx), np.int32(ny), np.int32(steps)],
                                 expected=[stencil_reference(grid, steps), None, None, None, None, None],
                                 rtol=1e-5, atol=1e-5, name=name)
        assert result.params["TRAVERSAL"] in (0, 1)
    assert set(autotune.results) == {"stencil_square", "stencil_wide"}
