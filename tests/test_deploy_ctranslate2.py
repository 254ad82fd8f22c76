"""langshare export --format ctranslate2 and langshare translate: a pair's sub-network served by
CTranslate2 translates like fairseq-generate on the same exported checkpoint."""

import io
import json
import os
import sys

import pytest
import sacrebleu
import torch

from fairseq_langshare.cli import main as langshare
from fairseq_langshare.data.corpus_build import sha256
from fairseq_langshare.deploy.ctranslate2_export import DeployError, export_ctranslate2
from fairseq_langshare.deploy.translate import PairTranslator
from fairseq_langshare.export import export_pair
from deploy_checks import (LANGS, PAIRS, PLAIN_EXPORTS, TRAIN, corpus_of, foreign_spm, interactive_pieces,
                           same_size_dictionaries,
                           one_line_error, optional_library, raw, save_untrained)
from tiny_corpus import PKG_DIR, build_task_and_model, generate, train

ctranslate2, needs_ctranslate2 = optional_library("ctranslate2", "CTranslate2", "deploy")

# an LSL model: its en->X network is a plain Transformer only after export picks X's layers
LSL = ["--arch", "lsl_transformer_tiny", "--lsl-encoder-layers", "TGT={3,4}", "--share-all-embeddings"]


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_thread):
    yield


def spm_task_args(corpus):
    return [str(corpus / "bin"), "--task", "multilingual_langshare", "--user-dir", PKG_DIR, "--langs", ",".join(LANGS),
            "--lang-pairs", ",".join(PAIRS), "--encoder-langtok", "tgt"]


@pytest.fixture(scope="module")
def trained(spm_corpus, tmp_path_factory):
    save = tmp_path_factory.mktemp("lsl")
    train(spm_task_args(spm_corpus) + TRAIN + LSL + ["--max-update", "300", "--save-dir", str(save)])
    return save / "checkpoint_last.pt"


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory):
    """The en->de and en->fr networks as CTranslate2 models (float32) and as fairseq checkpoints."""
    root = tmp_path_factory.mktemp("exported")
    out = {}
    for pair in PAIRS:
        src, tgt = pair.split("-")
        export_ctranslate2(trained, src, tgt, root / f"ct2-{pair}")
        export_pair(trained, src, tgt, root / f"{pair}.pt")
        out[pair] = (root / f"ct2-{pair}", root / f"{pair}.pt")
    return out


def fairseq_generate(corpus, checkpoint, pair, beam):
    """What a user runs on the exported checkpoint: fairseq alone, detokenised output."""
    src, tgt = pair.split("-")
    hyps = generate([str(corpus / "bin"), "--task", "translation_multi_simple_epoch", "--langs", ",".join(LANGS),
                     "--lang-pairs", pair, "--encoder-langtok", "tgt", "--path", str(checkpoint), "--gen-subset", "test",
                     "-s", src, "-t", tgt, "--beam", str(beam), "--cpu", "--max-tokens", "1000",
                     "--required-batch-size-multiple", "1", "--remove-bpe", "sentencepiece"])
    return [hyps[i] for i in range(len(hyps))]


@needs_ctranslate2
def test_greedy_translations_equal_fairseq_generate(spm_corpus, exported):
    """From raw text (SentencePiece + language token applied by langshare translate) to the same
    strings fairseq-generate prints for the binarized test set, in each target language."""
    same = total = 0
    for pair, (ct2_dir, plain) in exported.items():
        ours = PairTranslator(ct2_dir).translate(raw(spm_corpus, pair, "en"), beam=1)
        theirs = fairseq_generate(spm_corpus, plain, pair, beam=1)
        assert len(ours) == len(theirs) == 30
        same += sum(a == b for a, b in zip(ours, theirs))
        total += len(ours)
        tgt = pair.split("-")[1]
        words = " ".join(ours).split()
        assert sum(w.endswith(tgt) for w in words) > 0.9 * len(words), f"translations into {tgt}: {ours[:3]}"
    assert same >= 0.99 * total, f"{same} of {total} greedy translations identical"


@needs_ctranslate2
def test_source_is_encoded_as_fairseq_interactive_encodes_it(exported):
    """The line stripped and SentencePiece's pieces split on whitespace (fairseq's Dictionary.encode_line):
    U+0085 (NEL), which SentencePiece's NFKC keeps as a piece, is no token to fairseq."""
    translator = PairTranslator(exported["en-fr"][0])
    for line in ("\x85open the\x85 file\x85", "漢\x85字 a\x85b\x85", "  open   the file  "):
        assert translator.encode(line) == ["__fr__"] + interactive_pieces(translator.spm, line), line


@needs_ctranslate2
def test_beam_search_follows_fairseq_scoring(spm_corpus, exported):
    """Beam 4 with fairseq's length normalisation (EOS counted) and max length."""
    ct2_dir, plain = exported["en-fr"]
    ours = PairTranslator(ct2_dir).translate(raw(spm_corpus, "en-fr", "en"), beam=4, batch_size=7)
    theirs = fairseq_generate(spm_corpus, plain, "en-fr", beam=4)
    assert sum(a == b for a, b in zip(ours, theirs)) >= 0.95 * len(theirs)


@needs_ctranslate2
def test_manifest_names_languages_tokens_and_provenance(trained, exported):
    ct2_dir, _ = exported["en-fr"]
    manifest = json.loads((ct2_dir / "langshare.json").read_text())
    assert manifest["src"] == "en" and manifest["tgt"] == "fr" and manifest["langs"] == LANGS
    assert manifest["source_prefix"] == ["__fr__"] and manifest["target_prefix"] == []  # --encoder-langtok tgt
    assert manifest["quantization"] == "float32" and manifest["params"] < manifest["full_params"]
    prov = manifest["provenance"]
    assert prov["checkpoint"] == str(trained.resolve()) and prov["checkpoint_sha256"] == sha256(trained)
    assert prov["ctranslate2_version"] == ctranslate2.__version__ and prov["langshare_version"]
    assert sha256(ct2_dir / "spm.model") == prov["spm_sha256"] == sha256(prov["corpus_spm"])
    assert not [p for p in ct2_dir.parent.iterdir() if p.name.startswith(".")], "no temporary directories left"


@needs_ctranslate2
@pytest.mark.parametrize("quantization", ["int8", "int16"])
def test_quantised_export_loads_and_translates(spm_corpus, trained, exported, tmp_path, quantization):
    out = tmp_path / f"ct2-{quantization}"
    export_ctranslate2(trained, "en", "fr", out, quantization=quantization)
    float_dir, _ = exported["en-fr"]
    assert (out / "model.bin").stat().st_size < 0.7 * (float_dir / "model.bin").stat().st_size
    source = raw(spm_corpus, "en-fr", "en")
    quantised = PairTranslator(out).translate(source, beam=1)
    reference = PairTranslator(float_dir).translate(source, beam=1)
    # This tiny model's greedy output repeats words with near-tied logits, so quantisation flips
    # whole sentences on some CPUs (3 of 30 identical on an AMD EPYC, most on others): compare the
    # text, not sentence identity. A broken quantisation (wrong scales, wrong weights) writes
    # other words: 72 here against the float model, 13 against the en-de model, 14 against the source.
    assert all(quantised)
    assert sacrebleu.corpus_chrf(quantised, [reference]).score >= 50


@needs_ctranslate2
def test_translate_cli_round_trip(spm_corpus, exported, tmp_path, capsys, monkeypatch):
    ct2_dir, _ = exported["en-de"]
    lines = raw(spm_corpus, "en-de", "en")[:6]
    lines.insert(2, "")
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    expected = PairTranslator(ct2_dir).translate(lines, beam=2)
    assert expected[2] == "" and all(expected[:2] + expected[3:])
    assert langshare(["translate", str(ct2_dir), "--input", str(tmp_path / "in.txt"), "--beam", "2",
                      "--batch-size", "3"]) == 0
    assert capsys.readouterr().out.splitlines() == expected
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(lines) + "\n"))
    assert langshare(["translate", str(ct2_dir), "--beam", "2"]) == 0
    assert capsys.readouterr().out.splitlines() == expected


@needs_ctranslate2
@pytest.mark.skipif(ctranslate2 is not None and ctranslate2.get_cuda_device_count() > 0, reason="a GPU is visible")
def test_cuda_without_a_gpu_is_a_clear_error(exported, tmp_path, capsys):
    (tmp_path / "in.txt").write_text("open the file\n")
    assert langshare(["translate", str(exported["en-fr"][0]), "--input", str(tmp_path / "in.txt"), "--device",
                      "cuda"]) == 2
    assert capsys.readouterr().err.strip() == ("langshare translate: error: CTranslate2 sees no CUDA device here: use "
                                               "--device cpu")


@needs_ctranslate2
def test_export_cli_writes_a_model_and_replaces_an_earlier_export(trained, tmp_path, capsys):
    out = tmp_path / "en-fr"
    for quantization in ("int8", "float32"):
        assert langshare(["export", str(trained), "--src", "en", "--tgt", "fr", "--out", str(out), "--format",
                          "ctranslate2", "--quantization", quantization]) == 0
        assert json.loads((out / "langshare.json").read_text())["quantization"] == quantization
    assert "langshare translate" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["en-fr"]


@needs_ctranslate2
def test_existing_directory_of_the_user_is_left_alone(trained, tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    assert langshare(["export", str(trained), "--src", "en", "--tgt", "fr", "--out", str(out), "--format",
                      "ctranslate2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "is not a langshare export (it holds notes.txt): pass a new --out" in err
    assert (out / "notes.txt").read_text() == "keep me" and sorted(p.name for p in tmp_path.iterdir()) == ["mine"]


@needs_ctranslate2
def test_export_onto_an_earlier_export_keeps_the_users_files(trained, tmp_path, capsys):
    """A hypotheses file and a folder the user put into an earlier export: the new export refuses (one line
    naming them) and loses nothing; the earlier export's own files are still replaced when alone."""
    out = tmp_path / "en-fr"
    export = ["export", str(trained), "--src", "en", "--tgt", "fr", "--out", str(out), "--format", "ctranslate2"]
    assert langshare(export + ["--quantization", "int8"]) == 0
    (out / "hyps.fr").write_text("my translations")
    (out / "runs").mkdir()
    (out / "runs" / "notes.txt").write_text("keep me")
    capsys.readouterr()
    assert langshare(export) == 2
    err = one_line_error(capsys)
    assert "hyps.fr" in err and "runs" in err and "pass a new --out" in err
    assert (out / "hyps.fr").read_text() == "my translations" and (out / "runs" / "notes.txt").read_text() == "keep me"
    assert json.loads((out / "langshare.json").read_text())["quantization"] == "int8"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["en-fr"]


@needs_ctranslate2
def test_fairseq_only_flags_need_the_ctranslate2_format(trained, tmp_path, capsys):
    assert langshare(["export", str(trained), "--src", "en", "--tgt", "fr", "--out", str(tmp_path / "x.pt"),
                      "--quantization", "int8"]) == 2
    assert "--quantization applies to --format ctranslate2 only" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
    # an empty --quantization (a variable unset) is no weight type: was a float32 export, exit 0
    assert langshare(["export", str(trained), "--src", "en", "--tgt", "fr", "--out", str(tmp_path / "ct2"),
                      "--format", "ctranslate2", "--quantization", ""]) == 2
    assert "--quantization '': pick one of float32, int16, int8" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


@needs_ctranslate2
@pytest.mark.parametrize("method", list(PLAIN_EXPORTS))
def test_every_plain_export_scores_like_the_full_model(spm_corpus, tmp_path, method):
    """CTranslate2's log-probabilities of the reference translations (forced decoding) equal the
    full multilingual model's for the pair, token by token: the conversion is exact for every method."""
    import torch

    arch, flags = PLAIN_EXPORTS[method]
    corpus = corpus_of(spm_corpus)
    task, model, args = build_task_and_model(corpus, arch=arch, extra=["--share-all-embeddings", *flags])
    model.eval()
    ckpt = save_untrained(model, args, tmp_path / "model.pt")
    export_ctranslate2(ckpt, "en", "fr", tmp_path / "ct2", verbose=False)
    translator = PairTranslator(tmp_path / "ct2")
    d = task.source_dictionary
    src_id, tgt_id = LANGS.index("en"), LANGS.index("fr")
    for source, target in list(zip(raw(spm_corpus, "en-fr", "en"), raw(spm_corpus, "en-fr", "fr")))[:8]:
        src_pieces, tgt_pieces = translator.encode(source), translator.spm.encode(target, out_type=str)
        src = torch.tensor([[d.index(p) for p in src_pieces] + [d.eos()]])
        tgt = [d.index(p) for p in tgt_pieces] + [d.eos()]
        with torch.no_grad():
            logits = model(src_tokens=src, src_lengths=torch.tensor([src.size(1)]),
                           prev_output_tokens=torch.tensor([[d.eos()] + tgt[:-1]]),
                           src_lang_id=torch.tensor([src_id]), tgt_lang_id=torch.tensor([tgt_id]))[0]
        expected = torch.log_softmax(logits[0].double(), -1)[torch.arange(len(tgt)), torch.tensor(tgt)]
        got = torch.tensor(translator.translator.score_batch([src_pieces], [tgt_pieces])[0].log_probs, dtype=torch.double)
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)

@needs_ctranslate2
@pytest.mark.parametrize("arch,flags,advice", [
    ("clsr_transformer_tiny", ["--clsr-encoder-lang", "tgt", "--max-update", "10"],
     "translate the full checkpoint with fairseq-generate"),
    ("langshare_adapter_transformer_tiny", [], "export with --format fairseq and translate with fairseq-generate"),
])
def test_pair_networks_that_are_no_plain_transformer_are_refused(corpus, tmp_path, capsys, arch, flags, advice):
    from test_lsl import save_checkpoint

    _, model, args = build_task_and_model(corpus, arch=arch, extra=flags)
    ckpt = save_checkpoint(model, args, tmp_path / "model.pt")
    out = tmp_path / "ct2"
    with pytest.raises(DeployError, match=f"CTranslate2's Transformer cannot run: {advice}"):
        export_ctranslate2(ckpt, "en", "xx", out)
    assert langshare(["export", str(ckpt), "--src", "en", "--tgt", "xx", "--out", str(out), "--format",
                      "ctranslate2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("langshare export: error: the en->xx network of") and "\n" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt"]


def test_missing_ctranslate2_is_a_clear_error(tmp_path, capsys, monkeypatch):
    """Runs whether or not CTranslate2 is installed: the check comes before any work."""
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # as if it were not installed
    monkeypatch.setitem(sys.modules, "ctranslate2.converters", None)
    with pytest.raises(DeployError, match=r"CTranslate2 is not installed: pip install 'fairseq_langshare\[deploy\]'"):
        export_ctranslate2(tmp_path / "model.pt", "en", "fr", tmp_path / "ct2")
    with pytest.raises(DeployError, match="CTranslate2 is not installed"):
        PairTranslator(tmp_path / "ct2")
    assert langshare(["translate", str(tmp_path / "ct2"), "--input", str(tmp_path / "in.txt")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("langshare translate: error: CTranslate2 is not installed: pip install 'fairseq_langshare[deploy]' "
                   "(or pip install 'ctranslate2>=4')")
    assert not list(tmp_path.iterdir())


# --- defects found in review: each test names what the user sees --------------------------------

@needs_ctranslate2
def test_translate_writes_one_line_per_input_line(spm_corpus, exported, tmp_path, capsys, monkeypatch):
    """Only "\\n" ends a line (a trailing "\\r" is dropped): line separators Python's splitlines()
    also splits on (\\u2028, \\x0c, \\x1c-\\x1e, \\x85) and a lone "\\r" stay inside their line."""
    ct2_dir, _ = exported["en-de"]
    s = raw(spm_corpus, "en-de", "en")[:7]
    lines = [s[0], s[1] + "\u2028" + s[2], s[3] + "\x0c", "\x1c\x1d\x1e", s[4] + "\x85" + s[5], s[6] + "\r" + s[0],
             "", s[6]]
    text = "".join(line + ("\r\n" if i % 2 else "\n") for i, line in enumerate(lines))
    (tmp_path / "in.txt").write_bytes(text.encode("utf-8"))
    expected = PairTranslator(ct2_dir).translate(lines, beam=1)
    assert len(set(expected)) > 5
    assert langshare(["translate", str(ct2_dir), "--input", str(tmp_path / "in.txt"), "--beam", "1"]) == 0
    assert capsys.readouterr().out.split("\n") == expected + [""]
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode("utf-8")), encoding="utf-8"))
    assert langshare(["translate", str(ct2_dir), "--beam", "1"]) == 0
    assert capsys.readouterr().out.split("\n") == expected + [""]


@needs_ctranslate2
def test_model_trained_with_a_lang_dict_file_exports_and_translates(spm_corpus, tmp_path):
    """--lang-dict FILE instead of --langs: the export needs neither the file nor a copy in the data directory."""
    import torch
    from fairseq import options, tasks

    (tmp_path / "langs.txt").write_text("\n".join(LANGS) + "\n")
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [
        str(spm_corpus / "bin"), "--task", "multilingual_langshare", "--user-dir", PKG_DIR, "--lang-dict",
        str(tmp_path / "langs.txt"), "--lang-pairs", ",".join(PAIRS), "--encoder-langtok", "tgt",
        "--arch", "langshare_transformer_tiny", "--share-all-embeddings", "--cpu"])
    torch.manual_seed(1)
    task = tasks.setup_task(args)
    ckpt = save_untrained(task.build_model(args), args, tmp_path / "model.pt")
    export_ctranslate2(ckpt, "en", "fr", tmp_path / "ct2", verbose=False)
    assert json.loads((tmp_path / "ct2" / "langshare.json").read_text())["langs"] == LANGS
    source = raw(spm_corpus, "en-fr", "en")[:3]
    assert len(PairTranslator(tmp_path / "ct2").translate(source, beam=1, max_len_b=5)) == 3


@needs_ctranslate2
def test_converter_refusal_names_its_reasons_and_the_fix(spm_corpus, tmp_path, capsys):
    corpus = corpus_of(spm_corpus)
    _, model, args = build_task_and_model(corpus, extra=["--share-all-embeddings", "--encoder-normalize-before"])
    ckpt = save_untrained(model, args, tmp_path / "model.pt")
    out = tmp_path / "ct2"
    assert langshare(["export", str(ckpt), "--src", "en", "--tgt", "fr", "--out", str(out), "--format",
                      "ctranslate2"]) == 2
    err = one_line_error(capsys)
    assert "not supported by CTranslate2" in err
    assert "--encoder-normalize-before and --decoder-normalize-before must have the same value" in err
    assert err.endswith("export with --format fairseq and translate with fairseq-generate --user-dir fairseq_langshare")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt"]


@needs_ctranslate2
def test_sentencepiece_model_of_another_corpus_is_refused(spm_corpus, tmp_path, capsys):
    """--spm naming another corpus' model: its pieces are not the dictionary's, so every sentence would be
    encoded into <unk> and other pieces' ids; refused in one line before anything is written."""
    _, model, args = build_task_and_model(corpus_of(spm_corpus), extra=["--share-all-embeddings"])
    ckpt = save_untrained(model, args, tmp_path / "model.pt")
    spm = foreign_spm(tmp_path / "other.model")
    assert langshare(["export", str(ckpt), "--src", "en", "--tgt", "fr", "--out", str(tmp_path / "ct2"), "--format",
                      "ctranslate2", "--spm", str(spm)]) == 2
    err = one_line_error(capsys)
    assert f"pieces of {spm} are not in {spm_corpus / 'bin' / 'dict.en.txt'}" in err, err
    assert err.endswith("pass --spm, the SentencePiece model the corpus was encoded with"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt", "other.model", "other.vocab"]


@pytest.fixture
def latent_depth_without_layers(spm_corpus, tmp_path):
    """A latent-depth model whose layer posteriors are all below the threshold: its pair keeps no layer."""
    import torch

    corpus = corpus_of(spm_corpus)
    _, model, args = build_task_and_model(corpus, arch="latent_depth_transformer_tiny",
                                          extra=["--share-all-embeddings"])
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("logits"):
                param.fill_(-8.0)
    return save_untrained(model, args, tmp_path / "model.pt")


@needs_ctranslate2
def test_pair_without_layers_is_refused_at_export(latent_depth_without_layers, tmp_path, capsys):
    out = tmp_path / "ct2"
    assert langshare(["export", str(latent_depth_without_layers), "--src", "en", "--tgt", "fr", "--out", str(out),
                      "--format", "ctranslate2"]) == 2
    err = one_line_error(capsys)
    assert "network of" in err and "keeps no decoder layer" in err
    assert err.endswith("export with --format fairseq and translate with fairseq-generate --user-dir fairseq_langshare")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt"]


@needs_ctranslate2
def test_unloadable_export_is_a_clear_error_at_translate(latent_depth_without_layers, tmp_path, capsys, monkeypatch):
    """An export CTranslate2 cannot load (here: no layers, as written before the export refused it)."""
    from fairseq_langshare.deploy import ctranslate2_export

    monkeypatch.setattr(ctranslate2_export, "_refuse_no_layers", lambda *args: None, raising=False)
    export_ctranslate2(latent_depth_without_layers, "en", "fr", tmp_path / "ct2", verbose=False)
    (tmp_path / "in.txt").write_text("open the file\n")
    assert langshare(["translate", str(tmp_path / "ct2"), "--input", str(tmp_path / "in.txt")]) == 2
    err = one_line_error(capsys, "translate")
    assert f"CTranslate2 cannot load {tmp_path / 'ct2'} on cpu (" in err and "re-export it" in err


@needs_ctranslate2
def test_export_through_a_symlinked_out_replaces_its_target(trained, tmp_path, capsys):
    """--out current -> v1: v1 holds the new export, current still points to it, nothing else is left."""
    export = ["export", str(trained), "--src", "en", "--tgt", "fr", "--format", "ctranslate2"]
    assert langshare(export + ["--out", str(tmp_path / "v1"), "--quantization", "int8"]) == 0
    (tmp_path / "current").symlink_to("v1")
    assert langshare(export + ["--out", str(tmp_path / "current")]) == 0
    assert (tmp_path / "current").is_symlink() and os.readlink(tmp_path / "current") == "v1"
    assert json.loads((tmp_path / "v1" / "langshare.json").read_text())["quantization"] == "float32"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["current", "v1"]
    assert len(PairTranslator(tmp_path / "current").translate(["open the file"], beam=1)) == 1


def test_truncated_checkpoint_next_to_a_dangling_symlink_is_explained(tmp_path, capsys):
    import torch

    torch.save({"model": {"w": torch.zeros(1000)}}, tmp_path / "checkpoint_best.pt")
    data = (tmp_path / "checkpoint_best.pt").read_bytes()
    (tmp_path / "checkpoint_last.pt").write_bytes(data[: len(data) // 2])
    (tmp_path / "checkpoint_old.pt").symlink_to(tmp_path / "gone" / "checkpoint.pt")
    assert langshare(["export", str(tmp_path / "checkpoint_last.pt"), "--src", "en", "--tgt", "fr", "--out",
                      str(tmp_path / "out.pt")]) == 2
    err = one_line_error(capsys)
    assert f"cannot read checkpoint {tmp_path / 'checkpoint_last.pt'}" in err
    assert f"the newest readable checkpoint next to it is {tmp_path / 'checkpoint_best.pt'}" in err


@needs_ctranslate2
def test_dictionaries_of_the_same_size_but_other_entries_are_refused(spm_corpus, tmp_path, capsys):
    """--data naming another corpus prepared alike: every embedding fits, so the converter used to write a model
    that maps the rows to other pieces without a word; refused in one line, as decoding refuses it."""
    _, model, args = build_task_and_model(corpus_of(spm_corpus), extra=["--share-all-embeddings"])
    ckpt = save_untrained(model, args, tmp_path / "model.pt")
    data = same_size_dictionaries(spm_corpus, tmp_path / "other")
    assert langshare(["export", str(ckpt), "--src", "en", "--tgt", "fr", "--out", str(tmp_path / "ct2"), "--format",
                      "ctranslate2", "--data", str(data), "--spm", str(spm_corpus / "spm.model")]) == 2
    err = one_line_error(capsys)
    assert f"the dictionaries in {data} are not those {ckpt} was trained with" in err, err
    assert err.endswith("pass --data, the fairseq-preprocess directory the model was trained on"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt", "other"]


def reexport(trained, out):
    """The re-export command ``langshare translate`` names for a damaged or incomplete export ``out``."""
    return (f"re-export it (langshare export {trained.resolve()} --src en --tgt fr --format ctranslate2 "
            f"--quantization float32 --out {out})")


@needs_ctranslate2
def test_missing_sentencepiece_model_is_named_with_the_fix(trained, exported, tmp_path, capsys):
    """Was: `RuntimeError: NOT_FOUND: "DIR/spm.model"` with a traceback."""
    import shutil

    out = tmp_path / "en-fr"
    shutil.copytree(exported["en-fr"][0], out)
    (out / "spm.model").unlink()
    (tmp_path / "in.txt").write_text("open the file\n")
    assert langshare(["translate", str(out), "--input", str(tmp_path / "in.txt")]) == 2
    assert one_line_error(capsys, "translate") == (f"langshare translate: error: {out / 'spm.model'} is missing: "
                                                   f"{reexport(trained, out)}")


@needs_ctranslate2
@pytest.mark.parametrize("damage", ["truncated-model", "deleted-model", "truncated-manifest", "truncated-spm"])
def test_damaged_export_is_named_as_damaged_with_the_fix(trained, exported, tmp_path, capsys, damage):
    """Was: a truncated or deleted model.bin got "re-export it with another --quantization or use another --device"
    (the file was damaged, not the settings); a truncated langshare.json a bare JSON error naming neither file nor
    fix. Following the fix (delete the damaged file, re-export) makes the export translate again."""
    import shlex
    import shutil

    out = tmp_path / "en-fr"
    shutil.copytree(exported["en-fr"][0], out)
    name = {"truncated-model": "model.bin", "deleted-model": "model.bin", "truncated-manifest": "langshare.json",
            "truncated-spm": "spm.model"}[damage]
    data = (out / name).read_bytes()
    if damage == "deleted-model":
        (out / name).unlink()
    else:
        (out / name).write_bytes(data[: len(data) // 2])
    (tmp_path / "in.txt").write_text("open the file\n")
    assert langshare(["translate", str(out), "--input", str(tmp_path / "in.txt")]) == 2
    err = one_line_error(capsys, "translate")
    assert "--quantization or use another --device" not in err, err
    if damage == "deleted-model":
        assert err == f"langshare translate: error: {out / name} is missing: {reexport(trained, out)}", err
    elif damage == "truncated-manifest":
        assert err.startswith(f"langshare translate: error: {out / name} is damaged (not valid JSON: "), err
        assert err.endswith(f"): re-export it (langshare export CKPT --src SRC --tgt TGT --format ctranslate2 "
                            f"--out {out})"), err
    else:
        assert err.startswith(f"langshare translate: error: {out / name} is damaged ("), err
        assert err.endswith(f"not the file langshare export wrote): delete it and {reexport(trained, out)}"), err
        (out / name).unlink()
        command = shlex.split(reexport(trained, out)[len("re-export it ("):-1])
        assert langshare(command[1:]) == 0
        assert langshare(["translate", str(out), "--input", str(tmp_path / "in.txt")]) == 0


@needs_ctranslate2
def test_the_converters_checkpoint_loads_through_fairseq(trained, tmp_path, monkeypatch):
    """CTranslate2 4.0-4.5 read the checkpoint handed to their converter with fairseq's
    ``checkpoint_utils.load_checkpoint_to_cpu`` (later releases with torch.load). Was ``KeyError: 'best_loss'``
    there (fairseq's upgrade of a checkpoint without optimizer history): every export failed with those releases,
    which setup.py's ctranslate2>=4 admits."""
    import shutil

    from fairseq import checkpoint_utils
    from fairseq_langshare.deploy import ctranslate2_export

    written = tmp_path / "pair-args.pt"
    original = ctranslate2_export._converter_checkpoint

    def keep(state, out):
        original(state, out)
        shutil.copyfile(out, written)

    monkeypatch.setattr(ctranslate2_export, "_converter_checkpoint", keep)
    export_ctranslate2(trained, "en", "de", tmp_path / "ct2")
    state = checkpoint_utils.load_checkpoint_to_cpu(str(written))
    assert state["args"].arch == "transformer" and state["args"].langs == LANGS
    assert sorted(state["model"]) == sorted(torch.load(written, weights_only=True)["model"])
