"""Each method against ``langshare_transformer_small`` of the same dimensions, in one run, on
the benchmark corpus of ``run_baseline`` (``benchmarks/.cache/``).

    python -m benchmarks.run_methods [--only clsr-vs-baseline] [--reps N --warmup N ...]

Targets from the issues: CLSR training step time ratio <= 1.35 (i.e. updates/s ratio >= 0.74)
and decoding tokens/s ratio >= 0.80; latent depth's pruned inference >= 0.95 of a static model with
as many layers; adaptive sparse's exported sub-networks >= 0.95 (FFN/layer) and > 1.0 (heads). The papers' baselines (issue 8: language adapters, one
decoder per target family) have no target: their decoding cost is measured, as the papers report it.
"""

import sys

from .run_baseline import SMALL, run_comparisons

SPARSE_BASE = ["--share-all-embeddings", "--dropout", "0.1", "--encoder-embed-dim", "128", "--decoder-embed-dim", "128",
               "--encoder-normalize-before", "--decoder-normalize-before"]
SPARSE_BASELINE = [*SMALL, "--encoder-normalize-before", "--decoder-normalize-before"]

COMPARISONS = [
    # (name, B label, B[, A]); A is langshare_transformer_small unless given
    ("clsr-vs-baseline", "clsr_transformer_small (p = 0.3, target-specific encoder)",
     ["--arch", "clsr_transformer_small", "--share-all-embeddings", "--dropout", "0.1",
      "--clsr-encoder-lang", "tgt", "--clsr-budget", "0.3", "--clsr-noise-ramp-updates", "1000"]),
    *[(f"adapters-{placement}-vs-baseline", f"langshare_adapter_transformer_small --adapter-placement {placement}",
       ["--arch", "langshare_adapter_transformer_small", "--share-all-embeddings", "--dropout", "0.1",
        "--adapter-placement", placement])
      for placement in ("enc-src", "enc-src-tgt", "enc-dec", "pair")],
    # adaptive sparse (issue 6): a pair's exported sub-network of adaptive_sparse_transformer_small
    # (3+3 layers, 4 heads, FFN 512 in 4 blocks; each language keeps 2 layers, 2 heads, 2 blocks)
    # against a langshare_transformer of the same active size, both pre-norm
    ("adaptive-sparse-heads-export-vs-baseline",
     "adaptive_sparse_single: 3+3 layers, 2 of 4 heads, FFN 512 (exported head sparsity)",
     ["--arch", "adaptive_sparse_single", *SPARSE_BASE, "--encoder-layers", "3", "--decoder-layers", "3",
      "--encoder-ffn-embed-dim", "512", "--decoder-ffn-embed-dim", "512",
      "--sparse-single-encoder-heads", "2", "--sparse-single-decoder-heads", "2"],
     [*SPARSE_BASELINE, "--encoder-layers", "3", "--decoder-layers", "3"]),
    ("adaptive-sparse-ffn-layer-export-vs-baseline",
     "fairseq transformer: 2+2 layers, FFN 256 (exported FFN-block and layer sparsity)",
     ["--arch", "transformer", *SPARSE_BASE, "--encoder-layers", "2", "--decoder-layers", "2",
      "--encoder-ffn-embed-dim", "256", "--decoder-ffn-embed-dim", "256",
      "--encoder-attention-heads", "4", "--decoder-attention-heads", "4"],
     [*SPARSE_BASELINE, "--encoder-layers", "2", "--decoder-layers", "2",
      "--encoder-ffn-embed-dim", "256", "--decoder-ffn-embed-dim", "256"]),
    # latent depth (issue 5): the full model's pruned inference (each language runs its K most
    # probable of 6 decoder layers, E[L] = K) against a static K-layer model, both pre-norm,
    # decoding one direction as fairseq-generate -s en -t fr does (in a batch that mixes target
    # languages, the union of their kept layers runs)
    ("latent-depth-pruned-vs-static",
     "latent_depth_transformer_small: 2 + 6 latent decoder layers, top 3 run per language (pruned inference)",
     ["--arch", "latent_depth_transformer_small", "--share-all-embeddings", "--dropout", "0.1",
      "--latent-decoder-target-depth", "3", "--latent-keep", "top-k", "--latent-tau-anneal-updates", "1000"],
     [*SPARSE_BASELINE, "--decoder-layers", "3"], {"decode_direction": "en-fr"}),
    ("multidecoder-vs-baseline", "langshare_multistack_transformer_small --multi-decoder tgt-family",
     ["--arch", "langshare_multistack_transformer_small", "--share-all-embeddings", "--dropout", "0.1",
      "--multi-decoder", "tgt-family"]),
]


def main(argv=None) -> int:
    comparisons = [(c[0], "langshare_transformer_small" + (" (same active size, pre-norm)" if len(c) > 3 else ""),
                    c[3] if len(c) > 3 else SMALL, c[1], c[2], *c[4:]) for c in COMPARISONS]
    return run_comparisons(argv, "python -m benchmarks.run_methods", __doc__.split("\n\n")[0], comparisons)


if __name__ == "__main__":
    sys.exit(main())
