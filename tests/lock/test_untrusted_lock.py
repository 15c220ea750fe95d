"""A committed lockfile is untrusted input: it arrives in a pull request and plain ``pytest`` runs what it says.

What an entry may bring into a build is checked before anything is built (parameter values are the
marker's own, kernel names and compiler options the kernel's or plainly harmless); paths from a lock stay
inside the lock directory; generated headers escape what they copy; a malformed, oversized, nested or
unwritable lock gets the plugin's message, never a traceback, and is never written.
"""
from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_autotune import cli
from pytest_autotune.gate.trust import (UntrustedEntry, trusted_build, trusted_params, trusted_probe_sizes,
                                        trusted_runners_up)
from pytest_autotune.lock import lockfile as lockfile_module
from pytest_autotune.lock.export import ExportError, collect, to_header
from pytest_autotune.lock.lockfile import (InvalidEntryError, LockfileError, merge_entries, parse_lockfile,
                                           read_lockfile)
from pytest_autotune.lock.lookup import LockLookupError, clear_cache, locked_params
from pytest_autotune.lock.sources import (load_source, materialize_headers, source_name, store_source,
                                          unreferenced_sources)
from pytest_autotune.space.membership import NotInSpace, declared_configuration

DEVICE = {"kind": "cpu", "model": "Test CPU", "slug": "cpu-test"}
HASHES = {"source": "s1", "space": "p1", "problem": "q1"}


def entry(**fields: Any) -> dict[str, Any]:
    base = {"params": {"CHUNK": 64, "MODE": "fast"}, "samples": [1.0, 1.1, 0.9],
            "stats": {"median": 1.0, "mean": 1.0, "min": 0.9, "iqr": 0.1, "n": 3}, "hashes": dict(HASHES),
            "kernel": "k", "test": "t.py::test"}
    base.update(fields)
    return base


def lock_text(entries: dict[str, Any]) -> str:
    return json.dumps({"schema": 2, "device": DEVICE, "entries": entries})


# --------------------------------------------------------------------------- 1. locked values
SPACE = {"CHUNK": [64, 128, 256], "MODE": ["fast", "safe"]}
RULES = ["CHUNK * 4 <= max_bytes"]
CONSTANTS = {"max_bytes": 1024}


@pytest.mark.parametrize("value, why", [
    ('({extern int system(const char*); system("touch pwned"); 4096;})', "is not a value of the marker's space"),
    (512, "is not a value of the marker's space"),
    ("64", "is not a value of the marker's space"),  # a string that prints like the value is another value
    (64.0, "is not a value of the marker's space"),  # so is a float
    (True, "is not a value of the marker's space"),
])
def test_a_locked_value_outside_the_space_is_refused_by_name(value: Any, why: str) -> None:
    with pytest.raises(UntrustedEntry) as info:
        trusted_params(entry(params={"CHUNK": value, "MODE": "fast"}), SPACE, RULES, CONSTANTS,
                       path="autotune.lock/cpu.json", key="t.py::test::k")
    assert f"entry 't.py::test::k': params.CHUNK = {value!r}"[:60] in str(info.value)
    assert why in str(info.value) and "autotune.lock/cpu.json" in str(info.value)


def test_the_declared_value_not_the_locks_reaches_the_build() -> None:
    space = {"CHUNK": [np.int64(64), 128], "SCALE": [0.5, 1.0], "FLAG": [False, True]}
    point = declared_configuration({"FLAG": True, "SCALE": 1.0, "CHUNK": 64}, space)
    assert point == {"CHUNK": 64, "SCALE": 1.0, "FLAG": True}
    assert list(point) == ["CHUNK", "SCALE", "FLAG"] and type(point["CHUNK"]) is int


def test_restrictions_unknown_and_missing_names_are_checked_without_building_the_space() -> None:
    with pytest.raises(NotInSpace, match=r"params .*not allowed by the marker's restrictions \(fails 'CHUNK \* 4"):
        declared_configuration({"CHUNK": 256, "MODE": "fast"}, SPACE, RULES, {"max_bytes": 512})
    with pytest.raises(NotInSpace, match=r"params.EXTRA is not a parameter of the marker's space"):
        declared_configuration({"CHUNK": 64, "MODE": "fast", "EXTRA": 1}, SPACE)
    with pytest.raises(NotInSpace, match=r"params lacks the marker's parameter\(s\) MODE"):
        declared_configuration({"CHUNK": 64}, SPACE)
    callable_rule = [lambda CHUNK, MODE: MODE == "safe" or CHUNK < 128]
    assert declared_configuration({"CHUNK": 64, "MODE": "fast"}, SPACE, callable_rule)
    with pytest.raises(NotInSpace, match="fails '<lambda>'"):
        declared_configuration({"CHUNK": 128, "MODE": "fast"}, SPACE, callable_rule)


def test_runners_up_outside_an_unchanged_space_refuse_the_entry_and_after_a_space_change_are_dropped() -> None:
    e = entry(runners_up=[{"params": {"CHUNK": 128, "MODE": "safe"}, "median": 1.2},
                          {"params": {"CHUNK": "system(1)", "MODE": "safe"}, "median": 1.3}])
    with pytest.raises(UntrustedEntry, match=r"runners_up\[1\]\.params\.CHUNK = 'system\(1\)'"):
        trusted_runners_up(e, SPACE, [], {}, space_changed=False, path="l.json", key="k")
    kept = trusted_runners_up(e, SPACE, [], {}, space_changed=True, path="l.json", key="k")
    assert [u["params"] for u in kept] == [{"CHUNK": 128, "MODE": "safe"}]


@pytest.mark.parametrize("option", ["-fplugin=/tmp/evil.so", "-Wp,-include,/etc/passwd", "-Wl,-rpath,/x",
                                    "@/tmp/options", "-o", "/tmp/x", "-I/etc", "-include", "-B/tmp", "-wrapper",
                                    "-specs=/tmp/s", "-DX=system(1)"])
def test_an_ab_baselines_compiler_options_are_the_kernels_own_or_plain_flags(option: str) -> None:
    with pytest.raises(UntrustedEntry, match=r"compiler_options\[1\] = .* is neither an option this kernel passes"):
        trusted_build(entry(compiler_options=["-O2", option]), "k", ["-O2"], path="l.json", key="k")


def test_plain_flags_and_the_kernels_own_options_are_accepted_for_an_ab_baseline() -> None:
    own = ["-I/home/me/include", "-DN=4"]
    name, options = trusted_build(entry(kernel_name="k<float, 4>",
                                        compiler_options=["-O3", "-march=native", "-ffast-math", "-DTILE=16",
                                                          "-std=c++17", "--use_fast_math", *own]),
                                  "k", own, path="l.json", key="k")
    assert name == "k<float, 4>" and options[-2:] == own
    with pytest.raises(UntrustedEntry, match=r"kernel_name = 'k<\(system\(\"x\"\), 1\)>' is not a plain"):
        trusted_build(entry(kernel_name='k<(system("x"), 1)>'), "k", [], path="l.json", key="k")


def test_probe_sizes_from_a_lock_stay_in_the_probes_range() -> None:
    assert trusted_probe_sizes(entry(machine={"triad_n": 1 << 16, "fma_iterations": 1 << 14}), path="l", key="k")
    with pytest.raises(UntrustedEntry, match=r"machine.triad_n = 1000000000000 is outside the probes' range"):
        trusted_probe_sizes(entry(machine={"triad_n": 10**12, "fma_iterations": 1 << 14}), path="l", key="k")


def test_shipped_code_lookups_check_the_locked_values_against_a_known_space(tmp_path: Path) -> None:
    lockdir = tmp_path / "autotune.lock"
    merge_entries(lockdir / "cpu-test.json", {"t.py::test::k": entry(params={"CHUNK": 512, "MODE": "fast"})},
                  DEVICE)
    clear_cache()
    assert locked_params("k", lockdir=lockdir, device="cpu-test") == {"CHUNK": 512, "MODE": "fast"}
    with pytest.raises(LockLookupError, match=r"entry 't.py::test::k': params.CHUNK = 512 is not a value of the"):
        locked_params("k", lockdir=lockdir, device="cpu-test", space=SPACE)


# --------------------------------------------------------------------------- 2. paths stay inside the lock
@pytest.mark.parametrize("field, value, why", [
    ("headers", {"../../../../victim": "sources/0123456789abcdef.h"}, "is not a relative header path"),
    ("headers", {"/abs/path/victim.h": "sources/0123456789abcdef.h"}, "is not a relative header path"),
    ("headers", {"ok.h": "../outside.h"}, "is not a stored source's name"),
    ("source_file", "../../etc/passwd", "is not a stored source's name"),
    ("source_file", "/etc/passwd", "is not a stored source's name"),
])
def test_paths_in_an_entry_are_refused_when_read(field: str, value: Any, why: str) -> None:
    with pytest.raises(InvalidEntryError, match=why) as info:
        parse_lockfile(lock_text({"t.py::test::k": entry(**{field: value})}), "cpu.json")
    assert "entry 't.py::test::k'" in str(info.value) and field in str(info.value)


def test_locked_headers_are_written_only_below_a_private_folder(tmp_path: Path) -> None:
    folder = materialize_headers({"tile.h": "#define T 4\n", "detail/pack.h": "#define P 2\n"})
    assert (folder / "detail" / "pack.h").read_text() == "#define P 2\n"
    assert folder.parent.stat().st_mode & 0o077 == 0  # nobody else can prepare what a build reads there
    with pytest.raises(LockfileError, match="not a relative path"):
        materialize_headers({"../../victim": "x"})


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder outside the lock directory, with a file that must survive."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "0123456789abcdef.c").write_text("precious\n")
    (folder / "notes.txt").write_text("precious\n")
    return folder


def test_prune_and_store_source_never_follow_a_linked_sources_folder(tmp_path: Path, outside: Path) -> None:
    lockdir = tmp_path / "autotune.lock"
    lockdir.mkdir()
    (lockdir / "sources").symlink_to(outside)
    with pytest.raises(LockfileError, match="sources: is a symbolic link"):
        unreferenced_sources(lockdir, [])
    with pytest.raises(LockfileError, match="is a symbolic link"):
        store_source(lockdir, "void k(void) {}\n", ".c")
    with pytest.raises(LockfileError, match="is a symbolic link"):
        load_source(lockdir, "sources/0123456789abcdef.c")
    assert sorted(p.name for p in outside.iterdir()) == ["0123456789abcdef.c", "notes.txt"]
    assert (outside / "0123456789abcdef.c").read_text() == "precious\n"


def test_prune_deletes_only_regular_stored_sources_inside_the_lock(tmp_path: Path, outside: Path) -> None:
    lockdir = tmp_path / "autotune.lock"
    kept = store_source(lockdir, "void kept(void) {}\n", ".c")
    gone = store_source(lockdir, "void gone(void) {}\n", ".c")
    (lockdir / "sources" / "fedcba9876543210.c").symlink_to(outside / "0123456789abcdef.c")
    (lockdir / "sources" / "README.md").write_text("ours\n")
    assert unreferenced_sources(lockdir, [kept]) == [lockdir / gone]


def test_a_stored_source_must_hold_the_text_its_name_is_the_digest_of(tmp_path: Path) -> None:
    lockdir = tmp_path / "autotune.lock"
    name = store_source(lockdir, "void k(float *x) { x[0] = 1; }\n", ".c")
    assert load_source(lockdir, name) == "void k(float *x) { x[0] = 1; }\n"
    (lockdir / name).write_text('void k(float *x) { system("touch pwned"); }\n')
    with pytest.raises(LockfileError, match="does not hold the text its name is the digest of"):
        load_source(lockdir, name)
    assert store_source(lockdir, "void k(float *x) { x[0] = 1; }\n", ".c") == name  # a re-tune repairs it
    assert load_source(lockdir, name) == "void k(float *x) { x[0] = 1; }\n"
    with pytest.raises(LockfileError, match="is not a name in sources/"):
        load_source(lockdir, "../../etc/passwd")


# --------------------------------------------------------------------------- 4. generated headers
def test_export_header_escapes_comments_and_refuses_expressions(tmp_path: Path) -> None:
    lockdir = tmp_path / "autotune.lock"
    hostile_test = 't.py::test */\n#include "/etc/passwd"\n/*'
    merge_entries(lockdir / "cpu-test.json", {"a::k": entry(test=hostile_test, kernel="k */ #include <x> /*")},
                  {**DEVICE, "model": "CPU */\n#error owned"})
    header = to_header(collect(lockdir), str(lockdir))
    for line in header.splitlines():  # what the lock said stays inside one comment on one line
        assert line.count("*/") <= 1 and not line.lstrip().startswith(("#include", "#error"))
    gcc = shutil.which("gcc")
    if gcc:  # the header is one a compiler reads as intended
        (tmp_path / "h.h").write_text(header)
        (tmp_path / "m.c").write_text('#include "h.h"\nint main(void) { return AUTOTUNE_K_INCLUDE_X_CHUNK == 64 ? 0 : 1; }\n')
        assert os.system(f"{gcc} -DAUTOTUNE_DEVICE_CPU_TEST -o {tmp_path / 'm'} {tmp_path / 'm.c'} "
                         f">/dev/null 2>&1 && {tmp_path / 'm'}") == 0
    merge_entries(lockdir / "cpu-test.json", {"a::k": entry(params={"CHUNK": "1); system(\"x\"", "MODE": "fast"})},
                  DEVICE)
    with pytest.raises(ExportError, match=r"params.CHUNK = .* cannot be written into a header"):
        to_header(collect(lockdir), str(lockdir))


# --------------------------------------------------------------------------- 5. messages, not tracebacks
def test_an_entry_without_samples_or_with_a_list_value_is_refused_when_read() -> None:
    with pytest.raises(InvalidEntryError, match=r"entry 'a::k': samples: must hold at least one measurement"):
        parse_lockfile(lock_text({"a::k": entry(samples=[])}), "cpu.json")
    with pytest.raises(InvalidEntryError, match=r"entry 'a::k': params.TILE_I: must be a number, string or boolean"):
        parse_lockfile(lock_text({"a::k": entry(params={"TILE_I": [64]})}), "cpu.json")
    with pytest.raises(InvalidEntryError, match=r"params.CHUNK: = '4\\n#include x' is not a single-line value"):
        parse_lockfile(lock_text({"a::k": entry(params={"CHUNK": "4\n#include x"})}), "cpu.json")
    with pytest.raises(InvalidEntryError, match=r"stats.median: must be a positive time"):
        parse_lockfile(lock_text({"a::k": entry(stats={"median": 0, "mean": 0, "min": 0, "iqr": 0, "n": 1})}),
                       "cpu.json")


def test_deeply_nested_json_is_a_lockfile_error_and_the_cli_exits_2(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    deep = '{"schema": 2, "device": {}, "entries": {"a::k": {"x": ' + "[" * 100_000 + "]" * 100_000 + "}}}"
    with pytest.raises(LockfileError, match="nested more than"):
        parse_lockfile(deep, "cpu.json")
    shallow_but_deep = lock_text({"a::k": entry(extra=json.loads("[" * 40 + "]" * 40))})
    with pytest.raises(LockfileError, match="nested more than 32 levels deep"):
        parse_lockfile(shallow_but_deep, "cpu.json")
    (tmp_path / "autotune.lock").mkdir()
    (tmp_path / "autotune.lock" / "cpu.json").write_text(deep)
    assert cli.main(["show", str(tmp_path / "autotune.lock")]) == 2
    assert "nested more than" in capsys.readouterr().err


def test_an_unwritable_lock_is_reported_and_left_untouched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "autotune.lock" / "cpu-test.json"
    merge_entries(path, {"a::k": entry()}, DEVICE)
    before = path.read_bytes()

    def disk_full(*args: Any) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "replace", disk_full)
    with pytest.raises(LockfileError, match=r"cpu-test.json: cannot be written: No space left on device; the "
                                            "lockfile was left untouched"):
        merge_entries(path, {"b::k": entry()}, DEVICE)
    monkeypatch.undo()
    assert path.read_bytes() == before


def test_a_linked_write_lock_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    path = tmp_path / "autotune.lock" / "cpu-test.json"
    merge_entries(path, {"a::k": entry()}, DEVICE)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    os.unlink(str(path) + ".lock") if os.path.exists(str(path) + ".lock") else None
    os.symlink(victim, str(path) + ".lock")
    with pytest.raises(LockfileError, match=r"its write lock .*cpu-test.json.lock is a symbolic link"):
        merge_entries(path, {"b::k": entry()}, DEVICE)
    assert victim.read_text() == "precious\n"


def test_lockfiles_are_read_only_from_the_lock_directory_and_within_a_size(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    lockdir = tmp_path / "autotune.lock"
    lockdir.mkdir()
    secret = tmp_path / "secret.json"
    secret.write_text(lock_text({}))
    (lockdir / "cpu.json").symlink_to(secret)
    with pytest.raises(LockfileError, match="is a symbolic link to .* outside the lock directory"):
        read_lockfile(lockdir / "cpu.json")
    os.mkfifo(lockdir / "fifo.json")  # opening a FIFO would block the run forever
    with pytest.raises(LockfileError, match="is not a regular file"):
        read_lockfile(lockdir / "fifo.json")
    (lockdir / "big.json").write_text(lock_text({"a::k": entry()}))
    monkeypatch.setattr(lockfile_module, "MAX_LOCKFILE_BYTES", 100)
    with pytest.raises(LockfileError, match="larger than a lockfile may be"):
        read_lockfile(lockdir / "big.json")


# --------------------------------------------------------------------------- end to end: plain pytest on a lock
SCALE_C = r"""
#include "factor.h"
void scale(float *out, const float *in, int n) {
    for (int i = 0; i < n; i += CHUNK)
        for (int j = 0; j < CHUNK && i + j < n; j++)
            out[i + j] = in[i + j] * FACTOR;
}
"""

SCALE_TEST = '''
import numpy as np
import pytest

N = 1 << 12


@pytest.mark.tune(params={"CHUNK": [64, 4096]}, strategy="brute_force", tolerance=5.0,
                  measure={"warmup": 1, "min_iterations": 3, "max_iterations": 5})
def test_scale(autotune):
    a = np.linspace(0, 1, N, dtype=np.float32)
    autotune.kernel("scale.c", "scale", N, [np.zeros(N, np.float32), a, np.int32(N)],
                    expected=[2 * a, None, None])
'''

# a 2 us kernel on a shared 2-core runner: the gate steps here are about refusals, not timing, so only a >6x
# slowdown would fail the final, honest gate (tolerance 5.0)
INNER = ("-p", "no:benchmark", "-p", "no:unraisableexception", "-p", "no:hypothesispytest", "-p", "no:cacheprovider")


@pytest.mark.skipif(shutil.which("gcc") is None, reason="the C runner needs gcc")
def test_plain_pytest_never_builds_what_a_tampered_lock_says(pytester: pytest.Pytester,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path_factory: pytest.TempPathFactory) -> None:
    monkeypatch.setenv("PYTEST_AUTOTUNE_CACHE_DIR", str(tmp_path_factory.mktemp("c-cache")))
    pytester.makeini("[pytest]\n")
    pytester.path.joinpath("scale.c").write_text(SCALE_C)
    pytester.path.joinpath("factor.h").write_text("#define FACTOR 2.0f\n")
    pytester.makepyfile(test_scale=SCALE_TEST)
    pytester.runpytest(*INNER, "--autotune").assert_outcomes(passed=1)
    [path] = (pytester.path / "autotune.lock").glob("*.json")
    good = json.loads(path.read_text())
    [key] = good["entries"]
    assert set(good["entries"][key]["headers"]) == {"factor.h"}

    def gate_with(**changes: Any) -> tuple[str, dict[str, Any]]:
        data = json.loads(json.dumps(good))
        data["entries"][key].update(changes)
        path.write_text(json.dumps(data))
        before = path.read_bytes()
        result = pytester.runpytest(*INNER, "--autotune-report=report.json")
        result.assert_outcomes(failed=1)
        assert path.read_bytes() == before  # reported, never rewritten
        assert "Traceback" not in result.stdout.str() and "pytest_autotune/" not in result.stdout.str()
        report = json.loads((pytester.path / "report.json").read_text())
        return result.stdout.str(), report

    injected = '({extern int system(const char*); system("touch pwned"); 4096;})'
    out, report = gate_with(params={"CHUNK": injected})
    assert f"entry '{key}': params.CHUNK = " in out and "is not a value of the marker's space" in out
    assert "nothing was compiled from this entry" in out and not (pytester.path / "pwned").exists()
    assert [(k["status"], k["kernel"]) for k in report["kernels"]] == [("refused", "scale")]

    out, _ = gate_with(params={"CHUNK": 512})  # a plain value, just not one the marker declares
    assert "params.CHUNK = 512 is not a value of the marker's space" in out

    victim = pytester.path.parent / "victim.h"
    out, _ = gate_with(headers={"../victim.h": good["entries"][key]["headers"]["factor.h"]})
    assert "headers.../victim.h: is not a relative header path" in out and "left untouched" in out
    assert not victim.exists()

    out, _ = gate_with(samples=[])
    assert "samples: must hold at least one measurement, got []" in out

    out, _ = gate_with(compiler_options=["-fplugin=/tmp/evil.so"], hashes={**good["entries"][key]["hashes"],
                                                                          "source": "0" * 16})
    assert "compiler_options[0] = '-fplugin=/tmp/evil.so' is neither an option this kernel passes" in out

    # --autotune re-tunes an entry it cannot trust, and the lock is valid again
    data = json.loads(json.dumps(good))
    data["entries"][key]["params"] = {"CHUNK": 512}
    path.write_text(json.dumps(data))
    result = pytester.runpytest(*INNER, "--autotune")
    result.assert_outcomes(passed=1)
    assert "params.CHUNK = 512 is not a value of the marker's space" in result.stdout.str()
    assert json.loads(path.read_text())["entries"][key]["params"]["CHUNK"] in (64, 4096)
    pytester.runpytest(*INNER).assert_outcomes(passed=1)


# --------------------------------------------------------------------------- fuzz: random mutations of a real lock
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

REAL_LOCK = Path(__file__).resolve().parents[2] / "example_project" / "autotune.lock" / "cpu-amd-epyc.json"
MATMUL_SPACE = {"BLOCK_I": [8, 16, 32, 64, 128, 192], "BLOCK_J": [8, 16, 32, 64, 128, 192],
                "BLOCK_K": [8, 16, 32, 64], "LOOP_ORDER": ["ijk", "ikj", "jik", "jki", "kij", "kji"],
                "UNROLL": [1, 2, 4, 8]}

_hostile_text = st.one_of(st.text(max_size=12), st.sampled_from(
    ["../../x", "/etc/passwd", "sources/0123456789abcdef.c", "*/\n#include <x>", "-fplugin=/x.so", "\x00", "64",
     "system(\"x\")", "a" * 5000]))
_json_value = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
              st.floats(allow_nan=True, allow_infinity=True), _hostile_text),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_hostile_text, inner, max_size=3)),
    max_leaves=8)


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every location in a JSON tree, the root included."""
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, prefix + (i,))
    return out


@st.composite
def mutated_locks(draw: Any) -> str:
    data = json.loads(REAL_LOCK.read_text())
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(data)
        where = draw(st.sampled_from(paths[1:]))
        parent = data
        for part in where[:-1]:
            parent = parent[part]
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "replace" or isinstance(parent, list):
            parent[where[-1]] = draw(_json_value)
        elif action == "delete":
            del parent[where[-1]]
        else:
            parent[draw(_hostile_text)] = draw(_json_value)
    text = json.dumps(data)
    if draw(st.booleans()):  # byte-level damage too
        structural = [i + 1 for i, c in enumerate(text) if c in ":[,"]  # where a value starts
        cut = draw(st.one_of(st.integers(0, len(text)), st.sampled_from(structural)))
        text = text[:cut] + draw(st.sampled_from(["", "]", "}", "\x00", "\ufffd", "<<<<<<< HEAD\n", "[" * 3000]))\
            + text[cut + draw(st.integers(0, 3)):]
    return text


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(text=mutated_locks())
@example(text=REAL_LOCK.read_text().replace('"entries": {', '"entries": {"x": ' + "[" * 3000, 1))
def test_fuzz_a_mutated_lock_gets_a_message_never_a_traceback_and_is_never_written(
        text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lockdir = tmp_path / "autotune.lock"
    shutil.rmtree(lockdir, ignore_errors=True)
    shutil.copytree(REAL_LOCK.parent, lockdir)
    (lockdir / REAL_LOCK.name).write_text(text, encoding="utf-8", errors="surrogatepass")
    before = _tree(lockdir)
    try:
        lock = parse_lockfile(text, lockdir / REAL_LOCK.name)
    except LockfileError as exc:
        assert str(exc).startswith(str(lockdir / REAL_LOCK.name))
        lock = None
    for key, e in (lock.entries if lock else {}).items():  # the gate's boundary: values, build inputs, probes
        for check in (lambda: trusted_params(e, MATMUL_SPACE, ["BLOCK_I * BLOCK_K <= 4096"], {}, path="l", key=key),
                      lambda: trusted_runners_up(e, MATMUL_SPACE, [], {}, space_changed=False, path="l", key=key),
                      lambda: trusted_build(e, "matmul", [], path="l", key=key),
                      lambda: load_source(lockdir, e.get("source_file", ""))):
            try:
                check()
            except LockfileError:  # UntrustedEntry and InvalidEntryError are LockfileErrors too
                pass
    for argv in (["show", str(lockdir)], ["export", str(lockdir), "--format", "header"],
                 ["export", str(lockdir), "--format", "json"], ["diff", str(REAL_LOCK.parent), str(lockdir)]):
        assert cli.main(argv) in (0, 1, 2), argv
    capsys.readouterr()
    assert _tree(lockdir) == before
