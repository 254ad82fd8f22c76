#!/usr/bin/env bash
# Latent depth (Li et al., NeurIPS 2020): TED-8 related O2M, diverse O2M and M2O (Tables 3, 4, 5).
# Every method of every experiment (the baseline first) through `langshare recipe run latent_depth`:
# train with the paper's hyperparameters, average checkpoints where the paper does, evaluate as the
# paper reports, compare with the baseline. Finished runs are skipped, an interrupted one resumes.
#   bash scripts/recipes/train_latent_depth.sh                      # real size (needs the GPUs; see docs/recipes.md)
#   DRY_RUN=1 bash scripts/recipes/train_latent_depth.sh            # print every command, run nothing
#   TINY=1 DATA_DIR=corpora bash scripts/recipes/train_latent_depth.sh  # tiny models, a few updates (smoke test)
# Environment (EXPERIMENTS, METHODS, DATA_DIR, OUT, GPUS, MAX_UPDATE, EXTRA): train_common.sh.
exec "$(dirname "$0")/train_common.sh" latent_depth "related-o2m diverse-o2m diverse-m2o"
