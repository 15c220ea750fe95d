"""KernelSpec: grid geometry, template names, source rendering, safe expressions."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

from pytest_autotune.errors import InvalidConfiguration, SpecError
from pytest_autotune.execution.kernel import (
    KernelSpec,
    eval_expr,
    instantiated_name,
    launch_geometry,
    render_source,
    split_template,
)

CUDA_SRC = "__global__ void vadd(float *c, const float *a, const float *b, int n) { }\n"


def spec(**kw):
    n = kw.pop("n", 1000)
    base = dict(
        source=CUDA_SRC,
        kernel_name="vadd",
        problem_size=n,
        args=[np.zeros(4, np.float32), np.ones(4, np.float32), np.ones(4, np.float32), np.int32(4)],
    )
    base.update(kw)
    return KernelSpec(**base)


# -- geometry -----------------------------------------------------------------
def test_grid_rounds_up_by_block_size_by_default():
    grid, block, smem = launch_geometry(spec(n=1000), {"block_size_x": 256})
    assert grid == (4, 1, 1)  # ceil(1000 / 256)
    assert block == (256, 1, 1)
    assert smem == 0
    assert launch_geometry(spec(n=1024), {"block_size_x": 256})[0] == (4, 1, 1)
    assert launch_geometry(spec(n=1025), {"block_size_x": 256})[0] == (5, 1, 1)


def test_grid_divisors_are_names_or_expressions_and_multiply():
    s = spec(n=1000, grid_div_x=["block_size_x", "work_per_thread"])
    assert launch_geometry(s, {"block_size_x": 128, "work_per_thread": 4})[0] == (2, 1, 1)  # ceil(1000/512)
    s = spec(n=1000, grid_div_x=["block_size_x * work_per_thread + 0"])
    assert launch_geometry(s, {"block_size_x": 100, "work_per_thread": 3})[0] == (4, 1, 1)  # ceil(1000/300)
    s = spec(n=(1000, 70), grid_div_y=["tile_y", 2])
    grid, block, _ = launch_geometry(s, {"block_size_x": 32, "block_size_y": 8, "tile_y": 4})
    assert grid == (32, 9, 1)  # ceil(1000/32), ceil(70/8)
    assert block == (32, 8, 1)


def test_missing_block_parameter_means_one_and_empty_divisor_list_means_no_division():
    s = spec(n=(100, 30, 7))
    grid, block, _ = launch_geometry(s, {"block_size_x": 64})
    assert block == (64, 1, 1)
    assert grid == (2, 30, 7)
    s = spec(n=100, grid_div_x=[])
    assert launch_geometry(s, {"block_size_x": 64})[0] == (100, 1, 1)


def test_block_size_entries_may_be_expressions_or_constants():
    s = spec(block_size_names=("tx * 2", 4, "block_size_z"), grid_div_x=["tx * 2"])
    grid, block, _ = launch_geometry(s, {"tx": 16})
    assert block == (32, 4, 1)
    assert grid == (32, 1, 1)  # ceil(1000 / 32)


def test_block_size_names_may_name_fewer_axes_as_in_kernel_tuner():
    s = spec(block_size_names=["tx"])
    assert s.block_size_names == ("tx", "block_size_y", "block_size_z")
    assert launch_geometry(s, {"tx": 64, "block_size_y": 2})[1] == (64, 2, 1)
    with pytest.raises(SpecError, match="one to three entries"):
        spec(block_size_names=["a", "b", "c", "d"])


def test_the_thread_block_restriction_multiplies_the_tuned_block_sizes():
    from pytest_autotune.execution.kernel import thread_block_restriction

    assert thread_block_restriction(spec(), {"block_size_x": [1], "block_size_y": [1]}) == (
        "block_size_x * block_size_y <= max_threads")
    named = spec(block_size_names=("tx * 2", 4, "ty"), grid_div_x=["tx * 2"])
    assert thread_block_restriction(named, {"tx": [1], "ty": [1]}) == "(tx * 2) * ty <= max_threads"
    assert thread_block_restriction(spec(), {"UNROLL": [1, 2]}) is None  # no tuned block size: no limit


def test_problem_size_may_name_a_parameter():
    s = spec(n="n_items")
    assert launch_geometry(s, {"n_items": 300, "block_size_x": 128})[0] == (3, 1, 1)


def test_shared_memory_expression():
    s = spec(shared_mem="tile * tile * 4 + pad")
    assert launch_geometry(s, {"tile": 16, "pad": 0, "block_size_x": 64})[2] == 1024
    s = spec(shared_mem=512)
    assert launch_geometry(s, {"block_size_x": 64})[2] == 512


def test_bad_geometry_is_an_invalid_configuration_not_a_crash():
    with pytest.raises(InvalidConfiguration):
        launch_geometry(spec(grid_div_x=["block_size_x - 64"]), {"block_size_x": 64})
    with pytest.raises(InvalidConfiguration):
        launch_geometry(spec(grid_div_x=["block_size_x / wpt"]), {"block_size_x": 64, "wpt": 0})
    with pytest.raises(InvalidConfiguration):
        launch_geometry(spec(), {"block_size_x": 0})
    with pytest.raises(InvalidConfiguration):
        launch_geometry(spec(shared_mem="0 - x"), {"block_size_x": 32, "x": 4})


def test_unknown_name_in_an_expression_is_a_spec_error():
    with pytest.raises(SpecError, match="wpt"):
        launch_geometry(spec(grid_div_x=["block_size_x * wpt"]), {"block_size_x": 64})


# -- safe expressions ---------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    [
        "__import__('os').system('true')",
        "open('/etc/passwd')",
        "x.real",
        "[1, 2]",
        "a if b else c",
        "1 << 3",
        "x & 1",
        "True",
        "'abc'",
        "lambda: 1",
        "x == 1",
        "(x := 3)",
        "2 ** 1000",
        "1j",
    ],
)
def test_unsafe_or_unsupported_expressions_are_rejected(text):
    with pytest.raises(SpecError):
        eval_expr(text, {"x": 1, "a": 1, "b": 1, "c": 1})


def test_expression_arithmetic():
    params = {"x": 7, "y": 2}
    assert eval_expr("x * y + 1", params) == 15
    assert eval_expr("x // y", params) == 3
    assert eval_expr("x % y", params) == 1
    assert eval_expr("-x + y ** 3", params) == 1
    assert eval_expr("(x + 1) / y", params) == 4.0
    assert eval_expr(12, params) == 12
    assert eval_expr("x", {"x": np.int64(5)}) == 5


def test_expressions_are_validated_when_the_spec_is_built():
    with pytest.raises(SpecError):
        spec(grid_div_x=["block_size_x; import os"])
    with pytest.raises(SpecError):
        spec(shared_mem="open('f')")


# -- names and source ---------------------------------------------------------
def test_template_name_substitution():
    s = spec(kernel_name="matmul<tile_x, tile_y, float>")
    assert s.is_template and s.base_name == "matmul"
    assert instantiated_name(s, {"tile_x": 16, "tile_y": 8, "unused": 3}) == "matmul<16, 8, float>"
    assert instantiated_name(spec(kernel_name="k<T, n * 2>"), {"T": "double", "n": 4}) == "k<double, 4 * 2>"
    assert instantiated_name(spec(kernel_name="k<flag>"), {"flag": True}) == "k<1>"
    assert instantiated_name(spec(), {"block_size_x": 1}) == "vadd"
    assert split_template("a<b<c>, d>") == ("a", "b<c>, d")


def test_bad_kernel_names_are_rejected():
    for name in ("", "1abc", "vadd(", "v add"):
        with pytest.raises(SpecError):
            spec(kernel_name=name)


def test_render_source_defines_sorted_and_line_directive():
    s = spec()
    text = render_source(s, {"zeta": 2, "alpha": 1.5, "flag": False, "block_size_x": 128})
    lines = text.splitlines()
    assert lines[:4] == ["#define alpha 1.5", "#define block_size_x 128", "#define flag 0", "#define zeta 2"]
    assert lines[4] == '#line 1 "kernel.cu"'
    assert text.endswith(CUDA_SRC)
    # independent of dict order: the same params give byte-identical source
    assert text == render_source(s, {"block_size_x": 128, "flag": False, "zeta": 2, "alpha": 1.5})


def test_template_parameters_are_not_defined_as_macros():
    s = spec(kernel_name="vadd<tile, T>")
    text = render_source(s, {"tile": 4, "T": "float", "unroll": 2})
    assert "#define unroll 2" in text
    assert "#define tile" not in text and "#define T " not in text


def test_render_source_rejects_unrepresentable_values():
    with pytest.raises(SpecError):
        render_source(spec(), {"x": float("nan")})
    with pytest.raises(SpecError):
        render_source(spec(), {"not an identifier": 1})
    with pytest.raises(SpecError):
        render_source(spec(), {"x": [1, 2]})


# -- spec validation ------------------------------------------------------------
def test_source_from_file_language_and_line_directive(tmp_path):
    path = tmp_path / "my_kernel.cpp"
    path.write_text("void f(float *x) { }\n")
    s = KernelSpec(path, "f", 10, [np.zeros(10, np.float32)])
    assert s.lang == "c++" and s.source_file == path.resolve()
    assert '#line 1 "my_kernel.cpp"' in render_source(s, {})
    s = KernelSpec(str(path), "f", 10, [np.zeros(10, np.float32)])
    assert s.code == "void f(float *x) { }\n"
    with pytest.raises(SpecError, match="does not exist"):
        KernelSpec(str(tmp_path / "missing.cu"), "f", 10, [])


def test_language_inference_from_text():
    assert spec().lang == "cuda"
    assert KernelSpec("void f(int n) { }", "f", 1, [np.int32(1)]).lang == "c"
    assert KernelSpec("template <int N> void f(int n) { }", "f<N>", 1, [np.int32(1)]).lang == "c++"
    assert KernelSpec("void f(int n) { }", "f", 1, [np.int32(1)], lang="C++").lang == "c++"
    with pytest.raises(SpecError):
        KernelSpec("void f(int n) { }", "f", 1, [np.int32(1)], lang="fortran")


def test_arguments_must_be_numpy():
    with pytest.raises(SpecError, match="numpy scalar"):
        spec(args=[np.zeros(4, np.float32), 4])
    with pytest.raises(SpecError):
        spec(args=["text"])
    s = spec(args=[np.zeros((2, 3), np.float64).T, np.array(3, dtype=np.int64)])
    assert s.args[0].flags.c_contiguous  # made contiguous for the kernel
    assert isinstance(s.args[1], np.int64)  # 0-d array becomes a scalar


def test_expected_is_checked_against_the_arguments():
    args = [np.zeros(4, np.float32), np.int32(4)]
    with pytest.raises(SpecError, match="entries"):
        spec(args=args, expected=[None])
    with pytest.raises(SpecError, match="dtype"):
        spec(args=args, expected=[np.zeros(4, np.float64), None])
    with pytest.raises(SpecError, match="shape"):
        spec(args=args, expected=[np.zeros(5, np.float32), None])
    s = spec(args=args, expected=[np.zeros(4, np.float32), None])
    assert s.output_indices == (0,)
    assert spec(args=args + [np.ones(2, np.int8)]).output_indices == (0, 2)  # no expected: every array


def test_expected_with_a_verify_callable_is_the_callables_business():
    """Kernel Tuner's ``answer=[numpy.sum(x), None]`` with a custom ``verify``: no shape or dtype check, entries
    kept as given (None: not checked), only the alignment with the arguments."""
    args = [np.zeros(4, np.float32), np.int32(4)]
    total = np.float64(6.0)
    s = spec(args=args, expected=[total, None], verify=lambda expected, outputs: True)
    assert s.expected == [total, None] and s.output_indices == (0,)
    with pytest.raises(SpecError, match="shape"):  # without verify the reference must fit the argument
        spec(args=args, expected=[total, None])
    with pytest.raises(SpecError, match="entries"):
        spec(args=args, expected=[total], verify=lambda expected, outputs: True)


def test_spec_pickles_and_hashes_stably():
    s = spec(grid_div_x=["block_size_x"], expected=[np.zeros(4, np.float32), None, None, None])
    clone = pickle.loads(pickle.dumps(s))
    assert clone.source_hash() == s.source_hash()
    assert launch_geometry(clone, {"block_size_x": 8}) == launch_geometry(s, {"block_size_x": 8})
    assert s.problem_signature()["args"][0] == {"shape": [4], "dtype": "<f4"}
