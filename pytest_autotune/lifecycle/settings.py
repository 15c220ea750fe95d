"""What a kernel call is tuned and gated with: the marker's arguments, validated once, and the run's options.

A bad argument must be a collection error naming the argument and the test,
not a failure deep inside a tuning run. Restrictions that read device limits
(``max_threads``...) are checked for syntax and names here; whether the space
they leave is empty can only be known once the device is (at run time).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..engine.evaluator import Budget
from .. import defaults as DEFAULTS
from ..errors import AutotuneError
from ..errors import SpecError
from ..gate.budget import SessionGateBudget, parse_gate_budget
from ..measure.timing import MeasureOptions
from ..backends import device_constants
from ..space import SearchSpace, SearchSpaceError, SearchSpaceTooLarge, check_params, compile_restriction
from ..space.callables import classify_callable, refused_restriction
from ..strategies import StrategyError, validate_strategy_spec

# Device limits runners hand to the space as constants (see execution.device): every backend's, as the backends
# declare them (backends.device_constants(), which also has those of backends registered later).
DEVICE_CONSTANTS = device_constants()
OBJECTIVES = ("time",)
MARKER_ARGS = ("params", "restrictions", "strategy", "budget", "objective", "tolerance", "seed", "constants",
               "measure", "alpha", "gate_budget", "compile_sample", "block_limit")


class MarkerError(AutotuneError, ValueError):
    """A ``tune`` marker argument is invalid; the message names it, ``argument`` holds it (``None`` for the
    marker as a whole: positional or unknown arguments)."""

    def __init__(self, message: str, argument: str | None = None) -> None:
        super().__init__(message)
        self.args = (message, argument)
        self.argument = argument

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass
class TuneSettings:
    """Everything a marked test asks for, with defaults resolved from ini options and flags."""

    params: dict[str, list[Any]]
    restrictions: list[Any] = field(default_factory=list)
    strategy: Any = DEFAULTS.STRATEGY
    budget: Budget = field(default_factory=Budget)
    budget_text: str = ""
    objective: str = "time"
    tolerance: float = DEFAULTS.TOLERANCE  # fraction of the locked median the gate allows
    alpha: float = DEFAULTS.ALPHA  # significance of the Mann-Whitney test
    seed: int | None = None
    constants: dict[str, Any] = field(default_factory=dict)
    measure: MeasureOptions = field(default_factory=MeasureOptions)
    max_configurations: int | None = None  # ini autotune_max_configurations; None: the space package's default
    gate_budget: float | None = parse_gate_budget(DEFAULTS.KERNEL_GATE_BUDGET)  # seconds one gate of this kernel may take (None: no limit)
    gate_budget_source: str = f"the default {DEFAULTS.KERNEL_GATE_BUDGET}"  # where it came from, for the message
    # --autotune-compile: configurations per space and architecture for this test (the marker's compile_sample=,
    # which wins over --autotune-compile-sample; None: the flag's)
    compile_sample: int | None = None
    # Kernel Tuner's implicit restriction: a CUDA or OpenCL kernel's block_size_x * y * z <= max_threads
    block_limit: bool = True


def _fail(arg: str, why: str) -> MarkerError:
    return MarkerError(f"tune marker argument {arg!r}: {why}", arg)


def parse_marker(args: Sequence[Any], kwargs: Mapping[str, Any], defaults: Mapping[str, Any]) -> TuneSettings:
    """Validate marker arguments; ``defaults`` come from ini options / command line.

    Raises :class:`MarkerError` naming the bad argument.
    """
    if args:
        raise MarkerError("the tune marker takes keyword arguments only, e.g. @pytest.mark.tune(params={...})")
    unknown = sorted(set(kwargs) - set(MARKER_ARGS))
    if unknown:
        raise MarkerError(f"tune marker got unknown argument(s) {unknown}; known: {', '.join(MARKER_ARGS)}")
    params = kwargs.get("params")
    restrictions = kwargs.get("restrictions") or []
    if isinstance(restrictions, (str,)) or callable(restrictions):
        restrictions = [restrictions]
    if not isinstance(restrictions, (list, tuple)):
        raise _fail("restrictions", "must be a list of expression strings or callables")
    if params is not None and not isinstance(params, Mapping):
        from ..backends.triton_kernel import is_config_list, is_autotuner, space_from_configs

        if is_autotuner(params) or is_config_list(params):  # @triton.autotune: its configurations are the space
            try:
                params, allowed = space_from_configs(params)
            except SpecError as exc:
                raise _fail("params", str(exc)) from None
            restrictions = [allowed, *restrictions]
    if not isinstance(params, Mapping) or not params:
        raise _fail("params", "must be a non-empty dict of parameter name -> list of values (or an "
                              "@triton.autotune kernel, or a list of triton.Config)")
    constants = kwargs.get("constants") or {}
    if not isinstance(constants, Mapping):
        raise _fail("constants", "must be a dict of name -> value")

    strategy = kwargs.get("strategy", defaults.get("strategy", DEFAULTS.STRATEGY))
    try:
        validate_strategy_spec(strategy)
    except StrategyError as exc:
        raise _fail("strategy", str(exc)) from None

    raw_budget = kwargs.get("budget", defaults.get("budget", DEFAULTS.BUDGET))
    try:
        budget = Budget.parse(raw_budget)
    except ValueError as exc:
        raise _fail("budget", str(exc)) from None

    objective = kwargs.get("objective", "time")
    if objective not in OBJECTIVES:
        raise _fail("objective", f"{objective!r} is not supported; choose from {', '.join(OBJECTIVES)}")

    tolerance = kwargs.get("tolerance", defaults.get("tolerance", DEFAULTS.TOLERANCE))
    if not isinstance(tolerance, (int, float)) or isinstance(tolerance, bool) or not DEFAULTS.is_tolerance(tolerance):
        raise _fail("tolerance", f"{tolerance!r} must be a fraction of the locked time, e.g. 0.10 for 10%")
    alpha = kwargs.get("alpha", defaults.get("alpha", DEFAULTS.ALPHA))
    if not isinstance(alpha, (int, float)) or not DEFAULTS.is_alpha(alpha):
        raise _fail("alpha", f"{alpha!r} must be a significance level between 0 and 1, e.g. 0.01")
    seed = kwargs.get("seed", defaults.get("seed"))
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise _fail("seed", f"{seed!r} must be an integer or None")
    given = kwargs.get("measure")
    # the ini options' worker bounds, unless the marker sets its own
    bounds = {name: defaults[name] for name in ("output_cap", "worker_memory")
              if name in defaults and not (isinstance(given, Mapping) and name in given)}
    try:
        measure = MeasureOptions.coerce(given)
        if bounds and not isinstance(given, MeasureOptions):
            measure = measure.with_(**bounds)
    except (ValueError, TypeError) as exc:
        raise _fail("measure", str(exc)) from None
    if defaults.get("early_stop") is False:  # --autotune-no-early-stop / ini autotune_early_stop = false
        measure = measure.with_(early_stop=False)

    if "gate_budget" in kwargs:
        raw_gate = kwargs["gate_budget"]
        try:
            gate_budget = parse_gate_budget(raw_gate)
        except ValueError as exc:
            raise _fail("gate_budget", str(exc)) from None
        gate_source = f"gate_budget={raw_gate}"
    else:  # the flag's or ini option's, checked at start-up; a script's own default otherwise
        gate_budget = defaults.get("gate_budget", parse_gate_budget(DEFAULTS.KERNEL_GATE_BUDGET))
        gate_source = defaults.get("gate_budget_source", f"the default {DEFAULTS.KERNEL_GATE_BUDGET}")

    compile_sample = kwargs.get("compile_sample")
    if compile_sample is not None and (isinstance(compile_sample, bool) or not isinstance(compile_sample, int)
                                       or compile_sample < 1):
        raise _fail("compile_sample", f"{compile_sample!r} must be a whole number of configurations >= 1 (or None "
                                      "for --autotune-compile-sample's)")
    block_limit = kwargs.get("block_limit", True)
    if not isinstance(block_limit, bool):
        raise _fail("block_limit", f"{block_limit!r} must be True (drop thread blocks larger than the device's "
                                   "max_threads, as Kernel Tuner does) or False (keep them)")

    max_configurations = defaults.get("max_configurations")
    _check_space(dict(params), list(restrictions), dict(constants), max_configurations)
    return TuneSettings(params={k: list(v) for k, v in params.items()}, restrictions=list(restrictions),
                        strategy=strategy, budget=budget, budget_text=str(raw_budget), objective=objective,
                        tolerance=float(tolerance), alpha=float(alpha), seed=seed, constants=dict(constants),
                        measure=measure, max_configurations=max_configurations, gate_budget=gate_budget,
                        gate_budget_source=gate_source, compile_sample=compile_sample, block_limit=block_limit)


def _reads_constants(text: str, names: Mapping[str, Any]) -> bool:
    import ast

    return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(ast.parse(text.strip(), mode="eval")))


def _check_space(params: dict, restrictions: list, constants: dict, max_configurations: int | None = None) -> None:
    """Parameters and restrictions are well formed; the space is not empty, nor too large, when that is
    knowable now. Restrictions that read device limits leave both to run time: the space without them
    would be the whole Cartesian product, which is no check and may not fit in memory."""
    try:  # the parameters and their value lists first: what fails here is the params argument's fault
        for name, values in params.items():
            if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
                raise SearchSpaceError(f"parameter {name!r}: values must be a list")
        check_params(params, constants)
    except SearchSpaceError as exc:
        raise _fail("params", str(exc)) from None
    device_names = {n: 1 for n in device_constants() if n not in params and n not in constants}
    reads_device = False
    try:  # then each restriction on its own: its syntax, its names, a callable's signature
        for r in restrictions:
            if isinstance(r, str):
                compile_restriction(r, list(params), {**device_names, **constants})
                reads_device = reads_device or _reads_constants(r, device_names)
            elif callable(r):
                classify_callable(r, list(params))  # its signature, now, even where the space is built later
            else:
                raise SearchSpaceError(refused_restriction(r))
        if not reads_device:  # and the space they leave, when no device limit is needed to know it
            SearchSpace(params, restrictions, constants, max_configurations=max_configurations)
    except SearchSpaceTooLarge as exc:  # the values are too many for the restrictions given
        raise _fail("params", str(exc)) from None
    except SearchSpaceError as exc:
        raise _fail("restrictions", str(exc)) from None


MISSING_POLICIES = ("skip", "fail", "tune")
INCOMPARABLE_POLICIES = ("warn", "skip", "fail")  # the gate on a machine unlike the lock's


@dataclass
class Options:
    """Command-line flags and ini options after resolution (flag beats ini beats built-in default)."""

    mode: str | None  # None = gate, "all" = tune every selected test, "missing" = tune tests without a valid entry
    missing: str  # skip | fail | tune
    fresh: bool
    lockdir: Path
    scratch_dir: Path
    ranking: bool
    report: Path | None
    plots: Path | None
    devices: list[str]
    defaults: dict[str, Any]  # marker defaults: strategy, budget, tolerance, alpha, seed, worker bounds
    verbosity: int = 0
    is_worker: bool = False
    incomparable: str = DEFAULTS.INCOMPARABLE  # warn (pass, loudly) | skip | fail
    compile_workers: int = 1  # compile workers ahead of the device stage (1 = compile inline)
    require_device: bool = False  # no usable device fails the test (tune and gate) instead of skipping it
    cluster: str | None = None  # --autotune-ray: "ray" or a Ray address (tune on every device of the cluster)
    compile_archs: list[int] = field(default_factory=list)  # --autotune-compile: compile for these, no device
    compile_sample: int | None = None  # --autotune-compile-sample: configurations per space and architecture
    static: str = DEFAULTS.STATIC  # --autotune-static: the static gate's policy (off | warn | fail-on-*)
    static_tolerance: float = DEFAULTS.STATIC_TOLERANCE  # instruction growth the static gate calls worse
    accept_static: bool = False  # --autotune-accept-static: record a changed binary's profile, keep the timing
    record_static: bool = False  # --autotune-record-static: with --autotune-compile, record static baselines
    interpreter_timing: str = DEFAULTS.INTERPRETER_TIMING  # Triton's interpreter: info | gate
    effort: str = DEFAULTS.EFFORT  # --autotune-effort: full | quick (defaults.Effort: budget, finalists, lock rounds)
    session_gate_budget: SessionGateBudget | None = None
    """--autotune-gate-budget: this process's part of the session's gate budget, shared out as the gates come
    (one ledger for every kernel call of the process; None: no session budget)."""

    @property
    def run_mode(self) -> str:
        """What the run does, as the reports name it: ``compile`` (--autotune-compile, which neither tunes nor
        gates), else the tune mode (``all``, ``missing``), else ``gate``."""
        return "compile" if self.compile_archs else self.mode or "gate"
