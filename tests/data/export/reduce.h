/* Tuned parameters exported by pytest-autotune from lock. Do not edit: re-run
 *   pytest-autotune export lock --format header --kernel reduce
 * Select a device with -DAUTOTUNE_DEVICE_<SLUG>:
 *   AUTOTUNE_DEVICE_NVIDIA_A100_SXM4_80GB  (NVIDIA A100-SXM4-80GB)
 *   AUTOTUNE_DEVICE_NVIDIA_H100_80GB_HBM3  (NVIDIA H100 80GB HBM3)
 * Names: AUTOTUNE_<KERNEL>[_<SIZE>]_<PARAM>. */
#ifndef AUTOTUNE_PARAMS_REDUCE_H
#define AUTOTUNE_PARAMS_REDUCE_H

#if defined(AUTOTUNE_DEVICE_NVIDIA_A100_SXM4_80GB) + defined(AUTOTUNE_DEVICE_NVIDIA_H100_80GB_HBM3) > 1
#error "pytest-autotune: define at most one AUTOTUNE_DEVICE_<SLUG>"
#endif

#if defined(AUTOTUNE_DEVICE_NVIDIA_A100_SXM4_80GB)
/* reduce (tests/test_red.py::test_sum) */
#define AUTOTUNE_REDUCE_SCALE 0.5
#define AUTOTUNE_REDUCE_THREADS 256
#define AUTOTUNE_REDUCE_VECTOR float4
#elif defined(AUTOTUNE_DEVICE_NVIDIA_H100_80GB_HBM3)
/* reduce (tests/test_red.py::test_sum) */
#define AUTOTUNE_REDUCE_SCALE 0.25
#define AUTOTUNE_REDUCE_THREADS 512
#define AUTOTUNE_REDUCE_VECTOR float2
#else
/* default block: no AUTOTUNE_DEVICE_<SLUG> defined; guard your defaults with #ifndef */
#define AUTOTUNE_NO_DEVICE 1
#endif

#endif /* AUTOTUNE_PARAMS_REDUCE_H */
