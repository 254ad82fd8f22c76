"""Load fairseq checkpoints with ``weights_only=True`` kept on.

fairseq 0.12 calls ``torch.load`` without ``weights_only``; since torch 2.6 that means
weights-only unpickling, which refuses the config objects fairseq stores next to the weights
("Unsupported global: GLOBAL argparse.Namespace"). Turning weights-only loading off would run
arbitrary code from an untrusted file. Instead, importing ``fairseq_langshare`` allow-lists
exactly the classes that fairseq and fairseq_langshare checkpoints contain, and a checkpoint
that holds any other global is refused with one line naming it. On torch 2.4 and 2.5, whose default
is still ``weights_only=False``, fairseq's load of a checkpoint is made weights-only too.

A checkpoint resumed by several ranks is read by rank 0 alone, which hands it to the others with
fairseq's ``broadcast_object``: pickled in memory and unpickled with ``torch.load``, weights-only too,
which refused the config object in it (``omegaconf.dictconfig.DictConfig``) and fairseq's own tensor
placeholders, so every distributed resume stopped on rank 1. Those bytes are no file: rank 0 of the same
job wrote them from the checkpoint it had just loaded under the allow-list, so the other ranks unpickle
them in full (``_broadcast_object_slow``).

A file torch cannot read at all (truncated by a full disk or a killed copy, empty, random bytes) is
refused with one line too: its size, why, and the newest readable checkpoint next to it (for a broken
``checkpoint_last.pt``: how to resume from that one, with any fairseq 0.12). Never with torch's advice to switch weights-only
loading off, which would not help and would run whatever the file holds. So is a file torch reads that is no
fairseq checkpoint (a bare tensor, a state_dict, any other dict), and a ``--path`` that is missing or a directory.

Saving: fairseq writes ``NAME.tmp`` and renames it, then copies the file to the run's other names
(``checkpoint_last.pt``, ``checkpoint_best.pt``) in place. A write that fails (a full disk) leaves no ``.tmp`` and
ends in one line naming the checkpoint that is still there to resume from; the copies go through a temporary name
too, so a failed copy never truncates the previous ``checkpoint_last.pt``.
"""

import argparse
import contextlib
import functools
import logging
import os
import pickle
import shutil
import zipfile
from typing import Optional

import torch

from .torch_version import release

FORCE_WEIGHTS_ONLY, FORCE_NO_WEIGHTS_ONLY = "TORCH_FORCE_WEIGHTS_ONLY_LOAD", "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"

__all__ = ["SAFE_GLOBALS", "install", "checkpoint_header", "checkpoint_updates", "saved_updates", "CheckpointError",
           "UnsafeCheckpointError", "UnreadableCheckpointError", "require_checkpoint"]

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


class NotACheckpointError(CheckpointError):
    pass


class MissingCheckpointError(CheckpointError, FileNotFoundError):
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
    """The most recently written other training checkpoint (``checkpoint*.pt``, fairseq's names: not an export)
    next to ``path`` that is a complete zip archive (torch's format)."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        names = [n for n in os.listdir(folder) if n.startswith("checkpoint") and n.endswith(".pt")]
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
    text += f"; the newest readable checkpoint next to it is {other}: pass that one"
    if name.startswith("checkpoint_last"):
        return f"{text} (to resume training from it, move {name} aside and copy that file to {name})"
    return text


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


def _describe(obj) -> str:
    if isinstance(obj, torch.Tensor):
        return "a tensor"
    if isinstance(obj, dict):
        if obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
            return f"a dict of {len(obj)} tensors (bare weights, such as a state_dict)"
        keys = [str(k) for k in obj]
        return "an empty dict" if not keys else f"a dict with keys {', '.join(keys[:4])}" + (
            f" and {len(keys) - 4} more" if len(keys) > 4 else "")
    return f"a {type(obj).__name__}"


def _not_a_checkpoint(path):
    """The one line for a file torch reads that is no fairseq checkpoint, or None (it is one, or unreadable)."""
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # noqa: BLE001 - whatever it is, it is not this case
        return None
    if isinstance(obj, dict) and "model" in obj and ("cfg" in obj or "args" in obj):
        return None
    return (f"{path} is not a fairseq checkpoint (it holds {_describe(obj)}, not the dict of model weights, "
            "optimizer history and config that fairseq saves): pass a checkpoint that fairseq-train or langshare "
            "export wrote")


def _suggestion(folder):
    """A checkpoint in ``folder`` to name in a fix: checkpoint_best.pt, checkpoint_last.pt, else the newest .pt."""
    try:
        names = [n for n in os.listdir(folder) if n.endswith(".pt")]
    except OSError:
        return None
    for name in ("checkpoint_best.pt", "checkpoint_last.pt"):
        if name in names:
            return os.path.join(folder, name)
    paths = [os.path.join(folder, n) for n in names]
    return max(paths, key=os.path.getmtime) if paths else None


def checkpoint_header(path) -> Optional[dict]:
    """A fairseq checkpoint's state without reading its weights (memory-mapped),
    weights-only as every load of the package; None where it cannot be read (loading it says why)."""
    try:
        return torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)
    except (OSError, RuntimeError, EOFError, pickle.UnpicklingError, ValueError):
        return None


def checkpoint_updates(path) -> int:
    """The updates a fairseq checkpoint holds (0 where it cannot be read)."""
    return saved_updates(checkpoint_header(path) or {})


def saved_updates(state: dict) -> int:
    """The updates a fairseq checkpoint's loaded state holds (0 where it does not say)."""
    try:
        return int(state["optimizer_history"][-1]["num_updates"])
    except (KeyError, IndexError, TypeError, ValueError):
        return 0


def require_checkpoint(path, flag: str, what: str = "a checkpoint file") -> None:
    """Refuse a checkpoint option (``flag``) whose ``path`` is missing or a directory, naming one to pass."""
    path = str(path)
    if os.path.isfile(path):
        return
    folder = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    example = _suggestion(folder)
    fix = f"pass {what}" + (f", e.g. {example}" if example else "")
    if os.path.isdir(path):
        raise CheckpointError(f"{flag} {path} is a directory; {fix}")
    raise MissingCheckpointError(f"{flag} {path}: no such checkpoint; {fix}")


class _NoRetryTraceback(logging.Filter):
    """fairseq logs a traceback at every failed try of a checkpoint save; the failure is reported in one line."""

    def filter(self, record):
        return not str(record.msg).startswith("Traceback")


class CheckpointSaveError(CheckpointError, OSError):
    pass


def _save_failed(filename, error) -> CheckpointSaveError:
    last = os.path.join(os.path.dirname(os.path.abspath(filename)), "checkpoint_last.pt")
    why = error.strerror or str(error)
    if os.path.isfile(last):
        unchanged = ", unchanged" if os.path.abspath(filename) == last else ""
        keep = (f"{last} is the last one saved{unchanged}: free some space (or fix the permissions) and run the same "
                "command again to resume from it")
    else:
        keep = "no checkpoint was saved yet: free some space (or fix the permissions) and train again"
    return CheckpointSaveError(f"cannot save checkpoint {filename}: {why}; {keep}")


def _remove(path) -> None:
    with contextlib.suppress(OSError):
        os.remove(path)


def _wrap_saving(checkpoint_utils) -> None:
    original_save = checkpoint_utils.torch_persistent_save
    if getattr(original_save, "_langshare_wrapped", False):
        return

    @functools.wraps(original_save)
    def torch_persistent_save(obj, filename, async_write: bool = False):
        if not isinstance(filename, str):  # a file handle (fairseq's retry path): nothing to clean up here
            return original_save(obj, filename, async_write)
        quiet = _NoRetryTraceback()
        checkpoint_utils.logger.addFilter(quiet)
        try:
            return original_save(obj, filename, async_write)
        except OSError as error:  # a full disk, a lost permission: one line
            _remove(filename + ".tmp")
            raise _save_failed(filename, error) from None
        except BaseException:  # a Ctrl-C, anything else: no half-written .tmp either
            _remove(filename + ".tmp")
            raise
        finally:
            checkpoint_utils.logger.removeFilter(quiet)

    torch_persistent_save._langshare_wrapped = True
    checkpoint_utils.torch_persistent_save = torch_persistent_save

    class PathManager(checkpoint_utils.PathManager):
        """fairseq's, whose ``copy`` of a local checkpoint goes through a temporary name."""

        @staticmethod
        def copy(src_path: str, dst_path: str, overwrite: bool = False) -> bool:
            if not os.path.isdir(os.path.dirname(os.path.abspath(dst_path))):
                return PathManager.__base__.copy(src_path, dst_path, overwrite)
            tmp = dst_path + ".tmp"
            try:
                shutil.copyfile(src_path, tmp)
                os.replace(tmp, dst_path)
            except OSError as error:
                _remove(tmp)
                raise _save_failed(dst_path, error) from None
            return True

    checkpoint_utils.PathManager = PathManager


@contextlib.contextmanager
def _weights_only_loading():
    """fairseq's ``torch.load`` of a checkpoint (no ``weights_only`` argument) weights-only on torch 2.4 and 2.5 too,
    whose default is still ``weights_only=False`` (2.6 made it True): ``TORCH_FORCE_WEIGHTS_ONLY_LOAD`` for the call,
    unless the user opted out with ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD``."""
    default = release(torch.__version__)[:2] >= (2, 6)
    if default or any(os.environ.get(name) for name in (FORCE_WEIGHTS_ONLY, FORCE_NO_WEIGHTS_ONLY)):
        yield
        return
    os.environ[FORCE_WEIGHTS_ONLY] = "1"
    try:
        yield
    finally:
        os.environ.pop(FORCE_WEIGHTS_ONLY, None)


def install() -> None:
    """Allow-list fairseq's checkpoint globals and make refusals one clear line."""
    torch.serialization.add_safe_globals(SAFE_GLOBALS)
    from fairseq import checkpoint_utils
    from fairseq.distributed import utils as distributed_utils

    distributed_utils._broadcast_object_slow = _broadcast_object_slow
    original = checkpoint_utils.load_checkpoint_to_cpu
    if getattr(original, "_langshare_wrapped", False):
        return

    @functools.wraps(original)
    def load_checkpoint_to_cpu(path, *args, **kwargs):
        try:
            with _weights_only_loading():
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
            if isinstance(error, IsADirectoryError):
                require_checkpoint(path, "checkpoint")
            if isinstance(error, (FileNotFoundError, PermissionError, MemoryError, CheckpointError)):
                raise
            if not _raised_by_torch_load(error):
                # fairseq read the file and tripped on what it holds (KeyError 'best_loss', Tensor.__contains__)
                message = _not_a_checkpoint(path)
                if message is None:
                    raise
                raise NotACheckpointError(message) from None
            raise UnreadableCheckpointError(_explain_unreadable(path, error)) from None

    load_checkpoint_to_cpu._langshare_wrapped = True
    checkpoint_utils.load_checkpoint_to_cpu = load_checkpoint_to_cpu

    original_ensemble = checkpoint_utils.load_model_ensemble_and_task

    @functools.wraps(original_ensemble)
    def load_model_ensemble_and_task(filenames, arg_overrides=None, task=None, strict=True, suffix="", num_shards=1,
                                     state=None):
        for filename in filenames if state is None else ():  # fairseq-generate/-interactive's --path
            first = checkpoint_utils.get_maybe_sharded_checkpoint_filename(filename, suffix, 0, num_shards)
            if "://" not in first:  # fairseq: "Model file not found" (missing) or IsADirectoryError, tracebacks
                require_checkpoint(first, "--path")
        return original_ensemble(filenames, arg_overrides, task, strict, suffix, num_shards, state)

    checkpoint_utils.load_model_ensemble_and_task = load_model_ensemble_and_task
    _wrap_saving(checkpoint_utils)
