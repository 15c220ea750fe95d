"""What a Triton kernel offers to tune, read from the kernel object itself (no torch import, no device).

A ``@triton.jit`` function (a ``JITFunction``, or an ``InterpretedFunction``
under ``TRITON_INTERPRET=1``) tunes its ``tl.constexpr`` arguments and the
launch options of the installed Triton (``num_warps``, ``num_stages`` and,
where ``triton.Config`` takes them, ``num_ctas`` and ``maxnreg``). A kernel
wrapped in ``@triton.autotune`` hands over its configurations (the allowed
points of the space), its ``key`` (part of the problem identity), its
``reset_to_zero``/``restore_value`` arguments and its ``early_config_prune``
hook; what pytest-autotune cannot honour (user pre/post hooks, a performance
model that ranks instead of measuring) is refused with the reason.

Kernels travel to the isolated worker as a reference (module, qualified
name, file), never pickled: a ``JITFunction`` holds compile caches and the
worker must re-create it with its own Triton, as an import does.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from ..errors import SpecError

# Launch options Triton knows, in the order they are reported; which of them the installed Triton takes
# is read from ``triton.Config``'s signature (num_ctas arrived in 2.1, maxnreg in 3.0).
KNOWN_LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")


_TRUE = ("1", "true", "yes", "on", "y")


def interpreter_requested() -> bool:
    """``TRITON_INTERPRET`` is set to a true value (as Triton reads the variable)."""
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in _TRUE


def gpu_device_present() -> bool:
    """A GPU device node exists (NVIDIA, AMD ROCm, WSL): cheap, imports nothing, starts no driver."""
    try:
        names = os.listdir("/dev")
    except OSError:
        return False
    return any(n in ("nvidiactl", "kfd", "dxg") or (n.startswith("nvidia") and n[6:].isdigit()) for n in names)


def use_interpreter_without_gpu() -> bool:
    """Set ``TRITON_INTERPRET=1`` when Triton is installed, no GPU is present and the variable is unset.

    Triton reads the variable when a kernel is decorated, so this must run before any module that
    defines a kernel is imported: the plugin calls it before the first conftest is loaded. Returns
    whether it set the variable (never when Triton was already imported: kernels may exist by then).
    """
    if "TRITON_INTERPRET" in os.environ or "triton" in sys.modules or gpu_device_present():
        return False
    try:
        if importlib.util.find_spec("triton") is None:
            return False
    except (ImportError, ValueError):
        return False
    os.environ["TRITON_INTERPRET"] = "1"
    return True


def triton_version() -> str:
    """The installed Triton's version ("not installed" without it); named in errors about what it accepts."""
    try:
        from importlib.metadata import version

        return version("triton")
    except Exception:  # noqa: BLE001 - metadata missing or Triton absent
        return "not installed"


def launch_options() -> tuple[str, ...]:
    """The launch options the installed Triton accepts (``triton.Config``'s keyword arguments)."""
    import triton

    accepted = inspect.signature(triton.Config).parameters
    return tuple(name for name in KNOWN_LAUNCH_OPTIONS if name in accepted)


def is_autotuner(kernel: Any) -> bool:
    """A ``@triton.autotune``-wrapped kernel (duck-typed: configs, keys and the wrapped fn)."""
    return hasattr(kernel, "configs") and hasattr(kernel, "keys") and hasattr(kernel, "fn")


def jit_function(kernel: Any) -> Any:
    """The ``@triton.jit`` object under any ``@triton.autotune``/``@triton.heuristics`` wrappers."""
    obj = kernel
    for _ in range(8):
        if hasattr(obj, "arg_names") and inspect.isfunction(getattr(obj, "fn", None)):
            return obj
        inner = getattr(obj, "fn", None)
        if inner is None:
            break
        obj = inner
    raise SpecError(f"autotune.triton: {kernel!r} is not a @triton.jit kernel (decorate it with @triton.jit)")


def python_function(kernel: Any) -> Callable[..., Any]:
    """The plain Python function the kernel was written as."""
    return jit_function(kernel).fn


def _is_constexpr(annotation: Any) -> bool:
    if annotation is inspect.Parameter.empty:
        return False
    if isinstance(annotation, str):
        return annotation.split(".")[-1].strip() == "constexpr"
    return getattr(annotation, "__name__", "") == "constexpr"


@dataclass(frozen=True)
class KernelInfo:
    """The kernel's signature as Triton sees it."""

    name: str
    arg_names: tuple[str, ...]
    constexprs: tuple[str, ...]
    defaults: dict[str, Any] = field(default_factory=dict)  # constexpr arguments with a default value


def kernel_info(kernel: Any) -> KernelInfo:
    """Argument names, the ``tl.constexpr`` ones among them and their defaults."""
    fn = python_function(kernel)
    sig = inspect.signature(fn)
    constexprs = tuple(n for n, p in sig.parameters.items() if _is_constexpr(p.annotation))
    defaults = {n: p.default for n, p in sig.parameters.items()
                if n in constexprs and p.default is not inspect.Parameter.empty}
    return KernelInfo(fn.__name__, tuple(sig.parameters), constexprs, defaults)


def check_param_names(names: Sequence[str], info: KernelInfo) -> None:
    """Every tuned name is a constexpr argument or a launch option of this Triton; SpecError otherwise."""
    options = launch_options()
    unknown = [n for n in names if n not in info.constexprs and n not in options]
    if unknown:
        plain = [n for n in unknown if n in info.arg_names]
        why = (f"{', '.join(map(repr, plain))} {'is' if len(plain) == 1 else 'are'} not tl.constexpr in "
               f"{info.name}() (annotate it `: tl.constexpr` to tune it); " if plain else "")
        raise SpecError(
            f"parameter(s) {', '.join(map(repr, unknown))} cannot be tuned: {why}Triton {triton_version()} tunes the "
            f"kernel's tl.constexpr arguments ({', '.join(info.constexprs) or 'none'}) and the launch options "
            f"{', '.join(options)}")


# --------------------------------------------------------------------------- @triton.autotune migration
def is_config_list(value: Any) -> bool:
    """A non-empty list of ``triton.Config`` (duck-typed: ``kwargs`` and ``num_warps``)."""
    return isinstance(value, (list, tuple)) and bool(value) and all(
        hasattr(c, "kwargs") and hasattr(c, "num_warps") for c in value)


def configs_of(source: Any) -> list[Any]:
    """The ``triton.Config`` list of an ``@triton.autotune`` kernel (or a list of configs as it is)."""
    if is_autotuner(source):
        return list(source.configs)
    if isinstance(source, (list, tuple)) and source:
        return list(source)
    raise SpecError(f"configs= takes a @triton.autotune(configs=[...]) kernel or a non-empty list of triton.Config, "
                    f"got {type(source).__name__}")


def config_params(config: Any) -> dict[str, Any]:
    """One ``triton.Config`` as a flat parameter dict (kwargs plus the launch options it sets)."""
    if getattr(config, "pre_hook", None) is not None:
        raise SpecError(f"triton.Config({config}) has a pre_hook: pytest-autotune runs no per-configuration hooks "
                        "(reset outputs with reset_to_zero=/restore_value= on @triton.autotune instead)")
    if getattr(config, "ir_override", None) is not None:
        raise SpecError(f"triton.Config({config}) sets ir_override: a hand-written IR file cannot be tuned")
    if isinstance(config, Mapping):
        return dict(config)
    params = dict(config.kwargs)
    for name in KNOWN_LAUNCH_OPTIONS:
        value = getattr(config, name, None)
        if value is not None:
            params[name] = value
    return params


def space_from_configs(source: Any) -> tuple[dict[str, list[Any]], str]:
    """``params`` (each name's values) and the restriction that allows exactly the listed configurations.

    The restriction is a ``(a, b, ...) in [(...), ...]`` expression: a string, so the space hash
    (and with it the lock entry) changes exactly when the list does.
    """
    points = [config_params(c) for c in configs_of(source)]
    names = sorted({n for p in points for n in p}, key=lambda n: (n in KNOWN_LAUNCH_OPTIONS, n))
    for n in names:
        missing = [i for i, p in enumerate(points) if n not in p]
        if missing:
            raise SpecError(f"configuration {missing[0]} does not set {n!r} while others do; give every "
                            "triton.Config the same names (and launch options)")
        bad = [p[n] for p in points if not isinstance(p[n], (int, float, str, bool))]
        if bad:
            raise SpecError(f"{n!r} = {bad[0]!r}: only numbers, strings and booleans can be tuned")
    params = {n: sorted({p[n] for p in points}, key=repr) for n in names}
    rows = sorted({tuple(p[n] for n in names) for p in points}, key=repr)
    if len(names) == 1:
        restriction = f"{names[0]} in [{', '.join(repr(r[0]) for r in rows)}]"
    else:
        restriction = f"({', '.join(names)}) in [{', '.join(map(repr, rows))}]"
    return params, restriction


@dataclass(frozen=True)
class AutotuneSettings:
    """What pytest-autotune takes over from an ``@triton.autotune`` wrapper."""

    key: tuple[str, ...] = ()
    reset_to_zero: tuple[str, ...] = ()
    restore_value: tuple[str, ...] = ()
    early_config_prune: Callable[..., Any] | None = None
    configs: tuple[Any, ...] = ()


def autotune_settings(kernel: Any) -> AutotuneSettings:
    """The wrapper's settings; SpecError for what cannot be honoured (hooks, a performance model)."""
    if not is_autotuner(kernel):
        return AutotuneSettings()
    if getattr(kernel, "user_defined_pre_hook", False) or getattr(kernel, "user_defined_post_hook", False):
        raise SpecError("@triton.autotune(pre_hook=/post_hook=) is not supported: pytest-autotune restores the "
                        "outputs before every run itself; use reset_to_zero=/restore_value= for what the hooks did")
    if getattr(kernel, "perf_model", None) is not None:
        raise SpecError("@triton.autotune(prune_configs_by={'perf_model': ...}) ranks configurations by a model "
                        "instead of measuring them; pytest-autotune measures every configuration it tries: drop "
                        "'perf_model'/'top_k' (early_config_prune is honoured)")
    return AutotuneSettings(tuple(kernel.keys), tuple(getattr(kernel, "reset_to_zero", ()) or ()),
                            tuple(getattr(kernel, "restore_value", ()) or ()),
                            getattr(kernel, "early_config_prune", None), tuple(kernel.configs))


def key_values(key: Sequence[str], named: Mapping[str, Any]) -> list[Any]:
    """The values of the ``key`` arguments of a call (a tensor by its shape, dimension by dimension).

    The problem size a lock entry of an ``@triton.autotune`` kernel records, and what
    :func:`~pytest_autotune.lock.triton_lock.use_lock` matches a production call's arguments against.
    """
    size: list[Any] = []
    for name in key:
        value = named.get(name)
        if hasattr(value, "shape") and hasattr(value, "data_ptr"):
            size.extend(int(s) for s in value.shape)
        else:
            size.append(value)
    return size


# --------------------------------------------------------------------------- references into the worker
@dataclass(frozen=True)
class KernelRef:
    """Where a module-level kernel lives: the worker imports it from there (by name, else from its file)."""

    module: str
    qualname: str
    file: str | None = None

    @classmethod
    def of(cls, kernel: Any) -> "KernelRef":
        fn = python_function(kernel)
        if "<locals>" in fn.__qualname__:
            raise SpecError(f"kernel {fn.__name__}() is defined inside a function; define Triton kernels at module "
                            "level so the isolated worker can import them (or pass isolate=False)")
        try:
            file = inspect.getsourcefile(fn)
        except TypeError:
            file = None
        return cls(fn.__module__, fn.__qualname__, file)

    def resolve(self) -> Any:
        """The ``@triton.jit`` object (imported in this process)."""
        module = sys.modules.get(self.module)
        if module is None:
            try:
                module = importlib.import_module(self.module)
            except ImportError:
                module = self._load_file()
        obj: Any = module
        for part in self.qualname.split("."):
            obj = getattr(obj, part)
        return jit_function(obj)

    def _load_file(self) -> Any:
        if not self.file:
            raise SpecError(f"cannot import the kernel's module {self.module!r} in the worker process")
        spec = importlib.util.spec_from_file_location(self.module, self.file)
        if spec is None or spec.loader is None:
            raise SpecError(f"cannot load the kernel's module from {self.file}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[self.module] = module
        spec.loader.exec_module(module)
        return module


def module_source(kernel: Any) -> tuple[str, str]:
    """The source text of the module the kernel lives in, and its file (what the lock stores and A/B-gates)."""
    fn = python_function(kernel)
    module = sys.modules.get(fn.__module__)
    try:
        text = inspect.getsource(module) if module is not None else inspect.getsource(fn)
        file = inspect.getsourcefile(fn) or ""
    except (OSError, TypeError) as exc:
        raise SpecError(f"cannot read the source of kernel {fn.__name__}(): {exc}") from None
    return text, file


class Portable:
    """A callable (a grid lambda, a shared-memory estimate) sent to the worker by value through cloudpickle.

    Plain pickle refuses lambdas and closures; ``grid=lambda meta: ...`` written in a test is the usual
    case. Without cloudpickle the value goes as it is (module-level functions still pickle by reference).
    """

    def __init__(self, value: Any) -> None:
        self.value = value

    def __reduce__(self) -> Any:
        try:
            import cloudpickle
        except ImportError:
            return (Portable, (self.value,))
        return (_unpickle_portable, (cloudpickle.dumps(self.value),))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.value(*args, **kwargs)


def _unpickle_portable(data: bytes) -> Portable:
    import pickle

    return Portable(pickle.loads(data))
