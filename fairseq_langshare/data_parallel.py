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
  On the CPU (gloo) such a model's buckets are all-reduced by ``allreduce_nonzero_gradients``: only
  the gradients some rank has nonzero travel, so a step does not send the zeros of every absent
  language's parameters (the multi-stacks' unused stacks, latent depth's layers no language keeps).
* ``--ddp-backend legacy_ddp`` all-reduces a zero gradient for a parameter no rank used, so Adam's
  moments move it on the next updates, which one process (whose optimizer skips a parameter
  without a gradient) never does. For such models a parameter no rank used keeps no gradient and is
  not all-reduced (one more all-reduce, of one flag per parameter, decides which), so N ranks with
  batch B reach the parameters one process reaches with ``--update-freq N`` on the same batches, as
  with ``pytorch_ddp``.

Other models and backends are wrapped by fairseq as before.
"""

import logging

import torch
import torch.distributed as dist
from fairseq.distributed import DistributedTimeoutWrapper, LegacyDistributedDataParallel, ModuleProxyWrapper
from fairseq.distributed import utils as distributed_utils
from torch.nn.parallel import DistributedDataParallel

from .fairseq_replacements import replace

__all__ = ["leaves_parameters_unused", "distributed_model", "UnusedStayUnusedLegacyDDP", "allreduce_nonzero_gradients",
           "install"]

logger = logging.getLogger(__name__)


def leaves_parameters_unused(model) -> bool:
    """Whether a training step of ``model`` can leave some of its trainable parameters unused."""
    return bool(getattr(model, "leaves_parameters_unused", False))


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
        kept = []
        for p, count in zip(params, used.tolist()):
            if count == 0:
                p.grad = None
                continue
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            kept.append(p)
        if not kept:
            return
        grads = [p.grad.data for p in kept]
        flat = torch._utils._flatten_dense_tensors(grads)
        flat.div_(self.world_size)  # as fairseq's: divided, then summed
        distributed_utils.all_reduce(flat, self.process_group)
        for grad, reduced in zip(grads, torch._utils._unflatten_dense_tensors(flat, grads)):
            grad.copy_(reduced)


# a run of skipped gradients shorter than this is all-reduced with its neighbours (one collective's
# latency on gloo costs about as much as sending this many floats)
MERGE_GAP = 2 ** 16


def allreduce_nonzero_gradients(process_group, bucket):
    """DDP communication hook: torch's default mean all-reduce (``allreduce_hook``) of a bucket, sent only
    for the gradients that are nonzero on some rank; the others are zero everywhere and stay zero.

    One all-reduce of a flag per gradient decides which, then each run of such gradients is all-reduced
    in place. The flags are read on the host, so the hook is for CPU training (on GPUs the read would
    wait for the backward pass)."""
    group = process_group if process_group is not None else dist.group.WORLD
    buffer = bucket.buffer()
    grads = bucket.gradients()
    base, size = buffer.data_ptr(), buffer.element_size()
    spans = [((g.data_ptr() - base) // size, g.numel()) for g in grads]
    if not all(g.is_contiguous() and 0 <= start and start + n <= buffer.numel() for g, (start, n) in zip(grads, spans)):
        buffer.div_(group.size())  # not views of the bucket: the default hook
        return dist.all_reduce(buffer, group=group, async_op=True).get_future().then(lambda fut: fut.value()[0])
    nonzero = torch.stack([g.ne(0).any() for g in grads]).to(torch.int32)
    dist.all_reduce(nonzero, group=group)
    runs: list = []
    for (start, n), flag in sorted(zip(spans, nonzero.tolist())):
        if not flag:
            continue
        if runs and start - runs[-1][1] <= MERGE_GAP:
            runs[-1][1] = max(runs[-1][1], start + n)
        else:
            runs.append([start, start + n])
    for start, end in runs:
        run = buffer[start:end]
        run.div_(group.size())
        dist.all_reduce(run, group=group)
    done = torch.futures.Future()
    done.set_result(buffer)
    return done


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
    elif unused and on_cpu:
        wrapped.register_comm_hook(process_group, allreduce_nonzero_gradients)
    return _wrap(args, wrapped)


def install() -> None:
    """Put ``distributed_model`` in fairseq's place."""
    from fairseq import models

    replace(models, "DistributedFairseqModel", distributed_model)
