"""Weights a benchmark sets on configuration B after building it (``Settings.b_init``), for
comparisons whose point needs a trained-looking model: a fresh latent-depth model has the same
selection logits for every language, so every language would keep the same layers."""

import torch

__all__ = ["INITS"]


def latent_distinct_plans(model, task, seed: int = 1):
    """Every target language of the data keeps its own top-K decoder layers: its selection logits
    are a seeded random permutation of evenly spaced values (no ties), different per language."""
    selector = model.decoder.layer_select
    langs = sorted({pair.split("-")[1] for pair in task.lang_pairs})
    gen = torch.Generator().manual_seed(seed)
    layers = selector.logits.size(1)
    values = torch.linspace(-3.0, 3.0, layers)
    seen = set()
    with torch.no_grad():
        for code in langs:
            for _ in range(100):
                perm = torch.randperm(layers, generator=gen)
                top = tuple(sorted(perm[-selector.target_depth:].tolist())) if selector.target_depth else tuple(perm.tolist())
                if top not in seen:
                    break
            seen.add(top)
            selector.logits[task.inventory.id(code)] = values[perm.argsort()]


INITS = {"latent-distinct-plans": latent_distinct_plans}
