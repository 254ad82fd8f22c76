"""What a results file is, told from its content: the JSON that ``langshare evaluate``, ``compare`` and
``head-to-head`` write, and evaluate's markdown table. ``compare`` refuses a file of another kind by name (a
compare output is not a run's results); ``evaluate`` replaces a file next to a run or in a corpus only when it is
one of its own outputs (``atomic_files.check_writable``)."""

import json
import os
from typing import Optional

__all__ = ["EVALUATE_JSON", "EVALUATE_MARKDOWN", "COMPARE_JSON", "HEAD_TO_HEAD_JSON", "json_kind", "file_kind"]

EVALUATE_JSON = "a `langshare evaluate` results file"
EVALUATE_MARKDOWN = "a `langshare evaluate` markdown table"
COMPARE_JSON = "a `langshare compare` output (--out-json)"
HEAD_TO_HEAD_JSON = "a `langshare head-to-head` results file"
_MARKDOWN_STARTS = ("Checkpoint `", "| direction | train pairs | group |")  # evaluation.to_markdown's first line


def json_kind(obj) -> Optional[str]:
    """The kind of a parsed JSON document, None when it is none of them."""
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("systems"), dict) and "metrics" in obj:
        return COMPARE_JSON
    if "evaluate_flags" in obj and "train_flags" in obj:
        return HEAD_TO_HEAD_JSON
    rows = obj.get("directions")
    if isinstance(rows, dict) and rows and all(isinstance(r, dict) for r in rows.values()):
        return EVALUATE_JSON
    return None


def file_kind(path) -> Optional[str]:
    """The kind of the file at ``path`` (JSON or evaluate's markdown), None when it is none of them or unreadable."""
    try:
        if os.path.getsize(path) > 512 * 1024 * 1024:  # no results file is this large
            return None
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, ValueError):
        return None
    if text.lstrip().startswith(_MARKDOWN_STARTS):
        return EVALUATE_MARKDOWN
    try:
        return json_kind(json.loads(text))
    except ValueError:
        return None
