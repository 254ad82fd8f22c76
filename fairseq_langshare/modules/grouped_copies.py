"""Per-language copies of a decoder layer run as one layer at inference (issue 18, Deliver 2).

In a batch that mixes languages, running each language's copy of a layer on its own rows pays
every per-call cost of the layer (attention's reshapes, masks, caches, softmax, and the Python
around them) once per language present: with 4 target families in a batch of 64 sentences,
decoding ran at 0.78 of the speed of the same model with one family (same rows, same work per
row). ``grouped_stand_in`` builds one stand-in of the layer whose linear and layer-norm
sub-modules apply each row's own copy (``GroupedLinear``, ``GroupedLayerNorm``: one call per
language block, on slices when the batch is grouped by language as the task decodes it);
everything between them (attention scores, softmax, residuals, activations) is row-wise, so
every row gets exactly its copy's computation, with the layer's other costs paid once.

The stand-in holds no weights: it calls the copies' own modules' parameters, so it follows
loads, ``.to()`` and optimizer steps. Its attention modules have their own incremental-state
ids (one cache for every row, reordered by its owner). Inference only: the owner uses it in
eval mode with autograd off.
"""

import copy
from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from fairseq.incremental_decoding_utils import FairseqIncrementalState
from fairseq.modules import MultiheadAttention
from torch import Tensor, nn

from .routing import language_grouping, route_by_language

__all__ = ["RowGroups", "GroupedLinear", "GroupedLayerNorm", "grouped_stand_in"]


class RowGroups:
    """The language (or group) ids of the rows (dim 1) of the current call, set by the owner
    before each call; the grouped modules route by them (``route_by_language``)."""

    __slots__ = ("ids",)

    def __init__(self):
        self.ids = None

    def apply(self, x: Tensor, fn) -> Tensor:
        """``fn(lang, rows)`` on each language's rows of ``x`` (T, B, C), reassembled."""
        return route_by_language(x, self.ids, lambda lang, rows, _: fn(lang, rows))


class GroupedLinear(nn.Module):
    """Each row through its language's copy of a linear layer (the copies' own parameters)."""

    def __init__(self, linears: Sequence[nn.Linear], groups: RowGroups):
        super().__init__()
        self.__dict__["linears"], self.__dict__["groups"] = list(linears), groups

    def forward(self, x: Tensor) -> Tensor:
        linears = self.linears
        runs = language_grouping(self.groups.ids)[4]
        if runs is not None and x.size(0) == 1 and x.is_contiguous() and not torch.is_autocast_enabled():
            # a decoding step: each block's matmul writes its slice of one output (no concatenation;
            # autocast does not cast ops given an out= tensor)
            rows = x.view(x.size(1), x.size(2))
            out = x.new_empty(1, rows.size(0), linears[0].out_features)
            flat, start = out.view(rows.size(0), -1), 0
            for lang, n in zip(*runs):
                lin = linears[lang]
                part = rows.narrow(0, start, n)
                if lin.bias is None:
                    torch.mm(part, lin.weight.t(), out=flat.narrow(0, start, n))
                else:
                    torch.addmm(lin.bias, part, lin.weight.t(), out=flat.narrow(0, start, n))
                start += n
            return out
        return self.groups.apply(x, lambda lang, rows: F.linear(rows, linears[lang].weight, linears[lang].bias))


class GroupedLayerNorm(nn.Module):
    """Each row through its language's copy of a layer norm."""

    def __init__(self, norms: Sequence[nn.LayerNorm], groups: RowGroups):
        super().__init__()
        self.__dict__["norms"], self.__dict__["groups"] = list(norms), groups

    def forward(self, x: Tensor) -> Tensor:
        norms = self.norms

        def norm(lang, rows):
            n = norms[lang]
            return F.layer_norm(rows, n.normalized_shape, n.weight, n.bias, n.eps)
        return self.groups.apply(x, norm)


def _is_layer_norm(module: nn.Module) -> bool:
    return isinstance(module, nn.LayerNorm) or type(module).__name__ == "FusedLayerNorm"


def grouped_stand_in(copies: Sequence[nn.Module], groups: RowGroups) -> Optional[nn.Module]:
    """A stand-in of ``copies`` (structurally identical layers) that runs each row through its own
    copy, or None when a copy holds a weight outside its linear and layer-norm modules (it could
    not be applied per row; the owner then runs the copies one by one)."""
    stand_in = copy.deepcopy(copies[0])
    names = [name for name, m in stand_in.named_modules() if name and (type(m) is nn.Linear or _is_layer_norm(m))]
    for name in names:
        parent_name, _, attr = name.rpartition(".")
        parent = stand_in.get_submodule(parent_name) if parent_name else stand_in
        originals = [c.get_submodule(name) for c in copies]
        grouped = GroupedLinear(originals, groups) if type(originals[0]) is nn.Linear else GroupedLayerNorm(originals, groups)
        setattr(parent, attr, grouped)
    if any(True for _ in stand_in.parameters()) or any(True for _ in stand_in.buffers()):
        return None
    for module in stand_in.modules():
        if isinstance(module, FairseqIncrementalState):
            module.init_incremental_state()  # its own caches, apart from copy 0's
        if isinstance(module, MultiheadAttention):
            module.skip_embed_dim_check = True  # the fused path would read q_proj.weight: call the modules
            module.beam_size = 1  # "beamable" attention projects one row per sentence: every row here
    stand_in.eval()
    return stand_in
