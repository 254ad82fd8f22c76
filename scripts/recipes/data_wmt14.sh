#!/usr/bin/env bash
# WMT-14: the 13 English-centric WMT pairs of the CLSR paper's Table 3 (its Table 2); 64K SentencePiece.
# Env: OUT, MIRROR (else download into CACHE), DRY_RUN=1, LANGS, DIRECTION, VOCAB_SIZE, WORKERS,
# FORCE=1 (see data_common.sh); extra flags go to `langshare prepare-corpus wmt14`.
# Example: MIRROR=/data/mirror OUT=corpora/wmt14 scripts/recipes/data_wmt14.sh
set -euo pipefail
exec "$(dirname "$0")/data_common.sh" wmt14 "$@"
