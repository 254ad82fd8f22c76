"""--checkpoint-activations / --offload-activations: every method that accepts them recomputes each
layer that ran in the forward pass once in the backward pass, in every phase (latent depth before
and after its commit); the methods that cannot are refused in one line when the model is built.
Latent depth's commit names the layers no language keeps, once."""

import logging

import pytest
import torch

from method_configs import METHODS
from tiny_corpus import build_task_and_model

ACCEPTING = {
    "baseline": METHODS["baseline"][2:],
    "lsl": METHODS["lsl"][2:],
    "lsl_search": ["--lsl-search", "--lsl-decoder-layers", "TGT={2}"],
    "lsl_separate_decoder": ["--lsl-encoder-layers", "SRC={1}", "--lsl-separate-decoder"],
    "multistack": METHODS["multistack"][2:],
    "latent_depth": METHODS["latent_depth"][2:] + ["--latent-commit-updates", "2"],
}
ARCH = {"lsl_search": "lsl", "lsl_separate_decoder": "lsl"}
REFUSING = [("adapter", "--checkpoint-activations"), ("adapter", "--offload-activations"),
            ("clsr", "--checkpoint-activations"), ("clsr", "--offload-activations"),
            ("adaptive_sparse", "--checkpoint-activations"), ("adaptive_sparse", "--offload-activations"),
            ("latent_depth", "--offload-activations")]


def build(corpus, method, *flags):
    arch = METHODS[ARCH.get(method, method)][1]
    flags_of_method = ACCEPTING[method] if method in ACCEPTING else METHODS[method][2:]
    extra = [*flags_of_method, "--dropout", "0.1", "--max-update", "8", *flags]
    return build_task_and_model(corpus, arch=arch, extra=extra)


def fc1_calls(model, task, criterion, update):
    """fc1 calls of every layer (by module name) in the forward pass and in the backward pass of one
    training step at ``update``, on a batch of both directions."""
    calls, phase = {}, ["forward"]

    def hook(name):
        def count(module, inputs, output):
            calls.setdefault(phase[0], {}).setdefault(name, 0)
            calls[phase[0]][name] += 1
        return count

    handles = [m.register_forward_hook(hook(n)) for n, m in model.named_modules() if n.endswith("fc1")]
    try:
        model.train()
        model.set_num_updates(update)
        dataset = task.dataset("valid")
        batch = dataset.collater([dataset[i] for i in (0, 1, 2, 20, 21, 22)])
        loss, _, _ = criterion(model, batch)
        phase[0] = "backward"
        loss.backward()
    finally:
        for h in handles:
            h.remove()
    return calls.get("forward", {}), calls.get("backward", {})


@pytest.fixture(scope="module")
def criterion(corpus):
    task, _, args = build_task_and_model(corpus)
    return task.build_criterion(args)


@pytest.mark.parametrize("flag", ["--checkpoint-activations", "--offload-activations"])
@pytest.mark.parametrize("method", list(ACCEPTING))
def test_every_layer_that_ran_is_recomputed_once_in_every_phase(corpus, criterion, method, flag, one_thread):
    if method == "latent_depth" and flag == "--offload-activations":
        pytest.skip("refused (test_methods_that_cannot_recompute_refuse_in_one_line)")
    task, model, _ = build(corpus, method, flag)
    task.load_dataset("valid")
    plain_task, plain, _ = build(corpus, method)
    plain_task.load_dataset("valid")
    updates = (0, 2, 3) if method == "latent_depth" else (0,)  # committed from update 2 on
    for update in updates:
        forward, backward = fc1_calls(model, task, criterion, update)
        assert forward and backward == forward  # each fc1 that ran runs again, once, in the backward pass
        assert fc1_calls(plain, plain_task, criterion, update) == (forward, {})  # the same, not recomputed
    if method == "latent_depth":  # the commit left layers out: they run in neither pass
        assert len([n for n in forward if n.startswith("decoder.")]) == 2 < len(model.decoder.layers)


@pytest.mark.parametrize("method,flag", REFUSING)
def test_methods_that_cannot_recompute_refuse_in_one_line(corpus, method, flag):
    with pytest.raises(ValueError, match=r"^--(checkpoint|offload)-activations [^\n]*$"):
        build(corpus, method, flag)


def test_the_commit_names_the_layers_no_language_keeps_once(caplog):
    from fairseq_langshare.modules.latent_layers import LayerSelector

    selector = LayerSelector("dec", num_langs=3, num_layers=4, side="tgt", target_depth=2, keep_rule="top-k",
                             commit_updates=5, trained_languages=[1, 2])
    selector.train()
    selector.set_num_updates(5)
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            selector.prepare(torch.tensor([1, 2, 2]))  # undecided posteriors (all 1/2): top-2 is layers 1, 2
    assert [r.getMessage() for r in caplog.records] == [
        "latent depth committed at update 5: dec layers 3, 4 (of 4) are kept by no language, so they train no more "
        "and decoding skips them (the weights stay in the checkpoint); every language keeps the same layers "
        "(1, 2): 100% of the selection posteriors were undecided at the commit (docs/latent_depth.md, "
        "\"When to commit\")"]
    caplog.clear()
    selector = LayerSelector("dec", num_langs=3, num_layers=4, side="tgt", target_depth=2, keep_rule="top-k",
                             commit_updates=5, trained_languages=[1, 2])
    selector.set_alpha(torch.tensor([[0.0, 0, 0, 0], [3, 3, -3, -3], [-3, -3, 3, 3]]))  # together they keep all
    selector.train()
    selector.set_num_updates(5)
    with caplog.at_level(logging.WARNING):
        selector.prepare(torch.tensor([1, 2]))
    assert bool(selector.committed) and not caplog.records
