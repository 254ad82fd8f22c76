# Shared by the quality recipes (sourced, not run): the offline gettext corpus (8 languages, 8k vocabulary;
# O2M is the head-to-head's corpus, DIRECTION=m2o the same languages into English) and one training/evaluation
# setting for every model, so runs compare at equal updates. Set UPDATES, OUT and optionally
# DIRECTION, CORPUS and SEED (default 1) before sourcing. Two recipes at once on a small
# CPU machine: give each OMP_NUM_THREADS=1 (two fairseq-train processes with one intra-op thread per
# core each oversubscribe the cores and ran 10x slower here). DEVICE=cuda trains on the GPU; decoding
# stays on the CPU (one thread), as in `langshare head-to-head --device cuda` (docs/head_to_head.md).
UPDATES=${UPDATES:-1500}
DEVICE=${DEVICE:-cpu}
case $DEVICE in cpu) CPU_FLAG=--cpu ;; cuda) CPU_FLAG= ;; *) echo "DEVICE=$DEVICE: give cpu or cuda" >&2; exit 2 ;; esac
DIRECTION=${DIRECTION:-o2m}
if [ "$DIRECTION" = o2m ]; then CORPUS=${CORPUS:-demo_run/corpus}; else CORPUS=${CORPUS:-demo_run/corpus_$DIRECTION}; fi
PKG=$(pwd)/fairseq_langshare

langshare prepare-gettext --out "$CORPUS" --num-langs 8 --selection spread --direction "$DIRECTION" \
    --vocab-size 8000 --workers 2
LANGS=$(paste -sd, "$CORPUS/langs.txt")
PAIRS=$(cat "$CORPUS/lang_pairs.txt")
mkdir -p "$OUT"

train() {  # NAME ARGS...  (re-running resumes an unfinished run and skips a finished one)
    local name=$1; shift
    if [ -e "$OUT/$name/finished-$UPDATES" ]; then
        # not even a resume: fairseq-train resumed at --max-update still runs one more update
        echo "== $name: already trained for $UPDATES updates"; return 0
    fi
    echo "== training $name ($UPDATES updates)"
    fairseq-train "$CORPUS/bin" --user-dir "$PKG" --task multilingual_langshare \
        --langs "$LANGS" --lang-pairs "$PAIRS" --encoder-langtok tgt \
        --sampling-method temperature --sampling-temperature 5 \
        --share-all-embeddings --dropout 0.1 \
        --criterion langshare_label_smoothed_cross_entropy --label-smoothing 0.1 \
        --optimizer adam --adam-betas '(0.9,0.98)' --lr 0.002 --lr-scheduler inverse_sqrt --warmup-updates 400 \
        --max-tokens 2048 --max-update "$UPDATES" --save-dir "$OUT/$name" --no-epoch-checkpoints \
        --validate-interval-updates 500 --save-interval-updates 500 --keep-interval-updates 1 \
        $CPU_FLAG --num-workers 0 --seed "${SEED:-1}" --log-format simple --log-interval 100 "$@" 2>&1 \
        | tee "$OUT/$name.train.log" \
        | { grep --line-buffered -E "train_inner|valid on|done training|Error" || true; }
    grep -q "done training" "$OUT/$name.train.log" && touch "$OUT/$name/finished-$UPDATES"
}

evaluate() {  # NAME [BASELINE_JSON]
    local name=$1 baseline=${2:-}
    langshare evaluate "$OUT/$name/checkpoint_last.pt" "$CORPUS" --split test --beam 4 --generate-args=--cpu \
        ${baseline:+--baseline "$baseline"} --out-json "$OUT/$name.json" --out-md "$OUT/$name.md"
}
