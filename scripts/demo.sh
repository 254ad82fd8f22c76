#!/usr/bin/env bash
# make demo: what the package is for, end to end on the offline default corpus.
#   1. build an English->8-languages gettext corpus (high to low resource)          ~30-60 s
#   2. train the shared baseline (langshare_transformer_small) and one language-sharing method
#      at equal updates and equal inference cost, both at once, one thread each    (DEMO_UPDATES)
#   3. translate every test direction (beam 4) with both, print them side by side with the win
#      ratio and sacrebleu's paired bootstrap test, and a few translations
#   4. draw what each language uses in the method (its `langshare analyze` figure)
# It is `langshare head-to-head` with two models and one seed (docs/head_to_head.md); re-running
# reuses the corpus and the finished trainings.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${DEMO_DIR:-demo_run}
METHOD=${DEMO_METHOD:-lsl}        # the method shown: a model of fairseq_langshare/recipes/head_to_head_models.py
UPDATES=${DEMO_UPDATES:-900}
# a 4k vocabulary, not the head-to-head's 8k: a third more updates per second on one CPU thread (the
# output layer is most of this model's compute) and better valid scores at equal wall time
# (docs/results.md, "make demo"); its own directories, so that it never meets an 8k corpus or run
VOCAB=${DEMO_VOCAB:-4000}
CORPUS=$OUT/corpus_v$VOCAB
RUNS=$OUT/runs_v$VOCAB

echo "== 1/4 corpus: langshare prepare-gettext -> $CORPUS"
langshare prepare-gettext --out "$CORPUS" --num-langs 8 --selection spread --direction o2m \
    --vocab-size "$VOCAB" --workers 2
echo "   languages: $(paste -sd, "$CORPUS/langs.txt")"

echo "== 2-4/4 baseline vs $METHOD: $UPDATES updates each, two trainings at once (progress in $RUNS/o2m/*/seed1/train.log)"
langshare head-to-head --models "baseline,$METHOD" --directions o2m --seeds 1 --updates "$UPDATES" --jobs 2 \
    --corpus "o2m=$CORPUS" --runs-dir "$RUNS" --out-json "$OUT/head_to_head.json" \
    --out-md "$OUT/results.md" --figure "$OUT/head_to_head.png" --examples 2 --analyze
echo "results: $OUT/results.md, $OUT/head_to_head.json, $OUT/head_to_head.png; what each language uses: $RUNS/o2m/$METHOD/seed1/analysis/"
