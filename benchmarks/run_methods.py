"""Each method against ``langshare_transformer_small`` of the same dimensions, in one run, on
the benchmark corpus of ``run_baseline`` (``benchmarks/.cache/``).

    python -m benchmarks.run_methods [--only clsr-vs-baseline] [--reps N --warmup N ...]

Targets from the issues: CLSR training step time ratio <= 1.35 (i.e. updates/s ratio >= 0.74)
and decoding tokens/s ratio >= 0.80. The papers' baselines (issue 8: language adapters, one
decoder per target family) have no target: their decoding cost is measured, as the papers report it.
"""

import sys

from .run_baseline import SMALL, run_comparisons

COMPARISONS = [
    # (name, B label, B); A is always langshare_transformer_small
    ("clsr-vs-baseline", "clsr_transformer_small (p = 0.3, target-specific encoder)",
     ["--arch", "clsr_transformer_small", "--share-all-embeddings", "--dropout", "0.1",
      "--clsr-encoder-lang", "tgt", "--clsr-budget", "0.3", "--clsr-noise-ramp-updates", "1000"]),
    *[(f"adapters-{placement}-vs-baseline", f"langshare_adapter_transformer_small --adapter-placement {placement}",
       ["--arch", "langshare_adapter_transformer_small", "--share-all-embeddings", "--dropout", "0.1",
        "--adapter-placement", placement])
      for placement in ("enc-src", "enc-src-tgt", "enc-dec", "pair")],
    ("multidecoder-vs-baseline", "langshare_multistack_transformer_small --multi-decoder tgt-family",
     ["--arch", "langshare_multistack_transformer_small", "--share-all-embeddings", "--dropout", "0.1",
      "--multi-decoder", "tgt-family"]),
]


def main(argv=None) -> int:
    comparisons = [(name, "langshare_transformer_small", SMALL, b_label, b) for name, b_label, b in COMPARISONS]
    return run_comparisons(argv, "python -m benchmarks.run_methods", __doc__.split("\n\n")[0], comparisons)


if __name__ == "__main__":
    sys.exit(main())
