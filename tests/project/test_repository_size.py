"""The tracked tree stays small enough to send to a GPU machine (64 MiB at most travels) and to clone quickly.

The anchor caches of the benchmarks (77 MB) once made it 87.6 MB; they now live outside the
repository (``benchmarks/README.md``, "Anchor caches"). Skipped outside a git checkout.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LIMIT_BYTES = 20 * 1000 * 1000  # 20 MB for the whole tracked tree
FILE_LIMIT_BYTES = 1000 * 1000  # no single tracked file over 1 MB


def tracked_sizes(root: Path) -> dict[str, int]:
    """Size in bytes of every file ``git ls-files`` lists under ``root`` (files deleted in the work tree count 0)."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    proc = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True, timeout=60)
    if proc.returncode != 0:
        pytest.skip(f"not a git checkout: {proc.stderr.decode(errors='replace').strip()[:200]}")
    sizes = {}
    for name in proc.stdout.decode(errors="surrogateescape").split("\0"):
        if name:
            path = root / name
            sizes[name] = path.stat().st_size if path.is_file() and not path.is_symlink() else 0
    return sizes


def over_budget(sizes: dict[str, int], limit: int = LIMIT_BYTES) -> str | None:
    """None when the tree fits ``limit``, else a message naming the total and the largest files."""
    total = sum(sizes.values())
    if total <= limit:
        return None
    largest = sorted(sizes.items(), key=lambda kv: -kv[1])[:5]
    names = ", ".join(f"{n} ({s / 1e6:.1f} MB)" for n, s in largest)
    return f"tracked files add up to {total / 1e6:.1f} MB, over {limit / 1e6:.0f} MB; largest: {names}"


def test_tracked_tree_under_20_mb():
    message = over_budget(tracked_sizes(REPO))
    assert message is None, message


def test_no_tracked_file_over_1_mb():
    big = {n: s for n, s in tracked_sizes(REPO).items() if s > FILE_LIMIT_BYTES}
    assert not big, f"tracked files over 1 MB: {big}"


def test_anchor_caches_are_not_tracked():
    sizes = tracked_sizes(REPO)
    assert not [n for n in sizes if n.endswith("anchor_cache.jsonl")]


def test_the_budget_check_fails_past_the_limit():
    assert over_budget({"a": 10, "b": 5}, limit=20) is None
    message = over_budget({"big.jsonl": 52_600_000, "small.py": 10}, limit=LIMIT_BYTES)
    assert message is not None and "big.jsonl (52.6 MB)" in message and "52.6 MB" in message


def test_skips_outside_a_git_checkout(tmp_path):
    with pytest.raises(pytest.skip.Exception):
        tracked_sizes(tmp_path)
