"""What a project ported from Kernel Tuner relies on, end to end through the plugin (pytester inner sessions):
kernel paths relative to the test file, constant memory on the CUDA stand-in, the implicit thread-block limit."""
from __future__ import annotations

import pytest

from tests.plugin import test_plugin_e2e as e2e
from tests.plugin.test_plugin_e2e import INNER_ARGS, WORK_C, needs_gcc

c_cache, project = e2e.c_cache, e2e.project  # the e2e tests' fixtures: a shared C compile cache, a wide terminal


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest(*INNER_ARGS, *args)


NESTED_TEST = '''
import numpy as np
import pytest

N = 1 << 10


@pytest.mark.tune(params={"UNROLL": [1, 2]}, strategy="brute_force")
def test_work(autotune):
    a = np.linspace(0, 1, N, dtype=np.float32)
    out = np.zeros(N, dtype=np.float32)
    autotune.kernel(KERNEL, "work", N, [out, a, np.array([1], np.int32), np.int32(N)], expected=None)
'''


@needs_gcc
def test_kernel_paths_resolve_beside_the_test_file_then_in_the_rootdir(project: pytest.Pytester) -> None:
    """``kernels/work.c`` beside ``tests/gpu/test_work.py`` is found when pytest runs from the rootdir; a path
    relative to the rootdir still works; a missing file names both places looked at."""
    tests = project.mkpydir("tests")
    gpu = tests / "gpu"
    gpu.mkdir()
    (gpu / "kernels").mkdir()
    (gpu / "kernels" / "work.c").write_text(WORK_C)
    (gpu / "test_beside.py").write_text(NESTED_TEST.replace("KERNEL", '"kernels/work.c"'))
    (project.path / "shared").mkdir()
    (project.path / "shared" / "work.c").write_text(WORK_C)
    (gpu / "test_rootdir.py").write_text(NESTED_TEST.replace("KERNEL", '"shared/work.c"'))
    (gpu / "test_missing.py").write_text(NESTED_TEST.replace("KERNEL", '"kernels/gone.c"'))
    result = run(project, "--autotune")
    result.assert_outcomes(passed=2, failed=1)
    gpu_folder = gpu.resolve()
    result.stdout.fnmatch_lines([
        f"*autotune.kernel('work'): kernel source file 'kernels/gone.c' does not exist: looked for "
        f"{gpu_folder}/kernels/gone.c (beside the test file) and {project.path.resolve()}/kernels/gone.c "
        "(in the rootdir)",
        "*test_missing.py:12: Failed",
    ])
