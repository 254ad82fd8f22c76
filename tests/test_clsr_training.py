"""clsr_transformer through fairseq-train / fairseq-generate: the budget moves the gates,
the noise schedule resumes, decoding is deterministic."""

import shutil

import pytest

from test_end_to_end import TRAIN
from tiny_corpus import generate, task_args, train

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


def test_budget_moves_the_open_gate_rate_toward_p(corpus, tmp_path):
    rates = {}
    for p in (0.1, 0.9):
        records = train(task_args(corpus) + clsr_args(tmp_path / str(p), p, 150, 150))
        rates[p] = last(records, "stat_gate_open")
        assert last(records, "aux_budget") < 0.15, f"budget term still large for p={p}"
    assert rates[0.1] < 0.3 and rates[0.9] > 0.7, rates


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
