"""The ``autotune`` fixture: what a marked test calls to tune (``--autotune``) or gate (plain run) a kernel.

Glue only. One :class:`Autotune` per test, made of the lifecycle's
:class:`~pytest_autotune.lifecycle.Kernels`: ``kernel(...)`` handles source
kernels, ``function(...)`` Python-driven ones, ``triton(...)`` Triton kernels,
``replay(...)`` recorded data. The lifecycle decides; this module turns its
:class:`~pytest_autotune.lifecycle.Outcome` into ``pytest.fail`` or
``pytest.skip`` and puts the summary row on ``item.user_properties``, where it
reaches the controller under pytest-xdist too.

Errors in the test's own call (a missing kernel file, ``expected`` of the
wrong shape) fail at the test's line: every frame here hides itself from
pytest's traceback (``__tracebackhide__``), so users never read plugin
internals.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import pytest

from ..errors import SpecError
from ..lifecycle import (Action, Host, KernelResult, Kernels, Outcome, TuneSettings, compile_outcome, implicit_restrictions,
                         kernel_spec, locate_source, with_restrictions)
from .session import SessionState

__all__ = ["Autotune", "KernelResult", "CALLS_KEY"]

CALLS_KEY = pytest.StashKey[int]()


class Autotune:
    """Bound to one test item; created by the ``autotune`` fixture."""

    def __init__(self, item: pytest.Item, settings: TuneSettings, state: SessionState):
        self.item = item
        self.settings = settings
        self.state = state
        self.results: dict[str, KernelResult] = {}
        config = item.config
        host = Host(item.nodeid, say=state.say, progress=state.progress,
                    lockfile_name=lambda device: config.hook.pytest_autotune_lockfile_name(config=config,
                                                                                        device=device),
                    gone=self._gone)
        self.kernels = Kernels(settings, state.options, host)

    # -- public API --------------------------------------------------------------------
    def kernel(self, source: Any, kernel_name: str, problem_size: Any, args: Sequence[Any], *,
               expected: Sequence[Any] | None = None, atol: float | None = None, rtol: float | None = None,
               verify: Callable[..., Any] | None = None, grid_div_x: Any = None, grid_div_y: Any = None,
               grid_div_z: Any = None, block_size_names: Sequence[str] | None = None,
               compiler_options: Sequence[str] = (), shared_mem: Any = None, runner: str | None = None,
               lang: str | None = None, name: str | None = None, check: str | None = None,
               constant_memory: Mapping[str, Any] | None = None, **runner_options: Any) -> KernelResult:
        """Tune or gate a source kernel (CUDA via cupy/pycuda, OpenCL via opencl, C/C++ via the C runner)."""
        __tracebackhide__ = True
        try:
            source = locate_source(source, self._kernel_folders())
        except SpecError as exc:
            raise pytest.fail.Exception(f"autotune.kernel({kernel_name!r}): {exc}", pytrace=True) from None
        if self.state.options.compile_archs:
            try:
                spec = kernel_spec(source, kernel_name, problem_size, args, grid_div_x=grid_div_x,
                                   grid_div_y=grid_div_y, grid_div_z=grid_div_z, compiler_options=compiler_options,
                                   shared_mem=shared_mem, expected=expected, atol=atol, rtol=rtol, verify=verify,
                                   lang=lang, check=check, block_size_names=block_size_names,
                                   constant_memory=constant_memory)
            except Exception:  # the same call below says what is wrong, at the test's line
                spec = None
            if spec is not None and spec.lang == "cuda":  # --autotune-compile: the runner's compiler, no device
                settings = with_restrictions(self.settings, implicit_restrictions(spec, self.settings))
                nvcc = runner_options.get("nvcc")  # the pycuda runner's own nvcc, when one is named
                return self._finish(compile_outcome(spec, settings, self.state.options, self.item.nodeid,
                                                    name or kernel_name.split("<")[0].strip(), runner,
                                                    nvcc if isinstance(nvcc, str) and nvcc != "nvcc" else None))
        return self._finish(self.kernels.kernel(
            source, kernel_name, problem_size, args, expected=expected, atol=atol, rtol=rtol, verify=verify,
            grid_div_x=grid_div_x, grid_div_y=grid_div_y, grid_div_z=grid_div_z, block_size_names=block_size_names,
            compiler_options=compiler_options, shared_mem=shared_mem, runner=runner, lang=lang, name=name,
            check=check, constant_memory=constant_memory, **runner_options))

    def function(self, launch: Callable[[Mapping[str, Any]], Any], *, name: str | None = None,
                 args: Sequence[Any] = (), expected: Sequence[Any] | None = None, atol: float | None = None,
                 rtol: float | None = None, verify: Callable[..., Any] | None = None,
                 sync: Callable[[], None] | None = None, problem_size: Any = None,
                 **runner_options: Any) -> KernelResult:
        """Tune or gate a Python-driven kernel: ``launch(params)`` runs it and returns its outputs."""
        __tracebackhide__ = True
        return self._finish(self.kernels.function(launch, name=name, args=args, expected=expected, atol=atol,
                                                  rtol=rtol, verify=verify, sync=sync, problem_size=problem_size,
                                                  **runner_options))

    def triton(self, kernel: Any, grid: Any, args: Sequence[Any], *, kwargs: Mapping[str, Any] | None = None,
               expected: Sequence[Any] | None = None, atol: float | None = None, rtol: float | None = None,
               verify: Callable[..., Any] | None = None, shared_mem: Any = None, problem_size: Any = None,
               name: str | None = None, isolate: bool = True, **runner_options: Any) -> KernelResult:
        """Tune or gate a ``@triton.jit`` (or ``@triton.autotune``) kernel; the marker's params are its
        ``tl.constexpr`` arguments and launch options, ``args`` its other arguments in order and ``kwargs`` more
        of them by name, as in ``kernel[grid](*args, **kwargs)`` (see backends/triton_runner.py)."""
        __tracebackhide__ = True
        return self._finish(self.kernels.triton(kernel, grid, args, kwargs=kwargs, expected=expected, atol=atol,
                                                rtol=rtol, verify=verify, shared_mem=shared_mem,
                                                problem_size=problem_size, name=name, isolate=isolate,
                                                **runner_options))

    def replay(self, recording: Any, *, name: str | None = None, scale: float = 1.0, noise: float = 0.0,
               seed: int | None = None, definition: Any = None) -> KernelResult:
        """Tune or gate against recorded measurements (a Kernel Tuner cache, T4 or KTT file).

        The marker's ``params`` must describe the recorded space. ``scale``
        multiplies every recorded time (simulate a slower or faster kernel);
        ``noise`` adds seeded relative noise to the samples.
        """
        __tracebackhide__ = True
        return self._finish(self.kernels.replay(recording, name=name, scale=scale, noise=noise, seed=seed,
                                                definition=definition, root=str(self.item.config.rootpath)))

    # -- glue ----------------------------------------------------------------------------
    def _finish(self, outcome: Outcome) -> KernelResult:
        """The outcome, in pytest's words: its row to the summary, a failure or a skip raised at the test's line."""
        __tracebackhide__ = True
        self.item.stash[CALLS_KEY] = self.item.stash.get(CALLS_KEY, 0) + 1
        for row in outcome.rows:
            self.item.user_properties.append(("autotune", row.as_dict()))
        if outcome.action is Action.FAIL:
            raise pytest.fail.Exception(outcome.message, pytrace=outcome.traceback)
        if outcome.action is Action.SKIP:
            raise pytest.skip.Exception(outcome.message)
        assert outcome.result is not None
        self.results[outcome.result.kernel] = outcome.result
        return outcome.result

    def _kernel_folders(self) -> list[tuple[Path, str]]:
        """Where a relative kernel path is looked for: beside the test file, then the rootdir (where it was
        looked for before, as pytest runs from there)."""
        here = Path(str(self.item.path)).parent
        root = Path(str(self.item.config.rootpath))
        return [(here, "beside the test file")] + ([(root, "in the rootdir")] if root != here else [])

    def _gone(self, test: str) -> bool:
        """The test no longer exists: not collected, though its file was (or the file is gone too)."""
        collected = self.state.collected
        path = test.split("::", 1)[0]
        if test in collected:
            return False
        return any(c.split("::", 1)[0] == path for c in collected) or \
            not (Path(str(self.item.config.rootpath)) / path).exists()
