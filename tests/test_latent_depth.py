"""latent_depth_transformer: Gumbel-softmax layer selection (Eq. 5), KL to the uniform or the
aggregated prior (Eq. 7), the target-depth loss (Eq. 8), two-level optimisation (Algorithm 2),
deterministic pruned inference, export to a plain transformer, analysis, and fairseq-train runs."""

import json
import logging
import math
import warnings

import pytest
import torch
from fairseq.models.transformer import TransformerModel

from fairseq_langshare.export import export_pair
from fairseq_langshare.models.latent_depth_transformer import LatentDepthTransformerModel, default_commit_updates
from fairseq_langshare.modules.latent_layers import (
    RUN,
    SKIP,
    bernoulli_kl,
    gumbel_sigmoid,
    keep_table,
    kl_to_prior,
    target_depth_loss,
)
from fairseq_langshare.modules.routing import MissingLanguageIds
from fairseq_langshare.modules.schedules import exponential_ramp
from test_export import TRAIN, full_generate, plain_generate
from test_language_aware_model import (
    assert_beam_search_mixed_equals_alone,
    assert_incremental_equals_full,
    collate,
    mixed_indices,
    row_keys,
)
from tiny_corpus import build_task_and_model, task_args, train

M2M = ["en-xx", "en-yy", "xx-yy"]  # xx-yy (valid/test only): batches mix source languages too
EN, XX, YY = 0, 1, 2
# hand-set posteriors: decoder (by target language) layer 1 xx only, layer 2 yy only, layer 3
# everyone, layer 4 no one; encoder (by source language) layer 1 everyone, layer 2 xx only
DEC_LOGITS = [[3.0, 3.0, 3.0, 3.0], [3.0, -3.0, 3.0, -3.0], [-3.0, 3.0, 3.0, -3.0]]
ENC_LOGITS = [[3.0, -3.0], [3.0, 3.0], [-3.0, -3.0]]


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_thread):
    yield


def build(corpus, *flags, pairs=M2M, seed=1):
    task, model, args = build_task_and_model(corpus, arch="latent_depth_transformer_tiny", pairs=pairs, seed=seed,
                                             extra=["--dropout", "0.0", "--max-update", "100", *flags])
    task.load_dataset("valid")
    return task, model, args


def set_logits(model, encoder=ENC_LOGITS, decoder=DEC_LOGITS):
    with torch.no_grad():
        for stack, values in (("encoder", encoder), ("decoder", decoder)):
            selector = getattr(model, stack).layer_select
            if selector is not None:
                selector.set_alpha(torch.tensor(values))


@pytest.fixture(scope="module")
def both(corpus):
    """LL-Both with hand-set posteriors, in eval mode."""
    task, model, args = build(corpus, "--latent-layers", "both")
    set_logits(model)
    return task, model.eval(), args


def logits_of(model, batch):
    return model(**batch["net_input"])[0]


# --- the equations -----------------------------------------------------------------------------

def test_samples_lie_in_the_unit_interval_and_become_discrete_as_tau_goes_to_zero():
    torch.manual_seed(0)
    alpha = torch.linspace(-3, 3, 7).repeat(2000, 1)
    soft = gumbel_sigmoid(alpha, tau=1.0)
    assert soft.min() >= 0 and soft.max() <= 1
    assert ((soft > 0.05) & (soft < 0.95)).float().mean() > 0.4  # tau = 1: spread over (0, 1)
    for tau, tol in ((0.01, 0.02), (1e-4, 1e-3)):
        z = gumbel_sigmoid(alpha, tau=tau)
        assert z.min() >= 0 and z.max() <= 1
        assert (torch.minimum(z, 1 - z) < 1e-3).float().mean() > 1 - tol  # (almost) every sample is 0 or 1
    # Eq. 5 with two Gumbels: z_l = 1 with probability sigmoid(alpha_l)
    hard = (gumbel_sigmoid(alpha, tau=1e-4) > 0.5).float().mean(0)
    torch.testing.assert_close(hard, torch.sigmoid(alpha[0]), atol=0.03, rtol=0)


def test_kl_to_the_uniform_prior_is_the_bernoulli_kl_to_one_half():
    logits = torch.tensor([[0.0, 2.0], [-1.0, 4.0]])
    q = torch.sigmoid(logits)
    expected = (q * torch.log(2 * q) + (1 - q) * torch.log(2 * (1 - q))).mean(-1)
    torch.testing.assert_close(kl_to_prior(logits, "uniform"), expected)
    assert kl_to_prior(torch.zeros(3, 5), "uniform").abs().max() < 1e-7  # q = 1/2 everywhere


def test_kl_to_the_aggregated_posterior_is_zero_when_languages_share_one_posterior():
    shared = torch.tensor([0.3, -2.0, 1.5, 4.0]).repeat(3, 1).requires_grad_()
    kl = kl_to_prior(shared, "aggregated")
    assert kl.abs().max() < 1e-6
    different = torch.tensor([[2.0, -2.0], [-2.0, 2.0], [0.0, 0.0]], requires_grad=True)
    kl = kl_to_prior(different, "aggregated")
    q = torch.sigmoid(different.detach())
    p = q.mean(0)
    torch.testing.assert_close(kl, bernoulli_kl(q.log(), (1 - q).log(), p.expand_as(q)).mean(-1))
    assert (kl[:2] > 0.05).all() and kl[2].abs() < 1e-6  # language 3's q = 1/2 is the aggregate
    # only the languages trained on the side make the aggregate
    only_first = kl_to_prior(different, "aggregated", torch.tensor([True, False, False]))
    assert only_first[0].abs() < 1e-6 and (only_first[1:] > 0.05).all()
    # the aggregate is a prior: the gradient moves each language toward it, not it toward each language
    kl.sum().backward()
    torch.testing.assert_close(different.grad[2], torch.zeros(2))  # q = p̄ for language 3: no pull
    assert different.grad[0, 0] > 0 and different.grad[0, 1] < 0


def test_target_depth_loss_is_the_distance_of_the_summed_mean_utilisation_to_K():
    z = torch.tensor([[1.0, 0.5, 0.0], [0.0, 0.5, 1.0], [1.0, 1.0, 1.0]], requires_grad=True)
    mask = torch.tensor([True, True, False])
    loss = target_depth_loss(z, 1.0, mask)  # u = (0.5, 0.5, 0.5): sum 1.5
    assert loss.item() == pytest.approx(0.5)
    loss.backward()
    torch.testing.assert_close(z.grad, torch.tensor([[0.5] * 3, [0.5] * 3, [0.0] * 3]))  # d/dz of |mean - K|
    assert target_depth_loss(z.detach(), 3.0).item() == pytest.approx(1.0)  # all rows: u = (2/3, 2/3, 2/3)


def test_keep_rules():
    logits = torch.tensor([[0.0, 1.0, -1.0, 2.0], [-0.5, -0.5, 0.5, -3.0]])
    assert keep_table(logits).tolist() == [[True, True, False, True], [False, False, True, False]]  # q >= 0.5
    assert keep_table(logits, threshold=0.7).tolist() == [[False, True, False, True], [False] * 4]
    assert keep_table(logits, "top-k", top_k=2).tolist() == [[False, True, False, True], [True, False, True, False]]
    with pytest.raises(ValueError, match="cannot keep the top 5 of 4 layers"):
        keep_table(logits, "top-k", top_k=5)


def test_schedules_are_functions_of_num_updates(corpus):
    _, model, _ = build(corpus, "--latent-tau-start", "2", "--latent-tau-end", "0.02", "--latent-tau-anneal-updates", "10",
                        "--latent-kl-weight", "0.6", "--latent-kl-anneal-updates", "30")
    selector = model.decoder.layer_select
    for n, tau, beta in ((0, 2.0, 0.0), (5, 0.2, 0.1), (10, 0.02, 0.2), (30, 0.02, 0.6), (99, 0.02, 0.6)):
        model.set_num_updates(n)
        assert selector.tau() == pytest.approx(tau) and selector.kl_beta() == pytest.approx(beta)
    assert all(exponential_ramp(n, 10, 0.1, 1.0) > 0 for n in range(-3, 20))
    for n in range(40):  # beta grows from 0 and is never negative (the reference's is, before --soft-update)
        model.set_num_updates(n)
        assert selector.kl_beta() >= 0.0
    # defaults: the sampling phase is the first 32nd of --max-update (100); tau anneals over it,
    # beta over a third of it
    _, model, _ = build(corpus)
    selector = model.decoder.layer_select
    assert selector.commit_updates == 3
    # a short run still commits (0 would mean never), and a run without --max-update never does
    assert [default_commit_updates(n) for n in (0, 4, 32, 2000)] == [0, 1, 1, 62]
    model.set_num_updates(3)
    assert selector.tau() == pytest.approx(0.1) and selector.kl_beta() == pytest.approx(1.0)
    model.set_num_updates(0)
    assert selector.kl_beta() == 0.0
    _, model, _ = build(corpus, "--max-update", "2000")  # the last --max-update wins: commit at 62, beta over 20
    selector = model.decoder.layer_select
    assert selector.commit_updates == 62
    model.set_num_updates(10)
    assert selector.kl_beta() == pytest.approx(10 / 20)
    model.set_num_updates(62)
    assert selector.tau() == pytest.approx(0.1) and selector.kl_beta() == pytest.approx(1.0)
    _, model, _ = build(corpus, "--latent-commit-updates", "0")  # never commits: the schedules span the run
    model.set_num_updates(50)
    assert model.decoder.layer_select.tau() == pytest.approx(math.sqrt(0.1))
    assert model.decoder.layer_select.kl_beta() == pytest.approx(1.0)
    model.set_num_updates(11)
    assert model.decoder.layer_select.kl_beta() == pytest.approx(11 / 33)


# --- the model -----------------------------------------------------------------------------------

def test_training_forward_reports_the_terms_of_eq8(corpus):
    task, model, _ = build(corpus, "--latent-layers", "both", "--latent-decoder-target-depth", "3",
                           "--latent-prior", "aggregated", "--latent-target-depth-weight", "0.25",
                           "--latent-commit-updates", "0", "--latent-keep", "threshold")
    set_logits(model)
    model.train()
    model.set_num_updates(20)
    batch = collate(task, [0, 1, 2, 20, 21, 40])  # en-xx x3, en-yy x2, xx-yy x1
    model(**batch["net_input"])
    losses, stats = model.auxiliary_outputs()
    assert set(losses) == {"kl_enc", "kl_dec", "target_depth_dec"}
    beta = 20 / 33
    assert losses["kl_dec"][1] == pytest.approx(beta) and losses["target_depth_dec"][1] == 0.25
    # KL weighted by each target language's share of the batch, against the aggregate of xx and yy
    per_lang = kl_to_prior(torch.tensor(DEC_LOGITS), "aggregated", torch.tensor([False, True, True]))
    assert losses["kl_dec"][0].item() == pytest.approx((3 * per_lang[XX] + 3 * per_lang[YY]).item() / 6, rel=1e-5)
    # encoder: by source language, en (x5) and xx (x1) trained on the source side
    per_lang = kl_to_prior(torch.tensor(ENC_LOGITS), "aggregated", torch.tensor([True, True, False]))
    assert losses["kl_enc"][0].item() == pytest.approx((5 * per_lang[EN] + per_lang[XX]).item() / 6, rel=1e-5)
    q = torch.sigmoid(torch.tensor(DEC_LOGITS))[[XX, YY]].mean(0)
    for layer in range(4):
        assert stats[f"dec_u_{layer + 1}"] == pytest.approx(q[layer].item(), rel=1e-5)
    assert stats["dec_depth"] == pytest.approx(q.sum().item(), rel=1e-5) and stats["dec_kept"] == 2.0
    assert stats["latent_tau"] == pytest.approx(exponential_ramp(20, 100, 0.1, 1.0))
    assert 0 <= losses["target_depth_dec"][0].item() <= 3


def test_sentences_take_their_own_languages_samples_in_training(corpus):
    task, model, _ = build(corpus)
    model.train()
    seen = {}
    layer = model.decoder.layers[0]
    original = layer.residual_connection

    def spy(x, residual):
        seen.setdefault("z", layer.__dict__["_z"].clone())
        return original(x, residual)

    layer.residual_connection = spy
    try:
        batch = collate(task, [0, 20, 1, 21, 2])
        model(**batch["net_input"])
    finally:
        del layer.residual_connection
    model.auxiliary_outputs()
    z, tgt = seen["z"].flatten(), batch["net_input"]["tgt_lang_id"]
    assert z.min() > 0 and z.max() < 1
    for lang in (XX, YY):  # one draw per language and layer: rows of a language share it
        assert len(set(z[tgt == lang].tolist())) == 1
    assert z[tgt == XX][0] != z[tgt == YY][0]


def test_eval_is_deterministic_and_skipped_layers_do_not_run(corpus, both):
    task, model, _ = both
    calls = []
    hooks = [layer.self_attn.register_forward_hook(lambda m, i, o, name=name: calls.append(name))
             for stack in ("encoder", "decoder") for name, layer in
             ((f"{stack}{i + 1}", l) for i, l in enumerate(getattr(model, stack).layers))]
    try:
        alone = collate(task, [40, 41])  # xx-yy: encoder by xx (both layers), decoder by yy (layers 2, 3)
        first = logits_of(model, alone)
        assert sorted(calls) == ["decoder2", "decoder3", "encoder1", "encoder2"]
        torch.testing.assert_close(logits_of(model, alone), first, rtol=0, atol=0)
        calls.clear()
        logits_of(model, collate(task, mixed_indices(task)))  # decoder layer 4: kept by no language
        assert "decoder4" not in calls and {"decoder1", "decoder2", "decoder3"} <= set(calls)
        plan = [model.decoder.layer_select.for_layer(l, len(mixed_indices(task)))[0] for l in range(4)]
        assert plan[2] is RUN and plan[3] is SKIP and torch.is_tensor(plan[0]) and torch.is_tensor(plan[1])
    finally:
        for hook in hooks:
            hook.remove()
    model.train()
    try:
        model.set_num_updates(0)
        assert not torch.equal(logits_of(model, alone), logits_of(model, alone))  # training samples z
    finally:
        model.eval()
        model.auxiliary_outputs()


def test_mixed_batch_equals_each_sentence_alone(both):
    task, model, _ = both
    batch = collate(task, mixed_indices(task))
    ids = batch["net_input"]
    assert len(set(ids["src_lang_id"].tolist())) == 2 and len(set(ids["tgt_lang_id"].tolist())) == 2
    mixed = dict(zip(row_keys(task, batch), logits_of(model, batch)))
    for i in mixed_indices(task):
        alone = collate(task, [i])
        n = alone["target"].size(1)
        torch.testing.assert_close(mixed[row_keys(task, alone)[0]][:n], logits_of(model, alone)[0], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("side", ["src", "tgt"])
def test_language_ids_change_the_output(both, side):
    """Guards the invariance test: another language's layers give another output."""
    task, model, _ = both
    batch = collate(task, [40, 41])  # xx -> yy
    swapped = {**batch, "net_input": dict(batch["net_input"])}
    swapped["net_input"][f"{side}_lang_id"] = torch.full_like(batch["net_input"][f"{side}_lang_id"],
                                                              EN if side == "src" else XX)
    assert not torch.allclose(logits_of(model, batch), logits_of(model, swapped), atol=1e-4)


def test_incremental_decoding_equals_full_decoding(both):
    task, model, _ = both
    assert_incremental_equals_full(task, model, collate(task, mixed_indices(task)))


def test_beam_search_mixed_equals_alone(both):
    task, model, _ = both
    assert_beam_search_mixed_equals_alone(task, model, max_len_b=10)


def test_export_state_dict_is_an_equivalent_plain_transformer(both):
    task, model, args = both
    ds = task.dataset("valid")
    for start in [0] + list(ds.cumulative_sizes[:-1]):  # en-xx, en-yy, xx-yy
        batch = collate(task, list(range(start, start + 4)))
        ni = dict(batch["net_input"])
        src, tgt = int(ni["src_lang_id"][0]), int(ni["tgt_lang_id"][0])
        weights, changes = LatentDepthTransformerModel.export_state_dict(model.state_dict(), args, src, tgt)
        kept = model.kept_layers(src, tgt)
        assert changes["encoder_layers"] == len(kept["encoder"]) and changes["decoder_layers"] == len(kept["decoder"])
        plain_args = argparse_without(args, changes)
        plain = TransformerModel.build_model(plain_args, task).eval()
        plain.load_state_dict(weights, strict=True)
        expected = model(**ni)[0]
        for key in ("src_lang_id", "tgt_lang_id"):
            ni.pop(key)
        torch.testing.assert_close(plain(**ni)[0], expected, rtol=0, atol=1e-6)
    assert model.kept_layers(XX, YY) == {"encoder": [0, 1], "decoder": [1, 2]}


def argparse_without(args, changes):
    import copy

    plain = copy.deepcopy(args)
    for key, value in changes.items():
        if value is None:
            if hasattr(plain, key):
                delattr(plain, key)
        else:
            setattr(plain, key, value)
    return plain


def test_effective_parameters_are_the_pruned_networks(both):
    _, model, _ = both
    total = sum(p.numel() for p in model.parameters())
    enc_layer = sum(p.numel() for p in model.encoder.layers[0].parameters())
    dec_layer = sum(p.numel() for p in model.decoder.layers[0].parameters())
    logits = 3 * 2 + 3 * 4
    # en -> xx: encoder layer 1 of 2, decoder layers 1 and 3 of 4
    assert model.effective_parameters(EN, XX) == total - logits - enc_layer - 2 * dec_layer


def test_top_k_inference_keeps_K_layers_per_language(corpus):
    _, model, _ = build(corpus, "--latent-keep", "top-k", "--latent-decoder-target-depth", "1")
    set_logits(model)
    assert model.kept_layers(EN, XX)["decoder"] == [0] and model.kept_layers(EN, YY)["decoder"] == [1]


# --- the decoded network is the trained one ------------------------------------------------------

UNDECIDED = [[0.0] * 4, [-0.1, 0.1, 0.2, -0.2], [0.3, -0.1, -0.2, 0.1]]  # q within 0.45..0.58


def decoder_layers_run(model, batch):
    """(0-based decoder layers whose self-attention ran, output) of one forward call."""
    calls = set()
    hooks = [layer.self_attn.register_forward_hook(lambda m, i, o, n=n: calls.add(n))
             for n, layer in enumerate(model.decoder.layers)]
    try:
        out = model(**batch["net_input"])[0]
    finally:
        for hook in hooks:
            hook.remove()
    return sorted(calls), out


def test_inference_runs_exactly_the_network_training_committed_to(corpus):
    task, model, args = build(corpus, "--latent-decoder-target-depth", "2", "--latent-commit-updates", "10")
    selector = model.decoder.layer_select
    selector.set_alpha(torch.tensor(UNDECIDED))  # top 2: layers 2, 3 for xx and 1, 4 for yy
    to_xx, to_yy = collate(task, [0, 1]), collate(task, [20, 21])
    model.train()
    model.set_num_updates(9)
    model(**to_xx["net_input"])
    assert set(model.auxiliary_outputs()[0]) == {"kl_dec", "target_depth_dec"} and not selector.is_committed()
    model.set_num_updates(10)  # the commit: training now runs the pruned network, nothing sampled
    ran, trained_out = decoder_layers_run(model, to_xx)
    losses, stats = model.auxiliary_outputs()
    assert selector.is_committed() and stats["dec_committed"] == 1.0 and stats["dec_kept"] == 2.0 and not losses
    assert ran == [1, 2] and decoder_layers_run(model, to_yy)[0] == [0, 3]
    assert not selector.logits.requires_grad
    # logits that moved after the commit do not move the decision: inference and export follow it
    selector.set_alpha(torch.tensor([[0.0] * 4, [5.0, -5.0, -5.0, 5.0], [5.0] * 4]))
    model.eval()
    ran, decoded = decoder_layers_run(model, to_xx)
    assert ran == [1, 2] and model.kept_layers(EN, XX)["decoder"] == [1, 2]
    torch.testing.assert_close(decoded, trained_out, rtol=0, atol=1e-6)  # dropout 0: the same network
    weights, changes = LatentDepthTransformerModel.export_state_dict(model.state_dict(), args, EN, XX)
    assert changes["decoder_layers"] == 2
    torch.testing.assert_close(weights["decoder.layers.0.fc1.weight"], model.decoder.layers[1].fc1.weight)
    torch.testing.assert_close(weights["decoder.layers.1.fc1.weight"], model.decoder.layers[2].fc1.weight)


@pytest.mark.parametrize("flags,kept", [(["--latent-decoder-target-depth", "2"], [1, 2]), ([], [1, 2])])
def test_undecided_posteriors_are_never_decoded_silently(corpus, flags, kept):
    """With a target depth the default rule keeps the K most probable layers (not every layer
    above one half); either way decoding undecided posteriors says so."""
    task, model, _ = build(corpus, "--latent-commit-updates", "0", *flags)
    selector = model.decoder.layer_select
    selector.set_alpha(torch.tensor(UNDECIDED))
    model.eval()
    with pytest.warns(UserWarning, match=r"undecided .* --latent-commit-updates"):
        ran, _ = decoder_layers_run(model, collate(task, [0, 1]))
    assert ran == kept
    selector.set_alpha(torch.tensor([[0.0] * 4, [-5.0, 5.0, 5.0, -5.0], [5.0, -5.0, -5.0, 5.0]]))  # decisive
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*undecided")
        assert decoder_layers_run(model, collate(task, [0, 1]))[0] == [1, 2]


def test_logit_scale_makes_the_posteriors_learn_faster_under_adam(corpus):
    """alpha = scale * theta: one Adam step moves alpha about scale * lr (the weights: about lr)."""
    moved = {}
    for scale in (1.0, 10.0):
        task, model, _ = build(corpus, "--latent-decoder-target-depth", "1", "--latent-logit-lr-scale", str(scale),
                               "--latent-commit-updates", "0", seed=3)
        selector = model.decoder.layer_select
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        model.train()
        torch.manual_seed(0)
        before = selector.alpha().detach().clone()
        model(**collate(task, [0, 20, 1])["net_input"])[0].sum().backward()
        model.auxiliary_outputs()
        optimizer.step()
        moved[scale] = (selector.alpha().detach() - before)[[XX, YY]].abs()
    torch.testing.assert_close(moved[1.0], torch.full_like(moved[1.0], 0.01), rtol=0.05, atol=0)
    torch.testing.assert_close(moved[10.0], torch.full_like(moved[10.0], 0.1), rtol=0.05, atol=0)


def test_checkpoints_from_before_the_scale_and_the_commit_load_as_they_were(corpus):
    task, model, _ = build(corpus)
    state = model.state_dict()
    old = {k: v for k, v in state.items() if not k.endswith(("logits_scale", "committed", "committed_keep"))}
    old["decoder.layer_select.logits"] = torch.tensor(DEC_LOGITS)  # the logits themselves, as saved then
    model.load_state_dict(old, strict=True)
    selector = model.decoder.layer_select
    torch.testing.assert_close(selector.alpha(), torch.tensor(DEC_LOGITS))
    assert not selector.is_committed() and float(selector.logits_scale) == 1.0


def test_the_equations_table_names_the_logged_loss_keys(corpus):
    """Was: the table said "Reported as loss `kl_enc`/`kl_dec`" and "`target_depth_enc`/`target_depth_dec`";
    the criterion logs them as aux_kl_<stack> and aux_target_depth_<stack>."""
    import re
    from pathlib import Path

    task, model, args = build(corpus, "--latent-layers", "both", "--latent-encoder-target-depth", "1",
                              "--latent-decoder-target-depth", "2", "--criterion",
                              "langshare_label_smoothed_cross_entropy")
    criterion = task.build_criterion(args)
    model.train()
    _, _, logging_output = criterion(model, collate(task, [0, 1, 20]))
    logged = {k for k in logging_output if k.startswith("aux_")}
    page = (Path(__file__).resolve().parents[1] / "docs" / "latent_depth.md").read_text()
    table = [line for line in page.splitlines() if line.startswith("| Eq. 8 |") and "Reported as loss" in line]
    named = {key for line in table for key in re.findall(r"`([a-z_]+)`", line.split("Reported as loss")[1].split("|")[0])}
    assert len(table) == 2 and len(named) == 4, table
    assert named <= logged, (sorted(named), sorted(logged))


def test_two_level_optimisation_updates_the_selection_every_I_th_update(corpus):
    """Algorithm 2 through fairseq's own train_step, Adam and two micro-batches per update
    (--update-freq 2): the logits have no gradient (None, so Adam skips them) and keep their value
    except on updates I, 2I, ...; the other parameters learn at every update."""
    from fairseq import optim
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    task, model, args = build(corpus, "--latent-selection-update-period", "3", "--latent-kl-anneal-updates", "0",
                              "--latent-commit-updates", "0",
                              "--latent-decoder-target-depth", "1", "--latent-keep", "threshold", "--criterion",
                              "langshare_label_smoothed_cross_entropy", "--optimizer", "adam", "--lr", "0.01")
    criterion = task.build_criterion(args)
    optimizer = optim.build_optimizer(convert_namespace_to_omegaconf(args).optimizer, list(model.parameters()))
    assert type(optimizer).__name__ == "FairseqAdam"
    logits, weight = model.decoder.layer_select.logits, model.decoder.layers[0].fc1.weight
    micro = [collate(task, [0, 1, 20]), collate(task, [21, 2, 22])]
    changed = []
    for n in range(6):
        before, w_before = logits.detach().clone(), weight.detach().clone()
        optimizer.zero_grad()
        for sample in micro:
            task.train_step(sample, model, criterion, optimizer, update_num=n)
        assert (logits.grad is not None) == ((n + 1) % 3 == 0)
        optimizer.step()
        changed.append(not torch.equal(before, logits.detach()))
        assert not torch.equal(w_before, weight.detach())
    assert changed == [False, False, True, False, False, True]
    # what is logged and kept follows the logits the optimizer wrote (through p.data)
    selector = model.decoder.layer_select
    alpha = selector.alpha().detach()
    alpha[XX] = torch.tensor([2.0, -2.0, 2.0, 2.0])
    selector.set_alpha(alpha)
    model.eval()
    model(**micro[0]["net_input"])
    _, stats = model.auxiliary_outputs()
    expected = torch.sigmoid(selector.alpha().detach())[[XX, YY]].mean(0)
    assert stats["dec_u_2"] == pytest.approx(expected[1].item())
    assert stats["dec_depth"] == pytest.approx(expected.sum().item())
    assert model.kept_layers(EN, XX)["decoder"] == [0, 2, 3]


def test_activation_checkpointing_gives_the_same_gradients(corpus):
    grads = []
    for flags in ((), ("--checkpoint-activations",)):
        task, model, _ = build(corpus, "--latent-layers", "both", *flags, seed=5)
        model.train()
        model.set_num_updates(3)
        torch.manual_seed(0)
        model(**collate(task, [0, 20, 1])["net_input"])[0].sum().backward()
        model.auxiliary_outputs()
        grads.append([model.decoder.layer_select.logits.grad, model.encoder.layers[1].fc2.weight.grad])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("flags,message", [
    (["--latent-decoder-target-depth", "5"], r"--latent-decoder-target-depth 5 is outside 0..4 \(--decoder-layers\)"),
    (["--latent-keep", "top-k"], "--latent-keep top-k keeps the K = --latent-decoder-target-depth most probable layers"),
    (["--latent-keep-threshold", "1.5"], r"--latent-keep-threshold 1.5 is outside \[0, 1\]"),
    (["--latent-tau-end", "0"], r"--latent-tau-end 0.0 is outside \(0, inf\): the Gumbel-softmax temperature must be "
                                "positive"),
    (["--latent-kl-weight", "-1"], r"--latent-kl-weight -1.0 is outside \[0, inf\): a loss weight"),
    (["--latent-selection-update-period", "0"], r"--latent-selection-update-period 0 is outside \[1, inf\): I of "
                                                "Algorithm 2"),
])
def test_bad_flags_are_one_line_errors(corpus, flags, message):
    with pytest.raises(ValueError, match=message) as error:
        build(corpus, *flags)
    assert "\n" not in str(error.value)


def test_post_norm_and_missing_ids_are_clear_errors(corpus):
    import copy

    task, _, args = build(corpus)
    post_norm = copy.deepcopy(args)
    post_norm.decoder_normalize_before = False  # what a hydra config could say
    with pytest.raises(ValueError, match="is pre-norm .* pass --decoder-normalize-before"):
        LatentDepthTransformerModel.build_model(post_norm, task)
    _, model, _ = build(corpus)
    batch = collate(task, [0, 1])
    ni = {k: v for k, v in batch["net_input"].items() if not k.endswith("lang_id")}
    with pytest.raises(MissingLanguageIds, match="multilingual_langshare"):
        model(**ni)


def test_training_without_a_temperature_horizon_is_a_clear_error(corpus):
    task, model, _ = build_task_and_model(corpus, arch="latent_depth_transformer_tiny", pairs=M2M)
    task.load_dataset("valid")
    model.train()
    with pytest.raises(ValueError, match="pass --max-update N"):
        model(**collate(task, [0, 1])["net_input"])
    model.eval()
    model(**collate(task, [0, 1])["net_input"])  # decoding needs no schedule


def test_utilisation_analysis_from_a_state_dict(tmp_path):
    from fairseq_langshare.analysis.latent_depth import plot_utilisation, utilisation_from_state
    from fairseq_langshare.languages import encode_inventory

    state = {"model": {"lang_inventory": encode_inventory(["en", "xx", "yy"]),
                       "decoder.layer_select.logits": torch.tensor(DEC_LOGITS)},
             "cfg": {"model": {"latent_keep": "threshold", "latent_keep_threshold": 0.5, "latent_decoder_lang": "tgt"},
                     "task": {"lang_pairs": "en-xx,en-yy"}}}
    stats = utilisation_from_state(state)
    assert list(stats) == ["decoder"]
    dec = stats["decoder"]
    assert dec["languages"] == ["xx", "yy"] and dec["kept_layers"] == {"xx": [1, 3], "yy": [2, 3]}
    assert dec["kept_depth"] == {"xx": 2, "yy": 2}
    assert dec["utilisation"][2] == pytest.approx(torch.sigmoid(torch.tensor(3.0)).item())
    assert plot_utilisation(dec, "decoder", tmp_path / "u.png").stat().st_size > 0
    state["model"].pop("decoder.layer_select.logits")
    with pytest.raises(ValueError, match="has no latent layers"):
        utilisation_from_state(state)


# --- fairseq-train -----------------------------------------------------------------------------

def latent_args(save, max_update, *extra):
    args = [a for a in TRAIN if a != "--disable-validation"]
    return args + ["--arch", "latent_depth_transformer_tiny", "--max-update", str(max_update), "--save-dir", str(save),
                   "--log-interval", "1", "--disable-validation", *extra]


def logged(records, key):
    values = {int(float(r["num_updates"])): float(r[key]) for r in records
              if r.get(key) is not None and "num_updates" in r}
    assert values, f"{key} never logged"
    return values


@pytest.mark.slow
def test_target_depth_loss_moves_the_expected_depth_toward_K(corpus, tmp_path):
    depth = {}
    for k in (1, 4):
        records = train(task_args(corpus) + latent_args(
            tmp_path / str(k), 120, "--latent-decoder-target-depth", str(k), "--latent-target-depth-weight", "1",
            "--latent-commit-updates", "0",
            "--latent-kl-weight", "0", "--latent-tau-start", "1", "--latent-tau-end", "1"))
        depth[k] = logged(records, "stat_dec_depth")
        assert depth[k][1] == pytest.approx(2.0, abs=0.05)  # 4 layers at q = 1/2
        aux = logged(records, "aux_target_depth_dec")
        assert sum(list(aux.values())[-20:]) / 20 < sum(list(aux.values())[:20]) / 20
    assert depth[1][120] < 1.7 and depth[4][120] > 2.3, (depth[1][120], depth[4][120])


def test_a_short_training_moves_the_posteriors_l_k_penalises_below_one_half(corpus, tmp_path):
    """K = 1 of 4 decoder layers: L_K penalises every layer beyond the first, so within 60 updates
    the posteriors leave 1/2 downwards and one layer per language stays ahead. The logit scale
    (alpha = scale * theta) is what lets them travel at this budget: at scale 1 they barely move."""
    ends = {}
    for scale in (1, 10):
        records = train(task_args(corpus) + latent_args(
            tmp_path / str(scale), 60, "--latent-decoder-target-depth", "1", "--latent-target-depth-weight", "1",
            "--latent-commit-updates", "0", "--latent-logit-lr-scale", str(scale)))
        ends[scale] = [logged(records, f"stat_dec_u_{layer}")[60] for layer in range(1, 5)]
    assert sum(ends[10]) < 1.6 and sum(ends[1]) > sum(ends[10]) + 0.3, ends
    # one layer stays ahead of the rest: by 0.065 on torch 2.13 and 0.0375 on 2.4.1 (whose random numbers
    # differ); at logit scale 1 all four are within 0.01 of each other
    assert sorted(ends[10])[-1] > sorted(ends[10])[-2] + 0.025, ends


def close_file_handlers(path):
    """fairseq-train --log-file adds a file handler per epoch and never removes it: in-process,
    later runs of the session would keep writing to this file."""
    loggers = [logging.getLogger()] + [l for l in logging.Logger.manager.loggerDict.values()
                                       if isinstance(l, logging.Logger)]
    for logger in loggers:
        for handler in list(logger.handlers):
            if isinstance(handler, logging.FileHandler) and handler.baseFilename == str(path.resolve()):
                logger.removeHandler(handler)
                handler.close()


@pytest.fixture(scope="module")
def trained(corpus, tmp_path_factory):
    """20 updates, stop, resume to 150 (top-2 of 4 decoder layers kept at inference; training commits
    to them at update 100)."""
    save = tmp_path_factory.mktemp("latent_ckpt")
    log = save / "train.log"
    flags = ["--latent-tau-anneal-updates", "40", "--latent-kl-anneal-updates", "40", "--latent-kl-weight", "0.5",
             "--latent-decoder-target-depth", "2", "--latent-keep", "top-k", "--latent-selection-update-period", "2",
             "--latent-commit-updates", "100", "--log-file", str(log)]
    try:
        first = train(task_args(corpus) + latent_args(save, 20, *flags))
        resumed = train(task_args(corpus) + latent_args(save, 150, *flags))
    finally:
        close_file_handlers(log)
    return {"dir": save, "checkpoint": save / "checkpoint_last.pt", "log": log, "first": first, "resumed": resumed}


def test_schedules_resume_from_the_checkpoint(trained):
    tau, beta = logged(trained["first"], "stat_latent_tau"), logged(trained["first"], "stat_latent_kl_beta")
    # update n is trained with the schedules at n - 1 updates
    assert tau[20] == pytest.approx(exponential_ramp(19, 40, 0.1, 1.0), abs=1e-4)
    assert beta[1] == 0.0 and beta[20] == pytest.approx(0.5 * 19 / 40, abs=1e-4)
    tau, beta = logged(trained["resumed"], "stat_latent_tau"), logged(trained["resumed"], "stat_latent_kl_beta")
    assert min(tau) == 21 and tau[21] == pytest.approx(exponential_ramp(20, 40, 0.1, 1.0), abs=1e-4)
    assert beta[21] == pytest.approx(0.5 * 20 / 40, abs=1e-4)


def test_training_commits_to_the_pruned_network_and_keeps_it(trained):
    """The commit at update 100 survives the stop/resume at 20, freezes the posteriors (nothing
    samples or learns them after it) and is what the checkpoint decodes."""
    committed = logged(trained["resumed"], "stat_dec_committed")
    assert all(v == 0.0 for n, v in committed.items() if n <= 100) and all(
        v == 1.0 for n, v in committed.items() if n > 100)
    tau = logged(trained["resumed"], "stat_latent_tau")  # sampling stops at the commit
    assert max(tau) == 100
    u = logged(trained["resumed"], "stat_dec_u_1")
    assert len({u[n] for n in range(101, 151)}) == 1
    assert logged(trained["resumed"], "stat_dec_kept")[150] == 2.0
    state = torch.load(trained["checkpoint"], weights_only=True)["model"]
    assert bool(state["decoder.layer_select.committed"])
    assert state["decoder.layer_select.committed_keep"][[XX, YY]].sum(-1).tolist() == [2, 2]


@pytest.mark.parametrize("src,tgt", [("en", "xx"), ("en", "yy")])
def test_generation_is_deterministic_and_equals_the_exported_pruned_model(corpus, trained, tmp_path, src, tgt):
    checkpoint = trained["checkpoint"]
    full = full_generate(corpus, checkpoint, src, tgt)
    assert len(full) == 20 and full_generate(corpus, checkpoint, src, tgt) == full
    report = export_pair(checkpoint, src, tgt, tmp_path / f"{src}-{tgt}.pt", verbose=False)
    assert plain_generate(corpus, tmp_path / f"{src}-{tgt}.pt", src, tgt) == full  # fairseq alone, no plugin
    exported = torch.load(tmp_path / f"{src}-{tgt}.pt", weights_only=True)
    assert exported["cfg"]["model"]["decoder_layers"] == 2  # the top 2 of 4 latent decoder layers
    assert not any(k.startswith("decoder.layers.2.") or "layer_select" in k for k in exported["model"])
    assert report["params"] < report["full_params"]


def test_exporting_a_network_training_only_sampled_says_so(trained, tmp_path, caplog):
    """Was: an export of a model that never committed, whose posteriors are undecided, said nothing,
    where decoding the full checkpoint warns (docs/latent_depth.md: never decode a network training
    did not run, silently). The committed checkpoint exports without the warning."""
    state = torch.load(trained["checkpoint"], weights_only=True)
    state["model"]["decoder.layer_select.committed"].zero_()
    state["model"]["decoder.layer_select.logits"].zero_()  # q(z = 1) = 0.5 for every layer: undecided
    torch.save(state, tmp_path / "uncommitted.pt")
    with caplog.at_level(logging.WARNING):
        export_pair(trained["checkpoint"], "en", "xx", tmp_path / "committed.pt", verbose=False)
        assert "undecided" not in caplog.text
        export_pair(tmp_path / "uncommitted.pt", "en", "xx", tmp_path / "sampled.pt", verbose=False)
    assert "100% of the decoder stack's selection posteriors of xx are undecided" in caplog.text
    assert "--latent-commit-updates" in caplog.text


def test_trained_model_beam_search_is_per_sentence(corpus, trained):
    """Rows leave the beam at different steps while xx and yy keep different layers: a mixed batch
    still gives every sentence its own translation (the layers' caches follow the beam)."""
    from fairseq import checkpoint_utils

    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(trained["checkpoint"])], arg_overrides={"data": str(corpus["bin"])})
    model = models[0].eval()
    selector = model.decoder.layer_select  # xx keeps decoder layers 1, 2; yy keeps 2, 3, 4
    selector.committed.fill_(False)
    selector._cache.clear()
    selector.set_alpha(torch.tensor([[1.0] * 4, [2.0, 2.0, -2.0, -2.0], [-2.0, 2.0, 2.0, 2.0]]))
    selector.keep_rule = "threshold"
    task.load_dataset("test")
    ds = task.dataset("test")
    indices = [s + k for k in range(8) for s in (0, ds.cumulative_sizes[0])]
    assert_beam_search_mixed_equals_alone(task, model, indices, lambda idx: ds.collater([ds[i] for i in idx]),
                                          max_len_b=20, min_distinct_lengths=3)


def test_analysis_cli_writes_utilisation_and_its_history(trained, tmp_path, capsys):
    from fairseq_langshare.cli import main

    out = tmp_path / "analysis"
    assert main(["analyze", "latent-depth", str(trained["checkpoint"]), "--log", str(trained["log"]),
                 "--out", str(out)]) == 0
    assert "expected depth" in capsys.readouterr().out
    result = json.loads((out / "latent_depth.json").read_text())
    dec = result["stacks"]["decoder"]
    assert dec["languages"] == ["xx", "yy"] and len(dec["probabilities"]["xx"]) == 4
    assert dec["kept_depth"] == {"xx": 2, "yy": 2}
    # training committed at update 100 with the top-2 rule: the JSON says which rule decided
    assert (dec["rule"], dec["commit_rule"], dec["top_k"], dec["threshold"]) == ("committed", "top-k", 2, None)
    assert dec["training"]["updates"] == list(range(1, 151)) and len(dec["training"]["utilisation"][0]) == 4
    assert (out / "latent_depth_decoder.png").stat().st_size > 0
    assert (out / "latent_depth_decoder_training.png").stat().st_size > 0
    with pytest.raises(SystemExit):
        main(["analyze", "latent-depth"])
    assert main(["analyze", "latent-depth", str(trained["checkpoint"]), "--log", str(tmp_path / "none.log"),
                 "--out", str(out)]) == 2
    assert "no training log" in capsys.readouterr().err
    # a file that is no latent depth log: refused before anything is written (was: the figure of the
    # analysis already in --out replaced, its JSON kept; a fresh --out left holding one figure)
    other = tmp_path / "other.log"
    other.write_text("| epoch 001 | loss 5.2\n")
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.iterdir()}
    for target in (out, tmp_path / "fresh"):
        assert main(["analyze", "latent-depth", str(trained["checkpoint"]), "--log", str(other),
                     "--out", str(target)]) == 2
        assert "no stat_dec_u_* values in" in capsys.readouterr().err
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.iterdir()} == before
    assert not (tmp_path / "fresh").exists()


def test_a_log_without_per_update_lines_names_the_log_format(corpus, tmp_path, capsys, monkeypatch):
    """fairseq-train under a terminal logs in its tqdm format, which writes no per-update line to --log-file,
    only the epoch (and validation) summaries, whose stat_dec_u_* are averages over the epoch. Was: "no
    stat_dec_u_* values in LOG: pass the log of a latent_depth_transformer run", though it is one."""
    from types import SimpleNamespace

    from fairseq.logging import progress_bar

    from fairseq_langshare.cli import main

    save, log = tmp_path / "run", tmp_path / "tty.log"
    args = latent_args(save, 3, "--log-file", str(log))
    args[args.index("--log-format") + 1] = "tqdm"  # what fairseq-train picks when stderr is a terminal
    # fairseq falls back to simple unless stderr is a terminal: make it one, as in `script -qec "fairseq-train ..."`
    monkeypatch.setattr(progress_bar, "sys", SimpleNamespace(stderr=SimpleNamespace(isatty=lambda: True), argv=[]))
    try:
        train(task_args(corpus) + args)
    finally:
        close_file_handlers(log)
    assert "stat_dec_u_1 " in log.read_text()  # the epoch line has them, in its "key value |" form
    capsys.readouterr()  # tqdm's bar
    assert main(["analyze", "latent-depth", str(save / "checkpoint_last.pt"), "--log", str(log),
                 "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [
        f"langshare analyze latent-depth: error: {log} holds stat_dec_u_* only in its epoch and validation summaries (averages "
        "over an epoch), no per-update line, which the utilisation over training needs: fairseq-train wrote it in "
        "its tqdm format (its default under a terminal; --log-file writes the console's format) or with a "
        "--log-interval above the updates of an epoch; train with --log-format simple --log-interval N"], err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("rule,commit_rule", [("committed", "top-k"), ("committed", "threshold"), ("top-k", None)])
def test_utilisation_figure_shows_its_whole_title(tmp_path, monkeypatch, rule, commit_rule):
    """Was: the title of a 4-layer stack's heatmap ran past both edges of the figure."""
    from fairseq_langshare.analysis import latent_depth

    figures = []
    monkeypatch.setattr(latent_depth, "save_figure_atomic", lambda fig, path: figures.append(fig) or path)
    decide = commit_rule or rule
    stats = {"languages": ["xx", "yy"], "layers": 4, "side": "tgt", "rule": rule, "commit_rule": commit_rule,
             "threshold": 0.5 if decide == "threshold" else None, "top_k": 2 if decide == "top-k" else None,
             "probabilities": {"xx": [0.9, 0.8, 0.1, 0.2], "yy": [0.1, 0.9, 0.9, 0.3]},
             "kept_layers": {"xx": [1, 2], "yy": [2, 3]}}
    latent_depth.plot_utilisation(stats, "decoder", tmp_path / "x.png")
    fig = figures[0]
    renderer = fig.canvas.get_renderer()
    title, box = fig.axes[0].title, fig.bbox
    extent = title.get_window_extent(renderer)
    assert box.x0 <= extent.x0 and extent.x1 <= box.x1 and extent.y1 <= box.y1, (title.get_text(), extent, box)
    assert ("top 2" if decide == "top-k" else "q >= 0.5") in title.get_text()
    assert ("committed in training" in title.get_text()) == (rule == "committed")


def test_analysis_refuses_the_log_of_another_run(trained, tmp_path, capsys):
    """Was: a --log of another latent depth run was drawn as this checkpoint's training history."""
    from fairseq_langshare.cli import main

    text = trained["log"].read_text()
    save_dir = str(trained["dir"])
    assert f"'save_dir': '{save_dir}'" in text  # fairseq logs its config, with --save-dir, at every start
    other_run = tmp_path / "other_run.log"
    other_run.write_text(text.replace(f"'save_dir': '{save_dir}'", "'save_dir': 'runs/other'"))
    fewer_layers = tmp_path / "fewer_layers.log"  # no config line: only the layer count can tell
    fewer_layers.write_text("".join(json.dumps({"num_updates": str(n), "stat_dec_u_1": "0.5", "stat_dec_u_2": "0.5"})
                                    + "\n" for n in range(1, 4)))
    for log, message in ((other_run, f"--log {other_run} is the log of a run saving to 'runs/other', and "
                                     f"{trained['checkpoint']} was saved by the run saving to '{save_dir}': pass the "
                                     "--log-file of the run that wrote the checkpoint"),
                         (fewer_layers, f"--log {fewer_layers} logs 2 decoder layers, and {trained['checkpoint']} "
                                        "has 4: pass the --log-file of the run that wrote the checkpoint")):
        assert main(["analyze", "latent-depth", str(trained["checkpoint"]), "--log", str(log),
                     "--out", str(tmp_path / "out")]) == 2
        assert capsys.readouterr().err.strip().splitlines() == [f"langshare analyze latent-depth: error: {message}"]
        assert not (tmp_path / "out").exists()


def test_a_24_layer_decoder_trains_without_nan(corpus, tmp_path):
    records = train(task_args(corpus) + latent_args(tmp_path, 30, "--decoder-layers", "24",
                                                    "--latent-decoder-target-depth", "12"))
    losses = logged(records, "loss")
    assert len(losses) == 30 and all(math.isfinite(v) for v in losses.values())
    assert sum(losses[n] for n in range(26, 31)) < sum(losses[n] for n in range(1, 6))
    assert math.isfinite(logged(records, "stat_dec_u_24")[30]) and math.isfinite(logged(records, "gnorm")[30])


@pytest.mark.parametrize("analysis", ["latent-depth", "adaptive-sparse", "lsl", "clsr", "lsl-similarity"])
def test_every_analysis_names_a_checkpoint_that_is_a_directory(tmp_path, capsys, analysis):
    """Was: "no checkpoint runs/x: pass the .pt file" (latent-depth, adaptive-sparse, lsl) for a directory
    that exists; "--path runs/x ..." (clsr, lsl-similarity), a flag `analyze` does not have."""
    from fairseq_langshare.cli import main

    run = tmp_path / "run"
    run.mkdir()
    (run / "checkpoint_best.pt").write_bytes(b"")
    assert main(["analyze", analysis, str(run), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.endswith(f"checkpoint {run} is a directory; pass a checkpoint file, e.g. {run}/checkpoint_best.pt"), err
    assert not (tmp_path / "out").exists()
