#!/usr/bin/env bash
# latent_depth_transformer side by side with the latent-depth paper's own implementation on the
# offline gettext corpus, at the same depth, data, optimiser, updates and seed (docs/latent_depth.md,
# "Side by side"); the settings and both training commands are in experiments/latent_depth_side_by_side_settings.sh.
#   SEED=1 bash experiments/latent_depth_side_by_side.sh   # then SEED=2
#   python experiments/latent_depth_side_by_side_table.py runs/latent_depth_sbs   # the table
# The CPU default is scaled down (4 directions, 2 + 6 layers, K = 3, 600 updates of 4 x 1024
# tokens); the documented size is PAIRS=all DECODER_LAYERS=12 K=6 UPDATES=3000 MAX_TOKENS=2048.
# Writes $OUT/{reference,ours}_s$SEED.{log,stdout} and per-direction generations *.gen; finished
# runs and generations are skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
source experiments/latent_depth_side_by_side_settings.sh
train_reference "reference_s$SEED"
train_ours "ours_s$SEED"

# BLEU per direction, the same scorer for both (sacrebleu on de-sentencepieced output), beam 5.
# The reference's checkpoints hold an argparse.Namespace: allow-list exactly that class.
SAFEGEN='import argparse, runpy, sys, torch; torch.serialization.add_safe_globals([argparse.Namespace]); sys.argv[0] = "fairseq-generate"; runpy.run_module("fairseq_cli.generate", run_name="__main__")'
for T in $(tr ',' '\n' <<< "$PAIRS" | cut -d- -f2); do
    GEN=(--gen-subset test --beam 5 --max-tokens 4096 --remove-bpe sentencepiece --scoring sacrebleu --cpu
         --num-workers 0 --seed "$SEED" -s en -t "$T" --decoder-langtok)
    if [ ! -s "$OUT/reference_s$SEED.en-$T.gen" ]; then
        python -c "$SAFEGEN" "$CORPUS/bin" --user-dir "$REF" --task multilingual_translation_latent_depth \
            --decoder-latent-layer --lang-pairs "$PAIRS" --path "$OUT/reference_s$SEED/checkpoint_last.pt" \
            "${GEN[@]}" > "$OUT/reference_s$SEED.en-$T.gen.tmp"
        mv "$OUT/reference_s$SEED.en-$T.gen.tmp" "$OUT/reference_s$SEED.en-$T.gen"
    fi
    if [ ! -s "$OUT/ours_s$SEED.en-$T.gen" ]; then
        fairseq-generate "$CORPUS/bin" --user-dir "$PKG" --task multilingual_langshare --langs "$LANGS" \
            --lang-pairs "$PAIRS" --path "$OUT/ours_s$SEED/checkpoint_last.pt" "${GEN[@]}" \
            > "$OUT/ours_s$SEED.en-$T.gen.tmp"
        mv "$OUT/ours_s$SEED.en-$T.gen.tmp" "$OUT/ours_s$SEED.en-$T.gen"
    fi
done
tail -n 1 "$OUT"/*_s"$SEED".en-*.gen
