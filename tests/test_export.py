"""langshare export: one language pair's sub-network as a plain fairseq transformer checkpoint
that fairseq-generate loads without the plugin and that translates exactly like the full model."""

import argparse
import copy
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from fairseq import checkpoint_utils
from fairseq.sequence_generator import SequenceGenerator

import fairseq_langshare.models.lsl_transformer  # noqa: F401  (registers lsl_transformer)
from fairseq_langshare.deploy import export_command
from fairseq_langshare.export import ExportError, export_pair
from test_language_aware_model import row_keys
from test_lsl import VARIANTS, build
from tiny_corpus import generate, task_args, train

BIN = Path(sys.executable).parent
TRAIN = ["--criterion", "langshare_label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--optimizer", "adam",
         "--lr", "0.005", "--max-tokens", "1000", "--log-format", "json", "--log-interval", "50", "--cpu",
         "--no-epoch-checkpoints", "--num-workers", "0", "--seed", "3", "--disable-validation",
         "--sampling-method", "temperature", "--sampling-temperature", "5"]
LSL = ["--arch", "lsl_transformer_tiny", "--lsl-encoder-layers", "SRC={1} & TGT={3,4}", "--lsl-separate-decoder"]



@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_thread):
    yield

@pytest.fixture(scope="module")
def trained(corpus, tmp_path_factory):
    save = tmp_path_factory.mktemp("lsl_ckpt")
    train(task_args(corpus) + TRAIN + LSL + ["--max-update", "200", "--save-dir", str(save)])
    return save / "checkpoint_last.pt"


def plain_generate(corpus, checkpoint, src, tgt):
    """fairseq's own task and model, no --user-dir: what a user without the plugin runs."""
    return generate([str(corpus["bin"]), "--task", "translation_multi_simple_epoch", "--langs", ",".join(corpus["langs"]),
                     "--lang-pairs", f"{src}-{tgt}", "--encoder-langtok", "tgt", "--path", str(checkpoint),
                     "--gen-subset", "test", "-s", src, "-t", tgt, "--beam", "3", "--cpu", "--max-tokens", "1000",
                     "--required-batch-size-multiple", "1"])


def full_generate(corpus, checkpoint, src, tgt):
    return generate(task_args(corpus, pairs=[f"{src}-{tgt}"]) + [
        "--path", str(checkpoint), "--gen-subset", "test", "-s", src, "-t", tgt, "--beam", "3", "--cpu",
        "--max-tokens", "1000"])


@pytest.mark.parametrize("src,tgt", [("en", "xx"), ("en", "yy"), ("xx", "yy")])
def test_exported_pair_translates_exactly_like_the_full_model(corpus, trained, tmp_path, src, tgt):
    out = tmp_path / f"{src}-{tgt}.pt"
    report = export_pair(trained, src, tgt, out)
    full = full_generate(corpus, trained, src, tgt)
    assert len(full) == 20
    assert plain_generate(corpus, out, src, tgt) == full
    assert report["params"] < report["full_params"] and report["bytes"] < report["full_bytes"]


def test_export_holds_only_the_pairs_weights_and_no_python_objects(trained, tmp_path, capsys):
    out = tmp_path / "en-xx.pt"
    report = export_pair(trained, "en", "xx", out)
    assert "exported en->xx" in capsys.readouterr().out
    if hasattr(torch.serialization, "get_unsafe_globals_in_checkpoint"):  # torch >= 2.5
        assert torch.serialization.get_unsafe_globals_in_checkpoint(str(out)) == [], "weights_only=True, no allow-list"
    state = torch.load(out, weights_only=True)
    assert state["args"] is None and state["cfg"]["model"]["_name"] == "transformer"
    assert state["cfg"]["task"]["_name"] == "translation_multi_simple_epoch"
    assert state["cfg"]["common"]["user_dir"] is None
    assert not any(k.startswith("lsl_") for k in state["cfg"]["model"])
    assert not any(".per_lang." in k for k in state["model"]) and "lang_inventory" not in state["model"]
    # exactly the pair's weights: the full model minus the other languages' copies
    full = torch.load(trained, weights_only=True)["model"]
    copy_params = {}
    for key, value in full.items():
        if ".per_lang." in key:
            lang = int(key.split(".per_lang.")[1].split(".")[0])
            copy_params[lang] = copy_params.get(lang, 0) + value.numel()
    n_langs = len(copy_params)
    assert n_langs == 3 and report["full_params"] - report["params"] == (n_langs - 1) * copy_params[0]
    # the selected copies are the right ones: source layer 1 from en, target layers 3-4 and the decoder from xx
    en, xx = 0, 1
    assert torch.equal(state["model"]["encoder.layers.0.fc1.weight"], full[f"encoder.layers.0.per_lang.{en}.fc1.weight"])
    assert torch.equal(state["model"]["encoder.layers.2.fc1.weight"], full[f"encoder.layers.2.per_lang.{xx}.fc1.weight"])
    assert torch.equal(state["model"]["decoder.layers.1.fc2.weight"], full[f"decoder.layers.1.per_lang.{xx}.fc2.weight"])
    assert torch.equal(state["model"]["encoder.layers.1.fc1.weight"], full["encoder.layers.1.fc1.weight"])


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v != "search"])
def test_every_variant_exports_to_an_equivalent_plain_transformer(corpus, variant):
    """Whole layers, LS-FFN, LS-ATTENTION, decoder LSLs, a pre-norm separate decoder: the pair's
    weights load strictly into fairseq's transformer and give the full model's logits."""
    from fairseq.models.transformer import TransformerModel
    from fairseq_langshare.models.lsl_transformer import LSLTransformerModel
    from test_language_aware_model import collate

    task, model, args = build(corpus, *VARIANTS[variant][0])
    model.eval()
    ds = task.dataset("valid")
    starts = [0] + list(ds.cumulative_sizes[:-1])
    for start in starts:  # en-xx, en-yy, xx-yy
        batch = collate(task, list(range(start, start + 5)))
        ni = dict(batch["net_input"])
        src_id, tgt_id = int(ni["src_lang_id"][0]), int(ni["tgt_lang_id"][0])
        weights, changes = LSLTransformerModel.export_state_dict(model.state_dict(), args, src_id, tgt_id)
        plain_args = copy.deepcopy(args)
        for key, value in changes.items():
            if value is None and hasattr(plain_args, key):
                delattr(plain_args, key)
        plain = TransformerModel.build_model(plain_args, task).eval()
        plain.load_state_dict(weights, strict=True)
        expected = model(**ni)[0]
        for key in ("src_lang_id", "tgt_lang_id"):
            ni.pop(key)
        torch.testing.assert_close(plain(**ni)[0], expected)


def test_unknown_language_is_a_clear_error_and_writes_nothing(trained, tmp_path):
    out = tmp_path / "x.pt"
    with pytest.raises(ExportError, match="unknown language 'zz' for --tgt: the checkpoint's languages are en,xx,yy"):
        export_pair(trained, "en", "zz", out)
    assert not out.exists() and not list(tmp_path.iterdir())


@pytest.mark.parametrize("fmt", export_command.FORMATS)
def test_same_language_on_both_sides_is_refused_and_writes_nothing(run, tmp_path, capsys, fmt):
    """Was: `--src en --tgt en` exported (prepare-data refuses such a direction)."""
    from cli_checks import langshare

    out = tmp_path / "out"
    code, line = langshare(capsys, "export", run / "checkpoint_last.pt", "--src", "en", "--tgt", "en", "--out", out,
                           "--format", fmt)
    assert (code, line) == (2, "langshare export: error: --src and --tgt are both 'en'; a pair needs two different "
                               "languages: pass another --tgt (one of the checkpoint's --langs)"), line
    assert not list(tmp_path.iterdir())


def test_search_checkpoint_is_refused(corpus, tmp_path):
    from test_lsl import save_checkpoint

    _, model, args = build(corpus, "--lsl-search", pairs=["en-xx", "en-yy"])
    path = save_checkpoint(model, args, tmp_path / "search.pt")
    with pytest.raises(ValueError, match="--lsl-search checkpoint .* `langshare analyze lsl`"):
        export_pair(path, "en", "xx", tmp_path / "out.pt")
    assert not (tmp_path / "out.pt").exists()


def test_baseline_exports_itself(corpus, tmp_path):
    save = tmp_path / "base"
    train(task_args(corpus) + TRAIN + ["--arch", "langshare_transformer_tiny", "--max-update", "20", "--save-dir", str(save)])
    report = export_pair(save / "checkpoint_last.pt", "en", "yy", tmp_path / "en-yy.pt")
    assert report["params"] == report["full_params"]
    assert plain_generate(corpus, tmp_path / "en-yy.pt", "en", "yy") == full_generate(corpus, save / "checkpoint_last.pt", "en", "yy")


def test_out_never_replaces_a_file_of_the_run_or_the_corpus(corpus, run, tmp_path):
    """--out naming a file of the checkpoint's run directory or of its corpus (a results JSON, a log, the
    dictionary) used to be overwritten with the exported checkpoint; an earlier export there is replaced."""
    from fairseq_langshare.atomic_files import OutputPathError

    save = tmp_path / "ckpt"
    shutil.copytree(run, save)
    (save / "results.json").write_text('{"mine": 1}')
    dictionary = Path(corpus["bin"]) / "dict.txt"
    kept = dictionary.read_bytes() if dictionary.exists() else None
    for out, owner in ((save / "results.json", f"the run {save}"), (Path(corpus["bin"]) / "dict.xx.txt",
                                                                    f"the corpus {corpus['bin']}")):
        before = out.read_bytes()
        with pytest.raises(OutputPathError, match=f"--out {out} would replace a file of {owner} that export did "
                                                  "not write; write to another path"):
            export_pair(save / "checkpoint_last.pt", "en", "xx", out, verbose=False)
        assert out.read_bytes() == before
    assert (dictionary.read_bytes() if dictionary.exists() else None) == kept
    export_pair(save / "checkpoint_last.pt", "en", "xx", save / "en-xx.pt", verbose=False)
    export_pair(save / "checkpoint_last.pt", "en", "yy", save / "en-xx.pt", verbose=False)  # its own earlier output
    assert torch.load(save / "en-xx.pt", weights_only=True)["extra_state"]["langshare_export"]["tgt"] == "yy"


def test_a_direction_with_a_language_never_trained_on_its_side_is_exported_with_a_warning(trained, tmp_path,
                                                                                           caplog):
    """Was: xx->en of a model trained on en-xx and en-yy exported without a word, though what the model
    keeps for xx as a source and en as a target never trained (LSL's xx source layer at its initial
    values). A zero-shot direction whose languages both trained on their sides is not warned about."""
    import logging

    with caplog.at_level(logging.WARNING):
        export_pair(trained, "en", "yy", tmp_path / "en-yy.pt", verbose=False)
        assert "never" not in caplog.text
        export_pair(trained, "xx", "en", tmp_path / "xx-en.pt", verbose=False)
    assert ("xx->en is not a trained direction (--lang-pairs en-xx,en-yy), and xx was never a source language "
            "nor en a target language") in caplog.text


def test_out_never_replaces_a_file_export_did_not_write(trained, tmp_path):
    """Was: --out naming any other existing file (a user's notes) replaced it with the checkpoint."""
    from fairseq_langshare.atomic_files import OutputPathError

    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    with pytest.raises(OutputPathError, match=f"--out {notes} exists and export did not write it; remove it or "
                                              "write to another path"):
        export_pair(trained, "en", "xx", notes, verbose=False)
    assert notes.read_text() == "mine"


@pytest.mark.parametrize("kind", ["fifo", "link-to-an-export", "dangling-link"])
def test_out_that_is_no_regular_file_is_refused_and_kept(trained, tmp_path, capsys, kind):
    """Was: --out naming a FIFO (or a device node), a symlink to an earlier export or a dangling symlink was
    replaced by a regular file (only `is_file()` was checked, which follows links and is False for a FIFO)."""
    from cli_checks import langshare

    out = tmp_path / "out.pt"
    if kind == "fifo":
        os.mkfifo(out)
        expected = f"--out {out} exists and is no regular file (a FIFO); write to another path"
    else:
        target = tmp_path / ("en-xx.pt" if kind == "link-to-an-export" else "gone.pt")
        if kind == "link-to-an-export":
            export_pair(trained, "en", "xx", target, verbose=False)
        out.symlink_to(target.name)
        expected = (f"--out {out} is a symbolic link (to {target.name}), which export would replace by a file; pass "
                    "the file it points to, or another path")
    before = sorted(p.name for p in tmp_path.iterdir())
    code, line = langshare(capsys, "export", trained, "--src", "en", "--tgt", "xx", "--out", out)
    assert (code, line) == (2, f"langshare export: error: {expected}"), line
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert out.is_fifo() if kind == "fifo" else out.is_symlink()


def test_export_cli(trained, tmp_path, capsys):
    parser = argparse.ArgumentParser(prog="langshare")
    export_command.add_subcommand(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["export", str(trained), "--src", "en", "--tgt", "yy", "--out", str(tmp_path / "m.pt")])
    assert args.func(args) == 0
    assert (tmp_path / "m.pt").exists() and "exported en->yy" in capsys.readouterr().out


def test_trained_model_beam_search_is_per_sentence(corpus, trained):
    """On a trained model hypotheses end at different steps (rows leave the beam): mixed
    batches of three directions still give every sentence its own translation."""
    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(trained)], arg_overrides={"data": str(corpus["bin"]), "lang_pairs": "en-xx,en-yy,xx-yy"})
    model = models[0].eval()
    task.load_dataset("test")
    ds = task.dataset("test")
    starts = [0] + list(ds.cumulative_sizes[:-1])
    indices = [s + k for k in range(6) for s in starts]
    generator = SequenceGenerator([model], task.target_dictionary, beam_size=3, max_len_b=20)
    batch = ds.collater([ds[i] for i in indices])
    hypos = generator.generate([model], batch)
    lengths = {len(h[0]["tokens"]) for h in hypos}
    assert len(lengths) > 2, "hypotheses of different lengths"
    mixed = {k: h[0]["tokens"].tolist() for k, h in zip(row_keys(task, batch), hypos)}
    for i in indices:
        alone = ds.collater([ds[i]])
        assert generator.generate([model], alone)[0][0]["tokens"].tolist() == mixed[row_keys(task, alone)[0]]


@pytest.mark.slow
def test_fairseq_generate_without_the_plugin_in_a_fresh_process(corpus, trained, tmp_path):
    """A fresh fairseq-generate (torch weights_only loading, nothing allow-listed, no --user-dir)."""
    out = tmp_path / "en-xx.pt"
    export_pair(trained, "en", "xx", out)
    cmd = [str(BIN / "fairseq-generate"), str(corpus["bin"]), "--task", "translation_multi_simple_epoch",
           "--langs", "en,xx,yy", "--lang-pairs", "en-xx", "--encoder-langtok", "tgt", "--path", str(out),
           "--gen-subset", "test", "-s", "en", "-t", "xx", "--beam", "3", "--cpu", "--max-tokens", "1000",
           "--required-batch-size-multiple", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "fairseq_langshare" not in proc.stdout + proc.stderr
    hyps = {int(l.split("\t")[0][2:]): l.split("\t")[2] for l in proc.stdout.splitlines() if l.startswith("H-")}
    assert hyps == full_generate(corpus, trained, "en", "xx")



def test_an_export_loads_under_the_struct_config_of_omegaconf_before_2_2(corpus, trained, tmp_path):
    """fairseq's load_checkpoint_to_cpu locks a checkpoint's config (OmegaConf.set_struct) under omegaconf < 2.2,
    what fairseq's own setup.py pins (omegaconf<2.1): a key the model's build sets must be in it. Was: the exported
    model config lacked max_source_positions, max_target_positions and min_params_to_wrap, so every export failed
    to load there ("Key 'max_source_positions' is not in struct")."""
    import argparse

    from fairseq.models.transformer import TransformerModel
    from omegaconf import OmegaConf

    out = tmp_path / "en-xx.pt"
    export_pair(trained, "en", "xx", out, verbose=False)
    state = checkpoint_utils.load_checkpoint_to_cpu(str(out))
    OmegaConf.set_struct(state["cfg"], True)  # what fairseq does there
    weights = state["model"]
    from fairseq.data import Dictionary

    d = Dictionary()  # its size from the weights
    while len(d) < weights["encoder.embed_tokens.weight"].size(0):
        d.add_symbol(f"<tok{len(d)}>")
    model = TransformerModel.build_model(state["cfg"].model, argparse.Namespace(source_dictionary=d,
                                                                               target_dictionary=d))
    model.load_state_dict(weights, strict=True)


# ----------------------------------------------------------------------------- the command export prints
def printed_command(capsys, checkpoint, src, tgt, out, data):
    """The fairseq-generate command `langshare export` prints, as argv (without the program), DATA filled in."""
    import shlex

    from fairseq_langshare import cli

    capsys.readouterr()
    assert cli.main(["export", str(checkpoint), "--src", src, "--tgt", tgt, "--out", str(out)]) == 0
    printed = [line for line in capsys.readouterr().out.splitlines() if "fairseq-generate" in line]
    assert printed, "export prints the command that translates with the export"
    return shlex.split(printed[-1].split("fairseq-generate", 1)[1].replace("DATA", str(data)))


@pytest.fixture(scope="module")
def spm_trained(spm_corpus, tmp_path_factory):
    """A baseline trained briefly on the SentencePiece corpus (the kind langshare prepare-* writes)."""
    from deploy_checks import LANGS, PAIRS, TRAIN as DEPLOY_TRAIN
    from tiny_corpus import PKG_DIR

    save = tmp_path_factory.mktemp("spm_ckpt")
    train([str(spm_corpus / "bin"), "--task", "multilingual_langshare", "--user-dir", PKG_DIR, "--langs",
           ",".join(LANGS), "--lang-pairs", ",".join(PAIRS), "--encoder-langtok", "tgt",
           "--arch", "langshare_transformer_tiny", *DEPLOY_TRAIN, "--max-update", "60", "--save-dir", str(save)])
    return save / "checkpoint_last.pt"


def test_the_printed_command_prints_text_of_a_sentencepiece_corpus(spm_corpus, spm_trained, tmp_path, capsys):
    """Was: no --remove-bpe sentencepiece in the printed command, so it printed SentencePiece's pieces
    ('▁L ' index ...') where the README's fairseq-generate and langshare translate print text."""
    from fairseq.data.data_utils import post_process

    argv = printed_command(capsys, spm_trained, "en", "fr", tmp_path / "en-fr.pt", spm_corpus / "bin")
    hyps = generate(argv + ["--cpu"])
    assert len(hyps) == 30  # every sentence (--required-batch-size-multiple 1)
    assert not any("\u2581" in h for h in hyps.values()), list(hyps.values())[:3]
    at = argv.index("--remove-bpe")
    pieces = generate(argv[:at] + argv[at + 2:] + ["--cpu"])  # what the flag changes: pieces, detokenised
    assert any("\u2581" in h for h in pieces.values())
    assert hyps == {i: post_process(h, "sentencepiece") for i, h in pieces.items()}


def test_the_printed_command_keeps_the_words_of_a_word_level_corpus(corpus, trained, tmp_path, capsys):
    """A corpus of whole words (no SentencePiece piece in its dictionary): nothing to detokenise, and
    --remove-bpe sentencepiece would glue the words together."""
    argv = printed_command(capsys, trained, "en", "xx", tmp_path / "en-xx.pt", corpus["bin"])
    assert "--remove-bpe" not in argv
    hyps = generate(argv + ["--cpu", "--beam", "3", "--max-tokens", "1000"])
    assert hyps == full_generate(corpus, trained, "en", "xx") and any(" " in h for h in hyps.values())


def test_post_processing_follows_the_pieces_of_the_target_dictionary(tmp_path):
    from fairseq_langshare.export import post_process_flags

    (tmp_path / "spm").mkdir(), (tmp_path / "bpe").mkdir(), (tmp_path / "words").mkdir()
    (tmp_path / "spm" / "dict.fr.txt").write_text("\u2581le 9\n\u2581chat 7\ns 3\n", encoding="utf-8")
    (tmp_path / "bpe" / "dict.fr.txt").write_text("le 9\nch@@ 7\nat 3\n", encoding="utf-8")
    (tmp_path / "words" / "dict.txt").write_text("le 9\nchat 7\n", encoding="utf-8")  # one dictionary for all
    assert post_process_flags(tmp_path / "spm", "fr") == ["--remove-bpe", "sentencepiece"]
    assert post_process_flags(f"{tmp_path / 'bpe'}{os.pathsep}{tmp_path / 'words'}", "fr") == ["--remove-bpe"]
    assert post_process_flags(tmp_path / "words", "fr") == []
    # a stray piece of the other kind (a word of the text that holds the character) decides nothing
    (tmp_path / "bpe" / "dict.de.txt").write_text("die 9\nka@@ 7\n\u2581 1\nt@@ 3\nze 2\n", encoding="utf-8")
    (tmp_path / "words" / "dict.de.txt").write_text("".join(f"w{i} 5\n" for i in range(30)) + "\u2581x 1\n",
                                                    encoding="utf-8")
    assert post_process_flags(tmp_path / "bpe", "de") == ["--remove-bpe"]
    assert post_process_flags(tmp_path / "words", "de") == []
    # no dictionary to read here (exported on another machine): what langshare prepare-* corpora need
    assert post_process_flags(tmp_path / "gone", "fr") == post_process_flags(None, "fr") == ["--remove-bpe",
                                                                                             "sentencepiece"]
