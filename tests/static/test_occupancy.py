"""Theoretical occupancy against numbers worked out by hand from the rules of NVIDIA's cuda_occupancy.h
(cudaOccMaxActiveBlocksPerMultiprocessor): each case's arithmetic is in its comment."""
from __future__ import annotations

import pytest

from pytest_autotune.backends.cuda_arch import ARCH_LIMITS
from pytest_autotune.static.occupancy import LIMITERS, OCCUPANCY_LIMITS, occupancy_limits, theoretical_occupancy

KIB = 1024


def test_every_architecture_of_the_device_table_has_occupancy_rules():
    assert set(OCCUPANCY_LIMITS) == set(ARCH_LIMITS)
    for arch, row in OCCUPANCY_LIMITS.items():
        assert row.max_threads_per_sm % 32 == 0 and row.max_blocks_per_sm in (16, 24, 32)
        assert row.reserved_shared_per_block == (1024 if arch >= 80 else 0)


@pytest.mark.parametrize("arch, threads, registers, shared, barriers, blocks, warps, max_warps, limiter", [
    # sm_90, 256 threads (8 warps), 32 registers: threads 64 warps / 8 = 8 blocks; registers 32 x 32 = 1024
    # per warp, 16384 per quadrant / 1024 = 16 warps x 4 = 64 warps / 8 = 8 blocks; shared 0 + 1 KB reserve
    # = 1024, 233472 / 1024 = 228; blocks 32. min 8 (threads and registers tie: "threads"), 64 / 64 = 100 %.
    (90, 256, 32, 0, 0, 8, 64, 64, "threads"),
    # sm_90, 256 threads, 255 registers: 255 x 32 = 8160 -> 8192 per warp; 16384 / 8192 = 2 warps a quadrant,
    # 8 warps / 8 = 1 block; (block check: 8192 x 8 warps = 65536 <= 64 K). 8 / 64 = 12.5 %.
    (90, 256, 255, 0, 0, 1, 8, 64, "registers"),
    # sm_90, 256 threads, 64 registers: 2048 per warp, 16384 / 2048 = 8 a quadrant, 32 warps / 8 = 4 blocks: 50 %.
    (90, 256, 64, 0, 0, 4, 32, 64, "registers"),
    # sm_90, 256 threads, 33 registers: 33 x 32 = 1056 -> 1280 per warp; 16384 // 1280 = 12 a quadrant, 48 warps
    # / 8 = 6 blocks, 48 / 64 = 75 %.
    (90, 256, 33, 0, 0, 6, 48, 64, "registers"),
    # sm_90, 128 threads (4 warps), 32 registers, 100 KB shared: 102400 + 1024 = 103424 (= 808 x 128);
    # 228 KB = 233472 // 103424 = 2 blocks (threads 16, registers 16): 8 warps, 12.5 %.
    (90, 128, 32, 100 * KIB, 0, 2, 8, 64, "shared memory"),
    # sm_90, 32 threads (1 warp), 16 registers: threads 64 / 1 = 64; registers 512 per warp, 16384 / 512 = 32 a
    # quadrant, 128 blocks; shared 1024 -> 228; blocks 32 -> 32 warps, 50 %.
    (90, 32, 16, 0, 0, 32, 32, 64, "blocks"),
    # sm_86, 32 threads: 16 block slots of 48 warps: 16 / 48 = 33.3 %.
    (86, 32, 16, 0, 0, 16, 16, 48, "blocks"),
    # sm_89, 64 threads (2 warps), 32 registers: threads 48 / 2 = 24, blocks 24 (tie: "threads"): 48 / 48.
    (89, 64, 32, 0, 0, 24, 48, 48, "threads"),
    # sm_75, 1024 threads (32 warps), 64 registers: 2048 per warp x 32 = 65536 fits 64 K; 16384 / 2048 = 8 a
    # quadrant, 32 warps / 32 = 1 block; threads 32 / 32 = 1 (tie: "threads"): 100 %.
    (75, 1024, 64, 0, 0, 1, 32, 32, "threads"),
    # sm_75, 256 threads, 32 registers, 32 KB shared (unit 256, no reserve before sm_80): 65536 / 32768 = 2
    # blocks (threads 32 / 8 = 4, registers 8): 16 warps of 32 = 50 %.
    (75, 256, 32, 32 * KIB, 0, 2, 16, 32, "shared memory"),
    # sm_80, 1 byte of shared memory: 1 + 1024 = 1025 -> 1152 (unit 128); 164 KB = 167936 // 1152 = 145, so the
    # 32 block slots limit 32-thread blocks: 32 warps of 64.
    (80, 32, 16, 1, 0, 32, 32, 64, "blocks"),
    # sm_90, 227 KB shared (the opt-in maximum): 232448 + 1024 = 233472 = all of the 228 KB: 1 block of 4 warps.
    (90, 128, 32, 227 * KIB, 0, 1, 4, 64, "shared memory"),
    # sm_120, 32 threads, 2 block barriers: 24 block slots x 1 barrier slot / 2 = 12 blocks (blocks 24).
    (120, 32, 16, 0, 2, 12, 12, 48, "barriers"),
    # sm_90, 32 threads, 2 block barriers: 32 x 2 / 2 = 32 = the block slots (tie: "blocks").
    (90, 32, 16, 0, 2, 32, 32, 64, "blocks"),
    # sm_80, 2 barriers: no barrier limit before sm_90 ([OCC] applies it from computeMajor 9 on).
    (80, 32, 16, 0, 2, 32, 32, 64, "blocks"),
    # sm_90, no registers reported (0): that resource is unlimited; threads 64 / 8 = 8.
    (90, 256, 0, 0, 0, 8, 64, 64, "threads"),
])
def test_hand_computed_cases(arch, threads, registers, shared, barriers, blocks, warps, max_warps, limiter):
    occ = theoretical_occupancy(arch, threads=threads, registers=registers, shared_per_block=shared,
                                barriers=barriers)
    assert (occ.blocks_per_sm, occ.active_warps, occ.max_warps, occ.limiter) == (blocks, warps, max_warps, limiter)
    assert occ.occupancy == pytest.approx(warps / max_warps)
    assert occ.limits[limiter] == blocks


@pytest.mark.parametrize("arch, threads, registers, shared, why", [
    # 1025 threads: more than a block may have.
    (90, 1025, 32, 0, "threads"),
    # 1024 threads x 65 registers: 65 x 32 = 2080 -> 2304 per warp x 32 warps = 73728 > 64 K registers a block.
    (90, 1024, 65, 0, "registers"),
    # 544 threads (17 warps) x 112 registers: 3584 per warp x 17 = 60928 would fit, but the hardware checks
    # 17 warps rounded up to 20 (a multiple of the 4 quadrants): 3584 x 20 = 71680 > 64 K.
    (90, 544, 112, 0, "registers"),
    # 257 registers per thread: above the 256 of [OCC] cudaOccRegAllocationMaxPerThread (ptxas stops at 255).
    (90, 32, 257, 0, "registers"),
    # 227 KB + 1 byte: 232449 + 1024 -> 233600 > the opt-in 227 KB + the 1 KB reserve = 233472.
    (90, 128, 32, 227 * KIB + 1, "shared memory"),
    # sm_86: 99 KB is its opt-in maximum; 100 KB does not fit.
    (86, 128, 32, 100 * KIB, "shared memory"),
])
def test_nothing_fits(arch, threads, registers, shared, why):
    occ = theoretical_occupancy(arch, threads=threads, registers=registers, shared_per_block=shared)
    assert (occ.blocks_per_sm, occ.active_warps, occ.occupancy, occ.limiter) == (0, 0, 0.0, "none fits")
    assert occ.limits[why] == 0


def test_full_occupancy_on_every_architecture():
    """A 128-thread block with 16 registers and no shared memory fills every SM's warps."""
    for arch, row in OCCUPANCY_LIMITS.items():
        occ = theoretical_occupancy(arch, threads=128, registers=16, shared_per_block=0)
        assert occ.max_warps == row.max_threads_per_sm // 32
        assert occ.occupancy == 1.0, arch
        assert occ.limiter in LIMITERS


@pytest.mark.parametrize("arch", [88, 61, "sm_52", 200])
def test_an_unknown_architecture_is_named(arch):
    with pytest.raises(ValueError, match=r"sm_\d+.*known architectures: sm_70"):
        theoretical_occupancy(arch, threads=128, registers=32, shared_per_block=0)
    with pytest.raises(ValueError, match="no occupancy rules"):
        occupancy_limits(arch)


def test_arch_spellings():
    assert theoretical_occupancy("sm_90", threads=256, registers=32, shared_per_block=0) == \
        theoretical_occupancy(90, threads=256, registers=32, shared_per_block=0)


@pytest.mark.parametrize("kwargs", [
    {"threads": 0}, {"threads": -1}, {"registers": -1}, {"shared_per_block": -5}, {"threads": True},
    {"registers": 3.0}, {"barriers": -1},
])
def test_bad_inputs_are_refused(kwargs):
    args = {"threads": 128, "registers": 32, "shared_per_block": 0, **kwargs}
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        theoretical_occupancy(90, **args)


# -- against NVIDIA's own calculator ------------------------------------------------------------------

ORACLE = r"""
#include <cstdio>
#include "cuda_occupancy.h"
// Reads "cc threads_per_sm shared_per_sm optin reserve threads registers shared barriers" lines and prints
// cudaOccMaxActiveBlocksPerMultiprocessor's block count for each (-1 on an error).
int main() {
    int cc, per_sm, threads, regs, barriers;
    long smem_sm, optin, reserve, smem;
    while (std::scanf("%d %d %ld %ld %ld %d %d %ld %d", &cc, &per_sm, &smem_sm, &optin, &reserve, &threads, &regs,
                      &smem, &barriers) == 9) {
        cudaOccDeviceProp prop;
        prop.computeMajor = cc / 10; prop.computeMinor = cc % 10;
        prop.maxThreadsPerBlock = 1024; prop.maxThreadsPerMultiprocessor = per_sm;
        prop.regsPerBlock = 65536; prop.regsPerMultiprocessor = 65536; prop.warpSize = 32;
        prop.sharedMemPerBlock = 48 * 1024; prop.sharedMemPerMultiprocessor = smem_sm; prop.numSms = 1;
        prop.sharedMemPerBlockOptin = optin; prop.reservedSharedMemPerBlock = reserve;
        cudaOccFuncAttributes attr;
        attr.maxThreadsPerBlock = 1024; attr.numRegs = regs; attr.sharedSizeBytes = smem;
        attr.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN; attr.maxDynamicSharedSizeBytes = optin;
        attr.numBlockBarriers = barriers;
        cudaOccDeviceState state;
        state.carveoutConfig = SHAREDMEM_CARVEOUT_MAX_SHARED;
        cudaOccResult result;
        cudaOccError err = cudaOccMaxActiveBlocksPerMultiprocessor(&result, &prop, &attr, &state, threads, 0);
        std::printf("%d\n", err == CUDA_OCC_SUCCESS ? result.activeBlocksPerMultiprocessor : -1);
    }
    return 0;
}
"""


def test_agrees_with_cuda_occupancy_h(tmp_path):
    """2,600 random launches over every architecture, against cudaOccMaxActiveBlocksPerMultiprocessor compiled
    from the installed CUDA runtime headers (skipped without them or a C++ compiler). The device properties
    fed to it are the table's (threads per SM) and ARCH_LIMITS' (shared memory); the rules and the numbers
    the header holds itself (block slots, allocation units, barrier slots) are the header's."""
    import random
    import shutil
    import subprocess
    from pathlib import Path

    from pytest_autotune.backends.cuda_toolkit import cuda_header_dirs

    include = cuda_header_dirs()[1]
    compiler = shutil.which("g++") or shutil.which("clang++")
    if not include or not (Path(include) / "cuda_occupancy.h").is_file() or not compiler:
        pytest.skip("needs cuda_occupancy.h (the CUDA runtime headers) and a C++ compiler")
    (tmp_path / "oracle.cpp").write_text(ORACLE)
    exe = tmp_path / "oracle"
    subprocess.run([compiler, "-O1", f"-I{include}", "-o", str(exe), str(tmp_path / "oracle.cpp")], check=True,
                   capture_output=True, timeout=120)
    rng = random.Random(38)
    cases, lines = [], []
    for arch in sorted(OCCUPANCY_LIMITS):
        row, limits = OCCUPANCY_LIMITS[arch], ARCH_LIMITS[arch]
        for _ in range(200):
            threads = rng.choice([rng.randint(1, 1024), 32 * rng.randint(1, 32), 1025])
            registers = rng.choice([rng.randint(1, 255), 32 * rng.randint(1, 8), 0, 257])
            shared = rng.choice([0, rng.randint(0, limits["max_shared_memory_per_block"] + 4096),
                                 1024 * rng.randint(0, 64)])
            barriers = rng.choice([0, 1, rng.randint(1, 16)])
            cases.append((arch, threads, registers, shared, barriers))
            lines.append(f"{arch} {row.max_threads_per_sm} {limits['max_shared_memory']} "
                         f"{limits['max_shared_memory_per_block']} {row.reserved_shared_per_block} "
                         f"{threads} {registers} {shared} {barriers}")
    out = subprocess.run([str(exe)], input="\n".join(lines) + "\n", capture_output=True, text=True, check=True,
                         timeout=60).stdout.split()
    assert len(out) == len(cases)
    mismatches = []
    for case, theirs in zip(cases, map(int, out)):
        arch, threads, registers, shared, barriers = case
        mine = theoretical_occupancy(arch, threads=threads, registers=registers, shared_per_block=shared,
                                     barriers=barriers).blocks_per_sm
        if mine != theirs:
            mismatches.append(f"{case}: {mine} != cuda_occupancy.h's {theirs}")
    assert not mismatches, "\n".join(mismatches[:20])
