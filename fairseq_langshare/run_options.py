"""The run's options as a model or the task reads them. ``fairseq-train`` hands them every flag in one
Namespace; ``fairseq-hydra-train`` hands each its own node of the config (``cfg.model``, ``cfg.task``), and
the others sit in the config's other groups (``optimization.max_update``, ``checkpoint.save_dir``)."""

from omegaconf import OmegaConf

__all__ = ["run_option"]


def run_option(args, name: str, group: str, default=None):
    """Option ``name`` as ``args`` (a model's or the task's options) gives it, else, under
    fairseq-hydra-train, ``group.name`` of the config ``args`` belongs to; ``default`` when neither has it."""
    value = getattr(args, name, None)
    if value is None and OmegaConf.is_config(args):
        value = OmegaConf.select(args._get_root(), f"{group}.{name}", default=None)
    return default if value is None else value
