"""langshare export --format transformers: a pair's sub-network as a model directory that
AutoModelForSeq2SeqLM and AutoTokenizer load with no custom code, and that translates raw text
as fairseq-interactive does on the full multilingual checkpoint."""

import io
import json
import os
import shutil
import sys
from contextlib import redirect_stdout

import pytest
import torch

from fairseq_langshare.cli import main as langshare
from fairseq_langshare.deploy.transformers_export import TransformersExportError, export_transformers
from deploy_checks import (LANGS, PAIRS, PLAIN_EXPORTS, TRAIN, corpus_of, foreign_spm, interactive_pieces,
                           same_size_dictionaries,
                           one_line_error, optional_library, raw, save_untrained)
from tiny_corpus import PKG_DIR, build_task_and_model, train

transformers, needs_transformers = optional_library("transformers", "transformers", "transformers")
# transformers 5 removed the translation pipeline (generate + batch_decode remain)
HAS_TRANSLATION_PIPELINE = transformers is not None and int(transformers.__version__.split(".")[0]) < 5

TRAIN = TRAIN + ["--max-update", "300", "--share-all-embeddings"]
# a post-norm baseline (-> MarianMTModel) and a pre-norm method (-> M2M100)
TRAINED = {"baseline": "langshare_transformer_tiny", "latent_depth": "latent_depth_transformer_tiny"}
# text SentencePiece normalises: runs of spaces, ends, NFKC (full-width, ligature), unknown characters,
# the special symbols' own spellings, a leading U+2581; U+0085 (NEL, e.g. cp1252's ellipsis read as latin-1),
# whitespace to Python that SentencePiece's NFKC keeps: fairseq-interactive strips it from the line's ends and
# fairseq's dictionary splits pieces on it
TRICKY = ["  open   the file  ", "ｆｕｌｌ ｗｉｄｔｈ ﬁle Ⅻ", "漢字 and 😀😀 unknown", "<s-like> _fr_ and unk>",
          "\u2581already escaped", "tab\tand\u00a0nbsp", "", "a", "\x85open the\x85 file\x85", "漢\x85字 a\x85b\x85"]


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_thread):
    yield


def untrained(spm_corpus, path, arch="langshare_transformer_tiny", flags=("--share-all-embeddings",), langtok=True):
    _, model, args = build_task_and_model(corpus_of(spm_corpus), arch=arch, extra=list(flags), langtok=langtok)
    return model.eval(), save_untrained(model, args, path)


def save_as_fairseq_train(model, args, path):
    """A freshly built model saved with fairseq-train's config sections (fairseq-interactive loads it)."""
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    from fairseq_langshare.export import _plain

    torch.save({"args": None, "cfg": _plain(convert_namespace_to_omegaconf(args)), "model": model.state_dict(),
                "optimizer_history": [{"criterion_name": "c", "optimizer_name": "o", "lr_scheduler_state": {"best": None},
                                       "num_updates": 0}],
                "extra_state": {"train_iterator": {"epoch": 1, "iterations_in_epoch": 0}}}, path)
    return path


@pytest.fixture(scope="module")
def baseline_export(spm_corpus, tmp_path_factory):
    """An untrained post-norm model, its checkpoint and its en->fr transformers export."""
    root = tmp_path_factory.mktemp("baseline")
    model, ckpt = untrained(spm_corpus, root / "model.pt")
    export_transformers(ckpt, "en", "fr", root / "hf", verbose=False)
    return model, ckpt, root / "hf"


def fairseq_interactive(corpus, checkpoint, lines, pair, beam, tmp_path, langtok=("--encoder-langtok", "tgt"),
                        extra=()):
    """What a user runs on the full multilingual checkpoint: raw text in, detokenised text out."""
    from fairseq import options
    from fairseq_cli import interactive

    src, tgt = pair.split("-")
    (tmp_path / "input.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    parser = options.get_interactive_generation_parser()
    args = options.parse_args_and_arch(parser, [
        str(corpus / "bin"), "--task", "multilingual_langshare", "--user-dir", PKG_DIR, "--langs", ",".join(LANGS),
        "--lang-pairs", ",".join(PAIRS), *langtok, "--path", str(checkpoint), "-s", src, "-t", tgt,
        "--beam", str(beam), "--cpu", "--bpe", "sentencepiece", "--sentencepiece-model", str(corpus / "spm.model"),
        "--input", str(tmp_path / "input.txt"), "--buffer-size", "100", "--batch-size", "100", *extra])
    out = io.StringIO()
    with redirect_stdout(out):
        interactive.main(args)
    return [line.split("\t")[2] for line in out.getvalue().splitlines() if line.startswith("D-")]


def hf_translate(model_dir, lines, **generate):
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForSeq2SeqLM.from_pretrained(str(model_dir)).eval()
    batch = tokenizer(lines, return_tensors="pt", padding=True)
    with torch.no_grad():
        return tokenizer.batch_decode(model.generate(**batch, **generate), skip_special_tokens=True)


# --- tokenizer ------------------------------------------------------------------------------

@needs_transformers
def test_tokenizer_encodes_raw_text_as_fairseq_does(spm_corpus, baseline_export):
    """SentencePiece pieces looked up in fairseq's dictionary, the target language's token before
    them (--encoder-langtok tgt) and </s> after: what fairseq-interactive feeds the encoder."""
    import sentencepiece
    from fairseq.data import Dictionary
    from transformers import AutoTokenizer

    _, _, hf = baseline_export
    tokenizer = AutoTokenizer.from_pretrained(str(hf))
    assert type(tokenizer).__name__ in ("PreTrainedTokenizerFast", "TokenizersBackend")
    spm = sentencepiece.SentencePieceProcessor(model_file=str(spm_corpus / "spm.model"))
    d = Dictionary.load(str(spm_corpus / "bin" / "dict.en.txt"))
    for lang in LANGS:
        d.add_symbol(f"__{lang}__")
    lines = raw(spm_corpus, "en-fr", "en") + TRICKY
    for line in lines:
        expected = [d.index("__fr__")] + [d.index(p) for p in interactive_pieces(spm, line)] + [d.eos()]
        assert tokenizer(line).input_ids == expected, line
    assert any(d.unk() in tokenizer(line).input_ids for line in TRICKY)  # unknown characters are exercised
    # the one difference, as in every transformers tokenizer: the literal text of a dictionary symbol that is
    # no SentencePiece piece is that symbol (SentencePiece would cut it into pieces)
    ids = tokenizer("a __de__ <unk> </s>").input_ids
    assert ids[0] == d.index("__fr__") and ids[-4:] == [d.index("__de__"), d.unk(), d.eos(), d.eos()]


@needs_transformers
def test_decoding_detokenises_as_remove_bpe_sentencepiece(spm_corpus, baseline_export):
    import sentencepiece
    from fairseq.data import Dictionary
    from fairseq.data.data_utils import post_process
    from transformers import AutoTokenizer

    _, _, hf = baseline_export
    tokenizer = AutoTokenizer.from_pretrained(str(hf))
    spm = sentencepiece.SentencePieceProcessor(model_file=str(spm_corpus / "spm.model"))
    d = Dictionary.load(str(spm_corpus / "bin" / "dict.fr.txt"))
    for lang in LANGS:
        d.add_symbol(f"__{lang}__")
    for line in raw(spm_corpus, "en-fr", "fr") + TRICKY:
        ids = d.encode_line(" ".join(spm.encode(line, out_type=str)), add_if_not_exist=False).tolist()
        expected = post_process(d.string(torch.tensor(ids)), "sentencepiece")
        assert tokenizer.decode([2] + ids, skip_special_tokens=True) == expected, line
    # a trailing or leading lone U+2581 piece: fairseq strips the spaces it becomes
    edge = [d.index("\u2581"), d.index("\u2581")] + d.encode_line(" ".join(spm.encode("open it", out_type=str)),
                                                                add_if_not_exist=False).tolist()[:-1]
    edge += [d.index("\u2581"), d.eos()]
    assert tokenizer.decode(edge, skip_special_tokens=True) == post_process(d.string(torch.tensor(edge)),
                                                                            "sentencepiece") == "open it"


@needs_transformers
@pytest.mark.parametrize("options", [{}, {"user_defined_symbols": ["<sep>", "@@"]}, {"model_type": "bpe"},
                                     {"byte_fallback": True, "vocab_size": 400}])
def test_tokenizer_builder_follows_the_sentencepiece_model(spm_corpus, tmp_path, options):
    """SentencePiece models langshare does not train itself: user-defined symbols are emitted whole (as
    SentencePiece does); BPE and byte-fallback models are refused in one line."""
    import sentencepiece

    from fairseq_langshare.deploy.transformers_export import _build_tokenizer

    lines = raw(spm_corpus, "en-fr", "en") + raw(spm_corpus, "en-fr", "fr")
    sentencepiece.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_prefix=str(tmp_path / "m"),
                                             **{"vocab_size": 100, **options}, hard_vocab_limit=False, minloglevel=2,
                                             num_threads=1)
    spm = sentencepiece.SentencePieceProcessor(model_file=str(tmp_path / "m.model"))
    symbols = ["<s>", "<pad>", "</s>", "<unk>"] + [spm.id_to_piece(i) for i in range(spm.get_piece_size())
                                                   if not (spm.is_control(i) or spm.is_unknown(i))] + ["__fr__"]
    build = lambda: _build_tokenizer(tmp_path / "m.model", symbols, 3, ["__fr__"], "</s>", ["</s>", "__fr__"])
    if options.get("model_type") or options.get("byte_fallback"):
        with pytest.raises(TransformersExportError, match="is not a unigram SentencePiece model without byte fallback"):
            build()
        return
    tokenizer, ids = build(), {s: i for i, s in enumerate(symbols)}
    for line in lines + TRICKY + ["a<sep>b @@ c@@d"]:
        pieces = interactive_pieces(spm, line)
        assert tokenizer.encode(line).ids == [ids["__fr__"]] + [ids.get(p, 3) for p in pieces] + [2], line


# --- the network ----------------------------------------------------------------------------

LOGIT_CASES = {**{name: (arch, ["--share-all-embeddings", *flags]) for name, (arch, flags) in PLAIN_EXPORTS.items()},
               "baseline_prenorm": ("langshare_transformer_tiny", ["--share-all-embeddings", "--encoder-normalize-before",
                                                                   "--decoder-normalize-before"]),
               "baseline_separate_embeddings": ("langshare_transformer_tiny", []),
               "baseline_tied_decoder_only": ("langshare_transformer_tiny", ["--share-decoder-input-output-embed"]),
               "baseline_unscaled_gelu": ("langshare_transformer_tiny", ["--share-all-embeddings", "--no-scale-embedding",
                                                                         "--activation-fn", "gelu_accurate"])}


@needs_transformers
@pytest.mark.parametrize("case", list(LOGIT_CASES))
def test_logits_equal_the_full_model(spm_corpus, tmp_path, case):
    """Every method whose pair exports today, post-norm and pre-norm, shared and separate embeddings:
    the transformers model's logits (a right-padded batch) equal the full multilingual model's for the pair."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    arch, flags = LOGIT_CASES[case]
    model, ckpt = untrained(spm_corpus, tmp_path / "model.pt", arch, flags)
    export_transformers(ckpt, "en", "fr", tmp_path / "hf", verbose=False)
    expected_class = "M2M100ForConditionalGeneration" if model.cfg.encoder.normalize_before else "MarianMTModel"
    assert json.loads((tmp_path / "hf" / "langshare.json").read_text())["transformers_model"] == expected_class
    hf = AutoModelForSeq2SeqLM.from_pretrained(str(tmp_path / "hf")).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    sources, targets = raw(spm_corpus, "en-fr", "en")[:4], raw(spm_corpus, "en-fr", "fr")[:4]
    src = tokenizer(sources, return_tensors="pt", padding=True)
    tgt = [tokenizer(t).input_ids[1:] for t in targets]  # pieces + </s>, without the source's language token
    width = max(map(len, tgt))
    prev = torch.tensor([[2] + t[:-1] + [1] * (width - len(t)) for t in tgt])
    with torch.no_grad():
        got = hf(**src, decoder_input_ids=prev, decoder_attention_mask=prev.ne(1).long(), use_cache=False).logits
        for i, t in enumerate(tgt):
            s = src.input_ids[i][src.attention_mask[i].bool()][None]
            full = model(src_tokens=s, src_lengths=torch.tensor([s.size(1)]), prev_output_tokens=prev[i: i + 1, :len(t)],
                         src_lang_id=torch.tensor([0]), tgt_lang_id=torch.tensor([2]))[0][0]
            torch.testing.assert_close(got[i, :len(t)], full, atol=1e-4, rtol=1e-4)


@pytest.fixture(scope="module")
def trained(spm_corpus, tmp_path_factory):
    """A post-norm baseline and a pre-norm latent-depth model, 300 updates each, and their
    en->de and en->fr exports."""
    out = {}
    for method, arch in TRAINED.items():
        save = tmp_path_factory.mktemp(method)
        train([str(spm_corpus / "bin"), "--task", "multilingual_langshare", "--user-dir", PKG_DIR, "--langs",
               ",".join(LANGS), "--lang-pairs", ",".join(PAIRS), "--encoder-langtok", "tgt", "--arch", arch]
              + TRAIN + ["--save-dir", str(save)])
        ckpt = save / "checkpoint_last.pt"
        out[method] = {"checkpoint": ckpt}
        for pair in PAIRS:
            src, tgt = pair.split("-")
            assert langshare(["export", str(ckpt), "--src", src, "--tgt", tgt, "--format", "transformers",
                              "--out", str(save / f"hf-{pair}")]) == 0
            out[method][pair] = save / f"hf-{pair}"
    return out


@needs_transformers
@pytest.mark.slow
@pytest.mark.parametrize("method", list(TRAINED))
def test_generate_translates_as_fairseq_interactive(spm_corpus, trained, tmp_path, method):
    """Raw text -> AutoTokenizer -> generate -> batch_decode gives fairseq-interactive's output on the full
    checkpoint: greedy on >= 99% of the test sentences, beam 4 on >= 97% (both directions, 60 sentences)."""
    same, total = {1: 0, 4: 0}, 0
    for pair in PAIRS:
        lines = raw(spm_corpus, pair, "en")
        for beam in same:
            ours = hf_translate(trained[method][pair], lines, num_beams=beam)
            theirs = fairseq_interactive(spm_corpus, trained[method]["checkpoint"], lines, pair, beam, tmp_path)
            assert len(ours) == len(theirs) == len(lines)
            same[beam] += sum(a == b for a, b in zip(ours, theirs))
        total += len(lines)
        words = " ".join(ours).split()
        tgt = pair.split("-")[1]
        assert sum(w.endswith(tgt) for w in words) > 0.9 * len(words), f"translations into {tgt}: {ours[:3]}"
    assert same[1] >= 0.99 * total and same[4] >= 0.97 * total, f"identical of {total}: {same}"


@needs_transformers
@pytest.mark.slow
@pytest.mark.skipif(not HAS_TRANSLATION_PIPELINE, reason="transformers 5 removed the translation pipeline")
def test_translation_pipeline_translates_raw_text(spm_corpus, trained, tmp_path):
    """pipeline("translation", model=DIR) prints what fairseq-interactive prints with the same beam
    (the pipeline's own default, 4 in transformers 4.57, overrides the exported 5)."""
    from transformers import pipeline

    lines = raw(spm_corpus, "en-fr", "en")
    for method in TRAINED:
        translator = pipeline("translation", model=str(trained[method]["en-fr"]), device="cpu")
        ours = [out["translation_text"] for out in translator(lines)]
        beam = translator.generation_config.num_beams
        theirs = fairseq_interactive(spm_corpus, trained[method]["checkpoint"], lines, "en-fr", beam, tmp_path)
        assert sum(a == b for a, b in zip(ours, theirs)) >= 0.97 * len(lines) and all(ours), (method, beam)


@needs_transformers
def test_decoder_language_token_is_forced_first_and_stripped(spm_corpus, tmp_path):
    """--encoder-langtok src --decoder-langtok: the source gets __en__, decoding starts with </s> __fr__
    (forced_bos_token_id) and the output drops it, as fairseq strips it (greedy, untrained model)."""
    from transformers import AutoTokenizer

    flags = ["--share-all-embeddings", "--encoder-langtok", "src", "--decoder-langtok"]
    _, model, args = build_task_and_model(corpus_of(spm_corpus), extra=flags, langtok=False)
    ckpt = save_as_fairseq_train(model, args, tmp_path / "model.pt")
    export_transformers(ckpt, "en", "fr", tmp_path / "hf", verbose=False)
    manifest = json.loads((tmp_path / "hf" / "langshare.json").read_text())
    assert manifest["source_prefix"] == ["__en__"] and manifest["target_prefix"] == ["__fr__"]
    tokenizer = AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    generation = json.loads((tmp_path / "hf" / "generation_config.json").read_text())
    assert generation["forced_bos_token_id"] == tokenizer.convert_tokens_to_ids("__fr__")
    lines = raw(spm_corpus, "en-fr", "en")[:12]
    assert tokenizer(lines[0]).input_ids[0] == tokenizer.convert_tokens_to_ids("__en__")
    ours = hf_translate(tmp_path / "hf", lines, num_beams=1, max_length=9)
    theirs = fairseq_interactive(spm_corpus, ckpt, lines, "en-fr", 1, tmp_path,
                                 langtok=("--encoder-langtok", "src", "--decoder-langtok"), extra=("--max-len-b", "8"))
    assert ours == theirs and len(set(ours)) > 3


@needs_transformers
@pytest.mark.parametrize("langtok,generated", [(("--encoder-langtok", "tgt"), "__fr__"),
                                               (("--encoder-langtok", "tgt", "--decoder-langtok"), "__en__"),
                                               (("--encoder-langtok", "src", "--decoder-langtok"), "__de__")])
def test_generated_language_tokens_are_printed_as_fairseq_prints_them(spm_corpus, tmp_path, langtok, generated):
    """fairseq-interactive strips EOS and BOS from its output, and with --decoder-langtok the tokens of
    the pair's two languages (the task strips those of the languages it loaded, -s and -t): a language
    token the network generates is printed without --decoder-langtok (here the source's __fr__ of
    --encoder-langtok tgt), dropped with it (__en__), printed if of another language (__de__), and
    batch_decode does the same. The network is made to generate it at every step (``fixed_ranking``):
    an untrained one picks a scaled embedding row or not as torch's random numbers fall."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    _, model, args = build_task_and_model(corpus_of(spm_corpus), extra=["--share-all-embeddings", *langtok],
                                          langtok=False)
    ckpt = save_as_fairseq_train(fixed_ranking(model, generated, "</s>"), args, tmp_path / "model.pt")
    export_transformers(ckpt, "en", "fr", tmp_path / "hf", verbose=False)
    lines = raw(spm_corpus, "en-fr", "en")[:8]
    tokenizer = AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    hf = AutoModelForSeq2SeqLM.from_pretrained(str(tmp_path / "hf")).eval()
    with torch.no_grad():
        out = hf.generate(**tokenizer(lines, return_tensors="pt", padding=True), num_beams=1, max_length=9)
    assert tokenizer.convert_tokens_to_ids(generated) in out  # the network does generate it
    theirs = fairseq_interactive(spm_corpus, ckpt, lines, "en-fr", 1, tmp_path, langtok=langtok,
                                 extra=("--max-len-b", "8"))
    assert tokenizer.batch_decode(out, skip_special_tokens=True) == theirs


def fixed_ranking(model, first, second):
    """``model`` whose decoder puts out one hidden state whatever it reads (the last layer norm's gain 0, its
    bias along one direction) and whose embedding (= output projection) ranks ``first`` top at every step
    and ``second`` next."""
    d, embed = model.decoder.dictionary, model.decoder.embed_tokens.weight
    with torch.no_grad():
        direction = torch.nn.functional.normalize(torch.randn(embed.size(1), generator=torch.Generator().manual_seed(0)),
                                                  dim=0)
        embed[d.index(first)], embed[d.index(second)] = 3 * direction, 2 * direction
        norm = model.decoder.layers[-1].final_layer_norm
        norm.weight.zero_()
        norm.bias.copy_(20 * direction)
    return model


@needs_transformers
@pytest.mark.parametrize("first,second", [("\u2581open", "</s>"), ("<pad>", "</s>")])
def test_generation_config_stops_where_fairseq_interactive_stops(spm_corpus, tmp_path, first, second):
    """generate() with the exported defaults (greedy asked for, nothing else) against fairseq-interactive
    --beam 1 with its defaults, on networks whose every step ranks ``first`` then ``second``: a piece that
    never yields to EOS runs to fairseq's length limit (--max-len-b 200); <pad> is never generated and EOS
    not first (--min-len 1), so the output is the one token ranked third."""
    _, model, args = build_task_and_model(corpus_of(spm_corpus), extra=["--share-all-embeddings"])
    ckpt = save_as_fairseq_train(fixed_ranking(model, first, second), args, tmp_path / "model.pt")
    export_transformers(ckpt, "en", "fr", tmp_path / "hf", verbose=False)
    lines = raw(spm_corpus, "en-fr", "en")[:2]
    ours = hf_translate(tmp_path / "hf", lines, num_beams=1)
    theirs = fairseq_interactive(spm_corpus, ckpt, lines, "en-fr", 1, tmp_path)
    assert ours == theirs
    assert [len(line.split()) for line in ours] == ([200, 200] if first != "<pad>" else [1, 1]), ours


# --- refusals, the output directory, the optional dependency --------------------------------

@needs_transformers
@pytest.mark.parametrize("arch,flags,message", [
    ("langshare_adapter_transformer_tiny", ["--share-all-embeddings"],
     "(langshare_adapter_single) adds language adapters to every layer, which transformers' MarianMTModel and M2M100 "
     "models cannot run: export with --format fairseq and translate with fairseq-generate --user-dir"),
    ("clsr_transformer_tiny", ["--share-all-embeddings", "--clsr-encoder-lang", "tgt", "--max-update", "10"],
     "(clsr_transformer) has CLSR projections that langshare export cannot write as a plain transformer"),
    ("langshare_transformer_tiny", ["--share-all-embeddings", "--encoder-normalize-before"],
     "has no transformers equivalent (a pre-norm encoder with a post-norm decoder or the reverse"),
    ("langshare_transformer_tiny", ["--encoder-normalize-before", "--decoder-normalize-before"],
     "has no transformers equivalent (separate encoder and decoder embeddings in a pre-norm model"),
    ("langshare_transformer_tiny", ["--share-all-embeddings", "--encoder-learned-pos"],
     "has no transformers equivalent (learned encoder positions)"),
])
def test_pair_networks_transformers_cannot_hold_are_refused_in_one_line(spm_corpus, tmp_path, capsys, arch, flags,
                                                                        message):
    _, ckpt = untrained(spm_corpus, tmp_path / "model.pt", arch, flags)
    assert langshare(["export", str(ckpt), "--src", "en", "--tgt", "fr", "--format", "transformers", "--out",
                      str(tmp_path / "hf")]) == 2
    err = one_line_error(capsys)
    assert err.startswith("langshare export: error: the en->fr network of") and message in err, err
    assert err.endswith("fairseq-generate --user-dir fairseq_langshare"), err  # what --format ctranslate2 advises
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt"]


@needs_transformers
def test_export_errors_are_the_fairseq_exports(baseline_export, tmp_path, capsys):
    """What export_pair refuses (here an unknown language) is refused with the same line."""
    _, ckpt, _ = baseline_export
    base = ["export", str(ckpt), "--src", "en", "--tgt", "xx"]
    assert langshare(base + ["--out", str(tmp_path / "x.pt")]) == 2
    fairseq_line = one_line_error(capsys)
    assert langshare(base + ["--out", str(tmp_path / "hf"), "--format", "transformers"]) == 2
    assert one_line_error(capsys) == fairseq_line
    assert langshare(["export", str(ckpt), "--src", "en", "--tgt", "fr", "--out", str(tmp_path / "hf"), "--format",
                      "transformers", "--quantization", "int8"]) == 2
    assert "--quantization applies to --format ctranslate2 only" in one_line_error(capsys)
    assert not list(tmp_path.iterdir())


@needs_transformers
def test_sentencepiece_model_of_another_corpus_is_refused(spm_corpus, tmp_path, capsys):
    """--spm naming another corpus' model: refused in one line, the same as --format ctranslate2's."""
    _, ckpt = untrained(spm_corpus, tmp_path / "model.pt")
    spm = foreign_spm(tmp_path / "other.model")
    assert langshare(["export", str(ckpt), "--src", "en", "--tgt", "fr", "--out", str(tmp_path / "hf"), "--format",
                      "transformers", "--spm", str(spm)]) == 2
    err = one_line_error(capsys)
    assert f"pieces of {spm} are not in {spm_corpus / 'bin' / 'dict.en.txt'}" in err, err
    assert err.endswith("pass --spm, the SentencePiece model the corpus was encoded with"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt", "other.model", "other.vocab"]


@needs_transformers
def test_out_directory_of_the_user_is_never_emptied(baseline_export, tmp_path, capsys):
    _, ckpt, _ = baseline_export
    out = tmp_path / "en-fr"
    export = ["export", str(ckpt), "--src", "en", "--tgt", "fr", "--format", "transformers", "--out", str(out)]
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    assert langshare(export) == 2
    # was: the files were not named, though deploy.md says the refusal names them
    assert "exists and is not a langshare export (it holds notes.txt): pass a new --out" in one_line_error(capsys)
    (out / "notes.txt").unlink()
    assert langshare(export) == 0 and langshare(export) == 0  # an earlier export is replaced
    manifest = json.loads((out / "langshare.json").read_text())
    assert sorted(manifest["files"]) == sorted(p.name for p in out.iterdir() if p.name != "langshare.json")
    (out / "hyps.fr").write_text("my translations")
    (out / "runs").mkdir()
    capsys.readouterr()
    assert langshare(export) == 2
    err = one_line_error(capsys)
    assert "also holds files langshare export did not write (hyps.fr, runs/)" in err
    assert (out / "hyps.fr").read_text() == "my translations" and (out / "runs").is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["en-fr"]


@needs_transformers
@pytest.mark.parametrize("earlier_export", [False, True])
def test_working_directory_as_out_is_refused(baseline_export, tmp_path, capsys, monkeypatch, earlier_export):
    """--out . (empty, or an earlier export): the export replaces DIR by a new directory, which would leave
    the shell in a deleted one where ls shows nothing: refused in one line, nothing written."""
    _, ckpt, hf = baseline_export
    out = tmp_path / "en-fr"
    shutil.copytree(hf, out) if earlier_export else out.mkdir()
    before = sorted(p.name for p in out.iterdir())
    monkeypatch.chdir(out)
    assert langshare(["export", str(ckpt), "--src", "en", "--tgt", "fr", "--format", "transformers", "--out", "."]) == 2
    assert "--out . is the working directory" in one_line_error(capsys)
    assert sorted(p.name for p in out.iterdir()) == before and sorted(p.name for p in tmp_path.iterdir()) == ["en-fr"]


@needs_transformers
def test_manifest_names_the_model_tokens_and_provenance(spm_corpus, baseline_export):
    from fairseq_langshare.data.corpus_build import sha256

    _, ckpt, hf = baseline_export
    manifest = json.loads((hf / "langshare.json").read_text())
    assert manifest["format"] == "langshare-transformers" and manifest["src"] == "en" and manifest["tgt"] == "fr"
    assert manifest["langs"] == LANGS and manifest["source_prefix"] == ["__fr__"] and manifest["target_prefix"] == []
    assert manifest["provenance"]["checkpoint_sha256"] == sha256(ckpt)
    assert manifest["provenance"]["transformers_version"] == transformers.__version__
    assert sha256(hf / "spm.model") == sha256(spm_corpus / "spm.model")
    config = json.loads((hf / "config.json").read_text())
    assert config["model_type"] == "marian" and "auto_map" not in config  # no custom code
    assert not [p for p in hf.parent.iterdir() if p.name.startswith(".")], "no temporary directories left"
    assert len({p.stat().st_mode & 0o777 for p in hf.iterdir()}) == 1  # every file readable alike (umask)


def test_the_export_check_loads_without_transformers_progress_bars(spm_corpus, baseline_export, tmp_path, monkeypatch):
    """Was: transformers 5 drew a "Loading weights" bar in the middle of the export's output when the
    export loaded what it wrote to check it. The user's setting is left as it was."""
    from transformers import AutoModelForSeq2SeqLM
    from transformers.utils import logging as hf_logging

    load, seen = AutoModelForSeq2SeqLM.from_pretrained, []
    monkeypatch.setattr(AutoModelForSeq2SeqLM, "from_pretrained",
                        lambda *a, **k: seen.append(hf_logging.is_progress_bar_enabled()) or load(*a, **k))
    _, ckpt, _ = baseline_export
    hf_logging.enable_progress_bar()
    export_transformers(ckpt, "en", "fr", tmp_path / "shown", verbose=False)
    assert seen == [False] and hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        export_transformers(ckpt, "en", "fr", tmp_path / "hidden", verbose=False)
        assert seen == [False, False] and not hf_logging.is_progress_bar_enabled()
    finally:
        hf_logging.enable_progress_bar()


def test_missing_transformers_is_a_clear_error(tmp_path, capsys, monkeypatch):
    """Runs whether or not transformers is installed: the check comes before any work."""
    monkeypatch.setitem(sys.modules, "transformers", None)  # as if it were not installed
    with pytest.raises(TransformersExportError, match=r"transformers is not installed: pip install "
                                                      r"'fairseq_langshare\[transformers\]'"):
        export_transformers(tmp_path / "model.pt", "en", "fr", tmp_path / "hf")
    assert langshare(["export", str(tmp_path / "model.pt"), "--src", "en", "--tgt", "fr", "--format", "transformers",
                      "--out", str(tmp_path / "hf")]) == 2
    assert "transformers is not installed" in one_line_error(capsys)
    assert not list(tmp_path.iterdir())


@needs_transformers
def test_dictionaries_of_the_same_size_but_other_entries_are_refused(spm_corpus, tmp_path, capsys):
    """--data naming another corpus prepared alike: every embedding fits, so the export used to go through and
    map the model's rows to other pieces without a word; refused in one line, as decoding refuses it."""
    _, ckpt = untrained(spm_corpus, tmp_path / "model.pt")
    data = same_size_dictionaries(spm_corpus, tmp_path / "other")
    assert langshare(["export", str(ckpt), "--src", "en", "--tgt", "fr", "--out", str(tmp_path / "hf"), "--format",
                      "transformers", "--data", str(data), "--spm", str(spm_corpus / "spm.model")]) == 2
    err = one_line_error(capsys)
    assert f"the dictionaries in {data} are not those {ckpt} was trained with" in err, err
    assert err.endswith("pass --data, the fairseq-preprocess directory the model was trained on"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt", "other"]


@needs_transformers
def test_out_in_a_directory_that_does_not_exist_yet(baseline_export, tmp_path, capsys):
    """Was: `[Errno 2] No such file or directory: '.../.out.tmp-PID'` after the work (--format
    ctranslate2 and fairseq create the parents)."""
    _, ckpt, _ = baseline_export
    out = tmp_path / "exports" / "en" / "en-fr"
    assert langshare(["export", str(ckpt), "--src", "en", "--tgt", "fr", "--format", "transformers",
                      "--out", str(out)]) == 0
    assert (out / "model.safetensors").is_file() and sorted(p.name for p in out.parent.iterdir()) == ["en-fr"]


@pytest.mark.parametrize("fmt", ["ctranslate2", "transformers"])
@pytest.mark.parametrize("where", ["under-a-file", "unwritable"])
def test_out_that_cannot_be_written_is_refused_before_any_work(baseline_export, tmp_path, capsys, monkeypatch, fmt,
                                                                where):
    """Was: --out under a regular file ended in a FileExistsError traceback, --out in /sys in a PermissionError
    one (after the pair was exported); the directory formats now give --format fairseq's line, before any work."""
    from fairseq_langshare.deploy import pair_export
    from test_bad_input import unwritable_dir

    pytest.importorskip(fmt)

    def no_work(*args, **kwargs):
        raise AssertionError("exported before refusing --out")

    _, ckpt, _ = baseline_export
    monkeypatch.setattr(pair_export, "export_pair", no_work)
    if where == "under-a-file":
        (tmp_path / "notes.txt").write_text("mine")
        out = tmp_path / "notes.txt" / "sub"
        expected = f"cannot write --out {out}: {tmp_path / 'notes.txt'} is a file, not a directory; choose another path"
    else:
        locked = unwritable_dir(tmp_path)
        out = locked / "en-fr"
        expected = f"cannot write --out {out}: no file can be created in {locked} ("
    before = sorted(p.name for p in tmp_path.iterdir())
    capsys.readouterr()
    assert langshare(["export", str(ckpt), "--src", "en", "--tgt", "fr", "--format", fmt, "--out", str(out)]) == 2
    err = one_line_error(capsys)
    assert err.startswith(f"langshare export: error: {expected}"), err
    assert where == "under-a-file" or err.endswith("; choose another path or fix its permissions"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == before and not out.exists()


@needs_transformers
def test_an_earlier_export_whose_files_were_changed_is_not_replaced(baseline_export, tmp_path, capsys):
    """Was: a model fine-tuned in place (``save_pretrained`` into the export) was replaced by the
    export's weights without a word: its files have the export's names."""
    from fairseq_langshare.data.corpus_build import sha256

    _, ckpt, hf = baseline_export
    out = tmp_path / "en-fr"
    shutil.copytree(hf, out)
    tuned = out / "model.safetensors"
    with open(tuned, "ab") as f:  # what save_pretrained of other weights does to the file
        f.write(b"\0")
    before = sha256(tuned)
    export = ["export", str(ckpt), "--src", "en", "--tgt", "fr", "--format", "transformers", "--out", str(out)]
    assert langshare(export) == 2
    err = one_line_error(capsys)
    assert "model.safetensors changed since langshare export wrote it" in err and "nothing was written" in err, err
    assert sha256(tuned) == before and sorted(p.name for p in tmp_path.iterdir()) == ["en-fr"]
    tuned.unlink()  # the user's decision: the file goes, the export is replaced
    assert langshare(export) == 0 and (out / "model.safetensors").is_file()


@needs_transformers
def test_a_killed_export_s_staging_directory_is_removed_by_the_next(baseline_export, tmp_path, capsys):
    """Was: a hidden ``.DIR.tmp-PID`` of an export killed while writing stayed beside DIR for good."""
    import subprocess

    _, ckpt, _ = baseline_export
    out = tmp_path / "en-fr"
    gone = subprocess.Popen(["true"])
    gone.wait()  # a process id that no process holds now
    stale = tmp_path / f".en-fr.tmp-{gone.pid}"
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"partial")
    alive = tmp_path / f".en-fr.tmp-{os.getppid()}"  # an export still running: left alone
    alive.mkdir()
    assert langshare(["export", str(ckpt), "--src", "en", "--tgt", "fr", "--format", "transformers",
                      "--out", str(out)]) == 0
    assert not stale.exists() and alive.is_dir()


@needs_transformers
def test_translate_names_a_transformers_export_for_what_it_is(baseline_export, capsys):
    """Was: "... is not a langshare-ctranslate2 manifest: re-export the model with langshare export
    --format ctranslate2", which did not say the directory is a transformers export and how to load it."""
    pytest.importorskip("ctranslate2")
    _, _, hf = baseline_export
    assert langshare(["translate", str(hf)]) == 2
    err = one_line_error(capsys, "translate")
    assert f"{hf} is a --format transformers export" in err and "AutoModelForSeq2SeqLM" in err, err
