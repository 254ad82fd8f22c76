"""The auxiliary losses a model adds in training, and the refusal of a criterion that would drop them.

Only ``langshare_label_smoothed_cross_entropy`` adds ``model.auxiliary_outputs()`` to the loss: with fairseq's
``label_smoothed_cross_entropy`` or ``cross_entropy`` such a model trained without its regularizers, exit 0, no
word. The terms are read from the model's options (``AUXILIARY_TERMS``, by registered model name; a weight of 0
switches a term off), so the task refuses when the criterion is built, before anything is trained.
``tests/test_auxiliary_criterion.py`` checks the table against what each method's forward reports.
"""

import torch
from fairseq.criterions import CRITERION_REGISTRY
from fairseq.models import MODEL_REGISTRY

from .langshare_label_smoothed_cross_entropy import LangshareLabelSmoothedCrossEntropy

__all__ = ["AUXILIARY_TERMS", "AuxiliaryLossesDropped", "auxiliary_terms", "require_auxiliary_criterion"]

CRITERION = "langshare_label_smoothed_cross_entropy"


def _weighted(*terms):
    return [f"{name} (--{flag} {weight})" for name, flag, weight in terms if weight]


# registered model name -> its model config -> the auxiliary losses it adds in training, with their weight flags
AUXILIARY_TERMS = {
    "clsr_transformer": lambda c: _weighted(("budget", "clsr-budget-weight", c.clsr_budget_weight))
    if str(c.clsr_variant) in ("clsr", "gate") else [],  # the other variants' gates are fixed: no budget
    "latent_depth_transformer": lambda c: _weighted(
        ("kl", "latent-kl-weight", c.latent_kl_weight),
        ("target_depth", "latent-target-depth-weight",
         c.latent_target_depth_weight if c.latent_encoder_target_depth or c.latent_decoder_target_depth else 0)),
    "adaptive_sparse_transformer": lambda c: _weighted(
        ("sparsity", "sparse-cs", c.sparse_cs), ("disparity", "sparse-cd", c.sparse_cd),
        ("topk", "sparse-ct", c.sparse_ct)),
}


class AuxiliaryLossesDropped(RuntimeError):
    """A RuntimeError: fairseq's trainer re-raises it from a training step without writing ``crash.pt``."""


def _unwrapped(model):
    while isinstance(getattr(model, "module", None), torch.nn.Module):  # fairseq's DDP wrappers
        model = model.module
    return model


def auxiliary_terms(model):
    """``["budget (--clsr-budget-weight 1.0)", ...]``: the losses ``model`` adds in training (none: [])."""
    model = _unwrapped(model)
    name = next((n for n, cls in MODEL_REGISTRY.items() if cls is type(model)), None)
    return AUXILIARY_TERMS[name](model.cfg) if name in AUXILIARY_TERMS else []


def require_auxiliary_criterion(model, criterion, arch) -> None:
    """Refuse a criterion that would leave out the auxiliary losses of ``model`` (built as ``--arch arch``)."""
    terms = auxiliary_terms(model)
    if not terms or isinstance(criterion, LangshareLabelSmoothedCrossEntropy):
        return
    used = next((n for n, cls in CRITERION_REGISTRY.items() if cls is type(criterion)), type(criterion).__name__)
    raise AuxiliaryLossesDropped(
        f"{arch} adds auxiliary losses ({', '.join(terms)}) that only --criterion {CRITERION} puts into the loss, "
        f"--criterion {used} drops them: pass --criterion {CRITERION} (or set their weights to 0)")
