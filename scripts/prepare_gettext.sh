#!/usr/bin/env bash
# Build the offline English-centric corpus from the gettext catalogues in /usr/share/locale.
# Example: scripts/prepare_gettext.sh --out data/gettext8 --num-langs 8 --selection spread
# All flags: scripts/prepare_gettext.sh --help ; eligible languages: scripts/prepare_gettext.sh --list
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-python}" -m fairseq_langshare.cli prepare-gettext "$@"
