"""Zero-shot test (and valid) sets of an English-centric corpus, built offline.

The gettext catalogues are multi-way parallel: one English msgid has a translation in many
languages. Joining two languages' held-out pairs on their English side gives a non-English test
set, a-b, for a direction no training direction covers. The English strings of the valid and test
hash buckets never enter training (``gettext_corpus.split_language``); on top of that a row is
dropped when either of its sentences occurs anywhere in training (any language, either side: short
strings such as "OK" or a program name recur under many msgids), when its two sentences are equal
(a copy would pass for a translation), or when one of them already occurs in the set. Rows are
ordered by the hash of their English string, as the supervised sets are, so a smaller
``size`` gives a prefix of a larger one.

A language pair is stored once (``raw/{split}.{a}-{b}.{a|b}``, binarized like the rest) and serves
both directions; the manifest lists the directions in ``zero_shot_pairs`` (the key the papers'
corpora use) and the valid/test sizes in ``counts``.
"""

import itertools
from typing import Dict, List, Sequence, Tuple

from .corpus_build import write_pair_files

PIVOT = "en"
SIZE = 200      # default cap on sentences per zero-shot direction and split
MIN_SIZE = 20   # a direction with fewer test sentences is left out (and listed as such)
HELD_OUT = ("valid", "test")


def directions(spec: str, languages: Sequence[str]) -> List[str]:
    """The zero-shot directions ``spec`` names among ``languages`` (the corpus's, English excluded):
    ``all`` (every ordered pair), languages (``fr,nb,th``: every ordered pair among them) or
    directions (``fr-nb,th-sr``)."""
    items = [s.strip() for s in str(spec).split(",") if s.strip()]
    if not items:
        raise ValueError("--zero-shot is empty: pass all, languages (fr,nb,th) or directions (fr-nb,th-sr)")
    if items == ["all"]:
        items = list(languages)
    if all("-" in s for s in items):
        out = items
    elif any("-" in s for s in items):
        raise ValueError(f"--zero-shot {spec}: give either languages (fr,nb) or directions (fr-nb), not both")
    else:
        if len(items) < 2:
            raise ValueError(f"--zero-shot {spec}: name at least two languages (or all)")
        out = [f"{a}-{b}" for a, b in itertools.permutations(items, 2)]
    for d in out:
        parts = d.split("-")
        if len(parts) != 2 or parts[0] == parts[1]:
            raise ValueError(f"--zero-shot: bad direction {d!r}; write SRC-TGT with two different languages")
        for lang in parts:
            if lang == PIVOT:
                raise ValueError(f"--zero-shot: {d} has English, whose directions are trained; name non-English "
                                 f"languages")
            if lang not in languages:
                raise ValueError(f"--zero-shot: language {lang!r} is not one of the corpus's ({', '.join(languages)}); "
                                 f"add it to --langs or leave it out of --zero-shot")
    if len(set(out)) != len(out):
        raise ValueError(f"--zero-shot {spec}: a direction is named twice")
    return out


def training_sentences(splits: Dict[str, Dict[str, List[Tuple[str, str]]]]) -> set:
    """Every sentence of every training pair, English and translation, of every language."""
    return {s for by_split in splits.values() for pair in by_split["train"] for s in pair}


def join(splits, a: str, b: str, split: str, size: int, training: set) -> List[Tuple[str, str]]:
    """(a sentence, b sentence) rows of ``split``: the English strings both languages translate in
    that held-out split, in hash order, without a sentence of ``training``, a copy or a repeat."""
    theirs = dict(splits[b][split])
    rows, seen = [], set()
    for en, xa in splits[a][split]:
        xb = theirs.get(en)
        if xb is None or xa == xb or xa in training or xb in training or xa in seen or xb in seen:
            continue
        seen.update((xa, xb))
        rows.append((xa, xb))
        if len(rows) == size:
            break
    return rows


def build(splits, wanted: Sequence[str], size: int = SIZE, min_size: int = MIN_SIZE):
    """({stored pair a-b: {split: rows}}, {direction: test size of the directions left out}) for the
    ``wanted`` directions. ``splits``: {lang: {split: [(english, translation)]}} uncapped in valid and
    test (``split_language`` with large sizes), the training split as trained."""
    training = training_sentences(splits)
    stored, left_out = {}, {}
    for d in wanted:
        a, b = d.split("-")
        key = "-".join(sorted((a, b)))
        if key not in stored:
            x, y = key.split("-")
            stored[key] = {s: join(splits, x, y, s, size, training) for s in HELD_OUT}
        if len(stored[key]["test"]) < min_size:
            left_out[d] = len(stored[key]["test"])
    kept = {"-".join(sorted(d.split("-"))) for d in wanted if d not in left_out}
    return {k: v for k, v in stored.items() if k in kept}, left_out


def check_disjoint(sets, splits) -> None:
    """Raise if a zero-shot sentence occurs in training (the guarantee ``build`` gives)."""
    training = training_sentences(splits)
    for pair, by_split in sets.items():
        for split, rows in by_split.items():
            leaked = [s for row in rows for s in row if s in training]
            if leaked:
                raise RuntimeError(f"zero-shot {split} set {pair} holds a training sentence: {leaked[0]!r}")


def add_test_directions(tmp: str, splits, spec: str, languages: Sequence[str], size: int = SIZE,
                        min_size: int = MIN_SIZE):
    """Write the zero-shot sets of ``spec`` into ``raw/`` of the corpus being built in ``tmp``.
    Returns (stored pairs, {pair: {split: present}}, {split: {direction: sentences}}, the manifest's
    ``zero_shot_pairs`` and ``zero_shot`` entries)."""
    wanted = directions(spec, languages)
    sets, left_out = build(splits, wanted, size, min_size)
    check_disjoint(sets, splits)
    present, counts = {}, {s: {} for s in HELD_OUT}
    for pair, by_split in sets.items():
        present[pair] = {"train": False}
        for split, rows in by_split.items():
            present[pair][split] = bool(rows)
            if rows:
                write_pair_files(tmp, split, pair, rows)
    kept = [d for d in wanted if d not in left_out]
    for d in kept:
        pair = "-".join(sorted(d.split("-")))
        for split in HELD_OUT:
            counts[split][d] = len(sets[pair][split])
    manifest = {
        "zero_shot_pairs": kept,
        "zero_shot": {"spec": spec, "size": size, "min_size": min_size, "left_out": left_out,
                      "construction": "held-out English strings joined across languages; rows with a sentence "
                                      "that occurs in any training pair, a copy or a repeat dropped"},
    }
    return list(sets), present, counts, manifest


def summary(manifest) -> str:
    """The console line of a build with --zero-shot: the directions kept (with their test sizes) out of those
    requested, and those left out with why."""
    kept, entry = manifest["zero_shot_pairs"], manifest["zero_shot"]
    left_out, tests = entry["left_out"], manifest["counts"]["test"]
    line = (f"zero-shot directions (--zero-shot {entry['spec']}): kept {len(kept)} of {len(kept) + len(left_out)}"
            + (" (" + ", ".join(f"{d} test {tests[d]}" for d in kept) + ")" if kept else ""))
    if left_out:
        line += ("; left out " + ", ".join(f"{d} test {n}" for d, n in left_out.items()) + ": fewer test sentences "
                 f"than --zero-shot-min-size {entry['min_size']} (rows need a held-out English string both "
                 "languages translate); lower it or choose larger languages")
    return line
