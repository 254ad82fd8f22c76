#!/usr/bin/env bash
# Many runs of scripts/adaptive_sparse_quality.sh at once, one per (direction, seed, type): for a GPU
# machine with a CPU core per run (DEVICE=cuda trains on the GPU, each evaluation decodes on one CPU
# thread). PLAN is a list of DIRECTION:SEED:TYPE; runs go to $ROOT/<direction>/seed<seed>/, logs to
# $ROOT/logs/. Every run needs a finished baseline evaluation of its direction to report its win ratio
# against: BASELINE_O2M and BASELINE_M2O (the comparison itself is `langshare compare`, afterwards).
#   DEVICE=cuda UPDATES=2000 ROOT=runs/sparse_gpu PLAN="o2m:3:prenorm o2m:3:attn m2o:3:ffn" \
#       BASELINE_O2M=o2m_pre.json BASELINE_M2O=m2o_pre.json bash scripts/adaptive_sparse_parallel.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=${ROOT:-runs/adaptive_sparse_parallel}
mkdir -p "$ROOT/logs"
export OMP_NUM_THREADS=1 DEVICE=${DEVICE:-cuda} UPDATES=${UPDATES:-2000}
pids=()
for run in ${PLAN:?give PLAN as DIRECTION:SEED:TYPE ...}; do
    IFS=: read -r direction seed type <<<"$run"
    case $direction in
        o2m) baseline=${BASELINE_O2M:?give BASELINE_O2M} ;;
        m2o) baseline=${BASELINE_M2O:?give BASELINE_M2O} ;;
        *) echo "PLAN entry $run: the direction must be o2m or m2o" >&2; exit 2 ;;
    esac
    DIRECTION=$direction SEED=$seed TYPES=$type OUT=$ROOT/$direction/seed$seed BASELINE_JSON=$baseline \
        bash scripts/adaptive_sparse_quality.sh >"$ROOT/logs/$direction-$seed-$type.log" 2>&1 &
    pids+=($!)
done
failed=0
for pid in "${pids[@]}"; do wait "$pid" || failed=$((failed + 1)); done
echo "$failed of ${#pids[@]} runs failed (logs in $ROOT/logs)"
[ "$failed" = 0 ]
