"""The run's options as a model or the task reads them. ``fairseq-train`` hands them every flag in one
Namespace; ``fairseq-hydra-train`` hands each its own node of the config (``cfg.model``, ``cfg.task``), and
the others sit in the config's other groups (``optimization.max_update``, ``checkpoint.save_dir``)."""

import os

from omegaconf import OmegaConf

__all__ = ["run_option", "resumed_checkpoint", "resumes_own_checkpoint"]


def run_option(args, name: str, group: str, default=None):
    """Option ``name`` as ``args`` (a model's or the task's options) gives it, else, under
    fairseq-hydra-train, ``group.name`` of the config ``args`` belongs to; ``default`` when neither has it."""
    value = getattr(args, name, None)
    if value is None and OmegaConf.is_config(args):
        value = OmegaConf.select(args._get_root(), f"{group}.{name}", default=None)
    return default if value is None else value


def resumes_own_checkpoint(args) -> bool:
    """Whether fairseq-train resumes the run's own last checkpoint (the default ``--restore-file``), not
    another file (fine-tuning or a deliberate restart)."""
    return (run_option(args, "restore_file", "checkpoint") or "checkpoint_last.pt") == "checkpoint_last.pt"


def resumed_checkpoint(args) -> str:
    """The checkpoint fairseq-train loads at start, if it exists: ``--restore-file``, by default
    ``checkpoint_last{--checkpoint-suffix}.pt`` in ``--save-dir`` (as fairseq's ``load_checkpoint`` finds it)."""
    if not resumes_own_checkpoint(args):
        return run_option(args, "restore_file", "checkpoint")
    suffix = run_option(args, "checkpoint_suffix", "checkpoint", "")
    return os.path.join(run_option(args, "save_dir", "checkpoint") or "checkpoints", f"checkpoint_last{suffix}.pt")
