"""``latent_depth_transformer``: deep Transformers with latent depth (Li et al., NeurIPS 2020).

A pre-norm Transformer whose layer l adds ``z_l * F_l(x)`` to the residual stream (Eq. 2): one
z_l per layer scales all of its sub-layers (fairseq's ``residual_connection`` hook). Every
language has its own posterior over the layers of a latent stack (``modules/latent_layers.py``);
a sentence's z comes from its own language (source or target, per stack), so batches mix
languages freely. Latent layers sit in the decoder (LL-D), the encoder (LL-E) or both
(``--latent-layers``). The loss terms of Eq. 8 reach the criterion through ``AuxiliaryReporter``
(one backward); the selection logits learn from every I-th update only (Algorithm 2,
``--latent-selection-update-period``). At inference nothing is sampled: kept layers run with
z = 1, skipped layers do not run, and ``export_state_dict`` writes a language pair's pruned
network as a plain pre-norm fairseq ``transformer``.
"""

import logging
import re
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, List, Optional

import torch
from fairseq.dataclass import ChoiceEnum
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerConfig, TransformerModel
from fairseq.models.transformer.transformer_legacy import base_architecture
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase, TransformerEncoderLayerBase
from omegaconf import OmegaConf, open_dict
from torch import nn

from ..modules.activation_checkpointing import checkpoint, wrap_like_fairseq
from ..languages import decode_inventory
from ..modules.latent_layers import (DECISIVE, KEEP_RULES, PRIORS, RUN, SKIP, LayerSelector, alpha_from_state,
                                     keep_from_state, resolve_keep_rule, undecided_share)
from ..modules.row_subsets import SubsetCaches, decoder_layer_on_rows, encoder_layer_on_rows
from ..modules.schedules import set_given_options
from ..option_ranges import OnlyWith, Range, check_ranges
from .langshare_transformer import size_preset
from .language_aware_transformer import (LanguageAwareDecoder, LanguageAwareEncoder, LanguageAwareTransformerModel, _first,
                                         name_every_option, task_inventory)
from ..run_options import run_option

logger = logging.getLogger(__name__)

STACKS = ChoiceEnum(["decoder", "encoder", "both"])
SIDES = ChoiceEnum(["src", "tgt"])
PRIOR_CHOICES = ChoiceEnum(list(PRIORS))
KEEP_CHOICES = ChoiceEnum(["auto", *KEEP_RULES])
STACK_NAMES = {"encoder": "enc", "decoder": "dec"}
_TAU, _WEIGHT, _UPDATES = ("the Gumbel-softmax temperature must be positive",
                           "a loss weight (0 switches the term off)", "a number of updates")


@dataclass
class LatentDepthTransformerConfig(TransformerConfig):
    latent_layers: STACKS = field(default="decoder", metadata={
        "help": "where the layers are latent: decoder (LL-D), encoder (LL-E) or both (LL-Both)"})
    latent_encoder_lang: SIDES = field(default="src", metadata={
        "help": "language whose posterior selects the encoder layers of a sentence"})
    latent_decoder_lang: SIDES = field(default="tgt", metadata={
        "help": "language whose posterior selects the decoder layers of a sentence"})
    latent_logit_init: float = field(default=0.0, metadata={
        "help": "initial selection logit of every layer and language: q(z=1) = sigmoid(value); 0 is the prior mean 1/2",
        "range": Range(why="a logit")})
    latent_tau_start: float = field(default=1.0, metadata={"help": "Gumbel-softmax temperature tau at update 0 (Eq. 5)",
                                                           "range": Range(0, low_open=True, why=_TAU)})
    latent_tau_end: float = field(default=0.1, metadata={
        "help": "tau at the end of its geometric annealing (equal to --latent-tau-start: constant)",
        "range": Range(0, low_open=True, why=_TAU)})
    latent_tau_anneal_updates: Optional[int] = field(default=None, metadata={
        "help": "updates over which tau goes from --latent-tau-start to --latent-tau-end (default: the sampling phase, "
                "i.e. --latent-commit-updates, or --max-update when training never commits)",
        "range": Range(0, why=_UPDATES)})
    latent_prior: PRIOR_CHOICES = field(default="uniform", metadata={
        "help": "prior of the KL term (Eq. 7): uniform (Beta(1,1)) or aggregated (the posterior averaged over languages)"})
    latent_kl_weight: float = field(default=1.0, metadata={
        "help": "beta: weight of KL(q || prior) (averaged over layers) relative to the per-token cross entropy, reached "
                "after the annealing", "range": Range(0, why=_WEIGHT)})
    latent_kl_anneal_updates: Optional[int] = field(default=None, metadata={
        "help": "updates over which beta grows linearly from 0 to --latent-kl-weight (default: a third of the sampling "
                "phase; 0: no annealing)", "range": Range(0, why=_UPDATES)})
    latent_target_depth_weight: float = field(default=0.1, metadata={
        "help": "lambda: weight of the target-depth loss L_K = |sum_l u_l - K| (Eq. 8)",
        "range": Range(0, why=_WEIGHT)})
    latent_encoder_target_depth: int = field(default=0, metadata={
        "help": "K for the encoder's latent layers (0: no target-depth loss)",
        "range": Range(0, why="layers of the encoder (at most --encoder-layers; 0: no target-depth loss)"),
        "only_with": OnlyWith("latent_layers", ("encoder", "both"), why="the encoder has no latent layers")})
    latent_decoder_target_depth: int = field(default=0, metadata={
        "help": "K for the decoder's latent layers (0: no target-depth loss)",
        "range": Range(0, why="layers of the decoder (at most --decoder-layers; 0: no target-depth loss)"),
        "only_with": OnlyWith("latent_layers", ("decoder", "both"), why="the decoder has no latent layers")})
    latent_selection_update_period: int = field(default=1, metadata={
        "help": "I of Algorithm 2: the selection logits learn from every I-th update only (1: joint training)",
        "range": Range(1, why="I of Algorithm 2 (1 updates the selection logits at every update)")})
    latent_keep: KEEP_CHOICES = field(default="auto", metadata={
        "help": "inference rule per language: threshold (keep layer l when q(z_l=1) >= --latent-keep-threshold), "
                "top-k (keep the K most probable layers, K = the stack's --latent-*-target-depth) or auto (top-k for a "
                "stack with a target depth, threshold otherwise)"})
    latent_keep_threshold: float = field(default=0.5, metadata={
        "help": "selection probability from which a layer is kept at inference (--latent-keep threshold)",
        "range": Range(0, 1, why="it is a selection probability")})
    latent_commit_updates: Optional[int] = field(default=None, metadata={
        "help": "update from which training runs the pruned network inference runs: the keep decision is frozen, "
                "nothing is sampled and the logits stop learning (default: a 32nd of --max-update, chosen on valid "
                "data: docs/latent_depth.md; 0: never)",
        "range": Range(0, why="the update from which training runs the pruned network (0: never commit)")})
    latent_logit_lr_scale: float = field(default=10.0, metadata={
        "help": "the selection logits are scale * theta, so they learn scale times faster than the weights under Adam "
                "(1: the paper's joint training; see docs/latent_depth.md for why the CPU-sized runs need more)",
        "range": Range(0, low_open=True, why="a learning-rate multiplier (1: the logits learn at the weights' rate)")})


LATENT_FIELDS = tuple(name for name in LatentDepthTransformerConfig.__dataclass_fields__ if name.startswith("latent_"))
# the schedules' horizons, by option: default shares of --max-update, kept by a resumed run (schedules.keep_horizons)
LATENT_HORIZONS = (("--latent-commit-updates", "latent_commit_updates"),
                   ("--latent-tau-anneal-updates", "latent_tau_anneal_updates"),
                   ("--latent-kl-anneal-updates", "latent_kl_anneal_updates"))


def latent_stacks(model_cfg) -> List[str]:
    value = str(getattr(model_cfg, "latent_layers", "decoder"))
    return ["encoder", "decoder"] if value == "both" else [value]


def validate(cfg) -> None:
    """One line naming the problem and the fix for every option whose valid values depend on other options (the
    range of each option on its own is declared with the option: ``option_ranges``)."""
    check_ranges(cfg, LatentDepthTransformerConfig, "model")
    stacks = latent_stacks(cfg)
    for stack in stacks:
        if not getattr(cfg, stack).normalize_before:
            raise ValueError(f"latent_depth_transformer is pre-norm (Eq. 1): a skipped post-norm layer would still apply "
                             f"its layer norm; pass --{stack}-normalize-before (the presets set it)")
    for stack in ("encoder", "decoder"):
        k, depth = getattr(cfg, f"latent_{stack}_target_depth"), getattr(cfg, stack).layers
        if not 0 <= k <= depth:
            raise ValueError(f"--latent-{stack}-target-depth {k} is outside 0..{depth} (--{stack}-layers); "
                             "pass a depth the stack can reach, or 0 for no target-depth loss")
        if str(cfg.latent_keep) == "top-k" and stack in stacks and k == 0:
            raise ValueError(f"--latent-keep top-k keeps the K = --latent-{stack}-target-depth most probable layers; "
                             f"set --latent-{stack}-target-depth K (or use --latent-keep threshold)")
    if cfg.offload_activations:
        raise ValueError("--offload-activations is not supported with latent layers (they checkpoint activations "
                         "with torch's own checkpoint); use --checkpoint-activations alone")


def default_commit_updates(max_update: int) -> int:
    """--latent-commit-updates when not given: a 32nd of the run. At the budgets measured
    (docs/latent_depth.md, "When to commit") the posteriors are still undecided at any commit point,
    and the sampling phase costs the pruned network more than its selection gains: valid NLL 4.88
    committing at a 32nd against 4.98 at a 16th, 5.05 at an eighth and 5.25 at a quarter (2,000
    updates, gettext O2M, seed 1; a 64th: 4.88). At least update 1 in a run with a --max-update:
    0 (never commit) must be asked for."""
    return max(1, max_update // 32) if max_update > 0 else 0


def trained_language_codes(task, inventory) -> Dict[str, List[str]]:
    """Language codes on each side of the task's training directions (the languages whose posteriors
    the aggregated prior and u_l average over)."""
    return language_codes_by_side(getattr(task, "lang_pairs", None) or [], inventory)


def language_codes_by_side(lang_pairs, inventory) -> Dict[str, List[str]]:
    """{"src": codes, "tgt": codes} of the directions ``lang_pairs`` ("src-tgt" strings) in ``inventory``."""
    sides = {"src": set(), "tgt": set()}
    for pair in lang_pairs:
        src, tgt = pair.split("-")
        for side, code in (("src", src), ("tgt", tgt)):
            if code in inventory:
                sides[side].add(code)
    return {side: sorted(codes) for side, codes in sides.items()}


def trained_languages(task, inventory) -> Dict[str, List[int]]:
    """The ids of ``trained_language_codes`` in the inventory as it is now."""
    return {side: sorted(inventory.id(code) for code in codes)
            for side, codes in trained_language_codes(task, inventory).items()}


class TrainedLanguagesByCode:
    """Mixin of the models whose modules mask the trained languages (``set_trained_languages``: latent
    depth's selectors, adaptive sparse's scorers). The masks are built from the task's inventory, but a
    checkpoint loaded under a reordered --langs re-maps the ids to its own order
    (``LanguageInventory.adopt``), the order its per-language logits follow: so the masks are kept as
    codes (``trained_codes``, set by ``build_model``) and resolved again after every load."""

    trained_codes: Optional[Dict[str, List[str]]] = None

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        result = super().load_state_dict(state_dict, strict=strict, model_cfg=model_cfg, args=args)
        self.resolve_trained_languages()
        return result

    def resolve_trained_languages(self) -> None:
        if self.trained_codes is None or self.inventory is None:
            return
        for module in self.modules():
            if module is not self and hasattr(module, "set_trained_languages"):
                module.set_trained_languages([self.inventory.id(c) for c in self.trained_codes.get(module.side, [])])


def make_selector(cfg, stack: str) -> Optional[LayerSelector]:
    if stack not in latent_stacks(cfg):
        return None
    side = str(getattr(cfg, f"latent_{stack}_lang"))
    return LayerSelector(
        STACK_NAMES[stack], cfg.num_languages, getattr(cfg, stack).layers, side,
        logit_init=cfg.latent_logit_init, tau_start=cfg.latent_tau_start, tau_end=cfg.latent_tau_end,
        tau_anneal_updates=int(cfg.latent_tau_anneal_updates or 0), prior=str(cfg.latent_prior),
        kl_weight=cfg.latent_kl_weight, kl_anneal_updates=int(cfg.latent_kl_anneal_updates or 0),
        target_depth=getattr(cfg, f"latent_{stack}_target_depth"), target_depth_weight=cfg.latent_target_depth_weight,
        update_period=cfg.latent_selection_update_period, keep_rule=resolve_keep_rule(cfg.latent_keep, getattr(cfg, f"latent_{stack}_target_depth")),
        keep_threshold=cfg.latent_keep_threshold, commit_updates=int(cfg.latent_commit_updates or 0),
        logit_lr_scale=cfg.latent_logit_lr_scale, trained_languages=cfg.latent_trained_languages.get(side))


class LatentLayerMixin:
    """Layer l of a latent stack: z_l scales every sub-layer's output before the residual add
    (Eq. 2); at inference the layer runs (z = 1) or is skipped. In a batch whose languages
    disagree about the layer (a (1, B, 1) plan), it runs on the rows that keep it only
    (``modules/row_subsets.py``): each row costs its own kept layers, not the union of the
    batch's. ``row_dispatch = False`` restores the union path (every row runs, the skippers'
    outputs are discarded), kept for the equivalence tests."""

    row_dispatch = True

    def _attach(self, selector: LayerSelector, index: int, cfg):
        self.__dict__["selector"] = selector  # owned (and saved) by the encoder/decoder
        self.layer_index = index
        self.checkpoint_activations = bool(cfg.checkpoint_activations)
        self.__dict__["_z"] = None
        self.__dict__["_subset"] = SubsetCaches(self)

    def residual_connection(self, x, residual):
        z = self.__dict__["_z"]
        return residual + x if z is None else residual + z.to(x.dtype) * x

    def reorder_incremental_state(self, incremental_state, new_order):
        """Caches of a layer that ran on a subset of rows follow the beam to the same rows."""
        self.__dict__["_subset"].reorder(incremental_state, new_order)

    def _with_z(self, z, run):
        """``run()`` with the layer's outputs scaled by ``z`` (None: z = 1, at inference and from the
        commit on), its activations recomputed in the backward pass under --checkpoint-activations
        (before and after the commit; non-reentrant: z's gradient reaches the logits)."""
        def call():
            self.__dict__["_z"] = z
            try:
                return run()
            finally:
                self.__dict__["_z"] = None

        if self.checkpoint_activations and self.training and torch.is_grad_enabled():
            return checkpoint(call)
        return run() if z is None else call()

    def _run(self, x, run, skipped, on_rows=None, incremental_state=None):
        """``run()`` the layer on every row, ``on_rows(rows)`` on some (None: cannot), or
        ``skipped(x)``: the output of a skipped layer."""
        plan, z = self.__dict__["selector"].for_layer(self.layer_index, x.size(1))
        if plan is SKIP:
            return skipped(x)
        subset = self.__dict__["_subset"]
        if plan is not RUN and self.row_dispatch and on_rows is not None:
            rows = subset.resume(incremental_state, self.__dict__["selector"].plan_rows(self.layer_index, plan))
            out = self._with_z(None if z is None else z.index_select(1, rows), lambda: on_rows(rows))
            subset.suspend(incremental_state, rows, x.size(1))
            return out
        subset.release(incremental_state)  # every row left keeps the layer: fairseq's caches again
        out = self._with_z(z, run)
        if plan is RUN:
            return out
        # the union path: the rows of languages that skip the layer keep its input
        head, rest = (out[0], out[1:]) if isinstance(out, tuple) else (out, None)
        head = torch.where(plan, head, x)
        return head if rest is None else (head, *rest)


class LatentEncoderLayer(LatentLayerMixin, TransformerEncoderLayerBase):
    def __init__(self, cfg, selector, index, return_fc=False):
        super().__init__(cfg, return_fc=return_fc)
        self._attach(selector, index, cfg)

    def forward(self, x, encoder_padding_mask, attn_mask=None):
        parent = super(LatentEncoderLayer, self).forward
        return self._run(x, lambda: parent(x, encoder_padding_mask, attn_mask),
                         lambda x: (x, None) if self.return_fc else x,
                         encoder_layer_on_rows(parent, x, encoder_padding_mask, attn_mask, self.return_fc))


class LatentDecoderLayer(LatentLayerMixin, TransformerDecoderLayerBase):
    def __init__(self, cfg, selector, index, no_encoder_attn=False):
        super().__init__(cfg, no_encoder_attn)
        self._attach(selector, index, cfg)

    def forward(self, x, encoder_out=None, encoder_padding_mask=None, incremental_state=None,
                prev_self_attn_state=None, prev_attn_state=None, self_attn_mask=None, self_attn_padding_mask=None,
                need_attn=False, need_head_weights=False):
        parent = super(LatentDecoderLayer, self).forward
        args = (x, encoder_out, encoder_padding_mask, incremental_state, prev_self_attn_state, prev_attn_state,
                self_attn_mask, self_attn_padding_mask, need_attn, need_head_weights)
        return self._run(x, lambda: parent(*args), lambda x: (x, None, None),
                         decoder_layer_on_rows(parent, self.encoder_attn, *args), incremental_state)


def reorder_walk(decoder, incremental_state, new_order, skip=None):
    """``reorder_incremental_state`` of the decoder's stateful modules (listed once, on the
    decoder), but none of layer i's when ``skip[i]``, and none inside a layer whose caches its
    ``SubsetCaches`` holds (the layer reorders them itself, for the rows that keep it)."""
    stateful = decoder.__dict__.get("_stateful")
    if stateful is None:
        in_layers, stateful = set(), []
        for index, layer in enumerate(decoder.layers):
            subset = layer.__dict__.get("_subset")
            for module in layer.modules():
                in_layers.add(id(module))
                if hasattr(module, "reorder_incremental_state"):
                    stateful.append((index, module, None if module is layer else subset))
        stateful += [(None, m, None) for m in decoder.modules()
                     if id(m) not in in_layers and hasattr(m, "reorder_incremental_state")]
        decoder.__dict__["_stateful"] = stateful
    for index, module, owner in stateful:
        if skip is not None and index is not None and skip[index]:
            continue
        if owner is not None and owner.holds(incremental_state):
            continue
        result = module.reorder_incremental_state(incremental_state, new_order)
        if result is not None:
            incremental_state = result


class LatentEncoder(LanguageAwareEncoder):
    def __init__(self, cfg, dictionary, embed_tokens, return_fc=False):
        selector = make_selector(cfg, "encoder")
        self.__dict__["_pending"] = (selector, [0])
        super().__init__(cfg, dictionary, embed_tokens, return_fc=return_fc)
        del self.__dict__["_pending"]
        self.layer_select = selector  # None when the encoder is static

    def build_encoder_layer(self, cfg):
        selector, count = self.__dict__["_pending"]
        if selector is None:
            return super().build_encoder_layer(cfg)
        count[0] += 1
        layer = LatentEncoderLayer(cfg, selector, count[0] - 1, return_fc=self.return_fc)
        return wrap_like_fairseq(layer, cfg, checkpoints_itself=True)  # around z: LatentLayerMixin._with_z

    def forward(self, src_tokens, src_lengths=None, return_all_hiddens=False, token_embeddings=None,
                src_lang_id=None, tgt_lang_id=None):
        if self.layer_select is not None:
            self.layer_select.prepare(src_lang_id if self.layer_select.side == "src" else tgt_lang_id)
        return super().forward(src_tokens, src_lengths, return_all_hiddens, token_embeddings,
                               src_lang_id=src_lang_id, tgt_lang_id=tgt_lang_id)


class LatentDecoder(LanguageAwareDecoder):
    def __init__(self, cfg, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        selector = make_selector(cfg, "decoder")
        self.__dict__["_pending"] = (selector, [0])
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn,
                         output_projection=output_projection)
        del self.__dict__["_pending"]
        self.layer_select = selector

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        selector, count = self.__dict__["_pending"]
        if selector is None:
            return super().build_decoder_layer(cfg, no_encoder_attn)
        count[0] += 1
        layer = LatentDecoderLayer(cfg, selector, count[0] - 1, no_encoder_attn)
        return wrap_like_fairseq(layer, cfg, checkpoints_itself=True)

    def extract_features(self, prev_output_tokens, encoder_out=None, incremental_state=None,
                         full_context_alignment=False, alignment_layer=None, alignment_heads=None):
        if self.layer_select is not None:
            self.layer_select.prepare(_first(encoder_out, f"{self.layer_select.side}_lang_id"))
        return super().extract_features(prev_output_tokens, encoder_out=encoder_out,
                                        incremental_state=incremental_state,
                                        full_context_alignment=full_context_alignment,
                                        alignment_layer=alignment_layer, alignment_heads=alignment_heads)

    def reorder_incremental_state_scripting(self, incremental_state, new_order):
        """fairseq walks every submodule at every beam step; walk the stateful ones (listed once)
        and leave out the layers the last step skipped for every row: the rows left are a subset of
        that step's rows, so those layers never run (nor read their caches) again in this search.
        A layer that ran on a subset of rows reorders its stashed caches itself."""
        plan = self.layer_select._call["plan"] if self.layer_select is not None else None
        skip = None if plan is None else [step is SKIP for step in plan]
        reorder_walk(self, incremental_state, new_order, skip)


@register_model("latent_depth_transformer")
class LatentDepthTransformerModel(TrainedLanguagesByCode, LanguageAwareTransformerModel):
    config_class = LatentDepthTransformerConfig
    encoder_class = LatentEncoder
    decoder_class = LatentDecoder

    @classmethod
    def build_model(cls, args, task):
        inventory = task_inventory(task, "latent_depth_transformer", "selects layers per language")
        with open_dict(args) if OmegaConf.is_config(args) else nullcontext():
            base_architecture(args)
            max_update = int(run_option(args, "max_update", "optimization", 0))
            given = [option for option, name in LATENT_HORIZONS if getattr(args, name, None) is not None]
            # schedules over the run (as CLSR's noise): resolved once, saved in the checkpoint's config.
            # The sampling phase ends at the commit: tau reaches its end there, beta a third of the way
            if getattr(args, "latent_commit_updates", None) is None:
                args.latent_commit_updates = default_commit_updates(max_update)
            commit = int(args.latent_commit_updates or 0)
            sampling = commit if commit > 0 else max_update
            if commit and max_update and commit >= max_update:
                logger.warning(f"--latent-commit-updates {commit} >= --max-update {max_update}: training never "
                               "commits, so its last phase does not train the pruned network that is decoded")
            if getattr(args, "latent_tau_anneal_updates", None) is None:
                args.latent_tau_anneal_updates = sampling
            if getattr(args, "latent_kl_anneal_updates", None) is None:
                args.latent_kl_anneal_updates = sampling // 3
            cfg = cls.config_class.from_namespace(args)
            name_every_option(args, cfg, cls.config_class)
        cfg.num_languages = len(inventory)
        validate(cfg)  # before anything is built
        cfg.latent_trained_languages = trained_languages(task, inventory)
        model = super(TransformerModel, cls).build_model(cfg, task)  # fairseq's TransformerModelBase
        model.trained_codes = trained_language_codes(task, inventory)
        set_given_options(model, given)  # the others come from a resumed checkpoint
        return model

    # --- the pruned network of a language pair ------------------------------------------------
    def selectors(self) -> Dict[str, LayerSelector]:
        return {stack: getattr(self, stack).layer_select for stack in ("encoder", "decoder")
                if getattr(self, stack).layer_select is not None}

    def idle_parameters(self) -> FrozenSet[nn.Parameter]:
        """The parameters no training step uses in the current phase: from the commit on, the layers
        no trained language keeps and the selection logits (``data_parallel`` leaves them out of
        DDP). The same on every rank: the commit is decided from the synchronised logits at the
        same update. Empty before the commit."""
        key = tuple((stack, selector.is_committed(), selector.unkept_layers())
                    for stack, selector in self.selectors().items())
        cached = self.__dict__.get("_idle")
        if cached is None or cached[0] != key:
            idle = []
            for stack, committed, unkept in key:
                if committed:
                    idle.append(getattr(self, stack).layer_select.logits)
                    idle.extend(p for i in unkept for p in getattr(self, stack).layers[i].parameters())
            cached = self.__dict__["_idle"] = (key, frozenset(idle))
        return cached[1]

    def kept_layers(self, src_lang_id: int, tgt_lang_id: int) -> Dict[str, List[int]]:
        """0-based indices of the layers the pair runs at inference, per stack."""
        lang = {"src": src_lang_id, "tgt": tgt_lang_id}
        kept = {}
        for stack in ("encoder", "decoder"):
            selector = getattr(self, stack).layer_select
            layers = len(getattr(self, stack).layers)
            kept[stack] = list(range(layers)) if selector is None else \
                selector.keep()[lang[selector.side]].nonzero().flatten().tolist()
        return kept

    def effective_parameters(self, src_lang_id: int, tgt_lang_id: int) -> int:
        """Parameters the pair's pruned network holds: all but skipped layers and selection logits."""
        total = sum(p.numel() for p in self.parameters())
        kept = self.kept_layers(src_lang_id, tgt_lang_id)
        unused = sum(s.logits.numel() for s in self.selectors().values())
        for stack, layers in kept.items():
            for index, layer in enumerate(getattr(self, stack).layers):
                if index not in layers:
                    unused += sum(p.numel() for p in layer.parameters())
        return total - unused

    @classmethod
    def export_state_dict(cls, state_dict, model_cfg, src_id: int, tgt_id: int):
        """The pair's pruned network under fairseq ``transformer`` names: only the kept layers,
        renumbered, and ``encoder_layers``/``decoder_layers`` set to the kept depths. A kept
        pre-norm layer with z = 1 is exactly a plain pre-norm layer."""
        lang = {"src": src_id, "tgt": tgt_id}
        kept = {}
        for stack in ("encoder", "decoder"):
            depth = int(getattr(model_cfg, f"{stack}_layers"))
            keep = stored_keep(state_dict, model_cfg, stack)
            if keep is None:
                kept[stack] = list(range(depth))
                continue
            side = str(getattr(model_cfg, f"latent_{stack}_lang", "src" if stack == "encoder" else "tgt"))
            kept[stack] = keep[lang[side]].nonzero().flatten().tolist()
            _warn_if_sampled_only(state_dict, model_cfg, stack, lang[side])
        renumber = {stack: {old: new for new, old in enumerate(layers)} for stack, layers in kept.items()}
        out = {}
        for key, value in state_dict.items():
            if key == "lang_inventory" or ".layer_select." in key:
                continue
            m = re.match(r"^(encoder|decoder)\.layers\.(\d+)\.(.*)$", key)
            if m is None:
                out[key] = value
            elif int(m.group(2)) in renumber[m.group(1)]:
                out[f"{m.group(1)}.layers.{renumber[m.group(1)][int(m.group(2))]}.{m.group(3)}"] = value
        changes = {name: None for name in LATENT_FIELDS}
        changes.update(encoder_layers=len(kept["encoder"]), decoder_layers=len(kept["decoder"]))
        return out, changes


def _warn_if_sampled_only(state_dict, model_cfg, stack: str, lang_id: int) -> None:
    """An export of a stack that never committed, whose posteriors for the language are undecided,
    holds a network training only sampled: say so, as decoding the full checkpoint does."""
    prefix = f"{stack}.layer_select."
    committed = state_dict.get(prefix + "committed")
    if committed is not None and bool(committed):
        return
    share = undecided_share(alpha_from_state(state_dict, prefix)[lang_id:lang_id + 1])
    if share > 0:
        code = decode_inventory(state_dict["lang_inventory"])[lang_id] if "lang_inventory" in state_dict else lang_id
        rule = resolve_keep_rule(str(getattr(model_cfg, "latent_keep", "threshold")),
                                 int(getattr(model_cfg, f"latent_{stack}_target_depth", 0) or 0))
        logger.warning("%.0f%% of the %s stack's selection posteriors of %s are undecided (between %.1f and %.1f): the "
                       "export holds the %s decision, a network training only sampled; train with "
                       "--latent-commit-updates so that the last phase trains the network that is exported",
                       100 * share, stack, code, 1 - DECISIVE, DECISIVE, rule)


def stored_keep(state_dict, model_cfg, stack: str):
    """The keep table (N, L) of a stack in a checkpoint's model state under its saved inference
    rule (the committed decision when training committed); None for a static stack."""
    return keep_from_state(state_dict, f"{stack}.layer_select.", str(getattr(model_cfg, "latent_keep", "threshold")),
                           float(getattr(model_cfg, "latent_keep_threshold", 0.5)),
                           int(getattr(model_cfg, f"latent_{stack}_target_depth", 0) or 0))


# --- presets -----------------------------------------------------------------------------------

def _latent_preset(args, embed_dim, ffn_dim, heads, encoder_layers, decoder_layers):
    args.encoder_layers = getattr(args, "encoder_layers", encoder_layers)
    args.decoder_layers = getattr(args, "decoder_layers", decoder_layers)
    size_preset(args, embed_dim, ffn_dim, heads, None)
    args.encoder_normalize_before = getattr(args, "encoder_normalize_before", True)
    args.decoder_normalize_before = getattr(args, "decoder_normalize_before", True)
    base_architecture(args)


@register_model_architecture("latent_depth_transformer", "latent_depth_transformer")
def latent_depth_transformer(args):
    """The paper's multilingual size (and the reference's latent_multilingual_transformer):
    12 encoder / 24 decoder layers, 512/1024, 4 heads, pre-norm."""
    _latent_preset(args, 512, 1024, 4, 12, 24)


@register_model_architecture("latent_depth_transformer", "latent_depth_transformer_small")
def latent_depth_transformer_small(args):
    """CPU size: 2 encoder / 6 decoder layers, 128-dim, 4 heads, FFN 512, pre-norm."""
    _latent_preset(args, 128, 512, 4, 2, 6)


@register_model_architecture("latent_depth_transformer", "latent_depth_transformer_tiny")
def latent_depth_transformer_tiny(args):
    """Tests: 2 encoder / 4 decoder layers, 32-dim, 2 heads, FFN 64, pre-norm."""
    _latent_preset(args, 32, 64, 2, 2, 4)
