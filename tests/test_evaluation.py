"""Tests for ``fairseq_langshare.evaluation`` (``langshare evaluate``)."""

import argparse
import json
import os
import random
import re

import pytest

from fairseq_langshare import evaluation
from fairseq_langshare.evaluation import (
    EvaluationError,
    add_subcommand,
    evaluate,
    resource_groups,
    score,
    to_markdown,
    win_ratio,
)

PKG_DIR = os.path.dirname(os.path.abspath(evaluation.__file__))


# ----------------------------------------------------------------------------- helpers
def _results(scores, groups=None):
    """Hand-made results: direction -> BLEU."""
    groups = groups or {}
    return {"directions": {d: {"bleu": b, "chrf": b / 2, "spbleu": None, "group": groups.get(d, "high"),
                               "train_size": 1, "n": 10} for d, b in scores.items()}}


@pytest.fixture
def no_spm_models(tmp_path, monkeypatch):
    from sacrebleu.tokenizers import tokenizer_spm

    monkeypatch.setattr(tokenizer_spm, "SACREBLEU_DIR", str(tmp_path / "sacrebleu-empty"))
    return tmp_path / "sacrebleu-empty"


# ----------------------------------------------------------------------------- unit tests
def test_resource_groups_boundaries():
    sizes = {"en-a": 10000, "en-b": 9999, "en-c": 2000, "en-d": 1999, "en-e": 0, "a-b": None}
    assert resource_groups(sizes, 10000, 2000) == {
        "en-a": "high", "en-b": "medium", "en-c": "medium", "en-d": "low", "en-e": "low", "a-b": "zero-shot",
    }
    assert resource_groups({"x": 50}, high_threshold=50, low_threshold=50) == {"x": "high"}
    assert resource_groups({"x": 49}, high_threshold=50, low_threshold=50) == {"x": "low"}
    with pytest.raises(EvaluationError, match="low threshold"):
        resource_groups({"x": 1}, high_threshold=10, low_threshold=20)


def test_win_ratio():
    mine = _results({"en-a": 30.0, "en-b": 20.0, "en-c": 10.0, "en-d": 5.0})
    base = _results({"en-a": 25.0, "en-b": 20.0, "en-c": 12.0, "en-x": 1.0})
    # common: a (win), b (tie: not a win), c (loss)
    assert win_ratio(mine, base) == pytest.approx(1 / 3)
    assert win_ratio(base, mine) == pytest.approx(1 / 3)
    assert win_ratio(mine, mine) == 0.0
    assert win_ratio(mine, base, metric="chrf") == pytest.approx(1 / 3)
    with pytest.raises(EvaluationError, match="no direction"):
        win_ratio(mine, _results({"fr-de": 1.0}))
    with pytest.raises(EvaluationError, match="no direction"):
        win_ratio(mine, base, metric="spbleu")  # all null
    with pytest.raises(EvaluationError, match="not an evaluate results"):
        win_ratio(mine, {"en-a": 3})


def test_markdown_has_every_direction_and_group_averages():
    res = _results({"en-hi": 30.0, "hi-en": 34.0, "en-mid": 20.0, "en-lo": 4.0, "lo-hi": 1.0},
                   {"en-hi": "high", "hi-en": "high", "en-mid": "medium", "en-lo": "low", "lo-hi": "zero-shot"})
    res["thresholds"] = {"high": 10000, "low": 2000}
    md = to_markdown(res)
    for d in res["directions"]:
        assert f"| {d} |" in md
    assert "| High (>= 10000) | 2 | 32.00 |" in md
    assert "| Medium | 1 | 20.00 |" in md
    assert "| Low (< 2000) | 1 | 4.00 |" in md
    assert "| Zero-shot | 1 | 1.00 |" in md
    assert "| All | 5 | 17.80 |" in md
    assert "spBLEU" not in md  # no direction has it: no column
    res["win_ratio"] = {"baseline": "b.json", "metric": "bleu", "value": 0.4, "wins": 2, "directions": 5}
    assert "0.40 (2/5 directions)" in to_markdown(res)


def test_identical_hypotheses_score_100_with_signatures(no_spm_models):
    refs = ["the cat sat on the mat .", "a quick brown fox jumps over the lazy dog"]
    out = score(list(refs), refs, "fr")
    assert out["bleu"] == pytest.approx(100.0)
    assert out["chrf"] == pytest.approx(100.0)
    assert "tok:13a" in out["bleu_signature"] and "version:" in out["bleu_signature"]
    assert out["chrf_signature"].startswith("nrefs:1")
    assert score(["completely different words here"] * 2, refs)["bleu"] < 5


def test_spbleu_null_without_local_model(no_spm_models):
    name, note = evaluation.spbleu_tokenizer()
    assert name is None and "never downloads" in note and str(no_spm_models) in note
    out = score(["a b c d"], ["a b c d"], "de")
    assert out["spbleu"] is None and out["spbleu_signature"] is None
    md = to_markdown({"directions": {"en-de": {"bleu": 1.0, "chrf": 1.0, "spbleu": None, "group": "low"}},
                      "spbleu_note": note})
    assert "never downloads" in md


def test_spbleu_with_local_model(tmp_path, monkeypatch):
    import sentencepiece as spm
    from sacrebleu.tokenizers import tokenizer_spm

    text = tmp_path / "t.txt"
    text.write_text("\n".join(f"word{i} other{i % 7} thing{i % 3}" for i in range(200)) + "\n")
    spm.SentencePieceTrainer.train(input=str(text), model_prefix=str(tmp_path / "m"), vocab_size=40,
                                   hard_vocab_limit=False, minloglevel=2)
    models = tmp_path / "sb" / "models"
    models.mkdir(parents=True)
    os.replace(tmp_path / "m.model", models / "sacrebleu_tokenizer_spm.model")  # flores101's file name
    monkeypatch.setattr(tokenizer_spm, "SACREBLEU_DIR", str(tmp_path / "sb"))
    assert evaluation.spbleu_tokenizer() == ("flores101", None)
    out = score(["word1 other1 thing1"], ["word1 other1 thing1"])
    assert out["spbleu"] == pytest.approx(100.0) and "tok:flores101" in out["spbleu_signature"]


def test_paper_signatures_bleu_tokenization_and_spbleu_choice(tmp_path, monkeypatch):
    """CLSR scores every direction with tok:13a (Chinese too); LSL's spBLEU is flores101 even when
    a flores200 model is also on disk."""
    from sacrebleu.tokenizers import tokenizer_spm

    zh = ["我们 今天 去 公园。"]
    assert "tok:zh" in score(zh, zh, "zh")["bleu_signature"]
    assert "tok:13a" in score(zh, zh, "zh", bleu_tokenize="13a")["bleu_signature"]
    with pytest.raises(evaluation.EvaluationError, match="unknown BLEU tokenization 'moses'"):
        evaluation.bleu_tokenizer("fr", "moses")
    models = tmp_path / "models"
    models.mkdir()
    for name in ("flores200", "flores101"):
        (models / os.path.basename(tokenizer_spm.SPM_MODELS[name]["url"])).write_bytes(b"x")
    monkeypatch.setattr(tokenizer_spm, "SACREBLEU_DIR", str(tmp_path))
    assert evaluation.spbleu_tokenizer() == ("flores200", None)
    assert evaluation.spbleu_tokenizer("flores101") == ("flores101", None)
    with pytest.raises(evaluation.EvaluationError, match="unknown spBLEU tokenizer"):
        evaluation.spbleu_tokenizer("flores")


def test_cli_registers_evaluate_with_help_for_every_flag():
    parser = argparse.ArgumentParser(prog="langshare")
    sub = parser.add_subparsers(dest="command")
    add_subcommand(sub)
    args = parser.parse_args(["evaluate", "ck.pt", "corpus", "--directions", "en-fr,fr-de", "--beam", "2",
                              "--generate-args=--cpu --nbest 1"])
    assert args.func is evaluation._run and args.beam == 2 and args.directions == "en-fr,fr-de"
    assert args.high_threshold == 10000 and args.low_threshold == 2000
    p = sub.choices["evaluate"]
    for action in p._actions:
        if action.dest != "help":
            assert action.help, action.dest
    assert "10000" in p.format_help() and "2000" in p.format_help()


def test_clear_errors(tmp_path, capsys):
    with pytest.raises(EvaluationError, match="checkpoint not found: .*nope.pt"):
        evaluate(str(tmp_path / "nope.pt"), str(tmp_path))
    ck = tmp_path / "ck.pt"
    ck.write_bytes(b"not a checkpoint")
    with pytest.raises(EvaluationError, match="no manifest.json"):
        evaluate(str(ck), str(tmp_path))
    with pytest.raises(EvaluationError, match="corpus directory not found"):
        evaluate(str(ck), str(tmp_path / "missing"))
    (tmp_path / "manifest.json").write_text(json.dumps({"pivot": "en"}))
    with pytest.raises(EvaluationError, match="cannot read checkpoint"):
        evaluate(str(ck), str(tmp_path))
    with pytest.raises(EvaluationError, match="baseline results not found"):
        evaluate(str(ck), str(tmp_path), baseline=str(tmp_path / "b.json"))
    (tmp_path / "b.json").write_text("{oops")
    with pytest.raises(EvaluationError, match="baseline results .*b.json is not valid JSON"):
        evaluate(str(ck), str(tmp_path), baseline=str(tmp_path / "b.json"))
    (tmp_path / "manifest.json").write_text("{")
    with pytest.raises(EvaluationError, match="corpus manifest .*manifest.json is not valid JSON"):
        evaluate(str(ck), str(tmp_path))
    # the CLI turns them into one line on stderr and a non-zero exit
    parser = argparse.ArgumentParser(prog="langshare")
    add_subcommand(parser.add_subparsers())
    args = parser.parse_args(["evaluate", str(tmp_path / "nope.pt"), str(tmp_path)])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        args.func(args)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.startswith("langshare evaluate: error: checkpoint not found")
    assert err.count("\n") == 1


@pytest.mark.parametrize("extra,message", [
    ("--beam 5", "--generate-args sets --beam, which evaluate sets itself: pass --beam to evaluate"),
    ("--lenpen=1.2", "--generate-args sets --lenpen, which evaluate sets itself: pass --lenpen to evaluate"),
    ("--cpu --gen-subset valid", "--generate-args sets --gen-subset, which evaluate sets itself: pass --split to "
                                 "evaluate"),
    ("--max-sentences 8", "--generate-args sets --max-sentences, which evaluate sets itself: pass --batch-size to "
                          "evaluate"),
    ("--path other.pt", "--generate-args sets --path, which evaluate sets itself: evaluate takes it from the "
                        "checkpoint and the corpus"),
    ("-t de", "--generate-args sets -t, which evaluate sets itself: evaluate takes it from the checkpoint and the "
              "corpus (choose directions with --directions)"),
])
def test_generate_args_cannot_override_what_evaluate_sets(tmp_path, capsys, extra, message):
    """`--generate-args='--beam 5'` used to decode with beam 5 while the tables and the JSON said beam 4 (the
    last flag wins in fairseq's parser): refused before anything is read or decoded."""
    ck = tmp_path / "ck.pt"
    ck.write_bytes(b"not a checkpoint")
    with pytest.raises(EvaluationError) as info:
        evaluate(str(ck), str(tmp_path), generate_args=extra)
    assert str(info.value) == message
    evaluate_args = ["evaluate", str(ck), str(tmp_path), "--generate-args", "--cpu --nbest 1 --max-len-b 50"]
    with pytest.raises(EvaluationError, match="no manifest.json"):  # flags evaluate does not set pass
        evaluate(*evaluate_args[1:3], generate_args=evaluate_args[-1])


def test_missing_direction_data_names_the_file(tmp_path):
    corpus = evaluation._Corpus.__new__(evaluation._Corpus)
    corpus.path, corpus.bin, corpus.raw = str(tmp_path), str(tmp_path / "bin"), str(tmp_path / "raw")
    (tmp_path / "bin").mkdir()
    (tmp_path / "raw").mkdir()
    msg = corpus.missing("test", "fr", "de")
    assert "test.fr-de.fr.idx" in msg and "raw/test.fr-de.de" in msg and "prepare-gettext" in msg
    (tmp_path / "bin" / "test.de-fr.fr.idx").write_text("")
    (tmp_path / "raw" / "test.de-fr.de").write_text("x\n")
    assert corpus.missing("test", "fr", "de") is None  # the reverse orientation serves too
    assert corpus.missing("valid", "fr", "de").count("\n") == 0


def test_task_flags_reproduce_the_data_shape():
    import fairseq.tasks.translation_multi_simple_epoch  # noqa: F401  (registers the task)

    cfg = {"_name": "translation_multi_simple_epoch", "data": "/elsewhere", "langs": ["en", "xx"],
           "lang_pairs": ["en-xx", "xx-en"], "encoder_langtok": "tgt", "decoder_langtok": True,
           "left_pad_source": "True", "source_lang": None, "sampling_method": "temperature",
           "max_source_positions": 256, "lang_tok_replacing_bos_eos": False}
    flags = evaluation._task_flags("translation_multi_simple_epoch", cfg)
    pairs = {flags[i]: flags[i + 1] for i in range(len(flags) - 1) if not flags[i + 1].startswith("--")}
    assert pairs == {"--lang-pairs": "en-xx,xx-en", "--langs": "en,xx", "--max-source-positions": "256",
                     "--encoder-langtok": "tgt"}
    assert "--decoder-langtok" in flags and "--lang-tok-replacing-bos-eos" not in flags
    assert "/elsewhere" not in flags and "temperature" not in flags


# ----------------------------------------------------------------------------- end to end
_WORDS = ("the a cat dog bird fish sees eats likes big small red green old new house tree river "
          "near under with and runs sleeps").split()
_LANGS = {  # deterministic word-by-word substitutions of English
    "xx": lambda w: w[::-1] + "o",
    "yy": lambda w: "ka" + w[1:] + w[0],
}


def _build_tiny_corpus(root, train_sizes=None, n_eval=40, seed=0, languages=None):
    """A hand-made corpus directory laid out like ``prepare_gettext``'s: en-xx and en-yy with
    train/valid/test, plus a multi-way xx-yy test set (a zero-shot direction). ``languages``:
    {code: word -> word} instead of xx and yy (``_LANGS``)."""
    import sentencepiece as spm
    from fairseq import options
    from fairseq_cli import preprocess

    languages = languages or _LANGS
    first, second = list(languages)[:2]
    train_sizes = train_sizes or {first: 400, second: 300}
    rng = random.Random(seed)
    raw, tok, bin_dir = root / "raw", root / "tok", root / "bin"
    for d in (raw, tok, bin_dir):
        d.mkdir(parents=True)
    seen = set()

    def english(n):  # fresh sentences: none occurs in two splits or pairs
        out = []
        while len(out) < n:
            s = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 7)))
            if s not in seen:
                seen.add(s)
                out.append(s)
        return out

    def write(split, src, tgt, en):
        for lang in (src, tgt):
            text = en if lang == "en" else [" ".join(languages[lang](w) for w in s.split()) for s in en]
            (raw / f"{split}.{src}-{tgt}.{lang}").write_text("\n".join(text) + "\n")

    counts = {"train": {}, "valid": {}, "test": {}}
    splits = {}
    for lang, n_train in train_sizes.items():
        splits[f"en-{lang}"] = {"train": n_train, "valid": n_eval, "test": n_eval}
    splits[f"{first}-{second}"] = {"test": n_eval}
    for pair, sizes in splits.items():
        for split, n in sizes.items():
            write(split, *pair.split("-"), english(n))
            counts[split][pair] = n
    spm.SentencePieceTrainer.train(input=",".join(str(p) for p in sorted(raw.glob("train.*"))),
                                   model_prefix=str(root / "spm"), vocab_size=150, hard_vocab_limit=False,
                                   model_type="bpe", minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=str(root / "spm.model"))
    for path in raw.iterdir():
        lines = path.read_text().splitlines()
        (tok / path.name).write_text("\n".join(" ".join(sp.encode(l, out_type=str)) for l in lines) + "\n")
    vocab = [l.split("\t")[0] for l in (root / "spm.vocab").read_text().splitlines()[3:]]
    (root / "dict.txt").write_text("".join(f"{p} 1\n" for p in vocab))
    for pair, sizes in splits.items():
        src, tgt = pair.split("-")
        argv = ["--source-lang", src, "--target-lang", tgt, "--destdir", str(bin_dir),
                "--srcdict", str(root / "dict.txt"), "--tgtdict", str(root / "dict.txt"), "--workers", "1"]
        for split in sizes:
            argv += [f"--{split}pref", str(tok / f"{split}.{pair}")]
        preprocess.main(options.get_preprocessing_parser().parse_args(argv))
    for lang in ("en", *languages):
        (bin_dir / f"dict.{lang}.txt").write_text((root / "dict.txt").read_text())
    manifest = {"pivot": "en", "languages": list(train_sizes), "langs": ["en", *train_sizes],
                "lang_pairs": [f"en-{l}" for l in train_sizes], "counts": counts,
                "train_pairs_per_language": dict(train_sizes), "spm_model": "spm.model", "data_bin": "bin"}
    (root / "manifest.json").write_text(json.dumps(manifest))
    return root


def _train(corpus, save_dir, max_update=300, arch="langshare_transformer_tiny", extra=(), langs=("xx", "yy")):
    from fairseq import options
    from fairseq_cli import train

    argv = [str(corpus / "bin"), "--task", "multilingual_langshare", "--user-dir", PKG_DIR, "--arch", arch,
            "--langs", ",".join(("en",) + tuple(langs)), "--lang-pairs", ",".join(f"en-{x}" for x in langs),
            "--encoder-langtok", "tgt",
            "--share-all-embeddings", "--optimizer", "adam", "--lr", "0.005", "--lr-scheduler", "inverse_sqrt",
            "--warmup-updates", "40", "--criterion", "langshare_label_smoothed_cross_entropy", "--label-smoothing", "0.1",
            "--dropout", "0.0", "--max-tokens", "1000", "--max-update", str(max_update), "--cpu", "--seed", "1",
            "--save-dir", str(save_dir), "--no-epoch-checkpoints", "--disable-validation",
            "--log-format", "json", "--log-interval", "50", "--num-workers", "0", *extra]
    train.main(options.parse_args_and_arch(options.get_training_parser(), input_args=argv))
    return save_dir / "checkpoint_last.pt"


@pytest.fixture(scope="module")
def trained_spm_corpus(tmp_path_factory, one_thread):  # one thread: the same training in every xdist worker
    root = tmp_path_factory.mktemp("eval-e2e")
    corpus = _build_tiny_corpus(root / "corpus")
    return corpus, _train(corpus, root / "checkpoints", max_update=300)


@pytest.mark.slow
def test_evaluate_end_to_end(trained_spm_corpus, tmp_path, no_spm_models):
    corpus, checkpoint = trained_spm_corpus
    res = evaluate(str(checkpoint), str(corpus), directions=None, beam=2, high_threshold=400, low_threshold=350,
                   out_json=str(tmp_path / "r.json"), out_md=str(tmp_path / "r.md"))
    # default directions: the trained ones with test data; xx-yy is zero-shot, so not by default
    assert list(res["directions"]) == ["en-xx", "en-yy"]
    assert res["num_updates"] == 300  # what compare names when runs trained for different updates
    for d, row in res["directions"].items():
        assert row["n"] == 40 and row["n_untranslated"] == 0 and row["supervised"]
        # a broken pipeline (hypotheses out of order, wrong target language, pieces left in,
        # wrong references) scores near 0 BLEU here; en-yy's 300 updates give 11.9 BLEU and 63 chrF since
        # training keeps the epoch's last batch (above 15 before, its longest sentences never trained)
        assert row["bleu"] > 8 and row["chrf"] > 50, (d, row["bleu"], row["chrf"])
        assert row["spbleu"] is None
    assert res["directions"]["en-xx"]["group"] == "high" and res["directions"]["en-xx"]["train_size"] == 400
    assert res["directions"]["en-yy"]["group"] == "low" and res["directions"]["en-yy"]["train_size"] == 300
    assert set(res["averages"]) == {"high", "low", "all"}
    assert res["averages"]["all"]["bleu"] == pytest.approx(
        (res["directions"]["en-xx"]["bleu"] + res["directions"]["en-yy"]["bleu"]) / 2)
    assert res["signatures"]["bleu"][0].startswith("nrefs:1|") and "never downloads" in res["spbleu_note"]
    assert json.loads((tmp_path / "r.json").read_text()) == json.loads(json.dumps(res))
    md = (tmp_path / "r.md").read_text()
    assert "| en-xx | 400 | high |" in md and "| en-yy | 300 | low |" in md and "High (>= 400)" in md
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]

    # zero-shot listed explicitly; win ratio against the first run (identical decoding: ties, no wins)
    again = evaluate(str(checkpoint), str(corpus), directions="en-xx,xx-yy", beam=2, baseline=str(tmp_path / "r.json"))
    assert again["directions"]["xx-yy"]["group"] == "zero-shot"
    assert not again["directions"]["xx-yy"]["supervised"] and again["directions"]["xx-yy"]["n"] == 40
    assert again["directions"]["en-xx"]["bleu"] == pytest.approx(res["directions"]["en-xx"]["bleu"])
    assert again["win_ratio"]["value"] == 0.0 and again["win_ratio"]["directions"] == 1
    # hypotheses and references are stored, so the same decoding tests as identical (p = 1)
    assert len(res["hypotheses"]["en-xx"]) == 40 and res["references"]["en-xx"]["n"] == 40
    assert res["references"]["en-xx"]["path"].endswith("raw/test.en-xx.xx")
    same = again["significance"]["directions"]["en-xx"]["bleu"]["seeds_concatenated"]
    assert same["p_value"] == 1.0 and same["delta"] == 0.0 and list(again["significance"]["directions"]) == ["en-xx"]
    # the LSL paper's win ratio is on chrF: a baseline that only has chrF works with win_metric="chrf"
    chrf_base = {"directions": {"en-xx": {"chrf": 0.0}}}
    on_chrf = evaluate(str(checkpoint), str(corpus), directions="en-xx", beam=2, baseline=chrf_base,
                       win_metric="chrf")
    assert on_chrf["win_ratio"]["metric"] == "chrf" and on_chrf["win_ratio"]["value"] == 1.0
    with pytest.raises(evaluation.EvaluationError, match="shares no direction"):
        evaluate(str(checkpoint), str(corpus), directions="en-xx", beam=2, baseline=chrf_base)  # no BLEU there


@pytest.mark.slow
def test_evaluate_decodes_in_process(trained_spm_corpus, monkeypatch):
    """No data-loader worker per direction: a forked worker inherited the previous direction's loader
    and printed "AssertionError: can only test a child process" tracebacks when it was collected."""
    from torch.utils.data import dataloader

    def forbidden(*args, **kwargs):
        raise AssertionError("evaluate started a data-loader worker process")

    monkeypatch.setattr(dataloader._MultiProcessingDataLoaderIter, "__init__", forbidden)
    corpus, checkpoint = trained_spm_corpus
    res = evaluate(str(checkpoint), str(corpus), directions="en-xx,en-yy", beam=2)
    assert [row["n"] for row in res["directions"].values()] == [40, 40]


@pytest.mark.slow
def test_evaluate_cli_and_errors(trained_spm_corpus, tmp_path, capsys):
    corpus, checkpoint = trained_spm_corpus
    parser = argparse.ArgumentParser(prog="langshare")
    add_subcommand(parser.add_subparsers())

    def run(*argv):
        args = parser.parse_args(["evaluate", str(checkpoint), str(corpus), *argv])
        return args.func(args)

    baseline = tmp_path / "base.json"
    base = {"directions": {"en-yy": {"bleu": 0.5}, "en-xx": {"bleu": 99.0}, "xx-en": {"bleu": 1.0}}}
    baseline.write_text(json.dumps(base))
    res = run("--directions", "en-yy", "--beam", "1", "--baseline", str(baseline), "--generate-args=--nbest 1")
    out = capsys.readouterr().out
    assert "| en-yy | 300 | low |" in out and "Win ratio" in out and "(1/1 directions)" in out
    assert res["win_ratio"]["value"] == 1.0

    errors = {
        ("--directions", "xx-en,en-zz"): "language 'zz' is not in the checkpoint's --langs en,xx,yy",
        ("--directions", "xx-yy", "--split", "valid"): "no valid data for direction xx-yy in corpus .*: expected .*/bin/valid.xx-yy.xx.idx",
        ("--directions", "en-xx", "--split", "dev"): "expected .*/bin/dev.en-xx.en.idx",
        ("--directions", "enxx"): "write directions as SRC-TGT",
        ("--directions", "xx-yy", "--baseline", str(baseline)): "shares no direction",
        ("--low-threshold", "5", "--high-threshold", "4"): "low threshold 5 is above high threshold 4",
    }
    for argv, message in errors.items():
        with pytest.raises(SystemExit) as exc:
            run(*argv)
        text = capsys.readouterr().err.split("evaluate test:")[0]  # tqdm may follow on stderr
        assert exc.value.code == 2 and text.count("\n") == 1, text
        assert text.startswith("langshare evaluate: error: "), text
        assert re.search(message, text), text


def test_a_pair_export_is_evaluated_on_its_pair_only(trained_spm_corpus, tmp_path):
    """Was: `langshare evaluate EN-XX.pt CORPUS --directions en-yy` decoded en-yy with en-xx's network and reported it
    as a zero-shot direction."""
    from fairseq_langshare.export import export_pair

    corpus, checkpoint = trained_spm_corpus
    pair = tmp_path / "en-xx.pt"
    export_pair(str(checkpoint), "en", "xx", pair, verbose=False)
    with pytest.raises(EvaluationError, match=rf"^{pair} is the en->xx export of {checkpoint} \(langshare export\): it "
                                              rf"translates en-xx only; evaluate en-yy with {checkpoint}$"):
        evaluate(str(pair), str(corpus), directions="en-xx,en-yy", beam=1)
