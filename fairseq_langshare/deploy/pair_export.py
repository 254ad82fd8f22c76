"""What every serving format of ``langshare export`` starts from: the pair's plain fairseq network.

``plain_pair`` runs ``export_pair`` (the ``--format fairseq`` export) into a scratch directory and
returns the result, refusing in one line a pair network that no plain Transformer holds (adapters,
a different head subset per layer, CLSR's learned gates), with what to do instead. The helpers
around it find what a serving format needs beside the weights: the fairseq dictionaries
(``data_dir``), the corpus' SentencePiece model (``find_spm``) and the language tokens the task puts
around a sentence of the pair (``language_tokens``); ``pair_manifest`` is what every format's
``langshare.json`` says of the pair and where it came from; ``require_library`` loads a format's
optional library or says in one line how to install it.
"""

import argparse
import datetime
import importlib
import json
import os
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import torch

from ..export import PLAIN_ARCH, ExportError, export_pair
from ..languages import dictionary_fingerprint, same_size_other_dictionary

__all__ = ["plain_pair", "language_tokens", "data_dir", "find_spm", "pair_dictionaries", "pair_manifest",
           "require_library", "model_name", "FAIRSEQ_INSTEAD", "SPM_NAME"]

SPM_NAME = "spm.model"

# pair networks no plain Transformer holds, by what `langshare export` makes of them (the export
# model, or the full model when the export itself fails), and what to do instead
FAIRSEQ_INSTEAD = "export with --format fairseq and translate with fairseq-generate --user-dir fairseq_langshare"
_NOT_PLAIN = {
    "langshare_adapter_single": ("adds language adapters to every layer", FAIRSEQ_INSTEAD),
    "adaptive_sparse_single": ("keeps a different subset of attention heads in each layer", FAIRSEQ_INSTEAD),
    "clsr_transformer": ("has CLSR projections that langshare export cannot write as a plain transformer (learned "
                         "gates pick them token by token)",
                         "translate the full checkpoint with fairseq-generate --user-dir fairseq_langshare"),
}


def model_name(checkpoint: Path) -> str:
    """The registered model (not the size preset) of a checkpoint."""
    from fairseq import checkpoint_utils
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    model_cfg = checkpoint_utils.load_checkpoint_to_cpu(str(checkpoint))["cfg"].model
    name = str(getattr(model_cfg, "_name", None) or getattr(model_cfg, "arch", "?"))
    return ARCH_MODEL_NAME_REGISTRY.get(name, name)


def _refuse_not_plain(name: str, src: str, tgt: str, checkpoint: Path, runtime: str, error_cls,
                      error: Optional[Exception] = None):
    why, instead = _NOT_PLAIN.get(name, ("is not a plain Transformer", FAIRSEQ_INSTEAD))
    raise error_cls(f"the {src}->{tgt} network of {checkpoint} ({name}) {why}, which {runtime} cannot run: "
                    f"{instead}") from error


def plain_pair(checkpoint: Path, src: str, tgt: str, scratch: Path, runtime: str, error_cls) -> Tuple[Dict, Dict]:
    """``export_pair`` of ``checkpoint`` into ``scratch/pair.pt``: (its report, the loaded checkpoint).
    A pair network that is no plain ``transformer`` is refused by ``error_cls``, one line naming
    why ``runtime`` cannot run it and what to do instead; other export errors pass unchanged."""
    pair_pt = Path(scratch) / "pair.pt"
    try:
        report = export_pair(checkpoint, src, tgt, pair_pt, verbose=False)
    except ExportError as error:
        name = model_name(checkpoint)
        if name not in _NOT_PLAIN:
            raise
        _refuse_not_plain(name, src, tgt, checkpoint, runtime, error_cls, error)
    state = torch.load(pair_pt, map_location="cpu", weights_only=True)
    if state["cfg"]["model"]["_name"] != PLAIN_ARCH:
        _refuse_not_plain(state["cfg"]["model"]["_name"], src, tgt, checkpoint, runtime, error_cls)
    return report, state


def data_dir(data, task_cfg: Dict, src: str, tgt: str, error_cls) -> Path:
    """The fairseq-preprocess directory with the pair's dictionaries: ``data`` (``--data``), else
    the one the model was trained on."""
    if data is None:
        trained_on = str(task_cfg.get("data") or "").split(os.pathsep)[0]
        if not trained_on or not Path(trained_on).is_dir():
            raise error_cls(f"the checkpoint's data directory {trained_on!r} does not exist here: pass --data, "
                            "the fairseq-preprocess directory (with dict.*.txt) the model was trained on")
        data = trained_on
    data = Path(data)
    for lang in (src, tgt):
        if not (data / f"dict.{lang}.txt").is_file():
            raise error_cls(f"no dict.{lang}.txt in {data}: pass --data, the fairseq-preprocess directory the "
                            "model was trained on")
    return data


def pair_dictionaries(state: Dict, data: Path, src: str, tgt: str, checkpoint: Path, error_cls):
    """The source and target dictionaries fairseq's multilingual task builds for the exported pair
    ``state`` (with its language tokens) from ``data``; refused by ``error_cls`` when they have the
    size of those the model was trained with but other entries (another corpus prepared alike: every
    embedding would fit and map to other pieces)."""
    from fairseq.tasks.translation_multi_simple_epoch import TranslationMultiSimpleEpochTask

    exported = state["extra_state"]["langshare_export"]
    args = argparse.Namespace(**state["cfg"]["task"])
    args.data = str(data)
    args.langs, args.lang_dict = list(exported["langs"]), None
    args.source_lang, args.target_lang, args.lang_pairs = src, tgt, [f"{src}-{tgt}"]
    task = TranslationMultiSimpleEpochTask.setup_task(args)
    dicts = {src: task.source_dictionary, tgt: task.target_dictionary}
    other = same_size_other_dictionary(exported.get("dictionary"), dictionary_fingerprint(dicts, exported["langs"]))
    if other:
        raise error_cls(f"the dictionaries in {data} are not those {checkpoint} was trained with ({other[1]} entries "
                        f"for {other[0]}, as there, but other entries or another order): pass --data, the "
                        "fairseq-preprocess directory the model was trained on")
    return task.source_dictionary, task.target_dictionary


def find_spm(data: Path, spm=None, error_cls=ExportError, lang: Optional[str] = None) -> Path:
    """``spm`` (``--spm``), else the SentencePiece model of a prepared corpus (``manifest.json``'s
    ``spm_model`` next to the binarized data directory, or ``spm.model`` there or inside it); with
    ``lang``, refused unless every piece it emits is in ``data``'s ``dict.<lang>.txt``."""
    found = _locate_spm(data, spm, error_cls)
    if lang is not None:
        _check_pieces(found, data / f"dict.{lang}.txt", error_cls)
    return found


def _locate_spm(data: Path, spm, error_cls) -> Path:
    if spm:
        if not Path(spm).is_file():
            raise error_cls(f"no SentencePiece model at {spm}: pass --spm, the model the corpus was encoded with")
        return Path(spm)
    corpus = data.parent
    candidates = [data / SPM_NAME, corpus / SPM_NAME]
    if (corpus / "manifest.json").is_file():
        with open(corpus / "manifest.json", encoding="utf-8") as f:
            name = json.load(f).get("spm_model")
        if name:
            candidates.insert(0, corpus / name)
    found = next((path for path in candidates if path.is_file()), None)
    if found is None:
        raise error_cls(f"no SentencePiece model next to {data}: pass --spm, the model the corpus was encoded with")
    return found


def _check_pieces(spm: Path, dictionary: Path, error_cls) -> None:
    """Every piece ``spm`` emits (normal and user-defined ones) is a symbol of ``dictionary``: a model of
    another corpus would turn text into other symbols' ids and <unk>, without a word."""
    import sentencepiece

    try:
        model = sentencepiece.SentencePieceProcessor(model_file=str(spm))
    except (OSError, RuntimeError) as error:
        raise error_cls(f"{spm} is not a SentencePiece model ({str(error).strip()}): pass --spm, the SentencePiece "
                        "model the corpus was encoded with") from None
    from fairseq.data import Dictionary

    symbols = Dictionary.load(str(dictionary)).indices
    missing = [model.id_to_piece(i) for i in range(model.get_piece_size())
               if not (model.is_control(i) or model.is_unknown(i) or model.is_unused(i) or model.is_byte(i))
               and model.id_to_piece(i) not in symbols]
    if missing:
        raise error_cls(f"{len(missing)} pieces of {spm} are not in {dictionary} (e.g. {missing[:3]}): pass --spm, "
                        "the SentencePiece model the corpus was encoded with")


def language_tokens(task_cfg: Dict, src: str, tgt: str, runtime: str, error_cls) -> Dict[str, List[str]]:
    """The tokens fairseq's multilingual task puts around a sentence of this pair: ``--encoder-langtok
    src|tgt`` prepends the source or target language's token to the source, ``--decoder-langtok``
    forces the target language's token as the first target token."""
    from fairseq.data.multilingual.multilingual_utils import get_lang_tok

    if task_cfg.get("lang_tok_replacing_bos_eos"):
        raise error_cls(f"--lang-tok-replacing-bos-eos checkpoints are not supported by {runtime}: translate with "
                        "fairseq-generate")
    style = task_cfg.get("lang_tok_style") or "multilingual"
    side = task_cfg.get("encoder_langtok")
    source = [get_lang_tok(src if side == "src" else tgt, style)] if side else []
    target = [get_lang_tok(tgt, style)] if task_cfg.get("decoder_langtok") else []
    return {"source_prefix": source, "target_prefix": target}


def pair_manifest(fmt: str, checkpoint: Path, src: str, tgt: str, report: Dict, state: Dict, tokens: Dict,
                  data: Path, spm: Path, library, **fields) -> Dict:
    """``langshare.json`` of a ``fmt`` export of the pair: its languages and language tokens, the
    SentencePiece model, parameter counts and provenance (``library``: the converting library's
    module, whose version is recorded); ``fields``: what the format adds."""
    import fairseq_langshare

    from ..data.corpus_build import sha256

    task = state["cfg"]["task"]
    return {
        "format": fmt, "version": 1, "src": src, "tgt": tgt,
        "langs": state["extra_state"]["langshare_export"]["langs"],
        "encoder_langtok": task.get("encoder_langtok"), "decoder_langtok": bool(task.get("decoder_langtok")),
        **tokens,
        "spm_model": SPM_NAME,
        **fields,
        "params": report["params"], "full_params": report["full_params"],
        "provenance": {
            "checkpoint": str(checkpoint.resolve()), "checkpoint_sha256": sha256(checkpoint),
            "num_updates": state["optimizer_history"][-1]["num_updates"],
            "data": str(data.resolve()), "corpus_spm": str(spm.resolve()), "spm_sha256": sha256(spm),
            "langshare_version": fairseq_langshare.__version__, f"{library.__name__}_version": library.__version__,
            "created": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        },
    }


def require_library(modules: Tuple[str, ...], name: str, extra: str, requirement: str, error_cls):
    """The first of ``modules`` once every one imports, or ``error_cls``: one line saying how to install ``name``
    (the package's optional ``extra``, or ``requirement`` alone)."""
    try:
        loaded = [importlib.import_module(module) for module in modules]
    except ImportError:
        raise error_cls(f"{name} is not installed: pip install 'fairseq_langshare[{extra}]' "
                        f"(or pip install '{requirement}')") from None
    return loaded[0]
