#!/usr/bin/env bash
# Language-specific layers (Pires et al., ACL 2023): 10 languages, Flores-101; separate decoder, shared decoder, zero-shot (Tables 1, 4, 5, 6).
# Every method of every experiment (the baseline first) through `langshare recipe run lsl`:
# train with the paper's hyperparameters, average checkpoints where the paper does, evaluate as the
# paper reports, compare with the baseline. Finished runs are skipped, an interrupted one resumes.
#   bash scripts/recipes/train_lsl.sh                      # real size (needs the GPUs; see docs/recipes.md)
#   DRY_RUN=1 bash scripts/recipes/train_lsl.sh            # print every command, run nothing
#   TINY=1 DATA_DIR=corpora bash scripts/recipes/train_lsl.sh  # tiny models, a few updates (smoke test)
# Environment (EXPERIMENTS, METHODS, DATA_DIR, OUT, GPUS, MAX_UPDATE, EXTRA): train_common.sh.
exec "$(dirname "$0")/train_common.sh" lsl "lsl10 lsl10-sd lsl10-zero-shot"
