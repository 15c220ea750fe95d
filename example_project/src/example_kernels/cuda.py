"""Search spaces of the CUDA kernels in ``kernels/*.cu``: one place for the tests, CI's compile check and benchmarks.

Restrictions name the device limits the runners hand to the search space.
Static ``__shared__`` arrays are bounded by ``max_static_shared_memory_per_block``
(48 KiB on every architecture: ptxas refuses more), not by
``max_shared_memory_per_block``, which is the opt-in maximum for static +
*dynamic* shared memory (227 KiB on H100).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MATMUL_CUDA_N = 4096


@dataclass(frozen=True)
class CudaKernel:
    """One tunable CUDA kernel: its file, name, launch shape and search space."""

    file: str
    kernel_name: str
    params: dict[str, list[Any]]
    restrictions: list[str]
    grid_div_x: list[str] | None = None
    grid_div_y: list[str] | None = None
    launch: dict[str, Any] = field(default_factory=dict)  # other KernelSpec arguments


VECTOR_ADD = CudaKernel(
    "vector_add.cu", "vector_add",
    params={"block_size_x": [64, 128, 256, 512, 1024], "WORK_PER_THREAD": [1, 2, 4, 8]},
    restrictions=["block_size_x <= max_threads"],
    grid_div_x=["block_size_x", "WORK_PER_THREAD"],
)

MATMUL = CudaKernel(
    "matmul.cu", "matmul",
    params={"block_size_x": [8, 16, 32, 64], "block_size_y": [2, 4, 8, 16, 32],
            "tile_size_x": [1, 2, 4, 8], "tile_size_y": [1, 2, 4, 8], "TILE_K": [8, 16, 32], "UNROLL": [1, 4]},
    restrictions=[
        "block_size_x * block_size_y <= max_threads",
        "block_size_x * block_size_y >= 64",
        # the two staged tiles are static __shared__ arrays, in bytes
        "(block_size_y * tile_size_y * TILE_K + TILE_K * block_size_x * tile_size_x) * 4"
        " <= max_static_shared_memory_per_block",
        f"{MATMUL_CUDA_N} % (block_size_x * tile_size_x) == 0 and {MATMUL_CUDA_N} % (block_size_y * tile_size_y) == 0",
        "tile_size_x * tile_size_y <= 32",  # registers per thread for the accumulators
    ],
    grid_div_x=["block_size_x", "tile_size_x"], grid_div_y=["block_size_y", "tile_size_y"],
)

CONVOLUTION = CudaKernel(
    "convolution.cu", "convolution",
    params={"block_size_x": [16, 32, 64, 128], "block_size_y": [1, 2, 4, 8, 16],
            "tile_size_x": [1, 2, 4], "tile_size_y": [1, 2, 4], "use_shmem": [0, 1], "FH": [7], "FW": [7]},
    restrictions=["block_size_x * block_size_y <= max_threads",
                  # the staged input tile is a static __shared__ array, in bytes
                  "use_shmem == 0 or (block_size_y * tile_size_y + FH - 1) * (block_size_x * tile_size_x + FW - 1) * 4"
                  " <= max_static_shared_memory_per_block"],
    grid_div_x=["block_size_x", "tile_size_x"], grid_div_y=["block_size_y", "tile_size_y"],
)

REDUCTION = CudaKernel(
    "reduction.cu", "reduce_sum",
    params={"block_size_x": [32, 64, 128, 256, 512, 1024], "ELEMS_PER_THREAD": [1, 2, 4, 8, 16],
            "USE_SHUFFLE": [0, 1]},
    restrictions=["block_size_x <= max_threads"],
    grid_div_x=["block_size_x", "ELEMS_PER_THREAD"],
)

CUDA_KERNELS: dict[str, CudaKernel] = {"vector_add": VECTOR_ADD, "matmul": MATMUL, "convolution": CONVOLUTION,
                                       "reduction": REDUCTION}


def compile_spec_arguments(kernel: CudaKernel) -> dict[str, Any]:
    """``KernelSpec`` arguments for compiling ``kernel`` (tiny placeholder buffers: compiling never reads them)."""
    import numpy as np

    from . import kernel_path

    n = 64
    buf = np.zeros(n, np.float32)
    scalars = {"vector_add": [np.int32(n)], "matmul": [np.int32(n)], "convolution": [np.int32(n), np.int32(n)],
               "reduction": [np.int32(n)]}
    arrays = {"vector_add": 3, "matmul": 3, "convolution": 3, "reduction": 2}
    name = next(k for k, v in CUDA_KERNELS.items() if v is kernel)
    return dict(source=kernel_path(kernel.file), kernel_name=kernel.kernel_name, problem_size=(n, n),
                args=[buf] * arrays[name] + scalars[name], grid_div_x=kernel.grid_div_x, grid_div_y=kernel.grid_div_y)
