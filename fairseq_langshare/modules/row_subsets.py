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


def rows_of(mask: Tensor) -> Tensor:
    """Row numbers (LongTensor) where a bool mask of shape (B,) or (1, B, 1) is True (one sync)."""
    return mask.reshape(-1).nonzero().squeeze(1)


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
    handed in from outside)."""
    if prev_self_attn_state is not None or prev_attn_state is not None:
        return None

    def on_rows(rows):
        if cached_kv(encoder_attn, incremental_state):  # keys/values of the encoder cached
            enc, enc_mask = stand_in(encoder_out, rows.numel()), None
        else:
            enc, enc_mask = take_rows(encoder_out, rows, 1), take_rows(encoder_padding_mask, rows, 0)
        y, attn, state = forward(take_rows(x, rows, 1), enc, enc_mask, incremental_state, prev_self_attn_state,
                                 prev_attn_state, self_attn_mask, take_rows(self_attn_padding_mask, rows, 0),
                                 need_attn, need_head_weights)
        attn = put_attention(attn, rows, x.size(1), 1 if need_head_weights else 0)
        return put_rows(x, rows, y, 1), attn, state

    return on_rows


class SubsetCaches:
    """The incremental state of one component that runs on a subset of rows.

    ``resume(state, compute)`` gives the rows to run on (restoring their caches) and
    ``suspend(state, rows, B)`` stashes them after; ``release(state)`` when every row runs again;
    ``reorder(state, new_order)`` from the owner's ``reorder_incremental_state``. ``rows(state)``
    is the subset the caches hold (in batch order), or None if the component never ran on a
    subset in this decoding (its caches are then fairseq's, reordered by fairseq)."""

    def __init__(self, component: nn.Module):
        self.__dict__["component"] = component
        self.key = f"{uuid.uuid4()}.row_subset"
        self._prefixes = None

    def prefixes(self):
        if self._prefixes is None:
            self._prefixes = {m._incremental_state_id for m in self.component.modules()
                              if isinstance(m, FairseqIncrementalState)}
        return self._prefixes

    def rows(self, state: Optional[Dict]) -> Optional[Tensor]:
        entry = None if state is None else state.get(self.key)
        return None if entry is None else entry["rows"]

    def restore(self, state: Dict) -> None:
        entry = state.get(self.key)
        if entry is not None:
            state.update(entry["caches"])

    def stash(self, state: Dict, rows: Tensor, batch: int) -> None:
        """Move the component's caches (for ``rows`` of a batch of ``batch`` rows) out of fairseq's way."""
        prefixes = self.prefixes()
        caches = {k: state.pop(k) for k in list(state) if k.split(".", 1)[0] in prefixes}
        state[self.key] = {"rows": rows, "batch": batch, "caches": caches}

    def release(self, state: Optional[Dict]) -> None:
        """Every row keeps the component again: its caches (if it ran on a subset) go back to
        fairseq's reorder."""
        if state is not None:
            self.restore(state)
            state.pop(self.key, None)

    def resume(self, state: Optional[Dict], compute) -> Optional[Tensor]:
        """The rows this step runs the component on: the previous step's subset, reordered by the
        beam (its caches put back for the run), else ``compute()`` (None: every row)."""
        rows = self.rows(state)
        if rows is None:
            return compute()
        self.restore(state)
        return rows

    def suspend(self, state: Optional[Dict], rows: Tensor, batch: int) -> None:
        """After running on ``rows``: ``stash`` when decoding incrementally."""
        if state is not None:
            self.stash(state, rows, batch)

    def reorder(self, state: Dict, new_order: Tensor) -> None:
        entry = state.get(self.key)
        if entry is None:
            return
        rows = entry["rows"]
        position = torch.full((entry["batch"],), -1, dtype=torch.long, device=rows.device)
        position[rows] = torch.arange(rows.numel(), device=rows.device)
        mapped = position.index_select(0, new_order)  # new row -> its old row's place in the subset, or -1
        kept = mapped.ge(0)
        new_rows = rows_of(kept)
        sub_order = mapped.index_select(0, new_rows)
        state.update(entry["caches"])
        for module in self.component.modules():
            if isinstance(module, FairseqIncrementalState) and hasattr(module, "reorder_incremental_state"):
                module.reorder_incremental_state(state, sub_order)
        self.stash(state, new_rows, new_order.numel())
