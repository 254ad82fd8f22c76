"""Bad input and faults (issue 19): every case ends in one line that names the problem and the fix, from
``langshare`` and as the last line of fairseq's CLIs (the plugin's excepthook prints it without a traceback),
and loses nothing: outputs are checked before the work, never written over an input, never half-written.

Most cases run in process: ``langshare`` through ``cli.main`` (exit status and stderr), fairseq's CLIs through
their entry points, whose exception goes through ``user_errors.error_line`` -- the function the excepthook
installed in ``fairseq-train``/``-generate``/``-interactive`` prints. Subprocess runs check that the hook is
really installed, that a ``fairseq-interactive`` session survives bad lines, and that a bad ``--input`` file is
refused before anything is translated.
"""

import json
import io
import logging
import os
import random
import shutil
import signal
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import torch

from cli_checks import BIN, GEN, TRAIN, cli_run, fairseq_error, langshare, last_line, snapshot
from fairseq_langshare import cli, evaluation
from tiny_corpus import generate, task_args, train


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_thread):
    yield


def broken_copy(source, kind, target):
    data = Path(source).read_bytes()
    # fixed bytes, not os.urandom: about 1 in 12 random files made torch's weights-only unpickler
    # raise IndexError or KeyError rather than UnpicklingError (a traceback, once in make test)
    target.write_bytes({"truncated": data[: len(data) // 3], "zero-byte": b"",
                        "random-bytes": random.Random(0).getrandbits(5000 * 8).to_bytes(5000, "little"),
                        "pickle-stack-underflow": b"\x80\x02R",  # IndexError in torch's unpickler
                        "pickle-missing-memo": b"\x80\x02h\x00"}[kind])  # KeyError there
    return target


# ----------------------------------------------------------------------------- checkpoints

@pytest.mark.parametrize("kind", ["truncated", "zero-byte", "random-bytes", "pickle-stack-underflow",
                                  "pickle-missing-memo"])
def test_broken_checkpoint_is_one_line_everywhere(corpus, run, tmp_path, capsys, kind):
    """fairseq-generate, langshare export and langshare recipe average: one line naming the file, why, and the
    newest readable checkpoint next to it; never torch's advice to switch weights-only loading off."""
    save = tmp_path / "ckpt"
    shutil.copytree(run, save)
    bad = broken_copy(run / "checkpoint_last.pt", kind, save / "checkpoint_last.pt")
    before = snapshot(save)
    line = fairseq_error(generate, task_args(corpus) + ["--path", str(bad)] + GEN, prog="fairseq-generate")
    assert line.startswith(f"fairseq-generate: error: cannot read checkpoint {bad}")
    newest = max(save.glob("checkpoint_*_*.pt"), key=lambda p: int(p.stem.split("_")[-1]))
    assert f"the newest readable checkpoint next to it is {newest}" in line
    assert "weights_only" not in line and "allow-list" not in line
    code, line = langshare(capsys, "export", bad, "--src", "en", "--tgt", "xx", "--out", tmp_path / "en-xx.pt")
    assert code == 2 and line.startswith(f"langshare export: error: cannot read checkpoint {bad}")
    code, line = langshare(capsys, "recipe", "average", "--inputs", newest, bad, "--out", tmp_path / "avg.pt")
    assert code == 2 and line.startswith(f"langshare recipe average: error: cannot read checkpoint {bad}")
    assert "weights_only" not in line
    assert snapshot(save) == before and not (tmp_path / "en-xx.pt").exists() and not (tmp_path / "avg.pt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # no temporary file left behind


def test_resume_from_a_truncated_checkpoint_last_names_the_one_to_resume_from(corpus, run, tmp_path):
    save = tmp_path / "ckpt"
    shutil.copytree(run, save)
    broken_copy(run / "checkpoint_last.pt", "truncated", save / "checkpoint_last.pt")
    before = snapshot(save)
    newest = max(save.glob("checkpoint_*_*.pt"), key=lambda p: int(p.stem.split("_")[-1]))
    line = fairseq_error(train, task_args(corpus) + TRAIN + ["--max-update", "6", "--save-dir", str(save)])
    assert line.startswith(f"fairseq-train: error: cannot read checkpoint {save / 'checkpoint_last.pt'}")
    assert line.endswith(f"the newest readable checkpoint next to it is {newest}: pass that one (to resume training "
                         "from it, move checkpoint_last.pt aside and copy that file to checkpoint_last.pt)")
    assert snapshot(save) == before


def test_a_broken_checkpoint_is_pointed_to_training_checkpoints_only(run, tmp_path, capsys):
    """Was: the newest readable *.pt beside it was suggested, a pair export too (which export then refused), and
    evaluate said "cannot read checkpoint X: UnreadableCheckpointError: cannot read checkpoint X ..." """
    folder = tmp_path / "d"
    folder.mkdir()
    bad = broken_copy(run / "checkpoint_last.pt", "truncated", folder / "model.pt")
    shutil.copy(run / "checkpoint_last.pt", folder / "en-xx.pt")  # a readable file not named as fairseq's
    code, line = langshare(capsys, "export", bad, "--src", "en", "--tgt", "xx", "--out", tmp_path / "o.pt")
    assert code == 2 and line.endswith("no other checkpoint next to it is readable: re-create it (train or export "
                                       "again)"), line
    shutil.copy(run / "checkpoint_last.pt", folder / "checkpoint_best.pt")
    code, line = langshare(capsys, "export", bad, "--src", "en", "--tgt", "xx", "--out", tmp_path / "o.pt")
    assert line.endswith(f"the newest readable checkpoint next to it is {folder / 'checkpoint_best.pt'}: pass that one")
    with pytest.raises(evaluation.EvaluationError) as error:
        evaluation._checkpoint_task(str(bad))
    assert str(error.value).startswith(f"cannot read checkpoint {bad} (") and str(error.value).count(str(bad)) == 1


def test_resuming_with_another_batch_per_update_says_so(corpus, tmp_path, caplog):
    """Was: a run trained on 2 ranks resumed on 1 with the same --update-freq averaged half as many sentences per
    update from then on, and nothing said so (docs/scale.md: keep processes x --update-freq)."""
    save = str(tmp_path / "ckpt")
    train(task_args(corpus) + TRAIN + ["--max-update", "2", "--update-freq", "2", "--save-dir", save])
    with caplog.at_level(logging.WARNING):
        train(task_args(corpus) + TRAIN + ["--max-update", "3", "--update-freq", "1", "--save-dir", save])
    said = [r.getMessage() for r in caplog.records if "per update (" in r.getMessage()]
    assert said == [f"{save}/checkpoint_last.pt was trained with 2 batches per update (1 process x --update-freq 2), "
                    "this run takes 1 (1 process x --update-freq 1): each update now takes 1/2 of the batch it "
                    "trained with; pass --update-freq 2 to keep it (docs/scale.md)"]
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        train(task_args(corpus) + TRAIN + ["--max-update", "4", "--update-freq", "1", "--save-dir", save])
    assert not [r for r in caplog.records if "per update (" in r.getMessage()]  # as the last run trained


def test_resuming_a_checkpoint_without_its_optimizer_state_says_every_schedule_starts_again(corpus, tmp_path, caplog):
    """A checkpoint saved with --no-save-optimizer-state has no update count fairseq restores: the resumed run
    counts from 0, so the learning-rate schedule and the method's (CLSR's noise ramp, latent depth's commit,
    adaptive sparsity's T-bar) start again. Was: nothing said so (found by a walk-through)."""
    save = str(tmp_path / "ckpt")
    train(task_args(corpus) + TRAIN + ["--max-update", "2", "--save-dir", save, "--no-save-optimizer-state"])
    with caplog.at_level(logging.WARNING):
        train(task_args(corpus) + TRAIN + ["--max-update", "3", "--save-dir", save])
    said = [r.getMessage() for r in caplog.records if "optimizer state" in r.getMessage()]
    assert said == [f"{save}/checkpoint_last.pt holds no optimizer state (saved with --no-save-optimizer-state), "
                    "so fairseq counts this run's updates from 0, not from its 2: the learning-rate schedule and "
                    "the method's schedules and phases start again; resume from a checkpoint saved with its "
                    "optimizer state to continue them (--reset-optimizer starts them again without this warning)"]
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        train(task_args(corpus) + TRAIN + ["--max-update", "4", "--save-dir", save])  # saved with its state now
    assert not [r for r in caplog.records if "optimizer state" in r.getMessage()]


def test_resuming_with_the_same_update_freq_says_nothing(corpus, tmp_path, caplog):
    """A run trained and resumed with --update-freq 2 takes the batch it trained with. Was: the task's options
    had no --update-freq (its config did not carry it), so the resume read 1 and warned 'each update now takes
    1/2 of the batch it trained with; pass --update-freq 2', which the user had passed."""
    save = str(tmp_path / "ckpt")
    train(task_args(corpus) + TRAIN + ["--max-update", "2", "--update-freq", "2", "--save-dir", save])
    with caplog.at_level(logging.WARNING):
        train(task_args(corpus) + TRAIN + ["--max-update", "3", "--update-freq", "2", "--save-dir", save])
    assert not [r.getMessage() for r in caplog.records if "per update (" in r.getMessage()]


@pytest.mark.parametrize("change,message", [
    (["--langs", "yy,en,xx"], "numbered in --langs order; pass --langs en,xx,yy"),
    (["--arch", "lsl_transformer_tiny", "--lsl-encoder-layers", "SRC={1}"],  # before the weights are loaded
     r"checkpoint_last.pt was trained with --arch langshare_transformer_tiny, this run has --arch "
     r"lsl_transformer_tiny: resume with --arch langshare_transformer_tiny, as it was trained, or start a new run "
     r"in another --save-dir"),
])
def test_resume_with_other_flags_names_the_mismatch(corpus, run, tmp_path, change, message):
    """fairseq's trainer wraps the model's own error into "ensure that the architectures match"; the line
    printed is the plugin's."""
    import re

    save = tmp_path / "ckpt"
    shutil.copytree(run, save)
    before = snapshot(save)
    argv = task_args(corpus) + TRAIN + ["--max-update", "6", "--save-dir", str(save)]
    for flag in change[::2]:  # replace the flag's value
        if flag in argv:
            del argv[argv.index(flag): argv.index(flag) + 2]
    line = fairseq_error(train, argv + change)
    assert re.search(message, line), line
    assert snapshot(save) == before


def test_decoding_on_another_corpus_names_the_dictionary_not_the_arch(corpus, run, eval_corpus, tmp_path, capsys):
    """A checkpoint decoded with another data directory's dictionary (another corpus, another --vocab-size):
    the line says the dictionaries differ, not that the run builds another --arch (it builds the same)."""
    for path in (eval_corpus / "bin").glob("dict*.txt"):
        path.write_text(path.read_text() + "".join(f"extra{i} 1\n" for i in range(5)))
    argv = task_args({**corpus, "bin": eval_corpus / "bin"}) + ["--path", str(run / "checkpoint_last.pt")] + GEN
    line = fairseq_error(generate, argv, prog="fairseq-generate")
    assert "--arch" not in line and "this run builds" not in line, line
    assert "the checkpoint was trained with a dictionary of " in line and " this run's has 5 more" in line, line
    assert line.endswith("pass the data directory the checkpoint was trained on (the same dict.txt) and the same "
                         "--langs"), line
    code, err = langshare(capsys, "evaluate", run / "checkpoint_last.pt", eval_corpus, "--directions", "en-xx")
    assert code == 2 and "the checkpoint was trained with a dictionary of " in err and "--arch" not in err, err


# ----------------------------------------------------------------------------- silent cases

def test_decoding_with_another_dictionary_of_the_same_size_is_refused(corpus, run, eval_corpus, capsys):
    """Two corpora prepared alike (same languages, same --vocab-size) have dictionaries of the same size:
    a checkpoint decoded with the other one's loaded and translated into garbage without a word."""
    for path in (eval_corpus / "bin").glob("dict*.txt"):
        lines = path.read_text().splitlines(keepends=True)
        lines[4], lines[5] = lines[5], lines[4]  # the same entries, two of them swapped
        path.write_text("".join(lines))
    argv = task_args({**corpus, "bin": eval_corpus / "bin"}) + ["--path", str(run / "checkpoint_last.pt")] + GEN
    line = fairseq_error(generate, argv, prog="fairseq-generate")
    assert "trained with another dictionary of the same size" in line, line
    assert line.endswith("pass the data directory the checkpoint was trained on (the same dict.txt) and the same "
                         "--langs"), line
    code, err = langshare(capsys, "evaluate", run / "checkpoint_last.pt", eval_corpus, "--directions", "en-xx")
    assert code == 2 and "trained with another dictionary of the same size" in err, err


@pytest.mark.parametrize("extra,reason", [
    ("--bea 5", "unrecognized arguments: --bea 5"),  # fairseq's parser takes no abbreviation
    ("--nbest x", "argument --nbest: invalid int value: 'x'"),
])
def test_generate_args_fairseq_refuses_are_one_line(run, eval_corpus, tmp_path, capsys, extra, reason):
    """Was: fairseq's 140-line usage under the prog name cli.py, once the first direction started decoding."""
    out = tmp_path / "results.json"
    code, line = langshare(capsys, "evaluate", run / "checkpoint_last.pt", eval_corpus, "--directions", "en-xx",
                           "--generate-args", extra, "--out-json", out)
    assert code == 2, line
    assert line == (f"langshare evaluate: error: fairseq-generate refuses --generate-args {extra!r} ({reason}): pass "
                    "flags `fairseq-generate --help` lists, by their full names"), line
    assert not out.exists()


@pytest.mark.parametrize("flags,message", [
    ([], "trained with --encoder-langtok tgt but this run has no --encoder-langtok; pass --encoder-langtok tgt"),
    (["--encoder-langtok", "src"], "trained with --encoder-langtok tgt but this run has --encoder-langtok src; "
                                   "pass --encoder-langtok tgt"),
    (["--encoder-langtok", "tgt", "--decoder-langtok"], "trained with no --decoder-langtok but this run has "
                                                        "--decoder-langtok; drop --decoder-langtok"),
    (["--encoder-langtok", "tgt", "--lang-tok-style", "mbart"],
     "trained with --lang-tok-style multilingual but this run has --lang-tok-style mbart; "
     "pass --lang-tok-style multilingual"),
])
def test_language_token_settings_are_checked_on_load(corpus, run, flags, message):
    """A checkpoint decoded with other language-token flags used to translate into garbage without a word."""
    argv = task_args(corpus, langtok=False) + flags + ["--path", str(run / "checkpoint_last.pt")] + GEN
    assert message in fairseq_error(generate, argv, prog="fairseq-generate")


def test_language_token_settings_travel_with_the_inventory(run):
    from fairseq_langshare.languages import decode_inventory, decode_settings

    stored = torch.load(run / "checkpoint_last.pt", weights_only=True)["model"]["lang_inventory"]
    assert decode_inventory(stored) == ["en", "xx", "yy"]
    settings = decode_settings(stored)
    fingerprint = settings.pop("dictionary").split(";")  # LANG:SIZE:SHA per language
    assert [f.split(":")[0] for f in fingerprint] == ["en", "xx", "yy"]
    assert settings == {"arch": "langshare_transformer_tiny", "encoder-langtok": "tgt",
                        "decoder-langtok": "", "lang-tok-style": "multilingual",
                        "lang-tok-replacing-bos-eos": ""}


def test_sparse_t_bar_past_max_update_is_refused_at_start_up(corpus, tmp_path, caplog):
    sparse = TRAIN + ["--arch", "adaptive_sparse_transformer_tiny", "--save-dir", str(tmp_path / "s")]
    line = fairseq_error(train, task_args(corpus) + sparse + ["--max-update", "20", "--sparse-t-bar", "50"])
    assert line == ("fairseq-train: error: --sparse-t-bar 50 is past --max-update 20: the run would end in phase 1 "
                    "of Algorithm 1 and never select a sub-network; pass --sparse-t-bar below 20 or --max-update "
                    "above 50")
    assert not list((tmp_path / "s").iterdir())  # fairseq-train made the directory; nothing in it
    from fairseq_langshare.models.adaptive_sparse_transformer import check_t_bar

    with caplog.at_level(logging.WARNING):
        check_t_bar(20, 20)  # a phase-1 run to be resumed with more updates: allowed, with the numbers
    assert "--sparse-t-bar 20 = --max-update 20: this run ends where phase 2 begins" in caplog.text
    check_t_bar(10, 20)
    check_t_bar(50, 0)  # no --max-update: the end of the run is unknown
    line = fairseq_error(train, task_args(corpus) + sparse + ["--max-update", "20", "--sparse-layer-t-bar", "30"])
    assert line.startswith("fairseq-train: error: --sparse-layer-t-bar 30 is past --max-update 20: ")


def test_fp16_on_the_cpu_without_its_cpu_flag_is_refused_at_start_up(corpus, tmp_path):
    """Was: `--cpu --fp16` (kept from a GPU command line) stopped in fairseq's trainer with an AssertionError
    traceback ("Torch not compiled with CUDA enabled"), on every rank under torchrun. With
    --fp16-no-flatten-grads, or as --memory-efficient-fp16, it trains (tests/test_mixed_precision.py)."""
    line = fairseq_error(train, task_args(corpus) + TRAIN + ["--arch", "langshare_transformer_tiny", "--cpu", "--fp16",
                                                              "--save-dir", str(tmp_path / "s"), "--max-update", "2"])
    assert line == ("fairseq-train: error: --fp16 with --cpu: fairseq keeps its flat float32 copy of the parameters "
                    "on CUDA; add --fp16-no-flatten-grads (or drop --fp16)")
    assert not list((tmp_path / "s").iterdir())
    train(task_args(corpus) + TRAIN + ["--arch", "langshare_transformer_tiny", "--cpu", "--memory-efficient-fp16",
                                       "--save-dir", str(tmp_path / "m"), "--max-update", "1"])
    assert (tmp_path / "m" / "checkpoint_last.pt").exists()


# ----------------------------------------------------------------------------- fairseq CLI flags and data

@pytest.mark.parametrize("case", ["lsl-spec", "clsr-budget", "latent-depth", "sparse-budget", "task-without-ids",
                                  "sampling-temperature-0"])
def test_option_errors_are_the_last_line_of_fairseq_train(corpus, tmp_path, case):
    flags, message = {
        "lsl-spec": (["--arch", "lsl_transformer_tiny", "--lsl-encoder-layers", "SRC={7}"], "layer 7"),
        "clsr-budget": (["--arch", "clsr_transformer_tiny", "--clsr-budget", "1.5"],
                        r"--clsr-budget 1.5 is outside [0, 1]"),
        "latent-depth": (["--arch", "latent_depth_transformer_tiny", "--latent-decoder-target-depth", "9"],
                         "--latent-decoder-target-depth 9 is outside 0..4"),
        "sparse-budget": (["--arch", "adaptive_sparse_transformer_tiny", "--sparse-decoder-keep-heads", "5"],
                          "--sparse-decoder-keep-heads 5 is outside 1..4"),
        "task-without-ids": (["--arch", "clsr_transformer_tiny", "--task", "translation_multi_simple_epoch"],
                             "multilingual_langshare"),
        "sampling-temperature-0": (["--sampling-method", "temperature", "--sampling-temperature", "0"],
                                   "--sampling-temperature 0.0 is outside (0, inf): pairs are sampled in proportion "
                                   "to n^(1/T)"),
    }[case]
    argv = task_args(corpus) + TRAIN + ["--max-update", "2", "--save-dir", str(tmp_path / "s")]
    for flag in flags[::2]:
        if flag.startswith("--") and flag in argv:
            del argv[argv.index(flag): argv.index(flag) + 2]
    line = fairseq_error(train, argv + flags)
    assert line.startswith("fairseq-train: error: ") and message in line, line
    assert not list((tmp_path / "s").iterdir())  # fairseq-train made the directory; nothing in it


def interactive(corpus, checkpoint, stdin, *flags):
    """fairseq-interactive in process, reading ``stdin`` (bytes) as Python decodes it under a C.UTF-8 locale."""
    from fairseq import options
    from fairseq_cli import interactive as interactive_cli

    parser = options.get_interactive_generation_parser()
    args = options.parse_args_and_arch(parser, task_args(corpus) + [
        "--path", str(checkpoint), "--beam", "2", "--cpu", "--input", "-", *flags])
    out, saved = io.StringIO(), sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8", errors="surrogateescape")
    try:
        with redirect_stdout(out):
            interactive_cli.main(args)
    finally:
        sys.stdin = saved
    return out.getvalue()


def test_interactive_without_a_direction_is_one_line(corpus, run):
    line = fairseq_error(interactive, corpus, run / "checkpoint_last.pt", b"cat dog\n", prog="fairseq-interactive")
    assert line == ("fairseq-interactive: error: translating raw text needs its direction: pass -s SRC -t TGT "
                    "(languages of --langs en,xx,yy)")


def test_interactive_survives_non_utf8_and_over_long_lines(corpus, run, caplog):
    """The task guards its input handling: a line with invalid bytes is translated with them replaced, an
    over-long one is skipped with a warning; every other line is translated."""
    stdin = b"cat dog\nred \xff\xfe tree\n" + b" ".join([b"cat"] * 1100) + b"\nbig house\n"
    with caplog.at_level(logging.WARNING):
        out = interactive(corpus, run / "checkpoint_last.pt", stdin, "-s", "en", "-t", "xx", "--buffer-size", "4",
                          "--batch-size", "4")
    ids = sorted(int(l.split("\t")[0][2:]) for l in out.splitlines() if l.startswith("H-"))
    assert ids == [0, 1, 3]
    assert "input line 2 is not valid UTF-8: its invalid bytes were replaced by U+FFFD" in caplog.text
    assert "input line 3 has 1101 tokens, more than the model's 1024 positions: skipped" in caplog.text


@pytest.mark.parametrize("fault,message", [
    ("empty", r"test.en-xx.en.idx: the test data of en-xx is empty \(0 sentences\)"),
    ("truncated-idx", r"test.en-xx.en.idx is truncated or corrupt \(30 bytes; its header announces 20 sentences"),
    ("truncated-bin", r"test.en-xx.xx.bin is truncated or corrupt"),
])
def test_empty_or_truncated_binarized_data_is_one_line(corpus, run, eval_corpus, tmp_path, capsys, fault, message):
    import re

    data = eval_corpus / "bin"
    prefix = data / "test.en-xx"
    if fault == "empty":
        for lang in ("en", "xx"):  # what fairseq-preprocess writes for an empty file
            (data / f"test.en-xx.{lang}.bin").write_bytes(b"")
            idx = (data / f"test.en-xx.{lang}.idx").read_bytes()
            (data / f"test.en-xx.{lang}.idx").write_bytes(idx[:18] + (0).to_bytes(8, "little"))
    elif fault == "truncated-idx":
        Path(f"{prefix}.en.idx").write_bytes(Path(f"{prefix}.en.idx").read_bytes()[:30])
    else:
        Path(f"{prefix}.xx.bin").write_bytes(Path(f"{prefix}.xx.bin").read_bytes()[:-5])
    argv = [str(data)] + task_args(corpus)[1:] + ["--path", str(run / "checkpoint_last.pt")] + GEN
    line = fairseq_error(generate, argv, prog="fairseq-generate")
    assert re.search(message, line) and "fairseq-preprocess" in line, line
    code, line = langshare(capsys, "evaluate", run / "checkpoint_last.pt", eval_corpus, "--directions", "en-xx",
                           "--out-json", tmp_path / "r.json")
    assert code == 2 and re.search(message, line), line
    if fault == "empty":  # the flag that leaves a direction out is evaluate's (was: fairseq-generate's -s/-t)
        assert line.endswith("or leave en-xx out (evaluate --directions)"), line
    assert not (tmp_path / "r.json").exists()


# ----------------------------------------------------------------------------- langshare commands

@pytest.fixture
def no_decoding(monkeypatch):
    """Refusals must come before any decoding."""
    def fail(*args, **kwargs):
        raise AssertionError("decoded before refusing")
    monkeypatch.setattr(evaluation, "_translate", fail)


def unwritable_dir(tmp_path):
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o555)
        return locked
    return Path("/sys")  # root writes anywhere a mode allows; sysfs refuses new files


@pytest.mark.parametrize("case", ["unwritable", "parent-is-a-file", "out-is-a-directory", "md-unwritable",
                                  "more-references", "fewer-references"])
def test_evaluate_refuses_before_decoding(run, eval_corpus, tmp_path, capsys, no_decoding, case):
    out_json, out_md = tmp_path / "r.json", tmp_path / "r.md"
    # an earlier evaluation's results: kept, and kept consistent with its markdown
    checkpoint = run / "checkpoint_last.pt"
    out_json.write_text(json.dumps({"checkpoint": str(checkpoint), "directions": {"en-xx": {"bleu": 1.0}}}) + "\n")
    out_md.write_text(f"Checkpoint `{checkpoint}` on `{eval_corpus}` (test, beam 5, lenpen 1)\n")
    refs = eval_corpus / "raw" / "test.en-xx.xx"
    message = {
        "unwritable": f"cannot write --out-json {unwritable_dir(tmp_path)}/r.json: ",
        "parent-is-a-file": f"cannot write --out-json {out_md}/r.json: {out_md} is a file, not a directory",
        "out-is-a-directory": f"--out-json {tmp_path} is a directory; pass a file name",
        "md-unwritable": f"cannot write --out-md {out_json}/r.md: {out_json} is a file, not a directory",
        "more-references": f"{refs} has 21 lines but {eval_corpus}/bin/test.en-xx.en.bin holds 20 sentences",
        "fewer-references": f"{refs} has 19 lines but {eval_corpus}/bin/test.en-xx.en.bin holds 20 sentences",
    }[case]
    argv = {"unwritable": ["--out-json", unwritable_dir(tmp_path) / "r.json"],
            "parent-is-a-file": ["--out-json", out_md / "r.json"], "out-is-a-directory": ["--out-json", tmp_path],
            "md-unwritable": ["--out-json", out_json, "--out-md", out_json / "r.md"]}.get(case, ["--out-json", out_json])
    if case == "more-references":
        refs.write_text(refs.read_text() + "one line too many\n")
    elif case == "fewer-references":
        refs.write_text("".join(refs.read_text().splitlines(keepends=True)[:-1]))
    before = snapshot(tmp_path)
    code, line = langshare(capsys, "evaluate", run / "checkpoint_last.pt", eval_corpus, "--directions", "en-xx", *argv)
    assert code == 2 and line.startswith("langshare evaluate: error: ") and message in line, line
    assert snapshot(tmp_path) == before


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the swallowed interrupt
def test_ctrl_c_during_evaluate_is_not_swallowed(run, eval_corpus, tmp_path, capsys, monkeypatch):
    """A KeyboardInterrupt raised inside a finalizer (the DataLoader's shutdown, an import lock's callback) is
    printed as "Exception ignored" and dropped by Python; evaluate must still stop, write nothing and not exit 0."""
    class Finalizer:
        def __del__(self):
            signal.raise_signal(signal.SIGINT)

    def translate(argv, results_dir, split, expected):
        Finalizer()  # Ctrl-C lands while fairseq's DataLoader shuts down
        return ["x"] * expected, 0

    monkeypatch.setattr(evaluation, "_translate", translate)
    # Python raises KeyboardInterrupt only where SIGINT is not ignored, and a shell starts background
    # jobs with SIGINT ignored (`make test &`): give the test the disposition of an interactive run
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        code, line = langshare(capsys, "evaluate", run / "checkpoint_last.pt", eval_corpus, "--directions",
                               "en-xx,en-yy", "--out-json", tmp_path / "r.json")
    finally:
        signal.signal(signal.SIGINT, previous)
    assert code == 130 and line == ("langshare evaluate: interrupted (Ctrl-C) before it finished; no file was left "
                                    "half-written")
    assert not (tmp_path / "r.json").exists()


def test_evaluate_writes_json_and_markdown_of_one_run_together(tmp_path):
    from fairseq_langshare.atomic_files import write_files_atomic

    out = {tmp_path / "r.json": "{}\n", tmp_path / "sub" / "r.md": "table\n"}
    write_files_atomic({path: (lambda tmp, text=text: tmp.write_text(text)) for path, text in out.items()})
    assert {p: p.read_text() for p in out} == out

    def fails(tmp):
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_files_atomic({tmp_path / "r.json": lambda tmp: tmp.write_text("new\n"), tmp_path / "sub" / "r.md": fails})
    assert {p: p.read_text() for p in out} == out  # neither replaced
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["r.json", "r.md", "sub"]


@pytest.mark.parametrize("content", ['{"a": 1}', "[1, 2]", '{"directions": [1]}', '{"directions": {"en-xx": 3}}'])
def test_compare_refuses_a_json_that_is_not_a_results_file(tmp_path, capsys, content):
    path = tmp_path / "notes.json"
    path.write_text(content)
    code, line = langshare(capsys, "compare", path)
    assert code == 2 and line == (f"langshare compare: error: {path} is not a `langshare evaluate` results file (no "
                                  "'directions' table of per-direction scores): pass files written by langshare "
                                  "evaluate --out-json")


@pytest.mark.parametrize("case", ["out-is-the-input", "parent-is-a-file"])
def test_export_and_average_never_write_over_an_input(run, tmp_path, capsys, case):
    save = tmp_path / "ckpt"
    shutil.copytree(run, save)
    before = snapshot(tmp_path)
    ckpt = save / "checkpoint_last.pt"
    out = ckpt if case == "out-is-the-input" else ckpt / "en-xx.pt"
    message = (f"--out {out} would overwrite an input or another output of this command; write to another path"
               if case == "out-is-the-input"
               else f"cannot write --out {out}: {ckpt} is a file, not a directory; choose another path")
    code, line = langshare(capsys, "export", ckpt, "--src", "en", "--tgt", "xx", "--out", out)
    assert code == 2 and line == f"langshare export: error: {message}"
    code, line = langshare(capsys, "recipe", "average", "--inputs", save / "checkpoint_1_2.pt", ckpt, "--out", out)
    assert code == 2 and line == f"langshare recipe average: error: {message}"
    assert snapshot(tmp_path) == before


def test_exported_checkpoint_translates_every_sentence_with_the_printed_command(corpus, run, tmp_path, capsys):
    """fairseq 0.12 drops the last batch when its size is not a multiple of --required-batch-size-multiple
    (default 8): plain fairseq-generate on an export translated 16 of 20 sentences. The command export prints
    passes --required-batch-size-multiple 1."""
    import shlex

    out = tmp_path / "en-xx.pt"
    assert cli.main(["export", str(run / "checkpoint_last.pt"), "--src", "en", "--tgt", "xx", "--out", str(out)]) == 0
    printed = [l for l in capsys.readouterr().out.splitlines() if "fairseq-generate" in l]
    assert printed, "export prints the command that translates with the export"
    argv = shlex.split(printed[-1].split("fairseq-generate", 1)[1].replace("DATA", str(corpus["bin"])))
    assert "--required-batch-size-multiple" in argv and "--user-dir" not in argv
    assert len(generate(argv + ["--cpu"])) == 20
    without = argv[: argv.index("--required-batch-size-multiple")] + argv[argv.index("--required-batch-size-multiple") + 2:]
    assert len(generate(without + ["--cpu"])) == 16  # what the flag avoids


# ----------------------------------------------------------------------------- real processes

@pytest.mark.slow
def test_fairseq_train_prints_the_plugins_error_as_its_last_line(corpus, run, tmp_path):
    """The excepthook is installed in a real fairseq-train: a resume with a reordered --langs (the plugin's
    refusal, which fairseq's trainer wraps into its generic message) ends in one line, no traceback."""
    save = tmp_path / "ckpt"
    shutil.copytree(run, save)
    before = snapshot(save)
    code, _, err = cli_run([BIN / "fairseq-train"] + task_args(corpus, langs=["yy", "en", "xx"]) + TRAIN
                           + ["--max-update", "6", "--save-dir", save])
    assert code == 1 and last_line(err).startswith(
        "fairseq-train: error: the checkpoint was trained with --langs en,xx,yy but this run orders them yy,en,xx"), err[-2000:]
    assert "Traceback" not in err and snapshot(save) == before


@pytest.mark.slow
def test_fairseq_interactive_session_survives_bad_lines(corpus, run, tmp_path):
    """A real session: stdin decoded strictly (PYTHONIOENCODING=utf-8:strict, as in an en_US.UTF-8 locale),
    sentencepiece BPE (whose encoder fails on undecodable input), one non-UTF-8 and one over-long line."""
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(input=str(corpus["raw"] / "train.en-xx.en"), model_prefix=str(tmp_path / "spm"),
                                   vocab_size=40, hard_vocab_limit=False, minloglevel=2)
    stdin = b"cat dog\nred \xff tree\n" + b" ".join([b"cat"] * 1100) + b"\nbig house\n"
    code, out, err = cli_run([BIN / "fairseq-interactive"] + task_args(corpus) + [
        "--path", run / "checkpoint_last.pt", "-s", "en", "-t", "xx", "--cpu", "--bpe", "sentencepiece",
        "--sentencepiece-model", tmp_path / "spm.model"], stdin=stdin, env={"PYTHONIOENCODING": "utf-8:strict"})
    assert code == 0, err[-2000:]
    assert sorted(int(l.split("\t")[0][2:]) for l in out.splitlines() if l.startswith("H-")) == [0, 1, 3]
    assert "input line 2 is not valid UTF-8" in out + err and "input line 3 has" in out + err


@pytest.mark.slow
@pytest.mark.parametrize("content,flag,message", [
    (b"cat dog\n" * 6 + b"re\xff tree\nbig house\n", "--input", "line 7 is not valid UTF-8 (byte 0xff at column 3)"),
    (b"cat dog\nbig caf\xc3", "--input=", "line 2 is not valid UTF-8 (byte 0xc3 at column 8)"),
    (None, "--input", "cannot be read (No such file or directory)"),
], ids=["invalid-byte", "truncated-at-end", "missing"])
def test_fairseq_interactive_refuses_a_bad_input_file_before_translating(corpus, run, tmp_path, content, flag,
                                                                         message):
    """fairseq decodes an --input FILE strictly itself, mid-session; the task checks the file at start-up:
    exit status 1, one line naming the line, byte and fix, nothing translated, nothing written."""
    source = tmp_path / "in.txt"
    if content is not None:
        source.write_bytes(content)
    before = snapshot(tmp_path)
    option = [f"--input={source}"] if flag.endswith("=") else [flag, source]
    code, out, err = cli_run([BIN / "fairseq-interactive"] + task_args(corpus) + [
        "--path", run / "checkpoint_last.pt", "-s", "en", "-t", "xx", "--cpu"] + option)
    assert code == 1 and "Traceback" not in err, err[-2000:]
    assert last_line(err).startswith(f"fairseq-interactive: error: --input {source}: {message}"), err[-2000:]
    if content is not None:
        assert last_line(err).endswith(f"convert it with `iconv -c -f utf-8 -t utf-8 {source} > {source}.utf8` or "
                                       "pipe it to stdin, where invalid bytes are replaced")
    assert not [l for l in out.splitlines() if l[:2] in ("S-", "H-", "D-", "P-")]
    assert snapshot(tmp_path) == before


def test_evaluate_given_a_corpus_bin_directory_names_the_corpus(tmp_path):
    """Was: `langshare evaluate CKPT corpus/bin` said corpus/bin is not a prepared corpus and to build one."""
    (tmp_path / "corpus" / "bin").mkdir(parents=True)
    (tmp_path / "corpus" / "manifest.json").write_text(json.dumps({"data_bin": "bin"}))
    with pytest.raises(evaluation.EvaluationError) as e:
        evaluation._Corpus(str(tmp_path / "corpus" / "bin"))
    assert str(e.value) == (f"{tmp_path / 'corpus' / 'bin'} is the binarized data of the prepared corpus "
                            f"{tmp_path / 'corpus'}: pass {tmp_path / 'corpus'}")


@pytest.mark.parametrize("command,flag", [(["evaluate", "ckpt.pt", "corpus"], "--generate-args"),
                                          (["head-to-head", "--dry-run"], "--train-flags")])
def test_an_unbalanced_quote_in_an_option_of_flags_names_the_option(command, flag, capsys):
    """Was 'error: No closing quotation', naming neither the option nor the fix."""
    with pytest.raises(SystemExit) as stop:
        cli.main([*command, f"{flag}=--dropout '"])
    assert stop.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"langshare {command[0]}: error: argument {flag}: No closing quotation in \"--dropout '\"; balance the quotes")


@pytest.mark.parametrize("command,flag", [(["evaluate", "ckpt.pt", "corpus"], "--out-json"),
                                          (["evaluate", "ckpt.pt", "corpus"], "--out-md"),
                                          (["compare", "a.json", "b.json"], "--out-json"),
                                          (["compare", "a.json", "b.json"], "--out-md"),
                                          (["off-target", "corpus"], "--out-json")])
def test_an_empty_output_path_is_refused(command, flag, capsys):
    """``--out-json "$F"`` with F unset: was exit 0 and no file written (an empty path read as no output)."""
    with pytest.raises(SystemExit) as stop:
        cli.main([*command, flag, ""])
    assert stop.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"langshare {command[0]}: error: argument {flag}: '' names no file: pass a file name, or leave the option out")


def test_help_shows_no_default_that_is_not_one(capsys):
    """Was: "(default: None)" after every option without a default, and off-target's --split read
    "(default: test) (default: None)"; a default its help already states is not repeated."""
    main = cli.main
    for command in (["head-to-head"], ["evaluate"], ["off-target"], ["translate"], ["export"]):
        with pytest.raises(SystemExit):
            main([*command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "(default: None)" not in text, command
        assert text.count("(default: test)") <= 1, command
    with pytest.raises(SystemExit):
        main(["evaluate", "--help"])
    assert "(default: 4000)" in " ".join(capsys.readouterr().out.split())  # real defaults are still shown
