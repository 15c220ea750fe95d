"""An OpenCL kernel tuned with the opencl runner (PyOpenCL): on a GPU's OpenCL platform, or on the
CPU through PoCL (pip install pocl-binary-distribution). Skipped without PyOpenCL or a device."""
import numpy as np
import pytest

from example_kernels import kernel_path, matmul_reference, rng

N = 128


@pytest.mark.tune(
    params={"block_size_x": [4, 8, 16, 32], "block_size_y": [1, 2, 4, 8], "tile_size_x": [1, 2],
            "tile_size_y": [1, 2], "TILE_K": [8, 16, 32]},
    restrictions=[
        "block_size_x * block_size_y <= max_work_group_size",
        # the two staged tiles, in bytes, within the device's local memory
        "(block_size_y * tile_size_y * TILE_K + TILE_K * block_size_x * tile_size_x) * 4 <= local_mem_size",
        f"{N} % (block_size_x * tile_size_x) == 0 and {N} % (block_size_y * tile_size_y) == 0",
    ],
    # The README's first command tunes this too: PoCL compiles each configuration (one to a few
    # seconds on the CPU, most of it inside the first launch), so a small budget keeps it quick.
    budget=6,
)
def test_opencl_tiled_matmul(autotune):
    a = rng(1).random((N, N), dtype=np.float32)
    b = rng(2).random((N, N), dtype=np.float32)
    c = np.zeros((N, N), dtype=np.float32)
    result = autotune.kernel(kernel_path("matmul.cl"), "matmul", (N, N), [c, a, b, np.int32(N)],
                             expected=[matmul_reference(a, b), None, None, None], rtol=1e-4, atol=1e-3,
                             grid_div_x=["block_size_x", "tile_size_x"], grid_div_y=["block_size_y", "tile_size_y"])
    assert result.params["block_size_x"] * result.params["block_size_y"] <= 1024
