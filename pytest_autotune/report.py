"""Summary rows of a run: the terminal table, the JSON report and convergence plots.

A row is a plain JSON-able dict so it can travel from pytest-xdist workers to
the controller inside a test report's ``user_properties``.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

COLUMNS = ("kernel", "mode", "status", "winner", "time", "vs lock", "evals", "strategy", "failures")


def _fmt_ms(value: Any) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:.4g} ms"


def _fmt_params(params: Mapping[str, Any] | None, width: int = 48) -> str:
    if not params:
        return "-"
    text = ", ".join(f"{k}={v}" for k, v in params.items())
    return text if len(text) <= width else text[: width - 3] + "..."


def table_rows(rows: Iterable[Mapping[str, Any]]) -> list[list[str]]:
    out = []
    for r in rows:
        change = r.get("change_pct")
        failures = r.get("failures") or {}
        out.append([
            f"{r.get('test', '')}::{r.get('kernel', '')}",
            str(r.get("mode", "")),
            str(r.get("status", "")),
            _fmt_params(r.get("params")),
            _fmt_ms(r.get("time_ms")),
            "-" if change is None else f"{change:+.1f}%",
            "-" if r.get("evaluations") is None else f"{r['evaluations']}/{r.get('budget', '-')}",
            str(r.get("strategy") or "-"),
            ", ".join(f"{k}:{v}" for k, v in sorted(failures.items())) or "-",
        ])
    return out


def format_table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Fixed-width table lines, one row per kernel."""
    body = table_rows(rows)
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(COLUMNS)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(COLUMNS, widths)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for b in body:
        lines.append("  ".join(c.ljust(w) for c, w in zip(b, widths)).rstrip())
    return lines


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
