#!/usr/bin/env python
"""Where the wall time of ``pytest --autotune`` goes, beside the anchors' whole command (issue 39, item 2).

Each case is a small generated project with one test and one kernel, tuned by brute force over its whole
space with the marker's defaults otherwise, the whole command timed as a subprocess
(``python -m pytest --autotune -q -p no:cacheprovider``, a fresh project and compile cache every run):

    ``c``          vector scale ``y = a * x`` (2^20 float32), ``WPT`` x ``UNROLL``: 12 configurations
    ``c_inproc``   the same with ``isolate=False``
    ``opencl``     the example's tiled matmul (128 x 128) on PoCL (CPU): 12 configurations
    ``triton``     vector add (2^16 float32) in Triton's interpreter, ``BLOCK``: 8 configurations

Beside each, in the same run and interleaved (the order rotates each repeat), the anchor's whole command as a
subprocess on the same kernel, space and problem: Kernel Tuner 1.5's C backend (``lang="C"``; its kernel
times itself with ``clock_gettime``, as that backend requires, see ``bench_runner.py``) and OpenCL backend
(``lang="OpenCL"``, PoCL's platform), each with ``answer=`` (verification) and its default 7 iterations;
``@triton.autotune`` over the same configurations under ``TRITON_INTERPRET=1`` with a host-clock
``do_bench`` (Triton's own raises ``0 active drivers`` in the interpreter; this one has its semantics: 25 ms
of warm-up, 100 ms of runs, quantiles of the run times), followed by one verified call.

The breakdown comes from ``_tune_phases.py`` (a pytest plugin loaded in the subprocess with ``-p``): startup
(interpreter, imports, collection), and per phase (search, finalists, lock rounds, probes, pauses, after)
compile, verification, kernel execution (warm-up and timed runs) and the rest. "Overhead" is what is
neither compile nor kernel execution nor verification, anywhere (target: at most 30 % of the wall time);
"post-search" is what the finalists, the lock's rounds, their probes and pauses took. Medians over
``--repeats`` runs (default 5); ratios are of the medians, ours / the anchor's.

    python benchmarks/bench_tune_overhead.py [--repeats 5] [--cases c,c_inproc,opencl,triton] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(BENCH))

from _common import environment, print_table, write_json  # noqa: E402

C_N = 1 << 20
C_PARAMS = {"WPT": [1, 2, 4, 8], "UNROLL": [1, 2, 4]}
CL_N = 128
CL_PARAMS = {"block_size_x": [8, 16, 32], "block_size_y": [1, 2, 4, 8], "tile_size_x": [1], "tile_size_y": [1],
             "TILE_K": [16]}
TRITON_N = 1 << 16
TRITON_BLOCKS = [256, 512, 1024, 2048, 4096, 8192, 16384, 32768]

C_LOOPS = r"""
    for (int i = 0; i < n; i += WPT) {
        UNROLLED(UNROLL)
        for (int j = 0; j < WPT; j++) {
            if (i + j < n) y[i + j] = a * x[i + j];
        }
    }
"""
C_MACROS = "#define PRAGMA(x) _Pragma(#x)\n#define UNROLLED(n) PRAGMA(GCC unroll n)\n"
OURS_C = C_MACROS + "void vector_scale(float *y, const float *x, float a, int n) {" + C_LOOPS + "}\n"
KT_C = ("#include <time.h>\n" + C_MACROS
        + 'extern "C" float vector_scale(float *y, const float *x, float a, int n) {\n'
        + "    struct timespec t0, t1;\n    clock_gettime(CLOCK_MONOTONIC, &t0);\n" + C_LOOPS
        + "    clock_gettime(CLOCK_MONOTONIC, &t1);\n"
        + "    return (float)((t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) * 1e-6);\n}\n")
CL_SOURCE = (ROOT / "example_project" / "kernels" / "matmul.cl").read_text()

COMMON_DATA = textwrap.dedent("""
    import numpy as np
    C_N, CL_N, TRITON_N = {C_N}, {CL_N}, {TRITON_N}
    def c_problem():
        x = np.random.default_rng(1).random(C_N, dtype=np.float32)
        return [np.zeros_like(x), x, np.float32(1.5), np.int32(C_N)], np.float32(1.5) * x
    def cl_problem():
        a = np.random.default_rng(1).random((CL_N, CL_N), dtype=np.float32)
        b = np.random.default_rng(2).random((CL_N, CL_N), dtype=np.float32)
        return [np.zeros((CL_N, CL_N), np.float32), a, b, np.int32(CL_N)], a @ b
    def triton_problem():
        x = np.random.default_rng(1).random(TRITON_N, dtype=np.float32)
        y = np.random.default_rng(2).random(TRITON_N, dtype=np.float32)
        return x, y, x + y
""").format(C_N=C_N, CL_N=CL_N, TRITON_N=TRITON_N)

TRITON_KERNEL = textwrap.dedent("""
    import triton
    import triton.language as tl

    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)
""")


def ours_test(case: str) -> str:
    """The generated project's test module for ``case``."""
    if case in ("c", "c_inproc"):
        isolate = ", isolate=False" if case == "c_inproc" else ""
        return COMMON_DATA + textwrap.dedent(f"""
            import pytest
            SOURCE = {OURS_C!r}
            @pytest.mark.tune(params={C_PARAMS!r}, strategy="brute_force", budget=12)
            def test_scale(autotune):
                args, expected = c_problem()
                autotune.kernel(SOURCE, "vector_scale", C_N, args, expected=[expected, None, None, None],
                                lang="c"{isolate})
        """)
    if case == "opencl":
        return COMMON_DATA + textwrap.dedent(f"""
            import pytest
            SOURCE = {CL_SOURCE!r}
            @pytest.mark.tune(params={CL_PARAMS!r}, strategy="brute_force", budget=12)
            def test_matmul(autotune):
                args, expected = cl_problem()
                autotune.kernel(SOURCE, "matmul", (CL_N, CL_N), args, expected=[expected, None, None, None],
                                rtol=1e-4, atol=1e-3, lang="opencl", grid_div_x=["block_size_x", "tile_size_x"],
                                grid_div_y=["block_size_y", "tile_size_y"])
        """)
    if case == "triton":
        return COMMON_DATA + TRITON_KERNEL.replace("def add_kernel", "@triton.jit\ndef add_kernel") + textwrap.dedent(f"""
            import pytest
            @pytest.mark.tune(params={{"BLOCK": {TRITON_BLOCKS!r}}}, strategy="brute_force", budget=8)
            def test_add(autotune):
                x, y, expected = triton_problem()
                out = np.zeros_like(x)
                autotune.triton(add_kernel, lambda meta: (triton.cdiv(TRITON_N, meta["BLOCK"]),),
                                [x, y, out, TRITON_N], expected=[None, None, expected, None])
        """)
    raise ValueError(case)


KT_SCRIPT = COMMON_DATA + textwrap.dedent("""
    import sys, warnings, contextlib, io
    import kernel_tuner
    lang = sys.argv[1]
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        if lang == "C":
            args, expected = c_problem()
            results, _ = kernel_tuner.tune_kernel("vector_scale", {kt_c!r}, C_N, args, {c_params!r}, lang="C",
                                                  answer=[expected, None, None, None], compiler_options=["-O3"],
                                                  verbose=False, quiet=True)
        else:
            import pyopencl as cl
            platform = next(i for i, p in enumerate(cl.get_platforms()) if "portable" in p.name.lower())
            args, expected = cl_problem()
            results, _ = kernel_tuner.tune_kernel("matmul", {cl_source!r}, (CL_N, CL_N), args, {cl_params!r},
                                                  lang="OpenCL", platform=platform, device=0,
                                                  answer=[expected, None, None, None], atol=1e-3,
                                                  grid_div_x=["block_size_x", "tile_size_x"],
                                                  grid_div_y=["block_size_y", "tile_size_y"],
                                                  verbose=False, quiet=True)
    ok = [r for r in results if isinstance(r.get("time"), float)]
    assert len(ok) == len(results) == 12, results
    print("best", min(ok, key=lambda r: r["time"]))
""").format(kt_c=KT_C, c_params=C_PARAMS, cl_source=CL_SOURCE, cl_params=CL_PARAMS)

TRITON_SCRIPT = COMMON_DATA + TRITON_KERNEL + textwrap.dedent(f"""
    import time
    import torch

    def host_do_bench(fn, quantiles=None, warmup=25, rep=100):
        # triton.testing.do_bench's semantics on the host clock: estimate, then warmup ms and rep ms of runs
        t = time.perf_counter()
        for _ in range(5):
            fn()
        estimate = (time.perf_counter() - t) / 5 * 1e3
        for _ in range(max(1, int(warmup / estimate))):
            fn()
        times = []
        for _ in range(max(1, int(rep / estimate))):
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1e3)
        if quantiles is None:
            return float(np.median(times))
        return [float(q) for q in np.quantile(times, quantiles)]

    tuned = triton.autotune(configs=[triton.Config({{"BLOCK": b}}) for b in {TRITON_BLOCKS!r}], key=["n"],
                            do_bench=host_do_bench)(triton.jit(add_kernel))
    x, y, expected = triton_problem()
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    out = torch.zeros_like(xt)
    tuned[lambda meta: (triton.cdiv(TRITON_N, meta["BLOCK"]),)](xt, yt, out, TRITON_N)
    np.testing.assert_allclose(out.numpy(), expected)
    print("best", tuned.best_config)
""")


def _env(tmp: Path, impl: Path = ROOT, **extra: str) -> dict[str, str]:
    """A fresh compile cache; ``impl``: the folder whose ``pytest_autotune`` the subprocess imports."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(impl), str(BENCH), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    # only pytest-autotune's plugin: the third-party plugins installed here (hypothesis's terminal summary took
    # 4.3 s of one run) are this environment's, not the tuning's
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    env["XDG_CACHE_HOME"] = str(tmp / "xdg")
    env["TRITON_CACHE_DIR"] = str(tmp / "triton")
    env.update(extra)
    return env


def _timed(cmd: list[str], cwd: Path, env: dict[str, str], label: str) -> float:
    t = time.time()
    env["BENCH_TUNE_T0"] = repr(t)
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.time() - t
    if done.returncode != 0:
        raise RuntimeError(f"{label} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return wall


def run_ours(case: str, workdir: Path, impl: Path = ROOT) -> dict[str, Any]:
    """One ``pytest --autotune`` of ``case`` in a fresh project, with ``impl``'s pytest_autotune: its wall time
    and the phases' breakdown."""
    tmp = Path(tempfile.mkdtemp(prefix=f"ours-{case}-", dir=workdir))
    (tmp / "pytest.ini").write_text("[pytest]\nautotune_lockdir = autotune.lock\n")
    (tmp / f"test_{case}.py").write_text(ours_test(case))
    phases = tmp / "phases.json"
    env = _env(tmp, impl, BENCH_TUNE_PHASES=str(phases))
    wall = _timed([sys.executable, "-m", "pytest", "--autotune", "-q", "-p", "no:cacheprovider",
                   "-p", "pytest_autotune.plugin", "-p", "_tune_phases",
                   f"test_{case}.py"], tmp, env, f"ours {case}")
    record = json.loads(phases.read_text())
    lock = next((tmp / "autotune.lock").glob("*.json"))
    entry = next(iter(json.loads(lock.read_text())["entries"].values()))
    return {"seconds": wall, "breakdown": breakdown(wall, record), "raw": record,
            "winner": entry["params"], "runners_up": len(entry.get("runners_up") or []),
            "runners_up_retimed": sum(r.get("median_kind") == "re-timed" for r in entry.get("runners_up") or [])}


def run_anchor(case: str, workdir: Path) -> dict[str, Any]:
    """The anchor's whole command for ``case`` as a subprocess."""
    tmp = Path(tempfile.mkdtemp(prefix=f"anchor-{case}-", dir=workdir))
    if case == "triton":
        (tmp / "anchor.py").write_text(TRITON_SCRIPT)
        cmd, extra = [sys.executable, "anchor.py"], {"TRITON_INTERPRET": "1"}
    else:
        (tmp / "anchor.py").write_text(KT_SCRIPT)
        cmd, extra = [sys.executable, "anchor.py", "OpenCL" if case == "opencl" else "C"], {}
    return {"seconds": _timed(cmd, tmp, _env(tmp, **extra), f"anchor {case}")}


MEASURED = ("compile_s", "verify_s", "bench_s")


def breakdown(wall: float, record: dict[str, Any]) -> dict[str, float]:
    """The wall time in the categories of the table (seconds); ``overhead``: neither compile, nor kernel
    execution, nor verification."""
    spent, counts = record["spent_s"], record["counts"]
    out: dict[str, float] = {"wall": wall, "startup": record["startup_s"]}
    for key in ("compile", "verify", "bench", "worker_start", "eval_other"):
        out[key] = sum(v for k, v in spent.items() if k.endswith("." + key + ("" if key == "eval_other" else "_s")))
    for phase in ("search", "finalists", "lock_rounds", "probes", "pauses", "after"):
        inside = sum(v for k, v in spent.items() if k.startswith(phase + ".") and not k.endswith(("evaluations",
                                                                                                    "timed_runs")))
        out[f"{phase}.total"] = spent.get(phase, 0.0) + inside
        out[f"{phase}.bench"] = spent.get(phase + ".bench_s", 0.0)
        out[f"{phase}.timed_runs"] = float(counts.get(phase + ".timed_runs", 0))
    out["probes.total"] = spent.get("probes", 0.0)
    out["pauses.total"] = spent.get("pauses", 0.0)
    marks = record["marks_s"]
    out["setup"] = marks.get("call_start", 0.0) - marks.get("setup_start", 0.0)  # the fixture, device detection
    out["collect"] = marks.get("collected", 0.0) - marks.get("configure", 0.0)
    out["teardown"] = wall - marks.get("call_end", wall)  # the report, the summary, exit
    measured = out["compile"] + out["verify"] + out["bench"]
    out["overhead"] = wall - measured
    out["overhead_share"] = out["overhead"] / wall
    out["post_search"] = sum(out[f"{p}.total"] for p in ("finalists", "lock_rounds", "probes", "pauses"))
    return out


CASES: dict[str, str] = {"c": "Kernel Tuner 1.5 C", "c_inproc": "Kernel Tuner 1.5 C",
                         "opencl": "Kernel Tuner 1.5 OpenCL", "triton": "@triton.autotune (interpreter)"}


def interleaved(jobs: list[tuple[str, Callable[[], dict[str, Any]]]], repeats: int) -> dict[str, list[dict[str, Any]]]:
    """Every job ``repeats`` times, the order rotating each repeat, so all share the machine's conditions."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in jobs}
    for r in range(repeats):
        k = r % len(jobs)
        for name, fn in jobs[k:] + jobs[:k]:
            runs[name].append(fn())
            print(f"  repeat {r + 1}/{repeats} {name}: {runs[name][-1]['seconds']:.2f} s", flush=True)
    return runs


def median_breakdown(runs: list[dict[str, Any]]) -> dict[str, float]:
    keys = runs[0]["breakdown"].keys()
    return {k: statistics.median(r["breakdown"][k] for r in runs) for k in keys}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--before", default=None, help="a folder holding an older pytest_autotune package "
                        "(git archive REV pytest_autotune | tar -x -C DIR): its rows beside the working tree's")
    parser.add_argument("--json", default=str(BENCH / "results" / "bench_tune_overhead.json"))
    args = parser.parse_args(argv)
    cases = [c for c in args.cases.split(",") if c]
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-tune-overhead-") as workdir:
        jobs: list[tuple[str, Callable[[], dict[str, Any]]]] = []
        for case in cases:
            jobs.append((case, lambda case=case: run_ours(case, Path(workdir))))
            if args.before:
                jobs.append((f"before:{case}", lambda case=case: run_ours(case, Path(workdir), Path(args.before))))
            if case != "c_inproc" or "c" not in cases:  # one Kernel Tuner C anchor serves both C rows
                jobs.append((f"anchor:{case}", lambda case=case: run_anchor(case, Path(workdir))))
        runs = interleaved(jobs, args.repeats)
    rows, table = [], []
    for name in [n for c in cases for n in (c, f"before:{c}")]:
        if name not in runs:
            continue
        case = name.split(":")[-1]
        ours = runs[name]
        anchor = runs.get(f"anchor:{case}") or runs["anchor:c"]
        wall = statistics.median(r["seconds"] for r in ours)
        anchor_wall = statistics.median(r["seconds"] for r in anchor)
        b = median_breakdown(ours)
        row = {"case": case, "variant": "before" if name.startswith("before:") else "this tree", "anchor": CASES[case], "seconds": wall, "anchor_seconds": anchor_wall,
               "ratio": wall / anchor_wall, "all_seconds": [r["seconds"] for r in ours],
               "anchor_all_seconds": [r["seconds"] for r in anchor], "breakdown_median": b,
               "runs": [{k: v for k, v in r.items() if k != "raw"} | {"raw": r["raw"]} for r in ours]}
        rows.append(row)
        table.append([name, f"{wall:.2f}", f"{anchor_wall:.2f}", f"{wall / anchor_wall:.2f}x",
                      f"{b['startup']:.2f}", f"{b['compile']:.2f}", f"{b['verify']:.2f}", f"{b['bench']:.2f}",
                      f"{b['search.total']:.2f}", f"{b['finalists.total']:.2f}", f"{b['lock_rounds.total']:.2f}",
                      f"{b['probes.total']:.2f}", f"{b['pauses.total']:.2f}", f"{b['worker_start']:.2f}",
                      f"{b['teardown']:.2f}", f"{100 * b['overhead_share']:.0f}%",
                      f"{int(b['search.timed_runs'])}/{int(b['finalists.timed_runs'] + b['lock_rounds.timed_runs'])}"])
    print_table(table, ["case", "ours s", "anchor s", "ratio", "startup", "compile", "verify", "kernel",
                        "search", "finalists", "lock rounds", "probes", "pauses", "worker start", "teardown",
                        "overhead", "runs search/after"],
                title=f"pytest --autotune, whole command, median of {args.repeats} interleaved runs "
                      f"(load {load_before[0]:.1f} before)")
    out = {"benchmark": "tune overhead (issue 39 item 2)", "before": args.before, "repeats": args.repeats,
           "load_before": load_before, "load_after": os.getloadavg(), "environment": environment(
               ["kernel_tuner", "triton", "pyopencl", "numpy"]), "rows": rows,
           "problem": {"c": {"n": C_N, "params": C_PARAMS}, "opencl": {"n": CL_N, "params": CL_PARAMS},
                       "triton": {"n": TRITON_N, "BLOCK": TRITON_BLOCKS}}}
    path = write_json(args.json, out)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
