#!/usr/bin/env bash
# Adaptive sparse Transformer quality on the offline gettext corpus at equal updates: the
# langshare_transformer_small baseline (2+2 layers, 128/512, 4 heads) vs each sparsity type of the
# paper's Table 1, each with the baseline's active size as in the paper (section 5.2):
#   attn   4 heads, 3 kept per layer on the side with many languages (the paper's budget); the side
#          with one language (O2M: encoder, M2O: decoder) keeps all 4, as the baseline: a selection
#          there has no language to condition on and would only prune it (docs/adaptive_sparse.md,
#          "Attention: the side with one language");
#   ffn    on the side with many languages FFN 1024 in 8 blocks, 4 kept (512 active); the side with one
#          language keeps the baseline's dense 512 FFN (8 blocks of 64, all kept), as the paper's sizes
#          imply (docs/adaptive_sparse.md, "FFN: the side with one language"); FFN_SIDES=both widens and
#          sparsifies both sides (the script before 2026-11-27, evening);
#   layer  the target side (O2M: decoder) or source side (M2O: encoder) has 4 layers, 2 kept;
#   all    the three together;
#   prenorm  no sparsity: the baseline with pre-norm layers, as the sparse models have (Eq. 7), to
#            tell the sparsity's effect from the layer-norm placement's;
#   denseffn the pre-norm baseline with a dense FFN of 1024 on both sides (twice the baseline's FFN
#            compute): the capacity FFN_SIDES=both selects from, as a diagnostic.
# Each run is evaluated on every test direction with the win ratio against the baseline.
#   DIRECTION=o2m UPDATES=2000 OUT=runs/adaptive_sparse_o2m bash scripts/adaptive_sparse_quality.sh
#   DIRECTION=m2o UPDATES=2000 OUT=runs/adaptive_sparse_m2o bash scripts/adaptive_sparse_quality.sh
# BASELINE_JSON=path reuses a finished baseline evaluation (same corpus, same updates) instead of
# training one. Re-running skips finished trainings. The method's settings are the model's
# defaults (issue 14): auxiliary terms averaged over languages and components (--sparse-loss-reduction
# mean), logits learning 30x faster (--sparse-logit-lr-scale 30), scores starting at 0.95
# (--sparse-logit-init 3), T-bar a 32nd of the run (docs/adaptive_sparse.md, "Damping") and the layers'
# T-bar an eighth (--sparse-layer-t-bar; "Layers: a later T-bar").
# ATTN_HEADS=wide: attention at the baseline's active width instead of the paper's 3 of 4 heads: on the side
# with many languages 5 heads of 32 dims (--sparse-head-dim), 4 kept per language (docs/adaptive_sparse.md).
# SPARSE_EXTRA="..." adds flags to every sparse run (e.g. --sparse-loss-reduction sum for the old form).
set -euo pipefail
cd "$(dirname "$0")/.."

DIRECTION=${DIRECTION:-o2m}
OUT=${OUT:-runs/adaptive_sparse_$DIRECTION}
TYPES=${TYPES:-"ffn all attn layer prenorm"}
source scripts/quality_lib.sh

BASELINE_JSON=${BASELINE_JSON:-}
if [ -z "$BASELINE_JSON" ]; then
    train baseline --arch langshare_transformer_small
    evaluate baseline
    BASELINE_JSON=$OUT/baseline.json
fi
# MANY: the side with the 8 languages; ONE: the side with English only
if [ "$DIRECTION" = o2m ]; then MANY=decoder; ONE=encoder; else MANY=encoder; ONE=decoder; fi
ATTN=(--sparse-$MANY-keep-heads 3 --sparse-$ONE-keep-heads 4)
if [ "${ATTN_HEADS:-paper}" = wide ]; then  # 5 heads of 32 on the side with many languages, 4 kept: 128 active
    ATTN=(--$MANY-attention-heads 5 --sparse-head-dim 32 --sparse-$MANY-keep-heads 4 --sparse-$ONE-keep-heads 4)
fi
FFN_WIDTH=(--encoder-ffn-embed-dim 1024 --decoder-ffn-embed-dim 1024)
case ${FFN_SIDES:-many} in  # the side with one language: its FFN width and blocks kept (of 8)
    many) ONE_FFN=(512 8) ;;  # the baseline's dense FFN
    both) ONE_FFN=(1024 4) ;;  # widened and sparsified like the side with many languages
    *) echo "FFN_SIDES=$FFN_SIDES: give many (the paper's sizes) or both" >&2; exit 2 ;;
esac
FFN=(--sparse-ffn-blocks 8 --$MANY-ffn-embed-dim 1024 --sparse-$MANY-keep-blocks 4
     --$ONE-ffn-embed-dim "${ONE_FFN[0]}" --sparse-$ONE-keep-blocks "${ONE_FFN[1]}")
LAYER=(--$MANY-layers 4 --sparse-$MANY-keep-layers 2 --$ONE-layers 2 --sparse-$ONE-keep-layers 2)
for TYPE in $TYPES; do
    case $TYPE in
        attn) ARGS=(--sparse-types attn --encoder-layers 2 --decoder-layers 2 "${ATTN[@]}") ;;
        ffn) ARGS=(--sparse-types ffn --encoder-layers 2 --decoder-layers 2 "${FFN[@]}") ;;
        layer) ARGS=(--sparse-types layer "${LAYER[@]}") ;;
        all) ARGS=(--sparse-types attn,ffn,layer "${ATTN[@]}" "${FFN[@]}" "${LAYER[@]}") ;;
        prenorm|denseffn)
            name=baseline_prenorm DENSE=()
            [ "$TYPE" = denseffn ] && name=baseline_dense_ffn DENSE=("${FFN_WIDTH[@]}")
            train $name --arch langshare_transformer_small --encoder-normalize-before --decoder-normalize-before \
                ${DENSE[@]+"${DENSE[@]}"}
            evaluate $name "$BASELINE_JSON"
            continue ;;
        *) echo "unknown sparsity type $TYPE: give TYPES from 'attn ffn layer all prenorm denseffn'" >&2; exit 2 ;;
    esac
    # shellcheck disable=SC2086
    train "sparse_$TYPE" --arch adaptive_sparse_transformer_small "${ARGS[@]}" ${SPARSE_EXTRA:-}
    evaluate "sparse_$TYPE" "$BASELINE_JSON"
done
echo "results in $OUT: sparse_*.md, baseline_prenorm.md (win ratio against $BASELINE_JSON)"
