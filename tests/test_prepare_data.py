"""`langshare prepare-data`: the user's own parallel text in every form, held-out and given splits,
zero-shot (test-only) directions, filters, re-runs, bad input, and evaluation of a model trained on it."""

import gzip
import json
import lzma
import os
import random

import pytest

from fairseq_langshare import cli
from fairseq_langshare.data import corpus_build as cb
from fairseq_langshare.data import heldout, parallel_corpus as pc

from tiny_corpus import PKG_DIR, WORDS, translate

SMALL = dict(vocab_size=120, valid_size=30, test_size=40, spm_sentences=5000)
N = 800  # English sentences per direction


def english(n, seed=0):
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 8))) + f" {i % 7}" for i in range(n)]


def rows(src, tgt, sentences):
    return [(s if src == "en" else translate(s, src), translate(s, tgt) if tgt != "en" else s) for s in sentences]


def write_tsv(path, pairs, opener=open):
    with opener(path, "wt", encoding="utf-8") as f:
        for a, b in pairs:
            f.write(f"{a}\t{b}\n")
    return str(path)


def write_sides(directory, split, pair, pairs):
    a, b = pair.split("-")
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, f"{split}.{pair}.{a}"), "w", encoding="utf-8") as fa, \
            open(os.path.join(directory, f"{split}.{pair}.{b}"), "w", encoding="utf-8") as fb:
        for x, y in pairs:
            fa.write(x + "\n")
            fb.write(y + "\n")


def lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def corpus_files(out):
    """{relative path: bytes} of everything but the manifest (which names the inputs)."""
    found = {}
    for dp, _, fs in os.walk(out):
        for f in fs:
            rel = os.path.relpath(os.path.join(dp, f), out)
            if rel != "manifest.json":
                with open(os.path.join(dp, f), "rb") as fh:
                    found[rel] = fh.read()
    return found


EN = english(N)
DATA = {"en-xx": rows("en", "xx", EN), "en-yy": rows("en", "yy", EN[: N // 2] + english(N // 2, seed=1))}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Training data only, as SRC-TGT.tsv: valid and test held out."""
    root = tmp_path_factory.mktemp("tsv")
    files = [write_tsv(root / f"{d}.tsv", pairs) for d, pairs in DATA.items()]
    out = root / "corpus"
    return str(out), pc.prepare_data(out, files, **SMALL), files


def test_layout_manifest_and_binarized_data(reference):
    from fairseq.data import Dictionary, data_utils

    out, m, files = reference
    assert m == json.load(open(os.path.join(out, "manifest.json")))
    assert m["builder"] == "prepare-data" and m["pivot"] == "en" and m["langs"] == ["en", "xx", "yy"]
    assert lines(f"{out}/langs.txt") == ["en", "xx", "yy"] and lines(f"{out}/lang_pairs.txt") == ["en-xx,en-yy"]
    assert m["zero_shot_pairs"] == [] and set(m["inputs"]) == set(files)
    assert m["train_pairs_per_language"] == {"xx": m["counts"]["train"]["en-xx"], "yy": m["counts"]["train"]["en-yy"]}
    assert m["inputs"][files[0]] == cb.sha256(files[0])
    d = Dictionary.load(f"{out}/bin/dict.txt")
    for pair in ("en-xx", "en-yy"):
        assert m["read"][pair]["train"] == N
        for split in cb.SPLITS:
            n = m["counts"][split][pair]
            for lang in pair.split("-"):
                assert len(lines(f"{out}/raw/{split}.{pair}.{lang}")) == n
                ds = data_utils.load_indexed_dataset(f"{out}/bin/{split}.{pair}.{lang}", d)
                assert len(ds) == n
                assert d.string(ds[0]) == lines(f"{out}/spm/{split}.{pair}.{lang}")[0]
            assert os.path.exists(f"{out}/bin/dict.{lang}.txt")
        assert m["held_out"][pair] == {"valid": "held out by a hash of the en side", "test": "held out by a hash of the en side"}
        assert m["counts"]["test"][pair] == 40 and m["counts"]["valid"][pair] == 30  # both under 5% of 800
        assert m["counts"]["train"][pair] + sum(m["removed"][pair].values()) == N


def _sentences(out, split, lang):
    found = set()
    for name in os.listdir(f"{out}/raw"):
        s, pair, l = name.split(".")
        if s == split and l == lang:
            found.update(lines(f"{out}/raw/{name}"))
    return found


def valid_test_overlap(out):
    """{lang: sentences in some valid set and some test set} over every direction of a corpus."""
    langs = {name.split(".")[2] for name in os.listdir(f"{out}/raw")}
    shared = {lang: _sentences(out, "valid", lang) & _sentences(out, "test", lang) for lang in sorted(langs)}
    return {lang: s for lang, s in shared.items() if s}


def assert_no_heldout_in_training(out, langs):
    """No valid/test sentence of a language in any training direction; no sentence of a language in
    a valid set and a test set, over all directions."""
    for lang in langs:
        train = _sentences(out, "train", lang)
        for split in ("valid", "test"):
            assert not _sentences(out, split, lang) & train, (lang, split)
    assert valid_test_overlap(out) == {}


def test_carved_sets_never_share_a_sentence_with_a_given_set_of_the_other_split(tmp_path, capsys):
    """Was: a given valid.en-xx.tsv sampled from en-xx.tsv shared pairs with the test set carved from
    en-xx.tsv (and its English with the one carved from en-yy.tsv), and a given zero-shot test.xx-yy.tsv
    shared sentences with the carved valid sets, all without a word."""
    pairs = rows("en", "xx", EN)
    given = tmp_path / "in"
    given.mkdir()
    write_tsv(given / "en-xx.tsv", pairs)
    write_tsv(given / "en-yy.tsv", rows("en", "yy", EN))
    valid = random.Random(3).sample(pairs[:400], 300)  # the two given sets apart: only carved sets can clash
    write_tsv(given / "valid.en-xx.tsv", valid)
    zero_shot = random.Random(4).sample(EN[400:], 200)
    write_tsv(given / "test.xx-yy.tsv", [(translate(s, "xx"), translate(s, "yy")) for s in zero_shot])
    out = tmp_path / "corpus"
    m = pc.prepare_data(out, [str(given)], **SMALL)
    assert lines(out / "raw/valid.en-xx.en") == [a for a, _ in valid]  # given: kept whole
    dropped = {d: {k: n for k, n in r.items() if k.endswith("split_overlap")} for d, r in m["removed"].items()}
    assert dropped["en-xx"]["test_split_overlap"] > 0 and dropped["en-yy"]["valid_split_overlap"] > 0
    n = sum(n for r in dropped.values() for n in r.values())
    assert m["counts"]["test"]["en-xx"] == 40 - dropped["en-xx"]["test_split_overlap"]
    notes = [line for line in capsys.readouterr().err.splitlines() if "the other split" in line]
    assert len(notes) == 1 and notes[0].startswith(f"note: {n} carved held-out pairs") and "en-xx test " in notes[0]
    assert_no_heldout_in_training(str(out), ["en", "xx", "yy"])


def test_without_a_pivot_no_sentence_is_in_a_valid_and_a_test_set(tmp_path):
    """Was: en-xx, xx-yy, yy-zz (no language in every direction) hashed each direction's source side,
    so an xx sentence could be held out as test in en-xx (by its English) and as valid in xx-yy (by itself)."""
    sents = english(2000, seed=11)
    files = [write_tsv(tmp_path / f"{d}.tsv", rows(*d.split("-"), sents)) for d in ("en-xx", "xx-yy", "yy-zz")]
    out = tmp_path / "corpus"
    m = pc.prepare_data(out, files, **{**SMALL, "valid_size": 100, "test_size": 100})
    assert m["pivot"] is None
    assert_no_heldout_in_training(str(out), ["en", "xx", "yy", "zz"])


def test_heldout_sentences_never_in_training(reference):
    out, m, _ = reference
    assert_no_heldout_in_training(out, ["en", "xx", "yy"])
    # the English half shared by both directions is held out alike: the same source hash picks it
    shared = set(EN[: N // 2])
    tx, ty = (set(lines(f"{out}/raw/test.{p}.en")) & shared for p in ("en-xx", "en-yy"))
    assert tx and tx == ty
    # removed from training because a held-out set of another direction holds its English side
    assert m["removed"]["en-xx"]["heldout_overlap"] > 0


def test_held_out_picker_and_sizes():
    pairs = [(f"sentence {i}", f"satz {i}") for i in range(5000)]
    big, small, other = heldout.HeldOutPicker(100, 80), heldout.HeldOutPicker(10, 0), heldout.HeldOutPicker(50, 50)
    for a, b in pairs:
        big.offer(a, a, b, b)
    for a, b in reversed(pairs + [("sentence 1", "another translation")]):  # order does not matter
        small.offer(a, a, b, b)
    for a, b in pairs[::2]:  # another direction with half of the sentences, keyed on its target side
        other.offer(a, b, a, b)
    got = big.picked()
    assert len(got["valid"]) == 100 and len(got["test"]) == 80 and not set(got["valid"]) & set(got["test"])
    assert small.picked() == {"valid": got["valid"][:10], "test": []}  # a smaller set is a prefix
    # a sentence keeps its role everywhere: never valid in one direction and test in another
    theirs = other.picked()
    assert not {a for a, _ in got["valid"]} & {b for b, _ in theirs["test"]}
    assert not {a for a, _ in got["test"]} & {b for b, _ in theirs["valid"]}
    assert heldout.carve_sizes(100000, 500, 1000) == (500, 1000)
    assert heldout.carve_sizes(4000, 500, 1000) == (200, 200)  # 5% each
    assert heldout.carve_sizes(10, 500, 1000) == (1, 1)


def test_add_test_only_directions(tmp_path):
    (tmp_path / "raw").mkdir()
    counts = heldout.add_test_only_directions(
        str(tmp_path), {"xx-yy": {"test": [("cinq", "fünf"), ("six", "sechs")], "valid": []}})
    assert counts == {"xx-yy": {"test": 2}}
    assert lines(tmp_path / "raw/test.xx-yy.xx") == ["cinq", "six"] and lines(tmp_path / "raw/test.xx-yy.yy")[0] == "fünf"
    assert not (tmp_path / "raw/valid.xx-yy.xx").exists()
    with pytest.raises(ValueError, match="valid/test data only"):
        heldout.add_test_only_directions(str(tmp_path), {"xx-yy": {"train": []}})


def test_every_input_form_gives_the_same_corpus(reference, tmp_path):
    """.gz and .xz TSVs, a given-train TSV and fairseq's plain-text layout hold the same pairs as the
    plain SRC-TGT.tsv files: the same corpus, byte for byte; and --workers 2 changes nothing."""
    ref_out, ref, _ = reference
    want = corpus_files(ref_out)
    inputs = [write_tsv(tmp_path / "en-xx.tsv.gz", DATA["en-xx"], gzip.open),
              write_tsv(tmp_path / "train.en-yy.tsv.xz", DATA["en-yy"], lzma.open)]
    m = pc.prepare_data(tmp_path / "compressed", inputs, workers=2, **SMALL)
    assert corpus_files(tmp_path / "compressed") == want
    assert m["counts"] == ref["counts"] and m["removed"] == ref["removed"]
    plain = tmp_path / "fairseq-layout"
    for d, pairs in DATA.items():
        write_sides(plain, "train", d, pairs)
    (plain / "dict.en.txt").write_text("a 1\n")  # other files in the directory are left alone
    pc.prepare_data(tmp_path / "from-dir", [str(plain)], **SMALL)
    assert corpus_files(tmp_path / "from-dir") == want


def test_given_splits_zero_shot_direction_and_filters(tmp_path, capsys):
    train = rows("en", "xx", EN)
    noisy = [("  Hello \u200bworld\t", "Hallo Welt"), ("", "empty source"), ("a" * 30, "b"),  # ratio 30 > 9
             ("long " * 250, "lang " * 250), ("", "")] + [train[100]] * 3  # over 1000 characters; blank; duplicates
    valid, test = rows("en", "xx", english(20, seed=5)), rows("en", "xx", english(25, seed=6))
    given = tmp_path / "given"
    write_sides(given, "train", "en-xx", train + noisy)
    write_sides(given, "valid", "en-xx", valid + [("", "a lonely target")])
    write_tsv(tmp_path / "test.en-xx.tsv", [("  spaced   out ", "x\u00a0y")] + test)
    write_tsv(tmp_path / "en-yy.tsv", rows("en", "yy", english(600, seed=7)))
    # a zero-shot direction: test only; its sentences must leave training
    zs = [(translate(s, "xx"), translate(s, "yy")) for s in EN[:15]]
    write_tsv(tmp_path / "test.xx-yy.tsv", zs)
    write_tsv(tmp_path / "test.en-zz.tsv", rows("en", "zz", english(5, seed=8)))  # a language without training data
    out = tmp_path / "corpus"
    m = pc.prepare_data(out, [str(given), str(tmp_path / "test.en-xx.tsv"), str(tmp_path / "en-yy.tsv"),
                              str(tmp_path / "test.xx-yy.tsv"), str(tmp_path / "test.en-zz.tsv")], **SMALL)
    assert m["lang_pairs"] == ["en-xx", "en-yy"] and m["zero_shot_pairs"] == ["en-zz", "xx-yy"]
    assert set(m["train_pairs_per_language"]) == {"xx", "yy"}
    assert lines(out / "lang_pairs.txt") == ["en-xx,en-yy"] and m["langs"] == ["en", "xx", "yy", "zz"]
    assert lines(out / "langs.txt") == m["langs"] and m["counts"]["test"]["en-zz"] == 5
    assert m["held_out"]["en-xx"] == {"valid": "given", "test": "given"}
    assert m["held_out"]["xx-yy"] == {"test": "given"}
    assert lines(out / "raw/valid.en-xx.xx") == [b for _, b in valid]
    assert lines(out / "raw/test.en-xx.en") == ["spaced out"] + [a for a, _ in test]  # normalised, kept
    assert lines(out / "raw/test.en-xx.xx")[0] == "x y"  # a no-break space is whitespace: collapsed
    assert m["counts"]["test"]["xx-yy"] == 15 and "xx-yy" not in m["counts"]["train"]
    assert os.path.exists(out / "bin/test.xx-yy.xx.idx") and not os.path.exists(out / "raw/train.xx-yy.xx")
    assert not os.path.exists(out / "bin/valid.xx-yy.xx.idx")
    assert_no_heldout_in_training(str(out), ["en", "xx", "yy"])
    r = m["removed"]["en-xx"]
    assert r["empty"] == 1 and r["length_ratio"] == 1 and r["too_long"] == 1 and r["duplicate"] >= 3
    # a pair with one empty side is counted apart from a blank line, and said: in a pair of plain
    # files it is the usual sign that the two sides are out of step (was: counted in the manifest only)
    assert r["one_side_empty"] == 1 and r["valid_one_side_empty"] == 1
    warnings = [line for line in capsys.readouterr().err.splitlines() if "one empty side" in line]
    assert warnings == [f"warning: en-xx: 1 of the {n} {split} pairs read has one empty side and was dropped; in a "
                        "pair of plain files (SPLIT.SRC-TGT.SRC + SPLIT.SRC-TGT.TGT) that often means the sides are out "
                        "of step (line n of one is not the translation of line n of the other): check them"
                        for n, split in ((N + len(noisy), "training"), (21, "valid"))]
    assert r["heldout_overlap"] >= 15  # the zero-shot test's xx sentences
    assert "Hello world" in lines(out / "raw/train.en-xx.en")  # control and zero-width characters removed
    assert m["read"]["en-xx"] == {"valid": 21, "test": 26, "train": N + len(noisy)}


def test_rerun_is_a_noop_changed_input_needs_force(tmp_path, capsys):
    src = write_tsv(tmp_path / "en-xx.tsv", DATA["en-xx"][:300])
    out = tmp_path / "corpus"
    m = pc.prepare_data(out, [src], **SMALL)
    stamp = os.path.getmtime(out / "manifest.json")
    capsys.readouterr()
    assert pc.prepare_data(out, [src], **SMALL) == m
    assert "already prepared" in capsys.readouterr().out and os.path.getmtime(out / "manifest.json") == stamp
    with open(src, "a", encoding="utf-8") as f:
        f.write("one more\tnoch eins\n")
    with pytest.raises(ValueError, match="en-xx.tsv changed since .* --force"):
        pc.prepare_data(out, [src], **SMALL)
    with pytest.raises(ValueError, match="another config.*--force"):
        pc.prepare_data(out, [src], **{**SMALL, "max_ratio": 3.0})
    assert json.load(open(out / "manifest.json")) == m  # untouched
    again = pc.prepare_data(out, [src], force=True, **SMALL)
    assert again["read"]["en-xx"]["train"] == 301 and again["inputs"][src] == cb.sha256(src)
    assert sorted(os.listdir(tmp_path)) == ["corpus", "en-xx.tsv"]
    # the SentencePiece model of a corpus reused for another: same model, same dictionary
    reuse = pc.prepare_data(tmp_path / "reuse", [src], spm_model=str(out / "spm.model"), **SMALL)
    assert (tmp_path / "reuse/spm.model").read_bytes() == (out / "spm.model").read_bytes()
    assert (tmp_path / "reuse/bin/dict.txt").read_bytes() == (out / "bin/dict.txt").read_bytes()
    assert reuse["spm"]["given_model"] == str(out / "spm.model")


def test_a_refused_reuse_names_the_setting_or_input_that_changed(tmp_path):
    """Was: "holds a corpus prepared with another config", naming nothing."""
    src = write_tsv(tmp_path / "en-xx.tsv", DATA["en-xx"][:300])
    other = write_tsv(tmp_path / "en-yy.tsv", DATA["en-yy"][:300])
    out = tmp_path / "corpus"
    pc.prepare_data(out, [src, other], **SMALL)
    with pytest.raises(ValueError, match=r"another config \(vocab_size 120 then, 100 now\); pass --force"):
        pc.prepare_data(out, [src, other], **{**SMALL, "vocab_size": 100})
    with pytest.raises(ValueError, match=rf"another config \({other} no longer given\); pass --force"):
        pc.prepare_data(out, [src], **SMALL)


def test_warnings_go_to_stderr_and_none_before_an_error(tmp_path, capsys):
    """Was: on stdout, and "en-yy has no valid set" printed before the error that en-yy has no pair."""
    src = write_tsv(tmp_path / "en-xx.tsv", DATA["en-xx"][:300])
    with pytest.raises(ValueError, match="direction en-yy has no training pair left"):
        pc.prepare_data(tmp_path / "a", [src, write_tsv(tmp_path / "en-yy.tsv", [("", "")] * 50)], **SMALL)
    said = capsys.readouterr()
    assert "warning" not in said.out + said.err
    pc.prepare_data(tmp_path / "b", [src], **{**SMALL, "valid_size": 0})
    said = capsys.readouterr()
    assert "warning: en-xx has no valid set" in said.err and "warning:" not in said.out


def test_given_valid_and_test_sets_sharing_sentences_are_warned_about(tmp_path, capsys):
    """Was: kept without a word, so checkpoint selection on valid saw test sentences."""
    rows = DATA["en-xx"]
    files = [write_tsv(tmp_path / "train.en-xx.tsv", rows[:300]), write_tsv(tmp_path / "valid.en-xx.tsv", rows[300:340]),
             write_tsv(tmp_path / "test.en-xx.tsv", rows[335:380])]  # 5 pairs in both
    pc.prepare_data(tmp_path / "a", files, **SMALL)
    said = capsys.readouterr()
    assert ("warning: en-xx: 5 of the 40 given valid pairs share a sentence with its given test set; checkpoint "
            "selection on valid then sees test sentences (remove them from the valid file)") in said.err
    write_tsv(tmp_path / "valid.en-xx.tsv", rows[300:335])
    pc.prepare_data(tmp_path / "b", files, **SMALL)
    assert "share a sentence" not in capsys.readouterr().err


def test_spm_sample_gives_each_language_its_tempered_share_of_its_distinct_sentences(tmp_path):
    """Was: n_l counted the lines of every file of a language, so English, the pivot, in three files
    counted about thrice; the draw then skipped its repeats, and English got 127 sentences where
    its share of 600 distinct ones is 266 (each other language 400 distinct, 245)."""
    en = [f"english {i}" for i in range(600)]
    files = {"en": []}
    for lang, part in (("xx", en[:500]), ("yy", en[100:]), ("zz", en)):
        for side, text in (("en", part), (lang, [f"{lang} {i}" for i in range(400)])):
            path = tmp_path / f"train.en-{lang}.{side}"
            path.write_text("".join(line + "\n" for line in text))
            files.setdefault(side, []).append(str(path))
    _, got = cb.spm_sample(files, temperature=5, total=1000)
    distinct = {"en": 600, "xx": 400, "yy": 400, "zz": 400}
    weights = {lang: (n / 1800) ** 0.2 for lang, n in distinct.items()}
    for lang, w in weights.items():
        assert got[lang] == pytest.approx(1000 * w / sum(weights.values()), rel=0.15), (lang, got)
    flat = cb.spm_sample(files, per_language=500)[1]  # drawn by a hash: about 500
    assert flat == {"en": pytest.approx(500, abs=40), "xx": 400, "yy": 400, "zz": 400}


def test_fewer_pieces_than_asked_are_reported_and_recorded(tmp_path, capsys):
    src = write_tsv(tmp_path / "en-xx.tsv", DATA["en-xx"][:300])
    m = pc.prepare_data(tmp_path / "corpus", [src], **{**SMALL, "vocab_size": 5000})
    built = m["vocab_size"]
    assert built < 5000 and m["config"]["vocab_size"] == 5000  # asked in the config, built beside it
    said = [line for line in capsys.readouterr().out.splitlines() if "SentencePiece built" in line]
    assert said == [f"SentencePiece built {built:,} pieces, not the 5,000 asked: the text has fewer distinct "
                    f"pieces; pass --vocab-size {built} or more text"]


def one_error_line(err, command="prepare-data"):
    """The error line of stderr, checked to be the only one (progress bars aside) and no traceback."""
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and errors[0] == err.splitlines()[-1], err
    assert errors[0].startswith(f"langshare {command}: error:"), err
    return errors[0]


def _write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


GOOD = "".join(f"{a}\t{b}\n" for a, b in DATA["en-xx"][:50]).encode()
BAD_INPUTS = {
    "line counts differ": ({"train.en-xx.en": b"a\nb\nc\n", "train.en-xx.xx": b"a\nb\n"}, ["in"],
                           ["train.en-xx.en has 3 lines", "train.en-xx.xx has 2"]),
    "not UTF-8": ({"en-xx.tsv": GOOD + b"caf\xe9\tx\n", "en-yy.tsv": GOOD}, ["in"],  # read in a worker process
                  ["en-xx.tsv: line 51 is not UTF-8", "byte 4", "0xe9", "iconv -f LATIN1 -t UTF-8"]),
    "no tab": ({"en-xx.tsv": GOOD + b"no tab here\n"}, ["in/en-xx.tsv"], ["line 51 has no tab"]),
    "two tabs": ({"en-xx.tsv": b"a\tb\tc\n" + GOOD}, ["in/en-xx.tsv"], ["line 1 has 2 tabs"]),
    "empty file": ({"en-xx.tsv": GOOD, "en-yy.tsv": b""}, ["in"], ["en-yy.tsv is empty"]),
    "same language": ({"en-en.tsv": GOOD}, ["in/en-en.tsv"], ["both 'en'"]),
    "pair given twice": ({"en-xx.tsv": GOOD, "train.en-xx.tsv": GOOD}, ["in"], ["given twice", "en-xx"]),
    "unknown split": ({"dev.en-xx.tsv": GOOD}, ["in/dev.en-xx.tsv"], ["unknown split 'dev'"]),
    "unknown split (plain text)": ({"dev.en-xx.en": b"a\n", "dev.en-xx.xx": b"b\n"}, ["in"], ["unknown split 'dev'"]),
    "side without partner": ({"train.en-xx.en": b"a\n"}, ["in"], ["no partner train.en-xx.xx"]),
    "name in no form": ({"corpus.txt": GOOD}, ["in/corpus.txt"], ["cannot tell the direction"]),
    "TSV in a directory named in no form": ({"en-xx.tsv": GOOD, "more.data.tsv": GOOD}, ["in"],
                                            ["more.data.tsv: cannot tell the direction"]),
    "only test data": ({"test.en-xx.tsv": GOOD}, ["in"], ["no training data"]),
    # were skipped in a directory without a word (the other directions were built: data lost silently)
    "TSV in capitals in a directory": ({"en-xx.tsv": GOOD, "en-yy.TSV": GOOD}, ["in"],
                                       ["en-yy.TSV: cannot tell the direction", "lower-case .tsv"]),
    "TSV with a suffix in a directory": ({"en-xx.tsv": GOOD, "en-yy.tsv.txt": GOOD}, ["in"],
                                         ["en-yy.tsv.txt: cannot tell the direction"]),
    "bzip2 in a directory": ({"en-xx.tsv": GOOD, "en-yy.tsv.bz2": GOOD}, ["in"],
                             ["en-yy.tsv.bz2: .bz2 files are not read", "gzip (.gz) or xz (.xz)"]),
    "bzip2 plain text side in a directory": ({"en-xx.tsv": GOOD, "train.en-yy.en.bz2": b"a\n",
                                              "train.en-yy.yy.bz2": b"b\n"}, ["in"], [".bz2 files are not read"]),
    "bzip2 named": ({"en-xx.tsv.bz2": GOOD}, ["in/en-xx.tsv.bz2"], [".bz2 files are not read"]),
    # were "cannot tell the direction and split from the file name", not saying why
    "language code with a '-'": ({"en-pt-BR.tsv": GOOD}, ["in/en-pt-BR.tsv"],
                                 ["en-pt-BR.tsv: language codes cannot contain '-'", "underscore", "pt_BR"]),
    "language code with a '-' in a directory": ({"en-xx.tsv": GOOD, "valid.en-pt-BR.tsv": GOOD}, ["in"],
                                                ["valid.en-pt-BR.tsv: language codes cannot contain '-'"]),
    # were two languages, 'EN' and 'en', with no word
    "codes that differ in case only": ({"EN-XX.tsv": GOOD, "en-yy.tsv": GOOD}, ["in"],
                                       ["'EN' and 'en' differ only in case", "EN-XX.tsv", "en-yy.tsv"]),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_one_line_and_leaves_no_output(case, tmp_path, capsys):
    files, args, expect = BAD_INPUTS[case]
    for name, data in files.items():
        _write(str(tmp_path / "in" / name), data)
    workers = ["--workers", "2"] if case == "not UTF-8" else []  # two directions: an error raised in a worker
    code = cli.main(["prepare-data", "--out", str(tmp_path / "corpus"), "--vocab-size", "50", *workers,
                     *[str(tmp_path / a) for a in args]])
    err = one_error_line(capsys.readouterr().err.strip())
    assert code == 2
    for text in expect:
        assert text in err, (text, err)
    assert os.listdir(tmp_path) == ["in"]  # neither the corpus nor its temporary directory


def refused(tmp_path, capsys, files, args=("in",)):
    """The one error line of prepare-data on ``files`` {name in in/: bytes}, checked: exit status 2, no output."""
    for name, data in files.items():
        _write(str(tmp_path / "in" / name), data)
    code = cli.main(["prepare-data", "--out", str(tmp_path / "corpus"), "--vocab-size", "50",
                     *[str(tmp_path / a) for a in args]])
    err = one_error_line(capsys.readouterr().err.strip())
    assert code == 2 and os.listdir(tmp_path) == ["in"], err
    return err


def accented(n, latin1=(), encoding=None):
    """n TSV lines with accents, UTF-8 except the line numbers in ``latin1``, written in Latin-1; or all in
    ``encoding`` (with its byte-order mark)."""
    text = [f"café {a}\tthé {b}\n" for a, b in DATA["en-xx"][:n]]
    if encoding:
        return "".join(text).encode(encoding)
    return b"".join(line.encode("latin-1" if i in latin1 else "utf-8") for i, line in enumerate(text, 1))


def test_a_utf8_file_with_a_broken_line_names_the_line_not_a_conversion(tmp_path, capsys):
    """Was: 'line 70: ... convert the file to UTF-8 (e.g. iconv -f LATIN1 -t UTF-8)', which turned the file's 239
    good UTF-8 lines into mojibake that prepare-data then accepted silently (found by a user walk-through)."""
    err = refused(tmp_path, capsys, {"en-xx.tsv": accented(240, latin1={70})})
    assert "en-xx.tsv: line 70 is not UTF-8 (byte 4 of the line is 0xe9)" in err, err
    assert "its 239 other lines with non-ASCII characters are" in err and "fix or remove that line" in err, err
    assert "-f LATIN1" not in err, err  # converting the whole file would garble the 239 UTF-8 lines


def test_several_broken_lines_are_all_counted_and_the_first_ones_named(tmp_path, capsys):
    bad = {70, 80, 90, 100, 110, 120, 130}
    err = refused(tmp_path, capsys, {"en-xx.tsv": accented(240, latin1=bad)})
    assert "lines 70, 80, 90, 100, 110 and 2 more (7 in all) are not UTF-8 (line 70: byte 4 of the line is " \
           "0xe9)" in err, err
    assert "its 233 other lines with non-ASCII characters are" in err and "fix or remove those lines" in err, err
    assert "-f LATIN1" not in err, err


def test_a_file_in_another_encoding_is_to_be_converted(tmp_path, capsys):
    """No line with non-ASCII bytes is UTF-8: the whole file is in another encoding, and converting it loses nothing."""
    err = refused(tmp_path, capsys, {"en-xx.tsv": accented(240, latin1=set(range(1, 241)))})
    assert "en-xx.tsv: lines 1, 2, 3, 4, 5 and 235 more (240 in all) are not UTF-8" in err, err
    assert "no line of it with non-ASCII characters is" in err and "another encoding" in err, err
    assert err.endswith("convert the file to UTF-8 (e.g. iconv -f LATIN1 -t UTF-8 if it is Latin-1)"), err
    for encoding in ("UTF-16", "UTF-32"):  # its byte-order mark says so (UTF-32-LE's begins as UTF-16-LE's does)
        err = refused(tmp_path, capsys, {"en-xx.tsv": accented(240, encoding=encoding.lower())})
        assert err.endswith(f"the file starts with a {encoding} byte-order mark; convert the file to UTF-8 "
                            f"(iconv -f {encoding} -t UTF-8)"), err


def test_blank_and_whitespace_only_lines_are_empty_pairs_dropped_and_counted(tmp_path, capsys):
    """Were refused as 'line N has no tab', while a line that is just a tab was dropped and counted as empty."""
    blank = ["", "   ", "\t", " \t ", "\t\t", "\u3000"]  # the last an ideographic space
    train = [f"{a}\t{b}" for a, b in DATA["en-xx"][:300]]
    for i, line in enumerate(blank):
        train.insert(40 * i + 7, line)
    test = [f"{a}\t{b}" for a, b in DATA["en-xx"][300:320]] + [" "]
    _write(str(tmp_path / "in" / "en-xx.tsv"), ("\n".join(train) + "\n").encode())
    _write(str(tmp_path / "in" / "test.en-xx.tsv"), ("\n".join(test) + "\n").encode())
    assert cli.main(["prepare-data", "--out", str(tmp_path / "corpus"), "--vocab-size", "50", str(tmp_path / "in")]) == 0
    manifest = json.load(open(tmp_path / "corpus" / "manifest.json"))
    read, removed = manifest["read"]["en-xx"], manifest["removed"]["en-xx"]
    assert read == {"test": 21, "train": 306} and removed["empty"] == 6 and removed["test_empty"] == 1, manifest
    assert manifest["counts"]["test"]["en-xx"] == 20
    summary = [line for line in capsys.readouterr().out.splitlines() if line.startswith("en-xx:")]
    assert len(summary) == 1 and summary[0].startswith("en-xx: read test 21, train 306;"), summary
    assert "empty 6" in summary[0] and "test_empty 1" in summary[0], summary


def test_every_malformed_line_of_a_file_is_in_the_one_message(tmp_path, capsys):
    """Was one fault per run ('line 21 has no tab'): the walk-through needed five runs to learn four faults."""
    lines_ = [f"{a}\t{b}" for a, b in DATA["en-xx"][:60]]
    faults = {3: "no tab here", 10: "a\tb\tc", 20: "", 25: "just words", 30: "x\ty\tz\tw", 40: "lost", 41: "   ",
              50: "again", 55: "a\t\tb"}
    for n, line in faults.items():
        lines_[n - 1] = line
    err = refused(tmp_path, capsys, {"en-xx.tsv": ("\n".join(lines_) + "\n").encode()})
    assert ("en-xx.tsv: 7 lines are not SOURCE<TAB>TARGET with exactly one tab: line 3 has no tab, line 10 has 2 "
            "tabs, line 25 has no tab, line 30 has 3 tabs, line 40 has no tab and 2 more; fix or remove them") \
        in err, err
    assert "line 20" not in err and "line 41" not in err  # blank lines are empty pairs, not faults
    one = refused(tmp_path, capsys, {"en-xx.tsv": GOOD + b"no tab here\n" + GOOD})
    assert "en-xx.tsv: line 51 has no tab; a TSV line is SOURCE<TAB>TARGET with exactly one tab (fix or remove " \
           "the line)" in one, one


def test_a_files_encoding_and_tab_faults_are_named_together(tmp_path, capsys):
    err = refused(tmp_path, capsys, {"en-xx.tsv": b"no tab here\n" + accented(100, latin1={5})})
    assert "en-xx.tsv: line 6 is not UTF-8" in err and "line 1 has no tab" in err, err


def test_plain_text_sides_name_their_broken_lines_and_their_line_counts_at_once(tmp_path, capsys):
    en = "".join(f"café {a}\n" for a, _ in DATA["en-xx"][:100]).encode()
    xx = "".join(f"{b}\n" for _, b in DATA["en-xx"][:99]).encode()
    en = en.replace("café".encode(), "café".encode("latin-1"), 2)  # lines 1 and 2 are broken
    err = refused(tmp_path, capsys, {"train.en-xx.en": en, "train.en-xx.xx": xx})
    assert "train.en-xx.en: lines 1 and 2 are not UTF-8" in err and "its 98 other lines" in err, err
    assert "train.en-xx.en has 100 lines but" in err and "train.en-xx.xx has 99" in err, err


def test_files_of_a_directory_not_read_are_named(tmp_path, capsys):
    """Was: skipped without a word (a data file named otherwise was lost silently)."""
    _write(str(tmp_path / "in" / "en-xx.tsv"), "".join(f"{a}\t{b}\n" for a, b in DATA["en-xx"][:300]).encode())
    for name in ("README.md", "en-fr.csv", "en-nl.txt", "old/en-yy.tsv"):
        _write(str(tmp_path / "in" / name), GOOD)
    assert cli.main(["prepare-data", "--out", str(tmp_path / "corpus"), "--vocab-size", "50", str(tmp_path / "in")]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if "not read" in line]
    assert said == [f"note: {tmp_path / 'in'}: not read (not named SRC-TGT.tsv, SPLIT.SRC-TGT.tsv or SPLIT.SRC-TGT.LANG; "
                    "sub-directories are not read): README.md, en-fr.csv, en-nl.txt, old/"]


def test_out_under_a_file_refused(tmp_path, capsys):
    _write(str(tmp_path / "in" / "en-xx.tsv"), GOOD)
    _write(str(tmp_path / "afile"), b"x")
    code = cli.main(["prepare-data", "--out", str(tmp_path / "afile" / "corpus"), str(tmp_path / "in")])
    assert code == 2 and "is a file, not a directory" in one_error_line(capsys.readouterr().err.strip())
    assert sorted(os.listdir(tmp_path)) == ["afile", "in"]


@pytest.mark.parametrize("out", ["in", "in/corpus", "in/en-xx.tsv"])
def test_out_equal_to_or_inside_an_input_refused(out, tmp_path, capsys):
    _write(str(tmp_path / "in" / "en-xx.tsv"), GOOD)
    code = cli.main(["prepare-data", "--out", str(tmp_path / out), str(tmp_path / "in")])
    err = one_error_line(capsys.readouterr().err.strip())
    assert code == 2 and "outside the inputs" in err, err
    assert os.listdir(tmp_path / "in") == ["en-xx.tsv"]


def test_a_users_directory_is_never_replaced(tmp_path, capsys):
    _write(str(tmp_path / "in" / "en-xx.tsv"), GOOD)
    _write(str(tmp_path / "mine" / "notes.txt"), b"keep")
    code = cli.main(["prepare-data", "--force", "--out", str(tmp_path / "mine"), str(tmp_path / "in")])
    err = one_error_line(capsys.readouterr().err.strip())
    assert code == 2 and "did not write" in err and (tmp_path / "mine" / "notes.txt").read_bytes() == b"keep"
    assert "did not write (notes.txt) and is not a prepared corpus" in err  # was: "(notes.txt, ...)" for one file
    assert sorted(os.listdir(tmp_path)) == ["in", "mine"]
    _write(str(tmp_path / "mine" / "todo.txt"), b"keep")
    assert cli.main(["prepare-data", "--out", str(tmp_path / "mine"), str(tmp_path / "in")]) == 2
    assert "did not write (notes.txt, ...) and is not" in capsys.readouterr().err


def test_cli_help_names_every_flag_and_ranges_are_checked(tmp_path, capsys):
    parser = cli.build_parser()
    sub = parser._subparsers._group_actions[0].choices["prepare-data"]
    flags = {o for a in sub._actions for o in a.option_strings if a.help}
    for flag in ("--out", "--valid-size", "--test-size", "--min-chars", "--max-chars", "--max-ratio", "--vocab-size",
                 "--spm-sentences", "--spm-temperature", "--spm-model", "--workers", "--force"):
        assert flag in flags, flag
    _write(str(tmp_path / "in" / "en-xx.tsv"), GOOD)
    for bad, expect in ((["--max-ratio", "0.5"], "--max-ratio: 0.5 is outside [1, inf)"),
                        (["--min-chars", "5", "--max-chars", "4"], "--max-chars 4 is below --min-chars 5"),
                        (["--spm-temperature", "0"], "--spm-temperature: 0 is outside (0, inf)"),
                        (["--workers", "0"], "--workers: 0 is outside [1, inf)"),
                        (["--spm-model", str(tmp_path / "in" / "en-xx.tsv")], "not a SentencePiece model")):
        try:
            code = cli.main(["prepare-data", "--out", str(tmp_path / "corpus"), *bad, str(tmp_path / "in")])
        except SystemExit as exit_:  # refused by argparse, where the range is declared
            code = exit_.code
        err = one_error_line(capsys.readouterr().err.strip())
        assert code == 2 and expect in err, (bad, err)
    assert os.listdir(tmp_path) == ["in"]
    with pytest.raises(ValueError, match=r"--test-size -1 is outside \[0, inf\)"):  # library callers too
        pc.prepare_data(tmp_path / "corpus", [str(tmp_path / "in")], test_size=-1)


# ----------------------------------------------------------------------------- downstream


@pytest.mark.slow
def test_trained_and_evaluated_on_a_prepared_corpus(tmp_path, caplog):
    """fairseq-train with the README's flags (langs.txt, lang_pairs.txt, validation on) and langshare
    evaluate take the corpus: supervised directions by default, the zero-shot one when asked."""
    from fairseq import options
    from fairseq_cli import train

    from fairseq_langshare.evaluation import evaluate

    files = [write_tsv(tmp_path / f"{d}.tsv", pairs) for d, pairs in DATA.items()]
    files.append(write_tsv(tmp_path / "test.xx-yy.tsv", [(translate(s, "xx"), translate(s, "yy"))
                                                         for s in english(12, seed=9)]))
    out = tmp_path / "corpus"
    m = pc.prepare_data(out, files, **SMALL)
    langs, pairs = ",".join(lines(out / "langs.txt")), lines(out / "lang_pairs.txt")[0]
    argv = [str(out / "bin"), "--user-dir", PKG_DIR, "--task", "multilingual_langshare", "--langs", langs,
            "--lang-pairs", pairs, "--encoder-langtok", "tgt", "--sampling-method", "temperature",
            "--sampling-temperature", "5", "--arch", "langshare_transformer_tiny", "--share-all-embeddings",
            "--criterion", "langshare_label_smoothed_cross_entropy", "--label-smoothing", "0.1",
            "--optimizer", "adam", "--lr", "0.005", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "10",
            "--max-tokens", "1000", "--max-update", "30", "--save-dir", str(tmp_path / "ckpt"), "--cpu",
            "--no-epoch-checkpoints", "--num-workers", "0", "--seed", "1", "--log-format", "json"]
    train.main(options.parse_args_and_arch(options.get_training_parser(), input_args=argv))
    checkpoint = str(tmp_path / "ckpt" / "checkpoint_last.pt")
    with caplog.at_level("WARNING", logger="fairseq_langshare.evaluation"):
        res = evaluate(checkpoint, str(out), beam=2)
    assert list(res["directions"]) == ["en-xx", "en-yy"]
    assert "zero-shot directions xx-yy, not scored here (`langshare evaluate --directions` scores them)" in caplog.text
    for d, row in res["directions"].items():
        assert row["n"] == m["counts"]["test"][d] == 40 and row["supervised"]
        assert row["train_size"] == m["counts"]["train"][d] and len(res["hypotheses"][d]) == 40
    zs = evaluate(checkpoint, str(out), directions="xx-yy", beam=2)["directions"]["xx-yy"]
    assert zs["group"] == "zero-shot" and not zs["supervised"] and zs["n"] == 12


def test_the_build_ends_with_what_each_direction_kept_and_removed(tmp_path, capsys):
    """Was: the console said nothing of the pairs the filters removed (27% of one direction in a walk-through); they
    were in manifest.json only."""
    rows = DATA["en-xx"][:300]
    _write(str(tmp_path / "in" / "en-xx.tsv"), "".join(f"{a}\t{b}\n" for a, b in rows + rows[:10]).encode())
    assert cli.main(["prepare-data", "--out", str(tmp_path / "corpus"), "--vocab-size", "50", str(tmp_path / "in")]) == 0
    manifest = json.load(open(tmp_path / "corpus" / "manifest.json"))
    read, counts, removed = manifest["read"]["en-xx"], manifest["counts"], manifest["removed"]["en-xx"]
    out = capsys.readouterr().out.splitlines()
    assert out[-2] == (f"en-xx: read train {read['train']}; kept train {counts['train']['en-xx']}, valid "
                       f"{counts['valid']['en-xx']}, test {counts['test']['en-xx']}; removed "
                       + ", ".join(f"{k} {v}" for k, v in sorted(removed.items()) if v))
    assert removed["duplicate"] and removed["held_out"]  # the repeated rows, and the rows held out
    assert out[-1] == f"prepared {tmp_path / 'corpus'} (manifest.json has every count)"


def test_the_summary_lines_name_the_zero_shot_directions_and_one_left_out(tmp_path, capsys):
    """As prepare-gettext --zero-shot's line: a test-only direction is named zero-shot, and one whose pairs were
    all removed says it is not in the corpus (was: only 'kept ... test 0', and missing from zero_shot_pairs)."""
    train = write_tsv(tmp_path / "en-xx.tsv", rows("en", "xx", english(N)))
    zs = write_tsv(tmp_path / "test.xx-yy.tsv", rows("xx", "yy", english(10, seed=9)))
    gone = write_tsv(tmp_path / "test.xx-zz.tsv", [("", "z") for _ in range(4)])
    m = pc.prepare_data(tmp_path / "corpus", [train, zs, gone], **SMALL)
    assert m["zero_shot_pairs"] == ["xx-yy"]
    out = capsys.readouterr().out.splitlines()
    assert [line for line in out if line.startswith("xx-")] == [
        "xx-yy: read test 10; kept train 0, valid 0, test 10; zero-shot (test only)",
        "xx-zz: read test 4; kept train 0, valid 0, test 0; removed test_one_side_empty 4; zero-shot, nothing kept: "
        "left out of the corpus"]


def test_a_vocabulary_smaller_than_the_texts_characters_is_one_line(tmp_path, capsys):
    """--vocab-size 16 is in the option's range, but SentencePiece needs a piece per character it keeps: was a
    RuntimeError traceback from its trainer ('Vocabulary size is smaller than required_chars')."""
    _write(str(tmp_path / "in" / "en-xx.tsv"), GOOD)
    code = cli.main(["prepare-data", "--out", str(tmp_path / "corpus"), "--vocab-size", "16", str(tmp_path / "in")])
    err = one_error_line(capsys.readouterr().err.strip())
    assert code == 2 and "--vocab-size 16 is too small for SentencePiece" in err and err.endswith(
        "pass a larger --vocab-size"), err
    assert os.listdir(tmp_path) == ["in"]
