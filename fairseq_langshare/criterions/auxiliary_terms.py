"""The auxiliary losses a model adds in training, and the refusal of a criterion that would drop them.

Only ``langshare_label_smoothed_cross_entropy`` adds ``model.auxiliary_outputs()`` to the loss: with fairseq's
``label_smoothed_cross_entropy`` or ``cross_entropy`` such a model trained without its regularizers, exit 0, no
word. The terms are read from the model's options (``AUXILIARY_TERMS``, by registered model name; a weight of 0
switches a term off) and from the checkpoint the run resumes (latent depth committed in it has no terms left), so
the task refuses when the criterion is built, before anything is trained, and again, alike, at the first step.
``tests/test_auxiliary_criterion.py`` checks the table against what each method's forward reports.
"""

import torch
from fairseq.criterions import CRITERION_REGISTRY

from ..run_options import in_fairseq_training, registered_model_name, resumed_checkpoint, saved_checkpoint
from ..user_errors import option_text
from .langshare_label_smoothed_cross_entropy import LangshareLabelSmoothedCrossEntropy

__all__ = ["AUXILIARY_TERMS", "AuxiliaryLossesDropped", "auxiliary_terms", "require_auxiliary_criterion"]

CRITERION = "langshare_label_smoothed_cross_entropy"


def _weighted(*terms):
    return [f"{name} ({option_text(option, 'model', weight)})" for name, option, weight in terms if weight]


def _committed(weights) -> bool:
    """Whether every latent stack of a checkpoint's ``weights`` committed its selection: training from there runs
    the frozen, pruned network, with no KL or target-depth term (``LayerSelector.prepare``)."""
    flags = [value for key, value in weights.items() if key.endswith("layer_select.committed")]
    return bool(flags) and all(bool(flag) for flag in flags)


# registered model name -> (its model config, the weights the run resumes) -> the auxiliary losses it adds in
# training, with their weight flags
AUXILIARY_TERMS = {
    "clsr_transformer": lambda c, resumed: _weighted(("budget", "clsr_budget_weight", c.clsr_budget_weight))
    if str(c.clsr_variant) in ("clsr", "gate") else [],  # the other variants' gates are fixed: no budget
    "latent_depth_transformer": lambda c, resumed: [] if _committed(resumed) else _weighted(
        ("kl", "latent_kl_weight", c.latent_kl_weight),
        ("target_depth", "latent_target_depth_weight",
         c.latent_target_depth_weight if c.latent_encoder_target_depth or c.latent_decoder_target_depth else 0)),
    "adaptive_sparse_transformer": lambda c, resumed: _weighted(
        ("sparsity", "sparse_cs", c.sparse_cs), ("disparity", "sparse_cd", c.sparse_cd),
        ("topk", "sparse_ct", c.sparse_ct)),
}


class AuxiliaryLossesDropped(RuntimeError):
    """A RuntimeError: fairseq's trainer re-raises it from a training step without writing ``crash.pt``."""


def _unwrapped(model):
    while isinstance(getattr(model, "module", None), torch.nn.Module):  # fairseq's DDP wrappers
        model = model.module
    return model


def auxiliary_terms(model, resumed=None):
    """``["budget (--clsr-budget-weight 1.0)", ...]``: the losses ``model`` adds in training from the weights
    ``resumed`` (a checkpoint's state dict; None: from scratch) on (none: [])."""
    model = _unwrapped(model)
    name = registered_model_name(model)
    return AUXILIARY_TERMS[name](model.cfg, resumed or {}) if name in AUXILIARY_TERMS else []


def _resumed_weights(criterion) -> dict:
    """The weights of the checkpoint fairseq-train resumes (``resumed_checkpoint`` of the task's options; read
    once: ``saved_checkpoint``); {} outside fairseq-train or when it resumes none."""
    args = getattr(getattr(criterion, "task", None), "args", None)
    if args is None or not in_fairseq_training():
        return {}
    return (saved_checkpoint(resumed_checkpoint(args)) or {}).get("model") or {}


def require_auxiliary_criterion(model, criterion, arch) -> None:
    """Refuse a criterion that would leave out the auxiliary losses of ``model`` (built as ``--arch arch``) in
    what this run trains. The same answer when the criterion is built and at the first step (the weights the
    run resumes are read from the checkpoint both times)."""
    if isinstance(criterion, LangshareLabelSmoothedCrossEntropy) or not auxiliary_terms(model):
        return
    terms = auxiliary_terms(model, _resumed_weights(criterion))
    if not terms:
        return
    used = next((n for n, cls in CRITERION_REGISTRY.items() if cls is type(criterion)), type(criterion).__name__)
    ours, theirs = (option_text("criterion", "criterion", name) for name in (CRITERION, used))
    raise AuxiliaryLossesDropped(
        f"{arch} adds auxiliary losses ({', '.join(terms)}) that only {ours} puts into the loss, {theirs} drops "
        f"them: pass {ours} (or set their weights to 0)")
