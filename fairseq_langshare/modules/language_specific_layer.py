"""Language-specific layers (LSL, Pires et al. 2023): a dictionary of per-language copies of
a Transformer layer (or of one of its sub-layers) indexed by the source or the target language
of each sentence, and the search-mode mixture of Eq. 1.

Every per-language computation goes through ``route_by_language``: the rows of a batch are
grouped by language, each language present runs its own copy once on its rows, and the rows are
put back. A language absent from the batch runs nothing and gets no gradient.

Layer specs use the paper's 1-based notation, e.g. ``SRC={3,4} & TGT={13,14,15}``
(``parse_layer_spec``/``format_layer_spec``).

Incremental decoding: a copy's attention modules cache keys/values for *its* rows only. The
containers below keep those caches out of fairseq's way between calls (fairseq's beam-search
reorder would index them with whole-batch row numbers) and reorder them themselves, mapping
the batch-level ``new_order`` to each language's rows.
"""

import re
from typing import Callable, Dict, List, Optional, Sequence

import torch
from fairseq.incremental_decoding_utils import FairseqIncrementalState
from fairseq.modules import LayerNorm
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase, TransformerEncoderLayerBase
from torch import Tensor, nn

from .auxiliary import AuxiliaryReporter
from .grouped_copies import RowGroups, grouped_stand_in
from .routing import (LanguageIds, LastResult, known_equal, language_grouping, languages_present, reorder_ids,
                      route_by_language)
from .row_subsets import cached_kv as _cached_kv
from .row_subsets import stand_in as _stand_in

__all__ = [
    "LayerSpecError", "parse_layer_spec", "format_layer_spec",
    "LanguageSpecificModule", "LanguageSpecificEncoderLayer", "LanguageSpecificDecoderLayer",
    "LanguageSpecificAttention", "PartialLanguageSpecificEncoderLayer",
    "PartialLanguageSpecificDecoderLayer", "MixedEncoderLayer", "COPIES", "MIX_KINDS", "reorder_modules",
    "set_num_updates_once",
]

COPIES = "per_lang"  # the name of the per-language ModuleList in every container (state-dict keys)
SIDES = ("src", "tgt")
MIX_KINDS = ("shared", "src", "tgt")  # Eq. 1's three branches, in the order of ``mix_logits``


# --- the layer spec --------------------------------------------------------------------------

class LayerSpecError(ValueError):
    pass


_SPEC_EXAMPLE = '"SRC={1,2} & TGT={4}"'
_PART = re.compile(r"^\s*(SRC|TGT)\s*=\s*(\{[^{}]*\}|∅|\{\s*\}|none|empty)\s*$", re.IGNORECASE)


def _parse_numbers(body: str, spec: str, flag: str) -> List[int]:
    body = body.strip()
    if body.lower() in ("∅", "none", "empty"):
        return []
    body = body[1:-1].strip()
    numbers: List[int] = []
    if not body:
        return numbers
    for item in body.split(","):
        item = item.strip()
        m = re.fullmatch(r"(\d+)\s*(?:-\s*(\d+))?", item)
        if not m:
            raise LayerSpecError(
                f"{flag} {spec!r}: {item!r} is not a layer number or range; write 1-based numbers "
                f"and ranges like {_SPEC_EXAMPLE} or \"TGT={{13-16}}\""
            )
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise LayerSpecError(f"{flag} {spec!r}: range {item!r} runs backwards; write it as {hi}-{lo}")
        numbers.extend(range(lo, hi + 1))
    return numbers


def parse_layer_spec(spec: Optional[str], num_layers: int, flag: str = "--lsl-encoder-layers",
                     layer_flag: str = "--encoder-layers") -> List[Optional[str]]:
    """``"SRC={1,2} & TGT={4}"`` -> ``["src", "src", None, "tgt"]`` for 4 layers (1-based in,
    one entry per layer out: ``None`` shared, ``"src"``/``"tgt"`` the indexing language).
    Every problem is one ``LayerSpecError`` line naming the problem and the fix."""
    sides: List[Optional[str]] = [None] * num_layers
    if spec is None or not str(spec).strip():
        return sides
    spec = str(spec)
    seen = {}
    for part in re.split(r"&|;", spec):
        m = _PART.match(part)
        if not m:
            raise LayerSpecError(
                f"{flag} {spec!r}: malformed layer spec at {part.strip()!r}; expected "
                f"{_SPEC_EXAMPLE} (1-based layer numbers, SRC and/or TGT joined by &)"
            )
        side = m.group(1).lower()
        if side in seen:
            raise LayerSpecError(f"{flag} {spec!r}: {side.upper()} is given twice; list all its layers in one set")
        seen[side] = _parse_numbers(m.group(2), spec, flag)
    for side, numbers in seen.items():
        for n in numbers:
            if not 1 <= n <= num_layers:
                raise LayerSpecError(
                    f"{flag} {spec!r}: layer {n} is out of range: there are {num_layers} layers, numbered "
                    f"1..{num_layers} (the paper's 1-based notation); use numbers in 1..{num_layers} or change {layer_flag}"
                )
    both = sorted(set(seen.get("src", [])) & set(seen.get("tgt", [])))
    if both:
        raise LayerSpecError(
            f"{flag} {spec!r}: layer {both[0]} is in both SRC and TGT; a language-specific layer is indexed "
            f"by one language: remove it from one of the two sets"
        )
    for side, numbers in seen.items():
        for n in numbers:
            sides[n - 1] = side
    return sides


def format_layer_spec(sides: Sequence[Optional[str]]) -> str:
    """Inverse of ``parse_layer_spec``: ``["src", None, "tgt"]`` -> ``"SRC={1} & TGT={3}"``."""
    def fmt(side):
        return "{" + ",".join(str(i + 1) for i, s in enumerate(sides) if s == side) + "}"
    return f"SRC={fmt('src')} & TGT={fmt('tgt')}"


# --- routing helpers -------------------------------------------------------------------------

def _check_ids(lang_ids: Tensor, num_langs: int) -> None:
    """Read from the routing's own grouping of the ids (cached per ids tensor): no extra sync."""
    langs = languages_present(lang_ids) if lang_ids.numel() else []
    if langs and (langs[-1] >= num_langs or langs[0] < 0):
        raise IndexError(
            f"language id {langs[-1] if langs[-1] >= num_langs else langs[0]} has no language-specific weights: "
            f"the layer holds {num_langs} languages (the --langs inventory it was built with); decode with the same --langs"
        )


def _route_rows(lang_ids: Tensor, fn: Callable[[int, Tensor], Tensor]) -> Tensor:
    """``route_by_language`` over row numbers, for computations with several per-row inputs:
    ``fn(lang, rows)`` gathers what it needs and returns a tensor whose dim 0 is ``rows``."""
    rows = torch.arange(lang_ids.numel(), device=lang_ids.device)
    return route_by_language(rows, lang_ids, lambda lang, r, _: fn(lang, r), batch_dim=0)


def _take(t: Optional[Tensor], rows: Tensor, dim: int, whole: bool) -> Optional[Tensor]:
    if t is None or whole:
        return t
    return t.index_select(dim, rows)


def _pack(x: Tensor, attn: Optional[Tensor], head_dim_first: bool):
    """(T, b, C) output and optional attention weights -> one (b, ...) tensor for routing."""
    parts = [x.transpose(0, 1).reshape(x.size(1), -1)]
    if attn is not None:
        a = attn.transpose(0, 1) if head_dim_first else attn  # (H, b, T, S) -> (b, H, T, S)
        parts.append(a.reshape(a.size(0), -1).to(x.dtype))
    return torch.cat(parts, dim=1) if len(parts) > 1 else parts[0]


def _unpack(packed: Tensor, x_shape, attn_shape, head_dim_first: bool, attn_dtype):
    T, _, C = x_shape
    B = packed.size(0)
    x = packed[:, : T * C].reshape(B, T, C).transpose(0, 1).contiguous()
    if attn_shape is None:
        return x, None
    a = packed[:, T * C:].reshape(B, *attn_shape).to(attn_dtype)
    return x, (a.transpose(0, 1).contiguous() if head_dim_first else a)


class _LanguageCopies(nn.Module):
    """Holds ``per_lang``, one module per language of the inventory, indexed by ``side``."""

    def __init__(self, copies: Sequence[nn.Module], languages: LanguageIds, side: Optional[str]):
        super().__init__()
        if side is not None and side not in SIDES:
            raise ValueError(f"side must be 'src' or 'tgt', got {side!r}")
        setattr(self, COPIES, nn.ModuleList(copies))
        self.languages = languages
        self.side = side

    @property
    def copies(self) -> nn.ModuleList:
        return getattr(self, COPIES)

    @property
    def num_langs(self) -> int:
        return len(self.copies)

    def lang_ids(self, side: Optional[str] = None) -> Tensor:
        side = side or self.side
        if side is None:
            raise ValueError("this language-specific layer has no default side: pass side='src' or 'tgt'")
        ids = self.languages.get(side)
        _check_ids(ids, self.num_langs)
        return ids

    def extra_repr(self) -> str:
        return f"side={self.side}, languages={self.num_langs}"

    def train(self, mode: bool = True):
        """fairseq's trainer calls ``model.train()`` at every update: with a large inventory the
        recursion through every language's copy costs more than the copies a batch runs. A copy
        already in ``mode`` (its own flag) is not walked again."""
        self.training = mode
        for name, child in self._modules.items():
            if name == COPIES:
                for copy in child:
                    if copy.training != mode:
                        copy.train(mode)
                child.training = mode
            elif child is not None:
                child.train(mode)
        return self

    def upgrade_state_dict_named(self, state_dict, name):
        for lang, copy in enumerate(self.copies):
            if hasattr(copy, "upgrade_state_dict_named"):
                copy.upgrade_state_dict_named(state_dict, f"{name}.{COPIES}.{lang}")


class LanguageSpecificModule(_LanguageCopies):
    """Per-language copies of a module mapping (T, B, C) -> (T, B, C') (a Linear, a LayerNorm)."""

    def forward(self, x: Tensor) -> Tensor:
        return route_by_language(x, self.lang_ids(), lambda lang, xl, _: self.copies[lang](xl), batch_dim=1)


class LanguageSpecificEncoderLayer(_LanguageCopies):
    """The paper's LSL (Figure 1b): one encoder layer per language, indexed by ``side``."""

    def forward(self, x: Tensor, encoder_padding_mask: Optional[Tensor] = None,
                attn_mask: Optional[Tensor] = None, side: Optional[str] = None) -> Tensor:
        return route_by_language(
            x, self.lang_ids(side),
            lambda lang, xl, mask: self.copies[lang](xl, encoder_padding_mask=mask, attn_mask=attn_mask),
            padding_mask=encoder_padding_mask, batch_dim=1,
        )


_REORDERED = LastResult()  # every container of a decoder reorders the same ids with the same order
_SAME_IDS = LastResult()  # ... and checks the same two ids tensors at the next step (a device read, unless
# both are known on the host: the reorders of a one-language batch, ``routing.reorder_ids``)


def _reordered(old: Tensor, new_order: Tensor) -> Tensor:
    return _REORDERED.get((old, new_order), reorder_ids, old, new_order)


def _same_ids(a: Tensor, b: Tensor) -> bool:
    return known_equal(a, b) or _SAME_IDS.get((a, b), torch.equal, a, b)


def reorderable_modules(root: nn.Module) -> List[nn.Module]:
    """The modules a decoder's ``reorder_incremental_state_scripting`` must call, in fairseq's
    order, without descending into per-language containers (each reorders its own copies):
    fairseq walks every module of the decoder at every decoding step, all copies included.
    Computed once per root (the module tree is fixed after building)."""
    cached = root.__dict__.get("_reorderable")
    if cached is not None:
        return cached
    found, seen = [], set()

    def walk(module):
        if id(module) in seen:
            return
        seen.add(id(module))
        if hasattr(module, "reorder_incremental_state"):
            found.append(module)
        if isinstance(module, _IncrementalRouting):
            return
        for child in module.children():
            walk(child)

    walk(root)
    root.__dict__["_reorderable"] = found
    return found


def reorder_modules(root: nn.Module, incremental_state, new_order: Tensor):
    """fairseq's ``reorder_incremental_state_scripting`` over ``reorderable_modules(root)``."""
    for module in reorderable_modules(root):
        if isinstance(module, _IncrementalRouting):
            result = module.reorder_incremental_state(incremental_state, new_order, walk_copies=True)
        else:
            result = module.reorder_incremental_state(incremental_state, new_order)
        if result is not None:
            incremental_state = result
    return incremental_state


def set_num_updates_once(root: nn.Module, num_updates: int) -> None:
    """fairseq's ``set_num_updates`` walks every module of the model at every update, and the
    encoder's walks its modules again: with one copy of a layer per language, the walk costs
    more than a small model's step. The same calls over a list of the modules that define it,
    made once (the encoder's own method only walks, so it is left out)."""
    from fairseq.models import FairseqEncoder

    found = root.__dict__.get("_scheduled")
    if found is None:
        found = [m for m in root.modules() if m is not root and hasattr(m, "set_num_updates")
                 and type(m).set_num_updates is not FairseqEncoder.set_num_updates]
        root.__dict__["_scheduled"] = found
    for module in found:
        module.set_num_updates(num_updates)


class _IncrementalRouting(FairseqIncrementalState):
    """Keeps each language copy's incremental state (attention caches holding that language's
    rows only) out of fairseq's batch-level reorder, and reorders it per language.

    A batch whose rows all have one language at the first decoding step keeps it (beam search
    reorders rows within a sentence and drops finished sentences): its copy then holds every row,
    so its caches stay where fairseq reorders them itself, and nothing is moved (``single``)."""

    def _prefixes(self, lang: int):
        cache = self.__dict__.setdefault("_prefix_cache", {})
        if lang not in cache:
            cache[lang] = {m._incremental_state_id for m in self.copies[lang].modules()
                           if isinstance(m, FairseqIncrementalState)}
        return cache[lang]

    def _stash_key(self, lang: int) -> str:
        return self._get_full_incremental_state_key(f"lang{lang}")

    def _restore(self, lang: int, incremental_state) -> None:
        incremental_state.update(incremental_state.get(self._stash_key(lang)) or {})

    def _stash(self, lang: int, incremental_state) -> None:
        prefixes = self._prefixes(lang)
        moved = {k: incremental_state.pop(k) for k in list(incremental_state) if k.split(".", 1)[0] in prefixes}
        incremental_state[self._stash_key(lang)] = moved

    def _check_layout(self, incremental_state, lang_ids: Tensor):
        """The layout of this decoding: {"lang_ids", "single": the one language or None}."""
        layout = self.get_incremental_state(incremental_state, "layout")
        if layout is None:
            langs = languages_present(lang_ids)
            layout = {"lang_ids": lang_ids, "single": langs[0] if len(langs) == 1 else None,
                      "grouped": len(langs) > 1 and self._grouped_eligible(lang_ids)}
        elif not _same_ids(layout["lang_ids"], lang_ids):
            raise RuntimeError(
                "language-specific decoder layer: the rows changed languages since the last decoding step "
                "without reorder_incremental_state (the encoder_out language ids must be reordered with the state)"
            )
        else:
            layout = {**layout, "lang_ids": lang_ids}
        self.set_incremental_state(incremental_state, "layout", layout)
        return layout

    def _grouped_eligible(self, lang_ids: Tensor) -> bool:
        return False

    def reorder_incremental_state(self, incremental_state, new_order: Tensor, walk_copies: bool = False):
        """``walk_copies``: called by ``reorder_modules``, which does not descend into the copies;
        fairseq's own walk (every module) reaches the copy of a one-language batch by itself."""
        layout = self.get_incremental_state(incremental_state, "layout")
        if layout is None:
            return incremental_state
        old = layout["lang_ids"]
        new = _reordered(old, new_order)
        if layout.get("grouped"):  # the stand-in's caches hold every row
            reorder_modules(self.__dict__["_stand_in"], incremental_state, new_order)
        elif layout["single"] is not None:  # the copy holds every row: fairseq's order is its order
            if walk_copies:
                reorder_modules(self.copies[layout["single"]], incremental_state, new_order)
        else:
            for lang in languages_present(old):
                if self._stash_key(lang) not in incremental_state:
                    continue
                position = old.eq(lang).long().cumsum(0) - 1  # row -> its row number among `lang`'s rows
                sub_order = position.index_select(0, new_order.masked_select(new.eq(lang)))
                self._restore(lang, incremental_state)
                reorder_modules(self.copies[lang], incremental_state, sub_order)
                self._stash(lang, incremental_state)
        self.set_incremental_state(incremental_state, "layout", {**layout, "lang_ids": new})
        return incremental_state


class LanguageSpecificDecoderLayer(_LanguageCopies, _IncrementalRouting):
    """One decoder layer per language (decoder LSLs; every layer of a separate decoder).

    At inference (eval mode, autograd off), a batch whose languages each form one block of rows
    (as the task decodes it) runs one stand-in of the layer over every row, each row through its
    own copy's linear and layer-norm weights (``grouped_copies``), instead of one copy per
    language present; ``grouped_inference = False`` runs the copies one by one."""

    grouped_inference = True

    def __init__(self, copies, languages, side):
        super().__init__(copies, languages, side)
        self.init_incremental_state()
        self.__dict__["_row_groups"] = RowGroups()

    def _grouped_eligible(self, lang_ids: Tensor) -> bool:
        if not self.grouped_inference or self.training or torch.is_grad_enabled():
            return False
        if language_grouping(lang_ids)[4] is None:  # languages interleaved: one gather per copy is cheaper
            return False
        if "_stand_in" not in self.__dict__:
            self.__dict__["_stand_in"] = grouped_stand_in(self.copies, self.__dict__["_row_groups"])
        return self.__dict__["_stand_in"] is not None

    def _grouped_forward(self, ids, x, encoder_out, encoder_padding_mask, incremental_state, self_attn_mask,
                         self_attn_padding_mask, need_attn, need_head_weights):
        groups = self.__dict__["_row_groups"]
        groups.ids = ids
        try:
            y, attn, _ = self.__dict__["_stand_in"](
                x, encoder_out, encoder_padding_mask, incremental_state, self_attn_mask=self_attn_mask,
                self_attn_padding_mask=self_attn_padding_mask, need_attn=need_attn, need_head_weights=need_head_weights)
        finally:
            groups.ids = None
        return y, attn, None

    def forward(self, x, encoder_out: Optional[Tensor] = None, encoder_padding_mask: Optional[Tensor] = None,
                incremental_state: Optional[Dict] = None, prev_self_attn_state=None, prev_attn_state=None,
                self_attn_mask: Optional[Tensor] = None, self_attn_padding_mask: Optional[Tensor] = None,
                need_attn: bool = False, need_head_weights: bool = False):
        if prev_self_attn_state is not None or prev_attn_state is not None:
            raise NotImplementedError("language-specific decoder layers do not take prev_self_attn_state/prev_attn_state")
        ids = self.lang_ids()
        if incremental_state is not None:
            layout = self._check_layout(incremental_state, ids)
            single, grouped = layout["single"], layout["grouped"]
        else:
            langs = languages_present(ids)
            single = langs[0] if len(langs) == 1 else None
            grouped = single is None and self._grouped_eligible(ids)
        if grouped:
            return self._grouped_forward(ids, x, encoder_out, encoder_padding_mask, incremental_state, self_attn_mask,
                                         self_attn_padding_mask, need_attn, need_head_weights)
        if single is not None:  # one language: its copy on the whole batch, no packing
            y, attn, _ = self.copies[single](
                x, encoder_out, encoder_padding_mask, incremental_state, self_attn_mask=self_attn_mask,
                self_attn_padding_mask=self_attn_padding_mask, need_attn=need_attn, need_head_weights=need_head_weights)
            return y, attn, None
        B = x.size(1)
        attn_meta = {}

        def run(lang, rows):
            whole = rows.numel() == B
            copy = self.copies[lang]
            if incremental_state is not None:
                self._restore(lang, incremental_state)
            if not whole and _cached_kv(getattr(copy, "encoder_attn", None), incremental_state):
                enc, enc_mask = _stand_in(encoder_out, rows.numel()), None  # the cached mask is used
            else:
                enc, enc_mask = _take(encoder_out, rows, 1, whole), _take(encoder_padding_mask, rows, 0, whole)
            y, attn, _ = copy(
                _take(x, rows, 1, whole), enc, enc_mask, incremental_state,
                self_attn_mask=self_attn_mask, self_attn_padding_mask=_take(self_attn_padding_mask, rows, 0, whole),
                need_attn=need_attn, need_head_weights=need_head_weights,
            )
            if incremental_state is not None:
                self._stash(lang, incremental_state)
            if attn is not None:
                a = attn.transpose(0, 1) if need_head_weights else attn
                attn_meta.update(shape=tuple(a.shape[1:]), dtype=attn.dtype)
            return _pack(y, attn, need_head_weights)

        packed = _route_rows(ids, run)
        return (*_unpack(packed, x.shape, attn_meta.get("shape"), need_head_weights, attn_meta.get("dtype")), None)


class LanguageSpecificAttention(_LanguageCopies, _IncrementalRouting):
    """Per-language copies of a ``MultiheadAttention`` (LS-ATTENTION), same call signature."""

    def __init__(self, copies, languages, side):
        super().__init__(copies, languages, side)
        self.init_incremental_state()
        first = copies[0]
        self.num_heads, self.head_dim, self.embed_dim = first.num_heads, first.head_dim, first.embed_dim

    def _get_input_buffer(self, incremental_state):
        return {}  # the caches live in the copies (only read by cross_self_attention, unsupported)

    def forward(self, query, key: Optional[Tensor], value: Optional[Tensor], key_padding_mask: Optional[Tensor] = None,
                incremental_state: Optional[Dict] = None, need_weights: bool = True, static_kv: bool = False,
                attn_mask: Optional[Tensor] = None, before_softmax: bool = False, need_head_weights: bool = False):
        if before_softmax:
            raise NotImplementedError("language-specific attention does not support before_softmax")
        ids = self.lang_ids()
        single = None
        if incremental_state is not None:
            single = self._check_layout(incremental_state, ids)["single"]
        else:
            langs = languages_present(ids)
            single = langs[0] if len(langs) == 1 else None
        if single is not None:  # one language: its copy on the whole batch, no packing
            return self.copies[single](
                query=query, key=key, value=value, key_padding_mask=key_padding_mask, incremental_state=incremental_state,
                need_weights=need_weights, static_kv=static_kv, attn_mask=attn_mask, need_head_weights=need_head_weights)
        B = query.size(1)
        attn_meta = {}

        def run(lang, rows):
            whole = rows.numel() == B
            copy = self.copies[lang]
            if incremental_state is not None:
                self._restore(lang, incremental_state)
            if static_kv and not whole and _cached_kv(copy, incremental_state):
                k = v = _stand_in(key, rows.numel())
                kpm = None  # the cached keys' padding mask is used
            else:
                k, v = _take(key, rows, 1, whole), _take(value, rows, 1, whole)
                kpm = _take(key_padding_mask, rows, 0, whole)
            y, attn = copy(
                query=_take(query, rows, 1, whole), key=k, value=v,
                key_padding_mask=kpm, incremental_state=incremental_state,
                need_weights=need_weights, static_kv=static_kv, attn_mask=attn_mask, need_head_weights=need_head_weights,
            )
            if incremental_state is not None:
                self._stash(lang, incremental_state)
            if attn is not None:
                a = attn.transpose(0, 1) if need_head_weights else attn
                attn_meta.update(shape=tuple(a.shape[1:]), dtype=attn.dtype)
            return _pack(y, attn, need_head_weights)

        packed = _route_rows(ids, run)
        return _unpack(packed, (query.size(0), B, self.embed_dim), attn_meta.get("shape"), need_head_weights,
                       attn_meta.get("dtype"))


# --- LS-FFN / LS-ATTENTION: a layer whose FFN or attention sub-layer is language-specific -----

def _layer_norms(dim, cfg, n):
    return [LayerNorm(dim, export=cfg.export) for _ in range(n)]


class _PerLanguageSublayers:
    """What the encoder and decoder layers below share: one copy per language of the sub-layers of
    ``component``, built through fairseq's ``build_*`` hooks (which fairseq's ``__init__`` calls, so the
    routing is set before it)."""

    def _set_routing(self, languages: LanguageIds, side: str, num_langs: int, component: str):
        if component not in ("ffn", "attention"):
            raise ValueError(f"component must be 'ffn' or 'attention', got {component!r}")
        self.languages, self.side, self.num_langs, self.component = languages, side, num_langs, component

    def _per_lang_norm(self, cfg):
        return LanguageSpecificModule(_layer_norms(self.embed_dim, cfg, self.num_langs), self.languages, self.side)

    def _per_lang_if(self, component, build, wrapper=LanguageSpecificModule):
        """``build()`` once per language in ``wrapper`` when this layer's component is ``component``, else once."""
        if self.component != component:
            return build()
        return wrapper([build() for _ in range(self.num_langs)], self.languages, self.side)

    def build_fc1(self, *args):
        parent = super().build_fc1
        return self._per_lang_if("ffn", lambda: parent(*args))

    def build_fc2(self, *args):
        parent = super().build_fc2
        return self._per_lang_if("ffn", lambda: parent(*args))


class PartialLanguageSpecificEncoderLayer(_PerLanguageSublayers, TransformerEncoderLayerBase):
    """An encoder layer whose FFN block (``component="ffn"``: fc1, fc2, final_layer_norm) or
    self-attention block (``"attention"``: self_attn, self_attn_layer_norm) has one copy per
    language; the rest is shared. Built through fairseq's ``build_fc1/fc2/self_attention`` hooks,
    so fairseq's forward runs unchanged."""

    def __init__(self, cfg, languages: LanguageIds, side: str, num_langs: int, component: str):
        self._set_routing(languages, side, num_langs, component)
        super().__init__(cfg)
        if component == "ffn":
            self.final_layer_norm = self._per_lang_norm(cfg)
        else:
            self.self_attn_layer_norm = self._per_lang_norm(cfg)

    def build_self_attention(self, embed_dim, cfg):
        parent = super().build_self_attention
        return self._per_lang_if("attention", lambda: parent(embed_dim, cfg), LanguageSpecificAttention)


class PartialLanguageSpecificDecoderLayer(_PerLanguageSublayers, TransformerDecoderLayerBase):
    """Decoder counterpart: ``"ffn"`` makes fc1, fc2, final_layer_norm language-specific;
    ``"attention"`` makes self-attention and encoder attention (with their layer norms)
    language-specific."""

    def __init__(self, cfg, languages: LanguageIds, side: str, num_langs: int, component: str,
                 no_encoder_attn=False):
        self._set_routing(languages, side, num_langs, component)
        if cfg.cross_self_attention:
            raise ValueError("language-specific decoder sub-layers do not support --cross-self-attention")
        super().__init__(cfg, no_encoder_attn=no_encoder_attn)
        if component == "ffn":
            self.final_layer_norm = self._per_lang_norm(cfg)
        else:
            self.self_attn_layer_norm = self._per_lang_norm(cfg)
            if self.encoder_attn_layer_norm is not None:
                self.encoder_attn_layer_norm = self._per_lang_norm(cfg)

    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        parent = super().build_self_attention
        return self._per_lang_if("attention", lambda: parent(embed_dim, cfg, add_bias_kv=add_bias_kv,
                                                             add_zero_attn=add_zero_attn), LanguageSpecificAttention)

    def build_encoder_attention(self, embed_dim, cfg):
        parent = super().build_encoder_attention
        return self._per_lang_if("attention", lambda: parent(embed_dim, cfg), LanguageSpecificAttention)


# --- search mode (Eq. 1) ---------------------------------------------------------------------

class MixedEncoderLayer(nn.Module, AuxiliaryReporter):
    """Eq. 1: h_i = w_shared * layer_shared(h) + w_src * LSL(h, src) + w_tgt * LSL(h, tgt), with
    (w_shared, w_src, w_tgt) = softmax(mix_logits). ``mix_logits`` start at zero (uniform
    weights); the weights are reported as statistics ``lsl_mix_<layer>_<kind>``."""

    def __init__(self, shared: nn.Module, specific: LanguageSpecificEncoderLayer, layer_number: int):
        super().__init__()
        self.shared = shared
        self.specific = specific
        self.layer_number = layer_number  # 1-based, as in the paper
        self.mix_logits = nn.Parameter(torch.empty(len(MIX_KINDS)))
        nn.init.zeros_(self.mix_logits)

    def mixing_weights(self) -> Tensor:
        return torch.softmax(self.mix_logits.float(), dim=0)

    def forward(self, x: Tensor, encoder_padding_mask: Optional[Tensor] = None, attn_mask: Optional[Tensor] = None):
        w = self.mixing_weights()
        for kind, value in zip(MIX_KINDS, w.detach()):
            self.report_stat(f"lsl_mix_{self.layer_number:02d}_{kind}", value)
        w = w.to(x.dtype)
        shared = self.shared(x, encoder_padding_mask=encoder_padding_mask, attn_mask=attn_mask)
        src = self.specific(x, encoder_padding_mask, attn_mask, side="src")
        tgt = self.specific(x, encoder_padding_mask, attn_mask, side="tgt")
        return w[0] * shared + w[1] * src + w[2] * tgt

    def upgrade_state_dict_named(self, state_dict, name):
        if hasattr(self.shared, "upgrade_state_dict_named"):
            self.shared.upgrade_state_dict_named(state_dict, f"{name}.shared")
        self.specific.upgrade_state_dict_named(state_dict, f"{name}.specific")
