"""langshare export of CLSR models with fixed gates: the pair's network as a plain fairseq
transformer (W^shared or the pair's W^lang as the attention output projection, folded into fc2
for the FFN units) that gives the full model's decoder output; learned and soft gates (and the
encoder-output projection) are refused in one line."""

import argparse
import re

import pytest
import torch
from fairseq.models.transformer import TransformerModel
from fairseq.sequence_generator import SequenceGenerator

from fairseq_langshare.cli import main as langshare
from fairseq_langshare.export import ExportError, export_pair
from fairseq_langshare.modules.clsr import ClsrUnit
from test_language_aware_model import collate
from test_lsl import save_checkpoint
from tiny_corpus import build_task_and_model

PAIRS = ["en-xx", "en-yy", "xx-yy"]  # xx-yy: a second source language, so both stacks' W^lang change


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_thread):
    yield


def build(corpus, *flags):
    task, model, args = build_task_and_model(corpus, arch="clsr_transformer_tiny", pairs=PAIRS, extra=[
        "--max-update", "10", "--dropout", "0.0", *flags])
    task.load_dataset("valid")
    with torch.no_grad():  # fairseq and CLSR initialise biases to 0: give them values that folding must carry
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.1)
    return task, model.eval(), args


def units(model):
    return {u.name: u for u in model.modules() if isinstance(u, ClsrUnit)}


FIXED = {  # name: (flags, the units expected to be language-specific)
    "dedicated": (["--clsr-variant", "dedicated", "--clsr-dedicated", "enc1.ffn,dec2.cross_attn"],
                  {"enc1.ffn", "dec2.cross_attn"}),
    "top-bottom": (["--clsr-variant", "top-bottom"], "all"),  # tiny: 2 layers per stack, first and last
    "language-sublayer-banks": (["--clsr-variant", "language", "--clsr-lang-proj", "sublayer"], "all"),
    "language-tgt-encoder": (["--clsr-variant", "language", "--clsr-encoder-lang", "tgt"], "all"),
    "dedicated-tgt-encoder": (["--clsr-variant", "dedicated", "--clsr-dedicated", "enc2.self_attn,enc1.ffn,dec1.ffn",
                               "--clsr-encoder-lang", "tgt"], {"enc2.self_attn", "enc1.ffn", "dec1.ffn"}),
    "shared": (["--clsr-variant", "shared"], set()),
}


@pytest.mark.parametrize("variant", list(FIXED))
def test_fixed_gates_export_to_a_plain_transformer_with_the_full_models_output(corpus, tmp_path, variant):
    flags, language_units = FIXED[variant]
    task, model, args = build(corpus, *flags)
    modes = {name: u.mode for name, u in units(model).items()}
    expected_modes = {name: "language" if language_units == "all" or name in language_units else "shared"
                      for name in modes}
    assert modes == expected_modes, "the test model mixes the units it says it does"
    ckpt = save_checkpoint(model, args, tmp_path / "clsr.pt")
    ds = task.dataset("valid")
    starts = [0] + list(ds.cumulative_sizes[:-1])
    outputs = []
    for start, pair in zip(starts, PAIRS):
        src, tgt = pair.split("-")
        batch = collate(task, list(range(start, start + 5)))
        ni = dict(batch["net_input"])
        assert {int(i) for i in ni["src_lang_id"]} == {["en", "xx", "yy"].index(src)}
        assert {int(i) for i in ni["tgt_lang_id"]} == {["en", "xx", "yy"].index(tgt)}
        out = tmp_path / f"{pair}.pt"
        export_pair(ckpt, src, tgt, out, verbose=False)
        state = torch.load(out, weights_only=True)
        cfg = state["cfg"]["model"]
        assert cfg["_name"] == "transformer" and not any(k.startswith("clsr_") for k in cfg)
        plain = TransformerModel.build_model(argparse.Namespace(**cfg), task).eval()
        plain.load_state_dict(state["model"], strict=True)
        with torch.no_grad():
            expected = model(**ni)[0]
            for key in ("src_lang_id", "tgt_lang_id"):
                ni.pop(key)
            got = plain(**ni)[0]
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)
        with torch.no_grad():  # and the same translations (fairseq's plain beam search on the export)
            hyps = {}
            for which, net, sample in (("full", model, batch), ("plain", plain, {**batch, "net_input": ni})):
                generator = SequenceGenerator([net], task.target_dictionary, beam_size=3, max_len_b=10)
                hyps[which] = [h[0]["tokens"].tolist() for h in generator.generate([net], sample)]
        full_hyps, plain_hyps = hyps["full"], hyps["plain"]
        assert plain_hyps == full_hyps
        outputs.append((expected, state["model"]))
    if language_units:  # the pairs took different W^lang: their exported weights differ where a unit is LS
        (_, first), (_, third) = outputs[0], outputs[2]
        assert any(not torch.equal(first[k], third[k]) for k in first if k.endswith("out_proj.weight")
                   or k.endswith("fc2.weight"))


def test_exported_weights_are_the_folded_projections(corpus):
    """Each unit by hand: a shared attention unit is W^shared, a language FFN unit W^lang^T W_fc2."""
    from fairseq_langshare.models.clsr_transformer import ClsrTransformerModel

    _, model, args = build(corpus, "--clsr-variant", "dedicated", "--clsr-dedicated", "enc1.ffn,dec2.cross_attn")
    full = model.state_dict()
    en, xx = 0, 1
    weights, changes = ClsrTransformerModel.export_state_dict(full, args, en, xx)
    assert changes["clsr_variant"] is None
    assert not any("lang_proj" in k or "schedule_horizons" in k or ".shared." in k or ".pre." in k for k in weights)
    torch.testing.assert_close(weights["encoder.layers.0.self_attn.out_proj.weight"],
                               full["encoder.layers.0.self_attn.out_proj.shared.weight"])
    torch.testing.assert_close(weights["encoder.layers.0.self_attn.out_proj.bias"],
                               full["encoder.layers.0.self_attn.out_proj.shared.bias"])
    w_lang = full["encoder.lang_proj.weight"][en]  # encoder side: src (en)
    torch.testing.assert_close(weights["encoder.layers.0.fc2.weight"], w_lang.t() @ full["encoder.layers.0.fc2.pre.weight"])
    torch.testing.assert_close(weights["encoder.layers.0.fc2.bias"], w_lang.t() @ full["encoder.layers.0.fc2.pre.bias"])
    w_lang = full["decoder.lang_proj.weight"][xx]  # decoder side: tgt (xx)
    torch.testing.assert_close(weights["decoder.layers.1.encoder_attn.out_proj.weight"], w_lang.t())
    assert not weights["decoder.layers.1.encoder_attn.out_proj.bias"].any()
    shared = "decoder.layers.0.fc2.shared."
    torch.testing.assert_close(weights["decoder.layers.0.fc2.weight"],
                               full[shared + "weight"] @ full["decoder.layers.0.fc2.pre.weight"])
    torch.testing.assert_close(weights["decoder.layers.0.fc2.bias"],
                               full[shared + "weight"] @ full["decoder.layers.0.fc2.pre.bias"] + full[shared + "bias"])


LEARNED = re.escape("CLSR with learned gates picks W^shared or W^lang token by token and has no plain-transformer "
                    "export: decode the checkpoint with fairseq-generate --user-dir fairseq_langshare")


@pytest.mark.parametrize("flags,message", [
    ([], "^" + LEARNED + "$"),
    (["--clsr-variant", "gate"], "^" + re.escape("CLSR with soft gates (--clsr-variant gate) mixes W^shared and W^lang "
                                                 "token by token and has no plain-transformer export: decode the "
                                                 "checkpoint with fairseq-generate --user-dir fairseq_langshare") + "$"),
    (["--clsr-variant", "ls-encoder-output"], "--clsr-variant ls-encoder-output .* fairseq-generate --user-dir "
                                              "fairseq_langshare"),
])
def test_learned_gates_are_refused_in_one_line(corpus, tmp_path, capsys, flags, message):
    _, model, args = build(corpus, *flags)
    ckpt = save_checkpoint(model, args, tmp_path / "clsr.pt")
    out = tmp_path / "en-xx.pt"
    with pytest.raises(ExportError, match=message):
        export_pair(ckpt, "en", "xx", out)
    assert langshare(["export", str(ckpt), "--src", "en", "--tgt", "xx", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("langshare export: error: ") and "\n" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clsr.pt"]
