"""``use_lock``: an ``@triton.autotune`` kernel in shipped code launches the lock's configurations, never tunes.

Triton's ``Autotuner`` benchmarks every configuration at the first call of each new key (the values of
its ``key`` arguments and the dtypes of its tensors), in every process: a job's ranks may each pick
another winner, and the first step of each shape pays for the tuning. After ``use_lock(kernel)`` the
kernel takes its configuration from the lockfile of this device instead::

    from pytest_autotune import use_lock

    matmul_kernel = use_lock(matmul_kernel, "autotune.lock", strict=True)   # the same Autotuner, locked
    matmul_kernel[grid](a, b, c, M, N, K, ...)                              # no benchmarking, ever

A call's key is the lock's problem of that call: the values of the ``key`` arguments (a tensor by its
shape, dimension by dimension) and the dtypes of the tensor arguments, as the triton runner records
them (:func:`~pytest_autotune.backends.triton_kernel.key_values`). For a key the lock holds, its
entry's configuration; for an unseen key, ``strict=True`` raises :class:`UnseenKeyError`; otherwise
the nearest tuned key (:func:`key_distance`), else ``fallback=``, else :class:`UnseenKeyError`: the
kernel is never tuned at run time. Each key is resolved once per process and remembered; the
choice depends on the lock alone, so every rank of a job that ships one lock runs one configuration.

The lock is read once, at ``use_lock``, and every entry is validated then (names of the kernel's
``tl.constexpr`` arguments and of Triton's launch options, value types, ``num_warps``,
``num_stages``, ``num_ctas``, ``maxnreg`` ranges): a hand-edited or foreign lockfile fails at start-up
naming the file and entry, not inside Triton at the first launch.
"""
from __future__ import annotations

import math
import os
import threading
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..backends.triton_kernel import KNOWN_LAUNCH_OPTIONS, kernel_info, key_values, launch_options, triton_version
from .lookup import AmbiguousLockError, LockFallbackWarning, LockLookupError, _index, _machine_slugs, _path
from .problem import normalize_size, size_label

__all__ = ["use_lock", "UnseenKeyError", "LockedAutotuner", "key_distance"]

# The launch options' accepted values: what Triton's NVIDIA and AMD backends take (num_warps up to 32 warps of
# 32 threads = 1024, the block limit; num_ctas a cluster of up to 16 on sm_90), checked before Triton sees them.
_RANGES = {"num_warps": (1, 32, True), "num_stages": (1, 16, False), "num_ctas": (1, 16, True),
           "maxnreg": (1, 255, False)}  # name: (lowest, highest, power of two)


class UnseenKeyError(LockLookupError):
    """A call's key is not in the lock (``strict=True``), or nothing tuned is comparable and no fallback is given."""


@dataclass(frozen=True)
class TunedKey:
    """One problem the lock holds for the kernel: the key values, the tensors' dtypes, its configuration."""

    size: tuple[Any, ...]
    dtypes: tuple[str, ...]
    config: Any  # triton.Config
    entry: str  # the lock entry's key, named in warnings and errors


def key_distance(a: Sequence[Any], b: Sequence[Any]) -> float | None:
    """How far apart two keys' values are; ``None`` when they cannot be compared.

    Comparable: as many values, and equal wherever one of them is not a positive number (strings,
    booleans, ``None``, zero or negative values: a ``CAUSAL`` flag or a dtype name is matched, never
    measured). Distance: the Euclidean distance of the positive numbers in log space, because a
    configuration follows the ratio of sizes (1024 is as far from 2048 as 2048 from 4096).
    """
    if len(a) != len(b):
        return None
    total = 0.0
    for x, y in zip(a, b):
        if _positive(x) and _positive(y):
            total += (math.log(x) - math.log(y)) ** 2
        elif x != y or type(x) is not type(y):
            return None
    return math.sqrt(total)


def _is_array(value: Any) -> bool:
    """An argument the lock describes by shape and dtype (:func:`~.problem.describe_problem`'s rule, kept in step
    by a test): it has both, and at least one dimension."""
    shape = getattr(value, "shape", None)
    return shape is not None and getattr(value, "dtype", None) is not None and len(shape) > 0


def _array_dtype(value: Any) -> str:
    return str(value.dtype)


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def check_config(params: Mapping[str, Any], constexprs: Sequence[str], required: Sequence[str],
                 options: Sequence[str]) -> str | None:
    """Why ``params`` cannot be launched (``None`` when it can): names, types and ranges, before Triton sees them."""
    for name, value in params.items():
        if name in options:
            low, high, pow2 = _RANGES.get(name, (1, 2**31 - 1, False))
            if name == "maxnreg" and value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high \
                    or (pow2 and value & (value - 1)):
                return (f"{name} = {value!r} must be a whole number from {low} to {high}"
                        f"{' and a power of two' if pow2 else ''}")
        elif name in constexprs:
            if not isinstance(value, (int, float, str, bool)) or isinstance(value, float) and not math.isfinite(value):
                return f"{name} = {value!r}: a tl.constexpr from the lock must be a number, a string or a boolean"
        else:
            return (f"{name!r} is neither a tl.constexpr argument of the kernel ({', '.join(constexprs) or 'none'}) "
                    f"nor a launch option of Triton {triton_version()} ({', '.join(options)})")
    missing = [n for n in required if n not in params]
    if missing:
        return f"sets no {', '.join(map(repr, missing))}, which the kernel's @triton.autotune configs set"
    return None


def _as_config(params: Mapping[str, Any]) -> Any:
    import triton

    params = dict(params)
    launch = {name: params.pop(name) for name in KNOWN_LAUNCH_OPTIONS if name in params}
    return triton.Config(params, **launch)


def _config_params(config: Any) -> dict[str, Any]:
    if isinstance(config, Mapping):
        return dict(config)
    if not hasattr(config, "kwargs") or not hasattr(config, "num_warps"):
        raise TypeError(f"use_lock: fallback must be a triton.Config or a dict of parameters, got {config!r}")
    if getattr(config, "pre_hook", None) is not None or getattr(config, "ir_override", None) is not None:
        raise TypeError("use_lock: the fallback triton.Config must not set pre_hook or ir_override")
    return {**config.kwargs, **{n: getattr(config, n) for n in KNOWN_LAUNCH_OPTIONS
                                if getattr(config, n, None) is not None}}


def _autotuner(kernel: Any) -> Any:
    """The ``triton.runtime.autotuner.Autotuner`` in ``kernel`` (it, or under ``@triton.heuristics``)."""
    from triton.runtime.autotuner import Autotuner

    obj = kernel
    for _ in range(8):
        if isinstance(obj, Autotuner):
            return obj
        obj = getattr(obj, "fn", None)
        if obj is None:
            break
    raise TypeError(f"use_lock: {kernel!r} is not a @triton.autotune kernel; a plain @triton.jit kernel takes "
                    "its locked configuration from locked_triton_config(...).all_kwargs()")


class LockedAutotuner:
    """What :func:`use_lock` installs on one ``Autotuner``: its ``run`` and ``warmup``, resolving keys from the lock."""

    def __init__(self, autotuner: Any, name: str, path: Path | None, tuned: Sequence[TunedKey], *,
                 strict: bool, nearest: bool, fallback: Any) -> None:
        self.autotuner = autotuner
        self.name = name
        self.path = path
        self.tuned = tuple(tuned)
        self.strict, self.nearest, self.fallback = strict, nearest, fallback
        self.chosen: dict[tuple[Any, ...], Any] = {}
        self.arg_names = tuple(autotuner.arg_names)
        self._lock = threading.Lock()

    def key_of(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[tuple[Any, ...], tuple[str, ...]]:
        """The call's key as the lock records it: the key values and the tensors' dtypes, in argument order."""
        named = dict(zip(self.arg_names, args))
        named.update((k, v) for k, v in kwargs.items() if k in self.arg_names)
        size = normalize_size(key_values(self.autotuner.keys, named)) or []
        return tuple(size), tuple(_array_dtype(named[n]) for n in self.arg_names if n in named and _is_array(named[n]))

    def config_for(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        key = self.key_of(args, kwargs)
        config = self.chosen.get(key)
        if config is None:
            with self._lock:
                config = self.chosen.get(key)
                if config is None:
                    config = self.chosen[key] = self._resolve(*key)
        return config

    def _resolve(self, size: tuple[Any, ...], dtypes: tuple[str, ...]) -> Any:
        where = f"{self.path}" if self.path is not None else "the lock"
        wanted = f"key {size_label(list(size)) or '()'} with dtypes {list(dtypes)}"
        for t in self.tuned:
            if t.size == size and t.dtypes == dtypes:
                return t.config
        held = ", ".join(f"{size_label(list(t.size)) or '()'} {list(t.dtypes)}" for t in self.tuned) or "none"
        if self.strict:
            raise UnseenKeyError(f"use_lock({self.name!r}, strict=True): {wanted} is not tuned in {where} (it holds "
                                 f"{held}); add a test for this problem and tune it (pytest --autotune), or "
                                 "use strict=False for the nearest tuned key")
        if self.nearest:
            scored = [(d, t.entry, t) for t in self.tuned if t.dtypes == dtypes
                      and (d := key_distance(size, t.size)) is not None]
            if scored:
                _, _, best = min(scored, key=lambda s: (s[0], s[1]))  # ties: the first entry by key, on every rank
                warnings.warn(LockFallbackWarning(
                    f"use_lock({self.name!r}): {wanted} is not tuned in {where}; using the nearest tuned key "
                    f"{size_label(list(best.size)) or '()'} ({best.entry})"), stacklevel=4)
                return best.config
        if self.fallback is not None:
            warnings.warn(LockFallbackWarning(f"use_lock({self.name!r}): {wanted} is not tuned in {where}; using "
                                              "the fallback configuration"), stacklevel=4)
            return self.fallback
        raise UnseenKeyError(f"use_lock({self.name!r}): {wanted} is not tuned in {where} and no tuned key is "
                             f"comparable (it holds {held}); pass fallback= a triton.Config, or tune this problem")

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """Triton's ``Autotuner.run`` without its benchmark: the lock's configuration for this key, launched."""
        config = self.config_for(args, kwargs)
        self.autotuner.best_config = config
        return self.autotuner.fn.run(*args, **kwargs, **config.all_kwargs())

    def warmup(self, *args: Any, **kwargs: Any) -> list[Any]:
        """Compile only the configuration a launch with these arguments would use."""
        config = self.config_for(args, kwargs)
        return [self.autotuner.fn.warmup(*args, **kwargs, **config.all_kwargs())]


def use_lock(kernel: Any, lockdir: str | os.PathLike[str] = "autotune.lock", *, strict: bool = False,
             fallback: Any = None, nearest: bool = True, name: str | None = None,
             device: str | None = None) -> Any:
    """Make the ``@triton.autotune`` ``kernel`` launch the locked configuration of each key; returns ``kernel``.

    ``strict``: an unseen key raises :class:`UnseenKeyError` (never the nearest, never the fallback).
    Otherwise an unseen key takes the nearest tuned key (:func:`key_distance`; ``nearest=False`` skips
    it) with a :class:`~pytest_autotune.lock.lookup.LockFallbackWarning`, else ``fallback`` (a
    ``triton.Config`` or a dict of parameters), else raises. ``name``: the kernel's name in the lock
    when the test gave ``name=``; ``device``: a lockfile's name instead of this machine's (torch's
    GPU, else Triton's interpreter). A lock without entries for the kernel raises
    :class:`~pytest_autotune.lock.lookup.LockLookupError` unless ``fallback`` is given (and ``strict`` is not).
    Calling it again re-reads the lock.
    """
    autotuner = _autotuner(kernel)
    info = kernel_info(autotuner)
    name = name or info.name
    options = launch_options()
    required = sorted({n for c in autotuner.configs for n in getattr(c, "kwargs", {})})
    if fallback is not None:
        params = _config_params(fallback)
        reason = check_config(params, info.constexprs, required, options)
        if reason:
            raise ValueError(f"use_lock({name!r}): fallback: {reason}")
        fallback = _as_config(params)
    slugs = (device,) if device is not None else _machine_slugs("triton")
    path: Path | None = None
    entries: list[Any] = []
    searched = []
    for slug in slugs:
        candidate = _path(lockdir, slug)
        searched.append(str(candidate))
        index = _index(candidate)
        if index is not None and name in index.kernels:
            path, entries = candidate, index.kernels[name]
            break
    tuned: dict[tuple[Any, ...], TunedKey] = {}
    for t in entries:
        if t.size is None:
            continue  # schema 1: no problem recorded, no key to match (re-tune to record it)
        params = t.entry.params
        reason = check_config(params, info.constexprs, required, options)
        if reason:
            raise LockLookupError(f"use_lock({name!r}): {path}: entry {t.key!r}: {reason}; re-tune it with pytest "
                                  "--autotune, or restore the lockfile from version control")
        key = (tuple(t.size), tuple(t.dtypes))
        same = tuned.get(key)
        if same is not None and _config_params(same.config) != _config_params(_as_config(params)):
            raise AmbiguousLockError(f"use_lock({name!r}): {path} holds two configurations for key "
                                     f"{size_label(t.size) or '()'} {t.dtypes}: {same.entry} and {t.key}; give one "
                                     "test's kernel another name (name= in autotune.triton)")
        if same is None:
            tuned[key] = TunedKey(key[0], key[1], _as_config(params), t.key)
    if not tuned and (fallback is None or strict):
        where = ", ".join(searched) or "no Triton device detected on this machine"
        raise LockLookupError(f"use_lock({name!r}): no entry with a recorded problem for {name!r} in {where}; tune "
                              f"it on this device with pytest --autotune{'' if strict else ', or pass fallback='}")
    state = LockedAutotuner(autotuner, name, path, [tuned[k] for k in sorted(tuned, key=lambda k: tuned[k].entry)],
                            strict=strict, nearest=nearest, fallback=fallback)
    autotuner.run = state.run  # instance attributes: Autotuner.run (and its benchmark) is never reached
    autotuner.warmup = state.warmup
    autotuner.pytest_autotune_lock = state  # what it resolved, for inspection
    return kernel
