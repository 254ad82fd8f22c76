#!/usr/bin/env bash
# TED-8 related and diverse (Wang et al. 2020, from the TED talks of Qi et al. 2018), the latent-depth
# paper's multilingual data (App. C.1 Table 12); 32K joint SentencePiece.
# VARIANT=related|diverse|both (default both); OUT is a parent directory: OUT/ted8-<variant>.
# Other env (MIRROR, CACHE, DRY_RUN=1, LANGS, DIRECTION, VOCAB_SIZE, WORKERS, FORCE=1): data_common.sh.
# Example: MIRROR=/data/mirror VARIANT=related scripts/recipes/data_ted8.sh
set -euo pipefail
here="$(dirname "$0")"
parent="${OUT:-corpora}"
case "${VARIANT:-both}" in
  related|diverse) variants=("${VARIANT}") ;;
  both) variants=(related diverse) ;;
  *) echo "data_ted8.sh: error: VARIANT must be related, diverse or both, got '${VARIANT}'" >&2; exit 2 ;;
esac
for v in "${variants[@]}"; do
  OUT="$parent/ted8-$v" "$here/data_common.sh" "ted8-$v" "$@"
done
