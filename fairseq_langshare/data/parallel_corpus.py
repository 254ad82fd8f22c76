"""``langshare prepare-data``: a prepared corpus from the user's own parallel text.

Inputs: ``SRC-TGT.tsv`` files (training data; valid and test are held out), ``SPLIT.SRC-TGT.tsv``
(given splits), fairseq's plain-text layout ``SPLIT.SRC-TGT.SRC``/``.TGT`` or directories of
these (``.gz``/``.xz`` too; see ``parallel_files``). Any set of directions. A direction with
valid/test files and no training data is a test-only (zero-shot) direction: binarized for
evaluation, listed in the manifest's ``zero_shot_pairs``, not in ``lang_pairs.txt``.

The pipeline is the one ``prepare-corpus`` and ``prepare-gettext`` use (``corpus_build``):
normalisation (NFC, control characters, whitespace), length and length-ratio filters, held-out
sets by a hash of the source side (the pivot's side where there is one) where none are given (``heldout``), removal of exact duplicates
and of training pairs that share a sentence with any valid/test set of that language, one joint
SentencePiece model on temperature-sampled text (or ``--spm-model``), binarisation with one joint
dictionary, ``manifest.json``, ``langs.txt``, ``lang_pairs.txt``. Streaming: memory does not grow
with the corpus except the 8-byte fingerprint of each kept pair of the largest direction.
"""

import os
import sys

from tqdm import tqdm

from ..option_ranges import Range, flag
from . import corpus_build as cb
from . import heldout, parallel_files
from .parallel_files import InputError

SPLITS = cb.SPLITS
DEFAULTS = dict(valid_size=500, test_size=1000, min_chars=1, max_chars=1000, max_ratio=9.0, vocab_size=8000,
                spm_sentences=300_000, spm_temperature=5.0)
NORMALIZATION = "nfc+control+whitespace"
RANGES = dict(  # each flag's valid values, for the command line and for library callers alike
    valid_size=Range(0, why="valid pairs per direction"), test_size=Range(0, why="test pairs per direction"),
    min_chars=Range(1, why="characters"), max_chars=Range(1, why="characters"),
    max_ratio=Range(1, why="a ratio of lengths, longer over shorter"), vocab_size=Range(16, why="SentencePiece pieces"),
    spm_sentences=Range(1, why="sentences"), spm_temperature=Range(0, low_open=True, why="a sampling temperature"),
    workers=Range(1, why="processes"))


# ----------------------------------------------------------------------------- checks


def _inside(path, parent):
    path, parent = os.path.realpath(path), os.path.realpath(parent)
    return path == parent or path.startswith(parent.rstrip(os.sep) + os.sep)


def check_out(out_dir, inputs, found):
    """Refuse an --out that is an input, inside an input directory, or holds an input."""
    for given in list(inputs) + [p for inp in found.values() for p in inp.paths]:
        if _inside(out_dir, given):
            raise InputError(f"--out {out_dir} is the input {given} or inside it; write the corpus to a directory "
                             "outside the inputs (e.g. beside them)")
        if _inside(given, out_dir):
            raise InputError(f"input {given} is inside --out {out_dir}, which the build replaces; move the input or "
                             "choose another --out")


def _config(found, spm_model, **flags):
    for name, value in flags.items():
        RANGES[name].check(flag(name), value)
    if flags["max_chars"] < flags["min_chars"]:
        raise ValueError(f"--max-chars {flags['max_chars']} is below --min-chars {flags['min_chars']}; "
                         "pass max >= min")
    if spm_model is not None:
        cb.check_spm_model(spm_model)
    cfg = dict(flags, normalization=NORMALIZATION, spm_model=os.path.abspath(spm_model) if spm_model else None,
               inputs=[dict(split=i.split, direction=i.direction, paths=list(i.paths),
                            held_out_here=i.held_out_here) for i in found.values()])
    if spm_model:
        cfg.pop("vocab_size")  # the given model decides
    return cfg


def plan_directions(found):
    """(trained directions, test-only directions, {direction: {split: ParallelInput}})."""
    by_direction = {}
    for inp in found.values():
        by_direction.setdefault(inp.direction, {})[inp.split] = inp
    trained = [d for d, s in by_direction.items() if "train" in s]
    if not trained:
        raise InputError("no training data among the inputs (only valid/test files); add SRC-TGT.tsv or "
                         "train.SRC-TGT.* files")
    test_only = [d for d, s in by_direction.items() if "train" not in s]
    return trained, test_only, by_direction


# ----------------------------------------------------------------------------- per-direction passes


def _normalised(inp):
    for a, b in parallel_files.read_pairs(inp):
        yield cb.normalize(a), cb.normalize(b)


def _read_direction(job):
    """Pass 1 of one direction: given valid/test sets written to raw/ (normalised, pairs with an
    empty side dropped); training pairs normalised, length-filtered and written to work/, the
    lowest-hash candidates for carved held-out sets kept."""
    tmp, direction, inputs = job["tmp"], job["direction"], job["inputs"]
    out = dict(direction=direction, read={}, removed={}, given={}, picked={"valid": [], "test": []}, n_train=0)
    for split in ("valid", "test"):
        if split in inputs:
            inp = inputs[split]
            rows, n = [], 0
            for n, (a, b) in enumerate(_normalised(inp), 1):
                why = _empty_side(a, b)
                if why is None:
                    rows.append((a, b))
                else:
                    out["removed"][f"{split}_{why}"] = out["removed"].get(f"{split}_{why}", 0) + 1
            out["read"][split] = n
            out["given"][split] = rows
    if "train" in inputs:
        inp = inputs["train"]
        lf = cb.LengthFilter(job["min_chars"], job["max_chars"], job["max_ratio"])
        picker = heldout.HeldOutPicker(*job["carve"])
        key_is_source = job["key_side"] == 0
        n = kept = 0
        with open(os.path.join(tmp, "work", f"{direction}.tsv"), "w", encoding="utf-8") as f, \
                cb.line_bar(job, f"reading {direction}") as bar:
            for n, (a, b) in enumerate(_normalised(inp), 1):
                if not n % 10000:
                    bar.update(10000)
                why = _empty_side(a, b) or lf.reason(a, b)
                if why is not None:
                    out["removed"][why] = out["removed"].get(why, 0) + 1
                    continue
                f.write(f"{a}\t{b}\n")  # normalised text has no tab
                picker.offer(a if key_is_source else b, a, b, b if key_is_source else a)
                kept += 1
        out["read"]["train"], out["n_train"], out["picked"] = n, kept, picker.picked()
    return out


def _empty_side(a, b):
    """``empty`` for a blank pair, ``one_side_empty`` for a pair with one empty side, else None."""
    if a and b:
        return None
    return "one_side_empty" if a or b else "empty"


def _warn_one_side_empty(direction, removed, read):
    """One line per split of ``direction`` in which pairs with one empty side were dropped."""
    for split in ("train", "valid", "test"):
        n = removed.get("one_side_empty" if split == "train" else f"{split}_one_side_empty", 0)
        if n:
            has = "has" if n == 1 else "have"
            was = "was" if n == 1 else "were"
            tqdm.write(f"warning: {direction}: {n} of the {read[split]} {'training' if split == 'train' else split} "
                       f"pairs read {has} one empty side and {was} dropped; in a pair of plain files "
                       "(SPLIT.SRC-TGT.SRC + SPLIT.SRC-TGT.TGT) that often means the sides are out of step (line n of "
                       "one is not the translation of line n of the other): check them", file=sys.stderr)


def _write_training(job):
    """Pass 2 of one direction: the filtered training pairs without the carved held-out pairs,
    the pairs sharing a sentence with any held-out set and exact duplicates, into raw/."""
    tmp, direction = job["tmp"], job["direction"]
    carved = set(job["carved"])
    cleaner = cb.PairCleaner(direction.split("-"), job["heldout"])
    work = os.path.join(tmp, "work", f"{direction}.tsv")

    def rows():
        for line in tqdm(cb.read_lines(work), desc=f"cleaning {direction}", total=job["n_train"], unit="pair",
                         unit_scale=True, leave=False, disable=not job.get("progress"), mininterval=1.0):
            a, b = line.split("\t")
            if (a, b) in carved:
                cleaner.removed["held_out"] += 1
            elif cleaner.keep(a, b):
                yield a, b

    n = cb.write_pair_files(tmp, "train", direction, rows())
    os.remove(work)
    return n, dict(cleaner.removed)


# ----------------------------------------------------------------------------- main entry


def prepare_data(out_dir, inputs, valid_size=DEFAULTS["valid_size"], test_size=DEFAULTS["test_size"],
                 min_chars=DEFAULTS["min_chars"], max_chars=DEFAULTS["max_chars"], max_ratio=DEFAULTS["max_ratio"],
                 vocab_size=DEFAULTS["vocab_size"], spm_sentences=DEFAULTS["spm_sentences"],
                 spm_temperature=DEFAULTS["spm_temperature"], spm_model=None, workers=1, force=False):
    """Build a corpus in ``out_dir`` from the parallel text files/directories ``inputs`` and return
    its manifest (the layout of ``prepare-gettext``: see ``corpus_build``). A re-run with the same
    inputs (sha256) and flags returns the existing manifest; changed inputs or flags are refused
    unless ``force``. Built in ``out_dir.tmp-<pid>`` and renamed at the end."""
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    inputs = [os.fspath(i) for i in inputs]
    RANGES["workers"].check("--workers", workers)
    out_dir = os.path.abspath(out_dir)
    found, not_read = parallel_files.discover(inputs)
    check_out(out_dir, inputs, found)
    cfg = _config(found, spm_model, valid_size=valid_size, test_size=test_size, min_chars=min_chars,
                  max_chars=max_chars, max_ratio=max_ratio, vocab_size=vocab_size, spm_sentences=spm_sentences,
                  spm_temperature=spm_temperature)
    trained, test_only, by_direction = plan_directions(found)
    common = set.intersection(*(set(d.split("-")) for d in trained))
    pivot = next(iter(common)) if len(common) == 1 else None
    files = sorted({p for i in found.values() for p in i.paths} | ({cfg["spm_model"]} if spm_model else set()))
    sums = {p: cb.sha256(p) for p in tqdm(files, desc="checksums", unit="file")}
    old = cb.existing_build(out_dir, cfg, force, inputs=sums)
    if old is not None:
        return old

    with cb.building(out_dir) as tmp:
        os.makedirs(os.path.join(tmp, "work"))
        jobs = [dict(tmp=tmp, direction=d, inputs=by_direction[d], min_chars=min_chars, max_chars=max_chars,
                     max_ratio=max_ratio, key_side=1 if d.split("-")[1] == pivot else 0,
                     carve=(valid_size if "valid" not in by_direction[d] else 0,
                            test_size if "test" not in by_direction[d] else 0))
                for d in by_direction]
        sizes = [sum(os.path.getsize(p) for i in by_direction[d].values() for p in i.paths) for d in by_direction]
        read = {r["direction"]: r for r in cb.map_directions(_read_direction, jobs, workers, "reading", sizes, "B")}
        counts, how, heldout_sentences = _write_held_out(tmp, trained, test_only, read, pivot, valid_size, test_size)
        removed = _write_training_data(tmp, trained, read, heldout_sentences, counts, workers)
        os.rmdir(os.path.join(tmp, "work"))
        for d in trained:
            if not counts["train"][d]:
                raise InputError(f"direction {d} has no training pair left after cleaning ({removed[d]}) in "
                                 f"{by_direction[d]['train'].describe()}; check the file or the length flags")
        for d in by_direction:  # warnings once no error can follow
            _warn_one_side_empty(d, removed[d], read[d]["read"])
        for d in trained:
            if not counts["valid"].get(d):
                tqdm.write(f"warning: {d} has no valid set (fairseq-train needs one per trained direction); "
                           "pass --valid-size > 0 or a valid file", file=sys.stderr)
        for directory, names in not_read.items():
            tqdm.write(f"note: {directory}: not read (not named SRC-TGT.tsv, SPLIT.SRC-TGT.tsv or SPLIT.SRC-TGT.LANG; "
                       f"sub-directories are not read): {', '.join(names)}", file=sys.stderr)
        _note_split_overlaps(removed)
        for d in by_direction:
            given = read[d]["given"]
            shared = _valid_pairs_sharing_a_test_sentence(given.get("valid") or [], given.get("test") or [])
            if shared:
                tqdm.write(f"warning: {d}: {shared} of the {len(given['valid'])} given valid pairs share a sentence "
                           "with its given test set; checkpoint selection on valid then sees test sentences "
                           "(remove them from the valid file)", file=sys.stderr)
        langs_of = {lang for d in by_direction for lang in d.split("-")}
        trained_langs = {lang for d in trained for lang in d.split("-")}
        for lang in sorted(langs_of - trained_langs):
            tqdm.write(f"warning: language {lang} occurs only in test-only directions; a model trained on this "
                       "corpus never sees it", file=sys.stderr)
        all_langs = ([pivot] if pivot else []) + sorted(langs_of - {pivot})

        if spm_model:
            sp, got = cb.use_spm_model(tmp, spm_model), None
        else:
            lang_files = {}
            for d in trained:
                for lang in d.split("-"):
                    lang_files.setdefault(lang, []).append(os.path.join(tmp, "raw", f"train.{d}.{lang}"))
            text, got = cb.spm_sample(lang_files, temperature=spm_temperature, total=spm_sentences)
            sp = cb.train_spm_model(tmp, text, vocab_size)
            del text
        zero_shot = [d for d in test_only if any(counts[s].get(d) for s in SPLITS)]
        stored = trained + zero_shot
        present = {d: {s: bool(counts[s].get(d)) for s in SPLITS} for d in stored}
        cb.encode_and_binarize(tmp, stored, present, workers, {d: sum(counts[s].get(d, 0) for s in SPLITS)
                                                               for d in stored})
        manifest = {
            "version": 1, "builder": "prepare-data", "pivot": pivot,
            "languages": [lang for lang in all_langs if lang != pivot], "langs": all_langs,
            "lang_pairs": trained, "zero_shot_pairs": zero_shot, "stored_pairs": stored, "counts": counts,
            "held_out": how,
            "train_pairs_per_language": {  # the papers' resource groups: of its larger direction with the pivot
                x: max(n for d, n in counts["train"].items() if x in d.split("-"))
                for x in all_langs if pivot and x != pivot and x in trained_langs},
            "read": {d: read[d]["read"] for d in by_direction}, "removed": removed,
            "inputs": sums,
            "spm": {"sampling": {"temperature": spm_temperature, "total": spm_sentences},
                    "sentences_per_language": got, "given_model": cfg["spm_model"], "model_type": "unigram",
                    "character_coverage": 0.9995},
            "config": cfg, "spm_model": "spm.model", "vocab_size": sp.get_piece_size(),
            "dict": "bin/dict.txt", "data_bin": "bin",
        }
        cb.finish(tmp, manifest, all_langs, trained)
    for d in by_direction:
        kept = ", ".join(f"{s} {counts[s].get(d, 0)}" for s in SPLITS)
        gone = ", ".join(f"{why} {n}" for why, n in sorted(removed[d].items()) if n)
        zs = "" if d in trained else "; zero-shot (test only)" if d in zero_shot else (
            "; zero-shot, nothing kept: left out of the corpus")
        print(f"{d}: read " + ", ".join(f"{s} {n}" for s, n in read[d]["read"].items()) + f"; kept {kept}"
              + (f"; removed {gone}" if gone else "") + zs)
    print(f"prepared {out_dir} (manifest.json has every count)")
    return manifest


def _note_split_overlaps(removed):
    """One line if ``heldout.settle_splits`` dropped carved held-out pairs."""
    dropped = {f"{d} {k[: -len('_split_overlap')]} {n}": n for d, r in removed.items()
               for k, n in sorted(r.items(), reverse=True) if k.endswith("_split_overlap")}
    if dropped:
        tqdm.write(f"note: {sum(dropped.values())} carved held-out pairs shared a sentence with a held-out set of the "
                   f"other split and were dropped from it ({', '.join(dropped)}; given sets win over carved ones, "
                   "test over valid)", file=sys.stderr)


def _valid_pairs_sharing_a_test_sentence(valid, test) -> int:
    """How many (source, target) pairs of ``valid`` share their source with a test source or their
    target with a test target."""
    sources, targets = {a for a, _ in test}, {b for _, b in test}
    return sum(1 for a, b in valid if a in sources or b in targets)


def _write_held_out(tmp, trained, test_only, read, pivot, valid_size, test_size):
    """Write every valid/test set to raw/: given, carved from the picked candidates of pass 1
    (sizes capped by ``heldout.carve_sizes``, then settled against the other split's sets by
    ``heldout.settle_splits``; a trained direction's ``carved`` rows recorded for pass 2, and the
    pairs dropped counted in ``read[d]["removed"]`` as ``{split}_split_overlap``), and the
    test-only directions'. Returns (counts {split: {direction: n}}, how each set was made,
    {lang: fingerprints} of every held-out sentence)."""
    counts, how, sentences, sets = {s: {} for s in SPLITS}, {}, {}, {}
    for d in trained + test_only:
        r, src, tgt = read[d], *d.split("-")
        sizes = dict(zip(("valid", "test"), heldout.carve_sizes(r["n_train"], valid_size, test_size)))
        sets[d], how[d] = {}, {}
        for split in ("valid", "test"):
            if split in r["given"]:
                sets[d][split], how[d][split] = (r["given"][split], True), "given"
            elif d in trained:
                sets[d][split] = (r["picked"][split][:sizes[split]], False)
                how[d][split] = f"held out by a hash of the {tgt if tgt == pivot else src} side"
    kept, dropped = heldout.settle_splits(sets)
    for d, splits in dropped.items():
        for split, n in splits.items():
            read[d]["removed"][f"{split}_split_overlap"] = n
    for d in trained:
        read[d]["carved"] = [row for split, (_, given) in sets[d].items() if not given for row in kept[d][split]]
        for split in ("valid", "test"):
            if kept[d][split]:
                counts[split][d] = cb.write_pair_files(tmp, split, d, kept[d][split])
    for d in trained + test_only:
        for rows in kept[d].values():
            cb.add_heldout(sentences, d, rows)
    for d, c in heldout.add_test_only_directions(tmp, {d: kept[d] for d in test_only}).items():
        for split, n in c.items():
            counts[split][d] = n
    return counts, how, sentences


def _write_training_data(tmp, trained, read, heldout_sentences, counts, workers):
    """Pass 2 of every trained direction (``counts["train"]`` filled in); returns the removals per
    direction (pass 1's filters and pass 2's)."""
    results = cb.map_directions(
        _write_training, [dict(tmp=tmp, direction=d, carved=read[d]["carved"], heldout=heldout_sentences,
                               n_train=read[d]["n_train"]) for d in trained],
        workers, "cleaning", [read[d]["n_train"] for d in trained], "pair")
    removed = {d: dict(r["removed"]) for d, r in read.items()}
    for d, (n, rem) in zip(trained, results):
        counts["train"][d] = n
        for k, v in rem.items():
            removed[d][k] = removed[d].get(k, 0) + v
    return removed


# ----------------------------------------------------------------------------- CLI


def add_subcommand(subparsers):
    """Register ``prepare-data`` on an argparse subparsers object."""
    p = subparsers.add_parser(
        "prepare-data", help="build a corpus from your own parallel text (TSV or fairseq plain-text files)",
        description=__doc__.split("\n\n")[1].replace("\n", " ") + " Re-running with the same inputs and flags "
        "is a no-op; changed inputs are detected by checksum and rebuilt with --force.")
    p.add_argument("inputs", nargs="+", metavar="INPUT",
                   help="SRC-TGT.tsv, SPLIT.SRC-TGT.tsv, SPLIT.SRC-TGT.SRC + SPLIT.SRC-TGT.TGT (optionally .gz/.xz), "
                   "or a directory of such files")
    p.add_argument("--out", required=True, help="output directory (new, empty, or a corpus this command wrote)")
    p.add_argument("--valid-size", type=RANGES["valid_size"].of(int), default=DEFAULTS["valid_size"],
                   help="valid pairs held out per direction without a given valid file, at most 5%% of its pairs "
                   "(default: %(default)s)")
    p.add_argument("--test-size", type=RANGES["test_size"].of(int), default=DEFAULTS["test_size"],
                   help="test pairs held out per direction without a given test file, at most 5%% of its pairs "
                   "(default: %(default)s)")
    p.add_argument("--min-chars", type=RANGES["min_chars"].of(int), default=DEFAULTS["min_chars"],
                   help="training pairs with a shorter side (characters, after normalisation) are dropped "
                   "(default: %(default)s)")
    p.add_argument("--max-chars", type=RANGES["max_chars"].of(int), default=DEFAULTS["max_chars"],
                   help="training pairs with a longer side are dropped (default: %(default)s)")
    p.add_argument("--max-ratio", type=RANGES["max_ratio"].of(float), default=DEFAULTS["max_ratio"],
                   help="training pairs whose longer side has more than this many times the characters of the "
                   "shorter are dropped (default: %(default)s)")
    p.add_argument("--vocab-size", type=RANGES["vocab_size"].of(int), default=DEFAULTS["vocab_size"],
                   help="joint SentencePiece (unigram) vocabulary size (default: %(default)s)")
    p.add_argument("--spm-sentences", type=RANGES["spm_sentences"].of(int), default=DEFAULTS["spm_sentences"],
                   help="SentencePiece training sample size, drawn over languages with --spm-temperature; bounds "
                   "the memory of that step (default: %(default)s)")
    p.add_argument("--spm-temperature", type=RANGES["spm_temperature"].of(float), default=DEFAULTS["spm_temperature"],
                   help="temperature T of the sample: language l gets a share ~ (n_l / N)^(1/T) "
                   "(default: %(default)s)")
    p.add_argument("--spm-model", help="reuse this SentencePiece model instead of training one")
    p.add_argument("--workers", type=RANGES["workers"].of(int), default=1,
                   help="processes, one direction each; the output does not depend on it (default: %(default)s)")
    p.add_argument("--force", action="store_true",
                   help="rebuild a corpus this command wrote whose inputs or flags changed")
    p.set_defaults(func=_run)


def _run(args):
    prepare_data(args.out, args.inputs, valid_size=args.valid_size, test_size=args.test_size,
                 min_chars=args.min_chars, max_chars=args.max_chars, max_ratio=args.max_ratio,
                 vocab_size=args.vocab_size, spm_sentences=args.spm_sentences,
                 spm_temperature=args.spm_temperature, spm_model=args.spm_model, workers=args.workers,
                 force=args.force)
    sys.stdout.flush()
    return 0
