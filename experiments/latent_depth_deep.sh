#!/usr/bin/env bash
# Stable deep training (latent-depth paper, Sec. 5.1): latent_depth_transformer with a 24-layer
# decoder (K = 12) on the offline gettext corpus, CPU-sized (128-dim, 4 directions, 1024 tokens
# per batch). Prints the training-loss and gradient-norm trajectory and the final validation loss;
# a divergent run shows up as a loss that rises or becomes nan/inf.
#   UPDATES=400 bash experiments/latent_depth_deep.sh
set -euo pipefail
cd "$(dirname "$0")/.."
CORPUS=${CORPUS:-demo_run/corpus}; UPDATES=${UPDATES:-400}; LAYERS=${LAYERS:-24}; K=${K:-$((LAYERS / 2))}
OUT=${OUT:-runs/latent_depth_deep}; mkdir -p "$OUT"
PAIRS=${PAIRS:-en-fr,en-nb,en-th,en-ug}
if [ ! -e "$OUT/finished-$UPDATES" ]; then
    fairseq-train "$CORPUS/bin" --user-dir "$(pwd)/fairseq_langshare" --task multilingual_langshare \
        --langs "$(paste -sd, "$CORPUS/langs.txt")" --lang-pairs "$PAIRS" --encoder-langtok tgt \
        --sampling-method temperature --sampling-temperature 5 \
        --arch latent_depth_transformer_small --decoder-layers "$LAYERS" --latent-decoder-target-depth "$K" \
        --share-all-embeddings --dropout 0.1 --criterion langshare_label_smoothed_cross_entropy \
        --label-smoothing 0.1 --optimizer adam --adam-betas '(0.9,0.98)' --lr 0.0015 \
        --lr-scheduler inverse_sqrt --warmup-updates 200 --clip-norm 1.0 --max-tokens 1024 \
        --max-update "$UPDATES" --validate-interval-updates "$UPDATES" --save-interval-updates "$UPDATES" \
        --no-epoch-checkpoints --save-dir "$OUT/checkpoints" --cpu --num-workers 0 --seed 1 \
        --log-format json --log-interval 25 --log-file "$OUT/train.log" > "$OUT/stdout" 2>&1
    grep -q "done training" "$OUT/train.log" && touch "$OUT/finished-$UPDATES"
fi
python - "$OUT/train.log" <<'PY'
import math, sys
sys.path.insert(0, "experiments")
from latent_depth_side_by_side_table import records
rows, valid = records(sys.argv[1], "train_inner"), records(sys.argv[1], "valid")
print("update   loss    nll  gnorm  E[depth]")
for r in rows:
    print(f"{int(r['num_updates']):6d} {float(r['loss']):6.3f} {float(r['nll_loss']):6.3f} {float(r['gnorm']):6.3f}"
          f"  {float(r.get('stat_dec_depth', 'nan')):.2f}")
losses = [float(r["loss"]) for r in rows]
print(f"finite: {all(math.isfinite(x) for x in losses)}; loss {losses[0]:.3f} -> {losses[-1]:.3f}"
      + (f"; valid nll {float(valid[-1]['valid_nll_loss']):.3f}" if valid else "; no validation record"))
PY
