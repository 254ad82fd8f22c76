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
    # layers that read the language ids inside the recomputed call
    "adapter": METHODS["adapter"][2:],
    "lsl_ffn": ["--lsl-encoder-layers", "SRC={1} & TGT={2}", "--lsl-component", "ffn",
                "--lsl-decoder-layers", "SRC={1} & TGT={2}"],
    "lsl_attention": ["--lsl-encoder-layers", "SRC={2} & TGT={1}", "--lsl-component", "attention",
                      "--lsl-decoder-layers", "SRC={1} & TGT={2}"],
    "clsr": METHODS["clsr"][2:],
    "adaptive_sparse": METHODS["adaptive_sparse"][2:],
}
PHASES = {"latent_depth": (0, 2, 3), "adaptive_sparse": (0, 3)}  # committed from update 2; T-bar 2
ARCH = {"lsl_search": "lsl", "lsl_separate_decoder": "lsl", "lsl_ffn": "lsl", "lsl_attention": "lsl"}
REFUSING = [("latent_depth", "--offload-activations")]


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
    for update in PHASES.get(method, (0,)):
        forward, backward = fc1_calls(model, task, criterion, update)
        assert forward and backward == forward  # each fc1 that ran runs again, once, in the backward pass
        assert fc1_calls(plain, plain_task, criterion, update) == (forward, {})  # the same, not recomputed
    if method == "latent_depth":  # the commit left layers out: they run in neither pass
        assert len([n for n in forward if n.startswith("decoder.")]) == 2 < len(model.decoder.layers)


@pytest.fixture(scope="module")
def langshare_criterion(corpus):
    """The plugin's criterion, which adds the auxiliary losses the model reports."""
    task, _, args = build_task_and_model(corpus, extra=["--criterion", "langshare_label_smoothed_cross_entropy",
                                                        "--label-smoothing", "0.1"])
    return task.build_criterion(args)


@pytest.mark.parametrize("flag", ["--checkpoint-activations", "--offload-activations"])
@pytest.mark.parametrize("method", [m for m in ACCEPTING if m != "latent_depth"])  # its own test: test_latent_depth
def test_recomputation_gives_the_gradients_of_training_without_it(corpus, langshare_criterion, method, flag,
                                                                  one_thread):
    """Was: layers that route by language inside the recomputed call (adapters, LSL's LS-FFN and
    LS-attention, CLSR, adaptive sparsity) were refused, because the backward pass ran them with no
    language ids bound. In every phase; the auxiliary losses are those of training without it."""
    models = [build(corpus, method, *flags) for flags in ((), (flag,))]
    for task, model, _ in models:
        task.load_dataset("valid")
        model.train()
    for update in PHASES.get(method, (0,)):
        grads, logged = [], []
        for task, model, _ in models:
            model.zero_grad()
            model.set_num_updates(update)
            dataset = task.dataset("valid")
            batch = dataset.collater([dataset[i] for i in (0, 1, 2, 20, 21, 22)])  # both directions
            torch.manual_seed(3)  # the same dropout masks and gate noise
            loss, _, log = langshare_criterion(model, batch)
            loss.backward()
            grads.append({n: p.grad for n, p in model.named_parameters() if p.grad is not None})
            logged.append({k: float(v) for k, v in log.items()})
            # nothing recorded again by the recomputation: the next collection has no loss
            assert model.auxiliary_outputs()[0] == {}
        assert grads[0].keys() == grads[1].keys() and grads[0]
        for name in grads[0]:
            torch.testing.assert_close(grads[1][name], grads[0][name], msg=f"{name} at update {update}")
        assert logged[1] == pytest.approx(logged[0])  # the auxiliary losses and statistics


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
