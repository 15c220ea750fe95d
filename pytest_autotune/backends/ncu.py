"""Hardware counters of one CUDA kernel configuration, read with Nsight Compute's CLI (``ncu``).

The profile-based searcher asks a runner for ``profile(params) -> {metric: value}``.
For the CUDA runners that is :func:`profile_kernel`: it renders the
configuration exactly as the runners do (:func:`~.kernel.render_source`,
:func:`~.kernel.instantiated_name`, :func:`~.kernel.launch_geometry`), writes a
small standalone job to a temporary folder -- the source, the kernel
arguments (``args.npz``), the launch (``job.json``) and a CuPy script that
compiles and launches the kernel once -- and runs::

    ncu --csv --page details --print-units base --metrics <m1,m2,...>
        --kernel-name-base function --kernel-name regex:^(.*::)?<name>$ --launch-count 1
        --target-processes all --log-file <folder>/ncu.csv  <python> profile_job.py job.json

in a subprocess of its own session (killed as a group on timeout), then
parses the CSV into ``{metric: value}``. The script lives in a separate
process, so profiling never touches the tuning process's CUDA context.

A runner exposes it as::

    @property
    def can_profile(self) -> bool:
        return ncu_available()

    def profile(self, params):
        return profile_kernel(self.spec, params, device_id=self.device_id)

Errors: :class:`~.errors.BackendUnavailable` when ``ncu`` (or CuPy in the
job) is missing or the user may not read the GPU's counters
(``ERR_NVGPUCTRPERM``) -- no configuration can be profiled then;
:class:`NcuError` for one configuration that could not be profiled (compile
error, crash, timeout, no metrics in the output).
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import AutotuneError, BackendUnavailable
from ..runners.base import HOSTED, Capabilities
from ..execution.kernel import KernelSpec, instantiated_name, launch_geometry, render_source, split_template

__all__ = ["NcuError", "NCU_ENV", "default_metrics", "kernel_filter", "find_ncu", "ncu_available", "ncu_command",
           "parse_ncu_csv", "parse_ncu_csv_launches", "write_profile_job", "profile_kernel", "PROFILE_SCRIPT"]

NCU_ENV = "AUTOTUNE_NCU"
DEFAULT_SHARED_MEMORY = 48 * 1024
"""Static + dynamic shared memory a kernel may use before it must opt in (every architecture)."""
"""Environment variable with the path of the ``ncu`` executable (else ``ncu`` on PATH, else CUDA's bin folder)."""


def default_metrics() -> tuple[str, ...]:
    """What the profile-based searcher reads: its PC_stress and PC_ops counters, the thread count and the GPU's size.

    Also available as ``NCU_METRICS`` (computed on first use: the names live with the searcher's counter model).
    """
    from ..strategies._counters import (CC_MAJOR, CC_MINOR, REQUIRED_COUNTERS, SM_COUNT, THREADS,
                                        WARP_NONPRED_EFFICIENCY)

    return tuple(dict.fromkeys(REQUIRED_COUNTERS + (WARP_NONPRED_EFFICIENCY, THREADS, SM_COUNT, CC_MAJOR, CC_MINOR)))


def __getattr__(name: str) -> Any:
    if name == "NCU_METRICS":
        return default_metrics()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class NcuError(AutotuneError, RuntimeError):
    """One configuration could not be profiled (the message carries ncu's and the script's output)."""


# -- locating ncu --------------------------------------------------------------------------------------------


def find_ncu(ncu: str | os.PathLike | None = None) -> str | None:
    """Path of the ``ncu`` executable: the argument, else ``$AUTOTUNE_NCU``, else PATH, ``$CUDA_HOME/bin``, CUDA's."""
    candidates: list[str] = []
    if ncu is not None:
        candidates.append(os.fspath(ncu))
    elif os.environ.get(NCU_ENV):
        candidates.append(os.environ[NCU_ENV])
    else:
        candidates.append("ncu")
        for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
            if home:
                candidates.append(str(Path(home) / "bin" / "ncu"))
    for c in candidates:
        found = shutil.which(c)
        if found:
            return found
    return None


def ncu_available(ncu: str | os.PathLike | None = None) -> bool:
    """Whether an ``ncu`` executable can be found (it does not check the GPU or counter permissions)."""
    return find_ncu(ncu) is not None


# -- the command ---------------------------------------------------------------------------------------------


def kernel_filter(kernel_name: str) -> str:
    """``--kernel-name`` value matching the kernel's function name (no template arguments, any namespace)."""
    base = split_template(kernel_name)[0].split("::")[-1]
    return f"regex:^(.*::)?{re.escape(base)}$"


def ncu_command(script: str | os.PathLike, job: str | os.PathLike, metrics: Sequence[str], *, kernel_name: str,
                ncu: str = "ncu", python: str | None = None, log_file: str | os.PathLike | None = None,
                launch_count: int = 1, extra_args: Sequence[str] = ()) -> list[str]:
    """The argument list that profiles the first launch of ``kernel_name`` in ``python script job``."""
    if not metrics:
        raise ValueError("ncu_command needs at least one metric")
    bad = [m for m in metrics if not re.fullmatch(r"[A-Za-z0-9_.]+", m)]
    if bad:
        raise ValueError(f"metric names {bad} contain characters Nsight Compute metric names never have")
    if launch_count < 1:
        raise ValueError(f"launch_count must be >= 1, got {launch_count}")
    cmd = [str(ncu), "--csv", "--page", "details", "--print-units", "base", "--metrics", ",".join(metrics),
           "--kernel-name-base", "function", "--kernel-name", kernel_filter(kernel_name),
           "--launch-count", str(int(launch_count)), "--target-processes", "all",
           # the GPU's clocks as they are: ncu's default locks them to base (a different speed from what the tuner
           # times with), and locking needs privileges that shared GPU machines do not grant
           "--clock-control", "none"]
    if log_file is not None:
        cmd += ["--log-file", os.fspath(log_file)]
    cmd += [str(a) for a in extra_args]
    cmd += [python or sys.executable, os.fspath(script), os.fspath(job)]
    return cmd


# -- parsing -------------------------------------------------------------------------------------------------

_NUMBER = re.compile(r"[-+]?(\d{1,3}(,\d{3})+|\d+)?(\.\d*)?([eE][-+]?\d+)?")
_SCALE = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_SMALL = {"m": 1e-3, "u": 1e-6, "n": 1e-9}
_BASE_UNITS = {"byte", "sector", "inst", "request", "warp", "cycle", "wavefront", "thread", "block", "transaction",
               "hit", "miss", "op", "flop"}


def _number(text: str) -> float | None:
    """A metric value as a float: thousands separators removed; ``n/a`` and words give None."""
    t = text.strip().strip('"').strip()
    if not t or not _NUMBER.fullmatch(t) or not any(ch.isdigit() for ch in t):
        return None
    try:
        return float(t.replace(",", ""))
    except ValueError:
        return None


def _unit_scale(unit: str) -> float:
    """Factor to the base unit for a prefixed unit (``Kbyte``, ``Msector``, ``Gbyte/second``, ``usecond``); else 1."""
    u = (unit or "").strip()
    if len(u) < 2:
        return 1.0
    base = u[1:].split("/")[0]
    if u[0] in _SCALE and base in _BASE_UNITS | {"second", "hz"}:
        return _SCALE[u[0]]
    if u[0] in _SMALL and base == "second":
        return _SMALL[u[0]]
    return 1.0


def _csv_rows(text: str) -> list[list[str]]:
    """CSV rows of ncu's output, skipping ``==PROF==`` / ``==WARNING==`` lines and anything before the header."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("==")]
    start = next((i for i, ln in enumerate(lines) if ln.lstrip().startswith('"ID"') or ln.lstrip().startswith("ID,")),
                 None)
    if start is None:
        return []
    return [r for r in csv.reader(io.StringIO("\n".join(lines[start:]))) if r]


def parse_ncu_csv_launches(text: str) -> list[dict[str, float]]:
    """Metrics of every profiled launch in ncu ``--csv`` output, in launch order.

    Reads the ``details`` page (one row per launch and metric: ``ID``,
    ..., ``Metric Name``, ``Metric Unit``, ``Metric Value``) and the ``raw``
    page (one row per launch, a column per metric, units in the second row).
    Thousands separators are removed, prefixed units (``Kbyte``) scaled to the
    base unit, and values that are not numbers (``n/a``, names) left out.
    """
    rows = _csv_rows(text)
    if not rows:
        return []
    header = [h.strip() for h in rows[0]]
    launches: dict[str, dict[str, float]] = {}
    if "Metric Name" in header and "Metric Value" in header:
        i_id = header.index("ID")
        i_name, i_value = header.index("Metric Name"), header.index("Metric Value")
        i_unit = header.index("Metric Unit") if "Metric Unit" in header else None
        for r in rows[1:]:
            if len(r) <= max(i_name, i_value, i_id):
                continue
            value = _number(r[i_value])
            if value is None:
                continue
            if i_unit is not None and i_unit < len(r):
                value *= _unit_scale(r[i_unit])
            launches.setdefault(r[i_id].strip(), {})[r[i_name].strip()] = value
        return list(launches.values())
    # raw page: a column per metric, the second row holds units when it is not a launch
    metric_cols = [(j, h) for j, h in enumerate(header) if "__" in h]
    body = rows[1:]
    units: list[str] = [""] * len(header)
    if body and not _number(body[0][0] if body[0] else ""):
        units = body[0] + [""] * (len(header) - len(body[0]))
        body = body[1:]
    out = []
    for r in body:
        metrics: dict[str, float] = {}
        for j, h in metric_cols:
            if j < len(r):
                value = _number(r[j])
                if value is not None:
                    metrics[h] = value * _unit_scale(units[j])
        if metrics:
            out.append(metrics)
    return out


def parse_ncu_csv(text: str) -> dict[str, float]:
    """Metrics of the first profiled launch in ncu ``--csv`` output (empty when there is none)."""
    launches = parse_ncu_csv_launches(text)
    return launches[0] if launches else {}


# -- the standalone job --------------------------------------------------------------------------------------

PROFILE_SCRIPT = '''\
"""Compile and launch one kernel configuration once with CuPy (written by pytest_autotune.backends.ncu)."""
import json
import sys

import numpy as np

try:
    import cupy as cp
except ImportError as exc:
    sys.stderr.write(f"AUTOTUNE-NO-CUPY: {exc}\\n")
    sys.exit(3)

job = json.load(open(sys.argv[1]))
cp.cuda.Device(job["device_id"]).use()
data = np.load(job["args_file"], allow_pickle=False)
args = []
for i, kind in enumerate(job["arg_kinds"]):
    a = data[f"arg{i}"]
    args.append(cp.asarray(a) if kind == "array" else a[()])
with open(job["source_file"]) as f:
    source = f.read()
name = job["kernel_name"]
# A name expression for every kernel, as the runner does: NVRTC then resolves the
# lowered name, so kernels without extern "C" are found too.
module = cp.RawModule(code=source, options=tuple(job["options"]), name_expressions=[name])
kernel = module.get_function(name)
for symbol in job.get("constants", []):  # constant_memory: copied into the module's __constant__ symbols
    value = np.ascontiguousarray(data[f"constant_{symbol}"])
    module.get_global(symbol).copy_from_host(value.ctypes.data, value.nbytes)
smem = int(job["shared_mem"])
if kernel.shared_size_bytes + smem > job["default_shared_mem"]:  # the driver limits static + dynamic
    kernel.max_dynamic_shared_size_bytes = smem
kernel(tuple(job["grid"]), tuple(job["block"]), tuple(args), shared_mem=smem)
cp.cuda.runtime.deviceSynchronize()
'''


def write_profile_job(directory: str | os.PathLike, spec: KernelSpec, params: Mapping[str, Any], *,
                      device_id: int = 0) -> tuple[Path, Path, str]:
    """Write ``kernel<suffix>``, ``args.npz``, ``job.json`` and ``profile_job.py``; return (script, job, kernel name).

    The kernel is rendered exactly as the CUDA runners render it; launch
    geometry errors (:class:`~.errors.InvalidConfiguration`) propagate.
    """
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    source = render_source(spec, params)
    name = instantiated_name(spec, params)
    grid, block, smem = launch_geometry(spec, params)
    src_path = d / ("kernel" + (spec.source_file.suffix if spec.source_file else ".cu"))
    src_path.write_text(source)
    arrays: dict[str, np.ndarray] = {}
    kinds = []
    for i, a in enumerate(spec.args):
        if isinstance(a, np.ndarray):
            arrays[f"arg{i}"] = a
            kinds.append("array")
        else:
            arrays[f"arg{i}"] = np.asarray(a)
            kinds.append("scalar")
    arrays.update({f"constant_{symbol}": value for symbol, value in spec.constant_memory.items()})
    np.savez(d / "args.npz", **arrays)
    options = list(spec.compiler_options)
    if spec.source_file:
        options.append(f"-I{spec.source_file.parent}")
    job = {"source_file": str(src_path), "kernel_name": name, "is_template": spec.is_template, "options": options,
           "grid": list(grid), "block": list(block), "shared_mem": int(smem), "args_file": str(d / "args.npz"),
           "arg_kinds": kinds, "constants": sorted(spec.constant_memory), "device_id": int(device_id),
           "default_shared_mem": DEFAULT_SHARED_MEMORY}
    job_path = d / "job.json"
    job_path.write_text(json.dumps(job, indent=1))
    script = d / "profile_job.py"
    script.write_text(PROFILE_SCRIPT)
    return script, job_path, name


def _run(cmd: list[str], timeout: float, cwd: Path) -> tuple[int, str, str]:
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            proc.kill()
        proc.communicate()
        raise NcuError(f"ncu did not finish within {timeout:g} s: {' '.join(cmd[:3])} ...") from None
    return proc.returncode, out, err


def _tail(text: str, n: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-n:])


_UNKNOWN_METRIC = re.compile(r"[Ff]ailed to (?:find|profile) metric[s]?\s*:?\s*\"?([A-Za-z0-9_.]+)")


def profile_kernel(spec: KernelSpec, params: Mapping[str, Any], *, metrics: Sequence[str] | None = None,
                   ncu: str | os.PathLike | None = None, python: str | None = None, timeout: float = 120.0,
                   device_id: int = 0, workdir: str | os.PathLike | None = None,
                   keep_files: bool = False) -> dict[str, float]:
    """Counters of one configuration of ``spec``, measured by Nsight Compute in a subprocess.

    ``metrics`` defaults to :func:`default_metrics`. A metric this GPU's ncu
    does not know is dropped and the run repeated once without it.
    ``launch__thread_count`` is filled in from the launch geometry when ncu
    does not report it. The job folder is removed afterwards unless
    ``keep_files`` (or ``workdir`` is given).
    """
    exe = find_ncu(ncu)
    if exe is None:
        raise BackendUnavailable("Nsight Compute's CLI (ncu) was not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin; "
                                 f"or set ${NCU_ENV}): it is needed to read hardware counters")
    wanted = list(dict.fromkeys(metrics or default_metrics()))
    own_dir = workdir is None
    d = Path(tempfile.mkdtemp(prefix="autotune-ncu-")) if own_dir else Path(workdir)  # type: ignore[arg-type]
    try:
        script, job, name = write_profile_job(d, spec, params, device_id=device_id)
        grid, block, _ = launch_geometry(spec, params)
        for attempt in range(2):
            log = d / "ncu.csv"
            if log.exists():
                log.unlink()
            cmd = ncu_command(script, job, wanted, kernel_name=name, ncu=exe, python=python, log_file=log)
            code, out, err = _run(cmd, timeout, d)
            text = log.read_text(errors="replace") if log.exists() else ""
            both = "\n".join([text, out, err])
            if "ERR_NVGPUCTRPERM" in both:
                raise BackendUnavailable("ncu may not read this GPU's performance counters (ERR_NVGPUCTRPERM): run as "
                                         "root or allow users to profile (NVreg_RestrictProfilingToAdminUsers=0)")
            if "AUTOTUNE-NO-CUPY" in both:
                raise BackendUnavailable(f"the profiling job needs CuPy in {python or sys.executable}: {_tail(err, 3)}")
            result = parse_ncu_csv(text) or parse_ncu_csv(out)
            if result:
                break
            unknown = sorted({m for m in _UNKNOWN_METRIC.findall(both) if m in wanted})
            if attempt == 0 and unknown and len(unknown) < len(wanted):
                wanted = [m for m in wanted if m not in unknown]
                continue
            raise NcuError(f"ncu reported no metrics for {name} with {dict(params)} (exit status {code}):\n"
                           f"{_tail(both)}")
        result.setdefault("launch__thread_count", float(math.prod(grid) * math.prod(block)))
        return result
    finally:
        if own_dir and not keep_files:
            shutil.rmtree(d, ignore_errors=True)


class NsightProfiling:
    """Mixin for the CUDA runners: ``profile(params)`` through Nsight Compute when ``ncu`` is installed.

    The profile-based strategy asks the tuner for a runner that can profile;
    ``can_profile`` is False without ``ncu`` so it gets a clear error instead.
    """

    spec: KernelSpec
    device_id: int = 0
    capabilities: Capabilities = replace(HOSTED, profiles=True)

    @property
    def can_profile(self) -> bool:
        return ncu_available()

    def profile(self, params: Mapping[str, Any]) -> dict[str, float]:
        return profile_kernel(self.spec, params, device_id=self.device_id)
