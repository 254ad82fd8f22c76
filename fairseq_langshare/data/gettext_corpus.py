"""English-centric multilingual corpus from the machine's gettext catalogues.

Reads ``LOCALE_DIR/*/LC_MESSAGES/*.mo`` (English msgid -> translated msgstr), cleans and
deduplicates, splits by a hash of the English side so that no held-out English string reaches
any training direction, trains a joint SentencePiece model and binarizes with fairseq.
Layout of the output directory: see ``prepare_gettext``.
"""

import codecs
import hashlib
import os
import re
import struct
import sys
from multiprocessing import Pool

from tqdm import tqdm

from ..option_ranges import Range, flag
from . import corpus_build, zero_shot
from .corpus_build import sha256 as _sha256, write_lines as _write_lines

PIVOT = "en"
MAX_CHARS = 300
HELDOUT_BUCKETS = 1000  # English hash buckets; [0, VALID_BUCKETS) valid, then test
VALID_BUCKETS = 50      # 5% of the English string space may go to valid ...
TEST_BUCKETS = 50       # ... and 5% to test; all 10% are kept out of training
TEST_SIZE = 500  # default cap per direction: directions above ~10k pairs fill it (see docs/data.md)
SPM_LINES_PER_LANG = 20000  # cap per language (incl. English) of the SentencePiece training text
SPLITS = ("train", "valid", "test")
DIRECTIONS = ("o2m", "m2o", "both")
SELECTIONS = ("largest", "spread")
RANGES = dict(  # each flag's valid values, for the command line and for library callers alike
    num_langs=Range(1, why="languages"), max_train_per_lang=Range(1, why="training pairs"),
    vocab_size=Range(16, why="SentencePiece pieces"), valid_size=Range(0, why="valid pairs per direction"),
    test_size=Range(0, why="test pairs per direction"), min_pairs=Range(1, why="pairs"),
    zero_shot_size=Range(1, why="sentences per direction and split"),
    zero_shot_min_size=Range(1, why="test sentences"), workers=Range(1, why="processes"))
_CONTROL = {i: " " for i in list(range(32)) + [127]}


# ----------------------------------------------------------------------------- reading


def read_mo(path):
    """(msgid, msgstr) pairs of a .mo file; header, plural and undecodable entries dropped,
    message contexts stripped."""
    with open(path, "rb") as f:
        data = f.read()
    endian = {b"\xde\x12\x04\x95": "<", b"\x95\x04\x12\xde": ">"}.get(data[:4])
    if endian is None or len(data) < 28:
        return []
    _, n, oo, to = struct.unpack(endian + "4I", data[4:20])
    raw = []
    for i in range(n):
        ml, mo = struct.unpack(endian + "2I", data[oo + 8 * i: oo + 8 * i + 8])
        tl, to_ = struct.unpack(endian + "2I", data[to + 8 * i: to + 8 * i + 8])
        raw.append((data[mo: mo + ml], data[to_: to_ + tl]))
    charset = "utf-8"
    for msgid, msgstr in raw:
        if msgid == b"":
            m = re.search(rb"charset=([-\w.:]+)", msgstr, re.I)
            if m:
                try:
                    charset = codecs.lookup(m.group(1).decode("ascii")).name
                except LookupError:
                    pass
    pairs = []
    for msgid, msgstr in raw:
        if msgid == b"" or b"\x00" in msgid or b"\x00" in msgstr:
            continue
        msgid = msgid.split(b"\x04", 1)[-1]
        try:
            pairs.append((msgid.decode(charset), msgstr.decode(charset)))
        except UnicodeDecodeError:
            continue
    return pairs


def clean(text):
    """Strip, turn newlines/tabs/control characters into spaces, collapse whitespace."""
    return " ".join(text.translate(_CONTROL).split())


def lang_code(dirname):
    """Language code of a locale directory: ``sr@latin`` -> ``sr_latin``."""
    return re.sub(r"[@\-,.]", "_", dirname)


def is_english(dirname):
    """True for the pivot: `en`, `en_GB`, `en@quot`, ..."""
    return dirname == PIVOT or dirname.startswith((PIVOT + "_", PIVOT + "@"))


def locale_dirs(locale_dir):
    """{code: dirname} of the non-English locale directories that hold .mo catalogues."""
    if not os.path.isdir(locale_dir):
        raise ValueError(f"locale directory {locale_dir} does not exist; pass --locale-dir")
    out = {}
    for name in sorted(os.listdir(locale_dir)):
        msgs = os.path.join(locale_dir, name, "LC_MESSAGES")
        if is_english(name) or not os.path.isdir(msgs):
            continue
        if any(f.endswith(".mo") for f in os.listdir(msgs)):
            out.setdefault(lang_code(name), name)
    return out


def load_locale(locale_dir, dirname):
    """(pairs {english: translation}, [relative .mo paths]) of one locale directory, cleaned and
    deduplicated on the English side (first translation in catalogue filename order wins)."""
    rel = sorted(
        os.path.join(dirname, "LC_MESSAGES", f)
        for f in os.listdir(os.path.join(locale_dir, dirname, "LC_MESSAGES"))
        if f.endswith(".mo")
    )
    pairs = {}
    for path in rel:
        for en, xx in read_mo(os.path.join(locale_dir, path)):
            en, xx = clean(en), clean(xx)
            if en and xx and en != xx and len(en) <= MAX_CHARS and len(xx) <= MAX_CHARS:
                pairs.setdefault(en, xx)
    return pairs, rel


def _count(job):
    return len(load_locale(*job)[0])


def list_languages(locale_dir="/usr/share/locale", min_pairs=500, workers=1):
    """Eligible languages as [(code, pairs)], largest first (ties by code)."""
    dirs = locale_dirs(locale_dir)
    jobs = [(locale_dir, d) for d in dirs.values()]
    bar = dict(total=len(jobs), desc="reading catalogues", unit="locale")
    if workers > 1:
        with Pool(workers) as pool:
            counts = list(tqdm(pool.imap(_count, jobs), **bar))
    else:
        counts = [_count(j) for j in tqdm(jobs, **bar)]
    sizes = [(c, n) for c, n in zip(dirs, counts) if n >= min_pairs]
    return sorted(sizes, key=lambda cn: (-cn[1], cn[0]))


def select(sizes, num_langs, selection):
    """Codes of ``num_langs`` languages from [(code, n)] sorted by size: the largest, or evenly
    spaced ranks from the largest to the smallest ("spread")."""
    if num_langs > len(sizes):
        raise ValueError(
            f"--num-langs {num_langs} exceeds the {len(sizes)} eligible languages; "
            "run `langshare prepare-gettext --list` to see them")
    if selection == "largest" or num_langs == 1:
        ranks = range(num_langs)
    else:
        ranks = sorted({round(i * (len(sizes) - 1) / (num_langs - 1)) for i in range(num_langs)})
    return [sizes[r][0] for r in ranks]


# ----------------------------------------------------------------------------- splitting


def _hash(en):
    return hashlib.sha1(en.encode("utf-8")).hexdigest()


def split_language(pairs, valid_size, test_size, max_train=None):
    """{split: [(en, xx)]} of one language; all ordered by the hash of the English side. The
    buckets decide the splits, the sizes only cap valid and test: the training split does not
    depend on ``valid_size``/``test_size``, and a smaller test set is a prefix of a larger one."""
    by_split = {s: [] for s in SPLITS}
    for en in sorted(pairs, key=lambda e: (_hash(e), e)):
        bucket = int(_hash(en)[:8], 16) % HELDOUT_BUCKETS
        split = ("valid" if bucket < VALID_BUCKETS else
                 "test" if bucket < VALID_BUCKETS + TEST_BUCKETS else "train")
        by_split[split].append((en, pairs[en]))
    by_split["valid"] = by_split["valid"][:valid_size]
    by_split["test"] = by_split["test"][:test_size]
    if max_train is not None:
        by_split["train"] = by_split["train"][:max_train]
    return by_split


def check_no_leak(splits):
    """Raise if a valid/test English string occurs in any training direction or valid and test
    share an English string. ``splits``: {lang: {split: [(en, xx)]}}."""
    train = {en for s in splits.values() for en, _ in s["train"]}
    for lang, s in splits.items():
        valid, test = {en for en, _ in s["valid"]}, {en for en, _ in s["test"]}
        if valid & train or test & train or valid & test:
            raise RuntimeError(f"held-out English sentences leak into training for '{lang}'")


def direction_pairs(languages, direction):
    o2m = [f"{PIVOT}-{x}" for x in languages]
    m2o = [f"{x}-{PIVOT}" for x in languages]
    return {"o2m": o2m, "m2o": m2o, "both": o2m + m2o}[direction]


# ----------------------------------------------------------------------------- spm + binarize


def train_spm(tmp, splits, vocab_size):
    """Joint unigram model on capped per-language training text (English counted once)."""
    english, seen = [], set()
    for s in splits.values():
        for en, _ in s["train"]:
            if en not in seen:
                seen.add(en)
                english.append(en)
    english.sort(key=lambda e: (_hash(e), e))
    text = english[:SPM_LINES_PER_LANG]
    for s in splits.values():
        text += [xx for _, xx in s["train"][:SPM_LINES_PER_LANG]]
    return corpus_build.train_spm_model(tmp, text, vocab_size)


# ----------------------------------------------------------------------------- main entry


def _config(langs, num_langs, selection, direction, vocab_size, valid_size, test_size,
            max_train_per_lang, min_pairs, locale_dir, zero_shot_spec=None, zero_shot_size=zero_shot.SIZE,
            zero_shot_min_size=zero_shot.MIN_SIZE):
    given = langs
    if isinstance(langs, str):
        langs = langs.split(",")
    if langs is not None:
        langs = [lang_code(c.strip()) for c in langs if c.strip()]
        if not langs:
            said = given if isinstance(given, str) else ",".join(given)
            raise ValueError(f"--langs {said!r} names no language: pass comma-separated codes (langshare "
                             "prepare-gettext --list shows them)")
    if langs is not None and num_langs is not None:
        raise ValueError("pass either --langs or --num-langs, not both")
    if selection not in SELECTIONS:
        raise ValueError(f"unknown selection '{selection}': choose one of {', '.join(SELECTIONS)}")
    if direction not in DIRECTIONS:
        raise ValueError(f"unknown direction '{direction}': choose one of {', '.join(DIRECTIONS)}")
    for name, value in [("num_langs", num_langs), ("max_train_per_lang", max_train_per_lang),
                        ("vocab_size", vocab_size), ("valid_size", valid_size), ("test_size", test_size),
                        ("min_pairs", min_pairs), ("zero_shot_size", zero_shot_size),
                        ("zero_shot_min_size", zero_shot_min_size)]:
        RANGES[name].check(flag(name), value)
    cfg = dict(langs=langs, num_langs=num_langs,
               selection=selection, direction=direction, vocab_size=vocab_size,
               valid_size=valid_size, test_size=test_size,
               max_train_per_lang=max_train_per_lang, min_pairs=min_pairs,
               locale_dir=os.path.abspath(locale_dir))
    if zero_shot_spec:  # only then: a corpus built without zero-shot sets keeps its config
        cfg.update(zero_shot=zero_shot_spec, zero_shot_size=zero_shot_size, zero_shot_min_size=zero_shot_min_size)
    return cfg


def _resolve_languages(cfg, workers):
    """{code: (pairs, rel paths)} of the requested languages, largest first."""
    locale_dir, min_pairs = cfg["locale_dir"], cfg["min_pairs"]
    dirs = locale_dirs(locale_dir)
    if cfg["langs"] is None:
        sizes = list_languages(locale_dir, min_pairs, workers)
        if not sizes:
            raise ValueError(f"no language in {locale_dir} has {min_pairs} pairs; "
                             "lower --min-pairs")
        codes = select(sizes, cfg["num_langs"] or len(sizes), cfg["selection"])
    else:
        codes = cfg["langs"]
        if any(is_english(c) for c in codes):
            raise ValueError(f"'{PIVOT}' is the pivot language and cannot be a target; "
                             "remove it from --langs")
        if len(set(codes)) != len(codes):
            raise ValueError(f"duplicate language codes in --langs {','.join(codes)}")
        for c in codes:
            if c not in dirs:
                raise ValueError(
                    f"unknown language '{c}': not among the non-English gettext catalogues in "
                    f"{locale_dir} (or fewer than {min_pairs} pairs); "
                    "run `langshare prepare-gettext --list` to see eligible codes")
    loaded = {c: load_locale(locale_dir, dirs[c])
              for c in tqdm(codes, desc="reading catalogues", unit="locale")}
    for c, (pairs, _) in loaded.items():
        if len(pairs) < min_pairs:
            raise ValueError(
                f"language '{c}' has only {len(pairs)} pairs in {locale_dir} (fewer than "
                f"--min-pairs {min_pairs}); run `langshare prepare-gettext --list` to see "
                "eligible codes")
    return dict(sorted(loaded.items(), key=lambda kv: (-len(kv[1][0]), kv[0])))


def prepare_gettext(out_dir, langs=None, num_langs=None, selection="largest", direction="o2m",
                    vocab_size=8000, valid_size=200, test_size=TEST_SIZE, max_train_per_lang=None,
                    min_pairs=500, locale_dir="/usr/share/locale", workers=1, force=False, zero_shot_spec=None,
                    zero_shot_size=zero_shot.SIZE, zero_shot_min_size=zero_shot.MIN_SIZE):
    """Build the gettext corpus in ``out_dir`` and return its manifest.

    ``langs`` (codes, list or comma string) or ``num_langs`` picked by ``selection``; neither:
    all eligible languages. Writes manifest.json, langs.txt, lang_pairs.txt,
    raw/{split}.{src}-{tgt}.{lang}, spm.model/spm.vocab, spm/{split}.{src}-{tgt}.{lang} and
    bin/ (fairseq mmap data, joint bin/dict.txt and bin/dict.{lang}.txt per language).
    ``zero_shot_spec`` (``all``, languages or directions): also valid and test sets of those
    non-English directions, at most ``zero_shot_size`` sentences each (``data.zero_shot``).
    Built in ``out_dir.tmp-<pid>`` and renamed at the end; an existing build with the same config
    is returned as is."""
    RANGES["workers"].check("--workers", workers)
    cfg = _config(langs, num_langs, selection, direction, vocab_size, valid_size, test_size,
                  max_train_per_lang, min_pairs, locale_dir, zero_shot_spec, zero_shot_size, zero_shot_min_size)
    out_dir = os.path.abspath(out_dir)
    old = corpus_build.existing_build(out_dir, cfg, force)
    if old is not None:
        if zero_shot_spec:
            print(zero_shot.summary(old))
        return old

    loaded = _resolve_languages(cfg, workers)
    languages = list(loaded)
    splits = {c: split_language(p, valid_size, test_size, max_train_per_lang)
              for c, (p, _) in loaded.items()}
    check_no_leak(splits)
    lang_pairs = direction_pairs(languages, direction)
    if zero_shot_spec:
        zero_shot.directions(zero_shot_spec, languages)  # a bad spec fails before any work

    with corpus_build.building(out_dir) as tmp:
        counts = {s: {} for s in SPLITS}
        present = {}
        for pair in lang_pairs:
            src, tgt = pair.split("-")
            xx = tgt if src == PIVOT else src
            present[pair] = {}
            for split in SPLITS:
                rows = splits[xx][split]
                side = {PIVOT: [en for en, _ in rows], xx: [t for _, t in rows]}
                for lang in (src, tgt):
                    _write_lines(os.path.join(tmp, "raw", f"{split}.{pair}.{lang}"), side[lang])
                counts[split][pair] = len(rows)
                present[pair][split] = bool(rows)

        stored, extra = list(lang_pairs), {}
        if zero_shot_spec:  # test-only directions, joined on the held-out English strings
            held_out = {c: split_language(p, len(p), len(p), max_train_per_lang) for c, (p, _) in loaded.items()}
            pairs, zs_present, zs_counts, extra = zero_shot.add_test_directions(
                tmp, held_out, zero_shot_spec, languages, zero_shot_size, zero_shot_min_size)
            stored += pairs
            present.update(zs_present)
            for split, n in zs_counts.items():
                counts[split].update(n)
        sp = train_spm(tmp, splits, vocab_size)
        corpus_build.encode_and_binarize(tmp, stored, present, workers)
        all_langs = [PIVOT] + languages
        manifest = {
            "version": 1, "pivot": PIVOT, "languages": languages, "langs": all_langs,
            "lang_pairs": lang_pairs, "direction": direction, "counts": counts,
            "train_pairs_per_language": {c: len(splits[c]["train"]) for c in languages},
            "pairs_per_language": {c: len(loaded[c][0]) for c in languages},
            "inputs": {rel: _sha256(os.path.join(cfg["locale_dir"], rel))
                       for c in languages for rel in loaded[c][1]},
            "split": {"hash": "sha1(english) % 1000", "valid_buckets": [0, VALID_BUCKETS],
                      "test_buckets": [VALID_BUCKETS, VALID_BUCKETS + TEST_BUCKETS]},
            "config": cfg, "spm_model": "spm.model", "vocab_size": sp.get_piece_size(),
            "dict": "bin/dict.txt", "data_bin": "bin", **extra,
        }
        corpus_build.finish(tmp, manifest, all_langs, lang_pairs)
    if zero_shot_spec:
        print(zero_shot.summary(manifest))
    return manifest


# ----------------------------------------------------------------------------- CLI


def add_subcommand(subparsers):
    """Register ``prepare-gettext`` on an argparse subparsers object."""
    p = subparsers.add_parser(
        "prepare-gettext", help="build the offline English-centric corpus from gettext catalogues",
        description=__doc__.split("\n\n")[0] + " Held out: 10% of the English strings (sha1 "
        "buckets), never in any training direction. Re-running with the same flags is a no-op.")
    p.add_argument("--out", help="output directory (required unless --list)")
    p.add_argument("--langs", help="comma-separated language codes, e.g. fr,de,sr_latin "
                   "(locale dir name with @ -> _)")
    p.add_argument("--num-langs", type=RANGES["num_langs"].of(int), help="number of languages to pick by --selection; "
                   "with neither --langs nor --num-langs: all eligible languages")
    p.add_argument("--selection", choices=SELECTIONS, default="largest",
                   help="with --num-langs: the N largest, or N spread evenly over the size ranks "
                   "from high to low resource (default: %(default)s)")
    p.add_argument("--direction", choices=DIRECTIONS, default="o2m",
                   help="o2m: en->xx, m2o: xx->en, both: both (default: %(default)s)")
    p.add_argument("--vocab-size", type=RANGES["vocab_size"].of(int), default=8000,
                   help="joint SentencePiece vocabulary size (default: %(default)s)")
    p.add_argument("--valid-size", type=RANGES["valid_size"].of(int), default=200,
                   help="max valid pairs per direction (default: %(default)s)")
    p.add_argument("--test-size", type=RANGES["test_size"].of(int), default=TEST_SIZE,
                   help="max test pairs per direction; fewer where the test hash buckets hold fewer; the "
                   "training data and the SentencePiece model do not depend on it (default: %(default)s)")
    p.add_argument("--max-train-per-lang", type=RANGES["max_train_per_lang"].of(int),
                   help="cap on training pairs per language (default: no cap)")
    p.add_argument("--min-pairs", type=RANGES["min_pairs"].of(int), default=500, help="languages with fewer cleaned "
                   "pairs are not eligible (default: %(default)s)")
    p.add_argument("--locale-dir", default="/usr/share/locale",
                   help="gettext catalogue root (default: %(default)s)")
    p.add_argument("--workers", type=RANGES["workers"].of(int), default=1, help="processes/threads for reading, "
                   "encoding and binarization; the output does not depend on it "
                   "(default: %(default)s)")
    p.add_argument("--zero-shot", dest="zero_shot", metavar="SPEC",
                   help="also build valid and test sets of non-English (zero-shot) directions, none of whose "
                   "sentences occurs in training: 'all' (every ordered pair of the selected languages), languages "
                   "(fr,nb,th: every ordered pair among them) or directions (fr-nb,th-sr); evaluate them with "
                   "`langshare evaluate --directions` (docs/data.md, 'Zero-shot directions')")
    p.add_argument("--zero-shot-size", type=RANGES["zero_shot_size"].of(int), default=zero_shot.SIZE,
                   help="max sentences per zero-shot direction in valid and in test (default: %(default)s)")
    p.add_argument("--zero-shot-min-size", type=RANGES["zero_shot_min_size"].of(int), default=zero_shot.MIN_SIZE,
                   help="leave out a zero-shot direction with fewer test sentences (default: %(default)s)")
    p.add_argument("--force", action="store_true", help="replace an existing --out")
    p.add_argument("--list", action="store_true",
                   help="print the eligible language codes with their pair counts and exit")
    p.set_defaults(func=_run)


def _run(args):
    if args.list:
        sizes = list_languages(args.locale_dir, args.min_pairs, args.workers)
        for code, n in sizes:
            print(f"{code}\t{n}")
        print(f"{len(sizes)} languages, {sum(n for _, n in sizes)} pairs", file=sys.stderr)
        return 0
    if not args.out:
        raise ValueError("--out is required (the output directory)")
    prepare_gettext(
        args.out, langs=args.langs, num_langs=args.num_langs, selection=args.selection,
        direction=args.direction, vocab_size=args.vocab_size, valid_size=args.valid_size,
        test_size=args.test_size, max_train_per_lang=args.max_train_per_lang,
        min_pairs=args.min_pairs, locale_dir=args.locale_dir, workers=args.workers,
        force=args.force, zero_shot_spec=args.zero_shot, zero_shot_size=args.zero_shot_size,
        zero_shot_min_size=args.zero_shot_min_size)
    return 0
