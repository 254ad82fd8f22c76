#!/usr/bin/env bash
# benchmarks/ddp_scaling.py on one GPU: the step time of 2 ranks against 1 rank for every method and the
# baseline, interleaved (docs/scale.md). Both ranks share GPU 0 over gloo (NCCL refuses two ranks on one
# device), so the ratios of the methods' efficiencies to the baseline's are what compares like with like;
# --together also times both processes training at once without DDP (their contention for the device alone).
# Then benchmarks/cuda_syncs.py counts each method's synchronisations per update (OUT with -syncs.json)
# and per beam-search step (-decoding-syncs.json). About 5 minutes on an H100 (model builds included);
# the JSONs go next to OUT.
#   bash benchmarks/ddp_scaling_gpu.sh OUT.json          (PYTHON=/path/to/python to choose the interpreter)
set -euo pipefail
OUT=${1:?usage: bash benchmarks/ddp_scaling_gpu.sh OUT.json}
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
timeout 420 "$PYTHON" -m benchmarks.ddp_scaling --device cuda --out "$OUT" --size small --sentences 128 \
    --updates 4 --reps 8 --warmup 2 --threads 4 --together
timeout 180 "$PYTHON" -m benchmarks.cuda_syncs --out "${OUT%.json}-syncs.json" \
    --configs baseline,adapters,multistack,lsl_search,lsl_separate_decoder,clsr,latent_depth,adaptive_sparse
timeout 180 "$PYTHON" -m benchmarks.cuda_syncs --decoding --out "${OUT%.json}-decoding-syncs.json" \
    --configs baseline,adapters,multistack,lsl_search,lsl_separate_decoder,clsr,latent_depth,adaptive_sparse
