"""Training schedules as pure functions of ``num_updates``.

fairseq stores ``num_updates`` in the checkpoint and calls ``set_num_updates`` on every
submodule after loading, so a schedule that depends on nothing else resumes exactly where it
stopped. ``ScheduledModule`` is the mixin that keeps the count.

A schedule's horizon (a T-bar, a commit point, an anneal length) defaults to a share of
--max-update, and fairseq-train rebuilds the model from the command line when it resumes; so the
horizons travel in the checkpoint too (``keep_horizons``), and a resume with another --max-update
continues the schedule the run started with.
"""

import logging
import math
from typing import Collection, Dict

import torch
from torch import nn

__all__ = ["linear_ramp", "exponential_ramp", "ScheduledModule", "keep_horizons", "set_given_options"]

logger = logging.getLogger(__name__)
HORIZONS = "schedule_horizons"  # the state-dict entry of a module's horizons


def _progress(num_updates: int, ramp_updates: int) -> float:
    return 1.0 if ramp_updates <= 0 else min(max(num_updates, 0) / ramp_updates, 1.0)


def linear_ramp(num_updates: int, ramp_updates: int, end: float, start: float = 0.0) -> float:
    """``start`` at update 0, growing linearly to ``end`` at ``ramp_updates``, then ``end``."""
    return start + (end - start) * _progress(num_updates, ramp_updates)


def exponential_ramp(num_updates: int, ramp_updates: int, end: float, start: float) -> float:
    """``start`` at update 0, geometrically to ``end`` at ``ramp_updates`` (a constant factor per
    update, e.g. a temperature annealed from 1 to 0.1), then ``end``; both must be positive."""
    if start <= 0 or end <= 0:
        raise ValueError(f"exponential_ramp needs positive start and end, got {start} and {end}")
    return start * math.exp(math.log(end / start) * _progress(num_updates, ramp_updates))


class ScheduledModule:
    """Mixin: remembers the update count fairseq hands to every submodule."""

    num_updates = 0

    def set_num_updates(self, num_updates):
        self.num_updates = int(num_updates)


def keep_horizons(module: nn.Module, options: Dict[str, str], unset_by_zero: Collection[str] = ()) -> None:
    """Save ``module``'s schedule horizons in its state dict (entry ``schedule_horizons``).

    ``options`` maps each horizon, an int attribute of ``module``, to the option that sets it. On
    load, a horizon whose option the command line did not give (``set_given_options``) takes the
    checkpoint's value, the run's; one it gave keeps the command line's, with a warning when the
    two differ (the schedule changes mid-run). A horizon named in ``unset_by_zero`` saved as 0 had no
    length (a run with nothing to schedule, such as CLSR without noise) and leaves this run's. A
    checkpoint saved before horizons were saved loads with the module's own values."""
    module.__dict__["_horizons"] = {"options": dict(options), "unset_by_zero": frozenset(unset_by_zero),
                                    "run": {"given": frozenset(), "told": set()}}
    module._register_state_dict_hook(_save_horizons)
    module._register_load_state_dict_pre_hook(_load_horizons, with_module=True)


def set_given_options(model: nn.Module, given: Collection[str]) -> None:
    """Tell every module of ``model`` that keeps horizons which options the command line gave (the
    model's modules then say what a load changes once, not once per module)."""
    run = {"given": frozenset(given), "told": set()}
    for module in model.modules():
        horizons = module.__dict__.get("_horizons")
        if horizons is not None:
            horizons["run"] = run


def _save_horizons(module, state_dict, prefix, local_metadata):
    names = module.__dict__["_horizons"]["options"]
    state_dict[prefix + HORIZONS] = torch.tensor([int(getattr(module, name)) for name in names])


def _load_horizons(module, state_dict, prefix, *args):
    saved = state_dict.pop(prefix + HORIZONS, None)  # not a parameter or buffer: strict loading skips it
    if saved is None:
        return
    horizons = module.__dict__["_horizons"]
    if saved.numel() != len(horizons["options"]):
        raise ValueError(f"{prefix + HORIZONS} holds {saved.numel()} schedule horizons, this model has "
                         f"{len(horizons['options'])}: resume with the flags the checkpoint was trained with")
    run = horizons["run"]
    for (name, option), then in zip(horizons["options"].items(), saved.tolist()):
        now = int(getattr(module, name))
        if now == then:
            continue
        level = logging.INFO
        if then == 0 and name in horizons["unset_by_zero"]:
            message = f"{option}: the checkpoint's run had no schedule (0), this one's is {now}"
        elif option in run["given"]:
            level, message = logging.WARNING, (f"{option} {now} replaces the checkpoint's {then}: the schedule "
                                               f"changes mid-run (drop {option} to continue the run's)")
        else:
            message = f"{option}: the checkpoint's {then}, the run's schedule (this --max-update would give {now})"
            setattr(module, name, then)
        if message not in run["told"]:
            run["told"].add(message)
            logger.log(level, message)
