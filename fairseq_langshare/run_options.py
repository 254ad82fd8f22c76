"""The run's options as a model or the task reads them. ``fairseq-train`` hands them every flag in one
Namespace; ``fairseq-hydra-train`` hands each its own node of the config (``cfg.model``, ``cfg.task``), and
the others sit in the config's other groups (``optimization.max_update``, ``checkpoint.save_dir``)."""

import functools
import os
import sys

from fairseq.models import MODEL_REGISTRY
from omegaconf import OmegaConf

__all__ = ["run_option", "registered_model_name", "in_fairseq_training", "resumed_checkpoint",
           "resumes_own_checkpoint", "saved_checkpoint", "resumed_model_config"]


def run_option(args, name: str, group: str, default=None):
    """Option ``name`` as ``args`` (a model's or the task's options) gives it, else, under
    fairseq-hydra-train, ``group.name`` of the config ``args`` belongs to; ``default`` when neither has it."""
    value = getattr(args, name, None)
    if value is None and OmegaConf.is_config(args):
        value = OmegaConf.select(args._get_root(), f"{group}.{name}")  # None when absent (no default= before 2.1)
    return default if value is None else value


def registered_model_name(model):
    """The name ``model``'s class is registered under (``MODEL_REGISTRY``: the key of the per-model tables);
    None for a class fairseq does not know by name."""
    return next((name for name, cls in MODEL_REGISTRY.items() if cls is type(model)), None)


def in_fairseq_training() -> bool:
    """Whether fairseq's training entry point (``fairseq_cli.train.main``: fairseq-train, fairseq-hydra-train,
    every torchrun rank) is on the call stack: a model built there belongs to a run that loads its checkpoint next;
    one built by a script, a benchmark or a notebook does not."""
    train = sys.modules.get("fairseq_cli.train")  # not imported: not training (importing it configures logging)
    code = getattr(getattr(train, "main", None), "__code__", None)
    frame = sys._getframe(1)
    while code is not None and frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False


def resumed_checkpoint(args) -> str:
    """The checkpoint fairseq-train loads at start, as ``checkpoint_utils.load_checkpoint`` finds it (it may not
    exist): ``checkpoint_last{--checkpoint-suffix}.pt`` of ``--save-dir`` by default; while that does not exist
    yet, ``--continue-once``, else ``--finetune-from-model``; else ``--restore-file`` with the suffix."""
    suffix = run_option(args, "checkpoint_suffix", "checkpoint", "")
    restore = run_option(args, "restore_file", "checkpoint") or "checkpoint_last.pt"
    if restore != "checkpoint_last.pt":
        return restore.replace(".pt", suffix + ".pt")
    own = os.path.join(run_option(args, "save_dir", "checkpoint") or "checkpoints", f"checkpoint_last{suffix}.pt")
    if os.path.exists(own):
        return own
    return (run_option(args, "continue_once", "checkpoint") or run_option(args, "finetune_from_model", "checkpoint")
            or own)


def resumes_own_checkpoint(args) -> bool:
    """Whether fairseq-train resumes the run's own last checkpoint (``resumed_checkpoint``), not another file:
    ``--restore-file``, ``--continue-once`` (a restart from another run) or ``--finetune-from-model`` (fine-tuning)."""
    restore = run_option(args, "restore_file", "checkpoint") or "checkpoint_last.pt"
    suffix = run_option(args, "checkpoint_suffix", "checkpoint", "")
    own = os.path.join(run_option(args, "save_dir", "checkpoint") or "checkpoints", f"checkpoint_last{suffix}.pt")
    return restore == "checkpoint_last.pt" and os.path.exists(own)


def saved_checkpoint(path):
    """``checkpoint_safety.checkpoint_header(path)``, read once per process while the file stays the same (its
    size and modification time): the checks at a run's start each read the resumed checkpoint. None where
    there is no such file or it cannot be read. Read only: every caller shares the one object."""
    try:
        stat = os.stat(path)
    except (OSError, TypeError, ValueError):
        return None
    return _header(os.path.abspath(path), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=2)
def _header(path, size, mtime_ns):
    from .checkpoint_safety import checkpoint_header

    return checkpoint_header(path)


def resumed_model_config(args):
    """The saved model config of the run's own checkpoint that fairseq's training is about to resume; None when
    it resumes none (a first launch, another file, a model built outside fairseq-train) or the header cannot be
    read (fairseq's own load then says why)."""
    from .saved_config import config_value

    if not in_fairseq_training() or not resumes_own_checkpoint(args):
        return None
    model = config_value((saved_checkpoint(resumed_checkpoint(args)) or {}).get("cfg"), "model")
    return model if model else None
