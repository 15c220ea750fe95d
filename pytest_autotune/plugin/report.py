"""Summary rows of a run: the lines below the terminal table (:mod:`.table`), the JSON report and convergence
plots.

A row is a plain JSON-able dict so it can travel from pytest-xdist workers to
the controller inside a test report's ``user_properties``.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

ELLIPSIS = "…"


def _fmt_ms(value: Any) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:.4g} ms"


def _fmt_params(params: Mapping[str, Any] | None) -> str:
    if not params:
        return "-"
    return ", ".join(f"{k}={v}" for k, v in params.items())


def _shorten(text: str, width: int, keep_end: bool = False) -> str:
    if len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    return ELLIPSIS + text[-(width - 1):] if keep_end else text[: width - 1] + ELLIPSIS


def failure_lines(row: Mapping[str, Any], width: int = 160) -> list[str]:
    """One short line per failure kind: how many, the first configuration and the first line of its error."""
    out = []
    for kind, example in sorted((row.get("failure_examples") or {}).items()):
        lines = [line.strip() for line in str(example.get("detail", "")).splitlines() if line.strip()]
        # the compiler's first error, not the command line it echoes first
        detail = next((line for line in lines if re.search(r"\berror\b", line, re.I)), lines[0] if lines else "")
        text = (f"  {row.get('test')}::{row.get('kernel')} {kind} x{example.get('count', '?')}, "
                f"first at {_fmt_params(example.get('params'))}: {detail}")
        out.append(_shorten(text, width))
    return out


def ray_line(row: Mapping[str, Any]) -> str:
    """``ray: t.py::t::k: 2 devices on 1 node (host-a), 1 lost (...)``: what a tuning on Ray ran on (the JSON
    report has the same in its ``ray_*`` fields); empty for a local tuning."""
    if row.get("ray_devices") is None:
        return ""
    nodes = list(row.get("ray_nodes") or [])
    lost = list(row.get("ray_lost") or [])
    parts = [f"{row['ray_devices']} device(s) on {len(nodes)} node(s) ({', '.join(nodes) or '-'})",
             f"{len(lost)} lost" + (f" ({'; '.join(lost)})" if lost else "")]
    if row.get("ray_joined"):
        parts.append(f"{row['ray_joined']} joined")
    if row.get("ray_retried"):
        parts.append(f"{row['ray_retried']} evaluation(s) retried on another device")
    if row.get("ray_refused"):
        parts.append(f"refused (another model): {', '.join(row['ray_refused'])}")
    return f"ray: {row.get('test')}::{row.get('kernel')}: " + ", ".join(parts)


def fallback_line(row: Mapping[str, Any], width: int = 600) -> str:
    """``FALLBACK ...`` when compiled-ahead artefacts of ``row`` did not load on the device (compiled inline instead:
    the compile-ahead pipeline was not in use for them); empty otherwise."""
    ahead = row.get("compile_ahead") or {}
    if not ahead.get("fallbacks"):
        return ""
    first = ahead.get("first_fallback") or {}
    error = next((line.strip() for line in str(first.get("error", "")).splitlines() if line.strip()), "")
    text = (f"FALLBACK {row.get('test')}::{row.get('kernel')}: {ahead['fallbacks']} compiled-ahead artefact(s) did not "
            f"load ({ahead.get('loaded', 0)} did) and were compiled inline; first at "
            f"{_fmt_params(first.get('params'))}: {error}")
    return _shorten(text, width)


def lockfile_lines(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """Which lockfiles the run read and which it wrote; one that does not exist says so (a lock directory
    resolved somewhere unexpected shows at once)."""
    used: dict[str, bool] = {}
    for r in rows:
        if r.get("lockfile"):
            used[r["lockfile"]] = used.get(r["lockfile"], False) or bool(r.get("lock_written"))
    return [f"autotune lockfile: {path} "
            f"({'written' if written else 'read' if Path(path).exists() else 'not found'})"
            for path, written in sorted(used.items())]


def new_lockfile_lines(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """A lockfile this run started while lockfiles of the same kind exist: say so and name them (another
    device, or the same one under another name: a different driver should not start a new lock unnoticed)."""
    seen: dict[str, str] = {}
    for r in rows:
        if r.get("new_lockfile_beside") and r.get("lockfile") not in seen:
            seen[r["lockfile"]] = (f"autotune: started a new lockfile {Path(r['lockfile']).name} for "
                                   f"{r.get('device', 'this device')}; lockfiles of the same kind exist: "
                                   + ", ".join(r["new_lockfile_beside"]))
    return [seen[path] for path in sorted(seen)]


def not_gated_line(rows: Iterable[Mapping[str, Any]]) -> str:
    """The closing line naming every kernel the gate could not check, and why (visible without -rs)."""
    return _unchecked_line(rows, ("gate", "static"), ("missing", "stale", "no device", "session budget"), "NOT GATED")


def not_tuned_line(rows: Iterable[Mapping[str, Any]]) -> str:
    """The closing line naming every kernel ``--autotune`` could not tune for want of a device (no CuPy here)."""
    return _unchecked_line(rows, ("tune",), ("no device",), "NOT TUNED")


def _unchecked_line(rows: Iterable[Mapping[str, Any]], modes: tuple[str, ...], statuses: tuple[str, ...],
                    what: str) -> str:
    missed = [r for r in rows if r.get("mode") in modes and r.get("status") in statuses]
    if not missed:
        return ""
    by_reason: dict[str, list[str]] = {}  # kernels sharing a reason (no CuPy: every CUDA kernel) named once
    for r in missed:
        reason = "no lock entry for this device" if r["status"] == "missing" else str(r.get("message", "stale"))
        by_reason.setdefault(reason, []).append(f"{r['test']}::{r['kernel']}" + (f"@{r['arch']}" if r.get("arch")
                                                                                 else ""))
    parts = [f"{', '.join(kernels)} ({reason})" for reason, kernels in by_reason.items()]
    return f"autotune: {len(missed)} kernel(s) {what}: " + "; ".join(parts)


def write_json_report(path: str | Path, rows: Sequence[Mapping[str, Any]], meta: Mapping[str, Any]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"meta": dict(meta), "kernels": list(rows)}
    path.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
    return path


def write_plots(directory: str | Path, rows: Sequence[Mapping[str, Any]]) -> list[Path]:
    """One convergence plot (best so far vs evaluations) per tuned kernel; needs matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for r in rows:
        curve = r.get("best_so_far")
        if not curve:
            continue
        fig, ax = plt.subplots(figsize=(6, 3.5))
        xs = list(range(1, len(curve) + 1))
        ax.step(xs, [c if c is not None else float("nan") for c in curve], where="post")
        ax.set_xlabel("evaluations")
        ax.set_ylabel("best time so far (ms)")
        ax.set_title(f"{r.get('kernel')} ({r.get('strategy')})", fontsize=10)
        ax.grid(alpha=0.3)
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{r.get('test', '')}__{r.get('kernel', '')}").strip("_")
        out = directory / f"{name}.png"
        fig.tight_layout()
        fig.savefig(out, dpi=100)
        plt.close(fig)
        written.append(out)
    return written
