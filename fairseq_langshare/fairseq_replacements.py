"""The plugin's versions of fairseq functions, put in fairseq's place when the plugin is imported.

``replace(owner, name, replacement)`` sets ``owner.<name>`` (where fairseq looks the function up) to
``replacement`` and keeps fairseq's own as ``replacement.fairseq``, for the cases the replacement leaves to
fairseq. Replacing again (the plugin imported twice, a reloaded module) keeps fairseq's own, never a
replacement.
"""

from typing import Callable

__all__ = ["replace"]


def replace(owner, name: str, replacement: Callable) -> None:
    current = getattr(owner, name)
    replacement.fairseq = getattr(current, "fairseq", current)
    setattr(owner, name, replacement)
