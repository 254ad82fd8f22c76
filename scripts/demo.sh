#!/usr/bin/env bash
# make demo: what the package is for, end to end on the offline default corpus.
#   1. build an 8-languages->English gettext corpus (high to low resource)            ~30-60 s
#   2. train the shared baseline (langshare_transformer_small) and one language-sharing method
#      at equal updates and equal inference cost, both at once, one thread each    (DEMO_UPDATES)
#   3. translate every test direction (beam 4) with both, print them side by side with the win
#      ratio and sacrebleu's paired bootstrap test, and a few translations
#   4. draw what each language uses in the method (its `langshare analyze` figure)
# It is `langshare head-to-head` with two models and one seed (docs/head_to_head.md); re-running
# reuses the corpus and the finished trainings. Many-to-English, 1,024-token batches, no dropout,
# temperature 1 and a 4k vocabulary (the head-to-head: both directions, 2,048 tokens, dropout 0.1,
# temperature 5, 8k) were chosen on valid data for readable translations in the minutes the demo
# has (docs/results.md, "make demo"); they make the demo's table a demonstration, not evidence.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${DEMO_DIR:-demo_run}
METHOD=${DEMO_METHOD:-lsl}        # the method shown: a model of fairseq_langshare/recipes/head_to_head_models.py
UPDATES=${DEMO_UPDATES:-2200}
DIRECTION=${DEMO_DIRECTION:-m2o}  # into English: one target language, readable by every reader
# fairseq-train flags after the head-to-head's: small batches run twice the updates per second on one
# thread, dropout only slows a model that sees its data about once, sampling directions in proportion
# to their data (temperature 1, the head-to-head's is 5) trains the large directions the examples
# show, and validating (which every saved checkpoint does) twice instead of every 500 updates keeps
# the demo inside its minutes
HALF=$(( (UPDATES + 1) / 2 ))
TRAIN_FLAGS=${DEMO_TRAIN_FLAGS:---max-tokens 1024 --dropout 0 --sampling-temperature 1 --save-interval-updates $HALF --validate-interval-updates $HALF}
# the output layer (vocabulary x 128) is most of this model's compute; the demo's own directories, so
# that its corpus and runs never meet the head-to-head's 8k ones
VOCAB=${DEMO_VOCAB:-4000}
CORPUS=$OUT/corpus_${DIRECTION}_v$VOCAB
RUNS=$OUT/runs_${DIRECTION}_v$VOCAB

echo "== 1/4 corpus: langshare prepare-gettext -> $CORPUS"
langshare prepare-gettext --out "$CORPUS" --num-langs 8 --selection spread --direction "$DIRECTION" \
    --vocab-size "$VOCAB" --workers 2
echo "   languages: $(paste -sd, "$CORPUS/langs.txt")"

echo "== 2-4/4 baseline vs $METHOD ($DIRECTION): $UPDATES updates each, two trainings at once (progress in $RUNS/$DIRECTION/*/seed1/train.log)"
langshare head-to-head --models "baseline,$METHOD" --directions "$DIRECTION" --seeds 1 --updates "$UPDATES" --jobs 2 \
    --train-flags="$TRAIN_FLAGS" --corpus "$DIRECTION=$CORPUS" --runs-dir "$RUNS" --out-json "$OUT/head_to_head.json" \
    --out-md "$OUT/results.md" --figure "$OUT/head_to_head.png" --readme "$OUT/standings.md" --examples 3 --analyze
echo "results: $OUT/results.md, $OUT/head_to_head.json, $OUT/head_to_head.png, $OUT/standings.md; what each language uses: $RUNS/$DIRECTION/$METHOD/seed1/analysis/"
