"""benchmarks/bench_searchspace_ab.py: two revisions of the engine timed on the same space, sizes compared."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import bench_searchspace_ab as ab  # noqa: E402

SPACES = Path(os.environ.get("AUTOTUNE_SPACES", ROOT.parent / "shared" / "data" / "spaces"))


def test_compares_a_revision_with_the_working_tree(tmp_path, capsys):
    if not (SPACES / "t1" / "convolution_milo.json").exists():
        pytest.skip(f"T1 spaces not found at {SPACES}")
    if shutil.which("git") is None or subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"],
                                                     capture_output=True).returncode != 0:
        pytest.skip("not a git checkout")
    out = tmp_path / "ab.json"
    assert ab.main(["--before", "HEAD", "--rounds", "1", "--repeat", "1", "--only", "convolution_milo",
                    "--spaces", str(SPACES), "--json", str(out)]) == 0
    result = json.loads(out.read_text())["spaces"]["convolution_milo"]
    assert result["valid"] == [4362] and result["same_valid_count"]
    assert result["before_cpu_s"] > 0 and result["after_cpu_s"] > 0
    assert "convolution_milo" in capsys.readouterr().out
