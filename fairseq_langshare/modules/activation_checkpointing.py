"""Activation checkpointing (``--checkpoint-activations``, ``--offload-activations``) that torch's
DDP can train with when it searches for unused parameters.

fairseq's ``checkpoint_wrapper`` runs a layer under ``no_grad`` and again inside the backward pass
(a re-entrant autograd function). Its parameters are then absent from the graph DDP walks after the
forward pass to find unused parameters, so DDP marks them unused and then receives their gradients
("Expected to mark a variable ready only once"): every model of this package that trains with
``find_unused_parameters`` (``data_parallel``) stopped at its first update with checkpointing on.
torch's non-reentrant checkpoint keeps the parameters in the graph and recomputes the layer in the
backward pass as fairseq's does (same RNG state: the same dropout masks). ``--offload-activations``
keeps the layer's inputs on the CPU until the backward pass needs them, as fairseq's does.

``checkpointed(layer, offload)`` puts this in place of fairseq's wrapper on a layer (the
language-aware encoder and decoder do it for every layer fairseq builds); ``checkpoint(fn, ...)``
runs one call so (latent depth's layers, whose scale ``z`` is set around the call).
"""

import functools
from typing import Any, Callable

import torch
import torch.utils.checkpoint
from torch import nn

__all__ = ["checkpoint", "checkpointed", "replace_fairseq_checkpointing"]


def _to(value: Any, device) -> Any:
    if torch.is_tensor(value):
        return value.to(device, non_blocking=True)
    if isinstance(value, (list, tuple)):
        return type(value)(_to(v, device) for v in value)
    if isinstance(value, dict):
        return {k: _to(v, device) for k, v in value.items()}
    return value


def checkpoint(fn: Callable, *args, offload: bool = False, **kwargs):
    """``fn(*args, **kwargs)`` whose activations are recomputed in the backward pass instead of kept
    (``offload``: the inputs wait on the CPU); the gradients reach every tensor ``fn`` reads."""
    if not offload:
        return torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=False, **kwargs)
    device = next((a.device for a in args if torch.is_tensor(a)), None)
    if device is None or device.type == "cpu":
        return torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=False, **kwargs)

    def on_device(*cpu_args, **cpu_kwargs):
        return fn(*_to(cpu_args, device), **_to(cpu_kwargs, device))

    return torch.utils.checkpoint.checkpoint(on_device, *_to(args, "cpu"), use_reentrant=False,
                                             **_to(kwargs, "cpu"))


def _checkpointed_forward(original_forward, offload, *args, **kwargs):
    layer = original_forward.__self__
    if layer.training and torch.is_grad_enabled():
        return checkpoint(original_forward, *args, offload=offload, **kwargs)
    return original_forward(*args, **kwargs)


def checkpointed(layer: nn.Module, offload: bool = False) -> nn.Module:
    """``layer`` with its activations recomputed in training (under the attribute names of fairseq's
    wrapper, so that fairseq's ``unwrap_checkpoint`` undoes it)."""
    layer.precheckpoint_forward = layer.forward
    layer.forward = functools.partial(_checkpointed_forward, layer.precheckpoint_forward, offload)
    return layer


def replace_fairseq_checkpointing(layer: nn.Module) -> nn.Module:
    """A layer fairseq's ``build_*_layer`` wrapped with its re-entrant ``checkpoint_wrapper``, with
    ``checkpointed`` instead (the same offloading); any other layer as it is."""
    forward = getattr(layer, "forward", None)
    if not hasattr(layer, "precheckpoint_forward") or not isinstance(forward, functools.partial) \
            or forward.func is _checkpointed_forward:
        return layer
    offload = bool(forward.args[1]) if len(forward.args) > 1 else False
    layer.forward = layer.precheckpoint_forward
    del layer.precheckpoint_forward
    return checkpointed(layer, offload)
