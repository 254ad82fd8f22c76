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

The recomputation runs with the language ids the forward call had bound (``routing.rebound``), so
layers that route by language inside the call (adapters, LSL's LS-FFN and LS-attention, CLSR's
units, adaptive sparsity's scored components) recompute what they computed; auxiliary losses and
statistics are not reported again (``recomputing()``).

``checkpointed(layer, offload)`` puts this in place of fairseq's wrapper on a layer (the
language-aware encoder and decoder do it for every layer fairseq builds; ``wrap_like_fairseq``
for a layer a method builds itself); ``checkpoint(fn, ...)`` runs one call so (latent depth's
layers, whose scale ``z`` is set around the call).
"""

import contextlib
import functools
from typing import Any, Callable

import torch
import torch.utils.checkpoint
from torch import nn

from .routing import bound_languages, rebound

__all__ = ["checkpoint", "checkpointed", "wrap_like_fairseq", "recomputing", "replace_fairseq_checkpointing"]

_RECOMPUTING = [0]


def recomputing() -> bool:
    """Whether a checkpointed call is being recomputed in the backward pass now."""
    return _RECOMPUTING[0] > 0


@contextlib.contextmanager
def _recomputation():
    _RECOMPUTING[0] += 1
    try:
        yield
    finally:
        _RECOMPUTING[0] -= 1


def _replaying_languages(fn: Callable) -> Callable:
    """``fn``, whose calls after the first (the recomputation) run with the language ids bound now."""
    bound, calls = bound_languages(), [0]

    def run(*args, **kwargs):
        calls[0] += 1
        if calls[0] == 1:
            return fn(*args, **kwargs)
        with rebound(bound), _recomputation():
            return fn(*args, **kwargs)

    return run


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
    fn = _replaying_languages(fn)
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


def wrap_like_fairseq(layer: nn.Module, cfg, checkpoints_itself: bool = False) -> nn.Module:
    """What fairseq's ``build_*_layer`` does to the layer it builds, for a layer a method builds
    itself: checkpointed under ``--checkpoint-activations`` (which fairseq's model sets for
    ``--offload-activations``), then FSDP-wrapped (always, when checkpointed). ``checkpoints_itself``:
    a layer that runs its own call through ``checkpoint`` (latent depth's, around its scale ``z``)
    gets only the FSDP wrap."""
    from fairseq.distributed import fsdp_wrap

    checkpointing = bool(getattr(cfg, "checkpoint_activations", False))
    if checkpointing and not checkpoints_itself:
        layer = checkpointed(layer, bool(getattr(cfg, "offload_activations", False)))
    return fsdp_wrap(layer, min_num_params=0 if checkpointing else cfg.min_params_to_wrap)


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
