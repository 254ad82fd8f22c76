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
of groups no direction of --lang-pairs reaches, latent depth's unkept layers from its commit on)
travel no more: a communication hook leaves them out of each bucket's all-reduce, asking the model
at every bucket. They stay in DDP's buckets: fairseq builds DDP before it loads a checkpoint, whose
group tables or commit can change what is idle. On 2 CPU ranks this changed no step time
(docs/benchmarks.md); it cuts what an update sends. A hook that asked the ranks instead (a flag per
gradient, then only the gradients nonzero on some rank) was measured slower than torch's own
all-reduce on the CPU, the zeros included, and is not used.

Other models and backends are wrapped by fairseq as before.
"""

import logging
from typing import FrozenSet

import torch
import torch.distributed as dist
from fairseq.distributed import DistributedTimeoutWrapper, LegacyDistributedDataParallel, ModuleProxyWrapper
from fairseq.distributed import utils as distributed_utils
from torch.nn.parallel import DistributedDataParallel

from .fairseq_replacements import replace

__all__ = ["leaves_parameters_unused", "idle_parameters", "all_reduce_except_idle", "distributed_model",
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


def _mean_all_reduce(group, tensor: torch.Tensor) -> torch.futures.Future:
    """torch's ``allreduce_hook`` on ``tensor``: divided by the world size, then summed, in place."""
    tensor.div_(group.size())
    return dist.all_reduce(tensor, group=group, async_op=True).get_future().then(lambda fut: fut.value()[0])


def all_reduce_except_idle(state, bucket):
    """DDP communication hook: torch's all-reduce of the mean gradient (``allreduce_hook``), except
    the slices of the bucket that hold idle parameters' gradients, which stay as they are. ``state``:
    (model, process group). An idle parameter is unused on every rank, so DDP neither reads its
    slice (a globally unused parameter keeps its gradient) nor needs the ranks to agree on it."""
    model, group = state
    group = group if group is not None else dist.group.WORLD
    buffer, idle = bucket.buffer(), idle_parameters(model)
    if not idle:
        return _mean_all_reduce(group, buffer)
    ranges, start = [], 0  # [start, end) of the non-idle gradients, in the bucket's layout
    for p in bucket.parameters():
        end = start + p.numel()
        if p not in idle:
            if ranges and ranges[-1][1] == start:
                ranges[-1][1] = end
            else:
                ranges.append([start, end])
        start = end
    if not ranges:
        done = torch.futures.Future()
        done.set_result(buffer)
        return done
    # each range in place: packing them into one tensor and back cost as much as the zeros it saved
    sent = [_mean_all_reduce(group, buffer[a:b]) for a, b in ranges]
    return torch.futures.collect_all(sent).then(lambda _: buffer)


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
    torch_ddp, legacy = backend in ("c10d", "pytorch_ddp"), backend in ("no_c10d", "legacy_ddp")
    unused = leaves_parameters_unused(model)
    on_cpu = torch.device(device).type == "cpu"
    if getattr(args, "tpu", False) or not (torch_ddp and (unused or on_cpu) or legacy and unused):
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
    wrapped = DistributedDataParallel(
        module=model.to(device),
        device_ids=None if on_cpu else [args.device_id],
        output_device=None if on_cpu else args.device_id,
        broadcast_buffers=args.broadcast_buffers,
        bucket_cap_mb=args.bucket_cap_mb,
        process_group=process_group,
        find_unused_parameters=find_unused,
        gradient_as_bucket_view=args.gradient_as_bucket_view,
    )
    if str(args.ddp_comm_hook) == "fp16":
        from torch.distributed.algorithms.ddp_comm_hooks import DDPCommHookType, register_ddp_comm_hook

        logger.info("enable fp16 communication hook in DDP")
        register_ddp_comm_hook(DDPCommHookType.FP16_COMPRESS, wrapped)
    elif hasattr(model, "idle_parameters"):
        wrapped.register_comm_hook((model, process_group), all_reduce_except_idle)
    return _wrap(args, wrapped)


def install() -> None:
    """Put ``distributed_model`` in fairseq's place."""
    from fairseq import models

    replace(models, "DistributedFairseqModel", distributed_model)
