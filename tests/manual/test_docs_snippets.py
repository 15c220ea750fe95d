"""Every code block of the manual that is marked to run is run (docs/**/*.md).

Conventions (HTML comments, invisible in the rendered site), each on the line(s) right before a fenced block:

* ``<!-- file: PATH -->``: the block is written to PATH in the page's working folder.
* ``<!-- run -->``: the ```python block runs as a script there (``python snippet.py``).
* ``<!-- run: pytest ARGS -->``: the ```python block is a test module (named by its first line,
  ``# test_x.py``, else ``test_snippet.py``) run with ``python -m pytest MODULE ARGS`` there; several
  ``run: pytest`` lines run one after the other (tune, then gate).

Each page gets one fresh working folder, shared by its blocks in page order, so a later block can use
what an earlier one wrote (a lockfile). Every command must exit 0.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
BLOCK = re.compile(r"((?:^<!--\s*(?:run|file)\b[^>]*-->\s*\n)+)^```[\w+-]*\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)
DIRECTIVE = re.compile(r"<!--\s*(run|file)\s*(?::\s*(.*?))?\s*-->")


def snippets(text: str) -> list[tuple[str, str, str]]:
    """(kind, argument, code) per directive, in page order: kind is "file", "run" or "pytest"."""
    out = []
    for match in BLOCK.finditer(text):
        code = match.group(2)
        for kind, arg in DIRECTIVE.findall(match.group(1)):
            arg = (arg or "").strip()
            if kind == "run" and arg.startswith("pytest"):
                out.append(("pytest", arg[len("pytest"):].strip(), code))
            elif kind == "run" and arg:
                raise ValueError(f"unknown run directive {arg!r}")
            else:
                out.append((kind, arg, code))
    return out


PAGES = sorted(p for p in DOCS.rglob("*.md") if snippets(p.read_text(encoding="utf-8")))


def test_there_are_snippets_to_run() -> None:
    kinds = {k for p in PAGES for k, _, _ in snippets(p.read_text(encoding="utf-8"))}
    assert {"file", "run", "pytest"} <= kinds, kinds


def test_a_directive_always_reaches_its_block() -> None:
    """A ``<!-- run -->`` separated from its block by prose would silently not run."""
    for page in DOCS.rglob("*.md"):
        text = page.read_text(encoding="utf-8")
        found = sum(len(DIRECTIVE.findall(m.group(1))) for m in BLOCK.finditer(text))
        assert found == len(DIRECTIVE.findall(text)), f"{page}: a run/file comment not right before a fenced block"


def _run(cmd: list[str], cwd: Path, page: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "PYTEST_AUTOTUNE_CACHE_DIR": str(cwd / ".autotune-cache"), "PYTEST_ADDOPTS": ""}
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (f"{page.relative_to(ROOT)}: {' '.join(cmd)} exited {proc.returncode}\n"
                                  f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(DOCS).as_posix() for p in PAGES])
def test_page_snippets_run(page: Path, tmp_path: Path) -> None:
    for i, (kind, arg, code) in enumerate(snippets(page.read_text(encoding="utf-8"))):
        if kind == "file":
            target = tmp_path / arg
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(code)
        elif kind == "run":
            script = tmp_path / f"snippet_{i}.py"
            script.write_text(code)
            _run([sys.executable, script.name], tmp_path, page)
        else:
            first = code.splitlines()[0] if code else ""
            name = first[1:].strip() if re.fullmatch(r"#\s*test_\w+\.py\s*", first) else "test_snippet.py"
            (tmp_path / name).write_text(code)
            _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", name, *shlex.split(arg)],
                 tmp_path, page)
