"""A test model that really uses the language ids in every encoder and decoder layer
(a per-language bias added through the routing helper), so plumbing errors change outputs."""

import torch
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase, TransformerEncoderLayerBase
from torch import nn

from fairseq_langshare.models.language_aware_transformer import (
    LanguageAwareDecoder,
    LanguageAwareEncoder,
)
from fairseq_langshare.models.langshare_transformer import LangshareTransformerModel
from fairseq_langshare.modules import AuxiliaryReporter, route_by_language

NUM_LANGS = 8


def _bias(dim, seed):
    g = torch.Generator().manual_seed(seed)
    return nn.Parameter(torch.randn(NUM_LANGS, dim, generator=g))


class ProbeEncoderLayer(TransformerEncoderLayerBase, AuxiliaryReporter):
    def __init__(self, cfg, languages):
        super().__init__(cfg)
        self.languages = languages
        self.lang_bias = _bias(cfg.encoder.embed_dim, 1)

    def forward(self, x, encoder_padding_mask, attn_mask=None):
        x = super().forward(x, encoder_padding_mask, attn_mask)
        self.report_loss("bias_norm", self.lang_bias.pow(2).mean(), weight=0.5)
        self.report_stat("probe_stat", 2.0)
        return route_by_language(x, self.languages.get("src"), lambda l, xl, _: xl + self.lang_bias[l])


class ProbeDecoderLayer(TransformerDecoderLayerBase):
    def __init__(self, cfg, languages, no_encoder_attn=False):
        super().__init__(cfg, no_encoder_attn)
        self.languages = languages
        self.lang_bias = _bias(cfg.decoder.embed_dim, 2)

    def forward(self, x, *args, **kwargs):
        x, attn, state = super().forward(x, *args, **kwargs)
        x = route_by_language(x, self.languages.get("tgt"), lambda l, xl, _: xl + self.lang_bias[l])
        return x, attn, state


class ProbeEncoder(LanguageAwareEncoder):
    def build_encoder_layer(self, cfg):
        return ProbeEncoderLayer(cfg, self.languages)


class ProbeDecoder(LanguageAwareDecoder):
    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        return ProbeDecoderLayer(cfg, self.languages, no_encoder_attn)


class ProbeModel(LangshareTransformerModel):
    encoder_class = ProbeEncoder
    decoder_class = ProbeDecoder


def build_probe(task, args):
    model = ProbeModel.build_model(args, task)
    model.attach_inventory(task.inventory)
    return model
