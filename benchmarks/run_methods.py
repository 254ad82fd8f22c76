"""Each method against ``langshare_transformer_small`` of the same dimensions, in one run, on
the benchmark corpus of ``run_baseline`` (``benchmarks/.cache/``).

    python -m benchmarks.run_methods [--only clsr-vs-baseline] [--reps N --warmup N ...]

Targets from the issues: CLSR training step time ratio <= 1.35 (i.e. updates/s ratio >= 0.74)
and decoding tokens/s ratio >= 0.80.
"""

import argparse
import logging
import os
import sys

from .harness import run_comparison
from .run import REPO_ROOT, add_measurement_args, read_corpus, settings_from_args
from .run_baseline import SMALL, corpus_dir

COMPARISONS = [
    # (name, B label, B); A is always langshare_transformer_small
    ("clsr-vs-baseline", "clsr_transformer_small (p = 0.3, target-specific encoder)",
     ["--arch", "clsr_transformer_small", "--share-all-embeddings", "--dropout", "0.1",
      "--clsr-encoder-lang", "tgt", "--clsr-budget", "0.3"]),
]


def main(argv=None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run_methods", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=[c[0] for c in COMPARISONS], help="run one comparison only")
    parser.add_argument("--results-dir", default=os.path.join(REPO_ROOT, "benchmarks", "results"),
                        help="where the JSON results go (default benchmarks/results)")
    args = add_measurement_args(parser).parse_args(argv)
    from .report import markdown

    data, langs, pairs = read_corpus(corpus_dir())
    for name, b_label, b in COMPARISONS:
        if args.only and name != args.only:
            continue
        settings = settings_from_args(args, name, data, langs, pairs, SMALL, b, "langshare_transformer_small", b_label)
        result = run_comparison(settings, out_json=os.path.join(args.results_dir, f"{name}.json"),
                                markdown=None if args.no_append else args.doc)
        sys.stdout.write("\n" + markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
