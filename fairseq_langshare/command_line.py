"""Running ``langshare`` subcommands: a parser made of subcommand modules (each has
``add_subcommand(subparsers)``), and one line, not a traceback, for what a user got wrong.

``cli`` runs every subcommand through it; a recipe (``recipes.train_runner``) runs its analyses
(``langshare analyze ...``) through it in-process, with the analysis module alone, so that the
recipes do not import ``cli`` (which imports them).
"""

import argparse
import logging
import shlex
import sys
import warnings
from typing import List

from .user_errors import message

# deprecation chatter of fairseq 0.12's dependencies (hydra 1.3, torch 2.13) on every in-process
# fairseq-generate call; it says nothing a langshare user can act on
QUIET_WARNINGS = ("version_base", "validated against ConfigStore", "no longer experimental",
                  "package header", "strict flag", "pin_memory", "torch.cuda.amp", "mismatched key_padding_mask")


def build_parser(subcommands) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="langshare",
        description="fairseq_langshare tools: corpus building, evaluation, analysis, export",
    )
    required_subcommands(parser, "command", "COMMAND", subcommands)
    return parser


def shell_words(text: str) -> List[str]:
    """The ``type`` of an option that holds further command-line flags (``--generate-args '--cpu --nbest 1'``):
    the words a shell would make of it; an unbalanced quote is the option's error."""
    try:
        return shlex.split(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{error} in {text!r}; balance the quotes") from None


def file_name(text: str) -> str:
    """The ``type`` of an output file option: an empty value (``--out-json "$F"`` with F unset) names no file."""
    if text == "":
        raise argparse.ArgumentTypeError("'' names no file: pass a file name, or leave the option out")
    return text


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's, without "(default: None)" for an option that has none, or a second default
    where the help states its own."""

    def _get_help_string(self, action):
        if action.default is None or "(default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def add_command(subparsers, name: str, help: str, description: str) -> argparse.ArgumentParser:
    """The parser of sub-command ``name``, whose ``--help`` shows every option's default."""
    return subparsers.add_parser(name, help=help, description=description, formatter_class=DefaultsHelpFormatter)


def required_subcommands(parser, dest: str, metavar: str, modules=(), register: str = "add_subcommand"):
    """The sub-commands of ``parser``, one of which must be given (its name in ``args.<dest>``), with those of
    ``modules`` added (``module.<register>(subparsers)``); returns the subparsers action."""
    subparsers = parser.add_subparsers(dest=dest, metavar=metavar)
    subparsers.required = True
    for module in modules:
        getattr(module, register)(subparsers)
    return subparsers


def command_name(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """The command ``args`` ran, as argparse names it in its own errors: ``langshare recipe average``."""
    while True:
        chosen = next(((action, getattr(args, action.dest, None)) for action in parser._actions
                       if isinstance(action, argparse._SubParsersAction)), (None, None))
        if chosen[1] is None:
            return parser.prog
        parser = chosen[0].choices[chosen[1]]


def run(subcommands, argv=None) -> int:
    """Parse ``argv`` with the parser of ``subcommands`` and run the chosen one. Returns its exit
    code: 2 and one line on stderr for bad input, 130 for Ctrl-C."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    for text in QUIET_WARNINGS:
        warnings.filterwarnings("ignore", message=f"(?s).*{text}")
    parser = build_parser(subcommands)
    args = parser.parse_args(argv)
    try:
        result = args.func(args)
    except (ValueError, OSError, KeyError) as error:  # OSError: a path, disk or permission the command met
        print(f"{command_name(parser, args)}: error: {message(error)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # every output is written whole or not at all (atomic_files)
        print(f"{command_name(parser, args)}: interrupted (Ctrl-C) before it finished; no file was left "
              "half-written", file=sys.stderr)
        return 130
    return result if isinstance(result, int) else 0
