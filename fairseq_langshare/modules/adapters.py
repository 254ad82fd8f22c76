"""Bottleneck adapters (Bapna & Firat 2019; Philip et al. 2020) and banks of them chosen per sentence.

An ``Adapter`` is the residual block ``x + up(relu(down(layer_norm(x))))`` with a ``d -> b -> d``
bottleneck. An ``AdapterBank`` holds one adapter per language (``per_lang``, indexed by the
source or the target language of each sentence) or one per language pair (``per_pair``, indexed
through a ``LanguagePairTable``) and runs each sentence through its own adapter with
``route_by_language`` (one gather, one call per adapter present in the batch, one scatter).
The state-dict keys name the slot: ``encoder.layers.0.adapter.per_lang.2.down.weight`` is
language 2's down-projection after encoder layer 0.
"""

from typing import List, Optional, Sequence

import torch
from fairseq.modules import LayerNorm
from torch import Tensor, nn

from .routing import LanguageIds, LastResult, languages_present, route_by_language

__all__ = ["Adapter", "AdapterBank", "LanguagePairTable", "MissingPairAdapter", "UP_INIT_STD", "SLOT_NAMES"]

UP_INIT_STD = 1e-3  # std of the up-projection's initial weights (near zero: a new adapter is near identity)
SLOT_NAMES = {"src": "per_lang", "tgt": "per_lang", "pair": "per_pair"}  # the bank's ModuleList, by indexing side


class MissingPairAdapter(ValueError):
    pass


class Adapter(nn.Module):
    """``x + up(relu(down(layer_norm(x))))``, position-wise, (T, B, d) -> (T, B, d).

    Initialisation: the layer norm starts as the identity map (weight 1, bias 0), ``down`` is
    Xavier-uniform with zero bias (fairseq's linear-layer init), ``up`` is drawn from a normal
    distribution with std ``UP_INIT_STD`` = 1e-3 truncated at two standard deviations (Houlsby et
    al. 2019's near-identity initialisation, applied to the up-projection only) with zero bias. A
    freshly added adapter therefore changes its input by about 1e-3 of its scale, and the random
    (not zero) ``up`` lets ``down`` receive a gradient from the first step.
    """

    def __init__(self, dim: int, bottleneck: int, export: bool = False):
        super().__init__()
        if bottleneck < 1:
            raise ValueError(f"--adapter-bottleneck must be a positive size, got {bottleneck}")
        self.layer_norm = LayerNorm(dim, export=export)
        self.down = nn.Linear(dim, bottleneck)
        self.up = nn.Linear(bottleneck, dim)
        nn.init.xavier_uniform_(self.down.weight)
        nn.init.zeros_(self.down.bias)
        nn.init.trunc_normal_(self.up.weight, std=UP_INIT_STD, a=-2 * UP_INIT_STD, b=2 * UP_INIT_STD)
        nn.init.zeros_(self.up.bias)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.up(torch.relu(self.down(self.layer_norm(x))))

    @staticmethod
    def num_parameters(dim: int, bottleneck: int) -> int:
        """Layer norm 2d, down d*b + b, up b*d + d."""
        return 2 * dim * bottleneck + bottleneck + 3 * dim


class LanguagePairTable(nn.Module):
    """Which adapter a (source, target) language pair uses: ``lookup[src_id, tgt_id]`` is the
    pair's slot in every pair bank, -1 where the pair has no adapter. ``lookup`` is a persistent
    buffer, so a checkpoint keeps its mapping (in the ids of the inventory stored next to it)."""

    def __init__(self, pairs: Sequence[str], langs: Sequence[str]):
        super().__init__()
        self.pairs: List[str] = list(pairs)
        self.langs: List[str] = list(langs)  # for messages; the model refreshes it when its inventory changes
        # real values even when the model is built on the meta device (parameter counts, export checks)
        lookup = torch.full((len(self.langs), len(self.langs)), -1, dtype=torch.long, device="cpu")
        index = {code: i for i, code in enumerate(self.langs)}
        for slot, pair in enumerate(self.pairs):
            src, tgt = pair.split("-")
            for code in (src, tgt):
                if code not in index:
                    raise ValueError(f"--adapter-pairs: language {code!r} of the pair {pair} is not in --langs "
                                     f"{','.join(self.langs)}; add it to --langs or drop the pair")
            lookup[index[src], index[tgt]] = slot
        self.register_buffer("lookup", lookup, persistent=True)
        self._last = LastResult()  # every layer of a forward call asks for the same ids

    def slots(self, src: Tensor, tgt: Tensor) -> Tensor:
        """The adapter slot of every sentence (B,); one clear error for a pair without adapter."""
        return self._last.get((src, tgt, self.lookup), self._slots, src, tgt)

    def _slots(self, src: Tensor, tgt: Tensor) -> Tensor:
        slots = self.lookup[src, tgt]
        missing = slots.lt(0)
        if missing.any():
            row = int(missing.nonzero()[0, 0])
            self.missing(int(src[row]), int(tgt[row]))
        return slots

    def slot(self, src_id: int, tgt_id: int) -> int:
        slot = int(self.lookup[src_id, tgt_id])
        if slot < 0:
            self.missing(src_id, tgt_id)
        return slot

    def missing(self, src_id: int, tgt_id: int):
        name = lambda i: self.langs[i] if 0 <= i < len(self.langs) else f"#{i}"  # noqa: E731
        pair = f"{name(src_id)}-{name(tgt_id)}"
        raise MissingPairAdapter(
            f"no adapter for the language pair {pair}: --adapter-placement pair has adapters only for the pairs it "
            f"was trained on ({','.join(self.pairs)}); translate one of those, or train with {pair} in --lang-pairs "
            f"(language adapters, e.g. --adapter-placement enc-dec, also cover zero-shot pairs)")

    def extra_repr(self) -> str:
        return f"pairs={','.join(self.pairs)}"


class AdapterBank(nn.Module):
    """One ``Adapter`` per language (``side`` "src"/"tgt") or per language pair (``side`` "pair");
    every sentence of a (T, B, d) batch goes through its own."""

    def __init__(self, num_slots: int, dim: int, bottleneck: int, languages: LanguageIds, side: str,
                 export: bool = False):
        super().__init__()
        if side not in SLOT_NAMES:
            raise ValueError(f"an adapter bank is indexed by 'src', 'tgt' or 'pair', got {side!r}")
        if num_slots < 1:
            raise ValueError(f"an adapter bank needs at least one {'pair' if side == 'pair' else 'language'}")
        self.side = side
        self.slot_name = SLOT_NAMES[side]
        setattr(self, self.slot_name, nn.ModuleList(Adapter(dim, bottleneck, export=export) for _ in range(num_slots)))
        self.languages = languages
        self.__dict__["pair_table"] = None  # set by the model (not a submodule: the model owns it once)

    @property
    def slots(self) -> nn.ModuleList:
        return getattr(self, self.slot_name)

    def set_pair_table(self, table: Optional[LanguagePairTable]) -> None:
        self.__dict__["pair_table"] = table

    def slot_ids(self) -> Tensor:
        """The slot of every sentence of the forward call in progress (B,)."""
        if self.side == "pair":
            if self.pair_table is None:
                raise RuntimeError("a pair adapter bank has no language-pair table: the model attaches one when built")
            return self.pair_table.slots(self.languages.get("src"), self.languages.get("tgt"))
        ids = self.languages.get(self.side)
        langs = languages_present(ids)  # the routing's grouping of these ids: no read of its own
        if langs and (langs[-1] >= len(self.slots) or langs[0] < 0):
            raise IndexError(f"language id {langs[-1] if langs[0] >= 0 else langs[0]} has no adapter: the bank holds "
                             f"{len(self.slots)} languages (the --langs inventory it was built with); decode with the "
                             "same --langs")
        return ids

    def slot_for(self, src_id: int, tgt_id: int) -> int:
        """The slot one sentence of the pair (src_id, tgt_id) uses."""
        if self.side == "pair":
            return self.pair_table.slot(src_id, tgt_id)
        return src_id if self.side == "src" else tgt_id

    def forward(self, x: Tensor) -> Tensor:
        slots = self.slots
        return route_by_language(x, self.slot_ids(), lambda k, xk, _: slots[k](xk), batch_dim=1)

    def extra_repr(self) -> str:
        return f"side={self.side}, slots={len(self.slots)}"
