"""Constant memory (``constant_memory=``, Kernel Tuner's ``cmem_args``) through the real cupy and pycuda runners on
the stand-ins of tests/fake_cuda.py: Kernel Tuner's convolution reads its filter from ``__constant__ d_filter``."""
from __future__ import annotations

import pickle
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from pytest_autotune.errors import SpecError
from pytest_autotune.measure.timing import MeasureOptions
from pytest_autotune.results import FailureKind
from pytest_autotune.runners import KernelSpec

CONVOLUTION = Path(__file__).resolve().parents[1] / "data" / "kernel_tuner" / "convolution.cu"
FAST = MeasureOptions(warmup=1, min_iterations=3, max_iterations=3, watchdog_s=20.0)
SIDE, FILTER = 32, 5  # a 32x32 image, a 5x5 filter (d_filter holds 33x33)
PARAMS = {"image_height": SIDE, "image_width": SIDE, "filter_height": FILTER, "filter_width": FILTER,
          "block_size_x": 16, "block_size_y": 4, "tile_size_x": 1, "tile_size_y": 2, "use_padding": 0,
          "read_only": 0}


def reference(image: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The same convolution, written independently of the stand-in (a sliding window and einsum)."""
    padded = image.reshape(SIDE + FILTER - 1, SIDE + FILTER - 1)
    windows = np.lib.stride_tricks.sliding_window_view(padded, (FILTER, FILTER))
    return np.einsum("yxij,ij->yx", windows, weights.reshape(FILTER, FILTER)).astype(np.float32).ravel()


def convolution_spec(constants=None, **kw) -> KernelSpec:
    rng = np.random.default_rng(7)
    image = rng.standard_normal((SIDE + FILTER - 1) ** 2).astype(np.float32)
    weights = rng.standard_normal(FILTER * FILTER).astype(np.float32)
    output = np.zeros(SIDE * SIDE, np.float32)
    constants = {"d_filter": weights} if constants is None else constants
    return KernelSpec(CONVOLUTION, "convolution_kernel", (SIDE, SIDE), [output, image, weights],
                      grid_div_x=["block_size_x", "tile_size_x"], grid_div_y=["block_size_y", "tile_size_y"],
                      expected=[reference(image, weights), None, None], atol=1e-4, rtol=1e-4,
                      constant_memory=constants, **kw)


@pytest.fixture(params=["cupy", "pycuda"])
def cuda_runner(request, monkeypatch):
    """The real runner class of ``request.param`` on its stand-in (CuPy's with cuda-bindings' driver call)."""
    import fake_cuda

    if request.param == "cupy":
        state, _ = fake_cuda.install_cupy(monkeypatch)
        from pytest_autotune.backends.cupy_runner import CupyRunner as cls
    else:
        state = fake_cuda.State()
        for name, module in fake_cuda.make_pycuda(state).items():
            monkeypatch.setitem(sys.modules, name, module)
        real_which = shutil.which
        monkeypatch.setattr(shutil, "which", lambda cmd, *a, **k: "/fake/nvcc" if cmd == "nvcc"
                            else real_which(cmd, *a, **k))
        from pytest_autotune.backends.pycuda_runner import PycudaRunner as cls
    return lambda spec: cls(spec, isolate=False, measure=FAST)


def test_the_filter_reaches_constant_memory_and_the_kernel_computes_with_it(cuda_runner):
    with cuda_runner(convolution_spec()) as runner:
        result = runner.evaluate(PARAMS, keep_outputs=True)
        assert result.ok, result.detail
        np.testing.assert_allclose(result.extra["outputs"][0], runner.spec.expected[0], rtol=1e-4, atol=1e-4)
        tiled = runner.evaluate({**PARAMS, "block_size_x": 32, "tile_size_x": 2, "block_size_y": 2})
        assert tiled.ok, tiled.detail  # a module compiled for another configuration is filled too


def test_without_constant_memory_the_filter_is_zero_and_the_output_wrong(cuda_runner):
    with cuda_runner(convolution_spec(constants={})) as runner:
        result = runner.evaluate(PARAMS)
    assert result.failure is FailureKind.WRONG_OUTPUT, result.detail


def test_an_unknown_symbol_is_the_tests_error_naming_it(cuda_runner):
    spec = convolution_spec(constants={"d_filters": np.ones(25, np.float32)})
    with cuda_runner(spec) as runner, pytest.raises(SpecError) as info:
        runner.evaluate(PARAMS)
    message = str(info.value)
    assert "constant_memory['d_filters']: the compiled module has no __constant__ symbol 'd_filters'" in message
    assert "named symbol not found" in message and "__constant__ float d_filters[25];" in message


def test_an_array_larger_than_its_symbol_is_refused_naming_both_sizes(cuda_runner):
    spec = convolution_spec(constants={"d_filter": np.ones(34 * 34, np.float32)})
    with cuda_runner(spec) as runner, pytest.raises(SpecError) as info:
        runner.evaluate(PARAMS)
    assert str(info.value) == ("constant_memory['d_filter'] has 4624 bytes (float32 of shape (1156,)) but "
                               "__constant__ d_filter holds only 4356 bytes")


@pytest.mark.parametrize("value, message", [
    ([1.0, 2.0], "constant_memory['d_filter'] is a list; pass a numpy array"),
    (np.array([], np.float32), "must be a non-empty numeric array"),
])
def test_what_is_not_an_array_is_refused_at_the_call(value, message):
    with pytest.raises(SpecError, match=message.replace("[", r"\[").replace("(", r"\(")):
        convolution_spec(constants={"d_filter": value})
    with pytest.raises(SpecError, match="not a C identifier"):
        convolution_spec(constants={"d filter": np.ones(3, np.float32)})


def test_other_languages_are_told_where_their_constants_go():
    with pytest.raises(SpecError, match="an OpenCL __constant pointer is an ordinary buffer argument: pass the "
                                        "array in args"):
        KernelSpec("__kernel void k(__constant float *f) {}", "k", 1, [], lang="opencl",
                   constant_memory={"f": np.ones(2, np.float32)})


def test_constant_memory_travels_to_the_isolated_worker_with_the_spec():
    spec = convolution_spec()
    clone = pickle.loads(pickle.dumps(spec))  # the executor recipe is pickled to the worker
    np.testing.assert_array_equal(clone.constant_memory["d_filter"], spec.constant_memory["d_filter"])


def test_the_nsight_compute_job_fills_constant_memory_too(tmp_path, monkeypatch):
    """A profiled configuration computes with the same filter as a timed one (a kernel whose branches follow
    its constants, pnpoly's polygon, would otherwise be profiled on zeros)."""
    import fake_cuda
    from pytest_autotune.backends.ncu import PROFILE_SCRIPT, write_profile_job

    state, _ = fake_cuda.install_cupy(monkeypatch)
    spec = convolution_spec()
    script, job, _ = write_profile_job(tmp_path, spec, PARAMS)
    monkeypatch.setattr(sys, "argv", ["profile_job.py", str(job)])
    exec(compile(PROFILE_SCRIPT, str(script), "exec"), {"__name__": "__main__"})
    (module,) = state.memo.values()
    np.testing.assert_array_equal(module.constants["d_filter"].view(np.float32)[:FILTER * FILTER],
                                  spec.constant_memory["d_filter"])
