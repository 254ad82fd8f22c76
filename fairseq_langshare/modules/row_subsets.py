"""Running a sub-network on a subset of the rows of a batch (per-row dispatch).

A mixed-language batch asks some rows to run a component (a latent layer their language keeps,
an adaptive-sparse layer their language selects) and the others to skip it. Running it on every
row and discarding the skippers' outputs costs the union of all rows' networks; here it runs on
the rows that keep it only: gather them (``index_select``), run, put the outputs back
(``index_copy``, out of place). Both are differentiable, so the same dispatch serves training
(z-scaled residuals of kept rows) and inference.

Incremental decoding: a component run on a subset caches keys/values for those rows only, so its
caches must not go through fairseq's batch-level reorder. ``SubsetCaches`` moves them out of
fairseq's way after each step (under its own key) and reorders them itself: beam search maps
every row to a row of the same sentence, hence of the same language and the same plan, so the
rows that keep the component after a reorder are exactly the images of the rows that kept it.
"""

import uuid
from typing import Dict, Optional

import torch
from fairseq.incremental_decoding_utils import FairseqIncrementalState
from torch import Tensor, nn

__all__ = ["rows_of", "take_rows", "put_rows", "cached_kv", "stand_in", "put_attention", "encoder_layer_on_rows",
           "decoder_layer_on_rows", "SubsetCaches"]


def rows_of(mask: Tensor, count: Optional[int] = None) -> Tensor:
    """Row numbers (LongTensor, ascending) where a bool mask of shape (B,) or (1, B, 1) is True:
    one device read, none when ``count``, the number of True rows, is known (a stable sort puts
    them first; of uint8, which CUDA sorts in every torch the package supports, bool from 2.5 on)."""
    flat = mask.reshape(-1)
    if count is None:
        return flat.nonzero().squeeze(1)
    return torch.argsort((~flat).to(torch.uint8), stable=True)[:count]


def take_rows(t: Optional[Tensor], rows: Tensor, dim: int) -> Optional[Tensor]:
    return None if t is None else t.index_select(dim, rows)


def put_rows(full: Tensor, rows: Tensor, part: Tensor, dim: int) -> Tensor:
    """``full`` with ``part`` written at ``rows`` of ``dim``; out of place (autograd-safe)."""
    return full.index_copy(dim, rows, part.to(full.dtype))


def cached_kv(attention: Optional[nn.Module], incremental_state) -> bool:
    """Whether ``attention`` (encoder-decoder attention) holds the encoder's keys and values for
    this decoding: it then reads neither the encoder output nor its padding mask again."""
    if attention is None or incremental_state is None or not hasattr(attention, "_get_input_buffer"):
        return False
    return "prev_key" in (attention._get_input_buffer(incremental_state) or {})


def stand_in(encoder_out: Optional[Tensor], rows: int) -> Optional[Tensor]:
    """A view with the shape of ``rows`` rows of the encoder output, for attention whose keys and
    values are cached (fairseq checks the shape only): no gather at every decoding step."""
    return None if encoder_out is None else encoder_out.narrow(1, 0, 1).expand(-1, rows, -1)


def put_attention(attn: Optional[Tensor], rows: Tensor, batch: int, dim: int) -> Optional[Tensor]:
    """Attention weights (or FFN outputs) of the rows that ran, zeros for the others (which did not run)."""
    if attn is None:
        return None
    shape = list(attn.shape)
    shape[dim] = batch
    return put_rows(attn.new_zeros(shape), rows, attn, dim)


def encoder_layer_on_rows(forward, x, encoder_padding_mask, attn_mask, return_fc: bool):
    """``on_rows(rows)`` for a fairseq encoder layer's ``forward`` called with these arguments: the
    layer on those rows, the others' input passed through. None when the rows cannot run apart (an
    attention mask per row)."""
    if attn_mask is not None and attn_mask.dim() != 2:  # a (T, T) mask is shared by the rows
        return None

    def on_rows(rows):
        out = forward(take_rows(x, rows, 1), take_rows(encoder_padding_mask, rows, 0), attn_mask)
        if return_fc:
            y, fc = out
            return put_rows(x, rows, y, 1), put_attention(fc, rows, x.size(1), 1)
        return put_rows(x, rows, out, 1)

    return on_rows


def decoder_layer_on_rows(forward, encoder_attn, x, encoder_out, encoder_padding_mask, incremental_state,
                          prev_self_attn_state, prev_attn_state, self_attn_mask, self_attn_padding_mask,
                          need_attn, need_head_weights):
    """``on_rows(rows)`` for a fairseq decoder layer's ``forward`` called with these arguments (its
    caches for those rows only: ``SubsetCaches``). None when the rows cannot run apart (states
    handed in from outside). Attention weights come back when asked for (``need_attn`` or
    ``need_head_weights``), None otherwise."""
    if prev_self_attn_state is not None or prev_attn_state is not None:
        return None

    def on_rows(rows):
        if cached_kv(encoder_attn, incremental_state):  # keys/values of the encoder cached
            enc, enc_mask = stand_in(encoder_out, rows.numel()), None
        else:
            beam = getattr(encoder_attn, "beam_size", 1)
            if beam > 1 and rows.numel() % beam == 0:
                # beamable attention keeps the first of every ``beam`` rows it gets (a sentence's
                # beams): hand it those only, and it projects them as they are
                first = rows[::beam]
                enc, enc_mask = take_rows(encoder_out, first, 1), take_rows(encoder_padding_mask, first, 0)
            else:
                enc, enc_mask = take_rows(encoder_out, rows, 1), take_rows(encoder_padding_mask, rows, 0)
        y, attn, state = forward(take_rows(x, rows, 1), enc, enc_mask, incremental_state, prev_self_attn_state,
                                 prev_attn_state, self_attn_mask, take_rows(self_attn_padding_mask, rows, 0),
                                 need_attn, need_head_weights)
        # fairseq's decoder reads the weights of the layer it asks (need_attn) only; an evaluating
        # layer returns them anyway, and spreading them over the batch would cost a copy per layer
        asked = need_attn or need_head_weights
        attn = put_attention(attn, rows, x.size(1), 1 if need_head_weights else 0) if asked else None
        return put_rows(x, rows, y, 1), attn, state

    return on_rows


class SubsetCaches:
    """The incremental state of one component that runs on a subset of rows.

    ``resume(state, rows)`` before running on ``rows`` (the rows of this step's batch that keep
    the component: it puts their caches back, in the order of these rows) and ``suspend(state,
    rows, B)`` after (it stashes them); ``release(state)`` when every row runs again;
    ``reorder(state, new_order)`` from the owner's ``reorder_incremental_state``. ``rows(state)``
    is the subset the stashed caches hold (in the order of the batch they were stashed in, before
    any pending reorder), or None if the component never ran on a subset in this decoding (its
    caches are then fairseq's, reordered by fairseq).

    The reorders are applied lazily, once, when the caches are next used: ``reorder`` composes the
    beam's orders and ``resume``/``release`` map the rows that run then (which the caller knows from
    the languages, reordered with the batch) to their places in the stash. Nothing per step
    depends on a scan of the rows: the map from batch rows to stash places is kept with the stash
    as long as the subset is the same ``rows`` tensor (the caller hands the same one while the
    batch's languages stay the same, as they do through a beam search until sentences finish)."""

    def __init__(self, component: nn.Module):
        self.__dict__["component"] = component
        self.key = f"{uuid.uuid4()}.row_subset"
        self._prefixes = None
        self._stateful = None
        self._owned = {}  # incremental-state key -> whether it is one of the component's caches

    def prefixes(self):
        if self._prefixes is None:
            self._prefixes = {m._incremental_state_id for m in self.component.modules()
                              if isinstance(m, FairseqIncrementalState)}
        return self._prefixes

    def _owns(self, key: str) -> bool:
        owned = self._owned.get(key)
        if owned is None:
            if len(self._owned) > 4096:  # keys are per module and fixed: only a misuse grows this
                self._owned.clear()
            owned = self._owned[key] = key.split(".", 1)[0] in self.prefixes()
        return owned

    def _modules(self):
        """The component's modules that reorder their own caches (listed once)."""
        if self._stateful is None:
            self._stateful = [m for m in self.component.modules()
                              if isinstance(m, FairseqIncrementalState) and hasattr(m, "reorder_incremental_state")]
        return self._stateful

    def holds(self, state: Optional[Dict]) -> bool:
        """Whether the component's caches are stashed here (fairseq's walk must leave them alone)."""
        return state is not None and self.key in state

    def rows(self, state: Optional[Dict]) -> Optional[Tensor]:
        entry = None if state is None else state.get(self.key)
        return None if entry is None else entry["rows"]

    @staticmethod
    def _position(entry) -> Tensor:
        """Batch row -> its place in the stash (-1: not in it), computed once per stashed subset."""
        position = entry["position"]
        if position is None:
            rows = entry["rows"]
            position = torch.full((entry["batch"],), -1, dtype=torch.long, device=rows.device)
            position[rows] = torch.arange(rows.numel(), device=rows.device)
            entry["position"] = position
        return position

    def _put_back(self, state: Dict, entry, rows: Optional[Tensor]) -> None:
        """The stashed caches back in ``state``, reordered for ``rows`` of the current batch (None:
        every row) if the beam reordered the batch since they were stashed."""
        state.update(entry["caches"])
        order = entry["order"]
        if order is None:
            return
        entry["order"] = None
        sources = order if rows is None else order.index_select(0, rows)  # current row -> stashed batch row
        sub_order = self._position(entry).index_select(0, sources)  # -1 (an index error): not stashed
        for module in self._modules():
            module.reorder_incremental_state(state, sub_order)

    def restore(self, state: Dict) -> None:
        """The stashed caches back in ``state`` (for every row of the current batch: the subset is
        every row now), the stash dropped."""
        entry = state.pop(self.key, None)
        if entry is not None:
            self._put_back(state, entry, None)

    def stash(self, state: Dict, rows: Tensor, batch: int) -> None:
        """Move the component's caches (for ``rows`` of a batch of ``batch`` rows) out of fairseq's way."""
        previous = state.get(self.key)
        same = previous is not None and previous["rows"] is rows and previous["batch"] == batch
        caches = {k: state.pop(k) for k in [k for k in state if self._owns(k)]}
        state[self.key] = {"rows": rows, "batch": batch, "caches": caches, "order": None,
                           "position": previous["position"] if same else None}

    def release(self, state: Optional[Dict]) -> None:
        """Every row keeps the component again: its caches (if it ran on a subset) go back to
        fairseq's reorder."""
        if state is not None and self.key in state:
            self.restore(state)

    def resume(self, state: Optional[Dict], rows: Tensor) -> Tensor:
        """Before running on ``rows`` (the rows of the current batch that keep the component, in
        batch order): their caches, if any, back in ``state`` in that order. Returns ``rows``."""
        entry = None if state is None else state.get(self.key)
        if entry is not None:
            self._put_back(state, entry, rows)
        return rows

    def suspend(self, state: Optional[Dict], rows: Tensor, batch: int) -> None:
        """After running on ``rows``: ``stash`` when decoding incrementally."""
        if state is not None:
            self.stash(state, rows, batch)

    def reorder(self, state: Dict, new_order: Tensor) -> None:
        """Row i of the batch is row ``new_order[i]`` of the previous one (beam search): recorded,
        applied when the caches are next used. Beam search maps every row to a row of the same
        sentence, hence of the same language and plan: the rows that keep the component then are
        images of rows whose caches are stashed."""
        entry = state.get(self.key)
        if entry is None:
            return
        order = entry["order"]
        entry["order"] = new_order.clone() if order is None else order.index_select(0, new_order)
