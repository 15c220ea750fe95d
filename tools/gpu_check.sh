#!/usr/bin/env bash
# The device check: run from the repository root on the GPU machine as `bash tools/gpu_check.sh`, with OUT set to
# an output folder (carry .gpu, timeout_s 540; see tools/README.md). Needs no network. Ends by itself after
# DEADLINE (450) seconds: every step runs under min(its own limit, the time left), and a step with no time left is
# NOT RUN. Writes under $OUT: summary.txt (one VERDICT line per step), env.txt, verdicts.json, results.tgz (logs,
# junit XML, JSON reports, the example's lockfiles) and the example project's new lockfile (nvidia-*.json).
# Verdicts come from the reports the steps write (tools/gpu_check.py summary), not from exit codes.
set -u -o pipefail
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 COLUMNS=200 PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1
: "${OUT:?set OUT to an output folder}"
ROOT=$(pwd); PY=${PY:-python3}; W=${GPU_CHECK_WORKDIR:-/tmp/gpu_check}; DEADLINE=${DEADLINE:-450}; T0=$SECONDS
WHEELS=${GPU_CHECK_WHEELS:-$ROOT/.gpu/whl}
[ -f "$ROOT/tools/gpu_check.py" ] || { echo "run from the repository root" >&2; exit 2; }
rm -rf "$W"; mkdir -p "$W" "$OUT"
export PYTEST_AUTOTUNE_CACHE_DIR=$W/cache CUPY_CACHE_DIR=$W/cupy XDG_CACHE_HOME=$W/xdg PATH=$PATH:/usr/local/cuda/bin
export AUTOTUNE_REQUIRE_GPU=1  # the gpu-marked tests fail instead of skipping without a usable device
say() { echo "$*" | tee -a "$W/steps.txt"; }
pack() { tar czf "$OUT/.results.tgz" -C "$W" --exclude=./cache --exclude=./cupy --exclude=./xdg --exclude=./site \
  --exclude=./shim . 2>/dev/null && mv -f "$OUT/.results.tgz" "$OUT/results.tgz"; }
step() {  # step NAME MAX_S CMD...: runs under min(MAX_S, time left - 15 s); log in $W/NAME.log
  local name=$1 max=$2; shift 2
  local left=$((DEADLINE - (SECONDS - T0) - 15)); local lim=$((max < left ? max : left))
  if [ "$lim" -lt 10 ]; then
    echo "no time left (at $((SECONDS - T0)) s of $DEADLINE s)" >"$W/$name.notrun"; say "== $name: NOT RUN"; return 99
  fi
  local t=$SECONDS; timeout -k 5 "$lim" "$@" >"$W/$name.log" 2>&1; local rc=$?
  say "== $name: exit $rc after $((SECONDS - t)) s (limit $lim s; at $((SECONDS - T0)) s)"
  [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && say "   $name hit its time limit"
  tail -n 3 "$W/$name.log" | cut -c1-200 | sed 's/^/   /' | tee -a "$W/steps.txt"
  pack; return $rc
}

limit() {  # limit MAX: what step would allow a step of MAX seconds now
  local left=$((DEADLINE - (SECONDS - T0) - 15)); echo $((${1} < left ? ${1} : left))
}
pstep() {  # pstep NAME MAX PYTEST-ARGS...: a pytest step that ends its own session before the step's limit, so
  # its junit XML and JSON report are still written (pytest-timeout's --session-timeout)
  local name=$1 max=$2; shift 2; local st=""
  [ -n "$SESSION_TO" ] && [ "$(limit "$max")" -gt 30 ] && st="--session-timeout=$(($(limit "$max") - 20))"
  step "$name" "$max" $PT $st "$@"
}

say "### gpu_check $(date -u +%FT%TZ) in $ROOT (deadline $DEADLINE s)"
{ nvidia-smi; $PY -VV; command -v $PY nvcc ncu compute-sanitizer; nvcc --version | tail -2; } >"$W/machine.log" 2>&1
grep -E "Driver Version|NVIDIA H|Python 3|release" "$W/machine.log" | cut -c1-160 | tee -a "$W/steps.txt"

# 1. install without network; else the plugin's entry point from a shim dist-info and the tree on PYTHONPATH
if step install 60 $PY -m pip install --no-deps --no-build-isolation --no-index -e "$ROOT" \
   && $PY -c "import pytest_autotune, sys; sys.exit(not pytest_autotune.__file__.startswith('$ROOT'))"; then
  echo '{"ok": true, "how": "pip install --no-deps --no-build-isolation --no-index -e ."}' >"$W/install.json"
else
  S=$W/shim/pytest_autotune-0.1.0.dist-info; mkdir -p "$S"
  printf 'Metadata-Version: 2.1\nName: pytest-autotune\nVersion: 0.1.0\n' >"$S/METADATA"
  printf '[pytest11]\nautotune = pytest_autotune.plugin\n' >"$S/entry_points.txt"
  export PYTHONPATH=$W/shim:$ROOT${PYTHONPATH:+:$PYTHONPATH}
  if $PY -c "import pytest_autotune" 2>>"$W/install.log"; then
    echo '{"ok": true, "how": "editable install failed (see install.log): PYTHONPATH and an entry-point shim"}' \
      >"$W/install.json"
  else
    echo '{"ok": false, "how": "neither the editable install nor PYTHONPATH imports pytest_autotune"}' >"$W/install.json"
  fi
fi
TO=""; SESSION_TO=""
if $PY -c "import pytest_timeout" 2>/dev/null; then
  TO="--timeout=120"; $PY -m pytest --help 2>/dev/null | grep -q -- --session-timeout && SESSION_TO=1
fi
XD=""; [ "$(nproc)" -ge 8 ] && $PY -c "import xdist" 2>/dev/null && XD="-n 4"  # (2 cores: slower with xdist)
PT="$PY -m pytest -p no:cacheprovider -rfE $TO"

# 2. device and versions; an NVRTC cubin for this device loaded the way the CuPy runner loads it
step env 60 $PY tools/gpu_check.py env "$W"
$PY - "$W" >"$OUT/env.txt" 2>&1 <<'EOF'
import json, sys
env = json.load(open(sys.argv[1] + "/env.json"))
for key, value in env.items():
    print(f"{key}: {json.dumps(value, default=str)}")
EOF
cat "$OUT/env.txt" | cut -c1-200 | head -n 30

# 3. the suite's gpu-marked tests (CuPy; PyCUDA's in step 9), failing without a device
pstep gpu_tests 150 -m gpu -k "not pycuda" --junitxml="$W/gpu_tests.xml" \
  tests/backends/test_gpu_cuda.py tests/backends/test_runner_cuda.py tests/execution/test_compile_pool.py

# 4-6. the example project's CUDA kernels: tune (CuPy runner, NVRTC compile workers), gate, static gate,
# compile-check
cd "$ROOT/example_project"; export PYTHONPATH=$ROOT/example_project/src${PYTHONPATH:+:$PYTHONPATH}
EX="tests/test_cuda_kernels.py --autotune-require-device"
pstep tune 170 $EX --autotune --autotune-compile-workers=8 --autotune-report="$W/tune.json" --autotune-plots="$W/plots"
pstep gate 70 $EX --autotune-missing=fail --autotune-report="$W/gate.json"
# the static gate as a CPU runner sees these locks: the GPU hidden, each locked winner rebuilt and compared with
# the profile the tune recorded (all "pass": the lock's very binary)
CUDA_VISIBLE_DEVICES= pstep static 60 tests/test_cuda_kernels.py --autotune-report="$W/static.json"
pstep compile 120 tests/test_cuda_kernels.py --autotune-compile=sm_80,sm_90,sm_100,sm_120 \
  --autotune-compile-sample=6 --autotune-report="$W/compile.json"
mkdir -p "$W/autotune.lock"; cp autotune.lock/*.json "$W/autotune.lock/" 2>/dev/null
for f in autotune.lock/nvidia*.json; do [ -f "$f" ] && cp "$f" "$OUT/"; done
cd "$ROOT"

# 7. one kernel under Nsight Compute (--clock-control none)
step ncu 50 $PY tools/gpu_check.py ncu "$W"

# 8. PyCUDA from the wheels carried in .gpu/whl (never committed)
if ls "$WHEELS"/pycuda-*.whl >/dev/null 2>&1; then
  if $PY -m pip install -q --no-index --no-deps --no-compile --target "$W/site" "$WHEELS"/*.whl \
     >"$W/pycuda_install.log" 2>&1; then
    echo '{"wheels": true, "installed": true}' >"$W/pycuda.json"
    PYTHONPATH=$W/site:$PYTHONPATH pstep pycuda 60 -m gpu -k pycuda --junitxml="$W/pycuda_tests.xml" \
      tests/backends/test_runner_cuda.py
  else
    printf '{"wheels": true, "installed": false, "error": %s}\n' \
      "$($PY -c 'import json,sys; print(json.dumps(open(sys.argv[1]).read()[-400:]))' "$W/pycuda_install.log")" \
      >"$W/pycuda.json"
  fi
else
  echo '{"wheels": false}' >"$W/pycuda.json"
fi

# 9. NVRTC compiles of the installed NVRTC (no device needed): last, the first to give way to the deadline
pstep nvrtc_tests 150 $XD --junitxml="$W/nvrtc_tests.xml" tests/backends/test_nvrtc_compile.py tests/lifecycle/test_compile_mode_e2e.py

{ echo "### gpu_check summary ($(date -u +%FT%TZ), $((SECONDS - T0)) s)"
  $PY tools/gpu_check.py summary "$W" || echo "VERDICT summary: FAILED (tools/gpu_check.py summary crashed)"
  echo "### steps"; cat "$W/steps.txt"; } >"$OUT/summary.txt" 2>&1
cp "$W/verdicts.json" "$OUT/" 2>/dev/null
pack
grep "^VERDICT" "$OUT/summary.txt"; echo "### done in $((SECONDS - T0)) s"; ls -la "$OUT"
