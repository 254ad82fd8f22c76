"""Adaptive sparse Transformer (Gong et al., 2022), the building blocks: per-language component
scores for attention heads (alpha, Eq. 5), FFN blocks (beta, Eq. 6) and layers (gamma, Eq. 7).

Every language l has a logit mu per component; its score ``s = gumbel_sigmoid(mu, tau)`` (the
binary Gumbel-softmax of ``modules/latent_layers.py``: one implementation) is drawn once per
language and component per forward call, and every sentence takes the draws of its language. The
sparsity loss takes log s from ``logsigmoid`` of the same argument, so its gradient stays finite
where a sampled score rounds to 0 or 1 (``xlogy(s, s)`` gave NaN there, at small tau).

* Phase 1 (``num_updates < T-bar``): components are scaled by ``s``; loss ``c_s L_s`` (Eq. 8).
* Phase 2 (from T-bar on): binary masks ``m`` keep the top-k scores of each category (H' heads
  per layer, K' blocks per layer, D' layers), components are scaled by ``m * s``; losses
  ``c_d L_d(m * s)`` (Eq. 9) and ``c_t L_t(s, m)`` (Eq. 10).
* Each category switches at its own T-bar: heads and blocks at ``t_bar``, layers at ``layer_t_bar``
  (the model's default: an eighth of the run against a 32nd; the same when one T-bar is given).
* Inference: no noise. ``m`` is the top-k of mu per language (ties to the lower index) and the
  kept components are scaled by the noise-free score ``sigmoid(mu / tau)``; unselected heads,
  blocks and layers do not run.

The losses run over the languages trained on the scorer's side and over the side's components
of each category c (heads, blocks, layers; N_c per language). Eq. 8-10 sum over both; the
criterion adds ``c * L`` to a cross entropy that is a mean per target token, so a literal sum
grows with L x N (52 components x 8 languages: ``c_t L_t`` ~6.6 nats against a cross entropy of
~5.5) and the regularisers outweigh the task. ``reduction="mean"`` (the default) divides each
category's sum by its number of terms and adds the categories, keeping every term per component
and language as in the paper:

    L_s = sum_c 1/(L N_c) sum_l sum_{i in c} s_li (log s_li - log 0.5)
    L_d = sum_c 1/(P N_c) sum_{l<l'} sum_{i in c} s_li s_l'i   (P = L(L-1)/2 pairs, 1 when L = 1)
    L_t = sum_c 1/(L N_c) sum_l sum_{i in c} (s_li - m_li)^2

so ``c_s``, ``c_d`` and ``c_t`` weigh one category's mean term against one token's cross entropy
at any L and N, and a component is regularised as strongly whatever other types are switched on
(one mean over all 52 components of Attn+FFN+Layer gave each of the 4 layers 1/13 of the pull it
gets when layers are the only type: docs/adaptive_sparse.md, "Attn+FFN+Layer"). With one type
this is the mean over its components; ``reduction="sum"`` keeps the literal sums.

The logits are ``scale * theta`` (``modules/scaled_logits.py``): with Adam they move ``scale``
times faster than the weights, so a selection can become decisive in a short run.
"""

import contextlib
import itertools
import math
from typing import Dict, Optional, Sequence, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .auxiliary import AuxiliaryReporter
from .call_state import CallState
from .latent_layers import gumbel_logits, mark_languages
from .routing import MissingLanguageIds, all_equal, route_by_language
from .row_subsets import rows_of
from .scaled_logits import add_scaled_logits, scaled_value
from .schedules import ScheduledModule, keep_horizons

__all__ = ["SPARSITY_TYPES", "REDUCTIONS", "topk_mask", "sparsity_loss", "disparity_loss", "topk_loss",
           "reduced_losses", "RoutedLinear", "SparseScorer", "inference_tables", "CATEGORIES"]

SPARSITY_TYPES = ("attn", "ffn", "layer")
REDUCTIONS = ("mean", "sum")
CATEGORIES = {"attn": "heads", "ffn": "blocks", "layer": "layers"}
_DECISIONS = itertools.count()  # a new number for every inference decision computed


def topk_mask(scores: Tensor, k: int) -> Tensor:
    """Binary (float) mask of the ``k`` highest scores along the last dimension (ties to the lower index)."""
    order = torch.argsort(-scores.detach(), dim=-1, stable=True)[..., :k]
    return torch.zeros_like(scores).scatter_(-1, order, 1.0)


def sparsity_loss(s: Tensor, log_s: Optional[Tensor] = None) -> Tensor:
    """Eq. 8: sum_l sum_i s_li (log s_li - log 0.5), s (L, N). Training passes ``log_s``, computed from the
    logits (``F.logsigmoid``): finite for every score, so the gradient is too. Without it (values only) log s
    comes from s, with 0 log 0 = 0."""
    s = s.float()
    if log_s is None:
        return (torch.xlogy(s, s) - s * math.log(0.5)).sum()
    return (s * (log_s.float() - math.log(0.5))).sum()


def disparity_loss(s: Tensor) -> Tensor:
    """Eq. 9: sum_{l < l'} sum_i s_li s_l'i, s (L, N)."""
    s = s.float()
    return ((s.sum(0) ** 2 - (s ** 2).sum(0)).sum()) / 2


def topk_loss(s: Tensor, m: Tensor) -> Tensor:
    """Eq. 10: sum_l sum_i (s_li - m_li)^2."""
    return ((s.float() - m.float()) ** 2).sum()


def reduced_losses(phase: Union[int, Dict[str, int]], scores: Dict[str, Tensor],
                   masks: Optional[Dict[str, Tensor]] = None, reduction: str = "mean",
                   log_scores: Optional[Dict[str, Tensor]] = None) -> Dict[str, Tensor]:
    """The auxiliary terms on each category's (L, N_c) scores (and masks in phase 2), by the category's
    phase (one for all, or per category): phase 1 ``{"sparsity": L_s}``, phase 2 ``{"disparity":
    L_d(m * s), "topk": L_t(s, m)}``, each term summed over the categories it applies to. ``reduction``
    "sum" is Eq. 8-10 literally; "mean" divides each category's sum by its number of terms (L N_c, or
    P N_c pairs for L_d; see the module docstring). ``log_scores``: log s per category for L_s
    (``sparsity_loss``)."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"sparse loss reduction {reduction!r}: use one of {', '.join(REDUCTIONS)}")
    totals = {}
    for category, s in scores.items():
        langs, n = s.shape
        per_lang = 1.0 if reduction == "sum" else float(langs * n)
        per_pair = 1.0 if reduction == "sum" else float(max(langs * (langs - 1) // 2, 1) * n)
        if (phase[category] if isinstance(phase, dict) else phase) == 1:
            terms = {"sparsity": sparsity_loss(s, (log_scores or {}).get(category)) / per_lang}
        else:
            m = masks[category]
            terms = {"disparity": disparity_loss(m * s) / per_pair, "topk": topk_loss(s, m) / per_lang}
        for term, value in terms.items():
            totals[term] = value if term not in totals else totals[term] + value
    return totals


def inference_tables(logits: Dict[str, Tensor], keep: Dict[str, int], tau: float) -> Dict[str, Dict[str, Tensor]]:
    """The deterministic decision per category (``heads``/``blocks``/``layers`` -> mu): ``mask``
    (the top-k of mu, bool), ``value`` (sigmoid(mu / tau) * mask) and, for heads and blocks,
    ``index`` (N, layers, k): the kept components in ascending order."""
    tables = {}
    for category, mu in logits.items():
        mu = mu.detach().float()
        mask = topk_mask(mu, keep[category])
        entry = {"mask": mask.bool(), "value": torch.sigmoid(mu / tau) * mask}
        if category != "layers":
            entry["index"] = mask.bool().nonzero()[:, -1].view(*mu.shape[:-1], keep[category])
        tables[category] = entry
    return tables


class RoutedLinear(nn.Linear):
    """``nn.Linear`` (same parameter names) that the sparse layer configures for one call:

    * ``in_scale`` (1, B, in): multiplies the input (training: alpha before out_proj, beta before fc2);
    * ``out_scale`` (1, B, out): multiplies ``x W^T`` before the bias (training: beta on W1, Eq. 6);
    * ``route`` (lang_ids (B,), weights(lang) -> (W, b), key): every language's rows go through its
      own (sliced) weights (inference: only the selected heads/blocks are computed). The sliced
      weights are kept per language while ``key`` (the scorer's decision) and the weights stay
      the same; ``train()`` drops them (training changes the weights)."""

    def configure(self, in_scale=None, out_scale=None, route=None):
        self.__dict__["_cfg"] = (in_scale, out_scale, route)

    def train(self, mode: bool = True):
        self.__dict__["_slices"] = None
        return super().train(mode)

    def _sliced(self, lang: int, weights, key):
        if torch.is_grad_enabled():  # a graph needs the slices of the parameters themselves
            return weights(lang)
        key = (key, self.weight.data_ptr(), self.weight._version)
        cache = self.__dict__.get("_slices")
        if cache is None or cache[0] != key:
            cache = (key, {})
            self.__dict__["_slices"] = cache
        value = cache[1].get(lang)
        if value is None:
            value = cache[1][lang] = weights(lang)
        return value

    def forward(self, x):
        in_scale, out_scale, route = self.__dict__.get("_cfg") or (None, None, None)
        if route is not None:
            ids, weights, key = route
            return route_by_language(x, ids, lambda lang, xs, _: F.linear(xs, *self._sliced(lang, weights, key)),
                                     batch_dim=1)
        if in_scale is not None:
            x = x * in_scale.to(x.dtype)
        if out_scale is not None:
            return F.linear(x, self.weight) * out_scale.to(x.dtype) + self.bias
        return F.linear(x, self.weight, self.bias)


class SparseScorer(nn.Module, ScheduledModule, AuxiliaryReporter):
    """The selection logits mu of one side (encoder: source language, decoder: target language).

    ``prepare(lang_ids)`` once per forward call of the stack; the layers then ask
    ``layer_plan``/``head_plan``/``block_plan`` for their part of the call."""

    def __init__(self, name: str, side: str, num_langs: int, num_layers: int, num_heads: int, ffn_dim: int, *,
                 types: Sequence[str], blocks: int, keep_layers: int, keep_heads: int, keep_blocks: int,
                 t_bar: int, layer_t_bar: Optional[int] = None, tau: float = 1.0, c_s: float = 0.1,
                 c_d: float = 0.02, c_t: float = 0.1,
                 logit_init: float = 0.0, trained_languages: Optional[Sequence[int]] = None,
                 reduction: str = "mean", logit_lr_scale: float = 1.0):
        super().__init__()
        self.name, self.side, self.types = name, side, tuple(types)
        self.num_layers, self.num_heads, self.blocks = num_layers, num_heads, blocks
        self.block_width = ffn_dim // blocks if blocks else 0
        self.keep = {"layers": keep_layers, "heads": keep_heads, "blocks": keep_blocks}
        self.t_bar, self.tau, self.c_s, self.c_d, self.c_t = t_bar, tau, c_s, c_d, c_t
        # the layers may switch later than heads and blocks (None: Algorithm 1's one T-bar)
        self.layer_t_bar = t_bar if layer_t_bar is None else layer_t_bar
        keep_horizons(self, {"t_bar": "--sparse-t-bar", "layer_t_bar": "--sparse-layer-t-bar"})
        if reduction not in REDUCTIONS:
            raise ValueError(f"sparse loss reduction {reduction!r}: use one of {', '.join(REDUCTIONS)}")
        self.reduction = reduction
        shapes = {"heads": (num_langs, num_layers, num_heads), "blocks": (num_langs, num_layers, blocks),
                  "layers": (num_langs, num_layers)}
        for kind in self.types:  # every score starts at sigmoid(logit_init); parameter names as before the scale
            category = CATEGORIES[kind]
            add_scaled_logits(self, f"{category}_logits", shapes[category], logit_init, logit_lr_scale)
        self.register_buffer("trained_languages", torch.ones(num_langs, dtype=torch.bool), persistent=False)
        self.register_buffer("trained_ids", torch.arange(num_langs), persistent=False)
        self.set_trained_languages(trained_languages)
        self._call = CallState(batch=None)

    def set_trained_languages(self, ids: Optional[Sequence[int]]) -> None:
        """The languages trained on this side (all when none are named): those the losses run over.
        The model sets them again when a checkpoint re-maps the ids."""
        mark_languages(self, ids)

    def categories(self):
        return [CATEGORIES[kind] for kind in self.types]

    def logits(self, category: str) -> Optional[Tensor]:
        """mu of ``category`` (``scale * theta``, differentiable), None without that sparsity."""
        name = f"{category}_logits"
        return scaled_value(self, name) if hasattr(self, name) else None

    @property
    def t_bars(self) -> Dict[str, int]:
        """T-bar per category."""
        return {"heads": self.t_bar, "blocks": self.t_bar, "layers": self.layer_t_bar}

    def phase(self, category: str = "heads") -> int:
        """Algorithm 1: update t (1-based, trained with num_updates = t - 1) is in phase 2 when t > T-bar,
        the category's T-bar (heads and blocks: ``t_bar``; layers: ``layer_t_bar``)."""
        return 1 if self.num_updates < (self.layer_t_bar if category == "layers" else self.t_bar) else 2

    # --- the deterministic inference decision --------------------------------------------------
    def inference_tables(self) -> Dict[str, Dict[str, Tensor]]:
        """The decision of ``inference_tables``, recomputed only when the logits change value (the
        same object otherwise: the projections key their sliced weights on it)."""
        logits = [self.logits(c).detach() for c in self.categories()]
        cached = self.__dict__.get("_tables")
        if cached is not None and all_equal(*zip(cached[0], logits)):  # one device read for every category
            return cached[1]
        tables = inference_tables({c: self.logits(c) for c in self.categories()}, self.keep, self.tau)
        version = next(_DECISIONS)
        for entry in tables.values():
            entry["key"] = version
        self.__dict__["_tables"] = ([t.clone() for t in logits], tables)
        return tables

    # --- per forward call -----------------------------------------------------------------------
    def prepare(self, lang_ids: Optional[Tensor]) -> None:
        if lang_ids is None:
            raise MissingLanguageIds(
                f"no {self.side}_lang_id for this batch: the adaptive sparse {self.name} selects components by each "
                "sentence's language; train and decode with --task multilingual_langshare")
        if not self.training:
            cached, decided = self.__dict__.get("_prepared"), self.__dict__.get("_tables")
            # the same decision for the same languages (every step of a beam search until sentences
            # finish): the same call, with the row sets and narrowed plans it has computed; the
            # logits and the ids compared in one device read
            if cached is not None and decided is not None and cached["tables"] is decided[1] and all_equal(
                    (cached["key"], lang_ids), *zip(decided[0], (self.logits(c).detach() for c in self.categories()))):
                self._call = cached
                return
            tables = self.inference_tables()
        call = CallState(batch=lang_ids.numel(), ids=lang_ids, training=self.training)
        if self.training:
            call["rows"] = self._sample(lang_ids)
        else:
            call["tables"] = tables
            call["key"] = lang_ids.clone()
            call["layer_rows"], call["narrowed"] = {}, {}
            if "layers" in tables:
                gamma = tables["layers"]["value"].to(lang_ids.device).index_select(0, lang_ids)  # (B, D)
                keep = gamma > 0
                call["gamma"], call["keep"] = gamma, keep
                call["rows_keeping"] = keep.sum(0).tolist()  # one sync per call
                call["runs"] = [n > 0 for n in call["rows_keeping"]]
            self.__dict__["_prepared"] = call
        self._call = call

    def _sample(self, lang_ids: Tensor) -> Dict[str, Tensor]:
        trained = self.trained_ids
        phases = {category: self.phase(category) for category in self.categories()}
        scores, log_scores, masks, used = {}, {}, {}, {}
        for category in self.categories():
            x = gumbel_logits(self.logits(category), self.tau)  # one draw per language and component
            s = scores[category] = torch.sigmoid(x)
            log_scores[category] = F.logsigmoid(x)
            if phases[category] == 2:
                masks[category] = topk_mask(s, self.keep[category])
                used[category] = masks[category] * s
            else:
                used[category] = s
        flat = lambda table: {c: t.index_select(0, trained).flatten(1) for c, t in table.items()}  # (L, N_c) each
        weights = {"sparsity": self.c_s, "disparity": self.c_d, "topk": self.c_t}
        losses = reduced_losses(phases, flat(scores), flat(masks), self.reduction, flat(log_scores))
        for term, value in losses.items():
            self.report_loss(f"{term}_{self.name}", value, weights[term])
        self.report_stat("sparse_phase", sum(phases.values()) / len(phases))  # 1 or 2; between while layers wait
        return {category: table.index_select(0, lang_ids) for category, table in used.items()}

    def _check(self, batch: int):
        call = self._call
        if call["batch"] != batch:
            raise RuntimeError(f"the adaptive sparse {self.name} was prepared for {call['batch']} sentences but runs "
                               f"on {batch}: call it through its encoder/decoder forward")
        return call

    # --- asked by the layers ----------------------------------------------------------------------
    def layer_plan(self, layer: int, batch: int):
        """None (no layer sparsity: gamma = 1), "skip" (no sentence of the call keeps the layer) or
        gamma (1, B, 1)."""
        call = self._check(batch)
        if "layers" not in self.categories():
            return None
        if call["training"]:
            return call["rows"]["layers"][:, layer].view(1, -1, 1)
        if not call["runs"][layer]:
            return "skip"
        return call["gamma"][:, layer].view(1, -1, 1)

    def layer_rows(self, layer: int) -> Optional[Tensor]:
        """At inference, the rows of the call that keep ``layer`` when only some do (their number was
        read with the plan: no read here), else None: the layer runs on every row, or on none
        (``layer_plan`` says "skip")."""
        call = self._call
        if call["training"] or "keep" not in call or call["rows_keeping"][layer] in (0, call["batch"]):
            return None
        rows = call["layer_rows"].get(layer)  # once per prepared call: the same tensor at every step
        if rows is None:
            rows = call["layer_rows"][layer] = rows_of(call["keep"][:, layer], call["rows_keeping"][layer])
        return rows

    @contextlib.contextmanager
    def on_rows(self, rows: Tensor):
        """The plans of the call narrowed to ``rows`` (a layer that runs on a subset of the batch:
        its heads and FFN blocks are those of these rows' languages)."""
        call = self._call
        cache = call.get("narrowed")
        narrowed = None
        if cache is not None:
            entry = cache.get(id(rows))
            if entry is not None and entry[0] is rows:
                narrowed = entry[1]
        if narrowed is None:
            narrowed = CallState(call, batch=rows.numel(), ids=call["ids"].index_select(0, rows))
            for key in ("keep", "narrowed", "layer_rows", "key"):  # no layer within a layer, no cache
                narrowed.pop(key, None)
            if "gamma" in call:
                narrowed["gamma"] = call["gamma"].index_select(0, rows)
            if cache is not None:
                cache[id(rows)] = (rows, narrowed)  # holds rows: its id is not reused meanwhile
        self._call = narrowed
        try:
            yield
        finally:
            self._call = call

    def _plan(self, category: str, layer: int, batch: int):
        call = self._check(batch)
        if category not in self.categories():
            return None
        if call["training"]:
            return "scale", call["rows"][category][:, layer]  # (B, H) or (B, K)
        table = call["tables"][category]
        return "select", call["ids"], table["index"][:, layer], table["value"][:, layer], table["key"]

    def head_plan(self, layer: int, batch: int):
        """None, ("scale", alpha (B, H)) in training, ("select", ids, index (N, H'), alpha (N, H), key) at
        inference (key: identifies the decision)."""
        return self._plan("heads", layer, batch)

    def block_plan(self, layer: int, batch: int):
        """None, ("scale", beta (B, K)) in training, ("select", ids, index (N, K'), beta (N, K), key) at inference."""
        return self._plan("blocks", layer, batch)
