#!/usr/bin/env bash
# Public-24: English and 24 languages from WMT/IWSLT/WAT/FLoRes/IITB (adaptive-sparse Table 4; its Tables 1, 3, 5); 250K SentencePiece.
# Env: OUT, MIRROR (else download into CACHE), DRY_RUN=1, LANGS, DIRECTION, VOCAB_SIZE, WORKERS,
# FORCE=1 (see data_common.sh); extra flags go to `langshare prepare-corpus public24`.
# Example: MIRROR=/data/mirror OUT=corpora/public24 scripts/recipes/data_public24.sh
set -euo pipefail
exec "$(dirname "$0")/data_common.sh" public24 "$@"
