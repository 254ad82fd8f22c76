"""Output files that are either complete or absent: the content goes to a temporary file next to
the target, which is then renamed over it (``os.replace`` is atomic within one filesystem). Every
file the package writes for a user (evaluation tables, analysis JSON and figures, exported
checkpoints) goes through here, so an interrupted run never leaves a half-written file that
looks finished."""

import json
import os
from pathlib import Path
from typing import Callable, Union

__all__ = ["write_atomic", "write_text_atomic", "write_json_atomic", "save_figure_atomic"]

PathLike = Union[str, os.PathLike]


def write_atomic(path: PathLike, write: Callable[[Path], object]) -> Path:
    """``write(tmp)`` writes the content to ``tmp``; then ``tmp`` replaces ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def write_text_atomic(path: PathLike, text: str) -> Path:
    return write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_json_atomic(path: PathLike, obj) -> Path:
    return write_text_atomic(path, json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


def save_figure_atomic(fig, path: PathLike, dpi: int = 120) -> Path:
    """A matplotlib figure as PNG."""
    return write_atomic(path, lambda tmp: fig.savefig(tmp, format="png", dpi=dpi))
