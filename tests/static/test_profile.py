"""StaticProfile from real cubins: NVRTC compiles (no GPU needed) disassembled by the real nvdisasm, so the
fingerprint, the resources and the instruction counts are checked against what the compiler really made.
The parser, the classes and the lockfile validation are also checked on their own, without either tool."""
from __future__ import annotations

import math
import os
import re
import stat
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_autotune.backends import nvrtc
from pytest_autotune.backends.cuda_toolkit import cuda_header_dirs
from pytest_autotune.errors import BackendUnavailable
from pytest_autotune.static import disasm
from pytest_autotune.static.disasm import DisassemblyError, Instruction, parse_disassembly
from pytest_autotune.static.occupancy import theoretical_occupancy
from pytest_autotune.static.profile import (INSTRUCTION_CLASSES, MATH_CLASSES, MEMORY_CLASSES, StaticProfile,
                                            classify, count_instructions, fingerprint, instruction_class,
                                            normalised_sass, profile_cubin)


def _tools_reason() -> str | None:
    reason = nvrtc.nvrtc_unavailable_reason()
    if reason:
        return reason
    try:
        disasm.find_nvdisasm()
    except BackendUnavailable as exc:
        return str(exc)
    return None


needs_tools = pytest.mark.skipif(_tools_reason() is not None, reason=f"needs NVRTC and nvdisasm: {_tools_reason()}")

AXPY = """
#define WORK {work}
extern "C" __global__ void axpy(const float* a, const float* b, float* y, int n) {{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float acc = 0.0f;
#pragma unroll
  for (int w = 0; w < WORK; ++w) acc += a[i + w * n] * b[i + w * n];
  y[i] = acc;
}}
"""
# The same code as AXPY(work=1): comments, blank lines, other indentation, a #line directive.
AXPY_EDITED = """
#define WORK 1
// a comment the binary must not see
#line 300 "elsewhere.cu"
extern "C" __global__ void axpy(const float* a,
                                const float* b, float* y, int n) {   /* and another */


        int i = blockIdx.x * blockDim.x + threadIdx.x;   // index
        float acc = 0.0f;
#pragma unroll
        for (int w = 0; w < WORK; ++w)
            acc += a[i + w * n] * b[i + w * n];
        y[i] = acc;
}
"""
LOOP = """
extern "C" __global__ void loop(const float* a, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float acc = a[i];
  for (int k = 0; k < n; ++k) acc = acc * 1.0001f + a[k];
  SECOND
  y[i] = acc;
}
"""
SECOND_LOOP = "for (int k = 0; k < n; ++k) acc = acc * 0.9999f - a[k + n];"
LOCAL = """
extern "C" __global__ void local(const float* x, float* y, const int* idx, int n) {
  float arr[64];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  for (int j = 0; j < 64; ++j) arr[(j * 7 + idx[j]) & 63] = x[j * n + i];
  y[i] = arr[idx[i] & 63];
}
"""
SHARED = """
extern "C" __global__ void shared(const float* a, float* y) {
  __shared__ float s[SIZE];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  s[threadIdx.x % SIZE] = a[i];
  __syncthreads();
  y[i] = s[(threadIdx.x + 1) % SIZE];
}
"""
REGS = """
#define K 64
extern "C" __global__ void __launch_bounds__(BOUND) regs(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v[K];
#pragma unroll
  for (int j = 0; j < K; ++j) v[j] = x[i + j * n];
#pragma unroll
  for (int r = 0; r < 8; ++r) {
#pragma unroll
    for (int j = 0; j < K; ++j) v[j] = v[j] * v[(j + 1) % K] + 1.0f;
  }
  float acc = 0.0f;
#pragma unroll
  for (int j = 0; j < K; ++j) acc += v[j];
  y[i] = acc;
}
"""
HALF = """
#include <cuda_fp16.h>
extern "C" __global__ void half_fma(const __half* a, const __half* b, __half* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  __half2 x = __halves2half2(a[i], a[i + 1]), z = __halves2half2(b[i], b[i + 1]);
  x = __hfma2(x, z, x);
  y[i] = __hadd(__low2half(x), __high2half(x));
}
"""
NOINLINE = """
__device__ __noinline__ float helper(float v) { return v * v + 1.0f; }
extern "C" __global__ void caller(const float* a, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  y[i] = helper(a[i]);
}
"""
# An architecture of each family (the parser and the classes across Turing..Blackwell); sm_90 is "axpy1".
ARCHS = (75, 80, 89, 90, 100, 120)


def _compile(source: str, name: str, arch: int = 90, options: tuple[str, ...] = ()) -> nvrtc.NvrtcResult:
    result = nvrtc.compile_source(source, name, ("--std=c++17",) + options, arch=arch, keep_cubin=True)
    assert result.ok, result.log
    return result


def _profile(result: nvrtc.NvrtcResult, threads: int = 256, dynamic_shared: int = 0) -> StaticProfile:
    assert result.cubin is not None and result.lowered_name is not None and result.resources is not None
    return profile_cubin(result.cubin, arch=result.arch, symbol=result.lowered_name, resources=result.resources,
                         threads=threads, dynamic_shared=dynamic_shared,
                         toolchain={"compiler": "nvrtc " + ".".join(map(str, nvrtc.nvrtc_version()))})


@pytest.fixture(scope="module")
def built() -> dict[str, tuple[nvrtc.NvrtcResult, StaticProfile]]:
    """Every kernel the tests look at, compiled once and profiled in parallel (nvdisasm takes ~0.7 s)."""
    reason = _tools_reason()
    if reason:
        pytest.skip(f"needs NVRTC and nvdisasm: {reason}")
    cudart = cuda_header_dirs()[1]
    sources = {
        "axpy1": (AXPY.format(work=1), "axpy", 90, ()),
        "axpy1_again": (AXPY.format(work=1), "axpy", 90, ()),
        "axpy1_edited": (AXPY_EDITED, "axpy", 90, ()),
        "axpy4": (AXPY.format(work=4), "axpy", 90, ()),
        "loop": (LOOP.replace("SECOND", ""), "loop", 90, ()),
        "loop2": (LOOP.replace("SECOND", SECOND_LOOP), "loop", 90, ()),
        "local": (LOCAL, "local", 90, ()),
        "shared256": (SHARED.replace("SIZE", "256"), "shared", 90, ()),
        "shared1024": (SHARED.replace("SIZE", "1024"), "shared", 90, ()),
        "regs1024": (REGS.replace("BOUND", "1024"), "regs", 90, ()),
        "regs256": (REGS.replace("BOUND", "256"), "regs", 90, ()),
        "noinline": (NOINLINE, "caller", 90, ()),
    }
    if cudart:
        sources["half"] = (HALF, "half_fma", 90, (f"-I{cudart}",))
    supported = set(nvrtc.supported_archs())
    for arch in ARCHS:
        if arch in supported and arch != 90:
            sources[f"axpy1_sm{arch}"] = (AXPY.format(work=1), "axpy", arch, ())

    def build(item: tuple[str, str, int, tuple[str, ...]]) -> tuple[nvrtc.NvrtcResult, StaticProfile]:
        result = _compile(*item)
        return result, _profile(result)

    with ThreadPoolExecutor(max_workers=max(2, min(8, os.cpu_count() or 2))) as pool:
        return dict(zip(sources, pool.map(build, sources.values())))


# -- from real compiles ------------------------------------------------------------------------------


@needs_tools
def test_a_rebuild_and_a_comment_edit_keep_the_fingerprint(built):
    first = built["axpy1"][1]
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", first.fingerprint)
    assert built["axpy1_again"][1].fingerprint == first.fingerprint
    assert built["axpy1_edited"][1].fingerprint == first.fingerprint
    assert built["axpy1_edited"][1].instructions == first.instructions


@needs_tools
def test_more_work_changes_the_fingerprint_and_the_global_loads(built):
    one, four = built["axpy1"][1], built["axpy4"][1]
    assert one.fingerprint != four.fingerprint
    assert one.instructions["global_load"] == 2  # a[i] and b[i]
    assert four.instructions["global_load"] == 8  # unrolled 4 times
    assert one.instructions["global_store"] == four.instructions["global_store"] == 1
    assert four.instructions["total"] > one.instructions["total"]


@needs_tools
def test_a_doubled_loop_changes_the_fingerprint_and_adds_instructions(built):
    single, double = built["loop"][1], built["loop2"][1]
    assert single.fingerprint != double.fingerprint
    assert double.instructions["total"] > single.instructions["total"]
    assert double.instructions["fp32"] > single.instructions["fp32"]
    assert double.instructions["control"] > single.instructions["control"]


@needs_tools
def test_a_dynamically_indexed_array_lives_in_local_memory(built):
    result, profile = built["local"]
    assert profile.stack_frame == result.resources.stack_frame >= 64 * 4
    assert profile.instructions["local_store"] > 0 and profile.instructions["local_load"] > 0
    assert profile.memory_instructions() >= profile.instructions["local_load"] + profile.instructions["local_store"]
    assert built["axpy1"][1].stack_frame == 0
    assert built["axpy1"][1].instructions["local_load"] == 0


@needs_tools
def test_a_larger_shared_array_shows_in_static_shared(built):
    small, large = built["shared256"][1], built["shared1024"][1]
    assert (small.static_shared, large.static_shared) == (1024, 4096)
    assert small.instructions["shared_store"] >= 1 and small.instructions["shared_load"] >= 1
    assert small.instructions["barrier"] >= 1  # __syncthreads
    assert built["axpy1"][1].static_shared == 0


@needs_tools
def test_the_launch_bounds_change_the_registers(built):
    (r1024, tight), (r256, loose) = built["regs1024"], built["regs256"]
    assert tight.registers == r1024.resources.registers <= 64  # 64 K registers / 1024 threads
    assert loose.registers == r256.resources.registers
    assert tight.registers != loose.registers
    assert tight.fingerprint != loose.fingerprint
    assert (tight.spill_stores, tight.spill_loads) == (r1024.resources.spill_stores, r1024.resources.spill_loads)


@needs_tools
def test_half_math_counts_as_fp16(built):
    if "half" not in built:
        pytest.skip("no CUDA runtime headers (cuda_fp16.h) here")
    half = built["half"][1]
    assert half.instructions["fp16"] >= 2  # the HFMA2 and the HADD
    assert built["axpy1"][1].instructions["fp16"] == 0
    assert built["axpy1"][1].instructions["fp32"] >= 1
    assert half.math_instructions() >= half.instructions["fp16"]


@needs_tools
def test_a_noinline_device_function_is_counted_with_its_kernel(built):
    _, profile = built["noinline"]
    assert profile.instructions["control"] >= 3  # CALL, RET, EXIT


@needs_tools
def test_the_profile_carries_resources_occupancy_and_toolchain(built):
    result, profile = built["axpy1"]
    assert profile.arch == 90 and profile.threads == 256 and profile.dynamic_shared == 0
    assert profile.registers == result.resources.registers
    expected = theoretical_occupancy(90, threads=256, registers=profile.registers, shared_per_block=0)
    assert (profile.blocks_per_sm, profile.occupancy_limiter) == (expected.blocks_per_sm, expected.limiter)
    assert profile.occupancy == round(expected.occupancy, 4)
    assert set(profile.instructions) == set(INSTRUCTION_CLASSES)
    assert profile.instructions["total"] == sum(v for k, v in profile.instructions.items() if k != "total")
    assert profile.toolchain["compiler"].startswith("nvrtc ")
    assert re.fullmatch(r"\d+\.\d+\.\d+", profile.toolchain["nvdisasm"])
    assert re.fullmatch(r"\d+\.\d+\.\d+", profile.toolchain["ptxas"])


@needs_tools
def test_the_dynamic_shared_memory_of_the_launch_enters_the_occupancy(built):
    result, _ = built["axpy1"]
    profile = _profile(result, threads=128, dynamic_shared=100 * 1024)
    assert profile.dynamic_shared == 100 * 1024
    assert (profile.blocks_per_sm, profile.occupancy_limiter) == (2, "shared memory")  # see test_occupancy


@needs_tools
@pytest.mark.parametrize("arch", ARCHS)
def test_every_architecture_family_parses(built, arch):
    key = "axpy1" if arch == 90 else f"axpy1_sm{arch}"
    if key not in built:
        pytest.skip(f"this NVRTC cannot target sm_{arch}")
    result, profile = built[key]
    assert profile.arch == arch
    assert profile.instructions["global_load"] == 2 and profile.instructions["global_store"] == 1
    assert profile.instructions["fp32"] >= 1 and profile.instructions["control"] >= 1
    assert profile.instructions["other"] < profile.instructions["total"] / 2
    assert StaticProfile.from_dict(profile.to_dict()) == profile


@needs_tools
def test_a_missing_symbol_names_the_functions_the_cubin_has(built):
    result, _ = built["axpy1"]
    with pytest.raises(ValueError, match=r"no function 'axpy_other'.*axpy"):
        profile_cubin(result.cubin, arch=90, symbol="axpy_other", resources=result.resources, threads=32,
                      dynamic_shared=0, toolchain={})


@needs_tools
def test_a_cubin_of_another_architecture_is_refused(built):
    result, _ = built["axpy1"]
    with pytest.raises(ValueError, match="built for sm_90, not sm_80"):
        profile_cubin(result.cubin, arch=80, symbol="axpy", resources=result.resources, threads=32,
                      dynamic_shared=0, toolchain={})


@needs_tools
def test_resources_of_another_build_are_refused(built):
    result, _ = built["axpy1"]
    wrong = replace(result.resources, registers=result.resources.registers + 1)
    with pytest.raises(ValueError, match="EIATTR_REGCOUNT"):
        profile_cubin(result.cubin, arch=90, symbol="axpy", resources=wrong, threads=32, dynamic_shared=0,
                      toolchain={})


@needs_tools
def test_the_fingerprint_does_not_depend_on_the_nvdisasm_version(built):
    """Triton bundles its own nvdisasm (13.1 beside the 13.5 wheel here): the same cubin reads the same."""
    other = disasm._triton_candidate()
    if other is None or not other.is_file() or str(other) == disasm.find_nvdisasm():
        pytest.skip("no second nvdisasm (Triton's) here")
    jobs = [(built[key][0].cubin, exe) for key in ("loop2", "noinline") for exe in (disasm.find_nvdisasm(), str(other))]
    with ThreadPoolExecutor(max_workers=4) as pool:
        texts = list(pool.map(lambda job: parse_disassembly(disasm.disassemble(*job)), jobs))
    for mine, theirs in zip(texts[::2], texts[1::2]):
        assert fingerprint(mine) == fingerprint(theirs)
        assert count_instructions(mine.text.values()) == count_instructions(theirs.text.values())


@needs_tools
def test_the_disassembly_keeps_registers_shared_and_tool_notes(built):
    result, _ = built["shared1024"]
    parsed = parse_disassembly(disasm.disassemble(result.cubin))
    assert parsed.target == "sm_90"
    assert parsed.info["shared"]["EIATTR_REGCOUNT"] == result.resources.registers
    assert parsed.shared["shared"] == 4096 + 1024  # sm_90's section includes the reserved 1 KB at its start
    assert parsed.ptxas_version() is not None
    assert parsed.text["shared"].entry


def test_nvdisasm_failures_carry_its_message():
    with pytest.raises(DisassemblyError, match="ELF magic"):
        disasm.disassemble(b"not a cubin")
    if _tools_reason() is None:
        with pytest.raises(DisassemblyError, match="failed"):
            disasm.disassemble(b"\x7fELF" + b"\x00" * 60)


# -- the parser, on text in nvdisasm's layout ---------------------------------------------------------

SAMPLE = r"""
	.target	sm_90
	.elftype	@"ET_EXEC"

//--------------------- .note.nv.tkinfo           --------------------------
	.section	.note.nv.tkinfo,"",@"SHT_NOTE"
        /*0018*/ 	.word	0x00000002
        /*0030*/ 	.string	""
        /*0030*/ 	.string	"ptxas"
        /*0030*/ 	.string	"Cuda compilation tools, release 13.0, V13.0.88"

//--------------------- .nv.info                  --------------------------
	.section	.nv.info,"",@"SHT_CUDA_INFO"
	//----- nvinfo : EIATTR_REGCOUNT
	.align		4
        /*0000*/ 	.byte	0x04, 0x2f
        /*0002*/ 	.short	(.L_1 - .L_0)
.L_0:
        /*0004*/ 	.word	index@(k)
        /*0008*/ 	.word	0x00000018
	//----- nvinfo : EIATTR_MAX_STACK_SIZE
.L_1:
        /*000c*/ 	.byte	0x04, 0x23
        /*000e*/ 	.short	(.L_3 - .L_2)
.L_2:
        /*0010*/ 	.word	index@(k)
        /*0014*/ 	.word	0x00000010

//--------------------- .nv.info.k                --------------------------
	.section	.nv.info.k,"",@"SHT_CUDA_INFO"
	//----- nvinfo : EIATTR_MAXREG_COUNT
	.align		4
        /*002c*/ 	.byte	0x03, 0x1b
        /*002e*/ 	.short	0x00ff
	//----- nvinfo : EIATTR_NUM_BARRIERS
        /*0050*/ 	.byte	0x02, 0x4c
        /*0052*/ 	.byte	0x01
	.zero		1

//--------------------- .text.k                   --------------------------
	.section	.text.k,"ax",@progbits
	.align	128
        .global         k
        .type           k,@function
        .other          k,@"STO_CUDA_ENTRY STV_DEFAULT"
k:
.text.k:
        /*0000*/                   LDC R1, c[0x0][0x28] ;                 /* 0x00000a00ff017b82 */
                                                                          /* 0x000fe20000000800 */
        /*0008*/         {         IADD32I R1, R1, -0x8 ;
        /*0010*/                   S2R R0, SR_TID.X ;        }
.L_x_0:
        /*0020*/               @P0 BRA `(.L_x_1) ;
        /*0030*/              @!PT LDS RZ, [RZ] ;
        /*0040*/                   HFMA2.MMA R3, -RZ, RZ, 0, 0 ;
        /*0050*/                   LDG.E.128 R4, desc[UR4][R2.64] ;  // a comment
        /*0060*/                   CALL.REL.NOINC `($k$helper) ;
.L_x_1:
        /*0070*/                   EXIT ;
$k$helper:
        /*0080*/                   FFMA R0, R0, R0, 1 ;
        /*0090*/                   RET.REL.NODEC R4 `(k) ;
.L_x_2:
        /*00a0*/                   BRA `(.L_x_2);
        /*00b0*/                   NOP;
        /*00c0*/                   NOP;

//--------------------- .nv.shared.k              --------------------------
	.section	.nv.shared.k,"aw",@nobits
.nv.shared.k:
	.zero		2048
"""


def test_the_parser_reads_every_part_of_the_layout():
    parsed = parse_disassembly(SAMPLE)
    assert parsed.target == "sm_90"
    assert parsed.ptxas_version() == "13.0.88"
    assert parsed.info["k"] == {"EIATTR_REGCOUNT": 24, "EIATTR_MAX_STACK_SIZE": 16, "EIATTR_MAXREG_COUNT": 255,
                                "EIATTR_NUM_BARRIERS": 1}
    assert parsed.shared == {"k": 2048}
    section = parsed.text["k"]
    assert section.entry and section.functions == {"k": 0, "$k$helper": 9}
    assert [i.text for i in section.instructions] == [
        "LDC R1, c[0x0][0x28]", "IADD32I R1, R1, -0x8", "S2R R0, SR_TID.X", "@P0 BRA `(.L_x_1)", "@!PT LDS RZ, [RZ]",
        "HFMA2.MMA R3, -RZ, RZ, 0, 0", "LDG.E.128 R4, desc[UR4][R2.64]", "CALL.REL.NOINC `($k$helper)", "EXIT",
        "FFMA R0, R0, R0, 1", "RET.REL.NODEC R4 `(k)", "BRA `(.L_x_2)", "NOP", "NOP"]
    assert section.instructions[4] == Instruction("@!PT", "LDS", "RZ, [RZ]")
    assert section.labels == {".L_x_0": 3, ".L_x_1": 8, ".L_x_2": 11}


def test_counts_leave_the_padding_out_and_the_fingerprint_keeps_it():
    parsed = parse_disassembly(SAMPLE)
    counts = count_instructions(parsed.text.values())
    assert counts["total"] == 11  # 14 instructions less the self-branch and two NOPs
    assert counts["control"] == 4  # @P0 BRA, CALL, EXIT, RET
    assert counts["integer"] == 2  # IADD32I and the HFMA2 constant move
    assert counts["fp16"] == 0 and counts["fp32"] == 1
    assert (counts["global_load"], counts["shared_load"], counts["constant_load"], counts["other"]) == (1, 1, 1, 1)
    text = normalised_sass(parsed)
    assert "BRA `(.L@11)" in text and "NOP" in text and "$k$helper:" in text
    assert "@P0 BRA `(.L@8)" in text  # the label's instruction index, not nvdisasm's number
    padded_less = SAMPLE.replace("        /*00c0*/                   NOP;\n", "")
    assert fingerprint(parse_disassembly(padded_less)) != fingerprint(parsed)
    renumbered = SAMPLE.replace(".L_x_1", ".L_x_7")
    assert fingerprint(parse_disassembly(renumbered)) == fingerprint(parsed)


@pytest.mark.parametrize("opcode, expected", [
    ("FFMA", "fp32"), ("MUFU.EX2", "fp32"), ("MUFU.RSQ64H", "fp64"), ("DFMA.RP", "fp64"), ("HFMA2.BF16", "fp16"),
    ("HADD2.F32", "fp16"), ("LDG.E.128", "global_load"), ("LDG.E.CONSTANT", "global_load"), ("LD.E", "global_load"),
    ("LDGSTS.E.BYPASS.128", "global_load"), ("UTMALDG.2D", "global_load"), ("UBLKCP.S.G", "global_load"),
    ("STG.E.64", "global_store"), ("ST.E", "global_store"), ("UTMASTG.2D", "global_store"),
    ("ATOMG.E.ADD.STRONG.GPU", "global_atomic"), ("RED.E.ADD.F32.FTZ.RN", "global_atomic"),
    ("ATOM.E.CAS", "global_atomic"), ("ATOMS.ADD", "shared_atomic"), ("LDS.U.128", "shared_load"),
    ("LDSM.16.M88.4", "shared_load"), ("STS.64", "shared_store"), ("STSM.16.M88.4", "shared_store"),
    ("LDL.64", "local_load"), ("STL.128", "local_store"), ("LDC.64", "constant_load"), ("ULDC", "constant_load"),
    ("HMMA.16816.F32", "tensor"), ("HMMA.SP.16832.F32.BF16", "tensor"), ("IMMA.16832.S8.S8", "tensor"),
    ("DMMA.8x8x4", "tensor"), ("HGMMA.64x128x16.F32", "tensor"), ("UTCHMMA", "tensor"), ("UTCQMMA.2CTA", "tensor"),
    ("QMMA.16832.F32.E4M3.E4M3", "tensor"), ("IMAD.WIDE.U32", "integer"), ("IADD3.X", "integer"),
    ("LOP3.LUT", "integer"), ("MOV", "integer"), ("UIADD3", "integer"), ("VIADD", "integer"),
    ("F2F.F16.F32", "conversion"), ("I2F.F64", "conversion"), ("F2I.TRUNC.NTZ", "conversion"),
    ("F2FP.BF16.F32.PACK_AB", "conversion"), ("BRA", "control"), ("BRA.U", "control"), ("BRX", "control"),
    ("CALL.REL.NOINC", "control"), ("RET.REL.NODEC", "control"), ("EXIT", "control"), ("BSSY", "control"),
    ("BSYNC.RECONVERGENT", "control"), ("WARPSYNC.ALL", "control"), ("YIELD", "control"),
    ("BAR.SYNC.DEFER_BLOCKING", "barrier"), ("MEMBAR.SC.GPU", "barrier"), ("DEPBAR.LE", "barrier"),
    ("SYNCS.ARRIVE.TRANS64.A1T0", "barrier"), ("WARPGROUP.ARRIVE", "barrier"), ("FENCE.VIEW.ASYNC.S", "barrier"),
    ("NOP", "other"), ("S2R", "other"), ("SHFL.BFLY", "other"), ("VOTEU.ANY", "other"), ("NEWOPCODE.X", "other"),
])
def test_classify(opcode, expected):
    assert classify(opcode) == expected


def test_the_class_groups():
    assert set(MEMORY_CLASSES) | set(MATH_CLASSES) < set(INSTRUCTION_CLASSES)
    assert not set(MEMORY_CLASSES) & set(MATH_CLASSES)
    assert instruction_class(Instruction("", "HFMA2", "R5, -RZ, RZ, 1.875, 0")) == "integer"
    assert instruction_class(Instruction("", "HFMA2", "R5, R5.H0_H0, R5.H0_H0, 1, 1")) == "fp16"


# -- the lockfile form --------------------------------------------------------------------------------

GOOD = {
    "arch": "sm_90", "fingerprint": "sha256:" + "ab" * 32, "registers": 32, "spill_stores": 0, "spill_loads": 0,
    "stack_frame": 0, "static_shared": 4096, "dynamic_shared": 0, "threads": 256, "blocks_per_sm": 8,
    "occupancy": 1.0, "occupancy_limiter": "threads",
    "instructions": {**dict.fromkeys(INSTRUCTION_CLASSES, 1), "future_class": 3},
    "toolchain": {"compiler": "nvrtc 13.5", "ptxas": "13.5.37", "nvdisasm": "13.5.37"},
}


def test_the_dict_form_round_trips():
    profile = StaticProfile.from_dict(GOOD)
    assert profile.arch == 90 and profile.instructions["future_class"] == 3
    assert profile.to_dict() == GOOD
    assert StaticProfile.from_dict(profile.to_dict()) == profile
    assert profile.memory_instructions() == len(MEMORY_CLASSES)
    assert profile.math_instructions() == len(MATH_CLASSES)
    assert StaticProfile.from_dict({**GOOD, "occupancy": 1}).occupancy == 1.0


@pytest.mark.parametrize("change, field", [
    ({"registers": -1}, "registers"),
    ({"registers": True}, "registers"),
    ({"threads": 256.0}, "threads"),
    ({"stack_frame": 2**64}, "stack_frame"),
    ({"occupancy": math.nan}, "occupancy"),
    ({"occupancy": math.inf}, "occupancy"),
    ({"occupancy": 1.5}, "occupancy"),
    ({"occupancy": -0.1}, "occupancy"),
    ({"occupancy": "1.0"}, "occupancy"),
    ({"occupancy": False}, "occupancy"),
    ({"fingerprint": "sha256:" + "AB" * 32}, "fingerprint"),
    ({"fingerprint": "sha256:" + "ab" * 31}, "fingerprint"),
    ({"fingerprint": "sha256:" + "ab" * 32 + "\n"}, "fingerprint"),
    ({"fingerprint": "md5:" + "ab" * 16}, "fingerprint"),
    ({"arch": 90}, "arch"),
    ({"arch": "sm_x"}, "arch"),
    ({"arch": "compute_90"}, "arch"),
    ({"occupancy_limiter": "luck"}, "occupancy_limiter"),
    ({"toolchain": {"compiler": "x" * 10_000}}, "toolchain.compiler"),
    ({"toolchain": {"compiler": "nvrtc\n13.5"}}, "toolchain.compiler"),
    ({"toolchain": {"compiler": 13}}, "toolchain.compiler"),
    ({"toolchain": {"bad key": "x"}}, "toolchain"),
    ({"toolchain": ["nvrtc"]}, "toolchain"),
    ({"instructions": {"fp32": {"nested": 1}}}, "instructions.fp32"),
    ({"instructions": {"fp32": [1]}}, "instructions.fp32"),
    ({"instructions": {"fp32": -3}}, "instructions.fp32"),
    ({"instructions": {"fp32": True}}, "instructions.fp32"),
    ({"instructions": {"not-an-identifier": 1}}, "instructions"),
    ({"instructions": {f"c{i}": 1 for i in range(100)}}, "instructions"),
    ({"instructions": 5}, "instructions"),
    ({"not an identifier": 1}, "profile"),  # a newer version's field is kept; a malformed name is not
])
def test_hostile_dicts_are_refused_naming_the_field(change, field):
    with pytest.raises(ValueError, match=rf"^{re.escape(field)}: "):
        StaticProfile.from_dict({**GOOD, **change})


@pytest.mark.parametrize("name", sorted(GOOD))
def test_every_field_is_required(name):
    data = {k: v for k, v in GOOD.items() if k != name}
    with pytest.raises(ValueError, match=rf"^{name}: missing"):
        StaticProfile.from_dict(data)


@pytest.mark.parametrize("data", [None, [], "profile", 3])
def test_a_non_object_is_refused(data):
    with pytest.raises(ValueError, match="^profile: "):
        StaticProfile.from_dict(data)


# -- finding nvdisasm ---------------------------------------------------------------------------------


def _fake_nvdisasm(folder: Path, release: str = "12.8", build: str = "12.8.93") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / "nvdisasm"
    exe.write_text(f"#!/bin/sh\necho 'nvdisasm: NVIDIA (R) CUDA disassembler'\n"
                   f"echo 'Cuda compilation tools, release {release}, V{build}'\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return exe


@pytest.fixture
def no_nvdisasm(monkeypatch, tmp_path):
    """An environment with no nvdisasm anywhere: no env var, no wheel, an empty PATH, no toolkit, no Triton."""
    monkeypatch.delenv(disasm.ENV_VAR, raising=False)
    monkeypatch.setattr(disasm, "_site_dirs", lambda: [str(tmp_path / "site")])
    monkeypatch.setattr(disasm, "_toolkit_roots", lambda: [str(tmp_path / "toolkit")])
    monkeypatch.setattr(disasm, "_triton_candidate", lambda: None)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    disasm.find_nvdisasm.cache_clear()
    yield tmp_path
    disasm.find_nvdisasm.cache_clear()


@pytest.mark.skipif(os.name == "nt", reason="the fake nvdisasm is a shell script")
def test_the_environment_variable_wins(no_nvdisasm, monkeypatch):
    _fake_nvdisasm(no_nvdisasm / "site" / "nvidia" / "cu13" / "bin")
    explicit = _fake_nvdisasm(no_nvdisasm / "mine", "13.9", "13.9.1")
    monkeypatch.setenv(disasm.ENV_VAR, str(explicit))
    assert disasm.find_nvdisasm() == str(explicit)
    assert disasm.nvdisasm_version(str(explicit)) == "13.9.1"


def test_a_wrong_environment_variable_is_an_error_not_a_fallback(no_nvdisasm, monkeypatch):
    monkeypatch.setenv(disasm.ENV_VAR, str(no_nvdisasm / "missing" / "nvdisasm"))
    with pytest.raises(BackendUnavailable, match=disasm.ENV_VAR):
        disasm.find_nvdisasm()


@pytest.mark.skipif(os.name == "nt", reason="the fake nvdisasm is a shell script")
@pytest.mark.parametrize("layout", ["nvidia/cu13/bin", "nvidia/cuda_nvdisasm/bin"])
def test_the_wheel_is_found_in_both_layouts(no_nvdisasm, layout):
    exe = _fake_nvdisasm(no_nvdisasm / "site" / layout)
    assert disasm.find_nvdisasm() == str(exe)
    assert disasm.nvdisasm_version(str(exe)) == "12.8.93"


@pytest.mark.skipif(os.name == "nt", reason="the fake nvdisasm is a shell script")
def test_the_order_after_the_wheel(no_nvdisasm, monkeypatch):
    toolkit = _fake_nvdisasm(no_nvdisasm / "toolkit" / "bin")
    assert disasm.find_nvdisasm() == str(toolkit)
    on_path = _fake_nvdisasm(no_nvdisasm / "empty")
    disasm.find_nvdisasm.cache_clear()
    assert disasm.find_nvdisasm() == str(on_path)  # PATH before the toolkit folders
    toolkit.unlink()
    on_path.unlink()
    triton = _fake_nvdisasm(no_nvdisasm / "triton" / "backends" / "nvidia" / "bin")
    monkeypatch.setattr(disasm, "_triton_candidate", lambda: triton)
    disasm.find_nvdisasm.cache_clear()
    assert disasm.find_nvdisasm() == str(triton)


def test_no_nvdisasm_says_what_to_install(no_nvdisasm):
    with pytest.raises(BackendUnavailable, match=re.escape('pip install "pytest-autotune[static]"')) as info:
        disasm.find_nvdisasm()
    assert "nvidia-cuda-nvdisasm" in str(info.value)


def test_tritons_copy_is_found_without_importing_triton():
    import sys

    had = "triton" in sys.modules
    candidate = disasm._triton_candidate()
    if candidate is None:
        pytest.skip("triton is not installed")
    assert candidate.parts[-5:] == ("triton", "backends", "nvidia", "bin", "nvdisasm")
    assert ("triton" in sys.modules) == had


@needs_tools
def test_the_installed_nvdisasm_reports_its_version():
    assert re.fullmatch(r"\d+\.\d+\.\d+", disasm.nvdisasm_version(disasm.find_nvdisasm()))
