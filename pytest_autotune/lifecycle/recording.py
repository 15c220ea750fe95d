"""The lock entry a tuning writes: the winner's samples beside the machine's probes, its runners-up, the
source it was tuned with, and what it depends on; and why an entry kept must be written again."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from .. import defaults as DEFAULTS
from .._version import __version__
from ..engine.evaluator import EvaluationRecord
from ..engine.tuner import TuneResult, params_key
from ..gate.probes import GPU_PROBE_VERSION, PROBE_VERSION, cpu_kinds, fma_ns_per_iteration, probe_sizes, probes_for
from ..gate.retune import RetuneDecision
from ..gate.rounds import (LOCK_ROUNDS, best_state_rounds, lock_pauses, lock_runners_up, reference_runs,
                           rotating_pin)
from ..lock.devices import cpu_record
from ..lock.entry import LockEntry
from ..lock.lockfile import utc_timestamp
from ..lock.sources import store_source
from ..measure.timing import TimingStats
from .calls import KernelCall
from .settings import TuneSettings

__all__ = ["build_entry", "rewrite_reasons", "source_fields"]


def rewrite_reasons(k: KernelCall, old: LockEntry | None, device: Any, effort: str = DEFAULTS.EFFORT) -> list[str]:
    """Why a kept winner's entry must be rewritten all the same: what it depends on changed, it lacks
    what the gate now uses (an entry written by an older version), or a quick tuning's entry meets a full one."""
    if old is None:
        return []
    recorded = old.hashes
    reasons = [f"{name} changed" for name in k.hashes if recorded.get(name) != k.hashes[name]]
    if old.effort != DEFAULTS.EFFORT and effort == DEFAULTS.EFFORT:
        reasons.append(f"{old.effort} tuning replaced by a full one")
    if old.machine.get("probe") not in (PROBE_VERSION, GPU_PROBE_VERSION) and \
            probes_for(device.kind, make=k.probe_make) is not None:
        reasons.append("machine probes recorded")
    if "source_file" not in old and k.source is not None:
        reasons.append("kernel source stored")
    if "problem" not in old:  # a schema-1 entry: the lookup and the export need its readable problem
        reasons.append("readable problem recorded")
    return reasons


def source_fields(k: KernelCall, lockdir: Path) -> dict[str, Any]:
    """The exact source, stored beside the lock, so an edit can later be timed against it."""
    if k.source is None:
        return {}
    name = store_source(lockdir, k.source["code"], k.source["suffix"])
    headers = {header: store_source(lockdir, text, Path(header).suffix or ".h")
               for header, text in (k.source.get("headers") or {}).items()}
    return {"source_file": name, "kernel_name": k.source["kernel_name"],
            "compiler_options": k.source["compiler_options"], **({"headers": headers} if headers else {})}


def build_entry(k: KernelCall, test: str, settings: TuneSettings, result: TuneResult, runner: Any,
                decision: RetuneDecision, path: Path, tuning_s: float, *, effort: str = DEFAULTS.EFFORT,
                on_round: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """The entry of ``decision``'s winner, with its runners-up, re-timed in rounds beside the probes on a CPU
    (as many as ``effort`` spends; ``on_round(done, total)`` after each, for a progress line)."""
    s, tier = settings, DEFAULTS.effort(effort)
    device = result.device
    ups = [r for r in [*([] if decision.params == result.params else [_winner_record(result)]),
                       *result.runners_up] if dict(r.params) != decision.params][:len(result.runners_up)]
    samples = list(decision.samples)
    up_samples = [list(result.confirmed_samples(r.params) or r.measurement.samples) for r in ups]
    # the CPU chain sized with this machine's time per iteration; a GPU's keeps the nominal one
    sizes = probe_sizes(k.footprint, TimingStats.from_samples(samples).median,
                        **({"ns_per_iteration": fma_ns_per_iteration()} if device.kind in cpu_kinds() else {}))
    retimed = {params_key(r.params) for r in ups if result.confirmed_samples(r.params)}
    rounds = None
    if device.kind in cpu_kinds():
        # the winner again, in rounds beside the probes on each CPU in turn; the rounds where the machine was
        # at its best are kept, so samples and probes describe one state. Beside it, the runners-up not
        # re-timed among the finalists, as many as the tuning's time affords (LOCK_RUNNERS_UP_SHARE)
        pauses = lock_pauses(tuning_s) if tier.lock_pauses else ()
        n_rounds = tier.scaled(LOCK_ROUNDS, least=2)
        unconfirmed = [i for i, r in enumerate(ups) if not result.confirmed_samples(r.params)]
        with_winner = unconfirmed[:lock_runners_up([_evaluation_s(ups[i]) for i in unconfirmed],
                                                   n_rounds + len(pauses), tuning_s)]
        with reference_runs(runner, sizes["triad_n"]):  # each run's machine state (measure/reference.py)
            rounds = best_state_rounds(
                [lambda p=dict(p): runner.evaluate(p) for p in [decision.params, *(ups[i].params for i in with_winner)]],
                lambda: probes_for(device.kind, sizes, fresh=True, make=k.probe_make), rotating_pin(runner),
                s.tolerance, rounds=n_rounds, more_pauses_s=pauses, on_round=on_round)
        if rounds is not None and rounds[1] and "reference_ms" in rounds[1]:
            rounds[1]["reference_n"] = sizes["triad_n"]
    if rounds is not None:
        (samples, *retimed_samples), machine, _kept = rounds
        for i, xs in zip(with_winner, retimed_samples):
            up_samples[i] = xs
            retimed.add(params_key(ups[i].params))
    else:
        machine = probes_for(device.kind, sizes, make=k.probe_make)
    stats = TimingStats.from_samples(samples)
    return {
        "kernel": k.label,
        "test": test,
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
        **source_fields(k, path.parent),
        # probes sized to this kernel: its footprint, and about its duration
        **({"machine": machine} if machine else {}),
        **({"cpu": cpu} if (cpu := cpu_record(device)) else {}),
        "versions": {**device.versions, **k.toolchain, "pytest_autotune": __version__},
        "timestamp": utc_timestamp(),
        **({"effort": tier.name} if tier.recorded else {}),  # a quick tuning says so; a full one replaces it
    }


def _evaluation_s(record: EvaluationRecord) -> float:
    """What one more evaluation of a runner-up costs (s): its search measurement's verification and runs
    (its compile is cached by then); its runs' total where the runner reports no timings."""
    timings = record.measurement.timings or {}
    if "bench_s" in timings:
        return float(timings.get("bench_s", 0.0)) + float(timings.get("verify_s", 0.0))
    samples = record.measurement.samples or ()
    return float(sum(samples)) * 1e-3 if samples else float("inf")


def _winner_record(result: TuneResult) -> EvaluationRecord:
    """The search's winner as a runner-up record (when the locked winner was kept instead)."""
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
