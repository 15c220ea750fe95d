/* Tuned parameters exported by pytest-autotune from lock. Do not edit: re-run
 *   pytest-autotune export lock --format header --default-device nvidia-h100-80gb-hbm3
 * Select a device with -DAUTOTUNE_DEVICE_<SLUG>:
 *   AUTOTUNE_DEVICE_NVIDIA_A100_SXM4_80GB  (NVIDIA A100-SXM4-80GB)
 *   AUTOTUNE_DEVICE_NVIDIA_H100_80GB_HBM3  (NVIDIA H100 80GB HBM3)
 * Names: AUTOTUNE_<KERNEL>[_<SIZE>]_<PARAM>. */
#ifndef AUTOTUNE_PARAMS_H
#define AUTOTUNE_PARAMS_H

#if defined(AUTOTUNE_DEVICE_NVIDIA_A100_SXM4_80GB) + defined(AUTOTUNE_DEVICE_NVIDIA_H100_80GB_HBM3) > 1
#error "pytest-autotune: define at most one AUTOTUNE_DEVICE_<SLUG>"
#endif

#if defined(AUTOTUNE_DEVICE_NVIDIA_A100_SXM4_80GB)
/* matmul, problem 1024x1024 (tests/test_mm.py::test_mm[1024]) */
#define AUTOTUNE_MATMUL_1024X1024_BLOCK_SIZE_X 16
#define AUTOTUNE_MATMUL_1024X1024_BLOCK_SIZE_Y 16
#define AUTOTUNE_MATMUL_1024X1024_TILE 2
#define AUTOTUNE_MATMUL_1024X1024_USE_SHARED 1
/* matmul, problem 4096x4096 (tests/test_mm.py::test_mm[4096]) */
#define AUTOTUNE_MATMUL_4096X4096_BLOCK_SIZE_X 32
#define AUTOTUNE_MATMUL_4096X4096_BLOCK_SIZE_Y 8
#define AUTOTUNE_MATMUL_4096X4096_TILE 4
#define AUTOTUNE_MATMUL_4096X4096_USE_SHARED 1
/* reduce (tests/test_red.py::test_sum) */
#define AUTOTUNE_REDUCE_SCALE 0.5
#define AUTOTUNE_REDUCE_THREADS 256
#define AUTOTUNE_REDUCE_VECTOR float4
#elif defined(AUTOTUNE_DEVICE_NVIDIA_H100_80GB_HBM3)
/* matmul, problem 4096x4096 (tests/test_mm.py::test_mm[4096]) */
#define AUTOTUNE_MATMUL_4096X4096_BLOCK_SIZE_X 64
#define AUTOTUNE_MATMUL_4096X4096_BLOCK_SIZE_Y 4
#define AUTOTUNE_MATMUL_4096X4096_TILE 8
#define AUTOTUNE_MATMUL_4096X4096_USE_SHARED 0
/* reduce (tests/test_red.py::test_sum) */
#define AUTOTUNE_REDUCE_SCALE 0.25
#define AUTOTUNE_REDUCE_THREADS 512
#define AUTOTUNE_REDUCE_VECTOR float2
#else
/* default block: no AUTOTUNE_DEVICE_<SLUG> defined; the values of nvidia-h100-80gb-hbm3 */
/* matmul, problem 4096x4096 (tests/test_mm.py::test_mm[4096]) */
#define AUTOTUNE_MATMUL_4096X4096_BLOCK_SIZE_X 64
#define AUTOTUNE_MATMUL_4096X4096_BLOCK_SIZE_Y 4
#define AUTOTUNE_MATMUL_4096X4096_TILE 8
#define AUTOTUNE_MATMUL_4096X4096_USE_SHARED 0
/* reduce (tests/test_red.py::test_sum) */
#define AUTOTUNE_REDUCE_SCALE 0.25
#define AUTOTUNE_REDUCE_THREADS 512
#define AUTOTUNE_REDUCE_VECTOR float2
#define AUTOTUNE_NO_DEVICE 1
#endif

#endif /* AUTOTUNE_PARAMS_H */
