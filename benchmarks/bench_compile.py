#!/usr/bin/env python
"""Compile every valid configuration of every example CUDA kernel with NVRTC for sm_80 and sm_90 (no GPU).

For each kernel of ``example_project/src/example_kernels/cuda.py`` and each
architecture, the search space is built with that architecture's limits
(:mod:`pytest_autotune.backends.cuda_arch`), and every configuration the
restrictions allow is compiled exactly as the CuPy runner would on such a
device (:func:`pytest_autotune.lifecycle.compile_check.check_configuration`: NVRTC,
``-Xptxas=-v``, then the static limits). Reported per kernel and architecture:
configurations compiled, compile failures, resource rejections (the limit
named), configurations that spill, and compile seconds (median, total).

``--strip-launch-bounds`` compiles the kernels without their
``__launch_bounds__`` (the matmul had none before issue 16: ptxas then gives
a 32x32-thread block more registers than the register file holds).

``--previous-restrictions`` also compiles the configurations that the
restrictions before issue 16 allowed (static tiles bounded by the opt-in
``max_shared_memory_per_block``) and the current ones exclude, to show what
the fix removed.

    PYTHONPATH=example_project/src python benchmarks/bench_compile.py [--arch sm_80,sm_90] [--only matmul]
        [--previous-restrictions] [--strip-launch-bounds] [--jobs 2] [--json benchmarks/results/bench_compile.json]
"""
from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import environment, print_table, write_json  # noqa: E402

from pytest_autotune.lifecycle.compile_check import check_configuration, parse_arch_list  # noqa: E402
from pytest_autotune.backends.cuda_arch import arch_limits  # noqa: E402
from pytest_autotune.execution.kernel import KernelSpec  # noqa: E402
from pytest_autotune.backends.nvrtc import nvrtc_unavailable_reason, nvrtc_version  # noqa: E402
from pytest_autotune.space import SearchSpace  # noqa: E402


def previous(restrictions: list[str]) -> list[str]:
    """The restrictions as they were: static shared memory bounded by the opt-in maximum."""
    return [r.replace("max_static_shared_memory_per_block", "max_shared_memory_per_block") for r in restrictions]


def _compile_chunk(job: tuple[str, int, list[dict], bool]) -> list[Any]:
    name, arch, configs, strip = job
    from example_kernels.cuda import CUDA_KERNELS, compile_spec_arguments

    spec = KernelSpec(**compile_spec_arguments(CUDA_KERNELS[name]))
    if strip:  # the kernel as it was before issue 16: no register cap, ptxas uses what it likes
        spec = KernelSpec(**{**compile_spec_arguments(CUDA_KERNELS[name]),
                             "source": re.sub(r"__launch_bounds__\([^)]*\)", "", spec.code), "lang": "cuda"})
    limits = arch_limits(arch)
    return [check_configuration(spec, c, arch, limits=limits) for c in configs]


def compile_all(name: str, configs: list[dict], arch: int, pool: Any, strip: bool = False,
                chunk: int = 24) -> list[Any]:
    """Every configuration checked, in order; chunks spread over ``pool`` (a process pool, or None)."""
    jobs = [(name, arch, configs[i:i + chunk], strip) for i in range(0, len(configs), chunk)]
    done: list[Any] = []
    for part in (pool.map(_compile_chunk, jobs) if pool else map(_compile_chunk, jobs)):
        done.extend(part)
        print(f"  {name} sm_{arch}: {len(done)}/{len(configs)}", file=sys.stderr, flush=True)
    return done


def summarise(name: str, arch: int, checks: list[Any], seconds: float) -> dict[str, Any]:
    times = [c.seconds for c in checks if c.seconds]
    return {
        "kernel": name, "arch": f"sm_{arch}", "compiled": len(checks),
        "ok": sum(c.ok for c in checks),
        "compile_failures": sum(c.status == "compile" for c in checks),
        "resource_rejections": sum(c.status == "resources" for c in checks),
        "invalid": sum(c.status == "invalid" for c in checks),
        "spilling": sum(c.spills for c in checks),
        "max_registers": max((c.resources["registers"] for c in checks if c.resources), default=0),
        "compile_s_median": statistics.median(times) if times else None,
        "wall_s": seconds,
        "failures": [c.as_dict() for c in checks if not c.ok],
        "spills": [c.as_dict() for c in checks if c.spills],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", type=parse_arch_list, default=[80, 90])
    p.add_argument("--only", default=None, help="comma-separated kernel names")
    p.add_argument("--previous-restrictions", action="store_true")
    p.add_argument("--json", type=Path, default=Path("benchmarks/results/bench_compile.json"))
    p.add_argument("--jobs", type=int, default=1, help="compiler processes (NVRTC compiles are single-threaded)")
    p.add_argument("--strip-launch-bounds", action="store_true",
                   help="compile the kernels without their __launch_bounds__ (as before issue 16)")
    args = p.parse_args(argv)
    reason = nvrtc_unavailable_reason()
    if reason:
        print(f"bench_compile.py: {reason}", file=sys.stderr)
        return 0
    try:
        from example_kernels.cuda import CUDA_KERNELS
    except ImportError:
        print("bench_compile.py needs the example project: pip install -e ./example_project (or PYTHONPATH="
              "example_project/src)", file=sys.stderr)
        return 2
    wanted = set(args.only.split(",")) if args.only else set(CUDA_KERNELS)
    rows, results, removed = [], [], []
    pool = ProcessPoolExecutor(args.jobs) if args.jobs > 1 else None
    for name, kernel in CUDA_KERNELS.items():
        if name not in wanted:
            continue
        for arch in args.arch:
            limits = arch_limits(arch)
            space = SearchSpace(kernel.params, kernel.restrictions, limits)
            start = time.perf_counter()
            checks = compile_all(name, list(space), arch, pool, args.strip_launch_bounds)
            summary = summarise(name, arch, checks, time.perf_counter() - start)
            results.append(summary)
            rows.append([name, summary["arch"], summary["compiled"], summary["compile_failures"],
                         summary["resource_rejections"], summary["invalid"], summary["spilling"],
                         summary["max_registers"], f"{summary['compile_s_median']:.3f}", f"{summary['wall_s']:.0f}"])
            if args.previous_restrictions:
                old = SearchSpace(kernel.params, previous(kernel.restrictions), limits)
                checks = compile_all(name, [c for c in old if c not in space], arch, pool, args.strip_launch_bounds)
                removed.append({"kernel": name, "arch": f"sm_{arch}", "previous_space": len(old),
                                "current_space": len(space), "only_in_previous": len(checks),
                                "failing": sum(not c.ok for c in checks),
                                "statuses": sorted({c.status for c in checks}),
                                "example": checks[0].as_dict() if checks else None})
    if pool:
        pool.shutdown()
    print_table(rows, ["kernel", "arch", "compiled", "compile fail", "resources", "invalid", "spilling",
                       "max regs", "median s", "wall s"],
                title=f"NVRTC {'.'.join(map(str, nvrtc_version()))}: every valid configuration")
    if removed:
        print_table([[r["kernel"], r["arch"], r["previous_space"], r["current_space"], r["only_in_previous"],
                      r["failing"], ",".join(r["statuses"])] for r in removed],
                    ["kernel", "arch", "previous", "current", "removed", "removed failing", "statuses"],
                    title="configurations the previous restrictions allowed and the current ones exclude")
    write_json(args.json, {"environment": environment(["cuda-bindings", "nvidia-cuda-nvrtc-cu12"]),
                           "nvrtc": list(nvrtc_version()), "results": results, "previous_restrictions": removed})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
