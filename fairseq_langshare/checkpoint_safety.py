"""Load fairseq checkpoints under torch >= 2.6 with ``weights_only=True`` kept on.

fairseq 0.12 calls ``torch.load`` without ``weights_only``; since torch 2.6 that means
weights-only unpickling, which refuses the config objects fairseq stores next to the weights
("Unsupported global: GLOBAL argparse.Namespace"). Turning weights-only loading off would run
arbitrary code from an untrusted file. Instead, importing ``fairseq_langshare`` allow-lists
exactly the classes that fairseq and fairseq_langshare checkpoints contain, and a checkpoint
that holds any other global is refused with one line naming it.
"""

import argparse
import functools
import pickle

import torch

__all__ = ["SAFE_GLOBALS", "install", "UnsafeCheckpointError"]

# What fairseq 0.12 checkpoints hold besides tensors and builtins: it saves ``cfg`` as plain
# containers, but the legacy ``args`` entry (and checkpoints of older fairseq) is a Namespace.
# Checked with torch.serialization.get_unsafe_globals_in_checkpoint on checkpoints written by
# fairseq-train (argparse and hydra) with this package's task, models and criterion.
SAFE_GLOBALS = [argparse.Namespace]


class UnsafeCheckpointError(pickle.UnpicklingError):
    pass


def _explain(path, error: Exception) -> str:
    first = str(error).strip().splitlines()
    detail = next((line for line in first if "Unsupported global" in line or "GLOBAL" in line), first[0] if first else "")
    return (
        f"refusing to load checkpoint {path}: it contains a global that fairseq_langshare does not "
        f"allow-list ({detail.strip()}); if you trust the file, add the class with "
        "torch.serialization.add_safe_globals([...]) before loading"
    )


def install() -> None:
    """Allow-list fairseq's checkpoint globals and make refusals one clear line. torch < 2.4
    has no allow-list and loads with ``weights_only=False`` by default: nothing to add there."""
    add_safe_globals = getattr(torch.serialization, "add_safe_globals", None)
    if add_safe_globals is not None:
        add_safe_globals(SAFE_GLOBALS)
    from fairseq import checkpoint_utils

    original = checkpoint_utils.load_checkpoint_to_cpu
    if getattr(original, "_langshare_wrapped", False):
        return

    @functools.wraps(original)
    def load_checkpoint_to_cpu(path, *args, **kwargs):
        try:
            return original(path, *args, **kwargs)
        except pickle.UnpicklingError as error:
            if "weights_only" not in str(error) and "Unsupported global" not in str(error):
                raise
            raise UnsafeCheckpointError(_explain(path, error)) from None

    load_checkpoint_to_cpu._langshare_wrapped = True
    checkpoint_utils.load_checkpoint_to_cpu = load_checkpoint_to_cpu
