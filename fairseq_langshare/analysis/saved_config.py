"""Reading what a saved checkpoint's config says, for analyses that work from the checkpoint file
alone (no task, no data): one option, and the languages trained on each side."""

from typing import List

__all__ = ["config_value", "trained_codes", "refuse_export"]


def config_value(cfg, name, default=None):
    """``cfg.name`` of a saved config (an omegaconf/dict node or a Namespace); ``default`` when
    absent or None."""
    if cfg is None:
        return default
    value = cfg.get(name, default) if hasattr(cfg, "get") else getattr(cfg, name, default)
    return default if value is None else value


def trained_codes(task_cfg, langs: List[str], side: str) -> List[str]:
    """The languages of ``langs`` that are the source (``side`` "src") or target ("tgt") of a
    training direction in the task's ``lang_pairs``; all of ``langs`` if none is."""
    pairs = config_value(task_cfg, "lang_pairs", "")
    pairs = pairs.split(",") if isinstance(pairs, str) else list(pairs)
    index = 0 if side == "src" else 1
    codes = {p.split("-")[index] for p in pairs if "-" in p}
    return [l for l in langs if l in codes] or list(langs)


def refuse_export(path, has_no: str) -> None:
    """A one-line ValueError when ``path`` is a pair that ``langshare export`` wrote (a plain transformer,
    which fairseq cannot load as the multilingual task): name the checkpoint it was exported from."""
    from ..checkpoint_safety import checkpoint_header

    state = checkpoint_header(path)
    extra = state.get("extra_state") if isinstance(state, dict) else None
    export = extra.get("langshare_export") if isinstance(extra, dict) else None
    if isinstance(export, dict):
        raise ValueError(f"{path} has no {has_no}: it is a `langshare export` of the pair {export.get('src')}->"
                         f"{export.get('tgt')} (a plain transformer); analyze the checkpoint it was exported from, "
                         f"{export.get('from')}")
