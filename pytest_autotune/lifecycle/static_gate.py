"""The static gate: a GPU kernel on a machine without its GPU, checked by the binary of its locked winner.

For every architecture the lock directory knows this kernel on (each GPU
lockfile's entry, else a static baseline of ``<lockdir>/static/``), the
locked configuration is rebuilt with today's source, headers, flags and
toolchain, exactly as the runner that tuned it compiles it
(:mod:`..static.build`), profiled (:mod:`..static.profile`) and compared with
the profile the lock recorded (:mod:`..gate.static`). One summary row per
architecture; the call fails when a comparison fails by ``--autotune-static``.

``--autotune-accept-static`` records today's profile in the entries whose
binary changed, keeping their timing (marked as measured on an earlier
binary); ``--autotune-record-static`` (with ``--autotune-compile``) writes
static baselines (:func:`record_static_baselines`).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from .._version import __version__
from ..backends.cuda_arch import ARCH_LIMITS, arch_limits
from ..errors import AutotuneError, BackendUnavailable
from ..gate.static import StaticComparison, StaticVerdict, compare_profiles, static_decision
from ..lock.entry import LockEntry
from ..lock.lockfile import LockfileError, entry_key, get_entry, merge_entries, read_lockfile, utc_timestamp
from ..lock.static_baseline import BaselineEntry, read_baselines, record_baseline
from ..measure.timing import TimingStats
from ..space import SearchSpace, SearchSpaceError
from ..space.membership import declared_configuration
from ..static.profile import StaticProfile, profile_cubin
from .calls import KernelCall
from ..lock.devices import device_arch
from .outcome import KernelResult, Mode, Outcome, Status, SummaryRow
from .settings import Options, TuneSettings

__all__ = ["StaticTarget", "static_targets", "StaticGate", "build_profile", "record_static_baselines",
           "compile_triton"]

@dataclass(frozen=True)
class StaticTarget:
    """One architecture a kernel is locked on: where, with which configuration and profile."""

    arch: int
    params: dict[str, Any]  # as the lock says (untrusted until checked against the marker's space)
    runner: str | None  # the runner that tuned it: it decides the compiler
    profile: StaticProfile | None  # None: an entry locked before profiles were recorded
    path: Path  # the lockfile or the baseline file
    device: str  # "NVIDIA H100 80GB HBM3", or "static baseline"
    entry: LockEntry | None = None  # a GPU lock's entry (its timing), None for a baseline
    lock_device: Mapping[str, Any] | None = None  # that lockfile's device block (written back on accept)
    baseline: BaselineEntry | None = None

    @property
    def what(self) -> str:
        return "static baseline" if self.baseline is not None else "lock"


def static_targets(lockdir: Path, test: str, label: str) -> list[StaticTarget]:
    """The kernel's entries in every GPU lockfile of ``lockdir`` (one per architecture it was tuned on), then its
    static baselines for architectures no GPU lock covers. LockfileError for a corrupt file."""
    targets: list[StaticTarget] = []
    for path in sorted(lockdir.glob("*.json")) if lockdir.is_dir() else ():
        lock = read_lockfile(path)
        if lock is None or lock.device.get("kind") != "cuda":
            continue
        cc = device_arch(lock.device)
        entry = get_entry(lock, test, label)
        if cc is None or entry is None:
            continue
        targets.append(StaticTarget(cc, entry.params, entry.get("runner"), entry.static, path,
                                    str(lock.device.get("model") or path.stem), entry, lock.device))
    covered = {t.arch for t in targets}
    for cc, (path, entries) in read_baselines(lockdir).items():
        base = entries.get(entry_key(test, label))
        if base is not None and cc not in covered:
            targets.append(StaticTarget(cc, base.params, base.runner, base.profile, path, "static baseline",
                                        baseline=base))
    return targets


def build_profile(k: KernelCall, params: Mapping[str, Any], arch: int, runner: str | None) -> StaticProfile:
    """Build ``params`` for ``arch`` as ``runner`` would and profile the binary (BackendUnavailable without the
    compiler or nvdisasm, StaticBuildError for a configuration that does not compile)."""
    if k.static_build is None:
        raise BackendUnavailable(f"{k.label} is not a GPU kernel with a static build")
    built = k.static_build(params, arch, runner)
    return profile_cubin(built.cubin, arch=built.arch, symbol=built.symbol, resources=built.resources,
                         threads=built.threads, dynamic_shared=built.dynamic_shared, toolchain=built.toolchain)


@dataclass
class _Checked:
    row: SummaryRow
    failed: bool = False
    decided: bool = True  # False: nothing could be checked (no compiler here, a stale entry)


class StaticGate:
    """The static verdicts of one kernel call, one per architecture it is locked on."""

    def __init__(self, settings: TuneSettings, options: Options, test: str) -> None:
        self.settings, self.options, self.test = settings, options, test

    def run(self, k: KernelCall, targets: Sequence[StaticTarget]) -> tuple[list[SummaryRow], Outcome | None]:
        """Check each target; the rows and, when the call is decided by them, its outcome (None: passed)."""
        checked = [self._check(k, t) for t in targets]
        rows = [c.row for c in checked]
        failed = [c for c in checked if c.failed]
        if failed:
            text = "\n".join(f"{self.test}::{k.label} {c.row.arch}: {c.row.message}" for c in failed)
            return rows, Outcome.failed(f"autotune: {text}")
        if not any(c.decided for c in checked):
            reasons = "; ".join(dict.fromkeys(f"{c.row.arch}: {c.row.message}" for c in checked))
            return rows, Outcome.skipped(f"autotune: {k.label} not gated: {reasons}")
        return rows, None

    def result(self, k: KernelCall, targets: Sequence[StaticTarget]) -> KernelResult:
        """What the test gets back from a static gate: the locked configuration (nothing was timed)."""
        params = dict(targets[0].params) if targets else {}
        order = {name: i for i, name in enumerate(self.settings.params)}
        params = dict(sorted(params.items(), key=lambda kv: order.get(kv[0], len(order))))
        return KernelResult(k.label, "static", params, TimingStats.untimed())

    # -- one architecture --------------------------------------------------------------------
    def _row(self, k: KernelCall, t: StaticTarget, status: Status, message: str, started: float,
             **fields: Any) -> SummaryRow:
        return SummaryRow.make(self.test, k.label, Mode.STATIC, status, arch=f"sm_{t.arch}", message=message,
                               lockfile=str(t.path), device=t.device, seconds=round(time.perf_counter() - started, 3),
                               **({"locked_ms": t.entry.median} if t.entry is not None else {}), **fields)

    def _check(self, k: KernelCall, t: StaticTarget) -> _Checked:
        s, opts, started = self.settings, self.options, time.perf_counter()
        if t.arch not in ARCH_LIMITS:
            return _Checked(self._row(k, t, Status.NO_DEVICE, f"no limits known for sm_{t.arch} "
                                      f"({t.path.name})", started), decided=False)
        try:  # the lock is data: only the marker's own values of a point of today's space are compiled
            params = declared_configuration(t.params, s.params, s.restrictions,
                                            {**arch_limits(t.arch), **s.constants}, where="params")
        except SearchSpaceError as exc:
            return _Checked(self._row(k, t, Status.STALE, f"the {t.what}'s configuration is not one of "
                                      f"today's space ({exc}); nothing was compiled from it", started),
                            failed=opts.missing == "fail", decided=False)
        try:
            now = build_profile(k, params, t.arch, t.runner)
        except BackendUnavailable as exc:
            return _Checked(self._row(k, t, Status.NO_DEVICE, f"cannot rebuild here: {exc}", started,
                                      params=params), failed=opts.require_device, decided=False)
        except AutotuneError as exc:  # StaticBuildError: today's source does not compile the locked winner
            first = " | ".join(line.strip() for line in str(exc).splitlines()[:3] if line.strip())
            return _Checked(self._row(k, t, Status.BROKEN, f"BROKEN (static): the locked configuration "
                                      f"no longer compiles for sm_{t.arch}: {first}", started, params=params),
                            failed=True)
        if t.profile is None:
            return self._no_profile(k, t, params, now, started)
        comparison = compare_profiles(t.profile, now, opts.static_tolerance)
        if opts.accept_static and not comparison.identical:
            return self._accept(k, t, params, now, started, comparison)
        return self._verdict(k, t, params, comparison, started)

    def _verdict(self, k: KernelCall, t: StaticTarget, params: dict[str, Any], comparison: StaticComparison,
                 started: float) -> _Checked:
        timed = t.entry.timed_fingerprint if t.entry is not None else None
        earlier = (f"; its timing was measured on an earlier binary ({timed[:19]}..., accepted without a GPU "
                   "run)") if timed and timed != comparison.now.fingerprint else ""  # type: ignore[union-attr]
        tools = f" (toolchain: {', '.join(comparison.toolchain)})" if comparison.toolchain else ""
        note = "identical" if comparison.identical else comparison.line(t.what)
        fields = {"params": params, "static": comparison.as_dict(), "note": note + earlier}
        if comparison.identical:
            return _Checked(self._row(k, t, Status.PASS, f"pass (static): binary identical to the "
                                      f"{t.what}'s{tools}{earlier}", started, **fields))
        failed = static_decision(comparison, self.options.static)
        where = self.test.split("::")[0]
        again = (f"record the baseline again (pytest --autotune-compile=sm_{t.arch} --autotune-record-static "
                 f"{where})" if t.baseline is not None else f"tune it on a {t.device} (pytest --autotune {where})")
        fix = f"{again}, or, if the change was reviewed, accept it: pytest --autotune-accept-static {where}"
        if comparison.verdict is StaticVerdict.WORSE:
            message = (f"REGRESSION (static): {comparison.line()}; the {t.what}'s "
                       + (f"timing ({t.entry.median:.4g} ms on {t.device}) " if t.entry is not None else "profile ")
                       + f"no longer describes this code; {fix}")
            return _Checked(self._row(k, t, Status.WORSE, message, started, **fields), failed=failed)
        message = f"changed (static): needs a GPU run to time it: {comparison.line()}"
        if failed:
            message += f" (--autotune-static=fail-on-change); {fix}"
        return _Checked(self._row(k, t, Status.CHANGED, message, started, **fields), failed=failed)

    def _no_profile(self, k: KernelCall, t: StaticTarget, params: dict[str, Any], now: StaticProfile,
                    started: float) -> _Checked:
        if self.options.accept_static:
            return self._accept(k, t, params, now, started, None)
        message = (f"not comparable (static): the lock entry has no static profile (locked before "
                   f"pytest-autotune recorded one); re-tune it on a {t.device}, or record today's binary as its "
                   f"profile: pytest --autotune-accept-static {self.test.split('::')[0]}")
        return _Checked(self._row(k, t, Status.INCOMPARABLE, message, started, params=params,
                                  static={"verdict": None, "now": now.to_dict()}),
                        failed=self.options.incomparable == "fail")

    def _accept(self, k: KernelCall, t: StaticTarget, params: dict[str, Any], now: StaticProfile, started: float,
                comparison: StaticComparison | None) -> _Checked:
        """Record today's profile: in the GPU lock's entry (its timing kept, the binary it was timed on named),
        or in the baseline."""
        try:
            if t.entry is not None:
                timed = t.entry.timed_fingerprint or (t.profile.fingerprint if t.profile else None)
                accepted = {"timestamp": utc_timestamp(), **({"timed_fingerprint": timed} if timed else {})}
                data = {**t.entry.to_dict(), "static": now.to_dict(), "static_accepted": accepted}
                merge_entries(t.path, {entry_key(self.test, k.label): data}, t.lock_device or {})
            else:
                assert t.baseline is not None
                record_baseline(self.options.lockdir, _baseline(self.test, k, params, t.baseline.runner, now,
                                                                t.baseline.origin))
        except LockfileError as exc:
            return _Checked(self._row(k, t, Status.FAILED, f"{exc}", started, params=params), failed=True)
        what = comparison.line() if comparison is not None else "no profile before"
        return _Checked(self._row(k, t, Status.ACCEPTED, f"accepted (static): {what}; the {t.what} now "
                                  "holds today's binary profile" + (", its timing kept" if t.entry else ""),
                                  started, params=params, note=f"accepted: {what}", lock_written=True,
                                  static={**(comparison.as_dict() if comparison else {}), "now": now.to_dict()}))


def _baseline(test: str, k: KernelCall, params: Mapping[str, Any], runner: str, profile: StaticProfile,
              origin: str) -> BaselineEntry:
    return BaselineEntry(test, k.label, dict(params), runner, dict(k.hashes), profile, origin, utc_timestamp(),
                         {"pytest_autotune": __version__})


def record_static_baselines(k: KernelCall, test: str, archs: Sequence[int], chosen: Mapping[int, Mapping[str, Any]],
                            origins: Mapping[int, str], runner: str | None, lockdir: Path) -> list[str]:
    """``--autotune-record-static``: the profile of the configuration each architecture ships with, into its
    baseline file. Returns one line per architecture (what was recorded, or why not)."""
    lines = []
    for cc in archs:
        params = chosen.get(cc)
        if params is None:
            lines.append(f"sm_{cc}: nothing recorded (no configuration compiled)")
            continue
        try:
            profile = build_profile(k, params, cc, runner)
            path = record_baseline(lockdir, _baseline(test, k, params, runner or "cupy", profile,
                                                      origins.get(cc, "first configuration")))
        except (AutotuneError, LockfileError) as exc:
            lines.append(f"sm_{cc}: not recorded: {exc}")
            continue
        lines.append(f"sm_{cc}: recorded in {path.name} ({profile.registers} registers, occupancy "
                     f"{profile.occupancy:.0%}, {profile.instructions.get('total', 0)} instructions)")
    return lines


def compile_triton(k: KernelCall, settings: TuneSettings, options: Options, test: str) -> Outcome:
    """``--autotune-compile`` for a Triton kernel: build, for each architecture, the configuration it ships with
    there (its GPU lock entry's winner, else the first configuration of its space under that architecture's
    limits) with Triton's own compiler for that target, no GPU; ``--autotune-record-static`` records it."""
    started = time.perf_counter()
    chosen: dict[int, dict[str, Any]] = {}
    origins: dict[int, str] = {}
    problems: list[str] = []
    compiled: dict[str, dict[str, Any]] = {}  # per architecture: compiled, seconds, compiler (the report's compile)
    passed: list[dict[str, Any]] = []  # the report's configurations
    try:
        locked = {t.arch: t for t in static_targets(options.lockdir, test, k.label) if t.baseline is None}
    except LockfileError as exc:
        return Outcome.failed(f"autotune: {exc}")
    s = settings
    for cc in options.compile_archs:
        constants = {**arch_limits(cc), **s.constants}
        try:
            if cc in locked:
                chosen[cc] = declared_configuration(locked[cc].params, s.params, s.restrictions, constants,
                                                    where="params")
                origins[cc] = "lock entry"
            else:
                space = SearchSpace(s.params, s.restrictions, constants, max_configurations=s.max_configurations)
                if not len(space):
                    problems.append(f"sm_{cc}: no configuration of the space fits sm_{cc}'s limits")
                    continue
                chosen[cc], origins[cc] = space.get(0), "first configuration"
            begun = time.perf_counter()
            built = k.static_build(chosen[cc], cc, "triton")  # type: ignore[misc]  # built: that is the check
        except BackendUnavailable as exc:  # the check was asked for: without Triton's compiler it fails
            return Outcome.failed(f"autotune: --autotune-compile: {k.label}: {exc}")
        except (AutotuneError, SearchSpaceError) as exc:
            problems.append(f"sm_{cc} {chosen.get(cc, {})}: {str(exc).splitlines()[0] if str(exc) else exc}")
            if cc in chosen:
                compiled[f"sm_{cc}"] = {"compiled": 1, "compile": 1, "seconds": round(time.perf_counter() - begun, 3),
                                        "compiler": ""}
            chosen.pop(cc, None)
            continue
        seconds = round(time.perf_counter() - begun, 4)
        compiled[f"sm_{cc}"] = {"compiled": 1, "compile": 0, "seconds": round(seconds, 3),
                                "compiler": built.toolchain.get("compiler", "")}
        passed.append({"arch": f"sm_{cc}", "params": dict(chosen[cc]),
                       "origin": "locked" if origins[cc] == "lock entry" else "space", "seconds": seconds,
                       "resources": built.report()})
    recorded = record_static_baselines(k, test, [cc for cc in options.compile_archs if cc in chosen], chosen,
                                       origins, "triton", options.lockdir) if options.record_static else []
    params = next(iter(chosen.values()), {})
    row = SummaryRow.make(test, k.label, Mode.COMPILE, Status.COMPILE_FAILED if problems else Status.COMPILED,
                          params=params, evaluations=len(chosen) + len(problems),
                          budget=len(options.compile_archs), strategy="triton", compile=compiled,
                          configurations=passed, seconds=round(time.perf_counter() - started, 3),
                          message="; ".join(problems),
                          **({"note": "static baseline: " + "; ".join(recorded)} if recorded else {}))
    if problems:
        return Outcome.failed(f"autotune: {test}::{k.label} does not build: " + "; ".join(problems), row)
    return Outcome.passed(KernelResult(k.label, "compile", dict(params), TimingStats.untimed()), row)
