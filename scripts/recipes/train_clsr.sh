#!/usr/bin/env bash
# CLSR (Zhang et al., ICLR 2021): OPUS-100 and WMT-14, O2M and M2O, original and oversampled data (Tables 1, 2, 7; Figures 2, 4).
# Every method of every experiment (the baseline first) through `langshare recipe run clsr`:
# train with the paper's hyperparameters, average checkpoints where the paper does, evaluate as the
# paper reports, compare with the baseline. Finished runs are skipped, an interrupted one resumes.
#   bash scripts/recipes/train_clsr.sh                      # real size (needs the GPUs; see docs/recipes.md)
#   DRY_RUN=1 bash scripts/recipes/train_clsr.sh            # print every command, run nothing
#   TINY=1 DATA_DIR=corpora bash scripts/recipes/train_clsr.sh  # tiny models, a few updates (smoke test)
# Environment (EXPERIMENTS, METHODS, DATA_DIR, OUT, GPUS, MAX_UPDATE, EXTRA): train_common.sh.
exec "$(dirname "$0")/train_common.sh" clsr "opus100-o2m opus100-m2o opus100-o2m-oversample opus100-m2o-oversample wmt14-o2m wmt14-m2o wmt14-o2m-oversample wmt14-m2o-oversample"
