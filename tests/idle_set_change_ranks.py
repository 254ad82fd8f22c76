"""Two gloo ranks accumulating an update over two micro-batches while a model's idle set changes after
the first (latent depth commits in the first micro-batch of an update): a toy model and the rank
function ``tests/test_data_parallel.py`` spawns. A separate module, so that spawned ranks import
only this."""

import os

import torch
import torch.distributed as dist
from torch import nn


class CommittingToy(nn.Module):
    """``a`` always runs, ``b`` when asked, ``c`` until the commit, which the first training forward
    makes; from then on ``c`` is idle (as latent depth's unkept layers are)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b, self.c = nn.Linear(4, 1), nn.Linear(4, 1), nn.Linear(4, 1)
        self.committed, self._idle = False, frozenset()

    def idle_parameters(self):
        return self._idle

    def forward(self, x, use_b):
        if self.training and not self.committed:
            self.committed, self._idle = True, frozenset(self.c.parameters())
        out = self.a(x) + (self.b(x) if use_b else 0) + (0 if self.committed else self.c(x))
        return out.sum()


def accumulate_across_the_commit(rank: int, store_path: str, results) -> None:
    """One update of two micro-batches: the first under ``no_sync`` (it commits and uses ``b``), the
    second synchronised (no rank uses ``b``). Rank 0 puts ``b``'s gradient on each rank and the mean
    of the ranks' own gradients of ``b`` into ``results``."""
    from fairseq_langshare.data_parallel import IdleExcludingDDP

    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.FileStore(store_path, 2), rank=rank, world_size=2)
    try:
        model = CommittingToy()
        wrapped = IdleExcludingDDP(model, False, find_unused_parameters=True)
        torch.manual_seed(100 + rank)
        first, second = torch.randn(3, 4), torch.randn(3, 4)
        with wrapped.no_sync():
            wrapped(first, use_b=True).backward()
        wrapped(second, use_b=False).backward()
        own = torch.autograd.grad(model.b(first).sum(), model.b.weight)[0]
        got = model.b.weight.grad if model.b.weight.grad is not None else torch.zeros_like(own)
        gathered = [torch.zeros_like(own) for _ in range(4)]
        dist.all_gather(gathered[:2], got.contiguous())
        dist.all_gather(gathered[2:], own)
        if rank == 0:
            results.put([g.tolist() for g in gathered[:2]] + [((gathered[2] + gathered[3]) / 2).tolist()])
        dist.barrier()  # both ranks done with the group before either tears it down
    finally:
        dist.destroy_process_group()
    # gloo's threads sometimes abort the interpreter's finalization (SIGABRT, "terminate called without an
    # active exception": 1 of 7 runs here, as test_hydra_and_distributed describes for fairseq-train); what
    # this rank had to say is in ``results``: flush it and leave without finalizing
    results.close()
    results.join_thread()
    os._exit(0)
