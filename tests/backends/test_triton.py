"""The triton runner through the plugin (pytester inner sessions) and its pieces.

Kernels are written into the pytester directory, never into the repository: a kernel written elsewhere tunes,
verifies, locks and gates. Without a GPU they run in Triton's interpreter (the plugin sets
TRITON_INTERPRET=1 at start-up); sizes and spaces are tiny because the interpreter runs every program of the
grid in Python. The tests marked ``gpu`` need a CUDA device with a GPU build of torch.
"""
from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
from triton_support import expected_lockfile, interpreter, require_triton

require_triton()

import triton  # noqa: E402  (after the check: fail, not error, where the test extra should have installed it)

for _name in ("multiprocessing.heap", "multiprocessing.sharedctypes", "scipy.stats", "torch",
              "pytest_autotune.backends.triton_runner", "pytest_autotune.lock.triton_config"):
    importlib.import_module(_name)  # one copy across the inner sessions pytester runs

KERNELS = '''
import triton
import triton.language as tl


@triton.jit
def add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def wrong_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n - 3  # drops the last three elements
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def spin_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    if BLOCK == 64:  # this configuration never ends (in the interpreter: a Python loop)
        i = 0
        while i >= 0:
            i += 1
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def keep_small(configs, named_args, **kwargs):
    return [c for c in configs if c.kwargs["BLOCK"] <= 64]


@triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=w) for b in (16, 32, 64, 128) for w in (1, 2)],
                 key=["n"], reset_to_zero=["out_ptr"], prune_configs_by={"early_config_prune": keep_small})
@triton.jit
def tuned_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.atomic_add(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)
'''

ADD_TEST = '''
import numpy as np
import pytest
import triton

from kernels_tri import add

N = 100
FAST = {"warmup": 0, "min_iterations": 3, "max_iterations": 3}


# interpreter timings of a shared CPU: the tolerance keeps this about the plumbing, not the noise
@pytest.mark.tune(params={"BLOCK": [32, 64], "num_warps": [1, 3]}, strategy="brute_force", tolerance=5.0,
                  measure=FAST)
def test_add(autotune):
    x, y = np.linspace(0, 1, N, dtype=np.float32), np.linspace(1, 2, N, dtype=np.float32)
    out = np.zeros(N, dtype=np.float32)
    result = autotune.triton(add, lambda meta: (triton.cdiv(N, meta["BLOCK"]),), [x, y, out, N],
                             expected=[None, None, x + y, None])
    assert result.params["num_warps"] == 1
'''


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("COLUMNS", "400")  # a wide terminal: the summary keeps whole test ids and messages
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(kernels_tri=KERNELS)
    return pytester


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-rs", "-p", "no:unraisableexception", "-p", "no:hypothesispytest", *args)


def the_lockfile(pytester: pytest.Pytester) -> tuple[Path, dict]:
    files = sorted((pytester.path / "autotune.lock").glob("*.json"))
    assert [f.name for f in files] == [expected_lockfile()]
    return files[0], json.loads(files[0].read_text())


def test_triton_kernel_tunes_verifies_locks_gates_and_ships(project: pytest.Pytester) -> None:
    project.makepyfile(test_add=ADD_TEST)
    result = run(project, "--autotune")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*num_warps=3 is not a power of two*"])  # invalid, recorded, not a crash
    path, lock = the_lockfile(project)
    entry = lock["entries"]["test_add.py::test_add::add"]
    assert entry["runner"] == "triton" and entry["params"]["num_warps"] == 1
    assert entry["evaluations"]["failed"] == {"invalid": 2}
    assert {"triton", "torch"} <= set(entry["versions"])
    assert lock["device"]["kind"] == ("triton-interpreter" if interpreter() else "cuda")
    stored = path.parent / entry["source_file"]
    assert stored.suffix == ".py" and "def wrong_add" in stored.read_text()  # the kernel's module, for the A/B
    if interpreter():
        assert "machine" in entry  # CPU probes: the gate can tell another machine from a slower kernel

    gate = run(project)
    gate.assert_outcomes(passed=1)
    gate.stdout.fnmatch_lines(["*test_add.py::test_add::add*gate*pass*"])

    # an edit of the kernel's module: the gate times the locked module against the edited one (A/B)
    kernels = project.path / "kernels_tri.py"
    kernels.write_text(kernels.read_text() + "\n# an unrelated edit\n")
    ab = run(project)
    ab.assert_outcomes(passed=1)
    ab.stdout.fnmatch_lines(["*A/B against the locked source*"])

    from pytest_autotune import locked_triton_config, locked_triton_configs

    config = locked_triton_config("add", lockdir=path.parent, device=path.stem)
    assert isinstance(config, triton.Config)
    assert config.kwargs == {"BLOCK": entry["params"]["BLOCK"]} and config.num_warps == 1
    assert len(locked_triton_configs("add", lockdir=path.parent, device=path.stem)) == 1
    from pytest_autotune.cli import main

    assert main(["export", str(path.parent), "--format", "json", "-o", str(project.path / "tuned.json")]) == 0
    exported = json.loads((project.path / "tuned.json").read_text())
    assert exported["devices"][path.stem]["kernels"]["add"][""]["params"] == entry["params"]


def test_wrong_kernel_fails_verification_with_element_counts(project: pytest.Pytester) -> None:
    project.makepyfile(test_wrong=ADD_TEST.replace("import add", "import wrong_add as add").replace(
        'params={"BLOCK": [32, 64], "num_warps": [1, 3]}', 'params={"BLOCK": [32, 64]}'))
    result = run(project, "--autotune")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*wrong_output*", "*3 of 100 elements differ*"])
    assert not list((project.path / "autotune.lock").glob("*.json"))


def test_shared_memory_beyond_the_limit_is_resources(project: pytest.Pytester) -> None:
    test = ADD_TEST.replace('[x, y, out, N],', '[x, y, out, N], shared_mem=lambda meta: meta["BLOCK"] * 1024,')
    project.makepyfile(test_smem=test.replace('"num_warps": [1, 3]', '"num_warps": [1]'))
    result = run(project, "--autotune")
    if interpreter():  # 64 KiB estimated for BLOCK=64 > 48 KiB; BLOCK=32 fits
        result.assert_outcomes(passed=1)
        result.stdout.fnmatch_lines(["*resources*", "*out of resource: shared memory, 65536 bytes*"])
        _, lock = the_lockfile(project)
        entry = lock["entries"]["test_smem.py::test_add::add"]
        assert entry["params"]["BLOCK"] == 32 and entry["evaluations"]["failed"] == {"resources": 1}
    else:  # on a GPU the estimate is not used: Triton's own OutOfResources decides (see the gpu test)
        result.assert_outcomes(passed=1)


def test_a_hanging_configuration_costs_that_configuration_only(project: pytest.Pytester) -> None:
    if not interpreter():
        pytest.skip("the endless loop is the interpreter's; a GPU compiler may end or remove it")
    test = ADD_TEST.replace("import add", "import spin_add as add").replace('"num_warps": [1, 3]', '"num_warps": [1]')
    project.makepyfile(test_spin=test.replace('"max_iterations": 3}', '"max_iterations": 3, "watchdog_s": 3}'))
    result = run(project, "--autotune")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*timeout*", "*no progress for 3 s*worker killed and restarted*"])
    _, lock = the_lockfile(project)
    entry = lock["entries"]["test_spin.py::test_add::spin_add"]
    assert entry["params"]["BLOCK"] == 32 and entry["evaluations"]["failed"] == {"timeout": 1}


MIGRATION_TEST = '''
import numpy as np
import pytest

from kernels_tri import tuned_add

N = 100


@pytest.mark.tune(params=tuned_add, strategy="brute_force", tolerance=5.0,
                  measure={"warmup": 0, "min_iterations": 2, "max_iterations": 2})
def test_tuned_add(autotune):
    x, y = np.linspace(0, 1, N, dtype=np.float32), np.linspace(1, 2, N, dtype=np.float32)
    out = np.full(N, 7.0, dtype=np.float32)  # reset_to_zero: the atomic adds start from zero every run
    result = autotune.triton(tuned_add, lambda meta: ((N + meta["BLOCK"] - 1) // meta["BLOCK"],), [x, y, out, N],
                             expected=[None, None, x + y, None])
    assert result.params["BLOCK"] <= 64
'''


def test_triton_autotune_kernel_migrates_in_one_line(project: pytest.Pytester) -> None:
    project.makepyfile(test_migrate=MIGRATION_TEST)
    result = run(project, "--autotune")
    result.assert_outcomes(passed=1)
    _, lock = the_lockfile(project)
    entry = lock["entries"]["test_migrate.py::test_tuned_add::tuned_add"]
    # 8 configurations, the 2 with BLOCK=128 pruned by early_config_prune, every other one measured
    assert entry["evaluations"]["space_size"] == 8 and entry["evaluations"]["total"] == 8
    assert entry["evaluations"]["failed"] == {"invalid": 2}
    assert entry["problem"]["size"] == [100]  # the key argument n: part of the problem identity
    assert set(entry["params"]) == {"BLOCK", "num_warps", "num_stages", "num_ctas"}


def test_marker_takes_a_config_list_as_params_and_refuses_a_config_hook() -> None:
    from pytest_autotune.lifecycle.settings import MarkerError, parse_marker

    configs = [triton.Config({"BLOCK": b}, num_warps=w) for b in (16, 32) for w in (1, 2)][:3]
    settings = parse_marker((), {"params": configs, "restrictions": ["BLOCK >= 16"]}, {})
    assert settings.params["BLOCK"] == [16, 32] and len(settings.restrictions) == 2
    hooked = [triton.Config({"BLOCK": 16}, pre_hook=lambda args: None)]
    with pytest.raises(MarkerError, match="argument 'params'.*has a pre_hook"):
        parse_marker((), {"params": hooked}, {})


def test_runner_in_process_with_torch_tensors_and_a_torch_reference(project: pytest.Pytester) -> None:
    import torch

    from pytest_autotune.results import FailureKind
    from pytest_autotune.backends.triton_runner import TritonRunner, TritonSpec

    project.syspathinsert()
    kernels = importlib.import_module("kernels_tri")
    n = 40
    x, y = torch.linspace(0, 1, n), torch.linspace(1, 2, n)
    spec = TritonSpec(kernels.add, (3,), [x, y, torch.zeros(n), n], tuned=["BLOCK", "num_warps"],
                      expected=[None, None, x + y, None], isolate=False)
    with TritonRunner(spec, isolate=False, measure={"warmup": 0, "min_iterations": 2, "max_iterations": 2}) as runner:
        good = runner.evaluate({"BLOCK": 16, "num_warps": 2})
        short = runner.evaluate({"BLOCK": 8, "num_warps": 2})  # a fixed grid of 3 x 8 covers 24 of 40
        too_wide = runner.evaluate({"BLOCK": 16, "num_warps": 64})
    assert good.ok and len(good.samples) == 2, good.detail
    assert short.failure is FailureKind.WRONG_OUTPUT and "16 of 40 elements differ" in short.detail
    assert too_wide.failure is FailureKind.INVALID and "beyond max_threads" in too_wide.detail


def test_early_config_prune_applies_to_a_space_of_fewer_names() -> None:
    from pytest_autotune.backends.triton_kernel import config_params
    from pytest_autotune.backends.triton_runner import kept_by_prune

    kept = [config_params(triton.Config({"BLOCK": b}, num_warps=4)) for b in (16, 32)]  # num_ctas, num_stages too
    assert kept_by_prune({"BLOCK": 32}, kept) and kept_by_prune({"BLOCK": 16, "num_warps": 4}, kept)
    assert not kept_by_prune({"BLOCK": 64}, kept) and not kept_by_prune({"BLOCK": 16, "num_warps": 8}, kept)
    assert kept_by_prune({"BLOCK": 64}, None)


def test_space_from_configs_allows_exactly_the_listed_points() -> None:
    from pytest_autotune.backends.triton_kernel import space_from_configs
    from pytest_autotune.space import SearchSpace

    configs = [triton.Config({"BLOCK": b, "K": k}, num_warps=w, num_stages=2)
               for b, k, w in [(16, 1, 1), (32, 1, 2), (64, 2, 4), (16, 2, 8)]]
    params, restriction = space_from_configs(configs)
    space = SearchSpace(params, [restriction])
    points = {(p["BLOCK"], p["K"], p["num_warps"]) for p in (space.get(i) for i in range(len(space)))}
    assert points == {(16, 1, 1), (32, 1, 2), (64, 2, 4), (16, 2, 8)}


def test_what_cannot_be_honoured_is_refused_with_the_reason(project: pytest.Pytester) -> None:
    from pytest_autotune.errors import SpecError
    from pytest_autotune.backends.triton_kernel import autotune_settings, check_param_names, kernel_info

    module = project.path / "kernels_tri.py"
    spec = importlib.util.spec_from_file_location("kernels_tri_units", module)
    kernels = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kernels)
    with pytest.raises(SpecError, match=rf"'n' is not tl.constexpr in add\(\).*Triton {triton.__version__}"):
        check_param_names(["BLOCK", "n"], kernel_info(kernels.add))
    with pytest.raises(SpecError, match=r"'threads'.*launch options num_warps, num_stages"):
        check_param_names(["threads"], kernel_info(kernels.add))
    hooked = triton.autotune(configs=[triton.Config({"BLOCK": 16})], key=["n"],
                             pre_hook=lambda kwargs, reset_only=False: None)(kernels.add)
    with pytest.raises(SpecError, match=r"pre_hook=/post_hook=\) is not supported"):
        autotune_settings(hooked)


def test_bad_params_fail_at_the_test_naming_the_parameter(project: pytest.Pytester) -> None:
    project.makepyfile(test_bad=ADD_TEST.replace('"num_warps": [1, 3]', '"n": [1, 3]'))
    result = run(project, "--autotune")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*autotune.triton('add'): parameter(s) 'n' cannot be tuned*"])
    assert "triton_runner.py" not in result.stdout.str()  # no plugin internals in the traceback


def test_plugin_sets_the_interpreter_when_no_gpu_is_present(pytester: pytest.Pytester,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_autotune.backends.triton_kernel import gpu_device_present

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    pytester.makeconftest("import os\nSEEN = os.environ.get('TRITON_INTERPRET')\n")
    pytester.makepyfile(test_env="import conftest\n\ndef test_env():\n    print('SEEN', conftest.SEEN)\n")
    result = pytester.runpytest_subprocess("-s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*SEEN None" if gpu_device_present() else "*SEEN 1"])


# --------------------------------------------------------------------------- GPU only
GPU_SMEM_TEST = '''
import numpy as np
import pytest
import torch
import triton
import triton.language as tl


@triton.jit
def tile_sum(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tile = tl.load(x_ptr + offs[:, None] * BLOCK + offs[None, :])
    tl.store(out_ptr + offs, tl.sum(tl.dot(tile, tile), axis=1))


@pytest.mark.tune(params={"BLOCK": [16, 512], "num_stages": [1]}, strategy="brute_force", tolerance=5.0,
                  measure={"warmup": 0, "min_iterations": 3, "max_iterations": 3})
def test_tile(autotune):
    x = torch.ones((512, 512), dtype=torch.float16)
    result = autotune.triton(tile_sum, (1,), [x, torch.zeros(512, dtype=torch.float16)], expected=None)
    assert result.params["BLOCK"] == 16
'''


@pytest.mark.gpu
def test_gpu_out_of_resources_is_recorded_and_timed_with_cuda_events(project: pytest.Pytester) -> None:
    if interpreter():
        pytest.skip("needs a CUDA GPU (Triton runs in its interpreter here)")
    project.makepyfile(test_gpu_smem=GPU_SMEM_TEST)
    result = run(project, "--autotune")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*resources*", "*out of resource: shared memory*"])
    _, lock = the_lockfile(project)
    entry = lock["entries"]["test_gpu_smem.py::test_tile::tile_sum"]
    assert lock["device"]["kind"] == "cuda" and entry["versions"]["cuda"]
    assert entry["evaluations"]["failed"] == {"resources": 1}
    assert 0 < entry["stats"]["median"] < 50  # CUDA events: milliseconds of one small launch


@pytest.mark.gpu
def test_gpu_compile_pool_warms_tritons_cache_so_the_device_stage_only_loads(project: pytest.Pytester) -> None:
    if interpreter():
        pytest.skip("needs a CUDA GPU (in the interpreter nothing is compiled, so there is no compile stage)")
    import numpy as np

    from pytest_autotune import tune
    from pytest_autotune.backends.triton_runner import TritonRunner, TritonSpec

    project.syspathinsert()
    kernels = importlib.import_module("kernels_tri")
    n = 1 << 16
    x, y = np.linspace(0, 1, n, dtype=np.float32), np.linspace(1, 2, n, dtype=np.float32)
    spec = TritonSpec(kernels.add, lambda meta: (triton.cdiv(n, meta["BLOCK"]),), [x, y, np.zeros_like(x), n],
                      tuned=["BLOCK", "num_warps"], expected=[None, None, x + y, None])
    with TritonRunner(spec, measure={"min_iterations": 3, "max_iterations": 3}) as runner:
        assert runner.compile_stage() is not None
        result = tune(runner, {"BLOCK": [64, 128, 256, 512], "num_warps": [1, 2, 4, 8]}, strategy="brute_force",
                      budget=16, compile_workers=2)
    ahead = [r.measurement for r in result.history.records if r.measurement.extra.get("compiled_ahead")]
    assert ahead, "no configuration was compiled ahead"
    assert all(m.ok for m in ahead)
    # loading a cached binary in the worker is far cheaper than the compile the pool did
    assert sum(m.timings["load_s"] for m in ahead) < sum(m.timings["compile_s"] for m in ahead)
