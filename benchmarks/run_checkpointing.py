"""Activation checkpointing per method: each model against itself with ``--checkpoint-activations``,
in one run, on the benchmark corpus of ``run_baseline`` (``benchmarks/.cache/``).

    python -m benchmarks.run_checkpointing [--only clsr-checkpointing] [--reps N ...]

What it shows: the training peak memory and step time that recomputation trades, for the baseline
and for the methods whose layers route by language inside the recomputed call (adapters, CLSR,
adaptive sparsity, LSL's LS-FFN), which recompute with the forward call's language ids
(``fairseq_langshare/modules/activation_checkpointing.py``). Expected, decided before the first
run: each method's ratios (B / A: training peak, step time) within 0.05 of the baseline's.
"""

import sys

from .run_baseline import SMALL, run_comparisons
from .run_methods import ADAPTIVE, CLSR, LSL

ADAPTERS = ["--arch", "langshare_adapter_transformer_small", "--share-all-embeddings", "--dropout", "0.1",
            "--adapter-placement", "enc-dec"]
LSL_FFN = [*LSL, "--lsl-component", "ffn"]
METHODS = [("baseline", "langshare_transformer_small", SMALL),
           ("adapters", "langshare_adapter_transformer_small --adapter-placement enc-dec", ADAPTERS),
           ("clsr", "clsr_transformer_small", CLSR),
           ("adaptive-sparse", "adaptive_sparse_transformer_small, phase 2 (T-bar 0)", ADAPTIVE),
           ("lsl-ffn", "lsl_transformer_small --lsl-component ffn", LSL_FFN)]
DECODE = {"decode_sentences": 64, "decode_single_sentences": 4}  # decoding does not recompute: a short check
COMPARISONS = [(f"{name}-checkpointing", label, flags, f"{label} --checkpoint-activations",
                [*flags, "--checkpoint-activations"], DECODE) for name, label, flags in METHODS]


def main(argv=None) -> int:
    return run_comparisons(argv, "python -m benchmarks.run_checkpointing", __doc__.split("\n\n")[0], COMPARISONS)


if __name__ == "__main__":
    sys.exit(main())
