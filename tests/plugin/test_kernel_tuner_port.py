"""What a project ported from Kernel Tuner relies on, end to end through the plugin (pytester inner sessions):
kernel paths relative to the test file, constant memory on the CUDA stand-in, the implicit thread-block limit."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from pytest_autotune.backends.nvrtc import nvrtc_unavailable_reason

from tests.plugin import test_plugin_e2e as e2e
from tests.plugin.test_plugin_e2e import INNER_ARGS, WORK_C, needs_gcc

c_cache, project = e2e.c_cache, e2e.project  # the e2e tests' fixtures: a shared C compile cache, a wide terminal
NVRTC_MISSING = nvrtc_unavailable_reason()


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


BLOCKS_TEST = '''
import numpy as np
import pytest

N = 4096


@pytest.mark.tune(params={"tx": [16, 32, 64], "ty": [16, 32, 64]}, strategy="brute_force"LIMIT)
def test_blocks(autotune):
    a, b = np.ones(N, np.float32), np.ones(N, np.float32)
    autotune.kernel("vadd.cu", "vadd", N, [np.zeros(N, np.float32), a, b, np.int32(N)],
                    expected=[a + b, None, None, None], block_size_names=["tx", "ty"], isolate=False)
'''


@pytest.mark.parametrize("limit", [True, False], ids=["limit", "no-limit"])
def test_the_thread_block_limit_is_kernel_tuners_and_named_in_the_output(project: pytest.Pytester,
                                                                         monkeypatch: pytest.MonkeyPatch,
                                                                         limit: bool) -> None:
    """Kernel Tuner drops blocks of more than the device's max_threads (1024 on the stand-in's H100) from the
    space, over the names ``block_size_names`` gives; the run says how many; ``block_limit=False`` keeps them
    (and the device refuses each at launch)."""
    import fake_cuda
    from tests.backends.test_runner_cuda import VADD

    state, _ = fake_cuda.install_cupy(monkeypatch)
    project.makefile(".cu", vadd=VADD.replace("#if STATIC_SMEM", "#if 0").replace("block_size_x", "tx"))
    project.makepyfile(test_blocks=BLOCKS_TEST.replace("LIMIT", "" if limit else ", block_limit=False"))
    result, rows = e2e.run_report(project, "--autotune")
    result.assert_outcomes(passed=1)
    said = "*test_blocks.py::test_blocks::vadd: thread-block limit removed 3 of 9 configurations (tx * ty > 1024)*"
    row = rows["test_blocks.py::test_blocks::vadd"]
    blocks = {launch[1] for launch in state.launches if launch[1][0] in (16, 32, 64)}
    if limit:
        result.stdout.fnmatch_lines([said])
        assert row["evaluations"] == 6 and not row["failures"], row
    else:
        result.stdout.no_fnmatch_line(said)
        assert row["evaluations"] == 9 and row["failures"] == {"invalid": 3}, row
    assert blocks == {(tx, ty, 1) for tx in (16, 32, 64) for ty in (16, 32, 64) if tx * ty <= 1024}


# ---------------------------------------------------------------------------------------------
# Kernel Tuner's convolution with cmem_args, as docs/how-to/from-kernel-tuner.md ports it
# ---------------------------------------------------------------------------------------------
PAGE = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "from-kernel-tuner.md"
KERNEL = Path(__file__).resolve().parents[1] / "data" / "kernel_tuner" / "convolution.cu"


def ported_test(size: int) -> str:
    """The page's test module, on a ``size`` x ``size`` image (the page's 4096 x 4096 is a GPU's work)."""
    block = re.search(r"^```python\n(# test_convolution\.py\n.*?)^```$", PAGE.read_text(), re.M | re.S)
    assert block, f"{PAGE}: no test_convolution.py block"
    code = block.group(1)
    assert code.count("problem_size = (4096, 4096)") == 1 and code.count('runner="cupy")') == 1
    return code.replace("problem_size = (4096, 4096)", f"problem_size = ({size}, {size})")


def test_kernel_tuners_convolution_tunes_with_its_filter_in_constant_memory(project: pytest.Pytester,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The page's port, through the plugin on the CUDA stand-in (in this process: ``isolate=False``), verified
    against numpy's convolution: a filter that did not reach ``d_filter`` would give zeros and fail every
    configuration. The lock entry's problem names the constant array; plain pytest then gates the winner."""
    import fake_cuda

    state, _ = fake_cuda.install_cupy(monkeypatch)
    shutil.copy(KERNEL, project.path / "convolution.cu")
    project.makepyfile(test_convolution=ported_test(64).replace('runner="cupy")', 'runner="cupy", isolate=False)'))
    result = run(project, "--autotune", "--autotune-budget=6", "--autotune-seed=1")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_convolution.py::test_convolution::convolution_kernel: thread-block limit "
                                 "removed 132 of 1112 configurations (block_size_x * block_size_y > 1024)*"])
    lock = json.loads(next((project.path / "autotune.lock").glob("*.json")).read_text())
    entry = lock["entries"]["test_convolution.py::test_convolution::convolution_kernel"]
    assert entry["problem"]["constant_memory"] == {"d_filter": {"shape": [289], "dtype": "float32"}}
    assert entry["params"]["block_size_x"] * entry["params"]["block_size_y"] <= 1024
    assert state.launches and all(b[0] * b[1] <= 1024 for _, b, _ in state.launches)
    run(project).assert_outcomes(passed=1)


@pytest.mark.skipif(bool(NVRTC_MISSING), reason=f"--autotune-compile needs NVRTC: {NVRTC_MISSING}")
def test_kernel_tuners_convolution_compiles_for_sm_90(project: pytest.Pytester) -> None:
    """The same port, unchanged (4096 x 4096), compiled with the real NVRTC for sm_90: a seeded sample of the
    space the restrictions and the thread-block limit allow, without a GPU."""
    shutil.copy(KERNEL, project.path / "convolution.cu")
    project.makepyfile(test_convolution=ported_test(4096))
    result = run(project, "--autotune-compile=sm_90", "--autotune-compile-sample=3", "-p", "no:xdist")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_convolution.py::test_convolution*convolution_kernel*compile*"])


def test_a_constant_symbol_the_kernel_lacks_fails_the_test_naming_it(project: pytest.Pytester,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Found only once the kernel is compiled, yet reported as the test's error: the symbol, the library's
    words and a declaration to add, no plugin frames."""
    import fake_cuda

    fake_cuda.install_cupy(monkeypatch)
    shutil.copy(KERNEL, project.path / "convolution.cu")
    code = ported_test(32).replace('runner="cupy")', 'runner="cupy", isolate=False)')
    project.makepyfile(test_convolution=code.replace('{"d_filter": filter}', '{"d_filters": filter}'))
    result = run(project, "--autotune", "--autotune-budget=2")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*autotune: test_convolution.py::test_convolution::convolution_kernel: constant_memory[[]'d_filters'[]]: the "
        "compiled module has no __constant__ symbol 'd_filters' (CUDADriverError: CUDA_ERROR_NOT_FOUND: named "
        "symbol not found); declare it at file scope, e.g. __constant__ float d_filters[[]289[]];",
    ])
    report = result.stdout.str().split("short test summary info")[0]
    assert "pytest_autotune/" not in report and "run.py:" not in report
