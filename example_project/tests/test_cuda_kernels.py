"""CUDA kernels tuned with the CuPy runner (PyCUDA when CuPy is absent); skipped without a GPU.

Without a GPU, ``pytest --autotune-compile=sm_80,sm_90`` still compiles every kernel's
configurations with NVRTC and fails on one the restrictions allow that cannot work.
The search spaces live in ``example_kernels.cuda``.
"""
import numpy as np
import pytest

from example_kernels import convolution_reference, kernel_path, matmul_reference, rng
from example_kernels.cuda import CONVOLUTION, MATMUL, MATMUL_CUDA_N, REDUCTION, VECTOR_ADD


@pytest.mark.tune(params=VECTOR_ADD.params, restrictions=VECTOR_ADD.restrictions)
def test_vector_add(autotune):
    n = 1 << 24
    a = rng(1).random(n, dtype=np.float32)
    b = rng(2).random(n, dtype=np.float32)
    c = np.zeros_like(a)
    result = autotune.kernel(kernel_path("vector_add.cu"), "vector_add", n, [c, a, b, np.int32(n)],
                             expected=[a + b, None, None, None],
                             grid_div_x=VECTOR_ADD.grid_div_x)
    assert result.params["block_size_x"] * result.params["WORK_PER_THREAD"] >= 64


@pytest.mark.tune(params=MATMUL.params, restrictions=MATMUL.restrictions, budget=60)
def test_tiled_matmul(autotune):
    n = MATMUL_CUDA_N
    a = rng(1).random((n, n), dtype=np.float32)
    b = rng(2).random((n, n), dtype=np.float32)
    c = np.zeros((n, n), dtype=np.float32)
    autotune.kernel(kernel_path("matmul.cu"), "matmul", (n, n), [c, a, b, np.int32(n)],
                    expected=[matmul_reference(a, b), None, None, None], rtol=1e-3, atol=1e-2,
                    grid_div_x=MATMUL.grid_div_x, grid_div_y=MATMUL.grid_div_y)


@pytest.mark.tune(params=CONVOLUTION.params, restrictions=CONVOLUTION.restrictions, strategy={"name": "bayes"},
                  budget=50)
def test_convolution(autotune):
    h = w = 2048
    fh = fw = 7
    image = rng(1).random((h + fh - 1, w + fw - 1), dtype=np.float32)
    filt = rng(2).random((fh, fw), dtype=np.float32)
    out = np.zeros((h, w), dtype=np.float32)
    autotune.kernel(kernel_path("convolution.cu"), "convolution", (w, h),
                    [out, image, filt, np.int32(w), np.int32(h)],
                    expected=[convolution_reference(image, filt), None, None, None, None], rtol=1e-4, atol=1e-3,
                    grid_div_x=CONVOLUTION.grid_div_x, grid_div_y=CONVOLUTION.grid_div_y)


@pytest.mark.tune(params=REDUCTION.params, restrictions=REDUCTION.restrictions)
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
                    grid_div_x=REDUCTION.grid_div_x)
