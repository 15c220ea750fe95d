"""What a lock entry may bring into a build: the boundary between a committed lockfile and the compiler.

A lockfile arrives in a pull request, forks included, and is reviewed as
generated data; plain ``pytest`` on the CI runner then compiles and runs what
it says. The schema check (:mod:`..lock.lockfile`) makes every field the
right shape; this module decides whether an entry's contents may reach a
build of *this* kernel:

* parameter values (the winner, each runner-up) must be values of the
  marker's current space, of the declared type, allowed by its
  restrictions; the declared value, never the lock's, is what is compiled;
* an A/B baseline's kernel name and compiler options must be the kernel's
  own, or plainly harmless (no path, no plugin, no response file);
* the probe sizes must lie in the ranges the probes are built for (an
  entry's sizes allocate the probes' arrays).

A refusal is an :class:`UntrustedEntry` naming the lockfile, the entry and
the field; nothing has been compiled from the entry when it is raised.
"""
from __future__ import annotations

import os
import re
from typing import Any, Iterable, Mapping, Sequence

from ..lock.lockfile import InvalidEntryError
from ..space.membership import NotInSpace, declared_configuration
from .probes import FMA_ITERATIONS, FMA_ITERATIONS_RANGE, TRIAD_N, TRIAD_N_RANGE

__all__ = ["UntrustedEntry", "trusted_params", "trusted_runners_up", "trusted_build", "trusted_probe_sizes"]


class UntrustedEntry(InvalidEntryError):
    """An entry whose contents may not reach a build; the message names the file, the entry and the field."""


# A kernel name from the lock: a (qualified) function name, optionally with template arguments made of
# names, numbers and type punctuation. No parentheses, quotes, braces or semicolons: NVRTC compiles a
# template name as an expression.
_SAFE_KERNEL_NAME = re.compile(r"[A-Za-z_]\w*(?:::[A-Za-z_]\w*)*(?:\s*<[\w\s,.:*&+-]*>)?\Z")
# Compiler options an entry may carry that the kernel does not pass today (a flag changed since the lock,
# timed A/B): optimisation, language standard, macros with plain values, warnings, code-generation
# switches, CUDA's arithmetic and architecture options. Never a path, a plugin, a wrapper, a linker or
# preprocessor pass-through, an include, an output or a response file.
_SAFE_OPTION = re.compile(
    r"(?:-O[0-3sgz]?|-O|-g[0-3]?|-std=[\w+]+|--std=[\w+]+|-D[A-Za-z_]\w*(?:=[\w.+-]*)?|-U[A-Za-z_]\w*"
    r"|-W(?:no-)?[a-z][\w-]*(?:=\w+)?|-w|-f(?:no-)?[a-z][a-z0-9-]*|-m(?:no-)?[a-z][a-z0-9-]*(?:=[\w.-]+)?"
    r"|-march=[\w.-]+|-mtune=[\w.-]+|--?use_fast_math|-lineinfo|--?device-debug|-G"
    r"|--?(?:ftz|prec-div|prec-sqrt|fmad|extra-device-vectorization|restrict)(?:=(?:true|false))?"
    r"|--?(?:gpu-architecture|arch)=(?:compute|sm|lto)_\d+[af]?|--?maxrregcount=\d+|-cl-[a-z][a-z0-9-]*"
    r"|-ffp-contract=(?:fast|on|off)|-fopenmp|-pthread|-DNDEBUG)\Z")


def _refuse(path: Any, key: str, field: str, reason: str) -> UntrustedEntry:
    return UntrustedEntry(path, key, f"{field} {reason}")


def trusted_params(entry: Mapping[str, Any], params: Mapping[str, Sequence[Any]], restrictions: Iterable[Any],
                   constants: Mapping[str, Any] | None, *, path: Any, key: str) -> dict[str, Any]:
    """The locked winner as the marker declares it (its own values), or :class:`UntrustedEntry`."""
    try:
        return declared_configuration(entry.get("params"), params, restrictions, constants, where="params")
    except NotInSpace as exc:
        raise _refuse(path, key, exc.field, exc.reason) from None


def trusted_runners_up(entry: Mapping[str, Any], params: Mapping[str, Sequence[Any]], restrictions: Iterable[Any],
                       constants: Mapping[str, Any] | None, *, space_changed: bool, path: Any,
                       key: str) -> list[dict[str, Any]]:
    """The runners-up the gate may re-time, as declared values. With the space unchanged since the lock, a
    runner-up outside it can only be a hand edit: the entry is refused. After a change of the space, those
    that left it are dropped (they are no longer candidates); their values are never compiled."""
    out = []
    rules = list(restrictions)
    for i, up in enumerate(entry.get("runners_up") or []):
        try:
            point = declared_configuration(up.get("params") if isinstance(up, Mapping) else up, params, rules,
                                           constants, where=f"runners_up[{i}].params")
        except NotInSpace as exc:
            if space_changed:
                continue
            raise _refuse(path, key, exc.field, exc.reason) from None
        out.append({**up, "params": point})
    return out


def trusted_build(entry: Mapping[str, Any], kernel_name: str, compiler_options: Sequence[str], *, path: Any,
                  key: str) -> tuple[str, list[str]]:
    """The kernel name and compiler options an A/B baseline is built with (the entry's, checked)."""
    name = entry.get("kernel_name", kernel_name)
    if name != kernel_name and not (isinstance(name, str) and _SAFE_KERNEL_NAME.match(name)):
        raise _refuse(path, key, "kernel_name", f"= {name!r} is not a plain function or template name")
    options = entry.get("compiler_options", list(compiler_options))
    own = set(compiler_options)
    for i, option in enumerate(options):
        if option not in own and not (isinstance(option, str) and _SAFE_OPTION.match(option)):
            raise _refuse(path, key, f"compiler_options[{i}]",
                          f"= {option!r} is neither an option this kernel passes nor a plain code-generation "
                          "flag (paths, plugins, includes and pass-through options are never taken from a lock)")
    return name, list(options)


def trusted_probe_sizes(entry: Mapping[str, Any], *, path: Any, key: str) -> dict[str, int]:
    """The probe sizes an entry recorded, within the ranges the probes are built for (they size arrays)."""
    machine = entry.get("machine") or {}
    out = {}
    for name, (lo, hi), default in (("triad_n", TRIAD_N_RANGE, TRIAD_N),
                                    ("fma_iterations", FMA_ITERATIONS_RANGE, FMA_ITERATIONS)):
        value = machine.get(name)
        if not (isinstance(value, int) and not isinstance(value, bool) and (lo <= value <= hi or value == default)):
            raise _refuse(path, key, f"machine.{name}", f"= {value!r} is outside the probes' range {lo}..{hi}")
        out[name] = value
    return out


def trusted_reference_size(entry: Mapping[str, Any], *, path: Any, key: str) -> dict[str, int]:
    """The reference runs' size an entry recorded (``machine.reference_n``, measure/reference.py), within the
    triad probe's range: it sizes the arrays the kernel's worker allocates. Empty where it recorded none."""
    machine = entry.get("machine") or {}
    if "reference_n" not in machine:
        return {}
    value, (lo, hi) = machine["reference_n"], TRIAD_N_RANGE
    if not (isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi):
        raise _refuse(path, key, "machine.reference_n", f"= {value!r} is outside the reference runs' range {lo}..{hi}")
    return {"reference_n": value}


def describe(exc: UntrustedEntry) -> str:
    """The message a test fails with: what was refused, that nothing was built, what to do."""
    where = os.fspath(exc.path) if exc.path is not None else "the lockfile"
    return (f"autotune: {where}: {exc.reason}; nothing was compiled from this entry (the file was left "
            "untouched). Re-tune it with pytest --autotune, or restore the file from version control")
