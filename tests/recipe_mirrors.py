"""Tiny mirrors of the papers' corpus releases, with the real layouts and file names, for tests.

``make_mirror(corpus_name, root, lines_per_pair=300)`` writes, under ``root``, every file
``langshare prepare-corpus CORPUS --mirror root`` reads (all languages of the corpus), in the
release's own format (aligned text, gzipped TSV, TMX, IWSLT tags/XML, the multi-way TED tables,
Flores-101 per-language files, sacreBLEU's cache layout). The text is synthetic and deterministic:
a base sentence rendered per language (English as is, other languages with a language suffix on
every word, some also reversed), so the same base sentence is a real translation pair in every
file. Planted in the first training source of every pair: 5 exact duplicates, 4 pairs copied
from that pair's valid set and 2 from its test set (``PLANTED``), a decomposed accent and a
zero-width space (normalisation). Registration-only sources (``manual``) are left out, as in a
typical mirror.

``prepare_tiny(corpus_name, root)`` builds a tiny mirror and prepares a small corpus from it
(subset of languages, vocabulary of 200) for training tests; returns the corpus directory.
"""

import gzip
import hashlib
import html
import os
import random
from pathlib import Path

from fairseq_langshare.recipes import corpus_specs
from fairseq_langshare.recipes.corpora import get_spec, prepare_corpus

WORDS = ("cat dog house tree red blue big small one two three open close file edit view help "
         "save print quit new copy paste cut find next back home stop play river stone light dark "
         "green white old young road city water fire bird fish book table chair door window "
         "music song night day sun moon star rain snow wind cloud hill field flower garden").split()
HELDOUT_LINES = 30
PLANTED = {"duplicate": 5, "valid_overlap": 4, "test_overlap": 2}
# a small, fast default subset per corpus for training tests (every format/source kind covered
# where it matters: zero-shot for opus100, sacreBLEU + TMX + TSV for wmt14, IWSLT XML for public24)
TINY_LANGS = {"opus100": ["de", "fr", "nl"], "wmt14": ["de", "hi", "tr"],
              "ted8-related": ["aze", "bel", "tur", "rus"], "ted8-diverse": ["bos", "mar", "fra", "kor"],
              "public24": ["vi", "ja", "hi"], "lsl10": ["de", "ja", "sw"]}


def _rng(*key):
    return random.Random(int(hashlib.sha1("|".join(map(str, key)).encode()).hexdigest()[:12], 16))


def base_sentences(key, n):
    out = []
    for i in range(n):
        r = _rng(key, i)
        out.append(" ".join(r.choice(WORDS) for _ in range(r.randint(4, 10))))
    return out


def render(base, lang, pivot):
    """A deterministic 'translation' of a base sentence into ``lang``."""
    if lang == pivot:
        return base
    words = [f"{w}{lang}" for w in base.split()]
    return " ".join(reversed(words) if lang[-1] in "aeiou" else words)


def _open(path, mode="wt"):
    path.parent.mkdir(parents=True, exist_ok=True)
    if str(path).endswith(".gz"):
        return gzip.open(path, mode, encoding="utf-8")
    return open(path, mode, encoding="utf-8")


def _write_lines(path, lines):
    with _open(path) as f:
        for line in lines:
            f.write(line + "\n")


class _Mirror:
    def __init__(self, root, spec, lines_per_pair):
        self.root, self.spec, self.n = Path(root), spec, lines_per_pair
        self.groups = {}     # key -> [base sentences]
        self.planted = set()
        self.files = {}      # source files -> (source, rows)

    def key(self, source, split):
        if source.name == "flores101":
            return os.path.dirname(source.files[0])
        if source.fmt == "ted":
            return source.files[0]
        return "|".join(source.files)

    def add(self, source, split, n, plant_from=None):
        key = self.key(source, split)
        if key not in self.groups:
            self.groups[key] = base_sentences(key, n)
        rows = self.groups[key]
        if plant_from and key not in self.planted:
            self.planted.add(key)
            rows[0] = rows[0] + " cafe\u0301"
            rows[1] = rows[1].replace(" ", "  ", 1) + "\u200b"
            valid, test = plant_from
            rows += rows[2:2 + PLANTED["duplicate"]]
            rows += valid[:PLANTED["valid_overlap"]] + test[:PLANTED["test_overlap"]]
        self.files[source.files] = (source, rows)
        return rows

    def write(self):
        pivot = self.spec.pivot
        for source, rows in self.files.values():
            a, b = source.langs
            paths = [self.root / f for f in source.files]
            if source.fmt == "text":
                for path, lang in zip(paths, (a, b)):
                    _write_lines(path, (render(r, lang, pivot) for r in rows))
            elif source.fmt == "iwslt-tags":
                for path, lang in zip(paths, (a, b)):
                    lines = ["<url>http://www.ted.com/talks/1</url>", "<talkid>1</talkid>"]
                    lines += [render(r, lang, pivot) for r in rows]
                    _write_lines(path, lines)
            elif source.fmt == "iwslt-xml":
                for path, lang in zip(paths, (a, b)):
                    lines = ['<?xml version="1.0" encoding="UTF-8"?>', "<mteval>",
                             f'<srcset setid="iwslt2017" srclang="{lang}">', '<doc docid="1">']
                    lines += [f'<seg id="{i + 1}"> {html.escape(render(r, lang, pivot))} </seg>'
                              for i, r in enumerate(rows)]
                    _write_lines(path, lines + ["</doc>", "</srcset>", "</mteval>"])
            elif source.fmt == "tsv":
                i, j = source.columns or (0, 1)
                width = max(i, j) + 1

                def row(r):
                    cols = ["-"] * width
                    cols[i], cols[j] = render(r, a, pivot), render(r, b, pivot)
                    return "\t".join(cols)
                _write_lines(paths[0], (row(r) for r in rows))
            elif source.fmt == "tmx":
                lines = ['<?xml version="1.0" encoding="utf-8"?>', '<tmx version="1.4">',
                         '<header srclang="en"/>', "<body>"]
                for r in rows:
                    lines.append("<tu>" + "".join(
                        f'<tuv xml:lang="{lang}"><seg>{html.escape(render(r, lang, pivot))}'
                        "</seg></tuv>" for lang in (a, b)) + "</tu>")
                _write_lines(paths[0], lines + ["</body>", "</tmx>"])
            elif source.fmt == "ted":
                self._write_ted(paths[0], rows)
            else:
                raise ValueError(f"no mirror writer for format {source.fmt}")

    def _write_ted(self, path, rows):
        cols = list(corpus_specs.TED_COLUMNS.items())
        header = ["talk_name"] + [c for _, c in cols] + ["zz"]
        lines = ["\t".join(header)]
        for i, r in enumerate(rows):
            cells = ["talk"]
            for code, _ in cols:
                null = code != "eng" and _rng("ted-null", r, code).random() < 0.1
                cells.append("__NULL__" if null else render(r, code, "eng"))
            lines.append("\t".join(cells + ["_ _ NULL _ _"]))
        _write_lines(path, lines)


def make_mirror(corpus_name, root, lines_per_pair=300):
    """Write a tiny mirror of ``corpus_name`` under ``root`` (all its languages); return root."""
    spec = get_spec(corpus_name)
    m = _Mirror(root, spec, lines_per_pair)
    direction = next(iter(spec.directions))
    layout = spec.layout(spec, list(spec.languages), direction)
    full = spec.layout(spec, list(spec.languages), "m2m") if spec.name == "lsl10" else layout
    for pair, splits in full.stored.items():
        held = {}
        for split in ("valid", "test"):
            for s in splits.get(split, ()):
                held.setdefault(split, m.add(s, split, HELDOUT_LINES))
        train = [s for s in splits.get("train", ())
                 if not spec.resources[s.resource].manual]
        if not train:
            continue
        share = max(40, lines_per_pair // len(train))
        plant = (held.get("valid", []), held.get("test", []))
        for k, s in enumerate(train):
            n = share * (2 if s.quality == "lq" else 1)
            m.add(s, "train", n, plant_from=plant if k == 0 else None)
    m.write()
    return str(root)


def prepare_tiny(corpus_name, root, out=None, langs=None, vocab_size=200, lines_per_pair=300,
                 **kwargs):
    """A tiny prepared corpus of ``corpus_name`` (languages ``TINY_LANGS`` unless given) built from
    a tiny mirror in ``root/mirror-<corpus>``; returns the corpus directory."""
    root = Path(root)
    mirror = root / f"mirror-{corpus_name}"
    if not mirror.exists():
        make_mirror(corpus_name, mirror, lines_per_pair)
    out = Path(out) if out else root / f"corpus-{corpus_name}"
    prepare_corpus(corpus_name, out, mirror=str(mirror), langs=langs or TINY_LANGS[corpus_name],
                   vocab_size=vocab_size, **kwargs)
    return str(out)
