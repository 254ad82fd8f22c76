"""What the serving-format tests (``--format ctranslate2``, ``--format transformers``) share: the tiny
English->{de,fr} SentencePiece corpus (the ``spm_corpus`` fixture in conftest.py builds it once), its
raw test text, the optional libraries, checkpoints of freshly built models, every method whose pair exports as a plain
Transformer, the pieces fairseq-interactive feeds the encoder, and the one line ``langshare`` answers."""

import importlib
from pathlib import Path

import pytest

LANGS, PAIRS = ["en", "de", "fr"], ["en-de", "en-fr"]
TRAIN = ["--criterion", "langshare_label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--optimizer", "adam",
         "--lr", "0.005", "--max-tokens", "1000", "--log-format", "json", "--log-interval", "100", "--cpu",
         "--no-epoch-checkpoints", "--num-workers", "0", "--seed", "3", "--disable-validation"]

# every model whose pair network `langshare export` writes as a plain transformer
PLAIN_EXPORTS = {
    "baseline": ("langshare_transformer_tiny", []),
    "lsl": ("lsl_transformer_tiny", ["--lsl-encoder-layers", "SRC={1} & TGT={3,4}", "--lsl-separate-decoder"]),
    "latent_depth": ("latent_depth_transformer_tiny", []),
    "adaptive_sparse_ffn_layer": ("adaptive_sparse_transformer_tiny", ["--sparse-types", "ffn,layer", "--sparse-t-bar", "4"]),
    "multistack": ("langshare_multistack_transformer_tiny", ["--multi-encoder", "src-lang", "--multi-decoder", "tgt-lang"]),
    "clsr_dedicated": ("clsr_transformer_tiny", ["--max-update", "10", "--clsr-encoder-lang", "tgt", "--clsr-variant",
                                                 "dedicated", "--clsr-dedicated", "enc1.ffn,dec2.cross_attn,dec1.self_attn"]),
}


def optional_library(module: str, name: str, extra: str):
    """(``module``, or None where it is not installed; a mark that skips a test without it, saying how to
    install it)."""
    try:
        loaded = importlib.import_module(module)
    except ImportError:
        loaded = None
    return loaded, pytest.mark.skipif(loaded is None, reason=f"{name} is not installed (optional extra: "
                                                             f"pip install '.[{extra}]')")


def prepare_spm_corpus(root) -> Path:
    """A tiny English->{de,fr} corpus with its SentencePiece model (the layout langshare prepare-* writes)."""
    from recipe_mirrors import prepare_tiny

    return Path(prepare_tiny("opus100", root, langs=["de", "fr"], direction="o2m"))


def corpus_of(spm_corpus):
    """``spm_corpus`` as ``tiny_corpus.build_task_and_model`` takes a corpus."""
    return {"bin": spm_corpus / "bin", "langs": LANGS, "pairs": PAIRS}


def raw(corpus, pair, lang):
    return (corpus / "raw" / f"test.{pair}.{lang}").read_text(encoding="utf-8").splitlines()


def interactive_pieces(spm, line):
    """The pieces fairseq-interactive looks up in the dictionary: the line stripped, SentencePiece's
    pieces joined by spaces, split on whitespace (``Dictionary.encode_line``)."""
    return " ".join(spm.encode(line.strip(), out_type=str)).split()


def foreign_spm(path):
    """A SentencePiece model of another corpus (Greek text): its pieces are not in the tiny corpus' dictionary, as
    with a user's --spm naming the wrong corpus' model."""
    import sentencepiece

    words = "αλφα βητα γαμμα δελτα εψιλον ζητα ητα θητα ιωτα καππα λαμβδα μυ νυ ξι ομικρον πι ρω σιγμα".split()
    lines = [" ".join(words[(i * k) % len(words)] for k in range(1, 8)) for i in range(200)]
    sentencepiece.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_prefix=str(path.with_suffix("")),
                                             vocab_size=60, hard_vocab_limit=False, minloglevel=2, num_threads=1)
    return path


def save_untrained(model, args, path):
    """A checkpoint as fairseq-train writes it (cfg as plain containers), of a freshly built model."""
    import torch

    from fairseq_langshare.export import _plain

    cfg = _plain(args)
    torch.save({"args": None, "cfg": {"model": cfg, "task": cfg}, "model": model.state_dict(),
                "optimizer_history": [{"criterion_name": "c", "optimizer_name": "o", "lr_scheduler_state": {"best": None},
                                       "num_updates": 0}],
                "extra_state": {"train_iterator": {"epoch": 1, "iterations_in_epoch": 0}}}, path)
    return path


def one_line_error(capsys, prog="export"):
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"langshare {prog}: error: ") and "\n" not in err, err
    return err


def same_size_dictionaries(spm_corpus, root):
    """A data directory whose dictionaries are the corpus' with two entries swapped: the same size, so every
    embedding fits, as with another corpus prepared alike (same languages, same --vocab-size)."""
    root.mkdir()
    for path in (spm_corpus / "bin").glob("dict*.txt"):
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        lines[4], lines[5] = lines[5], lines[4]
        (root / path.name).write_text("".join(lines), encoding="utf-8")
    return root
