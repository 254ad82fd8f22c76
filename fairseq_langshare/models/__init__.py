from . import clsr_transformer, language_aware_transformer, langshare_transformer, lsl_transformer  # noqa: F401
