"""The local headers a kernel includes are part of the kernel: found on its include path, and an edit of one
changes the kernel's fingerprint and its build cache keys like an edit of its source."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from pytest_autotune.lock.hashing import kernel_source_hash
from pytest_autotune.execution.includes import include_dirs, local_headers
from pytest_autotune.execution.kernel import KernelSpec, render_source, spec_headers


def _kernel(tmp_path: Path) -> KernelSpec:
    (tmp_path / "inc" / "detail").mkdir(parents=True)
    (tmp_path / "inc" / "tile.h").write_text('#include "detail/pack.h"\n#define TILE 4\n')
    (tmp_path / "inc" / "detail" / "pack.h").write_text('#include "reps.h"\n#define PACK 2\n')
    (tmp_path / "inc" / "detail" / "reps.h").write_text("#define REPS 3\n")  # found beside its includer
    (tmp_path / "local.h").write_text("#define LOCAL 1\n")  # found in the kernel's own folder
    (tmp_path / "k.c").write_text('#include "tile.h"\n#include "local.h"\n#include <stdio.h>\n#include "absent.h"\n'
                                  "void k(float *x) { x[0] = TILE * PACK * REPS * LOCAL; }\n")
    return KernelSpec(str(tmp_path / "k.c"), "k", 1, [np.zeros(1, np.float32)], compiler_options=[f"-I{tmp_path / 'inc'}"])


def test_local_headers_are_found_recursively_on_the_include_path(tmp_path: Path) -> None:
    spec = _kernel(tmp_path)
    assert set(spec_headers(spec)) == {"tile.h", "detail/pack.h", "detail/reps.h", "local.h"}
    assert include_dirs(None, ["-iquote", "/q", "-I/a", "-I", "/b", "--include-path=/c"]) == [
        Path("/q"), Path("/a"), Path("/b"), Path("/c")]
    assert local_headers('#include <vector>\n', [tmp_path]) == {}


def test_an_edited_header_changes_the_fingerprint_and_every_build_cache_key(tmp_path: Path) -> None:
    spec = _kernel(tmp_path)
    before_hash = kernel_source_hash(spec.code, "k", spec.compiler_options, spec_headers(spec))
    before_source = render_source(spec, {"B": 1})
    assert before_hash != kernel_source_hash(spec.code, "k", spec.compiler_options)  # headers count
    (tmp_path / "inc" / "detail" / "reps.h").write_text("#define REPS 9\n")  # a nested header, two levels down
    assert kernel_source_hash(spec.code, "k", spec.compiler_options, spec_headers(spec)) != before_hash
    after_source = render_source(spec, {"B": 1})
    assert after_source != before_source and after_source.startswith(before_source.split("// pytest-autotune")[0])
    assert "detail/reps.h=" in after_source.splitlines()[-1]


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_the_c_build_cache_rebuilds_after_a_header_edit(tmp_path: Path) -> None:
    from pytest_autotune.backends.c_runner import CCompileStage

    _kernel(tmp_path)
    code = (tmp_path / "k.c").read_text().replace('#include "absent.h"\n', "")
    (tmp_path / "k.c").write_text(code)
    spec = KernelSpec(str(tmp_path / "k.c"), "k", 1, [np.zeros(1, np.float32)], compiler_options=[f"-I{tmp_path / 'inc'}"])
    stage = CCompileStage(spec, cache_dir=tmp_path / "cache")
    first, hit = stage.library(render_source(spec, {}), "k")
    assert not hit and stage.library(render_source(spec, {}), "k") == (first, True)
    (tmp_path / "inc" / "tile.h").write_text('#include "detail/pack.h"\n#define TILE 40\n')
    second, hit = stage.library(render_source(spec, {}), "k")
    assert not hit and second != first  # not the binary built from the old header
