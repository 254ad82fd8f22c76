"""One build core for every prepared corpus (gettext and the papers' corpora).

A prepared corpus directory holds ``manifest.json``, ``langs.txt``, ``lang_pairs.txt``,
``raw/{split}.{a}-{b}.{lang}`` (detokenized text), ``spm.model``/``spm.vocab``,
``spm/{split}.{a}-{b}.{lang}`` and ``bin/`` (fairseq mmap data, one joint ``bin/dict.txt`` copied
to ``bin/dict.{lang}.txt`` for every language). It is built in ``OUT.tmp-<pid>`` and renamed at
the end (:func:`building`), so an interrupted build never leaves a directory that looks complete;
a finished build with the same config is reused (:func:`existing_build`).

Also here, for the papers' corpora: text normalisation (:func:`normalize`), training-pair
cleaning (:class:`PairCleaner`: exact duplicates and held-out overlaps removed) and the
SentencePiece training text sampled over languages with a temperature (:func:`spm_sample`,
Arivazhagan et al. 2019 as used by the CLSR paper Sec. 5 and the adaptive-sparse paper App. C)
or balanced per language (LSL paper Sec. 4: 1.5M sentences per language).
"""

import collections
import contextlib
import gzip
import hashlib
import io
import json
import logging
import os
import shutil
import unicodedata

from tqdm import tqdm

SPLITS = ("train", "valid", "test")
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


class PairCleaner:
    """Training-pair filter of one stored direction: drops pairs with an empty side, exact
    duplicates of an earlier pair, and pairs whose source or target sentence occurs in a
    valid/test set of that language (``heldout``: {lang: set of fingerprints}); counts each."""

    def __init__(self, langs, heldout):
        self.langs, self.heldout = langs, heldout
        self.seen = set()
        self.removed = collections.Counter()

    def keep(self, a, b):
        if not a or not b:
            self.removed["empty"] += 1
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


# ----------------------------------------------------------------------------- files


def write_lines(path, lines):
    with open(path, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(line + "\n")


def read_lines(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace", newline="\n") as f:
        for line in f:
            yield line.rstrip("\n").rstrip("\r")


def count_lines(path):
    with open(path, "rb") as f:
        return sum(block.count(b"\n") for block in iter(lambda: f.read(1 << 20), b""))


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def existing_build(out_dir, cfg, force):
    """The manifest of a finished build of ``out_dir`` with config ``cfg`` (re-run: nothing to do),
    or None if ``out_dir`` can be (re)built; raises if it holds something else."""
    manifest_path = os.path.join(out_dir, "manifest.json")
    if not os.path.exists(out_dir) or force:
        return None
    if os.path.exists(manifest_path):
        with open(manifest_path, encoding="utf-8") as f:
            old = json.load(f)
        if old.get("config") == cfg:
            print(f"already prepared: {out_dir} (same config; pass --force to rebuild)")
            return old
        raise ValueError(f"{out_dir} holds a corpus prepared with another config; "
                         "pass --force to replace it or choose another --out")
    if os.listdir(out_dir):
        raise ValueError(f"{out_dir} exists and is not a prepared corpus; "
                         "pass --force to replace it or choose another --out")
    return None


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

    ``temperature`` T with ``total`` sentences: language l gets p_l ~ (n_l / N)^(1/T) of the
    total (n_l: its training lines), drawn by a hash of each sentence (deterministic; a sentence
    shared by several files is drawn once) and repeated when p_l * total exceeds n_l (low-resource
    languages are oversampled, as in the training data with T = 5). ``per_language`` k: at most
    k sentences of each language (LSL paper Sec. 4). Returns (sentences, {lang: count})."""
    sizes = {lang: sum(count_lines(p) for p in paths) for lang, paths in lang_files.items()}
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
                h = fingerprint(line)
                if h in seen:
                    continue
                seen.add(h)
                reps = copies + (unit_hash(line, salt + lang) < frac)
                text.extend([line] * reps)
        got[lang] = len(text) - before
    return text, got


def train_spm_model(tmp, sentences, vocab_size, character_coverage=0.9995, model_type="unigram"):
    """Joint SentencePiece model trained in memory on ``sentences`` (one thread: the model is
    byte-identical across runs); writes spm.model and spm.vocab into ``tmp``."""
    import sentencepiece as spm

    tqdm.write(f"training SentencePiece ({model_type}, {vocab_size} pieces) on "
               f"{len(sentences)} lines")
    model = io.BytesIO()  # in memory: a file-based run records its (temporary) paths in the model
    spm.set_random_generator_seed(1)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences), model_writer=model, vocab_size=vocab_size,
        model_type=model_type, character_coverage=character_coverage, hard_vocab_limit=False,
        input_sentence_size=0, shuffle_input_sentence=False, minloglevel=2,
        num_threads=1)  # the model depends on the thread count; one thread keeps it fixed
    with open(os.path.join(tmp, "spm.model"), "wb") as f:
        f.write(model.getvalue())
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    write_lines(os.path.join(tmp, "spm.vocab"),
                (f"{sp.id_to_piece(i)}\t{sp.get_score(i):g}" for i in range(sp.get_piece_size())))
    return sp


def encode_and_dict(tmp, sp, stored_pairs, workers=1):
    """Encode every raw/{split}.{pair}.{lang} into spm/ and write the joint bin/dict.txt (every
    piece of the model except control/unknown/unused ones, with its training-split count)."""
    freq = collections.Counter()
    for pair in tqdm(stored_pairs, desc="encoding", unit="direction"):
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
                        pieces = sp.encode(lines, out_type=str, num_threads=max(1, workers))
                        if split == "train":
                            for p in pieces:
                                freq.update(p)
                        for p in pieces:
                            fout.write(" ".join(p) + "\n")
    dict_lines = [f"{sp.id_to_piece(i)} {freq[sp.id_to_piece(i)]}"
                  for i in range(sp.get_piece_size())
                  if not (sp.is_control(i) or sp.is_unknown(i) or sp.is_unused(i))]
    write_lines(os.path.join(tmp, "bin", "dict.txt"), dict_lines)


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


def binarize(tmp, stored_pairs, splits_present, workers=1):
    """fairseq-preprocess (mmap) every stored pair with the joint dictionary bin/dict.txt;
    ``splits_present``: {pair: {split: bool}}."""
    from fairseq import options
    from fairseq_cli import preprocess

    bin_dir = os.path.join(tmp, "bin")
    for pair in tqdm(stored_pairs, desc="binarizing", unit="direction"):
        splits = [s for s in SPLITS if splits_present[pair].get(s)]
        argv = preprocess_argv(bin_dir, os.path.join(tmp, "spm"), pair, splits, workers)
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
    log = os.path.join(bin_dir, "preprocess.log")
    if os.path.exists(log):
        os.remove(log)


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
