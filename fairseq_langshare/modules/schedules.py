"""Training schedules as pure functions of ``num_updates``.

fairseq stores ``num_updates`` in the checkpoint and calls ``set_num_updates`` on every
submodule after loading, so a schedule that depends on nothing else resumes exactly where it
stopped. ``ScheduledModule`` is the mixin that keeps the count.
"""

import math

__all__ = ["linear_ramp", "exponential_ramp", "ScheduledModule"]


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
