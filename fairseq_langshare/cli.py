"""The ``langshare`` command: what fairseq has no verb for.

Subcommands parse their flags and call one library function each:
``prepare-gettext`` (the offline default corpus), ``prepare-corpus`` (the papers' corpora),
``evaluate`` (BLEU/chrF tables), ``compare`` (runs side by side, over seeds, with significance),
``recipe`` (the papers' training and evaluation runs), ``head-to-head`` (every method at equal
inference cost, several seeds, significance), ``analyze <method>`` (statistics, the papers'
plots, derived architectures), ``export`` (one language pair's sub-network as a plain fairseq
checkpoint or a CTranslate2 model) and ``translate`` (raw text through an exported CTranslate2 model).
"""

import argparse
import logging
import sys
import warnings

from . import analysis, comparison, evaluation, export
from .user_errors import message
from .data import gettext_corpus, parallel_corpus
from .deploy import translate
from .recipes import corpora, experiments, head_to_head

SUBCOMMANDS = (gettext_corpus, parallel_corpus, corpora, evaluation, comparison, experiments, head_to_head, analysis, export, translate)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="langshare",
        description="fairseq_langshare tools: corpus building, evaluation, analysis, export",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for module in SUBCOMMANDS:
        module.add_subcommand(subparsers)
    return parser


# deprecation chatter of fairseq 0.12's dependencies (hydra 1.3, torch 2.13) on every in-process
# fairseq-generate call; it says nothing a langshare user can act on
QUIET_WARNINGS = ("version_base", "validated against ConfigStore", "no longer experimental",
                  "package header", "strict flag", "pin_memory", "torch.cuda.amp", "mismatched key_padding_mask")


def main(argv=None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    for text in QUIET_WARNINGS:
        warnings.filterwarnings("ignore", message=f"(?s).*{text}")
    args = build_parser().parse_args(argv)
    try:
        result = args.func(args)
    except (ValueError, FileNotFoundError, KeyError) as error:
        print(f"langshare {args.command}: error: {message(error)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # every output is written whole or not at all (atomic_files)
        print(f"langshare {args.command}: interrupted (Ctrl-C) before it finished; no file was left half-written",
              file=sys.stderr)
        return 130
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
