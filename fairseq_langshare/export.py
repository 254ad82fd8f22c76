"""``langshare export``: the sub-network one language pair uses, as a plain fairseq checkpoint.

The result is a fairseq ``transformer`` (arch ``transformer``) with a
``translation_multi_simple_epoch`` task config: fairseq's own model and task, so
``fairseq-generate --task translation_multi_simple_epoch`` (no ``--user-dir``) loads it and adds
the same language tokens as the full model's ``multilingual_langshare`` run, and translates the
pair exactly as the full model does (adapter models and adaptive sparse models with head
sparsity are the exception: see ``export_model`` below). It holds only the weights that pair
uses, no optimizer state, and no pickled Python objects (``args: None``; ``cfg`` is plain dicts
and lists), so it loads under ``torch.load(weights_only=True)`` without any allow-listing.

Generic over methods: a model class that has language-specific parts provides

    @classmethod
    def export_state_dict(cls, state_dict, model_cfg, src_id, tgt_id) -> (state_dict, cfg_changes)

returning the pair's weights under fairseq ``transformer`` names and model-config changes
(``None`` deletes a key). A model without one (``langshare_transformer``) exports itself. A
method whose pair sub-network is no plain Transformer (adapters, pruned heads) names the
registered model it exports to in a class attribute ``export_model`` (default ``"transformer"``,
or a function of the model config); that model's own options are kept in the exported config,
and loading it needs ``--user-dir``. The result is always checked against the keys and shapes of
the export model built from the exported config before anything is written; the file is written
to a temporary name and renamed, never over the checkpoint it comes from.

fairseq 0.12's ``fairseq-generate`` drops the last batch when its size is not a multiple of
``--required-batch-size-multiple`` (default 8; the plugin's task avoids that, fairseq's own does
not), so the command ``export`` prints for translating with the result passes
``--required-batch-size-multiple 1``; and, for a SentencePiece corpus (every corpus ``langshare
prepare-*`` writes), ``--remove-bpe sentencepiece``, so that it prints text as the README's
``fairseq-generate`` and ``langshare translate`` do, not pieces (``post_process_flags``).
"""

import argparse
import dataclasses
import logging
import os
import shlex
from enum import Enum
from pathlib import Path
from typing import Dict, List, Optional

import torch
from fairseq import checkpoint_utils
from fairseq.data import Dictionary
from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY
from fairseq.models.transformer import TransformerConfig, TransformerModel
from omegaconf import OmegaConf

from .atomic_files import OutputPathError, check_writable, write_atomic
from .checkpoint_safety import checkpoint_header
from .languages import decode_inventory, decode_settings
from .saved_config import config_value, export_record, trained_codes
from .tasks.multilingual_langshare import options_as_namespace

logger = logging.getLogger(__name__)

__all__ = ["export_pair", "check_pair", "generate_command", "post_process_flags", "ExportError", "PLAIN_ARCH"]

PLAIN_ARCH = "transformer"
PLAIN_TASK = "translation_multi_simple_epoch"
_PLAIN_CRITERIA = {"langshare_label_smoothed_cross_entropy": "label_smoothed_cross_entropy"}


class ExportError(ValueError):
    pass


def _transformer_keys():
    """The flat option names fairseq's ``transformer`` reads (TransformerConfig.from_namespace)."""
    keys = {"_name", "arch"}
    defaults = TransformerConfig()
    for f in dataclasses.fields(TransformerConfig):
        if f.name in ("encoder", "decoder", "quant_noise"):
            keys.update(f"{f.name}_{sub.name}" for sub in dataclasses.fields(getattr(defaults, f.name)))
        else:
            keys.add(f.name)
    return keys


def _plain(value):
    """Plain Python containers only (no Namespace, no Enum) so the file needs no allow-listing."""
    if isinstance(value, argparse.Namespace):
        value = vars(value)
    if OmegaConf.is_config(value):
        value = OmegaConf.to_container(value, resolve=True, enum_to_str=True)
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def _own_keys(export_cls):
    """The options an export model declares beyond fairseq's transformer (its ``config_class``)."""
    config = getattr(export_cls, "config_class", None)
    if not (dataclasses.is_dataclass(config) and issubclass(config, TransformerConfig)):
        return set()
    return {f.name for f in dataclasses.fields(config)} - {f.name for f in dataclasses.fields(TransformerConfig)}


# the options fairseq's transformer.build_model adds to its config when they are absent: under omegaconf < 2.2
# (fairseq's setup.py pins omegaconf<2.1) a loaded checkpoint's config is locked (set_struct), so a key added
# there fails the load ("Key 'max_source_positions' is not in struct"); the export writes them
_ADDED_AT_BUILD = ("max_source_positions", "max_target_positions", "min_params_to_wrap")


def _model_config(model_cfg, changes, export_name: str = PLAIN_ARCH, export_cls=None, task_cfg=None) -> Dict:
    values = _plain(model_cfg)
    for key in _ADDED_AT_BUILD:
        if values.get(key) is None:  # the task's value, else fairseq's default
            values[key] = config_value(task_cfg, key, TransformerConfig.__dataclass_fields__[key].default)
    for key, value in changes.items():
        if value is None:
            values.pop(key, None)
        else:
            values[key] = value
    keep = _transformer_keys() | _own_keys(export_cls)
    values = {k: v for k, v in values.items() if k in keep}
    values["_name"] = values["arch"] = export_name
    return values


def _task_config(task_cfg, src: str, tgt: str) -> Dict:
    values = _plain(vars(options_as_namespace(task_cfg)))
    values.update(_name=PLAIN_TASK, lang_pairs=[f"{src}-{tgt}"], source_lang=src, target_lang=tgt)
    values.pop("enable_lang_ids", None)
    return values


def _check_export_model(weights: Dict[str, torch.Tensor], model_cfg: Dict, export_cls=TransformerModel) -> None:
    """Build the export model (fairseq's transformer unless the method names another) from the
    exported config (on the meta device: no memory) and require exactly its keys and shapes."""
    def dictionary(size):
        d = Dictionary()
        while len(d) < size:
            d.add_symbol(f"<tok{len(d)}>")
        return d

    src = dictionary(weights["encoder.embed_tokens.weight"].size(0))
    tgt = src if model_cfg.get("share_all_embeddings") else dictionary(weights["decoder.embed_tokens.weight"].size(0))
    task = argparse.Namespace(source_dictionary=src, target_dictionary=tgt)
    args = argparse.Namespace(**model_cfg)
    with torch.device("meta"):
        expected = {k: tuple(v.shape) for k, v in export_cls.build_model(args, task).state_dict().items()}
    got = {k: tuple(v.shape) for k, v in weights.items()}
    missing, extra = sorted(set(expected) - set(got)), sorted(set(got) - set(expected))
    wrong = sorted(k for k in set(expected) & set(got) if expected[k] != got[k])
    if missing or extra or wrong:
        raise ExportError(
            f"the exported weights are not a {model_cfg['_name']} model "
            f"(missing {missing[:3]}, unexpected {extra[:3]}, wrong shapes {wrong[:3]}); the model class needs an "
            "export_state_dict(state_dict, model_cfg, src_id, tgt_id) that selects the pair's sub-network"
        )


_BOOKKEEPING = (".version", "._float_tensor")  # fairseq's float buffers that are no weights


def _unique_params(weights: Dict[str, torch.Tensor], nbytes: bool = False) -> int:
    """Parameters (or their bytes) stored, counting tied weights (shared embeddings) once and fairseq's
    bookkeeping buffers (``encoder.version``) not at all."""
    seen, total = set(), 0
    for name, value in weights.items():
        if not torch.is_floating_point(value) or name.endswith(_BOOKKEEPING):
            continue
        key = (value.untyped_storage().data_ptr(), value.storage_offset(), tuple(value.shape))
        if key not in seen:
            seen.add(key)
            total += value.numel() * (value.element_size() if nbytes else 1)
    return total


def _model_class(model_cfg):
    name = getattr(model_cfg, "_name", None) or getattr(model_cfg, "arch", None)
    cls = ARCH_MODEL_REGISTRY.get(name) or MODEL_REGISTRY.get(name)
    if cls is None:
        raise ExportError(f"unknown model {name!r} in the checkpoint: import the package that registers it")
    return cls


def check_pair(src: str, tgt: str) -> None:
    """Refuse a pair with the same language on both sides (every --format, before anything is read)."""
    if src == tgt:
        raise ExportError(f"--src and --tgt are both {src!r}; a pair needs two different languages: pass another "
                          "--tgt (one of the checkpoint's --langs)")


def export_pair(checkpoint, src: str, tgt: str, out_path, verbose: bool = True) -> Dict:
    """Write the ``src``->``tgt`` sub-network of ``checkpoint`` to ``out_path`` as a plain fairseq
    transformer checkpoint; return (and print) its size against the full checkpoint."""
    check_pair(src, tgt)
    checkpoint, out_path = Path(checkpoint), Path(out_path)
    if not checkpoint.is_file():
        raise FileNotFoundError(f"no checkpoint {checkpoint}: pass the .pt file fairseq-train wrote")
    check_writable(out_path, "--out", inputs=[checkpoint], command="export")  # a FIFO, a link: refused
    state = checkpoint_utils.load_checkpoint_to_cpu(str(checkpoint))
    cfg, weights = state["cfg"], state["model"]
    check_writable(out_path, "--out", inputs=[checkpoint], protected=_protected(checkpoint, cfg), own=_is_export,
                   command="export")
    if out_path.is_file() and not _is_export(out_path):
        raise OutputPathError(f"--out {out_path} exists and export did not write it; remove it or write to another path")
    langs = decode_inventory(weights["lang_inventory"]) if "lang_inventory" in weights else []
    trained_dictionary = decode_settings(weights["lang_inventory"]).get("dictionary", "") if langs else ""
    if not langs:
        raise ExportError(f"{checkpoint} holds no language inventory: export needs a fairseq_langshare checkpoint")
    for flag, code in (("--src", src), ("--tgt", tgt)):
        if code not in langs:
            raise ExportError(f"unknown language {code!r} for {flag}: the checkpoint's languages are "
                              f"{','.join(langs)}; pick one of them")
    src_id, tgt_id = langs.index(src), langs.index(tgt)

    model_cls = _model_class(cfg.model)
    exporter = getattr(model_cls, "export_state_dict", None)
    if exporter is not None:
        pair_weights, changes = exporter(weights, cfg.model, src_id, tgt_id)  # may refuse the pair
    else:
        pair_weights, changes = {k: v for k, v in weights.items() if k != "lang_inventory"}, {}
    _warn_if_untrained_sides(cfg.task, langs, src, tgt)
    export_name = getattr(model_cls, "export_model", PLAIN_ARCH)
    if callable(export_name):  # a method whose export model depends on its options (adaptive sparse)
        export_name = export_name(cfg.model)
    export_cls = MODEL_REGISTRY[export_name]
    model_cfg = _model_config(cfg.model, changes, export_name, export_cls, cfg.task)
    _check_export_model(pair_weights, model_cfg, export_cls)

    sections = {k: _plain(cfg[k]) for k in cfg if k not in ("model", "task")}
    if isinstance(sections.get("common"), dict):
        sections["common"]["user_dir"] = None
    criterion = sections.get("criterion")
    if isinstance(criterion, dict) and criterion.get("_name") in _PLAIN_CRITERIA:
        criterion["_name"] = _PLAIN_CRITERIA[criterion["_name"]]
    history = state.get("optimizer_history") or [{}]
    exported = {
        "args": None,
        "cfg": {**sections, "model": model_cfg, "task": _task_config(cfg.task, src, tgt)},
        "model": {k: v.clone() for k, v in pair_weights.items()},  # no views into the full model's storage
        "optimizer_history": [{
            "criterion_name": "LabelSmoothedCrossEntropyCriterion",
            "optimizer_name": str(history[-1].get("optimizer_name", "")),
            "lr_scheduler_state": {"best": None},
            "num_updates": int(history[-1].get("num_updates", 0)),
        }],
        "extra_state": {"train_iterator": {"epoch": 1, "iterations_in_epoch": 0},
                        "langshare_export": {"from": str(checkpoint), "src": src, "tgt": tgt, "langs": langs,
                                             # the dictionaries it was trained with (a runtime export checks --data)
                                             "dictionary": trained_dictionary}},
        "last_optimizer_state": None,
    }
    _retie(exported["model"], pair_weights)

    write_atomic(out_path, lambda tmp: torch.save(exported, tmp))

    report = {
        "path": str(out_path), "src": src, "tgt": tgt,
        "bytes": out_path.stat().st_size, "full_bytes": checkpoint.stat().st_size,
        "params": _unique_params(pair_weights), "full_params": _unique_params(weights),
        "weight_bytes": _unique_params(pair_weights, nbytes=True), "full_weight_bytes": _unique_params(weights, nbytes=True),
    }
    report["param_ratio"] = report["params"] / max(report["full_params"], 1)
    if verbose:
        print(f"exported {src}->{tgt} to {out_path}: {report['bytes'] / 1e6:.2f} MB file, {report['params']:,} parameters "
              f"({report['param_ratio']:.0%} of the full model's {report['full_params']:,}, whose weights take "
              f"{report['full_weight_bytes'] / 1e6:.2f} MB; the full checkpoint file"
              f"{' with optimizer state' if state.get('last_optimizer_state') else ''} "
              f"{report['full_bytes'] / 1e6:.2f} MB)")
        print("translate with it (DATA: the binarized data directory): "
              + generate_command(out_path, exported["cfg"]["task"], export_name))
    return report


def _warn_if_untrained_sides(task_cfg, langs, src: str, tgt: str) -> None:
    """A direction whose source never was a source, or target a target, in training runs whatever the
    model keeps for that language on that side at its initial values: say so. A zero-shot direction
    between languages trained on their sides is the model's to translate, without a word."""
    new_source = src not in trained_codes(task_cfg, langs, "src")
    new_target = tgt not in trained_codes(task_cfg, langs, "tgt")
    if not (new_source or new_target):
        return
    pairs = config_value(task_cfg, "lang_pairs", "")
    what = (f"{src} was never a source language nor {tgt} a target language" if new_source and new_target else
            f"{src} was never a source language" if new_source else f"{tgt} was never a target language")
    logger.warning("%s->%s is not a trained direction (--lang-pairs %s), and %s: whatever the model keeps for a "
                   "language on that side (language-specific layers, a stack, an adapter) is untrained, at its "
                   "initial values", src, tgt, pairs if isinstance(pairs, str) else ",".join(pairs), what)


def _protected(checkpoint: Path, cfg) -> Dict[str, Optional[str]]:
    """The directories whose files --out may not replace (an earlier export aside): the checkpoint's run and
    the data directory it was trained on (with its corpus, where a manifest.json says it is one)."""
    data = str(getattr(cfg.get("task"), "data", None) or "").split(os.pathsep)[0] if cfg else ""
    corpus = data if data and os.path.isdir(data) else None
    if corpus and os.path.isfile(os.path.join(os.path.dirname(os.path.abspath(corpus)), "manifest.json")):
        corpus = os.path.dirname(os.path.abspath(corpus))
    return {"run": str(checkpoint.parent), "corpus": corpus}


def _is_export(path: Path) -> bool:
    """Whether ``path`` is a checkpoint this command wrote (its ``extra_state`` names the export)."""
    try:
        return export_record(checkpoint_header(path)) is not None
    except Exception:  # noqa: BLE001 - any file that is no loadable checkpoint is not ours
        return False


def generate_command(path, task_cfg: Dict, export_name: str = PLAIN_ARCH) -> str:
    """The fairseq-generate command line for an exported checkpoint, with the language flags of its task
    config, --required-batch-size-multiple 1 (without it fairseq 0.12 drops the last batch when its
    size is not a multiple of 8: 16 of 20 sentences translated) and the post-processing its data needs
    (``post_process_flags``: without --remove-bpe sentencepiece, SentencePiece's pieces instead of text)."""
    from .evaluation import PACKAGE_DIR, _task_flags

    argv = ["fairseq-generate", "DATA", "--task", PLAIN_TASK, "--path", str(path)]
    argv += ["--user-dir", PACKAGE_DIR] if export_name != PLAIN_ARCH else []
    argv += ["-s", task_cfg["source_lang"], "-t", task_cfg["target_lang"], *_task_flags(PLAIN_TASK, task_cfg),
             "--gen-subset", "test", "--required-batch-size-multiple", "1",
             *post_process_flags(task_cfg.get("data"), task_cfg["target_lang"])]
    return shlex.join(argv)


def post_process_flags(data, lang: str) -> List[str]:
    """fairseq-generate's flags that turn ``lang``'s output into text, by the pieces of its dictionary in the data
    directory ``data`` (the first of an os.pathsep list): ``--remove-bpe sentencepiece`` for SentencePiece pieces
    (``\u2581``), ``--remove-bpe`` for subword-nmt's (``@@``), whichever kind is more numerous and at least a
    tenth of the symbols; none for whole words (the flag would glue them).
    Without a readable dictionary: ``--remove-bpe sentencepiece``, what every corpus ``langshare prepare-*``
    writes needs (and the README's fairseq-generate passes)."""
    sentencepiece = ["--remove-bpe", "sentencepiece"]
    directory = str(data or "").split(os.pathsep)[0]
    if not directory:
        return sentencepiece
    for name in (f"dict.{lang}.txt", "dict.txt"):
        try:
            with open(os.path.join(directory, name), encoding="utf-8") as f:
                symbols = [line.split()[0] for line in f if line.strip()]
        except (OSError, UnicodeDecodeError):
            continue
        pieces = sum("\u2581" in symbol for symbol in symbols)
        subwords = sum(symbol.endswith("@@") for symbol in symbols)
        if max(pieces, subwords) * 10 < len(symbols):  # a stray symbol decides nothing: whole words
            return []
        return sentencepiece if pieces > subwords else ["--remove-bpe"]
    return sentencepiece


def _retie(cloned: Dict[str, torch.Tensor], original: Dict[str, torch.Tensor]) -> None:
    """Keep weights that were one tensor (shared embeddings) one tensor after cloning."""
    first = {}
    for key, value in original.items():
        ident = (value.untyped_storage().data_ptr(), value.storage_offset(), tuple(value.shape), value.stride())
        if ident in first:
            cloned[key] = cloned[first[ident]]
        else:
            first[ident] = key
