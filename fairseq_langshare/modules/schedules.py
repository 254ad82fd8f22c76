"""Training schedules as pure functions of ``num_updates``.

fairseq stores ``num_updates`` in the checkpoint and calls ``set_num_updates`` on every
submodule after loading, so a schedule that depends on nothing else resumes exactly where it
stopped. ``ScheduledModule`` is the mixin that keeps the count.
"""

__all__ = ["linear_ramp", "ScheduledModule"]


def linear_ramp(num_updates: int, ramp_updates: int, end: float, start: float = 0.0) -> float:
    """``start`` at update 0, growing linearly to ``end`` at ``ramp_updates``, then ``end``."""
    if ramp_updates <= 0:
        return end
    frac = min(max(num_updates, 0) / ramp_updates, 1.0)
    return start + (end - start) * frac


class ScheduledModule:
    """Mixin: remembers the update count fairseq hands to every submodule."""

    num_updates = 0

    def set_num_updates(self, num_updates):
        self.num_updates = int(num_updates)
