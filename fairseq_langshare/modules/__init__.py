"""Building blocks without fairseq registration."""

from . import activation_checkpointing, adapters, auxiliary, clsr, language_specific_layer, latent_layers, routing, schedules, sparse_scores  # noqa: F401
from .auxiliary import AuxiliaryReporter, collect_auxiliary  # noqa: F401
from .routing import LanguageIds, MissingLanguageIds, route_by_language  # noqa: F401
