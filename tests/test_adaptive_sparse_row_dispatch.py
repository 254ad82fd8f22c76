"""Adaptive layer sparsity's per-row dispatch at inference (issue 18, Deliver 2): in a batch whose
languages keep different layers, each layer runs on the rows that keep it only, and every row's
output (logits, incremental decoding, beam-search translation) is the union path's and its own."""

import pytest
import torch

from fairseq_langshare.models.adaptive_sparse_transformer import SparseLayerMixin
from fairseq_langshare.modules.scaled_logits import set_scaled_value
from test_adaptive_sparse import EN, XX, YY, build, set_distinct_logits
from test_language_aware_model import (
    assert_incremental_equals_full,
    assert_reordered_decoding_equals_union,
    assert_row_dispatch_equals_union,
    collate,
    mixed_indices,
    rows_per_layer,
)

# 2 layers per stack, 1 kept per language: the languages of a mixed batch disagree on every layer
KEEP = {"encoder": {EN: 0, XX: 1, YY: 1}, "decoder": {EN: 1, XX: 0, YY: 1}}
SIDE = {"encoder": "src_lang_id", "decoder": "tgt_lang_id"}


@pytest.fixture(scope="module", params=["ffn,layer", "attn,ffn,layer"])
def sparse(corpus, request):
    task, model, _ = build(corpus, "--sparse-types", request.param)
    set_distinct_logits(model, seed=7)  # heads and blocks differ by language too
    for stack, keep in KEEP.items():
        scorer = getattr(model, stack).sparse_scores
        logits = torch.full(scorer.logits("layers").shape, -5.0)
        for lang, layer in keep.items():
            logits[lang, layer] = 5.0
        set_scaled_value(scorer, "layers_logits", logits)
    return task, model.eval()


@pytest.fixture
def union(monkeypatch):
    def use(on):
        monkeypatch.setattr(SparseLayerMixin, "row_dispatch", not on)
    return use


def test_each_layer_runs_on_the_rows_that_keep_it_only(sparse, union):
    task, model = sparse
    batch = collate(task, mixed_indices(task))
    seen = rows_per_layer(model, batch)
    for stack, keep in KEEP.items():
        langs = batch["net_input"][SIDE[stack]].tolist()
        for layer in range(2):
            expected = sum(keep[lang] == layer for lang in langs)
            assert 0 < expected < len(langs)  # the batch disagrees about this layer
            assert seen[(stack, layer)] == expected, (stack, layer)
    union(True)  # guards the count: the union path runs every layer on every row
    assert set(rows_per_layer(model, batch).values()) == {batch["target"].size(0)}


def test_per_row_outputs_and_beam_search_equal_the_union_path_and_alone(sparse, union):
    assert_row_dispatch_equals_union(*sparse, union)


def test_incremental_decoding_with_row_subsets_equals_full(sparse):
    task, model = sparse
    with torch.no_grad():
        assert_incremental_equals_full(task, model, collate(task, mixed_indices(task)))


def test_subset_caches_follow_any_reorder_of_the_batch(sparse, union):
    """As latent depth's: every reorder reaches the caches of the layers that ran on subsets."""
    assert_reordered_decoding_equals_union(*sparse, union)


def test_prepared_call_is_kept_for_the_same_languages_and_decision(sparse):
    """Decoding steps with the same languages share the prepared call (row sets, narrowed plans);
    other languages or other logits prepare a new one."""
    task, model = sparse
    scorer = model.decoder.sparse_scores
    lang = collate(task, mixed_indices(task))["net_input"]["tgt_lang_id"]
    scorer.prepare(lang)
    call = scorer._call
    rows = {layer: scorer.layer_rows(layer) for layer in range(2)}
    assert all(r is not None for r in rows.values())
    scorer.prepare(lang.clone())
    assert scorer._call is call and all(scorer.layer_rows(l) is r for l, r in rows.items())
    flipped = lang.flip(0)
    scorer.prepare(flipped)
    assert scorer._call is not call
    for layer in range(2):
        expected = [i for i, l in enumerate(flipped.tolist()) if KEEP["decoder"][l] == layer]
        assert scorer.layer_rows(layer).tolist() == expected
    mu = scorer.logits("layers").detach().clone()
    try:
        set_scaled_value(scorer, "layers_logits", mu.flip(1))  # every language keeps the other layer
        scorer.prepare(lang)
        for layer in range(2):
            expected = [i for i, l in enumerate(lang.tolist()) if KEEP["decoder"][l] != layer]
            assert scorer.layer_rows(layer).tolist() == expected
    finally:
        set_scaled_value(scorer, "layers_logits", mu)
