"""CLSR inference folding (issue 18, Deliver 3): the folded inference path gives the unfolded
path's outputs and translations, follows weight changes, and never runs in training."""

import pytest
import torch
from fairseq.sequence_generator import SequenceGenerator

from fairseq_langshare.modules.clsr import ClsrUnit
from test_language_aware_model import collate, mixed_indices
from tiny_corpus import build_task_and_model


def build(corpus, *flags):
    task, model, _ = build_task_and_model(corpus, arch="clsr_transformer_tiny", extra=[
        "--clsr-encoder-lang", "tgt", "--max-update", "100", "--dropout", "0.0", *flags])
    task.load_dataset("valid")
    return task, model.eval()


def units(model):
    return [m for m in model.modules() if isinstance(m, ClsrUnit)]


def outputs(task, model, fold, monkeypatch):
    monkeypatch.setattr(ClsrUnit, "fold_inference", fold)
    batch = collate(task, mixed_indices(task))
    gen = SequenceGenerator([model], task.target_dictionary, beam_size=3, max_len_b=10)
    with torch.no_grad():
        logits = model(**batch["net_input"])[0]
        hyps = [h[0]["tokens"].tolist() for h in gen.generate([model], batch)]
    return logits, hyps


@pytest.mark.parametrize("flags", [[], ["--clsr-variant", "gate"], ["--clsr-variant", "shared"],
                                   ["--clsr-variant", "top-bottom"], ["always-open"], ["always-closed"]])
def test_folded_inference_equals_unfolded(corpus, flags, monkeypatch):
    task, model = build(corpus, *[f for f in flags if f.startswith("--") or f in ("gate", "shared", "top-bottom")])
    if flags == ["always-open"]:
        with torch.no_grad():
            for u in units(model)[::2]:
                u.gate.w2.abs_()  # G >= 0 for every input: folded as a language-specific sub-layer
    if flags == ["always-closed"]:  # G < 0 for every input: every call of these units takes W^shared alone
        with torch.no_grad():
            for u in units(model)[::2]:
                u.gate.b.fill_(10.0)
                u.gate.w2.copy_(-u.gate.w2.abs() - 0.1)
    if not flags:
        gates = []
        for u in units(model):
            u.collect = lambda name, g, ids, mask: gates.append(g)
        outputs(task, model, True, monkeypatch)
        for u in units(model):
            u.collect = None
        opened = torch.cat([g.flatten().float() for g in gates]).mean()
        assert 0 < opened < 1, "the test needs open and closed gates"
    folded, folded_hyps = outputs(task, model, True, monkeypatch)
    assert any(u._call["folded"] is not None for u in units(model))
    plain, plain_hyps = outputs(task, model, False, monkeypatch)
    torch.testing.assert_close(folded, plain, atol=1e-5, rtol=1e-4)
    assert folded_hyps == plain_hyps


def test_hard_gates_select_one_projection_per_token_and_few_languages_are_cached(corpus, monkeypatch):
    """Above DENSE_MAX_TOKENS each token runs the projection its gate picks (``_selected``); past
    FOLD_CACHE_LANGS languages a unit takes two matmuls instead of a cached concatenation: the
    outputs and translations stay the unfolded path's."""
    from fairseq_langshare.modules import clsr

    task, model = build(corpus)
    selected = []
    run = ClsrUnit._selected
    monkeypatch.setattr(ClsrUnit, "_selected", lambda self, *a: selected.append(self.name) or run(self, *a))
    monkeypatch.setattr(clsr, "FOLD_CACHE_LANGS", 1)
    monkeypatch.setattr(clsr, "DENSE_MAX_TOKENS", 30)  # the forward's 45 tokens select; 27 beams at most are dense
    folded, folded_hyps = outputs(task, model, True, monkeypatch)
    assert {n.split(".")[1] for n in selected} == {"self_attn", "cross_attn", "ffn"}
    assert {len(u._call["folded"]["cats"]) for u in units(model) if u.name.startswith("dec")} == {1}
    plain, plain_hyps = outputs(task, model, False, monkeypatch)
    torch.testing.assert_close(folded, plain, atol=1e-5, rtol=1e-4)
    assert folded_hyps == plain_hyps
    # decoding steps of a batch grouped by direction (as the task decodes): each language's open
    # rows are one block
    from fairseq_langshare.tasks.multilingual_langshare import direction_order, take_rows

    batch = collate(task, mixed_indices(task))
    batch = take_rows(batch, direction_order(batch["net_input"]))
    monkeypatch.setattr(clsr, "DENSE_MAX_TOKENS", 4)
    searched = []
    search = torch.searchsorted
    monkeypatch.setattr(torch, "searchsorted", lambda *a, **k: searched.append(1) or search(*a, **k))
    gen = SequenceGenerator([model], task.target_dictionary, beam_size=3, max_len_b=10)
    hyps = {}
    for fold in (True, False):
        monkeypatch.setattr(ClsrUnit, "fold_inference", fold)
        with torch.no_grad():
            hyps[fold] = [h[0]["tokens"].tolist() for h in gen.generate([model], batch)]
    assert searched and hyps[True] == hyps[False]


def test_folds_follow_weight_changes_and_stay_out_of_training(corpus, monkeypatch):
    task, model = build(corpus)
    outputs(task, model, True, monkeypatch)  # folds built
    with torch.no_grad():
        model.decoder.lang_proj.weight.mul_(3.0)  # in place: the cached folds are stale
        units(model)[0].gate.w1.add_(0.5)
    folded, _ = outputs(task, model, True, monkeypatch)
    plain, _ = outputs(task, model, False, monkeypatch)
    torch.testing.assert_close(folded, plain, atol=1e-5, rtol=1e-4)
    monkeypatch.setattr(ClsrUnit, "fold_inference", True)
    batch = collate(task, mixed_indices(task))
    for training in (True, False):  # training, and eval with autograd on: the unfolded path
        model.train(training)
        for u in units(model):
            u._call["folded"] = None
        model(**batch["net_input"])[0].sum().backward()
        assert all(u._call["folded"] is None for u in units(model))
        model.auxiliary_outputs()
    assert model.decoder.lang_proj.weight.grad is not None
