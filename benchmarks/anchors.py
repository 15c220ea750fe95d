"""Reference searchers for the strategy benchmark: Kernel Tuner 1.5.0's strategies and Optuna's TPE.

Both run on the same recorded spaces as our strategies and their evaluation
orders are scored with the same function (:mod:`benchmarks.scoring`), so the
comparison is side by side.

Kernel Tuner
    Each recorded space is written to a temporary Kernel Tuner cache file
    (``tune_params``, ``tune_params_keys`` and a ``cache`` entry per
    configuration with its ``time``, or ``CompilationFailedConfig`` /
    ``RuntimeFailedConfig`` / ``InvalidConfig`` for a failure) and tuned with
    ``kernel_tuner.tune_kernel(..., simulation_mode=True, strategy=name,
    strategy_options={"max_fevals": B})``. Kernel Tuner must search the same
    space, so it gets the same restrictions: the T1 conditions of a T4 file,
    the CLBlast GEMM restrictions (``GEMM_RESTRICTIONS``, from the data README)
    for a cache file whose configurations they reproduce exactly, nothing for a
    file that covers its whole Cartesian product, and otherwise the set of
    recorded configurations as a ``FunctionConstraint`` (what Kernel Tuner's own
    ``tune_cache`` does, except that failed configurations stay in the space:
    they are part of it and cost an evaluation). The size and content of Kernel
    Tuner's ``Searchspace`` are checked against ours before any run.

    Kernel Tuner's strategies draw from Python's ``random`` and NumPy's global
    generator (SciPy's optimisers too), so a run is seeded with
    ``random.seed(seed)`` and ``np.random.seed(seed)``. The evaluation order is
    recovered from the list ``tune_kernel`` returns (``cost_func.results``: one
    entry per configuration the simulation runner served, repeats included):
    unique configurations in first-evaluation order, a result with
    ``__error__`` is a failure (``None``). Configurations that violate the
    restrictions are never sent to the runner and cost Kernel Tuner nothing,
    so they do not appear. Compute time per step: Kernel Tuner's own
    ``strategy_time`` of each result (the time spent in the strategy between
    two runner calls, amortised over the configurations of that batch, ms),
    plus the wall time of the whole ``tune_kernel`` call per unique evaluation.

    Several Kernel Tuner strategies end before B unique evaluations with
    ``max_fevals = B``: pso, firefly_algorithm and genetic_algorithm at their
    own ``maxiter``, simulated_annealing when its schedule ends, and
    dual_annealing because SciPy's ``maxfun`` counts every call (repeats and
    restricted points included) against the budget. Such a run keeps its last
    best value (the metric's rule). The benchmark-only option
    ``budget_factor`` (``kt:dual_annealing:budget_factor=10``) passes
    ``max_fevals = ceil(factor * B)`` instead and the first B unique
    evaluations are scored.

Optuna
    Optuna's default sampler (TPE, default settings, seeded) used as a typical
    user would: one ``suggest_categorical`` per parameter over its values and
    ``study.optimize(objective, n_trials=B)``. Every trial costs one
    evaluation of the budget: a configuration that violates the restrictions
    or fails costs one (its trial is told ``FAIL``: a typical objective raises
    or returns nothing for a failed kernel), and so does a trial that repeats
    an evaluated configuration (answered from a memo, told the same outcome,
    but the trial is spent: ``n_trials`` counts it). The scored sequence is the
    unique configurations in first-evaluation order, so a run with repeats
    has fewer than B of them and keeps its last best value (the metric's
    rule). Hyperparameters (``optuna:tpe:repeats=free``): ``repeats="free"``
    drives the sampler through our :class:`~pytest_autotune.engine.evaluator.Evaluator`
    instead, where a repeat is free and the run goes on to B unique
    evaluations (or until the evaluator stops it as stalled after 10,000
    repeats in a row; slow, as every repeat is a full TPE step on a growing
    study); ``failed="inf"`` tells a failed trial ``inf`` instead of ``FAIL``.
    Compute per step: the time of ``ask`` + the suggestions + ``tell``.
"""
from __future__ import annotations

import contextlib
import io
import json
import logging
import math
import os
import random
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from pytest_autotune.datasets import kernel_tuner_cache
from pytest_autotune.space import SearchSpace
from pytest_autotune.strategies.base import SearchGenerator, Strategy, check

#: The strategies of Kernel Tuner 1.5.0 in the side-by-side comparison (names as ``kernel_tuner.interface`` registers them).
KERNEL_TUNER_STRATEGIES = ("diff_evo", "pso", "genetic_algorithm", "dual_annealing", "firefly_algorithm",
                           "simulated_annealing", "random_sample", "bayes_opt", "mls", "greedy_ils")

#: CLBlast GEMM restrictions (data README), over the parameters of the Kernel Tuner GEMM caches.
GEMM_RESTRICTIONS = (
    "KWG % KWI == 0",
    "MWG % (MDIMC * VWM) == 0",
    "NWG % (NDIMC * VWN) == 0",
    "MWG % (MDIMA * VWM) == 0",
    "NWG % (NDIMB * VWN) == 0",
    "KWG % ((MDIMC * NDIMC)/MDIMA) == 0",
    "KWG % ((MDIMC * NDIMC)/NDIMB) == 0",
)
KNOWN_RESTRICTIONS = (GEMM_RESTRICTIONS,)

def kernel_tuner_version() -> str | None:
    try:
        from importlib.metadata import version
        return version("kernel_tuner")
    except Exception:  # noqa: BLE001 - not installed
        return None


def optuna_version() -> str | None:
    try:
        from importlib.metadata import version
        return version("optuna")
    except Exception:  # noqa: BLE001 - not installed
        return None


def have_kernel_tuner() -> bool:
    try:
        import kernel_tuner  # noqa: F401
        return True
    except Exception:  # noqa: BLE001 - an optional dependency that fails to import is missing
        return False


def have_optuna() -> bool:
    try:
        import optuna  # noqa: F401
        return True
    except Exception:  # noqa: BLE001
        return False


def _py(v: Any) -> Any:
    return v.item() if isinstance(v, np.generic) else v


# -- Kernel Tuner ------------------------------------------------------------------------------------------


@dataclass
class KTRun:
    """One Kernel Tuner run: the unique configurations in first-evaluation order and what it cost."""

    rows: list[int]  # rows of our space, in first-evaluation order
    values: list[float | None]  # recorded time or None (failure), aligned with rows
    strategy_ms: list[float] = field(default_factory=list)  # KT's strategy_time of every served result (ms)
    wall_s: float = 0.0
    served: int = 0  # results the runner served (repeats included)
    step_ms: list[float] = field(default_factory=list)  # per unique row: KT's strategy_time since the previous one


def _restrictions_for(recorded: Any) -> tuple[str, Any]:
    """(how, restrictions) that make Kernel Tuner search exactly the recorded space."""
    params = recorded.params
    space: SearchSpace = recorded.space
    if recorded.restrictions:
        return "definition", list(recorded.restrictions)
    cartesian = math.prod(len(v) for v in params.values())
    if len(space) == cartesian:
        return "none (full Cartesian product)", None
    for known in KNOWN_RESTRICTIONS:
        try:
            candidate = SearchSpace(params, list(known))
        except Exception:  # noqa: BLE001 - names not in this space, or empty
            continue
        if len(candidate) == len(space) and np.array_equal(candidate.indices, space.indices):
            return "known restrictions", list(known)
    from constraint import FunctionConstraint  # python-constraint2, a Kernel Tuner dependency

    members = {tuple(_py(x) for x in space.get(r).values()) for r in range(len(space))}

    def recorded_configuration(*values: Any) -> bool:
        return tuple(values) in members

    return "recorded configurations (FunctionConstraint)", [FunctionConstraint(recorded_configuration)]


class KernelTunerSpace:
    """A recorded space prepared for Kernel Tuner: a temporary cache file and the matching restrictions."""

    def __init__(self, recorded: Any, workdir: str | os.PathLike | None = None):
        self.recorded = recorded
        self.names = list(recorded.params)
        self.tune_params = {n: [_py(v) for v in vals] for n, vals in recorded.params.items()}
        self.restriction_source, self.restrictions = _restrictions_for(recorded)
        space = recorded.space
        timings = {"compile_time": 0.0, "verification_time": 0.0, "benchmark_time": 0.0}
        results = (({n: _py(v) for n, v in space.get(r).items()}, recorded.times[r], recorded.failures[r], timings)
                   for r in range(len(space)))
        doc = kernel_tuner_cache(self.tune_params, results, device_name=f"simulated {recorded.name}",
                                 kernel_name="bench", problem_size=[1])
        fd, name = tempfile.mkstemp(prefix=f"kt_{recorded.name}_", suffix=".json", dir=workdir)
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f)
        self.cachefile = name
        self._checked = False

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.cachefile)

    def check_searchspace(self) -> None:
        """Kernel Tuner's Searchspace under our restrictions must be exactly our space."""
        if self._checked:
            return
        from kernel_tuner.searchspace import Searchspace

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ss = Searchspace(self.tune_params, self.restrictions, 1_000_000_000)
        space = self.recorded.space
        ours = {tuple(_py(v) for v in space.get(r).values()) for r in range(len(space))}
        theirs = {tuple(_py(v) for v in c) for c in ss.list}
        if ss.size != len(space) or ours != theirs:
            raise RuntimeError(f"{self.recorded.name}: Kernel Tuner's search space ({ss.size} configurations, "
                               f"restrictions: {self.restriction_source}) differs from ours ({len(space)}); "
                               f"{len(theirs - ours)} only in Kernel Tuner's, {len(ours - theirs)} only in ours")
        self._checked = True

    def run(self, strategy: str, seed: int, budget: int, options: dict[str, Any] | None = None,
            stop_below: float | None = None) -> KTRun:
        """``stop_below``: end the run once a result at or below it was served (the order up to it is unchanged)."""
        import kernel_tuner

        self.check_searchspace()
        random.seed(seed)
        np.random.seed(seed % 2**32)
        strategy_options = dict(options or {})
        # budget_factor (ours, not Kernel Tuner's): max_fevals = ceil(factor * B); the caller scores the first B
        # unique evaluations. For strategies whose own stopping rule counts every call (dual_annealing: SciPy's
        # maxfun counts repeats and restricted points too) and that therefore end long before B unique evaluations.
        factor = float(strategy_options.pop("budget_factor", 1.0))
        if not factor >= 1.0:
            raise ValueError(f"budget_factor must be at least 1, got {factor}")
        strategy_options["max_fevals"] = int(math.ceil(factor * budget))
        t0 = time.perf_counter()
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), _stop_when_below(stop_below):
            warnings.simplefilter("ignore")
            results, _env = kernel_tuner.tune_kernel(
                "bench", "", (1,), [], self.tune_params, restrictions=self.restrictions, cache=self.cachefile,
                simulation_mode=True, strategy=strategy, strategy_options=strategy_options, quiet=True,
                verbose=False)
        wall = time.perf_counter() - t0
        space = self.recorded.space
        seen: set[tuple] = set()
        rows: list[int] = []
        values: list[float | None] = []
        strategy_ms: list[float] = []
        step_ms: list[float] = []
        since_last = 0.0
        for res in results:
            if not res:
                continue
            key = tuple(_py(res[n]) for n in self.names)
            st = res.get("strategy_time")
            if isinstance(st, (int, float)) and not isinstance(st, bool):
                strategy_ms.append(float(st))
                since_last += float(st)
            if key in seen:
                continue
            step_ms.append(since_last)
            since_last = 0.0
            seen.add(key)
            row = space.find(dict(zip(self.names, key)))
            if row < 0:
                raise RuntimeError(f"{self.recorded.name}: Kernel Tuner evaluated {key}, which is not in the space")
            # score with our recorded outcome (the cache holds the same numbers)
            value = None if self.recorded.failures[row] is not None else float(self.recorded.times[row])
            if ("__error__" in res) != (value is None):
                raise RuntimeError(f"{self.recorded.name}: Kernel Tuner's outcome for {key} disagrees with the record")
            rows.append(int(row))
            values.append(value)
        return KTRun(rows=rows, values=values, strategy_ms=strategy_ms, wall_s=wall,
                     served=sum(1 for r in results if r), step_ms=step_ms)


@contextlib.contextmanager
def _stop_when_below(limit: float | None):
    """While active, a Kernel Tuner simulation run ends once it served a time at or below ``limit``.

    Its budget of evaluations is cut to what it has spent, so the strategy
    stops at its next budget check, as it would at ``max_fevals``.
    """
    if limit is None:
        yield
        return
    from kernel_tuner.runners.simulation import SimulationRunner

    original = SimulationRunner.run

    def run(self: Any, parameter_space: Any, tuning_options: Any) -> Any:
        results = original(self, parameter_space, tuning_options)
        for res in results:
            t = res.get("time") if res else None
            if isinstance(t, (int, float)) and not isinstance(t, bool) and "__error__" not in res and t <= limit:
                tuning_options.budget.max_fevals = tuning_options.budget.num_fevals
                break
        return results

    SimulationRunner.run = run
    try:
        yield
    finally:
        SimulationRunner.run = original


# -- Optuna ------------------------------------------------------------------------------------------------


class OptunaTPE(Strategy):
    """Optuna's default TPE sampler as a typical user drives it (see the module docstring).

    Not registered: it lives in the benchmark only. Proposals are value-index
    vectors that may violate the restrictions (the evaluator records those as
    INVALID failures costing an evaluation).
    """

    name = "optuna_tpe"

    @dataclass
    class Hyperparameters:
        failed: str = "fail"  # how a failed/restricted trial is told: "fail" (TrialState.FAIL) or "inf"
        repeats: str = "cost"  # a trial repeating an evaluated configuration: "cost" (n_trials = B) or "free"

        def validate(self) -> None:
            check(self.failed in ("fail", "inf"), "failed", "must be 'fail' or 'inf'")
            check(self.repeats in ("cost", "free"), "repeats", "must be 'cost' or 'free'")

    def search(self) -> SearchGenerator:
        import optuna
        from optuna.trial import TrialState

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        seed = int(self.rng.integers(0, 2**31 - 1)) if self.seed is None else int(self.seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed), direction="minimize")
        space = self.space
        values = {n: list(space.values[n]) for n in space.names}
        while True:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                trial = study.ask()
                vec = np.array([values[n].index(trial.suggest_categorical(n, values[n])) for n in space.names],
                               dtype=np.int64)
            row = space.find_indices(vec)
            value = yield (int(row) if row >= 0 else vec)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if value is None:
                    if self.hp.failed == "inf":
                        study.tell(trial, float("inf"))
                    else:
                        study.tell(trial, state=TrialState.FAIL)
                else:
                    study.tell(trial, float(value))


@dataclass
class TrialRun:
    """A run where every proposal costs one evaluation: unique proposals in first-evaluation order."""

    seq: list  # row, or value-index list for a configuration outside the space
    values: list  # outcome per unique proposal (None: failed or restricted)
    step_seconds: list  # the strategy's compute per proposal
    repeats: int = 0


def drive_counting_repeats(strategy: Strategy, outcome: Any, n_trials: int) -> TrialRun:
    """Drive ``strategy`` for ``n_trials`` proposals, each costing one evaluation, repeats included.

    ``outcome(row)`` is the recorded value of a valid row or ``None``; a
    value-index vector outside the space is a restricted configuration
    (``None``). A repeated proposal is answered from the memo.
    """
    space = strategy.space
    gen = strategy.run(n_trials)
    seen: dict[Any, float | None] = {}
    out = TrialRun([], [], [])
    value: float | None = None
    try:
        for i in range(n_trials):
            t0 = time.perf_counter()
            try:
                proposal = next(gen) if i == 0 else gen.send(value)
            except StopIteration:
                break
            out.step_seconds.append(time.perf_counter() - t0)
            if isinstance(proposal, (int, np.integer)):
                key: Any = int(proposal)
            else:
                vec = np.asarray(proposal, dtype=np.int64)
                row = space.find_indices(vec)
                key = row if row >= 0 else tuple(int(x) for x in vec)
            if key in seen:
                out.repeats += 1
                value = seen[key]
                continue
            value = outcome(key) if isinstance(key, int) else None
            seen[key] = value
            out.seq.append(key if isinstance(key, int) else list(key))
            out.values.append(value)
    finally:
        gen.close()
    return out


def quiet_optuna() -> None:
    with contextlib.suppress(Exception):
        import optuna
        optuna.logging.set_verbosity(optuna.logging.WARNING)
    logging.getLogger("optuna").setLevel(logging.WARNING)
