"""``langshare_adapter_transformer``: language and language-pair adapters, a baseline for the LSL paper.

A bottleneck adapter (``modules/adapters.py``) sits after Transformer layers, on the layer's
output; ``--adapter-placement`` says which layers and which language indexes them:

* ``enc-src``: a source-language adapter after every encoder layer (Philip et al. 2020; the LSL
  paper's "Language Adapters ENC", Pires et al. 2023 Table 1);
* ``enc-src-tgt``: source adapters after the bottom half of the encoder layers, target adapters
  after the top half ("Language Adapters ENC (SRC+TGT)", Table 1); with an odd depth the middle
  layer belongs to the top (target) half;
* ``enc-dec``: source adapters after every encoder layer, target adapters after every decoder layer
  ("Language Adapters ENC+DEC", Table 10; the shared-decoder "Adapters" of Table 5);
* ``pair``: one adapter per language pair after every encoder and decoder layer (Bapna & Firat 2019);
* ``pair-enc``: pair adapters after the encoder layers only ("Language-Pair Adapters ENC", Table 10).

``--adapter-finetune-from`` is Bapna & Firat's mode: copy a trained baseline into the non-adapter
weights, freeze them and train only the adapters. ``export_state_dict`` extracts one pair's model,
``langshare_adapter_single`` (one adapter per adapted layer, no language ids), for ``langshare export``.
"""

import logging
import re
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import torch
from fairseq import checkpoint_utils
from fairseq.dataclass import ChoiceEnum
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerConfig, TransformerDecoderBase, TransformerEncoderBase
from fairseq.models.transformer.transformer_legacy import base_architecture
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase, TransformerEncoderLayerBase
from omegaconf import OmegaConf, open_dict
from torch import nn

from ..saved_config import config_value
from ..checkpoint_safety import require_checkpoint
from ..languages import decode_inventory
from ..modules.activation_checkpointing import wrap_like_fairseq
from ..modules.adapters import Adapter, AdapterBank, LanguagePairTable
from ..option_ranges import Range
from ..run_options import resumed_checkpoint, resumed_model_config, run_option
from .langshare_transformer import small_preset, tiny_preset
from .config_transformer import ConfigTransformerModel
from .language_aware_transformer import (LanguageAwareDecoder, LanguageAwareEncoder, LanguageAwareTransformerModel,
                                         task_inventory)

logger = logging.getLogger(__name__)

PLACEMENTS = ChoiceEnum(["enc-src", "enc-src-tgt", "enc-dec", "pair", "pair-enc"])
SINGLE_MODEL = "langshare_adapter_single"  # the registered model one exported pair is
TABLE_KEY = "pair_table.lookup"  # the model's (src, tgt) -> pair slot buffer


def _set(args, name, value):
    with open_dict(args) if OmegaConf.is_config(args) else nullcontext():
        setattr(args, name, value)


@dataclass
class AdapterSingleConfig(TransformerConfig):
    """Options of an adapted Transformer with one adapter per adapted layer (an exported pair)."""

    adapter_placement: PLACEMENTS = field(default="enc-src", metadata={
        "help": "where the adapters sit (one block after the layer's output) and what indexes them: enc-src: source "
                "adapters after every encoder layer (Philip et al. 2020; LSL paper 'Language Adapters ENC'); "
                "enc-src-tgt: source adapters after the bottom half of the encoder layers, target adapters after the "
                "top half (the middle layer of an odd depth is top half; 'Language Adapters ENC (SRC+TGT)'); enc-dec: "
                "source adapters after every encoder layer, target adapters after every decoder layer; pair: one "
                "adapter per language pair after every encoder and decoder layer (Bapna & Firat 2019); pair-enc: pair "
                "adapters after the encoder layers only"})
    adapter_bottleneck: int = field(default=128, metadata={
        "help": "bottleneck size b of every adapter (d -> b -> d); the LSL paper's Table 1 uses 128, 256 and 512 with "
                "d = 512 (default 128; the _small preset uses 32, _tiny 8)",
        "range": Range(1, why="the adapter's hidden units")})


@dataclass
class AdapterTransformerConfig(AdapterSingleConfig):
    adapter_pairs: str = field(default="", metadata={
        "help": "comma-separated language pairs that get an adapter with --adapter-placement pair[-enc] (e.g. "
                "en-de,de-en); empty: the task's --lang-pairs when the model is first built. Stored in the checkpoint"})
    adapter_finetune_from: Optional[str] = field(default=None, metadata={
        "help": "Bapna & Firat's fine-tuning mode: copy this trained checkpoint (langshare_transformer or fairseq "
                "transformer of the same dimensions and dictionary) into every non-adapter weight, freeze those "
                "(implies --adapter-frozen-base) and train only the adapters; read once when the model is first built "
                "(the flag is then cleared in the saved config)"})
    adapter_frozen_base: bool = field(default=False, metadata={
        "help": "freeze every non-adapter parameter (requires_grad=False) when the model is built; set in the saved "
                "config by --adapter-finetune-from so the base stays frozen when the checkpoint is reloaded"})


_FINETUNE_FROM = "the .pt file the baseline training wrote (e.g. checkpoints/checkpoint_best.pt)"
METHOD_FIELDS = ("adapter_placement", "adapter_bottleneck", "adapter_pairs", "adapter_finetune_from", "adapter_frozen_base")


def _pairs(spec) -> List[str]:
    if not spec:
        return []
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    pairs = []
    for pair in (p.strip() for p in items):
        if pair and pair not in pairs:
            if pair.count("-") != 1:
                raise ValueError(f"--adapter-pairs: {pair!r} is not a language pair; write SRC-TGT, e.g. en-de")
            pairs.append(pair)
    return pairs


def adapter_sides(model_cfg) -> Dict[str, List[Optional[str]]]:
    """Per layer of each stack: None (no adapter) or what indexes its adapter ("src", "tgt", "pair")."""
    get = lambda name, default=None: getattr(model_cfg, name, default)  # noqa: E731
    n_enc, n_dec = int(get("encoder_layers")), int(get("decoder_layers"))
    placement = str(get("adapter_placement", "enc-src"))
    bottom = n_enc // 2  # enc-src-tgt: the middle layer of an odd depth is in the top (target) half
    encoder = {"enc-src": ["src"] * n_enc, "enc-src-tgt": ["src"] * bottom + ["tgt"] * (n_enc - bottom),
               "enc-dec": ["src"] * n_enc, "pair": ["pair"] * n_enc, "pair-enc": ["pair"] * n_enc}
    decoder = {"enc-dec": ["tgt"] * n_dec, "pair": ["pair"] * n_dec}
    if placement not in encoder:
        raise ValueError(f"unknown --adapter-placement {placement!r}; use one of {', '.join(encoder)}")
    return {"encoder": encoder[placement], "decoder": decoder.get(placement, [None] * n_dec)}


# --- layers ----------------------------------------------------------------------------------

class AdapterEncoderLayer(TransformerEncoderLayerBase):
    """fairseq's encoder layer followed by an adapter on its output (an ``Adapter`` or an ``AdapterBank``)."""

    def __init__(self, cfg, adapter: nn.Module, return_fc=False):
        super().__init__(cfg, return_fc=return_fc)
        self.adapter = adapter

    def forward(self, x, encoder_padding_mask, attn_mask=None):
        out = super().forward(x, encoder_padding_mask, attn_mask)
        if isinstance(out, tuple):  # return_fc
            return self.adapter(out[0]), out[1]
        return self.adapter(out)


class AdapterDecoderLayer(TransformerDecoderLayerBase):
    """fairseq's decoder layer followed by an adapter on its output. Adapters are position-wise,
    so incremental decoding needs no state of its own."""

    def __init__(self, cfg, adapter: nn.Module, no_encoder_attn=False):
        super().__init__(cfg, no_encoder_attn=no_encoder_attn)
        self.adapter = adapter

    def forward(self, x, *args, **kwargs):
        x, attn, state = super().forward(x, *args, **kwargs)
        return self.adapter(x), attn, state


class _AdaptedStack:
    """``build_*_layer`` for an encoder or decoder whose layers may carry an adapter."""

    def _plan_adapters(self, cfg, stack: str):
        self._adapter_sides = adapter_sides(cfg)[stack]
        self._layers_built = 0

    def _next_adapter(self, cfg, dim: int) -> Optional[nn.Module]:
        side = self._adapter_sides[self._layers_built]
        self._layers_built += 1
        return None if side is None else self.make_adapter(cfg, dim, side)

    def make_adapter(self, cfg, dim: int, side: str) -> nn.Module:
        raise NotImplementedError

    def build_encoder_layer(self, cfg):
        adapter = self._next_adapter(cfg, cfg.encoder.embed_dim)
        if adapter is None:
            return super().build_encoder_layer(cfg)
        return wrap_like_fairseq(AdapterEncoderLayer(cfg, adapter, return_fc=self.return_fc), cfg)

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        adapter = self._next_adapter(cfg, cfg.decoder.embed_dim)
        if adapter is None:
            return super().build_decoder_layer(cfg, no_encoder_attn)
        return wrap_like_fairseq(AdapterDecoderLayer(cfg, adapter, no_encoder_attn), cfg)


class _BankStack(_AdaptedStack):
    def make_adapter(self, cfg, dim, side):
        slots = len(_pairs(cfg.adapter_pairs)) if side == "pair" else cfg.num_languages
        return AdapterBank(slots, dim, cfg.adapter_bottleneck, self.languages, side, export=cfg.export)


class AdapterEncoder(_BankStack, LanguageAwareEncoder):
    def __init__(self, cfg, dictionary, embed_tokens, return_fc=False):
        self._plan_adapters(cfg, "encoder")
        super().__init__(cfg, dictionary, embed_tokens, return_fc=return_fc)


class AdapterDecoder(_BankStack, LanguageAwareDecoder):
    def __init__(self, cfg, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        self._plan_adapters(cfg, "decoder")
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn,
                         output_projection=output_projection)


# --- the model -------------------------------------------------------------------------------

@register_model("langshare_adapter_transformer")
class AdapterTransformerModel(LanguageAwareTransformerModel):
    config_class = AdapterTransformerConfig
    encoder_class = AdapterEncoder
    decoder_class = AdapterDecoder
    export_model = SINGLE_MODEL  # what `langshare export` writes one pair as (see export.py)

    @classmethod
    def build_model(cls, args, task):
        inventory = task_inventory(task, "langshare_adapter_transformer", "routes every sentence by its languages")
        placement = str(getattr(args, "adapter_placement", None) or "enc-src")
        if placement.startswith("pair"):
            pairs = _pairs(getattr(args, "adapter_pairs", None))
            if not pairs:  # first build: the task's training directions; stored in the saved config from now on
                pairs = _pairs(getattr(task, "lang_pairs", None))
                if not pairs:
                    raise ValueError(f"--adapter-placement {placement} needs the language pairs: pass --lang-pairs "
                                     "(or --adapter-pairs)")
                _set(args, "adapter_pairs", ",".join(pairs))
        elif _pairs(getattr(args, "adapter_pairs", None)):
            raise ValueError(f"--adapter-pairs {args.adapter_pairs} applies to --adapter-placement pair and pair-enc "
                             f"only ({placement} has adapters per language); drop it, or pass --adapter-placement pair")
        finetune_from = getattr(args, "adapter_finetune_from", None)
        if finetune_from:
            require_checkpoint(finetune_from, "--adapter-finetune-from", _FINETUNE_FROM)  # before anything is built
            _set(args, "adapter_frozen_base", True)  # the saved config keeps the base frozen on reload
        keep_frozen_base_of_resumed_run(args, "--adapter-finetune-from" if finetune_from else "--adapter-frozen-base")
        model = super().build_model(args, task)
        model.task_pairs = _pairs(getattr(task, "lang_pairs", None))  # for check_training_run
        if placement.startswith("pair"):
            model.pair_table = LanguagePairTable(_pairs(args.adapter_pairs), inventory.langs)
            for bank in model.adapter_banks():
                bank.set_pair_table(model.pair_table)
        if finetune_from:
            load_base_weights(model, finetune_from, inventory.langs)
            # applied once: a checkpoint of this model must not re-read (or need) the base file when loaded
            _set(args, "adapter_finetune_from", None)
        if getattr(args, "adapter_frozen_base", False):
            freeze_base(model)
        return model

    def check_training_run(self, args) -> None:
        """Called by the task when a training run builds the model (not when a checkpoint is decoded): every
        training pair needs its adapter, else its first batch would stop the run (and fairseq save crash.pt)."""
        table = getattr(self, "pair_table", None)
        missing = [pair for pair in self.task_pairs if table is not None and pair not in table.pairs]
        if missing:
            raise ValueError(f"--adapter-pairs {','.join(table.pairs)} leaves the training pairs {','.join(missing)} of "
                             f"--lang-pairs without an adapter (each sentence of --adapter-placement "
                             f"{args.adapter_placement} runs through its pair's adapter); add them to --adapter-pairs, "
                             "drop --adapter-pairs (every --lang-pairs pair gets one), or leave them out of --lang-pairs")

    def adapter_banks(self) -> List[AdapterBank]:
        return [m for m in self.modules() if isinstance(m, AdapterBank)]

    def effective_parameters(self, src_lang_id: int, tgt_lang_id: int) -> int:
        """Parameters one sentence of the pair can touch: all but other languages' (pairs') adapters."""
        total = sum(p.numel() for p in self.parameters())
        unused = 0
        for bank in self.adapter_banks():
            used = bank.slot_for(src_lang_id, tgt_lang_id)
            unused += sum(p.numel() for k, adapter in enumerate(bank.slots) if k != used for p in adapter.parameters())
        return total - unused

    # the pair table names languages in its messages: keep it on the model's inventory
    def attach_inventory(self, inventory, arch=None):
        super().attach_inventory(inventory, arch)
        self._refresh_pair_table()

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        result = super().load_state_dict(state_dict, strict=strict, model_cfg=model_cfg, args=args)
        self._refresh_pair_table()
        return result

    def _refresh_pair_table(self):
        table = getattr(self, "pair_table", None)
        if isinstance(table, LanguagePairTable):
            table.langs = self.langs

    @classmethod
    def export_state_dict(cls, state_dict, model_cfg, src_id: int, tgt_id: int):
        """The weights the pair (src_id, tgt_id) uses under the names of ``langshare_adapter_single``
        (``...adapter.per_lang.<k>.`` -> ``...adapter.``), and the model-config changes."""
        sides = adapter_sides(model_cfg)
        slot = {"src": src_id, "tgt": tgt_id}
        if any("pair" in stack for stack in sides.values()):
            langs = decode_inventory(state_dict["lang_inventory"])
            table = LanguagePairTable(_pairs(getattr(model_cfg, "adapter_pairs", "")), langs)
            table.lookup.copy_(state_dict[TABLE_KEY])
            slot["pair"] = table.slot(src_id, tgt_id)
        out = {}
        for key, value in state_dict.items():
            if key in ("lang_inventory", TABLE_KEY):
                continue
            m = re.match(r"^((en|de)coder\.layers\.(\d+)\.adapter)\.per_(?:lang|pair)\.(\d+)\.(.+)$", key)
            if m is None:
                out[key] = value
            elif int(m.group(4)) == slot[sides[f"{m.group(2)}coder"][int(m.group(3))]]:
                out[f"{m.group(1)}.{m.group(5)}"] = value
        return out, {"adapter_pairs": None, "adapter_finetune_from": None, "adapter_frozen_base": None}


def keep_frozen_base_of_resumed_run(args, frozen_by: str) -> None:
    """On fairseq-train's resume of the run's own checkpoint, without --reset-optimizer, freeze the base as the
    checkpoint did: fairseq builds the model before it loads the checkpoint and the optimizer after, and the
    optimizer's saved state holds the parameters that were trained. A frozen run resumed without the flag stays
    frozen (with a log line); freezing a run that trained every parameter is refused in one line. With
    --reset-optimizer (a new optimizer) or another checkpoint to start from, the flags decide."""
    saved = resumed_model_config(args)
    if saved is None or run_option(args, "reset_optimizer", "checkpoint", False):
        return
    path, was = resumed_checkpoint(args), bool(config_value(saved, "adapter_frozen_base", False))
    if was and not getattr(args, "adapter_frozen_base", False):
        _set(args, "adapter_frozen_base", True)
        logger.info("adapters: %s was trained with a frozen base (--adapter-frozen-base); the resumed run keeps it "
                    "frozen", path)
    elif getattr(args, "adapter_frozen_base", False) and not was:
        raise ValueError(f"{path} was trained with every parameter (no --adapter-frozen-base), this run freezes the "
                         f"base ({frozen_by}), and the optimizer state it resumes holds every parameter: resume "
                         f"without {frozen_by}, or add --reset-optimizer to freeze the base from here with a new "
                         "optimizer")


def is_adapter_parameter(name: str) -> bool:
    return re.search(r"(^|\.)adapter\.", name) is not None


def freeze_base(model) -> None:
    """requires_grad=False for every parameter outside the adapters (fairseq's optimizer then skips them)."""
    frozen = 0
    for name, p in model.named_parameters():
        if not is_adapter_parameter(name):
            p.requires_grad_(False)
            frozen += p.numel()
    logger.info("adapters: froze %d base parameters; training %d adapter parameters", frozen,
                sum(p.numel() for p in model.parameters() if p.requires_grad))


def load_base_weights(model, path: str, langs: List[str]) -> None:
    """Copy a trained baseline checkpoint into every non-adapter weight of ``model``, exactly."""
    require_checkpoint(path, "--adapter-finetune-from", _FINETUNE_FROM)
    source = checkpoint_utils.load_checkpoint_to_cpu(path)["model"]
    stored = source.get("lang_inventory")
    if stored is not None and decode_inventory(stored) and decode_inventory(stored) != list(langs):
        raise ValueError(f"--adapter-finetune-from {path}: it was trained with --langs {','.join(decode_inventory(stored))}"
                         f" but this run has --langs {','.join(langs)}; use the same --langs")
    if any(is_adapter_parameter(k) for k in source):
        raise ValueError(f"--adapter-finetune-from {path} holds adapters already: fine-tune from a baseline "
                         "(langshare_transformer or transformer) checkpoint")
    target = {k: v for k, v in model.state_dict().items()
              if not is_adapter_parameter(k) and k not in ("lang_inventory", TABLE_KEY)}
    source = {k: v for k, v in source.items() if k != "lang_inventory"}
    missing, extra = sorted(set(target) - set(source)), sorted(set(source) - set(target))
    wrong = sorted(f"{k} {tuple(source[k].shape)} there, {tuple(target[k].shape)} here"
                   for k in set(target) & set(source) if source[k].shape != target[k].shape)
    if missing or extra or wrong:
        raise ValueError(f"--adapter-finetune-from {path} does not fit this model (missing {missing[:3]}, unexpected "
                         f"{extra[:3]}, wrong shapes {wrong[:3]}); fine-tune from a baseline with the same dimensions, "
                         "layers, dictionary and embedding sharing")
    by_storage = {}
    for key, value in target.items():  # tied weights (shared embeddings) must receive one value
        first = by_storage.setdefault(value.data_ptr(), key)
        if first != key and not torch.equal(source[first], source[key]):
            raise ValueError(f"--adapter-finetune-from {path}: {key} and {first} are one tied weight here but differ "
                             "there; use the same --share-all-embeddings/--share-decoder-input-output-embed")
    with torch.no_grad():
        for key, value in target.items():
            value.copy_(source[key])
    logger.info("--adapter-finetune-from: initialised %d weights from %s", len(target), path)


# --- one exported pair -----------------------------------------------------------------------

class _SingleStack(_AdaptedStack):
    def make_adapter(self, cfg, dim, side):
        return Adapter(dim, cfg.adapter_bottleneck, export=cfg.export)


class AdapterSingleEncoder(_SingleStack, TransformerEncoderBase):
    def __init__(self, cfg, dictionary, embed_tokens, return_fc=False):
        self._plan_adapters(cfg, "encoder")
        super().__init__(cfg, dictionary, embed_tokens, return_fc=return_fc)


class AdapterSingleDecoder(_SingleStack, TransformerDecoderBase):
    def __init__(self, cfg, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        self._plan_adapters(cfg, "decoder")
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn,
                         output_projection=output_projection)


@register_model(SINGLE_MODEL)
class AdapterSingleTransformerModel(ConfigTransformerModel):
    """One language pair of an adapter model (``langshare export``): fairseq's transformer with one
    ``Adapter`` after each layer the full model adapts (``encoder.layers.0.adapter.down.weight``);
    it takes no language ids and runs under fairseq's ``translation_multi_simple_epoch`` task
    (load it with ``--user-dir``)."""

    config_class = AdapterSingleConfig
    encoder_class = AdapterSingleEncoder
    decoder_class = AdapterSingleDecoder


# --- presets ---------------------------------------------------------------------------------

def _bottleneck(args, size):
    args.adapter_bottleneck = getattr(args, "adapter_bottleneck", size)


@register_model_architecture("langshare_adapter_transformer", "langshare_adapter_transformer")
def langshare_adapter_transformer(args):
    """Transformer base (6+6, 512/2048, 8 heads), bottleneck 128 (the LSL paper's smallest, Table 1).
    The LSL paper's own setting adds --encoder-layers 16 --decoder-layers 3 --share-all-embeddings."""
    _bottleneck(args, 128)
    base_architecture(args)


@register_model_architecture("langshare_adapter_transformer", "langshare_adapter_transformer_small")
def langshare_adapter_transformer_small(args):
    """langshare_transformer_small (2+2, 128/512, 4 heads), bottleneck 32 (d/4, as 128 for d = 512)."""
    small_preset(args)
    _bottleneck(args, 32)
    base_architecture(args)


@register_model_architecture("langshare_adapter_transformer", "langshare_adapter_transformer_tiny")
def langshare_adapter_transformer_tiny(args):
    """langshare_transformer_tiny (2+2, 32/64, 2 heads), bottleneck 8: for tests."""
    tiny_preset(args)
    _bottleneck(args, 8)
    base_architecture(args)


@register_model_architecture(SINGLE_MODEL, SINGLE_MODEL)
def langshare_adapter_single(args):
    _bottleneck(args, 128)
    base_architecture(args)
