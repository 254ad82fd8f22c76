"""Mixed precision: every method trains with --fp16 and with --bf16, and auxiliary losses are
accumulated in fp32 whatever the model's dtype (a half sum overflows past 65,504).

fairseq 0.12 on the CPU: ``--fp16`` needs ``--fp16-no-flatten-grads`` (the flat fp32 copy of the
parameters is allocated on ``torch.cuda.current_device()``); ``--bf16`` on fairseq-train's
command line also turns on ``--tpu`` (its options.py) and then fails without torch_xla on any
device, so bf16 runs from the config as ``fairseq-hydra-train ... common.bf16=true`` sets it
(``--tpu`` stays off). On CUDA see tests/test_gpu.py."""

import copy
import math

import pytest
import torch

from fairseq_langshare.criterions.langshare_label_smoothed_cross_entropy import (
    LangshareLabelSmoothedCrossEntropy,
)
from method_configs import AUX_LOSSES, METHODS, TRAIN, distinct_languages
from test_language_aware_model import collate, mixed_indices
from tiny_corpus import build_task_and_model, task_args, train

M2M = ["en-xx", "en-yy", "xx-yy"]  # xx-yy (valid only): batches mix source languages too
PRECISIONS = {  # flags, config overrides (as fairseq-hydra-train sets them), dtype the model trains in
    "fp16": (["--fp16", "--fp16-no-flatten-grads"], None, torch.float16),
    "bf16": ([], {"common.bf16": True}, torch.bfloat16),
}


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_thread):
    yield


@pytest.mark.slow
@pytest.mark.parametrize("precision", list(PRECISIONS))
@pytest.mark.parametrize("method", list(METHODS))
def test_every_method_trains_in_mixed_precision(corpus, tmp_path, monkeypatch, method, precision):
    flags, overrides, dtype = PRECISIONS[precision]
    trained_in = set()
    forward = LangshareLabelSmoothedCrossEntropy.forward

    def recording_forward(self, model, sample, reduce=True):
        trained_in.add(next(model.parameters()).dtype)
        return forward(self, model, sample, reduce)

    monkeypatch.setattr(LangshareLabelSmoothedCrossEntropy, "forward", recording_forward)
    records = train(task_args(corpus) + TRAIN + METHODS[method] + flags + ["--cpu", "--save-dir", str(tmp_path)],
                    overrides)
    steps = [r for r in records if "num_updates" in r and "loss" in r]
    assert [int(float(r["num_updates"])) for r in steps] == [1, 2, 3, 4]
    for r in steps:
        for key, value in r.items():
            # None: a term of the other phase (its meter has no value in this interval)
            if value is not None and (key in ("loss", "nll_loss") or key.startswith(("aux_", "stat_"))):
                assert math.isfinite(float(value)), (r["num_updates"], key, value)
    logged = {k[len("aux_"):] for r in steps for k, v in r.items() if k.startswith("aux_") and v is not None}
    assert logged == AUX_LOSSES.get(method, set())
    assert trained_in == {dtype}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("method,num_updates", [(m, 0) for m in AUX_LOSSES] + [("adaptive_sparse", 3)],
                         ids=[*AUX_LOSSES, "adaptive_sparse_phase2"])  # every method that reports losses
def test_auxiliary_losses_are_fp32_and_match_the_fp32_model(corpus, method, num_updates, dtype):
    """The model in half (bfloat16) reports each auxiliary loss as an fp32 scalar equal to the
    fp32 model's up to the rounding of its inputs."""
    flags = METHODS[method]
    task, model, _ = build_task_and_model(corpus, arch=flags[1], pairs=M2M,
                                          extra=[*flags[2:], "--dropout", "0.0", "--max-update", "10"])
    task.load_dataset("valid")
    distinct_languages(model)
    batch = collate(task, mixed_indices(task))
    values = {}
    for dt in (torch.float32, dtype):
        m = copy.deepcopy(model).to(dt).train()
        m.set_num_updates(num_updates)  # CLSR at update 0: no gate noise
        torch.manual_seed(0)  # the same Gumbel draws (sampled in fp32 whatever the model's dtype)
        m(**batch["net_input"])
        losses, _ = m.auxiliary_outputs()
        values[dt] = {name: value for name, (value, _) in losses.items()}
    assert values[dtype] and set(values[dtype]) == set(values[torch.float32]) <= AUX_LOSSES[method]
    for name, value in values[dtype].items():
        assert value.dtype == torch.float32, name
        assert values[torch.float32][name] > 0, name  # a term that is 0 in both would compare nothing
        torch.testing.assert_close(value, values[torch.float32][name], rtol=2e-2, atol=1e-2)
