"""The summary table on the terminal, fitted to its width: nothing is cut, what does not fit wraps.

On a wide terminal each kernel is one row of the table, as the JSON report has it. When that table
is wider than the terminal (an 80-column CI log), each row keeps its verdict columns on one line and
puts its long parts (winner, failures, note) on indented lines below it, wrapped; the test is named by
a short id (the file's stem, the test and the kernel: ``test_cpu_kernels::test_blocked_matmul::matmul``)
that grows a folder at a time until no two tests read the same.
"""
from __future__ import annotations

import math
import textwrap
from typing import Any, Iterable, Mapping, Sequence

COLUMNS = ("kernel", "mode", "status", "winner", "median", "vs lock", "evals", "strategy", "failures", "note")
ALWAYS_SHOWN = ("kernel", "mode", "status")  # other columns are left out when no row has anything in them
# The narrow layout's verdict columns, on the row's line; the others go on lines of their own below it.
LINE_COLUMNS = ("mode", "status", "median", "vs lock", "evals", "strategy")
DETAIL_COLUMNS = ("winner", "failures", "note")
INDENT = "    "


def fmt_ms(value: Any) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:.4g} ms"


def fmt_params(params: Mapping[str, Any] | None) -> str:
    if not params:
        return "-"
    return ", ".join(f"{k}={v}" for k, v in params.items())


def fmt_change(row: Mapping[str, Any]) -> str:
    """``+4.9% A/B`` (both timed side by side now), ``now +62.4%`` (a tuning's timing of the winner
    against the previous entry's median: the machine's state, not a verdict), or ``+4.9%`` (a gate
    against the lock's median)."""
    change = row.get("change_pct")
    if change is None:
        return "-"
    kind = row.get("change_kind")
    return f"now {change:+.1f}%" if kind == "now" else f"{change:+.1f}%" + (" A/B" if kind == "a/b" else "")


def row_id(row: Mapping[str, Any]) -> str:
    """The row's whole name: ``tests/test_x.py::test_y[p]::kernel`` (``@sm_90`` for a static row)."""
    return f"{row.get('test', '')}::{row.get('kernel', '')}" + (f"@{row['arch']}" if row.get("arch") else "")


def table_rows(rows: Iterable[Mapping[str, Any]]) -> list[list[str]]:
    """Each row's cells, in :data:`COLUMNS` order, whole."""
    out = []
    for r in rows:
        failures = r.get("failures") or {}
        out.append([
            row_id(r), str(r.get("mode", "")), str(r.get("status", "")), fmt_params(r.get("params")),
            fmt_ms(r.get("time_ms")), fmt_change(r),
            "-" if r.get("evaluations") is None else f"{r['evaluations']}/{r.get('budget', '-')}",
            str(r.get("strategy") or "-"), ", ".join(f"{k}:{v}" for k, v in sorted(failures.items())) or "-",
            str(r.get("note") or "-"),
        ])
    return out


def _short(test_id: str, level: int) -> str:
    """``tests/gpu/test_mm.py::test_a::k`` at level 0: ``test_mm::test_a::k``; at level 1 ``gpu/test_mm::...``."""
    path, sep, rest = test_id.partition("::")
    if not sep:
        return test_id
    parts = path.replace("\\", "/").split("/")
    stem = parts[-1][:-3] if parts[-1].endswith(".py") else parts[-1]
    return "/".join([*parts[-1 - level:-1], stem]) + sep + rest if level < len(parts) else test_id


def short_ids(ids: Sequence[str]) -> list[str]:
    """Short names of ``ids`` (see :func:`_short`), each grown by folders until it names one id only: two
    different tests never read the same."""
    levels = [0] * len(ids)
    while True:
        names = [_short(i, lv) for i, lv in zip(ids, levels)]
        owners: dict[str, set[str]] = {}
        for name, full in zip(names, ids):
            owners.setdefault(name, set()).add(full)
        clash = [k for k, name in enumerate(names) if len(owners[name]) > 1 and names[k] != ids[k]]
        if not clash:
            return names
        for k in clash:
            levels[k] += 1


def wrap(text: str, width: int | None, indent: str = INDENT, first: str = "") -> list[str]:
    """``first + text`` in lines of at most ``width`` columns, continued under ``indent``; a word longer than
    a line (a path) is broken, never cut."""
    if not width:
        return [first + text]
    out: list[str] = []
    for k, part in enumerate(text.splitlines() or [""]):  # a message's own lines stay lines
        lead = first if k == 0 else indent + part[:len(part) - len(part.lstrip())]
        out += textwrap.wrap(part.strip() if k else part, width, initial_indent=lead, subsequent_indent=indent,
                             break_on_hyphens=False) or [lead.rstrip()]
    return out


def _shown(body: Sequence[Sequence[str]]) -> list[int]:
    return [i for i, h in enumerate(COLUMNS) if h in ALWAYS_SHOWN or not body or any(b[i] != "-" for b in body)]


def _line(cells: Sequence[str], widths: Sequence[int]) -> str:
    return "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()


def format_table(rows: Sequence[Mapping[str, Any]], width: int | None = None) -> list[str]:
    """The summary table: one line per kernel when it fits ``width`` (or no width is given), else the narrow
    layout (:func:`narrow_table`). Columns empty in every row are left out; no cell is ever cut."""
    body = table_rows(rows)
    shown = _shown(body)
    widths = [max([len(COLUMNS[i]), *(len(b[i]) for b in body)]) for i in shown]
    if width and sum(widths) + 2 * (len(widths) - 1) > width:
        return narrow_table(rows, width)
    lines = [_line([COLUMNS[i] for i in shown], widths), "  ".join("-" * w for w in widths)]
    return lines + [_line([b[i] for i in shown], widths) for b in body]


def narrow_table(rows: Sequence[Mapping[str, Any]], width: int) -> list[str]:
    """Each kernel as its node id (its short id, :func:`short_ids`, unless every whole one fits beside the
    verdict columns), its verdict columns, then ``winner:``, ``failures:`` and ``note:`` lines indented below
    it, every line at most ``width`` columns. The id shares the line with the verdict columns when all ids
    fit beside them, else it has a line of its own (wrapped when longer than one)."""
    body = table_rows(rows)
    shown = _shown(body)
    names = short_ids([b[0] for b in body])
    line_cols = [i for i in shown if COLUMNS[i] in LINE_COLUMNS]
    widths = [max([len(COLUMNS[i]), *(len(b[i]) for b in body)]) for i in line_cols]
    details = [i for i in shown if COLUMNS[i] in DETAIL_COLUMNS]
    if len(INDENT) + sum(widths) + 2 * (len(widths) - 1) > width and COLUMNS[line_cols[-1]] == "strategy":
        details.insert(0, line_cols.pop())  # a long strategy (a chain) goes below too
        widths.pop()
    rest = sum(widths) + 2 * (len(widths) - 1)
    if max([len("kernel"), *(len(b[0]) for b in body)]) + 2 + rest <= width:
        names = [b[0] for b in body]  # the whole node ids fit beside the verdict columns: nothing to shorten
    id_width = max([len("kernel"), *map(len, names)])
    inline = id_width + 2 + rest <= width
    lead = [id_width] if inline else [len(INDENT) - 2]
    head = ["kernel" if inline else "", *(COLUMNS[i] for i in line_cols)]
    lines = ([] if inline else ["kernel (file stem::test::kernel)"]) + [_line(head, [*lead, *widths])]
    lines.append("-" * min(width, max(len(line) for line in lines)))
    for name, b in zip(names, body):
        cells = [b[i] for i in line_cols]
        if inline:
            lines.append(_line([name, *cells], [*lead, *widths]))
        else:
            lines += wrap(name, width, indent="  ")
            lines.append(_line(["", *cells], [*lead, *widths]))
        for i in details:
            if b[i] != "-":
                lines += wrap(b[i], width, indent=INDENT + "  ", first=f"{INDENT}{COLUMNS[i]}: ")
    return lines
