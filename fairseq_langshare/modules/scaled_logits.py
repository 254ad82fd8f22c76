"""Selection logits that learn faster than the network: one mechanism for every method.

Latent depth (posterior logits alpha) and adaptive sparsity (component logits mu) learn a few
dozen numbers per language from the same optimizer and learning-rate schedule as millions of
weights. Adam moves every parameter by about ``lr`` per update whatever its gradient's scale, so
over a run a logit can travel at most ``sum_t lr_t``: about 2.4 over 2,000 updates of the CPU
schedule (lr 2e-3, inverse sqrt, 400 warm-up updates) against about 14 over the latent depth
paper's 14k updates (lr 1.5e-3, 8k warm-up). A selection needs |logit| of several units to be
decisive, so at small budgets the logits cannot get there however strong their gradient.

The remedy is a reparametrisation rather than a second optimizer parameter group (which
fairseq's optimizers and checkpoints do not carry per module): the parameter ``theta`` is stored
and the logit is ``scale * theta``. Adam's step on ``theta`` is still about ``lr``, so the logit
moves ``scale`` times faster; with plain SGD the effective rate would be ``scale**2``. The scale
is a buffer saved with the checkpoint (checkpoints from before it load with scale 1, their
parameter being the logit itself), so exports and analyses read ``scale * theta`` from any
checkpoint.
"""

from functools import partial

import torch
from torch import Tensor, nn

__all__ = ["add_scaled_logits", "scaled_value", "scaled_from_state", "set_scaled_value"]


def _scale_name(name: str) -> str:
    return f"{name}_scale"


def _default_scale(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs, *,
                   name: str):
    """A checkpoint from before the scale existed stores the logit itself: its scale is 1."""
    if prefix + name in state_dict:
        state_dict.setdefault(prefix + _scale_name(name), torch.tensor(1.0))


def add_scaled_logits(module: nn.Module, name: str, shape, init: float, scale: float) -> nn.Parameter:
    """Register parameter ``name`` (theta, initialised so that the logit is ``init`` everywhere)
    and the buffer ``name_scale`` on ``module``; returns the parameter."""
    if not scale > 0:
        raise ValueError(f"a logit learning-rate scale must be positive, got {scale}")
    param = nn.Parameter(torch.full(tuple(shape), float(init) / float(scale)))
    module.register_parameter(name, param)
    module.register_buffer(_scale_name(name), torch.tensor(float(scale)))
    module._register_load_state_dict_pre_hook(partial(_default_scale, name=name))
    return param


def scaled_value(module: nn.Module, name: str) -> Tensor:
    """The logits ``scale * theta`` (differentiable in theta)."""
    return getattr(module, name) * getattr(module, _scale_name(name))


def set_scaled_value(module: nn.Module, name: str, value: Tensor) -> None:
    """Set the logits to ``value`` (theta = value / scale), e.g. to hand-set posteriors in tests."""
    with torch.no_grad():
        getattr(module, name).copy_(value / getattr(module, _scale_name(name)))


def scaled_from_state(state: dict, key: str) -> Tensor:
    """The logits of parameter ``key`` in a checkpoint's model state (scale 1 when absent)."""
    scale_key = _scale_name(key)
    scale = state[scale_key].float() if scale_key in state else torch.tensor(1.0)
    return state[key].float() * scale
