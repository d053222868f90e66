#!/usr/bin/env bash
# The GPU checks of a session lent a GPU machine, as one command (about 5 minutes on an H200):
#   OUT=<folder> bash benchmarks/gpu_session.sh        (DEVICE=cpu: a smoke run of the same steps here)
# 1. the contract suite, the precision tests and the rollback tests on $DEVICE (OFFRL_TEST_DEVICE);
# 2. gpu_check.py at the default networks (every check, both precisions) and at 4,096 units x 1,024 rows, in
#    float32 products and in TF32 (d3rlpy's setting on a CUDA machine);
# 3. with d3rlpy importable by $D3RLPY_PYTHON: algos.py's interleaved comparison at 4,096 units, TF32 in both.
# Each step has its own time limit; the full logs go to $OUT (default gpu_out), the summary to stdout.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda:0}
XDIST=()
if "$PY" -c "import xdist" 2>/dev/null; then XDIST=(-n 8); fi

echo "== tests on $DEVICE $(date +%T)"
OFFRL_TEST_DEVICE=$DEVICE timeout 200 "$PY" -m pytest tests/algos/test_contract.py tests/test_precision.py \
    tests/algos/test_divergence.py -q -p no:cacheprovider ${XDIST[@]+"${XDIST[@]}"} > "$OUT/pytest_cuda.txt" 2>&1
echo "rc=$?"; grep -E "^FAILED|^ERROR|passed|failed" "$OUT/pytest_cuda.txt" | tail -12

echo "== gpu_check, default networks $(date +%T)"
timeout 120 "$PY" benchmarks/gpu_check.py --device "$DEVICE" --steps 100 > "$OUT/gpu_check.txt" 2>&1
echo "rc=$?"; tail -18 "$OUT/gpu_check.txt"

for m in highest high; do
    echo "== gpu_check, 4,096 units x 1,024 rows, matmul precision $m $(date +%T)"
    timeout 90 "$PY" benchmarks/gpu_check.py --device "$DEVICE" --only TD3PlusBCConfig,SACConfig --hidden-units 4096,4096 \
        --batch-size 1024 --steps 30 --matmul-precision "$m" > "$OUT/gpu_check_4096_$m.txt" 2>&1
    echo "rc=$?"; tail -6 "$OUT/gpu_check_4096_$m.txt"
done

if [ -n "${D3RLPY_PYTHON:-}" ]; then
    echo "== algos.py against d3rlpy, 4,096 units x 1,024 rows, TF32 in both $(date +%T)"
    timeout 200 "$PY" benchmarks/algos.py --precision bf16-mixed --device "$DEVICE" --only TD3PlusBC,SAC,IQL \
        --hidden-units 4096,4096 --batch-size 1024 --matmul-precision high --quick > "$OUT/algos_4096.txt" 2>&1
    echo "rc=$?"; tail -8 "$OUT/algos_4096.txt"
fi
echo "== end $(date +%T)"
