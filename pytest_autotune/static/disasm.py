"""Find and run NVIDIA's ``nvdisasm``, and read its text output into per-function data.

The static gate needs a cubin's machine code (SASS) and the facts the ELF carries beside it (registers per
function, frame sizes, ``__shared__`` sizes, which ptxas built it) on CI runners without a GPU or a CUDA
toolkit, so the disassembler comes from a wheel (``nvidia-cuda-nvdisasm``) where no toolkit is installed.

nvdisasm prints every ELF section as ``//----- <name> -----`` followed by ``.section <name>,...`` and the
section's contents; :func:`parse_disassembly` keeps what a profile needs:

* ``.text.<function>``: the instructions, each ``[@pred] OPCODE operands ;`` with the ``/*0010*/`` address,
  ``/* 0x... */`` encodings and comments stripped; labels (``.L_x_12:``) kept as instruction indices;
* ``.nv.info`` and ``.nv.info.<function>``: single-valued attributes (``EIATTR_REGCOUNT``,
  ``EIATTR_FRAME_SIZE``, ``EIATTR_MAX_STACK_SIZE``, ...) by function;
* ``.nv.shared.<function>``: the section size (on sm_90 and later it includes the 1 KB the driver reserves
  at the window's start, so it is ptxas's ``smem`` figure + 1024 there);
* ``.note.nv.tkinfo``: the strings naming the tool that built the cubin.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from ..backends.cuda_toolkit import _site_dirs, _toolkit_roots
from ..errors import AutotuneError, BackendUnavailable

ENV_VAR = "AUTOTUNE_NVDISASM"
INSTALL_HINT = 'pip install "pytest-autotune[static]" (the nvidia-cuda-nvdisasm wheel)'
TIMEOUT_S = 60.0
_EXE = "nvdisasm.exe" if os.name == "nt" else "nvdisasm"
# Where NVIDIA's wheels put nvdisasm, relative to a site-packages folder: CUDA 13's shared ``nvidia/cu13``,
# then CUDA 12's one-folder-per-wheel layout.
WHEEL_LAYOUTS = ("nvidia/cu13/bin", "nvidia/cuda_nvdisasm/bin")
TRITON_LAYOUT = "backends/nvidia/bin"  # relative to the triton package: the copy Triton bundles


class DisassemblyError(AutotuneError, RuntimeError):
    """nvdisasm ran but failed on a cubin (or timed out); the message carries its stderr."""


def _executable(path: str | os.PathLike) -> str | None:
    p = Path(path)
    return str(p) if p.is_file() and os.access(p, os.X_OK) else None


def _wheel_candidates() -> list[Path]:
    return [Path(root) / rel / _EXE for root in _site_dirs() for rel in WHEEL_LAYOUTS]


def _triton_candidate() -> Path | None:
    """Triton's bundled nvdisasm, located without importing triton (its import is slow and may need a GPU
    library)."""
    try:
        spec = importlib.util.find_spec("triton")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / TRITON_LAYOUT / _EXE


@lru_cache(maxsize=1)
def find_nvdisasm() -> str:
    """The nvdisasm to run, the first found of: ``$AUTOTUNE_NVDISASM`` (an explicit path: wrong means an
    error, never a silent fallback), the ``nvidia-cuda-nvdisasm`` wheel (CUDA 13's, then 12's layout),
    ``PATH``, ``$CUDA_PATH/bin``, ``$CUDA_HOME/bin``, ``/usr/local/cuda/bin``, Triton's bundled copy.

    Cached (call ``find_nvdisasm.cache_clear()`` after changing the environment); BackendUnavailable with
    the install hint when there is none.
    """
    explicit = os.environ.get(ENV_VAR)
    if explicit:
        found = _executable(explicit)
        if found is None:
            raise BackendUnavailable(f"${ENV_VAR}={explicit!r} is not an executable file")
        return found
    for candidate in _wheel_candidates():
        if _executable(candidate):
            return str(candidate)
    on_path = shutil.which("nvdisasm")
    if on_path:
        return on_path
    for root in _toolkit_roots():
        found = _executable(Path(root) / "bin" / _EXE)
        if found:
            return found
    triton = _triton_candidate()
    if triton is not None and _executable(triton):
        return str(triton)
    raise BackendUnavailable(f"the static gate disassembles cubins with NVIDIA's nvidia-cuda-nvdisasm, which is "
                             f"not installed here: {INSTALL_HINT}; or set ${ENV_VAR} to an nvdisasm")


_VERSION = re.compile(r"release (\d+)\.(\d+), V(\d+\.\d+\.\d+)")


@lru_cache(maxsize=8)
def nvdisasm_version(path: str) -> str:
    """The ``13.5.37`` of ``path``'s ``--version`` ("Cuda compilation tools, release 13.5, V13.5.37")."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DisassemblyError(f"{path} --version failed: {exc}") from None
    match = _VERSION.search(out.stdout + out.stderr)
    if not match:
        raise DisassemblyError(f"{path} --version printed no 'release X.Y, VX.Y.Z' line: {out.stdout.strip()!r}")
    return match.group(3)


def disassemble(cubin: bytes, nvdisasm: str | None = None, *, timeout: float = TIMEOUT_S) -> str:
    """nvdisasm's text for ``cubin`` (the bytes of a CUDA ELF). nvdisasm only reads files, so the bytes go
    to a private temporary file first. DisassemblyError with nvdisasm's stderr when it fails."""
    if not isinstance(cubin, (bytes, bytearray, memoryview)) or not bytes(cubin[:4]) == b"\x7fELF":
        raise DisassemblyError("not a cubin: the bytes do not start with the ELF magic")
    exe = nvdisasm or find_nvdisasm()
    with tempfile.TemporaryDirectory(prefix="autotune-nvdisasm-") as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(bytes(cubin))
        try:
            out = subprocess.run([exe, str(path)], capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise DisassemblyError(f"{exe} did not finish within {timeout:g} s") from None
        except OSError as exc:
            raise DisassemblyError(f"{exe} could not be run: {exc}") from None
    if out.returncode != 0:
        err = out.stderr.decode(errors="replace").strip() or out.stdout.decode(errors="replace").strip()[-2000:]
        raise DisassemblyError(f"{exe} failed (exit status {out.returncode}): {err or 'no message'}")
    return out.stdout.decode(errors="replace")


# -- the text's structure ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    """One SASS instruction: ``predicate`` (``"@!P0"`` or ``""``), ``opcode`` (``"LDG.E.128"``) and the
    operand text as nvdisasm prints it (whitespace collapsed, no trailing ``;``)."""

    predicate: str
    opcode: str
    operands: str

    @property
    def text(self) -> str:
        return " ".join(p for p in (self.predicate, self.opcode, self.operands) if p)


@dataclass
class TextSection:
    """A ``.text.<function>`` section: its instructions, where its labels point (label -> index of the
    instruction that follows it; ``len(instructions)`` for one at the end) and the functions defined in it
    (the section's own, plus non-inlined device functions ptxas placed in it, ``$kernel$callee``)."""

    name: str
    instructions: list[Instruction] = field(default_factory=list)
    labels: dict[str, int] = field(default_factory=dict)
    functions: dict[str, int] = field(default_factory=dict)
    entry: bool = False  # the section's function is a kernel (``STO_CUDA_ENTRY``)


@dataclass
class Disassembly:
    """What :func:`parse_disassembly` keeps of nvdisasm's output."""

    target: str = ""  # ".target sm_90" -> "sm_90"
    text: dict[str, TextSection] = field(default_factory=dict)  # by function name
    info: dict[str, dict[str, int]] = field(default_factory=dict)  # function -> {"EIATTR_REGCOUNT": 10, ...}
    shared: dict[str, int] = field(default_factory=dict)  # function -> .nv.shared.<function> size in bytes
    tkinfo: list[str] = field(default_factory=list)  # .note.nv.tkinfo's strings, in order

    def functions(self) -> list[str]:
        return sorted(self.text)

    def ptxas_version(self) -> str | None:
        """The ptxas (or NVRTC's built-in ptxas) that generated the code: ``"13.0.88"``; None when unnamed."""
        for s in self.tkinfo:
            match = _VERSION.search(s)
            if match:
                return match.group(3)
        return None


_SECTION = re.compile(r"^\s*\.section\s+([^,\s]+)")
_ADDRESS = re.compile(r"/\*[0-9a-fA-F]{4,}\*/")
_BLOCK_COMMENT = re.compile(r"/\*.*?\*/")
_LABEL = re.compile(r"^([.$\w@]+):$")
_PREDICATE = re.compile(r"^@!?U?P(?:T|\d+)$")
_NVINFO = re.compile(r"//-+\s*nvinfo\s*:\s*(\w+)")
_DIRECTIVE = re.compile(r"^\s*(?:/\*[0-9a-fA-F]+\*/)?\s*\.(byte|short|word|dword|string|zero)\s+(.*?)\s*$")
_INDEX = re.compile(r"index@\(([^)]+)\)")
_OTHER_ENTRY = re.compile(r"^\s*\.other\s+([^,\s]+)\s*,.*STO_CUDA_ENTRY")
_STRING = re.compile(r'^"((?:[^"\\]|\\.)*)"$')


def _int(token: str) -> int | None:
    try:
        return int(token, 0)
    except ValueError:
        return None


def _instruction(body: str) -> Instruction | None:
    """``[{] [@pred] OPCODE operands ; [}]`` -> Instruction; None for an empty remainder."""
    body = body.strip()
    # Dual-issue pairs (sm_5x/6x): "{ INSTR ;" then "INSTR ; }"
    body = body.lstrip("{").rstrip("}").strip()
    body = body.rstrip(";").strip()
    if not body:
        return None
    parts = body.split(None, 1)
    predicate = ""
    if _PREDICATE.match(parts[0]):
        predicate = parts[0]
        parts = parts[1].split(None, 1) if len(parts) > 1 else []
        if not parts:
            return None
    opcode = parts[0].rstrip(";")
    operands = " ".join(parts[1].split()) if len(parts) > 1 else ""
    return Instruction(predicate, opcode, operands.rstrip(";").rstrip())


def parse_disassembly(text: str) -> Disassembly:
    """Read nvdisasm's default text output (13.x; the layout of 11.x and 12.x is the same) into a
    :class:`Disassembly`. Sections it does not need are skipped."""
    out = Disassembly()
    section = ""
    current: TextSection | None = None
    attr: str | None = None  # the nvinfo attribute being read
    values: list[str] = []  # its directive arguments, after the two header lines

    def flush_attribute() -> None:
        # values: ".byte <format>, <code>", then for EIFMT_SVAL (4) a ".short <size>" and the payload, for
        # EIFMT_HVAL (3) one ".short" value, for EIFMT_BVAL (2) one ".byte" value, for EIFMT_NVAL (1) none
        if attr is None or len(values) < 2:
            return
        fmt = _int(values[0])
        payload = values[3:] if fmt == 4 else values[2:3]
        owner = section[len(".nv.info."):] if section.startswith(".nv.info.") else None
        index = _INDEX.fullmatch(payload[0]) if payload else None
        if index:  # the global .nv.info: "index@(function)" then the value
            owner, payload = index.group(1), payload[1:]
        value = _int(payload[0]) if len(payload) == 1 else None
        if owner and value is not None and attr != "EIATTR_UNKNOWN":  # codes this nvdisasm has no name for
            out.info.setdefault(owner, {})[attr] = value

    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        sec = _SECTION.match(line)
        if sec:
            flush_attribute()
            attr, values = None, []
            section = sec.group(1)
            current = None
            if section.startswith(".text."):
                name = section[len(".text."):]
                current = out.text.setdefault(name, TextSection(name))
            continue
        if line.startswith(".target") and not out.target:
            out.target = line.split()[-1]
            continue
        if current is not None:
            _text_line(current, line)
            continue
        if section.startswith(".nv.info"):
            info = _NVINFO.search(line)
            if info:
                flush_attribute()
                attr, values = info.group(1), []
                continue
            directive = _DIRECTIVE.match(line)
            if directive and attr is not None and directive.group(1) != "zero":
                values.extend(v.strip() for v in directive.group(2).split(","))
            continue
        if section.startswith(".nv.shared.") and not section.startswith(".nv.shared.reserved"):
            directive = _DIRECTIVE.match(line)
            if directive and directive.group(1) == "zero":
                size = _int(directive.group(2).split(",")[0].strip())
                if size is not None:
                    name = section[len(".nv.shared."):]
                    out.shared[name] = out.shared.get(name, 0) + size
            continue
        if section == ".note.nv.tkinfo":
            directive = _DIRECTIVE.match(line)
            if directive and directive.group(1) == "string":
                string = _STRING.match(directive.group(2))
                if string and string.group(1):
                    out.tkinfo.append(string.group(1))
    flush_attribute()
    return out


def _text_line(sec: TextSection, line: str) -> None:
    if line.startswith("//"):
        return
    if line.startswith("."):
        entry = _OTHER_ENTRY.match(line)
        if entry and entry.group(1) == sec.name:
            sec.entry = True
        label = _LABEL.match(line)
        if label and not label.group(1).startswith(".text."):
            sec.labels[label.group(1)] = len(sec.instructions)
        return
    label = _LABEL.match(line)
    if label:  # a function symbol defined in the section: "saxpy:" or "$saxpy$_Z6helperf:"
        sec.functions[label.group(1)] = len(sec.instructions)
        return
    if not _ADDRESS.match(line):  # a line of only "/* 0x... */" (the second half of an encoding)
        return
    body = _BLOCK_COMMENT.sub(" ", line)
    body = body.split("//", 1)[0]
    instruction = _instruction(body)
    if instruction is not None:
        sec.instructions.append(instruction)
