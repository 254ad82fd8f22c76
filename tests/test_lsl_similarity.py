"""``langshare analyze lsl-similarity``: CKA between the languages' copies of a trained LSL."""

import argparse
import json

import pytest
import torch

from fairseq_langshare import analysis
from fairseq_langshare.analysis.lsl_similarity import linear_cka
from tiny_corpus import task_args, train


def test_linear_cka_invariances():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(400, 16, generator=g)
    rotation, _ = torch.linalg.qr(torch.randn(16, 16, generator=g))
    assert linear_cka(x, x) == pytest.approx(1.0)
    assert linear_cka(x, 3.0 * x @ rotation + 1.0) == pytest.approx(1.0)  # rotation, scale, shift
    assert linear_cka(x, torch.randn(400, 16, generator=g)) < 0.2  # unrelated


def test_copies_compared_on_the_same_inputs(corpus, tmp_path, one_thread):
    save = tmp_path / "ckpt"
    train(task_args(corpus) + ["--arch", "lsl_transformer_tiny", "--encoder-layers", "2", "--lsl-encoder-layers",
                               "TGT={2}", "--optimizer", "adam", "--lr", "0.005", "--max-tokens", "500",
                               "--max-update", "8", "--cpu", "--save-dir", str(save), "--no-epoch-checkpoints",
                               "--disable-validation", "--num-workers", "0", "--log-format", "json"])
    ckpt = save / "checkpoint_last.pt"
    parser = argparse.ArgumentParser(prog="langshare")
    analysis.add_subcommand(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["analyze", "lsl-similarity", str(ckpt), "--out", str(tmp_path / "out")])
    assert args.func(args) == 0
    result = json.loads((tmp_path / "out" / "lsl_similarity.json").read_text())
    (layer,) = result["layers"]
    assert layer["layer"] == 2 and layer["side"] == "tgt" and layer["languages"] == ["xx", "yy"]
    cka = torch.tensor(layer["cka"])
    assert torch.allclose(cka.diagonal(), torch.ones(2), atol=1e-6) and torch.allclose(cka, cka.t(), atol=1e-6)
    assert cka[0, 1] < 0.999  # independently initialised copies compute different functions
    assert (tmp_path / "out" / "lsl_similarity.png").read_bytes()[:4] == b"\x89PNG"
    # make yy's copy xx's: the two are then the same function on every input
    state = torch.load(ckpt, weights_only=False)
    for key in [k for k in state["model"] if ".layers.1.per_lang.2." in k]:
        state["model"][key] = state["model"][key.replace(".per_lang.2.", ".per_lang.1.")].clone()
    torch.save(state, tmp_path / "same.pt")
    same = analysis.lsl_similarity.copy_similarity(str(tmp_path / "same.pt"))
    assert same["layers"][0]["cka"][0][1] == pytest.approx(1.0)


@pytest.mark.parametrize("component", ["ffn", "attention"])
def test_partial_lsls_are_named_not_called_missing(corpus, tmp_path, component):
    """An LS-FFN / LS-ATTENTION checkpoint has language-specific encoder layers: the one-line refusal
    says what it compares instead of telling the user to train with --lsl-encoder-layers."""
    from fairseq_langshare.analysis.lsl_similarity import copy_similarity

    save = tmp_path / "ckpt"
    train(task_args(corpus) + ["--arch", "lsl_transformer_tiny", "--encoder-layers", "2", "--lsl-encoder-layers",
                               "TGT={2}", "--lsl-component", component, "--optimizer", "adam", "--lr", "0.005",
                               "--max-tokens", "500", "--max-update", "1", "--cpu", "--save-dir", str(save),
                               "--no-epoch-checkpoints", "--disable-validation", "--num-workers", "0"])
    ckpt = save / "checkpoint_last.pt"
    with pytest.raises(ValueError, match=f"--lsl-component {component}") as err:
        copy_similarity(str(ckpt))
    assert "\n" not in str(err.value) and "trained with --lsl-encoder-layers" not in str(err.value)


def test_an_exported_pair_is_refused_in_one_line(corpus, tmp_path, capsys, one_thread):
    """Was: `AssertionError: Could not infer task type from {...}` (the exported config, several KB on one line)."""
    from fairseq_langshare.cli import main
    from fairseq_langshare.export import export_pair

    save = tmp_path / "ckpt"
    train(task_args(corpus) + ["--arch", "lsl_transformer_tiny", "--encoder-layers", "2", "--lsl-encoder-layers",
                               "TGT={2}", "--optimizer", "adam", "--lr", "0.005", "--max-tokens", "500",
                               "--max-update", "1", "--cpu", "--save-dir", str(save), "--no-epoch-checkpoints",
                               "--disable-validation", "--num-workers", "0"])
    ckpt, pair = save / "checkpoint_last.pt", tmp_path / "en-xx.pt"
    export_pair(ckpt, "en", "xx", pair, verbose=False)
    capsys.readouterr()
    assert main(["analyze", "lsl-similarity", str(pair), "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"langshare analyze lsl-similarity: error: {pair} has no language-specific encoder layer: it is a `langshare "
                   f"export` of the pair en->xx (a plain transformer); analyze the checkpoint it was exported from, "
                   f"{ckpt}"), err
    assert not (tmp_path / "b").exists()
