"""``locked_params``: the tuned parameters of a kernel, read from the lock at run time, without pytest.

The code a team ships calls it to launch its kernels with what ``pytest
--autotune`` found for the machine it runs on::

    from pytest_autotune import locked_params
    params = locked_params("matmul", problem_size=(4096, 4096), lockdir="autotune.lock")

Entries are found by kernel name (not by test), for this device (detected the
way the plugin names lockfiles, or ``device=`` a lockfile's slug, e.g. on a
build machine without the GPU), and by problem: the exact size, else the
nearest tuned size in log space with a :class:`LockFallbackWarning`. Parsed
lockfiles are cached per process (re-read only when the file changes), so
calls after the first cost microseconds.

Imports neither pytest nor CuPy nor PyCUDA; CUDA libraries (and PyOpenCL, only
when the CUDA and CPU lockfiles lack the kernel) are imported only to detect
the device when ``device`` is not given.
"""
from __future__ import annotations

from ..backends import lock_kinds
import functools
import os
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import AutotuneError
from ..execution.includes import include_dirs, local_headers
from .hashing import hash_source, kernel_source_hash
from .devices import find_lockfile
from .lockfile import read_lockfile
from .problem import array_dtypes, normalize_size, size_distance, size_label
from ..space.errors import SearchSpaceError
from ..space.membership import declared_configuration

__all__ = ["locked_params", "LockLookupError", "AmbiguousLockError", "LockFallbackWarning", "LockStaleWarning",
           "detect_device_slugs", "clear_cache"]


class LockLookupError(AutotuneError, LookupError):
    """No usable entry (and no ``default``), or a problem that does not say which entry to use."""


class AmbiguousLockError(LockLookupError):
    """Two tests tuned the same kernel name with different search spaces: which one is meant is unknown."""


class LockFallbackWarning(UserWarning):
    """The parameters returned are not tuned for exactly this problem (nearest size) or device (default)."""


class LockStaleWarning(UserWarning):
    """The kernel's source changed since its entry was tuned: the parameters may no longer be the best."""


# --------------------------------------------------------------------------- the per-process cache


@dataclass(frozen=True)
class _Tuned:
    key: str
    test: str
    entry: Mapping[str, Any]
    size: list[Any] | None  # None: an entry without a readable problem (schema 1)
    dtypes: list[str]

    @property
    def problem_text(self) -> str:
        return size_label(self.size) or "(no problem size)" if self.size is not None else "(problem not recorded)"


@dataclass
class _Index:
    """One parsed lockfile: entries by kernel name, and the answers already given (``memo``:
    (kernel, size, dtypes) -> the entry and the fallback warning to repeat), dropped with it."""

    kernels: dict[str, list[_Tuned]]
    memo: dict[tuple[Any, ...], tuple[_Tuned, str | None]]


_CACHE: dict[str, tuple[tuple[int, int, int, int], _Index]] = {}
_PATHS: dict[tuple[str, str], Path] = {}


def clear_cache() -> None:
    """Forget the parsed lockfiles (and the detected device): the next lookups read and detect afresh."""
    _CACHE.clear()
    _PATHS.clear()
    for detect in _detectors().values():
        detect.cache_clear()


def _path(lockdir: str | os.PathLike[str], slug: str) -> Path:
    key = (os.fspath(lockdir), slug)
    path = _PATHS.get(key)
    if path is None:
        path = _PATHS[key] = find_lockfile(lockdir, slug)  # an older name of the device's lockfile too
    return path


def _index(path: Path) -> _Index | None:
    """The lockfile at ``path`` by kernel name; re-parsed only when the file changed (one ``stat`` per call: a
    re-tuned lock is seen at once). Changed means another file (device and inode: writers replace the file
    atomically, and a relative ``path`` names another file after a ``chdir``), or another size or
    modification time: size and time alone miss a same-size rewrite within the clock's resolution."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        _CACHE.pop(str(path), None)
        return None
    stamp = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
    cached = _CACHE.get(str(path))
    if cached is not None and cached[0] == stamp:
        return cached[1]
    lock = read_lockfile(path)  # LockfileError (corrupt, newer schema) reaches the caller: it names the file
    kernels: dict[str, list[_Tuned]] = {}
    for key, entry in sorted(lock.entries.items()) if lock is not None else ():
        kernel = entry.kernel if isinstance(entry.kernel, str) else key.rsplit("::", 1)[-1]
        test = entry.test if isinstance(entry.test, str) else key.rsplit("::", 1)[0]
        problem = entry.problem
        size = normalize_size((problem or {}).get("size")) if isinstance(problem, Mapping) else None
        if isinstance(problem, Mapping) and size is None:
            size = []  # recorded, but the kernel has no problem size
        dtypes = array_dtypes(problem) if isinstance(problem, Mapping) else []
        kernels.setdefault(kernel, []).append(_Tuned(key, test, entry, size, dtypes))
    index = _Index(kernels, {})
    _CACHE[str(path)] = (stamp, index)
    return index


# --------------------------------------------------------------------------- device detection


def detect_device_slugs() -> tuple[str, ...]:
    """Lockfile names this machine's kernels are tuned under, in the order a lookup searches them: the
    CUDA GPU's (device 0) if one is usable, the CPU's (the C runner), then the OpenCL device's (the one the
    OpenCL runner picks). Each is detected once per process."""
    return tuple(_machine_slugs())


def _machine_slugs(kind: str | None = None) -> Iterator[str]:
    """:func:`detect_device_slugs` one at a time (only ``kind``'s when given): a lookup that finds its kernel
    in the CUDA or CPU lockfile never imports PyOpenCL (starting an OpenCL runtime costs about a second)."""
    for name, detect in _detectors().items():
        if kind is None or kind == name:
            slug = detect()
            if slug:
                yield slug


def _first_of(detectors: list[Any]) -> Any:
    """One kind's detector: the first of its backends' that names a device here, detected once per process."""
    @functools.lru_cache(maxsize=1)
    def detect() -> str | None:
        for one in detectors:
            slug = one()
            if slug:
                return slug
        return None

    return detect


# kind -> this machine's lockfile name for it, in the order lookups search (the backends' registration order:
# cuda, cpu, opencl, then "triton" last: a GPU lock is the cuda one, the interpreter's is Triton's own)
_DETECTORS: dict[str, Any] = {}


def _detectors() -> dict[str, Any]:
    """:data:`_DETECTORS`, following the backends registered or removed since (a kind's detector is made once:
    a test may replace one)."""
    kinds = lock_kinds()
    for kind, detectors in kinds.items():
        if kind not in _DETECTORS:
            _DETECTORS[kind] = _first_of(detectors)
    for kind in [k for k in _DETECTORS if k not in kinds]:
        del _DETECTORS[kind]
    return _DETECTORS


_triton_slug = _detectors()["triton"]  # where the triton runner tunes here (tests/triton_support.py)


# --------------------------------------------------------------------------- selection


def _describe(tuned: Sequence[_Tuned]) -> str:
    return ", ".join(f"{t.problem_text} ({t.key})" for t in tuned)


def _test_function(nodeid: str) -> str:
    """``tests/a.py::test_mm[4096]`` -> ``tests/a.py::test_mm``: the instances of one parametrized test."""
    head, sep, last = nodeid.rpartition("::")
    return head + sep + last.split("[", 1)[0]


def _check_unambiguous(kernel: str, tuned: Sequence[_Tuned], path: Path) -> None:
    """Two test functions tuning ``kernel`` in different spaces are an error; the instances of one
    parametrized test are not (their space may follow the problem size, e.g. a block size up to ``n``)."""
    def space(t: _Tuned) -> str:
        return str(t.entry.hashes.get("space"))

    clash = next(((a, b) for i, a in enumerate(tuned) for b in tuned[i + 1:]
                  if space(a) != space(b) and _test_function(a.test) != _test_function(b.test)), None)
    if clash is not None:
        a, b = clash
        raise AmbiguousLockError(
            f"locked_params({kernel!r}): {path} holds entries of two tests that tune {kernel!r} with different "
            f"search spaces: {a.test} and {b.test}; give one of them another kernel name (name= in autotune.kernel)")


def _same_params(tuned: Sequence[_Tuned]) -> bool:
    return all(t.entry.params == tuned[0].entry.params for t in tuned[1:])


def _one_problem(tuned: Sequence[_Tuned]) -> bool:
    """All entries were tuned for one problem (or none of them recorded which)."""
    return len({(tuple(t.size) if t.size is not None else None, tuple(t.dtypes)) for t in tuned}) == 1


def _memo_key(kernel: str, problem_size: Any, dtypes: Sequence[str] | None) -> tuple[Any, ...] | None:
    size = tuple(problem_size) if isinstance(problem_size, list) else problem_size
    key = (kernel, size, tuple(dtypes) if dtypes is not None else None)
    try:
        hash(key)
    except TypeError:  # e.g. a numpy array as problem size: answered, not remembered
        return None
    return key


def _select_cached(kernel: str, index: _Index, problem_size: Any, dtypes: Sequence[str] | None,
                   path: Path) -> _Tuned:
    key = _memo_key(kernel, problem_size, dtypes)
    hit = index.memo.get(key) if key is not None else None
    if hit is None:
        hit = _select(kernel, index.kernels[kernel], problem_size, dtypes, path)
        if key is not None:
            index.memo[key] = hit
    if hit[1] is not None:
        warnings.warn(LockFallbackWarning(hit[1]), stacklevel=3)
    return hit[0]


def _select(kernel: str, tuned: list[_Tuned], problem_size: Any, dtypes: Sequence[str] | None,
            path: Path) -> tuple[_Tuned, str | None]:
    """The entry for the problem, and the warning to give when it is only the nearest size."""
    _check_unambiguous(kernel, tuned, path)
    if dtypes is not None:
        wanted = [str(d) for d in dtypes]
        tuned = [t for t in tuned if t.size is None or t.dtypes == wanted]
        if not tuned:
            raise LockLookupError(f"locked_params({kernel!r}): no entry in {path} has array arguments of dtypes "
                                  f"{wanted}")
    if problem_size is None or all(t.size is None for t in tuned):
        # Entries without a readable problem (schema 1) match by kernel name only. Several problems raise even
        # when their parameters agree today: a re-tune of one would make this call fail later.
        if len(tuned) == 1 or (_one_problem(tuned) and _same_params(tuned)):
            return tuned[0], None
        if problem_size is not None:  # every candidate is a schema-1 entry: sizes cannot choose
            raise LockLookupError(f"locked_params({kernel!r}): {path} holds {len(tuned)} entries of {kernel!r} that "
                                  f"do not record their problem: {_describe(tuned)}; re-tune them with pytest "
                                  "--autotune (it records the problem) to choose by problem_size")
        raise LockLookupError(f"locked_params({kernel!r}): {path} holds {len(tuned)} tuned problems of {kernel!r}: "
                              f"{_describe(tuned)}; pass problem_size= (and dtypes=) to choose")
    wanted_size = normalize_size(problem_size)
    readable = [t for t in tuned if t.size is not None]
    exact = [t for t in readable if t.size == wanted_size]
    if exact:
        if len(exact) == 1 or _same_params(exact):
            return exact[0], None
        raise LockLookupError(f"locked_params({kernel!r}): {len(exact)} entries in {path} match problem size "
                              f"{size_label(wanted_size)} (differing in argument dtypes or scalars): {_describe(exact)}; "
                              "pass dtypes= to choose")
    scored = [(d, t) for t in readable if (d := size_distance(wanted_size, t.size)) is not None]
    if not scored:
        raise LockLookupError(f"locked_params({kernel!r}): problem size {size_label(wanted_size)} cannot be compared "
                              f"with the tuned problems in {path}: {_describe(readable)}")
    if dtypes is None and len({tuple(t.dtypes) for _, t in scored}) > 1:
        listing = ", ".join(f"{t.dtypes} ({t.key})" for _, t in scored)
        raise LockLookupError(f"locked_params({kernel!r}): problem size {size_label(wanted_size)} was not tuned on "
                              f"{path.stem} and the nearest-size entries differ in their array dtypes: {listing}; "
                              "pass dtypes= (the dtypes of the kernel's array arguments) to choose")
    scored.sort(key=lambda dt: dt[0])  # stable: ties go to the first entry by key
    nearest = scored[0][1]
    return nearest, (f"locked_params({kernel!r}): problem size {size_label(wanted_size)} was not tuned on "
                     f"{path.stem}; using the nearest tuned size {size_label(nearest.size)} ({nearest.key})")


def _read_source(source: str | os.PathLike[str]) -> tuple[str, Path | None]:
    """The kernel's code, and its file when ``source`` names one (its folder is on the include path)."""
    if isinstance(source, os.PathLike) or ("\n" not in source and os.path.isfile(source)):
        return Path(source).read_text(encoding="utf-8"), Path(source)
    return source, None


def _check_stale(kernel: str, tuned: _Tuned, source: str | os.PathLike[str], kernel_name: str | None) -> None:
    recorded = tuned.entry.hashes.get("source")
    code, source_file = _read_source(source)
    options = tuned.entry.compiler_options
    options = [str(o) for o in options] if isinstance(options, list) else []
    names = [kernel_name] if kernel_name else [kernel]
    # the lock's hash covers the local headers the kernel includes: found as the tuning found them (beside
    # the kernel file, then the -I folders of the locked options), else every kernel with one reads as stale
    headers = local_headers(code, include_dirs(source_file, options)) if "include" in code else {}
    current = {hash_source(code), *(kernel_source_hash(code, n, options, headers) for n in names)}
    if recorded not in current:
        warnings.warn(LockStaleWarning(
            f"locked_params({kernel!r}): the kernel's source changed since {tuned.key} was tuned; its parameters "
            "may no longer be the best (re-tune with pytest --autotune)"), stacklevel=3)


def _in_space(kernel: str, tuned: _Tuned, path: Path, space: Mapping[str, Sequence[Any]],
              restrictions: Sequence[Any] | None) -> dict[str, Any]:
    try:
        return declared_configuration(tuned.entry.params, space, restrictions)
    except SearchSpaceError as exc:
        raise LockLookupError(f"locked_params({kernel!r}): {path}: entry {tuned.key!r}: {exc}; re-tune it with "
                              "pytest --autotune, or restore the lockfile from version control") from None


def locked_params(kernel: str, problem_size: Any = None, lockdir: str | os.PathLike[str] = "autotune.lock", *,
                  device: str | None = None, default: Mapping[str, Any] | None = None,
                  dtypes: Sequence[str] | None = None, source: str | os.PathLike[str] | None = None,
                  kernel_name: str | None = None, kind: str | None = None,
                  space: Mapping[str, Sequence[Any]] | None = None,
                  restrictions: Sequence[Any] | None = None) -> dict[str, Any]:
    """The locked parameters of ``kernel`` for this device and problem (a fresh dict each call).

    ``problem_size``: an int or tuple, compared with the sizes the entries were
    tuned for (exact, else nearest in log space with a warning); ``None``
    returns the kernel's only entry and raises when several problems are
    tuned. ``dtypes``: the dtypes of the kernel's array arguments, in order,
    when entries differ only in them. ``device``: a lockfile name (device
    slug) instead of detecting this machine. ``default``: returned, with a
    :class:`LockFallbackWarning`, when the device has no entry for the kernel
    (without it, :class:`LockLookupError`). ``source``: the kernel's current
    code (text or path) to warn (:class:`LockStaleWarning`) when it changed
    since tuning; ``kernel_name``: the name the test passed to
    ``autotune.kernel`` when it differs from ``kernel`` (``name=``).
    ``kind``: ``"cuda"``, ``"cpu"`` (the C runner), ``"opencl"`` or ``"triton"`` (a GPU, else the interpreter), the runner
    the kernel is launched with: only that device's lockfile is searched, so a
    C ``matmul`` never gets the parameters of a CUDA kernel of the same name.
    ``space`` (and ``restrictions``): the values the kernel accepts, as the marker declares them; the
    locked parameters are then checked to be a point of that space (same types, restrictions hold) and
    :class:`LockLookupError` names the lockfile, entry and parameter otherwise: a lockfile is data, and a
    value the kernel was never tuned over is not launched.
    """
    if not isinstance(kernel, str) or not kernel:
        raise TypeError(f"locked_params: kernel must be a non-empty string, got {kernel!r}")
    if kind is not None and kind not in _detectors():
        raise ValueError(f"locked_params({kernel!r}): kind={kind!r} is not a device kind; use one of "
                         f"{', '.join(map(repr, _DETECTORS))} (or device= a lockfile name)")
    slugs = (device,) if device is not None else _machine_slugs(kind)
    searched: list[str] = []
    for slug in slugs:
        try:
            path = _path(lockdir, slug)
        except ValueError:  # only a given device= can be no file name
            raise ValueError(f"locked_params({kernel!r}): device={device!r} is not a lockfile name; give the name "
                             "of a lockfile in the lock directory without .json, e.g. 'nvidia-h100-80gb-hbm3'") from None
        searched.append(str(path))
        index = _index(path)
        if index is not None and kernel in index.kernels:
            chosen = _select_cached(kernel, index, problem_size, dtypes, path)
            if source is not None:
                _check_stale(kernel, chosen, source, kernel_name)
            if space is not None:
                return _in_space(kernel, chosen, path, space, restrictions)
            return chosen.entry.params
    missing = f"no entry for {kernel!r} in {', '.join(searched)}" if searched else f"no {kind} device detected on this machine"
    if default is None:
        raise LockLookupError(f"locked_params({kernel!r}): {missing}; tune it on this device with pytest --autotune, "
                              "or pass default=")
    warnings.warn(LockFallbackWarning(f"locked_params({kernel!r}): {missing}; using the default parameters"),
                  stacklevel=2)
    return dict(default)
