"""Analyses of trained checkpoints: statistics, the papers' plots, derived architectures.

``langshare analyze <method> ...``: every method registers its own analysis as a sub-command of
``analyze`` (a module with ``add_analysis(methods)``, listed in ``ANALYSES``), so
``langshare analyze lsl CHECKPOINT --out DIR`` and, later, ``langshare analyze clsr ...`` share
one entry point.
"""

from . import adaptive_sparse, clsr_gates, latent_depth, lsl_similarity, lsl_weights

ANALYSES = (adaptive_sparse, clsr_gates, latent_depth, lsl_weights, lsl_similarity)


def add_subcommand(subparsers) -> None:
    parser = subparsers.add_parser(
        "analyze",
        help="analyse a trained checkpoint: statistics, plots, derived architectures (per method)",
        description="Analyse a trained checkpoint; choose the method's analysis, e.g. `langshare analyze lsl CKPT --out DIR`.",
    )
    methods = parser.add_subparsers(dest="method", metavar="METHOD")
    methods.required = True
    for module in ANALYSES:
        module.add_analysis(methods)
