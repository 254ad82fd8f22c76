#!/usr/bin/env bash
# make demo: the main job end to end on the offline default corpus.
#   1. build an English->8-languages gettext corpus (high to low resource)   ~30-60 s
#   2. train the plain multilingual baseline (langshare_transformer_small) on the CPU
#      for a bounded time (DEMO_TRAIN_HOURS, default 0.17 h ~ 10 min)
#   3. translate every test direction (beam 4) and print BLEU/chrF per direction
# Re-running reuses the corpus and the checkpoint (training resumes; it stops at once
# when the time budget is spent) and re-evaluates.
set -euo pipefail  # pipefail: a failing fairseq-train fails the demo despite the log filter
cd "$(dirname "$0")/.."

OUT=${DEMO_DIR:-demo_run}
HOURS=${DEMO_TRAIN_HOURS:-0.17}
PKG=$(pwd)/fairseq_langshare
CORPUS=$OUT/corpus

echo "== 1/3 corpus: langshare prepare-gettext -> $CORPUS"
langshare prepare-gettext --out "$CORPUS" --num-langs 8 --selection spread --direction o2m \
    --vocab-size 8000 --workers 2
LANGS=$(paste -sd, "$CORPUS/langs.txt")
PAIRS=$(cat "$CORPUS/lang_pairs.txt")
echo "   languages: $LANGS"

mkdir -p "$OUT"
echo "== 2/3 training langshare_transformer_small for up to $HOURS h (progress every 100 updates)"
fairseq-train "$CORPUS/bin" --user-dir "$PKG" --task multilingual_langshare \
    --langs "$LANGS" --lang-pairs "$PAIRS" --encoder-langtok tgt \
    --sampling-method temperature --sampling-temperature 5 \
    --arch langshare_transformer_small --share-all-embeddings --dropout 0.1 \
    --criterion langshare_label_smoothed_cross_entropy --label-smoothing 0.1 \
    --optimizer adam --adam-betas '(0.9,0.98)' --lr 0.002 --lr-scheduler inverse_sqrt --warmup-updates 400 \
    --max-tokens 2048 --max-update 2400 --stop-time-hours "$HOURS" \
    --validate-interval-updates 500 --save-interval-updates 500 --keep-interval-updates 1 \
    --no-epoch-checkpoints --save-dir "$OUT/checkpoints" \
    --cpu --num-workers 0 --seed 1 --log-format simple --log-interval 100 2>&1 \
    | tee "$OUT/train.log" \
    | { grep --line-buffered -E "train_inner|valid on|Stopping|done training|Error|error" || true; }
test -f "$OUT/checkpoints/checkpoint_last.pt" || { echo "training produced no checkpoint" >&2; exit 1; }

echo "== 3/3 evaluation: every test direction, beam 4"
langshare evaluate "$OUT/checkpoints/checkpoint_last.pt" "$CORPUS" --split test --beam 4 \
    --out-json "$OUT/results.json" --out-md "$OUT/results.md"
echo "results: $OUT/results.md and $OUT/results.json"
