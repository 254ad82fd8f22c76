#!/usr/bin/env bash
# The checks only a GPU can make (docs/scale.md, "Measured on a GPU"), for a session lent one.
#
#   bash benchmarks/gpu_checks.sh --wheels        here, once: the packages the GPU image lacks (fairseq,
#                                                 hydra, omegaconf, ...) as Python 3.12 wheels, into .whl/
#   bash benchmarks/gpu_checks.sh OUT tests       there (carry .whl): pytest -m gpu, complete; OUT/pytest-gpu.log
#   bash benchmarks/gpu_checks.sh OUT benchmarks  there: benchmarks/ddp_scaling_gpu.sh into OUT/ddp-scaling-gpu*.json
#
# Each part fits one device call (10 minutes at most). PYTHON chooses the interpreter (python3).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

if [ "${1:-}" = "--wheels" ]; then
    # the GPU machine reaches no network: its image has torch, numpy, sentencepiece, sacrebleu, transformers,
    # pytest-xdist; these travel as wheels (antlr 4.9.3, hydra's parser runtime, is published as source only)
    grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
    mkdir -p .whl
    "$PYTHON" -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d .whl ve-fairseq==0.12.3 hydra-core==1.3.8 omegaconf==2.3.1 bitarray
    "$PYTHON" -m pip wheel --no-deps -w .whl antlr4-python3-runtime==4.9.3
    ls .whl
    exit 0
fi

OUT=${1:?usage: bash benchmarks/gpu_checks.sh OUT tests|benchmarks (or --wheels, here)}
PART=${2:?usage: bash benchmarks/gpu_checks.sh OUT tests|benchmarks}
mkdir -p "$OUT"
if ! "$PYTHON" -c "import fairseq" 2>/dev/null; then
    ls .whl/*.whl >/dev/null || { echo "fairseq is not installed and .whl/ holds no wheels: run --wheels here and carry .whl"; exit 2; }
    "$PYTHON" -m pip install -q --no-index --no-deps --target /tmp/langshare-site .whl/*.whl
    export PYTHONPATH="/tmp/langshare-site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
    # fairseq-train and the other console scripts next to the interpreter, where the tests and torchrun look
    ln -sf /tmp/langshare-site/bin/fairseq-* "$(dirname "$("$PYTHON" -c 'import sys; print(sys.executable)')")/"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
"$PYTHON" -c "import torch, fairseq; print('torch', torch.__version__, 'fairseq', fairseq.__version__, 'cuda', torch.cuda.is_available())"

case "$PART" in
    tests)
        timeout 560 "$PYTHON" -m pytest -m gpu tests/test_gpu.py -n 4 -q -p no:cacheprovider --durations=10 \
            2>&1 | tee "$OUT/pytest-gpu.log" ;;
    benchmarks)
        PYTHON="$PYTHON" bash benchmarks/ddp_scaling_gpu.sh "$OUT/ddp-scaling-gpu.json" ;;
    *)
        echo "unknown part $PART: tests or benchmarks"; exit 2 ;;
esac
