"""Latent depth's per-row dispatch (issue 18, Deliver 2): in a batch whose languages keep
different layers, each layer runs on the rows that keep it only, and every row's output (logits,
beam-search translation) is the union path's."""

import copy

import pytest
import torch

from fairseq_langshare.models.latent_depth_transformer import LatentLayerMixin
from test_language_aware_model import (
    assert_incremental_equals_full,
    assert_reordered_decoding_equals_union,
    assert_row_dispatch_equals_union,
    collate,
    mixed_indices,
    rows_per_layer,
    row_keys,
)
from tiny_corpus import build_task_and_model

KEEP = {"decoder": {"xx": (0, 1, 3), "yy": (1, 2)}, "encoder": {"xx": (0,), "yy": (0, 1)}}


@pytest.fixture(scope="module")
def latent(corpus):
    task, model, _ = build_task_and_model(
        corpus, arch="latent_depth_transformer_tiny",
        extra=["--dropout", "0.0", "--max-update", "100", "--latent-layers", "both", "--latent-encoder-lang", "tgt"])
    task.load_dataset("valid")
    with torch.no_grad():
        for stack, keep in KEEP.items():
            logits = getattr(model, stack).layer_select.logits
            logits.fill_(-5.0)
            for lang, layers in keep.items():
                logits[task.inventory.id(lang), list(layers)] = 5.0
    return task, model.eval()


@pytest.fixture
def union(monkeypatch):
    def use(on):
        monkeypatch.setattr(LatentLayerMixin, "row_dispatch", not on)
    return use


def test_each_layer_runs_on_the_rows_that_keep_it_only(latent):
    task, model = latent
    batch = collate(task, mixed_indices(task))
    tgt = [task.inventory.langs[int(i)] for i in batch["net_input"]["tgt_lang_id"]]
    seen = rows_per_layer(model, batch)
    for (stack, layer), rows in seen.items():
        expected = sum(layer in KEEP[stack][lang] for lang in tgt if lang in KEEP[stack])
        assert rows == expected, (stack, layer)


def test_per_row_outputs_and_beam_search_equal_the_union_path_and_alone(latent, union):
    assert_row_dispatch_equals_union(*latent, union)


def test_incremental_decoding_equals_full_with_row_subsets(latent):
    task, model = latent
    with torch.no_grad():
        assert_incremental_equals_full(task, model, collate(task, mixed_indices(task)))


def test_subset_caches_follow_any_reorder_of_the_batch(latent, union):
    """Reorders are applied when a layer next runs, for the rows its plan gives then: beams
    resampled, two orders in a row, finished sentences (other row sets), and a batch of one
    language (subset layers run on every row again, or on none)."""
    assert_reordered_decoding_equals_union(*latent, union)


def test_row_sets_are_kept_per_plan_and_follow_the_languages_and_the_logits(latent):
    """A decoding step with the same languages gets the same plan and row tensors (no sync per
    step; the stash keeps its row map); other languages or other logits get new ones."""
    task, model = latent
    model = copy.deepcopy(model)
    selector = model.decoder.layer_select
    lang = collate(task, mixed_indices(task))["net_input"]["tgt_lang_id"]

    def rows(ids):
        selector.prepare(ids)
        plan = selector._call["plan"]
        return plan, {i: selector.plan_rows(i, step) for i, step in enumerate(plan) if torch.is_tensor(step)}

    plan, first = rows(lang)
    assert first  # the mixed batch disagrees about some layers
    again_plan, again = rows(lang.clone())
    assert again_plan is plan and all(again[i] is first[i] for i in first)
    flipped = lang.flip(0)
    _, other = rows(flipped)
    for i, r in other.items():
        assert torch.equal(r, selector.keep()[flipped, i].nonzero().squeeze(1))
    assert any(not torch.equal(other[i], first[i]) for i in first)
    with torch.no_grad():  # the languages swap their layers: same ids, another decision
        alpha = selector.alpha().detach().clone()
        xx, yy = task.inventory.id("xx"), task.inventory.id("yy")
        alpha[[xx, yy]] = alpha[[yy, xx]]
        selector.set_alpha(alpha)
    swapped_plan, swapped = rows(lang)
    assert swapped_plan is not plan
    for i, r in swapped.items():
        assert torch.equal(r, selector.keep()[lang, i].nonzero().squeeze(1))
    assert selector.keep()[xx].tolist() == [bool(l in KEEP["decoder"]["yy"]) for l in range(4)]


def test_training_with_a_row_plan_is_differentiable_and_equals_the_union(latent, union, monkeypatch):
    """Once the selector hands masks in training (after a commit phase), z-scaled layers run on
    their rows: same loss and same gradients as the union path."""
    task, model = latent
    model = copy.deepcopy(model).train()
    batch = collate(task, mixed_indices(task))
    lang = batch["net_input"]["tgt_lang_id"]
    for stack in ("encoder", "decoder"):
        selector = getattr(model, stack).layer_select
        keep = selector.logits.detach().gt(0)

        def for_layer(layer, b, keep=keep):
            mask = keep[lang, layer].view(1, -1, 1)
            return mask, (0.5 + 0.1 * layer) * torch.ones(1, b, 1)

        monkeypatch.setattr(selector, "for_layer", for_layer)
    results = []
    for on in (False, True):
        union(on)
        model.zero_grad()
        out = model(**batch["net_input"])[0]
        out.float().pow(2).mean().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results.append((out.detach(), grads))
    model.auxiliary_outputs()
    torch.testing.assert_close(results[0][0], results[1][0], atol=1e-5, rtol=1e-4)
    assert results[0][1].keys() == results[1][1].keys()
    for name in results[0][1]:
        torch.testing.assert_close(results[0][1][name], results[1][1][name], atol=1e-5, rtol=1e-4)
