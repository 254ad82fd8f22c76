#!/usr/bin/env bash
# The papers' baselines on the offline gettext corpus (O2M, 8 languages, the demo corpus), at the
# update budget of the methods (scripts/clsr_quality.sh): langshare_transformer_small, language
# adapters (target adapters in the top half of the encoder, ENC+DEC, pair adapters) and one
# decoder per target language family, each evaluated on every test direction with the win ratio
# against the baseline. On one-to-many data every sentence has the same source language, so
# source adapters and per-source-family encoders reduce to one shared module and are left out.
#   UPDATES=1500 OUT=runs/baselines bash scripts/baselines_quality.sh
# Re-running skips finished trainings (fairseq resumes and stops at --max-update).
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${OUT:-runs/baselines}
source scripts/quality_lib.sh

train baseline --arch langshare_transformer_small
evaluate baseline
for PLACEMENT in enc-src-tgt enc-dec pair; do
    train "adapters_$PLACEMENT" --arch langshare_adapter_transformer_small --adapter-placement "$PLACEMENT"
    evaluate "adapters_$PLACEMENT" "$OUT/baseline.json"
done
train multidecoder_tgt-family --arch langshare_multistack_transformer_small --multi-decoder tgt-family
evaluate multidecoder_tgt-family "$OUT/baseline.json"
echo "results in $OUT: baseline.md, adapters_*.md, multidecoder_*.md"
