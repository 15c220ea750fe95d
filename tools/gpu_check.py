"""Helpers of the device check (``tools/gpu_check.sh``): probe the machine, profile one kernel, and turn the
reports the steps wrote into one verdict per step.

    python tools/gpu_check.py env WORKDIR        # versions, device, NVRTC, a compiled-ahead cubin loaded: env.json
    python tools/gpu_check.py ncu WORKDIR        # one kernel profiled by Nsight Compute: ncu.json
    python tools/gpu_check.py summary WORKDIR    # VERDICT lines from env.json, the junit XML and the JSON reports

Every verdict comes from a report a step wrote (``*.json``, ``*.xml``), never from an exit code: a step that
wrote nothing (killed at its time limit, crashed at start) is ``FAILED (no report ...)``. A verdict is one of
``OK``, ``FAILED``, ``NO DEVICE`` (the step needs a CUDA device and there is none, or none usable),
``NOT AVAILABLE`` (a tool or package the step needs is not on the machine: ncu, PyCUDA's wheels) and
``NOT RUN`` (no time was left). Only the standard library and the project are imported at module level, so
``summary`` works on any machine (also to re-read a results tarball).
"""
from __future__ import annotations

import json
import os
import sys
import traceback
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, Callable

STEPS = ("install", "env", "gpu_tests", "tune", "cubins", "gate", "static", "lockfile", "compile", "ncu", "pycuda",
         "nvrtc_tests")
TUNE_GOOD = ("first lock", "new winner", "kept lock")
GATE_GOOD = ("pass", "faster", "stale-ranking")
DISTRIBUTIONS = ("cuda-bindings", "cuda-pathfinder", "cupy-cuda13x", "cupy-cuda12x", "nvidia-cuda-nvrtc",
                 "nvidia-cuda-runtime", "nvidia-cuda-cccl", "nvidia-cuda-nvrtc-cu12", "numpy", "scipy",
                 "scikit-learn", "pytest", "pytest-xdist", "pytest-timeout", "setuptools", "pycuda",
                 "pytest-autotune")


# -- env -------------------------------------------------------------------------------------------------------


def _guard(out: dict[str, Any], key: str, fn: Callable[[], Any]) -> Any:
    """``out[key] = fn()``; an exception is recorded as ``out[key + "_error"]`` instead (the probe goes on)."""
    try:
        out[key] = fn()
        return out[key]
    except BaseException as exc:  # noqa: BLE001 - a probe must never stop the check
        if isinstance(exc, KeyboardInterrupt):
            raise
        out[f"{key}_error"] = f"{type(exc).__name__}: {exc}".strip()[:600]
        return None


def probe_env() -> dict[str, Any]:
    """What the machine has: package versions, NVRTC, the header folders, ncu, the device and its record."""
    from importlib import metadata

    env: dict[str, Any] = {"python": sys.version.split()[0], "executable": sys.executable, "versions": {}}
    for name in DISTRIBUTIONS:
        try:
            env["versions"][name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            env["versions"][name] = None
    _guard(env, "pytest_autotune", lambda: __import__("pytest_autotune").__file__)
    from pytest_autotune.backends import ncu, nvrtc

    env["nvrtc_unavailable"] = nvrtc.nvrtc_unavailable_reason()
    if env["nvrtc_unavailable"] is None:
        _guard(env, "nvrtc_version", lambda: ".".join(map(str, nvrtc.nvrtc_version())))
        _guard(env, "nvrtc_archs", lambda: [f"sm_{a}" for a in nvrtc.supported_archs()])
    _guard(env, "header_dirs", lambda: dict(zip(("cccl", "cudart"), nvrtc.cuda_header_dirs())))
    env["ncu"] = ncu.find_ncu()
    cupy = None
    try:
        import cupy  # noqa: F811
    except Exception as exc:  # noqa: BLE001
        env["device_error"] = f"CuPy cannot be imported: {type(exc).__name__}: {exc}"
        return env
    _guard(env, "cupy_nvrtc", lambda: ".".join(map(str, cupy.cuda.nvrtc.getVersion())))
    count = _guard(env, "device_count", cupy.cuda.runtime.getDeviceCount)
    if not count:
        env.setdefault("device_error", env.get("device_count_error") or "no CUDA device")
        return env
    from pytest_autotune.execution.device import cuda_constants, detect_cuda_device_cupy

    info = _guard(env, "device_info", lambda: detect_cuda_device_cupy(0))
    if info is None:
        env["device_error"] = env.get("device_info_error")
        return env
    env["device"] = {"model": info.model, "slug": info.slug, "versions": info.versions,
                     "compute_capability": info.properties.get("compute_capability")}
    limits = cuda_constants(info)
    _guard(env, "cubin_load", lambda: _cubin_load_probe(cupy, nvrtc, limits))
    return env


def _cubin_load_probe(cupy: Any, nvrtc: Any, limits: dict[str, Any]) -> dict[str, Any]:
    """The compile stage's NVRTC cubin for this device, loaded the way the CuPy runner loads it, and run."""
    import numpy as np

    from pytest_autotune.runners import KernelSpec

    spec = KernelSpec("template <int B> __global__ void k(float *x) { x[blockIdx.x * B + threadIdx.x] += 1; }",
                      "k<block_size_x>", 1024, [np.zeros(1024, np.float32)], lang="cuda")
    stage = nvrtc.NvrtcCompileStage.for_device(spec, limits["compute_capability"], limits)
    if stage is None:
        return {"ok": False, "error": f"no NVRTC compile stage for sm_{limits['compute_capability']}"}
    art = stage.compile({"block_size_x": 128})
    if not art.ok:
        return {"ok": False, "error": f"{art.failure}: {art.detail}"[:600]}
    fn = cupy.RawModule(path=art.path).get_function(art.symbol)
    x = cupy.zeros(1024, cupy.float32)
    fn((8,), (128,), (x,))
    return {"ok": float(x.sum()) == 1024.0, "symbol": art.symbol, "sum": float(x.sum()), "registers": fn.num_regs}


# -- ncu -------------------------------------------------------------------------------------------------------


def probe_ncu() -> dict[str, Any]:
    import numpy as np

    from pytest_autotune.runners import KernelSpec
    from pytest_autotune.backends.ncu import find_ncu, profile_kernel

    if find_ncu() is None:
        return {"available": False, "error": "ncu not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)"}
    n = 1 << 20
    src = ('extern "C" __global__ void vadd(float *c, const float *a, int n) '
           '{ int i = blockIdx.x * block_size_x + threadIdx.x; if (i < n) c[i] = a[i] + 1.0f; }')
    spec = KernelSpec(src, "vadd", n, [np.zeros(n, np.float32), np.ones(n, np.float32), np.int32(n)], lang="cuda")
    out: dict[str, Any] = {"available": True}
    metrics = _guard(out, "metrics", lambda: profile_kernel(spec, {"block_size_x": 256}, timeout=45))
    out["ok"] = bool(metrics)
    return out


# -- summary ---------------------------------------------------------------------------------------------------


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def junit_counts(path: Path, select: Callable[[str], bool] = lambda name: True) -> dict[str, Any] | None:
    """passed/failed/error/skipped counts (and the first failures' names) of a junit XML; None without one."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    counts: dict[str, Any] = {"passed": 0, "failed": 0, "error": 0, "skipped": 0, "bad": [], "messages": []}
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        if not select(name):
            continue
        tags = [c for c in case if c.tag in ("failure", "error", "skipped")]
        kind = {"failure": "failed", "error": "error", "skipped": "skipped"}[tags[0].tag] if tags else "passed"
        counts[kind] += 1
        if kind in ("failed", "error"):
            counts["bad"].append(case.get("name", ""))
            counts["messages"].append((tags[0].get("message") or "").splitlines()[0][:200] if tags else "")
    return counts


def no_device_reason(env: dict[str, Any] | None) -> str | None:
    if env is None:
        return "the env step wrote no env.json"
    if env.get("device"):
        return None
    return str(env.get("device_error") or env.get("error") or "no CUDA device")


def _short(text: Any, width: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def verdict_tests(counts: dict[str, Any] | None, nodev: str | None, what: str) -> tuple[str, str]:
    if counts is None:
        return "FAILED", f"no junit report ({what} did not finish: time limit or crash; see its log)"
    total = counts["passed"] + counts["failed"] + counts["error"] + counts["skipped"]
    text = f"{counts['passed']} passed, {counts['failed']} failed, {counts['error']} errors, {counts['skipped']} skipped"
    if counts["failed"] or counts["error"]:
        if nodev and not counts["passed"]:
            return "NO DEVICE", f"{text}: every test failed as required ({_short(nodev, 100)})"
        first = f"; first: {counts['bad'][0]}: {counts['messages'][0]}" if counts["bad"] else ""
        return "FAILED", _short(text + first, 300)
    if not total:
        return "FAILED", "no test ran"
    if counts["skipped"] and not counts["passed"]:
        return ("NO DEVICE" if nodev else "FAILED"), f"{text} (skipped despite AUTOTUNE_REQUIRE_GPU=1)"
    return "OK", text


def verdict_rows(report: Any, good: tuple[str, ...], what: str, nodev: str | None) -> tuple[str, str]:
    if report is None:
        return "FAILED", f"no JSON report ({what} did not finish: time limit or crash; see its log)"
    rows = report.get("kernels") or []
    if not rows:
        return "FAILED", "the report has no kernel rows"
    statuses = ", ".join(f"{r.get('kernel')}: {r.get('status')}" for r in rows)
    if all(r.get("status") == "no device" for r in rows):
        return "NO DEVICE", _short(f"{len(rows)} kernel(s): {rows[0].get('message') or nodev}", 300)
    bad = [r for r in rows if r.get("status") not in good]
    if bad:
        first = bad[0]
        detail = first.get("message") or first.get("note") or ""
        return "FAILED", _short(f"{statuses}; {first.get('kernel')}: {detail}", 300)
    return "OK", statuses


def verdict_cubins(tune: Any, nodev: str | None) -> tuple[str, str]:
    if tune is None:
        return "FAILED", "no tune report"
    rows = [r for r in tune.get("kernels") or [] if r.get("status") != "no device"]
    if not rows:
        return ("NO DEVICE", _short(nodev, 200)) if nodev else ("FAILED", "no tuned kernel")
    ahead = [r.get("compile_ahead") or {} for r in rows]
    loaded = sum(a.get("loaded", 0) for a in ahead)
    fallbacks = sum(a.get("fallbacks", 0) for a in ahead)
    if fallbacks:
        first = next(a["first_fallback"] for a in ahead if a.get("fallbacks"))
        return "FAILED", _short(f"FALLBACK: {fallbacks} compiled-ahead cubin(s) did not load ({loaded} did); first "
                                f"at {first.get('params')}: {first.get('error')}", 400)
    if not loaded:
        return "FAILED", "no cubin was compiled ahead (no compile stage: NVRTC missing or the arch unsupported?)"
    return "OK", f"{loaded} compiled-ahead cubin(s) loaded, 0 fallbacks"


def verdict_static(report: Any, nodev: str | None) -> tuple[str, str]:
    """The static gate with the GPU hidden: every kernel's rebuilt binary is the one the tune recorded."""
    if report is None:
        return "FAILED", "no JSON report (the static step did not finish: time limit or crash; see its log)"
    rows = report.get("kernels") or []
    static = [r for r in rows if r.get("mode") == "static"]
    if not static:
        if nodev:
            return "NO DEVICE", _short(nodev, 200)
        first = rows[0] if rows else {}
        return "FAILED", _short(f"no static row (no lock entry with a static profile?): {first.get('kernel')}: "
                                f"{first.get('status')}: {first.get('message')}", 300)
    bad = [r for r in static if r.get("status") != "pass"]
    text = ", ".join(f"{r.get('kernel')}@{r.get('arch')}: {r.get('status')}" for r in static)
    if bad:
        return "FAILED", _short(f"{text}; {bad[0].get('kernel')}: {bad[0].get('message')}", 400)
    seconds = max(float(r.get("seconds") or 0) for r in static)
    return "OK", _short(f"{text} (at most {seconds:.2f} s a kernel)", 300)


def verdict_lockfile(workdir: Path, nodev: str | None) -> tuple[str, str]:
    locks = sorted((workdir / "autotune.lock").glob("nvidia*.json"))
    if not locks:
        return ("NO DEVICE", "no nvidia-*.json lockfile written") if nodev else ("FAILED", "no nvidia-*.json written")
    data = read_json(locks[0]) or {}
    versions = (data.get("device") or {}).get("versions")
    entries = data.get("entries") or {}
    profiled = sum(1 for e in entries.values() if isinstance(e, dict) and e.get("static"))
    return "OK", _short(f"{locks[0].name}: {len(entries)} entries ({profiled} with a static profile), versions "
                        f"{versions}", 300)


def verdicts(workdir: Path) -> dict[str, tuple[str, str]]:
    w = Path(workdir)
    env = read_json(w / "env.json")
    nodev = no_device_reason(env)
    out: dict[str, tuple[str, str]] = {}
    install = read_json(w / "install.json") or {}
    out["install"] = (("OK", install.get("how", "")) if install.get("ok") else
                      ("FAILED", install.get("how", "the install step wrote no install.json")))
    if env is None:
        out["env"] = ("FAILED", "no env.json (the probe did not finish; see env.log)")
    elif nodev:
        out["env"] = ("NO DEVICE", _short(nodev, 300))
    else:
        probe = env.get("cubin_load") or {"error": env.get("cubin_load_error", "not probed")}
        dev = env["device"]
        text = (f"{dev['model']} sm_{dev['compute_capability']} {dev['versions']}; NVRTC {env.get('nvrtc_version')}; "
                f"cubin probe {'loaded and ran' if probe.get('ok') else probe.get('error') or probe}")
        out["env"] = ("OK" if probe.get("ok") else "FAILED", _short(text, 400))
    out["gpu_tests"] = verdict_tests(junit_counts(w / "gpu_tests.xml"), nodev, "the gpu tests")
    tune = read_json(w / "tune.json")
    out["tune"] = verdict_rows(tune, TUNE_GOOD, "the tune step", nodev)
    out["cubins"] = verdict_cubins(tune, nodev)
    out["gate"] = verdict_rows(read_json(w / "gate.json"), GATE_GOOD, "the gate step", nodev)
    out["static"] = verdict_static(read_json(w / "static.json"), nodev)
    out["lockfile"] = verdict_lockfile(w, nodev)
    compile_report = read_json(w / "compile.json")
    if env is not None and env.get("nvrtc_unavailable"):
        out["compile"] = ("NOT AVAILABLE", _short(env["nvrtc_unavailable"], 200))
    else:
        out["compile"] = verdict_rows(compile_report, ("compiled",), "the compile step", None)
    ncu = read_json(w / "ncu.json")
    if ncu is None:
        out["ncu"] = ("FAILED", "no ncu.json (the profile did not finish; see ncu.log)")
    elif not ncu.get("available"):
        out["ncu"] = ("NOT AVAILABLE", _short(ncu.get("error"), 200))
    elif ncu.get("ok"):
        out["ncu"] = ("OK", _short(f"{len(ncu['metrics'])} metrics: {dict(list(ncu['metrics'].items())[:4])}", 300))
    else:
        out["ncu"] = (("NO DEVICE" if nodev else "FAILED"), _short(ncu.get("metrics_error") or "no metrics", 300))
    pycuda = read_json(w / "pycuda.json") or {}
    if not pycuda.get("wheels"):
        out["pycuda"] = ("NOT AVAILABLE", "no PyCUDA wheel in .gpu/whl (see tools/README.md)")
    elif not pycuda.get("installed"):
        out["pycuda"] = ("FAILED", _short(f"the wheels did not install: {pycuda.get('error')}", 300))
    else:
        out["pycuda"] = verdict_tests(junit_counts(w / "pycuda_tests.xml"), nodev, "the PyCUDA tests")
    out["nvrtc_tests"] = verdict_tests(junit_counts(w / "nvrtc_tests.xml"), None, "the NVRTC tests")
    for step in STEPS:  # a step the script never started (no time left)
        if (w / f"{step}.notrun").exists():
            out[step] = ("NOT RUN", (w / f"{step}.notrun").read_text().strip() or "no time left")
    return out


def summary_lines(result: dict[str, tuple[str, str]]) -> list[str]:
    return [f"VERDICT {step}: {verdict} ({detail})" for step, (verdict, detail) in result.items()]


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("env", "ncu", "summary"):
        print(__doc__, file=sys.stderr)
        return 2
    command, workdir = argv[0], Path(argv[1])
    workdir.mkdir(parents=True, exist_ok=True)
    if command == "summary":
        result = verdicts(workdir)
        (workdir / "verdicts.json").write_text(json.dumps({k: list(v) for k, v in result.items()}, indent=1) + "\n")
        print("\n".join(summary_lines(result)))
        return 0
    probe = probe_env if command == "env" else probe_ncu
    try:
        data = probe()
    except Exception:  # noqa: BLE001 - the report says what broke; the verdict reads it
        data = {"error": traceback.format_exc()[-1500:]}
    (workdir / f"{command}.json").write_text(json.dumps(data, indent=1, default=str) + "\n")
    print(json.dumps(data, indent=1, default=str)[:4000])
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.getcwd())  # the repository root, when the project is not installed
    sys.exit(main(sys.argv[1:]))
