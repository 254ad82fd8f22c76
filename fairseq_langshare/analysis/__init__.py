"""Analyses of trained checkpoints: statistics, the papers' plots, derived architectures.

``langshare analyze <method> ...``: every method registers its own analysis as a sub-command of
``analyze`` (a module with ``add_analysis(methods)``, listed in ``ANALYSES``), so
``langshare analyze lsl CHECKPOINT --out DIR`` and, later, ``langshare analyze clsr ...`` share
one entry point.
"""

import functools

from ..atomic_files import check_directory_writable
from ..checkpoint_safety import require_checkpoint
from ..command_line import required_subcommands
from . import adaptive_sparse, clsr_gates, latent_depth, lsl_similarity, lsl_weights

ANALYSES = (adaptive_sparse, clsr_gates, latent_depth, lsl_weights, lsl_similarity)


def _out_checked(run):
    """``run(args)`` after refusing a checkpoint that is missing or a directory and an ``--out`` that is
    no directory it can write, before any analysis."""
    @functools.wraps(run)
    def checked(args):
        for path in getattr(args, "checkpoints", None) or [getattr(args, "checkpoint", None)]:
            if path is not None:
                require_checkpoint(path, "checkpoint")
        check_directory_writable(args.out, "--out", "the analysis writes several files into it")
        return run(args)
    return checked


def add_subcommand(subparsers) -> None:
    parser = subparsers.add_parser(
        "analyze",
        help="analyse a trained checkpoint: statistics, plots, derived architectures (per method)",
        description="Analyse a trained checkpoint; choose the method's analysis, e.g. `langshare analyze lsl CKPT --out DIR`.",
    )
    methods = required_subcommands(parser, "method", "METHOD", ANALYSES, register="add_analysis")
    for method in methods.choices.values():
        method.set_defaults(func=_out_checked(method.get_default("func")))
