"""Reading what a saved checkpoint says without building its model (the analyses, export, a resume's checks):
one option of its config, the languages trained on each side, whether ``langshare export`` wrote it."""

from typing import List, Optional

__all__ = ["config_value", "trained_codes", "export_record", "refuse_export"]


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


def export_record(state) -> Optional[dict]:
    """What ``langshare export`` recorded in a checkpoint it wrote ({"src", "tgt", "from", ...}); None for any
    other checkpoint or object."""
    extra = state.get("extra_state") if isinstance(state, dict) else None
    record = extra.get("langshare_export") if isinstance(extra, dict) else None
    return record if isinstance(record, dict) else None


def refuse_export(path, has_no: str, state=None) -> None:
    """A one-line ValueError when ``path`` (its loaded ``state``, else its header) is a pair that ``langshare
    export`` wrote, which holds one pair's network and none of the multilingual model's ``has_no``: name the
    checkpoint it was exported from."""
    if state is None:
        from .checkpoint_safety import checkpoint_header

        state = checkpoint_header(path)
    record = export_record(state)
    if record is not None:
        model = config_value(state.get("cfg"), "model")
        arch = str(config_value(model, "_name") or config_value(model, "arch", "transformer"))
        what = "a plain transformer" if arch == "transformer" else f"a {arch} model"
        raise ValueError(f"{path} has no {has_no}: it is a `langshare export` of the pair {record.get('src')}->"
                         f"{record.get('tgt')} ({what}); analyze the checkpoint it was exported from, "
                         f"{record.get('from')}")
