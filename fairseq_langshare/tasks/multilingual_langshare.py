"""Task ``multilingual_langshare``: ``translation_multi_simple_epoch`` with per-sentence
language ids for training, validation, ``fairseq-generate`` and ``fairseq-interactive``.

* every batch carries ``src_lang_id`` and ``tgt_lang_id`` (LongTensor, B) in ``net_input``,
  row-aligned after the collater's length sort (``LanguageTaggedDataset``);
* ids index the ``--langs`` inventory, which the model stores with its weights; loading a
  checkpoint re-maps a reordered ``--langs`` by code or refuses a different set
  (``LanguageInventory.adopt``);
* at inference (``fairseq-interactive`` passes no ids) the ids come from ``-s``/``-t``; one bad input
  line (not UTF-8, too long) is replaced or skipped with a warning, an ``--input`` file that is not
  UTF-8 is refused at start-up (``interactive_input``);
* binarized data is checked before fairseq opens it (``data.binarized``), the language-token flags are
  stored with the inventory and checked on load, bad options are one-line errors;
* options are a ``FairseqDataclass`` so ``fairseq-hydra-train`` works too.
"""

import argparse
import dataclasses
import inspect
import logging
import os
import re
from enum import Enum
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import numpy as np
import torch
from fairseq.data.multilingual.multilingual_data_manager import MultilingualDatasetManager
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.dataclass.utils import gen_parser_from_dataclass
from fairseq.tasks import register_task
from fairseq.tasks.translation_multi_simple_epoch import TranslationMultiSimpleEpochTask
from fairseq.utils import csv_str_list, eval_str_dict
from omegaconf import II, OmegaConf

from ..criterions.auxiliary_terms import require_auxiliary_criterion
from ..data.binarized import sentence_count
from ..distributed_launch import check_training_is_distributed
from ..languages import LanguageInventory, dictionary_fingerprint
from ..models.config_transformer import check_model_node
from ..modules.first_rank import first_rank
from ..modules.routing import host_ids, new_batch, note_host_ids
from ..option_ranges import Range, check_ranges
from ..user_errors import fairseq_cli, option_text
from .interactive_input import (check_input_file, decodable, input_option, tolerate_undecodable_stdin,
                                warn_too_long)
from .training_epoch import keep_the_last_batch, resume_across_process_counts
from .language_tagged_dataset import HOST_IDS, LanguageTaggedDataset, attach_lang_ids
from ..checkpoint_safety import saved_updates
from ..resumed_flags import check_resumed_flags
from ..run_options import (resumed_checkpoint, resumed_model_config, resumes_own_checkpoint, run_option,
                           saved_checkpoint)

logger = logging.getLogger(__name__)

SAMPLING_METHODS = ChoiceEnum(["uniform", "temperature", "concat", "RoundRobin"])
LANGTOK_SIDES = ChoiceEnum(["src", "tgt"])


@dataclass
class MultilingualLangshareConfig(FairseqDataclass):
    """The options of fairseq's ``translation_multi_simple_epoch``, declared once as a dataclass."""

    data: Optional[str] = field(default=None, metadata={"help": "colon-separated data directories (binarized with fairseq-preprocess)"})
    langs: Optional[str] = field(default=None, metadata={"help": "comma-separated language inventory; ids index it and it is stored in the checkpoint"})
    lang_dict: Optional[str] = field(default=None, metadata={"help": "file with the language inventory, one code per line (exclusive with --langs)"})
    lang_pairs: Optional[str] = field(default=None, metadata={"help": "comma-separated training directions, e.g. en-de,en-fr, or a file holding them (separated by commas and/or newlines)"})
    source_lang: Optional[str] = field(default=None, metadata={"help": "inference source language", "argparse_alias": "-s"})
    target_lang: Optional[str] = field(default=None, metadata={"help": "inference target language", "argparse_alias": "-t"})
    keep_inference_langtok: bool = field(default=False, metadata={"help": "keep the target language token (--decoder-langtok) in the hypotheses of fairseq-generate/-interactive"})
    sampling_method: SAMPLING_METHODS = field(default="concat", metadata={"help": "how to sample data across language pairs"})
    sampling_temperature: float = field(default=1.5, metadata={
        "help": "temperature T for --sampling-method temperature (p ~ n^(1/T))",
        "range": Range(0, low_open=True, why="pairs are sampled in proportion to n^(1/T): 1 follows the data sizes, "
                                              "larger values are flatter, the papers use 5")})
    source_dict: Optional[str] = field(default=None, metadata={"help": "source dictionary overriding per-language dictionaries"})
    target_dict: Optional[str] = field(default=None, metadata={"help": "target dictionary overriding per-language dictionaries"})
    lang_tok_style: str = field(default="multilingual", metadata={"help": "language token style: multilingual (__xx__) or mbart ([xx])"})
    load_alignments: bool = field(default=False, metadata={"help": "load the binarized alignments"})
    left_pad_source: str = field(default="True", metadata={"help": "pad the source on the left"})
    left_pad_target: str = field(default="False", metadata={"help": "pad the target on the left"})
    max_source_positions: int = field(default=1024, metadata={
        "help": "max number of tokens in the source sequence",
        "range": Range(1, why="the most tokens a sentence may have")})
    max_target_positions: int = field(default=1024, metadata={
        "help": "max number of tokens in the target sequence",
        "range": Range(1, why="the most tokens a sentence may have")})
    upsample_primary: int = field(default=1, metadata={
        "help": "amount to upsample primary dataset",
        "range": Range(1, why="copies of the primary dataset")})
    truncate_source: bool = field(default=False, metadata={"help": "truncate source to max-source-positions"})
    encoder_langtok: Optional[LANGTOK_SIDES] = field(default=None, metadata={"help": "prepend the source or target language token to the source"})
    decoder_langtok: bool = field(default=False, metadata={"help": "prepend the target language token to the target"})
    lang_tok_replacing_bos_eos: bool = field(default=False, metadata={"help": "replace bos/eos by language tokens"})
    enable_lang_ids: bool = field(default=False, metadata={"help": "ignored: this task always provides per-sentence src_lang_id/tgt_lang_id"})
    enable_reservsed_directions_shared_datasets: bool = field(default=False, metadata={"help": "allow datasets to be used in reversed directions"})
    extra_data: Optional[str] = field(default=None, metadata={"help": "dict of extra data name to path"})
    extra_lang_pairs: Optional[str] = field(default=None, metadata={"help": "dict of extra data name to the language pairs they serve"})
    fixed_dictionary: Optional[str] = field(default=None, metadata={"help": "fixed dictionary to use with model path"})
    langtoks_specs: str = field(default="main", metadata={"help": "comma-separated data types with their own language tokens"})
    langtoks: Optional[str] = field(default=None, metadata={"help": "dict of how to add language tokens per data type"})
    sampling_weights_from_file: Optional[str] = field(default=None, metadata={"help": "file with a dict of sampling weights"})
    sampling_weights: Optional[str] = field(default=None, metadata={"help": "dict of sampling weights per data set"})
    virtual_epoch_size: Optional[int] = field(default=None, metadata={
        "help": "virtual epoch size to speed up data loading",
        "range": Range(1, why="sentences per virtual epoch")})
    virtual_data_size: Optional[int] = field(default=None, metadata={
        "help": "virtual data size of the whole joint dataset",
        "range": Range(1, why="sentences")})
    # read by fairseq's data manager from the task options
    seed: int = II("common.seed")
    dataset_impl: Optional[str] = II("dataset.dataset_impl")
    train_subset: str = II("dataset.train_subset")
    # read by the task from the checkpoint a run starts from (``run_options.resumed_checkpoint``): a resume past
    # --max-update, a changed batch per update, the criterion's check. fairseq-train builds the task's options
    # from these fields only, so every option the task reads is one of them.
    max_update: int = II("optimization.max_update")
    update_freq: List[int] = II("optimization.update_freq")
    save_dir: str = II("checkpoint.save_dir")
    restore_file: str = II("checkpoint.restore_file")
    checkpoint_suffix: str = II("checkpoint.checkpoint_suffix")
    continue_once: Optional[str] = II("checkpoint.continue_once")
    finetune_from_model: Optional[str] = II("checkpoint.finetune_from_model")


LANG_KEYS = ("src_lang_id", "tgt_lang_id")
_DICT_OPTIONS = ("extra_data", "extra_lang_pairs", "langtoks", "sampling_weights")


def _read_if_file(value):
    """A ``--lang-pairs`` file's pairs as the comma form: they are separated by commas and/or newlines."""
    if isinstance(value, str) and os.path.isfile(value):
        with open(value, encoding="utf-8") as f:
            return ",".join(p.strip() for p in re.split(r"[,\n]", f.read()) if p.strip())
    return value


def options_as_namespace(cfg) -> argparse.Namespace:
    """The Namespace fairseq's multilingual data manager expects, from any config form."""
    if isinstance(cfg, argparse.Namespace):
        values = dict(vars(cfg))
    elif OmegaConf.is_config(cfg):
        values = OmegaConf.to_container(cfg, resolve=True)
    else:
        values = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    values = {k: (v.value if isinstance(v, Enum) else v) for k, v in values.items()}
    values["lang_pairs"] = _read_if_file(values.get("lang_pairs"))
    if isinstance(values.get("langs"), str):
        values["langs"] = csv_str_list(values["langs"])
    if isinstance(values.get("langtoks_specs"), str):
        values["langtoks_specs"] = csv_str_list(values["langtoks_specs"])
    for key in _DICT_OPTIONS:
        if isinstance(values.get(key), str):
            values[key] = eval_str_dict(values[key], type=str)
    values["enable_lang_ids"] = False  # fairseq's batch-level ids are replaced by ours
    return argparse.Namespace(**values)


def check_dictionaries(args):
    """Every language must be in the inventory and have its ``dict.<lang>.txt`` (fairseq reads
    one per language): say which is missing before fairseq fails on it."""
    if args.source_dict or args.target_dict or not args.data or not args.lang_pairs:
        return
    data = args.data.split(":")[0]
    if args.source_lang or args.target_lang:
        langs = [args.source_lang, args.target_lang]
    else:
        pairs = args.lang_pairs.split(",") if isinstance(args.lang_pairs, str) else args.lang_pairs
        langs = sorted({lang for pair in pairs for lang in pair.split("-")})
    for lang in langs:
        if lang and args.langs and lang not in args.langs:
            raise ValueError(
                f"unknown language {lang!r}: it is not in --langs {','.join(args.langs)}; "
                f"add it to --langs or fix the language pairs / -s -t"
            )
        path = os.path.join(data, f"dict.{lang}.txt")
        if lang and not os.path.exists(path):
            raise FileNotFoundError(
                f"no dictionary for language {lang!r}: expected {path}; build {data} with its '{lang}' files "
                f"(langshare prepare-data or prepare-gettext write one joint dictionary for every language) "
                f"or drop {lang} from the language pairs"
            )


def check_options(args):
    """Options fairseq would accept and then fail on deep inside (or, for fairseq-interactive, only after
    the first input line): one line naming the problem and the fix."""
    check_ranges(args, MultilingualLangshareConfig, "task")
    if fairseq_cli() == "fairseq-interactive":
        require_direction(args)
        tolerate_undecodable_stdin()
        check_input_file(input_option())


def require_direction(args):
    if args.source_lang is None or args.target_lang is None:
        langs = ",".join(args.langs) if args.langs else "the inventory"
        raise ValueError(f"translating raw text needs its direction: pass -s SRC -t TGT (languages of --langs {langs})")


def check_binarized(split, data_path, src, tgt):
    """An empty, truncated or half-deleted split of a direction, before fairseq's memory-mapped reader fails on it."""
    for a, b in ((src, tgt), (tgt, src)):
        prefix = os.path.join(data_path, f"{split}.{a}-{b}.")
        if os.path.exists(prefix + f"{src}.idx"):
            for lang in (src, tgt):
                if os.path.exists(prefix + f"{lang}.idx"):
                    if not os.path.exists(prefix + f"{lang}.bin"):
                        raise FileNotFoundError(f"{prefix}{lang}.bin is missing (its index {prefix}{lang}.idx is "
                                                f"there): re-binarize the {split} data of {a}-{b} with "
                                                "fairseq-preprocess")
                    sentence_count(prefix + lang)
            return


class ResumedPastMaxUpdate(RuntimeError):
    """A RuntimeError: fairseq's trainer re-raises those from a training step as they are, where any other error
    first makes it save ``crash.pt`` into the run directory."""


def check_half_precision_device(args) -> None:
    """Refuse ``--fp16`` on the CPU without ``--fp16-no-flatten-grads`` (a GPU command line with --cpu added):
    fairseq's FP16Optimizer puts its flat float32 copy of the parameters on CUDA, and stops with an
    AssertionError traceback. ``--memory-efficient-fp16`` keeps no such copy and trains on the CPU."""
    if (run_option(args, "cpu", "common", False) and run_option(args, "fp16", "common", False)
            and not run_option(args, "memory_efficient_fp16", "common", False)
            and not run_option(args, "fp16_no_flatten_grads", "common", False)):
        raise ValueError("--fp16 with --cpu: fairseq keeps its flat float32 copy of the parameters on CUDA; add "
                         "--fp16-no-flatten-grads (or drop --fp16)")


def check_resumed_updates(update_num: int, args) -> None:
    """Refuse, at the first update of a run (before anything is trained or saved), a checkpoint that already has
    more updates than ``--max-update``: fairseq would train one more and overwrite checkpoint_last.pt and
    checkpoint_best.pt with it."""
    max_update = run_option(args, "max_update", "optimization", 0)
    if max_update <= 0 or update_num <= max_update:
        return
    path = resumed_checkpoint(args)
    max_update_was, max_update_now = (option_text("max_update", "optimization", n) for n in (max_update, update_num))
    if not resumes_own_checkpoint(args):  # another run's checkpoint: a new --save-dir would load it again
        name = "continue_once" if path == run_option(args, "continue_once", "checkpoint") else "restore_file"
        flag = option_text(name, "checkpoint")
        raise ResumedPastMaxUpdate(
            f"{option_text(name, 'checkpoint', path)} was trained for {update_num} updates, more than "
            f"{max_update_was}: pass {max_update_now} or more to train on from its count, or "
            f"{option_text('reset_optimizer', 'checkpoint', True)} to count updates from 0 (or "
            f"{option_text('finetune_from_model', 'checkpoint')} instead of {flag}: fine-tuning)")
    raise ResumedPastMaxUpdate(f"{path} was trained for {update_num} updates, more than {max_update_was}: "
                               f"pass {max_update_now} or more to train on, or another "
                               f"{option_text('save_dir', 'checkpoint')} to start a new run "
                               f"({option_text('finetune_from_model', 'checkpoint', path)} to start it from these "
                               "weights)")


def _arch(cfg) -> Optional[str]:
    """The --arch of a model's options (fairseq-hydra-train's node names it ``_name``); None where neither says."""
    arch = getattr(cfg, "arch", None) or getattr(cfg, "_name", None)
    return str(arch) if arch else None


def refuse_changed_flags(cfg, model, arch) -> None:
    """Before fairseq-train loads the run's own checkpoint_last.pt (not another file: fine-tuning), refuse
    flags that change what its weights mean (``resumed_flags``)."""
    saved = resumed_model_config(cfg)
    if saved is not None:
        check_resumed_flags(resumed_checkpoint(cfg), saved, cfg, model, arch)


def _batches_per_update(processes: int, update_freq) -> Tuple[int, str]:
    freq = int(update_freq[0] if isinstance(update_freq, (list, tuple)) or OmegaConf.is_list(update_freq)
               else update_freq)
    return processes * freq, (f"{processes} process{'es' if processes > 1 else ''} x "
                              f"{option_text('update_freq', 'optimization', freq)}")


def _saved_config(args) -> dict:
    """The config of the checkpoint this run resumes ({} without one)."""
    return (saved_checkpoint(resumed_checkpoint(args)) or {}).get("cfg") or {}


def saved_world_size(args) -> Optional[int]:
    """The number of processes the checkpoint this run resumes was trained on; None where it does not say."""
    try:
        return int(_saved_config(args)["distributed_training"]["distributed_world_size"])
    except (KeyError, TypeError, ValueError):
        return None


def warn_if_the_batch_changed(update_num: int, args) -> None:
    """At a resume, say once when the checkpoint was trained with another number of batches per update
    (processes x --update-freq): each update now averages another number of sentences."""
    import torch.distributed as dist

    if update_num <= 0 or not first_rank():
        return
    processes_then = saved_world_size(args)
    if processes_then is None:  # a checkpoint that does not say: nothing to compare
        return
    try:
        before, said = _batches_per_update(processes_then, _saved_config(args)["optimization"]["update_freq"])
    except (KeyError, TypeError, ValueError, IndexError):
        return
    path = resumed_checkpoint(args)
    processes = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
    now, says = _batches_per_update(processes, run_option(args, "update_freq", "optimization", [1]))
    if now != before:
        keep = (f"pass {option_text('update_freq', 'optimization', before // processes)} to keep it"
                if before % processes == 0 else
                f"keep processes x {option_text('update_freq', 'optimization')} at {before} to keep it")
        logger.warning(f"{path} was trained with {before} batch{'es' if before > 1 else ''} per update ({said}), "
                       f"this run takes {now} ({says}): "
                       f"each update now takes {now}/{before} of the batch it trained with; {keep} (docs/scale.md)")


def warn_if_the_schedules_restart(update_num: int, args) -> None:
    """At the first update of a run that resumes a checkpoint saved without its optimizer state
    (``--no-save-optimizer-state``): fairseq restores the update count with that state only, so it counts from
    0 and every schedule starts again; say so once (``--reset-optimizer`` asks for it: nothing said)."""
    if update_num > 0 or not first_rank() or run_option(args, "reset_optimizer", "checkpoint", False):
        return
    path = resumed_checkpoint(args)
    if path == run_option(args, "finetune_from_model", "checkpoint"):  # fine-tuning starts from update 0
        return
    state = saved_checkpoint(path) or {}
    trained = saved_updates(state)
    if trained > 0 and state.get("last_optimizer_state") is None:
        logger.warning(f"{path} holds no optimizer state (saved with "
                       f"{option_text('no_save_optimizer_state', 'checkpoint', True)}), so fairseq counts this run's "
                       f"updates from 0, not from its {trained}: the learning-rate schedule and the method's "
                       "schedules and phases start again; resume from a checkpoint saved with its optimizer state to "
                       f"continue them ({option_text('reset_optimizer', 'checkpoint', True)} starts them again "
                       "without this warning)")


class LangshareDatasetManager(MultilingualDatasetManager):
    """fairseq's multilingual data manager whose per-direction datasets carry language codes."""

    def __init__(self, args, lang_pairs, langs, dicts, sampling_method, inventory):
        super().__init__(args, lang_pairs, langs, dicts, sampling_method)
        self.inventory = inventory

    def get_split_num_data_shards(self, split):
        """fairseq fails with a bare KeyError on a pair without data: name the pair and the fix."""
        shards = super().get_split_num_data_shards(split)
        data_paths, lang_pairs = self.get_data_paths_and_lang_pairs(split)
        for category, pairs in lang_pairs.items():
            for pair in pairs:
                if self.get_dataset_key(category, *pair.split("-")) not in shards:
                    src, tgt = pair.split("-")
                    data = data_paths[category].split(":")[0]
                    if split != "train" and not any(os.path.isfile(os.path.join(data, f"train.{p}.{src}.idx"))
                                                    for p in (pair, f"{tgt}-{src}")):
                        raise FileNotFoundError(
                            f"no {split} data for the pair {pair}, and no train data either, in {data}: binarize "
                            f"that direction (langshare prepare-data given {pair}.tsv, from which valid and test "
                            "sets are held out, or fairseq-preprocess) or remove it from --lang-pairs / -s -t")
                    raise FileNotFoundError(
                        f"no {split} data for the pair {pair} in {data} (expected "
                        f"{split}.{pair}.{src}.idx or {split}.{tgt}-{src}.{src}.idx): binarize that "
                        f"direction (langshare prepare-data with a {split}.{pair}.tsv, or fairseq-preprocess) "
                        f"or remove it from --lang-pairs / -s -t"
                    )
        return shards

    def load_a_dataset(self, **kwargs):
        check_binarized(kwargs["split"], kwargs["data_path"], kwargs["src"], kwargs["tgt"])
        dataset = super().load_a_dataset(**kwargs)
        return LanguageTaggedDataset(dataset, kwargs["src"], kwargs["tgt"], self.inventory)


@register_task("multilingual_langshare", dataclass=MultilingualLangshareConfig)
class MultilingualLangshareTask(TranslationMultiSimpleEpochTask):
    """Multilingual translation whose batches route every sentence by its own languages."""

    @classmethod
    def add_args(cls, parser):
        gen_parser_from_dataclass(parser, MultilingualLangshareConfig())

    @classmethod
    def setup_task(cls, cfg, **kwargs):
        args = options_as_namespace(cfg)
        check_options(args)
        check_dictionaries(args)
        langs, dicts, training = MultilingualDatasetManager.prepare(cls.load_dictionary, args, **kwargs)
        return cls(args, langs, dicts, training)

    def __init__(self, args, langs, dicts, training):
        super().__init__(args, langs, dicts, training)
        uses_langtoks = any(spec for specs in args.langtoks.values() for spec in specs if spec)
        encoder_spec, decoder_spec = args.langtoks.get("main", (None, None))
        self.inventory = LanguageInventory(
            langs,
            order_fixed_by="language tokens (--encoder-langtok/--decoder-langtok) are numbered in --langs order"
            if uses_langtoks else "",
            tokens={"encoder-langtok": encoder_spec or "", "decoder-langtok": decoder_spec or "",
                    "lang-tok-style": args.lang_tok_style or "",
                    "lang-tok-replacing-bos-eos": "1" if args.lang_tok_replacing_bos_eos else ""},
            dictionary=dictionary_fingerprint(dicts, langs),
        )
        self._updates_checked = False  # check_resumed_updates, at the first training step
        self._training_model, self._arch = None, "the model"  # a training run's, for the criterion's check
        self._input_lines = 0  # raw lines fairseq-interactive has handed over so far
        self._first_input_line = None  # the first line of the buffer being tokenized
        self.data_manager = LangshareDatasetManager(
            args, self.lang_pairs, langs, dicts, self.sampling_method, self.inventory
        )

    def build_model(self, cfg, from_checkpoint=False):
        if not from_checkpoint:  # a run starts: fairseq-hydra-train's model node, unparsed
            check_model_node(cfg)
        model = super().build_model(cfg, from_checkpoint)
        if hasattr(model, "attach_inventory"):
            model.attach_inventory(self.inventory, _arch(cfg))
        if not from_checkpoint:  # a run starts (not a decoding)
            check_half_precision_device(cfg)
            check_training_is_distributed()
            self._training_model, self._arch = model, _arch(cfg) or "the model"
            refuse_changed_flags(cfg, model, self._arch)  # first: a changed --arch explains the rest
            if hasattr(model, "check_training_run"):
                model.check_training_run(cfg)
        return model

    def build_criterion(self, cfg, *args, **kwargs):
        """fairseq's; a criterion that would drop the auxiliary losses of the model just built is refused."""
        criterion = super().build_criterion(cfg, *args, **kwargs)
        if self._training_model is not None:
            model, self._training_model = self._training_model, None
            require_auxiliary_criterion(model, criterion, self._arch)
        return criterion

    def get_interactive_tokens_and_lengths(self, lines, encode_fn):
        first = self._input_lines + 1
        self._input_lines += len(lines)
        lines = [decodable(line, first + i) for i, line in enumerate(lines)]
        tokens, lengths = super().get_interactive_tokens_and_lengths(lines, encode_fn)
        self._first_input_line = first
        return tokens, lengths

    def build_dataset_for_inference(self, src_tokens, src_lengths, constraints=None):
        require_direction(self.args)
        dataset = super().build_dataset_for_inference(src_tokens, src_lengths, constraints)
        dataset = LanguageTaggedDataset(dataset, self.args.source_lang, self.args.target_lang, self.inventory)
        dataset.first_input_line, self._first_input_line = self._first_input_line, None  # for warnings
        return dataset

    def get_batch_iterator(self, dataset, *args, required_batch_size_multiple=1, **kwargs):
        """fairseq 0.12's ``data_utils.batch_by_size`` drops a last batch whose size is not a
        multiple of ``--required-batch-size-multiple`` (default 8): at generation and
        validation that silently loses sentences. Only the training split keeps the multiple, and
        its last batch (``training_epoch``). A fairseq-interactive input line longer than the model's positions is skipped with a
        warning instead of ending the session (the hub interface keeps fairseq's error: its
        outputs are aligned with its inputs by position)."""
        training = dataset is self.datasets.get(getattr(self.args, "train_subset", "train"))
        if training:
            keep_the_last_batch(dataset)
        else:
            required_batch_size_multiple = 1
        max_positions = kwargs.get("max_positions")
        if getattr(dataset, "first_input_line", None) is not None and max_positions is not None:
            _, ignored = dataset.filter_indices_by_size(np.arange(len(dataset)), max_positions)
            warn_too_long(dataset, ignored, max_positions, dataset.first_input_line)
            kwargs["ignore_invalid_inputs"] = True
        itr = super().get_batch_iterator(
            dataset, *args, required_batch_size_multiple=required_batch_size_multiple, **kwargs
        )
        if training:  # the one a resume restores
            itr = resume_across_process_counts(itr, lambda: saved_world_size(self.args))
        return itr

    def ensure_lang_ids(self, sample, model=None):
        """The batch as ``model`` takes it (the caller's batch is not modified): per-sentence ids
        added if its producer gave none (``fairseq-interactive`` builds ``net_input`` from tokens
        only; at inference every row is ``-s`` -> ``-t``), or removed for a plain fairseq model
        (e.g. ``--arch transformer``) whose forward takes no ids."""
        new_batch()  # what the routing knew of earlier batches' ids is dropped
        net_input = dict(sample["net_input"])
        sample = {**sample, "net_input": net_input}
        if model is not None and not takes_lang_ids(model):
            for key in LANG_KEYS:
                net_input.pop(key, None)
            return sample
        if "tgt_lang_id" not in net_input and "tgt_lang_id" in sample:
            net_input["tgt_lang_id"] = sample["tgt_lang_id"]
        if all(key in net_input for key in LANG_KEYS):
            return noted_host_ids(sample)
        if self.args.source_lang is None or self.args.target_lang is None:
            raise ValueError("batch without language ids: pass -s/--source-lang and -t/--target-lang")
        bsz = net_input["src_tokens"].size(0)
        attach_lang_ids(
            sample,
            [self.inventory.id(self.args.source_lang)] * bsz,
            [self.inventory.id(self.args.target_lang)] * bsz,
        )
        for key in LANG_KEYS:
            net_input[key] = net_input[key].to(net_input["src_tokens"].device)
        return noted_host_ids(sample)

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        if not self._updates_checked:  # the first step of this process: update_num is the checkpoint's count
            check_resumed_updates(update_num, self.args)
            warn_if_the_batch_changed(update_num, self.args)
            warn_if_the_schedules_restart(update_num, self.args)
            require_auxiliary_criterion(model, criterion, self._arch)
            self._updates_checked = True
        sample = self.ensure_lang_ids(sample, model)
        return super().train_step(sample, model, criterion, optimizer, update_num, ignore_grad)

    def valid_step(self, sample, model, criterion):
        return super().valid_step(self.ensure_lang_ids(sample, model), model, criterion)

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None, **kwargs):
        """fairseq's, but ``--keep-inference-langtok`` is read from the task's options too (fairseq reads
        it from ``args``: fairseq-generate/-interactive pass the generation options, which lack it), and
        the token of every language with a dictionary is stripped (a split may mix target languages, and
        a zero-shot one need not be a training target)."""
        _, spec = self.args.langtoks["main"]
        keep = self.args.keep_inference_langtok or getattr(args, "keep_inference_langtok", False)
        if spec and not keep:
            strip = {self.data_manager.get_decoder_langtok(lang, spec) for lang in self.data_manager.dicts}
            extra_gen_cls_kwargs = {**(extra_gen_cls_kwargs or {}), "symbols_to_strip_from_output": strip}
        return super(TranslationMultiSimpleEpochTask, self).build_generator(
            models, args, seq_gen_cls=seq_gen_cls, extra_gen_cls_kwargs=extra_gen_cls_kwargs, **kwargs)

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        """fairseq's, on the batch's sentences grouped by direction (target, then source language):
        each language's rows are then one block, which per-language components slice instead of
        gathering and scattering at every layer and decoding step (``route_by_language``; beam
        search keeps the blocks). The hypotheses come back in the caller's order."""
        sample = self.ensure_lang_ids(sample, models[0])
        order = direction_order(sample["net_input"])
        if order is None:
            return self._generate(generator, models, sample, prefix_tokens, constraints)
        take = lambda t: None if t is None else t.index_select(0, order.to(t.device))  # noqa: E731
        hypos = self._generate(generator, models, take_rows(sample, order), take(prefix_tokens), take(constraints))
        return [hypos[i] for i in torch.argsort(order).tolist()]  # back in the caller's order

    def _generate(self, generator, models, sample, prefix_tokens, constraints):
        """fairseq's ``inference_step`` with ``--decoder-langtok``: each sentence starts with its own
        target language's token (fairseq's uses ``-t``'s for the whole batch)."""
        _, spec = self.args.langtoks["main"]
        if not spec or self.args.target_lang is not None:
            return super().inference_step(generator, models, sample, prefix_tokens, constraints)
        tgt_ids = sample["net_input"].get("tgt_lang_id", sample.get("tgt_lang_id"))
        langtoks = torch.tensor([self.data_manager.get_decoder_langtok(self.inventory.langs[i], spec)
                                 for i in host_ids(tgt_ids)])
        with torch.no_grad():
            if self.args.lang_tok_replacing_bos_eos:
                if langtoks.unique().numel() > 1:
                    raise ValueError("--lang-tok-replacing-bos-eos decodes one target language at a time: "
                                     "pass -s SRC -t TGT to decode one direction")
                return generator.generate(models, sample, prefix_tokens=prefix_tokens, bos_token=int(langtoks[0]))
            if prefix_tokens is None:
                prefix_tokens = langtoks.unsqueeze(1).to(sample["net_input"]["src_tokens"])
            return generator.generate(models, sample, prefix_tokens=prefix_tokens, constraints=constraints)


def noted_host_ids(sample):
    """``sample``, its ids' values handed to the routing from the lists the collater kept (``HOST_IDS``):
    the batch's tensors are the device's copies by now, the lists are still on the host."""
    host = sample.get(HOST_IDS)
    if host:
        for key in LANG_KEYS:
            if key in host:
                note_host_ids(sample["net_input"][key], host[key])
    return sample


def direction_order(net_input) -> Optional[torch.Tensor]:
    """Row order (CPU LongTensor) grouping the batch by direction, or None when it already is (or
    carries no language ids)."""
    src, tgt = net_input.get("src_lang_id"), net_input.get("tgt_lang_id")
    if src is None or tgt is None or tgt.numel() < 2:
        return None
    keys = list(zip(host_ids(tgt), host_ids(src)))  # read once, kept with the ids for the routing
    if all(a <= b for a, b in zip(keys, keys[1:])):
        return None
    return torch.tensor(sorted(range(len(keys)), key=keys.__getitem__), dtype=torch.long)  # a stable sort


def take_rows(sample, order: torch.Tensor):
    """``sample`` with its sentences in ``order``: every tensor of the batch and of its
    ``net_input`` whose first dimension is the batch."""
    bsz = order.numel()

    def take(value):
        if torch.is_tensor(value) and value.dim() and value.size(0) == bsz:
            return value.index_select(0, order.to(value.device))
        return value

    taken = {k: take(v) for k, v in sample.items() if k not in ("net_input", HOST_IDS)}  # new ids: read anew
    taken["net_input"] = {k: take(v) for k, v in sample["net_input"].items()}
    return taken


def takes_lang_ids(model) -> bool:
    """Whether ``model.forward`` accepts ``src_lang_id`` (unwrapping fairseq's DDP wrappers:
    ModuleProxyWrapper -> DistributedDataParallel -> model)."""
    while isinstance(getattr(model, "module", None), torch.nn.Module):
        model = model.module
    return "src_lang_id" in inspect.signature(model.forward).parameters
