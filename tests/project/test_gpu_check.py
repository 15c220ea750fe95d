"""The device check's verdicts (tools/gpu_check.py summary) come from the reports the steps wrote, never from
exit codes; every step ends in one verdict. Rehearsed end to end on a CPU machine (tools/README.md); these pin
the reading of the reports."""
from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "tools" / "gpu_check.py")
gpu_check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_check)

DEVICE_ENV = {"device": {"model": "NVIDIA H100 80GB HBM3", "slug": "nvidia-h100-80gb-hbm3", "compute_capability": 90,
                         "versions": {"driver": "13.0", "cuda_runtime": "13.0.96"}},
              "nvrtc_unavailable": None, "nvrtc_version": "13.0",
              "cubin_load": {"ok": True, "symbol": "_Z1kILi128EEvPf", "sum": 1024.0}}
NO_DEVICE_ENV = {"nvrtc_unavailable": None, "device_error": "CUDARuntimeError: cudaErrorInsufficientDriver"}


def junit(path: Path, cases: dict[str, str]) -> None:
    """cases: name -> passed | failure | error | skipped."""
    body = []
    for name, outcome in cases.items():
        inner = "" if outcome == "passed" else f'<{outcome} message="{name} went wrong">trace</{outcome}>'
        body.append(f'<testcase classname="tests.test_x" name="{name}">{inner}</testcase>')
    path.write_text(f'<?xml version="1.0"?><testsuites><testsuite name="pytest">{"".join(body)}</testsuite>'
                    "</testsuites>")


def row(kernel: str, status: str, **extra) -> dict:
    return {"test": "tests/test_cuda_kernels.py::test_" + kernel, "kernel": kernel, "status": status, **extra}


def write(w: Path, name: str, data) -> None:
    (w / name).write_text(json.dumps(data))


@pytest.fixture
def good_run(tmp_path: Path) -> Path:
    """The reports of a run on a GPU where everything worked."""
    w = tmp_path
    write(w, "install.json", {"ok": True, "how": "pip install -e ."})
    write(w, "env.json", DEVICE_ENV)
    junit(w / "gpu_tests.xml", {"test_a": "passed", "test_b": "passed"})
    ahead = {"loaded": 30, "fallbacks": 0}
    write(w, "tune.json", {"kernels": [row("matmul", "first lock", compile_ahead=ahead),
                                       row("vector_add", "new winner", compile_ahead=ahead)]})
    write(w, "gate.json", {"kernels": [row("matmul", "pass"), row("vector_add", "faster")]})
    write(w, "static.json", {"kernels": [row("matmul", "pass", mode="static", arch="sm_90", seconds=0.8),
                                         row("vector_add", "pass", mode="static", arch="sm_90", seconds=0.6)]})
    write(w, "compile.json", {"kernels": [row("matmul", "compiled"), row("vector_add", "compiled")]})
    (w / "autotune.lock").mkdir()
    write(w / "autotune.lock", "nvidia-h100-80gb-hbm3.json", {"device": {"versions": {"driver": "13.0"}},
                                                              "entries": {"a": {}, "b": {}}})
    write(w, "ncu.json", {"available": True, "ok": True, "metrics": {"dram__bytes.sum": 1.0}})
    write(w, "pycuda.json", {"wheels": True, "installed": True})
    junit(w / "pycuda_tests.xml", {"test_pycuda": "passed"})
    junit(w / "nvrtc_tests.xml", {"test_n": "passed"})
    return w


def test_every_step_ok_on_a_good_run(good_run: Path) -> None:
    result = gpu_check.verdicts(good_run)
    assert set(result) == set(gpu_check.STEPS)
    assert {step: v for step, (v, _) in result.items() if v != "OK"} == {}
    assert result["cubins"][1] == "60 compiled-ahead cubin(s) loaded, 0 fallbacks"
    lines = gpu_check.summary_lines(result)
    assert lines[0] == "VERDICT install: OK (pip install -e .)" and len(lines) == len(gpu_check.STEPS)


def test_a_fallback_fails_the_cubin_step_naming_the_driver_error(good_run: Path) -> None:
    ahead = {"loaded": 0, "fallbacks": 12,
             "first_fallback": {"params": {"block_size_x": 128}, "error": "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"}}
    write(good_run, "tune.json", {"kernels": [row("matmul", "first lock", compile_ahead=ahead)]})
    verdict, detail = gpu_check.verdicts(good_run)["cubins"]
    assert verdict == "FAILED" and "FALLBACK: 12" in detail and "CUDA_ERROR_UNSUPPORTED_PTX_VERSION" in detail


def test_nothing_compiled_ahead_is_a_failure_too(good_run: Path) -> None:
    write(good_run, "tune.json", {"kernels": [row("matmul", "first lock")]})
    assert gpu_check.verdicts(good_run)["cubins"][0] == "FAILED"


def test_reports_missing_or_failing_are_failures_whatever_the_exit_codes(good_run: Path) -> None:
    (good_run / "gate.json").unlink()  # killed at its limit: no report
    junit(good_run / "gpu_tests.xml", {"test_a": "passed", "test_b": "failure"})
    write(good_run, "tune.json", {"kernels": [row("matmul", "failed", message="autotune: every configuration failed")]})
    result = gpu_check.verdicts(good_run)
    assert result["gate"][0] == "FAILED" and "no JSON report" in result["gate"][1]
    assert result["gpu_tests"] == ("FAILED", "1 passed, 1 failed, 0 errors, 0 skipped; first: test_b: test_b went "
                                             "wrong")
    assert result["tune"][0] == "FAILED" and "every configuration failed" in result["tune"][1]


def test_the_static_step_needs_every_rebuilt_binary_identical(good_run: Path) -> None:
    assert gpu_check.verdicts(good_run)["static"][0] == "OK"
    write(good_run, "static.json", {"kernels": [row("matmul", "changed", mode="static", arch="sm_90",
                                                    message="changed (static): registers 64 -> 72")]})
    verdict = gpu_check.verdicts(good_run)["static"]
    assert verdict[0] == "FAILED" and "registers 64 -> 72" in verdict[1]
    write(good_run, "static.json", {"kernels": [row("matmul", "no device", message="no lock entry")]})
    assert gpu_check.verdicts(good_run)["static"][0] == "FAILED"  # the tune recorded no profile


def test_skipped_gpu_tests_are_not_ok(good_run: Path) -> None:
    junit(good_run / "gpu_tests.xml", {"test_a": "skipped"})
    assert gpu_check.verdicts(good_run)["gpu_tests"][0] == "FAILED"


def test_no_device_run(good_run: Path) -> None:
    write(good_run, "env.json", NO_DEVICE_ENV)
    junit(good_run / "gpu_tests.xml", {"test_a": "error", "test_b": "error"})
    nodev = {"status": "no device", "message": "no usable device for this kernel: cudaErrorInsufficientDriver"}
    write(good_run, "tune.json", {"kernels": [row("matmul", **nodev)]})
    write(good_run, "gate.json", {"kernels": [row("matmul", **nodev)]})
    write(good_run, "static.json", {"kernels": [row("matmul", **nodev)]})
    shutil.rmtree(good_run / "autotune.lock")
    write(good_run, "ncu.json", {"available": True, "ok": False, "metrics_error": "no CUDA device"})
    result = gpu_check.verdicts(good_run)
    for step in ("env", "gpu_tests", "tune", "cubins", "gate", "static", "lockfile", "ncu"):
        assert result[step][0] == "NO DEVICE", (step, result[step])
    assert "cudaErrorInsufficientDriver" in result["env"][1]
    assert result["compile"][0] == result["nvrtc_tests"][0] == "OK"  # no device needed


def test_not_available_and_not_run(good_run: Path) -> None:
    write(good_run, "ncu.json", {"available": False, "error": "ncu not found"})
    write(good_run, "pycuda.json", {"wheels": False})
    (good_run / "nvrtc_tests.notrun").write_text("no time left (at 440 s of 450 s)")
    result = gpu_check.verdicts(good_run)
    assert result["ncu"] == ("NOT AVAILABLE", "ncu not found")
    assert result["pycuda"][0] == "NOT AVAILABLE"
    assert result["nvrtc_tests"] == ("NOT RUN", "no time left (at 440 s of 450 s)")


def test_summary_command_writes_verdicts_json(good_run: Path, capsys: pytest.CaptureFixture) -> None:
    assert gpu_check.main(["summary", str(good_run)]) == 0
    assert json.loads((good_run / "verdicts.json").read_text())["tune"][0] == "OK"
    assert capsys.readouterr().out.startswith("VERDICT install: OK")


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_script_parses_and_refuses_to_run_without_out() -> None:
    script = ROOT / "tools" / "gpu_check.sh"
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    env = {"PATH": "/usr/bin:/bin"}
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, cwd=ROOT, env=env, timeout=30)
    assert proc.returncode != 0 and "set OUT" in proc.stderr
