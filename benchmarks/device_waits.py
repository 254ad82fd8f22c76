"""Where code would wait for a GPU, counted on any device: the operations that, on CUDA, cannot
return before the device has computed their input (docs/scale.md, "Measured on a GPU").

On a GPU the host queues kernels ahead of the device; an operation whose *result on the host*
depends on device values (a Python number from a tensor, a ``tolist``, an output whose size
depends on the values: ``nonzero``, boolean-mask indexing, ``unique``; ``torch.equal``) stops the
host until the queue drains. ``torch.cuda.set_sync_debug_mode`` reports them on a GPU only; this
counts the same operations through PyTorch's dispatcher on the CPU, so a test can hold a training
step to a budget without a GPU. What it cannot see: copies from host memory to the device (on a
GPU a blocking copy waits too), and operations that read the device inside one aten call. The
plugin's lines it found at commit 4c098c7 are those ``set_sync_debug_mode`` found on an H200
(``benchmarks/results/cuda-syncs-h200.json``: latent depth's 10 waits, adaptive sparsity's 18
boolean-mask indexings, per update); fairseq's differ (the CPU also counts 6 reads of CPU-side
scalars in its sinusoidal positions, which are no waits on a GPU).
"""

import collections
import contextlib
import traceback
from typing import Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# aten operations that wait for the device on CUDA: a Python scalar (int/float/bool/item all
# dispatch _local_scalar_dense), a value-dependent output size, or a boolean answer
WAITING_OPS = frozenset({"_local_scalar_dense", "nonzero", "equal", "_unique2", "unique_consecutive", "unique_dim",
                         "masked_select", "is_nonzero", "bincount"})
MASK_INDEXED = frozenset({"index", "index_put", "index_put_", "_index_put_impl_"})  # a nonzero inside, for a bool index


def source_line(filename: str, lineno: int) -> str:
    """A source line, relative to the repository for this package and to site-packages otherwise."""
    if "fairseq_langshare" in filename:
        filename = filename[filename.rindex("fairseq_langshare"):]
    return f"{filename.split('site-packages/')[-1]}:{lineno}"


def _caller() -> str:
    """The innermost frame outside torch and this module: the line that asked."""
    for frame in reversed(traceback.extract_stack()[:-2]):
        name = frame.filename
        if name == __file__ or ("/torch/" in name and "fairseq" not in name):
            continue
        return source_line(name, frame.lineno)
    return "?"


def _waits(func, args, kwargs) -> bool:
    name = func._schema.name.split("::")[-1]
    if name in WAITING_OPS:
        return True
    if name == "repeat_interleave" and func._overloadname != "self_int":  # repeats from a tensor
        return kwargs.get("output_size") is None
    if name in MASK_INDEXED and len(args) > 1:
        return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in (args[1] or []))
    return False


class _Recorder(TorchDispatchMode):
    def __init__(self, sites):
        super().__init__()
        self.sites = sites

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if _waits(func, args, kwargs or {}):
            self.sites[_caller()] += 1
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def device_waits() -> Iterator[collections.Counter]:
    """Count, per source line, the operations in the block that would wait for a GPU (``tolist``
    included, which on the CPU bypasses the dispatcher)."""
    sites = collections.Counter()
    tolist = torch.Tensor.tolist

    def counted_tolist(self):
        sites[_caller()] += 1
        return tolist(self)

    torch.Tensor.tolist = counted_tolist
    try:
        with _Recorder(sites):
            yield sites
    finally:
        torch.Tensor.tolist = tolist


def in_plugin(sites: collections.Counter) -> int:
    """The waits asked for by this package's code (not fairseq's, not torch's)."""
    return sum(n for line, n in sites.items() if line.startswith("fairseq_langshare/"))
