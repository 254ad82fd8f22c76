"""Each method against ``langshare_transformer_small`` of the same dimensions, in one run, on
the benchmark corpus of ``run_baseline`` (``benchmarks/.cache/``).

    python -m benchmarks.run_methods [--only clsr-vs-baseline] [--reps N --warmup N ...]

Targets from the issues: CLSR training step time ratio <= 1.35 (i.e. updates/s ratio >= 0.74)
and decoding tokens/s ratio >= 0.80.
"""

import sys

from .run_baseline import SMALL, run_comparisons

COMPARISONS = [
    # (name, B label, B); A is always langshare_transformer_small
    ("clsr-vs-baseline", "clsr_transformer_small (p = 0.3, target-specific encoder)",
     ["--arch", "clsr_transformer_small", "--share-all-embeddings", "--dropout", "0.1",
      "--clsr-encoder-lang", "tgt", "--clsr-budget", "0.3", "--clsr-noise-ramp-updates", "1000"]),
]


def main(argv=None) -> int:
    comparisons = [(name, "langshare_transformer_small", SMALL, b_label, b) for name, b_label, b in COMPARISONS]
    return run_comparisons(argv, "python -m benchmarks.run_methods", __doc__.split("\n\n")[0], comparisons)


if __name__ == "__main__":
    sys.exit(main())
