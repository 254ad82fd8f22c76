"""gettext corpus: reading .mo catalogues, cleaning, hash split without leaks, layout, CLI."""

import argparse
import hashlib
import json
import os
import struct

import pytest

from fairseq_langshare.data import gettext_corpus as gc

REAL_LOCALES = "/usr/share/locale"
REAL_LANGS = ["is", "mk", "az"]  # small-to-medium catalogues (about 2000-2600 pairs each)
SMALL = dict(vocab_size=1000, valid_size=40, test_size=40)


def write_mo(path, entries):
    """Minimal GNU .mo writer: entries is a list of (msgid bytes, msgstr bytes)."""
    entries = sorted(entries)
    n, header = len(entries), 28
    ids = b"".join(k + b"\x00" for k, _ in entries)
    strs = b"".join(v + b"\x00" for _, v in entries)
    ids_start = header + 16 * n
    strs_start = ids_start + len(ids)
    otable, ttable, o, t = [], [], ids_start, strs_start
    for k, v in entries:
        otable += [len(k), o]
        ttable += [len(v), t]
        o, t = o + len(k) + 1, t + len(v) + 1
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(struct.pack("<7I", 0x950412DE, 0, n, header, header + 8 * n, 0, 0))
        f.write(struct.pack(f"<{2 * n}I", *otable) + struct.pack(f"<{2 * n}I", *ttable))
        f.write(ids + strs)


@pytest.fixture(scope="module")
def fake_locales(tmp_path_factory):
    root = tmp_path_factory.mktemp("locale")
    hdr = (b"", b"Content-Type: text/plain; charset=UTF-8\n")
    write_mo(root / "xx/LC_MESSAGES/a.mo", [
        hdr,
        (b"Open", b"Opena"),
        (b"Save\n  file\t now", b"Savea\tfila"),          # whitespace cleaned
        (b"%d file\x00%d files", b"%d fila\x00%d filas"),  # plural: dropped
        (b"menu\x04Close", b"Closa"),                      # context stripped
        (b"Same", b"Same"),                                # untranslated: dropped
        (b"Long", b"x" * 301),                             # too long: dropped
        (b"   ", b"blank"),                                # empty English: dropped
    ])
    write_mo(root / "xx/LC_MESSAGES/b.mo", [hdr, (b"Open", b"Openb"), (b"Quit", b"Quita")])
    write_mo(root / "sr@latin/LC_MESSAGES/a.mo", [
        (b"", b"Content-Type: text/plain; charset=ISO-8859-2\n"),
        (b"Open", "Otvori\u0107".encode("iso-8859-2"))])
    write_mo(root / "en_GB/LC_MESSAGES/a.mo", [hdr, (b"Color", b"Colour")])
    return str(root)


def test_read_clean_dedupe(fake_locales):
    assert gc.locale_dirs(fake_locales) == {"sr_latin": "sr@latin", "xx": "xx"}
    pairs, files = gc.load_locale(fake_locales, "xx")
    assert files == ["xx/LC_MESSAGES/a.mo", "xx/LC_MESSAGES/b.mo"]
    # first catalogue in filename order wins the duplicate "Open"
    assert pairs == {"Open": "Opena", "Save file now": "Savea fila", "Close": "Closa",
                     "Quit": "Quita"}
    assert gc.load_locale(fake_locales, "sr@latin")[0] == {"Open": "Otvori\u0107"}


def test_cli_list_and_help(fake_locales, capsys):
    parser = argparse.ArgumentParser(prog="langshare")
    gc.add_subcommand(parser.add_subparsers(dest="cmd"))
    args = parser.parse_args(["prepare-gettext", "--list", "--locale-dir", fake_locales,
                              "--min-pairs", "2"])
    assert args.func(args) == 0
    assert capsys.readouterr().out.splitlines() == ["xx\t4"]
    sub = parser._subparsers._group_actions[0].choices["prepare-gettext"]
    flags = {o for a in sub._actions for o in a.option_strings if a.help}
    for flag in ("--out", "--langs", "--num-langs", "--selection", "--direction", "--vocab-size",
                 "--valid-size", "--test-size", "--max-train-per-lang", "--min-pairs",
                 "--locale-dir", "--workers", "--force", "--list"):
        assert flag in flags


def test_selection():
    sizes = [(f"l{i}", 100 - i) for i in range(10)]
    assert gc.select(sizes, 3, "largest") == ["l0", "l1", "l2"]
    assert gc.select(sizes, 4, "spread") == ["l0", "l3", "l6", "l9"]
    with pytest.raises(ValueError, match="exceeds"):
        gc.select(sizes, 11, "spread")


def test_leak_check_raises():
    ok = {"xx": {"train": [("a", "A")], "valid": [("b", "B")], "test": [("c", "C")]}}
    gc.check_no_leak(ok)
    bad = {**ok, "yy": {"train": [("b", "B2")], "valid": [], "test": []}}
    with pytest.raises(RuntimeError, match="leak"):
        gc.check_no_leak(bad)


def test_ineligible_and_unknown_codes(fake_locales, tmp_path):
    out = tmp_path / "out"
    with pytest.raises(ValueError, match="'sr_latin'") as e:
        gc.prepare_gettext(out, langs=["sr_latin"], min_pairs=2, locale_dir=fake_locales)
    assert "\n" not in str(e.value) and "--list" in str(e.value)
    with pytest.raises(ValueError, match="'qq'"):
        gc.prepare_gettext(out, langs="xx,qq", min_pairs=2, locale_dir=fake_locales)
    with pytest.raises(ValueError, match="pivot"):
        gc.prepare_gettext(out, langs=["en_GB"], min_pairs=1, locale_dir=fake_locales)
    # was a RuntimeError from SentencePiece's trainer, given no sentence at all
    for empty in ("", " , "):
        with pytest.raises(ValueError, match=r"^--langs '.*' names no language: pass comma-separated codes \("
                                             r"langshare prepare-gettext --list shows them\)$"):
            gc.prepare_gettext(out, langs=empty, min_pairs=2, locale_dir=fake_locales)
    assert os.listdir(tmp_path) == []


# ----------------------------------------------------------------------------- real catalogues

needs_real = pytest.mark.skipif(
    not all(os.path.isdir(f"{REAL_LOCALES}/{c}/LC_MESSAGES") for c in REAL_LANGS),
    reason="gettext catalogues not installed")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("gettext") / "o2m"
    return str(out), gc.prepare_gettext(out, langs=REAL_LANGS, **SMALL)


def lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


@needs_real
def test_manifest_and_files(built):
    out, m = built
    assert m == json.load(open(os.path.join(out, "manifest.json")))
    assert m["version"] == 1 and m["pivot"] == "en" and m["direction"] == "o2m"
    assert sorted(m["languages"]) == sorted(REAL_LANGS)
    sizes = [m["pairs_per_language"][c] for c in m["languages"]]
    assert sizes == sorted(sizes, reverse=True)
    assert m["langs"] == ["en"] + m["languages"] == lines(os.path.join(out, "langs.txt"))
    assert m["lang_pairs"] == [f"en-{c}" for c in m["languages"]]
    assert lines(os.path.join(out, "lang_pairs.txt")) == [",".join(m["lang_pairs"])]
    assert m["config"]["langs"] == REAL_LANGS and m["config"]["vocab_size"] == 1000
    assert 900 <= m["vocab_size"] <= 1000
    for split in gc.SPLITS:
        for pair in m["lang_pairs"]:
            n = m["counts"][split][pair]
            assert n > 0 and (split == "train" or n <= 40)
            for lang in pair.split("-"):
                assert len(lines(f"{out}/raw/{split}.{pair}.{lang}")) == n
                spm = lines(f"{out}/spm/{split}.{pair}.{lang}")
                assert len(spm) == n and all(spm)
    for c in m["languages"]:
        assert m["train_pairs_per_language"][c] == m["counts"]["train"][f"en-{c}"]
        assert m["pairs_per_language"][c] > m["train_pairs_per_language"][c]
    rel, digest = next(iter(m["inputs"].items()))
    assert hashlib.sha256(open(f"{REAL_LOCALES}/{rel}", "rb").read()).hexdigest() == digest
    assert all(p.split("/")[0] in REAL_LANGS for p in m["inputs"])
    assert not [d for d in os.listdir(os.path.dirname(out)) if ".tmp-" in d]


@needs_real
def test_no_english_heldout_sentence_in_training(built):
    out, m = built
    train = set()
    for pair in m["lang_pairs"]:
        train |= set(lines(f"{out}/raw/train.{pair}.en"))
    for pair in m["lang_pairs"]:
        valid = set(lines(f"{out}/raw/valid.{pair}.en"))
        test = set(lines(f"{out}/raw/test.{pair}.en"))
        assert valid and test
        assert not valid & train and not test & train and not valid & test
        # aligned: each held-out pair is a real catalogue pair of that language
        xx = pair.split("-")[1]
        pairs = gc.load_locale(REAL_LOCALES, xx)[0]
        for en, tr in zip(lines(f"{out}/raw/test.{pair}.en"), lines(f"{out}/raw/test.{pair}.{xx}")):
            assert pairs[en] == tr


@needs_real
def test_binarized(built):
    from fairseq.data import Dictionary, data_utils

    out, m = built
    joint = open(f"{out}/bin/dict.txt", "rb").read()
    for lang in m["langs"]:
        assert open(f"{out}/bin/dict.{lang}.txt", "rb").read() == joint
    words = [line.rsplit(" ", 1)[0] for line in joint.decode().splitlines()]
    assert not {"<unk>", "<s>", "</s>", "<pad>"} & set(words) and len(set(words)) == len(words)
    d = Dictionary.load(f"{out}/bin/dict.txt")
    for split in gc.SPLITS:
        for pair in m["lang_pairs"]:
            for lang in pair.split("-"):
                ds = data_utils.load_indexed_dataset(f"{out}/bin/{split}.{pair}.{lang}", d, "mmap")
                assert len(ds) == m["counts"][split][pair]
                first = lines(f"{out}/spm/{split}.{pair}.{lang}")[0]
                assert d.string(ds[0]) == first


@needs_real
def test_rerun_is_skipped_and_other_config_refused(built, capsys):
    out, m = built
    mtime = os.path.getmtime(f"{out}/manifest.json")
    assert gc.prepare_gettext(out, langs=REAL_LANGS, **SMALL) == m
    assert "already prepared" in capsys.readouterr().out
    assert os.path.getmtime(f"{out}/manifest.json") == mtime
    with pytest.raises(ValueError, match="--force"):
        gc.prepare_gettext(out, langs=REAL_LANGS, **{**SMALL, "valid_size": 10})
    assert json.load(open(f"{out}/manifest.json")) == m


def test_sizes_only_cap_the_held_out_splits():
    pairs = {f"message number {i}": f"xx {i}" for i in range(4000)}
    big, small = gc.split_language(pairs, 200, 500), gc.split_language(pairs, 20, 7)
    assert big["train"] == small["train"] and len(big["train"]) > 3400
    assert small["test"] == big["test"][:7] and small["valid"] == big["valid"][:20]
    assert 150 <= len(big["test"]) < 500  # the 5% test buckets of 4000 strings: fewer than the cap


@needs_real
def test_test_size_changes_neither_training_data_nor_sentencepiece(built, tmp_path):
    out, m = built  # test size 40
    small_out = str(tmp_path / "small")
    small = gc.prepare_gettext(small_out, langs=REAL_LANGS, **{**SMALL, "test_size": 10})
    assert small["counts"]["train"] == m["counts"]["train"] and small["counts"]["valid"] == m["counts"]["valid"]
    assert all(n == 10 for n in small["counts"]["test"].values())
    for name in ("spm.model", "bin/dict.txt"):
        assert open(f"{small_out}/{name}", "rb").read() == open(f"{out}/{name}", "rb").read(), name
    for pair in m["lang_pairs"]:
        for lang in pair.split("-"):
            assert lines(f"{small_out}/raw/train.{pair}.{lang}") == lines(f"{out}/raw/train.{pair}.{lang}")
            assert lines(f"{small_out}/raw/test.{pair}.{lang}") == lines(f"{out}/raw/test.{pair}.{lang}")[:10]


@needs_real
def test_failure_leaves_nothing(tmp_path, monkeypatch):
    out = tmp_path / "corpus"
    with pytest.raises(ValueError, match="'zz_QQ'"):
        gc.prepare_gettext(out, langs=["is", "zz_QQ"], **SMALL)

    def boom(*a, **k):
        raise RuntimeError("spm failed")

    monkeypatch.setattr(gc, "train_spm", boom)
    with pytest.raises(RuntimeError, match="spm failed"):
        gc.prepare_gettext(out, langs=["az"], **SMALL)
    assert os.listdir(tmp_path) == []


@needs_real
def test_m2o_swaps_pairs_and_force_replaces(built, tmp_path):
    o2m_out, o2m = built
    out = str(tmp_path / "m2o")
    m = gc.prepare_gettext(out, langs=REAL_LANGS, direction="m2o", max_train_per_lang=300, **SMALL)
    assert m["lang_pairs"] == [f"{c}-en" for c in o2m["languages"]]
    for c in o2m["languages"]:
        assert m["counts"]["train"][f"{c}-en"] == 300
        for split in ("valid", "test"):
            assert m["counts"][split][f"{c}-en"] == o2m["counts"][split][f"en-{c}"]
        for split in gc.SPLITS:
            for lang in (c, "en"):
                mine = lines(f"{out}/raw/{split}.{c}-en.{lang}")
                theirs = lines(f"{o2m_out}/raw/{split}.en-{c}.{lang}")
                assert mine == theirs[:len(mine)]
        assert os.path.exists(f"{out}/bin/train.{c}-en.{c}.bin")
    both = gc.prepare_gettext(out, langs=["az"], direction="both", force=True, **SMALL)
    assert both["lang_pairs"] == ["en-az", "az-en"]
    assert sorted(os.listdir(f"{out}/raw")) == sorted(
        f"{s}.{p}.{lang}" for s in gc.SPLITS for p in ("en-az", "az-en") for lang in ("en", "az"))
    assert not [d for d in os.listdir(tmp_path) if d != "m2o"]


def test_force_never_empties_a_directory_it_did_not_write(fake_locales, tmp_path):
    """--force replaces a corpus this package wrote (its manifest), never a user's directory."""
    user = tmp_path / "mine"
    (user / "notes").mkdir(parents=True)
    (user / "hypotheses.txt").write_text("keep me\n")
    (user / "notes" / "a.txt").write_text("and me\n")
    for force in (False, True):
        with pytest.raises(ValueError, match="did not write") as e:
            gc.prepare_gettext(user, langs="xx", min_pairs=2, vocab_size=40, locale_dir=fake_locales, force=force)
        assert "\n" not in str(e.value)
        assert (user / "hypotheses.txt").read_text() == "keep me\n" and (user / "notes" / "a.txt").exists()
    # a user's file put into a corpus directory this package wrote is not deleted either
    out = tmp_path / "corpus"
    gc.prepare_gettext(out, langs="xx", min_pairs=2, vocab_size=40, locale_dir=fake_locales)
    (out / "checkpoint_best.pt").write_text("weights")
    with pytest.raises(ValueError, match="checkpoint_best.pt"):
        gc.prepare_gettext(out, langs="xx", min_pairs=2, vocab_size=41, locale_dir=fake_locales, force=True)
    assert (out / "checkpoint_best.pt").read_text() == "weights"
    (out / "checkpoint_best.pt").unlink()
    m = gc.prepare_gettext(out, langs="xx", min_pairs=2, vocab_size=41, locale_dir=fake_locales, force=True)
    assert m["config"]["vocab_size"] == 41
    assert sorted(os.listdir(tmp_path)) == ["corpus", "mine"]
