"""Each method against ``langshare_transformer_small`` of the same dimensions, in one run, on
the benchmark corpus of ``run_baseline`` (``benchmarks/.cache/``).

    python -m benchmarks.run_methods [--only clsr-vs-baseline] [--reps N --warmup N ...]

Targets from the issues: issue 18 (ratios of B's speed to A's): LSL decoding >= 0.97 (one
direction and mixed), training >= 0.90 with 10 languages; multi-decoder decoding >= 0.97 one
direction, >= 0.90 mixed; latent depth and adaptive layer sparsity >= 0.90 of a static model of the
same depth with target languages mixed; CLSR decoding >= 0.90 at batch 1 and 64, training step time <= 1.15x; every
method's ``*-inventory-2-vs-100`` (same data, 2 or 100 languages in --langs) within 1.10. Older:
CLSR training step time ratio <= 1.35 (i.e. updates/s ratio >= 0.74)
and decoding tokens/s ratio >= 0.80; latent depth's pruned inference >= 0.95 of a static model with
as many layers; adaptive sparse's exported sub-networks >= 0.95 (FFN/layer) and > 1.0 (heads). The papers' baselines (issue 8: language adapters, one
decoder per target family) have no target: their decoding cost is measured, as the papers report it.
"""

import sys

from .run_baseline import SMALL, run_comparisons

SPARSE_BASE = ["--share-all-embeddings", "--dropout", "0.1", "--encoder-embed-dim", "128", "--decoder-embed-dim", "128",
               "--encoder-normalize-before", "--decoder-normalize-before"]
SPARSE_BASELINE = [*SMALL, "--encoder-normalize-before", "--decoder-normalize-before"]

EN_FR = {"decode_direction": "en-fr"}
CLSR = ["--arch", "clsr_transformer_small", "--share-all-embeddings", "--dropout", "0.1",
        "--clsr-encoder-lang", "tgt", "--clsr-budget", "0.3", "--clsr-noise-ramp-updates", "1000"]
MULTIDECODER = ["--arch", "langshare_multistack_transformer_small", "--share-all-embeddings", "--dropout", "0.1",
                "--multi-decoder", "tgt-family"]
LATENT = ["--arch", "latent_depth_transformer_small", "--share-all-embeddings", "--dropout", "0.1",
          "--latent-decoder-target-depth", "3", "--latent-tau-anneal-updates", "1000"]
ADAPTIVE = ["--arch", "adaptive_sparse_transformer_small", *SPARSE_BASE, "--sparse-t-bar", "0"]
LSL_SPEC = "SRC={2,3} & TGT={5,6}"
LSL = ["--arch", "lsl_transformer_small", "--share-all-embeddings", "--dropout", "0.1", "--lsl-encoder-layers", LSL_SPEC]
SMALL_6 = [*SMALL, "--encoder-layers", "6"]  # lsl_transformer_small's depth: 6 encoder / 2 decoder layers
TEN_LANGS = ["fr", "de", "es", "nb", "sr", "nn", "th", "ug", "nso", "tg"]
ABSENT = [f"zz{i:02d}" for i in range(98)]  # inventory entries with no data
FAMILY_MAP = ",".join(["en=Germanic", "fr=Romance", *[f"{c}=Absent" for c in ABSENT]])  # covers every size


def inventory(size):
    """Settings of an inventory-scaling comparison: en-fr data, B's --langs has ``size`` languages."""
    return {"langs": ["en", "fr"], "lang_pairs": ["en-fr"], "b_langs": ["en", "fr", *ABSENT[:size - 2]]}

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
    # issue 18: one direction / mixed target languages / 10 languages / inventory scaling
    ("multidecoder-one-direction", "langshare_multistack_transformer_small --multi-decoder tgt-family, decoding en-fr",
     MULTIDECODER, SMALL, EN_FR),
    ("clsr-one-direction", "clsr_transformer_small (p = 0.3), decoding en-fr", CLSR, SMALL, EN_FR),
    ("latent-depth-pruned-vs-static-mixed",
     "latent_depth_transformer_small: 2 + 6 latent decoder layers, each target language its own top 3 "
     "(4 target languages mixed in every decoding batch)",
     [*LATENT, "--latent-keep", "top-k"], [*SPARSE_BASELINE, "--decoder-layers", "3"],
     {"b_init": "latent-distinct-plans"}),
    ("adaptive-sparse-layers-vs-static-mixed",
     "adaptive_sparse_transformer_small --sparse-types layer: 2 + 6 decoder layers, each target language its own 3 "
     "(4 target languages mixed in every decoding batch)",
     ["--arch", "adaptive_sparse_transformer_small", *SPARSE_BASE, "--sparse-types", "layer",
      "--encoder-layers", "2", "--sparse-encoder-keep-layers", "2", "--decoder-layers", "6",
      "--sparse-decoder-keep-layers", "3", "--sparse-t-bar", "0"],
     [*SPARSE_BASELINE, "--decoder-layers", "3"], {"b_init": "sparse-distinct-layers"}),
    # what splitting the rows costs: the same multi-decoder with every target language in one family (A)
    # or each in its own (B): same work per row, one decoder or four per batch
    ("multidecoder-4-families-vs-1", "multi-decoder, the 4 target languages in 4 families (decoding mixes them)",
     [*MULTIDECODER, "--language-family-map", "en=Germanic,fr=F1,nb=F2,th=F3,tg=F4"],
     [*MULTIDECODER, "--language-family-map", "en=Germanic,fr=F,nb=F,th=F,tg=F"]),
    ("lsl-vs-baseline", f"lsl_transformer_small {LSL_SPEC} (decoding mixes the 4 target languages)",
     LSL, SMALL_6),
    ("lsl-one-direction", f"lsl_transformer_small {LSL_SPEC}, decoding en-fr", LSL, SMALL_6, EN_FR),
    ("lsl-train-10-langs", f"lsl_transformer_small {LSL_SPEC}, 10 target languages in every batch", LSL, SMALL_6,
     {"corpus_langs": TEN_LANGS}),
    # inventory scaling: the same model on the same en-fr data, --langs of 2 (A) and 10 or 100 (B) languages
    *[(f"{name}-inventory-2-vs-{size}", f"{label} with {size} languages in --langs ({size - 2} absent from the data)",
       flags, flags, inventory(size)) for size in (100, 10) for name, label, flags in (
        ("lsl", f"lsl_transformer_small {LSL_SPEC}", LSL),
        ("clsr", "clsr_transformer_small (p = 0.3)", CLSR),
        ("latent-depth", "latent_depth_transformer_small (top 3 of 6 decoder layers)", [*LATENT, "--latent-keep", "top-k"]),
        ("adaptive-sparse", "adaptive_sparse_transformer_small (heads, FFN blocks and layers)", ADAPTIVE),
        ("multidecoder", "langshare_multistack_transformer_small --multi-decoder tgt-family",
         [*MULTIDECODER, "--language-family-map", FAMILY_MAP]),
    )],
]


def _a_label(a):
    if a[-1] == "en=Germanic,fr=F,nb=F,th=F,tg=F":
        return "multi-decoder, the 4 target languages in one family"
    if a is SMALL:
        return "langshare_transformer_small"
    if a is SMALL_6:
        return "langshare_transformer_small, 6 encoder layers"
    return None


def main(argv=None) -> int:
    comparisons = []
    for c in COMPARISONS:
        name, b_label, b = c[:3]
        a = c[3] if len(c) > 3 else SMALL
        if "-inventory-2-vs-" in name:
            a_label = b_label.split(" with ")[0] + " with 2 languages in --langs"
        else:
            a_label = _a_label(a) or "langshare_transformer_small (same active size, pre-norm)"
        comparisons.append((name, a_label, a, b_label, b, *c[4:]))
    return run_comparisons(argv, "python -m benchmarks.run_methods", __doc__.split("\n\n")[0], comparisons)


if __name__ == "__main__":
    sys.exit(main())
