"""``langshare prepare-corpus``: the papers' corpora (OPUS-100, WMT-14, TED-8, Public-24, LSL-10).

Reads the public releases from a local mirror (``--mirror DIR``) or downloads them first
(``--download --cache DIR``, checksums verified where the source publishes them), normalises
(NFC, control characters, whitespace), removes duplicate training pairs and training pairs that
share a sentence with any valid/test set of that language, trains one joint SentencePiece model
with the paper's vocabulary size on temperature-sampled text, and binarizes every language pair
for ``multilingual_langshare``. The output has the layout of ``langshare prepare-gettext``
(see ``fairseq_langshare.data.corpus_build``); ``--dry-run`` prints the real-size plan.
"""

import os
import shlex
import sys

from tqdm import tqdm

from ..data import corpus_build as cb
from . import sources as srcs
from .corpus_specs import CORPORA
from ..option_ranges import Range

NORMALIZATION = "nfc+control+whitespace"
DEFAULT_CACHE = os.environ.get("LANGSHARE_CACHE", os.path.expanduser("~/.cache/langshare/corpora"))


def get_spec(name):
    if name not in CORPORA:
        raise ValueError(f"unknown corpus {name!r}: choose one of {', '.join(CORPORA)} "
                         "(langshare prepare-corpus --list)")
    return CORPORA[name]


def _languages(spec, langs):
    if langs is None:
        return list(spec.languages)
    if isinstance(langs, str):
        langs = [c.strip() for c in langs.split(",") if c.strip()]
    unknown = [c for c in langs if c not in spec.languages]
    if unknown:
        pivot = f" ({spec.pivot} is the pivot and always included)" if spec.pivot in unknown else ""
        raise ValueError(f"language {unknown[0]!r} has no data in corpus {spec.name}{pivot}: "
                         f"choose --langs among {' '.join(spec.languages)}")
    if len(set(langs)) != len(langs):
        raise ValueError(f"duplicate language codes in --langs {','.join(langs)}")
    if not langs:
        raise ValueError("--langs is empty; pass at least one language code")
    return [c for c in spec.languages if c in langs]  # the spec's order


def corpus_config(name, langs=None, direction=None, vocab_size=None, spm_sentences=None,
                  max_train_per_pair=None):
    spec = get_spec(name)
    direction = direction or next(iter(spec.directions))
    if direction not in spec.directions:
        raise ValueError(f"unknown direction {direction!r} for {name}: choose one of "
                         f"{', '.join(spec.directions)}")
    for flag, v, low in (("vocab-size", vocab_size, 16), ("spm-sentences", spm_sentences, 1),
                         ("max-train-per-pair", max_train_per_pair, 1)):
        if v is not None and v < low:
            raise ValueError(f"--{flag} must be >= {low}, got {v}")
    spm = dict(spec.spm_sampling)
    if spm_sentences is not None:
        spm["per_language" if "per_language" in spm else "total"] = spm_sentences
    return spec, dict(corpus=name, langs=_languages(spec, langs), direction=direction,
                      vocab_size=vocab_size or spec.vocab_size, spm_sampling=spm,
                      max_train_per_pair=max_train_per_pair, normalization=NORMALIZATION,
                      lq_downsample=spec.lq_downsample)


def _used(layout):
    """[(stored pair, split, Source)] in order."""
    return [(pair, split, s) for pair, splits in layout.stored.items()
            for split in cb.SPLITS for s in splits.get(split, ())]


def _resources(spec, layout):
    """{resource name: sacreBLEU language pairs needed} of the sources a build reads."""
    need = {}
    for _, _, s in _used(layout):
        lps = need.setdefault(s.resource, set())
        if spec.resources[s.resource].sacrebleu:
            lps.add(s.files[0].rsplit(".", 2)[-2])
    return need


# ----------------------------------------------------------------------------- dry run


def plan(spec, cfg, layout, out_dir, mirror, cache):
    """The full sequence of steps of a run as printable lines (shell commands where one exists)."""
    root = mirror or cache
    lines = [f"# langshare prepare-corpus {spec.name}: {spec.title}",
             f"# reproduces: {spec.reproduces}",
             f"# {len(cfg['langs'])} languages + pivot {spec.pivot}, direction {cfg['direction']}: "
             f"{len(layout.lang_pairs)} trained directions, {len(layout.zero_shot_pairs)} zero-shot",
             ""]
    need = _resources(spec, layout)
    if mirror:
        lines.append(f"# 1. read the releases from the mirror {mirror}")
    else:
        lines.append(f"# 1. download into {cache} (skipped per resource once done)")
        for name in need:
            r = spec.resources[name]
            if r.sacrebleu:
                from sacrebleu.dataset import DATASETS
                d = DATASETS[r.sacrebleu]
                lines.append(f"# sacreBLEU test set {r.sacrebleu}: {' '.join(d.data)} "
                             f"(md5 {' '.join(d.md5 or ['-'])}, checked by sacreBLEU)")
                for lp in sorted(need[name]):
                    lines.append(f"SACREBLEU={shlex.quote(os.path.join(cache, 'sacrebleu'))} "
                                 f"sacrebleu -t {r.sacrebleu} -l {lp} --echo src > /dev/null")
            elif r.manual:
                lines.append(f"# manual (registration): {r.manual} -> {r.dest}/")
            else:
                sums = ", ".join(f"{k} {v}" for k, v in (("md5", r.md5), ("sha256", r.sha256))
                                 if v) or "no published checksum"
                target = os.path.join(cache, "downloads", r.file)
                lines.append(f"curl -L -o {shlex.quote(target)} {r.url}  # {sums}")
                if r.unpack:
                    lines.append(f"# extract {r.file} into {os.path.join(cache, r.dest)}")
                else:
                    lines.append(f"mv {shlex.quote(target)} "
                                 f"{shlex.quote(os.path.join(cache, r.dest, r.file))}")
    lines.append(f"# 2. read, normalise ({NORMALIZATION}), clean, write {out_dir}.tmp-<pid>/raw/")
    for pair, split, s in _used(layout):
        opt = " (optional)" if s.optional else ""
        lines.append(f"#    {split}.{pair} <- {s.name} [{s.fmt}] "
                     f"{' '.join(os.path.join(root, f) for f in s.files)}{opt}")
    lines.append("#    train pairs: exact duplicates removed; pairs sharing a side with any valid/"
                 "test sentence of that language removed; empty sides removed")
    if cfg["lq_downsample"]:
        lines.append(f"#    low-quality sources downsampled with T={cfg['lq_downsample']['temperature']}"
                     f" against the others, at most {cfg['lq_downsample']['max_factor']}x")
    if cfg["max_train_per_pair"]:
        lines.append(f"#    at most {cfg['max_train_per_pair']} training pairs per language pair")
    sp = cfg["spm_sampling"]
    how = (f"{sp['per_language']} sentences per language" if "per_language" in sp else
           f"{sp['total']} sentences sampled over languages with T={sp['temperature']}")
    lines.append(f"# 3. SentencePiece unigram, vocab_size={cfg['vocab_size']}, "
                 f"character_coverage=0.9995, on {how} ({spec.vocab_source})")
    lines.append("# 4. encode raw/ -> spm/; joint dictionary bin/dict.txt")
    lines.append("# 5. binarize")
    tmp = f"{out_dir}.tmp-<pid>"
    for pair, splits in layout.stored.items():
        argv = cb.preprocess_argv(os.path.join(tmp, "bin"), os.path.join(tmp, "spm"), pair,
                                  [s for s in cb.SPLITS if s in splits])
        lines.append("fairseq-preprocess " + shlex.join(argv))
    lines.append(f"# 6. bin/dict.<lang>.txt, langs.txt, lang_pairs.txt, manifest.json; "
                 f"rename {tmp} -> {out_dir}")
    flags = "; ".join(f"{k}: {v}" for k, v in spec.train_sampling.items())
    lines.append(f"# train with --langs {','.join([spec.pivot] + cfg['langs'])} --lang-pairs "
                 f"{','.join(layout.lang_pairs)} ({flags})")
    return lines


# ----------------------------------------------------------------------------- reading


def check_mirror(spec, layout, root):
    """Raise if a required file is missing; return the missing optional sources."""
    missing_optional = []
    for pair, split, s in _used(layout):
        absent = [f for f in s.files if not os.path.exists(os.path.join(root, f))]
        if not absent:
            continue
        r = spec.resources[s.resource]
        if s.optional:
            missing_optional.append(f"{pair}:{split}:{s.name}")
            continue
        how = (f"registration-only: {r.manual}" if r.manual else
               f"from {r.url or 'sacreBLEU ' + r.sacrebleu}, or run with --download")
        raise ValueError(f"corpus {spec.name}: the mirror {root} has no {absent[0]} "
                         f"({s.name}, {pair} {split}); put the release there ({how})")
    return sorted(set(missing_optional))


def _oriented(source, pair, root):
    """Normalised (a, b) pairs of a source, in the stored pair's orientation."""
    a, b = pair.split("-")
    s = source if source.langs == (a, b) else source.swapped()
    if s.langs != (a, b):
        raise RuntimeError(f"source {source.name} has languages {source.langs}, not {pair}")
    for x, y in s.read(root):
        yield cb.normalize(x), cb.normalize(y)


def _lq_rate(n_hq, n_lq, temperature, max_factor):
    """Share of low-quality pairs kept so that sources are balanced with temperature T
    (n_lq' / n_hq = (n_lq / n_hq)^(1/T)), never below 1/max_factor (LSL App. B)."""
    if not n_lq:
        return 1.0
    if not n_hq:
        return 1.0
    want = n_hq * (n_lq / n_hq) ** (1.0 / temperature)
    return min(1.0, max(want / n_lq, 1.0 / max_factor))


def write_split_data(tmp, cfg, layout, root):
    """Write raw/ for every stored pair; return (counts per pair/split, per-source counts,
    removals, lq stats)."""
    heldout, held = {}, {}
    for pair, splits in layout.stored.items():
        for split in ("valid", "test"):
            rows = []
            for s in splits.get(split, ()):
                rows += [(x, y) for x, y in _oriented(s, pair, root) if x and y]
            held[(pair, split)] = rows
            cb.add_heldout(heldout, pair, rows)
    counts, per_source, removed, lq_stats = {}, {}, {}, {}
    cap = cfg["max_train_per_pair"]
    for pair, splits in tqdm(layout.stored.items(), desc="reading sources", unit="pair"):
        a, b = pair.split("-")
        counts[pair] = {}
        for split in ("valid", "test"):
            if split in splits:
                cb.write_pair_files(tmp, split, pair, held[(pair, split)])
                counts[pair][split] = len(held[(pair, split)])
        if "train" not in splits:
            continue
        cleaner = cb.PairCleaner((a, b), heldout)
        per_source[pair] = {}
        n = 0
        fa = open(os.path.join(tmp, "raw", f"train.{pair}.{a}"), "w", encoding="utf-8")
        fb = open(os.path.join(tmp, "raw", f"train.{pair}.{b}"), "w", encoding="utf-8")
        lq_path = os.path.join(tmp, f"lq.{pair}.tsv")
        with fa, fb, open(lq_path, "w", encoding="utf-8") as lq:
            n_lq = 0
            for s in splits["train"]:
                if not all(os.path.exists(os.path.join(root, f)) for f in s.files):
                    continue  # a missing optional source (check_mirror reported it)
                kept = 0
                for x, y in _oriented(s, pair, root):
                    if not cleaner.keep(x, y):  # normalised text has no tabs
                        continue
                    if s.quality == "lq" and cfg["lq_downsample"]:
                        lq.write(f"{x}\t{y}\n")
                        n_lq += 1
                    elif cap is None or n < cap:
                        fa.write(x + "\n")
                        fb.write(y + "\n")
                        n += 1
                    else:
                        continue
                    kept += 1
                per_source[pair][s.name] = per_source[pair].get(s.name, 0) + kept
            lq.flush()
            if n_lq:
                ds = cfg["lq_downsample"]
                rate = _lq_rate(n, n_lq, ds["temperature"], ds["max_factor"])
                n_hq, kept_lq = n, 0
                for line in cb.read_lines(lq_path):
                    if cb.unit_hash(line, "lq") < rate and (cap is None or n < cap):
                        x, y = line.split("\t")
                        fa.write(x + "\n")
                        fb.write(y + "\n")
                        n += 1
                        kept_lq += 1
                lq_stats[pair] = {"hq": n_hq, "lq": n_lq, "lq_kept": kept_lq,
                                  "rate": round(rate, 6)}
        os.remove(lq_path)
        counts[pair]["train"] = n
        removed[pair] = dict(cleaner.removed)
        if n == 0:
            raise ValueError(f"language pair {pair} has no training data left in the mirror "
                             f"{root} (sources: {', '.join(s.name for s in splits['train'])}); "
                             "check the mirror or leave the language out of --langs")
    return counts, per_source, removed, lq_stats


# ----------------------------------------------------------------------------- main entry


def prepare_corpus(name, out_dir, mirror=None, download=False, cache=None, langs=None,
                   direction=None, vocab_size=None, spm_sentences=None, max_train_per_pair=None,
                   workers=1, force=False, dry_run=False):
    """Build corpus ``name`` in ``out_dir`` (layout of ``langshare prepare-gettext`` plus
    ``corpus`` and ``zero_shot_pairs`` in the manifest) and return its manifest; with
    ``dry_run`` print the plan and return None."""
    spec, cfg = corpus_config(name, langs, direction, vocab_size, spm_sentences,
                              max_train_per_pair)
    layout = spec.layout(spec, cfg["langs"], cfg["direction"])
    out_dir = os.path.abspath(out_dir)
    if mirror and download:
        raise ValueError("pass either --mirror DIR or --download [--cache DIR], not both")
    mirror = os.path.abspath(mirror) if mirror else None
    cache = os.path.abspath(cache or DEFAULT_CACHE)
    if dry_run:
        print("\n".join(plan(spec, cfg, layout, out_dir, mirror, None if mirror else cache)))
        return None
    if not mirror and not download:
        raise ValueError("no data source: pass --mirror DIR (a local copy of the releases, see "
                         "docs/recipes.md) or --download [--cache DIR]")
    old = cb.existing_build(out_dir, cfg, force)
    if old is not None:
        return old
    if download:
        need = _resources(spec, layout)
        for rname in tqdm(need, desc="downloads", unit="resource"):
            srcs.ensure(spec.resources[rname], cache, sorted(need[rname]))
    root = mirror or cache
    if not os.path.isdir(root):
        raise ValueError(f"mirror directory {root} does not exist; pass the directory holding "
                         f"the {spec.name} releases (docs/recipes.md) or use --download")
    missing_optional = check_mirror(spec, layout, root)
    for m in missing_optional:
        tqdm.write(f"optional source not in the mirror, skipped: {m}")

    with cb.building(out_dir) as tmp:
        counts, per_source, removed, lq_stats = write_split_data(tmp, cfg, layout, root)
        present = {p: {s: bool(n) for s, n in c.items()} for p, c in counts.items()}
        lang_files = {}
        for pair, c in counts.items():
            if c.get("train"):
                for lang in pair.split("-"):
                    lang_files.setdefault(lang, []).append(
                        os.path.join(tmp, "raw", f"train.{pair}.{lang}"))
        sp_cfg = cfg["spm_sampling"]
        text, got = cb.spm_sample(lang_files, temperature=sp_cfg.get("temperature"),
                                  total=sp_cfg.get("total"), per_language=sp_cfg.get("per_language"))
        sp = cb.train_spm_model(tmp, text, cfg["vocab_size"])
        del text
        cb.encode_and_binarize(tmp, list(layout.stored), present, workers)
        manifest = _manifest(spec, cfg, layout, counts, per_source, removed, lq_stats, got,
                             missing_optional, sp, root)
        cb.finish(tmp, manifest, manifest["langs"], layout.lang_pairs)
    return manifest


def _by_direction(layout, counts):
    out = {s: {} for s in cb.SPLITS}
    for pair, c in counts.items():
        a, b = pair.split("-")
        for split, n in c.items():
            for d in (f"{a}-{b}", f"{b}-{a}"):
                if split != "train" or d in layout.lang_pairs:
                    out[split][d] = n
    return out


def _manifest(spec, cfg, layout, counts, per_source, removed, lq_stats, spm_got, missing,
              sp, root):
    langs = [spec.pivot] + cfg["langs"] if spec.pivot not in cfg["langs"] else cfg["langs"]
    train_pl = {}
    for x in cfg["langs"]:
        for pair in (f"{spec.pivot}-{x}", f"{x}-{spec.pivot}"):
            if counts.get(pair, {}).get("train"):
                train_pl[x] = counts[pair]["train"]
    inputs = {}
    for _, _, s in _used(layout):
        for f in s.files:
            p = os.path.join(root, f)
            if os.path.exists(p):
                inputs[f] = os.path.getsize(p)
    return {
        "version": 1, "corpus": spec.name, "title": spec.title, "reproduces": spec.reproduces,
        "pivot": spec.pivot, "languages": cfg["langs"], "langs": langs,
        "lang_pairs": layout.lang_pairs, "zero_shot_pairs": layout.zero_shot_pairs,
        "direction": cfg["direction"], "stored_pairs": list(layout.stored),
        "counts": _by_direction(layout, counts), "train_pairs_per_language": train_pl,
        "train_pairs_per_source": per_source, "removed": removed, "lq_downsampling": lq_stats,
        "missing_optional_sources": missing,
        "spm": {"sampling": cfg["spm_sampling"], "sentences_per_language": spm_got,
                "model_type": "unigram", "character_coverage": 0.9995,
                "paper_vocab_size": spec.vocab_size, "vocab_source": spec.vocab_source},
        "train_sampling": spec.train_sampling, "notes": list(spec.notes),
        "inputs": inputs, "config": cfg, "spm_model": "spm.model",
        "vocab_size": sp.get_piece_size(), "dict": "bin/dict.txt", "data_bin": "bin",
    }


# ----------------------------------------------------------------------------- CLI


def add_subcommand(subparsers):
    """Register ``prepare-corpus`` on an argparse subparsers object."""
    p = subparsers.add_parser(
        "prepare-corpus", help="download or mirror, clean and binarize a paper's corpus",
        description=__doc__.split("\n\n")[1].replace("\n", " ") + " Re-running with the same "
        "flags is a no-op.")
    p.add_argument("corpus", nargs="?", help=f"one of: {', '.join(CORPORA)}")
    p.add_argument("--out", help="output directory (required unless --list or --dry-run)")
    p.add_argument("--mirror", help="local directory holding the releases in their published "
                   "layout (docs/recipes.md)")
    p.add_argument("--download", action="store_true", help="download the releases into --cache "
                   "first (then --cache is the mirror); never needed with --mirror")
    p.add_argument("--cache", help=f"download directory (default: $LANGSHARE_CACHE or "
                   f"{DEFAULT_CACHE})")
    p.add_argument("--langs", help="comma-separated subset of the corpus languages (default: all "
                   "the paper uses)")
    p.add_argument("--direction", help="which directions to train: o2m, m2o, both (English-"
                   "centric corpora; default both) or m2m, groups (lsl10; default m2m)")
    p.add_argument("--vocab-size", type=Range(16, why="SentencePiece pieces").of(int),
                   help="override the paper's SentencePiece vocabulary "
                   "size (e.g. a few hundred for tests)")
    p.add_argument("--spm-sentences", type=Range(1, why="sentences").of(int),
                   help="override the size of the SentencePiece "
                   "training text (total, or per language for lsl10)")
    p.add_argument("--max-train-per-pair", type=Range(1, why="training pairs").of(int),
                   help="cap on training pairs per language "
                   "pair after cleaning (default: no cap)")
    p.add_argument("--workers", type=Range(1, why="threads or processes").of(int),
                   default=1, help="threads/processes for encoding and "
                   "binarization; the output does not depend on it (default: %(default)s)")
    p.add_argument("--force", action="store_true", help="replace an existing --out")
    p.add_argument("--dry-run", action="store_true", help="print the full sequence of steps and "
                   "commands of the run (downloads with URLs, cleaning, SentencePiece, "
                   "fairseq-preprocess) and do nothing")
    p.add_argument("--list", action="store_true", help="print the corpora and exit")
    p.set_defaults(func=_run)


def _run(args):
    if args.list:
        for spec in CORPORA.values():
            print(f"{spec.name}\t{spec.pivot} + {len(spec.languages)} languages, vocab {spec.vocab_size}, "
                  f"directions {'/'.join(spec.directions)}\t{spec.reproduces}")
        return 0
    if not args.corpus:
        raise ValueError(f"name a corpus: one of {', '.join(CORPORA)}")
    get_spec(args.corpus)
    if not args.out:
        if not args.dry_run:
            raise ValueError("--out is required (the output directory)")
        args.out = f"data/{args.corpus}"
    prepare_corpus(args.corpus, args.out, mirror=args.mirror, download=args.download,
                   cache=args.cache, langs=args.langs, direction=args.direction,
                   vocab_size=args.vocab_size, spm_sentences=args.spm_sentences,
                   max_train_per_pair=args.max_train_per_pair, workers=args.workers,
                   force=args.force, dry_run=args.dry_run)
    sys.stdout.flush()
    return 0
