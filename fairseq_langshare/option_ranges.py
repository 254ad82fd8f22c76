"""Valid values of numeric options, written once where each option is declared and checked at start.

A ``Range`` is declared next to an option's help text:

* an option of the plugin's task, models or criterion (a dataclass field, so fairseq's argparse flags and
  ``fairseq-hydra-train`` share it) in the field's metadata::

      clsr_gate_dim: int = field(default=128, metadata={"help": "...", "range": Range(1, why="...")})

  ``check_ranges(cfg, config_class)`` refuses, when the task is set up or the model or criterion is built, the
  first value outside its range: ``--clsr-gate-dim 0 is outside [1, inf): <why>``. An option that only means
  something with another option's value declares that too (``"only_with": OnlyWith(...)``);
  ``check_contradictions`` refuses it when a training run starts (a saved checkpoint still decodes);
* a ``langshare`` flag through its argparse ``type``: ``p.add_argument("--beam", type=Range(1).of(int))``,
  refused by argparse at parse time in the same words; ``Range(1).list_of(int)`` takes comma-separated values.

``None`` (an optional option left unset) is always accepted; a float range refuses ``nan`` and infinities.
``tests/option_sweep.py`` walks every declared range and tries a value outside it.
"""

import argparse
import dataclasses
import math
from enum import Enum
from typing import Any, Callable, Optional, Sequence

from .user_errors import option_text

__all__ = ["Range", "OnlyWith", "OptionRangeError", "check_ranges", "check_contradictions", "flag"]


class OptionRangeError(ValueError):
    """An option value outside its declared range, or contradicting another option: one line."""


def flag(name: str) -> str:
    """``clsr_gate_dim`` -> ``--clsr-gate-dim`` (``option_text`` without a config group)."""
    return option_text(name)


class Range:
    """The interval of valid values: ``low``/``high`` (None: unbounded), each included unless ``low_open`` /
    ``high_open``; ``why`` says what the option is, for the error line."""

    def __init__(self, low=None, high=None, *, low_open: bool = False, high_open: bool = False, why: str = ""):
        self.low, self.high, self.low_open, self.high_open, self.why = low, high, low_open, high_open, why

    def __repr__(self):
        return f"Range{self.text}"

    @property
    def text(self) -> str:
        """Interval notation: ``[0, 1]``, ``[1, inf)``, ``(0, inf)``, ``(-inf, inf)`` (finite numbers)."""
        left = "(-inf" if self.low is None else ("(" if self.low_open else "[") + _bound(self.low)
        right = "inf)" if self.high is None else _bound(self.high) + (")" if self.high_open else "]")
        return f"{left}, {right}"

    def contains(self, value) -> bool:
        if value is None:
            return True
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if isinstance(value, float) and not math.isfinite(value):
            return False
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        if self.high is not None and (value > self.high or (self.high_open and value == self.high)):
            return False
        return True

    def message(self, option: str, value, said: Optional[str] = None) -> str:
        """``said``: the option with its value as the user wrote it (default ``option value``)."""
        return f"{said or f'{option} {value}'} is outside {self.text}" + (f": {self.why}" if self.why else "")

    def check(self, option: str, value, said: Optional[str] = None) -> None:
        if not self.contains(value):
            raise OptionRangeError(self.message(option, value, said))

    def outside(self, kind=float):
        """A value just outside the range (for ``tests/option_sweep.py``), or None when every ``kind`` is in it."""
        if self.low is not None:
            return self.low if self.low_open else (self.low - 1 if kind is int else self.low - 0.5)
        if self.high is not None:
            return self.high if self.high_open else (self.high + 1 if kind is int else self.high + 0.5)
        return float("nan") if kind is float else None

    # --- argparse ------------------------------------------------------------------------------
    def of(self, kind: Callable[[str], Any]) -> Callable[[str], Any]:
        """An argparse ``type``: ``kind(text)`` checked against the range."""
        def parse(text: str):
            value = _convert(kind, text)
            if not self.contains(value):
                raise argparse.ArgumentTypeError(self.message("", text).lstrip())
            return value

        parse.__name__ = kind.__name__  # argparse names the type in its "invalid int value" message
        parse.range, parse.kind = self, kind
        return parse

    def list_of(self, kind: Callable[[str], Any]) -> Callable[[str], list]:
        """An argparse ``type`` for comma-separated values, at least one, each in the range."""
        def parse(text: str):
            items = [item.strip() for item in text.split(",")]
            if not text.strip() or not all(items):
                raise argparse.ArgumentTypeError(f"{text!r} is no comma-separated list of {kind.__name__} values "
                                                 f"in {self.text}; give at least one, e.g. 1,2,3")
            values = [_convert(kind, item) for item in items]
            for item, value in zip(items, values):
                if not self.contains(value):
                    raise argparse.ArgumentTypeError(self.message("", item).lstrip())
            return values

        parse.__name__ = f"comma-separated {kind.__name__}"
        parse.range, parse.kind, parse.is_list = self, kind, True
        return parse


def _bound(value) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"


def _convert(kind, text):
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid {kind.__name__} value: {text!r}") from None


@dataclasses.dataclass(frozen=True)
class OnlyWith:
    """The option has an effect only while option ``other`` has one of ``values``."""

    other: str
    values: Sequence[str]
    why: str = ""


def _value(cfg, name):
    value = getattr(cfg, name, None)
    return value.value if isinstance(value, Enum) else value


def _fields(config_class):
    return dataclasses.fields(config_class) if dataclasses.is_dataclass(config_class) else ()


def check_ranges(cfg, config_class, group: Optional[str] = None) -> None:
    """Refuse the first option of ``config_class`` whose value in ``cfg`` (a dataclass, Namespace or
    DictConfig) is outside its declared ``range``; ``group``: its config group, which fairseq-hydra-train's
    message names it by (``model.clsr_budget=1.5``)."""
    for field in _fields(config_class):
        declared: Optional[Range] = field.metadata.get("range")
        if declared is not None:
            value = _value(cfg, field.name)
            declared.check(flag(field.name), value, option_text(field.name, group, value))


def check_contradictions(cfg, config_class, group: Optional[str] = None) -> None:
    """Refuse an option given (not at its default) while the option it depends on (``only_with``) has a
    value that ignores it; ``group`` as in ``check_ranges``."""
    for field in _fields(config_class):
        rule: Optional[OnlyWith] = field.metadata.get("only_with")
        if rule is None:
            continue
        value, default = _value(cfg, field.name), field.default
        default = default.value if isinstance(default, Enum) else default
        other = str(_value(cfg, rule.other))
        if value is None or value == default or other in rule.values:
            continue
        allowed = " or ".join(rule.values)
        raise OptionRangeError(
            f"{option_text(field.name, group, value)} has no effect with {option_text(rule.other, group, other)}"
            + (f" ({rule.why})" if rule.why else "")
            + f": drop {option_text(field.name, group)} or pass {option_text(rule.other, group, allowed)}")
