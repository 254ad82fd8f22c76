"""The trained-language masks of latent depth and adaptive sparse (the languages the aggregated prior,
the utilisation statistics and the sparsity losses average over) follow a checkpoint's inventory when
a reordered --langs re-maps the language ids by code, as the per-language logits they mask do."""

import pytest
import torch

from test_language_aware_model import collate, mixed_indices
from tiny_corpus import build_task_and_model

PAIRS = ["en-xx", "en-yy"]  # trained: source en only, targets xx and yy only
REORDERED = ["yy", "xx", "en"]

METHODS = {
    "latent_depth_transformer_tiny": ["--latent-layers", "both", "--latent-prior", "aggregated",
                                      "--latent-decoder-target-depth", "2"],
    "adaptive_sparse_transformer_tiny": [],
}


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_thread):
    yield


def build(corpus, arch, langs=None, seed=1):
    task, model, _ = build_task_and_model(corpus, arch=arch, pairs=PAIRS, langs=langs, seed=seed, langtok=False,
                                          extra=["--dropout", "0.0", "--max-update", "100", *METHODS[arch]])
    task.load_dataset("valid")
    return task, model


def masked_modules(model):
    """{stack: the module holding the stack's trained-language mask}."""
    return model.selectors() if hasattr(model, "selectors") else model.scorers()


def trained_codes(task, model):
    return {stack: sorted(task.inventory.langs[i] for i in module.trained_languages.nonzero().flatten().tolist())
            for stack, module in masked_modules(model).items()}


def training_terms(model, batch):
    """The auxiliary losses and statistics of one training forward (same Gumbel draws for a seed)."""
    model.train()
    torch.manual_seed(0)
    model(**batch["net_input"])
    losses, stats = model.auxiliary_outputs()
    return ({k: float(torch.as_tensor(v[0]).detach()) for k, v in losses.items()},
            {k: float(v) for k, v in stats.items() if isinstance(v, (int, float, torch.Tensor))})


@pytest.mark.parametrize("arch", sorted(METHODS))
def test_trained_languages_follow_a_reordered_langs_by_code(corpus, arch):
    task_a, model_a = build(corpus, arch)
    with torch.no_grad():  # distinct posteriors per language, so the mask decides the averages
        g = torch.Generator().manual_seed(3)
        for name, p in model_a.named_parameters():
            if "logits" in name:
                p.copy_(torch.randn(p.shape, generator=g))
    expected = {"encoder": ["en"], "decoder": ["xx", "yy"]}
    assert trained_codes(task_a, model_a) == expected

    task_b, model_b = build(corpus, arch, langs=REORDERED, seed=7)
    assert trained_codes(task_b, model_b) == expected  # built under --langs yy,xx,en
    model_b.load_state_dict(model_a.state_dict())  # re-maps the ids to the checkpoint's en,xx,yy
    assert task_b.inventory.langs == ["en", "xx", "yy"]
    assert trained_codes(task_b, model_b) == expected

    indices = mixed_indices(task_a)
    batch_a, batch_b = collate(task_a, indices), collate(task_b, indices)
    assert torch.equal(batch_a["net_input"]["tgt_lang_id"], batch_b["net_input"]["tgt_lang_id"])
    losses_a, stats_a = training_terms(model_a, batch_a)
    losses_b, stats_b = training_terms(model_b, batch_b)
    assert losses_a and losses_b.keys() == losses_a.keys()
    for key in losses_a:
        assert losses_b[key] == pytest.approx(losses_a[key], abs=1e-5), key
    assert stats_b.keys() == stats_a.keys()
    for key in stats_a:
        assert stats_b[key] == pytest.approx(stats_a[key], abs=1e-5), key
    model_a.eval(), model_b.eval()
    torch.testing.assert_close(model_b(**batch_b["net_input"])[0], model_a(**batch_a["net_input"])[0])
