"""The lock-and-gate lifecycle of one kernel call, usable without pytest.

For each kernel call: check its lock entry (and refuse what may not reach a
build), then tune and lock it, gate it against the lock, or leave it alone;
the result is an :class:`Outcome` (a status, the summary row, the result, and
whether the caller should pass, fail or skip). The pytest fixture is one
client of :class:`KernelLifecycle`; :func:`gate` and :class:`Kernels` serve a
plain script or another test runner.
"""
from ..engine.evaluator import Budget
from ..gate.budget import SessionGateBudget, parse_gate_budget
from ..measure.bounds import check_memory_limit, parse_size
from ..measure.pauses import PAUSE_SCALE_ENV, pause_scale
from ..measure.timing import TimingStats
from ..execution.compile_pool import parse_compile_workers
from ..backends.triton_kernel import use_interpreter_without_gpu
from ..space import DEFAULT_MAX_CONFIGURATIONS
from ..strategies import StrategyError, validate_strategy_spec
from .compile_check import DEFAULT_SAMPLE, compile_outcome, parse_arch_list, positive_sample
from ..execution.kernel import locate_source
from .calls import (KernelCall, function_call, implicit_restrictions, replay_call, source_call, space_hash, triton_call,
                    with_restrictions)
from .host import Host
from .outcome import TUNE_STATUS, Action, KernelResult, Mode, Outcome, Status, SummaryRow
from .progress import Progress, eta
from .prune import Collected, Orphan, Rename, find_orphans, find_renames, orphaned_sources, rekey, remove_orphans
from .run import KernelLifecycle
from .scratch import ScratchCache, fingerprint
from .script import Kernels, gate_kernel, kernel_spec
from .settings import (DEVICE_CONSTANTS, INCOMPARABLE_POLICIES, MARKER_ARGS, MISSING_POLICIES, MarkerError, Options,
                       TuneSettings, parse_marker)

# The first line: what the pytest glue needs of the layers below to read its options, through this one door
# (tests/project/test_architecture.py checks that the glue imports nothing else from below).
__all__ = ["PAUSE_SCALE_ENV", "pause_scale", "Budget", "SessionGateBudget", "parse_gate_budget", "check_memory_limit", "parse_size", "parse_compile_workers", "use_interpreter_without_gpu",
           "DEFAULT_MAX_CONFIGURATIONS", "StrategyError", "validate_strategy_spec",
           "Action", "DEFAULT_SAMPLE", "DEVICE_CONSTANTS", "Host", "INCOMPARABLE_POLICIES", "KernelCall", "KernelLifecycle",
           "KernelResult", "Kernels", "MARKER_ARGS", "MISSING_POLICIES", "MarkerError", "Mode", "Options", "Outcome",
           "Progress", "ScratchCache", "Status", "SummaryRow", "TimingStats", "TUNE_STATUS", "TuneSettings", "eta", "fingerprint",
           "compile_outcome", "Collected", "Orphan", "Rename", "find_orphans", "find_renames", "orphaned_sources", "rekey", "remove_orphans",
           "space_hash", "function_call", "gate_kernel", "kernel_spec", "parse_arch_list", "positive_sample", "parse_marker", "replay_call", "source_call", "triton_call",
           "locate_source", "implicit_restrictions", "with_restrictions"]
