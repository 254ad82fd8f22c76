#!/usr/bin/env bash
# Latent depth at equal inference cost on the offline gettext corpus (issue 13): the decoder has L
# latent layers of which each language keeps K (the defaults: commit at an eighth of the run),
# against langshare_transformer_small with K decoder layers, post-norm and pre-norm (latent depth's
# own placement); every model runs 2 + K layers per sentence. O2M selects the decoder's layers by
# target language, M2O by source language (--latent-decoder-lang src). Equal updates, the settings
# of scripts/quality_lib.sh; each run is evaluated on test with significance against the post-norm
# baseline. Re-running skips finished trainings.
#   L=8 K=3 DIRECTION=o2m SEED=1 UPDATES=2000 bash scripts/latent_depth_quality.sh
#   then: langshare compare pre=RUNS/pre_norm.json ld=RUNS/latent_depth.json ... --baseline pre
set -euo pipefail
cd "$(dirname "$0")/.."

L=${L:-8}; K=${K:-3}; SEED=${SEED:-1}; DIRECTION=${DIRECTION:-o2m}; UPDATES=${UPDATES:-2000}
OUT=${OUT:-runs/latent_depth_k${K}of${L}_$DIRECTION/seed$SEED}
source scripts/quality_lib.sh

BASE=(--arch langshare_transformer_small --encoder-layers 2 --decoder-layers "$K")
LD=(--arch latent_depth_transformer_small --encoder-layers 2 --decoder-layers "$L" --latent-decoder-target-depth "$K")
[ "$DIRECTION" = m2o ] && LD+=(--latent-decoder-lang src)
train post_norm "${BASE[@]}"
evaluate post_norm
train pre_norm "${BASE[@]}" --encoder-normalize-before --decoder-normalize-before
evaluate pre_norm "$OUT/post_norm.json"
train latent_depth "${LD[@]}"
evaluate latent_depth "$OUT/post_norm.json"
langshare analyze latent-depth "$OUT/latent_depth/checkpoint_last.pt" --log "$OUT/latent_depth.train.log" \
    --out "$OUT/latent_depth_analysis"
