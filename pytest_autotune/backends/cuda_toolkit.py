"""Where the CUDA toolkit's pieces are on this machine, whichever way they were installed: the runtime
headers and CCCL (for NVRTC compiles), the installed runtime's version and NVRTC's (for the device record).

Imports nothing else of the package, so the device probe and the NVRTC compile stage can both use it.
"""
from __future__ import annotations

import contextlib
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

# Where the headers lie in NVIDIA's wheels (relative to a ``site-packages``) and in a toolkit, newest layout first:
# CUDA 13's wheels share one ``nvidia/cu13/include`` (CCCL in its ``cccl/`` subfolder, as in the CUDA 13 toolkit);
# CUDA 12's have one folder per wheel (``nvidia/cuda_runtime/include``, ``nvidia/cuda_cccl/include``).
WHEEL_HEADER_LAYOUTS = {
    "cccl": ("nvidia/cu13/include/cccl", "nvidia/cuda_cccl/include"),
    "cudart": ("nvidia/cu13/include", "nvidia/cuda_runtime/include"),
}
TOOLKIT_HEADER_LAYOUTS = {"cccl": ("include/cccl", "include"), "cudart": ("include",)}
# What a folder must hold to count: CCCL's libcu++ and the runtime's cuda_fp16.h (the nvidia-cuda-nvrtc 13 wheel
# puts nvrtc.h alone into nvidia/cu13/include, so the folder's existence proves nothing).
HEADER_MARKERS = {"cccl": "cuda/std/type_traits", "cudart": "cuda_runtime.h"}


def _has_headers(folder: str | os.PathLike | None, kind: str) -> bool:
    return bool(folder) and (Path(folder) / HEADER_MARKERS[kind]).is_file()


def find_header_dir(kind: str, site_dirs: Sequence[str | os.PathLike] = (),
                    toolkits: Sequence[str | os.PathLike] = ()) -> str | None:
    """The first folder holding ``kind``'s headers ("cccl" or "cudart"): the wheels' layouts under each of
    ``site_dirs`` (CUDA 13's, then 12's), then each toolkit root (``include/cccl``, then ``include``)."""
    for root in site_dirs:
        for rel in WHEEL_HEADER_LAYOUTS[kind]:
            if _has_headers(Path(root) / rel, kind):
                return str(Path(root) / rel)
    for root in toolkits:
        for rel in TOOLKIT_HEADER_LAYOUTS[kind]:
            if _has_headers(Path(root) / rel, kind):
                return str(Path(root) / rel)
    return None


def _site_dirs() -> list[str]:
    import site
    import sys

    dirs = [p for p in sys.path if p and os.path.isdir(os.path.join(p, "nvidia"))]
    with contextlib.suppress(Exception):
        dirs += [p for p in site.getsitepackages() + [site.getusersitepackages()] if p not in dirs]
    return dirs


def _toolkit_roots() -> list[str]:
    roots = [os.environ.get(v) for v in ("CUDA_PATH", "CUDA_HOME")]
    return [r for r in roots if r] + ["/usr/local/cuda"]


@lru_cache(maxsize=1)
def cuda_header_dirs() -> tuple[str | None, str | None]:
    """Folders of CCCL (``cuda/std/...``, CUB, Thrust) and of the CUDA runtime headers (``cuda_fp16.h``...).

    Found as CuPy 14 finds the runtime headers (``cuda.pathfinder``, which
    comes with ``cuda-bindings``), checked to hold the headers; else looked
    up in both wheel layouts (CUDA 13: ``nvidia/cu13/include`` with CCCL in
    ``cccl/``; CUDA 12: ``nvidia/cuda_runtime/include``,
    ``nvidia/cuda_cccl/include``), then in a toolkit (``$CUDA_PATH``,
    ``$CUDA_HOME``, ``/usr/local/cuda``); None where absent.
    """
    found: list[str | None] = []
    for name in ("cccl", "cudart"):
        folder = None
        try:
            from cuda.pathfinder import find_nvidia_header_directory

            folder = find_nvidia_header_directory(name)
        except Exception:  # no pathfinder, or an unusable installation: our own search below
            folder = None
        if not _has_headers(folder, name):
            folder = find_header_dir(name, _site_dirs(), _toolkit_roots())
        found.append(folder)
    return found[0], found[1]


RUNTIME_DISTRIBUTIONS = ("nvidia-cuda-runtime", "nvidia-cuda-runtime-cu12")  # CUDA 13's wheel, then 12's


def installed_cuda_runtime_version(header_dir: str | os.PathLike | None = None) -> str | None:
    """The CUDA runtime installed here, which CuPy's ``runtimeGetVersion`` does not tell (CuPy 14 reports the
    runtime it was built with): the ``nvidia-cuda-runtime`` wheel's version (``"13.0.96"``), else
    ``CUDART_VERSION`` of the runtime headers the kernels compile with (``13000`` -> ``"13.0"``; a toolkit
    install); None when neither is found."""
    from importlib import metadata

    for name in RUNTIME_DISTRIBUTIONS:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    if header_dir is None:
        header_dir = cuda_header_dirs()[1]
    if header_dir:
        try:
            text = (Path(header_dir) / "cuda_runtime_api.h").read_text(errors="replace")
        except OSError:
            return None
        match = re.search(r"#define\s+CUDART_VERSION\s+(\d+)", text)
        if match:
            version = int(match.group(1))
            return f"{version // 1000}.{(version % 1000) // 10}"
    return None


def nvrtc_versions(cupy: Any = None) -> dict[str, str]:
    """NVRTC's version as CuPy loads it (what the device stage compiles with) and as cuda-bindings loads it
    (the compile stage's, ``--autotune-compile``), where each is present."""
    out: dict[str, str] = {}
    if cupy is not None:
        try:
            out["nvrtc"] = ".".join(str(v) for v in cupy.cuda.nvrtc.getVersion()[:2])
        except Exception:
            pass
    try:  # cuda.bindings' own NVRTC, asked directly (the nvrtc module would import the executor)
        from cuda.bindings import nvrtc

        err, major, minor = nvrtc.nvrtcVersion()
        if err == nvrtc.nvrtcResult.NVRTC_SUCCESS:
            out["nvrtc_bindings"] = f"{major}.{minor}"
    except Exception:  # not installed, or the library does not load
        pass
    return out
