"""Load fairseq checkpoints under torch >= 2.6 with ``weights_only=True`` kept on.

fairseq 0.12 calls ``torch.load`` without ``weights_only``; since torch 2.6 that means
weights-only unpickling, which refuses the config objects fairseq stores next to the weights
("Unsupported global: GLOBAL argparse.Namespace"). Turning weights-only loading off would run
arbitrary code from an untrusted file. Instead, importing ``fairseq_langshare`` allow-lists
exactly the classes that fairseq and fairseq_langshare checkpoints contain, and a checkpoint
that holds any other global is refused with one line naming it.

A checkpoint resumed by several ranks is read by rank 0 alone, which hands it to the others with
fairseq's ``broadcast_object``: pickled in memory and unpickled with ``torch.load``, weights-only too,
which refused the config object in it (``omegaconf.dictconfig.DictConfig``) and fairseq's own tensor
placeholders, so every distributed resume stopped on rank 1. Those bytes are no file: rank 0 of the same
job wrote them from the checkpoint it had just loaded under the allow-list, so the other ranks unpickle
them in full (``_broadcast_object_slow``).

A file torch cannot read at all (truncated by a full disk or a killed copy, empty, random bytes) is
refused with one line too: its size, why, and the newest readable checkpoint next to it (for a broken
``checkpoint_last.pt``: how to resume from that one, with any fairseq 0.12). Never with torch's advice to switch weights-only
loading off, which would not help and would run whatever the file holds.
"""

import argparse
import functools
import os
import pickle
import zipfile

import torch

__all__ = ["SAFE_GLOBALS", "install", "CheckpointError", "UnsafeCheckpointError", "UnreadableCheckpointError"]

# What fairseq 0.12 checkpoints hold besides tensors and builtins: it saves ``cfg`` as plain
# containers, but the legacy ``args`` entry (and checkpoints of older fairseq) is a Namespace.
# Checked with torch.serialization.get_unsafe_globals_in_checkpoint on checkpoints written by
# fairseq-train (argparse and hydra) with this package's task, models and criterion.
SAFE_GLOBALS = [argparse.Namespace]
_TORCH_READERS = (os.path.join("torch", "serialization.py"), "_weights_only_unpickler.py")


class CheckpointError(ValueError):
    """A checkpoint that is refused; the message is one line naming the file, the problem and the fix."""


class UnsafeCheckpointError(CheckpointError, pickle.UnpicklingError):
    pass


class UnreadableCheckpointError(CheckpointError):
    pass


def _explain(path, error: Exception) -> str:
    first = str(error).strip().splitlines()
    detail = next((line for line in first if "Unsupported global" in line or "GLOBAL" in line), first[0] if first else "")
    return (
        f"refusing to load checkpoint {path}: it contains a global that fairseq_langshare does not "
        f"allow-list ({detail.strip()}); if you trust the file, add the class with "
        "torch.serialization.add_safe_globals([...]) before loading"
    )


def _raised_by_torch_load(error: BaseException) -> bool:
    tb = error.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.endswith(_TORCH_READERS):
            return True
        tb = tb.tb_next
    return False


def _newest_readable_sibling(path):
    """The most recently written other ``*.pt`` next to ``path`` that is a complete zip archive (torch's format)."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        names = [n for n in os.listdir(folder) if n.endswith(".pt")]
    except OSError:
        return None
    candidates = []
    for candidate in (os.path.join(folder, n) for n in names):
        try:
            if not os.path.samefile(candidate, path):
                candidates.append((os.path.getmtime(candidate), candidate))
        except OSError:  # a dangling symlink, a file removed meanwhile: no candidate
            continue
    for _, candidate in sorted(candidates, key=lambda c: c[0], reverse=True):
        if zipfile.is_zipfile(candidate):
            return candidate
    return None


def _explain_unreadable(path, error: Exception) -> str:
    size = os.path.getsize(path)
    if size == 0:
        why = "the file is empty"
    elif not zipfile.is_zipfile(path):
        why = "it is no complete zip archive: truncated, or not a PyTorch checkpoint"
    else:
        lines = [line.strip() for line in str(error).splitlines() if line.strip() and "weights_only" not in line]
        why = f"corrupt ({type(error).__name__}: {lines[0] if lines else 'unreadable'})"
    text = f"cannot read checkpoint {path} ({size} bytes): {why}"
    other = _newest_readable_sibling(path)
    name = os.path.basename(path)
    if other is None:
        return f"{text}; no other checkpoint next to it is readable: re-create it (train or export again)"
    text += f"; the newest readable checkpoint next to it is {other}"
    if name.startswith("checkpoint_last"):
        return f"{text}: to resume training from it, move {name} aside and copy that file to {name}"
    return f"{text}: use that one"


def _broadcast_object_slow(obj, src_rank, group, dist_device):
    """fairseq's ``distributed.utils._broadcast_object_slow``, except that the receiving ranks unpickle
    with ``weights_only=False`` (see the module's doc)."""
    import io

    from fairseq.distributed.utils import broadcast, get_rank

    if get_rank(group) == src_rank:
        buffer = io.BytesIO()
        torch.save(obj, buffer)
        buffer = torch.ByteTensor(buffer.getbuffer()).to(dist_device)
        length = torch.LongTensor([len(buffer)]).to(dist_device)
        broadcast(length, src=src_rank, group=group)
        broadcast(buffer, src=src_rank, group=group)
        return obj
    length = torch.LongTensor([0]).to(dist_device)
    broadcast(length, src=src_rank, group=group)
    buffer = torch.ByteTensor(int(length.item())).to(dist_device)
    broadcast(buffer, src=src_rank, group=group)
    return torch.load(io.BytesIO(buffer.cpu().numpy()), map_location="cpu", weights_only=False)


def install() -> None:
    """Allow-list fairseq's checkpoint globals and make refusals one clear line. torch < 2.4
    has no allow-list and loads with ``weights_only=False`` by default: nothing to add there."""
    add_safe_globals = getattr(torch.serialization, "add_safe_globals", None)
    if add_safe_globals is not None:
        add_safe_globals(SAFE_GLOBALS)
    from fairseq import checkpoint_utils
    from fairseq.distributed import utils as distributed_utils

    distributed_utils._broadcast_object_slow = _broadcast_object_slow
    original = checkpoint_utils.load_checkpoint_to_cpu
    if getattr(original, "_langshare_wrapped", False):
        return

    @functools.wraps(original)
    def load_checkpoint_to_cpu(path, *args, **kwargs):
        try:
            return original(path, *args, **kwargs)
        except pickle.UnpicklingError as error:
            if "Unsupported global" in str(error):
                raise UnsafeCheckpointError(_explain(path, error)) from None
            if not _raised_by_torch_load(error):
                raise
            raise UnreadableCheckpointError(_explain_unreadable(path, error)) from None
        except Exception as error:  # noqa: BLE001 - torch's weights-only unpickler, fed bytes that are no
            # checkpoint, raises whatever its stack machine trips on (IndexError, KeyError, ...), not only
            # UnpicklingError; what does not come from torch's reader, or says nothing of the file, propagates
            if isinstance(error, (FileNotFoundError, PermissionError, IsADirectoryError, MemoryError)) \
                    or not _raised_by_torch_load(error):
                raise
            raise UnreadableCheckpointError(_explain_unreadable(path, error)) from None

    load_checkpoint_to_cpu._langshare_wrapped = True
    checkpoint_utils.load_checkpoint_to_cpu = load_checkpoint_to_cpu
