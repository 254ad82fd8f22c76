"""Building blocks without fairseq registration."""

from . import (activation_checkpointing, adapters, auxiliary, call_state, clsr, first_rank, grouped_copies,  # noqa: F401
               language_specific_layer, latent_layers, routing, row_subsets, scaled_logits, schedules, sparse_scores)
from .auxiliary import AuxiliaryReporter, collect_auxiliary  # noqa: F401
from .routing import LanguageIds, MissingLanguageIds, route_by_language  # noqa: F401
