"""CUDA kernels tuned with the CuPy runner (PyCUDA when CuPy is absent); skipped without a GPU."""
import numpy as np
import pytest

from example_kernels import convolution_reference, kernel_path, matmul_reference, rng


@pytest.mark.tune(params={"block_size_x": [64, 128, 256, 512, 1024], "WORK_PER_THREAD": [1, 2, 4, 8]},
                  restrictions=["block_size_x <= max_threads"])
def test_vector_add(autotune):
    n = 1 << 24
    a = rng(1).random(n, dtype=np.float32)
    b = rng(2).random(n, dtype=np.float32)
    c = np.zeros_like(a)
    result = autotune.kernel(kernel_path("vector_add.cu"), "vector_add", n, [c, a, b, np.int32(n)],
                             expected=[a + b, None, None, None],
                             grid_div_x=["block_size_x", "WORK_PER_THREAD"])
    assert result.params["block_size_x"] * result.params["WORK_PER_THREAD"] >= 64


@pytest.mark.tune(
    params={"block_size_x": [8, 16, 32, 64], "block_size_y": [2, 4, 8, 16, 32],
            "tile_size_x": [1, 2, 4, 8], "tile_size_y": [1, 2, 4, 8], "TILE_K": [8, 16, 32], "UNROLL": [1, 4]},
    restrictions=[
        "block_size_x * block_size_y <= max_threads",
        "block_size_x * block_size_y >= 64",
        # shared memory of the two staged tiles, in bytes, within the per-block limit
        "(block_size_y * tile_size_y * TILE_K + TILE_K * block_size_x * tile_size_x) * 4 <= max_shared_memory_per_block",
        "4096 % (block_size_x * tile_size_x) == 0 and 4096 % (block_size_y * tile_size_y) == 0",
        "tile_size_x * tile_size_y <= 32",  # registers per thread for the accumulators
    ],
    budget=60,
)
def test_tiled_matmul(autotune):
    n = 4096
    a = rng(1).random((n, n), dtype=np.float32)
    b = rng(2).random((n, n), dtype=np.float32)
    c = np.zeros((n, n), dtype=np.float32)
    autotune.kernel(kernel_path("matmul.cu"), "matmul", (n, n), [c, a, b, np.int32(n)],
                    expected=[matmul_reference(a, b), None, None, None], rtol=1e-3, atol=1e-2,
                    grid_div_x=["block_size_x", "tile_size_x"], grid_div_y=["block_size_y", "tile_size_y"])


@pytest.mark.tune(
    params={"block_size_x": [16, 32, 64, 128], "block_size_y": [1, 2, 4, 8, 16],
            "tile_size_x": [1, 2, 4], "tile_size_y": [1, 2, 4], "use_shmem": [0, 1], "FH": [7], "FW": [7]},
    restrictions=["block_size_x * block_size_y <= max_threads",
                  "use_shmem == 0 or (block_size_y * tile_size_y + FH - 1) * (block_size_x * tile_size_x + FW - 1) * 4"
                  " <= max_shared_memory_per_block"],
    strategy={"name": "bayes"},
    budget=50,
)
def test_convolution(autotune):
    h = w = 2048
    fh = fw = 7
    image = rng(1).random((h + fh - 1, w + fw - 1), dtype=np.float32)
    filt = rng(2).random((fh, fw), dtype=np.float32)
    out = np.zeros((h, w), dtype=np.float32)
    autotune.kernel(kernel_path("convolution.cu"), "convolution", (w, h),
                    [out, image, filt, np.int32(w), np.int32(h)],
                    expected=[convolution_reference(image, filt), None, None, None, None], rtol=1e-4, atol=1e-3,
                    grid_div_x=["block_size_x", "tile_size_x"], grid_div_y=["block_size_y", "tile_size_y"])


@pytest.mark.tune(params={"block_size_x": [32, 64, 128, 256, 512, 1024], "ELEMS_PER_THREAD": [1, 2, 4, 8, 16],
                          "USE_SHUFFLE": [0, 1]},
                  restrictions=["block_size_x <= max_threads"])
def test_reduction(autotune):
    n = 1 << 25
    x = rng(1).random(n, dtype=np.float32)
    partial = np.zeros(n // 32 + 1, dtype=np.float32)  # enough for the smallest chunk per block
    total = float(x.astype(np.float64).sum())

    def sums_to_total(expected, outputs):
        got = float(np.asarray(outputs[0], dtype=np.float64).sum())
        assert abs(got - total) <= 1e-4 * total, f"partial sums add up to {got}, expected {total}"
        return True

    # An expected entry marks `partial` as the output, restored to zeros before every run (a
    # configuration with fewer blocks writes fewer partial sums); `verify` checks their total.
    autotune.kernel(kernel_path("reduction.cu"), "reduce_sum", n, [partial, x, np.int32(n)],
                    expected=[np.zeros_like(partial), None, None], verify=sums_to_total,
                    grid_div_x=["block_size_x", "ELEMS_PER_THREAD"])
