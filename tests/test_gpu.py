"""CUDA: every method trains and decodes in fp16, a mixed-language batch gives every sentence the
output it gets alone, and 2-process DDP trains with ``--ddp-backend legacy_ddp`` and with fairseq's
default ``pytorch_ddp`` and no other flag (the plugin turns ``find_unused_parameters`` on for the
methods: docs/scale.md).

Marked ``gpu`` (``pytest -m gpu`` runs only these); skipped without CUDA. DDP uses NCCL on two
GPUs, or gloo with both ranks on the one GPU a machine has."""

import os
import subprocess
import sys

import pytest
import torch

from method_configs import METHODS, TRAIN, distinct_languages
from test_hydra_and_distributed import free_port, outputs_of, updates_logged
from test_language_aware_model import assert_beam_search_mixed_equals_alone, collate, mixed_indices, row_keys
from tiny_corpus import build_task_and_model, generate, task_args, train

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

M2M = ["en-xx", "en-yy", "xx-yy"]  # xx-yy (valid/test only): batches mix source languages too
TOLERANCE = {torch.float32: dict(atol=1e-4, rtol=1e-3), torch.float16: dict(atol=3e-2, rtol=3e-2)}
DDP_BACKENDS = {"legacy_ddp": ["--ddp-backend", "legacy_ddp"],
                "pytorch_ddp": []}  # fairseq's default


DEVICE, EXTRA = "cuda", []  # (running these checks on the CPU: "cpu", ["--cpu", "--fp16-no-flatten-grads"])


def to_device(batch):
    from fairseq import utils

    return utils.move_to_cuda(batch, device=torch.device(DEVICE))


@pytest.mark.slow
@pytest.mark.parametrize("method", list(METHODS))
def test_every_method_trains_and_decodes_in_fp16(corpus, tmp_path, method):
    records = train(task_args(corpus) + TRAIN + METHODS[method] + ["--fp16", "--distributed-world-size", "1",
                                                                   "--save-dir", str(tmp_path), *EXTRA])
    steps = [r for r in records if "num_updates" in r and "loss" in r]
    assert steps and max(int(float(r["num_updates"])) for r in steps) == 4
    assert all(torch.isfinite(torch.tensor(float(r["loss"]))) for r in steps)
    assert "loss_scale" in steps[-1]  # fairseq's fp16 optimizer ran
    hyps = generate(task_args(corpus) + ["--path", str(tmp_path / "checkpoint_last.pt"), "--gen-subset", "test",
                                         "-s", "en", "-t", "yy", "--beam", "3", "--fp16", "--max-tokens", "1000",
                                         *EXTRA[:1]])
    assert len(hyps) == 20  # every test sentence decoded on the GPU


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("method", list(METHODS))
def test_mixed_batch_equals_each_sentence_alone_on_cuda(corpus, method, dtype):
    flags = METHODS[method]
    if method == "clsr" and dtype == torch.float16:
        # a hard gate [G >= 0] whose logit lies within fp16 rounding of 0 flips with the batch's
        # shapes (seen on the CPU in half: 3.1 apart); CLSR-Gate's soft gates route the same way
        flags = [*flags, "--clsr-variant", "gate"]
    task, model, _ = build_task_and_model(corpus, arch=flags[1], pairs=M2M,
                                          extra=[*flags[2:], "--dropout", "0.0", "--max-update", "10"])
    task.load_dataset("valid")
    distinct_languages(model, noise=0.1)  # every language's weights and selections differ noticeably
    model = model.to(device=DEVICE, dtype=dtype).eval()
    batch = to_device(collate(task, mixed_indices(task)))
    tol = TOLERANCE[dtype]
    with torch.no_grad():
        out = model(**batch["net_input"])[0]
        assert torch.isfinite(out).all()
        mixed = dict(zip(row_keys(task, batch), out))
        for i in mixed_indices(task):
            alone = to_device(collate(task, [i]))
            n = alone["target"].size(1)
            torch.testing.assert_close(mixed[row_keys(task, alone)[0]][:n], model(**alone["net_input"])[0][0], **tol)
        if method != "baseline":  # guards the comparison: routing by another language changes the output
            swapped = {**batch["net_input"]}
            for key in ("src_lang_id", "tgt_lang_id"):
                swapped[key] = (swapped[key] + 1) % len(task.inventory)
            assert (model(**swapped)[0] - out).abs().max() > 10 * tol["atol"]
    if dtype == torch.float32:
        assert_beam_search_mixed_equals_alone(task, model, collater=lambda idx: to_device(collate(task, idx)),
                                              max_len_b=10)


@pytest.mark.slow
@pytest.mark.parametrize("ddp", list(DDP_BACKENDS))
@pytest.mark.parametrize("method", list(METHODS))
def test_two_process_ddp_in_fp16(corpus, tmp_path, method, ddp):
    backend, devices = ("nccl", (0, 1)) if torch.cuda.device_count() >= 2 else ("gloo", (0, 0))
    cmd = [os.path.join(os.path.dirname(sys.executable), "fairseq-train"), *task_args(corpus), *TRAIN,
           *METHODS[method], "--fp16", "--save-dir", str(tmp_path / "ckpt"), "--distributed-backend", backend,
           "--distributed-world-size", "2", "--distributed-init-method", f"tcp://127.0.0.1:{free_port()}",
           "--distributed-no-spawn", *DDP_BACKENDS[ddp], *EXTRA]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen(cmd + ["--distributed-rank", str(rank), "--device-id", str(device)], cwd=tmp_path,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for rank, device in enumerate(devices)]
    outs = outputs_of(procs, timeout=600)
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out[-3000:]
    assert "distributed init (rank 0)" in outs[0] and "distributed init (rank 1)" in outs[1]
    assert max(updates_logged(outs[0])) == 4
    if ddp == "pytorch_ddp":
        assert ("find_unused_parameters on" in outs[0]) == (method != "baseline")
    assert (tmp_path / "ckpt" / "checkpoint_last.pt").exists()
