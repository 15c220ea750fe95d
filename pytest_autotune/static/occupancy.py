"""Theoretical occupancy per CUDA architecture, without a device: how many blocks of a kernel fit on one SM
given its threads per block, registers per thread and shared memory per block.

The rules are those of NVIDIA's occupancy calculator, ``cuda_occupancy.h`` (the CUDA 13.5 runtime headers,
wheel ``nvidia-cuda-runtime`` 13.5.37: ``cudaOccMaxActiveBlocksPerMultiprocessor`` and the functions it
calls), cited below as [OCC] with the function's name; the per-architecture numbers the header reads from
the device (threads per SM, registers per SM) come from CCCL's ``cuda/__device/arch_traits.h`` (CCCL 3.x in
the same wheel), cited as [CCCL], and NVIDIA's CUDA C++ Programming Guide, table "Technical Specifications
per Compute Capability", cited as [TS]. Shared memory per SM and per block are
:data:`~pytest_autotune.backends.cuda_arch.ARCH_LIMITS`' (``max_shared_memory``, the largest carveout, and
``max_shared_memory_per_block``, the opt-in maximum), so the two tables cannot disagree on them.

What the calculation assumes: the largest shared-memory carveout (``cudaFuncAttributePreferredSharedMemory
Carveout`` = 100, or a kernel whose shared memory needs it), a kernel that opted in to the dynamic shared
memory it launches with, no partitioned global caching (sm_5x/6x only), no virtual resources (a Blackwell
feature the cubin does not report), and :func:`theoretical_occupancy`'s ``barriers`` (ptxas's "used N
barriers") for the block-barrier limit [OCC] applies from sm_90 on.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from ..backends.cuda_arch import ARCH_LIMITS, parse_arch

KIB = 1024
WARP_SIZE = 32  # [TS] "Warp size": 32; [CCCL] warp_size
MAX_THREADS_PER_BLOCK = 1024  # [TS] "Maximum number of threads per block"; [OCC] ...WarpsLimit: more -> 0 blocks
REGISTERS_PER_SM = 64 * KIB  # [TS] "Number of 32-bit registers per SM": 64 K (7.0-12.x); [CCCL] max_registers_per_multiprocessor
REGISTERS_PER_BLOCK = 64 * KIB  # [TS] "Maximum number of 32-bit registers per thread block": 64 K; [CCCL] max_registers_per_block
MAX_REGISTERS_PER_THREAD = 256  # [OCC] cudaOccRegAllocationMaxPerThread: 256 for 7.x-12.x (what the rule
# checks; ptxas allocates at most 255: [TS] "Maximum number of 32-bit registers per thread")
REGISTER_UNIT = 256  # [OCC] cudaOccRegAllocationGranularity: registers go to warps in units of 256 (3.x-12.x)
SUB_PARTITIONS = 4  # [OCC] cudaOccSubPartitionsPerMultiprocessor: 4 for 7.x-12.x (registers split per quadrant)

# The words :attr:`Occupancy.limiter` takes: the resource whose block limit is the result (ties go to the
# first in this order), or "none fits" when a block cannot run at all.
LIMITERS = ("threads", "blocks", "registers", "shared memory", "barriers", "none fits")


@dataclass(frozen=True)
class ArchOccupancyLimits:
    """What an SM of one architecture offers, as the occupancy rules need it."""

    max_threads_per_sm: int
    max_blocks_per_sm: int
    shared_unit: int  # shared memory is allocated to blocks in multiples of this
    reserved_shared_per_block: int  # what the driver adds to every block's shared memory
    barrier_slots_per_block: int | None  # block barriers per block slot (the limit [OCC] applies from sm_90 on)

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // WARP_SIZE


def _arch(threads: int, blocks: int, shared_unit: int, reserved: int, barriers: int | None = None
          ) -> ArchOccupancyLimits:
    return ArchOccupancyLimits(threads, blocks, shared_unit, reserved, barriers)


# threads per SM | blocks per SM | shared unit | reserved shared per block | barrier slots per block.
# [OCC] cudaOccMaxBlocksPerMultiprocessor gives the blocks; [OCC] cudaOccSMemAllocationGranularity the unit
# (256 for 7.x, 128 from 8.x on); the reserve is [CCCL] reserved_shared_memory_per_block (1024 from sm_80 on,
# 0 before), which [OCC] cudaOccMaxBlocksPerSMSmemLimit adds to the kernel's shared memory and
# cudaOccSMemPerBlock to the per-block limit; [OCC] cudaOccMaxBlocksPerSMBlockBarrierLimit the barrier slots.
OCCUPANCY_LIMITS: dict[int, ArchOccupancyLimits] = {
    # [TS] 7.0 "Maximum number of resident threads per SM" 2048; [CCCL] traits<sm_70> 2048; [OCC] 7.x not Turing: 32 blocks
    70: _arch(2048, 32, 256, 0),
    # [TS] 7.2: 2048 threads (CCCL has no sm_72); [OCC] 7.x not Turing: 32 blocks
    72: _arch(2048, 32, 256, 0),
    # [TS] 7.5: 1024 threads; [CCCL] traits<sm_75> 1024; [OCC] Turing (7.5): 16 blocks
    75: _arch(1024, 16, 256, 0),
    # [TS] 8.0: 2048; [CCCL] traits<sm_80> 2048; [OCC] 8.0: 32 blocks
    80: _arch(2048, 32, 128, KIB),
    # [TS] 8.6: 1536; [CCCL] traits<sm_86> 1536; [OCC] 8.x other than 8.0/8.9: 16 blocks
    86: _arch(1536, 16, 128, KIB),
    # [CCCL] traits<sm_87> 1536; [OCC] 8.x other than 8.0/8.9: 16 blocks
    87: _arch(1536, 16, 128, KIB),
    # [TS] 8.9: 1536; [CCCL] traits<sm_89> 1536; [OCC] 8.9: 24 blocks
    89: _arch(1536, 24, 128, KIB),
    # [TS] 9.0: 2048; [CCCL] traits<sm_90> 2048; [OCC] 9.x: 32 blocks, 2 barrier slots per block
    90: _arch(2048, 32, 128, KIB, 2),
    # [TS] 10.0: 2048; [CCCL] traits<sm_100> 2048; [OCC] 10.0: 32 blocks, 2 barrier slots per block
    100: _arch(2048, 32, 128, KIB, 2),
    # [CCCL] traits<sm_103> = traits<sm_100>: 2048; [OCC] 10.x default: 32 blocks, 10.x not 10.0: 1 barrier slot
    103: _arch(2048, 32, 128, KIB, 1),
    # [CCCL] traits<sm_110> 1536; [OCC] 11.0: 24 blocks, 1 barrier slot per block
    110: _arch(1536, 24, 128, KIB, 1),
    # [TS] 12.x: 1536; [CCCL] traits<sm_120> 1536; [OCC] 12.x: 24 blocks, 1 barrier slot per block
    120: _arch(1536, 24, 128, KIB, 1),
    # [CCCL] traits<sm_121> = traits<sm_120>: 1536; [OCC] 12.x: 24 blocks, 1 barrier slot per block
    121: _arch(1536, 24, 128, KIB, 1),
}


@dataclass(frozen=True)
class Occupancy:
    """How many blocks of a launch fit on one SM, and what stops more: ``limits`` holds each resource's own
    block limit (a resource the kernel does not use, such as registers=0, is left out)."""

    blocks_per_sm: int
    active_warps: int
    max_warps: int
    occupancy: float  # active_warps / max_warps, 0..1
    limiter: str  # one of LIMITERS
    limits: Mapping[str, int] = field(default_factory=dict, hash=False, compare=True)


def occupancy_limits(arch: int | str) -> ArchOccupancyLimits:
    """The occupancy table's row of ``arch``; ValueError naming it (and the known ones) when absent."""
    cc = parse_arch(arch)
    if cc not in OCCUPANCY_LIMITS:
        known = ", ".join(f"sm_{a}" for a in sorted(OCCUPANCY_LIMITS))
        raise ValueError(f"no occupancy rules for sm_{cc}; known architectures: {known}")
    return OCCUPANCY_LIMITS[cc]


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def _count(name: str, value: object, minimum: int = 0) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, not {value!r}")
    return value


def theoretical_occupancy(arch: int | str, *, threads: int, registers: int, shared_per_block: int,
                          barriers: int = 0) -> Occupancy:
    """The theoretical occupancy of a launch of ``threads`` per block, ``registers`` per thread and
    ``shared_per_block`` bytes (static + dynamic; the driver's reserve is added here) on ``arch``.

    Each resource bounds the resident blocks on its own, the smallest bound wins:

    * threads: whole warps per block (a block of 33 threads takes 2 warps) out of the SM's warps;
    * blocks: the SM's block slots;
    * registers: ``registers x 32`` per warp rounded up to 256, each of the 4 sub-partitions holding
      ``64 K / 4`` registers' worth of warps; none fits above 256 per thread or when the block needs more
      than 64 K registers (with its warps rounded up to a multiple of 4, as the hardware checks);
    * shared memory: ``shared_per_block`` + the reserve rounded up to the allocation unit, out of the SM's
      shared memory at the largest carveout; none fits above the opt-in per-block maximum;
    * barriers (sm_90 and later, where ``barriers`` > 0): the block slots x the barrier slots per block,
      divided by the barriers a block uses.
    """
    spec = occupancy_limits(arch)
    cc = parse_arch(arch)
    threads = _count("threads", threads, 1)
    registers = _count("registers", registers)
    shared_per_block = _count("shared_per_block", shared_per_block)
    barriers = _count("barriers", barriers)
    warps = -(-threads // WARP_SIZE)
    limits: dict[str, int] = {
        "threads": 0 if threads > MAX_THREADS_PER_BLOCK else spec.max_warps_per_sm // warps,
        "blocks": spec.max_blocks_per_sm,
    }
    if registers:
        per_warp = _round_up(registers * WARP_SIZE, REGISTER_UNIT)
        if (registers > MAX_REGISTERS_PER_THREAD or per_warp * warps > REGISTERS_PER_BLOCK
                or per_warp * _round_up(warps, SUB_PARTITIONS) > REGISTERS_PER_BLOCK):
            limits["registers"] = 0
        else:
            warps_per_quadrant = (REGISTERS_PER_SM // SUB_PARTITIONS) // per_warp
            limits["registers"] = warps_per_quadrant * SUB_PARTITIONS // warps
    allocated = _round_up(shared_per_block + spec.reserved_shared_per_block, spec.shared_unit)
    if allocated:
        per_sm = ARCH_LIMITS[cc]["max_shared_memory"]
        per_block = ARCH_LIMITS[cc]["max_shared_memory_per_block"] + spec.reserved_shared_per_block
        limits["shared memory"] = 0 if allocated > per_block else per_sm // allocated
    if spec.barrier_slots_per_block and barriers:
        limits["barriers"] = spec.max_blocks_per_sm * spec.barrier_slots_per_block // barriers
    blocks = min(limits.values())
    limiter = "none fits" if blocks == 0 else next(name for name in LIMITERS if limits.get(name) == blocks)
    active = blocks * warps
    return Occupancy(blocks, active, spec.max_warps_per_sm, active / spec.max_warps_per_sm, limiter, limits)
