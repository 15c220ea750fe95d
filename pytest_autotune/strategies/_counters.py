"""Hardware-counter model and bottleneck analysis for the profile-based searcher.

Method: J. Filipovič, J. Hozzová, A. Nezarat, J. Oľha, F. Petrovič, *Using
hardware performance counters to speed up autotuning convergence on GPUs*,
J. Parallel Distrib. Comput. 160 (2022), arXiv:2102.05297; its reference
implementation is KTT's ``ProfileBasedSearcher.py`` (HiPerCoRe/KTT). This
module holds the three pieces that do not depend on the search loop:

* :class:`CounterModel` -- one decision-tree regressor per operation counter
  (PC_ops), mapping tuning-parameter values to the counter's value, trained on
  a space measured with counters (KTT output; failed configurations carry no
  counters and are left out), saved to and loaded from a JSON file.
* :func:`analyze_bottlenecks` -- the expert system: from the counters of one
  profiled run, a bottleneck vector with entries in [0, 1].
* :func:`compute_changes` and :func:`score_candidates` /
  :func:`normalise_scores` -- the required counter changes (dPC) and the
  weights of candidate configurations.

Counter mapping
---------------
The KTT files carry Nsight Compute metric names (compute capability >= 7.0).
The paper's counters (nvprof names; PC_stress = utilisation percentages,
PC_ops = operation counts) map onto them as follows (paper name -> metric)::

    PC_stress
    dram_utilization                  dram__throughput.avg.pct_of_peak_sustained_elapsed
    l2_utilization                    lts__t_sectors.avg.pct_of_peak_sustained_elapsed
    tex_utilization                   l1tex__t_requests_pipe_lsu_mem_global_op_ld.avg.pct_of_peak_sustained_active
    shared_utilization                l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed
    achieved_occupancy                sm__warps_active.avg.pct_of_peak_sustained_active
    sm_efficiency                     smsp__cycles_active.avg.pct_of_peak_sustained_elapsed
    issue_slot_utilization            smsp__issue_active.avg.pct_of_peak_sustained_active
    special_fu_utilization            smsp__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active
    tex_fu_utilization                smsp__inst_executed_pipe_tex.avg.pct_of_peak_sustained_active
    warp_execution_efficiency         smsp__thread_inst_executed_per_inst_executed.ratio  (x 100 / 32)
    warp_nonpred_execution_efficiency smsp__thread_inst_executed_pred_on_per_inst_executed.ratio (x 100 / 32) when
                                      profiled (ncu.py asks for it). The KTT files lack it; the closest available
                                      counter is used, as KTT does: smsp__thread_inst_executed_per_inst_executed.pct,
                                      which in the files equals the ratio x 100 / 32, so there the warp-efficiency
                                      correction counts twice (the files' warp efficiency is 82-100 %, median 99 %).

    PC_ops
    dram_read_transactions            dram__sectors_read.sum
    dram_write_transactions           dram__sectors_write.sum
    l2_read_transactions              lts__t_sectors_op_read.sum
    l2_write_transactions             lts__t_sectors_op_write.sum
    tex_cache_transactions            l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum   (texture/global loads)
    local_memory_overhead             l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum and ..._op_st.sum; the overhead
                                      is (local ld + st sectors) / (L2 read + write sectors), nvprof's definition
                                      (local traffic over all L1-L2 traffic); both counters get the change
    shared_load_transactions          l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum
    shared_store_transactions         l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum
    inst_fp_32                        smsp__sass_thread_inst_executed_op_fp32_pred_on.sum
    inst_fp_64                        smsp__sass_thread_inst_executed_op_fp64_pred_on.sum
    inst_integer                      smsp__sass_thread_inst_executed_op_integer_pred_on.sum
    inst_misc                         smsp__sass_thread_inst_executed_op_misc_pred_on.sum
    inst_compute_ld_st                smsp__sass_thread_inst_executed_op_memory_pred_on.sum
    inst_control                      smsp__sass_thread_inst_executed_op_control_pred_on.sum
    inst_bit_convert                  smsp__sass_thread_inst_executed_op_conversion_pred_on.sum
    inst_executed                     smsp__inst_executed.sum
    issue_slot_utilization            smsp__issue_active.avg.pct_of_peak_sustained_active  (also a model target)
    sm_efficiency                     smsp__cycles_active.avg.pct_of_peak_sustained_elapsed  (also a model target)
    KTT's "Global size" (threads)     launch__thread_count -- ABSENT from the KTT files: the five-threads-per-core
                                      parallelism term is 0 there (the convolution's 16.7 M threads would make it 0
                                      on any current GPU anyway); ncu.py reports it, and the core count comes from
                                      the ``cores`` hyperparameter or ncu's device__attribute_* metrics.

Recorded but unused, as in KTT: smsp__pipe_fma_cycles_active (the FP32 utilisation is derived from instruction
counts instead), smsp__inst_executed_pipe_fp64/lsu, the fp16 counters.

Equations (all utilisations as fractions: percentage / 100)
---------------------------------------------------------------
Memory subsystems, weighted by their read/write share::

    bn_dram_read  = R_dram / (R_dram + W_dram) * U_dram        (and bn_dram_write with W_dram)
    bn_l2_read    = R_l2 / (R_l2 + W_l2) * U_l2                (and bn_l2_write)
    bn_tex        = U_tex
    bn_shared_ld  = LD_sh / (LD_sh + ST_sh) * U_sh             (and bn_shared_st)
    bn_local      = min(1, (LD_loc + ST_loc) / (R_l2 + W_l2)) * max(U_dram, U_l2, U_tex)   (busiest memory)

Instructions, utilisation per type corrected by warp efficiency::

    I_fitted  = inst_executed * 32 * (100 / E_warp) * (100 / E_pred)
    U_issue   = min(1, issue% / 50)        (dual issue: one type fills at most half of the issue slots)
    bn_<type> = N_<type> / I_fitted * U_issue       for fp32, fp64, int, misc, ld/st, control, conversion
    bn_sfu    = U_xu;  bn_texfu = U_tex_pipe
    share_max = max(bn_<type> / U_issue, bn_sfu)
    bn_issue  = (1 - issue%/100) * w,  w = (share_max - r) / (1 - r) if share_max > r else 0   (r = inst_reaction, 0.7)

Parallelism (five threads per CUDA core keep a GPU busy)::

    bn_sm_parallel  = 1 - occupancy%/100           (reported; the paper derives no counter change from it)
    bn_gpu_parallel = max(0, 1 - sm_efficiency%/100)
    bn_threads      = max(0, (5 * cores - threads) / (5 * cores))     (needs the core count and the thread count)

Required counter changes (dPC; the sign is the direction, the size the importance)::

    memory counters        dPC = -bn                 (dram r/w, l2 r/w, global loads, local ld and st, shared ld/st)
    instruction counters   dPC = -(bn - r) / (1 - r) only where bn > r
    issue utilisation      dPC = +bn_issue
    SM efficiency          dPC = +bn_gpu_parallel
    threads                dPC = +bn_threads

Score of a candidate c against the profiled configuration a, both predicted by
the model (pc), and its normalisation into a sampling weight::

    s_c = sum_p dPC_p * (pc_p(c) - pc_p(a)) / (pc_p(c) + pc_p(a))       (0/0 terms count 0)
    w_c = (1 + s_c / s_max)^e   if s_c > 0
          (1 - s_c / s_min)^e   if gamma < s_c < 0
          0.0001                otherwise (and as a floor),          e = 8, gamma = -0.25

The difference is taken candidate minus profiled, as in the reference
implementation: a candidate that lowers a counter the bottleneck asks to lower
(dPC < 0) scores positive. (Written profiled minus candidate, every sign flips
and the searcher is steered *away* from the remedy.)

Departures from KTT's code, each a fix of an evident slip: KTT computes the
local-memory overhead from a counter's *position* in the list instead of its
value; it leaves the FP32 change unscaled (``-bn``) while scaling every other
instruction type; SM efficiency above 100 % (the files reach 104.9 %) would
give a negative bottleneck, clipped to 0 here.

Model file format
-----------------
A JSON document (``.json``, or gzip-compressed when the name ends in ``.gz``),
no pickle, so loading a model file cannot execute code::

    {"format": "pytest-autotune-counter-model", "version": 1,
     "parameters": [{"name": ..., "values": [...], "encoding": "value" | "index"}, ...],
     "counters": [...],
     "trees": [{"counter": ..., "children_left": [...], "children_right": [...],
                "feature": [...], "threshold": [...], "value": [...]}, ...],
     "metadata": {...}}

Each tree is scikit-learn's ``DecisionTreeRegressor.tree_`` flattened (leaves
have ``children_left == -1``; ``value`` is the leaf prediction per node).
A parameter with only numbers is fed to the trees as its value ("value"),
any other by its position in ``values`` ("index"). Prediction walks the
arrays with numpy exactly as scikit-learn does (features as float32, then
``x <= threshold`` goes left), so a loaded model predicts bit-for-bit what the
fitted trees predicted, and loading needs no scikit-learn.
"""
from __future__ import annotations

import datetime as _dt
import gzip
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ..errors import AutotuneError

__all__ = [
    "CounterModel", "CounterModelError", "MODEL_FORMAT", "MODEL_COUNTERS", "PC_STRESS", "PC_OPS", "REQUIRED_COUNTERS",
    "analyze_bottlenecks", "compute_changes", "score_candidates", "normalise_scores", "train_model",
    "load_model", "cuda_cores_per_sm", "cores_of", "missing_counters",
]

MODEL_FORMAT = "pytest-autotune-counter-model"
MODEL_VERSION = 1

# -- Nsight Compute metric names -------------------------------------------------------------------
DRAM_UTIL = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
DRAM_READ = "dram__sectors_read.sum"
DRAM_WRITE = "dram__sectors_write.sum"
L2_UTIL = "lts__t_sectors.avg.pct_of_peak_sustained_elapsed"
L2_READ = "lts__t_sectors_op_read.sum"
L2_WRITE = "lts__t_sectors_op_write.sum"
TEX_UTIL = "l1tex__t_requests_pipe_lsu_mem_global_op_ld.avg.pct_of_peak_sustained_active"
TEX_LOADS = "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"
LOCAL_LOADS = "l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum"
LOCAL_STORES = "l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum"
SHARED_UTIL = "l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed"
SHARED_LOADS = "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"
SHARED_STORES = "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum"
OCCUPANCY = "sm__warps_active.avg.pct_of_peak_sustained_active"
SM_EFFICIENCY = "smsp__cycles_active.avg.pct_of_peak_sustained_elapsed"
INST_FP32 = "smsp__sass_thread_inst_executed_op_fp32_pred_on.sum"
INST_FP64 = "smsp__sass_thread_inst_executed_op_fp64_pred_on.sum"
INST_INT = "smsp__sass_thread_inst_executed_op_integer_pred_on.sum"
INST_MISC = "smsp__sass_thread_inst_executed_op_misc_pred_on.sum"
INST_LDST = "smsp__sass_thread_inst_executed_op_memory_pred_on.sum"
INST_CONTROL = "smsp__sass_thread_inst_executed_op_control_pred_on.sum"
INST_CONVERSION = "smsp__sass_thread_inst_executed_op_conversion_pred_on.sum"
INST_EXECUTED = "smsp__inst_executed.sum"
ISSUE_UTIL = "smsp__issue_active.avg.pct_of_peak_sustained_active"
SFU_UTIL = "smsp__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active"
TEX_PIPE_UTIL = "smsp__inst_executed_pipe_tex.avg.pct_of_peak_sustained_active"
WARP_EFFICIENCY = "smsp__thread_inst_executed_per_inst_executed.ratio"
WARP_EFFICIENCY_PCT = "smsp__thread_inst_executed_per_inst_executed.pct"
WARP_NONPRED_EFFICIENCY = "smsp__thread_inst_executed_pred_on_per_inst_executed.ratio"
THREADS = "launch__thread_count"
SM_COUNT = "device__attribute_multiprocessor_count"
CC_MAJOR = "device__attribute_compute_capability_major"
CC_MINOR = "device__attribute_compute_capability_minor"

PC_STRESS: tuple[str, ...] = (
    DRAM_UTIL, L2_UTIL, TEX_UTIL, SHARED_UTIL, OCCUPANCY, SM_EFFICIENCY, ISSUE_UTIL, SFU_UTIL, TEX_PIPE_UTIL,
    WARP_EFFICIENCY, WARP_EFFICIENCY_PCT,
)
"""Utilisation counters read from the profiled run (the bottleneck analysis)."""

# instruction type -> (count counter, bottleneck key)
_INSTRUCTIONS: tuple[tuple[str, str], ...] = (
    (INST_FP32, "fp32"), (INST_FP64, "fp64"), (INST_INT, "int"), (INST_MISC, "misc"), (INST_LDST, "ldst"),
    (INST_CONTROL, "control"), (INST_CONVERSION, "conversion"),
)

PC_OPS: tuple[str, ...] = (
    DRAM_READ, DRAM_WRITE, L2_READ, L2_WRITE, TEX_LOADS, LOCAL_LOADS, LOCAL_STORES, SHARED_LOADS, SHARED_STORES,
    INST_FP32, INST_FP64, INST_INT, INST_MISC, INST_LDST, INST_CONTROL, INST_CONVERSION, INST_EXECUTED,
)
"""Operation counters: what a tuning parameter changes and the model predicts."""

MODEL_COUNTERS: tuple[str, ...] = PC_OPS + (ISSUE_UTIL, SM_EFFICIENCY, THREADS)
"""Every counter that can receive a required change (dPC), so every target of the model (when recorded)."""

REQUIRED_COUNTERS: tuple[str, ...] = tuple(dict.fromkeys(PC_STRESS + PC_OPS))
"""What a profiler should deliver for the full analysis (plus :data:`THREADS` for the parallelism term)."""

DEFAULT_INST_REACTION = 0.7
DEFAULT_EXPONENT = 8.0
DEFAULT_CUTOFF = -0.25
SCORE_FLOOR = 1e-4
THREADS_PER_CORE = 5
DUAL_ISSUE_PCT = 50.0

_CORES_PER_SM = {(3, 0): 192, (3, 2): 192, (3, 5): 192, (3, 7): 192, (5, 0): 128, (5, 2): 128, (5, 3): 128,
                 (6, 0): 64, (6, 1): 128, (6, 2): 128, (7, 0): 64, (7, 2): 64, (7, 5): 64, (8, 0): 64,
                 (8, 6): 128, (8, 7): 128, (8, 9): 128, (9, 0): 128}


def cuda_cores_per_sm(major: int, minor: int) -> int:
    """FP32 cores per multiprocessor of a compute capability (128 for unknown ones)."""
    return _CORES_PER_SM.get((int(major), int(minor)), 128)


def cores_of(counters: Mapping[str, float]) -> int | None:
    """CUDA cores of the profiled GPU from Nsight Compute's device attributes, when the profile has them."""
    try:
        sms = int(counters[SM_COUNT])
        major, minor = int(counters[CC_MAJOR]), int(counters[CC_MINOR])
    except (KeyError, TypeError, ValueError, OverflowError):
        return None
    return sms * cuda_cores_per_sm(major, minor) if sms > 0 else None


class CounterModelError(AutotuneError, ValueError):
    """A model file that cannot be read, or a space the model does not fit; the message says which."""


# -- bottleneck analysis ---------------------------------------------------------------------------


def _get(counters: Mapping[str, float], name: str, missing: list[str]) -> float:
    v = counters.get(name)
    try:
        v = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        v = math.nan
    if not math.isfinite(v):
        missing.append(name)
        return math.nan
    return v


def _share(part: float, other: float) -> float:
    total = part + other
    return part / total if total > 0 else 0.0


def _nz(x: float) -> float:
    return 0.0 if not math.isfinite(x) else x


def analyze_bottlenecks(counters: Mapping[str, float], *, cores: int | None = None,
                        inst_reaction: float = DEFAULT_INST_REACTION) -> dict[str, float]:
    """The bottleneck vector (entries in [0, 1]) of one profiled run (see the module docstring).

    ``counters`` maps Nsight Compute metric names to values; ``cores`` is the
    number of CUDA cores of the GPU that ran it (needed, with
    ``launch__thread_count``, for the thread-parallelism term; when ``None`` it
    comes from the profile's ``device__attribute_*`` counters if present). A counter the
    profile lacks makes the terms that need it 0 (:func:`missing_counters`
    lists them).
    """
    missing: list[str] = []
    g = lambda name: _get(counters, name, missing)  # noqa: E731
    bn: dict[str, float] = {}

    u_dram = _nz(g(DRAM_UTIL)) / 100.0
    r, w = _nz(g(DRAM_READ)), _nz(g(DRAM_WRITE))
    bn["dram_read"] = _share(r, w) * u_dram
    bn["dram_write"] = _share(w, r) * u_dram

    u_l2 = _nz(g(L2_UTIL)) / 100.0
    r2, w2 = _nz(g(L2_READ)), _nz(g(L2_WRITE))
    bn["l2_read"] = _share(r2, w2) * u_l2
    bn["l2_write"] = _share(w2, r2) * u_l2

    u_tex = _nz(g(TEX_UTIL)) / 100.0
    bn["tex"] = u_tex

    local = _nz(g(LOCAL_LOADS)) + _nz(g(LOCAL_STORES))
    overhead = min(1.0, local / (r2 + w2)) if r2 + w2 > 0 else 0.0
    bn["local"] = overhead * max(u_dram, u_l2, u_tex)

    u_sh = _nz(g(SHARED_UTIL)) / 100.0
    ld, st = _nz(g(SHARED_LOADS)), _nz(g(SHARED_STORES))
    bn["shared_read"] = _share(ld, st) * u_sh
    bn["shared_write"] = _share(st, ld) * u_sh

    occ = g(OCCUPANCY)
    bn["sm_parallel"] = max(0.0, 1.0 - occ / 100.0) if math.isfinite(occ) else 0.0
    sm_eff = g(SM_EFFICIENCY)
    bn["gpu_parallel"] = max(0.0, 1.0 - sm_eff / 100.0) if math.isfinite(sm_eff) else 0.0
    threads = counters.get(THREADS)
    try:
        threads = float(threads)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        threads = math.nan
    if not cores:
        cores = cores_of(counters)
    if cores and cores > 0 and math.isfinite(threads):
        need = THREADS_PER_CORE * cores
        bn["threads"] = max(0.0, (need - threads) / need)
    else:
        bn["threads"] = 0.0

    # instructions
    issue = g(ISSUE_UTIL)
    executed = g(INST_EXECUTED)
    ratio = g(WARP_EFFICIENCY)
    e_warp = ratio * 100.0 / 32.0 if math.isfinite(ratio) else 100.0
    pred = counters.get(WARP_NONPRED_EFFICIENCY)
    try:
        e_pred = float(pred) * 100.0 / 32.0  # type: ignore[arg-type]
    except (TypeError, ValueError):
        e_pred = math.nan
    if not math.isfinite(e_pred):
        e_pred = _get(counters, WARP_EFFICIENCY_PCT, [])
        if not math.isfinite(e_pred):
            e_pred = 100.0
    counts = {key: _nz(g(name)) for name, key in _INSTRUCTIONS}
    u_sfu = _nz(g(SFU_UTIL)) / 100.0
    bn["sfu"] = u_sfu
    bn["tex_unit"] = _nz(g(TEX_PIPE_UTIL)) / 100.0
    if math.isfinite(issue) and math.isfinite(executed) and executed > 0 and e_warp > 0 and e_pred > 0:
        fitted = executed * 32.0 * (100.0 / e_warp) * (100.0 / e_pred)
        u_issue = min(1.0, issue / DUAL_ISSUE_PCT)
        shares = {key: counts[key] / fitted for key in counts}
        for key, s in shares.items():
            bn[key] = s * u_issue
        share_max = max(max(shares.values()), u_sfu)
        weight = (share_max - inst_reaction) / (1.0 - inst_reaction) if share_max > inst_reaction else 0.0
        bn["issue"] = max(0.0, 1.0 - issue / 100.0) * weight
    else:
        for key in counts:
            bn[key] = 0.0
        bn["issue"] = 0.0
    return bn


def missing_counters(counters: Mapping[str, float]) -> list[str]:
    """Counters the bottleneck analysis needs that ``counters`` lacks (their terms count 0)."""
    need = set(REQUIRED_COUNTERS) - {WARP_EFFICIENCY_PCT}
    out = []
    for name in sorted(need):
        v = counters.get(name)
        try:
            ok = v is not None and math.isfinite(float(v))
        except (TypeError, ValueError):
            ok = False
        if not ok:
            out.append(name)
    return out


def compute_changes(bottlenecks: Mapping[str, float], *,
                    inst_reaction: float = DEFAULT_INST_REACTION) -> dict[str, float]:
    """Required change of each counter (dPC): the sign is the direction, the size the importance."""
    b = lambda key: float(bottlenecks.get(key, 0.0))  # noqa: E731
    dpc = {
        DRAM_READ: -b("dram_read"),
        DRAM_WRITE: -b("dram_write"),
        L2_READ: -b("l2_read"),
        L2_WRITE: -b("l2_write"),
        TEX_LOADS: -b("tex"),
        LOCAL_LOADS: -b("local"),
        LOCAL_STORES: -b("local"),
        SHARED_LOADS: -b("shared_read"),
        SHARED_STORES: -b("shared_write"),
    }
    for name, key in _INSTRUCTIONS:
        v = b(key)
        dpc[name] = -(v - inst_reaction) / (1.0 - inst_reaction) if v > inst_reaction else 0.0
    dpc[ISSUE_UTIL] = b("issue")
    dpc[SM_EFFICIENCY] = b("gpu_parallel")
    dpc[THREADS] = b("threads")
    return dpc


def score_candidates(changes: Mapping[str, float], counters: Sequence[str], reference: np.ndarray,
                     candidates: np.ndarray) -> np.ndarray:
    """Raw scores s_c of candidates (rows of ``candidates``, columns = ``counters``) against ``reference``.

    ``reference`` and ``candidates`` are the model's predictions (same column
    order as ``counters``); counters without a required change are skipped,
    and a term whose denominator is 0 counts 0.
    """
    cols = [j for j, name in enumerate(counters) if changes.get(name, 0.0) != 0.0]
    candidates = np.asarray(candidates, dtype=np.float64)
    if not cols:
        return np.zeros(len(candidates))
    d = np.array([changes[counters[j]] for j in cols], dtype=np.float64)
    ref = np.asarray(reference, dtype=np.float64)[cols]
    cand = candidates[:, cols]
    num = cand - ref
    den = cand + ref
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(den != 0, num / np.where(den != 0, den, 1.0), 0.0)
    rel = np.nan_to_num(rel, nan=0.0, posinf=0.0, neginf=0.0)
    return rel @ d


def normalise_scores(scores: np.ndarray, *, exponent: float = DEFAULT_EXPONENT, cutoff: float = DEFAULT_CUTOFF,
                     floor: float = SCORE_FLOOR) -> np.ndarray:
    """Sampling weights from raw scores: (1 + s/s_max)^e for s > 0, (1 - s/s_min)^e for cutoff < s < 0, else floor.

    ``s_max`` / ``s_min`` are the largest and the smallest score of ``scores``;
    every weight is at least ``floor``.
    """
    s = np.asarray(scores, dtype=np.float64)
    w = np.full(s.shape, floor)
    if s.size == 0:
        return w
    s_max, s_min = float(s.max()), float(s.min())
    pos = s > 0
    if pos.any():
        w[pos] = (1.0 + s[pos] / s_max) ** exponent
    neg = (s < 0) & (s > cutoff)
    if neg.any():
        w[neg] = (1.0 - s[neg] / s_min) ** exponent
    return np.maximum(w, floor)


# -- the counter model -------------------------------------------------------------------------------


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


def _plain(v: Any) -> Any:
    return v.item() if isinstance(v, np.generic) else v


@dataclass
class _Tree:
    counter: str
    left: np.ndarray
    right: np.ndarray
    feature: np.ndarray
    threshold: np.ndarray
    value: np.ndarray

    @classmethod
    def from_sklearn(cls, counter: str, est: Any) -> "_Tree":
        t = est.tree_
        return cls(counter, np.asarray(t.children_left, dtype=np.int64).copy(),
                   np.asarray(t.children_right, dtype=np.int64).copy(),
                   np.asarray(t.feature, dtype=np.int64).copy(), np.asarray(t.threshold, dtype=np.float64).copy(),
                   np.asarray(t.value, dtype=np.float64).reshape(t.node_count, -1)[:, 0].copy())

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Leaf values for the rows of ``x`` (float64 holding float32-rounded features, as scikit-learn)."""
        node = np.zeros(len(x), dtype=np.int64)
        active = np.flatnonzero(self.left[node] >= 0)
        while active.size:
            nd = node[active]
            go_left = x[active, self.feature[nd]] <= self.threshold[nd]
            node[active] = np.where(go_left, self.left[nd], self.right[nd])
            active = active[self.left[node[active]] >= 0]
        return self.value[node]

    def to_json(self) -> dict[str, Any]:
        return {"counter": self.counter, "children_left": self.left.tolist(), "children_right": self.right.tolist(),
                "feature": self.feature.tolist(), "threshold": self.threshold.tolist(), "value": self.value.tolist()}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], n_features: int, where: str) -> "_Tree":
        try:
            tree = cls(str(doc["counter"]), np.asarray(doc["children_left"], dtype=np.int64),
                       np.asarray(doc["children_right"], dtype=np.int64), np.asarray(doc["feature"], dtype=np.int64),
                       np.asarray(doc["threshold"], dtype=np.float64), np.asarray(doc["value"], dtype=np.float64))
        except (KeyError, TypeError, ValueError) as exc:
            raise CounterModelError(f"{where}: malformed tree ({type(exc).__name__}: {exc})") from None
        n = len(tree.left)
        if n == 0 or any(len(a) != n for a in (tree.right, tree.feature, tree.threshold, tree.value)):
            raise CounterModelError(f"{where}: tree arrays of the counter {tree.counter!r} differ in length")
        inner = tree.left >= 0
        ids = np.flatnonzero(inner)
        left, right, feat = tree.left[inner], tree.right[inner], tree.feature[inner]
        # children come after their parent (as scikit-learn numbers them): no cycles, so prediction terminates
        if (np.any(left >= n) or np.any(right >= n) or np.any(left <= ids) or np.any(right <= ids)
                or np.any(feat < 0) or np.any(feat >= n_features)):
            raise CounterModelError(f"{where}: tree of the counter {tree.counter!r} has out-of-range node links "
                                    "or features")
        return tree


@dataclass
class CounterModel:
    """Decision trees from tuning-parameter values to counter values, one tree per counter.

    Build one with :func:`train_model` (or :meth:`train`), store it with
    :meth:`save`, read it back with :meth:`load`; :meth:`predict` takes
    configurations (dicts or value tuples in :attr:`param_names` order) and
    :meth:`predict_space` every row of a search space.
    """

    param_names: list[str]
    param_values: list[list[Any]]
    counters: list[str]
    trees: list[_Tree]
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._encoding = ["value" if all(_is_number(v) for v in vals) else "index" for vals in self.param_values]
        self._lookup = [{(type(_plain(v)) is str, _plain(v)): i for i, v in enumerate(vals)}
                        for vals in self.param_values]

    # -- encoding -------------------------------------------------------------------------------------
    def _encode_value(self, k: int, v: Any) -> float:
        v = _plain(v)
        if self._encoding[k] == "value":
            if isinstance(v, bool) or not _is_number(v):
                raise CounterModelError(f"parameter {self.param_names[k]!r}: the model was trained on numbers, "
                                        f"got {v!r}")
            return float(v)
        i = self._lookup[k].get((type(v) is str, v))
        if i is None:
            raise CounterModelError(f"parameter {self.param_names[k]!r}: value {v!r} was not in the training data "
                                    f"(known: {self.param_values[k]})")
        return float(i)

    def encode(self, configs: Iterable[Mapping[str, Any] | Sequence[Any]]) -> np.ndarray:
        """Feature matrix of configurations (dicts by name, or tuples in :attr:`param_names` order)."""
        rows = []
        for c in configs:
            if isinstance(c, Mapping):
                absent = [n for n in self.param_names if n not in c]
                if absent:
                    raise CounterModelError(f"configuration {dict(c)} lacks parameter(s) {absent} of the model")
                vals = [c[n] for n in self.param_names]
            else:
                vals = list(c)
                if len(vals) != len(self.param_names):
                    raise CounterModelError(f"configuration {tuple(vals)} has {len(vals)} values, the model "
                                            f"{len(self.param_names)} parameters {self.param_names}")
            rows.append([self._encode_value(k, v) for k, v in enumerate(vals)])
        return np.asarray(rows, dtype=np.float64).reshape(-1, len(self.param_names))

    def space_features(self, space: Any) -> np.ndarray:
        """Feature matrix of every row of a :class:`~pytest_autotune.space.SearchSpace` (names must match)."""
        names = list(space.names)
        if set(names) != set(self.param_names):
            raise CounterModelError(f"the model was trained on parameters {sorted(self.param_names)}, the search "
                                    f"space has {sorted(names)}")
        x = np.empty((len(space), len(self.param_names)), dtype=np.float64)
        for k, name in enumerate(self.param_names):
            col = names.index(name)
            lut = np.array([self._encode_value(k, v) for v in space.values[name]], dtype=np.float64)
            x[:, k] = lut[np.asarray(space.indices[:, col], dtype=np.int64)]
        return x

    # -- prediction ----------------------------------------------------------------------------------------
    def predict_features(self, x: np.ndarray) -> np.ndarray:
        """Predictions (rows x :attr:`counters`) for a feature matrix."""
        x = np.asarray(x, dtype=np.float64).reshape(-1, len(self.param_names))
        x = x.astype(np.float32).astype(np.float64)  # scikit-learn compares float32 features
        out = np.empty((len(x), len(self.trees)), dtype=np.float64)
        for j, tree in enumerate(self.trees):
            out[:, j] = tree.predict(x)
        return out

    def predict(self, configs: Iterable[Mapping[str, Any] | Sequence[Any]]) -> np.ndarray:
        """Predicted counters (rows x :attr:`counters`) of configurations."""
        return self.predict_features(self.encode(configs))

    def predict_space(self, space: Any) -> np.ndarray:
        """Predicted counters of every row of a search space (rows x :attr:`counters`)."""
        return self.predict_features(self.space_features(space))

    # -- persistence ------------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "format": MODEL_FORMAT,
            "version": MODEL_VERSION,
            "parameters": [{"name": n, "values": [_plain(v) for v in vals], "encoding": enc}
                           for n, vals, enc in zip(self.param_names, self.param_values, self._encoding)],
            "counters": list(self.counters),
            "trees": [t.to_json() for t in self.trees],
            "metadata": self.metadata,
        }

    def save(self, path: str | os.PathLike) -> Path:
        """Write the model as JSON (gzip-compressed when the name ends in ``.gz``); returns the path."""
        path = Path(path)
        text = json.dumps(self.to_json(), separators=(",", ":"), allow_nan=False)
        data = text.encode()
        if path.name.endswith(".gz"):
            data = gzip.compress(data, mtime=0)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
        return path

    @classmethod
    def from_json(cls, doc: Any, where: str = "model") -> "CounterModel":
        if not isinstance(doc, Mapping) or doc.get("format") != MODEL_FORMAT:
            raise CounterModelError(f"{where}: not a counter model (expected \"format\": \"{MODEL_FORMAT}\")")
        if doc.get("version") != MODEL_VERSION:
            raise CounterModelError(f"{where}: counter model version {doc.get('version')!r}, this version reads "
                                    f"{MODEL_VERSION}")
        try:
            params = doc["parameters"]
            names = [str(p["name"]) for p in params]
            values = [list(p["values"]) for p in params]
            counters = [str(c) for c in doc["counters"]]
            trees_doc = doc["trees"]
        except (KeyError, TypeError) as exc:
            raise CounterModelError(f"{where}: malformed counter model ({type(exc).__name__}: {exc})") from None
        trees = [_Tree.from_json(t, len(names), where) for t in trees_doc]
        if [t.counter for t in trees] != counters:
            raise CounterModelError(f"{where}: the trees' counters {[t.counter for t in trees]} differ from the "
                                    f"listed counters {counters}")
        model = cls(names, values, counters, trees, dict(doc.get("metadata") or {}))
        for p, enc in zip(params, model._encoding):
            if p.get("encoding", enc) != enc:
                raise CounterModelError(f"{where}: parameter {p['name']!r} is encoded as {p.get('encoding')!r}, its "
                                        f"values need {enc!r}")
        return model

    @classmethod
    def load(cls, path: str | os.PathLike) -> "CounterModel":
        """Read a model written by :meth:`save` (plain or gzip-compressed JSON; never unpickles)."""
        path = Path(path)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise CounterModelError(f"no counter model at {path}") from None
        except OSError as exc:
            raise CounterModelError(f"{path}: cannot read ({exc})") from None
        try:
            if data[:2] == b"\x1f\x8b":
                data = gzip.decompress(data)
            doc = json.loads(data)
        except (OSError, EOFError, ValueError) as exc:
            raise CounterModelError(f"{path}: not a JSON counter model ({exc})") from None
        return cls.from_json(doc, str(path))

    @classmethod
    def train(cls, recorded: Any, **kwargs: Any) -> "CounterModel":
        return train_model(recorded, **kwargs)

    def __repr__(self) -> str:
        return (f"CounterModel({len(self.param_names)} parameters, {len(self.counters)} counters, "
                f"trained on {self.metadata.get('n_train', '?')} configurations of "
                f"{self.metadata.get('source', '?')})")


def load_model(path: str | os.PathLike) -> CounterModel:
    return CounterModel.load(path)


def train_model(recorded: Any, rows: Sequence[int] | np.ndarray | None = None, *,
                counters: Sequence[str] | None = None, max_depth: int | None = None, min_samples_leaf: int = 1,
                seed: int = 0) -> CounterModel:
    """Fit one decision-tree regressor per counter on a space measured with counters.

    ``recorded`` is a :class:`~pytest_autotune.datasets.RecordedSpace` (or a
    path to a KTT file, loaded with :func:`~pytest_autotune.datasets.load_dataset`);
    ``rows`` restricts training to those rows (default: all); only rows whose
    counters were recorded are used (failed configurations have none).
    ``counters`` defaults to :data:`MODEL_COUNTERS` as far as the file records them.
    """
    from sklearn.tree import DecisionTreeRegressor  # training only; loading a model needs no scikit-learn

    if isinstance(recorded, (str, os.PathLike)):
        from ..datasets import load_dataset

        recorded = load_dataset(recorded)
    if recorded.counters is None:
        raise CounterModelError(f"{getattr(recorded, 'name', 'the recording')} carries no hardware counters "
                                "(only KTT output with ProfilingData has them): nothing to train a counter model on")
    space = recorded.space
    all_rows = np.arange(len(space)) if rows is None else np.unique(np.asarray(rows, dtype=np.int64))
    if counters is None:
        counters = [c for c in MODEL_COUNTERS if c in recorded.counters]
    else:
        unknown = [c for c in counters if c not in recorded.counters]
        if unknown:
            raise CounterModelError(f"{recorded.name} does not record the counter(s) {unknown}")
        counters = list(counters)
    if not counters:
        raise CounterModelError(f"{recorded.name} records none of the model's counters")
    have = np.ones(len(all_rows), dtype=bool)
    for c in counters:
        have &= np.isfinite(recorded.counters[c][all_rows])
    train_rows = all_rows[have]
    if len(train_rows) < 2:
        raise CounterModelError(f"{recorded.name}: {len(train_rows)} of the {len(all_rows)} training configurations "
                                "have counters; at least 2 are needed")
    names = list(space.names)
    model = CounterModel(names, [list(space.values[n]) for n in names], list(counters), [], {})
    x = model.space_features(space)[train_rows]
    trees = []
    for c in counters:
        y = np.asarray(recorded.counters[c][train_rows], dtype=np.float64)
        est = DecisionTreeRegressor(max_depth=max_depth, min_samples_leaf=min_samples_leaf, random_state=seed)
        est.fit(x, y)
        trees.append(_Tree.from_sklearn(c, est))
    try:
        import sklearn

        sk_version = sklearn.__version__
    except Exception:  # pragma: no cover
        sk_version = "?"
    model.trees = trees
    model.metadata = {
        "source": str(getattr(recorded, "path", None) or getattr(recorded, "name", "")),
        "recording": getattr(recorded, "name", ""),
        "device": getattr(recorded, "device", ""),
        "kernel": getattr(recorded, "kernel", ""),
        "n_train": int(len(train_rows)),
        "n_rows_offered": int(len(all_rows)),
        "missing_counters": [c for c in MODEL_COUNTERS if c not in counters],
        "estimator": {"class": "sklearn.tree.DecisionTreeRegressor", "max_depth": max_depth,
                      "min_samples_leaf": min_samples_leaf, "random_state": seed, "sklearn": sk_version},
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    return model
