from . import language_aware_transformer, langshare_transformer  # noqa: F401
