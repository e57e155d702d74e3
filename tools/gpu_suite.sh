#!/usr/bin/env bash
# Every check that needs a CUDA device, in one command, on a machine whose python3 has torch with CUDA:
#
#     OUT=/tmp/gpu PYTHON=python3 bash tools/gpu_suite.sh
#
# 1. tools/gpu_check.py: the digits example under every precision flag (accuracy, s/epoch, peak memory);
# 2. the CUDA tests (tests/test_cuda.py and the CUDA cases of the accelerator, precision and compile tests);
# 3. tools/resume_check.py --accelerator cuda: interrupted runs resume bitwise on the GPU;
# 4. the Lightning parity matrix on one GPU (INTERLOCK_PARITY_ACCELERATOR=gpu: both frameworks, deterministic
#    kernels, plus the fp16 cases that need a GPU), compared bitwise as on the CPU.
# Each step's whole output is in $OUT/<step>.log; the last lines are printed. Exits 1 if any step failed.
set -u
OUT=${OUT:-/tmp/gpu_suite}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
JOBS=${JOBS:-8}
failed=()

step() {  # step NAME SECONDS COMMAND...
    local name=$1 limit=$2
    shift 2
    local start
    start=$(date +%s)
    echo "== $name: $*"
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    echo "== $name: exit $rc after $(($(date +%s) - start)) s"
    tail -n 30 "$OUT/$name.log"
    [ "$rc" -eq 0 ] || failed+=("$name")
}

"$PY" -c 'import torch; assert torch.cuda.is_available(), "no CUDA device"; print(torch.__version__, torch.cuda.get_device_name(0))' || exit 1
step gpu_check 100 "$PY" tools/gpu_check.py
xdist=()
"$PY" -c 'import xdist' 2>/dev/null && xdist=(-n "$JOBS")
step cuda_tests 170 "$PY" -m pytest -p no:cacheprovider "${xdist[@]}" tests/test_cuda.py tests/test_device_stats.py \
    tests/test_precision.py tests/test_accelerators.py tests/test_compiled.py tests/test_torch_flags.py
step resume_cuda 120 "$PY" tools/resume_check.py --trials "${TRIALS:-8}" --jobs "$JOBS" --accelerator cuda
step parity_gpu 170 env INTERLOCK_PARITY_ACCELERATOR=gpu "$PY" -m pytest -p no:cacheprovider "${xdist[@]}" \
    tests/parity/test_parity.py
if [ ${#failed[@]} -gt 0 ]; then
    echo "gpu_suite: FAILED: ${failed[*]}"
    exit 1
fi
echo "gpu_suite: every step passed"
