"""Auxiliary losses and statistics: recorded by modules during forward, collected by the
model, weighted and logged by the one criterion (``langshare_label_smoothed_cross_entropy``).

A module that regularises something subclasses ``AuxiliaryReporter`` and calls
``report_loss(name, value, weight)`` / ``report_stat(name, value)`` in its forward. A later
forward overwrites the record of the same name, so decoding (where nobody collects) does not
accumulate anything.
"""

from typing import Dict, Tuple, Union

import torch
from torch import Tensor, nn

from .activation_checkpointing import recomputing
from .call_state import CallState

__all__ = ["AuxiliaryReporter", "collect_auxiliary", "read_floats"]


class _Records(CallState):
    """A module's records of one forward call (a copy of the module starts with none)."""

    def fresh(self) -> "_Records":
        return _Records(losses={}, stats={})


class AuxiliaryReporter:
    """Mixin for modules that report auxiliary losses or statistics."""

    def _records(self):
        records = self.__dict__.get("_aux_records")
        if records is None:
            records = _Records(losses={}, stats={})
            self.__dict__["_aux_records"] = records
        return records

    def report_loss(self, name: str, value: Tensor, weight: float) -> None:
        """Record a scalar loss for this batch; the criterion adds ``weight * value``. Compute ``value`` in
        fp32 (``.float()`` before the reduction): a half loss overflows under ``--fp16``. Not recorded
        again when the call is recomputed in the backward pass (``--checkpoint-activations``)."""
        if not recomputing():
            self._records()["losses"][name] = (value, float(weight))

    def report_stat(self, name: str, value) -> None:
        """Record a scalar statistic for logging only (no gradient)."""
        if recomputing():
            return
        if torch.is_tensor(value):
            value = value.detach()
        self._records()["stats"][name] = value

    def pop_auxiliary(self):
        records = self._records()
        self.__dict__["_aux_records"] = None
        return records["losses"], records["stats"]


def collect_auxiliary(model: nn.Module) -> Tuple[Dict[str, Tuple[Tensor, float]], Dict[str, float]]:
    """Pop every record of every reporting submodule of ``model``.

    Losses of the same name reported by several modules are summed (weights must agree);
    statistics of the same name are averaged.
    """
    losses: Dict[str, Tuple[Tensor, float]] = {}
    stats: Dict[str, list] = {}
    for module in model.modules():
        if not isinstance(module, AuxiliaryReporter):
            continue
        module_losses, module_stats = module.pop_auxiliary()
        for name, (value, weight) in module_losses.items():
            if name in losses:
                prev_value, prev_weight = losses[name]
                if prev_weight != weight:
                    raise ValueError(f"auxiliary loss {name!r} reported with weights {prev_weight} and {weight}")
                value = prev_value + value
            losses[name] = (value, weight)
        for name, value in module_stats.items():  # averaged in double precision, as Python floats were
            stats.setdefault(name, []).append(value.detach().double() if torch.is_tensor(value) else float(value))
    return losses, read_floats({k: sum(v) / len(v) for k, v in stats.items()})


def read_floats(values: Dict[str, Union[Tensor, float]]) -> Dict[str, float]:
    """``values`` as Python floats, the tensors among them read from the device in one go (each
    ``float(tensor)`` would wait for a GPU once)."""
    tensors = [name for name, value in values.items() if torch.is_tensor(value)]
    read = {}
    if tensors:
        first = values[tensors[0]]
        stacked = torch.stack([values[n].detach().double().reshape(()).to(first.device) for n in tensors])
        read = dict(zip(tensors, stacked.tolist()))
    return {name: read[name] if name in read else float(value) for name, value in values.items()}
