"""Raw input lines of ``fairseq-interactive``, so that one bad line does not end a session.

fairseq reads stdin through ``fileinput`` and hands each buffer of lines to the task
(``get_interactive_tokens_and_lengths``, then ``get_batch_iterator``); the task guards both steps:

* bytes that are not UTF-8: Python decodes stdin with ``surrogateescape`` under a C locale (and, for
  ``fairseq-interactive``, the task asks for that under any locale: a strict stdin raises
  ``UnicodeDecodeError`` before any task code runs). The escaped bytes become U+FFFD with a warning,
  instead of a pybind11 ``RuntimeError`` from sentencepiece;
* a line longer than the model's positions is skipped with a warning naming it, instead of fairseq's
  "Size of sample #0 is invalid" exception; the other lines of the buffer are translated.

An ``--input FILE`` is opened by fairseq with strict UTF-8 decoding that no task hook precedes: convert such
a file (``iconv -c -f utf-8 -t utf-8``) or pipe it to stdin.
"""

import io
import logging
import sys

__all__ = ["tolerate_undecodable_stdin", "decodable", "warn_too_long"]

logger = logging.getLogger(__name__)


def tolerate_undecodable_stdin() -> None:
    """Decode stdin with ``surrogateescape`` (as Python does under a C locale) instead of failing."""
    if isinstance(sys.stdin, io.TextIOWrapper) and sys.stdin.errors == "strict":
        sys.stdin.reconfigure(errors="surrogateescape")


def decodable(line: str, number: int) -> str:
    """``line`` with bytes that were not UTF-8 (escaped as lone surrogates) replaced by U+FFFD."""
    try:
        line.encode("utf-8")
        return line
    except UnicodeEncodeError:
        logger.warning("input line %d is not valid UTF-8: its invalid bytes were replaced by U+FFFD", number)
        return line.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def warn_too_long(dataset, ignored, max_positions, first_line) -> None:
    """One warning per input line the batch iterator skips as longer than ``max_positions``."""
    limit = max_positions[0] if isinstance(max_positions, (tuple, list)) else max_positions
    for index in ignored:
        size = dataset.size(index)
        size = size[0] if isinstance(size, (tuple, list)) else size
        logger.warning("input line %d has %d tokens, more than the model's %s positions: skipped (split it into "
                       "shorter sentences)", first_line + index, size, limit)
