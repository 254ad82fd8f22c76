"""fairseq's data-parallel wrappers for models whose steps leave parameters unused.

A language absent from every sentence a rank trains on leaves that language's parameters (LSL
copies, adapters, CLSR projections, a family's stack) out of the step; latent depth leaves the
layers no language keeps out from its commit on, adaptive sparsity its unselected components from
T-bar on. fairseq 0.12's ``DistributedFairseqModel`` wraps the model as follows, and this module's
``install()`` puts ``distributed_model`` below in its place (the trainer calls it through
``fairseq.models``):

* ``--ddp-backend pytorch_ddp`` (fairseq's default) builds torch's ``DistributedDataParallel``
  with ``find_unused_parameters`` off unless ``--find-unused-parameters`` is given: a step that
  leaves a parameter unused then stops the run (``Expected to have finished reduction in the
  prior iteration``), latent depth only after its commit. Here a model that declares such steps
  (``leaves_parameters_unused``: every method but the baseline, and the baseline under LayerDrop) gets it
  on, with a one-line notice; what the search for unused parameters costs is measured in docs/scale.md.
  fairseq also passes
  ``device_ids=[device_id]``, which torch refuses for a model on the CPU; a CPU model gets none.
* ``--ddp-backend legacy_ddp`` all-reduces a zero gradient for a parameter no rank used, so Adam's
  moments move it on the next updates, which one process (whose optimizer skips a parameter
  without a gradient) never does. For such models a parameter no rank used keeps no gradient and is
  not all-reduced (one more all-reduce, of one flag per parameter, decides which), so N ranks with
  batch B reach the parameters one process reaches with ``--update-freq N`` on the same batches, as
  with ``pytorch_ddp``, and a step sends only what some rank used (fairseq's sends its whole buffer,
  one slot per parameter).

Under ``pytorch_ddp`` the parameters a model declares idle (``idle_parameters``: parameters no
training step can use in the current phase, the same on every rank without asking them: the stacks
of groups no direction of --lang-pairs reaches, latent depth's unkept layers and logits from its
commit on) are left out of DDP (``IdleExcludingDDP``), so its buckets hold only what a step can use:
nothing of theirs is copied, zeroed or sent. fairseq builds DDP before it loads a checkpoint, whose
group tables can change what is idle, and latent depth's commit changes it during a run, so DDP is
built again over the new set at the first training forward after it changes (every rank at the same
forward: the set is read from the model), once no micro-batch accumulated under ``no_sync()`` waits
for its all-reduce. On 2 CPU ranks this took the multi-stacks' scaling from
0.89-0.98 of the baseline's to 0.94-0.95 and latent depth's from 0.91-0.99 to 0.95-0.97, where a
communication hook that left the idle slices out of each bucket's all-reduce, one collective per
kept range, had changed no step time (docs/benchmarks.md). A hook that asked the
ranks instead (a flag per gradient, then only the gradients nonzero on some rank) was measured
slower than torch's own all-reduce on the CPU, the zeros included, and is not used either.

Other models and backends are wrapped by fairseq as before.
"""

import contextlib
import gc
import logging
from typing import FrozenSet

import torch
from fairseq.distributed import DistributedTimeoutWrapper, LegacyDistributedDataParallel, ModuleProxyWrapper
from fairseq.distributed import utils as distributed_utils
from torch.nn.parallel import DistributedDataParallel

from .fairseq_replacements import replace

__all__ = ["leaves_parameters_unused", "idle_parameters", "torch_ddp", "IdleExcludingDDP", "distributed_model",
           "UnusedStayUnusedLegacyDDP", "install"]

logger = logging.getLogger(__name__)


def leaves_parameters_unused(model) -> bool:
    """Whether a training step of ``model`` can leave some of its trainable parameters unused."""
    return bool(getattr(model, "leaves_parameters_unused", False))


def idle_parameters(model) -> FrozenSet[torch.nn.Parameter]:
    """The parameters ``model`` says no training step can use in its current phase (its
    ``idle_parameters()``; none for a model without one)."""
    get = getattr(model, "idle_parameters", None)
    return get() if get is not None else frozenset()


def torch_ddp(module: torch.nn.Module, fp16_hook: bool, **ddp_kwargs) -> DistributedDataParallel:
    """torch's DDP over ``module``, with fairseq's ``--ddp-comm-hook fp16`` when ``fp16_hook``."""
    wrapped = DistributedDataParallel(module, **ddp_kwargs)
    if fp16_hook:
        from torch.distributed.algorithms.ddp_comm_hooks import DDPCommHookType, register_ddp_comm_hook

        register_ddp_comm_hook(DDPCommHookType.FP16_COMPRESS, wrapped)
    return wrapped


class IdleExcludingDDP(torch.nn.Module):
    """torch's ``DistributedDataParallel`` over ``module`` without the parameters it declares idle
    (``idle_parameters``), built again over the new set at the first training forward after the set
    changes (a checkpoint's group tables, latent depth's commit). The set is read from the model and
    changes at the same forward on every rank, so every rank builds the new DDP, whose construction
    is collective, together. Under ``--update-freq`` the rebuild waits for the update's last
    micro-batch to be all-reduced, so the update in which latent depth commits still sends the layers
    it leaves (zeros). A forward without gradients (validation) keeps the current DDP. ``no_sync()``
    holds across a rebuild. ``fp16_hook``, ``ddp_kwargs``: as ``torch_ddp``'s, for every build."""

    def __init__(self, module: torch.nn.Module, fp16_hook: bool, **ddp_kwargs):
        super().__init__()
        self._ddp_kwargs, self._fp16_hook, self._sync = ddp_kwargs, fp16_hook, True
        self._accumulated = False  # gradients of forwards under no_sync() not all-reduced yet
        self._build(module)

    @property
    def module(self) -> torch.nn.Module:
        return self.ddp.module

    def _build(self, module: torch.nn.Module) -> None:
        idle = idle_parameters(module)
        for p in module.parameters():  # torch marks the ignored ones and never unmarks them
            if hasattr(p, "_ddp_ignored"):
                del p._ddp_ignored
        DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(
            module, [name for name, p in module.named_parameters() if p in idle])
        if "ddp" in self._modules:  # the last DDP's buckets and hooks: torch keeps it in a reference cycle
            del self.ddp
            gc.collect()
        self.ddp = torch_ddp(module, self._fp16_hook, **self._ddp_kwargs)
        self._idle = idle

    def forward(self, *args, **kwargs):
        if torch.is_grad_enabled():
            idle = idle_parameters(self.module)
            # Not while micro-batches accumulated under no_sync() wait for their all-reduce: a new DDP
            # would not know what they used, and would leave what only they used unaveraged.
            if idle is not self._idle and not self._accumulated:
                if idle != self._idle:  # the model's cache was renewed (a load, a commit): compare once
                    self._build(self.module)
                self._idle = idle
            self._accumulated = not self._sync
        self.ddp.require_backward_grad_sync = self._sync
        return self.ddp(*args, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        """DDP's ``no_sync``: the forwards inside accumulate gradients without all-reducing them."""
        before, self._sync = self._sync, False
        try:
            yield
        finally:
            self._sync = before

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:  # DDP's own (find_unused_parameters, ...)
            return getattr(super().__getattr__("ddp"), name)


class UnusedStayUnusedLegacyDDP(LegacyDistributedDataParallel):
    """fairseq's ``legacy_ddp``, except that a parameter no rank used keeps no gradient and is not sent
    (fairseq's own all-reduces the whole buffer, one slot per parameter, whatever is in it)."""

    def all_reduce_grads(self):
        if self.accumulate_grads:
            return
        params = [p for p in self.module.parameters() if p.requires_grad and not hasattr(p, "expert")]
        if not params:
            return super().all_reduce_grads()
        used = torch.tensor([p.grad is not None for p in params], dtype=torch.int32, device=params[0].device)
        distributed_utils.all_reduce(used, self.process_group)
        kept = set()
        for p, count in zip(params, used.tolist()):
            if count == 0:
                p.grad = None
                continue
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            kept.add(p)
        if self.buffer is None:  # fairseq's: one slot per parameter, allocated once
            self.buffer = next(self.module.parameters()).new(self.buffer_size)
        for device_params in self.per_device_params:  # in buffer-sized groups, as fairseq's
            group, filled = [], 0
            for p in (p for p in device_params if p in kept):
                if group and filled + p.numel() > self.buffer.numel():
                    self._send(group)
                    group, filled = [], 0
                group.append(p)
                filled += p.numel()
            if group:
                self._send(group)

    def _send(self, params):
        """All-reduce the mean gradient of ``params`` through the buffer (a larger one directly)."""
        if len(params) == 1 and params[0].numel() > self.buffer.numel():
            sent, params = params[0].grad.data, []
        else:
            sent = self.buffer[:sum(p.numel() for p in params)]
        start = 0
        for p in params:
            sent[start:start + p.numel()].copy_(p.grad.data.view(-1))
            start += p.numel()
        sent.div_(self.world_size)  # as fairseq's: divided, then summed
        distributed_utils.all_reduce(sent, self.process_group)
        start = 0
        for p in params:
            p.grad.data.copy_(sent[start:start + p.numel()].view_as(p))
            start += p.numel()


def _wrap(args, wrapped):
    wrapped = ModuleProxyWrapper(wrapped)  # missing attributes and the state dict come from the model
    if getattr(args, "heartbeat_timeout", -1) > 0:
        wrapped = DistributedTimeoutWrapper(wrapped, timeout=getattr(args, "heartbeat_timeout", -1))
    return wrapped


def distributed_model(args, model, process_group, device):
    """fairseq's ``DistributedFairseqModel(args, model, process_group, device)`` with the changes of
    the module's doc; ``args`` is ``cfg.distributed_training``."""
    backend = str(args.ddp_backend)
    pytorch, legacy = backend in ("c10d", "pytorch_ddp"), backend in ("no_c10d", "legacy_ddp")
    unused = leaves_parameters_unused(model)
    on_cpu = torch.device(device).type == "cpu"
    if getattr(args, "tpu", False) or not (pytorch and (unused or on_cpu) or legacy and unused):
        return distributed_model.fairseq(args, model, process_group, device)
    if legacy:
        wrapped = UnusedStayUnusedLegacyDDP(module=model.to(device), process_group=process_group, buffer_size=2 ** 28)
        return _wrap(args, wrapped)
    find_unused = bool(args.find_unused_parameters) or unused
    if find_unused and not args.find_unused_parameters:
        logger.info("--ddp-backend %s: find_unused_parameters on, since a %s step leaves the parameters of what its "
                    "batch does not use (an absent language's, unselected or dropped layers) unused "
                    "(cost: docs/scale.md)",
                    backend, type(model).__name__)
    kwargs = dict(
        device_ids=None if on_cpu else [args.device_id],
        output_device=None if on_cpu else args.device_id,
        broadcast_buffers=args.broadcast_buffers,
        bucket_cap_mb=args.bucket_cap_mb,
        process_group=process_group,
        find_unused_parameters=find_unused,
        gradient_as_bucket_view=args.gradient_as_bucket_view,
    )
    fp16_hook = str(args.ddp_comm_hook) == "fp16"
    if fp16_hook:
        logger.info("enable fp16 communication hook in DDP")
    build = IdleExcludingDDP if hasattr(model, "idle_parameters") else torch_ddp
    return _wrap(args, build(model.to(device), fp16_hook, **kwargs))


def install() -> None:
    """Put ``distributed_model`` in fairseq's place."""
    from fairseq import models

    replace(models, "DistributedFairseqModel", distributed_model)
