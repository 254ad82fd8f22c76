"""One build core for every prepared corpus (gettext, the papers' corpora, the user's own text).

A prepared corpus directory holds ``manifest.json``, ``langs.txt``, ``lang_pairs.txt``,
``raw/{split}.{a}-{b}.{lang}`` (detokenized text), ``spm.model``/``spm.vocab``,
``spm/{split}.{a}-{b}.{lang}`` and ``bin/`` (fairseq mmap data, one joint ``bin/dict.txt`` copied
to ``bin/dict.{lang}.txt`` for every language). It is built in ``OUT.tmp-<pid>`` and renamed at
the end (:func:`building`), so an interrupted build never leaves a directory that looks complete;
a finished build with the same config and inputs is reused (:func:`existing_build`), and a
directory the package did not write is never replaced.

Also here, for the papers' corpora and ``prepare-data``: text normalisation (:func:`normalize`),
training-pair cleaning (:class:`PairCleaner`: length filters, exact duplicates and held-out
overlaps removed, in 8 bytes per kept pair), the SentencePiece training text sampled over
languages with a temperature (:func:`spm_sample`, Arivazhagan et al. 2019 as used by the CLSR
paper Sec. 5 and the adaptive-sparse paper App. C) or balanced per language (LSL paper Sec. 4:
1.5M sentences per language), in memory bounded by the sample, and the per-direction encoding and
binarisation, run across directions by ``workers`` processes (:func:`encode_and_binarize`).
"""

import collections
import contextlib
import gzip
import hashlib
import io
import json
import logging
import os
import re
import shutil
import unicodedata
from multiprocessing import Pool

import numpy as np
from tqdm import tqdm

SPLITS = ("train", "valid", "test")
CORPUS_ENTRIES = ("manifest.json", "langs.txt", "lang_pairs.txt", "raw", "spm", "bin", "spm.model",
                  "spm.vocab")  # everything a build writes at the top of its directory
ENCODE_CHUNK = 100_000  # lines per SentencePiece encode call (bounded memory at full size)
_CONTROL = {i: " " for i in list(range(32)) + list(range(127, 160))}
_CONTROL.update({0x200B: None, 0xFEFF: None, 0x2028: " ", 0x2029: " "})


# ----------------------------------------------------------------------------- text


def normalize(text):
    """Unicode NFC, control/format characters (C0, DEL, C1, zero-width space, BOM, line/paragraph
    separators) removed or turned into spaces, whitespace collapsed, stripped.

    NFC, not NFKC: it keeps references identical to the official ones up to canonical
    equivalence (so BLEU on ``raw/`` equals BLEU on the release), and SentencePiece applies its
    own NFKC-based ``nmt_nfkc`` normalisation when it encodes."""
    return " ".join(unicodedata.normalize("NFC", text).translate(_CONTROL).split())


def fingerprint(text):
    """64-bit hash of a string (deduplication sets stay small at full size)."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big")


def unit_hash(text, salt=""):
    """Deterministic pseudo-random number in [0, 1) for a string (sampling without RNG state)."""
    return fingerprint(salt + "\x00" + text) / 2.0 ** 64


class FingerprintSet:
    """A set of 64-bit fingerprints at 8 bytes an entry (a Python set of ints costs about 70): a
    sorted numpy array, plus a small Python set of the latest additions merged into it every
    ``flush`` entries."""

    def __init__(self, flush=1 << 17):
        self._sorted = np.empty(0, dtype=np.uint64)
        self._recent = set()
        self._flush = flush

    def __len__(self):
        return len(self._sorted) + len(self._recent)

    def __contains__(self, key):
        if key in self._recent:
            return True
        a = self._sorted
        i = int(a.searchsorted(np.uint64(key)))
        return i < len(a) and int(a[i]) == key

    def add(self, key):
        self._recent.add(key)
        if len(self._recent) >= self._flush:
            new = np.fromiter(self._recent, dtype=np.uint64, count=len(self._recent))
            new.sort()
            self._sorted = np.insert(self._sorted, self._sorted.searchsorted(new), new)
            self._recent = set()


class LengthFilter:
    """Drops a pair with a side shorter than ``min_chars`` or longer than ``max_chars`` characters,
    or whose longer side has more than ``max_ratio`` times the characters of the shorter; None
    switches a bound off. Characters, not words: languages without spaces (zh, ja, th) count
    alike; the ratio's default leaves room for the ~3-4x of English against Chinese characters."""

    def __init__(self, min_chars=None, max_chars=None, max_ratio=None):
        self.min_chars, self.max_chars, self.max_ratio = min_chars, max_chars, max_ratio

    def reason(self, a, b):
        """None if (a, b) passes, else the name of the bound it fails."""
        la, lb = len(a), len(b)
        if self.min_chars is not None and min(la, lb) < self.min_chars:
            return "too_short"
        if self.max_chars is not None and max(la, lb) > self.max_chars:
            return "too_long"
        if self.max_ratio is not None and max(la, lb) > self.max_ratio * max(1, min(la, lb)):
            return "length_ratio"
        return None


class PairCleaner:
    """Training-pair filter of one stored direction: drops pairs with an empty side, pairs the
    ``length_filter`` rejects, pairs whose source or target sentence occurs in a valid/test set
    of that language (``heldout``: {lang: set of fingerprints}) and exact duplicates of an
    earlier pair; counts each."""

    def __init__(self, langs, heldout, length_filter=None):
        self.langs, self.heldout, self.length_filter = langs, heldout, length_filter
        self.seen = FingerprintSet()
        self.removed = collections.Counter()

    def keep(self, a, b):
        if not a or not b:
            self.removed["empty"] += 1
            return False
        why = self.length_filter.reason(a, b) if self.length_filter is not None else None
        if why is not None:
            self.removed[why] += 1
            return False
        fa, fb = fingerprint(a), fingerprint(b)
        if fa in self.heldout.get(self.langs[0], ()) or fb in self.heldout.get(self.langs[1], ()):
            self.removed["heldout_overlap"] += 1
            return False
        key = (fa * 0x9E3779B97F4A7C15 + fb) & 0xFFFFFFFFFFFFFFFF  # one int per pair: less memory
        if key in self.seen:
            self.removed["duplicate"] += 1
            return False
        self.seen.add(key)
        return True


def add_heldout(heldout, pair, rows):
    """Record the sentences of held-out ``rows`` [(a, b)] of ``pair`` a-b in ``heldout``
    ({lang: set of fingerprints}), so :class:`PairCleaner` keeps them out of training."""
    a, b = pair.split("-")
    for x, y in rows:
        heldout.setdefault(a, set()).add(fingerprint(x))
        heldout.setdefault(b, set()).add(fingerprint(y))
    return heldout


# ----------------------------------------------------------------------------- files


def write_lines(path, lines):
    with open(path, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(line + "\n")


def write_pair_files(tmp, split, pair, rows):
    """raw/{split}.{a}-{b}.{a} and .{b} from rows [(a, b)]; returns the number of rows."""
    a, b = pair.split("-")
    n = 0
    with open(os.path.join(tmp, "raw", f"{split}.{pair}.{a}"), "w", encoding="utf-8") as fa, \
            open(os.path.join(tmp, "raw", f"{split}.{pair}.{b}"), "w", encoding="utf-8") as fb:
        for x, y in rows:
            fa.write(x + "\n")
            fb.write(y + "\n")
            n += 1
    return n


def read_lines(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace", newline="\n") as f:
        for line in f:
            yield line.rstrip("\n").rstrip("\r")


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_manifest(out_dir):
    """The manifest of a corpus this package wrote in ``out_dir`` (a JSON object with its
    ``config`` and ``data_bin``), or None."""
    try:
        with open(os.path.join(out_dir, "manifest.json"), encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        return None
    if isinstance(manifest, dict) and "config" in manifest and "data_bin" in manifest:
        return manifest
    return None


def _check_parent_writable(out_dir):
    """Refuse now an --out whose directory cannot hold the build (it is built beside it)."""
    from ..atomic_files import check_creatable

    check_creatable(out_dir, "--out")


def existing_build(out_dir, cfg, force, inputs=None):
    """The manifest of a finished build of ``out_dir`` with config ``cfg`` (and, where given, the
    same ``inputs`` {name: sha256}): a re-run, nothing to do. None if ``out_dir`` can be
    (re)built: it is absent or empty, or ``force`` and it is a corpus this package wrote holding
    nothing else. Raises (one line) otherwise: a directory the package did not write is never
    replaced, whatever ``force`` says."""
    _check_parent_writable(out_dir)
    if not os.path.exists(out_dir):
        return None
    if not os.path.isdir(out_dir):
        raise ValueError(f"--out {out_dir} is a file, not a directory; choose another --out")
    entries = sorted(os.listdir(out_dir))
    if not entries:
        return None
    old = read_manifest(out_dir)
    if old is None:
        raise ValueError(f"{out_dir} holds files this package did not write ({entries[0]}"
                         f"{', ...' if len(entries) > 1 else ''}) and is "
                         "not a prepared corpus; langshare never empties a directory it did not create: "
                         "choose another --out (a new or empty directory)")
    if not force:
        if old.get("config") != cfg:
            raise ValueError(f"{out_dir} holds a corpus prepared with another config "
                             f"({config_difference(old.get('config') or {}, cfg)}); "
                             "pass --force to replace it or choose another --out")
        if inputs is not None and old.get("inputs") != inputs:
            before = old.get("inputs") or {}
            changed = sorted(k for k in set(before) | set(inputs) if before.get(k) != inputs.get(k))
            raise ValueError(f"{changed[0] if changed else 'an input'} changed since {out_dir} was "
                             "prepared (sha256 differs); pass --force to rebuild it")
        same = "same config and inputs" if inputs is not None else "same config"
        print(f"already prepared: {out_dir} ({same}; pass --force to rebuild)")
        return old
    foreign = [e for e in entries if e not in CORPUS_ENTRIES]
    if foreign:
        raise ValueError(f"{out_dir} is a prepared corpus but also holds {foreign[0]}, which this package "
                         f"did not write; move it out of {out_dir} before --force replaces the corpus, or "
                         "choose another --out")
    return None


def config_difference(before: dict, now: dict) -> str:
    """The first setting that differs between two corpus configs, for the refusal to reuse one:
    ``vocab_size 8000 then, 3000 now``; inputs by their files (``en-de.tsv no longer given``)."""
    key = next(k for k in sorted(set(before) | set(now)) if before.get(k) != now.get(k))
    if key == "inputs" and isinstance(before.get(key), list) and isinstance(now.get(key), list):
        files = [{p for i in side for p in i.get("paths", ())} for side in (before[key], now[key])]
        if files[0] != files[1]:
            gone, new = sorted(files[0] - files[1]), sorted(files[1] - files[0])
            return f"{gone[0]} no longer given" if gone else f"{new[0]} newly given"
    return f"{key} {before.get(key)!r} then, {now.get(key)!r} now"


@contextlib.contextmanager
def building(out_dir):
    """Yield a fresh ``out_dir.tmp-<pid>`` with raw/, spm/, bin/; on success it replaces
    ``out_dir`` (an existing one is moved aside first and removed after), on any exception it is
    removed and ``out_dir`` is left as it was."""
    tmp = f"{out_dir}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        for d in ("raw", "spm", "bin"):
            os.makedirs(os.path.join(tmp, d))
        yield tmp
        old = f"{out_dir}.old-{os.getpid()}"
        if os.path.exists(out_dir):
            os.replace(out_dir, old)
        os.replace(tmp, out_dir)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


# ----------------------------------------------------------------------------- sentencepiece


def spm_sample(lang_files, temperature=None, total=None, per_language=None, salt="spm"):
    """Training text for SentencePiece from {lang: [raw train files of that language]}.

    ``temperature`` T with ``total`` sentences (at most N): language l gets p_l ~ (n_l / N)^(1/T)
    of the total (n_l: its distinct training sentences, however many files repeat them; N: their
    sum), drawn by a hash of each sentence (deterministic; a sentence shared by several files is
    drawn once) and repeated when p_l * total exceeds n_l (low-resource languages are oversampled,
    as in the training data with T = 5). ``per_language`` k: at most k sentences of each language
    (LSL paper Sec. 4). Returns (sentences, {lang: count}). Memory: the sample and the fingerprints
    of its distinct sentences, and 8 bytes per distinct sentence of one language while counting."""
    sizes = {lang: _distinct_lines(paths) for lang, paths in lang_files.items()}
    grand = sum(sizes.values())
    if grand == 0:
        raise ValueError("no training sentences to train SentencePiece on; check the sources")
    if per_language is not None:
        want = {lang: min(n, per_language) for lang, n in sizes.items()}
    else:
        total = min(total or grand, grand)
        t = temperature or 1.0
        weights = {lang: (n / grand) ** (1.0 / t) for lang, n in sizes.items() if n}
        z = sum(weights.values())
        want = {lang: round(total * weights.get(lang, 0.0) / z) for lang in sizes}
    text, got = [], {}
    for lang, paths in lang_files.items():
        n, k = sizes[lang], want[lang]
        if not n or not k:
            got[lang] = 0
            continue
        rate = k / n
        copies, frac = int(rate), rate - int(rate)
        seen, before = set(), len(text)
        for path in paths:
            for line in read_lines(path):
                reps = copies + (unit_hash(line, salt + lang) < frac)
                if not reps:
                    continue  # not drawn here, nor where the same sentence occurs again
                h = fingerprint(line)
                if h in seen:
                    continue
                seen.add(h)
                text.extend([line] * reps)
        got[lang] = len(text) - before
    return text, got


def _distinct_lines(paths):
    """The number of distinct lines in ``paths`` together."""
    seen = FingerprintSet()
    for path in paths:
        for line in read_lines(path):
            h = fingerprint(line)
            if h not in seen:
                seen.add(h)
    return len(seen)


def train_spm_model(tmp, sentences, vocab_size, character_coverage=0.9995, model_type="unigram"):
    """Joint SentencePiece model trained in memory on ``sentences`` (one thread: the model is
    byte-identical across runs); writes spm.model and spm.vocab into ``tmp``. A text with fewer
    distinct pieces than ``vocab_size`` gets a smaller model (``hard_vocab_limit=False``); one
    line then says so."""
    import sentencepiece as spm

    tqdm.write(f"training SentencePiece ({model_type}, {vocab_size} pieces) on "
               f"{len(sentences)} lines")
    model = io.BytesIO()  # in memory: a file-based run records its (temporary) paths in the model
    spm.set_random_generator_seed(1)
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences), model_writer=model, vocab_size=vocab_size,
            model_type=model_type, character_coverage=character_coverage, hard_vocab_limit=False,
            input_sentence_size=0, shuffle_input_sentence=False, minloglevel=2,
            num_threads=1)  # the model depends on the thread count; one thread keeps it fixed
    except RuntimeError as error:
        needed = re.search(r"smaller than required_chars\. \d+ vs (\d+)", str(error))
        if needed is None:
            raise
        raise ValueError(f"--vocab-size {vocab_size} is too small for SentencePiece: the text's characters and the "
                         f"special symbols need {needed.group(1)} pieces; pass a larger --vocab-size") from None
    sp = _write_spm_model(tmp, model.getvalue())
    built = sp.get_piece_size()
    if built < vocab_size:
        tqdm.write(f"SentencePiece built {built:,} pieces, not the {vocab_size:,} asked: the text has fewer "
                   f"distinct pieces; pass --vocab-size {built} or more text")
    return sp


def check_spm_model(path):
    """The bytes of the SentencePiece model file ``path``; one line if it is not one."""
    import sentencepiece as spm

    if not os.path.isfile(path):
        raise ValueError(f"--spm-model {path} is not a file; pass a SentencePiece .model file")
    with open(path, "rb") as f:
        proto = f.read()
    try:
        spm.SentencePieceProcessor(model_proto=proto)
    except (RuntimeError, OSError):
        raise ValueError(f"--spm-model {path} is not a SentencePiece model; pass the .model file spm_train "
                         "or a prepared corpus (spm.model) wrote") from None
    return proto


def use_spm_model(tmp, path):
    """Reuse the SentencePiece model file ``path``: copied to spm.model with its spm.vocab."""
    return _write_spm_model(tmp, check_spm_model(path))


def _write_spm_model(tmp, proto):
    import sentencepiece as spm

    with open(os.path.join(tmp, "spm.model"), "wb") as f:
        f.write(proto)
    sp = spm.SentencePieceProcessor(model_proto=proto)
    write_lines(os.path.join(tmp, "spm.vocab"),
                (f"{sp.id_to_piece(i)}\t{sp.get_score(i):g}" for i in range(sp.get_piece_size())))
    return sp


def map_directions(fn, jobs, workers=1, desc=None, weights=None, unit="direction"):
    """``[fn(job) for job in jobs]`` in order, run by up to ``workers`` processes when there are
    several jobs. A job is a dict; it gets ``threads`` (1 in a worker process, ``workers`` when the
    jobs run one by one here) and ``progress`` (True when it runs here: it may show its own bar).
    The progress bar counts ``weights`` in ``unit`` (default: one direction per job)."""
    parallel = workers > 1 and len(jobs) > 1
    jobs = [dict(job, threads=1 if parallel else max(1, workers), progress=not parallel) for job in jobs]
    weights = list(weights) if weights is not None else [1] * len(jobs)
    results = []
    with tqdm(total=sum(weights), desc=desc, unit=unit, unit_scale=unit != "direction") as bar:
        if parallel:
            with Pool(min(workers, len(jobs))) as pool:
                for w, result in zip(weights, pool.imap(fn, jobs)):
                    results.append(result)
                    bar.update(w)
        else:
            for w, job in zip(weights, jobs):
                results.append(fn(job))
                bar.update(w)
    return results


def line_bar(job, desc, total=None):
    """A per-line progress bar for a job run by :func:`map_directions` (off in worker processes)."""
    return tqdm(total=total, desc=desc, unit="line", unit_scale=True, leave=False,
                disable=not job.get("progress"), mininterval=1.0)


def _encode_direction(job):
    """Encode raw/{split}.{pair}.{lang} of one stored pair into spm/; returns the training
    split's piece counts."""
    import sentencepiece as spm

    tmp, pair, threads = job["tmp"], job["pair"], job["threads"]
    sp = spm.SentencePieceProcessor(model_file=os.path.join(tmp, "spm.model"))
    freq = collections.Counter()
    with line_bar(job, f"encoding {pair}", job.get("lines") and 2 * job["lines"]) as bar:
        _encode_files(tmp, pair, sp, threads, freq, bar)
    return freq


def _encode_files(tmp, pair, sp, threads, freq, bar):
    for split in SPLITS:
        for lang in pair.split("-"):
            name = f"{split}.{pair}.{lang}"
            src = os.path.join(tmp, "raw", name)
            if not os.path.exists(src):
                continue
            with open(src, encoding="utf-8") as fin, \
                    open(os.path.join(tmp, "spm", name), "w", encoding="utf-8") as fout:
                while True:
                    lines = [line.rstrip("\n") for _, line in zip(range(ENCODE_CHUNK), fin)]
                    if not lines:
                        break
                    pieces = sp.encode(lines, out_type=str, num_threads=threads)
                    if split == "train":
                        for p in pieces:
                            freq.update(p)
                    for p in pieces:
                        fout.write(" ".join(p) + "\n")
                    bar.update(len(lines))


def _binarize_direction(job):
    """fairseq-preprocess (mmap) of one stored pair's splits with the joint dictionary."""
    from fairseq import options
    from fairseq_cli import preprocess

    tmp = job["tmp"]
    argv = preprocess_argv(os.path.join(tmp, "bin"), os.path.join(tmp, "spm"), job["pair"], job["splits"],
                           job["threads"])
    args = options.get_preprocessing_parser().parse_args(argv)
    before = list(preprocess.logger.handlers)
    level = logging.getLogger().level
    logging.getLogger().setLevel(logging.WARNING)
    try:
        preprocess.main(args)
    finally:
        logging.getLogger().setLevel(level)
        for h in preprocess.logger.handlers[len(before):]:
            preprocess.logger.removeHandler(h)
            h.close()


def encode_and_binarize(tmp, stored_pairs, splits_present, workers=1, lines=None):
    """Encode every raw/{split}.{pair}.{lang} with ``tmp``/spm.model into spm/, write the joint
    bin/dict.txt (every piece of the model except control/unknown/unused ones, with its
    training-split count) and binarize every stored pair with ``fairseq-preprocess`` (mmap) and
    that dictionary. ``splits_present``: {pair: {split: bool}}; ``lines``: {pair: lines}, for
    the progress bars. Directions run in ``workers`` processes; the output does not depend on it."""
    import sentencepiece as spm

    weights = [lines[p] for p in stored_pairs] if lines else None
    unit = "pair" if lines else "direction"
    counts = map_directions(_encode_direction, [dict(tmp=tmp, pair=p, lines=lines and lines[p]) for p in stored_pairs],
                            workers, "encoding", weights, unit)
    freq = sum(counts, collections.Counter())
    sp = spm.SentencePieceProcessor(model_file=os.path.join(tmp, "spm.model"))
    dict_lines = [f"{sp.id_to_piece(i)} {freq[sp.id_to_piece(i)]}"
                  for i in range(sp.get_piece_size())
                  if not (sp.is_control(i) or sp.is_unknown(i) or sp.is_unused(i))]
    write_lines(os.path.join(tmp, "bin", "dict.txt"), dict_lines)
    jobs = [dict(tmp=tmp, pair=p, splits=[s for s in SPLITS if splits_present[p].get(s)]) for p in stored_pairs]
    map_directions(_binarize_direction, jobs, workers, "binarizing", weights, unit)
    log = os.path.join(tmp, "bin", "preprocess.log")
    if os.path.exists(log):
        os.remove(log)


def preprocess_argv(bin_dir, spm_dir, pair, splits, workers=1):
    """fairseq-preprocess arguments binarizing ``pair`` (a-b) for ``splits`` with the joint dict."""
    src, tgt = pair.split("-")
    dict_path = os.path.join(bin_dir, "dict.txt")
    argv = ["--source-lang", src, "--target-lang", tgt, "--destdir", bin_dir,
            "--srcdict", dict_path, "--tgtdict", dict_path, "--dataset-impl", "mmap",
            "--workers", str(max(1, workers))]
    for split in SPLITS:
        if split in splits:
            argv += [f"--{split}pref", os.path.join(spm_dir, f"{split}.{pair}")]
    return argv


def finish(tmp, manifest, all_langs, lang_pairs):
    """Per-language dictionaries, langs.txt, lang_pairs.txt and manifest.json (written last)."""
    for lang in all_langs:
        shutil.copyfile(os.path.join(tmp, "bin", "dict.txt"),
                        os.path.join(tmp, "bin", f"dict.{lang}.txt"))
    write_lines(os.path.join(tmp, "langs.txt"), all_langs)
    write_lines(os.path.join(tmp, "lang_pairs.txt"), [",".join(lang_pairs)])
    with open(os.path.join(tmp, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1, ensure_ascii=False)
        f.write("\n")
