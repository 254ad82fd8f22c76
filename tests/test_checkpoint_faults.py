"""Checkpoints and training runs a user gets wrong (the second bad-input sweep): a file that is no fairseq
checkpoint, a missing or directory ``--path``, a ``--max-update`` below what the run already trained, a disk that
fills while a checkpoint is saved, a ``.bin`` deleted beside its ``.idx``, a missing ``--lsl-dense-init``. Each is
one line naming the problem and the fix, and nothing is lost or left half-written."""

import errno
import os
import shutil
from pathlib import Path

import pytest
import torch

from cli_checks import GEN, TRAIN, fairseq_error, langshare, snapshot
from tiny_corpus import generate, task_args, train


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_thread):
    yield


@pytest.mark.parametrize("content", ["plain-dict", "bare-tensor", "dict-of-tensors"])
def test_a_file_that_is_no_fairseq_checkpoint_is_one_line(corpus, run, tmp_path, capsys, content):
    """Was ``KeyError: 'best_loss'`` / ``Tensor.__contains__`` in fairseq-generate and ``error: best_loss`` in
    export."""
    path = tmp_path / "model.pt"
    torch.save({"plain-dict": {"a": 1, "b": [2]}, "bare-tensor": torch.zeros(3),
                "dict-of-tensors": torch.load(run / "checkpoint_last.pt", weights_only=True)["model"]}[content], path)
    holds = {"plain-dict": "a dict with keys a, b", "bare-tensor": "a tensor",
             "dict-of-tensors": "a dict of 90 tensors (bare weights, such as a state_dict)"}[content]
    line = fairseq_error(generate, task_args(corpus) + ["--path", str(path)] + GEN, prog="fairseq-generate")
    assert line.startswith(f"fairseq-generate: error: {path} is not a fairseq checkpoint (it holds {holds}"), line
    assert line.endswith("pass a checkpoint that fairseq-train or langshare export wrote"), line
    code, line = langshare(capsys, "export", path, "--src", "en", "--tgt", "xx", "--out", tmp_path / "en-xx.pt")
    assert code == 2 and line.startswith(f"langshare export: error: {path} is not a fairseq checkpoint"), line
    assert not (tmp_path / "en-xx.pt").exists()


@pytest.mark.parametrize("case", ["missing", "directory"])
def test_a_missing_or_directory_path_is_one_line(corpus, run, case):
    path = run / "checkpoint_9.pt" if case == "missing" else run
    line = fairseq_error(generate, task_args(corpus) + ["--path", str(path)] + GEN, prog="fairseq-generate")
    if case == "missing":
        assert line.startswith(f"fairseq-generate: error: --path {path}: no such checkpoint; "), line
    else:
        assert line.startswith(f"fairseq-generate: error: --path {path} is a directory; "), line
    assert f"pass a checkpoint file, e.g. {run / 'checkpoint_last.pt'}" in line, line


def test_max_update_below_the_checkpoints_updates_is_refused_before_anything_is_written(corpus, run, tmp_path):
    """Was: one more update, an INFO line, and checkpoint_last.pt/checkpoint_best.pt overwritten by it."""
    save = tmp_path / "ckpt"
    shutil.copytree(run, save)
    before = snapshot(save)
    line = fairseq_error(train, task_args(corpus) + TRAIN + ["--max-update", "2", "--save-dir", str(save)])
    assert line == (f"fairseq-train: error: {save / 'checkpoint_last.pt'} was trained for 4 updates, more than "
                    "--max-update 2: pass --max-update 4 or more to train on, or another --save-dir to start a new "
                    f"run (--finetune-from-model {save / 'checkpoint_last.pt'} to start it from these weights)"), line
    after = snapshot(save)
    assert after == before  # nothing written: no crash.pt, no checkpoint replaced


def test_max_update_below_a_restore_files_updates_names_the_fine_tuning_flags(corpus, run, tmp_path):
    """--restore-file of another run into a new --save-dir: was told to pass "another --save-dir (or
    --restore-file)", which changes nothing (the restore file is loaded again, its update count with it). The
    fixes named: train on past its count, or count from 0 (--reset-optimizer, or --finetune-from-model), which
    trains."""
    base = task_args(corpus) + TRAIN + ["--max-update", "2"]
    restore = ["--restore-file", str(run / "checkpoint_last.pt")]
    line = fairseq_error(train, base + restore + ["--save-dir", str(tmp_path / "a")])
    assert line == (f"fairseq-train: error: --restore-file {run / 'checkpoint_last.pt'} was trained for 4 updates, "
                    "more than --max-update 2: pass --max-update 4 or more to train on from its count, or "
                    "--reset-optimizer to count updates from 0 (or --finetune-from-model instead of --restore-file: "
                    "fine-tuning)"), line
    assert not list((tmp_path / "a").iterdir())
    train(base + restore + ["--reset-optimizer", "--save-dir", str(tmp_path / "b")])
    saved = torch.load(tmp_path / "b" / "checkpoint_last.pt", weights_only=True)
    assert saved["optimizer_history"][-1]["num_updates"] == 2


@pytest.mark.parametrize("step", ["write", "copy"])
def test_a_full_disk_while_saving_leaves_no_tmp_and_keeps_the_previous_checkpoints(corpus, run, tmp_path,
                                                                                 monkeypatch, step):
    """write: fairseq's NAME.tmp was left behind, with a traceback; copy: fairseq copies the saved checkpoint to
    checkpoint_last.pt in place, so a full disk truncated the previous one."""
    import shutil as shutil_module
    import time
    from types import SimpleNamespace

    import fairseq.checkpoint_utils

    save = tmp_path / "ckpt"
    shutil.copytree(run, save)
    before = snapshot(save)

    def full_disk(obj, f, *args, **kwargs):
        f.write(b"PK\x03\x04 half a checkpoint")
        raise OSError(errno.ENOSPC, "No space left on device")

    def full_disk_copy(src, dst, *args, **kwargs):
        Path(dst).write_bytes(Path(src).read_bytes()[:100])
        raise OSError(errno.ENOSPC, "No space left on device")

    if step == "write":
        monkeypatch.setattr(torch, "save", full_disk)
        # fairseq tries a failed save three times, 2.5 s apart: the tries stay, the waits go
        monkeypatch.setattr(fairseq.checkpoint_utils, "time", SimpleNamespace(time=time.time, sleep=lambda s: None))
    else:
        monkeypatch.setattr(shutil_module, "copyfile", full_disk_copy)
    argv = task_args(corpus) + TRAIN + ["--max-update", "5", "--save-dir", str(save)]
    if step == "copy":  # an epoch or update checkpoint is written, then copied to checkpoint_last.pt
        argv.remove("--no-epoch-checkpoints")
        argv += ["--save-interval-updates", "1"]
    line = fairseq_error(train, argv)
    assert line.startswith(f"fairseq-train: error: cannot save checkpoint {save / 'checkpoint_last.pt'}: No space "
                           f"left on device; {save / 'checkpoint_last.pt'} is the last one saved"), line
    after = snapshot(save)
    for name in set(after) - set(before):  # the checkpoint written before the copy failed: whole
        assert step == "copy" and name.endswith(".pt"), name
        assert torch.load(save / name, weights_only=True)["optimizer_history"][-1]["num_updates"] == 5
        del after[name]
    assert after == before  # no .tmp, nothing replaced


def test_a_bin_deleted_beside_its_idx_is_one_line(corpus, run, eval_corpus, tmp_path, capsys):
    data = eval_corpus / "bin"
    (data / "test.en-xx.xx.bin").unlink()
    argv = [str(data)] + task_args(corpus)[1:] + ["--path", str(run / "checkpoint_last.pt")] + GEN
    message = f"{data / 'test.en-xx.xx.bin'} is missing (its index {data / 'test.en-xx.xx.idx'} is there): " \
              "re-binarize the test data of en-xx with fairseq-preprocess"
    assert fairseq_error(generate, argv, prog="fairseq-generate") == f"fairseq-generate: error: {message}"
    code, line = langshare(capsys, "evaluate", run / "checkpoint_last.pt", eval_corpus, "--directions", "en-xx",
                           "--out-json", tmp_path / "r.json")
    assert (code, line) == (2, f"langshare evaluate: error: {message}")


def test_a_missing_lsl_dense_init_is_one_line(corpus, tmp_path):
    missing = tmp_path / "dense.pt"
    line = fairseq_error(train, task_args(corpus) + TRAIN + [
        "--arch", "lsl_transformer_tiny", "--lsl-encoder-layers", "SRC={1}", "--lsl-dense-init", str(missing),
        "--max-update", "2", "--save-dir", str(tmp_path / "s")])
    assert line == (f"fairseq-train: error: --lsl-dense-init {missing}: no such checkpoint; pass the "
                    "checkpoint of the dense pre-training run (e.g. its checkpoint_best.pt)"), line
    assert not list((tmp_path / "s").iterdir())


@pytest.mark.parametrize("version,forced", [("2.4.1+cu121", "1"), ("2.5.1", "1"), ("2.6.0", None)])
def test_fairseqs_checkpoint_load_is_weights_only_on_every_supported_torch(tmp_path, monkeypatch, version, forced):
    """torch 2.4 and 2.5 still default to weights_only=False, and fairseq's torch.load passes none: a checkpoint
    holding an io.StringIO loaded there without a word (seen with torch 2.4.1). The load is now forced weights-only
    there (TORCH_FORCE_WEIGHTS_ONLY_LOAD for the call), and left to torch's own default from 2.6."""
    from fairseq import checkpoint_utils

    monkeypatch.delenv("TORCH_FORCE_WEIGHTS_ONLY_LOAD", raising=False)
    monkeypatch.delenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", raising=False)
    monkeypatch.setattr(torch, "__version__", version)
    seen = []

    def load(*args, **kwargs):
        seen.append(os.environ.get("TORCH_FORCE_WEIGHTS_ONLY_LOAD"))
        raise FileNotFoundError("stop here")

    monkeypatch.setattr(torch, "load", load)
    (tmp_path / "c.pt").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="stop here"):
        checkpoint_utils.load_checkpoint_to_cpu(str(tmp_path / "c.pt"))
    assert seen == [forced] and "TORCH_FORCE_WEIGHTS_ONLY_LOAD" not in os.environ


def test_fairseq_train_names_a_continue_once_checkpoint_past_max_update(corpus, tmp_path):
    """The same through fairseq-train, whose task options are built from the task's config. Was '--restore-file
    .../new/checkpoint_last.pt', a file that does not exist: that config did not carry --continue-once."""
    other = tmp_path / "other"
    train(task_args(corpus) + TRAIN + ["--max-update", "3", "--save-dir", str(other)])
    last = other / "checkpoint_last.pt"
    line = fairseq_error(train, task_args(corpus) + TRAIN + ["--max-update", "2", "--save-dir", str(tmp_path / "new"),
                                                            "--continue-once", str(last)])
    assert line.startswith(f"fairseq-train: error: --continue-once {last} was trained for 3 updates, more than "
                           "--max-update 2: "), line
    assert not (tmp_path / "new" / "checkpoint_last.pt").exists()


def test_a_continue_once_checkpoint_past_max_update_is_named_by_its_flag(tmp_path):
    """--continue-once (a first launch starting from another run's checkpoint) names that file and its flag, not a
    checkpoint_last.pt that does not exist or '--restore-file None'."""
    import argparse

    from fairseq_langshare.tasks.multilingual_langshare import ResumedPastMaxUpdate, check_resumed_updates

    other = tmp_path / "other" / "checkpoint_last.pt"
    args = argparse.Namespace(max_update=2, restore_file="checkpoint_last.pt", save_dir=str(tmp_path / "new"),
                              checkpoint_suffix="", continue_once=str(other))
    with pytest.raises(ResumedPastMaxUpdate, match=rf"^--continue-once {other} was trained for 5 updates, more than "
                                                   r"--max-update 2: .*\(or --finetune-from-model instead of "
                                                   r"--continue-once: fine-tuning\)$"):
        check_resumed_updates(5, args)
