from . import adapter_transformer, adaptive_sparse_transformer, clsr_transformer, language_aware_transformer, langshare_transformer, latent_depth_transformer, lsl_transformer, multistack_transformer  # noqa: F401

from .config_transformer import presets_on_a_namespace  # noqa: E402

presets_on_a_namespace()  # fairseq-hydra-train under omegaconf 2.0: see its docstring
