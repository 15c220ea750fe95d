"""Test-suite wiring: pytester for inner sessions, GPU tests skipped cleanly without a device (failed instead
with ``AUTOTUNE_REQUIRE_GPU=1``),
and the shared brute-forced spaces located once."""
from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest_plugins = ["pytester"]

# pytester's in-process sessions drop every module first imported inside them when they end, and a
# nanobind extension cannot be initialised twice in one process: pyopencl imported again after that
# took an xdist worker down. Imported here, once, it is never first imported inside an inner session.
with contextlib.suppress(ImportError):
    import pyopencl  # noqa: F401

# The suite checks that kernels tune, lock and gate, not how robust the gate is (benchmarks/bench_gate_robust.py
# measures that): the pauses that spread the lock's and the gate's rounds over the host's slow states were a
# third of an end-to-end test's wall time, spent asleep. Tests of the pauses themselves take the variable away
# (the real_pauses fixture); inner sessions and subprocesses inherit it.
os.environ.setdefault("PYTEST_AUTOTUNE_PAUSE_SCALE", "0")

REPO = Path(__file__).resolve().parent
# The tests live in folders that mirror the package (tests/lock/, tests/gate/, ...); their shared helpers
# (fake_cuda, opencl_support, strategy_fixtures, triton_support) and data stay in tests/ itself.
sys.path.insert(0, str(REPO / "tests"))


@functools.lru_cache(maxsize=1)
def cuda_device_reason() -> str | None:
    """None when a CUDA device is usable from Python, else why not (checked without creating a context)."""
    try:
        import cupy  # noqa: F401
    except ImportError:
        try:
            import pycuda.driver as drv  # noqa: F401
        except ImportError:
            return "neither cupy nor pycuda is installed"
        try:
            drv.init()
            return None if drv.Device.count() > 0 else "no CUDA device"
        except Exception as exc:  # pragma: no cover - depends on the machine
            return f"CUDA unavailable: {exc}"
    try:
        import cupy

        return None if cupy.cuda.runtime.getDeviceCount() > 0 else "no CUDA device"
    except Exception as exc:  # pragma: no cover - depends on the machine
        return f"CUDA unavailable: {exc}"


REQUIRE_GPU_ENV = "AUTOTUNE_REQUIRE_GPU"


def gpu_required() -> bool:
    """``AUTOTUNE_REQUIRE_GPU=1`` (a GPU job, the device check): a ``gpu`` test without a usable device fails."""
    return os.environ.get(REQUIRE_GPU_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not any(item.get_closest_marker("gpu") for item in items):
        return
    reason = cuda_device_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"gpu test: {reason}")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    """With ``AUTOTUNE_REQUIRE_GPU=1`` a skipped ``gpu`` test is a failure, whoever skipped it (no device, a
    fixture's importorskip of CuPy or PyCUDA, a missing nvcc): a GPU job must not pass green having run none.
    Skipped at set-up, it is reported as an error there (pytest's word for a failure outside the test body)."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and item.get_closest_marker("gpu") and gpu_required() and not hasattr(report, "wasxfail"):
        longrepr = report.longrepr
        why = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
        report.outcome = "failed"
        report.longrepr = f"{why} ({REQUIRE_GPU_ENV}=1: a gpu test that cannot run fails)"


class _Room:
    """Tests marked ``neighbours`` start real busy neighbours (spinners pinned to a CPU the product's rounds
    use too): beside them a timing test on the other xdist worker read its winner wrong. Such a test runs
    with the room to itself: every other test holds the room shared, a neighbours test exclusively. The
    turnstile gives a waiting neighbours test priority (flock alone would let the other worker's next test
    in first, for ever)."""

    def __init__(self, run_id: str) -> None:
        base = Path(tempfile.gettempdir()) / f"pytest-autotune-room-{run_id}"
        self.turnstile = open(f"{base}.turnstile", "a")  # noqa: SIM115 - held for the worker's life
        self.room = open(f"{base}.room", "a")  # noqa: SIM115

    @contextlib.contextmanager
    def entered(self, alone: bool) -> Iterator[None]:
        fcntl.flock(self.turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(self.room, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            if not alone:
                fcntl.flock(self.turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(self.room, fcntl.LOCK_UN)
            if alone:
                fcntl.flock(self.turnstile, fcntl.LOCK_UN)


_ROOM: _Room | None = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    """Under xdist, a ``neighbours`` test runs with no other test beside it (see ``_Room``)."""
    global _ROOM
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run_id is None:  # one process: nothing runs beside any test
        yield
        return
    if _ROOM is None:
        _ROOM = _Room(run_id)
    with _ROOM.entered(alone=item.get_closest_marker("neighbours") is not None):
        yield


@pytest.fixture
def real_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pauses between rounds as a user's session takes them (the suite scales them to 0)."""
    monkeypatch.delenv("PYTEST_AUTOTUNE_PAUSE_SCALE", raising=False)


def shared_spaces_dir() -> Path:
    """``$AUTOTUNE_SPACES`` or ``../shared/data/spaces`` beside the repository."""
    return Path(os.environ.get("AUTOTUNE_SPACES", REPO.parent / "shared" / "data" / "spaces"))


@pytest.fixture(scope="session")
def spaces_dir() -> Path:
    """The brute-forced spaces folder; tests using it skip when it is absent."""
    path = shared_spaces_dir()
    if not path.is_dir():
        pytest.skip(f"shared search spaces not found at {path} (set AUTOTUNE_SPACES)")
    return path
