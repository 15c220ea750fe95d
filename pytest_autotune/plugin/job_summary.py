"""The run's result as Markdown: a CI job summary (GitHub Actions' ``$GITHUB_STEP_SUMMARY``) or a file.

Rendered from the same rows as the terminal table and the JSON report (``report.py``): one table row
per kernel, regressions (and other failures) first, then what could not be checked, then the rest;
below the table each failure's message in a block, and links to the run's plots when there are any.
The file is appended to, never overwritten: GitHub collects every step's summary in one file.

Cells come from user data (test ids, parameters, messages): ``|`` and newlines are escaped so a
cell stays one cell; messages go in fenced blocks whose fence is longer than any backtick run in them.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from .report import _fmt_ms, _fmt_params

ENV = "GITHUB_STEP_SUMMARY"
FAILED = ("REGRESSION", "BROKEN", "failed", "WORSE", "FAILED", "refused")
UNCHECKED = ("missing", "stale", "no device", "incomparable", "session budget")
ICON = {"REGRESSION": "❌", "BROKEN": "❌", "failed": "❌", "pass": "✅", "faster": "🚀", "stale-ranking": "⚠️",
        "missing": "⚠️", "stale": "⚠️", "no device": "⚠️", "incomparable": "⚠️", "session budget": "⚠️", "first lock": "🔒",
        "new winner": "🔒", "kept lock": "🔒", "left alone": "➖", "WORSE": "❌", "changed": "🔁", "accepted": "🔒",
        "recorded": "🔒", "info": "ℹ️", "compiled": "✅", "FAILED": "❌", "refused": "❌"}


def _rank(row: Mapping[str, Any]) -> int:
    status = str(row.get("status", ""))
    return 0 if status in FAILED else 1 if status in UNCHECKED or status == "stale-ranking" else 2


def ordered(rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Failures first, then what was not checked, then the rest; by test and kernel within each."""
    return sorted(rows, key=lambda r: (_rank(r), str(r.get("test", "")), str(r.get("kernel", ""))))


def cell(value: Any) -> str:
    """One Markdown table cell: ``|`` escaped, newlines as ``<br>``, no leading/trailing space."""
    text = str(value).replace("\\", "\\\\").replace("|", "\\|").replace("\r\n", "\n").replace("\r", "\n")
    return text.strip().replace("\n", "<br>") or "-"


def _code(text: str) -> str:
    """Inline code that survives backticks in ``text`` (a longer fence, padded)."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    return f"{fence} {text} {fence}" if longest else f"`{text}`"


def _fenced(text: str) -> list[str]:
    longest = max((len(m) for m in re.findall(r"`{3,}", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [f"{fence}text", text.rstrip("\n"), fence]


def _static(row: Mapping[str, Any]) -> str:
    """The static verdict, where a row carries one (a string, or a mapping with ``verdict``)."""
    value = row.get("static_verdict", row.get("static"))
    if isinstance(value, Mapping):
        value = value.get("verdict")
    return "" if value in (None, "") else str(value)


def _change(row: Mapping[str, Any]) -> str:
    change = row.get("change_pct")
    if change is None:
        return "-"
    kind = row.get("change_kind")  # "now": a tuning's timing of the winner against the previous entry's median
    return f"now {change:+.1f}%" if kind == "now" else f"{change:+.1f}%" + (" (A/B)" if kind == "a/b" else "")


def plot_name(row: Mapping[str, Any], suffix: str = "") -> str:
    """The file name ``report.write_plots`` gives a row's convergence plot (``suffix`` before ``.png``)."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{row.get('test', '')}__{row.get('kernel', '')}").strip("_")
    return f"{name}{suffix}.png"


def render(rows: Sequence[Mapping[str, Any]], meta: Mapping[str, Any] | None = None,
           plots: Sequence[Path] = (), relative_to: Path | None = None) -> str:
    """The Markdown summary of ``rows`` (``plots``: files to link, relative to ``relative_to`` if given)."""
    meta = dict(meta or {})
    rows = ordered(rows)
    counts: dict[str, int] = {}
    for r in rows:
        counts[str(r.get("status"))] = counts.get(str(r.get("status")), 0) + 1
    failed = [r for r in rows if _rank(r) == 0]
    title = "❌ autotune: " + f"{len(failed)} of {len(rows)} kernel(s) failed" if failed else \
        f"✅ autotune: {len(rows)} kernel(s), none failed" if rows else "autotune: no kernel ran"
    out = [f"## {title}", ""]
    if meta.get("mode"):
        out += [f"Mode: {_code(str(meta['mode']))}" + (f", lock directory {_code(str(meta['lockdir']))}"
                                                        if meta.get("lockdir") else "") + ".  ", ""]
    if rows:
        out.append(", ".join(f"{n} {cell(s)}" for s, n in sorted(counts.items(), key=lambda kv: -kv[1])) + ".")
        out.append("")
        static = any(_static(r) for r in rows)
        headers = ["test", "kernel", "mode", "status", "winner", "median", "vs lock", *(["static"] if static else [])]
        out.append("| " + " | ".join(headers) + " |")
        out.append("| " + " | ".join(["---"] * 5 + ["---:", "---:"] + (["---"] if static else [])) + " |")
        for r in rows:
            status = str(r.get("status", ""))
            kernel = str(r.get("kernel", "")) + (f"@{r['arch']}" if r.get("arch") else "")
            cells = [cell(r.get("test", "")), cell(kernel), cell(r.get("mode", "")),
                     f"{ICON.get(status, '')} {'**' + cell(status) + '**' if _rank(r) == 0 else cell(status)}".strip(),
                     cell(_fmt_params(r.get("params"))), cell(_fmt_ms(r.get("time_ms"))), cell(_change(r)),
                     *([cell(_static(r) or "-")] if static else [])]
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    for r in failed:
        message = str(r.get("message") or r.get("note") or r.get("status"))
        out += [f"### {cell(r.get('status'))}: {_code(str(r.get('test')) + '::' + str(r.get('kernel')))}", "",
                *_fenced(message), ""]
    unchecked = [r for r in rows if _rank(r) == 1 and (r.get("message") or r.get("note"))]
    if unchecked:
        out += ["<details><summary>Not checked, or checked with a caveat</summary>", ""]
        out += [f"- {_code(str(r.get('test')) + '::' + str(r.get('kernel')))} ({cell(r.get('status'))}): "
                f"{cell(r.get('message') or r.get('note'))}" for r in unchecked]
        out += ["", "</details>", ""]
    if plots:
        out += ["Plots" + ("" if relative_to is not None else " (in the run's plots folder: upload it as an artifact)")
                + ":", ""]
        for p in plots:
            if relative_to is None:
                out.append(f"- {_code(Path(p).as_posix())}")
                continue
            shown = Path(os.path.relpath(p, relative_to)).as_posix().replace(" ", "%20").replace(")", "%29")
            out.append(f"- [{cell(Path(p).name)}]({shown})")
        out.append("")
    return "\n".join(out) + "\n"


def target(option: str | os.PathLike[str] | None, environ: Mapping[str, str] = os.environ) -> Path | None:
    """Where the summary goes: ``--autotune-report-md=PATH``, else ``$GITHUB_STEP_SUMMARY``, else nowhere."""
    if option:
        return Path(option)
    env = environ.get(ENV, "").strip()
    return Path(env) if env else None


def append(path: str | os.PathLike[str], markdown: str) -> Path:
    """Append ``markdown`` to ``path`` (a blank line after what is there), creating it and its folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lead = "\n" if path.is_file() and path.stat().st_size else ""
    with path.open("a", encoding="utf-8") as f:
        f.write(lead + markdown)
    return path


def _locked_samples(row: Mapping[str, Any]) -> list[float]:
    """The lock entry's samples of ``row`` (a gate's row carries them), or [] when it has none."""
    return [float(x) for x in row.get("locked_samples") or []]


def write_distribution_plots(directory: str | Path, rows: Sequence[Mapping[str, Any]]) -> list[Path]:
    """For each regression: the locked samples and the fresh ones side by side (``*__samples.png``).

    The fresh samples are the row's ``samples`` where it carries them; otherwise the fresh median is
    drawn as a line across the locked distribution, with the tolerance the gate allowed. Needs matplotlib.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory = Path(directory)
    written = []
    for r in rows:
        if r.get("status") != "REGRESSION":
            continue
        locked = _locked_samples(r)
        fresh = [float(x) for x in r.get("samples") or r.get("fresh_samples") or []]
        if not locked and not fresh:
            continue
        directory.mkdir(parents=True, exist_ok=True)
        fig, ax = plt.subplots(figsize=(6, 3.5))
        groups = [(name, xs) for name, xs in (("locked", locked), ("now", fresh)) if xs]
        ax.boxplot([xs for _, xs in groups], positions=range(len(groups)), widths=0.5, showfliers=False)
        for i, (_, xs) in enumerate(groups):
            jitter = [i + 0.18 * ((k * 0.618) % 1 - 0.5) for k in range(len(xs))]
            ax.scatter(jitter, xs, s=12, alpha=0.7, color="#4c72b0" if i == 0 else "#dd5a4a", zorder=3)
        ax.set_xticks(range(len(groups)), [f"{name} (n={len(xs)})" for name, xs in groups])
        if not fresh and r.get("time_ms") is not None:
            ax.axhline(r["time_ms"], color="#dd5a4a", linestyle="--", label=f"now: median {_fmt_ms(r['time_ms'])}")
            ax.legend(loc="best", fontsize=8)
        ax.set_ylabel("time (ms)")
        ax.set_title(f"{r.get('kernel')}: {_change(r)} against the lock", fontsize=10)
        ax.grid(alpha=0.3, axis="y")
        out = directory / plot_name(r, "__samples")
        fig.tight_layout()
        fig.savefig(out, dpi=100)
        plt.close(fig)
        written.append(out)
    return written
