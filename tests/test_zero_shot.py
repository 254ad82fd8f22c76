"""Zero-shot test sets of the gettext corpus (``data.zero_shot``, ``prepare-gettext --zero-shot``):
joined on the held-out English strings, and not one of their sentences occurs in training."""

import glob
import json
import os

import pytest

from fairseq_langshare.data import gettext_corpus as gc
from fairseq_langshare.data import zero_shot
from fairseq_langshare.evaluation import _Corpus

REAL_LOCALES = "/usr/share/locale"
REAL_LANGS = ["is", "mk", "az"]
SMALL = dict(vocab_size=1000, valid_size=40, test_size=40)


def test_directions_spec():
    langs = ["fr", "nb", "th"]
    assert zero_shot.directions("all", langs) == ["fr-nb", "fr-th", "nb-fr", "nb-th", "th-fr", "th-nb"]
    assert zero_shot.directions("nb,th", langs) == ["nb-th", "th-nb"]
    assert zero_shot.directions("th-fr", langs) == ["th-fr"]
    for spec, message in (("en-fr", "has English"), ("fr-de", "'de' is not one of the corpus's"),
                          ("fr,nb-th", "not both"), ("fr", "at least two"), ("fr-fr", "two different"),
                          ("fr-nb,fr-nb", "named twice"), (" , ", "is empty")):
        with pytest.raises(ValueError, match=message):
            zero_shot.directions(spec, langs)


def english(split, n, prefix):
    """``n`` English strings that gc.split_language puts in ``split`` (by their hash bucket)."""
    out, i = [], 0
    while len(out) < n:
        text = f"{prefix} {i}"
        in_split = gc.split_language({text: "x"}, 1, 1)[split]
        if in_split:
            out.append(text)
        i += 1
    return out


def test_rows_with_a_training_sentence_a_copy_or_a_repeat_are_dropped():
    test = english("test", 8, "held out")
    train_en = english("train", 300, "train")
    xx = {**{en: f"xx {en}" for en in train_en}, **{en: f"xx {en}" for en in test}}
    yy = {**{en: f"yy {en}" for en in train_en}, **{en: f"yy {en}" for en in test[:6]}}  # yy lacks two
    xx[test[0]] = f"xx {train_en[5]}"  # the translation of a training string: dropped
    yy[test[1]] = train_en[7]           # an English training sentence: dropped
    xx[test[2]] = yy[test[2]] = "same"  # a copy: dropped
    xx[test[3]] = xx[test[4]]    # a repeat of another row's sentence: the second dropped
    splits = {lang: gc.split_language(pairs, 10 ** 6, 10 ** 6) for lang, pairs in (("xx", xx), ("yy", yy))}
    for s in splits.values():
        assert {en for en, _ in s["test"]} <= set(test) and len(s["train"]) == 300
    sets, left_out = zero_shot.build(splits, ["xx-yy", "yy-xx"], size=10, min_size=1)
    assert left_out == {} and list(sets) == ["xx-yy"]
    rows = sets["xx-yy"]["test"]
    expected = [(xx[en], yy[en]) for en, _ in splits["yy"]["test"] if en not in test[:3]]
    expected = [r for i, r in enumerate(expected) if r[0] not in [e[0] for e in expected[:i]]]
    assert rows == expected and len(rows) == 2
    training = zero_shot.training_sentences(splits)
    assert not {s for row in rows for s in row} & training
    zero_shot.check_disjoint(sets, splits)
    # a smaller size gives a prefix; too few test sentences leaves the direction out
    assert zero_shot.build(splits, ["xx-yy"], size=1, min_size=1)[0]["xx-yy"]["test"] == rows[:1]
    assert zero_shot.build(splits, ["xx-yy", "yy-xx"], size=10, min_size=3) == ({}, {"xx-yy": 2, "yy-xx": 2})
    leaked = {"xx-yy": {"test": rows + [(f"xx {train_en[9]}", "yy fresh")]}}
    with pytest.raises(RuntimeError, match=f"holds a training sentence: 'xx {train_en[9]}'"):
        zero_shot.check_disjoint(leaked, splits)


# ----------------------------------------------------------------------------- real catalogues
needs_real = pytest.mark.skipif(
    not all(os.path.isdir(f"{REAL_LOCALES}/{c}/LC_MESSAGES") for c in REAL_LANGS),
    reason="gettext catalogues not installed")


def lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("zero-shot")
    plain = gc.prepare_gettext(root / "plain", langs=REAL_LANGS, direction="both", **SMALL)
    zs = gc.prepare_gettext(root / "zs", langs=REAL_LANGS, direction="both", zero_shot_spec="all",
                            zero_shot_size=30, zero_shot_min_size=5, **SMALL)
    return str(root), plain, zs


@needs_real
def test_prepare_gettext_zero_shot_sets_are_disjoint_from_training(built):
    root, plain, m = built
    out = os.path.join(root, "zs")
    languages = m["languages"]
    wanted = [f"{a}-{b}" for a in languages for b in languages if a != b]
    assert sorted(m["zero_shot_pairs"] + list(m["zero_shot"]["left_out"])) == sorted(wanted)
    assert m["zero_shot_pairs"] and m["lang_pairs"] == plain["lang_pairs"]  # trained directions unchanged
    assert lines(os.path.join(out, "lang_pairs.txt")) == [",".join(plain["lang_pairs"])]
    training = set()
    for path in glob.glob(os.path.join(out, "raw", "train.*")):
        training |= set(lines(path))
    assert len(training) > 1000
    corpus = _Corpus(out)
    for d in m["zero_shot_pairs"]:
        src, tgt = d.split("-")
        for split in ("valid", "test"):
            n = m["counts"][split][d]
            assert (split == "valid" or 5 <= n) and n <= 30
            if not n:
                continue
            assert corpus.missing(split, src, tgt) is None
            corpus.check_references(split, src, tgt)  # raw and bin agree, as evaluate checks
            source = lines(corpus.reference_path(split, tgt, src))
            target = corpus.references(split, src, tgt)
            assert len(source) == len(target) == n
            assert not (set(source) | set(target)) & training, d
            assert all(a != b for a, b in zip(source, target))
        assert d not in m["counts"]["train"] and corpus.train_size(src, tgt) is None  # evaluate: zero-shot
    # aligned through English: each row is the two catalogues' translations of one held-out msgid
    a, b = m["zero_shot_pairs"][0].split("-")
    pair = "-".join(sorted((a, b)))
    x, y = pair.split("-")
    cat = {lang: gc.load_locale(REAL_LOCALES, lang)[0] for lang in (x, y)}
    by_x = {}
    for en, tr in cat[x].items():
        by_x.setdefault(tr, set()).add(cat[y].get(en))
    for sx, sy in zip(lines(f"{out}/raw/test.{pair}.{x}"), lines(f"{out}/raw/test.{pair}.{y}")):
        assert sy in by_x[sx]


@needs_real
def test_zero_shot_sets_change_neither_training_data_nor_sentencepiece(built):
    root, plain, m = built
    assert m["counts"]["train"] == plain["counts"]["train"]
    for name in ["spm.model", "bin/dict.txt"] + [f"raw/train.{p}.{lang}" for p in plain["lang_pairs"]
                                                 for lang in p.split("-")]:
        assert open(f"{root}/zs/{name}", "rb").read() == open(f"{root}/plain/{name}", "rb").read(), name
    assert "zero_shot" not in plain["config"] and m["config"]["zero_shot"] == "all"
    assert json.load(open(f"{root}/zs/manifest.json")) == m


@pytest.mark.skipif(not all(os.path.isdir(f"{REAL_LOCALES}/{c}/LC_MESSAGES") for c in ("tg", "fo", "lg")),
                    reason="gettext catalogues not installed")
def test_the_console_says_which_zero_shot_directions_were_kept_and_why_not(tmp_path, capsys):
    """Was: silent, the manifest listing every direction under left_out (the catalogues of three small languages
    share few held-out English strings: 0-3 test rows per pair, below --zero-shot-min-size)."""
    from fairseq_langshare.cli import main

    assert main(["prepare-gettext", "--out", str(tmp_path / "corpus"), "--langs", "tg,fo,lg", "--direction", "both",
                 "--vocab-size", "1000", "--zero-shot", "all", "--zero-shot-min-size", "3"]) == 0
    m = json.loads((tmp_path / "corpus" / "manifest.json").read_text())
    kept, left_out = m["zero_shot_pairs"], m["zero_shot"]["left_out"]
    assert kept and left_out  # as these catalogues are: some directions reach 3 test rows, some do not
    said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("zero-shot")]
    assert said == [
        f"zero-shot directions (--zero-shot all): kept {len(kept)} of 6 ("
        + ", ".join(f"{d} test {m['counts']['test'][d]}" for d in kept) + "); left out "
        + ", ".join(f"{d} test {n}" for d, n in left_out.items()) + ": fewer test sentences than --zero-shot-min-size "
        "3 (rows need a held-out English string both languages translate); lower it or choose larger languages"]
    assert main(["prepare-gettext", "--out", str(tmp_path / "corpus"), "--langs", "tg,fo,lg", "--direction", "both",
                 "--vocab-size", "1000", "--zero-shot", "all", "--zero-shot-min-size", "3"]) == 0  # reused
    assert [line for line in capsys.readouterr().out.splitlines() if line.startswith("zero-shot")] == said


@pytest.mark.parametrize("left_out", [{}, {"fr-de": 2}])
def test_the_zero_shot_line_of_a_manifest(left_out):
    """Independent of the machine's catalogues: what the line says for kept directions and for those left out."""
    from fairseq_langshare.data.zero_shot import summary

    manifest = {"zero_shot_pairs": ["de-fr"], "counts": {"test": {"de-fr": 40}},
                "zero_shot": {"spec": "de,fr", "left_out": left_out, "min_size": 20}}
    line = summary(manifest)
    assert line.startswith(f"zero-shot directions (--zero-shot de,fr): kept 1 of {1 + len(left_out)} (de-fr test 40)")
    assert line.endswith("; left out fr-de test 2: fewer test sentences than --zero-shot-min-size 20 (rows need a "
                         "held-out English string both languages translate); lower it or choose larger languages"
                         if left_out else "(de-fr test 40)")
