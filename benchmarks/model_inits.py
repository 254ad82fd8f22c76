"""Weights a benchmark sets on configuration B after building it (``Settings.b_init``), for
comparisons whose point needs a trained-looking model: a fresh latent-depth model has the same
selection logits for every language, so every language would keep the same layers."""

import torch

__all__ = ["INITS"]


def _distinct_logits(task, layers: int, keep: int, seed: int):
    """{target language id: logits over ``layers``}: a seeded random permutation of evenly spaced
    values (no ties) per target language of the data, whose top ``keep`` differ between languages
    while there are combinations left."""
    langs = sorted({pair.split("-")[1] for pair in task.lang_pairs})
    gen = torch.Generator().manual_seed(seed)
    values = torch.linspace(-3.0, 3.0, layers)
    seen, logits = set(), {}
    for code in langs:
        for _ in range(100):
            perm = torch.randperm(layers, generator=gen)
            top = tuple(sorted(perm[-keep:].tolist())) if keep else tuple(perm.tolist())
            if top not in seen:
                break
        seen.add(top)
        logits[task.inventory.id(code)] = values[perm.argsort()]
    return logits


def latent_distinct_plans(model, task, seed: int = 1):
    """Every target language of the data keeps its own top-K decoder layers."""
    selector = model.decoder.layer_select
    with torch.no_grad():
        for lang, row in _distinct_logits(task, selector.logits.size(1), selector.target_depth, seed).items():
            selector.logits[lang] = row


def sparse_distinct_layers(model, task, seed: int = 1):
    """adaptive_sparse_transformer with layer sparsity: every target language of the data keeps its
    own D' decoder layers."""
    from fairseq_langshare.modules.scaled_logits import set_scaled_value

    scorer = model.decoder.sparse_scores
    mu = scorer.logits("layers").detach().clone()
    for lang, row in _distinct_logits(task, mu.size(1), scorer.keep["layers"], seed).items():
        mu[lang] = row
    set_scaled_value(scorer, "layers_logits", mu)


INITS = {"latent-distinct-plans": latent_distinct_plans, "sparse-distinct-layers": sparse_distinct_layers}
