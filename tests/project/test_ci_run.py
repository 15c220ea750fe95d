""".ci/run provides a CPU OpenCL device that builds: after installing it asks ``pytest-autotune
devices``; only when no OpenCL device builds does it install Debian's PoCL and check again. Run here with
stand-ins for python, pytest-autotune, apt-get and id (nothing is installed)."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

CI_RUN = Path(__file__).resolve().parents[2] / ".ci" / "run"
pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def _stub(directory: Path, name: str, body: str) -> None:
    path = directory / name
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(0o755)


def run_ci(tmp_path: Path, devices_exit_codes: list[int], uid: int = 0) -> tuple[int, list[str]]:
    (tmp_path / ".ci").mkdir()
    shutil.copy(CI_RUN, tmp_path / ".ci" / "run")
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    log = tmp_path / "log"
    codes = " ".join(str(c) for c in devices_exit_codes)
    _stub(stubs, "python", f'echo "python $*" >> {log}\n')
    _stub(stubs, "apt-get", f'echo "apt-get $*" >> {log}\n')
    _stub(stubs, "id", f'echo {uid}\n')
    _stub(stubs, "pytest-autotune", f'n=$(grep -c "^pytest-autotune" {log} 2>/dev/null || true)\n'
                                    f'echo "pytest-autotune $*" >> {log}\ncodes=({codes})\nexit ${{codes[$n]}}\n')
    env = {**os.environ, "PATH": f"{stubs}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", str(tmp_path / ".ci" / "run")], env=env, capture_output=True, text=True,
                          timeout=60)
    return done.returncode, log.read_text().splitlines() if log.exists() else []


def test_a_working_device_installs_nothing(tmp_path: Path) -> None:
    code, log = run_ci(tmp_path, [0])
    assert code == 0
    assert log == ['python -m pip install -q -e .[test]', "pytest-autotune devices", "python -m pytest -q -n 2 --dist worksteal tests"]


def test_no_device_that_builds_installs_debians_pocl_and_checks_again(tmp_path: Path) -> None:
    code, log = run_ci(tmp_path, [1, 0])
    assert code == 0
    assert log == ['python -m pip install -q -e .[test]', "pytest-autotune devices", "apt-get update -qq",
                   "apt-get install -y -qq pocl-opencl-icd", "pytest-autotune devices",
                   "python -m pytest -q -n 2 --dist worksteal tests"]


def test_still_none_or_not_root_fails_before_the_tests(tmp_path: Path) -> None:
    code, log = run_ci(tmp_path, [1, 1])
    assert code != 0 and log[-1] == "pytest-autotune devices" and "python -m pytest -q -n 2 --dist worksteal tests" not in log
    user = tmp_path / "user"
    user.mkdir()
    code, log = run_ci(user, [1], uid=1000)
    assert code == 1 and not any(line.startswith("apt-get") for line in log)
