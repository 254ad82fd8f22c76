"""``analysis.inference_cost.parameters`` (the head-to-head plan's parameter counts) on a method whose
per-pair export refuses its configuration: one line naming the hook to add, not the export's advice."""

import pytest
import torch
from torch import nn

from fairseq_langshare.analysis.inference_cost import parameters
from fairseq_langshare.export import ExportError


class _Refusing(nn.Module):
    """A model whose export refuses (as CLSR's learned gates, or a method's unsupported variant do)."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(3, 2))

    @classmethod
    def export_state_dict(cls, state_dict, model_cfg, src_id, tgt_id):
        raise ExportError("toy_transformer cannot export this variant: train with --toy-exportable")


class _Counting(_Refusing):
    def effective_parameters(self, src_lang_id, tgt_lang_id):
        return 4


def test_a_refused_export_names_effective_parameters():
    with pytest.raises(ValueError, match=r"^_Refusing: its export_state_dict refuses this configuration "
                                         r"\(toy_transformer cannot export .*\), so the parameters a sentence of en-xx "
                                         r"uses are unknown: give the model class a method "
                                         r"effective_parameters\(src_lang_id, tgt_lang_id\)"):
        parameters(_Refusing(), {"en-xx": (0, 1)}, model_cfg=object())


def test_effective_parameters_is_asked_first():
    assert parameters(_Counting(), {"en-xx": (0, 1)}, model_cfg=object()) == {"total": 6, "per_pair": {"en-xx": 4}}
