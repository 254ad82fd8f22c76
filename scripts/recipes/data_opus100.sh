#!/usr/bin/env bash
# OPUS-100 v1.0, 99 languages to/from English + 30 zero-shot test directions (CLSR Table 1; adaptive-sparse Table 2); 64K SentencePiece.
# Env: OUT, MIRROR (else download into CACHE), DRY_RUN=1, LANGS, DIRECTION, VOCAB_SIZE, WORKERS,
# FORCE=1 (see data_common.sh); extra flags go to `langshare prepare-corpus opus100`.
# Example: MIRROR=/data/mirror OUT=corpora/opus100 scripts/recipes/data_opus100.sh
set -euo pipefail
exec "$(dirname "$0")/data_common.sh" opus100 "$@"
