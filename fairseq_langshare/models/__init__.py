from . import adapter_transformer, clsr_transformer, language_aware_transformer, langshare_transformer, latent_depth_transformer, lsl_transformer, multistack_transformer  # noqa: F401
