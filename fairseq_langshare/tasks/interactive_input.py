"""Raw input lines of ``fairseq-interactive``, so that one bad line does not end a session.

fairseq reads stdin through ``fileinput`` and hands each buffer of lines to the task
(``get_interactive_tokens_and_lengths``, then ``get_batch_iterator``); the task guards both steps:

* bytes that are not UTF-8: Python decodes stdin with ``surrogateescape`` under a C locale (and, for
  ``fairseq-interactive``, the task asks for that under any locale: a strict stdin raises
  ``UnicodeDecodeError`` before any task code runs). The escaped bytes become U+FFFD with a warning,
  instead of a pybind11 ``RuntimeError`` from sentencepiece;
* a line longer than the model's positions is skipped with a warning naming it, instead of fairseq's
  "Size of sample #0 is invalid" exception; the other lines of the buffer are translated.

An ``--input FILE`` is decoded strictly by fairseq itself (``fileinput`` with a UTF-8 open hook), before any
task code sees its lines: one bad byte would end the session mid-way. So the task reads a regular ``--input``
file once at start-up (``check_input_file``) and refuses it in one line naming the line, the byte and the fix
(convert it, or pipe it to stdin); a pipe or FIFO is left unread for fairseq.
"""

import argparse
import errno
import io
import logging
import os
import sys

__all__ = ["tolerate_undecodable_stdin", "decodable", "warn_too_long", "input_option", "check_input_file"]

logger = logging.getLogger(__name__)


def tolerate_undecodable_stdin() -> None:
    """Decode stdin with ``surrogateescape`` (as Python does under a C locale) instead of failing."""
    if isinstance(sys.stdin, io.TextIOWrapper) and sys.stdin.errors == "strict":
        sys.stdin.reconfigure(errors="surrogateescape")


def input_option(argv=None) -> str:
    """fairseq-interactive's ``--input`` in ``argv`` (default: the command line; the task's config does not
    carry it), ``-`` if absent."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)  # as fairseq's parser
    parser.add_argument("--input", default="-")
    return parser.parse_known_args(sys.argv[1:] if argv is None else argv)[0].input


def check_input_file(path: str) -> None:
    """Refuse an ``--input`` file fairseq would stop reading at its first byte that is not UTF-8."""
    if path == "-":
        return
    try:
        if os.path.isdir(path):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
        if not os.path.isfile(os.path.realpath(path)):  # a FIFO or process substitution is read once, by fairseq
            os.stat(path)  # but a missing path is refused here
            return
        with open(path, "rb") as handle:
            for number, raw in enumerate(handle, 1):
                try:
                    raw.decode("utf-8")
                except UnicodeDecodeError as error:
                    column = len(raw[: error.start].decode("utf-8")) + 1
                    raise ValueError(
                        f"--input {path}: line {number} is not valid UTF-8 (byte 0x{raw[error.start]:02x} at "
                        f"column {column}); convert it with `iconv -c -f utf-8 -t utf-8 {path} > {path}.utf8` "
                        "or pipe it to stdin, where invalid bytes are replaced") from None
    except OSError as error:
        raise ValueError(f"--input {path}: cannot be read ({error.strerror or error}); pass a readable text "
                         "file, or - for stdin") from None


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
