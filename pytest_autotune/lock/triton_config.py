"""The locked configuration of a Triton kernel as a ``triton.Config``, for shipped code.

Production code launches the tuned configuration without tuning at import time::

    from pytest_autotune import locked_triton_config, locked_triton_configs

    cfg = locked_triton_config("softmax_kernel", problem_size=(512, 1024))
    softmax_kernel[grid](x, y, n_cols, **cfg.all_kwargs())

    @triton.autotune(configs=locked_triton_configs("softmax_kernel"), key=["n_cols"])  # one config: no tuning
    @triton.jit
    def softmax_kernel(...): ...

Entries are found as :func:`~pytest_autotune.lock.lookup.locked_params` finds them, in the lockfile of
the device the triton runner tunes on here (torch's GPU, else Triton's interpreter), unless ``device=``
names a lockfile.
"""
from __future__ import annotations

import os
from typing import Any

from ..backends.triton_kernel import KNOWN_LAUNCH_OPTIONS
from .lookup import locked_params


def locked_triton_config(kernel: str, problem_size: Any = None, lockdir: str | os.PathLike[str] = "autotune.lock",
                         **lookup: Any) -> Any:
    """``triton.Config(constexprs, num_warps=..., num_stages=...)`` of the locked configuration.

    ``lookup``: ``device``, ``default``, ``dtypes``, ``source``, ``kernel_name``, ``kind`` as for
    ``locked_params`` (``kind`` defaults to ``"triton"`` unless ``device`` is given).
    """
    import triton

    if "device" not in lookup:
        lookup.setdefault("kind", "triton")
    params = locked_params(kernel, problem_size, lockdir, **lookup)
    launch = {name: params.pop(name) for name in KNOWN_LAUNCH_OPTIONS if name in params}
    return triton.Config(params, **launch)


def locked_triton_configs(kernel: str, problem_size: Any = None, lockdir: str | os.PathLike[str] = "autotune.lock",
                          **lookup: Any) -> list[Any]:
    """The locked configuration as a one-element list, for ``@triton.autotune(configs=...)``: Triton then
    launches it without benchmarking anything."""
    return [locked_triton_config(kernel, problem_size, lockdir, **lookup)]
