"""``lsl_transformer``: language-specific layers (Pires et al., ACL 2023).

Some encoder layers are a dictionary of per-language layers indexed by the source or the target
language of each sentence (``--lsl-encoder-layers "SRC={3,4} & TGT={13,14,15}"``, 1-based as in
the paper); an LSL *replaces* the shared layer at its position, so the depth is exactly
``--encoder-layers``. ``--lsl-component`` makes the whole layer, only its FFN block or only its
attention block language-specific (Table 4). Decoder layers take the same spec
(``--lsl-decoder-layers``), or ``--lsl-separate-decoder`` gives every target language its own
decoder (layers and final layer norm; embeddings stay shared). ``--lsl-search`` builds Eq. 1:
every encoder layer mixes a shared layer and the source- and target-indexed LSL with softmax
weights; ``langshare analyze lsl`` reads them and prints the arg-max architecture.
``--lsl-dense-init`` initialises every shared layer and every LSL copy from a trained dense
checkpoint (section 3.3). ``export_state_dict`` extracts the plain Transformer one language pair
uses (``langshare export``).
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
from fairseq.models.transformer import TransformerConfig, TransformerModel
from fairseq.models.transformer.transformer_legacy import base_architecture
from fairseq.modules import LayerNorm
from omegaconf import OmegaConf, open_dict

from ..checkpoint_safety import require_checkpoint
from ..languages import decode_inventory
from ..modules.activation_checkpointing import wrap_like_fairseq
from ..modules.language_specific_layer import (
    COPIES,
    LanguageSpecificDecoderLayer,
    LanguageSpecificEncoderLayer,
    LanguageSpecificModule,
    LayerSpecError,
    MixedEncoderLayer,
    PartialLanguageSpecificDecoderLayer,
    PartialLanguageSpecificEncoderLayer,
    parse_layer_spec,
    reorder_modules,
    set_num_updates_once,
)
from .langshare_transformer import small_preset, tiny_preset
from .language_aware_transformer import (LanguageAwareDecoder, LanguageAwareEncoder, LanguageAwareTransformerModel,
                                         name_every_option, task_inventory)

logger = logging.getLogger(__name__)

LSL_COMPONENTS = ChoiceEnum(["layer", "ffn", "attention"])
SEARCH = "search"  # the "side" of an encoder layer in search mode (shared + src + tgt, mixed)


@dataclass
class LSLTransformerConfig(TransformerConfig):
    lsl_encoder_layers: str = field(default="", metadata={
        "help": 'language-specific encoder layers in the paper\'s 1-based notation, e.g. "SRC={3,4} & TGT={13,14,15}" '
                "(SRC: indexed by the source language, TGT: by the target language; ranges like {13-15}); "
                "each replaces the shared layer at its position; empty: every layer shared"})
    lsl_decoder_layers: str = field(default="", metadata={
        "help": 'language-specific decoder layers, same notation as --lsl-encoder-layers, e.g. "TGT={1,2,3}"'})
    lsl_component: LSL_COMPONENTS = field(default="layer", metadata={
        "help": "what is language-specific in an LSL: the whole layer, only the FFN block (LS-FFN, attention shared) "
                "or only the attention block (LS-ATTENTION, FFN shared), paper Table 4"})
    lsl_separate_decoder: bool = field(default=False, metadata={
        "help": "one decoder per target language (all decoder layers and the final decoder layer norm are "
                "target-indexed; embeddings and output projection stay shared), chosen per sentence"})
    lsl_search: bool = field(default=False, metadata={
        "help": "architecture search (Eq. 1): every encoder layer mixes a shared layer, the source-indexed and the "
                "target-indexed LSL with softmax weights over 3 learned scalars (initialised equal); read them "
                "with `langshare analyze lsl CHECKPOINT`"})
    lsl_dense_init: Optional[str] = field(default=None, metadata={
        "help": "dense pre-training (section 3.3): initialise every shared layer, every LSL copy, the embeddings and "
                "the decoder from this trained checkpoint (langshare_transformer of the same dimensions, or an "
                "lsl_transformer --lsl-search checkpoint whose shared layers are used); applied once when the model "
                "is first built (the flag is then cleared in the saved config)"})


LSL_FIELDS = ("lsl_encoder_layers", "lsl_decoder_layers", "lsl_component", "lsl_separate_decoder", "lsl_search",
              "lsl_dense_init")


@dataclass
class LSLPlan:
    """Which layer is what, resolved and validated once from the flags and the inventory."""

    num_langs: int
    encoder_sides: List[Optional[str]]  # per encoder layer: None (shared), "src", "tgt" or "search"
    decoder_sides: List[Optional[str]]
    component: str
    separate_decoder: bool


def lsl_sides(model_cfg) -> Dict[str, List[Optional[str]]]:
    """Per-layer sides of a (flat, argparse-style) model config: {"encoder": [...], "decoder": [...]}."""
    get = lambda name, default=None: getattr(model_cfg, name, default)  # noqa: E731
    n_enc, n_dec = int(get("encoder_layers")), int(get("decoder_layers"))
    if get("lsl_search", False):
        if (get("lsl_encoder_layers") or "").strip():
            raise LayerSpecError(
                "--lsl-search mixes shared, source and target layers at every encoder layer, so it takes no "
                "--lsl-encoder-layers; drop one of the two")
        encoder = [SEARCH] * n_enc
    else:
        encoder = parse_layer_spec(get("lsl_encoder_layers"), n_enc, "--lsl-encoder-layers", "--encoder-layers")
    if get("lsl_separate_decoder", False):
        if (get("lsl_decoder_layers") or "").strip():
            raise LayerSpecError(
                "--lsl-separate-decoder makes every decoder layer target-indexed, so it takes no "
                "--lsl-decoder-layers; drop one of the two")
        decoder = ["tgt"] * n_dec
    else:
        decoder = parse_layer_spec(get("lsl_decoder_layers"), n_dec, "--lsl-decoder-layers", "--decoder-layers")
    return {"encoder": encoder, "decoder": decoder}


def make_plan(cfg, num_langs: int) -> LSLPlan:
    if num_langs < 1:
        raise ValueError("lsl_transformer needs a language inventory: pass --langs")
    sides = lsl_sides(cfg)  # TransformerConfig answers the flat names (encoder_layers, ...)
    component = str(cfg.lsl_component)
    if cfg.lsl_search and component != "layer":
        raise LayerSpecError(f"--lsl-search mixes whole layers (Eq. 1); drop --lsl-component {component}")
    if (cfg.encoder.layers_to_keep or cfg.decoder.layers_to_keep) and (
            any(sides["encoder"]) or any(sides["decoder"])):
        raise LayerSpecError("--encoder/decoder-layers-to-keep renumbers layers; it cannot be combined with LSLs")
    return LSLPlan(num_langs, sides["encoder"], sides["decoder"], component, bool(cfg.lsl_separate_decoder))


class LSLEncoder(LanguageAwareEncoder):
    def __init__(self, cfg, dictionary, embed_tokens, return_fc=False):
        self.plan: LSLPlan = cfg.lsl_plan
        self._layers_built = 0
        super().__init__(cfg, dictionary, embed_tokens, return_fc=return_fc)

    def build_encoder_layer(self, cfg):
        index, plan = self._layers_built, self.plan
        self._layers_built += 1
        side = plan.encoder_sides[index]
        build = super().build_encoder_layer  # fairseq's layer, with its activation checkpointing and FSDP wrap
        if side is None:
            return build(cfg)
        if side == SEARCH:
            specific = LanguageSpecificEncoderLayer([build(cfg) for _ in range(plan.num_langs)], self.languages, None)
            return MixedEncoderLayer(build(cfg), specific, layer_number=index + 1)
        if plan.component == "layer":
            return LanguageSpecificEncoderLayer([build(cfg) for _ in range(plan.num_langs)], self.languages, side)
        layer = PartialLanguageSpecificEncoderLayer(cfg, self.languages, side, plan.num_langs, plan.component)
        return wrap_like_fairseq(layer, cfg)


class LSLDecoder(LanguageAwareDecoder):
    def __init__(self, cfg, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        self.plan: LSLPlan = cfg.lsl_plan
        self._layers_built = 0
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn,
                         output_projection=output_projection)
        if self.plan.separate_decoder and self.layer_norm is not None:
            # a separate decoder per target language includes its final (pre-norm) layer norm
            dim = self.layer_norm.normalized_shape[0]
            self.layer_norm = LanguageSpecificModule(
                [LayerNorm(dim, export=cfg.export) for _ in range(self.plan.num_langs)], self.languages, "tgt")

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        index, plan = self._layers_built, self.plan
        self._layers_built += 1
        side = plan.decoder_sides[index]
        build = super().build_decoder_layer
        if side is None:
            return build(cfg, no_encoder_attn)
        if plan.component == "layer" or plan.separate_decoder:
            copies = [build(cfg, no_encoder_attn) for _ in range(plan.num_langs)]
            return LanguageSpecificDecoderLayer(copies, self.languages, side)
        layer = PartialLanguageSpecificDecoderLayer(cfg, self.languages, side, plan.num_langs, plan.component,
                                                    no_encoder_attn=no_encoder_attn)
        return wrap_like_fairseq(layer, cfg)

    def reorder_incremental_state_scripting(self, incremental_state, new_order):
        """fairseq walks every module (every language's copy) at every step; the copies' caches
        are reordered by their containers."""
        return reorder_modules(self, incremental_state, new_order)


@register_model("lsl_transformer")
class LSLTransformerModel(LanguageAwareTransformerModel):
    config_class = LSLTransformerConfig
    encoder_class = LSLEncoder
    decoder_class = LSLDecoder

    def set_num_updates(self, num_updates):
        set_num_updates_once(self, num_updates)

    @classmethod
    def build_model(cls, args, task):
        inventory = task_inventory(task, "lsl_transformer", "routes every sentence by its languages")
        with open_dict(args) if OmegaConf.is_config(args) else nullcontext():
            base_architecture(args)
        cfg = cls.config_class.from_namespace(args)
        name_every_option(args, cfg, cls.config_class)
        cfg.lsl_plan = make_plan(cfg, len(inventory))  # validated before anything is built
        if cfg.lsl_dense_init:
            require_checkpoint(cfg.lsl_dense_init, "--lsl-dense-init",
                               "the checkpoint of the dense pre-training run (e.g. its checkpoint_best.pt)")
        model = super(TransformerModel, cls).build_model(cfg, task)  # fairseq's TransformerModelBase
        if cfg.lsl_dense_init:
            dense_initialize(model, cfg.lsl_dense_init, inventory.langs, cfg.lsl_plan)
            # applied once: a checkpoint of this model must not re-read (or need) the dense file when loaded
            with open_dict(args) if OmegaConf.is_config(args) else nullcontext():
                args.lsl_dense_init = None
        return model

    @classmethod
    def export_state_dict(cls, state_dict, model_cfg, src_id: int, tgt_id: int):
        """The weights the pair (src_id, tgt_id) uses, under the names of fairseq's plain
        ``transformer``, and the model-config changes (None deletes a key)."""
        sides = lsl_sides(model_cfg)
        if SEARCH in sides["encoder"]:
            raise ValueError("a --lsl-search checkpoint mixes every layer and is no plain Transformer: select the "
                             "architecture with `langshare analyze lsl`, train it, then export that checkpoint")
        lang_of = {"src": src_id, "tgt": tgt_id}
        out = {}
        for key, value in state_dict.items():
            if key == "lang_inventory":
                continue
            m = re.search(rf"\.{COPIES}\.(\d+)\.", key)
            if m is None:
                out[key] = value
            elif int(m.group(1)) == lang_of[key_side(key, sides)]:
                out[key[: m.start()] + "." + key[m.end():]] = value
        return out, {name: None for name in LSL_FIELDS}


def is_lsl_config(model_cfg) -> bool:
    from fairseq.models import ARCH_MODEL_REGISTRY

    name = getattr(model_cfg, "arch", None) or getattr(model_cfg, "_name", None)
    model_cls = ARCH_MODEL_REGISTRY.get(name)
    return model_cls is not None and issubclass(model_cls, LSLTransformerModel)


def key_side(key: str, sides) -> Optional[str]:
    """The indexing side of the container a state-dict key belongs to (``sides``: ``lsl_sides``)."""
    if sides is None:
        return None
    m = re.match(r"^(encoder|decoder)\.layers\.(\d+)\.", key)
    if m:
        return sides[m.group(1)][int(m.group(2))]
    if key.startswith(f"decoder.layer_norm.{COPIES}."):
        return "tgt"
    return None


def dense_name(key: str) -> str:
    """The name a weight has in a dense (all-shared) model: drop the per-language index and the
    search-mode branch names."""
    key = re.sub(rf"\.{COPIES}\.\d+\.", ".", key)
    return re.sub(r"^((?:en|de)coder\.layers\.\d+)\.(?:shared|specific)\.", r"\1.", key)


def dense_initialize(model, path: str, langs: List[str], plan: LSLPlan) -> None:
    """Copy a dense checkpoint into every shared layer and every LSL copy of ``model`` (exactly).

    A weight is taken from the same name in the checkpoint when both models hold it with the same
    meaning (shared weights, embeddings; per-language copies indexed by the same side, e.g. a separate
    decoder from a separate-decoder baseline), otherwise from its dense name (every language's copy
    of layer i gets the dense layer i). Search-mode mixing weights keep their initialisation."""
    state = checkpoint_utils.load_checkpoint_to_cpu(path)
    source = state["model"]
    stored = source.get("lang_inventory")
    if stored is not None and decode_inventory(stored) and decode_inventory(stored) != list(langs):
        raise ValueError(f"--lsl-dense-init {path}: it was trained with --langs {','.join(decode_inventory(stored))} "
                         f"but this run has --langs {','.join(langs)}; use the same --langs")
    cfg = state.get("cfg")
    source_model_cfg = cfg["model"] if cfg is not None and "model" in cfg else state.get("args")
    source_sides = lsl_sides(source_model_cfg) if is_lsl_config(source_model_cfg) else None  # None: a dense model
    target_sides = {"encoder": plan.encoder_sides, "decoder": plan.decoder_sides}
    dense = {dense_name(k): v for k, v in source.items() if f".{COPIES}." not in k and not k.endswith("mix_logits")}

    target = model.state_dict()
    chosen, missing = {}, []
    for key, value in target.items():
        if key == "lang_inventory" or key.endswith("mix_logits"):
            continue
        same_meaning = key in source and (f".{COPIES}." not in key
                                          or key_side(key, source_sides) == key_side(key, target_sides))
        src_value = source[key] if same_meaning else dense.get(dense_name(key))
        if src_value is None:
            missing.append(key)
            continue
        if tuple(src_value.shape) != tuple(value.shape):
            raise ValueError(f"--lsl-dense-init {path}: {dense_name(key)} has shape {tuple(src_value.shape)} there but "
                             f"{tuple(value.shape)} here; the dense model needs the same dimensions and dictionary")
        chosen[key] = src_value
    if missing:
        raise ValueError(f"--lsl-dense-init {path}: no dense weight for {missing[0]}"
                         f"{f' (and {len(missing) - 1} more)' if len(missing) > 1 else ''}; initialise from a "
                         "langshare_transformer (or lsl_transformer --lsl-search) checkpoint with the same layers")
    by_storage = {}
    for key, src_value in chosen.items():  # tied weights (shared embeddings) must receive one value
        ptr = target[key].data_ptr()
        if ptr in by_storage and not torch.equal(chosen[by_storage[ptr]], src_value):
            raise ValueError(f"--lsl-dense-init {path}: {key} and {by_storage[ptr]} are one tied weight here but "
                             "differ there; use the same --share-all-embeddings/--share-decoder-input-output-embed")
        by_storage.setdefault(ptr, key)
    with torch.no_grad():
        for key, src_value in chosen.items():
            target[key].copy_(src_value)
    logger.info("--lsl-dense-init: initialised %d weights from %s", len(chosen), path)


# --- presets ---------------------------------------------------------------------------------

@register_model_architecture("lsl_transformer", "lsl_transformer")
def lsl_transformer(args):
    """The paper's size: 16 encoder / 3 decoder layers, 512/2048, 8 heads, all embeddings shared
    (deep encoder, shallow decoder). Place LSLs with --lsl-encoder-layers, e.g. the paper's
    LSL-NAS "SRC={3,4} & TGT={13,14,15}" with --lsl-separate-decoder."""
    args.encoder_layers = getattr(args, "encoder_layers", 16)
    args.decoder_layers = getattr(args, "decoder_layers", 3)
    args.share_all_embeddings = getattr(args, "share_all_embeddings", True)
    base_architecture(args)


@register_model_architecture("lsl_transformer", "lsl_transformer_small")
def lsl_transformer_small(args):
    """Demo size: 6 encoder / 2 decoder layers, 128-dim, 4 heads, FFN 512."""
    args.encoder_layers = getattr(args, "encoder_layers", 6)
    small_preset(args)
    base_architecture(args)


@register_model_architecture("lsl_transformer", "lsl_transformer_tiny")
def lsl_transformer_tiny(args):
    """Tests: 4 encoder / 2 decoder layers, 32-dim, 2 heads, FFN 64."""
    args.encoder_layers = getattr(args, "encoder_layers", 4)
    tiny_preset(args)
    base_architecture(args)
