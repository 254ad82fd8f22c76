#!/usr/bin/env bash
# Shared by scripts/recipes/data_<corpus>.sh: turns the environment into `langshare prepare-corpus`
# flags. Usage: data_common.sh CORPUS [extra prepare-corpus flags...]
#   OUT=DIR          output corpus directory (default: corpora/CORPUS, where `langshare recipe run --data-root corpora` looks)
#   MIRROR=DIR       read a local copy of the releases (their published layout, docs/recipes.md);
#                    without it the releases are downloaded into CACHE (default ~/.cache/langshare/corpora)
#   CACHE=DIR        download directory
#   DRY_RUN=1        print the full real-size plan (URLs, cleaning, SentencePiece, fairseq-preprocess)
#   LANGS=a,b,...    subset of the corpus languages      DIRECTION=o2m|m2o|both (lsl10: m2m|groups)
#   VOCAB_SIZE=N     override the paper's vocabulary      WORKERS=N, FORCE=1
set -euo pipefail
corpus=$1; shift
root="$(cd "$(dirname "$0")/../.." && pwd)"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
args=(prepare-corpus "$corpus" --out "${OUT:-corpora/$corpus}")
if [[ -n "${MIRROR:-}" ]]; then
  args+=(--mirror "$MIRROR")
else
  args+=(--download)
  if [[ -n "${CACHE:-}" ]]; then args+=(--cache "$CACHE"); fi
fi
if [[ "${DRY_RUN:-0}" == 1 ]]; then args+=(--dry-run); fi
if [[ -n "${LANGS:-}" ]]; then args+=(--langs "$LANGS"); fi
if [[ -n "${DIRECTION:-}" ]]; then args+=(--direction "$DIRECTION"); fi
if [[ -n "${VOCAB_SIZE:-}" ]]; then args+=(--vocab-size "$VOCAB_SIZE"); fi
if [[ -n "${WORKERS:-}" ]]; then args+=(--workers "$WORKERS"); fi
if [[ "${FORCE:-0}" == 1 ]]; then args+=(--force); fi
"${PYTHON:-python}" -m fairseq_langshare.cli "${args[@]}" "$@"
