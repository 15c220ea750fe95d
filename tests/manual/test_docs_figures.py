"""The manual's figures, page checks and offline use.

* Figures are generated from ``benchmarks/results/`` by ``docs/hooks/figures.py`` at build time (inline
  SVG in the theme's text colour); each page that should show one shows it.
* Every code block has a language (rendered: ``language-X``; source: every opening fence names one), and no
  list directly follows a paragraph line (Markdown renders such a list as part of the paragraph).
* Offline: no web fonts, no script or stylesheet from the network, links to ``.html`` files, the offline
  search index; where Chromium is installed, a page opened from ``file://`` finds search results.

Skipped with the other docs tests under ``PYTEST_AUTOTUNE_SKIP_DOCS=1``.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
_spec = importlib.util.spec_from_file_location("docs_hooks_figures", DOCS / "hooks" / "figures.py")
figures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(figures)

if os.environ.get("PYTEST_AUTOTUNE_SKIP_DOCS") == "1":
    pytest.skip("PYTEST_AUTOTUNE_SKIP_DOCS=1", allow_module_level=True)

# page (built path) -> the figures it must show
PAGES_WITH_FIGURES = {
    "explanation/gate.html": ["gate_flow", "gate_rates"],
    "explanation/architecture.html": ["architecture"],
    "explanation/auto.html": ["strategy_scores"],
    "explanation/pipelining.html": ["time_to_solution"],
}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def _pages(site: Path) -> list[Path]:
    return sorted(p for p in site.rglob("*.html") if p.name != "404.html")


def test_every_figure_renders_as_theme_coloured_svg() -> None:
    for name in figures.FIGURES:
        html = figures.render(name)
        assert html.startswith(f'<figure class="autotune-figure" id="figure-{name.replace("_", "-")}">'), name
        assert html.count("<svg") >= 1 and "<figcaption>" in html, name
        assert "currentColor" in html and figures.INK not in html.lower() and figures.INK not in html, name
        assert "<image" not in html, f"{name}: a raster image inside the SVG"
        assert "\n\n" not in html, f"{name}: a blank line would end the raw HTML block in Markdown"


def test_charts_come_from_the_results(tmp_path: Path) -> None:
    # a results folder without the files: the build fails naming the file
    with pytest.raises(figures.FigureError, match="not found"):
        figures.render("strategy_scores", results=tmp_path)
    with pytest.raises(figures.FigureError, match="unknown figure"):
        figures.replace_markers("<!-- figure: nonsense -->")
    # the gate's counts in the figure are the merged results file's
    data = __import__("json").loads((figures.RESULTS / figures.GATE_FILE).read_text())
    rates = figures.gate_rates(data)
    k, n = rates[("unchanged", "quiet", "new")]
    assert f">{k}/{n}<" in figures.render("gate_rates").replace(" ", "")


@pytest.mark.parametrize("page, names", sorted(PAGES_WITH_FIGURES.items()))
def test_pages_show_their_figures(site: Path, page: str, names: list[str]) -> None:
    html = (site / page).read_text(encoding="utf-8")
    assert "<!-- figure" not in html
    for name in names:
        i = html.find(f'id="figure-{name.replace("_", "-")}"')
        assert i >= 0, f"{page}: figure {name} missing"
        assert "<svg" in html[i:i + 3000], f"{page}: figure {name} has no inline SVG"


def test_every_rendered_code_block_has_a_language(site: Path) -> None:
    bad = []
    for page in _pages(site):
        html = page.read_text(encoding="utf-8")
        pres = html.count("<pre")
        labelled = len(re.findall(r'<div class="language-[\w+-]+ highlight"><pre', html))
        if pres != labelled:
            bad.append(f"{page.relative_to(site)}: {pres - labelled} of {pres}")
    assert not bad, f"code blocks without a language: {bad}"


def _fences(text: str) -> list[tuple[int, str]]:
    """(line number, opening fence line) of every fenced block, nested fences (````) respected."""
    out, open_fence = [], None
    for i, line in enumerate(text.splitlines(), 1):
        m = re.match(r"\s*(`{3,}|~{3,})(.*)$", line)
        if not m:
            continue
        if open_fence is None:
            open_fence = m.group(1)
            out.append((i, line))
        elif m.group(1).startswith(open_fence) and not m.group(2).strip():
            open_fence = None
    return out


def test_every_fenced_block_names_a_language() -> None:
    bad = [f"{p.relative_to(ROOT)}:{i}" for p in DOCS.rglob("*.md") for i, line in _fences(p.read_text())
           if not re.match(r"\s*(`{3,}|~{3,})\s*[\w+-]+", line)]
    assert not bad, f"fenced blocks without a language: {bad}"


LIST_ITEM = re.compile(r"^(\s*)([-*+]|\d+[.)])\s+\S")


def lists_glued_to_paragraphs(text: str) -> list[int]:
    """Line numbers of list items that directly follow a paragraph line (no blank line between): Markdown
    renders them as part of the paragraph (how-to/warm-start.md did)."""
    bad, in_fence, in_list, prev = [], False, False, ""
    for i, line in enumerate(text.splitlines(), 1):
        if re.match(r"\s*(```|~~~)", line):
            in_fence = not in_fence
            prev = ""
            continue
        if in_fence:
            continue
        m = LIST_ITEM.match(line)
        # a paragraph line: not a list item, nor the continuation of one, nor a table, HTML, heading or admonition
        prose = prev.strip() and not in_list and not prev.lstrip().startswith(("|", "<", "#", "!!!", "???"))
        if m and prose:
            bad.append(i)
        if m:
            in_list = True
        elif line.strip() and not line[0].isspace() and not prev.strip():
            in_list = False  # text at the margin after a blank line ends the list (a lazy continuation does not)
        prev = line
    return bad


def test_the_check_catches_a_list_glued_to_a_paragraph() -> None:
    assert lists_glued_to_paragraphs("Text:\n- one\n- two\n") == [2]
    assert lists_glued_to_paragraphs("Text:\n\n- one\n- two\n  continued\n") == []
    assert lists_glued_to_paragraphs("- item\n  more words\n  - nested\n") == []
    assert lists_glued_to_paragraphs("- item\nlazy continuation\n- next\n\nText\n- glued\n") == [6]


def test_no_list_renders_as_a_paragraph() -> None:
    bad = [f"{p.relative_to(ROOT)}:{n}" for p in DOCS.rglob("*.md") for n in lists_glued_to_paragraphs(p.read_text())]
    assert not bad, f"a list right after a paragraph line (add a blank line before it): {bad}"


def test_the_built_site_fetches_nothing(site: Path) -> None:
    remote = re.compile(r"""<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)=["']https?://""", re.I)
    for page in _pages(site):
        html = page.read_text(encoding="utf-8")
        assert "fonts.googleapis" not in html and "fonts.gstatic" not in html, page
        assert not remote.search(html), f"{page.relative_to(site)}: {remote.search(html).group(0)}"
    css = "".join(p.read_text(encoding="utf-8", errors="replace") for p in (site / "assets").rglob("*.css"))
    assert "fonts.googleapis" not in css
    assert (site / "search" / "search_index.js").is_file()  # the offline plugin's index, loadable from file://


def test_links_point_at_files_not_folders(site: Path) -> None:
    """From ``file://`` a link to a folder shows a directory listing: every internal link names a file."""
    bad = []
    for page in _pages(site):
        for href in re.findall(r'<a\b[^>]*href="([^"#?]+)', page.read_text(encoding="utf-8")):
            if not re.match(r"[a-z]+:", href) and (href.endswith("/") or href in (".", "..")):
                bad.append(f"{page.relative_to(site)} -> {href}")
    assert not bad, bad[:10]


CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium to open the site from file://")
def test_search_works_from_file_urls(site: Path) -> None:
    url = (site / "index.html").as_uri() + "?q=lockfile"
    proc = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=8000",
                           "--dump-dom", url], capture_output=True, text=True, timeout=90)
    assert re.search(r"md-search-result__meta\">\d+ matching documents", proc.stdout), proc.stdout[-2000:]
