"""Latent layer selection (Li et al., NeurIPS 2020), the building blocks.

Layer l of a latent stack adds ``z_l * F_l(x)`` to the residual stream (Eq. 2); every language
n has its own selection logit ``alpha_l^(n)`` per layer, i.e. its own posterior
``q(z_l = 1) = sigmoid(alpha_l^(n))``.

* Training: ``z`` is a relaxed Bernoulli (binary Gumbel-softmax, Eq. 5) sample with temperature
  ``tau``; one draw per language and layer per forward call, and every sentence takes the draws
  of its language (``z_table[lang_ids]``).
* Loss (Eq. 8): ``beta KL(q || prior)`` per language (Eq. 7; prior Beta(1, 1), i.e. Bernoulli(1/2)
  for ``z``, or the aggregated posterior over languages) plus ``lambda L_K`` with
  ``L_K = |sum_l u_l - K|`` and ``u_l`` the samples averaged over languages.
* Inference: no sampling. Per language a layer is kept when ``q(z_l = 1) >= threshold`` (or it is
  among the K most probable layers); kept layers get ``z = 1`` and skipped layers do not run.
* Commit (this package's final phase, ``--latent-commit-updates``): from that update on, training
  runs the pruned network inference will run: the decision is frozen into the ``committed_keep``
  buffer, nothing is sampled and the logits stop learning. Without it, posteriors that end near
  1/2 would be decoded by a network training never ran (z = 1 on every kept layer).

The logits are ``scale * theta`` (``modules/scaled_logits.py``): they learn ``scale`` times faster
than the weights, so that a CPU-sized run can move them as far as the paper's long runs do.

``LayerSelector`` holds the logits of one stack, draws (or decides) the per-sentence ``z`` once
per forward call, reports the loss terms and statistics, and tells each layer what to do.
"""

import logging
import warnings
from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .auxiliary import AuxiliaryReporter, read_floats
from .first_rank import first_rank
from .routing import MissingLanguageIds, all_equal
from .row_subsets import rows_of
from .scaled_logits import add_scaled_logits, scaled_from_state, scaled_value, set_scaled_value
from .schedules import ScheduledModule, exponential_ramp, keep_horizons, linear_ramp

__all__ = ["gumbel_sigmoid", "gumbel_logits", "bernoulli_kl", "kl_to_prior", "target_depth_loss", "keep_table",
           "LayerSelector", "keep_from_state", "resolve_keep_rule", "alpha_from_state", "undecided_share", "PRIORS",
           "KEEP_RULES", "RUN", "SKIP", "DECISIVE"]

PRIORS = ("uniform", "aggregated")
KEEP_RULES = ("threshold", "top-k")
DECISIVE = 0.9  # a posterior is decided when q(z_l = 1) >= DECISIVE or <= 1 - DECISIVE
RUN, SKIP = "run", "skip"  # what a layer does at inference (or a (1, B, 1) mask of the rows that keep it)
_EPS = 1e-6
logger = logging.getLogger(__name__)


def gumbel_sigmoid(logits: Tensor, tau: float) -> Tensor:
    """Eq. 5 for the two outcomes {skip, select}: ``sigmoid((alpha + g1 - g0) / tau)`` with
    g0, g1 ~ Gumbel(0, 1). The difference of two Gumbels is Logistic(0, 1), drawn here as
    ``log u - log(1 - u)``; samples lie in [0, 1] and become discrete as tau -> 0."""
    return torch.sigmoid(gumbel_logits(logits, tau))


def gumbel_logits(logits: Tensor, tau: float) -> Tensor:
    """The argument of ``gumbel_sigmoid``'s sigmoid, ``(alpha + g1 - g0) / tau``: ``F.logsigmoid`` of it is
    log s, finite where s itself rounds to 0 or 1."""
    u = torch.rand_like(logits, dtype=torch.float32).clamp_(_EPS, 1.0 - _EPS)
    noise = torch.log(u) - torch.log1p(-u)
    return (logits.float() + noise) / tau


def bernoulli_kl(log_q1: Tensor, log_q0: Tensor, p1: Tensor) -> Tensor:
    """KL(Bernoulli(q) || Bernoulli(p)) from log q, log (1 - q) and p (elementwise)."""
    p1 = p1.clamp(_EPS, 1.0 - _EPS)
    q1 = log_q1.exp()
    return q1 * (log_q1 - p1.log()) + (1.0 - q1) * (log_q0 - torch.log1p(-p1))


def kl_to_prior(logits: Tensor, prior: str, languages: Optional[Tensor] = None) -> Tensor:
    """Eq. 7 per language: mean over layers of KL(q^(n)(z_l) || p(z_l)), shape (N,).

    ``uniform``: p(z_l = 1) = 1/2, the mean of the Beta(1, 1) prior on the Bernoulli parameter.
    ``aggregated``: p(z_l = 1) = mean of q^(n)(z_l = 1) over ``languages`` (the languages trained
    on this side, their ids or a bool (N,) mask; all if None), a prior: no gradient flows into it.
    """
    logits = logits.float()
    log_q1, log_q0 = F.logsigmoid(logits), F.logsigmoid(-logits)
    if prior == "uniform":
        p1 = torch.full_like(logits[:1], 0.5)
    elif prior == "aggregated":
        q1 = torch.sigmoid(logits.detach())
        q1 = q1 if languages is None else q1[languages]
        p1 = q1.mean(0, keepdim=True)
    else:
        raise ValueError(f"unknown prior {prior!r}: use one of {PRIORS}")
    return bernoulli_kl(log_q1, log_q0, p1).mean(-1)


def target_depth_loss(z_table: Tensor, target_depth: float, languages: Optional[Tensor] = None) -> Tensor:
    """L_K = |sum_l u_l - K| with u_l = z_l averaged over the (trained) languages (N, L)."""
    z = z_table if languages is None else z_table[languages]
    return (z.mean(0).sum() - target_depth).abs()


def keep_table(logits: Tensor, rule: str = "threshold", threshold: float = 0.5, top_k: int = 0) -> Tensor:
    """The deterministic inference decision, bool (N, L): layer l is kept for language n when
    q^(n)(z_l = 1) >= threshold, or (``top-k``) when it is among the ``top_k`` most probable
    layers of n (ties to the lower layer)."""
    probs = torch.sigmoid(logits.detach().float())
    if rule == "threshold":
        return probs >= threshold
    if rule != "top-k":
        raise ValueError(f"unknown keep rule {rule!r}: use one of {KEEP_RULES}")
    if not 0 <= top_k <= probs.size(-1):
        raise ValueError(f"cannot keep the top {top_k} of {probs.size(-1)} layers")
    order = torch.argsort(-probs, dim=-1, stable=True)[:, :top_k]
    return torch.zeros_like(probs, dtype=torch.bool).scatter_(-1, order, True)


def undecided_share(logits: Tensor, languages: Optional[Tensor] = None) -> float:
    """Share of the (trained languages') posteriors with 1 - DECISIVE < q(z_l = 1) < DECISIVE."""
    probs = torch.sigmoid(logits.detach().float())
    return float(undecided_fraction(probs if languages is None else probs[languages]))


def undecided_fraction(probs: Tensor) -> Tensor:
    """``undecided_share`` of posteriors ``probs`` already selected, a 0-d tensor (no device read)."""
    if not probs.numel():
        return probs.new_zeros(())
    return ((probs > 1 - DECISIVE) & (probs < DECISIVE)).float().mean()


def alpha_from_state(state: dict, prefix: str) -> Optional[Tensor]:
    """The selection logits alpha of the stack ``prefix`` (e.g. ``decoder.layer_select.``) in a
    checkpoint's model state, None when the stack is static."""
    return scaled_from_state(state, prefix + "logits") if prefix + "logits" in state else None


def resolve_keep_rule(rule: str, target_depth: int) -> str:
    """``auto`` (the default) is top-k for a stack with a target depth K, threshold otherwise."""
    rule = str(rule or "threshold")
    if rule == "auto":
        return "top-k" if target_depth > 0 else "threshold"
    return rule


def keep_from_state(state: dict, prefix: str, rule: str, threshold: float, target_depth: int) -> Optional[Tensor]:
    """The inference decision (N, L) stored in a checkpoint: the committed table when training
    committed, else ``keep_table`` of the logits under ``rule`` (``auto`` resolved); None when
    the stack is static."""
    alpha = alpha_from_state(state, prefix)
    if alpha is None:
        return None
    committed = state.get(prefix + "committed")
    if committed is not None and bool(committed):
        return state[prefix + "committed_keep"].bool()
    rule = resolve_keep_rule(rule, target_depth)
    return keep_table(alpha, rule, threshold, target_depth if rule == "top-k" else 0)


def mark_languages(module: nn.Module, ids: Optional[Sequence[int]]) -> None:
    """Set ``module.trained_languages``, bool (N,), to the languages ``ids`` (every language when
    none), and ``module.trained_ids`` to their ids in order: indexing a table with the ids asks a GPU
    nothing, with the mask it waits for the device (the result's size depends on the mask's values)."""
    mask = module.trained_languages
    with torch.no_grad():
        mask.fill_(not ids)
        if ids:
            mask[list(ids)] = True
    module.trained_ids = torch.tensor(sorted(set(ids)) if ids else list(range(mask.numel())), dtype=torch.long,
                                      device=mask.device)


class LayerSelector(nn.Module, ScheduledModule, AuxiliaryReporter):
    """The selection posteriors of one latent stack: logits (num_langs, num_layers).

    Call ``prepare(lang_ids)`` once per forward call of the stack (before its layers run); layer l
    then asks ``for_layer(l, batch)`` for its plan (RUN, SKIP, or a (1, B, 1) bool mask of the rows
    that keep it: inference) and its z (the (1, B, 1) per-sentence samples: training; None: z = 1).
    """

    def __init__(self, name: str, num_langs: int, num_layers: int, side: str, *, logit_init: float = 0.0,
                 tau_start: float = 1.0, tau_end: float = 0.1, tau_anneal_updates: int = 0,
                 prior: str = "uniform", kl_weight: float = 1.0, kl_anneal_updates: int = 0,
                 target_depth: int = 0, target_depth_weight: float = 0.1, update_period: int = 1,
                 keep_rule: str = "threshold", keep_threshold: float = 0.5, commit_updates: int = 0,
                 logit_lr_scale: float = 1.0, trained_languages: Optional[Sequence[int]] = None):
        super().__init__()
        if prior not in PRIORS:
            raise ValueError(f"unknown prior {prior!r}: use one of {PRIORS}")
        self.name, self.side, self.num_layers = name, side, num_layers
        # q(z_l = 1) = sigmoid(logit_init) everywhere; alpha = logit_lr_scale * theta
        add_scaled_logits(self, "logits", (num_langs, num_layers), logit_init, logit_lr_scale)
        # the decision training committed to (saved: inference and export read it); checkpoints
        # from before the commit phase load as uncommitted
        self.register_buffer("committed", torch.tensor(False))
        self.register_buffer("committed_keep", torch.zeros(num_langs, num_layers, dtype=torch.bool))
        self._register_load_state_dict_pre_hook(self._uncommitted_by_default)
        self.commit_updates = commit_updates
        self.register_buffer("trained_languages", torch.ones(num_langs, dtype=torch.bool), persistent=False)
        self.register_buffer("trained_ids", torch.arange(num_langs), persistent=False)
        self.tau_start, self.tau_end, self.tau_anneal_updates = tau_start, tau_end, tau_anneal_updates
        self.prior, self.kl_weight, self.kl_anneal_updates = prior, kl_weight, kl_anneal_updates
        keep_horizons(self, {"commit_updates": "--latent-commit-updates", "tau_anneal_updates": "--latent-tau-anneal-updates",
                             "kl_anneal_updates": "--latent-kl-anneal-updates"})
        self.target_depth, self.target_depth_weight = target_depth, target_depth_weight
        self.update_period = update_period
        self.keep_rule, self.keep_threshold = keep_rule, keep_threshold
        # per-call state in a plain dict: z (L, 1, B, 1) in training, plan (list) at inference
        self._call = {"z": None, "plan": None, "batch": None}
        self._cache = {}  # values derived from the logits, reused while the logits keep their value
        self.set_trained_languages(trained_languages)

    def set_trained_languages(self, ids: Optional[Sequence[int]]) -> None:
        """The languages trained on this side (all when none are named): those the aggregated prior,
        L_K and u_l average over. The model sets them again when a checkpoint re-maps the ids."""
        mark_languages(self, ids)
        self._cache.clear()  # statistics derived with the old mask

    def _uncommitted_by_default(self, state_dict, prefix, *args):
        self._cache.clear()  # the loaded state decides what is committed
        if prefix + "logits" in state_dict and prefix + "committed" not in state_dict:
            state_dict[prefix + "committed"] = torch.tensor(False)
            state_dict[prefix + "committed_keep"] = torch.zeros_like(self.committed_keep)

    def alpha(self) -> Tensor:
        """The selection logits alpha (N, L), ``scale * theta``."""
        return scaled_value(self, "logits")

    def set_alpha(self, value: Tensor) -> None:
        """Set the logits alpha (e.g. posteriors by hand)."""
        set_scaled_value(self, "logits", value)
        self._cache.clear()

    # --- schedules: pure functions of num_updates ------------------------------------------
    def tau(self) -> float:
        if self.tau_anneal_updates <= 0 and self.tau_start != self.tau_end:
            raise ValueError("the latent-layer temperature is annealed over the run but its length is unknown: "
                             "pass --max-update N (or --latent-tau-anneal-updates N)")
        return exponential_ramp(self.num_updates, self.tau_anneal_updates, self.tau_end, self.tau_start)

    def kl_beta(self) -> float:
        """beta(t): 0 at update 0, linear to --latent-kl-weight; never negative."""
        return linear_ramp(self.num_updates, self.kl_anneal_updates, self.kl_weight)

    def updates_selection(self) -> bool:
        """Algorithm 2: the logits learn from updates I, 2I, ... (1-based); I = 1 is joint training.
        Never after the commit."""
        return not self.is_committed() and (self.num_updates + 1) % self.update_period == 0

    def is_committed(self) -> bool:
        """Read from the buffer once (a device sync on a GPU), then remembered until the next
        commit or state-dict load."""
        flag = self._cache.get("committed")
        if flag is None:
            flag = self._cache["committed"] = bool(self.committed)
        return flag

    def commit(self) -> None:
        """Freeze today's inference decision: from now on training runs the pruned network."""
        with torch.no_grad():
            self.committed_keep.copy_(self._decide())
            self.committed.fill_(True)
        self.logits.requires_grad_(False)
        self._cache.clear()
        message = self.unkept_layers_message()
        if message and first_rank():
            logger.warning(message)

    def unkept_layers(self) -> Tuple[int, ...]:
        """The layers (0-based) no trained language keeps in the committed decision: no training
        step runs them from the commit on. () before the commit; read once, then remembered until
        the next commit, state-dict load or change of the trained languages."""
        if not self.is_committed():
            return ()
        unkept = self._cache.get("unkept")
        if unkept is None:
            keep = self.committed_keep[self.trained_ids]
            unkept = self._cache["unkept"] = tuple((~keep.any(0)).nonzero().flatten().tolist()) if keep.numel() else ()
        return unkept

    def unkept_layers_message(self) -> Optional[str]:
        """One line naming the layers (1-based) no trained language keeps in the committed decision,
        or None when every layer is kept by some language."""
        unkept = self.unkept_layers()
        if not unkept:
            return None
        keep = self.committed_keep[self.trained_ids]
        layers = ", ".join(str(i + 1) for i in unkept)
        text = (f"latent depth committed at update {self.num_updates}: {self.name} layer{'s' if len(unkept) > 1 else ''} "
                f"{layers} (of {self.num_layers}) {'are' if len(unkept) > 1 else 'is'} kept by no language, so "
                f"{'they train' if len(unkept) > 1 else 'it trains'} no more and decoding skips "
                f"{'them' if len(unkept) > 1 else 'it'} (the weights stay in the checkpoint)")
        if keep.size(0) > 1 and bool((keep == keep[:1]).all()):
            kept = ", ".join(str(i + 1) for i in keep[0].nonzero().flatten().tolist()) or "none"
            share = undecided_share(self.alpha(), self.trained_ids)
            text += (f"; every language keeps the same layers ({kept}): {share:.0%} of the selection posteriors were "
                     "undecided at the commit (docs/latent_depth.md, \"When to commit\")")
        return text

    # --- per forward call --------------------------------------------------------------------
    def _derived(self, name: str, compute):
        """``compute()`` once per value of the logits and of the inference rule (optimizers write
        ``p.data``, which leaves the version counter alone, so the values themselves are compared:
        one device read). A training step does not ask: its statistics stay tensors."""
        logits = self.alpha().detach()
        rule = self._rule()
        entry = self._cache.get(name)
        if entry is not None and entry[0] == rule and all_equal((entry[1], logits)):
            return entry[2]
        value = compute()
        self._cache[name] = (rule, logits.clone(), value)
        return value

    def _rule(self) -> tuple:
        """What the inference decision follows from besides the logits."""
        return self.keep_rule, self.keep_threshold, self.target_depth, self.is_committed()

    def keep(self) -> Tensor:
        """The inference decision for every language, bool (N, L): the committed one once training
        committed, else the keep rule applied to the posteriors."""
        if self.is_committed():
            return self.committed_keep
        return self._derived("keep", self._decide)

    def _decide(self) -> Tensor:
        """The keep rule applied to today's posteriors, bool (N, L)."""
        top_k = self.target_depth if self.keep_rule == "top-k" else 0
        return keep_table(self.alpha(), self.keep_rule, self.keep_threshold, top_k)

    def _warn_if_undecided(self) -> None:
        """Inference from undecided posteriors runs a network training never ran as such: say so
        once per value of the logits (a model that committed is exempt: it trained that network)."""
        if self.is_committed():
            return
        share = self._derived("undecided", lambda: undecided_share(self.alpha(), self.trained_ids))
        if share > 0 and not self._cache.get("warned_undecided") == share:
            self._cache["warned_undecided"] = share
            kept = self.keep()[self.trained_ids].float().sum(-1).mean()
            warnings.warn(
                f"{share:.0%} of the {self.name} stack's selection posteriors are undecided (between {1 - DECISIVE:.1f} "
                f"and {DECISIVE:.1f}): inference runs the {self.keep_rule} decision ({float(kept):.1f} layers per "
                "language on average), a network training only sampled; train longer (a larger --max-update), or with "
                "--latent-commit-updates so that the last phase trains the network that is decoded", stacklevel=3)

    def prepare(self, lang_ids: Optional[Tensor]) -> None:
        if lang_ids is None:
            raise MissingLanguageIds(
                f"no {self.side}_lang_id for this batch: latent layers choose the layers of every sentence by its "
                "language; train and decode with --task multilingual_langshare")
        call = self._call
        call["batch"] = lang_ids.numel()
        if self.training and not self.is_committed() and 0 < self.commit_updates <= self.num_updates:
            self.commit()
        if self.is_committed() and self.logits.requires_grad:  # e.g. resumed from a committed checkpoint
            self.logits.requires_grad_(False)
        if self.training and not self.is_committed():
            call["plan"] = None
            call["z"] = self._sample(lang_ids)
        else:
            call["z"] = None
            call["plan"] = self._plan(lang_ids, warn=not self.training)

    def _sample(self, lang_ids: Tensor) -> Tensor:
        # Algorithm 2 without a second backward: on the other updates the logits are no part of
        # the graph (their gradient stays None, so fairseq's optimizers and legacy_ddp skip them)
        if self.logits.requires_grad != self.updates_selection():
            self.logits.requires_grad_(self.updates_selection())
        logits = self.alpha()
        trained = self.trained_ids
        z_table = gumbel_sigmoid(logits, self.tau())  # one draw per language and layer
        # Eq. 7, weighted by each language's share of the batch (the NLL term sums over sentences)
        share = z_table.new_zeros(logits.size(0)).index_add_(0, lang_ids, z_table.new_ones(lang_ids.numel())) \
            / max(lang_ids.numel(), 1)  # bincount would read the device (its size follows the largest id)
        self.report_loss(f"kl_{self.name}", (share * kl_to_prior(logits, self.prior, trained)).sum(), self.kl_beta())
        if self.target_depth > 0:
            self.report_loss(f"target_depth_{self.name}", target_depth_loss(z_table, self.target_depth, trained),
                             self.target_depth_weight)
        self._report_utilisation()
        self.report_stat("latent_tau", self.tau())
        self.report_stat("latent_kl_beta", self.kl_beta())
        z_rows = z_table.index_select(0, lang_ids)  # (B, L)
        return z_rows.t().reshape(self.num_layers, 1, -1, 1)

    def _plan(self, lang_ids: Tensor, warn: bool = False) -> List:
        """The plan of every layer for the rows of ``lang_ids``, with the rows of each layer that
        runs on some rows only (``plan_rows``). One device read per call: how many rows keep each
        layer. At inference the plan is kept while the decision and the languages stay the same:
        every step of a beam search (until sentences finish) gets the same plan, checked with one
        read (the ids and the logits compared at once). In training (after the commit) a layer
        that every language keeps, or none does, needs no read: a stack whose languages agree on
        every layer plans without any."""
        rule, logits = self._rule(), self.alpha().detach()
        cached = self._cache.get("plan")
        if not self.training and cached is not None and cached["logits"] is not None and cached["rule"] == rule \
                and all_equal((cached["ids"], lang_ids), (cached["logits"], logits)):
            self._records()["stats"].update(cached["stats"])
            return cached["plan"]
        keep = self.keep()
        if warn:
            self._warn_if_undecided()
        stats = self._report_utilisation()
        plan = list(self._agreed_layers(keep)) if self.training else [None] * self.num_layers
        keep_rows = keep.to(lang_ids.device).index_select(0, lang_ids)  # (B, L)
        counts = keep_rows.sum(0).tolist() if None in plan else []  # the one read
        rows, batch = {}, lang_ids.numel()
        for layer, count in enumerate(counts):
            if plan[layer] is not None:
                continue
            if count in (0, batch):
                plan[layer] = RUN if count == batch else SKIP
            else:
                plan[layer] = keep_rows[:, layer].view(1, -1, 1)
                rows[layer] = rows_of(plan[layer], count)
        # kept for inference while the ids, the logits and the rule are the same (the decision
        # follows from them; a commit or a state load clears self._cache)
        self._cache["plan"] = {"rule": rule, "logits": None if self.training else logits.clone(), "stats": stats,
                               "ids": lang_ids.clone(), "plan": plan, "rows": rows}
        return plan

    def _agreed_layers(self, keep: Tensor) -> tuple:
        """Per layer: RUN when every language keeps it in ``keep``, SKIP when none does, None when
        they differ (read once per decision: the committed one lasts the run). Every language, not
        only the trained ones: fairseq's --extra-lang-pairs trains directions --lang-pairs lacks."""
        cached = self._cache.get("agreed")
        if cached is None or cached[0] is not keep:
            every, some = torch.stack([keep.all(0), keep.any(0)]).tolist()
            cached = self._cache["agreed"] = (keep, tuple(RUN if e else None if s else SKIP for e, s in zip(every, some)))
        return cached[1]

    def plan_rows(self, layer: int, mask: Tensor) -> Tensor:
        """Row numbers of ``mask``, the (1, B, 1) plan of ``layer``: read with the plan, and the same
        tensor at every step that gets the same plan (``SubsetCaches`` keys its row map on it)."""
        cached = self._cache.get("plan")
        if cached is None or cached["plan"][layer] is not mask:  # a plan from elsewhere
            return rows_of(mask)
        return cached["rows"][layer]

    def _report_utilisation(self) -> dict:
        """Expected utilisation u_l = mean of q(z_l = 1) over the trained languages (Figure 6),
        the expected depth sum_l u_l, and the depth the inference rule keeps. In training they
        stay tensors, which the criterion reads with the step's other statistics in one go (no read
        here), and follow the logits (an fp16 optimizer's momentum moves them after the commit);
        elsewhere they are computed once per value of the logits (decoding steps only copy them)."""
        if self.training:
            stats = self._utilisation(self.committed_keep if self.is_committed() else self._decide())
        else:
            stats = self._derived("stats", lambda: read_floats(self._utilisation(self.keep())))
        self._records()["stats"].update(stats)
        return stats

    def _utilisation(self, keep: Tensor) -> dict:
        trained = self.trained_ids
        probs = torch.sigmoid(self.alpha().detach().float()).index_select(0, trained)
        u = probs.mean(0)
        width = len(str(self.num_layers))
        stats = {f"{self.name}_u_{layer + 1:0{width}d}": u[layer] for layer in range(self.num_layers)}
        stats[f"{self.name}_depth"] = u.sum()
        stats[f"{self.name}_kept"] = keep.index_select(0, trained.to(keep.device)).float().sum(-1).mean()
        stats[f"{self.name}_undecided"] = undecided_fraction(probs)
        stats[f"{self.name}_committed"] = float(self.is_committed())
        return stats

    # --- asked by the layers -------------------------------------------------------------------
    def for_layer(self, layer: int, batch: int):
        """(plan, z) of ``layer`` for the prepared call: plan RUN, SKIP or a (1, B, 1) bool mask of
        the rows that keep the layer (inference); z the (1, B, 1) samples (training) or None (z = 1)."""
        call = self._call
        if call["batch"] != batch:
            if call["batch"] is None:
                raise RuntimeError(f"latent layer of the {self.name} stack ran outside its encoder/decoder forward")
            raise RuntimeError(f"latent layers of the {self.name} stack were prepared for {call['batch']} sentences "
                               f"but run on {batch}")
        plan, z = call["plan"], call["z"]
        return (RUN if plan is None else plan[layer]), (None if z is None else z[layer])
