"""The backend registry: one record per kernel language and per backend, read by every other layer.

A :class:`Language` is what a kernel source is written in (its ``lang=`` names, file suffixes, the
toolchain versions a lock entry records). A :class:`Backend` is what compiles, launches and times it
(a runner factory), what it needs installed, the device kinds it reports, the device limits it hands to
restrictions, how its machine is probed and how a lockfile lookup finds this machine's device. Adding
a backend is one module and one :func:`register` call::

    from pytest_autotune.backends import Backend, Language, register

    register(Backend("toy", languages=(Language("toy", suffixes=(".toy",)),),
                     make_runner=ToyRunner, device_kinds=("toy",), lock_kind="toy", detect=lambda: "toy-0"))

The built-in backends (cupy, pycuda, c, opencl, triton, callable, replay) live in
:mod:`.builtin`, registered on the first query. Nothing here imports a backend's library: a record
names what to import, and ``available()`` checks without importing.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

__all__ = ["Backend", "Language", "register", "register_language", "unregister", "get", "backends", "languages", "language",
           "for_language", "for_suffix", "device_constants", "cpu_probed_kinds", "lock_kinds"]

RunnerFactory = Callable[..., Any]


def _no_versions() -> dict[str, str]:
    return {}


def _always() -> bool:
    return True


@dataclass(frozen=True)
class Language:
    """A kernel language. ``name`` is the canonical ``KernelSpec.lang``; ``aliases`` other ``lang=`` names;
    ``suffixes`` the source files written in it (the first is the one a lock entry's source gets when the
    kernel came as text); ``toolchain()`` the versions of what compiles it beyond the device's own versions
    (NVRTC for CUDA), recorded in a lock entry; ``gpu_probes``: the gate's GPU probe kernels are written in
    this language, so its kernels are probed through their own runner."""

    name: str
    aliases: tuple[str, ...] = ()
    suffixes: tuple[str, ...] = ()
    toolchain: Callable[[], dict[str, str]] = _no_versions
    gpu_probes: bool = False

    @property
    def suffix(self) -> str:
        return self.suffixes[0] if self.suffixes else ".txt"


@dataclass(frozen=True)
class Backend:
    """One backend. ``make_runner(spec, **options)`` builds its :class:`~pytest_autotune.runners.base.Runner`.

    ``languages``: the kernel languages it runs (the first registered backend of a language that is
    ``available()`` runs its kernels unless a test names another); ``available()``: a cheap check (no
    import, no device access) that its library or compiler exists, ``install_hint`` what to do when not;
    ``check_when_named``: ``make_runner(runner=name)`` refuses at once where it is not available;
    ``device_kinds``: the ``DeviceInfo.kind`` values its runners report; ``gpu``: its device is a CUDA
    GPU (a cluster actor holds one); ``cpu_kinds``: those of its device kinds that run on this CPU and are
    probed with the C probes; ``constants``: names of the device limits its runners hand to restrictions;
    ``lock_kind`` and ``detect()``: the ``locked_params(kind=...)`` name and this machine's lockfile
    name for it (None: no device of this backend here); ``checks`` / ``local_memory``: it runs kernels
    under ``check=`` (Oclgrind) and takes ``LocalMemory`` arguments."""

    name: str
    make_runner: RunnerFactory
    languages: tuple[Language, ...] = ()
    available: Callable[[], bool] = _always
    install_hint: str = ""
    check_when_named: bool = False
    device_kinds: tuple[str, ...] = ()
    gpu: bool = False
    cpu_kinds: tuple[str, ...] = ()
    constants: tuple[str, ...] = ()
    lock_kind: str | None = None
    detect: Callable[[], str | None] | None = None
    checks: bool = False
    local_memory: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


_BACKENDS: dict[str, Backend] = {}
_LANGUAGES: dict[str, Language] = {}
_ALIASES: dict[str, str] = {}
_SUFFIXES: dict[str, str] = {}
_loaded = False


def _builtins() -> None:
    """Register the built-in backends once, on the first query (imported by name: the records import nothing)."""
    global _loaded
    if not _loaded:
        _loaded = True
        importlib.import_module("pytest_autotune.backends.builtin")


def register_language(lang: Language, *, replace: bool = False) -> Language:
    """Make ``KernelSpec(lang=...)`` and source files with ``lang.suffixes`` mean ``lang``."""
    _builtins()
    known = _LANGUAGES.get(lang.name)
    if known is not None and known != lang and not replace:
        raise ValueError(f"a language named {lang.name!r} is already registered")
    for name in (lang.name, *lang.aliases):
        owner = _ALIASES.get(name.lower())
        if owner is not None and owner != lang.name and not replace:
            raise ValueError(f"lang name {name!r} already means {owner!r}")
    _LANGUAGES[lang.name] = lang
    for name in (lang.name, *lang.aliases):
        _ALIASES[name.lower()] = lang.name
    for suffix in lang.suffixes:
        _SUFFIXES.setdefault(suffix.lower(), lang.name)
    return lang


def register(backend: Backend, *, replace: bool = False) -> Backend:
    """Register ``backend`` (and its languages): ``make_runner(spec, runner=backend.name)`` builds its runner."""
    _builtins()
    if backend.name in _BACKENDS and not replace:
        raise ValueError(f"a runner named {backend.name!r} is already registered")
    for lang in backend.languages:
        register_language(lang, replace=replace)
    _BACKENDS[backend.name] = backend
    return backend


def unregister(name: str) -> Backend | None:
    """Forget the backend ``name``, and those of its languages no other backend runs; the record, or None."""
    _builtins()
    backend = _BACKENDS.pop(name, None)
    for lang in backend.languages if backend is not None else ():
        if any(lang.name == x.name for b in _BACKENDS.values() for x in b.languages):
            continue
        _LANGUAGES.pop(lang.name, None)
        for table in (_ALIASES, _SUFFIXES):
            for key in [k for k, v in table.items() if v == lang.name]:
                del table[key]
    return backend


def get(name: str) -> Backend | None:
    """The backend registered as ``name``, or None."""
    _builtins()
    return _BACKENDS.get(name)


def backends() -> Iterator[Backend]:
    """Every registered backend, in registration order."""
    _builtins()
    return iter(list(_BACKENDS.values()))


def languages() -> Iterator[Language]:
    _builtins()
    return iter(list(_LANGUAGES.values()))


def language(name: str | None) -> Language | None:
    """The language ``name`` (canonical or an alias, any case) means; None when none does."""
    _builtins()
    canonical = _ALIASES.get((name or "").lower())
    return _LANGUAGES.get(canonical) if canonical is not None else None


def for_language(lang: str | None) -> list[Backend]:
    """The backends that run kernels in ``lang``, in the order they are preferred."""
    found = language(lang)
    if found is None:
        return []
    return [b for b in backends() if any(x.name == found.name for x in b.languages)]


def for_suffix(suffix: str) -> Language | None:
    """The language of a source file with this suffix (``.cu``), or None."""
    _builtins()
    name = _SUFFIXES.get(suffix.lower())
    return _LANGUAGES.get(name) if name is not None else None


def device_constants() -> tuple[str, ...]:
    """Every device limit any backend hands to restrictions (a restriction may name them at collection)."""
    seen: dict[str, None] = {}
    for backend in backends():
        seen.update(dict.fromkeys(backend.constants))
    return tuple(seen)


def cpu_probed_kinds() -> tuple[str, ...]:
    """Device kinds that run on this machine's CPU: probed through the C runner."""
    seen: dict[str, None] = {}
    for backend in backends():
        seen.update(dict.fromkeys(backend.cpu_kinds))
    return tuple(seen)


def lock_kinds() -> dict[str, list[Callable[[], str | None]]]:
    """``locked_params(kind=...)`` names, in the order a lookup searches them, each with the detectors of
    its backends (the first that names a device wins)."""
    kinds: dict[str, list[Callable[[], str | None]]] = {}
    for backend in backends():
        if backend.lock_kind is not None and backend.detect is not None:
            kinds.setdefault(backend.lock_kind, []).append(backend.detect)
    return kinds
