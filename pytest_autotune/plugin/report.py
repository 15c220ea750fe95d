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

# "vs lock": against the lock's median, or "+4.9% A/B" where the gate timed the locked source beside the edit
COLUMNS = ("kernel", "mode", "status", "winner", "time", "vs lock", "evals", "strategy", "failures", "note")
# Columns that give way, in this order, when the table is wider than the terminal, down to these widths.
SHRINK_STEPS = (("winner", 16), ("note", 10), ("failures", 12), ("kernel", 24), ("winner", 10), ("kernel", 16),
                ("note", 4), ("winner", 4))  # the last two: room for whole test names (the note follows the table)
ALWAYS_SHOWN = ("kernel", "mode", "status")  # other columns are left out when no row has anything in them
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


def shorten_nodeid(text: str, width: int) -> str:
    """``tests/…/test_cpu_kernels.py::test_blocked_matmul::matmul``: a node id cut in its middle (the file's
    path), never in the test name or the kernel; three tests ending in ``_matmul`` stay three names."""
    if len(text) <= width:
        return text
    path, sep, tail = text.partition("::")
    if not sep or len(tail) + 3 > width:  # no room for the test name: the end, as a last resort
        return _shorten(text, width, keep_end=True)
    room = width - len(tail) - 3  # characters of the path kept, around the ellipsis
    head = (room + 1) // 2
    return path[:head] + ELLIPSIS + (path[len(path) - (room - head):] if room - head else "") + "::" + tail


def _test_tail(cell: str) -> int:
    """The narrowest a test::kernel cell may be: its test name and kernel whole, after ``…::``."""
    return len(cell.partition("::")[2]) + 3 if "::" in cell else 0


def table_rows(rows: Iterable[Mapping[str, Any]]) -> list[list[str]]:
    out = []
    for r in rows:
        change = r.get("change_pct")
        failures = r.get("failures") or {}
        out.append([
            f"{r.get('test', '')}::{r.get('kernel', '')}" + (f"@{r['arch']}" if r.get("arch") else ""),
            str(r.get("mode", "")),
            str(r.get("status", "")),
            _fmt_params(r.get("params")),
            _fmt_ms(r.get("time_ms")),
            "-" if change is None else f"{change:+.1f}%" + (" A/B" if r.get("change_kind") == "a/b" else ""),
            "-" if r.get("evaluations") is None else f"{r['evaluations']}/{r.get('budget', '-')}",
            str(r.get("strategy") or "-"),
            ", ".join(f"{k}:{v}" for k, v in sorted(failures.items())) or "-",
            str(r.get("note") or "-"),
        ])
    return out


def _fit(widths: dict[str, int], width: int | None, floors: Mapping[str, int] | None = None) -> dict[str, int]:
    """Narrow the shrinkable columns (winner first) until the table fits ``width`` characters, if it can;
    never below ``floors`` (the kernel column keeps every test name whole)."""
    widths = dict(widths)
    for name, narrowest in SHRINK_STEPS:
        narrowest = max(narrowest, (floors or {}).get(name, 0))
        excess = sum(widths.values()) + 2 * (len(widths) - 1) - (width or 0)
        if not width or excess <= 0:
            break
        if name in widths:
            widths[name] -= min(excess, max(0, widths[name] - narrowest))
    return widths


def _layout(rows: Sequence[Mapping[str, Any]], width: int | None) -> tuple[list[list[str]], list[int], dict[str, int]]:
    """The table's cells, the indices of the columns shown and their fitted widths by name."""
    body = table_rows(rows)
    shown = [i for i, h in enumerate(COLUMNS) if h in ALWAYS_SHOWN or not body or any(b[i] != "-" for b in body)]
    natural = {COLUMNS[i]: max([len(COLUMNS[i]), *(len(b[i]) for b in body)]) for i in shown}
    fitted = _fit(natural, width, {"kernel": max([_test_tail(b[0]) for b in body] or [0])})
    if width and sum(fitted.values()) + 2 * (len(fitted) - 1) > width:
        fitted = _fit(natural, width)  # a test name longer than the room left: cut it after all, at its start
    return body, shown, fitted


def format_table(rows: Sequence[Mapping[str, Any]], width: int | None = None) -> list[str]:
    """Fixed-width table lines, one row per kernel, fitted to ``width`` (the terminal's) when given.

    Columns empty in every row are left out; long winners (then notes, failures and test ids) are
    cut with an ellipsis. The JSON report keeps the full text; :func:`cut_note_lines` the notes cut.
    """
    body, shown, fitted = _layout(rows, width)
    headers = [COLUMNS[i] for i in shown]
    widths = [fitted[h] for h in headers]
    lines = ["  ".join(h[:w].ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for b in body:
        cells = [shorten_nodeid(b[i], w) if COLUMNS[i] == "kernel" else _shorten(b[i], w)
                 for i, w in zip(shown, widths)]
        lines.append("  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip())
    return lines


def cut_note_lines(rows: Sequence[Mapping[str, Any]], width: int | None = None) -> list[str]:
    """The whole note of every row whose note the fitted table cut ("source changed since lock" must
    stay readable next to the verdict on an 80-column CI log), one line each."""
    _, _, fitted = _layout(rows, width)
    room = fitted.get("note", 0)
    return [f"  {r.get('test')}::{r.get('kernel')}{'@' + r['arch'] if r.get('arch') else ''}: {r['note']}"
            for r in rows if r.get("note") and len(str(r["note"])) > room]


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
