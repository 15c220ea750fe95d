#!/usr/bin/env python
"""Runner overhead benchmark: wall-clock cost per evaluated configuration, side by side with Kernel Tuner.

Kernel: vector add of 2M float32 (``c = a + b``) with two tunable parameters,
``WPT`` (elements per outer step, the CPU analogue of work per thread) and
``UNROLL`` (inner-loop unroll pragma): 4 x 3 = 12 configurations, 7 timed
iterations each, every configuration verified against the reference.

Rows
    ``c (isolated)``       our C runner, worker process, cold compile cache
    ``c (in-process)``     our C runner, ``isolate=False``, cold compile cache
    ``c (isolated, g++)``  as the first, compiled as C++ with g++ like Kernel Tuner
    ``c (isolated, warm)`` our C runner again on a filled cache (no compiler)
    ``kernel_tuner C``     ``kernel_tuner.tune_kernel(..., lang="C", iterations=7,
                           answer=..., verbose=False, compiler_options=["-O3"])``;
                           its C backend needs the function to time itself and
                           return the time in ms, so its variant of the kernel
                           does (clock_gettime around the same loops)
    ``cupy`` / ``pycuda``  only with a CUDA device: the same add as a CUDA
                           kernel (block_size_x x WPT), side by side with
                           Kernel Tuner's cupy / pycuda backends.

Scope of one measurement: from constructing the runner (worker start
included) to closing it, for Kernel Tuner the whole ``tune_kernel`` call;
divided by the number of configurations. For parity, our runners use
``warmup=0, min_iterations=max_iterations=7``: one verification run + 7
timed runs per configuration, the same launches Kernel Tuner makes. Each
row is the median over ``--repeats`` runs.

Repeatability: one configuration measured ``--consistency`` times (fresh
runner each time); reported: the median of each repeat and the relative
spread (max - min) / median of those medians, for our parity options, our
default :class:`MeasureOptions`, and Kernel Tuner (its reported time).

    python benchmarks/bench_runner.py [--json PATH] [--repeats 3] [--consistency 5]
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import logging
import platform
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_autotune.measure.timing import MeasureOptions  # noqa: E402
from pytest_autotune.runners import KernelSpec, backend_available, make_runner  # noqa: E402

N = 2 * 1024 * 1024
ITERATIONS = 7
TUNE_PARAMS = {"WPT": [1, 2, 4, 8], "UNROLL": [1, 2, 4]}
CUDA_PARAMS = {"block_size_x": [64, 128, 256, 512], "WPT": [1, 2, 4]}
PARITY = MeasureOptions(warmup=0, min_iterations=ITERATIONS, max_iterations=ITERATIONS)

UNROLL_MACROS = r"""
#define PRAGMA(x) _Pragma(#x)
#define UNROLLED(n) PRAGMA(GCC unroll n)
"""
LOOPS = r"""
    for (int i = 0; i < n; i += WPT) {
        UNROLLED(UNROLL)
        for (int j = 0; j < WPT; j++) {
            if (i + j < n) c[i + j] = a[i + j] + b[i + j];
        }
    }
"""
OURS_C = UNROLL_MACROS + "void vector_add(float *c, const float *a, const float *b, int n) {" + LOOPS + "}\n"
KT_C = (
    "#include <time.h>\n" + UNROLL_MACROS
    + 'extern "C" float vector_add(float *c, const float *a, const float *b, int n) {\n'
    + "    struct timespec t0, t1;\n    clock_gettime(CLOCK_MONOTONIC, &t0);\n" + LOOPS
    + "    clock_gettime(CLOCK_MONOTONIC, &t1);\n"
    + "    return (float)((t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) * 1e-6);\n}\n"
)
CUDA_SRC = r"""
extern "C" __global__ void vector_add(float *c, const float *a, const float *b, int n) {
    int i = (blockIdx.x * block_size_x) * WPT + threadIdx.x;
    #pragma unroll
    for (int j = 0; j < WPT; j++, i += block_size_x) {
        if (i < n) c[i] = a[i] + b[i];
    }
}
"""


def configs(params: dict[str, list[int]]) -> list[dict[str, int]]:
    keys = list(params)
    out: list[dict[str, int]] = [{}]
    for key in keys:
        out = [{**c, key: v} for c in out for v in params[key]]
    return out


def data() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(42)
    a = rng.random(N, dtype=np.float32)
    b = rng.random(N, dtype=np.float32)
    return a, b, np.zeros(N, np.float32)


def run_ours(runner: str, spec: KernelSpec, params: dict[str, list[int]], measure: MeasureOptions,
             **options: Any) -> dict[str, Any]:
    start = time.perf_counter()
    rows = []
    with make_runner(spec, runner=runner, measure=measure, **options) as r:
        start_s = time.perf_counter() - start  # worker start (isolated) or buffer setup
        for p in configs(params):
            m = r.evaluate(p)
            if not m.ok:
                raise RuntimeError(f"{runner} {p}: {m.failure}: {m.detail}")
            rows.append(m)
    total = time.perf_counter() - start
    phases = {k: statistics.mean(m.timings.get(k, 0.0) for m in rows) for k in ("compile_s", "verify_s", "bench_s")}
    return {"seconds": total, "configs": len(rows), "phases": phases, "start_s": start_s,
            "best": min(rows, key=lambda m: m.value).params}


@contextlib.contextmanager
def quiet():
    logging.disable(logging.CRITICAL)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        yield
    logging.disable(logging.NOTSET)


def run_kernel_tuner(lang: str, source: str, params: dict[str, list[int]], a, b, c,
                     **kw: Any) -> dict[str, Any]:
    import kernel_tuner

    start = time.perf_counter()
    with quiet():
        results, _ = kernel_tuner.tune_kernel(
            "vector_add", source, N, [c, a, b, np.int32(N)], params, lang=lang, iterations=ITERATIONS,
            answer=[a + b, None, None, None], verbose=False, **kw,
        )
    total = time.perf_counter() - start
    ok = [r for r in results if isinstance(r.get("time"), float)]
    if len(ok) != len(configs(params)):
        raise RuntimeError(f"Kernel Tuner {lang}: only {len(ok)} of {len(configs(params))} configurations ran")
    return {"seconds": total, "configs": len(ok), "results": results}


def interleaved(variants: list[tuple[str, str, Callable[[], dict[str, Any]]]], repeats: int) -> list[dict[str, Any]]:
    """Run every variant ``repeats`` times in rotating order (so they share the machine's
    load conditions) and keep each variant's median run."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in variants}
    for r in range(repeats):
        k = r % len(variants)
        for name, _, fn in variants[k:] + variants[:k]:
            try:
                runs[name].append(fn())
            except Exception as exc:  # e.g. no CUDA device: report, keep going
                runs[name].append({"error": f"{type(exc).__name__}: {exc}"})
    rows = []
    for name, anchor, _ in variants:
        good = sorted((x for x in runs[name] if "seconds" in x), key=lambda x: x["seconds"])
        if not good:
            rows.append({"runner": name, "anchor": anchor, "error": runs[name][0].get("error")})
            continue
        mid = dict(good[len(good) // 2])
        mid.pop("results", None)
        mid["all_seconds"] = [x["seconds"] for x in good]
        rows.append({"runner": name, "anchor": anchor, **mid})
    return rows


def spread(values: list[float]) -> dict[str, Any]:
    med = statistics.median(values)
    return {"medians_ms": values, "median_ms": med, "rel_spread": (max(values) - min(values)) / med,
            "cv": statistics.pstdev(values) / statistics.mean(values)}


def consistency(repeats: int, a, b, c, tmp: Path) -> dict[str, Any]:
    one = {"WPT": 4, "UNROLL": 2}
    spec = KernelSpec(OURS_C, "vector_add", N, [c, a, b, np.int32(N)], expected=[a + b, None, None, None])
    out: dict[str, Any] = {"config": one}
    for label, measure in (("ours_parity", PARITY), ("ours_default", MeasureOptions())):
        values = []
        for _ in range(repeats):
            with make_runner(spec, runner="c", measure=measure, cache_dir=tmp / "consistency") as r:
                values.append(r.evaluate(one).value)
        out[label] = spread(values)
    try:
        values = []
        for _ in range(repeats):
            res = run_kernel_tuner("C", KT_C, {k: [v] for k, v in one.items()}, a, b, c, compiler_options=["-O3"])
            values.append(res["results"][0]["time"])
        out["kernel_tuner"] = spread(values)
    except ImportError:
        out["kernel_tuner"] = None
    return out


def gpu_variants(a, b, c) -> list[tuple[str, str, Callable[[], dict[str, Any]]]]:
    spec = KernelSpec(CUDA_SRC, "vector_add", N, [c, a, b, np.int32(N)], expected=[a + b, None, None, None],
                      grid_div_x=["block_size_x", "WPT"])
    variants = []
    for name, kt_lang in (("cupy", "cupy"), ("pycuda", "CUDA")):
        if not backend_available(name):
            continue
        kt_name = f"kernel_tuner {kt_lang}"
        variants.append((f"{name} (isolated)", kt_name, lambda name=name: run_ours(name, spec, CUDA_PARAMS, PARITY)))
        if importlib.util.find_spec("kernel_tuner"):
            variants.append((kt_name, kt_name, lambda kt_lang=kt_lang: run_kernel_tuner(
                kt_lang, CUDA_SRC, CUDA_PARAMS, a, b, c, grid_div_x=["block_size_x", "WPT"])))
    return variants


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "bench_runner.json"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--consistency", type=int, default=5)
    args = parser.parse_args(argv)
    a, b, c = data()
    spec = KernelSpec(OURS_C, "vector_add", N, [c, a, b, np.int32(N)], expected=[a + b, None, None, None])
    spec_cxx = KernelSpec(OURS_C, "vector_add", N, [c, a, b, np.int32(N)], expected=[a + b, None, None, None],
                          lang="c++")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-runner-") as tmpdir:
        tmp = Path(tmpdir)
        counter = iter(range(10**6))
        warm_dir = tmp / "warm"
        run_ours("c", spec, TUNE_PARAMS, PARITY, cache_dir=warm_dir)  # fill the cache for the warm row

        def cold(spec_: KernelSpec, **options: Any) -> Callable[[], dict[str, Any]]:
            return lambda: run_ours("c", spec_, TUNE_PARAMS, PARITY, cache_dir=tmp / f"cold{next(counter)}", **options)

        kt_c = "kernel_tuner C"
        variants = [
            ("c (isolated)", kt_c, cold(spec, isolate=True)),
            ("c (in-process)", kt_c, cold(spec, isolate=False)),
            ("c (isolated, g++)", kt_c, cold(spec_cxx)),
            ("c (isolated, warm)", kt_c, lambda: run_ours("c", spec, TUNE_PARAMS, PARITY, cache_dir=warm_dir)),
        ]
        if importlib.util.find_spec("kernel_tuner"):
            variants.append((kt_c, kt_c, lambda: run_kernel_tuner("C", KT_C, TUNE_PARAMS, a, b, c,
                                                                  compiler_options=["-O3"])))
        else:
            print("kernel_tuner not installed: no anchor row", file=sys.stderr)
        rows.extend(interleaved(variants, args.repeats))
        rows.extend(interleaved(gpu_variants(a, b, c), args.repeats) if gpu_variants(a, b, c) else [])
        repeat = consistency(args.consistency, a, b, c, tmp)

    by_name = {r["runner"]: r for r in rows}
    for row in rows:
        if "seconds" not in row:
            continue
        row["seconds_per_config"] = row["seconds"] / row["configs"]
    for row in rows:
        ref = by_name.get(row.get("anchor", ""))
        if "seconds_per_config" in row and ref is not None and "seconds_per_config" in ref:
            row["ratio_to_kernel_tuner"] = row["seconds_per_config"] / ref["seconds_per_config"]

    print(f"\nvector add, {N} float32, {len(configs(TUNE_PARAMS))} configs (CPU), {ITERATIONS} iterations,"
          f" median of {args.repeats} runs\n")
    print(f"{'runner':<22} {'configs':>7} {'s/config':>9} {'vs KT':>7}   start (s)  per config: compile / verify / bench (s)")
    for row in rows:
        if "seconds" not in row:
            print(f"{row['runner']:<22} error: {row.get('error')}")
            continue
        ph = row.get("phases")
        phases = f"{ph['compile_s']:.3f} / {ph['verify_s']:.3f} / {ph['bench_s']:.3f}" if ph else ""
        ratio = f"{row['ratio_to_kernel_tuner']:.2f}" if "ratio_to_kernel_tuner" in row else "-"
        start = f"{row['start_s']:9.3f}" if "start_s" in row else " " * 9
        print(f"{row['runner']:<22} {row['configs']:>7} {row['seconds_per_config']:>9.4f} {ratio:>7}   {start}  {phases}")
    print(f"\nrepeatability of {repeat['config']} over {args.consistency} fresh runners (median of each, ms):")
    for label in ("ours_parity", "ours_default", "kernel_tuner"):
        s = repeat.get(label)
        if s:
            print(f"  {label:<14} spread {100 * s['rel_spread']:5.1f}%  cv {100 * s['cv']:4.1f}%  "
                  f"[{', '.join(f'{v:.3f}' for v in s['medians_ms'])}]")

    out = {
        "benchmark": "runner overhead per configuration",
        "problem": {"kernel": "vector_add", "n": N, "dtype": "float32", "params": TUNE_PARAMS,
                    "cuda_params": CUDA_PARAMS, "iterations": ITERATIONS},
        "machine": {"cpu": platform.processor(), "python": platform.python_version()},
        "repeats": args.repeats,
        "rows": rows,
        "repeatability": repeat,
    }
    try:
        from pytest_autotune.execution.device import detect_cpu_device

        out["machine"] = detect_cpu_device().as_dict()
    except Exception:
        pass
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2, sort_keys=True, default=str) + "\n")
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
