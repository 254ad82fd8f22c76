import copy
import pickle
import threading

import pytest
import torch

from fairseq_langshare.modules.routing import (LanguageIds, MissingLanguageIds, known_equal, new_batch, note_host_ids,
                                              reorder_ids, route_by_language)


def per_language_affine(num_langs, dim, seed=0):
    g = torch.Generator().manual_seed(seed)
    weights = torch.randn(num_langs, dim, dim, generator=g)
    return weights


def test_routes_every_row_through_its_own_language():
    T, B, C, L = 5, 7, 4, 6
    x = torch.randn(T, B, C)
    lang = torch.tensor([3, 0, 3, 5, 0, 3, 1])
    W = per_language_affine(L, C)
    y = route_by_language(x, lang, lambda l, xl, _: xl @ W[l])
    expected = torch.stack([x[:, b] @ W[lang[b]] for b in range(B)], dim=1)
    torch.testing.assert_close(y, expected)


def test_one_call_per_language_present_whatever_the_inventory():
    x = torch.randn(3, 6, 2)
    lang = torch.tensor([900, 2, 900, 2, 2, 41])  # ids from a large inventory
    calls = []

    def fn(l, xl, mask):
        calls.append((l, xl.size(1)))
        return xl * (l + 1)

    y = route_by_language(x, lang, fn)
    assert sorted(calls) == [(2, 3), (41, 1), (900, 2)]
    torch.testing.assert_close(y, x * (lang + 1).view(1, -1, 1).float())


def test_padding_mask_rows_follow_their_sentences():
    T, B = 4, 5
    x = torch.randn(T, B, 3)
    mask = torch.zeros(B, T, dtype=torch.bool)
    mask[1, :2] = True
    mask[4, :3] = True
    lang = torch.tensor([1, 0, 1, 0, 1])

    def masked_mean(_, xl, ml):
        keep = (~ml).t().unsqueeze(-1).float()
        return ((xl * keep).sum(0) / keep.sum(0)).unsqueeze(0)

    y = route_by_language(x, lang, masked_mean, padding_mask=mask)
    for b in range(B):
        keep = ~mask[b]
        torch.testing.assert_close(y[0, b], x[keep, b].mean(0))


def test_output_dimension_may_change_and_gradients_flow_only_to_present_languages():
    x = torch.randn(2, 4, 3)
    lang = torch.tensor([0, 2, 0, 2])
    W = torch.nn.Parameter(torch.randn(4, 3, 5))
    y = route_by_language(x, lang, lambda l, xl, _: xl @ W[l])
    assert y.shape == (2, 4, 5)
    y.sum().backward()
    assert W.grad[1].abs().sum() == 0 and W.grad[3].abs().sum() == 0
    assert W.grad[0].abs().sum() > 0 and W.grad[2].abs().sum() > 0


def test_shape_mismatch_is_a_clear_error():
    with pytest.raises(ValueError, match="lang_ids must have shape"):
        route_by_language(torch.randn(2, 3, 4), torch.tensor([0, 1]), lambda l, x, m: x)


def test_language_ids_are_bound_for_one_call_only():
    ids = LanguageIds()
    src = torch.tensor([1, 2])
    with ids.bind(src=src, tgt=None):
        assert ids.get("src") is src
        with pytest.raises(MissingLanguageIds, match="multilingual_langshare"):
            ids.get("tgt")
    with pytest.raises(MissingLanguageIds):
        ids.get("src")


def test_inventory_remaps_a_reorder_by_code_and_refuses_other_sets():
    from fairseq_langshare.languages import LanguageInventory, LanguageInventoryMismatch

    inv = LanguageInventory(["yy", "en", "xx"])
    inv.adopt(["en", "xx", "yy"])
    assert [inv.id(c) for c in ("en", "xx", "yy")] == [0, 1, 2]
    with pytest.raises(LanguageInventoryMismatch, match="pass --langs en,xx,yy,zz"):
        LanguageInventory(["yy", "en", "xx"]).adopt(["en", "xx", "yy", "zz"])
    fixed = LanguageInventory(["yy", "en", "xx"], order_fixed_by="tokens are numbered in order")
    with pytest.raises(LanguageInventoryMismatch, match="tokens are numbered in order; pass --langs en,xx,yy"):
        fixed.adopt(["en", "xx", "yy"])
    with pytest.raises(KeyError, match="unknown language 'zz'"):
        inv.id("zz")
    with pytest.raises(ValueError, match="more than once"):
        LanguageInventory(["en", "en"])


def test_grouping_cache_follows_the_ids_tensor_and_its_changes():
    x = torch.randn(2, 3, 4)
    lang = torch.tensor([0, 1, 0])
    double = lambda l, xl, _: xl * (l + 1)
    torch.testing.assert_close(route_by_language(x, lang, double), x * torch.tensor([1.0, 2.0, 1.0]).view(1, 3, 1))
    lang[1] = 0  # in-place change: same object, new version
    torch.testing.assert_close(route_by_language(x, lang, double), x)
    other = torch.tensor([1, 1, 0])  # another tensor
    torch.testing.assert_close(route_by_language(x, other, double), x * torch.tensor([2.0, 2.0, 1.0]).view(1, 3, 1))


def test_reordered_ids_of_one_language_are_known_and_an_in_place_change_is_seen():
    """``reorder_ids`` (beam search's reorder) knows the values of ids taken from one language's
    without reading them; what it knows must never outlive a change to the tensor."""
    x = torch.randn(2, 4, 3)
    double = lambda l, xl, _: xl * (l + 1)  # noqa: E731
    lang = torch.tensor([2, 2])
    torch.testing.assert_close(route_by_language(x[:, :2], lang, double), x[:, :2] * 3)  # read once: one language
    beams = reorder_ids(lang, torch.tensor([0, 0, 1, 1]))
    assert known_equal(beams, torch.tensor([2, 2, 2, 2])) is False, "a tensor never read is not known"
    assert known_equal(beams, reorder_ids(lang, torch.tensor([1, 0, 1, 0])))
    torch.testing.assert_close(route_by_language(x, beams, double), x * 3)
    beams[1] = 0  # in place: the values kept on the host no longer hold
    expected = x * torch.tensor([3.0, 1.0, 3.0, 3.0]).view(1, 4, 1)
    torch.testing.assert_close(route_by_language(x, beams, double), expected)
    assert not known_equal(beams, reorder_ids(lang, torch.tensor([0, 0, 1, 1])))

    # a copy starts a version counter of its own (at 1 after pickle, deepcopy or torch.load): values kept
    # for a tensor at version 1 and gone stale must not pass to its copies
    ids = pickle.loads(pickle.dumps(torch.tensor([2, 2, 2, 2])))
    torch.testing.assert_close(route_by_language(x, ids, double), x * 3)  # kept at version 1
    ids[1] = 0
    for copied in (copy.deepcopy(ids), pickle.loads(pickle.dumps(ids))):
        torch.testing.assert_close(route_by_language(x, copied, double), expected)

    mixed = torch.tensor([0, 1])
    route_by_language(x[:, :2], mixed, double)  # read: two languages
    swapped = reorder_ids(mixed, torch.tensor([1, 1, 0, 0]))  # what a reorder of two languages gives is not known
    torch.testing.assert_close(route_by_language(x, swapped, double), x * torch.tensor([2.0, 2.0, 1.0, 1.0]).view(1, 4, 1))


def test_routing_under_inference_mode():
    x = torch.randn(2, 3, 4)
    with torch.inference_mode():
        lang = torch.tensor([0, 1, 0])  # an inference tensor: no version counter, never cached
        y = route_by_language(x, lang, lambda l, xl, _: xl * (l + 1))
    torch.testing.assert_close(y, x * torch.tensor([1.0, 2.0, 1.0]).view(1, 3, 1))


def test_models_loaded_together_must_share_one_order():
    from fairseq_langshare.languages import LanguageInventory, LanguageInventoryMismatch

    inv = LanguageInventory(["de", "en", "fr"])
    inv.adopt(["de", "en", "fr"], where="checkpoint a.pt")
    with pytest.raises(LanguageInventoryMismatch, match="already loaded checkpoint a.pt"):
        inv.adopt(["en", "de", "fr"], where="checkpoint b.pt")
    assert inv.langs == ["de", "en", "fr"]


class _CountCalls(torch.overrides.TorchFunctionMode):
    def __init__(self, *names):
        super().__init__()
        self.names, self.calls = names, []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in self.names:
            self.calls.append(func.__name__)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("batch_dim", [0, 1])
def test_rows_grouped_by_language_are_sliced_not_gathered(batch_dim):
    """A batch whose languages each form one block (as the task's inference orders it) routes with
    slices and one concatenation: no gather, no scatter; the result is the per-row formula's."""
    W = per_language_affine(6, 4)
    lang = torch.tensor([5, 5, 0, 0, 0, 3])  # blocks, not sorted
    x = torch.randn(3, 6, 4) if batch_dim == 1 else torch.randn(6, 4)
    counter = _CountCalls("index_select", "index_copy", "index_copy_")
    with counter:
        y = route_by_language(x, lang, lambda l, xl, _: xl @ W[l], batch_dim=batch_dim)
    assert counter.calls == []
    rows = [x.select(batch_dim, b) @ W[lang[b]] for b in range(6)]
    torch.testing.assert_close(y, torch.stack(rows, dim=batch_dim))
    interleaved = torch.tensor([5, 0, 5, 0, 3, 0])  # the same languages interleaved: gathered
    with counter:
        route_by_language(x, interleaved, lambda l, xl, _: xl @ W[l], batch_dim=batch_dim)
    assert "index_select" in counter.calls


def test_a_batch_in_another_thread_leaves_this_threads_host_copies_alone():
    """The hub interface may serve requests from several threads: a batch entering one thread drops what the
    routing knew of that thread's earlier batches only (was: of every thread's, costing the others a device
    read per forward call), while a batch entering this thread drops this thread's."""
    ids, other = torch.tensor([1, 1, 2]), torch.tensor([1, 1, 2])
    new_batch()
    note_host_ids(ids, [1, 1, 2])
    note_host_ids(other, [1, 1, 2])
    thread = threading.Thread(target=new_batch)
    thread.start()
    thread.join()
    assert known_equal(ids, other)
    new_batch()
    assert not known_equal(ids, other)
