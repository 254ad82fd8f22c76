# Sourced by experiments/latent_depth_side_by_side.sh and experiments/latent_depth_speed.sh: the two
# training commands of the side by side with the latent-depth paper's own implementation (shipped
# with fairseq: examples/latent_depth/latent_depth_src), on the same data, depth, optimiser,
# updates and seed. Set before sourcing (defaults: the CPU-scaled setting): CORPUS, SEED, UPDATES,
# WARMUP, DECODER_LAYERS, K, MAX_TOKENS, PAIRS (or "all"), OUT.
CORPUS=${CORPUS:-demo_run/corpus}
SEED=${SEED:-1}; UPDATES=${UPDATES:-600}; WARMUP=${WARMUP:-200}
DECODER_LAYERS=${DECODER_LAYERS:-6}; K=${K:-3}; MAX_TOKENS=${MAX_TOKENS:-1024}
OUT=${OUT:-runs/latent_depth_sbs}
PKG=$(pwd)/fairseq_langshare
REF=$(python -c 'import fairseq, os; print(os.path.join(os.path.dirname(fairseq.__file__), "examples/latent_depth/latent_depth_src"))')
LANGS=$(paste -sd, "$CORPUS/langs.txt")
PAIRS=${PAIRS:-en-fr,en-nb,en-th,en-ug}
[ "$PAIRS" = all ] && PAIRS=$(cat "$CORPUS/lang_pairs.txt")
NPAIRS=$(tr ',' '\n' <<< "$PAIRS" | wc -l)
# the reference's schedule: soft updates, then annealing (its README: 5000 + ... of 14000), scaled
SOFT=$((UPDATES / 6)); ANNEAL=$((UPDATES / 3))
mkdir -p "$OUT"
SHARED=(--encoder-layers 2 --decoder-layers "$DECODER_LAYERS" --encoder-embed-dim 128 --decoder-embed-dim 128
  --encoder-ffn-embed-dim 512 --decoder-ffn-embed-dim 512 --encoder-attention-heads 4 --decoder-attention-heads 4
  --encoder-normalize-before --decoder-normalize-before --share-decoder-input-output-embed --decoder-langtok
  --dropout 0.1 --label-smoothing 0.1 --optimizer adam --adam-betas '(0.9,0.98)' --lr 0.0015
  --lr-scheduler inverse_sqrt --warmup-updates "$WARMUP" --clip-norm 1.0 --max-tokens "$MAX_TOKENS"
  --max-update "$UPDATES" --seed "$SEED" --cpu --num-workers 0 --log-format json --log-interval 10
  --no-epoch-checkpoints --validate-interval-updates "$UPDATES" --save-interval-updates "$UPDATES")

train_run() {  # NAME ARGS...: fairseq-train unless finished
    local name=$1; shift
    if [ -e "$OUT/$name/finished-$UPDATES" ]; then echo "== $name: already trained"; return 0; fi
    echo "== training $name ($UPDATES updates)"
    fairseq-train "$CORPUS/bin" "$@" "${SHARED[@]}" --save-dir "$OUT/$name" --log-file "$OUT/$name.log" \
        > "$OUT/$name.stdout" 2>&1
    grep -q "done training" "$OUT/$name.log" && touch "$OUT/$name/finished-$UPDATES"
}

train_reference() {  # NAME: one batch per pair per update (round robin), its flags as its task reads them
    train_run "$1" --user-dir "$REF" --task multilingual_translation_latent_depth --lang-pairs "$PAIRS" \
        --arch latent_multilingual_transformer --share-encoders --share-decoders \
        --criterion label_smoothed_cross_entropy --decoder-latent-layer --target-layers "$K" \
        --sparsity-weight 0.1 --share-weight 0.1 --soft-update "$SOFT" --anneal-updates "$ANNEAL"
}

train_ours() {  # NAME: the same number of batches per update, sampled uniformly over the pairs
    train_run "$1" --user-dir "$PKG" --task multilingual_langshare --langs "$LANGS" --lang-pairs "$PAIRS" \
        --sampling-method uniform --update-freq "$NPAIRS" --arch latent_depth_transformer \
        --criterion langshare_label_smoothed_cross_entropy --latent-decoder-target-depth "$K" \
        --latent-kl-weight 0.1 --latent-kl-anneal-updates $((SOFT + ANNEAL)) --latent-target-depth-weight 0.1
}
