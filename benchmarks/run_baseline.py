"""The reference comparisons (``make benchmark``), on a small gettext corpus kept in
``benchmarks/.cache/`` (built on the first run, reused afterwards):

1. noise floor: ``langshare_transformer_small`` against itself; every ratio should be ~1.0,
   and how far it strays is the resolution of the harness on this machine;
2. ``langshare_transformer_small`` against fairseq's own ``transformer`` with the same
   dimensions (2+2 layers, 128-dim, 4 heads, FFN 512, dropout 0.1, shared embeddings): the
   cost of the language-aware plumbing.

    python -m benchmarks.run_baseline [--reps N --warmup N --no-append ...]
"""

import argparse
import dataclasses
import logging
import os
import shlex
import sys

from .harness import run_comparison
from .run import REPO_ROOT, add_measurement_args, settings_from_args

CACHE = os.path.join(REPO_ROOT, "benchmarks", ".cache")
CORPUS_LANGS = ["fr", "nb", "th", "tg"]  # ~50k, 12k, 6k and 0.5k training pairs: imbalanced like OPUS-100
CORPUS = dict(langs=CORPUS_LANGS, vocab_size=4000, valid_size=100, test_size=100)

SMALL = ["--arch", "langshare_transformer_small", "--share-all-embeddings", "--dropout", "0.1"]
FAIRSEQ_SMALL = ["--arch", "transformer", "--share-all-embeddings", "--dropout", "0.1",
                 "--encoder-layers", "2", "--decoder-layers", "2",
                 "--encoder-embed-dim", "128", "--decoder-embed-dim", "128",
                 "--encoder-ffn-embed-dim", "512", "--decoder-ffn-embed-dim", "512",
                 "--encoder-attention-heads", "4", "--decoder-attention-heads", "4"]

COMPARISONS = [
    # (name, A label, A, B label, B)
    ("baseline-noise-floor", "langshare_transformer_small", SMALL, "langshare_transformer_small (again)", SMALL),
    ("baseline-vs-fairseq-transformer", "langshare_transformer_small", SMALL,
     "fairseq transformer, same dims", FAIRSEQ_SMALL),
]


def corpus_dir(langs=None):
    """Build (or reuse) the benchmark corpus (``langs``: another set of target languages, same
    settings); return its directory."""
    from fairseq_langshare.data.gettext_corpus import prepare_gettext

    langs = list(langs or CORPUS_LANGS)
    out = os.path.join(CACHE, "gettext-" + "-".join(langs))
    prepare_gettext(out, **dict(CORPUS, langs=langs))
    return out


def run_comparisons(argv, prog, description, comparisons) -> int:
    """Parse the measurement flags and run ``comparisons`` [(name, A label, A, B label, B[, settings])];
    the optional dict sets ``Settings`` fields of that comparison, and ``corpus_langs`` runs it on
    the gettext corpus of those target languages instead."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--only", choices=[c[0] for c in comparisons], help="run one comparison only")
    parser.add_argument("--results-dir", default=os.path.join(REPO_ROOT, "benchmarks", "results"),
                        help="where the JSON results go (default benchmarks/results)")
    parser.add_argument("--model-args", default="",
                        help="fairseq flags appended to both A's and B's (they win), e.g. other dimensions: "
                             "'--encoder-embed-dim 512 --decoder-embed-dim 512 ...'; give --tag with them")
    parser.add_argument("--tag", default="",
                        help="store this run as run TAG of results/NAME.json (e.g. d512, amd3), beside the comparison's "
                             "other runs, so that a run with --model-args or a repeated run does not overwrite the "
                             "reference figures; the run's name is NAME-TAG")
    args = add_measurement_args(parser).parse_args(argv)
    if args.model_args and not args.tag:
        parser.error("--model-args changes both models: give --tag TAG so that its run is stored beside the "
                     "untagged reference run of NAME.json, not over it")
    extra = shlex.split(args.model_args)
    from .report import markdown
    from .run import read_corpus

    for name, a_label, a, b_label, b, *overrides in comparisons:
        if args.only and name != args.only:
            continue
        overrides = dict(overrides[0]) if overrides else {}
        data, langs, pairs = read_corpus(corpus_dir(overrides.pop("corpus_langs", None)))
        if extra:
            a, b = [*a, *extra], [*b, *extra]
            a_label, b_label = f"{a_label}, with {args.model_args}", f"{b_label}, with {args.model_args}"
        run_name = f"{name}-{args.tag}" if args.tag else name
        settings = settings_from_args(args, run_name, data, langs, pairs, a, b, a_label, b_label)
        settings = dataclasses.replace(settings, **overrides)
        result = run_comparison(settings, out_json=os.path.join(args.results_dir, f"{name}.json"), tag=args.tag,
                                markdown=None if args.no_append else args.doc)
        sys.stdout.write("\n" + markdown(result))
    return 0


def main(argv=None) -> int:
    return run_comparisons(argv, "python -m benchmarks.run_baseline", __doc__.split("\n\n")[0], COMPARISONS)


if __name__ == "__main__":
    sys.exit(main())
