"""Search-space construction and queries: pytest-autotune vs Kernel Tuner 1.5.0 vs pyATF 0.0.13.

For each space, in the same run:

* Cartesian and valid sizes;
* construction time (best of N) and peak memory (tracemalloc, a separate run)
  of ours, Kernel Tuner's ``Searchspace(tune_params, restrictions, max_threads)``
  (default PythonConstraint framework) and pyATF's ``SearchSpace`` over ``TP``
  parameters whose constraints are Python functions of earlier parameters
  (several parameter orders are considered, the best one is reported);
* a check that all three produce the same valid set (as sets of value tuples);
* per-call cost of membership (dict -> ``find``), Hamming and adjacent neighbour
  queries (ours ``neighbours(row, ...)`` vs Kernel Tuner's
  ``get_neighbors(config, "Hamming" / "adjacent")`` on the same ~200 random valid
  configurations, whose neighbour sets are also compared) and sampling 100
  valid configurations (ours ``sample`` vs Kernel Tuner's ``get_random_sample``).

Run from the repository root::

    python benchmarks/bench_searchspace.py            # full run, ~5-10 minutes on 2 cores
    python benchmarks/bench_searchspace.py --quick    # a short run
    python benchmarks/bench_searchspace.py --only gemm_milo --only hotspot_22M

Figures go to ``benchmarks/results/bench_searchspace.json`` (``--json``). The
definition files are read from ``../shared/data/spaces`` (``--spaces`` or
``AUTOTUNE_SPACES``).

``--memory`` measures instead the peak resident memory (RSS) and time of one
construction per process, each in a fresh subprocess under an address-space
cap and a timeout (``--cap-gib``, ``--cap-seconds``), for the large spaces and
the 4e8-before-restrictions spaces of issue 36 (ours, Kernel Tuner, pyATF, and
``--before DIR``: an older checkout of the package, e.g. from ``git archive``).
A builder beyond a cap is reported as such ("MemoryError", "> 120 s"), never
waited for; ours refusing a space beyond ``max_configurations`` is reported as
"refused". Figures go to ``benchmarks/results/bench_searchspace_memory.json``::

    python benchmarks/bench_searchspace.py --memory               # ~10-15 minutes on 2 cores
    python benchmarks/bench_searchspace.py --memory --before /tmp/main_checkout
"""
from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import os
import sys
import time
import warnings
from math import prod
from pathlib import Path
from typing import Any, Callable

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO))

from _common import (best_of, environment, fmt_bytes, fmt_ratio, fmt_time, peak_memory,  # noqa: E402
                     per_call, print_table, write_json)

from pytest_autotune.space import SearchSpace, SearchSpaceError, compile_restriction, literal_values  # noqa: E402

MAX_THREADS = 1024  # Kernel Tuner's max_threads; the spaces below already restrict block sizes to it

TARGETS = {
    "construction_vs_kt": 10.0,       # ours at least 10x faster than Kernel Tuner
    "construction_vs_pyatf": 1.0,     # and faster than pyATF
    "neighbours_vs_kt": 30.0,         # Hamming/adjacent queries >= 30x cheaper per call
    "membership_s": 2e-6,             # <= 2 us per find(dict)
    "sample100_s": 1e-3,              # a sample of 100 valid configurations under 1 ms
}
TARGET_SPACES = ("gemm_milo", "hotspot_milo", "hotspot_22M", "synthetic_atf")


# -- the spaces ---------------------------------------------------------------------------------

def t1_space(path: Path) -> tuple[dict, list[str]]:
    space = json.loads(path.read_text())["ConfigurationSpace"]
    params = {p["Name"]: literal_values(p["Values"]) for p in space["TuningParameters"]}
    return params, [c["Expression"] for c in space.get("Conditions", [])]


def hotspot_22m(spaces: Path) -> tuple[dict, list[str]]:
    """The hotspot space enlarged to 22.2 million combinations (410,523 valid)."""
    _, hotspot_restrictions = t1_space(spaces / "t1" / "hotspot_milo.json")
    params = {
        "block_size_x": [1, 2, 4, 8, 16] + list(range(32, 1025, 32)),
        "block_size_y": [2**i for i in range(6)],
        "tile_size_x": list(range(1, 11)),
        "tile_size_y": list(range(1, 11)),
        "temporal_tiling_factor": list(range(1, 11)),
        "loop_unroll_factor_t": list(range(1, 11)),
        "sh_power": [0, 1],
        "blocks_per_sm": [0, 1, 2, 3, 4],
    }
    return params, hotspot_restrictions + ["blocks_per_sm == 0 or block_size_x*block_size_y*blocks_per_sm <= 2048"]


def synthetic_atf() -> tuple[dict, list[str]]:
    """An ATF-style GEMM tiling space: 6.96e11 Cartesian combinations.

    Interval-valued tile sizes as ATF writes them (every integer up to a
    bound, constrained to divide the problem size and each other), a K tile
    dividing its dimension, work-group sizes bounded in product and dividing
    the local tiles, a vector width, and a local-memory budget.
    """
    M = N = 96     # problem tile per work-group: global tiles must divide it
    K = 32
    params = {
        "tm_g": list(range(1, M + 1)), "tm_l": list(range(1, M // 2 + 1)),
        "tn_g": list(range(1, N + 1)), "tn_l": list(range(1, N // 2 + 1)),
        "tk": list(range(1, K + 1)),
        "wg_m": list(range(1, 17)), "wg_n": list(range(1, 17)),
        "vec": [1, 2, 4, 8],
    }
    restrictions = [
        f"{M} % tm_g == 0", "tm_g % tm_l == 0",
        f"{N} % tn_g == 0", "tn_g % tn_l == 0",
        f"{K} % tk == 0",
        "tm_l % (wg_m * vec) == 0", "tn_l % wg_n == 0",
        "32 <= wg_m * wg_n <= 256",
        "(tm_l + tn_l) * tk * 4 <= 4096",
    ]
    return params, restrictions


def big_4e8(restrictions: list[str]) -> Callable[[], tuple[dict, list[str]]]:
    """Issue 36's large space: 4 parameters of 100 values and two binary ones, 4e8 before the restrictions."""
    values = list(range(1, 101))
    return lambda: ({"A": values, "B": values, "C": values, "D": values, "E": [0, 1], "F": [0, 1]}, restrictions)


# 4e8 spaces (issue 36, finding 6): one that fits the default limit (37.9 million valid, a group of
# five parameters) and one beyond it (113 million valid, two independent pairs and two free parameters)
BIG_SPACES = {
    "big4e8_38M": big_4e8(["A*B*C <= 4000 + 40*D", "E <= F or A < D"]),
    "big4e8_113M": big_4e8(["A*B <= 1024", "C+D < 150"]),
}
MEMORY_SPACES = ("gemm_milo", "hotspot_22M", "synthetic_atf", *BIG_SPACES)


def all_spaces(spaces: Path) -> dict[str, Callable[[], tuple[dict, list[str]]]]:
    return {
        "gemm_milo": lambda: t1_space(spaces / "t1" / "gemm_milo.json"),
        "hotspot_milo": lambda: t1_space(spaces / "t1" / "hotspot_milo.json"),
        "convolution_milo": lambda: t1_space(spaces / "t1" / "convolution_milo.json"),
        "hotspot_22M": lambda: hotspot_22m(spaces),
        "synthetic_atf": synthetic_atf,
    }


# -- Kernel Tuner -------------------------------------------------------------------------------

def kt_build(params: dict, restrictions: list[str]):
    from kernel_tuner.searchspace import Searchspace

    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Searchspace(params, list(restrictions), MAX_THREADS)


# -- pyATF --------------------------------------------------------------------------------------

def restriction_names(params: dict, restrictions: list[str]) -> list[tuple[str, ...]]:
    return [compile_restriction(r, list(params)).names for r in restrictions]


def pyatf_parameters(params: dict, restrictions: list[str], order: list[str]) -> list:
    """pyATF TPs in ``order``; each restriction becomes part of the constraint of its last parameter."""
    from pyatf import TP, Set

    pos = {p: i for i, p in enumerate(order)}
    by_last: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
    for text, names in zip(restrictions, restriction_names(params, restrictions)):
        last = max(names, key=pos.__getitem__) if names else order[0]
        by_last.setdefault(last, []).append((text, names))
    tps = []
    for p in order:
        constraint = None
        if p in by_last:
            args = sorted({q for _, names in by_last[p] for q in names} | {p}, key=pos.__getitem__)
            source = f"lambda {', '.join(args)}: " + " and ".join(f"({t})" for t, _ in by_last[p])
            constraint = eval(source, {"__builtins__": {"min": min, "max": max, "abs": abs, "int": int,  # noqa: S307
                                                         "float": float, "round": round}})
        tps.append(TP(p, Set(*params[p]), constraint))
    return tps


def pyatf_build(tps: list):
    from pyatf.search_space import SearchSpace as AtfSpace

    with contextlib.redirect_stdout(io.StringIO()):
        return AtfSpace(*tps, verbosity=0)


def pyatf_configurations(space, names: list[str]) -> set[tuple]:
    """All configurations of a pyATF chain of trees, as value tuples in ``names`` order."""
    from pyatf.range import Range

    layer_names = list(space._cot_layer_to_tp_name)
    groups: list[tuple[list[str], list[tuple]]] = []
    layer = 0
    for tree in space.cot:
        root = tree.root
        if root.num_children == 1 and isinstance(root.get_child(0).data, Range):
            groups.append(([layer_names[layer]], [(v,) for v in root.get_child(0).data]))
            layer += 1
            continue
        paths: list[tuple] = []
        stack = [(root, ())]
        while stack:
            node, prefix = stack.pop()
            if node.num_children == 0:
                paths.append(prefix)
            for child in node:
                stack.append((child, prefix + (child.data,)))
        depth = len(paths[0]) if paths else 0
        groups.append((layer_names[layer:layer + depth], paths))
        layer += depth
    order = [n for g, _ in groups for n in g]
    where = [order.index(n) for n in names]
    out = set()
    for combo in itertools.product(*[rows for _, rows in groups]):
        flat = tuple(v for part in combo for v in part)
        out.add(tuple(flat[i] for i in where))
    return out


def _prefix_width(params: dict, restrictions: list[str], rnames: list[tuple[str, ...]], prefix: list[str]) -> int:
    """Valid partial configurations over ``prefix`` (restrictions entirely inside it): pyATF's tree width there."""
    bound = set(prefix)
    inside = [r for r, ns in zip(restrictions, rnames) if set(ns) <= bound]
    try:
        return len(SearchSpace({q: params[q] for q in prefix}, inside))
    except SearchSpaceError as exc:
        if "empty" in str(exc):
            return 0
        raise


def restriction_groups(params: dict, rnames: list[tuple[str, ...]]) -> list[list[str]]:
    """Parameters linked by restrictions, as pyATF groups them (one tree per group), in definition order."""
    parent = {p: p for p in params}

    def find(p: str) -> str:
        while parent[p] != p:
            p = parent[p]
        return p

    for ns in rnames:
        for q in ns[1:]:
            parent[find(q)] = find(ns[0])
    groups: dict[str, list[str]] = {}
    for p in params:
        groups.setdefault(find(p), []).append(p)
    return list(groups.values())


def pyatf_work(params: dict, restrictions: list[str], order: list[str], limit: float) -> float:
    """Constraint evaluations pyATF does for ``order``.

    Per group (tree): the sum over its levels of (valid prefixes) x (values);
    an unconstrained lone parameter is stored as a range, no work. Exact, and
    cheap with our engine, so orders that would take minutes are never timed;
    ``inf`` once it exceeds ``limit``.
    """
    rnames = restriction_names(params, restrictions)
    constrained = {p for ns in rnames for p in ns}
    work = 0
    for group in restriction_groups(params, rnames):
        if len(group) == 1 and group[0] not in constrained:
            continue
        members = set(group)
        seq = [p for p in order if p in members]
        width = 1
        for i, p in enumerate(seq):
            work += width * len(params[p])
            if work > limit:
                return float("inf")
            width = _prefix_width(params, restrictions, rnames, seq[: i + 1])
            if width == 0:
                break
    return work


def pyatf_candidate_orders(params: dict, restrictions: list[str], limit: float) -> dict[str, list[str]]:
    """A few sensible parameter orders: as defined, reversed, unary-restricted first, and a greedy one."""
    names = list(params)
    rnames = restriction_names(params, restrictions)
    unary = {p for ns in rnames if len(ns) == 1 for p in ns}
    orders = {
        "definition": names,
        "reversed": names[::-1],
        "unary-restricted first": sorted(names, key=lambda p: (p not in unary, names.index(p))),
    }
    # Greedy: append the parameter that keeps pyATF's tree narrowest (fewest valid prefixes) at the next level.
    greedy: list[str] = []
    width = 1
    while len(greedy) < len(names):
        best, best_key = None, None
        for p in names:
            if p in greedy:
                continue
            cost = width * len(params[p])
            trial = _prefix_width(params, restrictions, rnames, greedy + [p]) if cost <= limit else cost
            key = (trial, cost, names.index(p))  # narrowest next level, then the cheapest step
            if best_key is None or key < best_key:
                best, best_key = p, key
        greedy.append(best)  # type: ignore[arg-type]
        width = best_key[0]  # type: ignore[index]
    orders["greedy narrowest tree"] = greedy
    orders["least work (exact search)"] = least_work_order(params, restrictions, rnames)
    return orders


def least_work_order(params: dict, restrictions: list[str], rnames: list[tuple[str, ...]],
                     max_component: int = 12, max_cells: float = 2e7) -> list[str]:
    """The order minimising pyATF's constraint evaluations, by dynamic programming over parameter subsets.

    pyATF builds one tree per group of parameters linked by restrictions, so
    each group is ordered on its own: work(order) = sum of width(prefix) x
    values(next), and width depends only on the set of parameters in the
    prefix, which makes the optimum a shortest path over subsets. Widths come
    from our engine; subsets whose Cartesian product exceeds ``max_cells`` get
    that product as a pessimistic width. Groups larger than ``max_component``
    keep the definition order.
    """
    order: list[str] = []
    for comp in restriction_groups(params, rnames):
        k = len(comp)
        if k == 1 or k > max_component:
            order += comp
            continue
        bit = {p: 1 << i for i, p in enumerate(comp)}
        rmask = [(r, sum(bit[q] for q in ns)) for r, ns in zip(restrictions, rnames) if ns and ns[0] in bit]
        sizes = [len(params[p]) for p in comp]
        width = [1] * (1 << k)
        for mask in range(1, 1 << k):
            sub = [p for p in comp if mask & bit[p]]
            cells = prod(sizes[i] for i in range(k) if mask >> i & 1)
            if cells > max_cells:
                width[mask] = cells
                continue
            inside = [r for r, m in rmask if m & mask == m]
            try:
                width[mask] = len(SearchSpace({q: params[q] for q in sub}, inside))
            except SearchSpaceError:
                width[mask] = 0
        cost = [0.0] * (1 << k)
        last = [0] * (1 << k)
        for mask in sorted(range(1, 1 << k), key=lambda m: bin(m).count("1")):
            best, arg = float("inf"), -1
            for i in range(k):
                if mask >> i & 1:
                    rest = mask ^ (1 << i)
                    c = cost[rest] + width[rest] * sizes[i]
                    if c < best:
                        best, arg = c, i
            cost[mask], last[mask] = best, arg
        mask, seq = (1 << k) - 1, []
        while mask:
            seq.append(comp[last[mask]])
            mask ^= 1 << last[mask]
        order += seq[::-1]
    return order


# -- one space ----------------------------------------------------------------------------------

def bench_space(name: str, params: dict, restrictions: list[str], args) -> dict[str, Any]:
    repeat, n_rows = args.repeat, args.rows
    print(f"\n=== {name}: {len(params)} parameters, {len(restrictions)} restrictions", flush=True)
    out: dict[str, Any] = {"name": name, "parameters": len(params), "restrictions": restrictions}

    # ours
    t_ours, space = best_of(lambda: SearchSpace(params, restrictions), repeat=max(repeat, 5), warmup=1)
    mem_ours, _ = peak_memory(lambda: SearchSpace(params, restrictions))
    ours_set = {space.tuple(r) for r in range(len(space))}
    # the dict -> row index behind find() is built lazily by the first call (Kernel Tuner builds its dict eagerly)
    t_index, _ = best_of(lambda: SearchSpace(params, restrictions)._tuple_index(), repeat=max(repeat, 3))
    mem_index, _ = peak_memory(lambda: SearchSpace(params, restrictions)._tuple_index())
    out.update(cartesian=space.cartesian_size, valid=len(space))
    out["ours"] = {"construction_s": t_ours, "peak_memory_bytes": mem_ours,
                   "construction_plus_find_index_s": t_index, "peak_memory_with_find_index_bytes": mem_index}
    print(f"  Cartesian {space.cartesian_size:,}, valid {len(space):,}; ours {fmt_time(t_ours)}, "
          f"{fmt_bytes(mem_ours)} (with the lazy find() index: {fmt_time(t_index)}, {fmt_bytes(mem_index)})",
          flush=True)

    # Kernel Tuner
    kt = None
    if not args.no_kt:
        t_kt, kt = best_of(lambda: kt_build(params, restrictions), repeat=repeat)
        mem_kt, _ = peak_memory(lambda: kt_build(params, restrictions))
        kt_set = set(map(tuple, kt.list))
        out["kernel_tuner"] = {"construction_s": t_kt, "peak_memory_bytes": mem_kt, "valid": len(kt_set),
                               "same_valid_set": kt_set == ours_set}
        print(f"  Kernel Tuner {fmt_time(t_kt)}, {fmt_bytes(mem_kt)}, same set: {kt_set == ours_set}", flush=True)
        del kt_set

    # pyATF: predict the work of each candidate order exactly, time the most promising ones
    if not args.no_pyatf:
        orders = pyatf_candidate_orders(params, restrictions, args.pyatf_max_work)
        work = {label: pyatf_work(params, restrictions, order, args.pyatf_max_work) for label, order in orders.items()}
        ranked = sorted(orders, key=work.__getitem__)
        tried = {}
        for label in ranked[: args.pyatf_orders]:
            # orders predicted to need far more work than the best cannot win: not worth minutes of timing
            if work[label] > args.pyatf_max_work or work[label] > 1.5 * work[ranked[0]]:
                continue
            tps = pyatf_parameters(params, restrictions, orders[label])
            reps = repeat if work[label] < args.pyatf_max_work / 10 else 1
            t, _ = best_of(lambda: pyatf_build(tps), repeat=reps)
            tried[label] = t
            print(f"  pyATF order '{label}' ({work[label]:,} constraint evaluations): {fmt_time(t)}", flush=True)
        if tried:
            best_label = min(tried, key=tried.__getitem__)
            tps = pyatf_parameters(params, restrictions, orders[best_label])
            mem_atf, atf_space = peak_memory(lambda: pyatf_build(tps))
            atf_set = pyatf_configurations(atf_space, list(params))
            out["pyatf"] = {"construction_s": tried[best_label], "peak_memory_bytes": mem_atf,
                            "order": best_label, "parameter_order": orders[best_label], "valid": len(atf_set),
                            "same_valid_set": atf_set == ours_set,
                            "orders_tried": {k: {"seconds": v, "constraint_evaluations": work[k]}
                                             for k, v in tried.items()},
                            "orders_skipped": {k: work[k] for k in orders if k not in tried}}
            print(f"  pyATF best '{best_label}' {fmt_time(tried[best_label])}, {fmt_bytes(mem_atf)}, "
                  f"same set: {atf_set == ours_set}", flush=True)
            del atf_set

    # queries on the same random valid configurations
    rng = np.random.default_rng(args.seed)
    rows = rng.choice(len(space), size=min(n_rows, len(space)), replace=False)
    dicts = [space.get(r) for r in rows]
    tuples = [space.tuple(r) for r in rows]
    queries: dict[str, Any] = {"rows": len(rows)}
    space.find(dicts[0]), space.neighbours(int(rows[0]), "hamming"), space.neighbours(int(rows[0]), "adjacent")
    queries["membership_s"] = {"ours": per_call(space.find, dicts, repeat=max(repeat, 5)),
                               "ours_cpu": per_call(space.find, dicts * 5, repeat=max(repeat, 5),
                                                    clock=time.process_time)}
    assert all(space.find(d) == r for d, r in zip(dicts, rows))
    int_rows = [int(r) for r in rows]
    # Kernel Tuner caches the neighbours of each configuration it was asked about, so every timed pass
    # needs an instance that has answered no neighbour query yet (each configuration is asked once per
    # pass); its caches are per method, so one instance serves a Hamming and an adjacent pass.
    kt_instances = [kt] + [kt_build(params, restrictions) for _ in range(repeat - 1)] if kt is not None else []
    warm = next(t for t in (space.tuple(int(x)) for x in rng.permutation(len(space))) if t not in set(tuples))
    for method, kt_method in (("hamming", "Hamming"), ("adjacent", "adjacent")):
        def ours_pass() -> float:
            return per_call(lambda r: space.neighbours(r, method), int_rows, repeat=2)

        entry = {"ours_with_tuples": per_call(lambda r: [space.tuple(x) for x in space.neighbours(r, method)],
                                              int_rows, repeat=1)}
        if kt_instances:
            # ours and Kernel Tuner's passes alternate, so that both see the same load on a busy machine
            ours_passes, kt_passes = [], []
            for inst in kt_instances:
                inst.get_neighbors(warm, kt_method)  # one-off preparation of its index matrix, not timed
                ours_passes.append(ours_pass())
                kt_passes.append(per_call(lambda t: inst.get_neighbors(t, kt_method), tuples, repeat=1))
            ours_passes.append(ours_pass())
            entry["ours"] = min(ours_passes)
            entry["kernel_tuner"] = min(kt_passes)
            entry["paired_ratios"] = [k / min(a, b) for k, a, b in zip(kt_passes, ours_passes, ours_passes[1:])]
        else:
            entry["ours"] = min(ours_pass() for _ in range(max(repeat, 3)))
        if kt_instances:
            same = all({space.tuple(x) for x in space.neighbours(r, method)} == set(map(tuple, kt.get_neighbors(t, kt_method)))
                       for r, t in zip(int_rows, tuples))
            entry["same_neighbours"] = same
        queries[f"{method}_s"] = entry
    del kt_instances
    queries["sample100_s"] = {"ours": per_call(lambda s: space.sample(100, s), list(range(200)), repeat=repeat)}
    if kt is not None:
        names = list(params)
        queries["membership_s"]["kernel_tuner"] = per_call(
            lambda d: kt.is_param_config_valid(tuple(d[n] for n in names)), dicts, repeat=max(repeat, 5))
        queries["sample100_s"]["kernel_tuner"] = per_call(lambda _: kt.get_random_sample(100), list(range(50)),
                                                          repeat=repeat)
    out["queries"] = queries
    return out


# -- peak memory, one construction per fresh process -----------------------------------------------

def _rss_bytes() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kilobytes on Linux


def memory_child(job: dict[str, Any]) -> dict[str, Any]:
    """Build one space with one builder in this (fresh) process; time and peak RSS of the process."""
    if job["builder"] == "before":  # an older checkout of the package first on the path
        sys.path.insert(0, job["source"])
        for mod in [m for m in sys.modules if m.startswith("pytest_autotune")]:
            del sys.modules[mod]
    params, restrictions = all_spaces(Path(job["spaces"])).get(job["space"], BIG_SPACES.get(job["space"]))()
    builder = job["builder"]
    if builder in ("ours", "before"):
        from pytest_autotune.space import SearchSpace as Ours

        kwargs = {"max_configurations": job["limit"]} if job.get("limit") else {}
        build = lambda: Ours(params, restrictions, **kwargs)  # noqa: E731
        size = len
    elif builder == "kernel_tuner":
        kt_build({"x": [1, 2]}, ["x > 1"])  # its imports, before the baseline
        build, size = lambda: kt_build(params, restrictions), lambda s: len(s.list)  # noqa: E731
    else:
        tps = pyatf_parameters(params, restrictions, job["order"])
        import pyatf.search_space  # noqa: F401 - its imports, before the baseline
        build, size = lambda: pyatf_build(tps), lambda s: int(s.constrained_size)  # noqa: E731
    baseline = _rss_bytes()
    start = time.perf_counter()
    try:
        built = build()
    except MemoryError:
        return {"outcome": "MemoryError", "seconds": time.perf_counter() - start, "rss_bytes": _rss_bytes(),
                "baseline_rss_bytes": baseline}
    except Exception as exc:  # noqa: BLE001 - ours refusing a space beyond the limit, reported as such
        if type(exc).__name__ == "SearchSpaceTooLarge":
            return {"outcome": "refused", "seconds": time.perf_counter() - start, "rss_bytes": _rss_bytes(),
                    "baseline_rss_bytes": baseline, "message": str(exc)}
        if "Unable to allocate" in str(exc) or "MemoryError" in type(exc).__name__:
            return {"outcome": "MemoryError", "seconds": time.perf_counter() - start, "rss_bytes": _rss_bytes(),
                    "baseline_rss_bytes": baseline, "message": str(exc)[:300]}
        raise
    seconds = time.perf_counter() - start
    return {"outcome": "built", "seconds": seconds, "rss_bytes": _rss_bytes(), "baseline_rss_bytes": baseline,
            "valid": size(built)}


def run_memory_job(job: dict[str, Any], cap_bytes: int, cap_seconds: float) -> dict[str, Any]:
    """:func:`memory_child` in a fresh interpreter under an address-space cap and a timeout."""
    import resource
    import subprocess

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (cap_bytes, cap_bytes))

    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    cmd = [sys.executable, str(Path(__file__).resolve()), "--memory-child", json.dumps(job)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=cap_seconds, preexec_fn=limit, env=env)
    except subprocess.TimeoutExpired:
        return {"outcome": "timeout", "seconds": cap_seconds}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode == 0 and lines:
        return json.loads(lines[-1])
    tail = (done.stderr or done.stdout)[-400:]
    outcome = "MemoryError" if "MemoryError" in tail or "Unable to allocate" in tail or done.returncode < 0 \
        else "error"
    return {"outcome": outcome, "returncode": done.returncode, "message": tail}


def _cell(r: dict[str, Any] | None, cap_seconds: float) -> tuple[str, str]:
    """(RSS, time) cells of one measurement."""
    if r is None:
        return "-", "-"
    if r["outcome"] == "timeout":
        return f"> {cap_seconds:.0f} s", f"> {cap_seconds:.0f} s"
    if r["outcome"] == "MemoryError":
        return "MemoryError", fmt_time(r.get("seconds"))
    if r["outcome"] == "error":
        return "error", "-"
    note = " (refused)" if r["outcome"] == "refused" else ""
    return fmt_bytes(r["rss_bytes"]) + note, fmt_time(r["seconds"])


def memory_benchmark(args) -> int:
    spaces = all_spaces(args.spaces)
    names = args.only or list(MEMORY_SPACES)
    cap_bytes = int(args.cap_gib * 2**30)
    builders = ["ours"] + (["before"] if args.before else []) + ([] if args.no_kt else ["kernel_tuner"]) + \
        ([] if args.no_pyatf else ["pyatf"])
    results = []
    for name in names:
        params, restrictions = (spaces.get(name) or BIG_SPACES[name])()
        cartesian = prod(len(v) for v in params.values())
        print(f"\n=== {name}: {len(params)} parameters, {len(restrictions)} restrictions, "
              f"Cartesian {cartesian:,}", flush=True)
        entry: dict[str, Any] = {"name": name, "cartesian": cartesian, "restrictions": restrictions}
        base = {"space": name, "spaces": str(args.spaces)}
        for builder in builders:
            job = dict(base, builder=builder)
            if builder == "before":
                job["source"] = str(args.before)
            if builder == "pyatf":  # the order with the least constraint evaluations (our engine finds it)
                job["order"] = least_work_order(params, restrictions, restriction_names(params, restrictions))
            entry[builder] = run_memory_job(job, cap_bytes, args.cap_seconds)
            print(f"  {builder}: {entry[builder]}"[:300], flush=True)
            if builder == "ours" and entry[builder]["outcome"] == "refused":  # and with the limit raised
                entry["ours_raised_limit"] = run_memory_job(dict(job, limit=10**9), cap_bytes, args.cap_seconds)
                print(f"  ours, limit raised: {entry['ours_raised_limit']}"[:300], flush=True)
        valid = next((entry[b]["valid"] for b in ("ours", "ours_raised_limit", "before", "kernel_tuner", "pyatf")
                      if b in entry and entry[b].get("valid") is not None), None)
        entry["valid"] = valid
        results.append(entry)

    rows = []
    for e in results:
        ours = e["ours"]
        raised = e.get("ours_raised_limit")
        row = [e["name"], f"{e['cartesian']:,}", f"{e['valid']:,}" if e["valid"] is not None else "?"]
        row += list(_cell(ours, args.cap_seconds)) + list(_cell(raised, args.cap_seconds))
        for b in builders[1:]:
            row += list(_cell(e.get(b), args.cap_seconds))
        for b in builders[1:]:  # ratios: the other's peak RSS over ours (ours with the limit raised if refused)
            mine, other = raised or ours, e.get(b)
            ok = mine.get("outcome") == "built" and other and other.get("outcome") == "built"
            row.append(fmt_ratio(other["rss_bytes"] / mine["rss_bytes"]) if ok else
                       (f"> {fmt_ratio(cap_bytes / mine['rss_bytes'])}" if other and mine.get("outcome") == "built"
                        and other.get("outcome") in ("MemoryError", "timeout") else "-"))
        for b in builders[1:]:  # and their time over ours
            mine, other = raised or ours, e.get(b)
            ok = mine.get("outcome") == "built" and other and other.get("outcome") == "built"
            row.append(fmt_ratio(other["seconds"] / mine["seconds"]) if ok else
                       (f"> {fmt_ratio(args.cap_seconds / mine['seconds'])}" if other and mine.get("outcome") == "built"
                        and other.get("outcome") == "timeout" else "-"))
        rows.append(row)
    labels = {"before": "before", "kernel_tuner": "KT", "pyatf": "pyATF"}
    header = ["space", "Cartesian", "valid", "RSS ours", "time ours", "RSS ours, limit 1e9", "time"]
    for b in builders[1:]:
        header += [f"RSS {labels[b]}", f"time {labels[b]}"]
    header += [f"RSS {labels[b]}/ours" for b in builders[1:]] + [f"time {labels[b]}/ours" for b in builders[1:]]
    print()
    print_table(rows, header, title=f"Peak RSS of the whole process (interpreter and imports included) and time of "
                                    f"one construction, each in a fresh process capped at {args.cap_gib:g} GiB of "
                                    f"address space and {args.cap_seconds:.0f} s")
    payload = {"benchmark": "searchspace_memory",
               "environment": environment(["numpy", "kernel_tuner", "pyatf", "python-constraint2", "pytest-autotune"]),
               "settings": {"cap_gib": args.cap_gib, "cap_seconds": args.cap_seconds, "before": str(args.before or ""),
                            "max_threads": MAX_THREADS},
               "load_average_at_start": os.getloadavg() if hasattr(os, "getloadavg") else None,
               "spaces": results}
    path = write_json(args.memory_json, payload)
    print(f"\nwrote {path}")
    return 0


# -- report -------------------------------------------------------------------------------------

def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or a <= 0 else b / a


def report(results: list[dict]) -> dict[str, Any]:
    rows, qrows = [], []
    verdicts: dict[str, Any] = {}
    for r in results:
        ours, kt, atf = r["ours"], r.get("kernel_tuner"), r.get("pyatf")
        vs_kt = ratio(ours["construction_s"], kt and kt["construction_s"])
        vs_atf = ratio(ours["construction_s"], atf and atf["construction_s"])
        same = [x["same_valid_set"] for x in (kt, atf) if x]
        rows.append([r["name"], f"{r['cartesian']:,}", f"{r['valid']:,}",
                     fmt_time(ours["construction_s"]), fmt_time(ours["construction_plus_find_index_s"]),
                     fmt_time(kt and kt["construction_s"]),
                     fmt_time(atf and atf["construction_s"]), fmt_ratio(vs_kt), fmt_ratio(vs_atf),
                     fmt_bytes(ours["peak_memory_bytes"]), fmt_bytes(kt and kt["peak_memory_bytes"]),
                     fmt_bytes(atf and atf["peak_memory_bytes"]),
                     "yes" if same and all(same) else ("NO" if same else "-")])
        q = r["queries"]
        ham, adj = q["hamming_s"], q["adjacent_s"]
        qrows.append([r["name"], fmt_time(q["membership_s"]["ours"]), fmt_time(q["membership_s"].get("ours_cpu")),
                      fmt_time(q["membership_s"].get("kernel_tuner")),
                      fmt_time(ham["ours"]), fmt_time(ham.get("kernel_tuner")),
                      fmt_ratio(ratio(ham["ours"], ham.get("kernel_tuner"))),
                      fmt_time(adj["ours"]), fmt_time(adj.get("kernel_tuner")),
                      fmt_ratio(ratio(adj["ours"], adj.get("kernel_tuner"))),
                      fmt_time(q["sample100_s"]["ours"]), fmt_time(q["sample100_s"].get("kernel_tuner")),
                      "yes" if all(e.get("same_neighbours", True) for e in (ham, adj)) else "NO"])
        checks = {}
        if r["name"] in TARGET_SPACES:
            if vs_kt is not None:
                checks["construction >= 10x faster than Kernel Tuner"] = vs_kt >= TARGETS["construction_vs_kt"]
            if vs_atf is not None:
                checks["construction faster than pyATF"] = vs_atf > TARGETS["construction_vs_pyatf"]
            if same:
                checks["same valid set"] = all(same)
            if kt:
                checks["peak memory <= Kernel Tuner"] = ours["peak_memory_bytes"] <= kt["peak_memory_bytes"]
        for label, e in (("Hamming", ham), ("adjacent", adj)):
            if e.get("kernel_tuner"):
                checks[f"{label} neighbours >= 30x cheaper than Kernel Tuner"] = (
                    ratio(e["ours"], e["kernel_tuner"]) >= TARGETS["neighbours_vs_kt"])
                checks[f"{label} neighbours equal Kernel Tuner's"] = e["same_neighbours"]
        checks["membership <= 2 us"] = q["membership_s"]["ours"] <= TARGETS["membership_s"]
        checks["sample of 100 < 1 ms"] = q["sample100_s"]["ours"] < TARGETS["sample100_s"]
        verdicts[r["name"]] = checks
    print()
    print_table(rows, ["space", "Cartesian", "valid", "ours", "+find idx", "KT", "pyATF", "vs KT", "vs pyATF",
                       "mem ours", "mem KT", "mem pyATF", "same set"],
                title="Construction (best of N; peak memory by tracemalloc in a separate run; '+find idx': ours "
                      "plus the dict index find() builds on first use)")
    print()
    print_table(qrows, ["space", "find(dict)", "(CPU)", "KT valid?", "Hamming", "KT Hamming", "ratio", "adjacent",
                        "KT adjacent", "ratio", "sample 100", "KT sample", "same nbrs"],
                title="Per-call query cost, wall time (same random valid configurations for both; (CPU): process "
                      "time of find, less sensitive to a busy machine)")
    print()
    missed = [(s, c) for s, checks in verdicts.items() for c, ok in checks.items() if not ok]
    met = sum(ok for checks in verdicts.values() for ok in checks.values())
    print(f"Targets: {met} met, {len(missed)} missed")
    for s, c in missed:
        print(f"  MISSED  {s}: {c}")
    return {"targets": TARGETS, "checks": verdicts, "missed": [f"{s}: {c}" for s, c in missed]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spaces", type=Path,
                        default=Path(os.environ.get("AUTOTUNE_SPACES", REPO.parent / "shared" / "data" / "spaces")))
    parser.add_argument("--json", type=Path, default=HERE / "results" / "bench_searchspace.json")
    parser.add_argument("--quick", action="store_true", help="one repetition, 50 query rows, the small spaces only")
    parser.add_argument("--only", action="append", default=[], help="run only this space (repeatable)")
    parser.add_argument("--repeat", type=int, default=3, help="timed repetitions of each construction (best of)")
    parser.add_argument("--rows", type=int, default=200, help="random valid configurations for the query timings")
    parser.add_argument("--seed", type=int, default=12345)
    parser.add_argument("--no-kt", action="store_true")
    parser.add_argument("--no-pyatf", action="store_true")
    parser.add_argument("--pyatf-orders", type=int, default=3,
                        help="time up to this many of the orders with the least predicted work (within 1.5x of it)")
    parser.add_argument("--pyatf-max-work", type=float, default=2e7,
                        help="skip pyATF orders predicted to need more constraint evaluations than this")
    parser.add_argument("--memory", action="store_true",
                        help="peak RSS and time of one construction per fresh process (see the module docstring)")
    parser.add_argument("--memory-json", type=Path, default=HERE / "results" / "bench_searchspace_memory.json")
    parser.add_argument("--cap-gib", type=float, default=6.0, help="--memory: address-space cap of each process")
    parser.add_argument("--cap-seconds", type=float, default=120.0, help="--memory: time cap of each process")
    parser.add_argument("--before", type=Path, default=None,
                        help="--memory: also measure the package found in this directory (an older checkout)")
    parser.add_argument("--memory-child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_child:
        print(json.dumps(memory_child(json.loads(args.memory_child))))
        return 0
    if args.memory:
        return memory_benchmark(args)
    if args.quick:
        args.repeat, args.rows, args.pyatf_orders = 1, 50, 1
        args.only = args.only or ["gemm_milo", "hotspot_milo", "convolution_milo"]

    if not (args.spaces / "t1").is_dir():
        print(f"spaces folder {args.spaces} not found (use --spaces or AUTOTUNE_SPACES)", file=sys.stderr)
        return 2
    spaces = all_spaces(args.spaces)
    unknown = set(args.only) - set(spaces)
    if unknown:
        parser.error(f"unknown space(s) {sorted(unknown)}; choose from {sorted(spaces)}")
    load_start = os.getloadavg() if hasattr(os, "getloadavg") else None
    print(f"load average at start: {load_start}", flush=True)
    results = []
    for name, make in spaces.items():
        if args.only and name not in args.only:
            continue
        params, restrictions = make()
        results.append(bench_space(name, params, restrictions, args))
    summary = report(results)
    payload = {"benchmark": "searchspace", "environment": environment(["numpy", "kernel_tuner", "pyatf",
                                                                        "python-constraint2", "pytest-autotune"]),
               "settings": {"repeat": args.repeat, "rows": args.rows, "seed": args.seed, "quick": args.quick,
                            "max_threads": MAX_THREADS},
               "load_average_at_start": load_start,
               "spaces": results, **summary}
    path = write_json(args.json, payload)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
