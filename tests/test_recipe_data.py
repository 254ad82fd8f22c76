"""Data recipes (`langshare prepare-corpus`): every paper corpus end to end against a tiny mirror
with the real layout, cleaning, zero-shot sets, re-runs, errors, dry-run, interrupted builds,
downloads (file:// URLs, no network)."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import unicodedata
from pathlib import Path

import pytest

from fairseq_langshare import cli
from fairseq_langshare.data import corpus_build as cb
from fairseq_langshare.recipes import corpora, sources
from fairseq_langshare.recipes.corpus_specs import CORPORA

import recipe_mirrors as rm  # tests/ is on pytest's pythonpath (pytest.ini)

ROOT = Path(__file__).resolve().parents[1]
VOCAB = 200
NAMES = list(CORPORA)


def lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


@pytest.fixture(scope="module")
def mirrors(tmp_path_factory):
    root = tmp_path_factory.mktemp("mirrors")
    return {n: rm.make_mirror(n, root / n) for n in NAMES}


@pytest.fixture(scope="module")
def built(mirrors, tmp_path_factory):
    root = tmp_path_factory.mktemp("corpora")
    out = {}
    for n in NAMES:
        m = corpora.prepare_corpus(n, root / n, mirror=mirrors[n], langs=rm.TINY_LANGS[n],
                                   vocab_size=VOCAB)
        out[n] = (str(root / n), m)
    return out


def run_cli(argv, capsys):
    code = cli.main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


# ----------------------------------------------------------------------------- end to end


@pytest.mark.parametrize("name", NAMES)
def test_layout_and_manifest(built, name):
    from fairseq.data import Dictionary, data_utils

    out, m = built[name]
    spec = CORPORA[name]
    assert m == json.load(open(f"{out}/manifest.json"))
    for key in ("languages", "langs", "lang_pairs", "counts", "train_pairs_per_language",
                "spm_model", "vocab_size", "dict", "data_bin", "config", "corpus",
                "zero_shot_pairs"):
        assert key in m
    assert m["corpus"] == name and m["languages"] == rm.TINY_LANGS[name]
    assert m["langs"] == [spec.pivot] + m["languages"] == lines(f"{out}/langs.txt")
    assert lines(f"{out}/lang_pairs.txt") == [",".join(m["lang_pairs"])]
    # the directions each paper trains: both English-centric halves, or all pairs for LSL
    p, langs = spec.pivot, m["languages"]
    if name == "lsl10":
        every = {f"{a}-{b}" for a in m["langs"] for b in m["langs"] if a != b}
        assert set(m["lang_pairs"]) == every and len(m["lang_pairs"]) == len(every)
    else:
        assert m["lang_pairs"] == [f"{p}-{x}" for x in langs] + [f"{x}-{p}" for x in langs]
    assert m["config"]["vocab_size"] == VOCAB and m["spm"]["paper_vocab_size"] == spec.vocab_size
    assert m["train_sampling"] == spec.train_sampling
    assert 0 < m["vocab_size"] <= VOCAB
    joint = open(f"{out}/bin/dict.txt", "rb").read()
    for lang in m["langs"]:
        assert open(f"{out}/bin/dict.{lang}.txt", "rb").read() == joint
    d = Dictionary.load(f"{out}/bin/dict.txt")
    for pair in m["stored_pairs"]:
        for split in cb.SPLITS:
            n = m["counts"][split].get(pair)
            if n is None:
                continue
            assert n > 0
            for lang in pair.split("-"):
                assert len(lines(f"{out}/raw/{split}.{pair}.{lang}")) == n
                ds = data_utils.load_indexed_dataset(f"{out}/bin/{split}.{pair}.{lang}", d, "mmap")
                assert len(ds) == n
    for direction in m["lang_pairs"]:  # every trained direction has train data (maybe reversed)
        assert m["counts"]["train"][direction] > 0
    assert not [e for e in os.listdir(os.path.dirname(out)) if ".tmp-" in e or ".old-" in e]


def test_training_pairs_deduplicated_and_disjoint_from_heldout(built):
    for name, (out, m) in built.items():
        held = {}
        for pair in m["stored_pairs"]:
            for split in ("valid", "test"):
                for lang in pair.split("-"):
                    p = f"{out}/raw/{split}.{pair}.{lang}"
                    if os.path.exists(p):
                        held.setdefault(lang, set()).update(lines(p))
        for pair in m["stored_pairs"]:
            if not os.path.exists(f"{out}/raw/train.{pair}.{pair.split('-')[0]}"):
                continue
            a, b = pair.split("-")
            rows = list(zip(lines(f"{out}/raw/train.{pair}.{a}"), lines(f"{out}/raw/train.{pair}.{b}")))
            assert len(set(rows)) == len(rows), (name, pair)
            assert not {x for x, _ in rows} & held[a] and not {y for _, y in rows} & held[b]
            removed = m["removed"][pair]  # the mirror planted 5 duplicates and 6 held-out copies
            assert removed["duplicate"] >= (3 if name.startswith("ted8") else 5)
            assert removed["heldout_overlap"] >= (4 if name.startswith("ted8") else 6), (name, pair)


def test_text_is_normalised(built):
    out, m = built["wmt14"]
    text = "\n".join("\n".join(lines(f"{out}/raw/{f}")) for f in os.listdir(f"{out}/raw"))
    assert "caf\u00e9" in text and "e\u0301" not in text and "\u200b" not in text
    assert "  " not in text and unicodedata.is_normalized("NFC", text)


def test_opus100_zero_shot_and_languages_without_devtest(built, mirrors, tmp_path):
    out, m = built["opus100"]
    assert m["zero_shot_pairs"] == ["de-fr", "fr-de", "de-nl", "nl-de", "fr-nl", "nl-fr"]
    assert not set(m["zero_shot_pairs"]) & set(m["lang_pairs"])
    for pair in ("de-fr", "de-nl", "fr-nl"):
        assert m["counts"]["test"][pair] == rm.HELDOUT_LINES
        assert pair not in m["counts"]["train"] and pair not in m["counts"]["valid"]
        assert not os.path.exists(f"{out}/raw/train.{pair}.de")
        assert os.path.exists(f"{out}/bin/test.{pair}.{pair.split('-')[1]}.idx")
    # yo has no dev/test in OPUS-100: trained, not evaluated; o2m trains en->xx only
    m2 = corpora.prepare_corpus("opus100", tmp_path / "o2m", mirror=mirrors["opus100"],
                                langs="yo,fr", direction="o2m", vocab_size=VOCAB,
                                max_train_per_pair=50)
    assert m2["languages"] == ["fr", "yo"] and m2["lang_pairs"] == ["en-fr", "en-yo"]
    assert m2["counts"]["train"] == {"en-fr": 50, "en-yo": 50}
    assert m2["counts"]["train"]["en-yo"] > 0 and "en-yo" not in m2["counts"]["test"]
    assert m2["zero_shot_pairs"] == []


def test_lsl_ccmatrix_downsampling_and_groups(built, mirrors, tmp_path):
    out, m = built["lsl10"]
    for pair, st in m["lq_downsampling"].items():
        expected = corpora._lq_rate(st["hq"], st["lq"], 5, 10)
        assert st["rate"] == pytest.approx(expected, abs=1e-6)
        assert 0.1 <= st["rate"] <= 1 and st["lq_kept"] <= st["lq"]
        assert m["counts"]["train"][pair] == st["hq"] + st["lq_kept"]
    assert any(st["rate"] < 1 for st in m["lq_downsampling"].values())
    g = corpora.prepare_corpus("lsl10", tmp_path / "groups", mirror=mirrors["lsl10"],
                               langs="de,ja,ko", direction="groups", vocab_size=VOCAB)
    assert set(g["lang_pairs"]) == {"de-en", "en-de", "en-ja", "ja-en", "en-ko", "ko-en",
                                    "ja-ko", "ko-ja"}
    assert set(g["zero_shot_pairs"]) == {"de-ja", "ja-de", "de-ko", "ko-de"}


def test_every_source_of_every_language_reads_from_the_mirror(mirrors):
    """All formats (text, gzip TSV, TMX, IWSLT tags/XML, TED tables, sacreBLEU cache) and every
    file name of every language, without building."""
    for name, spec in CORPORA.items():
        direction = "m2m" if name == "lsl10" else "both"
        layout = spec.layout(spec, list(spec.languages), direction)
        assert corpora.check_mirror(spec, layout, mirrors[name]) == \
            sorted({f"{p}:{s}:{src.name}" for p, s, src in corpora._used(layout)
                    if spec.resources[src.resource].manual})
        for pair, split, src in corpora._used(layout):
            if spec.resources[src.resource].manual:
                continue
            rows = list(corpora._oriented(src, pair, mirrors[name]))
            assert len(rows) >= 20 and all(x and y for x, y in rows), (name, pair, split, src.name)


def test_spm_text_temperature_sampling(tmp_path):
    (tmp_path / "big").write_text("".join(f"big sentence {i}\n" for i in range(1000)))
    (tmp_path / "small").write_text("".join(f"small sentence {i}\n" for i in range(10)))
    files = {"xx": [str(tmp_path / "big")], "yy": [str(tmp_path / "small")]}
    text, got = cb.spm_sample(files, temperature=5, total=1010)
    p_small = (10 / 1010) ** 0.2 / ((10 / 1010) ** 0.2 + (1000 / 1010) ** 0.2)
    assert got["yy"] == pytest.approx(1010 * p_small, rel=0.2) and got["yy"] > 10  # upsampled
    assert got["xx"] < 1000 and len(text) == sum(got.values())
    assert cb.spm_sample(files, temperature=5, total=1010) == (text, got)  # deterministic
    _, flat = cb.spm_sample(files, per_language=50)
    assert flat == {"xx": pytest.approx(50, abs=15), "yy": 10}


# ----------------------------------------------------------------------------- re-runs, errors


def test_rerun_is_a_noop_and_other_config_refused(built, mirrors, capsys):
    out, m = built["ted8-related"]
    mtime = os.path.getmtime(f"{out}/manifest.json")
    again = corpora.prepare_corpus("ted8-related", out, mirror=mirrors["ted8-related"],
                                   langs=rm.TINY_LANGS["ted8-related"], vocab_size=VOCAB)
    assert again == m and "already prepared" in capsys.readouterr().out
    assert os.path.getmtime(f"{out}/manifest.json") == mtime
    with pytest.raises(ValueError, match="--force"):
        corpora.prepare_corpus("ted8-related", out, mirror=mirrors["ted8-related"],
                               langs=rm.TINY_LANGS["ted8-related"], vocab_size=VOCAB + 1)
    assert json.load(open(f"{out}/manifest.json")) == m


def test_missing_mirror_file_unknown_corpus_and_language(mirrors, tmp_path, capsys):
    broken = tmp_path / "mirror"
    shutil.copytree(mirrors["ted8-diverse"], broken)
    os.remove(broken / "ted_talks" / "all_talks_dev.tsv")
    out = tmp_path / "out"
    code, _, err = run_cli(["prepare-corpus", "ted8-diverse", "--out", str(out), "--mirror",
                            str(broken)], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "ted8-diverse" in err and "ted_talks/all_talks_dev.tsv" in err and "--download" in err
    code, _, err = run_cli(["prepare-corpus", "opus200", "--out", str(out)], capsys)
    assert code == 2 and "unknown corpus 'opus200'" in err and "opus100" in err
    code, _, err = run_cli(["prepare-corpus", "wmt14", "--out", str(out), "--mirror",
                            mirrors["wmt14"], "--langs", "de,xx"], capsys)
    assert code == 2 and "'xx' has no data in corpus wmt14" in err and "--langs" in err
    code, _, err = run_cli(["prepare-corpus", "wmt14", "--out", str(out)], capsys)
    assert code == 2 and "--mirror" in err and "--download" in err
    assert not out.exists() and sorted(os.listdir(tmp_path)) == ["mirror"]


def test_interrupted_build_leaves_nothing_that_looks_complete(mirrors, tmp_path, monkeypatch):
    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(cb, "encode_and_binarize", interrupted)
    out = tmp_path / "corpus"
    with pytest.raises(KeyboardInterrupt):
        corpora.prepare_corpus("ted8-related", out, mirror=mirrors["ted8-related"],
                               langs="aze,bel", vocab_size=VOCAB)
    assert os.listdir(tmp_path) == []
    monkeypatch.undo()
    m = corpora.prepare_corpus("ted8-related", out, mirror=mirrors["ted8-related"],
                               langs="aze,bel", vocab_size=VOCAB)  # the re-run completes
    assert m["languages"] == ["aze", "bel"] and os.listdir(tmp_path) == ["corpus"]


# ----------------------------------------------------------------------------- dry run


@pytest.mark.parametrize("name,expect", [
    ("opus100", ["https://object.pouta.csc.fi/OPUS-100/v1.0/opus-100-corpus-v1.0.tar.gz",
                 "vocab_size=64000", "T=5", "fairseq-preprocess --source-lang ar --target-lang de"]),
    ("wmt14", ["training-parallel-europarl-v7.tgz", "sacrebleu -t wmt18 -l cs-en",
               "md5 f996c245ecffea23d0006fa4c34e9064", "vocab_size=64000", "manual (registration)"]),
    ("ted8-diverse", ["http://phontron.com/data/ted_talks.tar.gz", "vocab_size=32000",
                      "--target-lang kor"]),
    ("public24", ["wat2019.my-en.zip", "iitb", "vocab_size=250000", "sacrebleu -t iwslt17 -l en-ja"]),
    ("lsl10", ["flores101_dataset.tar.gz", "OPUS-CCMatrix/v1/moses/de-en.txt.zip",
               "1500000 sentences per language", "vocab_size=250000", "at most 10x"]),
])
def test_dry_run_prints_the_real_size_plan_and_writes_nothing(name, expect, tmp_path, capsys):
    cache, out = tmp_path / "cache", tmp_path / "out"
    code, text, _ = run_cli(["prepare-corpus", name, "--out", str(out), "--download", "--cache",
                             str(cache), "--dry-run"], capsys)
    assert code == 0
    for e in expect:
        assert e in text, e
    spec = CORPORA[name]
    assert text.count("fairseq-preprocess ") == len(spec.layout(
        spec, list(spec.languages), next(iter(spec.directions))).stored)
    assert os.listdir(tmp_path) == []


def test_scripts(mirrors, tmp_path):
    env = dict(os.environ, PYTHON=sys.executable, MIRROR=mirrors["ted8-related"],
               OUT=str(tmp_path), VARIANT="related", LANGS="aze,tur", VOCAB_SIZE=str(VOCAB))
    for script in ("opus100", "wmt14", "ted8", "public24", "lsl10"):
        assert (ROOT / "scripts/recipes" / f"data_{script}.sh").exists()
    r = subprocess.run(["bash", str(ROOT / "scripts/recipes/data_ted8.sh")], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    m = json.load(open(tmp_path / "ted8-related" / "manifest.json"))
    assert m["languages"] == ["aze", "tur"] and m["config"]["vocab_size"] == VOCAB
    env = dict(env, DRY_RUN="1", VARIANT="bad")
    r = subprocess.run(["bash", str(ROOT / "scripts/recipes/data_ted8.sh")], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 2 and "VARIANT" in r.stderr


# ----------------------------------------------------------------------------- downloads


def _md5(path):
    return hashlib.md5(open(path, "rb").read()).hexdigest()


def test_download_verifies_checksums_unpacks_and_builds(mirrors, tmp_path, monkeypatch):
    archive = tmp_path / "ted_talks.tar.gz"
    with tarfile.open(archive, "w:gz") as t:  # the release's layout: the tables at the top
        for f in sorted(os.listdir(Path(mirrors["ted8-related"]) / "ted_talks")):
            t.add(Path(mirrors["ted8-related"]) / "ted_talks" / f, arcname=f)
    spec = CORPORA["ted8-related"]
    good = sources.Resource("ted-talks", archive.as_uri(), dest="ted_talks", md5=_md5(archive))
    bad = sources.Resource("ted-talks", archive.as_uri(), dest="ted_talks", md5="0" * 32)
    cache = tmp_path / "cache"
    with pytest.raises(ValueError) as e:
        sources.ensure(bad, str(cache))
    msg = str(e.value)
    assert "checksum mismatch" in msg and "0" * 32 in msg and ".part-" not in msg
    assert str(cache / "downloads" / "ted_talks.tar.gz") in msg
    assert _md5(archive) in msg and "--download" in msg and "\n" not in msg
    assert not list((cache / "downloads").iterdir())  # no partial file left behind
    monkeypatch.setitem(spec.resources, "ted-talks", good)
    m = corpora.prepare_corpus("ted8-related", tmp_path / "out", download=True, cache=str(cache),
                               langs="aze,rus", vocab_size=VOCAB)
    assert m["counts"]["train"]["eng-aze"] > 0
    assert (cache / "ted_talks" / "all_talks_train.tsv").exists()
    assert (cache / sources.DONE_DIR / "ted-talks.done").exists()
    os.remove(cache / "downloads" / "ted_talks.tar.gz")
    os.remove(archive)  # done marker: nothing is fetched again
    sources.ensure(good, str(cache))


def test_a_python_without_tarfiles_data_filter_refuses_to_unpack_in_one_line(tmp_path, monkeypatch):
    """Python 3.8.0-3.8.16 (and 3.9-3.11 before their 2023 security releases) have no ``filter=`` for
    ``TarFile.extractall``: was a TypeError after the download. Now one line naming the fix; nothing is unpacked
    (extracting a downloaded archive without the filter could write outside the cache)."""
    (tmp_path / "a.tsv").write_text("x\ty\n")
    archive = tmp_path / "a.tar.gz"
    with tarfile.open(archive, "w:gz") as t:
        t.add(tmp_path / "a.tsv", arcname="a.tsv")
    monkeypatch.delattr(tarfile, "data_filter")
    with pytest.raises(ValueError, match=r"^cannot unpack .*a\.tar\.gz safely: this Python .* has no tarfile data "
                                         r"filter .*: upgrade Python, or unpack it by hand into .*dest$"):
        sources.unpack(str(archive), str(tmp_path / "dest"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.tar.gz", "a.tsv"]
