"""Compare two model configurations on one corpus in one run.

    python -m benchmarks.run --name NAME --corpus CORPUS_DIR \\
        --a "--arch langshare_transformer_small" \\
        --b "--arch clsr_transformer_small --clsr-budget 0.5"

``--corpus`` reads langs and pairs from a prepared corpus (``manifest.json``, data in ``bin/``);
or give ``--data BIN_DIR --langs ... --lang-pairs ...``. Writes the JSON (``--out-json``,
default ``benchmarks/results/NAME.json``; where that file holds tagged runs of the comparison too,
they are kept and its untagged run is replaced) and appends the markdown table to
docs/benchmarks.md (``--doc``; ``--no-append`` to skip).
"""

import argparse
import json
import logging
import os
import shlex
import sys

from .harness import DEFAULT_TASK_ARGS, DEFAULT_TRAIN_ARGS, Settings, run_comparison

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DOC = os.path.join(REPO_ROOT, "docs", "benchmarks.md")
DEFAULTS = Settings(name="", data="", langs=[], lang_pairs=[], a=[], b=[])


def add_measurement_args(parser):
    """Options shared by ``run`` and ``run_baseline``."""
    d = DEFAULTS
    g = parser.add_argument_group("measurement")
    g.add_argument("--reps", type=int, default=d.reps, help="measured repetitions (default %(default)s)")
    g.add_argument("--warmup", type=int, default=d.warmup,
                   help="warm-up repetitions, not recorded (default %(default)s)")
    g.add_argument("--max-tokens", type=int, default=d.max_tokens,
                   help="training batch size in tokens (default %(default)s)")
    g.add_argument("--train-batches", type=int, default=d.train_batches,
                   help="fixed training batches run per repetition (default %(default)s)")
    g.add_argument("--decode-split", default=d.decode_split,
                   help="split the decoded sentences come from (default %(default)s)")
    g.add_argument("--decode-sentences", type=int, default=d.decode_sentences,
                   help="sentences decoded in large batches per repetition (default %(default)s)")
    g.add_argument("--decode-single-sentences", type=int, default=d.decode_single_sentences,
                   help="of those, sentences decoded one at a time (default %(default)s)")
    g.add_argument("--decode-batch-size", type=int, default=d.decode_batch_size,
                   help="sentences per large decoding batch (default %(default)s)")
    g.add_argument("--beam", type=int, default=d.beam, help="beam size (default %(default)s)")
    g.add_argument("--decode-direction", default=d.decode_direction,
                   help="SRC-TGT: decode only that direction, as fairseq-generate -s -t does (default: every "
                        "direction, mixed in the batches)")
    g.add_argument("--decode-len", default=d.decode_len,
                   help="hypothesis length incl. EOS: 'auto' forces the median reference length, an integer forces "
                        "that length, 'free' lets each model stop (default %(default)s)")
    g.add_argument("--threads", type=int, default=d.threads, help="torch threads for both (default %(default)s)")
    g.add_argument("--seed", type=int, default=d.seed,
                   help="seed of both models, batches and sentences (default %(default)s)")
    g.add_argument("--memory-reps", type=int, default=d.memory_reps,
                   help="fresh-process peak-RSS probes per configuration and phase; 0 skips memory "
                        "(default %(default)s)")
    g.add_argument("--task-args", default=shlex.join(DEFAULT_TASK_ARGS),
                   help="task flags shared by both (default: %(default)s)")
    g.add_argument("--train-args", default=shlex.join(DEFAULT_TRAIN_ARGS),
                   help="criterion/optimizer flags shared by both (default: %(default)s)")
    g.add_argument("--doc", default=DEFAULT_DOC,
                   help="markdown file the table is appended to (default docs/benchmarks.md)")
    g.add_argument("--no-append", action="store_true", help="do not append to --doc")
    return parser


def settings_from_args(args, name, data, langs, lang_pairs, a, b, a_label="A", b_label="B") -> Settings:
    return Settings(
        name=name, data=data, langs=list(langs), lang_pairs=list(lang_pairs), a=list(a), b=list(b),
        a_label=a_label, b_label=b_label, task_args=shlex.split(args.task_args),
        train_args=shlex.split(args.train_args), reps=args.reps, warmup=args.warmup, max_tokens=args.max_tokens,
        train_batches=args.train_batches, decode_split=args.decode_split, decode_sentences=args.decode_sentences,
        decode_single_sentences=args.decode_single_sentences, decode_batch_size=args.decode_batch_size,
        beam=args.beam, decode_len=args.decode_len, decode_direction=args.decode_direction,
        threads=args.threads, seed=args.seed,
        memory_reps=args.memory_reps,
    )


def read_corpus(corpus_dir):
    """(bin dir, langs, lang pairs) of a corpus prepared by ``langshare prepare-gettext``."""
    path = os.path.join(corpus_dir, "manifest.json")
    if not os.path.exists(path):
        raise FileNotFoundError(f"no manifest.json in {corpus_dir}: pass a directory made by langshare "
                                f"prepare-gettext, or give --data, --langs and --lang-pairs instead")
    with open(path, encoding="utf-8") as f:
        manifest = json.load(f)
    return os.path.join(corpus_dir, manifest.get("data_bin", "bin")), manifest["langs"], manifest["lang_pairs"]


def build_parser():
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--name", required=True, help="name of the comparison (table title, JSON file name)")
    parser.add_argument("--corpus", help="prepared corpus directory (manifest.json + bin/)")
    parser.add_argument("--data", help="fairseq data directory (overrides the corpus' bin/)")
    parser.add_argument("--langs", help="comma-separated language inventory (default: from --corpus)")
    parser.add_argument("--lang-pairs", help="comma-separated directions (default: from --corpus)")
    parser.add_argument("--a", required=True, help="fairseq-train flags of configuration A (the reference), "
                        "one string (write --a='--flag' if it holds a single flag)")
    parser.add_argument("--b", required=True, help="fairseq-train flags of configuration B, one string")
    parser.add_argument("--a-label", default=None, help="short name of A (default: its --arch)")
    parser.add_argument("--b-label", default=None, help="short name of B (default: its --arch)")
    parser.add_argument("--out-json", help="where to write the JSON (default benchmarks/results/NAME.json)")
    return add_measurement_args(parser)


def _arch(flags):
    return flags[flags.index("--arch") + 1] if "--arch" in flags[:-1] else "?"


def main(argv=None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    try:
        data, langs, pairs = read_corpus(args.corpus) if args.corpus else (None, None, None)
        data = args.data or data
        langs = args.langs.split(",") if args.langs else langs
        pairs = args.lang_pairs.split(",") if args.lang_pairs else pairs
        if not (data and langs and pairs):
            raise ValueError("give --corpus DIR, or --data, --langs and --lang-pairs")
        a, b = shlex.split(args.a), shlex.split(args.b)
        settings = settings_from_args(args, args.name, data, langs, pairs, a, b,
                                      args.a_label or _arch(a), args.b_label or _arch(b))
        out_json = args.out_json or os.path.join(REPO_ROOT, "benchmarks", "results", f"{args.name}.json")
        result = run_comparison(settings, out_json=out_json, markdown=None if args.no_append else args.doc)
    except (ValueError, FileNotFoundError) as error:
        print(f"benchmarks.run: error: {error}", file=sys.stderr)
        return 2
    from .report import markdown

    sys.stdout.write(markdown(result))
    print(f"JSON: {out_json}" + ("" if args.no_append else f"; table appended to {args.doc}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
