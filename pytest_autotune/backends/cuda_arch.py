"""Per-architecture CUDA limits, for checks that have no device to ask (``--autotune-compile``).

The runners read limits from the device they measure on; a GPU-less compile
check needs them per *architecture* instead. Each number comes from NVIDIA's
CUDA C++ Programming Guide, "Compute Capabilities", table "Technical
Specifications per Compute Capability" (CUDA 12.9 edition; the same rows in
the CUDA 13 edition), cited in the comments as [TS] with the row name, or
from ptxas itself, cited as [ptxas] (what NVRTC 12.9 and 13.0 report for that
``--gpu-architecture``, checked in ``tests/backends/test_nvrtc_compile.py`` for every
architecture of this table the installed NVRTC targets), or from CCCL's
``libcudacxx/include/cuda/__device/arch_traits.h`` (``cuda::arch::traits``,
CCCL 3.x), cited as [CCCL] with the field: ``max_shared_memory_per_multiprocessor``
and ``max_shared_memory_per_block_optin`` (that minus the 1 KB the driver
reserves per block).

Which architectures an NVRTC can target is its own list
(:func:`pytest_autotune.backends.nvrtc.supported_archs`): NVRTC 12.9 has
sm_70/72 and stops at sm_121; NVRTC 13.0 dropped sm_70/72 (Volta, Xavier)
and offers sm_75 to sm_121 with sm_88 and sm_110 (Thor, sm_101 before).
The table keeps sm_70/72 for NVRTC 12. sm_88 is not in it: neither source
above gives its numbers, so ``--autotune-compile=sm_88`` is refused rather
than checked against guessed limits.

The keys are the restriction constants the runners hand to the search space
(see :func:`pytest_autotune.execution.device.cuda_constants`), so a restriction
evaluates the same with or without a device:

``max_threads``
    threads per block.
``max_registers_per_block``
    32-bit registers per block (registers per thread x threads must fit).
``max_registers_per_thread``
    what ptxas may allocate to one thread.
``max_static_shared_memory_per_block``
    ``__shared__`` arrays sized at compile time: ptxas rejects more
    ("uses too much shared data (0x10100 bytes, 0xc000 max)").
``max_shared_memory_per_block``
    static + dynamic shared memory of one block after the kernel opts in
    (``cudaFuncAttributeMaxDynamicSharedMemorySize``): the *opt-in* maximum.
``max_shared_memory_per_block_default``
    static + dynamic without the opt-in (48 KiB everywhere).
``max_shared_memory``
    shared memory per multiprocessor.
"""
from __future__ import annotations

import re
from typing import Any

KIB = 1024

_COMMON: dict[str, int] = {
    "max_threads": 1024,  # [TS] "Maximum number of threads per block": 1024 for 7.0-12.x
    "max_block_dim_x": 1024,  # [TS] "Maximum x- or y-dimensionality of a block": 1024
    "max_block_dim_y": 1024,  # [TS] same row
    "max_block_dim_z": 64,  # [TS] "Maximum z-dimension of a block": 64
    "max_grid_dim_x": 2**31 - 1,  # [TS] "Maximum x-dimension of a grid of thread blocks": 2^31-1
    "max_grid_dim_y": 65535,  # [TS] "Maximum y- or z-dimension of a grid of thread blocks": 65535
    "max_grid_dim_z": 65535,  # [TS] same row
    "warp_size": 32,  # [TS] "Warp size": 32
    "max_registers_per_block": 64 * KIB,  # [TS] "Maximum number of 32-bit registers per thread block": 64 K
    "max_registers_per_thread": 255,  # [TS] "Maximum number of 32-bit registers per thread": 255
    "max_static_shared_memory_per_block": 48 * KIB,  # [TS] footnote: "static shared memory ... limited to 48 KB";
    # [ptxas] "uses too much shared data (..., 0xc000 max)" for sm_70 to sm_100
    "max_shared_memory_per_block_default": 48 * KIB,  # [TS] "Maximum amount of shared memory per thread
    # block" without opt-in: 48 KB (kernels must opt in above 48 KB: cudaFuncSetAttribute)
}

ARCH_LIMITS: dict[int, dict[str, int]] = {
    70: {  # Volta (V100)
        "max_shared_memory_per_block": 96 * KIB,  # [TS] "Maximum amount of shared memory per thread block" 7.0: 96 KB
        "max_shared_memory": 96 * KIB,  # [TS] "Maximum amount of shared memory per SM" 7.0: 96 KB
    },
    72: {  # Xavier
        "max_shared_memory_per_block": 96 * KIB,  # [TS] 7.2: 96 KB
        "max_shared_memory": 96 * KIB,  # [TS] 7.2: 96 KB
    },
    75: {  # Turing (T4, RTX 20xx)
        "max_shared_memory_per_block": 64 * KIB,  # [TS] 7.5: 64 KB
        "max_shared_memory": 64 * KIB,  # [TS] 7.5: 64 KB
    },
    80: {  # Ampere A100
        "max_shared_memory_per_block": 163 * KIB,  # [TS] 8.0: 163 KB
        "max_shared_memory": 164 * KIB,  # [TS] 8.0: 164 KB
    },
    86: {  # Ampere GA10x (RTX 30xx, A40, A10)
        "max_shared_memory_per_block": 99 * KIB,  # [TS] 8.6: 99 KB
        "max_shared_memory": 100 * KIB,  # [TS] 8.6: 100 KB
    },
    87: {  # Orin
        "max_shared_memory_per_block": 163 * KIB,  # [TS] 8.7: 163 KB
        "max_shared_memory": 164 * KIB,  # [TS] 8.7: 164 KB
    },
    89: {  # Ada (L4, L40, RTX 40xx)
        "max_shared_memory_per_block": 99 * KIB,  # [TS] 8.9: 99 KB
        "max_shared_memory": 100 * KIB,  # [TS] 8.9: 100 KB
    },
    90: {  # Hopper (H100, H200)
        "max_shared_memory_per_block": 227 * KIB,  # [TS] 9.0: 227 KB
        "max_shared_memory": 228 * KIB,  # [TS] 9.0: 228 KB
    },
    100: {  # Blackwell B200
        "max_shared_memory_per_block": 227 * KIB,  # [TS] 10.0: 227 KB
        "max_shared_memory": 228 * KIB,  # [TS] 10.0: 228 KB
    },
    103: {  # Blackwell Ultra B300/GB300
        "max_shared_memory_per_block": 227 * KIB,  # [CCCL] traits<sm_103> = traits<sm_100>: optin 228 - 1 KB
        "max_shared_memory": 228 * KIB,  # [CCCL] max_shared_memory_per_multiprocessor 228 * 1024 (from sm_100)
    },
    110: {  # Thor (sm_101 until CUDA 13)
        "max_shared_memory_per_block": 227 * KIB,  # [CCCL] traits<sm_110> = traits<sm_100>: optin 228 - 1 KB
        "max_shared_memory": 228 * KIB,  # [CCCL] max_shared_memory_per_multiprocessor 228 * 1024 (from sm_100)
    },
    120: {  # Blackwell GB20x (RTX 50xx, RTX PRO 6000)
        "max_shared_memory_per_block": 99 * KIB,  # [CCCL] traits<sm_120>: optin = 100 KB - 1 KB reserved; [TS] 12.x
        "max_shared_memory": 100 * KIB,  # [CCCL] traits<sm_120>: max_shared_memory_per_multiprocessor 100 * 1024
    },
    121: {  # GB10 (DGX Spark): CCCL has no row of its own (its highest is sm_120); [TS] 12.x covers 12.0 and 12.1
        "max_shared_memory_per_block": 99 * KIB,  # [TS] 12.x: 99 KB (= sm_120's [CCCL] row)
        "max_shared_memory": 100 * KIB,  # [TS] 12.x: 100 KB
    },
}


def parse_arch(text: str | int) -> int:
    """``"sm_90"``, ``"sm90"``, ``"90"``, ``"9.0"``, ``"compute_90"`` or ``90`` -> ``90``; ValueError otherwise."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    value = str(text).strip().lower()
    match = re.fullmatch(r"(?:sm_?|compute_?)?(\d+)(?:\.(\d))?[af]?", value)
    if not match:
        raise ValueError(f"{text!r} is not a CUDA architecture (use sm_80, sm_90, ...)")
    major, minor = match.groups()
    return int(major) * 10 + int(minor) if minor is not None else int(major)


def arch_limits(arch: str | int) -> dict[str, Any]:
    """Restriction constants of ``arch`` (``"sm_90"`` or ``90``), as a device of that architecture reports them.

    Raises ValueError naming the known architectures for one not in the table.
    """
    cc = parse_arch(arch)
    if cc not in ARCH_LIMITS:
        known = ", ".join(f"sm_{a}" for a in sorted(ARCH_LIMITS))
        raise ValueError(f"no device limits for sm_{cc}; known architectures: {known}")
    return {**_COMMON, **ARCH_LIMITS[cc], "compute_capability": cc}
