"""Porting from ``@triton.autotune``: untuned constexprs by keyword, and ``use_lock`` (shipped code never tunes).

Real kernels in Triton's interpreter (the plugin sets TRITON_INTERPRET=1 without a GPU), in this process:
the kernels are defined at module level, the lock entries are written as the triton runner writes them
(the problem described from a ``TritonSpec`` of the same call).
"""
from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path

import numpy as np
import pytest
from triton_support import require_triton

HAVE_TRITON = all(importlib.util.find_spec(m) is not None for m in ("triton", "torch"))

if HAVE_TRITON:  # at the module's top level: Triton reads a kernel's source
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def bias_act(x_ptr, out_ptr, n, BLOCK: tl.constexpr, ACTIVATION: tl.constexpr, SLOPE: tl.constexpr = 0.5):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask) + 1.0
        if ACTIVATION == "leaky_relu":
            x = tl.where(x >= 0, x, x * SLOPE)
        tl.store(out_ptr + offs, x, mask=mask)

    @triton.jit
    def scatter_rows(ptrs_ptr, x_ptr, n, BLOCK: tl.constexpr):
        """Writes row i of x through the pointer stored in ptrs[i] (a grouped-GEMM style table of outputs)."""
        row = tl.program_id(0)
        out = tl.load(ptrs_ptr + row).to(tl.pointer_type(tl.float32))
        offs = tl.arange(0, BLOCK)
        tl.store(out + offs, tl.load(x_ptr + row * n + offs, mask=offs < n) * 3, mask=offs < n)

    @triton.jit
    def double(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


@pytest.fixture(scope="module", autouse=True)
def triton_here() -> None:
    require_triton()


FAST = {"warmup": 0, "min_iterations": 1, "max_iterations": 1}


# --------------------------------------------------------------------------- untuned constexprs by keyword
def test_an_untuned_constexpr_after_the_tuned_ones_is_passed_by_keyword() -> None:
    from pytest_autotune.backends.triton_runner import TritonRunner, TritonSpec

    n = 40
    x = torch.linspace(-3, 2, n)
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)  # noqa: E731
    y = x + 1.0
    leaky = torch.where(y >= 0, y, y * 0.5)
    results = {}
    for activation, reference in (("leaky_relu", leaky), ("none", y)):
        spec = TritonSpec(bias_act, grid, [x, torch.zeros(n), n], kwargs={"ACTIVATION": activation},
                          tuned=["BLOCK", "num_warps"], expected=[None, reference, None], isolate=False)
        assert spec.arg_names == ("x_ptr", "out_ptr", "n", "ACTIVATION")
        with TritonRunner(spec, isolate=False, measure=FAST) as runner:
            results[activation] = runner.evaluate({"BLOCK": 16, "num_warps": 1})
    assert all(m.ok for m in results.values()), [m.detail for m in results.values()]
    # the keyword reached the kernel: the other activation's reference is wrong
    spec = TritonSpec(bias_act, grid, [x, torch.zeros(n), n], kwargs={"ACTIVATION": "leaky_relu"},
                      tuned=["BLOCK"], expected=[None, y, None], isolate=False)
    with TritonRunner(spec, isolate=False, measure=FAST) as runner:
        wrong = runner.evaluate({"BLOCK": 16})
    assert not wrong.ok and "elements differ" in wrong.detail


def test_keyword_and_positional_calls_are_one_problem_and_the_value_counts() -> None:
    from pytest_autotune.backends.triton_runner import TritonCall
    from pytest_autotune.lock.hashing import hash_problem

    x = np.zeros(8, np.float32)

    def problem(args, kwargs=None):
        call = TritonCall(bias_act, (1,), args, ["BLOCK"], kwargs=kwargs, isolate=False)
        return hash_problem(call.problem_size, call.described_args()), call.described_args()

    by_keyword, described = problem([x, x, 8], {"ACTIVATION": "leaky_relu"})
    assert problem([x, x, 8, "leaky_relu"])[0] == by_keyword  # written either way: the same lock entry
    assert problem([x, x, 8], {"ACTIVATION": "none"})[0] != by_keyword  # another activation: another problem
    assert described[-1] == "leaky_relu"
    assert problem([x, x], {"n": 8, "ACTIVATION": "leaky_relu", "SLOPE": 0.25})[1][-2:] == ["leaky_relu", 0.25]


@pytest.mark.parametrize("args, kwargs, message", [
    ([0, 0, 8], {"ACTIVATON": "x"}, r"kwargs names 'ACTIVATON', not an argument of bias_act\(\)"),
    ([0, 0, 8], {"ACTIVATION": "x", "BLOCK": 16}, r"'BLOCK', which the marker's params tune"),
    ([0, 0, 8], {"n": 8, "ACTIVATION": "x"}, r"'n' given both in args \(by position\) and in kwargs"),
    ([0, 0, 8], {}, r"argument\(s\) ACTIVATION are neither given in args or kwargs"),
])
def test_keyword_mistakes_name_the_argument(args, kwargs, message) -> None:
    from pytest_autotune.backends.triton_runner import TritonSpec
    from pytest_autotune.errors import SpecError

    with pytest.raises(SpecError, match=message):
        TritonSpec(bias_act, (1,), args, kwargs=kwargs, tuned=["BLOCK"], isolate=False)


def test_a_kernel_writing_through_pointers_stored_in_a_tensor_is_checked_by_verify_in_process() -> None:
    """What how-to/triton.md says: the outputs are not arguments, so expected= cannot see them; verify= reads
    them, which needs the test's own tensors, hence isolate=False (a worker gets copies, its pointers dangle)."""
    from pytest_autotune.backends.triton_runner import TritonRunner, TritonSpec

    n = 8
    x = torch.arange(3 * n, dtype=torch.float32).reshape(3, n)
    outs = [torch.zeros(n) for _ in range(3)]
    table = torch.tensor([o.data_ptr() for o in outs], dtype=torch.int64)

    def verify(expected, outputs):
        for i, o in enumerate(outs):
            written = o.clone()
            o.zero_()  # what the kernel writes through the table is not restored between runs: start afresh
            assert torch.equal(written, x[i] * 3)

    def check(scale_ok: bool):
        spec = TritonSpec(scatter_rows, (3,), [table, x, n], tuned=["BLOCK"], expected=None, isolate=False,
                          verify=verify if scale_ok else (lambda e, o: torch.equal(outs[0], x[0] * 4)))
        with TritonRunner(spec, isolate=False, measure=FAST) as runner:
            return runner.evaluate({"BLOCK": 8})

    good, wrong = check(True), check(False)
    assert good.ok, good.detail
    assert not wrong.ok and "verify callable returned False" in wrong.detail


# --------------------------------------------------------------------------- use_lock
CONFIGS = [(16, 1), (32, 2), (64, 4)]


def autotuned(configs=CONFIGS):
    """A fresh @triton.autotune over ``double`` (the Autotuner is what use_lock changes)."""
    return triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=w) for b, w in configs], key=["n"])(double)


def write_lock(lockdir: Path, tuned: dict[int, dict], *, dtype=torch.float32 if HAVE_TRITON else None,
               kernel: str = "double", slug: str = "test-gpu") -> None:
    """Entries as the triton runner writes them: the problem of autotune.triton(kernel, grid, [x, out, n])."""
    from pytest_autotune.backends.triton_runner import TritonSpec
    from pytest_autotune.lock.lockfile import merge_entries
    from pytest_autotune.lock.problem import describe_problem

    entries = {}
    for n, params in tuned.items():
        x = torch.zeros(n, dtype=dtype)
        spec = TritonSpec(autotuned(), (1,), [x, x, n], tuned=["BLOCK", "num_warps"], isolate=False)
        entries[f"tests/test_double.py::test_double[{n}]::{kernel}"] = {
            "kernel": kernel, "test": f"tests/test_double.py::test_double[{n}]", "params": params,
            "stats": {"median": 1.0, "mean": 1.0, "min": 1.0, "iqr": 0.0, "n": 1}, "samples": [1.0],
            "hashes": {"source": "s" * 16, "space": "p" * 16, "problem": f"q{n}"},
            "problem": describe_problem(spec.problem_size(), spec.args)}
    merge_entries(lockdir / f"{slug}.json", entries, {"model": "Test GPU", "kind": "cuda", "slug": slug})


@pytest.fixture
def lockdir(tmp_path: Path) -> Path:
    from pytest_autotune.lock import lookup

    lookup.clear_cache()
    d = tmp_path / "autotune.lock"
    write_lock(d, {64: {"BLOCK": 16, "num_warps": 1, "num_stages": 1},
                   1024: {"BLOCK": 64, "num_warps": 2, "num_stages": 1}})
    yield d
    lookup.clear_cache()


class BenchCounter:
    """Counts every benchmark the Autotuner starts (its _bench, through which each timed config goes)."""

    def __init__(self, kernel) -> None:
        self.calls = 0
        kernel._bench = self

    def __call__(self, *args, config, **kwargs):
        self.calls += 1
        return [float(config.kwargs["BLOCK"])] * 3


def launch(kernel, n: int, dtype=None) -> torch.Tensor:
    x = torch.arange(n, dtype=dtype or torch.float32)
    out = torch.zeros_like(x)
    kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    assert torch.equal(out, x * 2)
    return out


def test_without_use_lock_the_autotuner_benchmarks_every_config_of_a_new_key() -> None:
    kernel = autotuned()
    bench = BenchCounter(kernel)
    launch(kernel, 64)
    assert bench.calls == 3 and kernel.best_config.kwargs == {"BLOCK": 16}  # what use_lock takes away


def test_use_lock_launches_the_locked_config_of_each_key_and_never_benchmarks(lockdir: Path) -> None:
    from pytest_autotune import use_lock
    from pytest_autotune.lock.lookup import LockFallbackWarning

    kernel = autotuned()
    bench = BenchCounter(kernel)
    assert use_lock(kernel, lockdir, device="test-gpu") is kernel
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a tuned key warns nothing
        launch(kernel, 64)
        assert (kernel.best_config.kwargs, kernel.best_config.num_warps) == ({"BLOCK": 16}, 1)
        launch(kernel, 1024)
        assert (kernel.best_config.kwargs, kernel.best_config.num_warps) == ({"BLOCK": 64}, 2)
    with pytest.warns(LockFallbackWarning, match=r"key 900 .* not tuned .*nearest tuned key 1024 "
                                                 r"\(tests/test_double.py::test_double\[1024\]::double\)"):
        launch(kernel, 900)  # |ln 900 - ln 1024| = 0.13 < |ln 900 - ln 64| = 2.6
    assert kernel.best_config.kwargs == {"BLOCK": 64}
    with pytest.warns(LockFallbackWarning, match=r"key 100 .*nearest tuned key 64 "):
        launch(kernel, 100)  # nearer 64 (0.45) than 1024 (2.3)
    assert kernel.best_config.kwargs == {"BLOCK": 16}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        launch(kernel, 900)  # resolved once: no second warning
    assert bench.calls == 0 and kernel.cache == {}  # Triton's autotuner never ran


def test_strict_raises_for_an_unseen_key_and_launches_the_tuned_ones(lockdir: Path) -> None:
    from pytest_autotune import use_lock
    from pytest_autotune.lock.triton_lock import UnseenKeyError

    kernel = use_lock(autotuned(), lockdir, device="test-gpu", strict=True)
    bench = BenchCounter(kernel)
    launch(kernel, 1024)
    with pytest.raises(UnseenKeyError, match=r"use_lock\('double', strict=True\): key 900 with dtypes "
                                             r"\['torch.float32', 'torch.float32'\] is not tuned in .*test-gpu.json \(it "
                                             r"holds 1024 \[.*\], 64 \[.*\]\)"):
        launch(kernel, 900)
    assert bench.calls == 0


def test_other_dtypes_are_never_near_and_the_fallback_is_used(lockdir: Path) -> None:
    from pytest_autotune import use_lock
    from pytest_autotune.lock.lookup import LockFallbackWarning
    from pytest_autotune.lock.triton_lock import UnseenKeyError

    kernel = use_lock(autotuned(), lockdir, device="test-gpu")
    with pytest.raises(UnseenKeyError, match=r"key 64 with dtypes \['torch.float64', 'torch.float64'\].*no tuned key is comparable"):
        launch(kernel, 64, torch.float64)
    kernel = use_lock(autotuned(), lockdir, device="test-gpu", fallback=triton.Config({"BLOCK": 32}, num_warps=2))
    bench = BenchCounter(kernel)
    with pytest.warns(LockFallbackWarning, match="using the fallback configuration"):
        launch(kernel, 64, torch.float64)
    assert kernel.best_config.kwargs == {"BLOCK": 32} and bench.calls == 0
    kernel = use_lock(autotuned(), lockdir, device="test-gpu", nearest=False, fallback={"BLOCK": 32})
    with pytest.warns(LockFallbackWarning, match="fallback"):
        launch(kernel, 900)
    assert kernel.best_config.kwargs == {"BLOCK": 32}


def test_key_distance_matches_what_is_not_a_size_and_measures_sizes_in_log_space() -> None:
    from pytest_autotune.lock.triton_lock import key_distance

    assert key_distance((1024, 1024), (2048, 1024)) == pytest.approx(np.log(2))
    assert key_distance((2048, "causal"), (1024, "causal")) == pytest.approx(np.log(2))
    assert key_distance((2048, "causal"), (2048, "none")) is None  # a flag is matched, never measured
    assert key_distance((2048, True), (2048, 1)) is None
    assert key_distance((0, 64), (0, 128)) == pytest.approx(np.log(2))  # zero: matched exactly
    assert key_distance((1, 64), (0, 64)) is None
    assert key_distance((64,), (64, 64)) is None


@pytest.mark.parametrize("params, message", [
    ({"BLOCK": 16, "num_warps": 3}, r"num_warps = 3 must be a whole number from 1 to 32 and a power of two"),
    ({"BLOCK": 16, "num_stages": "2"}, r"num_stages = '2' must be a whole number from 1 to 16"),
    ({"BLOCK": 16, "num_warps": True}, r"num_warps = True must be a whole number"),
    ({"BLOK": 16}, r"'BLOK' is neither a tl.constexpr argument of the kernel \(BLOCK\) nor a launch option"),
    ({"BLOCK": 16, "maxnreg": 300}, r"maxnreg = 300 must be a whole number from 1 to 255"),
    ({"num_warps": 4}, r"sets no 'BLOCK', which the kernel's @triton.autotune configs set"),
])
def test_a_hostile_lock_entry_fails_at_use_lock_naming_file_and_entry(tmp_path: Path, params, message) -> None:
    from pytest_autotune import use_lock
    from pytest_autotune.lock import lookup
    from pytest_autotune.lock.lookup import LockLookupError

    lookup.clear_cache()
    write_lock(tmp_path, {64: params})
    with pytest.raises(LockLookupError, match=r"use_lock\('double'\): .*test-gpu.json: entry "
                                              r"'tests/test_double.py::test_double\[64\]::double': " + message):
        use_lock(autotuned(), tmp_path, device="test-gpu")


def test_use_lock_refuses_what_it_cannot_lock(lockdir: Path) -> None:
    from pytest_autotune import use_lock
    from pytest_autotune.lock.lookup import LockLookupError

    with pytest.raises(TypeError, match="not a @triton.autotune kernel"):
        use_lock(double, lockdir, device="test-gpu")
    with pytest.raises(LockLookupError, match=r"no entry with a recorded problem for 'other'.*pass fallback="):
        use_lock(autotuned(), lockdir, device="test-gpu", name="other")
    with pytest.raises(ValueError, match=r"fallback: num_warps = 5"):
        use_lock(autotuned(), lockdir, device="test-gpu", fallback=triton.Config({"BLOCK": 32}, num_warps=5))


# --------------------------------------------------------------------------- through the plugin
OWN_SPACE_KERNELS = '''
import triton
import triton.language as tl


def keep_small(configs, named_args, **kwargs):
    return [c for c in configs if c.kwargs["BLOCK"] <= 64]


@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (16, 32, 64, 128)], key=["n"],
                 reset_to_zero=["out_ptr"], prune_configs_by={"early_config_prune": keep_small})
@triton.jit
def scaled_add(x_ptr, out_ptr, n, BLOCK: tl.constexpr, ACTIVATION: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    if ACTIVATION == "relu":
        x = tl.maximum(x, 0.0)
    tl.atomic_add(out_ptr + offs, x, mask=mask)
'''

OWN_SPACE_TEST = '''
import numpy as np
import pytest

from kernels_own import scaled_add

N = 50


@pytest.mark.tune(params={"BLOCK": [8, 16, 256]}, strategy="brute_force", tolerance=5.0,
                  measure={"warmup": 0, "min_iterations": 1, "max_iterations": 1})
def test_own_space(autotune):
    x = np.linspace(-1, 1, N, dtype=np.float32)
    out = np.full(N, 3.0, dtype=np.float32)  # reset_to_zero: honoured with a space of one's own
    autotune.triton(scaled_add, lambda meta: ((N + meta["BLOCK"] - 1) // meta["BLOCK"],), [x, out, N],
                    kwargs={"ACTIVATION": "relu"}, expected=[None, np.maximum(x, 0), None])
'''


def test_a_params_dict_of_ones_own_is_the_space_and_the_prune_judges_its_configurations(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """params={...} with an @triton.autotune kernel: the dict is the space (the decorator's 16..128 are not tried),
    key/reset_to_zero hold, early_config_prune judges each of the dict's configurations (8 was refused before:
    it is not in the decorator's list), and the untuned ACTIVATION is passed by keyword."""
    import json

    from triton_support import expected_lockfile

    monkeypatch.setenv("COLUMNS", "400")
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(kernels_own=OWN_SPACE_KERNELS, test_own=OWN_SPACE_TEST)
    result = pytester.runpytest("-p", "no:unraisableexception", "-p", "no:hypothesispytest", "--autotune")
    result.assert_outcomes(passed=1)
    lock = json.loads((pytester.path / "autotune.lock" / expected_lockfile()).read_text())
    entry = lock["entries"]["test_own.py::test_own_space::scaled_add"]
    assert entry["evaluations"]["space_size"] == 3 and entry["evaluations"]["failed"] == {"invalid": 1}  # 256
    assert entry["params"]["BLOCK"] in (8, 16)
    assert entry["problem"]["size"] == [50] and entry["problem"]["args"][-1] == {"type": "str", "value": "relu"}


def test_a_calls_key_has_the_dtypes_the_lock_describes(lockdir: Path) -> None:
    """use_lock reads a call's tensor dtypes by the rule describe_problem writes them into the lock with."""
    from pytest_autotune import use_lock
    from pytest_autotune.lock.problem import array_dtypes, describe_problem

    kernel = use_lock(autotuned(), lockdir, device="test-gpu")
    values = [torch.zeros(4, dtype=torch.float16), torch.tensor(3.0), 7, np.zeros((2, 2), np.int8), "relu"]
    names = ("a", "b", "c", "d", "e")
    kernel.pytest_autotune_lock.arg_names = names
    _, dtypes = kernel.pytest_autotune_lock.key_of(values, {})
    assert list(dtypes) == array_dtypes(describe_problem(None, values)) == ["torch.float16", "int8"]
