"""A kernel's compiled binary described as data: :class:`StaticProfile`, made from a cubin by
:func:`profile_cubin`, kept in a lock entry (:meth:`StaticProfile.to_dict`) and read back from one
(:meth:`StaticProfile.from_dict`, which treats the data as untrusted: a lockfile arrives in pull requests).

Instruction classes (:func:`classify`) group SASS opcodes of sm_70 to sm_121 (Volta to Blackwell, the
names of NVIDIA's "CUDA Binary Utilities", Instruction Set Reference) by what they cost:

* ``global_*``: generic ``LD``/``ST``/``ATOM`` count as global (the compiler could not prove shared), as do
  texture and surface accesses; the asynchronous copies into shared memory (``LDGSTS``, TMA's ``UTMALDG``,
  ``UBLKCP``) are ``global_load``, TMA stores ``global_store``, reductions (``RED``, ``UTMAREDG``)
  ``global_atomic``;
* ``shared_*``: ``LDS``, ``LDSM`` (the ldmatrix load), ``STS``, ``STSM``, ``STAS``; atomics on shared memory
  (``ATOMS``, ``REDAS``) are ``shared_atomic``; ``local_*``: ``LDL``/``STL`` (spills and per-thread arrays);
* ``constant_load``: ``LDC``, ``ULDC``, ``LDCU`` (kernel parameters, ``__constant__``), not counted as memory;
* math: ``fp32`` (``MUFU`` included, except its 64-bit halves ``MUFU.RCP64H``/``RSQ64H``, which are
  ``fp64``), ``fp16`` (half and bfloat16 pairs ``H*2``), ``fp64``, ``tensor`` (``HMMA``, ``IMMA``, ``DMMA``,
  Hopper's ``HGMMA``..., Blackwell's ``UTCHMMA``...);
* ``integer``: integer and logic ALU work, moves, selects and predicate logic, uniform-datapath versions
  included; ``conversion``: ``F2F``, ``F2I``, ``I2F``, ``I2I``, ``F2FP``, ``I2FP``, ``FRND``;
* ``control``: branches, calls, returns, ``EXIT``, convergence (``BSSY``/``BSYNC``/``WARPSYNC``), ``YIELD``,
  ``NANOSLEEP``; ``barrier``: ``BAR``, ``MEMBAR``, ``DEPBAR``, ``LDGDEPBAR``, ``ERRBAR``, ``FENCE``,
  Hopper's ``SYNCS`` (mbarriers), cluster and warpgroup barriers;
* ``other``: the rest (``NOP``, ``S2R``, shuffles and votes, cache control, tensor-memory moves), and every
  opcode this table does not know.

``total`` counts every instruction but the padding after a function's last instruction: the ``BRA`` to
itself and the ``NOP`` filling to the 128-byte boundary ptxas appends. A ``NOP`` elsewhere counts (as
``other``). The fingerprint hashes every instruction, padding included.

One idiom is counted by its purpose rather than its opcode: ``HFMA2 Rd, -RZ, RZ, a, b`` (``HFMA2.MMA`` on
sm_75-89) computes ``-0 x 0 + (a, b)``, a constant ptxas moves into a register on the FMA pipe; it counts
as ``integer`` (a move), not as half-precision math.
"""
from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from ..backends.cuda_arch import parse_arch
from .disasm import Disassembly, Instruction, TextSection, disassemble, find_nvdisasm, nvdisasm_version, \
    parse_disassembly
from .occupancy import LIMITERS, theoretical_occupancy

if TYPE_CHECKING:
    from ..backends.nvrtc import KernelResources

INSTRUCTION_CLASSES: tuple[str, ...] = (
    "total",
    "global_load", "global_store", "global_atomic",
    "shared_load", "shared_store", "shared_atomic",
    "local_load", "local_store",
    "constant_load",
    "fp32", "fp16", "fp64", "tensor",
    "integer", "conversion", "control", "barrier", "other",
)
MEMORY_CLASSES: tuple[str, ...] = ("global_load", "global_store", "global_atomic", "shared_load", "shared_store",
                                   "shared_atomic", "local_load", "local_store")
MATH_CLASSES: tuple[str, ...] = ("fp32", "fp16", "fp64", "tensor")

# Opcode (the part before the first ".") -> class; an opcode not here is "other".
_CLASSES: dict[str, tuple[str, ...]] = {
    "global_load": ("LDG", "LD", "LDGSTS", "UTMALDG", "UBLKCP", "LDGMC", "TEX", "TEXS", "TLD", "TLDS", "TLD4",
                    "TLD4S", "TMML", "TXD", "SULD"),
    "global_store": ("STG", "ST", "UTMASTG", "SUST"),
    "global_atomic": ("ATOM", "ATOMG", "RED", "REDG", "UTMAREDG", "UBLKRED", "SUATOM", "SURED"),
    "shared_load": ("LDS", "LDSM"),
    "shared_store": ("STS", "STSM", "STAS"),
    "shared_atomic": ("ATOMS", "REDAS"),
    "local_load": ("LDL",),
    "local_store": ("STL",),
    "constant_load": ("LDC", "ULDC", "LDCU"),
    "fp32": ("FADD", "FADD32I", "FADD2", "FFMA", "FFMA32I", "FFMA2", "FMUL", "FMUL32I", "FMUL2", "FMNMX",
             "FMNMX3", "FSEL", "FSET", "FSETP", "FCHK", "FSWZADD", "MUFU", "FHADD", "FHFMA", "UFADD", "UFFMA",
             "UFMUL", "UFMNMX", "UFSEL", "UFSETP"),
    "fp16": ("HADD2", "HADD2_32I", "HFMA2", "HFMA2_32I", "HMUL2", "HMUL2_32I", "HMNMX2", "HSET2", "HSETP2",
             "VHMNMX"),
    "fp64": ("DADD", "DFMA", "DMUL", "DMNMX", "DSET", "DSETP"),
    "tensor": ("HMMA", "IMMA", "BMMA", "DMMA", "QMMA", "OMMA", "HGMMA", "IGMMA", "QGMMA", "BGMMA", "WGMMA",
               "UTCHMMA", "UTCIMMA", "UTCQMMA", "UTCOMMA", "UTCMMA"),
    "integer": ("IADD", "IADD3", "IADD32I", "IMAD", "IMAD32I", "IMUL", "IMUL32I", "IMNMX", "IMNMX3", "IABS",
                "ISCADD", "ISCADD32I", "ISETP", "ISET", "ICMP", "LEA", "LOP", "LOP3", "LOP32I", "SHF", "SHL",
                "SHR", "POPC", "FLO", "BREV", "BMSK", "SGXT", "BFE", "BFI", "IDP", "IDP4A", "XMAD", "PRMT",
                "SEL", "MOV", "MOV32I", "P2R", "R2P", "PLOP3", "PSETP", "PSET", "VABSDIFF", "VABSDIFF4", "VIADD",
                "VIADDMNMX", "VIMNMX", "VIMNMX3", "R2UR", "UIADD3", "UIMAD", "UIMNMX", "UIABS", "ULEA", "ULOP",
                "ULOP3", "ULOP32I", "USHF", "USHL", "USHR", "UPOPC", "UFLO", "UBREV", "UBMSK", "USGXT", "UISETP",
                "USEL", "UPRMT", "UMOV", "UP2UR", "UR2UP", "UPLOP3", "UPSETP", "UVIADD", "UVIMNMX"),
    "conversion": ("F2F", "F2I", "I2F", "I2I", "F2FP", "I2FP", "F2IP", "I2IP", "FRND", "UF2F", "UF2I", "UI2F",
                   "UF2FP", "UI2FP", "UFRND"),
    "control": ("BRA", "BRX", "BRXU", "JMP", "JMX", "JMXU", "CALL", "RET", "EXIT", "BSSY", "BSYNC", "BREAK",
                "BMOV", "BPT", "KILL", "WARPSYNC", "YIELD", "NANOSLEEP", "RPCMOV", "PREEXIT", "ELECT",
                "ENDCOLLECTIVE", "ACQBULK"),
    "barrier": ("BAR", "B2R", "R2B", "MEMBAR", "DEPBAR", "LDGDEPBAR", "ERRBAR", "CGAERRBAR", "FENCE", "SYNCS",
                "ARRIVES", "WARPGROUP", "UCGABAR_ARV", "UCGABAR_WAIT", "UCGABAR_GET", "UCGABAR_SET", "UTCBAR",
                "CCTLBAR"),
}
_OPCODE_CLASS: dict[str, str] = {op: cls for cls, ops in _CLASSES.items() for op in ops}
_MOVE_IDIOM = re.compile(r"^[^,]+,\s*-RZ\s*,\s*RZ\s*,")  # "R3, -RZ, RZ, 1.875, 0": -0 x 0 + constant
_LABEL_REF = re.compile(r"\.L_x_\d+")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_FINGERPRINT = re.compile(r"sha256:[0-9a-f]{64}")
_MAX_INT = 2**63 - 1
_MAX_TEXT = 200


def classify(opcode: str) -> str:
    """The instruction class of a SASS opcode with its modifiers (``"LDG.E.128"`` -> ``"global_load"``);
    ``"other"`` for one the table does not know. See the module's docstring for the groups."""
    op = opcode.strip().upper()
    base = op.split(".", 1)[0]
    if base == "MUFU" and "64H" in op:  # MUFU.RCP64H / RSQ64H: the seed of a double-precision rcp/sqrt
        return "fp64"
    return _OPCODE_CLASS.get(base, "other")


def instruction_class(instruction: Instruction) -> str:
    """:func:`classify`, with the constant-move idiom ``HFMA2 Rd, -RZ, RZ, ...`` counted as a move."""
    if instruction.opcode.startswith("HFMA2") and _MOVE_IDIOM.match(instruction.operands):
        return "integer"
    return classify(instruction.opcode)


def _padding_start(section: TextSection) -> int:
    """Index of the first padding instruction of ``section``: the trailing NOPs and the self-branch before
    them (``.L_x_9: BRA `(.L_x_9)``), which ptxas appends after the last real instruction."""
    instructions = section.instructions
    end = len(instructions)
    while end and instructions[end - 1].opcode == "NOP" and not instructions[end - 1].predicate:
        end -= 1
    if end:
        last = instructions[end - 1]
        targets = _LABEL_REF.findall(last.operands)
        if (last.opcode == "BRA" and not last.predicate and len(targets) == 1
                and section.labels.get(targets[0]) == end - 1):
            end -= 1
    return end


def count_instructions(sections: Iterable[TextSection]) -> dict[str, int]:
    """Instructions by class over ``sections``, padding left out (every class of INSTRUCTION_CLASSES
    present, ``total`` their sum)."""
    counts = dict.fromkeys(INSTRUCTION_CLASSES, 0)
    for section in sections:
        for instruction in section.instructions[:_padding_start(section)]:
            counts[instruction_class(instruction)] += 1
            counts["total"] += 1
    return counts


def normalised_sass(disassembly: Disassembly) -> str:
    """Every ``.text`` section's code in section-name order, one instruction a line: no addresses,
    encodings or comments, and each ``.L_x_N`` label reference replaced by the index of the instruction
    it names in its section (nvdisasm numbers labels across the whole file and versions differ in which
    labels they print, so the raw names would make the text depend on more than the code)."""
    lines: list[str] = []
    for name in sorted(disassembly.text):
        section = disassembly.text[name]
        lines.append(f".text.{name}")
        where = {index: fn for fn, index in section.functions.items()}
        for index, instruction in enumerate(section.instructions):
            if index in where and where[index] != name:
                lines.append(f"{where[index]}:")
            text = _LABEL_REF.sub(lambda m: f".L@{section.labels.get(m.group(0), -1)}", instruction.text)
            lines.append(text)
    return "\n".join(lines) + "\n"


def fingerprint(disassembly: Disassembly) -> str:
    """``"sha256:"`` + the hex SHA-256 of :func:`normalised_sass`: equal for two builds of the same code."""
    return "sha256:" + hashlib.sha256(normalised_sass(disassembly).encode()).hexdigest()


@dataclass(frozen=True)
class StaticProfile:
    """What a kernel's binary is, for one architecture and one launch (see :func:`profile_cubin`)."""

    arch: int  # 90
    fingerprint: str  # "sha256:" + 64 hex digits of the normalised SASS of every .text section
    registers: int  # per thread
    spill_stores: int  # bytes per thread (ptxas's figure)
    spill_loads: int
    stack_frame: int  # local memory per thread, bytes
    static_shared: int  # bytes per block (ptxas's figure, without the driver's reserve)
    dynamic_shared: int  # bytes per block at the locked launch
    threads: int  # per block at the locked launch
    blocks_per_sm: int
    occupancy: float  # 0..1, rounded to 4 digits
    occupancy_limiter: str  # one of occupancy.LIMITERS
    instructions: dict[str, int]  # counts by class (see INSTRUCTION_CLASSES)
    toolchain: dict[str, str]  # {"compiler": "nvrtc 13.5", "ptxas": "13.0.88", "nvdisasm": "13.5.37"}

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data (the arch as ``"sm_90"``), which :meth:`from_dict` reads back."""
        return {
            "arch": f"sm_{self.arch}", "fingerprint": self.fingerprint, "registers": self.registers,
            "spill_stores": self.spill_stores, "spill_loads": self.spill_loads, "stack_frame": self.stack_frame,
            "static_shared": self.static_shared, "dynamic_shared": self.dynamic_shared, "threads": self.threads,
            "blocks_per_sm": self.blocks_per_sm, "occupancy": self.occupancy,
            "occupancy_limiter": self.occupancy_limiter, "instructions": dict(self.instructions),
            "toolchain": dict(self.toolchain),
        }

    @classmethod
    def from_dict(cls, data: Any) -> "StaticProfile":
        """A profile from :meth:`to_dict`'s data, checked as untrusted input: every field present (others, a newer
        version's, are ignored here and kept by the entry), of its type (a bool is not an int), counts in [0, 2**63), the occupancy a finite number in
        [0, 1], the fingerprint ``sha256:`` + 64 lowercase hex digits, the limiter a known word. Instruction
        classes this version does not know are kept (a newer version's survive), but their names must be
        identifiers and their counts ints. ValueError("<field>: <reason>") otherwise."""
        if not isinstance(data, Mapping):
            raise ValueError(f"profile: expected an object, not {type(data).__name__}")
        expected = [f for f in cls.__dataclass_fields__]
        # fields a newer version adds are kept by the lock entry that holds this data (the entry is rewritten
        # as it was read); here they must only be named like fields
        odd = sorted(str(k) for k in data if k not in expected and not (isinstance(k, str) and k.isidentifier()))
        if odd:
            raise ValueError(f"profile: field names must be identifiers, got {', '.join(map(repr, odd))[:_MAX_TEXT]}")
        missing = [f for f in expected if f not in data]
        if missing:
            raise ValueError(f"{missing[0]}: missing")
        arch = data["arch"]
        if not isinstance(arch, str) or not arch.startswith("sm_"):
            raise ValueError(f"arch: expected a string like 'sm_90', not {_show(arch)}")
        try:
            cc = parse_arch(arch)
        except ValueError:
            raise ValueError(f"arch: not a CUDA architecture: {_show(arch)}") from None
        digest = data["fingerprint"]
        if not isinstance(digest, str) or not _FINGERPRINT.fullmatch(digest):
            raise ValueError(f"fingerprint: expected 'sha256:' and 64 lowercase hex digits, not {_show(digest)}")
        ints = {name: _check_count(name, data[name]) for name in (
            "registers", "spill_stores", "spill_loads", "stack_frame", "static_shared", "dynamic_shared",
            "threads", "blocks_per_sm")}
        occupancy = data["occupancy"]
        if (isinstance(occupancy, bool) or not isinstance(occupancy, (int, float)) or not math.isfinite(occupancy)
                or not 0 <= occupancy <= 1):
            raise ValueError(f"occupancy: expected a number in [0, 1], not {_show(occupancy)}")
        limiter = data["occupancy_limiter"]
        if not isinstance(limiter, str) or limiter not in LIMITERS:
            raise ValueError(f"occupancy_limiter: expected one of {', '.join(LIMITERS)}, not {_show(limiter)}")
        instructions = _check_mapping("instructions", data["instructions"], _check_count)
        toolchain = _check_mapping("toolchain", data["toolchain"], _check_text)
        return cls(arch=cc, fingerprint=digest, occupancy=float(occupancy), occupancy_limiter=limiter,
                   instructions=instructions, toolchain=toolchain, **ints)

    def memory_instructions(self) -> int:
        """Loads, stores and atomics of global, shared and local memory (MEMORY_CLASSES)."""
        return sum(self.instructions.get(c, 0) for c in MEMORY_CLASSES)

    def math_instructions(self) -> int:
        """fp32, fp16, fp64 and tensor instructions (MATH_CLASSES)."""
        return sum(self.instructions.get(c, 0) for c in MATH_CLASSES)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name}: expected an int, not {_show(value)}")
    if not 0 <= value <= _MAX_INT:
        raise ValueError(f"{name}: expected an int in [0, 2**63), not {_show(value)}")
    return value


def _check_text(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{name}: expected a string, not {_show(value)}")
    if len(value) > _MAX_TEXT:
        raise ValueError(f"{name}: longer than {_MAX_TEXT} characters ({len(value)}): {_show(value)}")
    if any(c in value for c in "\r\n\x00") or not value.isprintable():
        raise ValueError(f"{name}: expected one line of printable text, not {_show(value)}")
    return value


def _check_mapping(name: str, value: Any, check: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{name}: expected an object, not {_show(value)}")
    if len(value) > 64:
        raise ValueError(f"{name}: {len(value)} entries, at most 64")
    out = {}
    for key, item in value.items():
        if not isinstance(key, str) or not _IDENTIFIER.fullmatch(key):
            raise ValueError(f"{name}: keys must be identifiers of at most 64 characters, not {_show(key)}")
        out[key] = check(f"{name}.{key}", item)
    return out


def profile_cubin(cubin: bytes, *, arch: int, symbol: str, resources: "KernelResources", threads: int,
                  dynamic_shared: int, toolchain: Mapping[str, str]) -> StaticProfile:
    """Disassemble ``cubin`` and describe kernel ``symbol`` (the lowered name) at a launch of ``threads``
    per block and ``dynamic_shared`` bytes.

    Registers, spills, stack frame and static shared memory are ptxas's (``resources``), checked against
    the cubin: its EIATTR_REGCOUNT for ``symbol`` must equal ``resources.registers`` (else the resources
    belong to another build). ``instructions`` counts the kernel's own ``.text.<symbol>`` section (with the
    non-inlined device functions ptxas placed in it) plus every ``.text`` section that is not a kernel's
    (device functions of a relocatable build), so a cubin of several kernels adds those to each. The
    fingerprint covers every ``.text`` section of the cubin. ``toolchain`` is the caller's, with ``ptxas``
    set from the cubin's own note (the ptxas that generated the code) and ``nvdisasm`` to the disassembler's
    version. ValueError when ``symbol`` is not a function of the cubin (naming the ones it has) or the
    cubin's target is not ``arch``.
    """
    exe = find_nvdisasm()
    disassembly = parse_disassembly(disassemble(cubin, exe))
    cc = parse_arch(arch)
    if disassembly.target and parse_arch(disassembly.target) != cc:
        raise ValueError(f"the cubin was built for {disassembly.target}, not sm_{cc}")
    if symbol not in disassembly.text:
        raise ValueError(f"the cubin has no function {symbol!r}; it has: {', '.join(disassembly.functions()) or 'none'}")
    own = disassembly.text[symbol]
    regcount = disassembly.info.get(symbol, {}).get("EIATTR_REGCOUNT")
    if regcount is not None and regcount != resources.registers:
        raise ValueError(f"{symbol}: the cubin's EIATTR_REGCOUNT is {regcount} but ptxas reported "
                         f"{resources.registers} registers: the resources are not this cubin's")
    sections = [own] + [s for n, s in sorted(disassembly.text.items()) if n != symbol and not s.entry]
    occupancy = theoretical_occupancy(cc, threads=threads, registers=resources.registers,
                                      shared_per_block=resources.shared_mem + dynamic_shared,
                                      barriers=resources.barriers)
    tools = dict(toolchain)
    ptxas = disassembly.ptxas_version()
    if ptxas:
        tools["ptxas"] = ptxas
    tools["nvdisasm"] = nvdisasm_version(exe)
    return StaticProfile(
        arch=cc, fingerprint=fingerprint(disassembly), registers=resources.registers,
        spill_stores=resources.spill_stores, spill_loads=resources.spill_loads, stack_frame=resources.stack_frame,
        static_shared=resources.shared_mem, dynamic_shared=dynamic_shared, threads=threads,
        blocks_per_sm=occupancy.blocks_per_sm, occupancy=round(occupancy.occupancy, 4),
        occupancy_limiter=occupancy.limiter, instructions=count_instructions(sections), toolchain=tools)
