"""``ConfigTransformerModel``: fairseq's ``TransformerModel`` built from a ``config_class`` (a
``TransformerConfig`` dataclass, plus a method's own fields) and an ``encoder_class`` /
``decoder_class``. The base of the language-aware model every method subclasses and of the
minimal single-pair models ``langshare export`` writes when a pair's sub-network is no plain
``transformer``.

Models register the fairseq-``transformer`` way (argparse flags generated from ``config_class``,
presets as architectures): fairseq 0.12 cannot turn a Namespace into a TransformerConfig-typed
hydra node (its nested encoder/decoder dataclasses break ``convert_namespace_to_omegaconf``), so
a ``dataclass=`` registration would break the CLI. fairseq-hydra-train still works: its ``model:``
node holds the same flat keys.
"""

from contextlib import nullcontext

from fairseq.dataclass.utils import gen_parser_from_dataclass
from fairseq.models.transformer import (
    TransformerConfig,
    TransformerDecoderBase,
    TransformerEncoderBase,
    TransformerModel,
)
from fairseq.models.transformer.transformer_legacy import base_architecture
from omegaconf import OmegaConf, open_dict

from ..option_ranges import check_ranges

__all__ = ["ConfigTransformerModel"]


class ConfigTransformerModel(TransformerModel):
    config_class = TransformerConfig
    encoder_class = TransformerEncoderBase
    decoder_class = TransformerDecoderBase

    @classmethod
    def add_args(cls, parser):
        gen_parser_from_dataclass(parser, cls.config_class(), delete_default=True, with_prefix="")

    @classmethod
    def config_from_args(cls, args):
        """``config_class`` from the flat args, after filling what an older config or the preset left out; an
        option outside its declared range is refused (``option_ranges``)."""
        with open_dict(args) if OmegaConf.is_config(args) else nullcontext():
            base_architecture(args)
        cfg = cls.config_class.from_namespace(args)
        check_ranges(cfg, cls.config_class)
        return cfg

    @classmethod
    def build_model(cls, args, task):
        return super(TransformerModel, cls).build_model(cls.config_from_args(args), task)  # TransformerModelBase

    @classmethod
    def build_encoder(cls, cfg, src_dict, embed_tokens):
        return cls.encoder_class(cfg, src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, cfg, tgt_dict, embed_tokens):
        return cls.decoder_class(cfg, tgt_dict, embed_tokens, no_encoder_attn=cfg.no_cross_attention)
