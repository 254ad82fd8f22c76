#!/usr/bin/env bash
# The head-to-head of every sharing strategy (docs/head_to_head.md): a thin wrapper around
# `langshare head-to-head`; every argument is passed on, e.g.
#   bash scripts/head_to_head.sh --dry-run
#   bash scripts/head_to_head.sh --directions o2m --seeds 1,2,3
# Re-running skips finished runs (finished-<updates> marker) and current evaluations.
set -euo pipefail
cd "$(dirname "$0")/.."
exec langshare head-to-head "$@"
