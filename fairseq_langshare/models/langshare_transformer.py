"""``langshare_transformer``: the plain multilingual baseline on the language-aware base.

It shares everything; the language ids only travel through it. With the same weights it
computes exactly what fairseq's ``transformer`` computes.
"""

from dataclasses import dataclass

from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerConfig
from fairseq.models.transformer.transformer_legacy import base_architecture

from .language_aware_transformer import LanguageAwareTransformerModel


@dataclass
class LangshareTransformerConfig(TransformerConfig):
    pass


@register_model("langshare_transformer")
class LangshareTransformerModel(LanguageAwareTransformerModel):
    config_class = LangshareTransformerConfig

    @property
    def leaves_parameters_unused(self) -> bool:
        """Every step trains every parameter, except under LayerDrop, whose dropped layers a step leaves
        unused (on every rank alike: fairseq seeds the ranks' draws alike): ``data_parallel``."""
        return self.cfg.encoder.layerdrop > 0 or self.cfg.decoder.layerdrop > 0


@register_model_architecture("langshare_transformer", "langshare_transformer")
def langshare_transformer(args):
    """fairseq's transformer defaults: 6+6 layers, 512/2048, 8 heads."""
    base_architecture(args)


def size_preset(args, embed_dim, ffn_dim, heads, layers):
    """Set encoder and decoder sizes unless the command line already did."""
    for side in ("encoder", "decoder"):
        for key, value in (("embed_dim", embed_dim), ("ffn_embed_dim", ffn_dim),
                           ("attention_heads", heads), ("layers", layers)):
            setattr(args, f"{side}_{key}", getattr(args, f"{side}_{key}", value))


def small_preset(args):
    """2+2 layers, 128-dim, 4 heads, FFN 512: the CPU size of the demo and quality runs."""
    size_preset(args, 128, 512, 4, 2)


def tiny_preset(args):
    """2+2 layers, 32-dim, 2 heads, FFN 64: for tests."""
    size_preset(args, 32, 64, 2, 2)


@register_model_architecture("langshare_transformer", "langshare_transformer_small")
def langshare_transformer_small(args):
    small_preset(args)
    base_architecture(args)


@register_model_architecture("langshare_transformer", "langshare_transformer_tiny")
def langshare_transformer_tiny(args):
    tiny_preset(args)
    base_architecture(args)
