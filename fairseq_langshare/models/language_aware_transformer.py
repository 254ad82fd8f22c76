"""The language-aware Transformer every fairseq_langshare model subclasses.

It threads per-sentence ``src_lang_id``/``tgt_lang_id`` (LongTensor, B) from ``net_input``
into the encoder, returns them inside ``encoder_out``, reorders them with the rest of
``encoder_out`` (beam search), and hands them to the decoder in full and in incremental
decoding. Layers read them through the ``LanguageIds`` object their encoder/decoder passes
to ``build_encoder_layer``/``build_decoder_layer`` (``self.languages``); it is bound for one
forward call only. The model stores the task's language inventory with its weights.
"""

import dataclasses
import logging
from enum import Enum
from contextlib import nullcontext
from typing import Dict, List, Optional

from fairseq.models.transformer import (
    TransformerConfig,
    TransformerDecoderBase,
    TransformerEncoderBase,
    TransformerModel,
)
from omegaconf import OmegaConf, open_dict
from torch import Tensor

from ..languages import LanguageInventory, decode_inventory, decode_settings, encode_inventory
from ..modules.activation_checkpointing import replace_fairseq_checkpointing
from ..modules.auxiliary import collect_auxiliary
from ..modules.routing import LanguageIds, reorder_ids
from ..option_ranges import check_contradictions
from ..user_errors import option_text
from .config_transformer import ConfigTransformerModel

logger = logging.getLogger(__name__)

__all__ = ["LanguageAwareEncoder", "LanguageAwareDecoder", "LanguageAwareTransformerModel", "WeightsMismatch",
           "name_every_option"]

LANG_KEYS = ("src_lang_id", "tgt_lang_id")
TRANSFORMER_FIELDS = {f.name for f in dataclasses.fields(TransformerConfig)}


def name_every_option(args, cfg, config_class) -> None:
    """Give ``args`` (the options a model is built from, which fairseq saves as the checkpoint's model
    config) each option ``config_class`` adds to the Transformer that it lacks or holds as None, with
    ``cfg``'s value: the saved config names every option of the method, defaults included (a flag without
    a default is absent from fairseq-train's Namespace)."""
    own = sorted({f.name for f in dataclasses.fields(config_class)} - TRANSFORMER_FIELDS)
    with open_dict(args) if OmegaConf.is_config(args) else nullcontext():
        for name in own:
            if getattr(args, name, None) is None:
                value = getattr(cfg, name)
                setattr(args, name, value.value if isinstance(value, Enum) else value)


def task_inventory(task, arch: str, uses: str, error=ValueError) -> LanguageInventory:
    """The language inventory of ``task``; for a task without one (fairseq's own, whose batches carry no
    language ids) one line naming the task to use, before any data is read."""
    inventory = getattr(task, "inventory", None)
    if inventory is None or len(inventory) == 0:
        raise error(f"{arch} {uses}: use --task multilingual_langshare with --langs")
    return inventory


class WeightsMismatch(ValueError):
    """A checkpoint whose weights do not fit the model this run builds."""


def _vocabulary_misfit(differ, theirs, own) -> Optional[str]:
    """One line when the only weights that do not fit are the embeddings' and the output projection's rows:
    the run's dictionary (its data directory, its --langs) is not the checkpoint's, whatever the --arch."""
    vocab_keys = ("embed_tokens.weight", "output_projection.weight")
    if not differ or not all(k.endswith(vocab_keys) and theirs[k][1:] == own[k][1:] for k in differ):
        return None
    was, here = theirs[differ[0]][0], own[differ[0]][0]
    more = f"{here - was} more" if here > was else f"{was - here} fewer"
    return (f"the checkpoint was trained with a dictionary of {was} entries (language tokens included) but this "
            f"run's has {more} ({here}): pass the data directory the checkpoint was trained on (the same dict.txt) "
            f"and the same --langs")


def _first(encoder_out, key) -> Optional[Tensor]:
    value = encoder_out.get(key) if encoder_out is not None else None
    return value[0] if value else None


class LanguageAwareEncoder(TransformerEncoderBase):
    def __init__(self, cfg, dictionary, embed_tokens, return_fc=False):
        # created before nn.Module.__init__ so build_encoder_layer (called inside it) can hand it on
        self.languages = LanguageIds()
        super().__init__(cfg, dictionary, embed_tokens, return_fc=return_fc)

    def build_encoder_layer(self, cfg):
        """fairseq's layer, checkpointed (--checkpoint-activations) so that DDP can search it for
        unused parameters (``modules/activation_checkpointing.py``)."""
        return replace_fairseq_checkpointing(super().build_encoder_layer(cfg))

    def forward(self, src_tokens, src_lengths: Optional[Tensor] = None, return_all_hiddens: bool = False,
                token_embeddings: Optional[Tensor] = None, src_lang_id: Optional[Tensor] = None,
                tgt_lang_id: Optional[Tensor] = None):
        with self.languages.bind(src=src_lang_id, tgt=tgt_lang_id, padding_mask=src_tokens.eq(self.padding_idx)):
            out = super().forward(src_tokens, src_lengths, return_all_hiddens, token_embeddings)
        out["src_lang_id"] = [src_lang_id] if src_lang_id is not None else []
        out["tgt_lang_id"] = [tgt_lang_id] if tgt_lang_id is not None else []
        return out

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order):
        """fairseq rebuilds the dict from fixed keys; carry the language ids along."""
        reordered = super().reorder_encoder_out(encoder_out, new_order)
        for key in LANG_KEYS:
            ids = _first(encoder_out, key)
            reordered[key] = [reorder_ids(ids, new_order)] if ids is not None else []
        return reordered


class LanguageAwareDecoder(TransformerDecoderBase):
    def __init__(self, cfg, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        self.languages = LanguageIds()
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn,
                         output_projection=output_projection)

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        """fairseq's layer, checkpointed as the encoder's."""
        return replace_fairseq_checkpointing(super().build_decoder_layer(cfg, no_encoder_attn))

    def extract_features(self, prev_output_tokens, encoder_out=None, incremental_state=None,
                         full_context_alignment=False, alignment_layer=None, alignment_heads=None):
        """The target language of each row comes from ``encoder_out`` (reordered with beam
        search), never from the tokens, so it is known from the first decoding step."""
        with self.languages.bind(src=_first(encoder_out, "src_lang_id"), tgt=_first(encoder_out, "tgt_lang_id"),
                                 padding_mask=prev_output_tokens.eq(self.padding_idx)):
            return super().extract_features(
                prev_output_tokens, encoder_out=encoder_out, incremental_state=incremental_state,
                full_context_alignment=full_context_alignment, alignment_layer=alignment_layer,
                alignment_heads=alignment_heads,
            )


class LanguageAwareTransformerModel(ConfigTransformerModel):
    """Base model: subclasses set ``config_class``/``encoder_class``/``decoder_class`` and
    override the layer hooks of their encoder/decoder."""

    config_class = TransformerConfig
    encoder_class = LanguageAwareEncoder
    decoder_class = LanguageAwareDecoder
    # a training step can leave parameters unused (an absent language's, unselected components):
    # distributed training then searches for them (``data_parallel``)
    leaves_parameters_unused = True

    def __init__(self, args, encoder, decoder):
        super().__init__(args, encoder, decoder)
        self.inventory: Optional[LanguageInventory] = None
        self.register_buffer("lang_inventory", encode_inventory([]), persistent=True)

    @classmethod
    def build_model(cls, args, task):
        cfg = cls.config_from_args(args)
        name_every_option(args, cfg, cls.config_class)
        # per-language parameters are sized by the task's inventory (stored with the weights)
        cfg.num_languages = len(task.inventory) if hasattr(task, "inventory") else 0
        return super(TransformerModel, cls).build_model(cfg, task)

    def forward(self, src_tokens, src_lengths, prev_output_tokens, return_all_hiddens: bool = True,
                features_only: bool = False, alignment_layer: Optional[int] = None,
                alignment_heads: Optional[int] = None, src_lang_id: Optional[Tensor] = None,
                tgt_lang_id: Optional[Tensor] = None):
        encoder_out = self.encoder(src_tokens, src_lengths=src_lengths, return_all_hiddens=return_all_hiddens,
                                   src_lang_id=src_lang_id, tgt_lang_id=tgt_lang_id)
        return self.decoder(prev_output_tokens, encoder_out=encoder_out, features_only=features_only,
                            alignment_layer=alignment_layer, alignment_heads=alignment_heads,
                            src_lengths=src_lengths, return_all_hiddens=return_all_hiddens)

    def check_training_run(self, args) -> None:
        """Called by the task when a training run starts (not when a checkpoint is decoded): options that
        contradict each other (``only_with`` in ``config_class``) are refused."""
        check_contradictions(self.cfg, self.config_class, "model")

    # --- auxiliary losses -------------------------------------------------------------
    def auxiliary_outputs(self):
        """``({name: (value, weight)}, {name: statistic})`` recorded during the last forward."""
        return collect_auxiliary(self)

    # --- the language inventory ---------------------------------------------------------
    @property
    def langs(self) -> List[str]:
        return decode_inventory(self.lang_inventory)

    def attach_inventory(self, inventory: LanguageInventory, arch: Optional[str] = None):
        """Called by the task after building: ids the task emits index ``inventory``; its language-token
        flags and this model's ``--arch`` (the task's ``arch``: fairseq-hydra-train's model node has no
        ``arch``, it names it ``_name``) are stored with it."""
        self.inventory = inventory
        if arch:
            self._arch_name = arch
        self.lang_inventory = self._encoded_inventory()

    @property
    def arch_name(self) -> str:
        """The ``--arch`` this model was built as (its class name where nothing says)."""
        return getattr(self, "_arch_name", None) or str(getattr(self.args, "arch", None) or type(self).__name__)

    def _encoded_inventory(self):
        settings = {**self.inventory.tokens, "arch": self.arch_name,
                    **({"dictionary": self.inventory.dictionary} if self.inventory.dictionary else {})}
        return encode_inventory(self.inventory.langs, settings).to(self.lang_inventory.device)

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        stored = state_dict.get("lang_inventory")
        state_dict = dict(state_dict)
        if stored is None:  # weights of a plain fairseq transformer (e.g. dense initialisation)
            state_dict["lang_inventory"] = self.lang_inventory
        elif self.inventory is not None:
            self.inventory.adopt(decode_inventory(stored), settings=decode_settings(stored))
            self.lang_inventory = state_dict["lang_inventory"] = self._encoded_inventory()
        else:
            self.lang_inventory = stored.clone().to(self.lang_inventory.device)
        try:
            return super().load_state_dict(state_dict, strict=strict, model_cfg=model_cfg, args=args)
        except RuntimeError as error:
            if "Error(s) in loading state_dict" not in str(error):
                raise
            raise WeightsMismatch(self._misfit(state_dict, stored)) from error

    def _misfit(self, state_dict, stored) -> str:
        """One line on weights that do not fit this model (a resume with another --arch or size)."""
        own = {k: tuple(v.shape) for k, v in self.state_dict().items()}
        theirs = {k: tuple(v.shape) for k, v in state_dict.items()}
        missing, extra = sorted(set(own) - set(theirs)), sorted(set(theirs) - set(own))
        differ = [k for k in sorted(set(own) & set(theirs)) if own[k] != theirs[k]]
        vocab = _vocabulary_misfit(differ, theirs, own) if not (missing or extra) else None
        if vocab:
            return vocab
        shapes = [f"{k} {theirs[k]} there, {own[k]} here" for k in differ]
        details = ", ".join(part for part in (
            f"missing {', '.join(missing[:2])}" + (f" and {len(missing) - 2} more" if len(missing) > 2 else "") if missing else "",
            f"unexpected {', '.join(extra[:2])}" + (f" and {len(extra) - 2} more" if len(extra) > 2 else "") if extra else "",
            f"shapes {'; '.join(shapes[:2])}" if shapes else "") if part)
        arch = decode_settings(stored).get("arch") if stored is not None else None
        was = f"holds a {arch} model" if arch else "holds other weights"
        here = self.arch_name
        given = f" ({option_text('arch', 'model', arch)})" if arch else ""
        return (f"the checkpoint {was} but this run builds {here} ({details}); resume with the flags it was trained "
                f"with{given} or train into another {option_text('save_dir', 'checkpoint')}")
