"""The criterion adds each reported auxiliary loss once, weighted, and logs it separately."""

import pytest
import torch
from fairseq import metrics

from fairseq_langshare.criterions.langshare_label_smoothed_cross_entropy import (
    LangshareLabelSmoothedCrossEntropy,
)
from language_probe_model import build_probe
from method_configs import METHODS
from tiny_corpus import build_task_and_model


@pytest.fixture(scope="module")
def setup(corpus):
    task, model, args = build_task_and_model(corpus, extra=["--dropout", "0.0"])
    task.load_dataset("valid")
    ds = task.dataset("valid")
    batch = ds.collater([ds[i] for i in range(8)])
    return task, model, build_probe(task, args), batch


def make_criterion(task, smoothing=0.1):
    return LangshareLabelSmoothedCrossEntropy(task, sentence_avg=False, label_smoothing=smoothing)


def test_without_auxiliary_losses_it_is_label_smoothed_cross_entropy(setup):
    task, model, _, batch = setup
    from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterion

    ours, _, log = make_criterion(task)(model, batch)
    ref, _, _ = LabelSmoothedCrossEntropyCriterion(task, False, 0.1)(model, batch)
    torch.testing.assert_close(ours, ref)
    assert not any(k.startswith(("aux_", "stat_")) for k in log)


def test_auxiliary_loss_is_added_weighted_by_sample_size_and_logged(setup):
    task, _, probe, batch = setup
    loss, sample_size, log = make_criterion(task)(probe, batch)
    probe.auxiliary_outputs()  # nothing left over after the criterion collected
    aux = sum(layer.lang_bias.pow(2).mean() for layer in probe.encoder.layers)  # summed over layers
    net_output = probe(**batch["net_input"])
    probe.auxiliary_outputs()
    ce, _ = make_criterion(task).compute_loss(probe, net_output, batch)
    torch.testing.assert_close(loss, ce + 0.5 * aux * sample_size)
    assert log["aux_bias_norm"] == pytest.approx(aux.item() * sample_size, rel=1e-5)
    assert log["stat_probe_stat"] == pytest.approx(2.0 * sample_size)


def test_gradient_of_auxiliary_loss_reaches_its_parameters_in_one_backward(setup):
    task, _, probe, batch = setup
    probe.zero_grad()
    loss, _, _ = make_criterion(task, smoothing=0.0)(probe, batch)
    loss.backward()
    g_total = probe.encoder.layers[0].lang_bias.grad.clone()
    # only the CE part: weight 0 removes the auxiliary term
    probe.zero_grad()
    for layer in probe.encoder.layers:
        layer.report_loss = lambda name, value, weight, _l=layer: type(_l).report_loss(_l, name, value, 0.0)
    loss_ce, sample_size, _ = make_criterion(task, smoothing=0.0)(probe, batch)
    loss_ce.backward()
    g_ce = probe.encoder.layers[0].lang_bias.grad
    bias = probe.encoder.layers[0].lang_bias.detach()
    expected_aux_grad = 0.5 * sample_size * 2 * bias / bias.numel()
    torch.testing.assert_close(g_total - g_ce, expected_aux_grad, atol=1e-4, rtol=1e-3)
    for layer in probe.encoder.layers:
        del layer.report_loss


def test_reduce_metrics_logs_sample_weighted_means():
    logs = [
        {"loss": 2.0, "nll_loss": 2.0, "ntokens": 10, "sample_size": 10, "aux_budget": 0.3 * 10, "stat_open": 0.5 * 10},
        {"loss": 2.0, "nll_loss": 2.0, "ntokens": 30, "sample_size": 30, "aux_budget": 0.1 * 30, "stat_open": 0.1 * 30},
    ]
    with metrics.aggregate() as agg:
        LangshareLabelSmoothedCrossEntropy.reduce_metrics(logs)
    values = agg.get_smoothed_values()
    assert values["aux_budget"] == pytest.approx(0.15)
    assert values["stat_open"] == pytest.approx(0.2)


def test_a_model_with_uncollected_records_can_be_deep_copied(setup):
    """Was: a training forward nobody collected left the loss tensors (non-leaf, in the autograd
    graph) on the reporting modules, and ``copy.deepcopy(model)`` (EMA, averaging, a test's
    reference copy) raised "Only Tensors created explicitly by the user ... support the deepcopy"."""
    import copy

    task, _, probe, batch = setup
    probe.train()
    probe(**batch["net_input"])  # records a loss and a statistic, not collected
    twin = copy.deepcopy(probe)
    assert twin.auxiliary_outputs() == ({}, {})  # the copy starts with no record
    losses, stats = probe.auxiliary_outputs()  # the original keeps its own
    assert set(losses) == {"bias_norm"} and set(stats) == {"probe_stat"}


@pytest.mark.parametrize("method", list(METHODS))
def test_every_method_can_be_deep_copied_after_a_training_forward(corpus, method):
    """Was: CLSR's gates and adaptive sparsity's sampled scores of the call (and every reporter's
    records) stayed on the modules in the autograd graph, and ``copy.deepcopy`` raised."""
    import copy

    task, model, _ = build_task_and_model(corpus, arch=METHODS[method][1], extra=[*METHODS[method][2:],
                                                                                 "--max-update", "8"])
    task.load_dataset("valid")
    ds = task.dataset("valid")
    model.train()
    model.set_num_updates(3)
    model(**ds.collater([ds[i] for i in (0, 1, 20, 21)])["net_input"])
    twin = copy.deepcopy(model)
    for (name, a), b in zip(model.state_dict().items(), twin.state_dict().values()):
        torch.testing.assert_close(b, a, atol=0, rtol=0, msg=name)
