"""check="races": every configuration runs once under Oclgrind before it is timed; racing and
out-of-bounds configurations are failures with Oclgrind's message and the user's source line."""
from __future__ import annotations

import numpy as np
from opencl_support import PAIRS_CL, RACING_SIZES, SAFE_SIZES, oclgrind, pairs_expected  # noqa: F401

from pytest_autotune.measure.timing import MeasureOptions
from pytest_autotune.results import FailureKind
from pytest_autotune.runners import KernelSpec, make_runner
from pytest_autotune.backends.oclgrind import parse_log
from pytest_autotune.engine.tuner import tune

FAST = MeasureOptions(warmup=0, min_iterations=3, max_iterations=3, watchdog_s=20.0)

# No bounds guard: the global size is rounded up to whole work-groups, so every work-group size
# that does not divide n reads and writes past the end of the buffers.
UNGUARDED = r"""
__kernel void twice(__global float *out, __global const float *in) {
    const int i = get_global_id(0);
    out[i] = 2.0f * in[i];
}
"""


def pairs_spec(check: str | None, n: int = 1024) -> KernelSpec:
    a = np.random.default_rng(0).random(n, dtype=np.float32)
    return KernelSpec(PAIRS_CL, "pairs", n, [np.zeros_like(a), a], expected=[pairs_expected(a), None], check=check)


def test_racing_work_group_sizes_fail_the_others_tune(oclgrind) -> None:
    sizes = [*RACING_SIZES, *SAFE_SIZES]
    with make_runner(pairs_spec(None), measure=FAST) as runner:
        unchecked = tune(runner, params={"block_size_x": sizes}, strategy="brute_force")
    with make_runner(pairs_spec("races"), measure=FAST) as runner:
        checked = tune(runner, params={"block_size_x": sizes}, strategy="brute_force")
    # On the CPU the racing configurations verify: without the check they are ordinary candidates.
    assert unchecked.failures == {}
    outcomes = {r.params["block_size_x"]: r.measurement for r in checked.history.records}
    for bs in RACING_SIZES:
        m = outcomes[bs]
        assert m.failure is FailureKind.RACE and m.value is None and not m.samples  # never timed
        assert m.detail.startswith("Oclgrind: Read-write data race at local memory")
        assert "at kernel.cl:9:" in m.detail  # the neighbour read, numbered as in the user's source
        assert "out[gid] = 0.5f * (tile[lid] + tile[lid - lid % 2]);" in m.detail  # and its text
        assert "tile[lid] = in[gid];" in m.detail  # the other side of the race
    for bs in SAFE_SIZES:
        assert outcomes[bs].ok and len(outcomes[bs].samples) == 3 and outcomes[bs].timings["check_s"] > 0
    assert checked.failures == {"race": len(RACING_SIZES)}
    assert checked.params["block_size_x"] in SAFE_SIZES
    np.testing.assert_allclose(checked.outputs[0], pairs_spec(None).expected[0])
    print("\nwithout the check:", {r.params["block_size_x"]: f"{r.value:.4f} ms" for r in unchecked.history.records})
    print("with check='races':", {bs: (str(m.failure) if m.failure else f"{m.value:.4f} ms")
                                  for bs, m in outcomes.items()})
    print(outcomes[8].detail)


def test_out_of_bounds_work_group_sizes_fail(oclgrind) -> None:
    n = 1000
    a = np.arange(n, dtype=np.float32)
    spec = KernelSpec(UNGUARDED, "twice", n, [np.zeros_like(a), a], expected=[2 * a, None], check="memory")
    with make_runner(spec, measure=FAST) as runner:
        outcomes = {bs: runner.evaluate({"block_size_x": bs}) for bs in (8, 40, 64, 128)}
    for bs in (8, 40):  # 1000 is a multiple: exactly n work-items
        assert outcomes[bs].ok, outcomes[bs].detail
    for bs in (64, 128):
        m = outcomes[bs]
        assert m.failure is FailureKind.OUT_OF_BOUNDS and "Invalid read of size 4 at global memory" in m.detail
        assert "at kernel.cl:4:" in m.detail and "out[i] = 2.0f * in[i];" in m.detail


def test_memory_check_does_not_look_for_races(oclgrind) -> None:
    with make_runner(pairs_spec("memory"), measure=FAST) as runner:
        assert runner.evaluate({"block_size_x": 8}).ok


def test_parse_log_classifies_and_restores_the_users_line() -> None:
    log = (
        "\nRead-write data race at local memory address 0x1000\n\tKernel: k\n\t\n"
        "\tFirst entity:  Global(1,0,0)\n\t  load\n\tAt line 2 (column 3) of k.cl:\n\t  #define X 1\n\n"
        "\nInvalid write of size 4 at global memory address 0x2\n\tKernel: k\n"
        "\tAt line 1 (column 1) of other.h:\n\t  header text\n\n"
        "\nWork-group divergence detected (barrier)\n\tKernel: k\n\n"
        "\nOclgrind: 3 errors generated - suppressing further errors\n"
    )
    findings = parse_log(log, "k.cl", "first line\nsecond line\n")
    assert [f.kind for f in findings] == [FailureKind.RACE, FailureKind.OUT_OF_BOUNDS, FailureKind.RUNTIME]
    assert findings[0].location == "k.cl:2:3" and "second line" in findings[0].text and "#define" not in findings[0].text
    assert findings[1].location == "other.h:1:1" and "header text" in findings[1].text  # another file: as given
    assert findings[2].location == ""


def test_check_is_part_of_the_gate_too(oclgrind) -> None:
    """The gate re-runs the locked configuration through evaluate: a racing lock is broken, not timed."""
    with make_runner(pairs_spec("races"), measure=FAST) as runner:
        assert runner.evaluate({"block_size_x": 16}).failure is FailureKind.RACE
        assert runner.evaluate({"block_size_x": 64}).ok  # the checker worker restarted after the race
