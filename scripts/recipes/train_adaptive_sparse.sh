#!/usr/bin/env bash
# Adaptive sparse Transformer (2022): Public-24 O2M and M2O, OPUS-100 M2M with zero-shot (Tables 1, 2).
# Every method of every experiment (the baseline first) through `langshare recipe run adaptive_sparse`:
# train with the paper's hyperparameters, average checkpoints where the paper does, evaluate as the
# paper reports, compare with the baseline. Finished runs are skipped, an interrupted one resumes.
#   bash scripts/recipes/train_adaptive_sparse.sh                      # real size (needs the GPUs; see docs/recipes.md)
#   DRY_RUN=1 bash scripts/recipes/train_adaptive_sparse.sh            # print every command, run nothing
#   TINY=1 DATA_DIR=corpora bash scripts/recipes/train_adaptive_sparse.sh  # tiny models, a few updates (smoke test)
# Environment (EXPERIMENTS, METHODS, DATA_DIR, OUT, GPUS, MAX_UPDATE, EXTRA): train_common.sh.
exec "$(dirname "$0")/train_common.sh" adaptive_sparse "public24-o2m public24-m2o opus100-m2m"
