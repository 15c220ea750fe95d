"""The README's reference must cover every flag, ini option, marker argument, fixture method
and hook the code defines: this test fails when one is added without documentation."""
from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from pytest_autotune import plugin
from pytest_autotune.plugin import hookspec
from pytest_autotune.plugin.fixture import Autotune
from pytest_autotune.plugin.marker import MARKER_ARGS
from pytest_autotune.measure.timing import MeasureOptions

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
REFERENCE = README.split("## Reference", 1)[1]


class _Recorder:
    """Stands in for pytest's parser to list what the plugin registers."""

    def __init__(self) -> None:
        self.flags: list[str] = []
        self.ini: list[str] = []

    def getgroup(self, *args, **kwargs) -> "_Recorder":
        return self

    def addoption(self, *names, **kwargs) -> None:
        self.flags.extend(n for n in names if n.startswith("--"))

    def addini(self, name, *args, **kwargs) -> None:
        self.ini.append(name)


@pytest.fixture(scope="module")
def registered() -> _Recorder:
    recorder = _Recorder()
    plugin.pytest_addoption(recorder)  # type: ignore[arg-type]
    return recorder


def test_every_flag_is_documented(registered: _Recorder) -> None:
    assert registered.flags
    missing = [f for f in registered.flags if f"`{f}" not in REFERENCE]
    assert not missing, f"flags missing from the README reference: {missing}"


def test_every_ini_option_is_documented(registered: _Recorder) -> None:
    assert registered.ini
    missing = [n for n in registered.ini if f"`{n}`" not in REFERENCE]
    assert not missing, f"ini options missing from the README reference: {missing}"


def test_every_marker_argument_is_documented() -> None:
    missing = [a for a in MARKER_ARGS if f"| `{a}` |" not in REFERENCE]
    assert not missing, f"marker arguments missing from the README reference: {missing}"


def test_every_measure_option_is_documented() -> None:
    missing = [f for f in MeasureOptions.__dataclass_fields__ if f"`{f}`" not in REFERENCE]
    assert not missing, f"measure options missing from the README reference: {missing}"


def test_every_fixture_method_and_parameter_is_documented() -> None:
    methods = [name for name, fn in inspect.getmembers(Autotune, inspect.isfunction) if not name.startswith("_")]
    assert {"kernel", "function", "replay"} <= set(methods)
    for name in methods:
        row = next((line for line in REFERENCE.splitlines() if line.startswith(f"| `{name}(")), None)
        assert row is not None, f"fixture method {name}() missing from the README reference"
        params = [p for p in inspect.signature(getattr(Autotune, name)).parameters
                  if p not in ("self",) and inspect.signature(getattr(Autotune, name)).parameters[p].kind
                  is not inspect.Parameter.VAR_KEYWORD]
        undocumented = [p for p in params if p not in row]
        assert not undocumented, f"{name}(): parameters missing from the README reference: {undocumented}"


def test_every_hook_is_documented() -> None:
    hooks = [n for n, _ in inspect.getmembers(hookspec, inspect.isfunction) if n.startswith("pytest_autotune_")]
    assert hooks
    missing = [h for h in hooks if f"`{h}(" not in REFERENCE]
    assert not missing, f"hooks missing from the README reference: {missing}"


def test_readme_starts_with_the_two_setup_commands() -> None:
    setup = README.split("## Set-up on a fresh machine", 1)[1].split("##", 1)[0]
    ci = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()
    test_command = next(line.strip() for line in ci.splitlines() if "python -m pytest" in line)
    assert test_command in setup, "the README's test command and .ci/run must agree"
    assert "--autotune" in setup and "example_project" in setup


def test_the_readme_imports_work():
    """Every ``from pytest_autotune... import ...`` line the README shows imports (the top-level ``tune`` once did not)."""
    lines = sorted({line.strip() for line in README.splitlines()
                    if line.strip().startswith(("from pytest_autotune", "import pytest_autotune"))})
    assert any("import tune" in line for line in lines)
    for line in lines:
        exec(compile(line, "README.md", "exec"), {})


def test_every_console_script_command_and_flag_is_documented() -> None:
    from pytest_autotune.cli import build_parser

    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    for command, subparser in sub.choices.items():
        assert f"`pytest-autotune {command}" in REFERENCE, f"console script command {command!r} missing from the README"
        flags = [s for a in subparser._actions for s in a.option_strings if s.startswith("--") and s != "--help"]
        missing = [f for f in flags if f"{f}" not in REFERENCE]
        assert not missing, f"pytest-autotune {command}: flags missing from the README reference: {missing}"
