"""MkDocs hook: benchmark tables rendered from ``benchmarks/results/*.json`` at build time.

A page writes ``<!-- table: VIEW -->`` or ``<!-- table: VIEW FILE.json -->`` on a line of its
own (indented inside a note or a collapsible box: the table keeps the indent); the line becomes a
Markdown table computed from that results file, so the numbers in the
manual cannot drift from the results. An unknown view, a missing file or a file without the
fields the view reads fails the build (a ``PluginError`` names the page and the marker).

Views (and the file each reads by default):

* ``strategies`` (``strategies.json``): every strategy's mean score over the measured spaces
  +- its standard error, ours and the references, best first.
* ``batch`` (``batch.json``; ``batch_async.json`` works too): mean score per batch size.
* ``time_to_solution`` (``time_to_solution.json``): simulated seconds to within 5 % / 1 %.
* ``early_stop`` (``early_stop.json``): the early-stopping rules compared.
* ``compile_pool`` (``compile_pool.json``): ``pytest --autotune`` wall time, 1 vs 2 compile workers.
* ``transfer`` (``transfer_patience.json``): warm start from other GPUs' locks, cold -> warm per family.
* ``sweep_budgets``, ``sweep_families``, ``sweep_gpus``, ``sweep_loo`` (``bench_strategies_issue42.json``, a
  ``bench_strategies.py --budgets`` run): the mean score per budget; per kernel family and per GPU at each
  budget; leave-one-family-out and leave-one-GPU-out scores of the selector beside the pooled figures.

``render(view, path)`` is importable, so a test can render a view without building the site.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
MARKER = re.compile(r"^(?P<indent>[ \t]*)<!--\s*table:\s*(?P<view>[A-Za-z_]+)(?:\s+(?P<file>[\w.\-]+))?\s*-->\s*$", re.MULTILINE)


class TableError(Exception):
    """A marker that cannot be rendered: unknown view, missing file, missing fields."""


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _table(headers: list[str], rows: list[list[str]], align: str = "left") -> str:
    rule = ["---"] + ["---:" if align == "right" else "---"] * (len(headers) - 1)
    return "\n".join([_row(headers), _row(rule), *(_row(r) for r in rows)])


def _pm(stat: dict[str, Any]) -> str:
    return f"{stat['mean']:.3f} ± {stat['se']:.3f}"


_KIND = {"ours": "", "kernel_tuner": "Kernel Tuner ", "optuna": "Optuna "}


def _label(key: str, strategies: dict[str, Any]) -> str:
    info = strategies.get(key, {})
    kind, name = info.get("kind", "ours"), info.get("name", key)
    return f"`{name}`" if kind == "ours" else f"{_KIND.get(kind, kind + ' ')}{name}"


def view_strategies(data: dict[str, Any]) -> str:
    measured = data["aggregate"]["measured"]
    n_spaces = {v.get("n_spaces") for v in measured.values()} - {None}
    rows = []
    for key, stat in sorted(measured.items(), key=lambda kv: -kv[1]["mean"]):
        label = _label(key, data["strategies"])
        rows.append([f"**{label}**" if key == "auto" else label, _pm(stat)])
    runs = data["meta"]["runs"]
    note = (f"\n\n*Mean score over the {'/'.join(map(str, sorted(n_spaces)))} measured spaces ± standard error, "
            f"{runs} seeds per space.*")
    return _table(["strategy", "score"], rows) + note


def view_batch(data: dict[str, Any]) -> str:
    measured = data["aggregate"]["measured"]
    sizes = sorted({int(b) for stats in measured.values() for b in stats})
    rows = [[f"`{name}`", *(_pm(stats[str(b)]) if str(b) in stats else "-" for b in sizes)]
            for name, stats in measured.items()]
    seeds = data["meta"].get("seeds")
    note = f"\n\n*{len(seeds)} seeds ({min(seeds)}-{max(seeds)}).*" if isinstance(seeds, list) and seeds else ""
    return _table(["strategy", *(f"batch {b}" for b in sizes)], rows) + note


def _seconds(value: float | None) -> str:
    if value is None:
        return "never"
    return f"{value:.1f}" if value < 100 else f"{value:.0f}"


def _tts_label(key: str) -> str:
    name, _, workers = key.rpartition("@")
    if name.startswith("kt:"):
        return f"Kernel Tuner `{name[3:]}`"
    if name.startswith("optuna:"):
        return f"Optuna {name[7:].upper()}"
    return f"`{name}`, {workers} worker{'s' if workers != '1' else ''}"


def view_time_to_solution(data: dict[str, Any]) -> str:
    rows = []
    for key, agg in sorted(data["aggregate"].items(),
                           key=lambda kv: (kv[1]["t5_median_s"] is None, kv[1]["t5_median_s"] or 0)):
        cens = agg["censored"]
        rows.append([_tts_label(key), str(agg["runs"]), _seconds(agg["t5_median_s"]), _seconds(agg["t1_median_s"]),
                     f"{cens['t5']} / {cens['t1']}"])
    return _table(["strategy", "runs", "to 5% (s)", "to 1% (s)", "never got there (5% / 1%)"], rows)


def view_early_stop(data: dict[str, Any]) -> str:
    default = data["meta"]["default_rule"]
    rows = []
    for rule, g in data["summary"]["grid"].items():
        m = re.fullmatch(r"k(\d+)c([\d.]+)", rule)
        name = f"k={m.group(1)}, c={m.group(2)}" if m else rule
        cells = [name, f"{g['saved_mean_over_spaces']:.0%}", f"{g['saved_ours_mean_over_spaces']:.0%}",
                 f"{g['false_stops']} (in {g['runs_with_false_stop']} searches)" if g["false_stops"] else "0",
                 f"{g['margin']:.2f}"]
        rows.append([f"**{c}**" for c in cells] if rule == default else cells)
    return _table(["rule (k runs, c x best)", "run time saved", "of our timing loop's runs",
                   "stopped within 5% of the best", "margin"], rows)


def view_compile_pool(data: dict[str, Any]) -> str:
    rows = []
    for workers, s in sorted(data["summary"].items(), key=lambda kv: int(kv[0])):
        w = s["winner_median_ms"]
        rows.append([workers + (" (inline)" if workers == "1" else ""), f"{s['wall_s_median']:.1f} s",
                     *(f"{w[k]:.3f} ms" for k in sorted(w)), f"{s['false_alarms']} / {s['gated_kernels']}"])
    kernels = sorted(next(iter(data["summary"].values()))["winner_median_ms"])
    table = _table(["workers", "wall time (median)", *(f"{k} winner" for k in kernels), "gate false alarms"], rows)
    return table + f"\n\n*Wall time of 2 workers over 1 (median of the paired rounds): {data['wall_ratio_2_over_1']:.2f}.*"


_FAMILY = {"all": "all {n} GPUs", "convolution": "convolution ({n} GPUs, T4)", "gemm": "GEMM ({n})",
           "pnpoly": "pnpoly ({n})", "ktt_convolution": "KTT convolution ({n})"}


def view_transfer(data: dict[str, Any]) -> str:
    budgets = data["meta"]["budgets"]
    warm = next(v for v in data["variants"] if v.startswith("warm"))
    rows = []
    for family, per_budget in data["families"].items():
        n = per_budget[budgets[0]]["cold"]["spaces"]
        label = _FAMILY.get(family, family + " ({n})").format(n=n)
        rows.append([label, *(f"{per_budget[b]['cold']['mean']:.2f} -> **{per_budget[b][warm]['mean']:.2f}**"
                              for b in budgets)])
    headers = ["family", *(f"budget {b}" if i == 0 else b for i, b in enumerate(budgets))]
    return _table(headers, rows) + f"\n\n*Mean score, cold -> **warm**; {data['meta']['runs']} seeds.*"


def _sweep(data: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    return data["meta"]["budgets"], data["budget_sweep"]


def _budget_name(b: str) -> str:
    return "budget B" if b == "B" else f"budget {b}"


def _sweep_note(data: dict[str, Any]) -> str:
    seeds = data["meta"]["seeds"]
    return (f"\n\n*Mean score over seeds {min(seeds)}-{max(seeds)} ({len(seeds)} per space); each budget b is "
            f"min(B, b) per space; † a strategy left out of some spaces (`--max-budget`).*")


def view_sweep_budgets(data: dict[str, Any]) -> str:
    budgets, sweep = _sweep(data)
    labels = sorted(data["strategies"], key=lambda k: -(sweep[budgets[-1]]["aggregate"]["all"].get(k) or
                                                        {"mean": -9})["mean"])
    rows = []
    for key in labels:
        cells = []
        for b in budgets:
            e = sweep[b]["aggregate"]["all"].get(key)
            cells.append("-" if e is None else _pm(e) + ("" if e["complete"] else " †"))
        rows.append([_label(key, data["strategies"]), *cells])
    return _table(["strategy", *(_budget_name(b) for b in budgets)], rows) + _sweep_note(data)


def _grouped(data: dict[str, Any], grouping: str) -> str:
    budgets, sweep = _sweep(data)
    parts = []
    for b in budgets:
        folds = sweep[b]["generalisation"][grouping]["folds"]
        names = sorted(folds)
        rows = []
        for key in data["strategies"]:
            means = [folds[n]["means"].get(key) for n in names]
            rows.append([_label(key, data["strategies"]), *("-" if m is None else f"{m:.2f}" for m in means)])
        headers = [_budget_name(b), *(f"{n} ({len(folds[n]['spaces'])})" for n in names)]
        parts.append(_table(headers, rows))
    return "\n\n".join(parts) + _sweep_note(data)


def view_sweep_families(data: dict[str, Any]) -> str:
    return _grouped(data, "family")


def view_sweep_gpus(data: dict[str, Any]) -> str:
    return _grouped(data, "gpu")


def view_sweep_loo(data: dict[str, Any]) -> str:
    budgets, sweep = _sweep(data)
    rows = []
    for b in budgets:
        gen = sweep[b]["generalisation"]
        pooled = {k: v for k, v in gen["pooled"].items() if v is not None}
        ours = {k: v for k, v in pooled.items() if data["strategies"][k]["kind"] == "ours"}
        refs = {k: v for k, v in pooled.items() if data["strategies"][k]["kind"] != "ours"}
        best_ours = max(ours, key=ours.get)
        fam = gen["family"]
        choices = ", ".join(f"{f}: `{e.get('selected', '-')}`" for f, e in sorted(fam["folds"].items()))
        margins = [e["margin_over_best_anchor"].get("selected") for e in fam["folds"].values()
                   if "margin_over_best_anchor" in e]
        margin = f"{min(margins):+.2f}" if margins and None not in margins else "-"
        best_ref = max(refs, key=refs.get) if refs else None
        rows.append([_budget_name(b), f"{pooled['auto']:.3f}" if "auto" in pooled else "-",
                     f"{_label(best_ours, data['strategies'])} {ours[best_ours]:.3f}",
                     f"{fam['loo_mean']['selected']:.3f}" if fam["loo_mean"].get("selected") is not None else "-",
                     f"{gen['gpu']['loo_mean']['selected']:.3f}" if gen["gpu"]["loo_mean"].get("selected") is not None
                     else "-",
                     "-" if best_ref is None else f"{_label(best_ref, data['strategies'])} {refs[best_ref]:.3f}",
                     margin, choices])
    headers = ["budget", "`auto` pooled", "best of ours, pooled (in-sample)", "selector, leave-one-family-out",
               "selector, leave-one-GPU-out", "best anchor, pooled", "selector's worst family margin over the "
               "family's best anchor", "selector's choice per held-out family"]
    return _table(headers, rows) + _sweep_note(data)


VIEWS: dict[str, tuple[str, Callable[[dict[str, Any]], str]]] = {
    "strategies": ("strategies.json", view_strategies),
    "batch": ("batch.json", view_batch),
    "time_to_solution": ("time_to_solution.json", view_time_to_solution),
    "early_stop": ("early_stop.json", view_early_stop),
    "compile_pool": ("compile_pool.json", view_compile_pool),
    "transfer": ("transfer_patience.json", view_transfer),
    "sweep_budgets": ("bench_strategies_issue42.json", view_sweep_budgets),
    "sweep_families": ("bench_strategies_issue42.json", view_sweep_families),
    "sweep_gpus": ("bench_strategies_issue42.json", view_sweep_gpus),
    "sweep_loo": ("bench_strategies_issue42.json", view_sweep_loo),
}


def render(view: str, filename: str | None = None, results: Path = RESULTS) -> str:
    """The Markdown table of ``view`` computed from ``results/filename`` (the view's default file)."""
    if view not in VIEWS:
        raise TableError(f"unknown table view {view!r}; known: {', '.join(sorted(VIEWS))}")
    default, fn = VIEWS[view]
    path = results / (filename or default)
    if not path.is_file():
        raise TableError(f"table {view!r}: results file {path} not found")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        table = fn(data)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise TableError(f"table {view!r}: {path.name} lacks what the view reads ({type(exc).__name__}: {exc})") from None
    return f"{table}\n\n*Generated from `benchmarks/results/{path.name}` when the site was built.*"


def replace_markers(markdown: str, results: Path = RESULTS) -> str:
    def table(m: re.Match[str]) -> str:  # a marker indented (inside a note or a details box) keeps its indent
        text = render(m.group("view"), m.group("file"), results)
        return "\n".join(m.group("indent") + line if line else "" for line in text.split("\n"))

    return MARKER.sub(table, markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:  # MkDocs hook
    if "<!-- table" not in markdown:
        return markdown
    try:
        return replace_markers(markdown)
    except TableError as exc:
        from mkdocs.exceptions import PluginError

        raise PluginError(f"{page.file.src_path}: {exc}") from None
