"""The manual builds: ``mkdocs build --strict`` (a broken link, a missing page or anchor, a page left out of
the nav, an unknown or unreadable benchmark table all fail), and the table hook's errors are errors.

MkDocs is in the ``test`` extra, so these tests fail rather than skip when it is missing: CI installs
that extra and must build the site. ``PYTEST_AUTOTUNE_SKIP_DOCS=1`` skips them where the extra is
deliberately not installed.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("docs_hooks_tables", ROOT / "docs" / "hooks" / "tables.py")
tables = importlib.util.module_from_spec(_spec)  # docs/hooks/tables.py, the MkDocs hook
_spec.loader.exec_module(tables)

if os.environ.get("PYTEST_AUTOTUNE_SKIP_DOCS") == "1":
    pytest.skip("PYTEST_AUTOTUNE_SKIP_DOCS=1", allow_module_level=True)


def test_mkdocs_is_installed() -> None:
    missing = [m for m in ("mkdocs", "material") if importlib.util.find_spec(m) is None]
    assert not missing, (f"{missing} not installed: the docs tests need the test extra "
                         f"(python -m pip install -e '.[test]'), or PYTEST_AUTOTUNE_SKIP_DOCS=1")


def test_site_builds_strictly(tmp_path: Path) -> None:
    site = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    auto = (site / "explanation" / "auto.html").read_text(encoding="utf-8")  # use_directory_urls: false (offline)
    assert "<!-- table" not in auto and "Generated from <code>benchmarks/results/strategies.json</code>" in auto


def test_every_table_marker_renders() -> None:
    for page in (ROOT / "docs").rglob("*.md"):
        text = page.read_text(encoding="utf-8")
        out = tables.replace_markers(text)
        assert "<!-- table" not in out, f"{page}: a table marker the hook did not recognise"


def test_the_strategy_table_is_the_results_file() -> None:
    table = tables.render("strategies")
    data = __import__("json").loads((tables.RESULTS / "strategies.json").read_text())
    auto = data["aggregate"]["measured"]["auto"]
    assert f"{auto['mean']:.3f} ± {auto['se']:.3f}" in table
    assert table.splitlines()[2].startswith("| **`auto`**")  # best first


@pytest.mark.parametrize("marker, message", [
    ("<!-- table: nonsense -->", "unknown table view 'nonsense'"),
    ("<!-- table: strategies no_such_file.json -->", "not found"),
    ("<!-- table: strategies compile_pool.json -->", "lacks what the view reads"),
])
def test_a_bad_marker_fails(marker: str, message: str) -> None:
    with pytest.raises(tables.TableError, match=message):
        tables.replace_markers(f"text\n{marker}\nmore")


def test_a_bad_marker_fails_the_build(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    (docs / "hooks").mkdir(parents=True)
    (docs / "hooks" / "tables.py").write_text((ROOT / "docs" / "hooks" / "tables.py").read_text())
    (docs / "index.md").write_text("# x\n\n<!-- table: nonsense -->\n")
    (tmp_path / "mkdocs.yml").write_text("site_name: t\nhooks:\n  - docs/hooks/tables.py\nexclude_docs: |\n  hooks/\n")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "s")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "unknown table view 'nonsense'" in proc.stdout + proc.stderr


def test_the_budget_sweep_tables_are_the_results_file() -> None:
    data = __import__("json").loads((tables.RESULTS / "bench_strategies_issue42.json").read_text())
    loo = tables.render("sweep_loo")
    for b in data["meta"]["budgets"]:
        gen = data["budget_sweep"][b]["generalisation"]
        assert f"{gen['family']['loo_mean']['selected']:.3f}" in loo
        assert f"{gen['gpu']['loo_mean']['selected']:.3f}" in loo
    budgets = tables.render("sweep_budgets")
    auto_b = data["budget_sweep"][data["meta"]["budgets"][-1]]["aggregate"]["all"]["auto"]
    assert f"{auto_b['mean']:.3f} ± {auto_b['se']:.3f}" in budgets
    families = tables.render("sweep_families")
    assert all(f"{f} (" in families for f in ("convolution", "gemm", "pnpoly"))
