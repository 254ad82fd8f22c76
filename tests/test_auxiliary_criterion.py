"""A model whose training adds auxiliary losses (CLSR's budget, latent depth's KL and target depth, adaptive
sparsity's terms) trained with a criterion that drops them (fairseq's label_smoothed_cross_entropy,
cross_entropy): was a run without its regularizers, exit 0, no word. Now refused in one line when the criterion
is built; models without auxiliary losses train with any criterion."""

import pytest
import torch

from cli_checks import fairseq_error, snapshot
from method_configs import AUX_LOSSES, METHODS
from tiny_corpus import build_task_and_model, task_args, train

PLAIN = ["--optimizer", "adam", "--lr", "0.005", "--max-tokens", "1000", "--cpu", "--num-workers", "0", "--seed", "1",
         "--disable-validation", "--no-epoch-checkpoints", "--log-format", "json", "--max-update", "1"]
FAIRSEQ_LS = ["--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1"]


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_thread):
    yield


@pytest.mark.parametrize("arch,flags,terms", [
    ("clsr_transformer_tiny", [], "budget (--clsr-budget-weight 1.0)"),
    ("clsr_transformer_tiny", ["--clsr-variant", "gate"], "budget (--clsr-budget-weight 1.0)"),
    ("latent_depth_transformer_tiny", ["--latent-decoder-target-depth", "1"],
     "kl (--latent-kl-weight 1.0), target_depth (--latent-target-depth-weight 0.1)"),
    ("adaptive_sparse_transformer_tiny", [],
     "sparsity (--sparse-cs 0.1), disparity (--sparse-cd 0.02), topk (--sparse-ct 0.1)"),
])
@pytest.mark.parametrize("criterion", [FAIRSEQ_LS, ["--criterion", "cross_entropy"]])
def test_a_criterion_that_drops_the_models_auxiliary_losses_is_refused(corpus, tmp_path, arch, flags, terms,
                                                                         criterion):
    save = tmp_path / "ckpt"
    line = fairseq_error(train, task_args(corpus) + PLAIN + criterion + ["--arch", arch, *flags,
                                                                          "--save-dir", str(save)])
    assert line == (f"fairseq-train: error: {arch} adds auxiliary losses ({terms}) that only --criterion "
                    f"langshare_label_smoothed_cross_entropy puts into the loss, --criterion {criterion[1]} drops "
                    "them: pass --criterion langshare_label_smoothed_cross_entropy (or set their weights to 0)"), line
    assert not save.exists() or not snapshot(save)  # refused before anything was trained or saved


@pytest.mark.parametrize("arch,flags", [
    ("langshare_transformer_tiny", []),
    ("clsr_transformer_tiny", ["--clsr-variant", "shared"]),  # fixed gates: no budget
    ("clsr_transformer_tiny", ["--clsr-budget-weight", "0"]),  # CLSR w/o p
    ("latent_depth_transformer_tiny", ["--latent-kl-weight", "0"]),  # no target depth either
    ("lsl_transformer_tiny", ["--lsl-search"]),  # statistics only
    ("langshare_adapter_transformer_tiny", []),
])
def test_models_without_auxiliary_losses_train_with_fairseqs_criterion(corpus, tmp_path, arch, flags):
    train(task_args(corpus) + PLAIN + FAIRSEQ_LS + ["--arch", arch, *flags, "--save-dir", str(tmp_path / "ckpt")])
    assert (tmp_path / "ckpt" / "checkpoint_last.pt").is_file()


@pytest.mark.parametrize("method", sorted(METHODS))
def test_the_table_names_the_losses_each_method_reports(corpus, method):
    """auxiliary_terms (read from the options) against what a training forward of the method reports."""
    from fairseq_langshare.criterions.auxiliary_terms import auxiliary_terms
    from test_language_aware_model import collate, mixed_indices

    task, model, _ = build_task_and_model(corpus, extra=METHODS[method] + ["--max-update", "10"])
    task.load_dataset("valid")
    model.train()
    batch = task.ensure_lang_ids(collate(task, mixed_indices(task)), model)
    model(**batch["net_input"])
    losses, _ = model.auxiliary_outputs()
    assert bool(auxiliary_terms(model)) == bool(losses) == (method in AUX_LOSSES), (losses, auxiliary_terms(model))
    # every loss reported is one the refusal names ("budget (--clsr-budget-weight 1.0)" -> budget_*); adaptive
    # sparsity's disparity and top-k terms come in later phases
    names = {term.split(" ")[0] for term in auxiliary_terms(model)}
    assert {key for key in losses if not any(key.startswith(name) for name in names)} == set(), (losses, names)


@pytest.mark.parametrize("commit,refused", [(1, False), (0, True)])
def test_latent_depth_resumed_past_its_commit_trains_with_fairseqs_criterion(corpus, tmp_path, commit, refused):
    """A latent-depth checkpoint whose selection is committed trains on with fairseq's criterion (with
    --reset-optimizer, which fairseq asks for when the criterion changes): from the commit on training runs the
    frozen, pruned network and has no KL or target-depth term to drop. Was refused ('adds auxiliary losses (kl
    ...)'), read from the options alone. A checkpoint that has not committed (--latent-commit-updates 0: never)
    is still refused."""
    save = tmp_path / "ckpt"
    base = task_args(corpus) + PLAIN[:-2] + ["--arch", "latent_depth_transformer_tiny", "--latent-commit-updates",
                                             str(commit), "--save-dir", str(save)]
    train(base + ["--criterion", "langshare_label_smoothed_cross_entropy", "--max-update", "3"])
    resume = base + FAIRSEQ_LS + ["--reset-optimizer", "--max-update", "2"]
    if refused:
        line = fairseq_error(train, resume)
        assert line.startswith("fairseq-train: error: latent_depth_transformer_tiny adds auxiliary losses (kl "), line
        return
    train(resume)
    state = torch.load(save / "checkpoint_last.pt", weights_only=True)
    assert state["optimizer_history"][-1]["criterion_name"] == "LabelSmoothedCrossEntropyCriterion"
    assert state["optimizer_history"][-1]["num_updates"] == 2


def test_latent_depth_committed_fine_tuned_into_a_new_run_with_fairseqs_criterion(corpus, tmp_path):
    """``--finetune-from-model`` of a committed latent-depth checkpoint into a new --save-dir trains with fairseq's
    criterion, as the resume above does: fairseq loads that file when the new directory has no checkpoint_last.pt.
    Was refused ('adds auxiliary losses (kl ...)'): the check read only the run's own checkpoint."""
    base = task_args(corpus) + PLAIN[:-2] + ["--arch", "latent_depth_transformer_tiny", "--latent-commit-updates", "1"]
    train(base + ["--criterion", "langshare_label_smoothed_cross_entropy", "--max-update", "3",
                  "--save-dir", str(tmp_path / "pretrained")])
    tuned = tmp_path / "tuned"
    train(base + FAIRSEQ_LS + ["--finetune-from-model", str(tmp_path / "pretrained" / "checkpoint_last.pt"),
                               "--max-update", "2", "--save-dir", str(tuned)])
    state = torch.load(tuned / "checkpoint_last.pt", weights_only=True)
    assert state["optimizer_history"][-1]["criterion_name"] == "LabelSmoothedCrossEntropyCriterion"
    assert state["optimizer_history"][-1]["num_updates"] == 2
    assert all(bool(v) for k, v in state["model"].items() if k.endswith("layer_select.committed"))
