"""The ``autotune`` fixture: what a marked test calls to tune (``--autotune``) or gate (plain run) a kernel.

One :class:`Autotune` per test. ``kernel(...)`` handles source kernels,
``function(...)`` Python-driven ones (the callable runner), ``replay(...)``
recorded data. Each decides the mode, runs the tuner or the gate, writes the
lock entry, and hands back a :class:`KernelResult`; the summary row goes to
``item.user_properties`` so it reaches the controller under pytest-xdist too.

Errors in the test's own call (a missing kernel file, ``expected`` of the
wrong shape) fail at the test's line: every frame here hides itself from
pytest's traceback (``__tracebackhide__``), so users never read plugin
internals.
"""
from __future__ import annotations

import inspect
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import pytest

from .. import __version__
from ..engine.evaluator import SearchHistory
from ..gate.verdict import (EntryCheck, GateOutcome, LockedSourceUnusable, check_entry, retune_command, run_ab_gate,
                   run_gate)
from ..lock.hashing import describe_callable, hash_problem, hash_source, hash_space, kernel_source_hash, stable_hash
from ..lock.problem import describe_problem
from ..lock.transfer import warm_start
from ..lock.devices import cpu_generation_note, cpu_record, find_lockfile, same_kind_lockfiles
from ..lock.lockfile import (LockfileError, entry_key, get_entry, lockfile_path, merge_entries, read_lockfile,
                             renamed_entry, utc_timestamp)
from ..lock.sources import load_source, materialize_headers, source_name, store_source
from ..lifecycle.settings import TuneSettings
from ..measure.timing import TimingStats
from ..gate.probes import CPU_KINDS, GPU_PROBE_VERSION, PROBE_VERSION, probe_measure, probe_sizes, probes_for
from ..gate.rounds import best_state_rounds, lock_pauses, rotating_pin
from ..gate.retune import RetuneDecision, decide
from ..gate.trust import UntrustedEntry, describe as describe_refusal, trusted_build, trusted_params, \
    trusted_probe_sizes, trusted_runners_up
from ..runners import make_runner
from ..engine.cluster import ClusterError
from ..errors import BackendUnavailable, SpecError
from ..runners.isolation import sharing_one_cpu
from ..lifecycle.scratch import ScratchCache, fingerprint
from .session import SessionState
from ..space import SearchSpaceError
from ..space.membership import declared_configuration
from ..engine.tuner import (TuneError, TuneResult, _evaluate, build_space, compile_ahead_summary, first_failures,
                            params_key, spills, tune)


def _failed(message: str) -> BaseException:
    """pytest's failure exception, to raise ``from None`` inside an ``except`` block: the
    message alone, without "During handling of the above exception..." and the chained error."""
    return pytest.fail.Exception(message, pytrace=False)


@dataclass
class KernelResult:
    """What a test gets back: the winner (tuned or locked), its timing and outputs."""

    kernel: str
    mode: str  # "tune" | "gate" | "locked" (left alone by --autotune-only=missing) | "compile" (--autotune-compile)
    params: dict[str, Any]
    stats: TimingStats
    outputs: list[Any] | None = None
    history: SearchHistory | None = None  # tune mode only
    gate: GateOutcome | None = None  # gate mode only
    entry: dict[str, Any] = field(default_factory=dict)  # the lock entry written or read


@dataclass
class _Kernel:
    """One kernel call of a test, as the fixture's internals need it."""

    label: str
    hashes: dict[str, str]  # what the lock entry pins (source, space, problem)
    outcome_inputs: dict[str, Any]  # everything else that decides an evaluation's outcome (scratch key)
    make_runner: Callable[[], Any]
    # Source kernels only: what the entry records of the source (stored beside the lock at tune time), and
    # a runner of the same kernel built from a locked source text (the gate's A/B comparison of an edit).
    source: dict[str, Any] | None = None
    make_locked_runner: Callable[..., Any] | None = None
    problem: dict[str, Any] = field(default_factory=dict)  # readable problem (lock.problem), for lookups
    footprint: int = 0  # bytes of the arguments: the size of the memory-bandwidth probe
    toolchain: dict[str, str] = field(default_factory=dict)  # what builds it beyond the device's versions (flags)
    probe_make: Callable[..., Any] | None = None  # the kernel's runner factory, for device (GPU) probes


class Autotune:
    """Bound to one test item; created by the ``autotune`` fixture."""

    def __init__(self, item: pytest.Item, settings: TuneSettings, state: SessionState):
        self.item = item
        self.settings = settings
        self.state = state
        self.results: dict[str, KernelResult] = {}

    # -- public API --------------------------------------------------------------------
    def kernel(self, source: Any, kernel_name: str, problem_size: Any, args: Sequence[Any], *,
               expected: Sequence[Any] | None = None, atol: float | None = None, rtol: float | None = None,
               verify: Callable[..., Any] | None = None, grid_div_x: Any = None, grid_div_y: Any = None,
               grid_div_z: Any = None, block_size_names: Sequence[str] | None = None,
               compiler_options: Sequence[str] = (), shared_mem: Any = None, runner: str | None = None,
               lang: str | None = None, name: str | None = None, check: str | None = None,
               **runner_options: Any) -> KernelResult:
        """Tune or gate a source kernel (CUDA via cupy/pycuda, OpenCL via opencl, C/C++ via the C runner)."""
        __tracebackhide__ = True
        from ..runners.kernel import KernelSpec, with_code

        spec_kwargs: dict[str, Any] = dict(source=source, kernel_name=kernel_name, problem_size=problem_size,
                                           args=args, grid_div_x=grid_div_x, grid_div_y=grid_div_y,
                                           grid_div_z=grid_div_z, compiler_options=compiler_options,
                                           shared_mem=shared_mem, expected=expected, atol=atol, rtol=rtol,
                                           verify=verify, lang=lang, check=check)
        if block_size_names is not None:
            spec_kwargs["block_size_names"] = block_size_names
        try:
            spec = KernelSpec(**spec_kwargs)
        except (SpecError, TypeError) as exc:
            raise pytest.fail.Exception(f"autotune.kernel({kernel_name!r}): {exc}") from None
        label = name or kernel_name.split("<")[0].strip()
        if spec.lang == "cuda" and self.item.config.getoption("autotune_compile", None):
            from .compile_check import check_in_test  # --autotune-compile: NVRTC only, no device

            nan = float("nan")
            no_timing = TimingStats(median=nan, mean=nan, min=nan, max=nan, iqr=nan, n=0, samples=[])
            return KernelResult(label, "compile", check_in_test(self, spec, label), no_timing, None, None, None, {})
        from ..runners.kernel import spec_headers

        headers = spec_headers(spec)
        hashes = {"source": kernel_source_hash(spec.code, kernel_name, spec.compiler_options, headers),
                  "space": self._space_hash(),
                  "problem": hash_problem(spec.problem_size, spec.args)}
        inputs = {"expected": spec.expected, "atol": atol, "rtol": rtol, "verify": verify, "runner": runner,
                  "lang": spec.lang, "geometry": [spec.grid_div_x, spec.grid_div_y, spec.grid_div_z,
                                                  list(spec.block_size_names), shared_mem],
                  "runner_options": runner_options}
        suffix = spec.source_file.suffix if spec.source_file is not None else _LANG_SUFFIX.get(spec.lang, ".txt")
        source = {"code": spec.code, "suffix": suffix, "kernel_name": kernel_name,
                  "compiler_options": list(spec.compiler_options), "headers": headers,
                  "file": spec.source_file.name if spec.source_file is not None else ""}

        def locked_runner(code: str, entry: Mapping[str, Any], headers_dir: Path | None = None) -> Any:
            # the locked headers (written to headers_dir) come before the kernel's folder on the include path
            first = ([] if headers_dir is None else
                     ["-iquote", str(headers_dir)] if spec.lang in ("c", "c++") else [f"-I{headers_dir}"])
            locked = with_code(spec, code, entry.get("kernel_name", kernel_name),
                               [*first, *entry.get("compiler_options", spec.compiler_options)])
            return make_runner(locked, runner=runner, measure=self.settings.measure, **runner_options)

        flags = [*runner_options.get("flags", ()), *spec.compiler_options]

        return self._run(_Kernel(label, hashes, inputs, lambda: make_runner(
            spec, runner=runner, measure=self.settings.measure, **runner_options), source=source,
            make_locked_runner=locked_runner, problem=describe_problem(spec.problem_size, spec.args),
            footprint=_footprint(spec.args),
            toolchain={**({"flags": " ".join(flags)} if flags else {}), **_cuda_toolchain(spec.lang)},
            probe_make=(lambda probe: make_runner(probe, runner=runner, measure=probe_measure(), **runner_options))
            if spec.lang == "cuda" else None))

    def function(self, launch: Callable[[Mapping[str, Any]], Any], *, name: str | None = None,
                 args: Sequence[Any] = (), expected: Sequence[Any] | None = None, atol: float | None = None,
                 rtol: float | None = None, verify: Callable[..., Any] | None = None,
                 sync: Callable[[], None] | None = None, problem_size: Any = None,
                 **runner_options: Any) -> KernelResult:
        """Tune or gate a Python-driven kernel: ``launch(params)`` runs it and returns its outputs."""
        __tracebackhide__ = True
        if not callable(launch):
            raise pytest.fail.Exception(f"autotune.function: launch must be a callable launch(params), got {launch!r}")
        label = name or getattr(launch, "__name__", "function")
        try:
            source = inspect.getsource(launch)
        except (OSError, TypeError):
            source = stable_hash(describe_callable(launch))
        hashes = {"source": hash_source(source), "space": self._space_hash(),
                  "problem": hash_problem(problem_size, list(args))}
        inputs = {"expected": expected, "atol": atol, "rtol": rtol, "verify": verify, "sync": sync,
                  "runner_options": runner_options}
        return self._run(_Kernel(label, hashes, inputs, lambda: make_runner(
            None, runner="callable", launch=launch, expected=expected, atol=atol, rtol=rtol, verify=verify,
            sync=sync, measure=self.settings.measure, **runner_options),
            problem=describe_problem(problem_size, list(args)),
            footprint=_footprint(args)))

    def triton(self, kernel: Any, grid: Any, args: Sequence[Any], *, expected: Sequence[Any] | None = None,
               atol: float | None = None, rtol: float | None = None, verify: Callable[..., Any] | None = None,
               shared_mem: Any = None, problem_size: Any = None, name: str | None = None, isolate: bool = True,
               **runner_options: Any) -> KernelResult:
        """Tune or gate a ``@triton.jit`` (or ``@triton.autotune``) kernel; the marker's params are its
        ``tl.constexpr`` arguments and launch options (see runners/triton_runner.py)."""
        __tracebackhide__ = True
        from ..runners.triton_runner import TritonCall

        try:
            call = TritonCall(kernel, grid, args, list(self.settings.params), problem_size=problem_size,
                              isolate=bool(isolate), expected=expected, atol=atol, rtol=rtol, verify=verify,
                              shared_mem=shared_mem)
        except SpecError as exc:
            raise pytest.fail.Exception(f"autotune.triton({getattr(kernel, '__name__', kernel)!r}): {exc}") from None
        except ImportError as exc:
            raise pytest.skip.Exception(f"autotune.triton: {exc}") from None
        label = name or call.label
        described = call.described_args()
        hashes = {"source": kernel_source_hash(call.code, call.qualname), "space": self._space_hash(),
                  "problem": hash_problem(call.problem_size, described)}
        inputs = {"expected": call.spec.expected, "atol": atol, "rtol": rtol, "verify": verify, "runner": "triton",
                  "grid": describe_callable(grid) if callable(grid) else list(grid), "shared_mem": str(shared_mem),
                  "runner_options": runner_options}
        source = {"code": call.code, "suffix": ".py", "kernel_name": call.qualname, "compiler_options": []}
        measure = self.settings.measure
        return self._run(_Kernel(label, hashes, inputs, lambda: call.runner(measure, **runner_options),
                                 source=source,
                                 make_locked_runner=lambda code, entry: call.locked_runner(code, measure,
                                                                                           **runner_options),
                                 problem=describe_problem(call.problem_size, described)))

    def replay(self, recording: Any, *, name: str | None = None, scale: float = 1.0, noise: float = 0.0,
               seed: int | None = None, definition: Any = None) -> KernelResult:
        """Tune or gate against recorded measurements (a Kernel Tuner cache, T4 or KTT file).

        The marker's ``params`` must describe the recorded space. ``scale``
        multiplies every recorded time (simulate a slower or faster kernel);
        ``noise`` adds seeded relative noise to the samples.
        """
        __tracebackhide__ = True
        from ..datasets import load_dataset
        from ..simulation.replay import ReplayRunner

        path = Path(recording)
        if not path.is_absolute():
            path = Path(str(self.item.config.rootpath)) / path
        label = name or path.name.split(".")[0]
        try:
            recorded = load_dataset(path, definition)
        except (OSError, ValueError) as exc:
            raise pytest.fail.Exception(f"autotune.replay({str(recording)!r}): {exc}") from None
        # The recording stands for the kernel *and* the hardware: its identity (kernel, format,
        # parameters, restrictions) is the "source"; its times are what the gate compares. Hashing
        # the file's bytes would turn every re-recorded (slower, faster, re-ranked) file into a
        # stale entry, and the gate could never see it.
        identity = {"format": recorded.format, "kernel": recorded.kernel, "params": recorded.params,
                    "restrictions": [str(r) for r in recorded.restrictions]}
        hashes = {"source": hash_source(stable_hash(identity)), "space": self._space_hash(),
                  "problem": hash_problem(None, [])}
        stat = path.stat()
        inputs = {"recording": [str(path), stat.st_size, stat.st_mtime_ns], "scale": scale, "noise": noise,
                  "seed": seed, "definition": str(definition)}
        return self._run(_Kernel(label, hashes, inputs,
                                 lambda: ReplayRunner(recorded, noise=noise, scale=scale, seed=seed),
                                 problem=describe_problem(None, [])))

    # -- internals -------------------------------------------------------------------------
    def _space_hash(self) -> str:
        s = self.settings
        return hash_space(s.params, s.restrictions, s.constants)

    def _in_declared_order(self, params: Mapping[str, Any]) -> dict[str, Any]:
        order = {name: i for i, name in enumerate(self.settings.params)}
        return dict(sorted(params.items(), key=lambda kv: order.get(kv[0], len(order))))

    def _run(self, k: _Kernel) -> KernelResult:
        __tracebackhide__ = True
        if k.label in self.results:
            raise pytest.fail.Exception(f"autotune: kernel name {k.label!r} is used twice in {self.item.nodeid}; "
                                        "pass name= to tell them apart")
        self.item.stash[CALLS_KEY] = self.item.stash.get(CALLS_KEY, 0) + 1
        opts = self.state.options
        try:
            runner = k.make_runner()
        except BackendUnavailable as exc:
            why = f"no usable device for this kernel: {exc}"
            # a gate that checked nothing, or a tune that tuned nothing, says so in the summary, not only with -rs
            self._row(k.label, "gate" if opts.mode is None else "tune", "no device", message=why,
                      required=opts.require_device)
            if opts.require_device:  # a GPU job whose driver broke must not pass green with every kernel skipped
                raise _failed(f"autotune: {why} (--autotune-require-device)") from None
            raise pytest.skip.Exception(f"autotune: {why}") from None
        except SpecError as exc:
            raise pytest.fail.Exception(f"autotune: kernel {k.label!r}: {exc}") from None
        try:
            device = runner.device()
            named = self.item.config.hook.pytest_autotune_lockfile_name(config=self.item.config, device=device)
            # without a hook's name: the device's identity, or a lockfile under an older name of it
            path = lockfile_path(opts.lockdir, named) if named else find_lockfile(opts.lockdir, device.slug)
            try:
                lock = read_lockfile(path)
            except LockfileError as exc:
                raise _failed(f"autotune: {exc} (the file was left untouched; fix or delete it)") from None
            key = entry_key(self.item.nodeid, k.label)
            entry = get_entry(lock, self.item.nodeid, k.label)
            renamed = renamed_entry(lock, self.item.nodeid, k.label, k.hashes, self._gone) if entry is None else None
            if renamed is not None:  # a renamed test: its kernel's entry, recorded under the old test id
                self.state.say(f"autotune {self.item.nodeid}::{k.label}: entry recorded under {renamed[1]['test']}")
                entry = renamed[1]
            check = check_entry(entry, k.hashes, lambda: self._in_space(entry, runner), k.problem) \
                if entry is not None else None
            if check is not None and check.stale is None:
                # the lock is untrusted input: what reaches a build is the marker's own values, or nothing
                try:
                    entry = self._trusted(k, entry, runner, path, "space" in check.changed)  # type: ignore[arg-type]
                except UntrustedEntry as exc:
                    if opts.mode is None and opts.missing != "tune":
                        self._row(k.label, "gate", "refused", message=describe_refusal(exc), lockfile=str(path))
                        raise _failed(describe_refusal(exc)) from None
                    self.state.say(f"{describe_refusal(exc)}; tuning it afresh")
                    entry, check = None, None
            usable = check is not None and check.stale is None
            if opts.mode == "missing" and usable:
                result = self._left_alone(k.label, entry, path)  # type: ignore[arg-type]
            elif opts.mode is not None or (not usable and opts.missing == "tune"):
                result = self._tune(k, key, runner, path, device, entry, renamed[0] if renamed else None)
            elif not usable:
                self._not_gated(k.label, key, path, check)
            else:
                result = self._gate(k, entry, runner, path, check)  # type: ignore[arg-type]
        finally:
            runner.close()
        self.results[k.label] = result
        return result

    def _gone(self, test: str) -> bool:
        """The test no longer exists: not collected, though its file was (or the file is gone too)."""
        collected = self.state.collected
        path = test.split("::", 1)[0]
        if test in collected:
            return False
        return any(c.split("::", 1)[0] == path for c in collected) or \
            not (Path(str(self.item.config.rootpath)) / path).exists()

    def _in_space(self, entry: Mapping[str, Any], runner: Any) -> bool:
        """The locked winner is a point of the marker's current space (checked without building the space)."""
        s = self.settings
        try:
            declared_configuration(entry.get("params"), s.params, s.restrictions, self._constants(runner))
        except SearchSpaceError:
            return False
        return True

    def _constants(self, runner: Any) -> dict[str, Any]:
        """What restrictions see besides the parameters: the device's limits, then the marker's constants."""
        return {**runner.constants(), **self.settings.constants}

    def _trusted(self, k: _Kernel, entry: Mapping[str, Any], runner: Any, path: Path,
                 space_changed: bool) -> dict[str, Any]:
        """A copy of the entry whose build inputs are checked: the marker's own values for the winner and the
        runners-up, the kernel name and compiler options of an A/B baseline, the probes' sizes."""
        s, key = self.settings, entry_key(self.item.nodeid, k.label)
        constants = self._constants(runner)
        trusted = dict(entry)
        trusted["params"] = trusted_params(entry, s.params, s.restrictions, constants, path=path, key=key)
        if "runners_up" in entry:
            trusted["runners_up"] = trusted_runners_up(entry, s.params, s.restrictions, constants,
                                                       space_changed=space_changed, path=path, key=key)
        if k.source is not None and k.source.get("kernel_name") and entry.get("source_file"):
            trusted["kernel_name"], trusted["compiler_options"] = trusted_build(
                entry, k.source["kernel_name"], k.source["compiler_options"], path=path, key=key)
        if (entry.get("machine") or {}).get("probe") in (PROBE_VERSION, GPU_PROBE_VERSION):
            trusted["machine"] = {**entry["machine"], **trusted_probe_sizes(entry, path=path, key=key)}
        return trusted

    def _space(self, runner: Any, label: str) -> Any:
        __tracebackhide__ = True
        s = self.settings
        try:
            return build_space(s.params, s.restrictions, runner, s.constants,
                               max_configurations=s.max_configurations)
        except SearchSpaceError as exc:
            raise _failed(f"autotune: search space of {self.item.nodeid}::{label}: {exc}") from None

    def _not_gated(self, label: str, key: str, path: Path, check: EntryCheck | None) -> None:
        """No usable entry in gate mode: skip or fail by ``--autotune-missing``, never silently."""
        __tracebackhide__ = True
        why = f"lock entry is stale: {check.stale}" if check is not None else f"no lock entry for {key!r} in {path}"
        status = "stale" if check is not None else "missing"
        self._row(label, "gate", status, message=why, lockfile=str(path))
        text = f"autotune: {why}; tune it with: {retune_command(self.item.nodeid)}"
        if self.state.options.missing == "fail":
            raise _failed(text)
        raise pytest.skip.Exception(text)

    def _left_alone(self, label: str, entry: Mapping[str, Any], path: Path) -> KernelResult:
        """``--autotune-only=missing`` tunes only what lacks a valid entry; a valid one is neither re-tuned nor gated."""
        params = self._in_declared_order(entry["params"])
        self._row(label, "locked", "left alone", params=params, locked_ms=entry["stats"]["median"],
                  strategy=(entry.get("strategy") or {}).get("name"), lockfile=str(path),
                  message="valid lock entry; run plain pytest to gate it")
        stats = TimingStats.from_samples(entry["samples"] or [entry["stats"]["median"]])
        return KernelResult(label, "locked", params, stats, None, None, None, dict(entry))

    def _tune(self, k: _Kernel, key: str, runner: Any, path: Path, device: Any,
              old: Mapping[str, Any] | None, old_key: str | None = None) -> KernelResult:
        __tracebackhide__ = True
        s, opts = self.settings, self.state.options
        try:
            space = self._space(runner, k.label)
        except pytest.fail.Exception as exc:  # e.g. device limits exclude every configuration: a failed tune
            self._row(k.label, "tune", "failed", note=str(exc.msg).removeprefix("autotune: "), message=exc.msg,
                      evaluations=0, budget=s.budget_text, lockfile=str(path))
            raise
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
            self.state.say(f"autotune {self.item.nodeid}::{k.label}: resumed {len(cached)} evaluations from an "
                           "interrupted run (--autotune-fresh to start over)")
        # Out of the evaluations this search can make: a space smaller than the budget ends early, and
        # the progress line must say so ("12/12", not "12/200" and never a final line).
        total = min(s.budget.max_evaluations, len(space)) if s.budget.max_evaluations else None
        progress = self.state.progress(f"{self.item.nodeid}::{k.label}", total)

        def on_record(record: Any, evaluator: Any) -> None:
            if record.row not in cached:
                scratch.append(record.measurement)
            progress(record, evaluator)

        incumbent = dict(old["params"]) if old is not None and space.find(old["params"]) >= 0 else None
        warm = warm_start(opts.lockdir, path, k.label, k.hashes, k.problem) if old is None else None
        started = time.perf_counter()
        try:
            result = tune(runner, space=space, strategy=s.strategy, budget=s.budget, seed=s.seed,
                          cache=cached, on_record=on_record, incumbent=incumbent, seeds=warm.seeds if warm else (),
                          compile_workers=opts.compile_workers, early_stop=s.measure.early_stop,
                          cluster=opts.cluster)
        except TuneError as exc:
            self._row(k.label, "tune", "failed", message=str(exc), failures=exc.history.failures() if exc.history else {},
                      failure_examples=first_failures(exc.history) if exc.history else {},
                      compile_ahead=compile_ahead_summary(exc.history) if exc.history else {},
                      evaluations=len(exc.history.records) if exc.history else 0,
                      budget=total or s.budget_text, lockfile=str(path))
            raise _failed(f"autotune: {self.item.nodeid}::{k.label}: {exc}") from None
        except (ClusterError, BackendUnavailable, SpecError) as exc:
            if opts.cluster is None:
                raise
            # the cluster (--autotune-ray) cannot run it: the flag and the reason, not the plugin's traceback
            raise _failed(f"autotune: {self.item.nodeid}::{k.label}: --autotune-ray={opts.cluster}: {exc}") from None
        locked_now = result.confirmed_samples(incumbent) if incumbent is not None else None
        reasons = self._rewrite_reasons(k, old, device) + ([f"re-keyed from {old_key}"] if old_key else [])
        decision = decide(old, reasons, result.params, list(result.stats.samples),
                          locked_now, s.tolerance, s.alpha)
        try:
            entry = (dict(old) if old is not None and not decision.write else
                     self._entry(k, result, runner, decision, path, time.perf_counter() - started))
        except LockfileError as exc:  # the sources folder is a link, the disk is full, ...
            raise _failed(f"autotune: {exc}") from None
        others = [] if path.exists() else [f"{p.name} ({model})" for p, model in
                                           same_kind_lockfiles(opts.lockdir, device.kind, path)]
        if decision.write:
            try:
                merge_entries(path, {key: entry}, device, remove=[old_key] if old_key else ())
            except LockfileError as exc:
                raise _failed(f"autotune: {exc} (the file was left untouched)") from None
        scratch.clear()
        params = self._in_declared_order(decision.params)
        stats = TimingStats.from_samples(decision.samples) if decision.samples else result.stats
        locked_ms = old["stats"]["median"] if old is not None else None
        # "vs lock" is one comparison, named: the new winner against the locked winner timed beside it now
        # (the number in the note), else the kept winner's samples now against the lock's median
        side_by_side = decision.change_pct is not None and decision.action == "new"
        self._row(k.label, "tune", TUNE_STATUS[decision.action], params=params, time_ms=stats.median,
                  change_pct=decision.change_pct if side_by_side else
                  (stats.median - locked_ms) / locked_ms * 100.0 if locked_ms else None, locked_ms=locked_ms,
                  change_kind="a/b" if side_by_side else "lock",
                  evaluations=result.evaluations, budget=total or s.budget_text,
                  strategy=result.strategy["name"], failures=result.failures,
                  failure_examples=first_failures(result.history), spills=spills(result.history, result.measurement),
                  compile_ahead=compile_ahead_summary(result.history),
                  best_so_far=[None if x != x else float(x) for x in result.history.best_so_far()],
                  resumed=len(cached), stop_reason=result.history.stop_reason,
                  note=decision.message if decision.action != "first" else (warm.note() if warm else ""),
                  message=decision.message, lockfile=str(path), lock_written=decision.write,
                  device=device.model, new_lockfile_beside=others if decision.write else [])
        outputs = (result.outputs if decision.params == result.params  # the kept winner's own, fresh outputs
                   else _evaluate(runner, decision.params, keep_outputs=True).extra.get("outputs"))
        return KernelResult(k.label, "tune", params, stats, outputs, result.history, None, entry)

    @staticmethod
    def _rewrite_reasons(k: _Kernel, old: Mapping[str, Any] | None, device: Any) -> list[str]:
        """Why a kept winner's entry must be rewritten all the same: what it depends on changed, or it lacks
        what the gate now uses (an entry written by an older version)."""
        if old is None:
            return []
        recorded = old.get("hashes") or {}
        reasons = [f"{name} changed" for name in k.hashes if recorded.get(name) != k.hashes[name]]
        if (old.get("machine") or {}).get("probe") not in (PROBE_VERSION, GPU_PROBE_VERSION) and \
                probes_for(device.kind, make=k.probe_make) is not None:
            reasons.append("machine probes recorded")
        if "source_file" not in old and k.source is not None:
            reasons.append("kernel source stored")
        if "problem" not in old:  # a schema-1 entry: the lookup and the export need its readable problem
            reasons.append("readable problem recorded")
        return reasons

    def _source_fields(self, k: _Kernel, path: Path) -> dict[str, Any]:
        """The exact source, stored beside the lock, so an edit can later be timed against it."""
        if k.source is None:
            return {}
        name = store_source(path.parent, k.source["code"], k.source["suffix"])
        headers = {header: store_source(path.parent, text, Path(header).suffix or ".h")
                   for header, text in (k.source.get("headers") or {}).items()}
        return {"source_file": name, "kernel_name": k.source["kernel_name"],
                "compiler_options": k.source["compiler_options"], **({"headers": headers} if headers else {})}

    def _entry(self, k: _Kernel, result: TuneResult, runner: Any, decision: RetuneDecision,
               path: Path, tuning_s: float) -> dict[str, Any]:
        s = self.settings
        device = result.device
        ups = [r for r in [*([] if decision.params == result.params else [_winner_record(result)]),
                           *result.runners_up] if dict(r.params) != decision.params][:len(result.runners_up)]
        samples = list(decision.samples)
        up_samples = [list(result.confirmed_samples(r.params) or r.measurement.samples) for r in ups]
        sizes = probe_sizes(k.footprint, TimingStats.from_samples(samples).median)
        retimed = {params_key(r.params) for r in ups if result.confirmed_samples(r.params)}
        rounds = None
        if device.kind in CPU_KINDS:
            # the winner (and its runners-up) again, in rounds beside the probes on each CPU in turn; the
            # rounds where the machine was at its best are kept, so samples and probes describe one state
            rounds = best_state_rounds(
                [lambda p=dict(p): runner.evaluate(p) for p in [decision.params, *(r.params for r in ups)]],
                lambda: probes_for(device.kind, sizes, fresh=True, make=k.probe_make), rotating_pin(runner),
                s.tolerance, more_pauses_s=lock_pauses(tuning_s))
        if rounds is not None:
            (samples, *up_samples), machine, _kept = rounds
            retimed = {params_key(r.params) for r in ups}
        else:
            machine = probes_for(device.kind, sizes, make=k.probe_make)
        stats = TimingStats.from_samples(samples)
        return {
            "kernel": k.label,
            "test": self.item.nodeid,
            "params": decision.params,
            "objective": s.objective,
            "unit": "ms",
            "stats": {key: v for key, v in stats.as_dict(samples=False).items()},
            "samples": list(stats.samples),
            # each runner-up's median names its kind: re-timed beside the winner (in the confirmation rounds
            # or the rounds beside the probes; comparable with the winner's), or its single search-time
            # measurement (not comparable)
            "runners_up": _fastest_first([{"params": dict(r.params),
                                           "median": TimingStats.from_samples(xs).median if xs else _median(result, r),
                                           "median_kind": "re-timed" if params_key(r.params) in retimed else "search",
                                           "samples": xs}
                                          for r, xs in zip(ups, up_samples)]),
            "stats_kind": "re-timed",  # the winner's samples: its confirmation rounds
            "hashes": k.hashes,
            "problem": k.problem,
            "strategy": {"name": result.strategy["name"], "hyperparameters": result.strategy["hyperparameters"],
                         "seed": s.seed},
            "evaluations": {"total": result.evaluations, "failed": result.failures,
                            "budget": s.budget.max_evaluations or s.budget_text,
                            "space_size": len(result.space)},
            "runner": getattr(runner, "name", type(runner).__name__),
            "tolerance": s.tolerance,
            **self._source_fields(k, path),
            # probes sized to this kernel: its footprint, and about its duration
            **({"machine": machine} if machine else {}),
            **({"cpu": cpu} if (cpu := cpu_record(device)) else {}),
            "versions": {**device.versions, **k.toolchain, "pytest_autotune": __version__},
            "timestamp": utc_timestamp(),
        }

    def _gate(self, k: _Kernel, entry: Mapping[str, Any], runner: Any, path: Path, check: EntryCheck) -> KernelResult:
        __tracebackhide__ = True
        s, opts, label = self.settings, self.state.options, k.label
        params = dict(entry["params"])
        kept: dict[str, Any] = {}

        def measure_current() -> Any:
            # Not every runner keeps outputs (the replay runner has none): same fallback as tune().
            m = _evaluate(runner, params, keep_outputs="outputs" not in kept)
            kept.setdefault("outputs", m.extra.get("outputs"))
            return m

        outcome = self._ab_gate(k, entry, path, runner, measure_current) if "source" in check.changed else None
        if outcome is None:
            recorded = entry.get("machine") or {}
            kind = runner.device().kind

            def probe() -> Any:  # measured round by round beside the confirmations, at the entry's sizes
                return probes_for(kind, {n: recorded[n] for n in ("triad_n", "fma_iterations")}, fresh=True,
                                  make=k.probe_make)

            rival = (lambda p: runner.evaluate(p)) if opts.ranking else None
            outcome = run_gate(label, self.item.nodeid, entry, measure_current(), s.tolerance, s.alpha, rival,
                               remeasure=measure_current,
                               probe=probe if recorded.get("probe") in (PROBE_VERSION, GPU_PROBE_VERSION) else None,
                               pin=rotating_pin(runner) if kind in CPU_KINDS else None)
        files = _changed_files(k, entry)
        changes = [*toolchain_changes(entry, {**runner.device().versions, **k.toolchain})]
        if entry.get("test") not in (None, self.item.nodeid):
            changes.append(f"entry recorded under {entry['test']}")
        if changes and outcome.verdict == "slower" and outcome.method == "absolute":
            outcome.message += (f"\n  {'; '.join(changes)}: fix that change (or pin the old one), or, if the new "
                                f"speed is what you want, re-lock with: {retune_command(self.item.nodeid)}")
        if changes and outcome.verdict == "incomparable":
            outcome.message += (f" ({'; '.join(changes)}: fix it, or if intended re-lock with: "
                                f"{retune_command(self.item.nodeid)})")
        cmp = outcome.comparison
        status = {"pass": "pass", "faster": "faster", "slower": "REGRESSION", "broken": "BROKEN",
                  "incomparable": "incomparable"}[outcome.verdict]
        if outcome.stale_ranking and outcome.verdict == "pass":
            status = "stale-ranking"
        generation = cpu_generation_note(entry.get("cpu") or _locked_device_properties(path), runner.device())
        changed = check.notes.replace("source changed since lock", f"source changed since lock ({', '.join(files)})"
                                      if files else "source changed since lock")
        notes = [n for n in (changed, *changes,
                             *(["A/B against the locked source"] if outcome.method == "a/b" else []),
                             *outcome.notes, generation) if n]
        if notes and outcome.failed:
            outcome.message += "\n  note: " + "; ".join(notes)
        absolute = outcome.absolute
        self._row(label, "gate", status, params=self._in_declared_order(params),
                  time_ms=cmp.new_median if cmp else None, locked_ms=entry["stats"]["median"],
                  change_pct=cmp.change_pct if cmp else None, p_value=cmp.p_value if cmp else None,
                  change_kind="a/b" if outcome.method == "a/b" else "lock",
                  strategy=(entry.get("strategy") or {}).get("name"), message=outcome.message,
                  stale_ranking=outcome.stale_ranking, note="; ".join(notes), lockfile=str(path),
                  method=outcome.method, absolute_change_pct=absolute.change_pct if absolute else None,
                  machine=outcome.machine.changes if outcome.machine else None,
                  incomparable_policy=opts.incomparable if outcome.verdict == "incomparable" else None,
                  samples=[float(x) for x in outcome.measurement.samples or []])  # the job summary's plot
        if outcome.failed:
            raise pytest.fail.Exception(outcome.message, pytrace=False)
        if outcome.verdict == "incomparable":
            if opts.incomparable == "fail":
                raise pytest.fail.Exception(outcome.message, pytrace=False)
            if opts.incomparable == "skip":
                raise pytest.skip.Exception(outcome.message)
        stats = TimingStats.from_samples(outcome.measurement.samples or [outcome.measurement.value])
        return KernelResult(label, "gate", self._in_declared_order(params), stats, kept.get("outputs"), None,
                            outcome, dict(entry))

    def _ab_gate(self, k: _Kernel, entry: Mapping[str, Any], path: Path, runner: Any,
                 measure_current: Callable[[], Any]) -> GateOutcome | None:
        """The edited source against the locked one, side by side; ``None`` when that cannot be done
        (a callable or recording, an entry without a stored source, a locked source that no longer builds)."""
        __tracebackhide__ = True
        try:
            code = load_source(path.parent, entry.get("source_file", "")) if k.make_locked_runner else None
            if code is None:
                return None
            headers = {name: load_source(path.parent, stored) for name, stored in (entry.get("headers") or {}).items()}
            if any(text is None for text in headers.values()):
                return None  # a stored header is missing (pruned by hand): no A/B
            # the locked headers, where the entry stored any (runners without headers take (code, entry) only)
            extra = [materialize_headers(headers)] if headers else []  # type: ignore[arg-type]
        except LockfileError as exc:
            raise _failed(f"autotune: {self.item.nodeid}::{k.label}: {exc}; nothing was compiled from the "
                          "locked source (the lock was left untouched)") from None
        locked_runner = k.make_locked_runner(code, entry, *extra)  # type: ignore[misc]
        try:
            params = dict(entry["params"])
            with sharing_one_cpu(locked_runner, runner):
                return run_ab_gate(k.label, self.item.nodeid, entry, lambda: locked_runner.evaluate(params),
                                   measure_current, self.settings.tolerance, self.settings.alpha)
        except LockedSourceUnusable as exc:
            self.state.say(f"autotune {self.item.nodeid}::{k.label}: the locked source no longer runs here ({exc}); "
                           "comparing with the locked samples instead")
            return None
        finally:
            locked_runner.close()

    def _row(self, kernel: str, mode: str, status: str, **fields: Any) -> None:
        row = {"test": self.item.nodeid, "kernel": kernel, "mode": mode, "status": status, **fields}
        self.item.user_properties.append(("autotune", row))


def _locked_device_properties(path: Path) -> Mapping[str, Any] | None:
    """The lockfile's device block (for entries written before they recorded their CPU)."""
    try:
        lock = read_lockfile(path)
    except LockfileError:
        return None
    return (lock.device or {}).get("properties") if lock is not None else None


TOOLCHAIN_IGNORED = ("pytest_autotune", "os", "python", "numpy")  # the machine's, or not the build's


def toolchain_changes(entry: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """``toolchain changed: compiler gcc 12.2.0 -> 13.1.0`` for each recorded tool (compiler, NVRTC/CUDA,
    CuPy, PyCUDA, PyOpenCL, PoCL, driver, flags) whose version here differs from the entry's."""
    recorded = {k: str(v) for k, v in (entry.get("versions") or {}).items() if k not in TOOLCHAIN_IGNORED}
    now = {k: str(v) for k, v in current.items() if k not in TOOLCHAIN_IGNORED}
    if not recorded:
        return []
    return [f"toolchain changed: {name} {_short_version(recorded.get(name, '(none)'))} -> "
            f"{_short_version(now.get(name, '(none)'))}"
            for name in sorted(set(recorded) | set(now)) if recorded.get(name) != now.get(name)
            and not (name == "flags" and name not in recorded)]


def _short_version(text: str) -> str:
    """``gcc (Debian 12.2.0-14) 12.2.0`` -> ``gcc 12.2.0``: the tool and its version, not the vendor's string."""
    words = text.split()
    if len(words) > 2 and "(" in text and words[-1][:1].isdigit():
        return f"{words[0]} {words[-1]}"
    return text


def _changed_files(k: _Kernel, entry: Mapping[str, Any]) -> list[str]:
    """Which of the kernel's files differ from the locked ones: the kernel file (by its name), its headers."""
    if k.source is None or not entry.get("source_file"):
        return []
    changed = []
    if source_name(k.source["code"], k.source["suffix"]) != entry["source_file"]:
        changed.append(k.source.get("file") or "kernel file")
    locked = entry.get("headers") or {}
    now = k.source.get("headers") or {}
    for name in sorted(set(locked) | set(now)):
        if name not in now:
            changed.append(f"{name} (no longer included)")
        elif name not in locked:
            changed.append(f"{name} (newly included)")
        elif source_name(now[name], Path(name).suffix or ".h") != locked[name]:
            changed.append(name)
    return changed


def _cuda_toolchain(lang: str | None) -> dict[str, str]:
    """NVRTC's version for a CUDA kernel (the device's versions name the driver, runtime and CuPy/PyCUDA)."""
    if lang != "cuda":
        return {}
    try:
        from ..runners.nvrtc import nvrtc_version

        return {"nvrtc": ".".join(str(v) for v in nvrtc_version())}
    except Exception:  # no NVRTC here (PyCUDA with nvcc, or no CUDA at all): nothing to record
        return {}


def _footprint(args: Sequence[Any]) -> int:
    """Bytes of the kernel's array arguments: what a memory-bound kernel moves at least once."""
    return sum(int(getattr(a, "nbytes", 0) or 0) for a in args if hasattr(a, "shape"))


def _winner_record(result: TuneResult) -> Any:
    """The search's winner as a runner-up record (when the locked winner was kept instead)."""
    from ..engine.evaluator import EvaluationRecord

    return EvaluationRecord(-1, -1, dict(result.params), result.measurement, 0.0)


def _fastest_first(runners_up: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Runners-up re-timed side by side are ranked by those medians (the search's order otherwise)."""
    if all(r["median_kind"] == "re-timed" for r in runners_up):
        return sorted(runners_up, key=lambda r: r["median"])
    return runners_up


def _median(result: TuneResult, record: Any) -> float:
    confirmed = result.confirmed_samples(record.params)
    if confirmed:
        return TimingStats.from_samples(confirmed).median
    return float(record.value if record.value is not None else record.measurement.value)


CALLS_KEY = pytest.StashKey[int]()
_LANG_SUFFIX = {"cuda": ".cu", "c": ".c", "c++": ".cpp", "opencl": ".cl"}
# The summary's status of a tuned kernel, by what happened to its lock entry (see retune.decide).
TUNE_STATUS = {"first": "first lock", "new": "new winner", "kept": "kept lock", "refreshed": "kept lock",
               "updated": "kept lock"}
