"""clsr_transformer through fairseq-train / fairseq-generate: the budget moves the gates,
the noise schedule resumes, decoding is deterministic."""

import json

import pytest

from test_end_to_end import TRAIN
from fairseq_langshare.checkpoint_safety import checkpoint_updates
from tiny_corpus import build_task_and_model, generate, task_args, train

pytestmark = pytest.mark.slow


def clsr_args(save, budget, max_update, ramp, *extra):
    args = [a for a in TRAIN]
    args[args.index("langshare_transformer_tiny")] = "clsr_transformer_tiny"
    return args + ["--clsr-encoder-lang", "tgt", "--clsr-budget", str(budget), "--clsr-noise-ramp-updates", str(ramp),
                   "--max-update", str(max_update), "--save-dir", str(save), "--log-interval", "1", *extra]


def last(records, key):
    values = [float(r[key]) for r in records if key in r]
    assert values, f"{key} never logged"
    return values[-1]


@pytest.fixture(scope="module")
def budget_runs(corpus, tmp_path_factory):
    root = tmp_path_factory.mktemp("clsr_budgets")
    return {p: (root / str(p), train(task_args(corpus) + clsr_args(root / str(p), p, 150, 150))) for p in (0.1, 0.9)}


def test_budget_moves_the_open_gate_rate_toward_p(budget_runs):
    rates = {p: last(records, "stat_gate_open") for p, (_, records) in budget_runs.items()}
    for p, (_, records) in budget_runs.items():
        assert last(records, "aux_budget") < 0.15, f"budget term still large for p={p}"
    assert rates[0.1] < 0.3 and rates[0.9] > 0.7, rates


def test_gate_analysis_lsscore_and_dedicated(corpus, budget_runs, tmp_path):
    from fairseq_langshare.cli import main

    gate_files = []
    for p, (save, _) in budget_runs.items():
        out = tmp_path / f"gates{p}"
        assert main(["analyze", "clsr", str(save / "checkpoint_last.pt"), "--data", str(corpus["bin"]), "--out", str(out)]) == 0
        stats = json.loads((out / "gates.json").read_text())
        assert stats["budget"] == p and set(stats["mean_gate_per_language"]["dec1.ffn"]) == {"xx", "yy"}
        assert stats["arch"] == "clsr_transformer_tiny"
        assert abs(stats["open_rate"] - p) < 0.3  # inference gates follow the training budget
        gate_files.append(str(out / "gates.json"))
    out = tmp_path / "lsscore"
    assert main(["analyze", "clsr-lsscore", *gate_files, "--out", str(out)]) == 0
    scores = json.loads((out / "lsscore.json").read_text())
    assert (out / "lsscore.png").stat().st_size > 0 and (out / "lsscore_heatmap.png").stat().st_size > 0
    flags = scores["dedicated"]
    if flags.startswith("--arch"):  # the derived architecture, that of the runs, trains as printed
        spec = flags.split()
        assert spec[1] == "clsr_transformer_tiny", flags
        train(task_args(corpus) + clsr_args(tmp_path / "dedicated", 0.3, 3, 3, *spec[2:]))
        assert (tmp_path / "dedicated" / "checkpoint_last.pt").exists()


def test_noise_schedule_resumes_from_checkpoint_and_decoding_is_deterministic(corpus, tmp_path):
    first = train(task_args(corpus) + clsr_args(tmp_path, 0.3, 40, 100))
    by_update = {int(float(r["num_updates"])): float(r["stat_noise_alpha"]) for r in first if "stat_noise_alpha" in r and "num_updates" in r}
    # update n is trained with alpha(n - 1) = 5 (n - 1) / 100
    assert by_update[40] == pytest.approx(5 * 39 / 100, abs=1e-3)
    resumed = train(task_args(corpus) + clsr_args(tmp_path, 0.3, 60, 100))
    by_update = {int(float(r["num_updates"])): float(r["stat_noise_alpha"]) for r in resumed if "stat_noise_alpha" in r and "num_updates" in r}
    assert min(by_update) == 41 and by_update[41] == pytest.approx(5 * 40 / 100, abs=1e-3)
    argv = task_args(corpus) + ["--path", str(tmp_path / "checkpoint_last.pt"), "--gen-subset", "test",
                                "-s", "en", "-t", "yy", "--beam", "3", "--cpu", "--max-tokens", "1000"]
    hyps = generate(argv)
    assert len(hyps) == 20 and generate(argv) == hyps


def test_a_run_without_max_update_is_refused_at_build(corpus, tmp_path):
    """Was: accepted, then the first forward stopped with "CLSR's noise alpha(t) ramps over the run but its length
    is unknown" and fairseq saved crash.pt. fairseq's --max-update 0 means unlimited: no horizon to ramp over."""
    message = (r"^--clsr-variant clsr ramps its gate noise alpha\(t\) over the run, but this run has no --max-update "
               r"to ramp over: pass --max-update N \(or --clsr-noise-ramp-updates N\)$")
    no_horizon = clsr_args(tmp_path / "run", 0.3, 0, 0)
    at = no_horizon.index("--max-update")
    no_horizon[at:at + 2] = ["--max-epoch", "1"]  # no --max-update: fairseq's 0, unlimited
    with pytest.raises(ValueError, match=message):
        train(task_args(corpus) + no_horizon)
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())  # no crash.pt
    for variant in ("gate", "shared"):  # no noise: no horizon needed
        build_task_and_model(corpus, arch="clsr_transformer_tiny", extra=["--clsr-variant", variant])
    # a resume takes the horizon from its checkpoint: no --max-update needed
    train(task_args(corpus) + clsr_args(tmp_path / "run", 0.3, 3, 0))
    train(task_args(corpus) + no_horizon)
    assert checkpoint_updates(tmp_path / "run" / "checkpoint_last.pt") > 3


def test_a_run_without_gate_noise_needs_no_max_update(corpus, tmp_path):
    """--clsr-max-noise 0 (no noise: alpha is 0 throughout) has no schedule to ramp over; the budget needs no
    horizon either. Was refused at build ('ramps its gate noise alpha(t) over the run, but this run has no
    --max-update'), and the first forward stopped had it got there."""
    argv = clsr_args(tmp_path / "run", 0.3, 0, 0, "--clsr-max-noise", "0")
    at = argv.index("--max-update")
    argv[at:at + 2] = ["--max-epoch", "1"]  # no --max-update: fairseq's 0, unlimited
    records = train(task_args(corpus) + argv)
    assert checkpoint_updates(tmp_path / "run" / "checkpoint_last.pt") > 0
    assert last(records, "stat_noise_alpha") == 0 and last(records, "aux_budget") > 0  # the budget still trains


def test_noise_added_on_resume_of_a_run_without_noise_ramps_over_this_run(corpus, tmp_path):
    """A run trained with --clsr-max-noise 0 and no --max-update (its saved ramp: 0, no length) resumed with noise
    and --max-update ramps alpha(t) over this run's --max-update. Was: the checkpoint's 0 replaced it and the first
    forward stopped with 'pass --max-update N', which the run had passed."""
    argv = clsr_args(tmp_path / "run", 0.3, 0, 0, "--clsr-max-noise", "0")
    at = argv.index("--max-update")
    argv[at:at + 2] = ["--max-epoch", "1"]
    train(task_args(corpus) + argv)
    trained = checkpoint_updates(tmp_path / "run" / "checkpoint_last.pt")
    resumed = trained + 4
    records = train(task_args(corpus) + clsr_args(tmp_path / "run", 0.3, resumed, 0, "--clsr-max-noise", "2"))
    assert checkpoint_updates(tmp_path / "run" / "checkpoint_last.pt") == resumed
    assert last(records, "stat_noise_alpha") == pytest.approx(2 * (resumed - 1) / resumed, rel=0.01)
