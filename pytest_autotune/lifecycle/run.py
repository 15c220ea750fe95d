"""The lifecycle of one kernel call: check its lock entry, then tune and lock it, gate it, or leave it alone.

``KernelLifecycle(settings, options, host).run(call)`` returns an
:class:`~.outcome.Outcome`: the pytest fixture is one client (it turns the
outcome into ``pytest.fail``/``pytest.skip`` and a summary row), a script or
another test runner is another (:mod:`.script`). Nothing here imports pytest.

* **check**: the device's lockfile (a hook may name it), the entry of this
  test's kernel (or of the test it was renamed from), whether it is stale,
  and whether its contents may reach a build at all (:mod:`..gate.trust`);
* **tune** (``--autotune``, or a missing entry under ``missing=tune``):
  resume from the scratch cache, warm-start from other devices' locks,
  search, decide whether the locked winner stays (:mod:`..gate.retune`),
  record the entry beside the machine's probes and merge it into the lock;
* **gate**: re-time the locked winner (A/B against the locked source when the
  kernel was edited) and say pass, faster, slower, broken or not comparable.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from ..backends.triton_runner import INTERPRETER_KIND
from ..engine.cluster import ClusterError
from ..engine.fleet import ClusterRun
from ..engine.tuner import (TuneError, TuneOptions, TuneResult, build_space, compile_ahead_summary, effort_budget,
                            evaluate_once, first_failures, spills, tune)
from .. import defaults as DEFAULTS
from ..errors import AutotuneError, BackendUnavailable, SpecError
from ..gate.budget import GateBudget, format_seconds
from ..gate.static import StaticComparison, compare_profiles, evidence_note
from ..gate.probes import GPU_PROBE_VERSION, PROBE_VERSION, cpu_kinds, probes_for
from ..gate.retune import RetuneDecision, decide
from ..gate.rounds import reference_runs, rotating_pin
from ..gate.trust import UntrustedEntry, describe as describe_refusal, trusted_build, trusted_params, \
    trusted_probe_sizes, trusted_reference_size, trusted_runners_up
from ..gate.verdict import EntryCheck, GateOutcome, LockedSourceUnusable, check_entry, retune_command, run_ab_gate, \
    run_gate
from ..lock.entry import LockEntry
from ..lock.devices import cpu_generation_note, find_lockfile, same_kind_lockfiles
from ..lock.lockfile import LockfileError, entry_key, get_entry, lockfile_path, merge_entries, read_lockfile, \
    renamed_entry
from ..lock.sources import load_source, materialize_headers
from ..lock.transfer import warm_start
from ..measure.timing import TimingStats
from ..execution.isolation import sharing_one_cpu
from ..space import SearchSpaceError
from ..space.membership import declared_configuration
from .calls import KernelCall, with_restrictions
from .changes import changed_files, locked_device_properties, toolchain_changes
from .host import Host
from .outcome import TUNE_STATUS, Action, KernelResult, Mode, Outcome, Status, SummaryRow
from .recording import build_entry, rewrite_reasons
from .scratch import ScratchCache, fingerprint
from ..lock.devices import device_arch
from .static_gate import StaticGate, StaticTarget, build_profile, compile_triton, static_targets
from .settings import Options, TuneSettings

__all__ = ["KernelLifecycle", "QUICK_NOTE"]

QUICK_NOTE = "quick tuning (--autotune-effort=quick): a full --autotune replaces it"


def _phase(progress: Any, what: str, *, at_most: bool = False) -> Callable[[int, int], None] | None:
    """A phase's ``(done, total)`` callback from the host's progress, where it has lines for phases (a host's own
    callable has none)."""
    phase = getattr(progress, "phase", None)
    return phase(what, at_most=at_most) if callable(phase) else None


def _replaceable(entry: LockEntry, effort: str) -> bool:
    """A quick tuning's entry, and a run at a fuller effort: the entry is re-tuned (it counts as missing)."""
    return entry.effort != DEFAULTS.EFFORT and effort == DEFAULTS.EFFORT


def _effort_note(effort: str, note: str) -> str:
    """A quick tuning's row says so first."""
    return "; ".join(n for n in ("quick tuning" if effort != DEFAULTS.EFFORT else "", note) if n)

_VERDICT_STATUS = {"pass": Status.PASS, "faster": Status.FASTER, "slower": Status.REGRESSION,
                   "broken": Status.BROKEN, "incomparable": Status.INCOMPARABLE}


class _Stop(Exception):
    """Internal: the call is decided before its end (a failure, a skip); ``run`` turns it into the outcome."""

    def __init__(self, action: Action, message: str, traceback: bool = False) -> None:
        super().__init__(message)
        self.action, self.message, self.traceback = action, message, traceback


def _fail(message: str, *, traceback: bool = False) -> _Stop:
    return _Stop(Action.FAIL, message, traceback)


def _skip(message: str) -> _Stop:
    return _Stop(Action.SKIP, message)


@dataclass
class _Searched:
    """What a tuning's search left for the decision: the result, the incumbent it defended, the warm start, the
    evaluations it could make and those resumed, its scratch cache (cleared once the lock is written), its time."""

    result: TuneResult
    incumbent: dict[str, Any] | None
    warm: Any
    total: int | None
    resumed: int
    scratch: ScratchCache
    seconds: float
    progress: Any = None  # the host's progress of this kernel (its phase lines follow the search's)


class KernelLifecycle:
    """The lifecycle of the kernel calls of one test (or one script's named kernel)."""

    def __init__(self, settings: TuneSettings, options: Options, host: Host) -> None:
        self.settings = settings
        self.options = options
        self.host = host
        self._row: SummaryRow | None = None

    # -- the one public step ---------------------------------------------------------
    def run(self, k: KernelCall) -> Outcome:
        """Check, then tune, gate or leave alone the kernel of ``k``; the decided :class:`Outcome`."""
        self._row = None
        self._static_rows: list[SummaryRow] = []
        self._static_failure: str | None = None
        self._static_targets_seen: list[StaticTarget] = []
        marker = self.settings
        self.settings = with_restrictions(marker, k.restrictions)  # the kernel's own (thread-block limit) too
        try:
            result = self._run(k)
        except _Stop as stop:
            return Outcome(stop.action, stop.message, self._row, None, stop.traceback, self._static_rows)
        except SpecError as exc:  # the test's own call, found wrong by a runner (a __constant__ it lacks): named
            return Outcome(Action.FAIL, f"autotune: {self.host.test}::{k.label}: {exc}", self._row, None, False,
                           self._static_rows)
        finally:
            self.settings = marker
        return Outcome(Action.PASS, "", self._row, result, more_rows=self._static_rows)

    # -- check ------------------------------------------------------------------------
    def _run(self, k: KernelCall) -> KernelResult:
        opts = self.options
        if opts.compile_archs and k.lang == "triton":  # --autotune-compile: Triton's compiler for each target
            outcome = compile_triton(k, self.settings, opts, self.host.test)
            self._row = outcome.row
            if outcome.action is not Action.PASS:
                raise _Stop(outcome.action, outcome.message)
            return outcome.result  # type: ignore[return-value]
        try:
            runner = k.make_runner()
        except BackendUnavailable as exc:
            static = self._static_only(k)  # no GPU here: the binary of the locked winner is the evidence
            if static is not None:
                return static
            why = f"no usable device for this kernel: {exc}"
            # a gate that checked nothing, or a tune that tuned nothing, says so in the summary, not only with -rs
            self._record(k.label, Mode.GATE if opts.mode is None else Mode.TUNE, Status.NO_DEVICE, message=why,
                         required=opts.require_device)
            if opts.require_device:  # a GPU job whose driver broke must not pass green with every kernel skipped
                raise _fail(f"autotune: {why} (--autotune-require-device)") from None
            raise _skip(f"autotune: {why}") from None
        except SpecError as exc:
            raise _fail(f"autotune: kernel {k.label!r}: {exc}", traceback=True) from None
        try:
            device = runner.device()
            if device.kind == INTERPRETER_KIND:  # Triton's interpreter: the GPU locks' binaries are the evidence
                self._static_beside(k)
            named = self.host.lockfile_name(device)
            # without a hook's name: the device's identity, or a lockfile under an older name of it
            path = lockfile_path(opts.lockdir, named) if named else find_lockfile(opts.lockdir, device.slug)
            try:
                lock = read_lockfile(path)
            except LockfileError as exc:
                raise _fail(f"autotune: {exc} (the file was left untouched; fix or delete it)") from None
            test = self.host.test
            key = entry_key(test, k.label)
            entry = get_entry(lock, test, k.label)
            renamed = renamed_entry(lock, test, k.label, k.hashes, self.host.gone) if entry is None else None
            if renamed is not None:  # a renamed test: its kernel's entry, recorded under the old test id
                self.host.say(f"autotune {test}::{k.label}: entry recorded under {renamed[1].test}")
                entry = renamed[1]
            check = check_entry(entry, k.hashes, lambda: self._in_space(entry, runner), k.problem) \
                if entry is not None else None
            if check is not None and check.stale is None:
                # the lock is untrusted input: what reaches a build is the marker's own values, or nothing
                try:
                    entry = self._trusted(k, entry, runner, path, "space" in check.changed)  # type: ignore[arg-type]
                except UntrustedEntry as exc:
                    if opts.mode is None and opts.missing != "tune":
                        self._record(k.label, Mode.GATE, Status.REFUSED, message=describe_refusal(exc),
                                     lockfile=str(path))
                        raise _fail(describe_refusal(exc)) from None
                    self.host.say(f"{describe_refusal(exc)}; tuning it afresh")
                    entry, check = None, None
            usable = check is not None and check.stale is None
            if opts.mode == "missing" and usable and not _replaceable(entry, opts.effort):  # type: ignore[arg-type]
                return self._left_alone(k.label, entry, path)  # type: ignore[arg-type]
            if opts.mode is not None or (not usable and opts.missing == "tune"):
                return self._tune(k, key, runner, path, device, entry, renamed[0] if renamed else None)
            if not usable:
                if self._static_rows and self._static_failure is None:  # gated by its binaries alone
                    return self._verified_in_interpreter(k, runner, path)
                self._not_gated(k.label, key, path, check)
            result = self._gate(k, entry, runner, path, check)  # type: ignore[arg-type]
            if self._static_failure is not None:
                raise _fail(self._static_failure)
            return result
        finally:
            runner.close()

    def _in_space(self, entry: LockEntry, runner: Any) -> bool:
        """The locked winner is a point of the marker's current space (checked without building the space)."""
        s = self.settings
        try:
            declared_configuration(entry.params, s.params, s.restrictions, self._constants(runner))
        except SearchSpaceError:
            return False
        return True

    def _constants(self, runner: Any) -> dict[str, Any]:
        """What restrictions see besides the parameters: the device's limits, then the marker's constants."""
        return {**runner.constants(), **self.settings.constants}

    def _trusted(self, k: KernelCall, entry: LockEntry, runner: Any, path: Path,
                 space_changed: bool) -> LockEntry:
        """A copy of the entry whose build inputs are checked: the marker's own values for the winner and the
        runners-up, the kernel name and compiler options of an A/B baseline, the probes' sizes."""
        s, key = self.settings, entry_key(self.host.test, k.label)
        constants = self._constants(runner)
        trusted: dict[str, Any] = {}
        trusted["params"] = trusted_params(entry, s.params, s.restrictions, constants, path=path, key=key)
        if "runners_up" in entry:
            trusted["runners_up"] = trusted_runners_up(entry, s.params, s.restrictions, constants,
                                                       space_changed=space_changed, path=path, key=key)
        if k.source is not None and k.source.get("kernel_name") and entry.source_file:
            trusted["kernel_name"], trusted["compiler_options"] = trusted_build(
                entry, k.source["kernel_name"], k.source["compiler_options"], path=path, key=key)
        if entry.machine.get("probe") in (PROBE_VERSION, GPU_PROBE_VERSION):
            trusted["machine"] = {**entry.machine, **trusted_probe_sizes(entry, path=path, key=key)}
        if "reference_n" in entry.machine:  # whatever the probes' version: it sizes the worker's arrays
            trusted["machine"] = {**trusted.get("machine", entry.machine),
                                  **trusted_reference_size(entry, path=path, key=key)}
        return entry.replace(**trusted)

    def _not_gated(self, label: str, key: str, path: Path, check: EntryCheck | None) -> None:
        """No usable entry in gate mode: skip or fail by ``--autotune-missing``, never silently."""
        why = f"lock entry is stale: {check.stale}" if check is not None else f"no lock entry for {key!r} in {path}"
        self._record(label, Mode.GATE, Status.STALE if check is not None else Status.MISSING, message=why,
                     lockfile=str(path))
        text = f"autotune: {why}; tune it with: {retune_command(self.host.test)}"
        if self.options.missing == "fail":
            raise _fail(text)
        raise _skip(text)

    def _left_alone(self, label: str, entry: LockEntry, path: Path) -> KernelResult:
        """``--autotune-only=missing`` tunes only what lacks a valid entry; a valid one is neither re-tuned nor gated."""
        params = self._in_declared_order(entry.params)
        self._record(label, Mode.LOCKED, Status.LEFT_ALONE, params=params, locked_ms=entry.median,
                     strategy=entry.strategy_name, lockfile=str(path),
                     message="valid lock entry; run plain pytest to gate it")
        stats = TimingStats.from_samples(entry.samples or [entry.median])
        return KernelResult(label, "locked", params, stats, None, None, None, entry.to_dict())

    # -- tune ---------------------------------------------------------------------------
    def _space(self, runner: Any, label: str) -> Any:
        s = self.settings
        try:
            return build_space(s.params, s.restrictions, runner, s.constants,
                               max_configurations=s.max_configurations)
        except SearchSpaceError as exc:
            raise _fail(f"autotune: search space of {self.host.test}::{label}: {exc}") from None

    def _say_removed(self, k: KernelCall, runner: Any, space: Any) -> None:
        """How many configurations the kernel's implicit restrictions (the thread-block limit) took out of the
        marker's space, in the run's output: a Kernel Tuner port sees why its count is smaller."""
        s = self.settings
        marker = s.restrictions[:len(s.restrictions) - len(k.restrictions)]
        try:
            whole = len(build_space(s.params, marker, runner, s.constants, max_configurations=s.max_configurations))
        except SearchSpaceError:  # the marker's space alone is too large to build: no count to give
            return
        removed = whole - len(space)
        if removed:
            limit = self._constants(runner).get("max_threads", "max_threads")
            over = "; ".join(r.replace("<= max_threads", f"> {limit}") for r in k.restrictions)
            self.host.say(f"autotune {self.host.test}::{k.label}: thread-block limit removed {removed} of {whole} "
                          f"configurations ({over}); block_limit=False on the marker keeps them")

    def _tune(self, k: KernelCall, key: str, runner: Any, path: Path, device: Any,
              old: LockEntry | None, old_key: str | None = None) -> KernelResult:
        """Search, decide whether the locked winner stays, lock the decision, and say so in the row."""
        s, opts = self.settings, self.options
        searched = self._search(k, key, runner, path, device, old)
        result = searched.result
        incumbent = searched.incumbent
        locked_now = result.confirmed_samples(incumbent) if incumbent is not None else None
        reasons = rewrite_reasons(k, old, device, opts.effort) + ([f"re-keyed from {old_key}"] if old_key else [])
        decision = decide(old, reasons, result.params, list(result.stats.samples), locked_now, s.tolerance, s.alpha)
        entry, others = self._lock(k, key, runner, path, device, old, old_key, result, decision, searched.seconds,
                                   _phase(searched.progress, "lock rounds"))
        searched.scratch.clear()
        params = self._in_declared_order(decision.params)
        stats = TimingStats.from_samples(decision.samples) if decision.samples else result.stats
        locked_ms = old.median if old is not None else None
        # "vs lock" is one comparison, named: the new winner against the locked winner timed beside it now
        # (the number in the note, "a/b"), else this run's timing of the winner against the previous lock's
        # median ("now": a machine's state, not a verdict; the entry is kept unless the decision says otherwise)
        side_by_side = decision.change_pct is not None and decision.action == "new"
        warm = searched.warm
        self._record(k.label, Mode.TUNE, TUNE_STATUS[decision.action], params=params,
                     time_ms=_lock_median(entry, stats.median), measured_ms=stats.median,
                     change_pct=decision.change_pct if side_by_side else
                     (stats.median - locked_ms) / locked_ms * 100.0 if locked_ms else None, locked_ms=locked_ms,
                     change_kind="a/b" if side_by_side else "now",
                     evaluations=result.evaluations, budget=searched.total or s.budget_text,
                     strategy=result.strategy["name"], failures=result.failures,
                     failure_examples=first_failures(result.history),
                     spills=spills(result.history, result.measurement),
                     compile_ahead=compile_ahead_summary(result.history),
                     best_so_far=[None if x != x else float(x) for x in result.history.best_so_far()],
                     resumed=searched.resumed, stop_reason=result.history.stop_reason,
                     note=_effort_note(opts.effort, decision.message if decision.action != "first" else
                                       (warm.note() if warm else "")),
                     message=decision.message, lockfile=str(path), lock_written=decision.write,
                     device=device.model, new_lockfile_beside=others if decision.write else [],
                     **_ray_fields(result.cluster))
        outputs = (result.outputs if decision.params == result.params  # the kept winner's own, fresh outputs
                   else evaluate_once(runner, decision.params, keep_outputs=True).extra.get("outputs"))
        return KernelResult(k.label, "tune", params, stats, outputs, result.history, None, entry)

    def _search(self, k: KernelCall, key: str, runner: Any, path: Path, device: Any,
                old: LockEntry | None) -> "_Searched":
        """The search: resumed from the scratch cache, the locked winner and other devices' winners first."""
        s, opts, test = self.settings, self.options, self.host.test
        try:
            space = self._space(runner, k.label)
        except _Stop as stop:  # e.g. device limits exclude every configuration: a failed tune
            self._record(k.label, Mode.TUNE, Status.FAILED, note=stop.message.removeprefix("autotune: "),
                         message=stop.message, evaluations=0, budget=s.budget_text, lockfile=str(path))
            raise
        if k.restrictions:
            self._say_removed(k, runner, space)
        # Everything that decides an evaluation's outcome is in the key (and the device: measurements
        # from another GPU must not be resumed into this device's lock); a fixed reference, tolerance
        # or measure option starts afresh instead of replaying stale results.
        scratch = ScratchCache(opts.scratch_dir, key, {**k.hashes, "device": device.slug,
                                                       "inputs": fingerprint({**k.outcome_inputs,
                                                                              "measure": s.measure})})
        if opts.fresh:
            scratch.clear()
        cached = {} if opts.fresh else scratch.load(space)
        if cached:
            self.host.say(f"autotune {test}::{k.label}: resumed {len(cached)} evaluations from an "
                          "interrupted run (--autotune-fresh to start over)")
        # Out of the evaluations this search can make: a space smaller than the budget ends early, and
        # the progress line must say so ("12/12", not "12/200" and never a final line).
        budget = effort_budget(s.budget, opts.effort)  # --autotune-effort=quick: a share of it
        total = min(budget.max_evaluations, len(space)) if budget.max_evaluations else None
        progress = self.host.progress(f"{test}::{k.label}", total)

        def on_record(record: Any, evaluator: Any) -> None:
            if record.row not in cached:
                scratch.append(record.measurement)
            if progress is not None:
                progress(record, evaluator)

        incumbent = old.params if old is not None and space.find(old.params) >= 0 else None
        warm = warm_start(opts.lockdir, path, k.label, k.hashes, k.problem) \
            if old is None or DEFAULTS.effort(opts.effort).warm_start_always else None
        started = time.perf_counter()
        try:
            # early stopping: the runner's measure options (the marker's measure=, else the ini option) decide
            result = tune(runner, space=space, options=TuneOptions(strategy=s.strategy, budget=s.budget, seed=s.seed,
                                                                   compile_workers=opts.compile_workers,
                                                                   cluster=opts.cluster, effort=opts.effort),
                          cache=cached, on_record=on_record, incumbent=incumbent, seeds=warm.seeds if warm else (),
                          on_confirm=_phase(progress, "finalists re-timed"))
        except TuneError as exc:
            history = exc.history
            self._record(k.label, Mode.TUNE, Status.FAILED, message=str(exc),
                         failures=history.failures() if history else {},
                         failure_examples=first_failures(history) if history else {},
                         compile_ahead=compile_ahead_summary(history) if history else {},
                         evaluations=len(history.records) if history else 0,
                         budget=total or s.budget_text, lockfile=str(path))
            raise _fail(f"autotune: {test}::{k.label}: {exc}") from None
        except (ClusterError, BackendUnavailable, SpecError) as exc:
            if opts.cluster is None:
                raise
            # the cluster (--autotune-ray) cannot run it: the flag and the reason, not the plugin's traceback
            raise _fail(f"autotune: {test}::{k.label}: --autotune-ray={opts.cluster}: {exc}") from None
        return _Searched(result, incumbent, warm, total, len(cached), scratch, time.perf_counter() - started,
                         progress)

    def _lock(self, k: KernelCall, key: str, runner: Any, path: Path, device: Any, old: LockEntry | None,
              old_key: str | None, result: TuneResult, decision: RetuneDecision,
              tuning_s: float, on_round: Callable[[int, int], None] | None = None
              ) -> tuple[Mapping[str, Any], list[str]]:
        """The entry of the decision (the old one where it stays as it is), merged into the lockfile when it must be
        written; and the other lockfiles of the same kind, named when this is a new one."""
        opts = self.options
        try:
            entry = (old.to_dict() if old is not None and not decision.write else
                     build_entry(k, self.host.test, self.settings, result, runner, decision, path, tuning_s,
                                 effort=opts.effort, on_round=on_round))
        except LockfileError as exc:  # the sources folder is a link, the disk is full, ...
            raise _fail(f"autotune: {exc}") from None
        if decision.write:
            entry = {**entry, **self._static_profile_fields(k, decision.params, device, getattr(runner, "name", None))}
        others = [] if path.exists() else [f"{p.name} ({model})" for p, model in
                                           same_kind_lockfiles(opts.lockdir, device.kind, path)]
        if decision.write:
            try:
                merge_entries(path, {key: entry}, device, remove=[old_key] if old_key else ())
            except LockfileError as exc:
                raise _fail(f"autotune: {exc} (the file was left untouched)") from None
        return entry, others

    # -- gate ---------------------------------------------------------------------------
    def _gate(self, k: KernelCall, entry: LockEntry, runner: Any, path: Path,
              check: EntryCheck) -> KernelResult:
        """Gate the call within its time budget; the session's ledger learns what it took, whatever the end."""
        session = self.options.session_gate_budget
        if session is not None and session.spent:
            self._not_gated_for_time(k.label, path)
        s = self.settings
        budget = (session.take(s.gate_budget, s.gate_budget_source) if session is not None
                  else GateBudget(s.gate_budget, s.gate_budget_source)).start()
        try:
            return self._gate_within(k, entry, runner, path, check, budget)
        finally:
            if session is not None:
                session.done(budget)

    def _not_gated_for_time(self, label: str, path: Path) -> None:
        """The session's gate budget is spent: the kernel is not gated, said in the NOT GATED line, and skipped
        (a budget chosen to bound the job's time is no failure of the kernel's)."""
        session = self.options.session_gate_budget
        assert session is not None
        why = f"session budget: {session.flag} spent by the gates before it"
        self._record(label, Mode.GATE, Status.SESSION_BUDGET, message=why, lockfile=str(path))
        raise _skip(f"autotune: not gated, the {why} ({format_seconds(session.spent_s)} of "
                    f"{format_seconds(session.seconds)} in this process)")

    def _gate_within(self, k: KernelCall, entry: LockEntry, runner: Any, path: Path, check: EntryCheck,
                     budget: GateBudget) -> KernelResult:
        s, opts, label, test = self.settings, self.options, k.label, self.host.test
        params = entry.params
        kept: dict[str, Any] = {}

        def measure_current() -> Any:
            # Not every runner keeps outputs (the replay runner has none): same fallback as tune().
            m = evaluate_once(runner, params, keep_outputs="outputs" not in kept)
            kept.setdefault("outputs", m.extra.get("outputs"))
            return m

        outcome = self._ab_gate(k, entry, path, runner, measure_current, budget) if "source" in check.changed \
            else None
        if outcome is None:
            recorded = entry.machine
            kind = runner.device().kind

            def probe() -> Any:  # measured round by round beside the confirmations, at the entry's sizes
                return probes_for(kind, {n: recorded[n] for n in ("triad_n", "fma_iterations")}, fresh=True,
                                  make=k.probe_make)

            rival = (lambda p: runner.evaluate(p)) if opts.ranking else None
            # where the lock's rounds had reference runs, the gate's runs have them too (measure/reference.py)
            with reference_runs(runner, recorded.get("reference_n") if recorded.get("reference_ms") else None):
                outcome = run_gate(label, test, entry, measure_current(), s.tolerance, s.alpha, rival,
                                   remeasure=measure_current, on_round=self._phase_of(label, "gate rounds"),
                                   probe=probe if recorded.get("probe") in (PROBE_VERSION, GPU_PROBE_VERSION)
                                   else None, pin=rotating_pin(runner) if kind in cpu_kinds() else None,
                                   budget=budget)
        files = changed_files(k, entry)
        changes = [*toolchain_changes(entry, {**runner.device().versions, **k.toolchain})]
        if entry.test not in (None, test):
            changes.append(f"entry recorded under {entry.test}")
        if changes and outcome.verdict == "slower" and outcome.method == "absolute":
            outcome.message += (f"\n  {'; '.join(changes)}: fix that change (or pin the old one), or, if the new "
                                f"speed is what you want, re-lock with: {retune_command(test)}")
        if changes and outcome.verdict == "incomparable":
            outcome.message += (f" ({'; '.join(changes)}: fix it, or if intended re-lock with: "
                                f"{retune_command(test)})")
        evidence = self._static_evidence(k, entry, runner) if "static" in entry else None
        if evidence is not None and (not evidence.identical or outcome.verdict in ("slower", "incomparable")):
            changes.append(evidence_note(evidence))
        if _replaceable(entry, DEFAULTS.EFFORT):  # the summary says the lock is a quick tuning's
            changes.append(QUICK_NOTE)
        cmp = outcome.comparison
        status = _VERDICT_STATUS[outcome.verdict]
        if outcome.stale_ranking and outcome.verdict == "pass":
            status = Status.STALE_RANKING
        generation = cpu_generation_note(entry.cpu or locked_device_properties(path), runner.device())
        changed = check.notes.replace("source changed since lock", f"source changed since lock ({', '.join(files)})"
                                      if files else "source changed since lock")
        notes = [n for n in (changed, *changes,
                             *(["A/B against the locked source"] if outcome.method == "a/b" else []),
                             *outcome.notes, generation) if n]
        # Triton's interpreter times Python on a CPU: reported, never a verdict on a GPU kernel (unless asked)
        info = (runner.device().kind == INTERPRETER_KIND and opts.interpreter_timing == "info"
                and outcome.verdict != "broken")
        if info:
            status = Status.INFO
            notes.insert(0, f"interpreter timing, information only ({outcome.verdict}"
                            + (f", {cmp.change_pct:+.1f}%" if cmp is not None and cmp.change_pct is not None else "")
                            + ")" + ("; the GPU locks' binaries were checked" if self._static_rows else ""))
        if notes and outcome.failed and not info:
            outcome.message += "\n  note: " + "; ".join(notes)
        absolute = outcome.absolute
        self._record(label, Mode.GATE, status, params=self._in_declared_order(params),
                     time_ms=cmp.new_median if cmp else None, locked_ms=entry.median,
                     change_pct=cmp.change_pct if cmp else None, p_value=cmp.p_value if cmp else None,
                     change_kind="a/b" if outcome.method == "a/b" else "lock",
                     strategy=entry.strategy_name, message=outcome.message,
                     stale_ranking=outcome.stale_ranking, note="; ".join(notes), lockfile=str(path),
                     method=outcome.method, absolute_change_pct=absolute.change_pct if absolute else None,
                     machine=outcome.machine.changes if outcome.machine else None,
                     incomparable_policy=opts.incomparable if outcome.verdict == "incomparable" else None,
                     gate_seconds=round(budget.elapsed, 3), gate_budget_s=budget.seconds,
                     samples=[float(x) for x in outcome.measurement.samples or []],  # the job summary's plot
                     locked_samples=entry.samples, **({"static": evidence.as_dict()} if evidence else {}))
        if outcome.failed and not info:
            raise _fail(outcome.message)
        if outcome.verdict == "incomparable" and not info:
            if opts.incomparable == "fail":
                raise _fail(outcome.message)
            if opts.incomparable == "skip":
                raise _skip(outcome.message)
        stats = TimingStats.from_samples(outcome.measurement.samples or [outcome.measurement.value])
        return KernelResult(label, "gate", self._in_declared_order(params), stats, kept.get("outputs"), None,
                            outcome, entry.to_dict())

    def _ab_gate(self, k: KernelCall, entry: LockEntry, path: Path, runner: Any,
                 measure_current: Callable[[], Any], budget: GateBudget | None = None) -> GateOutcome | None:
        """The edited source against the locked one, side by side; ``None`` when that cannot be done
        (a callable or recording, an entry without a stored source, a locked source that no longer builds)."""
        test = self.host.test
        try:
            code = load_source(path.parent, entry.source_file) if k.make_locked_runner else None
            if code is None:
                return None
            headers = {name: load_source(path.parent, stored) for name, stored in entry.headers.items()}
            if any(text is None for text in headers.values()):
                return None  # a stored header is missing (pruned by hand): no A/B
            # the locked headers, where the entry stored any (runners without headers take (code, entry) only)
            extra = [materialize_headers(headers)] if headers else []  # type: ignore[arg-type]
        except LockfileError as exc:
            raise _fail(f"autotune: {test}::{k.label}: {exc}; nothing was compiled from the "
                        "locked source (the lock was left untouched)") from None
        locked_runner = k.make_locked_runner(code, entry, *extra)  # type: ignore[misc]
        try:
            params = entry.params
            with sharing_one_cpu(locked_runner, runner):
                return run_ab_gate(k.label, test, entry, lambda: locked_runner.evaluate(params),
                                   measure_current, self.settings.tolerance, self.settings.alpha, budget=budget,
                                   on_round=self._phase_of(k.label, "A/B blocks"))
        except LockedSourceUnusable as exc:
            self.host.say(f"autotune {test}::{k.label}: the locked source no longer runs here ({exc}); "
                          "comparing with the locked samples instead")
            return None
        finally:
            locked_runner.close()

    # -- static -------------------------------------------------------------------------
    def _static_applies(self) -> bool:
        return self.options.mode is None and self.options.static != "off" and not self.options.compile_archs

    def _static_targets(self, k: KernelCall) -> list[StaticTarget]:
        if not self._static_applies() or k.static_build is None:
            return []
        try:
            return static_targets(self.options.lockdir, self.host.test, k.label)
        except LockfileError as exc:
            raise _fail(f"autotune: {exc} (the file was left untouched; fix or delete it)") from None

    def _static_only(self, k: KernelCall) -> KernelResult | None:
        """A GPU kernel on a machine without a usable GPU: its static verdicts, or None (nothing locked on a GPU;
        or a GPU job, ``--autotune-require-device``, whose GPU is missing: that must fail, not pass on evidence)."""
        targets = self._static_targets(k) if not self.options.require_device else []
        if not targets:
            return None
        gate = StaticGate(self.settings, self.options, self.host.test)
        self._static_rows, decided = gate.run(k, targets)
        if decided is not None:
            raise _Stop(decided.action, decided.message)
        return gate.result(k, targets)

    def _static_beside(self, k: KernelCall) -> None:
        """Triton in its interpreter: the static verdicts against the GPU locks, before the interpreter's own run
        (which proves correctness); a static failure fails the call after it."""
        targets = self._static_targets(k)
        if targets:
            gate = StaticGate(self.settings, self.options, self.host.test)
            self._static_rows, decided = gate.run(k, targets)
            self._static_targets_seen = targets
            if decided is not None and decided.action is Action.FAIL:
                self._static_failure = decided.message

    def _static_profile_fields(self, k: KernelCall, params: Mapping[str, Any], device: Any,
                               runner_name: str | None) -> dict[str, Any]:
        """A GPU winner's static profile for its entry (what CI runners without the GPU compare with); nothing,
        said once, where it cannot be built here."""
        arch = device_arch(device.as_dict()) if device.kind == "cuda" else None
        if arch is None or k.static_build is None:
            return {}
        try:
            return {"static": build_profile(k, params, arch, runner_name).to_dict()}
        except (AutotuneError, ValueError) as exc:
            self.host.say(f"autotune {self.host.test}::{k.label}: no static profile recorded ({exc}); CI runners "
                          "without this GPU cannot check its binary")
            return {}

    def _static_evidence(self, k: KernelCall, entry: LockEntry, runner: Any) -> StaticComparison | None:
        """The timed gate on a GPU: today's binary against the entry's profile, as evidence beside the timing."""
        device = runner.device()
        arch = device_arch(device.as_dict()) if device.kind == "cuda" else None
        locked = entry.static if arch is not None else None
        if locked is None or locked.arch != arch or k.static_build is None:
            return None
        try:
            return compare_profiles(locked, build_profile(k, entry.params, arch, entry.get("runner")),
                                    self.options.static_tolerance)
        except (AutotuneError, ValueError):
            return None  # no compiler or disassembler beside the GPU: the timing alone decides

    def _verified_in_interpreter(self, k: KernelCall, runner: Any, path: Path) -> KernelResult:
        """No interpreter lock entry to time against, but GPU locks: the locked configuration is run once in the
        interpreter, which proves it still computes the right result (its timing is no evidence of anything)."""
        result = StaticGate(self.settings, self.options, self.host.test).result(k, self._static_targets_seen)
        m = evaluate_once(runner, result.params, keep_outputs=True)
        if not m.ok:
            message = (f"autotune: {self.host.test}::{k.label}: the locked configuration {result.params} no longer "
                       f"works in Triton's interpreter ({m.failure}): {m.detail.strip()[:2000]}")
            self._record(k.label, Mode.GATE, Status.BROKEN, params=result.params, message=message,
                         lockfile=str(path))
            raise _fail(message)
        median = TimingStats.from_samples(m.samples).median if m.samples else m.value
        self._record(k.label, Mode.GATE, Status.INFO, params=result.params, time_ms=median, lockfile=str(path),
                     note="verified in the interpreter; no interpreter lock to time it against",
                     message="the locked configuration computes the right result in Triton's interpreter")
        return KernelResult(k.label, "static", result.params, TimingStats.from_samples(m.samples or [m.value]),
                            m.extra.get("outputs"), None, None, {})

    # -- helpers ------------------------------------------------------------------------
    def _phase_of(self, label: str, what: str) -> Callable[[int, int], None] | None:
        """The gate's progress lines of one phase (its rounds stop early: their ETA is a bound)."""
        return _phase(self.host.progress(f"{self.host.test}::{label}", None), what, at_most=True)

    def _in_declared_order(self, params: Mapping[str, Any]) -> dict[str, Any]:
        order = {name: i for i, name in enumerate(self.settings.params)}
        return dict(sorted(params.items(), key=lambda kv: order.get(kv[0], len(order))))

    def _record(self, kernel: str, mode: Mode, status: Status, **fields: Any) -> None:
        self._row = SummaryRow.make(self.host.test, kernel, mode, status, **fields)


def _lock_median(entry: Mapping[str, Any], measured: float) -> float:
    """The median the lock entry holds after the tuning (what the summary prints): on a CPU the winner is
    re-timed in rounds beside the probes, so it is not the search's median (``measured``, kept beside it)."""
    stats = entry.get("stats") if isinstance(entry, Mapping) else None
    median = stats.get("median") if isinstance(stats, Mapping) else None
    return float(median) if isinstance(median, (int, float)) and not isinstance(median, bool) else measured


def _ray_fields(run: ClusterRun | None) -> dict[str, Any]:
    """The row's fields of a tuning on Ray (none for a local one)."""
    if run is None:
        return {}
    return {"ray_devices": run.devices, "ray_nodes": list(run.nodes), "ray_lost": list(run.lost),
            "ray_refused": list(run.refused), "ray_joined": run.joined, "ray_retried": run.retried}
