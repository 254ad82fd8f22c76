#!/usr/bin/env bash
# Shared by scripts/recipes/train_<paper>.sh: every method of every experiment of PAPER (the
# baseline first) through `langshare recipe run`. Usage: train_common.sh PAPER "EXPERIMENTS..."
# Environment: EXPERIMENTS (default: all of the paper's), METHODS (default: all), DATA_DIR (where
# `langshare prepare-corpus` wrote the corpora, one sub-directory per corpus name; default corpora),
# OUT (default runs/recipes/PAPER), GPUS (default 8), MAX_UPDATE (override), EXTRA (more flags),
# DRY_RUN=1 (print every command, run nothing), TINY=1 (tiny models, a few updates: smoke test).
# Relative paths are the caller's working directory's, as for scripts/recipes/data_<corpus>.sh.
set -euo pipefail
PAPER=$1
EXPERIMENTS=${EXPERIMENTS:-$2}
DATA_DIR=${DATA_DIR:-corpora}
OUT=${OUT:-runs/recipes/$PAPER}
FLAGS=()
[ "${DRY_RUN:-0}" = 1 ] && FLAGS+=(--dry-run)
[ "${TINY:-0}" = 1 ] && FLAGS+=(--tiny)
[ -n "${GPUS:-}" ] && FLAGS+=(--gpus "$GPUS")
[ -n "${MAX_UPDATE:-}" ] && FLAGS+=(--max-update "$MAX_UPDATE")
for EXP in $EXPERIMENTS; do
    echo "== $PAPER / $EXP"
    # shellcheck disable=SC2086
    langshare recipe run "$PAPER" "$EXP" ${METHODS:-} --data-root "$DATA_DIR" --out "$OUT/$EXP" \
        "${FLAGS[@]}" ${EXTRA:-}
done
