"""The OpenCL tests' own guard: where the test extra installs PoCL and Oclgrind, their absence fails the
run instead of skipping every OpenCL test (a broken install must not pass as a green CI run)."""
from __future__ import annotations

import pytest

import opencl_support


@pytest.fixture
def no_opencl(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.setattr(opencl_support, "probed", lambda: {})
    monkeypatch.delenv("CI", raising=False)
    return monkeypatch


def on(monkeypatch: pytest.MonkeyPatch, system: str, machine: str) -> None:
    monkeypatch.setattr(opencl_support.sys, "platform", system)
    monkeypatch.setattr(opencl_support._platform, "machine", lambda: machine)


def test_missing_pocl_fails_where_the_test_extra_installs_it(no_opencl: pytest.MonkeyPatch) -> None:
    on(no_opencl, "linux", "x86_64")
    with pytest.raises(pytest.fail.Exception, match="needs the Portable Computing Language OpenCL platform"):
        opencl_support.require("Portable Computing Language", "PoCL")


def test_missing_pocl_skips_where_no_wheel_exists(no_opencl: pytest.MonkeyPatch) -> None:
    on(no_opencl, "darwin", "arm64")
    with pytest.raises(pytest.skip.Exception, match="pip install -e '.\\[test\\]' installs it"):
        opencl_support.require("Oclgrind", "the race checker")
    no_opencl.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception):
        opencl_support.require("Oclgrind", "the race checker")


def test_installed_platforms_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(opencl_support, "platforms", lambda: ("Oclgrind", "Portable Computing Language"))
    on(monkeypatch, "linux", "x86_64")
    opencl_support.require("Oclgrind", "the race checker")  # neither fails nor skips


def test_a_pocl_that_cannot_build_fails_where_the_test_extra_installs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Installed but unable to build (the bundled PoCL on Zen 5): no platform, and the failure says why."""
    reason = ("OpenCL device 'pthread-AMD EPYC' (PoCL 3.0-rc2, LLVM 14.0.6) cannot build a kernel: error: unknown "
              "target CPU 'generic'; install your distribution's PoCL, e.g. apt-get install pocl-opencl-icd")
    monkeypatch.setattr(opencl_support, "probed", lambda: {"Portable Computing Language": reason, "Oclgrind": None})
    monkeypatch.delenv("CI", raising=False)
    on(monkeypatch, "linux", "x86_64")
    assert opencl_support.platforms() == ("Oclgrind",)
    with pytest.raises(pytest.fail.Exception, match="unknown target CPU 'generic'; install your distribution's PoCL"):
        opencl_support.require("Portable Computing Language", "PoCL")
