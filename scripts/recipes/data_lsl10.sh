#!/usr/bin/env bash
# LSL paper's 10 languages, all 90 directions, Flores-101 dev/devtest (LSL Sec. 4); 250K SentencePiece. DIRECTION=groups: the zero-shot setting of its Table 6.
# Env: OUT, MIRROR (else download into CACHE), DRY_RUN=1, LANGS, DIRECTION, VOCAB_SIZE, WORKERS,
# FORCE=1 (see data_common.sh); extra flags go to `langshare prepare-corpus lsl10`.
# Example: MIRROR=/data/mirror OUT=corpora/lsl10 scripts/recipes/data_lsl10.sh
set -euo pipefail
exec "$(dirname "$0")/data_common.sh" lsl10 "$@"
