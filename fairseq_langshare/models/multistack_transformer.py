"""``langshare_multistack_transformer``: one encoder per source-language family and/or one decoder
per target-language family (the multi-encoder / multi-decoder baselines of the adaptive-sparse
paper, Table 1; Sen et al. 2019, Kong et al. 2021), or one per language (the LSL paper's
separate-decoder baseline, Dong et al. 2015).

A stack "per group" is the LSL container indexed by a group id instead of the language id: every
layer position holds a ``LanguageSpecificEncoderLayer``/``...DecoderLayer`` with one copy per
group, reading group ids through a ``LanguageGroupIds`` view (language id -> group id table, a
buffer of the encoder/decoder). The final layer norm (pre-norm) is per group too; token and
positional embeddings and the output projection stay shared (one vocabulary). Each sentence runs
exactly one stack, chosen per sentence, in training, full and incremental decoding.

Groups: ``--multi-encoder src-family|src-lang``, ``--multi-decoder tgt-family|tgt-lang``, with
families from the shipped table (``data/language_families.py``, ``--language-family-level``)
overridden by ``--language-families FILE``. Group ids number the groups by first appearance in
``--langs``. The resolved assignment is written to the saved config (``language_family_map``) and
the tables are buffers, so a checkpoint keeps its grouping when the table or the file changes.
"""

import logging
import re
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, Iterator, List, Optional

import torch
from fairseq.dataclass import ChoiceEnum
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerConfig, TransformerModel
from fairseq.models.transformer.transformer_legacy import base_architecture
from fairseq.modules import LayerNorm
from omegaconf import OmegaConf, open_dict
from torch import nn

from ..data.language_families import (
    LEVELS,
    LanguageFamilyError,
    decode_family_map,
    encode_family_map,
    group_ids,
    resolve_families,
)
from ..languages import decode_inventory, encode_inventory
from ..modules.first_rank import first_rank
from ..modules.language_specific_layer import (
    COPIES,
    LanguageSpecificDecoderLayer,
    LanguageSpecificEncoderLayer,
    LanguageSpecificModule,
    reorder_modules,
    set_num_updates_once,
)
from ..modules.routing import LanguageGroupIds
from .langshare_transformer import size_preset, small_preset, tiny_preset
from .latent_depth_transformer import trained_language_codes
from .language_aware_transformer import (LanguageAwareDecoder, LanguageAwareEncoder, LanguageAwareTransformerModel,
                                         name_every_option, task_inventory)

logger = logging.getLogger(__name__)

__all__ = ["MultistackTransformerModel", "MultistackConfigError", "StackGroups"]

MULTI_ENCODER = ChoiceEnum(["none", "src-family", "src-lang"])
MULTI_DECODER = ChoiceEnum(["none", "tgt-family", "tgt-lang"])
FAMILY_LEVELS = ChoiceEnum(list(LEVELS))
GROUP_BUFFERS = ("group_of_lang", "group_names")  # per grouped stack: language id -> group id, group names


class MultistackConfigError(ValueError):
    pass


@dataclass
class MultistackTransformerConfig(TransformerConfig):
    multi_encoder: MULTI_ENCODER = field(default="none", metadata={
        "help": "one encoder (all layers and the final pre-norm layer norm) per source-language family "
                "(src-family) or per source language (src-lang), chosen per sentence; none: one shared encoder"})
    multi_decoder: MULTI_DECODER = field(default="none", metadata={
        "help": "one decoder per target-language family (tgt-family) or per target language (tgt-lang), chosen "
                "per sentence; embeddings and output projection stay shared; none: one shared decoder"})
    language_families: Optional[str] = field(default=None, metadata={
        "help": "TSV file of lang<TAB>family lines ('#' comment lines) that overrides and extends the shipped "
                "family table (fairseq_langshare/data/language_families.py)"})
    language_family_level: FAMILY_LEVELS = field(default="genus", metadata={
        "help": "grouping of the shipped table: genus (Romance, Germanic, Slavic, Indo-Aryan, Turkic, ...) or "
                "family (top level: Indo-European, Uralic, Sino-Tibetan, ...; the adaptive-sparse paper's grouping)"})
    language_family_map: str = field(default="", metadata={
        "help": "the resolved assignment 'lang=family,lang=family,...' for every language of --langs; written to "
                "the saved config when the model is first built and then used instead of the table and the file "
                "(so a checkpoint keeps its grouping); set it by hand to give the families inline"})


MULTISTACK_FIELDS = ("multi_encoder", "multi_decoder", "language_families", "language_family_level",
                     "language_family_map")


@dataclass
class StackGroups:
    """The groups of one side: ``names[g]`` is group ``g``, ``group_of[lang_id]`` its group."""

    side: str  # "src" (encoder) or "tgt" (decoder)
    mode: str  # e.g. "src-family"
    names: List[str]
    group_of: List[int]
    members: Dict[str, List[str]]  # group name -> languages, for messages

    def describe(self) -> str:
        return ", ".join(f"{n} ({','.join(self.members[n])})" for n in self.names)


@dataclass
class MultistackPlan:
    encoder: Optional[StackGroups]
    decoder: Optional[StackGroups]
    family_map: Dict[str, str]


def _side_groups(mode: str, side: str, langs: List[str], families: Dict[str, str],
                 order: List[str]) -> Optional[StackGroups]:
    if mode == "none":
        return None
    by_family = mode.endswith("family")
    key = (lambda c: families[c]) if by_family else (lambda c: c)  # noqa: E731
    names, group_of = group_ids([key(c) for c in langs], [key(c) for c in order if c in langs])
    members = {n: [c for c, g in zip(langs, group_of) if names[g] == n] for n in names}
    return StackGroups(side, mode, names, group_of, members)


def make_plan(args, langs: List[str]) -> MultistackPlan:
    """Validate the flags and group the inventory (one-line errors naming the fix)."""
    get = lambda name, default=None: getattr(args, name, default)  # noqa: E731
    enc, dec = str(get("multi_encoder") or "none"), str(get("multi_decoder") or "none")
    if enc not in MULTI_ENCODER.__members__ or dec not in MULTI_DECODER.__members__:
        raise MultistackConfigError(f"--multi-encoder must be none|src-family|src-lang and --multi-decoder "
                                    f"none|tgt-family|tgt-lang, got {enc!r} and {dec!r}")
    if enc == "none" and dec == "none":
        raise MultistackConfigError(
            "langshare_multistack_transformer with --multi-encoder none and --multi-decoder none is the shared "
            "baseline: use --arch langshare_transformer, or pick --multi-encoder src-family|src-lang or "
            "--multi-decoder tgt-family|tgt-lang")
    if not langs:
        raise MultistackConfigError("langshare_multistack_transformer needs a language inventory: pass --langs")
    stored = decode_family_map(get("language_family_map"))
    uses_families = enc.endswith("family") or dec.endswith("family")
    if stored:
        missing = [c for c in langs if c not in stored]
        if missing:
            raise MultistackConfigError(
                f"--language-family-map names no family for {','.join(missing)} (it was resolved for "
                f"--langs {','.join(stored)}); pass the same --langs or add '{missing[0]}=FAMILY' to the map")
        families = {c: stored[c] for c in stored}
        order = list(stored)
    elif uses_families:
        families = resolve_families(langs, get("language_families"), str(get("language_family_level") or "genus"))
        order = list(langs)
    else:
        if get("language_families"):
            logger.warning("--language-families is ignored: neither --multi-encoder nor --multi-decoder groups by family")
        families, order = {}, list(langs)
    plan = MultistackPlan(_side_groups(enc, "src", langs, families, order),
                          _side_groups(dec, "tgt", langs, families, order), families)
    for name, groups in (("encoder", plan.encoder), ("decoder", plan.decoder)):
        if groups is not None:
            logger.info("--multi-%s %s: %d %ss: %s", name, groups.mode, len(groups.names), name, groups.describe())
            if len(groups.names) == 1:
                logger.warning("--multi-%s %s: every language of --langs is in one group (%s), so there is one "
                               "%s, as in langshare_transformer", name, groups.mode, groups.names[0], name)
    return plan


def warn_untrained_stacks(plan: MultistackPlan, trained: Dict[str, List[str]]) -> None:
    """One warning per side whose groups include some no training direction reaches (``trained``:
    ``language_codes_by_side`` of --lang-pairs): their stacks never train, yet cost memory
    (``idle_parameters``: data-parallel training leaves them out of DDP)."""
    if not any(trained.values()):
        return
    for name, groups, role in (("encoder", plan.encoder, "source"), ("decoder", plan.decoder, "target")):
        if groups is None:
            continue
        seen = set(trained[groups.side])
        idle = [n for n in groups.names if not seen.intersection(groups.members[n])]
        if idle and first_rank():
            logger.warning("--multi-%s %s: no training direction of --lang-pairs has a %s language in %s, so %d of "
                           "the %d %ss never train (a sentence routed to one decodes with untrained weights)",
                           name, groups.mode, role, ", ".join(idle), len(idle), len(groups.names), name)


# --- encoder and decoder ---------------------------------------------------------------------

class _GroupedStack:
    """What the multi-encoder and the multi-decoder share: the group table buffers, the view
    the containers read, the per-group final layer norm."""

    groups: Optional[StackGroups]

    def group_table(self, side: str) -> torch.Tensor:
        if side != self.groups.side:
            raise ValueError(f"the {type(self).__name__} stacks are indexed by the {self.groups.side} language, "
                             f"not the {side} language")
        return self.group_of_lang

    def group_ids_view(self) -> LanguageGroupIds:
        if "group_languages" not in self.__dict__:  # built lazily: layers are built inside nn.Module init
            self.group_languages = LanguageGroupIds(self.languages, self.group_table)
        return self.group_languages

    def _finish_groups(self, cfg):
        if self.groups is None:
            return
        self.register_buffer("group_of_lang", torch.tensor(self.groups.group_of, dtype=torch.long))
        self.register_buffer("group_names", encode_inventory(self.groups.names))
        if self.layer_norm is not None:  # pre-norm: a group's stack includes its final layer norm
            dim = self.layer_norm.normalized_shape[0]
            self.layer_norm = LanguageSpecificModule(
                [LayerNorm(dim, export=cfg.export) for _ in self.groups.names], self.group_ids_view(), self.groups.side)

    @property
    def num_groups(self) -> int:
        return 1 if self.groups is None else len(self.groups.names)

    def group_containers(self):
        return [m for m in self.modules()
                if isinstance(m, (LanguageSpecificEncoderLayer, LanguageSpecificDecoderLayer, LanguageSpecificModule))]


class MultistackEncoder(_GroupedStack, LanguageAwareEncoder):
    def __init__(self, cfg, dictionary, embed_tokens, return_fc=False):
        self.groups = cfg.multistack_plan.encoder
        super().__init__(cfg, dictionary, embed_tokens, return_fc=return_fc)
        self._finish_groups(cfg)

    def build_encoder_layer(self, cfg):
        build = super().build_encoder_layer  # fairseq's layer, with its activation checkpointing and FSDP wrap
        if self.groups is None:
            return build(cfg)
        return LanguageSpecificEncoderLayer([build(cfg) for _ in self.groups.names], self.group_ids_view(), "src")


class MultistackDecoder(_GroupedStack, LanguageAwareDecoder):
    def __init__(self, cfg, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        self.groups = cfg.multistack_plan.decoder
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn,
                         output_projection=output_projection)
        self._finish_groups(cfg)

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        build = super().build_decoder_layer
        if self.groups is None:
            return build(cfg, no_encoder_attn)
        copies = [build(cfg, no_encoder_attn) for _ in self.groups.names]
        return LanguageSpecificDecoderLayer(copies, self.group_ids_view(), "tgt")

    def reorder_incremental_state_scripting(self, incremental_state, new_order):
        """fairseq walks every module (every group's copy) at every step; the copies' caches are
        reordered by their containers."""
        return reorder_modules(self, incremental_state, new_order)


def stack_parameters_except(stack: _GroupedStack, groups) -> Iterator[nn.Parameter]:
    """The parameters of ``stack``'s copies (layers, final layer norms) of every group not in ``groups``."""
    for container in stack.group_containers():
        for g, copy in enumerate(container.copies):
            if g not in groups:
                yield from copy.parameters()


# --- the model -------------------------------------------------------------------------------

@register_model("langshare_multistack_transformer")
class MultistackTransformerModel(LanguageAwareTransformerModel):
    config_class = MultistackTransformerConfig
    encoder_class = MultistackEncoder
    decoder_class = MultistackDecoder

    def set_num_updates(self, num_updates):
        set_num_updates_once(self, num_updates)

    @classmethod
    def build_model(cls, args, task):
        inventory = task_inventory(task, "langshare_multistack_transformer", "routes every sentence by its languages",
                                   MultistackConfigError)
        with open_dict(args) if OmegaConf.is_config(args) else nullcontext():
            base_architecture(args)
        try:
            plan = make_plan(args, list(inventory.langs))
        except LanguageFamilyError as e:
            raise MultistackConfigError(str(e)) from None
        trained = trained_language_codes(task, inventory)  # the task's, parsed: a file, a hydra node alike
        cfg = cls.config_class.from_namespace(args)
        cfg.multistack_plan = plan
        with open_dict(args) if OmegaConf.is_config(args) else nullcontext():
            name_every_option(args, cfg, cls.config_class)
            if plan.family_map:  # resolved once; later builds (generate) use it, not the table or the file
                args.language_family_map = encode_family_map(plan.family_map)
        model = super(TransformerModel, cls).build_model(cfg, task)  # fairseq's TransformerModelBase
        model.trained_codes = trained
        return model

    def check_training_run(self, args) -> None:
        """A training run also names the stacks its directions never reach (not a decoding, whose task holds
        only the pair it decodes)."""
        super().check_training_run(args)
        warn_untrained_stacks(self.cfg.multistack_plan, self.trained_codes)

    def stacks(self):
        return [(name, stack) for name, stack in (("encoder", self.encoder), ("decoder", self.decoder))
                if stack.groups is not None]

    def group_of(self, side: str, lang_id: int) -> int:
        stack = self.encoder if side == "src" else self.decoder
        if stack.groups is None:
            return 0
        table = stack.group_of_lang  # the checkpoint's table once loaded; the plan's on the meta device
        return stack.groups.group_of[lang_id] if table.is_meta else int(table[lang_id])

    def effective_parameters(self, src_lang_id: int, tgt_lang_id: int) -> int:
        """Parameters one sentence of the pair runs: all but the other groups' stacks."""
        total = sum(p.numel() for p in self.parameters())
        unused = 0
        for name, stack in self.stacks():
            group = self.group_of(stack.groups.side, src_lang_id if name == "encoder" else tgt_lang_id)
            unused += sum(p.numel() for p in stack_parameters_except(stack, {group}))
        return total - unused

    def idle_parameters(self) -> FrozenSet[nn.Parameter]:
        """The stacks of the groups no direction of --lang-pairs reaches (``warn_untrained_stacks``): no
        training step uses them, and ``data_parallel`` leaves them out of DDP. Read from the
        group tables (a loaded checkpoint's, once loaded), the same on every rank; empty when the
        directions are unknown."""
        idle = self.__dict__.get("_idle")
        if idle is None:
            if self.inventory is None:  # not attached yet: nothing is known to be idle
                return frozenset()
            params = []
            trained = getattr(self, "trained_codes", None) or {}
            for _, stack in self.stacks():
                codes = trained.get(stack.groups.side)
                if not codes:
                    continue
                used = {self.group_of(stack.groups.side, self.inventory.id(code)) for code in codes}
                params.extend(stack_parameters_except(stack, used))
            idle = self.__dict__["_idle"] = frozenset(params)
        return idle

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        """The checkpoint's group tables win (its copies were trained with them); a different
        number of groups is a clear error, not a shape mismatch."""
        state_dict = dict(state_dict)
        built = self._built_family_map()
        for name, stack in self.stacks():
            stored = state_dict.get(f"{name}.group_names")
            if stored is None:
                continue
            stored_names = decode_inventory(stored)
            if len(stored_names) != stack.num_groups:
                langs = decode_inventory(state_dict["lang_inventory"]) if "lang_inventory" in state_dict else []
                table = state_dict.get(f"{name}.group_of_lang")
                fix = ""
                if langs and table is not None and stack.groups.mode.endswith("family"):
                    fix = ("; pass --language-family-map " +
                           ",".join(f"{c}={stored_names[int(g)]}" for c, g in zip(langs, table.tolist())))
                raise MultistackConfigError(
                    f"the checkpoint has {len(stored_names)} {name}s ({','.join(stored_names)}) but this model was "
                    f"built with {stack.num_groups} ({','.join(stack.groups.names)}): the families changed{fix}")
            stack.group_names = stored.clone().to(stack.group_names.device)
        result = super().load_state_dict(state_dict, strict=strict, model_cfg=model_cfg, args=args)
        self.__dict__.pop("_idle", None)  # read from the loaded group tables on the next call
        family_map = self.family_map()
        if built and family_map and family_map != built and first_rank():
            logger.warning("the checkpoint's grouping %s replaces %s, which this run's families gave: its stacks were "
                           "trained with it (docs/multistack.md)", encode_family_map(family_map),
                           encode_family_map(built))
        if model_cfg is not None and family_map:  # the config saved next to these weights names their grouping
            with open_dict(model_cfg) if OmegaConf.is_config(model_cfg) else nullcontext():
                model_cfg.language_family_map = encode_family_map(family_map)
        return result

    def _built_family_map(self) -> Dict[str, str]:
        """``family_map`` as this model was built (its plan's, while the tables are on the meta device)."""
        for _, stack in self.stacks():
            if stack.groups.mode.endswith("family"):
                if not stack.group_of_lang.is_meta:
                    return self.family_map()
                return {c: stack.groups.names[stack.groups.group_of[i]] for i, c in enumerate(self.langs)}
        return {}

    def family_map(self) -> Dict[str, str]:
        """{language: family} as the group tables (buffers) say, for the family-grouped stacks."""
        for _, stack in self.stacks():
            if stack.groups.mode.endswith("family"):
                names = decode_inventory(stack.group_names)
                return {c: names[int(g)] for c, g in zip(self.langs, stack.group_of_lang.tolist())}
        return {}

    @classmethod
    def export_state_dict(cls, state_dict, model_cfg, src_id: int, tgt_id: int):
        """The pair's weights under fairseq ``transformer`` names (its groups' copies become the
        plain layers and final layer norms) and the model-config changes (None deletes a key)."""
        pick = {}
        for name, lang in (("encoder", src_id), ("decoder", tgt_id)):
            table = state_dict.get(f"{name}.group_of_lang")
            if table is not None:
                pick[name] = int(table[lang])
        drop = {"lang_inventory"} | {f"{name}.{b}" for name in pick for b in GROUP_BUFFERS}
        out = {}
        for key, value in state_dict.items():
            if key in drop:
                continue
            m = re.search(rf"\.{COPIES}\.(\d+)\.", key)
            if m is None:
                out[key] = value
            elif int(m.group(1)) == pick[key.split(".", 1)[0]]:
                out[key[: m.start()] + "." + key[m.end():]] = value
        return out, {name: None for name in MULTISTACK_FIELDS}


# --- presets ---------------------------------------------------------------------------------

@register_model_architecture("langshare_multistack_transformer", "langshare_multistack_transformer")
def langshare_multistack_transformer(args):
    """The adaptive-sparse paper's Public-24 size: 6+6 layers, 512-dim, FFN 1024, 4 heads."""
    size_preset(args, 512, 1024, 4, 6)
    base_architecture(args)


@register_model_architecture("langshare_multistack_transformer", "langshare_multistack_transformer_small")
def langshare_multistack_transformer_small(args):
    """Demo size: 2+2 layers, 128-dim, 4 heads, FFN 512."""
    small_preset(args)
    base_architecture(args)


@register_model_architecture("langshare_multistack_transformer", "langshare_multistack_transformer_tiny")
def langshare_multistack_transformer_tiny(args):
    """Tests: 2+2 layers, 32-dim, 2 heads, FFN 64."""
    tiny_preset(args)
    base_architecture(args)
