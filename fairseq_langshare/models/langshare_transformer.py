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


@register_model_architecture("langshare_transformer", "langshare_transformer")
def langshare_transformer(args):
    """fairseq's transformer defaults: 6+6 layers, 512/2048, 8 heads."""
    base_architecture(args)


def small_preset(args):
    """2+2 layers, 128-dim, 4 heads, FFN 512: the CPU size of the demo and quality runs."""
    for side in ("encoder", "decoder"):
        setattr(args, f"{side}_embed_dim", getattr(args, f"{side}_embed_dim", 128))
        setattr(args, f"{side}_ffn_embed_dim", getattr(args, f"{side}_ffn_embed_dim", 512))
        setattr(args, f"{side}_attention_heads", getattr(args, f"{side}_attention_heads", 4))
        setattr(args, f"{side}_layers", getattr(args, f"{side}_layers", 2))


def tiny_preset(args):
    """2+2 layers, 32-dim, 2 heads, FFN 64: for tests."""
    for side in ("encoder", "decoder"):
        setattr(args, f"{side}_embed_dim", getattr(args, f"{side}_embed_dim", 32))
        setattr(args, f"{side}_ffn_embed_dim", getattr(args, f"{side}_ffn_embed_dim", 64))
        setattr(args, f"{side}_attention_heads", getattr(args, f"{side}_attention_heads", 2))
        setattr(args, f"{side}_layers", getattr(args, f"{side}_layers", 2))


@register_model_architecture("langshare_transformer", "langshare_transformer_small")
def langshare_transformer_small(args):
    small_preset(args)
    base_architecture(args)


@register_model_architecture("langshare_transformer", "langshare_transformer_tiny")
def langshare_transformer_tiny(args):
    tiny_preset(args)
    base_architecture(args)
