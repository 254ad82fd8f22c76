"""The groups a set of test directions is averaged over: each direction's resource group (evaluate's
``group``: high, medium, low by training size; zero-shot for a direction no training covered;
unknown), the supervised directions together where zero-shot ones stand beside them, and all.
One membership rule for every average of a results file or a comparison (scores, off-target rate).
"""

from typing import Dict, List

__all__ = ["GROUP_ORDER", "group_members"]

GROUP_ORDER = ("high", "medium", "low", "zero-shot", "unknown")


def group_members(groups: Dict[str, str]) -> Dict[str, List[str]]:
    """{group: [directions]} for ``groups`` ({direction: its group}), in ``GROUP_ORDER``, then
    ``supervised`` (every direction but the zero-shot ones, when both kinds are there), then ``all``."""
    members = {g: [d for d, group in groups.items() if group == g] for g in GROUP_ORDER}
    members = {g: ds for g, ds in members.items() if ds}
    if "zero-shot" in members and len(members["zero-shot"]) < len(groups):
        members["supervised"] = [d for d, group in groups.items() if group != "zero-shot"]
    members["all"] = list(groups)
    return members
