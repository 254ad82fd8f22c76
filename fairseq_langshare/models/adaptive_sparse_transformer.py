"""``adaptive_sparse_transformer``: language-conditioned head, FFN-block and layer sparsity
(Gong et al., 2022, "Adaptive Sparse Transformer for Multilingual Translation").

A pre-norm Transformer whose encoder components are scored by the source language and decoder
components by the target language (``modules/sparse_scores.py``):

* heads (Eq. 5): alpha scales every head's output before ``out_proj``; in the decoder one alpha
  per layer serves self- and cross-attention (the paper's D x H x L head parameters);
* FFN blocks (Eq. 6): the inner dimension is cut into K blocks; beta scales W1's columns (before
  the bias) and W2's rows;
* layers (Eq. 7): gamma scales every residual branch of the layer (fairseq's residual hook).

Training follows Algorithm 1 (phase switch at ``--sparse-t-bar`` updates, the layers' at
``--sparse-layer-t-bar``, a function of ``num_updates``). At inference only the selected
components run: per language group, the q/k/v and output projections of the selected heads only
(fairseq's attention then runs with H' heads, its incremental cache holds H' heads per sentence),
the selected FFN blocks only, and layers no sentence of the batch keeps are skipped.
``export_state_dict`` writes a pair's sub-network: a plain fairseq ``transformer`` without head
sparsity, ``adaptive_sparse_single`` (fairseq's transformer with H'-head attention projections)
with it.
"""

import copy
import logging
from contextlib import nullcontext
from dataclasses import dataclass, field
from enum import Enum
from typing import Dict, List, Optional

import torch
from fairseq.dataclass import ChoiceEnum
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import (
    TransformerConfig,
    TransformerDecoderBase,
    TransformerEncoderBase,
    TransformerModel,
)
from fairseq.models.transformer.transformer_legacy import base_architecture
from fairseq.modules import MultiheadAttention
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase, TransformerEncoderLayerBase
from omegaconf import OmegaConf, open_dict
from torch import nn

from ..modules.activation_checkpointing import wrap_like_fairseq
from ..modules.row_subsets import SubsetCaches, decoder_layer_on_rows, encoder_layer_on_rows
from ..modules.scaled_logits import scaled_from_state
from ..modules.schedules import set_given_options
from ..modules.sparse_scores import CATEGORIES, REDUCTIONS, SPARSITY_TYPES, RoutedLinear, SparseScorer, inference_tables
from ..option_ranges import Range, check_ranges
from .langshare_transformer import size_preset
from .config_transformer import ConfigTransformerModel
from .language_aware_transformer import (LanguageAwareDecoder, LanguageAwareEncoder, LanguageAwareTransformerModel, _first,
                                         name_every_option, task_inventory)
from .latent_depth_transformer import TrainedLanguagesByCode, reorder_walk, trained_language_codes, trained_languages
from ..run_options import run_option

logger = logging.getLogger(__name__)

SINGLE_MODEL = "adaptive_sparse_single"
_BUDGET = Range(0, why="a budget (0: half, rounded up; at most the stack's layers, heads or blocks)")
_T_BAR = Range(0, why="T-bar is a number of updates")
_WEIGHT = Range(0, why="a loss weight (0 switches the term off)")
STACK_NAMES = {"encoder": "enc", "decoder": "dec"}
STACK_SIDES = {"encoder": "src", "decoder": "tgt"}


@dataclass
class AdaptiveSparseTransformerConfig(TransformerConfig):
    sparse_types: str = field(default="attn,ffn,layer", metadata={
        "help": "sparsity types, any comma-separated combination of attn (heads, Eq. 5), ffn (FFN blocks, Eq. 6) and "
                "layer (Eq. 7)"})
    sparse_ffn_blocks: int = field(default=4, metadata={
        "help": "K: blocks the FFN inner dimension is cut into (must divide --encoder/decoder-ffn-embed-dim)",
        "range": Range(1, why="FFN blocks per layer")})
    sparse_encoder_keep_layers: int = field(default=0, metadata={
        "help": "D': encoder layers each source language keeps (0: half of --encoder-layers, rounded up)",
        "range": _BUDGET})
    sparse_decoder_keep_layers: int = field(default=0, metadata={
        "help": "D': decoder layers each target language keeps (0: half of --decoder-layers, rounded up)",
        "range": _BUDGET})
    sparse_encoder_keep_heads: int = field(default=0, metadata={
        "help": "H': heads per encoder layer each source language keeps (0: half, rounded up)",
        "range": _BUDGET})
    sparse_decoder_keep_heads: int = field(default=0, metadata={
        "help": "H': heads per decoder layer each target language keeps (0: half, rounded up)",
        "range": _BUDGET})
    sparse_head_dim: int = field(default=0, metadata={
        "help": "size of every attention head (0: embed_dim / attention_heads, fairseq's). With --sparse-types attn, "
                "heads wider than that let the H' kept heads match a dense model's attention width, e.g. at d = 128 "
                "5 heads of 32 with 4 kept (q/k/v project to 160, each language runs 128; docs/adaptive_sparse.md)",
        "range": Range(0, why="the size of a head (0: fairseq's)")})
    sparse_encoder_keep_blocks: int = field(default=0, metadata={
        "help": "K': FFN blocks per encoder layer each source language keeps (0: half of K, rounded up)",
        "range": _BUDGET})
    sparse_decoder_keep_blocks: int = field(default=0, metadata={
        "help": "K': FFN blocks per decoder layer each target language keeps (0: half of K, rounded up)",
        "range": _BUDGET})
    sparse_t_bar: Optional[int] = field(default=None, metadata={
        "help": "T-bar of Algorithm 1: updates of phase 1 (CE + c_s L_s); top-k selection from then on "
                "(default: a 32nd of --max-update: phase 1 damps every component, docs/adaptive_sparse.md)",
        "range": _T_BAR})
    sparse_layer_t_bar: Optional[int] = field(default=None, metadata={
        "help": "T-bar of the layer scores (--sparse-types layer): the update from which each language's layers are "
                "chosen (default: --sparse-t-bar when that is given, else an eighth of --max-update: a layer chosen "
                "before the cross entropy has ranked the layers splits the stack's data at random, "
                "docs/adaptive_sparse.md)", "range": _T_BAR})
    sparse_tau: float = field(default=1.0, metadata={
        "help": "Gumbel-softmax temperature of the scores",
        "range": Range(0, low_open=True, why="the Gumbel-softmax temperature must be positive")})
    sparse_logit_init: float = field(default=3.0, metadata={
        "help": "initial logit mu of every component: score sigmoid(value); 3 (0.95) starts from the standard "
                "Transformer (every score 1, Eq. 7); 0 is the prior 1/2, which scales each FFN block by 1/4 at the "
                "start (beta enters W1 and W2, Eq. 6)", "range": Range(why="a logit")})
    sparse_cs: float = field(default=0.1, metadata={"help": "c_s: weight of the sparsity loss (Eq. 8), phase 1",
                                                    "range": _WEIGHT})
    sparse_cd: float = field(default=0.02, metadata={"help": "c_d: weight of the disparity loss (Eq. 9), phase 2",
                                                     "range": _WEIGHT})
    sparse_ct: float = field(default=0.1, metadata={"help": "c_t: weight of the top-k loss (Eq. 10), phase 2",
                                                    "range": _WEIGHT})
    sparse_loss_reduction: ChoiceEnum(REDUCTIONS) = field(default="mean", metadata={
        "help": "mean: L_s, L_d, L_t averaged over languages (pairs for L_d) and each category's components, the "
                "categories (heads, blocks, layers) added, so c_s/c_d/c_t weigh one component against one token's "
                "cross entropy at any size; sum: Eq. 8-10 literally (they then grow with languages x components)"})
    sparse_logit_lr_scale: float = field(default=30.0, metadata={
        "help": "the logits mu are this scale times their parameter, so Adam moves them this many times faster than "
                "the weights (modules/scaled_logits.py); 1: plain parameters",
        "range": Range(0, low_open=True, why="a learning-rate multiplier (1: none)")})


SPARSE_FIELDS = tuple(name for name in AdaptiveSparseTransformerConfig.__dataclass_fields__ if name.startswith("sparse_"))


def sparse_types(cfg) -> List[str]:
    value = str(getattr(cfg, "sparse_types", "attn,ffn,layer") or "")
    return [t.strip() for t in value.split(",") if t.strip()]


def _half(n: int) -> int:
    return (n + 1) // 2


def budgets(cfg, stack: str) -> Dict[str, int]:
    """D', H', K' of a stack with the 0 defaults resolved: {"layers", "heads", "blocks"}."""
    sub = getattr(cfg, stack)
    totals = {"layers": sub.layers, "heads": sub.attention_heads, "blocks": cfg.sparse_ffn_blocks}
    return {c: getattr(cfg, f"sparse_{stack}_keep_{c}") or _half(totals[c]) for c in totals}


def validate(cfg) -> None:
    """One line naming the problem and the fix for every option whose valid values depend on other options (the
    range of each option on its own is declared with the option: ``option_ranges``)."""
    check_ranges(cfg, AdaptiveSparseTransformerConfig, "model")
    types = sparse_types(cfg)
    if not types or any(t not in SPARSITY_TYPES for t in types) or len(set(types)) != len(types):
        raise ValueError(f"--sparse-types {cfg.sparse_types!r}: give a comma-separated subset of "
                         f"{','.join(SPARSITY_TYPES)}, each at most once (e.g. attn,ffn,layer)")
    k = cfg.sparse_ffn_blocks
    for stack in ("encoder", "decoder"):
        sub = getattr(cfg, stack)
        if not sub.normalize_before:
            raise ValueError(f"adaptive_sparse_transformer is pre-norm (Eq. 7): a skipped post-norm layer would still "
                             f"apply its layer norm; pass --{stack}-normalize-before (the presets set it)")
        if "ffn" in types and (k < 1 or sub.ffn_embed_dim % k):
            raise ValueError(f"--sparse-ffn-blocks {k} does not divide --{stack}-ffn-embed-dim {sub.ffn_embed_dim}: "
                             "pick K that divides the FFN inner dimension")
        totals = {"layers": sub.layers, "heads": sub.attention_heads, "blocks": k}
        for kind in types:
            category = CATEGORIES[kind]
            value = getattr(cfg, f"sparse_{stack}_keep_{category}")
            if not 0 <= value <= totals[category]:
                part = f"{stack} {'stack' if category == 'layers' else 'layer'}"
                raise ValueError(f"--sparse-{stack}-keep-{category} {value} is outside 1..{totals[category]} (the "
                                 f"{category} of {'an' if stack[0] in 'aeiou' else 'a'} {part}); pass a "
                                 "budget within it (0: half)")
    if cfg.sparse_head_dim and "attn" not in types:
        raise ValueError(f"--sparse-head-dim {cfg.sparse_head_dim}: a head size > 0 that --sparse-types attn selects "
                         "heads of (without attn it would only widen every attention); add attn, or pass 0")
    if cfg.sparse_t_bar is None:
        raise ValueError("--sparse-t-bar: no T-bar (pass --sparse-t-bar N, or --max-update for its default of a "
                         "32nd of the run)")
    if cfg.cross_self_attention:
        raise ValueError("--cross-self-attention is not supported by adaptive_sparse_transformer")


def default_t_bar(max_update: int) -> int:
    """A 32nd of the run (at least 1 update). The paper switches at 8k of 100k updates (Public-24) and
    50k of 500k (OPUS-100). Phase 1 scales every component by scores that L_s pulls below 0.18, so the
    network trains damped until the top-k loss lifts the kept scores in phase 2: at a few thousand
    updates the shorter phase 1 measured better (docs/adaptive_sparse.md, "Damping")."""
    return max(1, max_update // 32)


def default_layer_t_bar(max_update: int) -> int:
    """An eighth of the run (at least 1 update), near the paper's 8-10%. A layer choice decides which
    languages' data train a whole layer; at heads' and blocks' 32nd the logits have moved about 0.3
    against Gumbel noise of standard deviation 1.8, so the layers are chosen at random and the decoder's
    data split at random (gettext O2M: 0.15 bits of validation NLL behind a later choice, where the
    languages share the layers the cross entropy ranks first; docs/adaptive_sparse.md, "Layers: a
    later T-bar")."""
    return max(1, max_update // 8)


def check_t_bar(t_bar: int, max_update: int, flag: str = "--sparse-t-bar") -> None:
    """Algorithm 1 selects the sub-networks in phase 2, from update T-bar on: a run whose --max-update ends
    before T-bar would never select one (refused at start-up); one that ends at T-bar stops at the switch,
    e.g. to be resumed with more updates (a warning with the numbers). No --max-update: nothing to check."""
    if max_update <= 0 or t_bar < max_update:
        return
    if t_bar > max_update:
        raise ValueError(f"{flag} {t_bar} is past --max-update {max_update}: the run would end in phase 1 "
                         f"of Algorithm 1 and never select a sub-network; pass {flag} below {max_update} or "
                         f"--max-update above {t_bar}")
    logger.warning("%s %d = --max-update %d: this run ends where phase 2 begins, so it trains no selected "
                   "sub-network; resume it with a larger --max-update to train phase 2", flag, t_bar, max_update)


def make_scorer(cfg, stack: str) -> SparseScorer:
    sub = getattr(cfg, stack)
    side = STACK_SIDES[stack]
    keep = budgets(cfg, stack)
    return SparseScorer(
        STACK_NAMES[stack], side, cfg.num_languages, sub.layers, sub.attention_heads, sub.ffn_embed_dim,
        types=sparse_types(cfg), blocks=cfg.sparse_ffn_blocks, keep_layers=keep["layers"], keep_heads=keep["heads"],
        keep_blocks=keep["blocks"], t_bar=int(cfg.sparse_t_bar),
        layer_t_bar=None if cfg.sparse_layer_t_bar is None else int(cfg.sparse_layer_t_bar),
        tau=cfg.sparse_tau, c_s=cfg.sparse_cs, c_d=cfg.sparse_cd, c_t=cfg.sparse_ct, logit_init=cfg.sparse_logit_init,
        trained_languages=cfg.sparse_trained_languages.get(side), reduction=_value(cfg.sparse_loss_reduction),
        logit_lr_scale=float(cfg.sparse_logit_lr_scale))


def _value(option):
    return option.value if isinstance(option, Enum) else str(option)


# --- attention with per-language heads -----------------------------------------------------------

class SparseAttention(MultiheadAttention):
    """fairseq's attention whose projections are ``RoutedLinear`` (same parameter names). Training:
    alpha (B, H) scales the concatenated head outputs before ``out_proj`` (Eq. 5). Inference: every
    language group projects onto its H' selected heads only (alpha folded into ``out_proj``), and
    fairseq's attention runs with H' heads (its incremental cache holds each sentence's H' heads).
    ``head_dim`` > 0 other than embed_dim / num_heads: heads of that size (``reshape_heads``)."""

    def __init__(self, embed_dim, num_heads, *args, head_dim: int = 0, **kwargs):
        wide = head_dim > 0 and head_dim * num_heads != embed_dim
        super().__init__(embed_dim, 1 if wide else num_heads, *args, **kwargs)  # fairseq asserts H | d
        if wide:
            reshape_heads(self, num_heads, head_dim, initialise=True)
        for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
            old = getattr(self, name)
            new = RoutedLinear(old.in_features, old.out_features, bias=old.bias is not None)
            with torch.no_grad():  # fairseq's initialisation, kept
                new.weight.copy_(old.weight)
                if old.bias is not None:
                    new.bias.copy_(old.bias)
            setattr(self, name, new)
        self.skip_embed_dim_check = True  # never the fused path (it reads out_proj.weight itself) with head sparsity
        self.__dict__["scorer"] = None
        self.layer_index = -1

    def attach(self, scorer: SparseScorer, index: int):
        self.__dict__["scorer"] = scorer
        self.layer_index = index

    def set_beam_size(self, beam_size):
        """No beamable cross-attention: its keys are projected per sentence's language."""

    def forward(self, query, key, value, key_padding_mask=None, incremental_state=None, need_weights=True,
                static_kv=False, attn_mask=None, before_softmax=False, need_head_weights=False):
        call = lambda: super(SparseAttention, self).forward(
            query, key, value, key_padding_mask=key_padding_mask, incremental_state=incremental_state,
            need_weights=need_weights, static_kv=static_kv, attn_mask=attn_mask, before_softmax=before_softmax,
            need_head_weights=need_head_weights)
        scorer = self.__dict__["scorer"]
        plan = None if scorer is None else scorer.head_plan(self.layer_index, query.size(1))
        if plan is None:
            return call()
        hd = self.head_dim
        projections = (self.q_proj, self.k_proj, self.v_proj, self.out_proj)
        if plan[0] == "scale":
            self.out_proj.configure(in_scale=plan[1].repeat_interleave(hd, -1).unsqueeze(0))
            try:
                return call()
            finally:
                self.out_proj.configure()
        _, ids, index, alpha, decision = plan
        rows = (index.unsqueeze(-1) * hd + torch.arange(hd, device=index.device)).flatten(1)  # (N, H' hd)
        cols_alpha = alpha.gather(1, index).repeat_interleave(hd, -1)  # (N, H' hd)
        for proj in projections[:3]:
            proj.configure(route=(ids, lambda lang, p=proj: (p.weight[rows[lang]],
                                                             None if p.bias is None else p.bias[rows[lang]]), decision))
        out = self.out_proj
        out.configure(route=(ids, lambda lang: (out.weight[:, rows[lang]] * cols_alpha[lang].to(out.weight.dtype),
                                                out.bias), decision))
        saved = self.num_heads, self.embed_dim
        self.num_heads, self.embed_dim = index.size(-1), index.size(-1) * hd
        try:
            return call()
        finally:
            self.num_heads, self.embed_dim = saved
            for proj in projections:
                proj.configure()


# --- layers ------------------------------------------------------------------------------------------

def _routed_fc(input_dim, output_dim, q_noise, qn_block_size):
    if q_noise > 0:
        raise ValueError("--quant-noise-pq is not supported by adaptive_sparse_transformer's FFN blocks")
    return RoutedLinear(input_dim, output_dim)


def _heads_if_sparse(attention: SparseAttention, cfg) -> SparseAttention:
    """Without head sparsity the attention keeps fairseq's fused path (its projections are never
    configured then)."""
    attention.skip_embed_dim_check = "attn" in sparse_types(cfg)
    return attention


class SparseLayerMixin:
    """Layer r: gamma (Eq. 7) scales every residual branch; the FFN's blocks follow the scorer. At
    inference, in a batch whose languages disagree about the layer, it runs on the rows that keep
    it only (``modules/row_subsets.py``, as latent depth's layers): each row costs its own selected
    layers, not the union of the batch's. ``row_dispatch = False`` restores the union path (every
    row runs, gamma = 0 leaves the skippers' input), kept for the equivalence tests."""

    row_dispatch = True

    def _attach(self, scorer: SparseScorer, index: int, attentions):
        self.__dict__["scorer"] = scorer
        self.layer_index = index
        self.__dict__["_gamma"] = None
        self.__dict__["_subset"] = SubsetCaches(self)
        for attention in attentions:
            if attention is not None:
                attention.attach(scorer, index)

    def build_fc1(self, input_dim, output_dim, q_noise, qn_block_size):
        return _routed_fc(input_dim, output_dim, q_noise, qn_block_size)

    def build_fc2(self, input_dim, output_dim, q_noise, qn_block_size):
        return _routed_fc(input_dim, output_dim, q_noise, qn_block_size)

    def residual_connection(self, x, residual):
        gamma = self.__dict__["_gamma"]
        return residual + x if gamma is None else residual + gamma.to(x.dtype) * x

    def reorder_incremental_state(self, incremental_state, new_order):
        """Caches of a layer that ran on a subset of rows follow the beam to the same rows."""
        self.__dict__["_subset"].reorder(incremental_state, new_order)

    def _configure_ffn(self, plan):
        if plan is None:
            return
        w = self.__dict__["scorer"].block_width
        fc1, fc2 = self.fc1, self.fc2
        if plan[0] == "scale":
            beta = plan[1].repeat_interleave(w, -1).unsqueeze(0)  # (1, B, d')
            fc1.configure(out_scale=beta)
            fc2.configure(in_scale=beta)
            return
        _, ids, index, beta, decision = plan
        rows = (index.unsqueeze(-1) * w + torch.arange(w, device=index.device)).flatten(1)  # (N, K' w)
        scale = beta.gather(1, index).repeat_interleave(w, -1).to(fc1.weight.dtype)
        fc1.configure(route=(ids, lambda lang: (fc1.weight[rows[lang]] * scale[lang].unsqueeze(1), fc1.bias[rows[lang]]),
                             decision))
        fc2.configure(route=(ids, lambda lang: (fc2.weight[:, rows[lang]] * scale[lang], fc2.bias), decision))

    def _configured(self, run, gamma, batch: int):
        """``run()`` with this call's gamma and FFN blocks (for ``batch`` rows)."""
        self._configure_ffn(self.__dict__["scorer"].block_plan(self.layer_index, batch))
        self.__dict__["_gamma"] = gamma
        try:
            return run()
        finally:
            self.__dict__["_gamma"] = None
            self.fc1.configure()
            self.fc2.configure()

    def _run(self, x, run, skipped, on_rows=None, incremental_state=None):
        """``run()`` the layer on every row, ``on_rows(rows)`` on the rows that keep it (None:
        cannot), or ``skipped(x)`` when no row keeps it."""
        scorer = self.__dict__["scorer"]
        gamma = scorer.layer_plan(self.layer_index, x.size(1))
        if isinstance(gamma, str):  # no sentence of the batch keeps this layer: it does not run
            return skipped(x)
        subset = self.__dict__["_subset"]
        if self.row_dispatch and on_rows is not None and gamma is not None:
            rows = scorer.layer_rows(self.layer_index)
            if rows is not None:
                subset.resume(incremental_state, rows)
                with scorer.on_rows(rows):
                    gamma = scorer.layer_plan(self.layer_index, rows.numel())  # these rows' gamma
                    out = self._configured(lambda: on_rows(rows), gamma, rows.numel())
                subset.suspend(incremental_state, rows, x.size(1))
                return out
        subset.release(incremental_state)  # every row left keeps the layer: fairseq's caches again
        return self._configured(run, gamma, x.size(1))


class SparseEncoderLayer(SparseLayerMixin, TransformerEncoderLayerBase):
    def __init__(self, cfg, scorer, index, return_fc=False):
        super().__init__(cfg, return_fc=return_fc)
        self._attach(scorer, index, [self.self_attn])

    def build_self_attention(self, embed_dim, cfg):
        return _heads_if_sparse(SparseAttention(embed_dim, cfg.encoder.attention_heads, dropout=cfg.attention_dropout,
                                                self_attention=True, head_dim=cfg.sparse_head_dim), cfg)

    def forward(self, x, encoder_padding_mask, attn_mask=None):
        parent = super(SparseEncoderLayer, self).forward
        return self._run(x, lambda: parent(x, encoder_padding_mask, attn_mask),
                         lambda x: (x, None) if self.return_fc else x,
                         encoder_layer_on_rows(parent, x, encoder_padding_mask, attn_mask, self.return_fc))


class SparseDecoderLayer(SparseLayerMixin, TransformerDecoderLayerBase):
    def __init__(self, cfg, scorer, index, no_encoder_attn=False):
        super().__init__(cfg, no_encoder_attn)
        self._attach(scorer, index, [self.self_attn, self.encoder_attn])

    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        return _heads_if_sparse(SparseAttention(embed_dim, cfg.decoder.attention_heads, dropout=cfg.attention_dropout,
                                                add_bias_kv=add_bias_kv, add_zero_attn=add_zero_attn,
                                                self_attention=True, head_dim=cfg.sparse_head_dim), cfg)

    def build_encoder_attention(self, embed_dim, cfg):
        return _heads_if_sparse(SparseAttention(embed_dim, cfg.decoder.attention_heads, kdim=cfg.encoder.embed_dim,
                                                vdim=cfg.encoder.embed_dim, dropout=cfg.attention_dropout,
                                                encoder_decoder_attention=True, head_dim=cfg.sparse_head_dim), cfg)

    def forward(self, x, encoder_out=None, encoder_padding_mask=None, incremental_state=None,
                prev_self_attn_state=None, prev_attn_state=None, self_attn_mask=None, self_attn_padding_mask=None,
                need_attn=False, need_head_weights=False):
        parent = super(SparseDecoderLayer, self).forward
        args = (x, encoder_out, encoder_padding_mask, incremental_state, prev_self_attn_state, prev_attn_state,
                self_attn_mask, self_attn_padding_mask, need_attn, need_head_weights)
        return self._run(x, lambda: parent(*args), lambda x: (x, None, None),
                         decoder_layer_on_rows(parent, self.encoder_attn, *args), incremental_state)


class SparseEncoder(LanguageAwareEncoder):
    def __init__(self, cfg, dictionary, embed_tokens, return_fc=False):
        scorer = make_scorer(cfg, "encoder")
        self.__dict__["_pending"] = (scorer, [0])
        super().__init__(cfg, dictionary, embed_tokens, return_fc=return_fc)
        del self.__dict__["_pending"]
        self.sparse_scores = scorer

    def build_encoder_layer(self, cfg):
        scorer, count = self.__dict__["_pending"]
        count[0] += 1
        return wrap_like_fairseq(SparseEncoderLayer(cfg, scorer, count[0] - 1, return_fc=self.return_fc), cfg)

    def forward(self, src_tokens, src_lengths=None, return_all_hiddens=False, token_embeddings=None,
                src_lang_id=None, tgt_lang_id=None):
        self.sparse_scores.prepare(src_lang_id)
        return super().forward(src_tokens, src_lengths, return_all_hiddens, token_embeddings,
                               src_lang_id=src_lang_id, tgt_lang_id=tgt_lang_id)


class SparseDecoder(LanguageAwareDecoder):
    def __init__(self, cfg, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        scorer = make_scorer(cfg, "decoder")
        self.__dict__["_pending"] = (scorer, [0])
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn,
                         output_projection=output_projection)
        del self.__dict__["_pending"]
        self.sparse_scores = scorer

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        scorer, count = self.__dict__["_pending"]
        count[0] += 1
        return wrap_like_fairseq(SparseDecoderLayer(cfg, scorer, count[0] - 1, no_encoder_attn), cfg)

    def extract_features(self, prev_output_tokens, encoder_out=None, incremental_state=None,
                         full_context_alignment=False, alignment_layer=None, alignment_heads=None):
        self.sparse_scores.prepare(_first(encoder_out, "tgt_lang_id"))
        return super().extract_features(prev_output_tokens, encoder_out=encoder_out,
                                        incremental_state=incremental_state,
                                        full_context_alignment=full_context_alignment, alignment_layer=alignment_layer,
                                        alignment_heads=alignment_heads)

    def reorder_incremental_state_scripting(self, incremental_state, new_order):
        """Walk the stateful modules (listed once) and leave out the layers the last step skipped for
        every row: the rows left are a subset of that step's, so those layers never run again. A
        layer that ran on a subset of rows reorders its stashed caches itself."""
        runs = self.sparse_scores._call.get("runs")
        reorder_walk(self, incremental_state, new_order, None if runs is None else [not run for run in runs])


# --- the model -----------------------------------------------------------------------------------------

def export_model_for(model_cfg) -> str:
    """The registered model a pair's sub-network is: fairseq's transformer unless heads are pruned."""
    types = sparse_types(model_cfg)
    return SINGLE_MODEL if "attn" in types else "transformer"


@register_model("adaptive_sparse_transformer")
class AdaptiveSparseTransformerModel(TrainedLanguagesByCode, LanguageAwareTransformerModel):
    config_class = AdaptiveSparseTransformerConfig
    encoder_class = SparseEncoder
    decoder_class = SparseDecoder
    export_model = staticmethod(export_model_for)  # what `langshare export` writes one pair as

    @classmethod
    def build_model(cls, args, task):
        inventory = task_inventory(task, "adaptive_sparse_transformer", "scores components per language")
        with open_dict(args) if OmegaConf.is_config(args) else nullcontext():
            base_architecture(args)
            max_update = int(run_option(args, "max_update", "optimization", 0))
            given = [option for option, name in (("--sparse-t-bar", "sparse_t_bar"),
                                                 ("--sparse-layer-t-bar", "sparse_layer_t_bar"))
                     if getattr(args, name, None) is not None]
            if getattr(args, "sparse_layer_t_bar", None) is None:  # resolved once, saved in the checkpoint's config
                if getattr(args, "sparse_t_bar", None) is not None:  # a T-bar given is Algorithm 1's one T-bar
                    args.sparse_layer_t_bar = args.sparse_t_bar
                elif max_update > 0:
                    args.sparse_layer_t_bar = default_layer_t_bar(max_update)
            if getattr(args, "sparse_t_bar", None) is None and max_update > 0:
                args.sparse_t_bar = default_t_bar(max_update)
            cfg = cls.config_class.from_namespace(args)
            name_every_option(args, cfg, cls.config_class)
        cfg.num_languages = len(inventory)
        validate(cfg)
        cfg.sparse_trained_languages = trained_languages(task, inventory)
        model = super(TransformerModel, cls).build_model(cfg, task)
        model.trained_codes = trained_language_codes(task, inventory)
        set_given_options(model, given)  # the others come from a resumed checkpoint
        return model

    def check_training_run(self, args) -> None:
        """Called by the task when a training run builds the model (not when a checkpoint is decoded)."""
        scorer, max_update = self.encoder.sparse_scores, int(run_option(args, "max_update", "optimization", 0))
        check_t_bar(int(scorer.t_bar), max_update)
        if "layer" in scorer.types and scorer.t_bars["layers"] != scorer.t_bar:
            check_t_bar(int(scorer.t_bars["layers"]), max_update, "--sparse-layer-t-bar")

    def scorers(self) -> Dict[str, SparseScorer]:
        return {"encoder": self.encoder.sparse_scores, "decoder": self.decoder.sparse_scores}

    def selected(self, lang_id: int, stack: str) -> Dict[str, List]:
        """The components language ``lang_id`` keeps at inference in ``stack`` (0-based): ``layers``
        [r], ``heads`` [[h per layer]], ``blocks`` [[k per layer]] (None: no such sparsity)."""
        return selected_components(self.scorers()[stack].inference_tables(), lang_id)

    @classmethod
    def export_state_dict(cls, state_dict, model_cfg, src_id: int, tgt_id: int):
        return export_pair_state(state_dict, model_cfg, src_id, tgt_id)


def selected_components(tables, lang_id: int) -> Dict[str, Optional[List]]:
    out = {}
    for category in ("layers", "heads", "blocks"):
        entry = tables.get(category)
        if entry is None:
            out[category] = None
        elif category == "layers":
            out[category] = entry["mask"][lang_id].nonzero().flatten().tolist()
        else:
            out[category] = entry["index"][lang_id].tolist()
    return out


def _stack_tables(state_dict, model_cfg, stack: str):
    prefix = f"{stack}.sparse_scores."
    logits = {c: scaled_from_state(state_dict, f"{prefix}{c}_logits") for c in ("heads", "blocks", "layers")
              if f"{prefix}{c}_logits" in state_dict}
    ns = _namespace(model_cfg)
    keep = {c: getattr(ns, f"sparse_{stack}_keep_{c}") or _half(total) for c, total in (
        ("layers", getattr(ns, f"{stack}_layers")), ("heads", getattr(ns, f"{stack}_attention_heads")),
        ("blocks", ns.sparse_ffn_blocks))}
    return inference_tables(logits, keep, float(ns.sparse_tau))


def _namespace(model_cfg):
    """The model options as a Namespace, the method's options a command line left out (fairseq's
    parser omits them; only ``build_model`` fills them in) at their defaults."""
    import argparse

    if OmegaConf.is_config(model_cfg):
        model_cfg = argparse.Namespace(**OmegaConf.to_container(model_cfg, resolve=True))
    if any(not hasattr(model_cfg, name) for name in SPARSE_FIELDS):
        model_cfg = argparse.Namespace(**vars(model_cfg))  # the caller's object stays as it is
        name_every_option(model_cfg, AdaptiveSparseTransformerConfig(), AdaptiveSparseTransformerConfig)
    return model_cfg


def export_pair_state(state_dict, model_cfg, src_id: int, tgt_id: int):
    """The pair's sub-network: kept layers renumbered, FFN blocks and heads sliced, the scores
    folded into the weights (gamma into every branch's output projection and bias, alpha into
    out_proj's columns, beta into fc1's rows and fc2's columns): equal to the full model's
    inference for that pair up to float rounding."""
    ns = _namespace(model_cfg)
    lang = {"encoder": src_id, "decoder": tgt_id}
    out = {k: v for k, v in state_dict.items()
           if k != "lang_inventory" and ".sparse_scores." not in k and ".layers." not in k}
    changes = {name: None for name in SPARSE_FIELDS}
    for stack in ("encoder", "decoder"):
        tables = _stack_tables(state_dict, model_cfg, stack)
        n, depth = lang[stack], int(getattr(ns, f"{stack}_layers"))
        layers = tables["layers"]["mask"][n].nonzero().flatten().tolist() if "layers" in tables else list(range(depth))
        changes[f"{stack}_layers"] = len(layers)
        embed = int(getattr(ns, f"{stack}_embed_dim"))
        heads = int(getattr(ns, f"{stack}_attention_heads"))
        hd = int(ns.sparse_head_dim or 0) or embed // heads
        ffn = int(getattr(ns, f"{stack}_ffn_embed_dim"))
        for new, old in enumerate(layers):
            src, dst = f"{stack}.layers.{old}.", f"{stack}.layers.{new}."
            layer = {k[len(src):]: v for k, v in state_dict.items() if k.startswith(src)}
            gamma = float(tables["layers"]["value"][n, old]) if "layers" in tables else 1.0
            attns = ["self_attn"] + (["encoder_attn"] if stack == "decoder" and "encoder_attn.q_proj.weight" in layer else [])
            for attn in attns:
                w_out = layer[f"{attn}.out_proj.weight"]
                if "heads" in tables:
                    index = tables["heads"]["index"][n, old]
                    rows = (index.unsqueeze(-1) * hd + torch.arange(hd)).flatten()
                    alpha = tables["heads"]["value"][n, old].gather(0, index).repeat_interleave(hd)
                    for proj in ("q_proj", "k_proj", "v_proj"):
                        layer[f"{attn}.{proj}.weight"] = layer[f"{attn}.{proj}.weight"][rows]
                        if f"{attn}.{proj}.bias" in layer:
                            layer[f"{attn}.{proj}.bias"] = layer[f"{attn}.{proj}.bias"][rows]
                    w_out = w_out[:, rows] * alpha.to(w_out.dtype)
                layer[f"{attn}.out_proj.weight"] = w_out * gamma
                layer[f"{attn}.out_proj.bias"] = layer[f"{attn}.out_proj.bias"] * gamma
            w1, b1, w2 = layer["fc1.weight"], layer["fc1.bias"], layer["fc2.weight"]
            if "blocks" in tables:
                width = ffn // int(ns.sparse_ffn_blocks)
                index = tables["blocks"]["index"][n, old]
                rows = (index.unsqueeze(-1) * width + torch.arange(width)).flatten()
                beta = tables["blocks"]["value"][n, old].gather(0, index).repeat_interleave(width).to(w1.dtype)
                w1, b1, w2 = w1[rows] * beta.unsqueeze(1), b1[rows], w2[:, rows] * beta
                changes[f"{stack}_ffn_embed_dim"] = int(rows.numel())
            layer["fc1.weight"], layer["fc1.bias"] = w1, b1
            layer["fc2.weight"], layer["fc2.bias"] = w2 * gamma, layer["fc2.bias"] * gamma
            out.update({dst + k: v for k, v in layer.items()})
        if "heads" in tables:
            changes[f"sparse_single_{stack}_heads"] = int(tables["heads"]["index"].size(-1))
            if hd * heads != embed:
                changes["sparse_single_head_dim"] = hd
    return out, changes


# --- the exported pair with pruned heads ---------------------------------------------------------------

@dataclass
class AdaptiveSparseSingleConfig(TransformerConfig):
    sparse_single_encoder_heads: int = field(default=0, metadata={
        "help": "heads of every encoder attention (q/k/v project to heads x head_dim, head_dim = "
                "encoder_embed_dim / encoder_attention_heads); 0: all", "range": Range(0, why="heads (0: all)")})
    sparse_single_decoder_heads: int = field(default=0, metadata={
        "help": "heads of every decoder self- and cross-attention (as for the encoder); 0: all",
        "range": Range(0, why="heads (0: all)")})
    sparse_single_head_dim: int = field(default=0, metadata={
        "help": "head size of every attention (--sparse-head-dim of the full model); 0: embed_dim / attention_heads",
        "range": Range(0, why="the size of a head (0: fairseq's)")})


def reshape_heads(attention: MultiheadAttention, heads: int, head_dim: int, initialise: bool = False):
    """Shape ``attention`` for ``heads`` heads of ``head_dim`` (fairseq's own pruned attention:
    q/k/v project to heads x head_dim, ``out_proj`` back, ``num_heads``/``embed_dim``/``scaling`` set,
    ``skip_embed_dim_check``); ``initialise``: fairseq's initialisation of the new projections."""
    if attention.bias_k is not None:
        raise ValueError("--sparse-head-dim does not support add_bias_kv attentions; train without it")
    inner = heads * head_dim
    for name in ("q_proj", "k_proj", "v_proj"):
        old = getattr(attention, name)
        setattr(attention, name, nn.Linear(old.in_features, inner, bias=old.bias is not None))
    attention.out_proj = nn.Linear(inner, attention.out_proj.out_features, bias=attention.out_proj.bias is not None)
    attention.num_heads, attention.head_dim, attention.embed_dim = heads, head_dim, inner
    attention.scaling = head_dim ** -0.5
    attention.skip_embed_dim_check = True
    if initialise:
        attention.reset_parameters()
    return attention


def _single_attention(build, cfg, stack: str) -> MultiheadAttention:
    """The exported pair's attention: H' heads (``sparse_single_<stack>_heads``, 0: all) of
    ``sparse_single_head_dim`` (0: fairseq's d / H). ``build(cfg)`` is fairseq's builder."""
    sub = getattr(cfg, stack)
    head_dim = cfg.sparse_single_head_dim or sub.embed_dim // sub.attention_heads
    heads = getattr(cfg, f"sparse_single_{stack}_heads") or sub.attention_heads
    if head_dim * sub.attention_heads != sub.embed_dim:  # fairseq asserts H | d: build one head, then reshape
        cfg = copy.copy(cfg)
        setattr(cfg, stack, copy.copy(sub))
        getattr(cfg, stack).attention_heads = 1
    attention = build(cfg)
    if (heads, head_dim) == (attention.num_heads, attention.head_dim):
        return attention
    return reshape_heads(attention, heads, head_dim)


class _SingleEncoderLayer(TransformerEncoderLayerBase):
    def build_self_attention(self, embed_dim, cfg):
        return _single_attention(lambda c: super(_SingleEncoderLayer, self).build_self_attention(embed_dim, c),
                                 cfg, "encoder")


class _SingleDecoderLayer(TransformerDecoderLayerBase):
    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        return _single_attention(lambda c: super(_SingleDecoderLayer, self).build_self_attention(
            embed_dim, c, add_bias_kv, add_zero_attn), cfg, "decoder")

    def build_encoder_attention(self, embed_dim, cfg):
        return _single_attention(lambda c: super(_SingleDecoderLayer, self).build_encoder_attention(embed_dim, c),
                                 cfg, "decoder")


class _SingleEncoder(TransformerEncoderBase):
    def build_encoder_layer(self, cfg):
        return wrap_like_fairseq(_SingleEncoderLayer(cfg, return_fc=self.return_fc), cfg)


class _SingleDecoder(TransformerDecoderBase):
    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        return wrap_like_fairseq(_SingleDecoderLayer(cfg, no_encoder_attn), cfg)


@register_model(SINGLE_MODEL)
class AdaptiveSparseSingleModel(ConfigTransformerModel):
    """One language pair of an adaptive sparse model with head sparsity (``langshare export``):
    fairseq's pre-norm transformer whose attentions have H' heads of the original head size
    (q/k/v: embed_dim -> H' x head_dim, out_proj back), the kept layers and FFN blocks only, the
    scores folded into the weights. No language ids; runs under ``translation_multi_simple_epoch``
    (load it with ``--user-dir``)."""

    config_class = AdaptiveSparseSingleConfig
    encoder_class = _SingleEncoder
    decoder_class = _SingleDecoder


# --- presets --------------------------------------------------------------------------------------------

def _preset(args, embed_dim, ffn_dim, heads, layers):
    size_preset(args, embed_dim, ffn_dim, heads, layers)
    args.encoder_normalize_before = getattr(args, "encoder_normalize_before", True)
    args.decoder_normalize_before = getattr(args, "decoder_normalize_before", True)
    base_architecture(args)


@register_model_architecture("adaptive_sparse_transformer", "adaptive_sparse_transformer")
def adaptive_sparse_transformer(args):
    """The paper's Public-24 size: 6+6 layers, 512/1024, 4 heads, pre-norm."""
    _preset(args, 512, 1024, 4, 6)


@register_model_architecture("adaptive_sparse_transformer", "adaptive_sparse_transformer_small")
def adaptive_sparse_transformer_small(args):
    """CPU size: 3+3 layers, 128-dim, 4 heads, FFN 512, pre-norm."""
    _preset(args, 128, 512, 4, 3)


@register_model_architecture("adaptive_sparse_transformer", "adaptive_sparse_transformer_tiny")
def adaptive_sparse_transformer_tiny(args):
    """Tests: 2+2 layers, 32-dim, 4 heads (head size 8), FFN 64, pre-norm."""
    _preset(args, 32, 64, 4, 2)


@register_model_architecture(SINGLE_MODEL, SINGLE_MODEL)
def adaptive_sparse_single(args):
    base_architecture(args)
