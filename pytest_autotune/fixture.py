"""The ``autotune`` fixture: what a marked test calls to tune (``--autotune``) or gate (plain run) a kernel.

One :class:`Autotune` per test. ``kernel(...)`` handles source kernels,
``function(...)`` Python-driven ones (the callable runner). Both decide the
mode, run the tuner or the gate, write the lock entry, and hand back a
:class:`KernelResult`; the summary row goes to ``item.user_properties`` so it
reaches the controller under pytest-xdist too.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import pytest

from . import __version__
from .evaluator import SearchHistory
from .gate import GateOutcome, retune_command, run_gate
from .hashing import describe_callable, hash_problem, hash_source, hash_space, stable_hash
from .lockfile import LockfileError, entry_key, get_entry, lockfile_path, merge_entries, read_lockfile, stale_hashes, utc_timestamp
from .marker import TuneSettings
from .measure import TimingStats
from .runners import make_runner
from .runners.errors import BackendUnavailable
from .scratch import ScratchCache
from .session import SessionState
from .space import SearchSpaceError
from .tuner import TuneError, TuneResult, _evaluate, build_space, tune


def _failed(message: str) -> BaseException:
    """pytest's failure exception, to raise ``from None`` inside an ``except`` block: the
    message alone, without "During handling of the above exception..." and the chained error."""
    return pytest.fail.Exception(message, pytrace=False)


@dataclass
class KernelResult:
    """What a test gets back: the winner (tuned or locked), its timing and outputs."""

    kernel: str
    mode: str  # "tune" | "gate"
    params: dict[str, Any]
    stats: TimingStats
    outputs: list[Any] | None = None
    history: SearchHistory | None = None  # tune mode only
    gate: GateOutcome | None = None  # gate mode only
    entry: dict[str, Any] = field(default_factory=dict)  # the lock entry written or read


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
               lang: str | None = None, name: str | None = None, **runner_options: Any) -> KernelResult:
        """Tune or gate a source kernel (CUDA via cupy/pycuda, C/C++ via the C runner)."""
        from .runners.kernel import KernelSpec

        spec_kwargs: dict[str, Any] = dict(source=source, kernel_name=kernel_name, problem_size=problem_size,
                                           args=args, grid_div_x=grid_div_x, grid_div_y=grid_div_y,
                                           grid_div_z=grid_div_z, compiler_options=compiler_options,
                                           shared_mem=shared_mem, expected=expected, atol=atol, rtol=rtol,
                                           verify=verify, lang=lang)
        if block_size_names is not None:
            spec_kwargs["block_size_names"] = block_size_names
        spec = KernelSpec(**spec_kwargs)
        label = name or kernel_name.split("<")[0].strip()
        if spec.lang == "cuda" and self.item.config.getoption("autotune_compile", None):
            from .compile_check import check_in_test  # --autotune-compile: NVRTC only, no device

            return check_in_test(self, spec, label)
        hashes = {"source": hash_source(spec.code + "\n#kernel " + kernel_name + "\n" + "\n".join(spec.compiler_options)),
                  "space": self._space_hash(),
                  "problem": hash_problem(spec.problem_size, spec.args)}
        return self._run(label, hashes, lambda: make_runner(spec, runner=runner, measure=self.settings.measure,
                                                            **runner_options))

    def function(self, launch: Callable[[Mapping[str, Any]], Any], *, name: str | None = None,
                 args: Sequence[Any] = (), expected: Sequence[Any] | None = None, atol: float | None = None,
                 rtol: float | None = None, verify: Callable[..., Any] | None = None,
                 sync: Callable[[], None] | None = None, problem_size: Any = None,
                 **runner_options: Any) -> KernelResult:
        """Tune or gate a Python-driven kernel: ``launch(params)`` runs it and returns its outputs."""
        label = name or getattr(launch, "__name__", "function")
        try:
            source = inspect.getsource(launch)
        except (OSError, TypeError):
            source = stable_hash(describe_callable(launch))
        hashes = {"source": hash_source(source), "space": self._space_hash(),
                  "problem": hash_problem(problem_size, list(args))}
        return self._run(label, hashes, lambda: make_runner(
            None, runner="callable", launch=launch, expected=expected, atol=atol, rtol=rtol, verify=verify,
            sync=sync, measure=self.settings.measure, **runner_options))

    def replay(self, recording: Any, *, name: str | None = None, scale: float = 1.0, noise: float = 0.0,
               seed: int | None = None, definition: Any = None) -> KernelResult:
        """Tune or gate against recorded measurements (a Kernel Tuner cache, T4 or KTT file).

        The marker's ``params`` must describe the recorded space. ``scale``
        multiplies every recorded time (simulate a slower or faster kernel);
        ``noise`` adds seeded relative noise to the samples.
        """
        from pathlib import Path

        from .datasets import load_dataset
        from .runners.replay import ReplayRunner

        path = Path(recording)
        if not path.is_absolute():
            path = Path(str(self.item.config.rootpath)) / path
        label = name or path.name.split(".")[0]
        recorded = load_dataset(path, definition)
        # The recording stands for the kernel *and* the hardware: its identity (kernel, format,
        # parameters, restrictions) is the "source"; its times are what the gate compares. Hashing
        # the file's bytes would turn every re-recorded (slower, faster, re-ranked) file into a
        # stale entry, and the gate could never see it.
        identity = {"format": recorded.format, "kernel": recorded.kernel, "params": recorded.params,
                    "restrictions": [str(r) for r in recorded.restrictions]}
        hashes = {"source": hash_source(stable_hash(identity)), "space": self._space_hash(),
                  "problem": hash_problem(None, [])}
        return self._run(label, hashes, lambda: ReplayRunner(recorded, noise=noise, scale=scale, seed=seed))

    # -- internals -------------------------------------------------------------------------
    def _space_hash(self) -> str:
        s = self.settings
        return hash_space(s.params, s.restrictions, s.constants)

    def _run(self, label: str, hashes: dict[str, str], runner_factory: Callable[[], Any]) -> KernelResult:
        if label in self.results:
            raise ValueError(f"kernel name {label!r} is used twice in {self.item.nodeid}; pass name= to tell them apart")
        opts = self.state.options
        try:
            runner = runner_factory()
        except BackendUnavailable as exc:
            pytest.skip(f"autotune: no usable device for this kernel: {exc}")
        try:
            device = runner.device()
            path = lockfile_path(opts.lockdir, self.item.config.hook.pytest_autotune_lockfile_name(
                config=self.item.config, device=device) or device.slug)
            try:
                lock = read_lockfile(path)
            except LockfileError as exc:
                raise _failed(f"autotune: {exc} (the file was left untouched; fix or delete it)") from None
            key = entry_key(self.item.nodeid, label)
            entry = get_entry(lock, self.item.nodeid, label)
            stale = stale_hashes(entry, hashes) if entry is not None else []
            usable = entry is not None and not stale
            tune_now = opts.mode == "all" or (opts.mode == "missing" and not usable)
            if not tune_now and not usable:
                why = (f"lock entry is stale ({', '.join(stale)} changed)" if stale
                       else f"no lock entry for {key!r} in {path}")
                if opts.missing == "skip":
                    self._row(label, "gate", "stale" if stale else "missing", message=why)
                    pytest.skip(f"autotune: {why}; run pytest --autotune to create it")
                if opts.missing == "fail":
                    self._row(label, "gate", "stale" if stale else "missing", message=why)
                    pytest.fail(f"autotune: {why}; run {retune_command(self.item.nodeid)}", pytrace=False)
                tune_now = True  # policy "tune"
            if tune_now:
                result = self._tune(label, key, hashes, runner, path, device, entry)
            else:
                result = self._gate(label, entry, runner)  # type: ignore[arg-type]
        finally:
            runner.close()
        self.results[label] = result
        return result

    def _tune(self, label: str, key: str, hashes: dict[str, str], runner: Any, path: Any, device: Any,
              old: Mapping[str, Any] | None) -> KernelResult:
        s, opts = self.settings, self.state.options
        try:
            space = build_space(s.params, s.restrictions, runner, s.constants)
        except SearchSpaceError as exc:
            raise _failed(f"autotune: search space of {self.item.nodeid}::{label}: {exc}") from None
        # Per device too: measurements from another GPU (a different xdist pinning, a swapped card,
        # a checkout shared by two machines) must not be resumed into this device's lock.
        scratch = ScratchCache(opts.scratch_dir, key, {**hashes, "device": device.slug})
        cached = {} if opts.fresh else scratch.load(space)
        if opts.fresh:
            scratch.clear()
        # Out of the evaluations this search can make: a space smaller than the budget ends early, and
        # the progress line must say so ("12/12", not "12/200" and never a final line).
        total = min(s.budget.max_evaluations, len(space)) if s.budget.max_evaluations else None
        progress = self.state.progress(f"{self.item.nodeid}::{label}", total)

        def on_record(record: Any, evaluator: Any) -> None:
            if record.row not in cached:
                scratch.append(record.measurement)
            progress(record, evaluator)

        try:
            result = tune(runner, space=space, strategy=s.strategy, budget=s.budget, seed=s.seed,
                          cache=cached, on_record=on_record)
        except TuneError as exc:
            raise _failed(f"autotune: {self.item.nodeid}::{label}: {exc}") from None
        entry = self._entry(label, hashes, result, runner)
        try:
            merge_entries(path, {key: entry}, device)
        except LockfileError as exc:
            raise _failed(f"autotune: {exc} (the file was left untouched)") from None
        scratch.clear()
        change = None
        if old is not None and old.get("stats", {}).get("median"):
            change = (result.stats.median - old["stats"]["median"]) / old["stats"]["median"] * 100.0
        self._row(label, "tune", "tuned", params=result.params, time_ms=result.stats.median, change_pct=change,
                  evaluations=result.evaluations, budget=s.budget.max_evaluations or s.budget_text,
                  strategy=result.strategy["name"], failures=result.failures,
                  best_so_far=[None if x != x else float(x) for x in result.history.best_so_far()],
                  resumed=len(cached), stop_reason=result.history.stop_reason)
        return KernelResult(label, "tune", result.params, result.stats, result.outputs, result.history, None, entry)

    def _entry(self, label: str, hashes: dict[str, str], result: TuneResult, runner: Any) -> dict[str, Any]:
        s = self.settings
        device = result.device
        return {
            "kernel": label,
            "test": self.item.nodeid,
            "params": result.params,
            "objective": s.objective,
            "unit": "ms",
            "stats": {k: v for k, v in result.stats.as_dict(samples=False).items()},
            "samples": list(result.stats.samples),
            "runners_up": [{"params": r.params, "median": float(r.value),  # type: ignore[arg-type]
                            "samples": list(r.measurement.samples)} for r in result.runners_up],
            "hashes": hashes,
            "strategy": {"name": result.strategy["name"], "hyperparameters": result.strategy["hyperparameters"],
                         "seed": s.seed},
            "evaluations": {"total": result.evaluations, "failed": result.failures,
                            "budget": s.budget.max_evaluations or s.budget_text,
                            "space_size": len(result.space)},
            "runner": getattr(runner, "name", type(runner).__name__),
            "tolerance": s.tolerance,
            "versions": {**device.versions, "pytest_autotune": __version__},
            "timestamp": utc_timestamp(),
        }

    def _gate(self, label: str, entry: Mapping[str, Any], runner: Any) -> KernelResult:
        s, opts = self.settings, self.state.options
        # Not every runner keeps outputs (the replay runner has none): same fallback as tune().
        measurement = _evaluate(runner, entry["params"], keep_outputs=True)
        rival = (lambda params: runner.evaluate(params)) if opts.ranking else None
        outcome = run_gate(label, self.item.nodeid, entry, measurement, s.tolerance, s.alpha, rival)
        cmp = outcome.comparison
        status = {"pass": "pass", "faster": "faster", "slower": "REGRESSION", "broken": "BROKEN"}[outcome.verdict]
        if outcome.stale_ranking and outcome.verdict == "pass":
            status = "stale-ranking"
        self._row(label, "gate", status, params=dict(entry["params"]),
                  time_ms=cmp.new_median if cmp else None, locked_ms=entry["stats"]["median"],
                  change_pct=cmp.change_pct if cmp else None, p_value=cmp.p_value if cmp else None,
                  strategy=(entry.get("strategy") or {}).get("name"), message=outcome.message,
                  stale_ranking=outcome.stale_ranking)
        if outcome.failed:
            pytest.fail(outcome.message, pytrace=False)
        stats = TimingStats.from_samples(measurement.samples or [measurement.value])
        return KernelResult(label, "gate", dict(entry["params"]), stats, measurement.extra.get("outputs"), None,
                            outcome, dict(entry))

    def _row(self, kernel: str, mode: str, status: str, **fields: Any) -> None:
        row = {"test": self.item.nodeid, "kernel": kernel, "mode": mode, "status": status, **fields}
        self.item.user_properties.append(("autotune", row))
