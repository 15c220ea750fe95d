"""locked_params: the run-time lookup of tuned parameters by kernel name, device and problem (no pytest needed)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from opencl_support import pocl  # noqa: F401 - fixture

from pytest_autotune import locked_params
from pytest_autotune.lock import lookup
from pytest_autotune.lock.hashing import kernel_source_hash
from pytest_autotune.lock.lockfile import SCHEMA_VERSION, LockfileError, merge_entries, read_lockfile
from pytest_autotune.lock.lookup import AmbiguousLockError, LockFallbackWarning, LockLookupError, LockStaleWarning
from pytest_autotune.lock.problem import describe_problem, problem_distance, size_distance

DEVICE = {"model": "Test GPU", "kind": "cuda", "slug": "test-gpu"}
SOURCE = "__global__ void matmul(float *c) {}\n"


def entry(params, size=None, *, kernel="matmul", test="tests/test_mm.py::test_mm", space="s" * 16,
          dtype="float32", problem=True, source=SOURCE):
    e = {
        "kernel": kernel, "test": test, "params": params,
        "stats": {"median": 1.0, "mean": 1.0, "min": 1.0, "iqr": 0.0, "n": 1}, "samples": [1.0],
        "hashes": {"source": kernel_source_hash(source, kernel), "space": space, "problem": f"p{size}"},
    }
    if problem:
        arrays = [np.zeros(1, dtype=dtype)] * 2
        e["problem"] = describe_problem(size, [*arrays, np.int32(size[0] if isinstance(size, tuple) else size or 0)])
    return e


@pytest.fixture(autouse=True)
def fresh_cache():
    lookup.clear_cache()
    yield
    lookup.clear_cache()


def write(lockdir: Path, slug: str, entries: dict) -> Path:
    path = lockdir / f"{slug}.json"
    merge_entries(path, entries, {**DEVICE, "slug": slug})
    return path


@pytest.fixture
def lockdir(tmp_path: Path) -> Path:
    d = tmp_path / "autotune.lock"
    write(d, "test-gpu", {
        "tests/test_mm.py::test_mm[1024]::matmul": entry({"bx": 16}, (1024, 1024), test="tests/test_mm.py::test_mm[1024]"),
        "tests/test_mm.py::test_mm[4096]::matmul": entry({"bx": 64}, (4096, 4096), test="tests/test_mm.py::test_mm[4096]"),
        "tests/test_red.py::test_red::reduce": entry({"threads": 256}, 100000, kernel="reduce", test="tests/test_red.py::test_red"),
    })
    return d


def test_problem_is_recorded_readably_and_the_schema_is_2(lockdir: Path) -> None:
    lock = read_lockfile(lockdir / "test-gpu.json")
    assert lock.schema == SCHEMA_VERSION == 2
    assert lock.entries["tests/test_mm.py::test_mm[4096]::matmul"]["problem"] == {
        "size": [4096, 4096],
        "args": [{"shape": [1], "dtype": "float32"}, {"shape": [1], "dtype": "float32"},
                 {"dtype": "int32", "value": 4096}]}


def test_exact_problem_by_kernel_name_not_test(lockdir: Path) -> None:
    assert locked_params("matmul", (4096, 4096), lockdir, device="test-gpu") == {"bx": 64}
    assert locked_params("matmul", [1024, 1024], lockdir=lockdir, device="test-gpu") == {"bx": 16}
    assert locked_params("reduce", 100000, lockdir, device="test-gpu") == {"threads": 256}
    assert locked_params("reduce", None, lockdir, device="test-gpu") == {"threads": 256}  # its only entry


def test_nearest_problem_in_log_space_warns_which_size(lockdir: Path) -> None:
    with pytest.warns(LockFallbackWarning, match=r"problem size 3000x3000 was not tuned on test-gpu; using the "
                                                 r"nearest tuned size 4096x4096 \(tests/test_mm.py::test_mm\[4096\]::matmul\)"):
        assert locked_params("matmul", (3000, 3000), lockdir, device="test-gpu") == {"bx": 64}
    # log space: (1900, 2100) is nearer 1024x1024 (ratios 1.86, 2.05) than 4096x4096 (ratios 2.16, 1.95)
    with pytest.warns(LockFallbackWarning, match="1024x1024"):
        assert locked_params("matmul", (1900, 2100), lockdir, device="test-gpu") == {"bx": 16}
    with pytest.warns(LockFallbackWarning, match="4096x4096"):  # ratio 2.05 vs 1.95: log space picks 4096
        assert locked_params("matmul", (2100, 2100), lockdir, device="test-gpu") == {"bx": 64}


def test_several_problems_without_a_size_is_an_error_listing_them(lockdir: Path) -> None:
    with pytest.raises(LockLookupError, match=r"2 tuned problems of 'matmul': 1024x1024 \(tests/test_mm.py::test_mm\[1024\]"
                                              r"::matmul\), 4096x4096 .*pass problem_size="):
        locked_params("matmul", None, lockdir, device="test-gpu")


def test_several_problems_without_a_size_is_an_error_even_when_they_agree(tmp_path: Path) -> None:
    # the answer would be right today and raise after one size is re-tuned to other parameters
    write(tmp_path, "test-gpu", {"t::a[64]::k": entry({"x": 1}, 64, kernel="k", test="t::a[64]"),
                                  "t::a[128]::k": entry({"x": 1}, 128, kernel="k", test="t::a[128]")})
    with pytest.raises(LockLookupError, match=r"2 tuned problems of 'k': 128 \(t::a\[128\]::k\), 64 "):
        locked_params("k", None, tmp_path, device="test-gpu")
    assert locked_params("k", 64, tmp_path, device="test-gpu") == {"x": 1}


def test_incomparable_sizes_and_dtypes(lockdir: Path) -> None:
    with pytest.raises(LockLookupError, match="problem size 10x10x10 cannot be compared"):
        locked_params("matmul", (10, 10, 10), lockdir, device="test-gpu")
    with pytest.raises(LockLookupError, match=r"dtypes \['float64', 'float64'\]"):
        locked_params("matmul", (1024, 1024), lockdir, device="test-gpu", dtypes=["float64", "float64"])
    assert locked_params("matmul", (1024, 1024), lockdir, device="test-gpu", dtypes=["float32", "float32"]) == {"bx": 16}


def test_same_size_in_two_dtypes_needs_dtypes(tmp_path: Path) -> None:
    write(tmp_path, "test-gpu", {"t::a::matmul": entry({"bx": 1}, (64, 64), test="t::a"),
                                  "t::b::matmul": entry({"bx": 2}, (64, 64), test="t::b", dtype="float64")})
    with pytest.raises(LockLookupError, match="2 entries .* match problem size 64x64.*pass dtypes="):
        locked_params("matmul", (64, 64), tmp_path, device="test-gpu")
    assert locked_params("matmul", (64, 64), tmp_path, device="test-gpu", dtypes=["float64", "float64"]) == {"bx": 2}
    # nearest size keeps to the dtypes: a float64 request never falls back to a float32 entry
    with pytest.warns(LockFallbackWarning):
        assert locked_params("matmul", (80, 80), tmp_path, device="test-gpu", dtypes=["float64"] * 2) == {"bx": 2}


def test_nearest_size_never_crosses_dtypes_it_cannot_tell_apart(tmp_path: Path) -> None:
    write(tmp_path, "test-gpu", {"t::a::matmul": entry({"bx": 1}, (1024, 1024), test="t::a"),
                                  "t::b::matmul": entry({"bx": 2}, (4096, 4096), test="t::b", dtype="float64")})
    with pytest.raises(LockLookupError, match=r"problem size 2000x2000 was not tuned .* entries differ in their array "
                                              r"dtypes: \['float32', 'float32'\] \(t::a::matmul\), \['float64', "
                                              r"'float64'\] \(t::b::matmul\); pass dtypes="):
        locked_params("matmul", (2000, 2000), tmp_path, device="test-gpu")
    with pytest.warns(LockFallbackWarning, match="nearest tuned size 4096x4096"):
        assert locked_params("matmul", (2000, 2000), tmp_path, device="test-gpu", dtypes=["float64"] * 2) == {"bx": 2}
    assert locked_params("matmul", (1024, 1024), tmp_path, device="test-gpu") == {"bx": 1}  # exact: no doubt


def test_missing_device_entry_returns_default_with_warning_or_raises(lockdir: Path) -> None:
    with pytest.warns(LockFallbackWarning, match=r"no entry for 'matmul' in .*other-gpu.json; using the default"):
        assert locked_params("matmul", (64, 64), lockdir, device="other-gpu", default={"bx": 8}) == {"bx": 8}
    with pytest.raises(LockLookupError, match=r"no entry for 'nope' in .*test-gpu.json; tune it on this device"):
        locked_params("nope", None, lockdir, device="test-gpu")
    with pytest.raises(LockLookupError):
        locked_params("matmul", None, lockdir / "missing-dir", device="test-gpu")
    with pytest.raises(ValueError, match=r"device='gpus/h100' is not a lockfile name"):
        locked_params("matmul", None, lockdir, device="gpus/h100")


def test_same_kernel_name_in_two_tests_with_different_spaces_is_ambiguous(tmp_path: Path) -> None:
    write(tmp_path, "test-gpu", {"tests/a.py::test_a::k": entry({"x": 1}, 64, kernel="k", test="tests/a.py::test_a"),
                                  "tests/b.py::test_b::k": entry({"y": 1}, 128, kernel="k", test="tests/b.py::test_b",
                                                                 space="t" * 16)})
    with pytest.raises(AmbiguousLockError, match="tests/a.py::test_a and tests/b.py::test_b"):
        locked_params("k", 64, tmp_path, device="test-gpu")


def test_one_parametrized_test_whose_space_follows_the_size_is_not_ambiguous(tmp_path: Path) -> None:
    # @parametrize("n", [64, 4096]) with params={"block": [8, 16, n]}: one space per size, one test
    write(tmp_path, "test-gpu", {
        "tests/a.py::test_a[64]::k": entry({"block": 64}, 64, kernel="k", test="tests/a.py::test_a[64]", space="s" * 16),
        "tests/a.py::test_a[4096]::k": entry({"block": 16}, 4096, kernel="k", test="tests/a.py::test_a[4096]",
                                             space="t" * 16)})
    assert locked_params("k", 64, tmp_path, device="test-gpu") == {"block": 64}
    with pytest.warns(LockFallbackWarning, match="nearest tuned size 4096"):
        assert locked_params("k", 3000, tmp_path, device="test-gpu") == {"block": 16}
    # another test function (even one parametrized alike) with its own space is still ambiguous
    write(tmp_path, "test-gpu", {"tests/b.py::test_b[64]::k": entry({"y": 1}, 64, kernel="k", test="tests/b.py::test_b[64]",
                                                                    space="u" * 16)})
    with pytest.raises(AmbiguousLockError, match=r"tests/a.py::test_a\[4096\] and tests/b.py::test_b\[64\]"):
        locked_params("k", 64, tmp_path, device="test-gpu")


def test_schema_1_entries_match_by_kernel_name_only(tmp_path: Path) -> None:
    old = {"schema": 1, "device": DEVICE,
           "entries": {"t::test_x::k": entry({"x": 3}, kernel="k", problem=False)}}
    (tmp_path / "test-gpu.json").write_text(json.dumps(old))
    assert locked_params("k", (123, 456), tmp_path, device="test-gpu") == {"x": 3}
    assert locked_params("k", None, tmp_path, device="test-gpu") == {"x": 3}
    old["entries"]["t::test_y::k"] = entry({"x": 4}, kernel="k", problem=False)
    (tmp_path / "test-gpu.json").write_text(json.dumps(old))
    with pytest.raises(LockLookupError, match=r"2 entries of 'k' that do not record their problem: \(problem not "
                                              r"recorded\) \(t::test_x::k\), .*re-tune them with pytest --autotune"):
        locked_params("k", (123, 456), tmp_path, device="test-gpu")


def test_staleness_check_against_the_current_source(lockdir: Path, tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        locked_params("matmul", (1024, 1024), lockdir, device="test-gpu", source=SOURCE)
        src = tmp_path / "mm.cu"
        src.write_text(SOURCE)
        locked_params("matmul", (1024, 1024), lockdir, device="test-gpu", source=src)
        locked_params("matmul", (1024, 1024), lockdir, device="test-gpu", source=str(src))
    with pytest.warns(LockStaleWarning, match="source changed since tests/test_mm.py::test_mm\\[1024\\]::matmul"):
        locked_params("matmul", (1024, 1024), lockdir, device="test-gpu", source=SOURCE + "// edited\n")


def test_cache_rereads_a_changed_file_and_returns_copies(lockdir: Path) -> None:
    params = locked_params("reduce", None, lockdir, device="test-gpu")
    params["threads"] = 1  # the caller's copy
    assert locked_params("reduce", None, lockdir, device="test-gpu") == {"threads": 256}
    write(lockdir, "test-gpu", {"tests/test_red.py::test_red::reduce": entry({"threads": 512}, 100000, kernel="reduce")})
    assert locked_params("reduce", None, lockdir, device="test-gpu") == {"threads": 512}


def test_cache_tells_apart_files_of_equal_size_and_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A relative lockdir from two working directories, or a file replaced (atomically, as merge_entries
    writes) by one of the same size within the clock's resolution: the cache must not serve the old
    file because size and modification time agree."""
    for name, threads in (("a", 128), ("b", 512)):
        write(tmp_path / name / "autotune.lock", "test-gpu",
              {"tests/test_red.py::test_red::reduce": entry({"threads": threads}, 100000, kernel="reduce")})
    a, b = (tmp_path / n / "autotune.lock" / "test-gpu.json" for n in ("a", "b"))
    assert a.stat().st_size == b.stat().st_size
    os.utime(b, ns=(a.stat().st_atime_ns, a.stat().st_mtime_ns))
    monkeypatch.chdir(tmp_path / "a")
    assert locked_params("reduce", None, "autotune.lock", device="test-gpu") == {"threads": 128}
    monkeypatch.chdir(tmp_path / "b")
    assert locked_params("reduce", None, "autotune.lock", device="test-gpu") == {"threads": 512}
    # the same path, replaced by a file of the same size and time
    stamp = (a.stat().st_atime_ns, a.stat().st_mtime_ns)
    os.replace(b, a)
    os.utime(a, ns=stamp)
    monkeypatch.chdir(tmp_path / "a")
    assert locked_params("reduce", None, "autotune.lock", device="test-gpu") == {"threads": 512}


def test_corrupt_lockfile_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "test-gpu.json").write_text("{")
    with pytest.raises(LockfileError, match="test-gpu.json: not valid JSON"):
        locked_params("k", None, tmp_path, device="test-gpu")


def test_device_detection_uses_the_cpu_slug_of_the_plugin(tmp_path: Path) -> None:
    from pytest_autotune.execution.device import detect_cpu_device

    slug = detect_cpu_device().slug
    write(tmp_path, slug, {"t::t::k": entry({"x": 5}, 10, kernel="k")})
    assert slug in lookup.detect_device_slugs()
    assert locked_params("k", 10, tmp_path) == {"x": 5}


def test_kind_keeps_a_c_kernel_from_a_cuda_kernel_of_the_same_name(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_autotune.execution.device import detect_cpu_device

    monkeypatch.setitem(lookup._DETECTORS, "cuda", lambda: "fake-gpu")  # a machine with a usable CUDA GPU
    write(tmp_path, "fake-gpu", {"t::cu::matmul": entry({"block_size_x": 32}, (192, 192), test="t::cu")})
    write(tmp_path, detect_cpu_device().slug, {"t::c::matmul": entry({"BLOCK_I": 16}, 192, test="t::c")})
    assert lookup.detect_device_slugs()[:2] == ("fake-gpu", detect_cpu_device().slug)
    assert locked_params("matmul", (192, 192), tmp_path) == {"block_size_x": 32}  # the GPU's lockfile first
    assert locked_params("matmul", 192, tmp_path, kind="cpu") == {"BLOCK_I": 16}
    assert locked_params("matmul", (192, 192), tmp_path, kind="cuda") == {"block_size_x": 32}
    with pytest.raises(ValueError, match=r"kind='gpu' is not a device kind; use one of 'cuda', 'cpu', 'opencl'"):
        locked_params("matmul", 192, tmp_path, kind="gpu")
    monkeypatch.setitem(lookup._DETECTORS, "cuda", lambda: None)  # no GPU
    with pytest.warns(LockFallbackWarning, match="no cuda device detected on this machine; using the default"):
        assert locked_params("matmul", 192, tmp_path, kind="cuda", default={"block_size_x": 1}) == {"block_size_x": 1}


def test_device_detection_finds_an_opencl_kernel_under_the_plugins_opencl_lockfile(tmp_path: Path, pocl) -> None:
    import pyopencl as cl

    from pytest_autotune.backends.opencl_device import detect_opencl_device, select_device

    slug = detect_opencl_device(cl, select_device(cl)).slug  # what the OpenCL runner names its lockfile
    write(tmp_path, slug, {"t::t::cl_k": entry({"wg": 64}, 10, kernel="cl_k")})
    assert slug in lookup.detect_device_slugs()
    assert locked_params("cl_k", 10, tmp_path) == {"wg": 64}


def test_opencl_is_detected_only_when_the_cuda_and_cpu_lockfiles_lack_the_kernel(tmp_path: Path) -> None:
    from pytest_autotune.execution.device import detect_cpu_device

    write(tmp_path, detect_cpu_device().slug, {"t::t::k": entry({"x": 5}, 10, kernel="k")})
    code = ("import sys; from pytest_autotune import locked_params; "
            f"assert locked_params('k', 10, {str(tmp_path)!r}) == {{'x': 5}}; "
            "assert 'pyopencl' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})


def test_importing_the_lock_package_imports_no_pytest_or_cuda_library() -> None:
    modules = sorted(p.stem for p in Path(lookup.__file__).parent.glob("*.py") if p.stem != "__init__")
    assert {"lockfile", "hashing", "lookup", "export", "transfer", "problem"} <= set(modules)
    code = ("import sys; from pytest_autotune import locked_params; "
            + "".join(f"import pytest_autotune.lock.{m}; " for m in modules) +
            "bad = [m for m in sys.modules if m.split('.')[0] in ('pytest', '_pytest', 'cupy', 'pycuda')]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})


def test_distances() -> None:
    assert size_distance([1024], [2048]) == pytest.approx(size_distance([2048], [4096]))
    assert size_distance([1024], [1024, 1]) is None and size_distance(["n"], [4]) is None
    f32 = describe_problem(64, [np.zeros(2, np.float32)])
    f64 = describe_problem(64, [np.zeros(2, np.float64)])
    assert problem_distance(f32, f32) == 0.0 and problem_distance(f32, f64) is None


def test_schema_1_files_are_read_kept_by_show_and_upgraded_by_the_next_merge(tmp_path: Path) -> None:
    from pytest_autotune.lock.lockfile import serialize

    path = tmp_path / "test-gpu.json"
    path.write_text(json.dumps({"schema": 1, "device": DEVICE, "entries": {"t::a::k": entry({"x": 1}, kernel="k",
                                                                                              problem=False)}}))
    old = read_lockfile(path)
    assert old.schema == 1 and json.loads(serialize(old))["schema"] == 1  # show --json prints it as it is
    merge_entries(path, {"t::b::k2": entry({"x": 2}, 64, kernel="k2")}, DEVICE)
    new = read_lockfile(path)
    assert new.schema == 2 and "problem" not in new.entries["t::a::k"] and new.entries["t::b::k2"]["problem"]


def test_an_invalid_problem_field_is_named(tmp_path: Path) -> None:
    from pytest_autotune.lock.lockfile import InvalidEntryError

    bad = entry({"x": 1}, 64)
    bad["problem"] = {"size": "big", "args": []}
    with pytest.raises(InvalidEntryError, match=r"entry 't::k': problem: size must be null or a list"):
        merge_entries(tmp_path / "g.json", {"t::k": bad}, DEVICE)


SCALE_C = r"""
void scale(float *out, const float *in, int n) {
    for (int i = 0; i < n; i += UNROLL)
        for (int j = 0; j < UNROLL && i + j < n; j++) out[i + j] = in[i + j] * FACTOR;
}
"""
SCALE_TEST = '''
import numpy as np
import pytest


@pytest.mark.tune(params={"UNROLL": [1, 2], "FACTOR": [2]}, strategy="brute_force")
@pytest.mark.parametrize("n", [256, 4096])
def test_scale(autotune, n):
    x = np.arange(n, dtype=np.float32)
    autotune.kernel("scale.c", "scale", n, [np.zeros_like(x), x, np.int32(n)], expected=[2 * x, None, None])
'''


@pytest.mark.skipif(__import__("shutil").which("gcc") is None, reason="the C runner needs gcc")
def test_entries_tuned_by_the_plugin_are_found_by_size_and_checked_against_their_source(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PYTEST_AUTOTUNE_CACHE_DIR", str(tmp_path / "c-cache"))
    pytester.makeini("[pytest]\n")
    pytester.makefile(".c", scale=SCALE_C)
    pytester.makepyfile(test_scale=SCALE_TEST)
    pytester.runpytest("-p", "no:hypothesispytest", "--autotune").assert_outcomes(passed=2)
    (path,) = (pytester.path / "autotune.lock").glob("*.json")
    entries = read_lockfile(path).entries
    assert entries["test_scale.py::test_scale[4096]::scale"]["problem"] == {
        "size": [4096], "args": [{"shape": [4096], "dtype": "float32"}, {"shape": [4096], "dtype": "float32"},
                                 {"dtype": "int32", "value": 4096}]}
    lockdir, source = pytester.path / "autotune.lock", pytester.path / "scale.c"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the source hash the plugin wrote is the one the lookup computes
        assert locked_params("scale", 4096, lockdir, device=path.stem, source=source)["FACTOR"] == 2
        assert locked_params("scale", [256], lockdir, device=path.stem, source=source)["FACTOR"] == 2
    with pytest.warns(LockFallbackWarning, match="nearest tuned size 4096"):
        locked_params("scale", 3000, lockdir, device=path.stem)
    source.write_text(SCALE_C.replace("* FACTOR", "* FACTOR + 0.0f"))
    with pytest.warns(LockStaleWarning):
        locked_params("scale", 4096, lockdir, device=path.stem, source=source)


SCALE_HEADER_C = '#include "factor.h"\n' + SCALE_C.replace("* FACTOR", "* FACTOR * HEADER_ONE")


@pytest.mark.skipif(__import__("shutil").which("gcc") is None, reason="the C runner needs gcc")
def test_an_unchanged_kernel_that_includes_a_header_is_not_stale(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The lock's source hash covers the local headers: the lookup hashes them too (issue 40), and warns when
    only the header changed."""
    monkeypatch.setenv("PYTEST_AUTOTUNE_CACHE_DIR", str(tmp_path / "c-cache"))
    pytester.makeini("[pytest]\n")
    pytester.makefile(".c", scale=SCALE_HEADER_C)
    pytester.makefile(".h", factor="#define HEADER_ONE 1\n")
    pytester.makepyfile(test_scale=SCALE_TEST)
    pytester.runpytest("-p", "no:hypothesispytest", "--autotune").assert_outcomes(passed=2)
    (path,) = (pytester.path / "autotune.lock").glob("*.json")
    lockdir, source = pytester.path / "autotune.lock", pytester.path / "scale.c"
    assert read_lockfile(path).entries["test_scale.py::test_scale[4096]::scale"].headers  # the header was locked
    monkeypatch.chdir(tmp_path)  # a service runs elsewhere: the header is found beside the kernel file
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert locked_params("scale", 4096, lockdir, device=path.stem, source=source)["FACTOR"] == 2
        assert locked_params("scale", 256, lockdir, device=path.stem, source=str(source))["FACTOR"] == 2
    (pytester.path / "factor.h").write_text("#define HEADER_ONE 1.0f\n")  # only the header is edited
    with pytest.warns(LockStaleWarning, match="source changed"):
        locked_params("scale", 4096, lockdir, device=path.stem, source=source)


RECORDING = {  # a Kernel Tuner cache of 3 configurations
    "device_name": "Fake GPU", "kernel_name": "fake", "tune_params_keys": ["block_size_x"],
    "tune_params": {"block_size_x": [32, 64, 128]},
    "cache": {str(bx): {"block_size_x": bx, "time": t, "times": [t] * 5} for bx, t in ((32, 2.0), (64, 1.0), (128, 3.0))},
}
REPLAY_TEST = '''
import pytest


@pytest.mark.tune(params={"block_size_x": [32, 64, 128]}, strategy="brute_force")
def test_replay(autotune):
    autotune.replay("fake_gpu.json")
'''


def test_re_tuning_a_schema_1_entry_records_its_readable_problem(pytester: pytest.Pytester) -> None:
    """A kept winner of an old lock is rewritten with its problem (and kernel and test), so the lookup and the
    export can use it; otherwise an old lock would never gain them until a faster winner came along."""
    pytester.makeini("[pytest]\n")
    (pytester.path / "fake_gpu.json").write_text(json.dumps(RECORDING))
    pytester.makepyfile(test_replay=REPLAY_TEST)
    args = ("-p", "no:hypothesispytest", "--autotune", "--autotune-report=report.json")
    pytester.runpytest(*args).assert_outcomes(passed=1)
    (path,) = (pytester.path / "autotune.lock").glob("*.json")
    data = json.loads(path.read_text())
    (entry,) = data["entries"].values()
    assert entry["problem"] == {"size": None, "args": []} and entry["kernel"] == "fake_gpu"
    for field in ("problem", "kernel", "test"):  # what a schema-1 writer left out
        del entry[field]
    path.write_text(json.dumps({**data, "schema": 1}))

    pytester.runpytest(*args).assert_outcomes(passed=1)
    (row,) = json.loads((pytester.path / "report.json").read_text())["kernels"]
    assert row["status"] == "kept lock" and "readable problem recorded" in row["message"], row
    upgraded = read_lockfile(path)
    (entry,) = upgraded.entries.values()
    assert upgraded.schema == 2 and entry["problem"] == {"size": None, "args": []} and entry["kernel"] == "fake_gpu"
    assert entry["params"] == {"block_size_x": 64}
