"""pytest hooks only: options, the ``tune`` marker, the ``autotune`` fixture, summary, xdist hand-off.

The engine (space, strategies, runners, lockfile) knows nothing of pytest;
this module wires it into a test run and stays thin.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import warnings
from pathlib import Path
from typing import Any, Generator

import pytest

from . import hookspec
from .. import defaults as DEFAULTS
from .fixture import CALLS_KEY, Autotune
from ..lifecycle import (PAUSE_SCALE_ENV, pause_scale, DEFAULT_MAX_CONFIGURATIONS, DEFAULT_SAMPLE, Budget, MarkerError, SessionGateBudget, StrategyError,
                         TuneSettings, check_memory_limit, parse_arch_list, parse_compile_workers, parse_gate_budget,
                         parse_marker, parse_size, positive_sample, validate_strategy_spec)
from . import job_summary
from .report import (failure_lines, fallback_line, lockfile_lines, new_lockfile_lines, not_gated_line, not_tuned_line,
                     ray_line, write_json_report, write_plots)
from .table import format_table, wrap
from .session import INCOMPARABLE_POLICIES, MISSING_POLICIES, STATE_KEY, Options, SessionState


class AutotuneWarning(pytest.PytestWarning):
    """A marked test that did not do what its marker promised (e.g. never ran a kernel under --autotune)."""

SETTINGS_KEY = pytest.StashKey[TuneSettings]()

INI_OPTIONS = {
    "autotune_strategy": ("default search strategy for tune markers without strategy=", DEFAULTS.STRATEGY),
    "autotune_budget": ("default budget (evaluations, or a duration such as 90s)", str(DEFAULTS.BUDGET)),
    "autotune_tolerance": ("default allowed slowdown of the gate, as a fraction (0.10 = 10%)",
                           f"{DEFAULTS.TOLERANCE:.2f}"),
    "autotune_alpha": ("significance level of the gate's Mann-Whitney U test", f"{DEFAULTS.ALPHA:g}"),
    "autotune_lockdir": ("directory of the per-device lockfiles, relative to the rootdir", DEFAULTS.LOCKDIR),
    "autotune_missing": ("what the gate does without a valid lock entry: skip, fail or tune", DEFAULTS.MISSING),
    "autotune_compile_workers": ("compile workers that compile the next candidates while one is timed: a number "
                                 "(1 = compile inline) or auto (CPU cores minus one)", "auto"),
    "autotune_incomparable": ("what the gate does on a machine whose probes differ from the lock's: warn, skip "
                              "or fail", DEFAULTS.INCOMPARABLE),
    "autotune_kernel_gate_budget": ("wall time one kernel's gate may take (a duration such as 10s, or none); what is "
                                    "undecided then is not comparable; the tune marker's gate_budget= overrides it",
                                    DEFAULTS.KERNEL_GATE_BUDGET),
    "autotune_gate_budget": ("wall time all gates of the session may take together (a duration such as 5m, or "
                             "none), shared out fairly; kernels reached after it are not gated",
                             DEFAULTS.SESSION_GATE_BUDGET),
    "autotune_early_stop": ("stop timing configurations whose first runs are far slower than the best so far "
                            "(true/false)", "true"),
    "autotune_require_device": ("a kernel without a usable device fails its test instead of skipping it, when "
                                "tuning and gating (true/false)", "false"),
    "autotune_ray": ("tune on every device of a Ray cluster: ray (the cluster Ray finds) or its address; off = "
                     "this machine's one device", "off"),
    "autotune_max_configurations": ("most valid configurations a tune marker's search space may have; more is a "
                                    "collection error, not a CI runner out of memory (about 20 bytes each)",
                                    str(DEFAULT_MAX_CONFIGURATIONS)),
    "autotune_static": ("the static gate, on a machine without a kernel's GPU: fail-on-worse (fail a binary "
                        "worse than the lock's), fail-on-change (fail any change), warn (never fail) or off",
                        DEFAULTS.STATIC),
    "autotune_static_tolerance": ("growth of a binary's memory or math instructions the static gate calls worse, "
                                  "as a fraction of the lock's (0.10 = 10%)", f"{DEFAULTS.STATIC_TOLERANCE:.2f}"),
    "autotune_interpreter_timing": ("a Triton kernel timed in Triton's interpreter: info (report the timing, never "
                                    "fail on it) or gate (gate it like a device's)", DEFAULTS.INTERPRETER_TIMING),
    "autotune_effort": ("how much --autotune spends: full (the marker's budget, every finalist and lock round) or "
                        "quick (a quarter of the budget, at most 20 evaluations, from other devices' winners; half "
                        "the rounds; the entry says quick and a full tuning replaces it)", DEFAULTS.EFFORT),
    "autotune_output_cap": ("what an isolated kernel prints per configuration is kept up to this size (half from "
                            "the start, half from the end; the rest is counted), e.g. 16KiB", "16KiB"),
    "autotune_worker_memory": ("memory an isolated kernel's worker process may hold before its configuration fails "
                               "as resources: a size (4GiB), a share of the machine (25%), auto (half the "
                               "machine's memory, shared among pytest-xdist workers) or none", "auto"),
}
TRUE_WORDS, FALSE_WORDS = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspec)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """Triton kernels run in Triton's interpreter on a machine without a GPU: set before conftests import triton."""
    from ..lifecycle import use_interpreter_without_gpu

    use_interpreter_without_gpu()


TUNE_ONLY = ("all", "missing")


class _OldAutotuneValue(argparse.Action):
    """``--autotune=all`` / ``--autotune=missing`` (the flag used to take a value): a usage error naming the new form."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        value = str(option_string).partition("=")[2]
        raise argparse.ArgumentError(self, f"--autotune takes no value any more; write --autotune "
                                           f"--autotune-only={value}")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("autotune", "auto-tuning of GPU kernels (pytest-autotune)")
    group.addoption("--autotune", action="store_true", default=False,
                    help="tune marked tests and write the lockfile (pytest --autotune tests/test_x.py tunes one "
                         "file); see --autotune-only")
    group.addoption("--autotune-only", choices=TUNE_ONLY, default="all",
                    help="with --autotune: tune all selected tests (default), or only the missing ones (no valid "
                         "lock entry for this device)")
    for old in TUNE_ONLY:  # argparse matches a whole "--autotune=missing" before splitting at "="
        group.addoption(f"--autotune={old}", action=_OldAutotuneValue, nargs=0, dest=f"autotune_old_{old}",
                        help=argparse.SUPPRESS)
    group.addoption("--autotune-missing", choices=MISSING_POLICIES, default=None,
                    help="gate without a valid lock entry: skip (default), fail, or tune")
    group.addoption("--autotune-incomparable", choices=INCOMPARABLE_POLICIES, default=None,
                    help="gate on a machine whose probes (memory bandwidth, compute) differ from the lock's beyond "
                         "the tolerance: warn (pass, and say so; default), skip, or fail")
    group.addoption("--autotune-fresh", action="store_true", default=False,
                    help="ignore the scratch cache of an interrupted tuning run")
    group.addoption("--autotune-lockdir", default=None, help="directory of the lockfiles (ini: autotune_lockdir)")
    group.addoption("--autotune-strategy", default=None, help="default strategy (ini: autotune_strategy)")
    group.addoption("--autotune-budget", default=None, help="default budget (ini: autotune_budget)")
    group.addoption("--autotune-tolerance", type=float, default=None,
                    help="default gate tolerance as a fraction (ini: autotune_tolerance)")
    group.addoption("--autotune-alpha", type=float, default=None, help="gate significance (ini: autotune_alpha)")
    group.addoption("--autotune-seed", type=int, default=None, help="default strategy seed")
    group.addoption("--autotune-kernel-gate-budget", default=None, metavar="DURATION",
                    help=f"wall time one kernel's gate may take, e.g. 30s or none (default "
                         f"{DEFAULTS.KERNEL_GATE_BUDGET}; the marker's gate_budget= overrides it; ini: "
                         "autotune_kernel_gate_budget)")
    group.addoption("--autotune-gate-budget", default=None, metavar="DURATION",
                    help="wall time all gates of the session may take together, e.g. 5m (default none), shared "
                         "out fairly; under pytest-xdist each worker has its share (ini: autotune_gate_budget)")
    group.addoption("--autotune-no-early-stop", action="store_true", default=False,
                    help="time every configuration in full (ini: autotune_early_stop = false)")
    group.addoption("--autotune-ranking", action="store_true", default=False,
                    help="gate: also re-time the locked runners-up and report a stale lock when one now wins")
    group.addoption("--autotune-report", default=None, metavar="PATH", help="write a JSON report of the run")
    group.addoption("--autotune-report-md", default=None, metavar="PATH",
                    help="append a Markdown summary of the run to PATH (default: $GITHUB_STEP_SUMMARY when set)")
    group.addoption("--autotune-plots", default=None, metavar="DIR",
                    help="write a convergence plot per tuned kernel (needs matplotlib)")
    group.addoption("--autotune-devices", default=None, metavar="IDS",
                    help="comma-separated GPU ids (OpenCL: P:D or D); pytest-xdist worker N uses id N modulo their count")
    group.addoption("--autotune-compile", type=parse_arch_list, default=None, metavar="ARCHS",
                    help="no GPU needed: compile each CUDA kernel's locked winners and valid configurations with "
                         "NVRTC for these architectures (e.g. sm_80,sm_90) and fail on one that cannot work")
    group.addoption("--autotune-compile-sample", type=positive_sample, default=DEFAULT_SAMPLE, metavar="N",
                    help=f"--autotune-compile: configurations per space and architecture, all when there are at "
                         f"most N, else a seeded sample of N (default {DEFAULT_SAMPLE})")
    group.addoption("--autotune-compile-workers", default=None, metavar="N|auto",
                    help="compile the next candidates on N workers while the device times the current one (source "
                         "runners; 1 = compile inline; default auto = CPU cores minus one; ini: "
                         "autotune_compile_workers)")
    group.addoption("--autotune-require-device", action="store_true", default=None,
                    help="a GPU job: a kernel with no usable device (no CuPy, broken driver) fails its test instead "
                         "of skipping it, when tuning and gating (ini: autotune_require_device)")
    group.addoption("--autotune-ray", nargs="?", const="ray", default=None, metavar="ADDRESS",
                    help="tune each kernel on every device of a Ray cluster at once (the one RAY_ADDRESS names or "
                         "ADDRESS; pip install 'pytest-autotune[ray]'; ini: autotune_ray)")
    group.addoption("--autotune-static", choices=DEFAULTS.STATIC_POLICIES, default=None,
                    help="without a kernel's GPU, rebuild its locked winner for each locked architecture and "
                         "compare the binary with the lock's: fail-on-worse (default), fail-on-change, warn, off "
                         "(ini: autotune_static)")
    group.addoption("--autotune-accept-static", action="store_true", default=False,
                    help="record today's binary profile in lock entries whose binary changed (a reviewed change), "
                         "keeping their timing, so the static gate stops reporting it until the next GPU tune")
    group.addoption("--autotune-record-static", action="store_true", default=False,
                    help="with --autotune-compile: record each kernel's static baseline (the binary profile of the "
                         "configuration it ships with) per architecture in <lockdir>/static/")
    group.addoption("--autotune-interpreter-timing", choices=DEFAULTS.INTERPRETER_TIMING_POLICIES, default=None,
                    help="Triton's interpreter: info (default: its timing is reported, never a failure) or gate "
                         "(ini: autotune_interpreter_timing)")
    group.addoption("--autotune-effort", default=None, metavar="|".join(DEFAULTS.EFFORTS),
                    help="with --autotune: full (default) or quick, a good configuration in a minute that a later "
                         "full tuning replaces (ini: autotune_effort)")
    for name, (help_text, default) in INI_OPTIONS.items():
        parser.addini(name, help_text, default=default)


def _budget_default(text: str) -> Any:
    return int(text) if text.strip().isdigit() else text.strip()


def _validated_defaults(config: pytest.Config) -> dict[str, Any]:
    """Marker defaults from flags and ini options, checked once at start-up: a bad value is a usage
    error naming the flag (or ini option), not a marker error repeated for every test."""
    opt, ini = config.getoption, config.getini

    def source(flag: str, ini_name: str) -> tuple[Any, str]:
        value = opt(flag.lstrip("-").replace("-", "_"))
        return (value, flag) if value is not None else (ini(ini_name), f"ini option {ini_name}")

    strategy, where = source("--autotune-strategy", "autotune_strategy")
    try:
        validate_strategy_spec(strategy)
    except StrategyError as exc:
        raise pytest.UsageError(f"{where}={strategy}: {exc}") from None
    raw_budget, where = source("--autotune-budget", "autotune_budget")
    budget = _budget_default(str(raw_budget))
    try:
        Budget.parse(budget)
    except ValueError as exc:
        raise pytest.UsageError(f"{where}={raw_budget}: {exc}") from None
    values: dict[str, Any] = {"strategy": strategy, "budget": budget, "seed": opt("autotune_seed"),
                              "early_stop": _early_stop_default(config)}
    for name, valid, (low, high), example in (("tolerance", DEFAULTS.is_tolerance, DEFAULTS.TOLERANCE_RANGE,
                                                "0.10 for 10%"),
                                               ("alpha", DEFAULTS.is_alpha, DEFAULTS.ALPHA_RANGE, "0.01")):
        raw, where = source(f"--autotune-{name}", f"autotune_{name}")
        try:
            value = float(raw)
        except (TypeError, ValueError):
            value = float("nan")
        if not valid(value):
            raise pytest.UsageError(f"{where}={raw}: expected a number in [{low:g}, {high:g}), e.g. {example}")
        values[name] = value
    raw, where = source("--autotune-kernel-gate-budget", "autotune_kernel_gate_budget")
    try:
        values["gate_budget"] = parse_gate_budget(str(raw).strip())
    except ValueError as exc:
        raise pytest.UsageError(f"{where}={raw}: {exc}") from None
    given = opt("autotune_kernel_gate_budget") is not None or str(raw).strip() != DEFAULTS.KERNEL_GATE_BUDGET
    values["gate_budget_source"] = (f"{where}={raw}" if given else f"the default autotune_kernel_gate_budget={raw}")
    values["max_configurations"] = _max_configurations(ini("autotune_max_configurations"))
    raw = config.getini("autotune_output_cap")
    try:
        values["output_cap"] = parse_size(str(raw).strip())
    except ValueError as exc:
        raise pytest.UsageError(f"ini option autotune_output_cap={raw}: {exc}") from None
    raw = str(config.getini("autotune_worker_memory")).strip()
    try:
        check_memory_limit(raw)
    except ValueError as exc:
        raise pytest.UsageError(f"ini option autotune_worker_memory={raw}: {exc}") from None
    values["worker_memory"] = raw
    return values


def _max_configurations(raw: Any) -> int:
    """The ini option as a positive integer; ``50_000_000`` and ``5e7`` read as written."""
    text = str(raw).strip().replace("_", "")
    try:
        value = float(text) if any(c in text for c in ".eE") else int(text)
    except ValueError:
        value = 0
    if not (isinstance(value, int) or value.is_integer()) or value < 1:
        raise pytest.UsageError(f"ini option autotune_max_configurations={raw}: expected a positive whole number "
                                f"of configurations, e.g. {DEFAULT_MAX_CONFIGURATIONS:_}")
    return int(value)


def _compile_workers(config: pytest.Config) -> int:
    """``--autotune-compile-workers`` (else the ini option), checked at start-up; a usage error names the source."""
    raw, where = config.getoption("autotune_compile_workers"), "--autotune-compile-workers"
    if raw is None:
        raw, where = config.getini("autotune_compile_workers"), "ini option autotune_compile_workers"
    sharing = int(getattr(config, "workerinput", {}).get("workercount", 1))  # pytest-xdist: cores are shared
    try:
        return parse_compile_workers(raw, sharing)
    except ValueError as exc:
        raise pytest.UsageError(f"{where}={raw}: {exc}") from None


def _require_device(config: pytest.Config) -> bool:
    if config.getoption("autotune_require_device"):
        return True
    raw = str(config.getini("autotune_require_device")).strip().lower()
    if raw not in TRUE_WORDS + FALSE_WORDS:
        raise pytest.UsageError(f"ini option autotune_require_device={raw}: expected true or false")
    return raw in TRUE_WORDS


def _cluster(config: pytest.Config) -> str | None:
    """``--autotune-ray[=ADDRESS]`` (else the ini option): where to tune; None = here. One driver per cluster:
    pytest-xdist workers would each claim every device."""
    raw, where = config.getoption("autotune_ray"), "--autotune-ray"
    if raw is None:
        ini = str(config.getini("autotune_ray")).strip()
        raw, where = (None if ini.lower() in ("", "off") else ini), "ini option autotune_ray"
    if raw is not None and hasattr(config, "workerinput"):
        raise pytest.UsageError(f"{where}: a cluster tuning drives every device of the cluster from one process; "
                                "run it without pytest-xdist (-n)")
    return raw


def _session_gate_budget(config: pytest.Config) -> SessionGateBudget | None:
    """``--autotune-gate-budget`` (else the ini option): this process's part of it. Under pytest-xdist each
    worker gates its own kernels beside the others, so each gets the session budget over the workers."""
    raw, where = config.getoption("autotune_gate_budget"), "--autotune-gate-budget"
    if raw is None:
        raw, where = config.getini("autotune_gate_budget"), "ini option autotune_gate_budget"
    try:
        seconds = parse_gate_budget(str(raw).strip())
    except ValueError as exc:
        raise pytest.UsageError(f"{where}={raw}: {exc}") from None
    if seconds is None:
        return None
    workers = max(1, int(getattr(config, "workerinput", {}).get("workercount", 1)))
    return SessionGateBudget(seconds / workers, flag=f"{where}={raw}" + (f" (over {workers} workers)"
                                                                          if workers > 1 else ""))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The kernels the session budget is shared among: the marked tests selected, this worker's part of them."""
    budget = config.stash[STATE_KEY].options.session_gate_budget
    if budget is not None:
        workers = max(1, int(getattr(config, "workerinput", {}).get("workercount", 1)))
        marked = sum(1 for item in items if item.get_closest_marker("tune") is not None)
        budget.expected = max(1, -(-marked // workers))


def _early_stop_default(config: pytest.Config) -> bool:
    if config.getoption("autotune_no_early_stop"):
        return False
    raw = str(config.getini("autotune_early_stop")).strip().lower()
    if raw not in ("true", "false", "1", "0", "yes", "no", "on", "off"):
        raise pytest.UsageError(f"ini option autotune_early_stop={raw}: expected true or false")
    return raw in ("true", "1", "yes", "on")


def _scratch_dir(config: pytest.Config, rootdir: Path) -> Path:
    """pytest's cache directory; with ``-p no:cacheprovider`` a per-project folder in the user's cache,
    so the repository never gets an untracked directory."""
    if getattr(config, "cache", None) is not None:
        return Path(str(config.cache.mkdir("autotune")))
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "pytest-autotune" / hashlib.sha256(str(rootdir.resolve()).encode()).hexdigest()[:16]


def _resolve_options(config: pytest.Config) -> Options:
    opt, ini = config.getoption, config.getini
    try:
        pause_scale()  # the environment is input: a bad value stops the session before any kernel runs
    except ValueError as exc:  # SpecError
        raise pytest.UsageError(str(exc)) from None
    rootdir = Path(str(config.rootpath))
    lockdir = Path(opt("autotune_lockdir") or ini("autotune_lockdir"))
    missing = opt("autotune_missing") or ini("autotune_missing")
    if missing not in MISSING_POLICIES:
        raise pytest.UsageError(f"autotune_missing = {missing!r}: choose from {', '.join(MISSING_POLICIES)}")
    incomparable = opt("autotune_incomparable") or ini("autotune_incomparable")
    if incomparable not in INCOMPARABLE_POLICIES:
        raise pytest.UsageError(f"autotune_incomparable = {incomparable!r}: choose from "
                                f"{', '.join(INCOMPARABLE_POLICIES)}")
    defaults = _validated_defaults(config)
    devices = [d.strip() for d in (opt("autotune_devices") or "").split(",") if d.strip()]
    cache_dir = _scratch_dir(config, rootdir)
    return Options(mode=opt("autotune_only") if opt("autotune") else None, missing=missing, fresh=opt("autotune_fresh"),
                   lockdir=lockdir if lockdir.is_absolute() else rootdir / lockdir, scratch_dir=cache_dir,
                   ranking=opt("autotune_ranking"), report=Path(opt("autotune_report")) if opt("autotune_report") else None,
                   plots=Path(opt("autotune_plots")) if opt("autotune_plots") else None, devices=devices,
                   defaults=defaults, verbosity=config.get_verbosity(),
                   is_worker=hasattr(config, "workerinput"), incomparable=incomparable,
                   compile_workers=_compile_workers(config), require_device=_require_device(config),
                   cluster=_cluster(config), compile_archs=list(opt("autotune_compile") or []),
                   compile_sample=opt("autotune_compile_sample"), effort=_effort(config),
                   session_gate_budget=_session_gate_budget(config),
                   **_static_options(config))


def _static_options(config: pytest.Config) -> dict[str, Any]:
    """The static gate's flags and ini options, checked at start-up (a bad ini value names the option)."""
    opt, ini = config.getoption, config.getini
    static = opt("autotune_static") or str(ini("autotune_static")).strip()
    if static not in DEFAULTS.STATIC_POLICIES:
        raise pytest.UsageError(f"ini option autotune_static={static}: choose from "
                                f"{', '.join(DEFAULTS.STATIC_POLICIES)}")
    timing = opt("autotune_interpreter_timing") or str(ini("autotune_interpreter_timing")).strip()
    if timing not in DEFAULTS.INTERPRETER_TIMING_POLICIES:
        raise pytest.UsageError(f"ini option autotune_interpreter_timing={timing}: choose from "
                                f"{', '.join(DEFAULTS.INTERPRETER_TIMING_POLICIES)}")
    raw = ini("autotune_static_tolerance")
    try:
        tolerance = float(raw)
    except (TypeError, ValueError):
        tolerance = float("nan")
    if not DEFAULTS.is_tolerance(tolerance):
        raise pytest.UsageError(f"ini option autotune_static_tolerance={raw}: expected a fraction in [0, 10), "
                                "e.g. 0.10 for 10%")
    record = bool(opt("autotune_record_static"))
    if record and not opt("autotune_compile"):
        raise pytest.UsageError("--autotune-record-static records what --autotune-compile builds: add "
                                "--autotune-compile=sm_90 (the architectures to record)")
    if opt("autotune_accept_static") and opt("autotune"):
        raise pytest.UsageError("--autotune-accept-static accepts a changed binary without a GPU run; --autotune "
                                "tunes (and records a fresh profile): use one of them")
    return {"static": static, "static_tolerance": tolerance, "accept_static": bool(opt("autotune_accept_static")),
            "record_static": record, "interpreter_timing": timing}


def _effort(config: pytest.Config) -> str:
    """``--autotune-effort`` (else the ini option), checked at start-up: a bad value names its source."""
    raw, where = config.getoption("autotune_effort"), "--autotune-effort"
    if raw is None:
        raw, where = str(config.getini("autotune_effort")).strip(), "ini option autotune_effort"
    if raw not in DEFAULTS.EFFORTS:
        raise pytest.UsageError(f"{where}={raw}: choose from {', '.join(DEFAULTS.EFFORTS)}")
    return str(raw)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"tune(params, restrictions=[], strategy={DEFAULTS.STRATEGY!r}, "
                                       f"budget={DEFAULTS.BUDGET}, objective='time', tolerance={DEFAULTS.TOLERANCE:.2f}, "
                                       f"seed=None, constants={{}}, measure={{}}, alpha={DEFAULTS.ALPHA:g}, "
                                       f"gate_budget={DEFAULTS.KERNEL_GATE_BUDGET!r}): "
                                       "auto-tune the kernel(s) this test runs through the autotune fixture")
    config.addinivalue_line("markers", "gpu: needs a CUDA device; skipped cleanly without one")
    options = _resolve_options(config)
    worker = getattr(config, "workerinput", None)
    if worker is not None and options.devices:
        index = int(str(worker.get("workerid", "gw0")).lstrip("gw") or 0)
        chosen = options.devices[index % len(options.devices)]
        os.environ["CUDA_VISIBLE_DEVICES"] = chosen
        os.environ["PYTEST_AUTOTUNE_DEVICE"] = chosen  # read by the opencl runner (runners/opencl_device.py)
    state = SessionState(options)

    def write_line(line: str) -> None:
        # The terminal reporter registers after us, so look it up late; suspend
        # output capture around the write, as pytest's live logging does.
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        capture = config.pluginmanager.get_plugin("capturemanager")
        if reporter is None:
            return
        if capture is not None:
            with capture.global_and_fixture_disabled():
                reporter.write_line(line)
        else:
            reporter.write_line(line)

    state.write_line = write_line
    config.stash[STATE_KEY] = state
    config.pluginmanager.register(_SummaryPlugin(state), "autotune-summary")


@pytest.hookimpl(wrapper=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: Any) -> Generator[None, Any, Any]:
    """Validate tune markers while collecting, so a bad argument is a collection error naming the test."""
    items = yield
    if not items:
        return items
    state = collector.config.stash[STATE_KEY]
    for item in items if isinstance(items, list) else [items]:
        if isinstance(item, pytest.Item):
            state.collected.add(item.nodeid)  # a lock entry of a test not collected may be a renamed test's
        marker = item.get_closest_marker("tune") if isinstance(item, pytest.Item) else None
        if marker is None:
            continue
        try:
            item.stash[SETTINGS_KEY] = parse_marker(marker.args, marker.kwargs, state.options.defaults)
        except MarkerError as exc:
            raise collector.CollectError(f"{item.nodeid}: {exc}") from None
    return items


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """Warn about a marked test that passed under --autotune without running any kernel through the fixture:
    nothing was tuned, and nothing would say so."""
    result = yield
    state = item.config.stash[STATE_KEY]
    if state.options.mode is not None and item.get_closest_marker("tune") is not None \
            and item.stash.get(CALLS_KEY, 0) == 0:
        uses = "autotune" in getattr(item, "fixturenames", ())
        warnings.warn(AutotuneWarning(
            f"{item.nodeid} is marked with @pytest.mark.tune but tuned nothing: it "
            + ("never called autotune.kernel(), autotune.function() or autotune.replay()" if uses
               else "does not use the autotune fixture")))
    return result


@pytest.fixture
def autotune(request: pytest.FixtureRequest) -> Autotune:
    """Tune (``pytest --autotune``) or gate (plain ``pytest``) the kernels this test runs."""
    item = request.node
    settings = item.stash.get(SETTINGS_KEY, None)
    if settings is None:
        # the test's own mistake: its error, without a traceback into the plugin
        pytest.fail(f"{item.nodeid} uses the autotune fixture without @pytest.mark.tune(params=...)", pytrace=False)
    return Autotune(item, settings, request.config.stash[STATE_KEY])


class _SummaryPlugin:
    """Collects summary rows from test reports (from xdist workers too) and prints the table."""

    def __init__(self, state: SessionState):
        self.state = state
        self.seen: set[tuple[str, str, str, str]] = set()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # each phase's report carries the test's rows: one row per kernel, mode and architecture (static rows)
        for name, row in getattr(report, "user_properties", []):
            key = (row["test"], row["kernel"], row["mode"], row.get("arch") or "") if name == "autotune" else None
            if key is not None and key not in self.seen:
                self.state.rows.append(row)
                self.seen.add(key)

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        # A requested report is written even when no kernel ran (CI steps expect the file).
        wanted = self.state.options.report is not None or job_summary.target(config.getoption("autotune_report_md"))
        if (self.state.rows or wanted) and not hasattr(config, "workerinput"):
            _summary(terminalreporter, self.state)


def _summary(terminalreporter: Any, state: SessionState) -> None:
    rows = sorted(state.rows, key=lambda r: (r["test"], r["kernel"], r["mode"] == "static", r.get("arch") or ""))
    width = terminalreporter.config.get_terminal_writer().fullwidth

    def write(line: str, **markup: bool) -> None:
        # every line of the summary fits the terminal: a long one (an A/B note, a path) wraps, indented
        for part in wrap(line, width):
            terminalreporter.write_line(part, **markup)

    show = bool(rows) and state.options.verbosity >= -1
    if show:
        terminalreporter.write_sep("=", "autotune summary")
        for line in format_table(rows, width=width):
            terminalreporter.write_line(line)
        for r in rows:
            name = f"{r['test']}::{r['kernel']}"
            if r.get("status") == "faster":
                write(f"note: {r['message']}")
            for rival in r.get("stale_ranking") or []:
                write(f"stale lock: {name} runner-up {rival['params']} "
                      f"is now {-rival['change_pct']:.1f}% faster than the locked winner")
            for line in failure_lines(r):
                write(line)
            if ray_line(r):
                write(ray_line(r))
            if fallback_line(r):
                write(fallback_line(r), red=True, bold=True)
        for line in lockfile_lines(rows):
            write(line)
        for line in new_lockfile_lines(rows):
            write(line, yellow=True)
        if (scale := pause_scale()) != 1.0:
            write(f"note: {PAUSE_SCALE_ENV}={scale:g}: the pauses between the lock's and the gate's rounds "
                  "were scaled by it (for a suite that checks its wiring; a CI gate keeps them)", yellow=True)
    if state.options.report is not None:
        path = write_json_report(state.options.report, rows, {"mode": state.options.run_mode,
                                                              "lockdir": str(state.options.lockdir),
                                                              "pause_scale": pause_scale()})
        write(f"autotune report written to {path}")
    plots: list[Path] = []
    if state.options.plots is not None:
        try:
            plots = write_plots(state.options.plots, rows)
            write(f"autotune: {len(plots)} convergence plot(s) written to {state.options.plots}")
            plots += job_summary.write_distribution_plots(state.options.plots, rows)
        except ImportError:
            write("autotune: --autotune-plots needs matplotlib (pip install matplotlib)")
    option = terminalreporter.config.getoption("autotune_report_md")
    md = job_summary.target(option)
    if md is not None:
        markdown = job_summary.render(rows, {"mode": state.options.run_mode}, plots,
                                      relative_to=md.parent if option else None)
        write(f"autotune: Markdown summary appended to {job_summary.append(md, markdown)}")
    if show:
        left_alone = [f"{r['test']}::{r['kernel']}" for r in rows if r.get("mode") == "locked"]
        if left_alone:
            write("autotune: left alone by --autotune-only=missing (valid lock entry: neither re-tuned nor gated): "
                  + ", ".join(left_alone))
        for r in rows:
            if r.get("status") == "incomparable":
                action = {"warn": "passed", "skip": "skipped", "fail": "failed"}[r.get("incomparable_policy") or "warn"]
                write(f"autotune: NOT COMPARABLE ({action}, --autotune-incomparable={r.get('incomparable_policy')}): "
                      f"{r['message']}", yellow=True, bold=True)
        for line in (not_gated_line(rows), not_tuned_line(rows)):
            if line:
                write(line, yellow=True, bold=True)
