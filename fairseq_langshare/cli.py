"""The ``langshare`` command: what fairseq has no verb for.

Subcommands parse their flags and call one library function each:
``prepare-gettext`` (the offline default corpus), ``prepare-corpus`` (the papers' corpora),
``evaluate`` (BLEU/chrF/off-target tables), ``off-target`` (the language identifier on a corpus's
references), ``compare`` (runs side by side, over seeds, with significance),
``recipe`` (the papers' training and evaluation runs), ``head-to-head`` (every method at equal
inference cost, several seeds, significance), ``analyze <method>`` (statistics, the papers'
plots, derived architectures), ``export`` (one language pair's sub-network as a plain fairseq
checkpoint, a CTranslate2 model or a transformers model) and ``translate`` (raw text through an
exported CTranslate2 model).
"""

import sys

from .interrupts import interrupted_while_starting

with interrupted_while_starting():  # the first seconds of every `langshare` run: torch and fairseq load
    from . import analysis, comparison, evaluation, off_target
    from . import command_line
    from .data import gettext_corpus, parallel_corpus
    from .deploy import export_command, translate
    from .recipes import corpora, experiments, head_to_head

SUBCOMMANDS = (gettext_corpus, parallel_corpus, corpora, evaluation, off_target, comparison, experiments, head_to_head,
               analysis, export_command, translate)


def build_parser():
    return command_line.build_parser(SUBCOMMANDS)


def main(argv=None) -> int:
    return command_line.run(SUBCOMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
