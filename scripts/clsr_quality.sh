#!/usr/bin/env bash
# CLSR quality on the offline gettext corpus (O2M, 8 languages, the demo corpus), equal updates:
# the langshare_transformer_small baseline vs clsr_transformer_small at budgets P (default
# "0.0 0.3 1.0"), each evaluated on every test direction with the win ratio against the
# baseline, then LSScore over the budgets (Figures 3 and 6) and the derived Dedicated flags.
#   UPDATES=1500 BUDGETS="0.0 0.3 1.0" OUT=runs/clsr bash scripts/clsr_quality.sh
# Re-running skips finished trainings (fairseq resumes and stops at --max-update).
set -euo pipefail
cd "$(dirname "$0")/.."

BUDGETS=${BUDGETS:-"0.0 0.3 1.0"}
OUT=${OUT:-runs/clsr}
source scripts/quality_lib.sh

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
