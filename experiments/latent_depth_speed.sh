#!/usr/bin/env bash
# Training speed of latent_depth_transformer against the latent-depth paper's own implementation,
# same settings as the side by side (experiments/latent_depth_side_by_side_settings.sh), on a quiet machine: ROUNDS
# alternating short runs of each, then the mean words/s of fairseq's per-update records after the
# first LOG_SKIP records (start-up), per implementation, and their ratio.
#   UPDATES=60 ROUNDS=2 bash experiments/latent_depth_speed.sh
set -euo pipefail
cd "$(dirname "$0")/.."
UPDATES=${UPDATES:-60}; ROUNDS=${ROUNDS:-2}; LOG_SKIP=${LOG_SKIP:-1}
OUT=${OUT:-runs/latent_depth_speed}
source experiments/latent_depth_side_by_side_settings.sh
for ROUND in $(seq "$ROUNDS"); do
    train_reference "reference_r$ROUND"
    train_ours "ours_r$ROUND"
done
python - "$OUT" "$ROUNDS" "$LOG_SKIP" <<'PY'
import os, statistics, sys
sys.path.insert(0, "experiments")
from latent_depth_side_by_side_table import records
out, rounds, skip = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
wps = {impl: [float(r["wps"]) for n in range(1, rounds + 1)
              for r in records(os.path.join(out, f"{impl}_r{n}.log"), "train_inner")[skip:]]
       for impl in ("reference", "ours")}
for impl, values in wps.items():
    print(f"{impl}: {statistics.mean(values):.0f} words/s (mean of {len(values)} records)")
print(f"ratio (this package / reference): {statistics.mean(wps['ours']) / statistics.mean(wps['reference']):.3f}")
PY
