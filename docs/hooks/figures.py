"""MkDocs hook: figures generated at build time, inline SVG that follows the theme (light or dark).

A page writes ``<!-- figure: NAME -->`` on a line of its own; the line becomes a ``<figure>`` with an
inline ``<svg>`` and a caption. Charts are drawn with matplotlib from ``benchmarks/results/*.json``
(read through the same files as the tables, ``tables.py``), so they cannot drift from the results;
diagrams are laid out from the small declarative descriptions below (boxes on a grid, edges between
them). An unknown figure or a results file without the fields a chart reads fails the build.

Colours: text, axes and lines are ``currentColor`` (the page's text colour in either theme); data
series use a mid-tone palette readable on white and on slate; backgrounds are transparent. Nothing
is fetched: the SVG is part of the page, so the figures work offline and from ``file://``.

Figures (and the file each reads):

* ``gate_flow``: how the gate decides (diagram).
* ``architecture``: marker -> lifecycle -> strategy/evaluator -> compile pool -> worker -> lock -> gate (diagram).
* ``strategy_scores`` (``strategies.json``): mean score per strategy and kernel family, +- standard error.
* ``time_to_solution`` (``time_to_solution.json``, ``time_to_solution_cluster.json``): time to within
  5 % / 1 % of the optimum against compile workers and against devices.
* ``gate_rates`` (``bench_gate_robust_issue27_lock_every_merged.json``): the gate's detection rate of a
  1.3x slowdown and its false-alarm rate on unchanged kernels, per machine condition.
"""
from __future__ import annotations

import html
import io
import json
import math
import re
import textwrap
from pathlib import Path
from typing import Any, Callable

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
MARKER = re.compile(r"^<!--\s*figure:\s*(?P<name>[A-Za-z_]+)\s*-->\s*$", re.MULTILINE)
INK = "#123456"  # matplotlib's text/axis colour, replaced by currentColor in the SVG
PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948", "#9c755f"]


class FigureError(Exception):
    """A marker that cannot be drawn: unknown figure, missing file, missing fields."""


def _load(name: str, results: Path) -> dict[str, Any]:
    path = results / name
    if not path.is_file():
        raise FigureError(f"results file {path} not found")
    return json.loads(path.read_text(encoding="utf-8"))


# ------------------------------------------------------------------------------------------------
# Diagrams: boxes on a grid, edges between them, as SVG text
# ------------------------------------------------------------------------------------------------
KIND_STYLE = {  # fill (drawn at low opacity, so it reads on both themes), stroke
    "start": ("#76b7b2", "#76b7b2"), "step": ("#4e79a7", "#4e79a7"), "decision": ("#edc948", "#c9a227"),
    "pass": ("#59a14f", "#59a14f"), "fail": ("#e15759", "#e15759"), "skip": ("#9c755f", "#9c755f"),
    "warn": ("#f28e2b", "#f28e2b"),
}


def diagram(nodes: list[tuple[str, int, int, str, str]], edges: list[tuple[str, str, str]],
            col_width: int = 300, gap: int = 70, chars: int = 40, title: str = "") -> str:
    """An SVG diagram: ``nodes`` are (id, column, row, kind, label), ``edges`` (from, to, label).

    An edge between nodes of one row runs horizontally; any other edge leaves the bottom of its
    source, turns halfway to the target's row and enters the target from the top.
    """
    line_h, pad = 17, 9
    lines = {nid: textwrap.wrap(label, chars) for nid, _, _, _, label in nodes}
    rows = sorted({r for _, _, r, _, _ in nodes})
    row_h = {r: max(len(lines[n]) for n, _, rr, _, _ in nodes if rr == r) * line_h + 2 * pad for r in rows}
    y0, top = 10, {}
    for r in rows:
        top[r] = y0
        y0 += row_h[r] + 42
    width = max(c for _, c, _, _, _ in nodes) * (col_width + gap) + col_width + 20
    height = y0 - 42 + 10
    box = {}
    mid_ = re.sub(r"\W", "", title)[:20] or "a"
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="100%" '
           f'style="max-width:{width}px" role="img" aria-label="{html.escape(title)}" '
           'font-family="-apple-system, BlinkMacSystemFont, Segoe UI, Helvetica, Arial, sans-serif" font-size="13">',
           f"<title>{html.escape(title)}</title>",
           f'<defs><marker id="arrow-{mid_}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
           'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="currentColor"/></marker></defs>']
    marker = f"url(#arrow-{mid_})"
    for nid, col, row, kind, _ in nodes:
        h = len(lines[nid]) * line_h + 2 * pad
        x, y = 10 + col * (col_width + gap), top[row] + (row_h[row] - h) / 2
        box[nid] = (x, y, col_width, h)
    for a, b, label in edges:
        ax, ay, aw, ah = box[a]
        bx, by, bw, bh = box[b]
        if abs((ay + ah / 2) - (by + bh / 2)) < 1:
            y = ay + ah / 2
            x1, x2 = (ax + aw, bx) if bx > ax else (ax, bx + bw)
            d, lx, ly = f"M{x1:.0f},{y:.0f} H{x2:.0f}", (x1 + x2) / 2, y - 6
        else:
            x1, y1, x2, y2 = ax + aw / 2, ay + ah, bx + bw / 2, by
            mid = y2 - 21
            d = f"M{x1:.0f},{y1:.0f} V{mid:.0f} H{x2:.0f} V{y2:.0f}" if abs(x1 - x2) > 1 else f"M{x1:.0f},{y1:.0f} V{y2:.0f}"
            lx, ly = x1 + 6, y1 + 15
        out.append(f'<path d="{d}" fill="none" stroke="currentColor" stroke-width="1.4" marker-end="{marker}"/>')
        if label:
            anchor = "middle" if "H" in d and "V" not in d else "start"
            out.append(f'<text x="{lx:.0f}" y="{ly:.0f}" text-anchor="{anchor}" font-size="12" fill="currentColor" '
                       f'font-style="italic">{html.escape(label)}</text>')
    for nid, _, _, kind, _ in nodes:
        x, y, w, h = box[nid]
        fill, stroke = KIND_STYLE[kind]
        rx = 16 if kind in ("start",) else 3 if kind == "decision" else 8
        dash = ' stroke-dasharray="5 3"' if kind == "decision" else ""
        out.append(f'<rect x="{x:.0f}" y="{y:.0f}" width="{w}" height="{h:.0f}" rx="{rx}" fill="{fill}" '
                   f'fill-opacity="0.16" stroke="{stroke}" stroke-width="1.6"{dash}/>')
        for i, text in enumerate(lines[nid]):
            weight = ' font-weight="600"' if kind in ("pass", "fail", "skip", "warn") and i == 0 else ""
            out.append(f'<text x="{x + w / 2:.0f}" y="{y + pad + 13 + i * line_h:.0f}" text-anchor="middle" '
                       f'fill="currentColor"{weight}>{html.escape(text)}</text>')
    out.append("</svg>")
    return "\n".join(out)


GATE_NODES = [
    ("start", 0, 0, "start", "plain pytest: a marked test runs its kernel through the autotune fixture"),
    ("entry", 0, 1, "decision", "A lock entry for this device?"),
    ("missing", 1, 1, "skip", "skipped (or fail / tune: --autotune-missing), named in the NOT GATED line"),
    ("stale", 0, 2, "decision", "Can the locked configuration still run as measured (same problem, still in the space)?"),
    ("stale_out", 1, 2, "skip", "stale: skipped with the exact re-tune command"),
    ("trust", 0, 3, "decision", "May the entry reach a build (values of the marker's space, paths inside the lock, "
                                "the kernel's own options)?"),
    ("refused", 1, 3, "fail", "refused: the test fails, nothing was compiled (--autotune re-tunes it)"),
    ("verify", 0, 4, "step", "run the locked parameters and verify the outputs"),
    ("broken", 1, 4, "fail", "BROKEN: wrong output, the test fails"),
    ("edited", 0, 5, "decision", "Kernel source edited since the lock?"),
    ("ab", 1, 5, "step", "A/B: the locked source and the current one at the locked parameters, interleaved "
                         "rounds on one CPU of this machine"),
    ("absolute", 0, 6, "step", "fresh samples against the locked samples"),
    ("test", 0, 7, "decision", "Median slower by more than the tolerance and Mann-Whitney U p < alpha?"),
    ("pass", 1, 7, "pass", "pass (clearly faster: pass, with a note to re-tune)"),
    ("persist", 0, 8, "decision", "Still slower in fresh rounds, each after a short pause, while the gate's "
                                  "time budget lasts?"),
    ("burst", 1, 8, "pass", "pass: a burst of load, not the kernel"),
    ("probes", 0, 9, "decision", "Unchanged source: do the machine probes (triad, FMA chain) explain the slowdown?"),
    ("incomparable", 1, 9, "warn", "not comparable (the machine explains it, or undecided within the budget): "
                                   "warn (default), skip or fail (--autotune-incomparable)"),
    ("regression", 0, 10, "fail", "REGRESSION: the test fails, with the numbers, the locked params and the "
                                 "re-tune command"),
]
GATE_EDGES = [
    ("start", "entry", ""), ("entry", "missing", "no"), ("entry", "stale", "yes"), ("stale", "stale_out", "no"),
    ("stale", "trust", "yes"), ("trust", "refused", "no"),
    ("trust", "verify", "yes"), ("verify", "broken", "wrong"), ("verify", "edited", "correct"),
    ("edited", "ab", "yes"), ("edited", "absolute", "no"), ("ab", "test", ""), ("absolute", "test", ""),
    ("test", "pass", "no"), ("test", "persist", "yes"), ("persist", "burst", "no"), ("persist", "probes", "yes"),
    ("persist", "incomparable", "budget spent"), ("probes", "incomparable", "yes"),
    ("probes", "regression", "no, or A/B"),
]

ARCH_NODES = [
    ("marker", 0, 0, "start", "@pytest.mark.tune + the autotune fixture (lifecycle/settings.py, plugin/__init__.py)"),
    ("api", 1, 0, "start", "without pytest: Kernels, gate_kernel() (lifecycle/script.py), tune() (engine/tuner.py)"),
    ("lifecycle", 0, 1, "step", "lifecycle: check and trust the entry, then tune and lock or gate, per kernel call "
                                "(lifecycle/run.py); the fixture maps its outcome to pytest"),
    ("strategy", 0, 2, "step", "strategy proposes configurations (strategies/, auto) from the space (space/)"),
    ("evaluator", 1, 2, "step", "evaluator: memoisation, budget, early stopping, the record of every evaluation "
                                "(engine/)"),
    ("pool", 0, 3, "step", "compile pool: compiles the next candidates while one is timed (execution/compile_pool.py)"),
    ("worker", 0, 4, "step", "isolated worker process: runs, verifies and times on the device (backends/, "
                             "execution/)"),
    ("lock", 0, 5, "pass", "lock: per-device lockfile, winner + runners-up + samples + stored source (lock/)"),
    ("gate", 1, 5, "warn", "gate: re-time the locked winner, compare, probes, verdict (gate/)"),
    ("static", 1, 4, "warn", "static gate without the GPU: rebuild the locked winner per architecture, profile "
                             "its binary (static/), compare with the lock's (gate/static.py)"),
    ("report", 1, 6, "skip", "summary table, JSON report, Markdown job summary, plots (plugin/report.py)"),
]
ARCH_EDGES = [
    ("marker", "lifecycle", "settings"), ("api", "lifecycle", ""), ("lifecycle", "strategy", "tune"),
    ("strategy", "evaluator", "propose / told"), ("strategy", "pool", "candidates"), ("pool", "worker", "binaries"),
    ("worker", "lock", "winner"), ("lock", "gate", "entry"), ("gate", "report", "verdict"),
    ("lock", "static", "profile"), ("static", "report", "verdict"),
]


def figure_gate_flow(results: Path) -> tuple[str, str]:
    svg = diagram(GATE_NODES, GATE_EDGES, title="How the gate decides")
    return svg, ("How the gate decides, top to bottom: the checks before any timing (is there an entry, does it "
                 "apply, may it reach a build at all), the evidence it "
                 "picks (A/B after an edit, else the locked samples), the rank test, the fresh rounds and the "
                 "machine probes, and each outcome (green passes, red fails, brown skips, orange is "
                 "<code>--autotune-incomparable</code>).")


def figure_architecture(results: Path) -> tuple[str, str]:
    svg = diagram(ARCH_NODES, ARCH_EDGES, title="Architecture")
    return svg, ("A kernel's way through the package: the marker and fixture hand settings to the lifecycle; "
                 "tuning runs strategy, evaluator, compile pool and worker, and writes the lock; the gate reads "
                 "the lock entry back and its verdict goes into the reports.")


# ------------------------------------------------------------------------------------------------
# Charts: matplotlib, SVG with text kept as text, recoloured to follow the theme
# ------------------------------------------------------------------------------------------------
def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({
        "svg.fonttype": "none", "font.family": "sans-serif",
        "font.sans-serif": ["Helvetica", "Arial", "DejaVu Sans"], "font.size": 10,
        "text.color": INK, "axes.labelcolor": INK, "axes.edgecolor": INK, "xtick.color": INK, "ytick.color": INK,
        "axes.facecolor": "none", "figure.facecolor": "none", "savefig.transparent": True,
        "grid.color": INK, "grid.alpha": 0.18, "legend.frameon": False, "axes.spines.top": False,
        "axes.spines.right": False, "svg.hashsalt": "autotune",
    })
    return plt


def _svg(fig: Any, name: str) -> str:
    plt = _plt()
    buf = io.StringIO()
    plt.rcParams["svg.hashsalt"] = name  # ids unique per figure (several on one page)
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.DOTALL)
    text = text.replace(INK, "currentColor").replace(INK.upper(), "currentColor")
    text = re.sub(r'(<svg[^>]*?)\swidth="([\d.]+)pt"\s+height="[\d.]+pt"',
                  lambda m: f'{m.group(1)} width="100%" style="max-width:{float(m.group(2)) * 4 / 3:.0f}px"', text,
                  count=1)
    text = re.sub(r"(<svg\b)", rf'\1 role="img" aria-label="{name}"', text, count=1)
    return "\n".join(line for line in text.splitlines() if line.strip())


FAMILIES = (("gemm", "GEMM"), ("pnpoly", "pnpoly"), ("KTConvolution", "KTT convolution"),
            ("convolution", "convolution"))


def _family(space: str) -> str:
    return next((label for prefix, label in FAMILIES if space.startswith(prefix)), space)


def _strategy_label(key: str, strategies: dict[str, Any]) -> str:
    info = strategies.get(key, {})
    kind, name = info.get("kind", "ours"), info.get("name", key)
    return name if kind == "ours" else {"kernel_tuner": "KT ", "optuna": "Optuna "}.get(kind, kind + " ") + name


def figure_strategy_scores(results: Path) -> tuple[str, str]:
    data = _load("strategies.json", results)
    measured, per_space = data["aggregate"]["measured"], data["results"]
    order = sorted(measured, key=lambda k: measured[k]["mean"])  # best at the top of the chart
    families: dict[str, list[str]] = {}
    for space in per_space:
        families.setdefault(_family(space), []).append(space)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.2, 0.28 * len(order) + 1.4))
    offsets = {f: (i - (len(families) - 1) / 2) * 0.17 for i, f in enumerate(families)}
    for (family, spaces), colour in zip(families.items(), PALETTE):
        ys, xs, errs = [], [], []
        for i, key in enumerate(order):
            stats = [per_space[s][key] for s in spaces if key in per_space[s]]
            if not stats:
                continue
            ys.append(i + offsets[family])
            xs.append(sum(s["mean"] for s in stats) / len(stats))
            errs.append(math.sqrt(sum(s["se"] ** 2 for s in stats)) / len(stats))
        ax.errorbar(xs, ys, xerr=errs, fmt="o", ms=3.5, capsize=2, lw=1, color=colour,
                    label=f"{family} ({len(spaces)} spaces)")
    ax.scatter([measured[k]["mean"] for k in order], range(len(order)), marker="|", s=160, color=INK, zorder=3,
               label="all measured spaces")
    ax.set_yticks(range(len(order)), [_strategy_label(k, data["strategies"]) for k in order])
    for tick, key in zip(ax.get_yticklabels(), order):
        if key == "auto":
            tick.set_fontweight("bold")
    ax.set_xlabel("score (0 = random search's median, 1 = the optimum; mean ± standard error)")
    ax.grid(axis="x")
    ax.set_ylim(-0.7, len(order) - 0.3)
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, fontsize=8.5)
    return _svg(fig, "strategy_scores"), (
        f"Each strategy's mean score per kernel family (dots, ± standard error over {data['meta']['runs']} seeds) "
        "and over all measured spaces (bar); best at the top. Generated from "
        "<code>benchmarks/results/strategies.json</code> when the site was built.")


def figure_time_to_solution(results: Path) -> tuple[str, str]:
    local = _load("time_to_solution.json", results)
    cluster = _load("time_to_solution_cluster.json", results)
    plt = _plt()
    fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3.3), sharey=True)
    ours = sorted(((int(k.rpartition("@")[2]), v) for k, v in local["aggregate"].items()
                   if k.startswith("auto@") and k.rpartition("@")[2].isdigit()), key=lambda kv: kv[0])
    workers = [w for w, _ in ours]
    for key, label, colour, style in (("t5_median_s", "to within 5%", PALETTE[0], "o-"),
                                      ("t1_median_s", "to within 1%", PALETTE[1], "s--")):
        left.plot(workers, [v[key] for _, v in ours], style, color=colour, label=label, ms=4)
    best = local["targets"]["kt_best_strategy"]
    left.axhline(local["aggregate"][best]["t5_median_s"], color=PALETTE[3], lw=1, ls=":")
    left.annotate(f"Kernel Tuner's best ({best.split(':')[1].split('@')[0]}), 5%", (workers[0], local["aggregate"][best]
                  ["t5_median_s"]), xytext=(2, 4), textcoords="offset points", fontsize=8, color=PALETTE[3])
    left.set_xscale("log", base=2)
    left.set_yscale("log")
    left.set_xticks(workers, [str(w) for w in workers])
    left.set_xlabel("compile workers (one device)")
    left.set_ylabel("median simulated seconds")
    left.legend(fontsize=8, loc="center right")
    scaling = cluster["scaling"]
    devices = [s["devices"] for s in scaling]
    for key, label, colour, style in (("t5_median_s", "to within 5%", PALETTE[0], "o-"),
                                      ("t1_median_s", "to within 1%", PALETTE[1], "s--")):
        right.plot(devices, [s[key] for s in scaling], style, color=colour, label=label, ms=4)
    right.plot(devices, [scaling[0]["t5_median_s"] / d for d in devices], color=INK, lw=0.8, ls=":",
               label="linear speed-up")
    right.set_xscale("log", base=2)
    right.set_xticks(devices, [str(d) for d in devices])
    right.set_xlabel(f"devices ({scaling[0]['workers_per_device']} compile workers each)")
    right.legend(fontsize=8, loc="lower left")
    for ax in (left, right):
        ax.grid(which="major")
    return _svg(fig, "time_to_solution"), (
        "Median simulated time until the best found is within 5 % and 1 % of the optimum, over "
        f"{local['aggregate'][f'auto@{workers[0]}']['spaces']} recorded spaces: against compile workers on one device "
        "(left) and against devices (right, dotted: linear speed-up). Generated from "
        "<code>benchmarks/results/time_to_solution.json</code> and "
        "<code>time_to_solution_cluster.json</code> when the site was built.")


GATE_FILE = "bench_gate_robust_issue27_lock_every_merged.json"


def _wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float, float]:
    if n == 0:
        return 0.0, 0.0, 0.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return p, max(0.0, p - (centre - half)), max(0.0, centre + half - p)


def gate_rates(data: dict[str, Any]) -> dict[tuple[str, str, str], tuple[int, int]]:
    """(scenario, condition, gate) -> (runs failed as slower, runs) from ``per_condition``."""
    out = {}
    for c in data["per_condition"]:
        verdicts = c["verdicts"]
        out[(c["scenario"], c["condition"], c["gate"])] = (int(verdicts.get("slower", 0)), sum(verdicts.values()))
    return out


def figure_gate_rates(results: Path) -> tuple[str, str]:
    data = _load(GATE_FILE, results)
    rates = gate_rates(data)
    conditions = [c for c in ("quiet", "busy1", "busy2") if any(k[1] == c for k in rates)]
    gates = [("new", "this gate"), ("today", "the gate before")]
    plt = _plt()
    fig, (det, fa) = plt.subplots(1, 2, figsize=(8, 3.0))
    width = 0.38
    for panel, scenario, title in ((det, "env x1.3", "detected: kernel 1.3x slower"),
                                   (fa, "unchanged", "false alarms: kernel unchanged")):
        for j, ((gate, label), colour) in enumerate(zip(gates, (PALETTE[0], PALETTE[7]))):
            stats = [_wilson(*rates.get((scenario, c, gate), (0, 0))) for c in conditions]
            xs = [i + (j - 0.5) * width for i in range(len(conditions))]
            panel.bar(xs, [100 * s[0] for s in stats], width, color=colour, label=label, alpha=0.85,
                      yerr=[[100 * s[1] for s in stats], [100 * s[2] for s in stats]], capsize=3,
                      error_kw={"ecolor": INK, "elinewidth": 0.8})
            for x, c, s in zip(xs, conditions, stats):
                k, n = rates.get((scenario, c, gate), (0, 0))
                panel.annotate(f"{k}/{n}", (x, 100 * (s[0] + s[2])), xytext=(0, 2), textcoords="offset points",
                               ha="center", fontsize=7.5)
        panel.set_xticks(range(len(conditions)), conditions)
        panel.set_title(title, fontsize=10)
        panel.set_ylabel("% of gate runs failing as slower")
        panel.grid(axis="y")
    det.set_ylim(0, 115)
    fa.set_ylim(0, max(10.0, fa.get_ylim()[1]))
    det.legend(fontsize=8, loc="center right")
    return _svg(fig, "gate_rates"), (
        "How often the gate fails a run as slower: when the kernel really is 1.3x slower (left, higher is better) "
        "and when nothing changed (right, lower is better), on a quiet machine and with one or two busy "
        "neighbours; error bars are 95 % Wilson intervals, labels the counts. Generated from "
        f"<code>benchmarks/results/{GATE_FILE}</code> when the site was built.")


FIGURES: dict[str, Callable[[Path], tuple[str, str]]] = {
    "gate_flow": figure_gate_flow,
    "architecture": figure_architecture,
    "strategy_scores": figure_strategy_scores,
    "time_to_solution": figure_time_to_solution,
    "gate_rates": figure_gate_rates,
}
_CACHE: dict[tuple[str, str], str] = {}


def render(name: str, results: Path = RESULTS) -> str:
    """The ``<figure>`` HTML (inline SVG and caption) of figure ``name``."""
    if name not in FIGURES:
        raise FigureError(f"unknown figure {name!r}; known: {', '.join(sorted(FIGURES))}")
    key = (name, str(results))
    if key not in _CACHE:
        try:
            svg, caption = FIGURES[name](results)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, StopIteration) as exc:
            raise FigureError(f"figure {name!r}: the results lack what it reads ({type(exc).__name__}: {exc})") from None
        _CACHE[key] = (f'<figure class="autotune-figure" id="figure-{name.replace("_", "-")}">\n{svg}\n'
                       f"<figcaption>{caption}</figcaption>\n</figure>")
    return _CACHE[key]


def replace_markers(markdown: str, results: Path = RESULTS) -> str:
    return MARKER.sub(lambda m: render(m.group("name"), results), markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:  # MkDocs hook
    if "<!-- figure" not in markdown:
        return markdown
    try:
        return replace_markers(markdown)
    except FigureError as exc:
        from mkdocs.exceptions import PluginError

        raise PluginError(f"{page.file.src_path}: {exc}") from None
