"""``pytest-autotune`` command line: inspect and compare lockfiles without running pytest.

``show PATH [--json]``
    A lockfile (or every lockfile in a directory) as a table.
``diff A B [--fail-on-change] [--threshold PCT]``
    What differs between two lockfiles: two GPUs, or before/after a re-tune.
``prune [--dry-run] [PYTEST_ARGS...]``
    Remove lock entries of tests that no longer exist (runs pytest's collection only).
``export LOCKDIR --format header|json [--kernel NAME] [--default-device SLUG] [-o FILE]``
    The tuned parameters for other build systems: a C/C++/CUDA header selected by
    ``-DAUTOTUNE_DEVICE_<SLUG>``, or flat JSON (see :mod:`pytest_autotune.lock.export`).
``devices [--lockdir DIR]``
    The devices each runner sees, whether each builds a trivial kernel, and the
    lockfile each uses (an existing one under an older name included); why CUDA is
    unavailable when it is, and Triton's interpreter when Triton is importable.

Exit codes: 0 success, 1 ``diff --fail-on-change`` found a difference, or ``devices``
found PyOpenCL installed but no OpenCL device that builds, 2 usage error or a missing /
unreadable / invalid lockfile (the message names it).
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from .errors import AutotuneError
from . import __version__
from .lock.entry import LockEntry
from .lock.lockfile import Lockfile, LockfileError, read_lockfile, serialize

EXIT_OK = 0
EXIT_CHANGED = 1
EXIT_ERROR = 2


class _UsageError(AutotuneError):
    """A problem with what the user asked for (missing file, ...): exit code 2 with a message."""


# --------------------------------------------------------------------------- formatting helpers


def _fmt_value(value: Any) -> str:
    if isinstance(value, float):
        return format(value, ".6g")
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def format_params(params: Mapping[str, Any]) -> str:
    """``block_x=16 block_y=8 dtype=float32``: compact enough for a table cell."""
    return " ".join(f"{k}={_fmt_value(params[k])}" for k in sorted(params))


def _fmt_number(value: float | None) -> str:
    return "-" if value is None else format(value, ".4g")


def _fmt_median(entry: LockEntry) -> str:
    median = entry.median
    unit = entry.unit
    text = _fmt_number(median)
    return f"{text} {unit}" if unit and median is not None else text


def _fmt_evaluations(entry: LockEntry) -> str:
    evaluations = entry.evaluations
    if "total" not in evaluations:
        return "-"
    text = str(evaluations["total"])
    budget = evaluations.get("budget")
    if isinstance(budget, int) and not isinstance(budget, bool):
        text += f"/{budget}"
    failed = evaluations.get("failed") or {}
    n_failed = sum(failed.values()) if isinstance(failed, Mapping) else 0
    if n_failed:
        text += f" ({n_failed} failed)"
    return text


def _fmt_strategy(entry: LockEntry) -> str:
    strategy = entry.strategy
    if not strategy:
        return "-"
    name = str(strategy.get("name", "-"))
    seed = strategy.get("seed")
    return f"{name} (seed {seed})" if seed is not None else name


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], width: int | None = None,
           below: Sequence[str] = ()) -> str:
    """A fixed-width table; wider than ``width``, each row's first cell gets a line of its own, its other
    cells but ``below`` the next, indented, and the ``below`` cells (long ones: the parameters) indented
    lines of their own, wrapped at ``width``: nothing is cut."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    if width and sum(widths) + 2 * (len(widths) - 1) > width and rows:
        return _narrow_table(headers, rows, width, below)
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines.extend("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows)
    return "\n".join(lines)


def _wrap(text: str, width: int, first: str, indent: str) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width, initial_indent=first, subsequent_indent=indent,
                         break_on_hyphens=False) or [first.rstrip()]


def _narrow_table(headers: Sequence[str], rows: Sequence[Sequence[str]], width: int, below: Sequence[str]) -> str:
    kept = [i for i, h in enumerate(headers) if i and h not in below]
    moved = [i for i, h in enumerate(headers) if i and h in below]
    widths = [max(len(headers[i]), *(len(r[i]) for r in rows)) for i in kept]
    indent = "    "

    def line(cells: Sequence[str]) -> str:
        return (indent + "  ".join(c.ljust(w) for c, w in zip(cells, widths))).rstrip()

    lines = [headers[0], line([headers[i] for i in kept])]
    lines.append("-" * min(width, max(map(len, lines))))
    for row in rows:
        lines += _wrap(row[0], width, "", "  ")
        lines += _wrap(line([row[i] for i in kept]).strip(), width, indent, indent + "  ") \
            if len(line([row[i] for i in kept])) > width else [line([row[i] for i in kept])]
        for i in moved:
            lines += _wrap(row[i], width, f"{indent}{headers[i]}: ", indent + "  ")
    return "\n".join(lines)


def terminal_width(out: TextIO) -> int | None:
    """The width to fit tables to: ``COLUMNS`` when set (as pytest's summary honours it), else the terminal's
    when ``out`` is one; ``None`` (no limit) when the output goes to a file or a pipe."""
    import os
    import shutil

    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return max(int(columns), 40)
    isatty = getattr(out, "isatty", None)
    if callable(isatty) and isatty():
        return max(shutil.get_terminal_size(fallback=(80, 24)).columns, 40)
    return None


def _device_name(lockfile: Lockfile) -> str:
    model = lockfile.device.get("model")
    slug = lockfile.device.get("slug")
    if model and slug:
        return f"{model} ({slug})"
    return str(model or slug or "unknown device")


def render_lockfile(lockfile: Lockfile, path: Path, width: int | None = None) -> str:
    """Human-readable table of one lockfile, fitted to ``width`` columns when given (see :func:`_table`)."""
    n = len(lockfile.entries)
    header = f"{path}: {_device_name(lockfile)}, schema {lockfile.schema}, {n} entr{'y' if n == 1 else 'ies'}"
    if not n:
        return header + "\n(no entries)"
    rows = []
    for key in sorted(lockfile.entries):
        entry = lockfile.entries[key]
        rows.append(
            [
                key,
                format_params(entry.params),
                _fmt_median(entry),
                str(entry.stats.get("n", "-")),
                _fmt_strategy(entry),
                _fmt_evaluations(entry),
                str(entry.timestamp or "-"),
            ]
        )
    table = _table(["key", "params", "median", "n", "strategy", "evaluations", "timestamp"], rows, width,
                   below=("params",))
    return "\n".join(_wrap(header, width, "", "    ") if width else [header]) + "\n" + table


# --------------------------------------------------------------------------- loading


def _load(path: Path) -> Lockfile:
    lockfile = read_lockfile(path)  # LockfileError propagates to main
    if lockfile is None:
        raise _UsageError(f"{path}: no such file")
    return lockfile


def _lockfiles_in(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(p for p in path.glob("*.json") if p.is_file())
        if not files:
            raise _UsageError(f"{path}: no lockfiles (*.json) in this directory")
        return files
    return [path]


# --------------------------------------------------------------------------- commands


def cmd_show(args: argparse.Namespace, out: TextIO) -> int:
    files = _lockfiles_in(Path(args.path))
    loaded = [(p, _load(p)) for p in files]  # all validated before anything is printed
    if args.json:
        if len(loaded) == 1 and not Path(args.path).is_dir():
            out.write(serialize(loaded[0][1]))
        else:
            combined = {p.name: json.loads(serialize(lf)) for p, lf in loaded}
            out.write(json.dumps(combined, indent=2, sort_keys=True) + "\n")
        return EXIT_OK
    width = terminal_width(out)
    out.write("\n\n".join(render_lockfile(lf, p, width) for p, lf in loaded) + "\n")
    return EXIT_OK


def _percent_change(old: float | None, new: float | None) -> float | None:
    if old is None or new is None or old == 0:
        return None
    return (new - old) / old * 100.0


def _params_change(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    parts = []
    for k in sorted(set(old) | set(new)):
        if k not in new:
            parts.append(f"-{k}={_fmt_value(old[k])}")
        elif k not in old:
            parts.append(f"+{k}={_fmt_value(new[k])}")
        elif old[k] != new[k] or type(old[k]) is not type(new[k]):
            parts.append(f"{k}: {_fmt_value(old[k])} -> {_fmt_value(new[k])}")
    return ", ".join(parts)


def diff_lockfiles(a: Lockfile, b: Lockfile, threshold: float = 0.0) -> dict[str, Any]:
    """Structured comparison: keys only in ``a`` / only in ``b``, and common keys whose params,
    median (by more than ``threshold`` percent) or hashes differ."""
    only_a = sorted(set(a.entries) - set(b.entries))
    only_b = sorted(set(b.entries) - set(a.entries))
    changed = []
    unchanged = 0
    for key in sorted(set(a.entries) & set(b.entries)):
        ea, eb = a.entries[key], b.entries[key]
        params = _params_change(ea.params, eb.params)
        ma, mb = ea.median, eb.median
        pct = _percent_change(ma, mb)
        median_changed = ma != mb and (pct is None or abs(pct) > threshold)
        ha, hb = ea.hashes, eb.hashes
        hashes = sorted(k for k in set(ha) | set(hb) if ha.get(k) != hb.get(k))
        if params or median_changed or hashes:
            changed.append(
                {
                    "key": key,
                    "params": params,
                    "median": (ma, mb),
                    "median_pct": pct,
                    "median_changed": median_changed,
                    "unit": eb.unit or ea.unit,
                    "hashes": hashes,
                }
            )
        else:
            unchanged += 1
    return {"only_a": only_a, "only_b": only_b, "changed": changed, "unchanged": unchanged}


def render_diff(a: Lockfile, path_a: Path, b: Lockfile, path_b: Path, result: Mapping[str, Any]) -> str:
    lines = [f"A: {path_a}: {_device_name(a)}", f"B: {path_b}: {_device_name(b)}"]
    if result["only_a"]:
        lines.append(f"only in A ({len(result['only_a'])}):")
        lines.extend(f"  - {k}" for k in result["only_a"])
    if result["only_b"]:
        lines.append(f"only in B ({len(result['only_b'])}):")
        lines.extend(f"  + {k}" for k in result["only_b"])
    if result["changed"]:
        lines.append(f"changed ({len(result['changed'])}):")
        for item in result["changed"]:
            lines.append(f"  ~ {item['key']}")
            if item["params"]:
                lines.append(f"      params: {item['params']}")
            ma, mb = item["median"]
            unit = f" {item['unit']}" if item["unit"] else ""
            pct = "n/a" if item["median_pct"] is None else f"{item['median_pct']:+.1f}%"
            lines.append(f"      median: {_fmt_number(ma)} -> {_fmt_number(mb)}{unit} ({pct})")
            if item["hashes"]:
                lines.append(f"      hashes changed: {', '.join(item['hashes'])}")
    lines.append(f"unchanged: {result['unchanged']}")
    if not (result["only_a"] or result["only_b"] or result["changed"]):
        lines.append("no differences")
    return "\n".join(lines)


def cmd_diff(args: argparse.Namespace, out: TextIO) -> int:
    path_a, path_b = Path(args.a), Path(args.b)
    a, b = _load(path_a), _load(path_b)
    result = diff_lockfiles(a, b, threshold=args.threshold)
    out.write(render_diff(a, path_a, b, path_b, result) + "\n")
    differs = bool(result["only_a"] or result["only_b"] or result["changed"])
    return EXIT_CHANGED if differs and args.fail_on_change else EXIT_OK


def cmd_export(args: argparse.Namespace, out: TextIO) -> int:
    from .lock.export import ExportError, collect, to_header, to_json

    try:
        tuned = collect(args.lockdir, args.kernel)
        if args.default_device is not None and args.format != "header":
            raise ExportError("--default-device applies to --format header only")
        text = to_header(tuned, args.lockdir, args.default_device, args.kernel) if args.format == "header" else to_json(tuned)
    except ExportError as exc:
        raise _UsageError(str(exc)) from None
    if args.output is None:
        out.write(text)
        return EXIT_OK
    target = Path(args.output)
    if target.exists() and target.read_text(encoding="utf-8") == text:
        return EXIT_OK  # unchanged: keep the timestamp, so builds depending on it do not rerun
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise _UsageError(f"-o {args.output}: cannot be written ({exc.strerror or exc})") from None
    return EXIT_OK


def cmd_prune(args: argparse.Namespace, out: TextIO) -> int:
    from .plugin.prune import PruneError, collect, find_orphans, find_renames, orphaned_sources, rekey, remove_orphans

    try:
        found = collect(args.pytest_args)
        orphans = find_orphans(found)
    except PruneError as exc:
        raise _UsageError(str(exc)) from None
    renames = find_renames(found, orphans)  # a renamed test keeps its kernel's entry, under its new id
    moved = {(r.lockfile, r.key) for r in renames}
    for r in renames:
        out.write(f"{'would re-key' if args.dry_run else 're-keyed'} {r.key} -> {r.new_key}  ({r.lockfile}: "
                  "same kernel and search space)\n")
    if renames and not args.dry_run:
        rekey(renames)
    orphans = [o for o in orphans if (o.lockfile, o.key) not in moved]
    sources = orphaned_sources(found.lockdir, orphans)  # type: ignore[arg-type]
    if not orphans and not sources:
        out.write("pytest-autotune prune: every lock entry belongs to a collected test; nothing to remove\n")
        return EXIT_OK
    verb = "would remove" if args.dry_run else "removed"
    for o in orphans:
        out.write(f"{verb} {o.key}  ({o.lockfile}: test {o.test} not collected)\n")
    for source in sources:
        out.write(f"{verb} {source}  (a kernel source no entry uses)\n")
    if not args.dry_run:
        remove_orphans(orphans, sources)
    out.write(f"pytest-autotune prune: {len(orphans)} entr{'y' if len(orphans) == 1 else 'ies'} "
              f"{'would be removed (dry run: nothing written)' if args.dry_run else 'removed'}\n")
    return EXIT_OK


# --------------------------------------------------------------------------- devices

_TRIVIAL_C = "void probe(float *out) { out[0] = 42.0f; }\n"


def _c_row() -> list[str]:
    """The C runner's device (the host CPU) and whether its compiler builds a shared library."""
    import os
    import shutil
    import subprocess
    import tempfile

    from .execution.device import detect_cpu_device

    compiler = os.environ.get("CC") or "gcc"
    device = detect_cpu_device(compiler)
    if shutil.which(compiler) is None:
        return ["c", device.model, device.slug, f"no: compiler {compiler!r} not found on PATH"]
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "probe.c"
        src.write_text(_TRIVIAL_C)
        done = subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", str(Path(tmp) / "probe.so"), str(src)],
                              capture_output=True, text=True, timeout=120)
    builds = "yes" if done.returncode == 0 else f"no: {(done.stderr.strip().splitlines() or ['?'])[-1]}"
    return ["c", device.model, device.slug, builds]


def _pyopencl() -> Any:
    """PyOpenCL, or None when it is not installed (then no OpenCL device is expected)."""
    try:
        import pyopencl
    except ImportError:
        return None
    return pyopencl


def _opencl_rows(cl: Any) -> tuple[list[list[str]], bool]:
    """One row per OpenCL device (probed), and whether a device that can time kernels builds."""
    from .execution.device import DeviceInfo
    from .backends.opencl_device import device_model, is_simulator, list_devices, probe_device, unusable_reason

    rows, usable = [], False
    for p, d, dev in list_devices(cl):
        error = probe_device(cl, dev)
        simulator = is_simulator(dev)
        usable = usable or (error is None and not simulator)
        builds = ("yes" + (" (a simulator: checks kernels, never chosen to time them)" if simulator else ""))\
            if error is None else f"no: {unusable_reason(dev, error)}"
        name = f"{p}:{d} {dev.platform.name.strip()} / {dev.name.strip()}"
        rows.append(["opencl", name, DeviceInfo(model=device_model(dev), kind="opencl").slug, builds])
    return rows, usable


def _cuda_rows() -> list[list[str]]:
    """CUDA devices through CuPy (its NVRTC builds an empty kernel), else PyCUDA (not probed: nvcc builds);
    with neither, one row saying why: the runners' own reasons (not installed, no driver, no device), and
    whether this machine has a CUDA driver at all."""
    from .errors import BackendUnavailable

    reasons = []
    for probe in (_cupy_devices, _pycuda_devices):
        try:
            return probe()
        except BackendUnavailable as exc:
            reasons.append(str(exc))
        except Exception as exc:  # noqa: BLE001 - a driver that fails otherwise: say so, list what else works
            reasons.append(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": "))
    import ctypes.util

    if ctypes.util.find_library("cuda") is None:
        reasons.append("no CUDA driver (libcuda) on this machine")
    return [["cuda", "-", "-", "no: " + "; ".join(reasons)]]


def _cupy_devices() -> list[list[str]]:
    from .backends.cupy_runner import import_cupy
    from .execution.device import detect_cuda_device_cupy

    cupy = import_cupy(0)  # BackendUnavailable: not installed, no driver or device, no NVRTC
    return [["cuda", f"{i} {(info := detect_cuda_device_cupy(i)).model}", info.slug, "yes (CuPy, NVRTC)"]
            for i in range(cupy.cuda.runtime.getDeviceCount())]


def _pycuda_devices() -> list[list[str]]:
    from .backends.pycuda_runner import import_pycuda
    from .execution.device import detect_cuda_device_pycuda

    drv = import_pycuda(0)  # BackendUnavailable: not installed, no driver or device, no nvcc
    return [["cuda", f"{i} {(info := detect_cuda_device_pycuda(i)).model}", info.slug, "not probed (PyCUDA, nvcc)"]
            for i in range(drv.Device.count())]


def _triton_rows() -> list[list[str]]:
    """Triton's runner when Triton is importable: its interpreter on this CPU (whether ``TRITON_INTERPRET`` is
    set, or the plugin sets it for want of a GPU), or the GPU it launches on. Nothing when Triton is absent."""
    import importlib.util
    import os

    if importlib.util.find_spec("triton") is None:
        return []
    if importlib.util.find_spec("torch") is None:
        return [["triton", "-", "-", "no: the triton runner needs torch (pip install torch)"]]
    from .backends.triton_kernel import gpu_device_present, interpreter_requested, triton_version
    from .backends.triton_runner import interpreter_device

    value = os.environ.get("TRITON_INTERPRET")
    if interpreter_requested() or not gpu_device_present():
        why = (f"TRITON_INTERPRET={value} set" if value is not None and interpreter_requested() else
               "TRITON_INTERPRET unset: pytest-autotune sets it, no GPU here" if value is None else
               f"TRITON_INTERPRET={value} is not true, but no GPU here: pytest-autotune runs the interpreter")
        return [["triton", f"interpreter {triton_version()} on this CPU ({why})", interpreter_device().slug,
                 "not probed (interpreted: checks kernels, timings are information only)"]]
    from .backends.builtin import _triton_slug

    slug = _triton_slug()
    return [["triton", f"GPU 0 through torch (TRITON_INTERPRET {'unset' if value is None else '=' + value})",
             slug or "-", "not probed" if slug else "no: torch sees no usable GPU"]]


def cmd_devices(args: argparse.Namespace, out: TextIO) -> int:
    from .lock.devices import find_lockfile

    rows = [_c_row(), *_cuda_rows(), *_triton_rows()]
    cl = _pyopencl()
    usable = True
    if cl is not None:
        opencl, usable = _opencl_rows(cl)
        rows.extend(opencl)
    lockdir = Path(args.lockdir)
    for row in rows:
        if row[2] != "-":
            found = find_lockfile(lockdir, row[2])
            row[2] = f"{found.name}" + (" (older name, in use)" if found.stem != row[2] else "")
    out.write(_table(["runner", "device", "lockfile", "builds"], rows) + "\n")
    if cl is not None and not usable:
        out.write("pytest-autotune devices: PyOpenCL is installed but no OpenCL device builds a kernel; "
                  "install your distribution's PoCL, e.g. apt-get install pocl-opencl-icd\n")
        return EXIT_CHANGED
    return EXIT_OK


# --------------------------------------------------------------------------- entry point


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pytest-autotune",
        description="Inspect and compare pytest-autotune lockfiles (autotune.lock/<device>.json).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    show = sub.add_parser("show", help="print a lockfile as a table", description="Print a lockfile as a table.")
    show.add_argument("path", metavar="PATH", help="a lockfile, or a directory of lockfiles")
    show.add_argument("--json", action="store_true", help="print the validated lockfile as JSON instead")
    show.set_defaults(func=cmd_show)

    diff = sub.add_parser(
        "diff",
        help="compare two lockfiles",
        description="Compare two lockfiles (two GPUs, or before/after a re-tune): entries only in A, "
        "only in B, and entries in both whose parameters, median or hashes differ.",
    )
    diff.add_argument("a", metavar="A", help="first lockfile")
    diff.add_argument("b", metavar="B", help="second lockfile")
    diff.add_argument("--fail-on-change", action="store_true", help="exit with code 1 when anything differs")
    diff.add_argument(
        "--threshold",
        type=float,
        default=0.0,
        metavar="PCT",
        help="ignore median changes of at most PCT percent (default: 0, report any change)",
    )
    diff.set_defaults(func=cmd_diff)

    prune = sub.add_parser(
        "prune",
        help="remove lock entries of tests that no longer exist",
        description="Remove lock entries that belong to no collected tune-marked test (renamed or deleted "
        "tests). Runs pytest's collection only, with the project's configuration; refuses on collection errors.",
    )
    prune.add_argument("--dry-run", action="store_true", help="list what would be removed, write nothing")
    prune.add_argument("pytest_args", nargs=argparse.REMAINDER, metavar="PYTEST_ARGS",
                       help="arguments for pytest's collection (test paths, -c FILE, --autotune-lockdir=DIR)")
    prune.set_defaults(func=cmd_prune)

    export = sub.add_parser(
        "export",
        help="write the tuned parameters as a C/C++/CUDA header or flat JSON",
        description="Export every lockfile in LOCKDIR for other build systems: a header whose #defines "
        "(AUTOTUNE_<KERNEL>[_<SIZE>]_<PARAM>) are selected by -DAUTOTUNE_DEVICE_<SLUG>, or JSON "
        "(device -> kernel -> problem -> params). Deterministic; name collisions are errors.",
    )
    export.add_argument("lockdir", metavar="LOCKDIR", help="the lock directory (autotune.lock)")
    export.add_argument("--format", required=True, choices=("header", "json"), help="header or json")
    export.add_argument("--kernel", metavar="NAME", default=None, help="export this kernel only")
    export.add_argument("--default-device", metavar="SLUG", default=None,
                        help="header: use this lockfile's values when no AUTOTUNE_DEVICE_<SLUG> is defined")
    export.add_argument("-o", "--output", metavar="FILE", default=None,
                        help="write to FILE (left untouched when unchanged) instead of stdout")
    export.set_defaults(func=cmd_export)

    devices = sub.add_parser(
        "devices",
        help="list the devices each runner sees, whether each builds, and their lockfiles",
        description="List the devices each runner sees (C: the host CPU; CUDA through CuPy; every OpenCL "
        "device), whether each builds and runs a trivial kernel, and the lockfile each uses. Exit 1 when "
        "PyOpenCL is installed and no OpenCL device builds (a CI step can then install a working PoCL).",
    )
    devices.add_argument("--lockdir", default="autotune.lock", metavar="DIR",
                         help="the lock directory whose lockfiles are named (default: autotune.lock)")
    devices.set_defaults(func=cmd_devices)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point; returns the exit code instead of exiting, so tests can call it."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, usage errors
        return exc.code if isinstance(exc.code, int) else EXIT_ERROR
    if getattr(args, "threshold", 0.0) < 0:
        print("pytest-autotune: error: --threshold must be >= 0", file=sys.stderr)
        return EXIT_ERROR
    try:
        return args.func(args, sys.stdout)
    except (LockfileError, _UsageError) as exc:
        print(f"pytest-autotune: error: {exc}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
