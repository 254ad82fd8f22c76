"""Tiny, learnable multilingual corpora made inside the tests, and in-process fairseq runs."""

import json
import logging
import os
import random
from pathlib import Path

import fairseq_langshare

PKG_DIR = os.path.dirname(os.path.abspath(fairseq_langshare.__file__))

WORDS = ("cat dog house tree red blue big small one two three open close file edit view "
         "help save print quit new copy paste cut find next back home stop play").split()


def translate(sentence: str, lang: str) -> str:
    """A deterministic 'language': every word gets a language-specific suffix, and
    language 'yy' also reverses the word order (so target languages really differ)."""
    words = [f"{w}{lang}" for w in sentence.split()]
    return " ".join(reversed(words) if lang.endswith("y") else words)


def make_corpus(root: Path, pairs=("en-xx", "en-yy"), extra_test_pairs=(), n_train=300, n_test=20, seed=0):
    """Write raw text and binarize it with fairseq-preprocess (one joint dictionary)."""
    from fairseq import options
    from fairseq_cli import preprocess

    rng = random.Random(seed)
    raw, bin_dir = root / "raw", root / "bin"
    raw.mkdir(parents=True, exist_ok=True)
    vocab = set()
    splits = {"train": n_train, "valid": n_test, "test": n_test}
    all_pairs = list(pairs) + list(extra_test_pairs)
    for pair in all_pairs:
        src, tgt = pair.split("-")
        for split, n in splits.items():
            if pair in extra_test_pairs and split == "train":
                continue
            lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 7))) for _ in range(n)]
            src_lines = [l if src == "en" else translate(l, src) for l in lines]
            tgt_lines = [translate(l, tgt) for l in lines]
            (raw / f"{split}.{pair}.{src}").write_text("\n".join(src_lines) + "\n")
            (raw / f"{split}.{pair}.{tgt}").write_text("\n".join(tgt_lines) + "\n")
            for line in src_lines + tgt_lines:
                vocab.update(line.split())
    bin_dir.mkdir(exist_ok=True)
    dict_path = root / "dict.txt"
    dict_path.write_text("".join(f"{w} 1\n" for w in sorted(vocab)))
    parser = options.get_preprocessing_parser()
    for pair in all_pairs:
        src, tgt = pair.split("-")
        has_train = pair not in extra_test_pairs
        argv = ["--source-lang", src, "--target-lang", tgt, "--destdir", str(bin_dir),
                "--srcdict", str(dict_path), "--tgtdict", str(dict_path), "--workers", "1",
                "--validpref", str(raw / f"valid.{pair}"), "--testpref", str(raw / f"test.{pair}")]
        if has_train:
            argv += ["--trainpref", str(raw / f"train.{pair}")]
        else:
            argv += ["--only-source"] if False else []
        if not has_train:
            # fairseq-preprocess wants a train prefix; reuse valid as a throwaway train split
            argv += ["--trainpref", str(raw / f"valid.{pair}")]
        preprocess.main(parser.parse_args(argv))
        if not has_train:
            for lang in (src, tgt):
                for ext in ("bin", "idx"):
                    os.remove(bin_dir / f"train.{pair}.{lang}.{ext}")
    langs = sorted({l for p in all_pairs for l in p.split("-")})
    for lang in langs:
        (bin_dir / f"dict.{lang}.txt").write_text(dict_path.read_text())
    return {"root": root, "bin": bin_dir, "raw": raw, "langs": langs, "pairs": list(pairs)}


def task_args(corpus, langs=None, pairs=None, langtok=True):
    return [str(corpus["bin"]), "--task", "multilingual_langshare", "--user-dir", PKG_DIR,
            "--langs", ",".join(langs or corpus["langs"]), "--lang-pairs", ",".join(pairs or corpus["pairs"])
            ] + (["--encoder-langtok", "tgt"] if langtok else [])


def train(argv, overrides=None):
    """Run fairseq-train in-process; return the parsed json log records. ``overrides``
    ({"common.tpu": False, ...}) are set on the config as fairseq-hydra-train's would be."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq_cli import train as train_cli
    from omegaconf import OmegaConf

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, argv)
    cfg = convert_namespace_to_omegaconf(args)
    for key, value in (overrides or {}).items():
        OmegaConf.update(cfg, key, value)
    records = []
    handler = _JsonCollector(records)
    logging.getLogger().addHandler(handler)
    try:
        train_cli.main(cfg)
    finally:
        logging.getLogger().removeHandler(handler)
    return records


def generate(argv):
    """Run fairseq-generate in-process; return {sample id: (hypothesis tokens, detok string)}."""
    import io
    from contextlib import redirect_stdout

    from fairseq import options
    from fairseq_cli import generate as generate_cli

    if "--num-workers" not in argv:  # a data-loader worker process costs seconds per call
        argv = list(argv) + ["--num-workers", "0"]
    parser = options.get_generation_parser()
    args = options.parse_args_and_arch(parser, argv)
    out = io.StringIO()
    with redirect_stdout(out):
        generate_cli.main(args)
    hyps = {}
    for line in out.getvalue().splitlines():
        if line.startswith("H-"):
            head, _score, text = line.split("\t")
            hyps[int(head[2:])] = text
    return hyps


class _JsonCollector(logging.Handler):
    def __init__(self, records):
        super().__init__()
        self.records = records

    def emit(self, record):
        msg = record.getMessage()
        if msg.startswith("{"):
            try:
                self.records.append(json.loads(msg))
            except ValueError:
                pass


def build_task_and_model(corpus, arch="langshare_transformer_tiny", extra=(), langs=None, pairs=None, seed=1,
                         langtok=True):
    """Set up the task and a freshly initialised model exactly as fairseq-train would."""
    import torch
    from fairseq import options, tasks

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(
        parser, task_args(corpus, langs, pairs, langtok) + ["--arch", arch, "--cpu", *extra]
    )
    torch.manual_seed(seed)
    task = tasks.setup_task(args)
    model = task.build_model(args)
    return task, model, args
