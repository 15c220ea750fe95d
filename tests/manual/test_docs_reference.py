"""The manual's reference (docs/reference/) must cover every flag, ini option, marker argument, measure
option, fixture method, hook, runner and console-script command the code defines. Everything is listed
from the live code, so a new flag (or hook, or command) fails here until it is documented.

Also the README's promises: its two set-up commands come first and match .ci/run, it stays short, and
every ``from pytest_autotune ... import ...`` line of the README and the manual imports.
"""
from __future__ import annotations

import argparse
import inspect
import re
from pathlib import Path
import pytest

import pytest_autotune.plugin as plugin
from pytest_autotune.measure.timing import MeasureOptions
from pytest_autotune.plugin import hookspec
from pytest_autotune.plugin.fixture import Autotune
from pytest_autotune.lifecycle.settings import MARKER_ARGS
from pytest_autotune.runners import opencl_device
from pytest_autotune.execution.device import _CUDA_CONSTANT_KEYS, DeviceInfo, cpu_constants

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
REFERENCE = DOCS / "reference"
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _page(name: str) -> str:
    return (REFERENCE / name).read_text(encoding="utf-8")


class _Recorder:
    """Stands in for pytest's parser to list what the plugin registers."""

    def __init__(self) -> None:
        self.flags: list[str] = []
        self.ini: list[str] = []

    def getgroup(self, *args, **kwargs) -> "_Recorder":
        return self

    def addoption(self, *names, **kwargs) -> None:
        if kwargs.get("help") != argparse.SUPPRESS:  # hidden: e.g. the old --autotune=missing, a usage error now
            self.flags.extend(n for n in names if n.startswith("--"))

    def addini(self, name, *args, **kwargs) -> None:
        self.ini.append(name)


@pytest.fixture(scope="module")
def registered() -> _Recorder:
    recorder = _Recorder()
    hook = plugin.pytest_addoption
    kwargs = {"pluginmanager": None} if "pluginmanager" in inspect.signature(hook).parameters else {}
    hook(recorder, **kwargs)  # type: ignore[arg-type]
    return recorder


def test_every_flag_is_documented(registered: _Recorder) -> None:
    page = _page("options.md")
    assert registered.flags
    missing = [f for f in registered.flags if not re.search(rf"`{re.escape(f)}(?![\w-])", page)]
    assert not missing, f"flags missing from docs/reference/options.md: {missing}"


def test_every_ini_option_is_documented(registered: _Recorder) -> None:
    page = _page("options.md")
    assert registered.ini
    missing = [n for n in registered.ini if f"| `{n}` |" not in page]
    assert not missing, f"ini options missing from docs/reference/options.md: {missing}"


def test_every_marker_argument_is_documented() -> None:
    page = _page("marker.md")
    missing = [a for a in MARKER_ARGS if f"| `{a}` |" not in page]
    assert not missing, f"marker arguments missing from docs/reference/marker.md: {missing}"


def test_every_measure_option_is_documented() -> None:
    page = _page("marker.md").split("## Measure options", 1)[1]
    missing = [f for f in MeasureOptions.__dataclass_fields__ if f"`{f}`" not in page]
    assert not missing, f"measure options missing from docs/reference/marker.md: {missing}"


def test_every_fixture_method_and_parameter_is_documented() -> None:
    autotune = Autotune
    page = _page("fixture.md")
    methods = [name for name, fn in inspect.getmembers(autotune, inspect.isfunction) if not name.startswith("_")]
    assert {"kernel", "function", "replay"} <= set(methods)
    for name in methods:
        row = next((line for line in page.splitlines() if line.startswith(f"| `{name}(")), None)
        assert row is not None, f"fixture method {name}() missing from docs/reference/fixture.md"
        params = [p.name for p in inspect.signature(getattr(autotune, name)).parameters.values()
                  if p.name != "self" and p.kind is not inspect.Parameter.VAR_KEYWORD]
        undocumented = [p for p in params if not re.search(rf"\b{p}\b", row)]
        assert not undocumented, f"{name}(): parameters missing from docs/reference/fixture.md: {undocumented}"
    kernel_args = page.split("## `kernel(...)` arguments", 1)[1].split("\n## ", 1)[0]
    params = [p for p in inspect.signature(autotune.kernel).parameters
              if p != "self" and inspect.signature(autotune.kernel).parameters[p].kind
              is not inspect.Parameter.VAR_KEYWORD]
    missing = [p for p in params if f"`{p}`" not in kernel_args]
    assert not missing, f"kernel() arguments without a row in docs/reference/fixture.md: {missing}"


def test_every_hook_is_documented() -> None:
    hooks = [n for n, _ in inspect.getmembers(hookspec, inspect.isfunction) if n.startswith("pytest_autotune_")]
    assert hooks
    page = _page("hooks.md")
    missing = [h for h in hooks if f"`{h}(" not in page]
    assert not missing, f"hooks missing from docs/reference/hooks.md: {missing}"


def test_every_console_script_command_and_flag_is_documented() -> None:
    from pytest_autotune.cli import build_parser

    page = _page("cli.md")
    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    assert sub.choices
    for command, subparser in sub.choices.items():
        assert f"`pytest-autotune {command}" in page, f"command {command!r} missing from docs/reference/cli.md"
        flags = [s for a in subparser._actions for s in a.option_strings if s.startswith("--") and s != "--help"]
        missing = [f for f in flags if not re.search(rf"{re.escape(f)}(?![\w-])", page)]
        assert not missing, f"pytest-autotune {command}: flags missing from docs/reference/cli.md: {missing}"


def test_every_runner_has_a_page_in_the_nav() -> None:
    from pytest_autotune.runners import RUNNERS

    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for name in RUNNERS:
        assert (REFERENCE / "runners" / f"{name}.md").is_file(), f"runner {name!r} has no reference page"
        assert f"reference/runners/{name}.md" in nav, f"runner {name!r}'s page is not in the mkdocs.yml nav"


@pytest.mark.parametrize("page, names", [
    ("runners/c.md", lambda: ("cpu_count", "l1d_cache", "l2_cache", "l3_cache")),
    ("runners/cupy.md", lambda: _CUDA_CONSTANT_KEYS),
    ("runners/opencl.md", lambda: (*opencl_device.CONSTANT_NAMES, *opencl_device.CUDA_ALIASES.values())),
])
def test_every_device_limit_constant_is_documented(page: str, names) -> None:
    """The constants each runner hands to restrictions (read from the code) appear on its page."""
    text = _page(page)
    missing = []
    for name in names():
        stem = re.sub(r"_[xyz]$", "", name)  # max_block_dim_x is written max_block_dim_x/y/z
        if f"`{name}`" not in text and f"`{stem}_x/y/z`" not in text:
            missing.append(name)
    assert not missing, f"constants missing from docs/reference/{page}: {missing}"


def test_the_c_runner_constants_are_what_the_code_returns() -> None:
    info = DeviceInfo(model="x", kind="cpu", properties={"cpu_count": 2, "l1d_cache": 1, "l2_cache": 2,
                                                         "l3_cache": 3, "machine": "x86_64", "max_threads": 9})
    assert set(cpu_constants(info)) == {"cpu_count", "l1d_cache", "l2_cache", "l3_cache"}


def test_readme_starts_with_the_two_setup_commands() -> None:
    commands = [line.strip() for line in README.splitlines() if line.startswith("    ") and line.strip()]
    ci = (ROOT / ".ci" / "run").read_text()
    test_command = next(line.strip() for line in ci.splitlines() if "python -m pytest" in line)
    assert commands[0] == ('python -m pip install -e ".[test]" -e ./example_project && cd example_project && '
                           'python -m pytest --autotune')
    assert commands[1] == test_command == "python -m pytest -q -n 2 --dist worksteal tests"


def test_readme_is_short() -> None:
    assert len(README.splitlines()) <= 250


def _import_lines() -> list[tuple[str, str]]:
    lines = set()
    for path in [ROOT / "README.md", *DOCS.rglob("*.md")]:
        for line in path.read_text(encoding="utf-8").splitlines():
            line = line.strip()
            if line.startswith(("from pytest_autotune", "import pytest_autotune")):
                lines.add((path.relative_to(ROOT).as_posix(), line))
    return sorted(lines)


def test_the_imports_shown_work() -> None:
    """Every ``from pytest_autotune... import ...`` line the README and the manual show imports."""
    lines = _import_lines()
    assert any("import locked_params" in line for _, line in lines)
    assert any("import tune" in line for _, line in lines)
    for where, line in lines:
        try:
            exec(compile(line, where, "exec"), {})
        except ImportError as exc:
            raise AssertionError(f"{where}: {line!r} fails: {exc}") from None


def test_the_ini_defaults_documented_are_the_code_s() -> None:
    from pytest_autotune.plugin import INI_OPTIONS

    page = _page("options.md")
    for name, (_, default) in INI_OPTIONS.items():
        row = next(line for line in page.splitlines() if line.startswith(f"| `{name}` |"))
        assert row.split("|")[2].strip() == f"`{default}`", f"{name}: documented default differs from {default!r}"


def test_the_measure_defaults_documented_are_the_code_s() -> None:
    import dataclasses

    page = _page("marker.md").split("## Measure options", 1)[1]
    for field in dataclasses.fields(MeasureOptions):
        row = next(line for line in page.splitlines()
                   if line.startswith("| `") and f"`{field.name}`" in line.split("|")[1])
        names = [n.strip(" `") for n in row.split("|")[1].split(",")]
        defaults = [d.strip(" `") for d in row.split("|")[2].split(",")]
        assert defaults[names.index(field.name)] == str(field.default), f"measure option {field.name}"


def test_every_strategy_is_named() -> None:
    from pytest_autotune.strategies.registry import available_strategies

    page = _page("marker.md").split("## Strategies", 1)[1].split("\n## ", 1)[0]
    missing = [s for s in available_strategies() if f"`{s}`" not in page]
    assert not missing, f"strategies missing from docs/reference/marker.md: {missing}"


# Where the manual lists the architectures the plugin has limits for, by the words before each list.
ARCH_LISTS = {"how-to/cuda-without-gpu.md": "each number with its source:",
              "how-to/cuda-13.md": "multiprocessor) exist for"}
_ARCH_LIST = re.compile(r"\s*sm_(\d+)((?:,\s*(?:sm_)?\d+)*)(?:,?\s+and\s+(?:sm_)?(\d+))?")


def documented_archs(text: str, anchor: str) -> list[int]:
    """The architectures of the list right after ``anchor`` ("sm_70, 72, 75 and 80" -> [70, 72, 75, 80])."""
    assert anchor in text, f"the list's anchor {anchor!r} is gone: keep it, or point ARCH_LISTS at the new words"
    found = _ARCH_LIST.match(text[text.index(anchor) + len(anchor):])
    assert found, f"no architecture list after {anchor!r}"
    return [int(found.group(1)), *map(int, re.findall(r"\d+", found.group(2))),
            *([int(found.group(3))] if found.group(3) else [])]


@pytest.mark.parametrize("page", sorted(ARCH_LISTS))
def test_the_architecture_lists_are_the_code_s(page: str) -> None:
    """Every page that lists the architectures with limits lists those of backends/cuda_arch.py (the static gate's
    occupancy table has the same, tests/static/test_occupancy.py), in order."""
    from pytest_autotune.backends.cuda_arch import ARCH_LIMITS

    text = (DOCS / page).read_text(encoding="utf-8")
    assert documented_archs(text, ARCH_LISTS[page]) == sorted(ARCH_LIMITS)


def test_the_architecture_list_reader_reads_both_forms() -> None:
    assert documented_archs("for: sm_70,\n72, 75, 100", "for:") == [70, 72, 75, 100]
    assert documented_archs("for: sm_70, sm_72, 110,\n120 and 121.", "for:") == [70, 72, 110, 120, 121]
