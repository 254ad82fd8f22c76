#!/usr/bin/env bash
# CLSR quality on the offline gettext corpus (O2M, 8 languages, the demo corpus), equal updates:
# the langshare_transformer_small baseline vs clsr_transformer_small at budgets P (default
# "0.0 0.3 1.0"), each evaluated on every test direction with the win ratio against the
# baseline, then LSScore over the budgets (Figures 3 and 6) and the derived Dedicated flags.
#   UPDATES=1500 BUDGETS="0.0 0.3 1.0" OUT=runs/clsr bash scripts/clsr_quality.sh
# Re-running skips finished trainings (fairseq resumes and stops at --max-update).
set -euo pipefail
cd "$(dirname "$0")/.."

UPDATES=${UPDATES:-1500}
BUDGETS=${BUDGETS:-"0.0 0.3 1.0"}
OUT=${OUT:-runs/clsr}
CORPUS=${CORPUS:-demo_run/corpus}
PKG=$(pwd)/fairseq_langshare

langshare prepare-gettext --out "$CORPUS" --num-langs 8 --selection spread --direction o2m \
    --vocab-size 8000 --workers 2
LANGS=$(paste -sd, "$CORPUS/langs.txt")
PAIRS=$(cat "$CORPUS/lang_pairs.txt")
mkdir -p "$OUT"

train() {  # NAME ARGS...
    local name=$1; shift
    echo "== training $name ($UPDATES updates)"
    fairseq-train "$CORPUS/bin" --user-dir "$PKG" --task multilingual_langshare \
        --langs "$LANGS" --lang-pairs "$PAIRS" --encoder-langtok tgt \
        --sampling-method temperature --sampling-temperature 5 \
        --share-all-embeddings --dropout 0.1 \
        --criterion langshare_label_smoothed_cross_entropy --label-smoothing 0.1 \
        --optimizer adam --adam-betas '(0.9,0.98)' --lr 0.002 --lr-scheduler inverse_sqrt --warmup-updates 400 \
        --max-tokens 2048 --max-update "$UPDATES" --save-dir "$OUT/$name" --no-epoch-checkpoints \
        --validate-interval-updates 500 --save-interval-updates 500 --keep-interval-updates 1 \
        --cpu --num-workers 0 --seed 1 --log-format simple --log-interval 100 "$@" 2>&1 \
        | tee "$OUT/$name.train.log" \
        | { grep --line-buffered -E "train_inner|valid on|done training|Error" || true; }
}

evaluate() {  # NAME [BASELINE_JSON]
    local name=$1 baseline=${2:-}
    langshare evaluate "$OUT/$name/checkpoint_last.pt" "$CORPUS" --split test --beam 4 \
        ${baseline:+--baseline "$baseline"} --out-json "$OUT/$name.json" --out-md "$OUT/$name.md"
}

train baseline --arch langshare_transformer_small
evaluate baseline
GATES=()
for P in $BUDGETS; do
    train "clsr_p$P" --arch clsr_transformer_small --clsr-encoder-lang tgt --clsr-budget "$P"
    evaluate "clsr_p$P" "$OUT/baseline.json"
    langshare analyze clsr "$OUT/clsr_p$P/checkpoint_last.pt" --split test --out "$OUT/gates_p$P"
    GATES+=("$OUT/gates_p$P/gates.json")
done
langshare analyze clsr-lsscore "${GATES[@]}" --manifest "$CORPUS/manifest.json" --out "$OUT/lsscore"
echo "results in $OUT: baseline.md, clsr_p*.md, lsscore/"
