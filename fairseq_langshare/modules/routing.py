"""Routing by language: the one mechanism every language-specific component uses.

A batch mixes language pairs, so the language is a property of each *sentence*.
``route_by_language`` groups the rows of a tensor by language id (one gather), calls a
per-language function once per language present, and puts the rows back (one scatter); a batch
whose languages each form one block of rows (the task decodes batches grouped by direction) is
sliced instead, with one concatenation. Its cost grows with the tokens in the batch, not with the
size of the inventory.

``LanguageIds`` carries the per-sentence ids of the current forward call from an encoder or
decoder to the layers it built. It is bound for the duration of one forward call only
(``with ids.bind(...)``) from the ids the task put in ``net_input`` or that travel in
``encoder_out``; nothing persists between calls, so there is no per-batch global state.
``LanguageGroupIds`` is a view of it that answers group ids (e.g. language families) instead,
so the same per-language containers can hold one copy per group.
"""

import collections
import itertools
import threading
from contextlib import ExitStack, contextmanager
from typing import Callable, Optional

import torch
from torch import Tensor
from torch.utils.weak import WeakIdKeyDictionary

__all__ = ["route_by_language", "languages_present", "present_ids", "language_grouping", "all_equal",
           "host_ids", "note_host_ids", "new_batch", "reorder_ids", "known_equal", "LanguageIds", "LanguageGroupIds",
           "MissingLanguageIds", "LastResult", "bound_languages", "rebound"]


class MissingLanguageIds(RuntimeError):
    pass


def route_by_language(
    x: Tensor,
    lang_ids: Tensor,
    fn: Callable[[int, Tensor, Optional[Tensor]], Tensor],
    padding_mask: Optional[Tensor] = None,
    batch_dim: int = 1,
) -> Tensor:
    """Apply ``fn(lang, x_lang, padding_mask_lang)`` to the rows of ``x`` of each language.

    Args:
        x: tensor whose ``batch_dim`` indexes sentences, e.g. (T, B, C) with ``batch_dim=1``.
        lang_ids: LongTensor (B,), the language of every sentence.
        fn: called once per language present with that language's rows (in their original
            relative order) and the matching rows of ``padding_mask`` (B, T); it must return a
            tensor with the same batch dimension size; other dimensions may change.
        padding_mask: optional (B, T) mask, True at padding.
    Returns:
        the per-language outputs reassembled in the original row order.
    """
    if lang_ids.dim() != 1 or lang_ids.numel() != x.size(batch_dim):
        raise ValueError(
            f"route_by_language: lang_ids must have shape ({x.size(batch_dim)},) to match the "
            f"batch dimension {batch_dim} of x, got {tuple(lang_ids.shape)}"
        )
    langs, counts, order, inverse, runs = language_grouping(lang_ids)
    if len(langs) == 1:  # single-language batch: no gather, no scatter
        return fn(langs[0], x, padding_mask)
    if runs is not None:  # each language's rows are one block (a batch grouped by language): slice, no scatter
        outs, start = [], 0
        for lang, n in zip(*runs):
            part = x.narrow(batch_dim, start, n)
            m = padding_mask.narrow(0, start, n) if padding_mask is not None else None
            outs.append(fn(lang, part if part.is_contiguous() else part.contiguous(), m))
            start += n
        return torch.cat(outs, dim=batch_dim)
    xs = x.index_select(batch_dim, order)
    masks = padding_mask.index_select(0, order) if padding_mask is not None else None
    outs, start = [], 0
    for lang, n in zip(langs, counts):
        m = masks.narrow(0, start, n) if masks is not None else None
        outs.append(fn(lang, xs.narrow(batch_dim, start, n), m))
        start += n
    return torch.cat(outs, dim=batch_dim).index_select(batch_dim, inverse)


class _Batch(threading.local):
    number = 0  # the batch in progress in this thread (``new_batch``)


_BATCH = _Batch()
_BATCH_NUMBERS = itertools.count(1)  # unique across threads


def new_batch() -> None:
    """A new batch enters this thread (the task's ``ensure_lang_ids``): what the routing knows of earlier
    batches' ids (their host copies, their groupings) is dropped. Their tensors may have been changed since
    where the version counter does not show (a write through ``.data`` or numpy, by a script that runs a
    batch again with other ids); knowledge kept for a tensor's whole life would route its rows by the old
    values. Per thread: a batch decoded in another thread (the hub interface serving requests) leaves this
    thread's beam search its host copies."""
    _BATCH.number = next(_BATCH_NUMBERS)


class LastResult:
    """A one-entry cache of a value computed from tensors. Every layer of a forward call asks
    about the same ids tensor, so the value is computed once per call. The entry holds while the
    very same tensor objects come back unchanged (identity and version counter: an in-place
    change, e.g. a state-dict load into a buffer, invalidates it) and, unless ``across_batches``,
    within one batch (``new_batch``); inference-mode tensors have no version counter and are never
    cached."""

    __slots__ = ("_key", "_value", "_batch", "_across_batches")

    def __init__(self, across_batches: bool = False):
        self._key, self._value, self._batch, self._across_batches = (), None, None, across_batches

    def get(self, tensors, compute, *args):
        """The value of ``compute(*args)`` for ``tensors``, cached."""
        key = self._key
        if len(key) == len(tensors) and (self._across_batches or self._batch == _BATCH.number):
            for t, (cached, version) in zip(tensors, key):
                if t is not cached or t._version != version:
                    break
            else:
                return self._value
        value = compute(*args)
        if any(t.is_inference() for t in tensors):
            self._key, self._value = (), None
        else:
            self._key, self._value, self._batch = tuple((t, t._version) for t in tensors), value, _BATCH.number
        return value


class _TwoEntries:
    """Two ``LastResult`` entries: an encoder with source- and target-indexed layers alternates
    between two ids tensors within one call."""

    def __init__(self):
        self.entries, self.last = [LastResult(), LastResult()], 0

    def get(self, lang_ids: Tensor, compute):
        for i, entry in enumerate(self.entries):
            key = entry._key
            if key and key[0][0] is lang_ids:
                self.last = i
                return entry.get((lang_ids,), compute, lang_ids)
        self.last ^= 1  # replace the entry used less recently
        return self.entries[self.last].get((lang_ids,), compute, lang_ids)


_GROUPING = _TwoEntries()


def language_grouping(lang_ids: Tensor):
    """(languages present, their row counts, rows sorted by language, inverse permutation, runs):
    ``runs`` = (languages, row counts) in row order when every language's rows are one block (the
    batch is grouped by language: ``order`` and ``inverse`` are then None), else None. Cached per
    ids tensor: one device read per forward call and side, however many layers ask."""
    return _GROUPING.get(lang_ids, _compute_grouping)


def languages_present(lang_ids: Tensor) -> list:
    """The sorted language ids present in ``lang_ids`` (the routing's own grouping: cached per
    ids tensor, so asking costs no extra device sync)."""
    return language_grouping(lang_ids)[0]


_PRESENT = _TwoEntries()


def present_ids(lang_ids: Tensor) -> Tensor:
    """``languages_present`` as a LongTensor on ``lang_ids``' device: copied to the device once per
    ids tensor, not once per layer (on a GPU each copy from host memory waits for the device)."""
    return _PRESENT.get(lang_ids, _present_on_device)


def _present_on_device(ids: Tensor) -> Tensor:
    return _on_device_of(ids, languages_present(ids))


def _on_device_of(ids: Tensor, values: list) -> Tensor:
    """``values`` as a LongTensor on ``ids``' device; from pinned memory the copy does not wait for it."""
    tensor = torch.tensor(values, dtype=torch.long)
    return tensor.pin_memory().to(ids.device, non_blocking=True) if ids.is_cuda else tensor.to(ids.device)


def all_equal(*pairs) -> bool:
    """Whether the two tensors of every pair are equal (``torch.equal``: shape, dtype and device
    compared first, then the values), with one device read for all the pairs."""
    if any(a.shape != b.shape or a.dtype != b.dtype or a.device != b.device for a, b in pairs):
        return False
    if not pairs:
        return True
    device = pairs[0][0].device
    return bool(torch.stack([torch.eq(a, b).all().to(device) for a, b in pairs]).all())


# ids tensor -> (its values as a list, the tensor's version then, the batch). Kept beside the tensor, not in
# its __dict__, which a copy (deepcopy, pickle, torch.save) carries along with a version counter of its own
_HOST_COPIES = WeakIdKeyDictionary()


def _host_ids(lang_ids: Tensor) -> Optional[list]:
    """The values of ``lang_ids`` when they are known on the host: read once already (``host_ids``),
    or reordered (``reorder_ids``) from ids of one language, in this batch, and not changed in place since."""
    copy = _HOST_COPIES.get(lang_ids)
    if copy is None or lang_ids.is_inference() or copy[1:] != (lang_ids._version, _BATCH.number):
        return None
    return copy[0]


def _keep_host_copy(lang_ids: Tensor, values: list) -> None:
    if not lang_ids.is_inference():  # an inference tensor has no version counter to guard the copy
        _HOST_COPIES[lang_ids] = (values, lang_ids._version, _BATCH.number)


STALE_BATCH_IDS = ("the batch's language ids differ from the lists its collater kept: a batch whose ids are "
                   "changed after collation must drop its lang_ids_on_host lists")


def note_host_ids(lang_ids: Tensor, values: list, mismatch: str = STALE_BATCH_IDS) -> None:
    """Tell the routing the values of ``lang_ids``, known on the host where its batch was built (the
    task, once the batch is on the device): grouping its rows then reads nothing from the device.
    They are checked against the tensor without waiting for the device (``torch._assert_async``, with
    the message ``mismatch``: on a GPU a tensor that differs stops the run at its next synchronisation)."""
    if len(values) != lang_ids.numel():
        raise ValueError(f"{len(values)} language ids on the host for a tensor of {lang_ids.numel()}")
    if lang_ids.device.type not in ("cpu", "cuda"):  # no asynchronous check there: the ids are read when grouped
        return
    torch._assert_async((_on_device_of(lang_ids, values) == lang_ids).all(), mismatch)
    _keep_host_copy(lang_ids, list(values))


def host_ids(lang_ids: Tensor) -> list:
    """``lang_ids.tolist()``, read from the device once per ids tensor (and kept with it)."""
    values = _host_ids(lang_ids)
    if values is None:
        values = lang_ids.tolist()
        _keep_host_copy(lang_ids, values)
    return values


def reorder_ids(lang_ids: Tensor, new_order: Tensor) -> Tensor:
    """``lang_ids.index_select(0, new_order)``, for beam search's reorders. Rows taken from ids of
    one language have that language too, so the result's values are known without a device read:
    a batch of one direction (as the task decodes a test set) routes every decoding step without
    reading the device."""
    new = lang_ids.index_select(0, new_order)
    values = _host_ids(lang_ids)
    if values and values.count(values[0]) == len(values):
        _keep_host_copy(new, [values[0]] * new.numel())
    return new


def known_equal(a: Tensor, b: Tensor) -> bool:
    """True when ``a`` and ``b`` are known to hold the same ids without a device read; False means
    "not known", not "different"."""
    if a is b:
        return True
    values = _host_ids(a)
    return values is not None and a.shape == b.shape and a.device == b.device and _host_ids(b) == values


def _compute_grouping(lang_ids: Tensor):
    ids = host_ids(lang_ids)  # the one device read of a call's ids: everything below is counted on the host
    runs = [(lang, len(list(rows))) for lang, rows in itertools.groupby(ids)]
    counts = collections.Counter(ids)
    present = sorted(counts)
    sizes = [counts[lang] for lang in present]
    if len(present) == 1:
        return present, sizes, None, None, None
    if len(runs) == len(present):
        return present, sizes, None, None, ([r[0] for r in runs], [r[1] for r in runs])
    order = torch.argsort(lang_ids, stable=True)
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(order.numel(), device=order.device)
    return present, sizes, order, inverse, None


class LanguageIds:
    """Per-sentence source/target language ids of the forward call in progress.

    An encoder (or decoder) creates one and hands it to the layers it builds; its ``forward``
    binds the ids of the current batch, layers read them with ``get("src"|"tgt")``.
    """

    SIDES = ("src", "tgt")

    def __init__(self):
        self._bound = None

    @contextmanager
    def bind(self, src: Optional[Tensor], tgt: Optional[Tensor], padding_mask: Optional[Tensor] = None):
        """``padding_mask`` (B, T): padding of the token stream this encoder/decoder processes."""
        # whether anything is padded is asked lazily (``padding_mask``), by the components that
        # need it, once per call and length: binding costs no device sync
        with self._restored({"src": src, "tgt": tgt, "padding_mask": padding_mask, "masks": {}}):
            yield self

    @contextmanager
    def _restored(self, bound):
        previous = self._bound
        self._bound = bound
        _BOUND.append(self)
        try:
            yield
        finally:
            _BOUND.remove(self)
            self._bound = previous

    def padding_mask(self, length: int) -> Optional[Tensor]:
        """Padding of the last ``length`` positions of the stream (incremental decoding
        processes only the newest token), or None when nothing is padded."""
        bound = self._bound
        mask = None if bound is None else bound["padding_mask"]
        if mask is None:
            return None
        masks = bound["masks"]
        if length not in masks:
            part = mask if length == mask.size(1) else mask[:, -length:]
            masks[length] = part if part.any() else None  # one check per call and length
        return masks[length]

    def raw_padding_mask(self, length: int) -> Optional[Tensor]:
        """``padding_mask`` without asking whether anything is padded (no device sync): the mask
        of the last ``length`` positions, possibly all False, or None when none was bound."""
        mask = None if self._bound is None else self._bound["padding_mask"]
        if mask is None or length == mask.size(1):
            return mask
        return mask[:, -length:]

    def get(self, side: str) -> Tensor:
        if side not in self.SIDES:
            raise ValueError(f"language side must be 'src' or 'tgt', got {side!r}")
        ids = None if self._bound is None else self._bound[side]
        if ids is None:
            raise MissingLanguageIds(
                f"no {side}_lang_id for this batch: language-specific components need per-sentence "
                "language ids; train and decode with --task multilingual_langshare"
            )
        return ids


_BOUND = []  # the LanguageIds bound now (an encoder's and, inside the decoder's call, the decoder's)


def bound_languages() -> list:
    """What every ``LanguageIds`` bound now holds, for ``rebound``: a layer recomputed in the backward
    pass (``activation_checkpointing``) runs outside the forward call that bound its ids."""
    return [(ids, ids._bound) for ids in _BOUND]


@contextmanager
def rebound(saved: list):
    """Every ``LanguageIds`` of ``saved`` (``bound_languages()``) bound again as it was then."""
    with ExitStack() as stack:
        for ids, bound in saved:
            stack.enter_context(ids._restored(bound))
        yield


class LanguageGroupIds:
    """A view of ``LanguageIds`` that answers *group* ids: ``get(side)`` maps every sentence's
    language id through ``table(side)`` (LongTensor indexed by language id, holding group ids).

    A per-language container built with one copy per group and this view routes each sentence
    to its group's copy (one encoder per source-language family, ...). ``table`` is called at
    every forward call, so it can return a module buffer that follows ``.to(device)`` and
    checkpoint loading. Binding, padding and missing-id errors are the underlying ``LanguageIds``'.
    """

    SIDES = LanguageIds.SIDES

    def __init__(self, languages: LanguageIds, table: Callable[[str], Tensor]):
        self.languages = languages
        self.table = table
        self._last = LastResult()  # every layer of a call maps the same ids
        self._host_table = LastResult(across_batches=True)  # the table read once (per table tensor and change)

    def bind(self, *args, **kwargs):
        return self.languages.bind(*args, **kwargs)

    def padding_mask(self, length: int) -> Optional[Tensor]:
        return self.languages.padding_mask(length)

    def raw_padding_mask(self, length: int) -> Optional[Tensor]:
        return self.languages.raw_padding_mask(length)

    def get(self, side: str) -> Tensor:
        ids = self.languages.get(side)
        table = self.table(side)
        return self._last.get((ids, table), self._groups, ids, table)

    def _groups(self, ids: Tensor, table: Tensor) -> Tensor:
        """The group of every sentence. The ids are read once (``host_ids``: no read at all for the
        reordered ids of a one-language beam search) and the table once per table tensor; the
        groups' values are then known on the host, so routing them reads nothing more."""
        values = host_ids(ids)
        groups_of = self._host_table.get((table,), table.tolist)
        outside = [lang for lang in values if not 0 <= lang < len(groups_of)]
        if outside:
            raise IndexError(
                f"language id {outside[0]} has no group: the group table covers {len(groups_of)} languages "
                f"(the --langs inventory the model was built with); decode with the same --langs"
                if groups_of else f"language id {outside[0]} has no group: the group table is empty")
        groups = table.to(ids.device).index_select(0, ids)
        # checked on the device as the ids are: a table changed where its version does not show (through
        # ``.data``, a broadcast of buffers) stops the run instead of routing rows by the old one
        note_host_ids(groups, [groups_of[lang] for lang in values],
                      "the group table changed where its version does not show (a write through .data, a "
                      "broadcast of buffers): change it in place, as loading a checkpoint does")
        return groups
