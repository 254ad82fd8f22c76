"""What a results file is, told from its content: the JSON that ``langshare evaluate``, ``compare``,
``head-to-head`` and ``off-target`` write, and evaluate's and compare's markdown. ``compare`` refuses a file of
another kind by name (a compare output is not a run's results); ``evaluate``, ``compare`` and ``off-target`` replace an existing file
only when it is one of their own outputs (evaluate's: of the same checkpoint), through ``held_unless`` and
``atomic_files.check_writable``."""

import json
import os
import re
from typing import Callable, Optional

__all__ = ["EVALUATE_JSON", "EVALUATE_MARKDOWN", "COMPARE_JSON", "COMPARE_MARKDOWN", "COMPARE_MARKDOWN_TITLE",
           "HEAD_TO_HEAD_JSON", "OFF_TARGET_JSON", "json_kind", "file_kind", "held_unless"]

EVALUATE_JSON = "a `langshare evaluate` results file"
EVALUATE_MARKDOWN = "a `langshare evaluate` markdown table"
COMPARE_JSON = "a `langshare compare` output (--out-json)"
COMPARE_MARKDOWN = "a `langshare compare` output (--out-md)"
COMPARE_MARKDOWN_TITLE = "Comparison by `langshare compare` of "  # the first line compare's CLI writes
HEAD_TO_HEAD_JSON = "a `langshare head-to-head` results file"
OFF_TARGET_JSON = "a `langshare off-target` measurement (--out-json)"
_MARKDOWN_STARTS = ("Checkpoint `", "| direction | train pairs | group |")  # evaluation.to_markdown's first line
_MARKDOWN_CHECKPOINT = re.compile(r"^Checkpoint `(.*?)` on `")


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
    if {"identifier", "rules", "languages", "corpus"} <= set(obj) and isinstance(obj["languages"], dict):
        return OFF_TARGET_JSON
    return None


def _text(path) -> Optional[str]:
    try:
        if os.path.getsize(path) > 512 * 1024 * 1024:  # no results file is this large
            return None
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, ValueError):
        return None


def _text_kind(text: Optional[str]) -> Optional[str]:
    if text is None:
        return None
    if text.lstrip().startswith(_MARKDOWN_STARTS):
        return EVALUATE_MARKDOWN
    if text.startswith(COMPARE_MARKDOWN_TITLE):
        return COMPARE_MARKDOWN
    try:
        return json_kind(json.loads(text))
    except ValueError:
        return None


def file_kind(path) -> Optional[str]:
    """The kind of the file at ``path`` (JSON, evaluate's or compare's markdown), None when it is none of them or
    unreadable."""
    return _text_kind(_text(path))


def _text_checkpoint(text: str) -> Optional[str]:
    """The checkpoint whose results an evaluate output (JSON or markdown) holds, None when unknown."""
    match = _MARKDOWN_CHECKPOINT.match(text.lstrip())
    if match:
        return match.group(1)
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    return obj.get("checkpoint") if isinstance(obj, dict) and isinstance(obj.get("checkpoint"), str) else None


def held_unless(kind: str, command: str, checkpoint: Optional[str] = None) -> Callable[[str], Optional[str]]:
    """For ``atomic_files.check_writable(held=...)``: what an existing file holds, unless it is an output of ``kind``
    that ``command`` may replace (an evaluate output: of ``checkpoint``, when given)."""
    def held(path) -> Optional[str]:
        text = _text(path)  # read once: its kind, then whose results
        found = _text_kind(text)
        if found != kind:
            return found or f"a file {command} did not write"
        other = _text_checkpoint(text) if checkpoint is not None else None
        if other is not None and os.path.abspath(other) != os.path.abspath(checkpoint):
            return f"the results of another checkpoint ({other})"
        return None
    return held
