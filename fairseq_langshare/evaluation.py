"""``langshare evaluate``: translate every direction of a corpus split and score it.

Each direction is decoded in process with fairseq's ``fairseq_cli.generate`` (the task flags come
from the checkpoint's own task config, so the data loads exactly as in training) and scored with
sacrebleu against the detokenized references in ``CORPUS/raw``:

* BLEU and chrF, with their sacrebleu signatures;
* spBLEU (sacrebleu's ``flores200`` or ``flores101`` SentencePiece tokenization) only when that
  tokenizer model is already on disk (``$SACREBLEU/models`` or ``~/.sacrebleu/models``); it is
  never downloaded, and the results say why it is missing;
* the off-target rate: the share of hypotheses that a language identifier shipped with its model
  (py3langid, the ``langid`` extra) puts in another language than the target, for the target
  languages it tells apart on the corpus's references (``off_target``).

Directions are grouped by the training size of their non-English language, as in the papers:
**high** when it has >= 10000 training pairs, **low** when < 2000, **medium** in between
(``high_threshold`` / ``low_threshold``). Directions the checkpoint was not trained on are
**zero-shot**. The results hold per-direction rows, group averages, the overall average and,
given a baseline results JSON, the win ratio (share of common directions with higher BLEU) and
sacrebleu's paired bootstrap test against it (``significance``). The results also keep every
direction's hypotheses and the identity (path, sha256) of its references, so that
``langshare compare`` (``comparison``) can test runs against each other after the fact.
"""

import argparse
import contextlib
import io
import json
import logging
import os
import shlex
import sys
import tempfile
from .atomic_files import check_writable, json_text, write_files_atomic
from .checkpoint_safety import CheckpointError, require_checkpoint
from .saved_config import export_record
from .result_kinds import (COMPARE_JSON, EVALUATE_JSON, EVALUATE_MARKDOWN, HEAD_TO_HEAD_JSON, file_kind, held_unless,
                           json_kind)
from .command_line import add_command, file_name, shell_words
from . import off_target
from .data.binarized import BinarizedDataError, sentence_count
from .direction_groups import group_members
from .interrupts import interrupts_kept
from .log_levels import warnings_only
from .option_ranges import Range

logger = logging.getLogger(__name__)
LEAVE_OUT = "(evaluate --directions)"  # how evaluate leaves a direction out (BinarizedDataError.fix)

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
SUPPORTED_TASKS = ("multilingual_langshare", "translation_multi_simple_epoch")
METRICS = ("bleu", "chrf", "spbleu")
# task options that say what to decode now or how training sampled, not how data is shaped
_NOT_FROM_CHECKPOINT = {
    "data", "source_lang", "target_lang", "seed", "dataset_impl", "train_subset",
    "keep_inference_langtok", "load_alignments", "upsample_primary", "extra_lang_pairs",
    "sampling_method", "sampling_temperature", "sampling_weights", "sampling_weights_from_file",
    "virtual_epoch_size", "virtual_data_size",
}
_SPBLEU_TOKENIZERS = ("flores200", "flores101")  # preferred first
# fairseq-generate flags evaluate sets itself (the last one given wins in fairseq's parser, so one in
# --generate-args would decode otherwise than the results say): evaluate's own option for each, or None
# where it comes from the checkpoint and the corpus
_SET_BY_EVALUATE = {
    "--beam": "--beam", "--lenpen": "--lenpen", "--gen-subset": "--split", "--max-tokens": "--max-tokens",
    "--batch-size": "--batch-size", "--max-sentences": "--batch-size",
    **dict.fromkeys(("--task", "--user-dir", "--path", "--remove-bpe", "--post-process", "--results-path", "-s",
                     "--source-lang", "-t", "--target-lang", "--langs", "--lang-dict", "--lang-pairs"), None),
}


class EvaluationError(ValueError):
    """Bad input to ``evaluate``; the message is one line naming the problem and the fix."""


# ----------------------------------------------------------------------------- grouping/scores
def resource_groups(train_sizes, high_threshold=10000, low_threshold=2000):
    """Map direction -> "high" (size >= high_threshold), "low" (size < low_threshold), "medium"
    otherwise; a size of None (no training data for the direction) gives "zero-shot"."""
    if low_threshold > high_threshold:
        raise EvaluationError(
            f"low threshold {low_threshold} is above high threshold {high_threshold}; pass low <= high"
        )
    groups = {}
    for pair, size in train_sizes.items():
        if size is None:
            groups[pair] = "zero-shot"
        elif size >= high_threshold:
            groups[pair] = "high"
        elif size < low_threshold:
            groups[pair] = "low"
        else:
            groups[pair] = "medium"
    return groups


def _win_stats(results, baseline_results, metric):
    def scores(res, name):
        rows = res.get("directions") if isinstance(res, dict) else None
        if not isinstance(rows, dict):
            raise EvaluationError(f"{name} is not an evaluate results dict/JSON (no 'directions' mapping)")
        return {d: r.get(metric) for d, r in rows.items() if r.get(metric) is not None}

    mine, base = scores(results, "results"), scores(baseline_results, "baseline")
    common = sorted(set(mine) & set(base))
    if not common:
        raise EvaluationError(
            f"the baseline shares no direction with a {metric} score with this run (this run: "
            f"{sorted(mine) or 'none'}; baseline: {sorted(base) or 'none'}); evaluate both on the same directions"
        )
    return sum(mine[d] > base[d] for d in common), len(common)


def win_ratio(results, baseline_results, metric="bleu"):
    """Share of the directions both results have where ``results`` scores higher on ``metric``."""
    wins, total = _win_stats(results, baseline_results, metric)
    return wins / total


# ----------------------------------------------------------------------------- significance inputs
def reference_identity(path):
    """What a direction's hypotheses were scored against: the reference file, its sha256 and lines."""
    from .data.corpus_build import sha256

    with open(path, encoding="utf-8") as f:
        n = sum(1 for _ in f)
    return {"path": os.path.abspath(path), "sha256": sha256(path), "n": n}


def check_same_references(references, other, name):
    """Refuse to pair results scored against different reference files for the same direction."""
    theirs = other.get("references") or {} if isinstance(other, dict) else {}
    for d, ref in references.items():
        if d in theirs and theirs[d].get("sha256") != ref["sha256"]:
            raise EvaluationError(f"direction {d}: {name} was scored against another reference file "
                                  f"({theirs[d].get('path')}) than {ref['path']}; evaluate both on the same corpus")


def read_references(results, direction, name="results"):
    """The reference lines of ``direction`` that ``results`` were scored against, checked by sha256."""
    ref = (results.get("references") or {}).get(direction)
    if not ref:
        raise EvaluationError(f"{name} records no reference file for {direction}: evaluate it again with "
                              f"`langshare evaluate` of this version (it stores hypotheses and references)")
    from .data.corpus_build import sha256

    if not os.path.isfile(ref["path"]) or sha256(ref["path"]) != ref["sha256"]:
        raise EvaluationError(f"the references of {direction} ({ref['path']}) are missing or changed since {name} "
                              f"was evaluated (sha256 {ref['sha256'][:12]}...); restore the corpus or evaluate again")
    with open(ref["path"], encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def baseline_significance(results, baseline_results, n_samples=None):
    """Paired bootstrap of ``results`` against a single-seed baseline, per common direction and
    pooled (``significance.compare_to_baseline``); a note instead when the baseline holds no
    hypotheses."""
    from . import significance

    mine, theirs = results.get("hypotheses") or {}, baseline_results.get("hypotheses") or {}
    common = [d for d in results["directions"] if d in mine and d in theirs]
    if not common:
        return {"note": "not computed: the baseline results hold no hypotheses for these directions "
                        "(evaluate the baseline again with this version of `langshare evaluate`)"}
    refs = {d: read_references(results, d) for d in common}
    tokenize = {d: significance.bleu_tokenization(results["directions"][d].get("bleu_signature")) for d in common}
    return significance.compare_to_baseline([{d: theirs[d] for d in common}], [{d: mine[d] for d in common}],
                                            refs, tokenize, n_samples=n_samples or significance.DEFAULT_SAMPLES)


def spbleu_tokenizer(preferred="auto"):
    """(sacrebleu tokenizer name, None) if a flores SentencePiece model is on disk, else (None, why).
    ``preferred``: "auto" (flores200, else flores101) or one of them (the LSL paper: flores101)."""
    from sacrebleu.tokenizers import tokenizer_spm

    if preferred not in ("auto",) + _SPBLEU_TOKENIZERS:
        raise EvaluationError(f"unknown spBLEU tokenizer {preferred!r}: pass auto, "
                              f"{' or '.join(_SPBLEU_TOKENIZERS)}")
    paths = []
    for name in _SPBLEU_TOKENIZERS if preferred == "auto" else (preferred,):
        url = tokenizer_spm.SPM_MODELS[name]["url"]
        path = os.path.join(tokenizer_spm.SACREBLEU_DIR, "models", os.path.basename(url))
        if os.path.isfile(path):
            return name, None
        paths.append(path)
    return None, (
        "spBLEU not computed: no local sacrebleu flores SentencePiece model (looked for "
        + " and ".join(paths) + "); evaluate never downloads it: copy the model there to enable spBLEU"
    )


def bleu_tokenizer(tgt_lang="", tokenize="auto"):
    """sacrebleu's BLEU tokenization: "auto" is 13a, zh for Chinese targets; any other value is
    used for every direction (the CLSR paper's signature: tok.13a throughout)."""
    if tokenize == "auto":
        return "zh" if (tgt_lang or "").split("_")[0] == "zh" else "13a"
    from sacrebleu.metrics.bleu import _TOKENIZERS

    if tokenize not in _TOKENIZERS:
        raise EvaluationError(f"unknown BLEU tokenization {tokenize!r}: pass auto or one of sacrebleu's "
                              f"({', '.join(sorted(_TOKENIZERS))})")
    return tokenize


def score(hypotheses, references, tgt_lang="", bleu_tokenize="auto", spbleu_tokenize="auto"):
    """Corpus BLEU (``bleu_tokenizer``), chrF and (when its model is local) spBLEU, each with its
    sacrebleu signature."""
    from sacrebleu.metrics import BLEU, CHRF

    bleu = BLEU(tokenize=bleu_tokenizer(tgt_lang, bleu_tokenize))
    chrf = CHRF()
    out = {
        "bleu": bleu.corpus_score(hypotheses, [references]).score,
        "bleu_signature": str(bleu.get_signature()),
        "chrf": chrf.corpus_score(hypotheses, [references]).score,
        "chrf_signature": str(chrf.get_signature()),
        "spbleu": None,
        "spbleu_signature": None,
    }
    name, _ = spbleu_tokenizer(spbleu_tokenize)
    if name is not None:
        spbleu = BLEU(tokenize=name)
        out["spbleu"] = spbleu.corpus_score(hypotheses, [references]).score
        out["spbleu_signature"] = str(spbleu.get_signature())
    return out


def _averages(rows):
    groups = group_members({d: row["group"] for d, row in rows.items()})
    members = {g: [rows[d] for d in ds] for g, ds in groups.items()}
    averages = {}
    for group, group_rows in members.items():
        avg = {"n_directions": len(group_rows)}
        for m in METRICS:
            values = [r.get(m) for r in group_rows]
            avg[m] = sum(values) / len(values) if values and None not in values else None
        averages[group] = avg
    return averages


# ----------------------------------------------------------------------------- markdown
def _fmt(value):
    if value is None:
        return "-"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def to_markdown(results):
    """Per-direction table, group averages, win ratio and metric signatures as markdown."""
    rows = results.get("directions", {})
    with_sp = any(r.get("spbleu") is not None for r in rows.values())
    metrics = [("BLEU", "bleu"), ("chrF", "chrf")] + ([("spBLEU", "spbleu")] if with_sp else [])
    rated = bool((results.get("off_target") or {}).get("identifier"))
    if rated:  # with what each rate rests on
        metrics += [("off-target %", "off_target"), ("rated", "off_target_identified")]
    head = " | ".join(label for label, _ in metrics)
    align = "|".join("---:" for _ in metrics)
    lines = []
    if results.get("checkpoint"):
        lines += [f"Checkpoint `{results['checkpoint']}` on `{results.get('corpus')}` "
                  f"({results.get('split')}, beam {results.get('beam')}, lenpen {results.get('lenpen')})", ""]
    lines += [f"| direction | train pairs | group | {head} | sentences |", f"|---|---:|---|{align}|---:|"]
    for d, r in rows.items():
        cells = " | ".join(_fmt(r.get(key)) for _, key in metrics)
        lines.append(f"| {d} | {_fmt(r.get('train_size'))} | {r.get('group', '-')} | {cells} | {_fmt(r.get('n'))} |")
    th = results.get("thresholds", {})
    labels = {
        "high": f"High (>= {th.get('high', 10000)})",
        "medium": "Medium",
        "low": f"Low (< {th.get('low', 2000)})",
        "zero-shot": "Zero-shot",
        "unknown": "Unknown size",
        "all": "All",
    }
    averages = results.get("averages") or _averages(rows)
    lines += ["", f"| group | directions | {head} |", f"|---|---:|{align}|"]
    for group, avg in averages.items():
        cells = " | ".join(_fmt(avg.get(key)) for _, key in metrics)
        lines.append(f"| {labels.get(group, group)} | {avg.get('n_directions', '-')} | {cells} |")
    win = results.get("win_ratio")
    if win:
        lines += ["", f"Win ratio vs baseline `{win.get('baseline')}` ({win.get('metric', 'bleu')}): "
                      f"{win['value']:.2f} ({win.get('wins')}/{win.get('directions')} directions)"]
    lines += significance_markdown(results.get("significance"))
    lines.append("")
    for label, key in (("BLEU", "bleu"), ("chrF", "chrf"), ("spBLEU", "spbleu")):
        for sig in results.get("signatures", {}).get(key) or []:
            lines.append(f"{label} signature: `{sig}`  ")
    if results.get("spbleu_note"):
        lines.append(results["spbleu_note"])
    said = off_target.note(results.get("off_target"), results["directions"])
    if said:
        lines.append(said + (" rated: the hypotheses long enough to identify." if rated else ""))
    return "\n".join(lines).rstrip() + "\n"


def significance_markdown(sig):
    """Lines of a single-seed significance table (``baseline_significance``): delta, p-value and
    the 95% confidence interval of this run's score, per direction and pooled."""
    from .significance import ALPHA, format_p  # at call time, as baseline_significance imports it
    if not sig:
        return []
    if "note" in sig:
        return ["", f"Significance vs baseline: {sig['note']}"]
    metrics = [m for m in sig["pooled"] if m in ("bleu", "chrf")]
    labels = {"bleu": "BLEU", "chrf": "chrF"}
    head = " | ".join(f"{labels[m]} verdict | {labels[m]} delta | p | 95% CI" for m in metrics)
    lines = ["", f"Paired bootstrap vs baseline ({sig['n_samples']} resamples, sacrebleu; verdict: better or worse "
                 f"where p < {ALPHA}, level otherwise; CI: this run's bootstrap mean +- half-width):", "",
             f"| direction | {head} |", "|---|" + "---|---:|---:|---:|" * len(metrics)]
    rows = [(d, sig["directions"][d]) for d in sig["directions"]] + [("all (pooled)", sig["pooled"])]
    for name, row in rows:
        cells = []
        for m in metrics:
            t = row[m]["seeds_concatenated"]
            cells += [row[m].get("verdict") or "-", f"{t['delta']:+.2f}", format_p(t["p_value"]),
                      f"{t['system_mean']:.2f} +- {t['system_ci']:.2f}"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


# ----------------------------------------------------------------------------- corpus/checkpoint
class _Corpus:
    def __init__(self, path):
        self.path = os.path.abspath(path)
        manifest = os.path.join(self.path, "manifest.json")
        if not os.path.isdir(self.path):
            raise EvaluationError(f"corpus directory not found: {path} (build one from your parallel text with "
                                  "`langshare prepare-data`, or with `langshare prepare-gettext`)")
        if not os.path.isfile(manifest):
            parent = os.path.dirname(self.path)
            if os.path.isfile(os.path.join(parent, "manifest.json")):  # its bin/ (or raw/)
                what = "the binarized data" if os.path.basename(self.path) == "bin" else "a directory"
                raise EvaluationError(f"{path} is {what} of the prepared corpus {parent}: pass {parent}")
            raise EvaluationError(f"{path} has no manifest.json, so it is not a prepared corpus (build one from your "
                                  "parallel text with `langshare prepare-data`, or with `langshare prepare-gettext`)")
        self.manifest = _read_json(manifest, "corpus manifest")
        self.pivot = self.manifest.get("pivot", "en")
        self.bin = os.path.join(self.path, self.manifest.get("data_bin", "bin"))
        self.raw = os.path.join(self.path, "raw")

    def missing(self, split, src, tgt):
        """None if the split has data for src->tgt, else a one-line message naming the files."""
        expected = []
        if not any(os.path.isfile(os.path.join(self.bin, f"{split}.{a}-{b}.{src}.idx"))
                   for a, b in ((src, tgt), (tgt, src))):
            expected.append(f"{self.bin}/{split}.{src}-{tgt}.{src}.idx (or {split}.{tgt}-{src}.{src}.idx)")
        if self.reference_path(split, src, tgt) is None:
            expected.append(f"{self.raw}/{split}.{src}-{tgt}.{tgt} (or {split}.{tgt}-{src}.{tgt})")
        if not expected:
            return None
        return (f"no {split} data for direction {src}-{tgt} in corpus {self.path}: expected "
                f"{' and '.join(expected)}; rebuild the corpus with this language pair "
                f"(langshare prepare-data/prepare-gettext) or leave {src}-{tgt} out of the directions")

    def reference_path(self, split, src, tgt):
        for a, b in ((src, tgt), (tgt, src)):
            path = os.path.join(self.raw, f"{split}.{a}-{b}.{tgt}")
            if os.path.isfile(path):
                return path
        return None

    def check_references(self, split, src, tgt):
        """Before decoding: the binarized src-tgt data is complete and holds one sentence per raw reference."""
        from .tasks.multilingual_langshare import check_binarized

        try:
            check_binarized(split, self.bin, src, tgt)  # what fairseq-generate's task checks, before decoding
        except BinarizedDataError as e:
            raise EvaluationError(e.fix(LEAVE_OUT)) from None
        except FileNotFoundError as e:
            raise EvaluationError(str(e)) from None
        refs = self.reference_path(split, src, tgt)
        with open(refs, encoding="utf-8") as f:
            n_refs = sum(1 for _ in f)
        a, b = (src, tgt) if os.path.isfile(os.path.join(self.bin, f"{split}.{src}-{tgt}.{src}.idx")) else (tgt, src)
        for lang in (src, tgt):
            prefix = os.path.join(self.bin, f"{split}.{a}-{b}.{lang}")
            if not os.path.isfile(prefix + ".idx"):
                continue
            try:
                n = sentence_count(prefix)
            except BinarizedDataError as e:
                raise EvaluationError(e.fix(LEAVE_OUT)) from None
            if n is not None and n != n_refs:
                raise EvaluationError(f"{refs} has {n_refs} lines but {prefix}.bin holds {n} sentences: raw/ and bin/ "
                                      f"of the corpus are out of sync; rebuild the corpus (langshare prepare-data/prepare-gettext) "
                                      f"or restore {refs}")

    def references(self, split, src, tgt):
        with open(self.reference_path(split, src, tgt), encoding="utf-8") as f:
            return [line.rstrip("\n") for line in f]

    def train_size(self, src, tgt):
        counts = self.manifest.get("counts", {}).get("train", {})
        if self.pivot in (src, tgt):
            other = tgt if src == self.pivot else src
            size = self.manifest.get("train_pairs_per_language", {}).get(other)
            if size is not None:
                return size
        return counts.get(f"{src}-{tgt}", counts.get(f"{tgt}-{src}"))


def _read_json(path, what):
    with open(path, "rb") as f:
        if f.read(2) == b"\x1f\x8b":
            raise EvaluationError(f"{what} {path} is gzip-compressed, not JSON; decompress it first (gunzip -k {path})")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except ValueError as e:
        raise EvaluationError(f"{what} {path} is not valid JSON ({e}); rewrite or regenerate it") from e


def _csv(value):
    if value is None:
        return []
    if isinstance(value, str):
        if os.path.isfile(value):
            with open(value, encoding="utf-8") as f:
                value = f.read().strip().replace("\n", ",")
        return [v.strip() for v in value.split(",") if v.strip()]
    return [str(v) for v in value]


def _checkpoint_task(checkpoint):
    from fairseq import checkpoint_utils
    from omegaconf import OmegaConf

    try:
        state = checkpoint_utils.load_checkpoint_to_cpu(checkpoint)
    except Exception as e:  # a corrupt file or foreign pickle: say which file and why, in one line
        first = (str(e).strip().splitlines() or [""])[0]
        if isinstance(e, CheckpointError):  # the package's own line names the file already
            raise EvaluationError(first) from e
        raise EvaluationError(f"cannot read checkpoint {checkpoint}: {type(e).__name__}: {first}") from e
    cfg = state.get("cfg")
    task = cfg.get("task") if cfg is not None else None
    if OmegaConf.is_config(task):
        task = OmegaConf.to_container(task, resolve=False)
    elif isinstance(task, argparse.Namespace):
        task = dict(vars(task))
    if not isinstance(task, dict):
        raise EvaluationError(f"checkpoint {checkpoint} holds no task config (state['cfg']['task']); "
                              f"pass a checkpoint written by fairseq-train")
    name = task.get("_name") or task.get("task")
    if name not in SUPPORTED_TASKS:
        raise EvaluationError(f"checkpoint {checkpoint} was trained with task {name!r}; evaluate supports "
                              f"{', '.join(SUPPORTED_TASKS)}")
    try:
        updates = int(state["optimizer_history"][-1]["num_updates"]) or None
    except (KeyError, IndexError, TypeError, ValueError):
        updates = None
    return name, task, export_record(state), updates


def _task_flags(task_name, task_cfg):
    """The task's command-line flags that reproduce the checkpoint's data shape (langs, pairs,
    language tokens, padding, positions, ...), for every option the task declares."""
    from fairseq.tasks import TASK_REGISTRY

    parser = argparse.ArgumentParser(add_help=False)
    TASK_REGISTRY[task_name].add_args(parser)
    flags = []
    for action in parser._actions:
        if action.dest in _NOT_FROM_CHECKPOINT or action.dest not in task_cfg:
            continue
        value = task_cfg[action.dest]
        if value is None or value == action.default or (isinstance(value, str) and value.startswith("${")):
            continue
        option = max(action.option_strings, key=len)
        if isinstance(action, argparse._StoreTrueAction):
            flags += [option] if value else []
        elif isinstance(action, argparse._StoreFalseAction):
            flags += [] if value else [option]
        elif isinstance(value, dict):
            flags += [option, repr(value)]
        elif isinstance(value, (list, tuple)):
            flags += [option, ",".join(map(str, value))]
        else:
            flags += [option, str(value)]
    return flags


@contextlib.contextmanager
def _fairseq_logging():
    """Keep fairseq-generate's per-batch INFO logs out of the way (progress is one tqdm bar), and
    give the root logger a handler so its logging.basicConfig does not log into the results file."""
    root = logging.getLogger()
    handler = None
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setLevel(logging.WARNING)
        root.addHandler(handler)
    try:
        with warnings_only("fairseq", "fairseq_cli", "hydra"):
            yield
    finally:
        if handler is not None:
            root.removeHandler(handler)


def _check_generate_args(extra) -> None:
    """Refuse a flag of ``--generate-args`` that evaluate sets itself, naming evaluate's own option."""
    for arg in extra:
        flag = arg.split("=", 1)[0]
        if flag in _SET_BY_EVALUATE:
            own = _SET_BY_EVALUATE[flag]
            fix = (f"pass {own} to evaluate" if own else "evaluate takes it from the checkpoint and the corpus"
                   + (" (choose directions with --directions)" if flag in ("-s", "-t", "--source-lang",
                                                                           "--target-lang") else ""))
            raise EvaluationError(f"--generate-args sets {flag}, which evaluate sets itself: {fix}")


def _check_generation_options(argv, extra) -> None:
    """Parse fairseq-generate's options ``argv``, which end with ``extra`` (``--generate-args``): what
    its parser refuses (an unknown or abbreviated flag, a bad value) is one line naming ``extra``, not
    the parser's usage, before anything is decoded."""
    from fairseq import options

    parser_output = io.StringIO()
    try:
        with contextlib.redirect_stderr(parser_output):
            options.parse_args_and_arch(options.get_generation_parser(), input_args=argv)
    except SystemExit:
        lines = [line for line in parser_output.getvalue().splitlines() if ": error: " in line]
        reason = lines[-1].split(": error: ", 1)[1] if lines else "its parser stopped"
        raise EvaluationError(f"fairseq-generate refuses --generate-args {shlex.join(extra)!r} ({reason}): pass flags "
                              "`fairseq-generate --help` lists, by their full names") from None


def _translate(argv, results_dir, split, expected):
    """Run fairseq-generate with ``argv``; return detokenized hypotheses by sample id, and how many
    ids got none (sentences skipped as too long)."""
    from fairseq import options
    from fairseq_cli import generate

    with _fairseq_logging():
        generate.main(options.parse_args_and_arch(options.get_generation_parser(), input_args=argv))
    hyps = {}
    with open(os.path.join(results_dir, f"generate-{split}.txt"), encoding="utf-8") as f:
        for line in f:
            if line.startswith("D-"):
                sid, _, text = line.rstrip("\n").split("\t", 2)
                hyps.setdefault(int(sid[2:]), text)  # nbest > 1: keep the best
    if hyps and max(hyps) >= expected:
        raise EvaluationError(f"generation returned sentence id {max(hyps)} but the raw references have "
                              f"{expected} lines: raw/ and bin/ are out of sync; rebuild the corpus")
    return [hyps.get(i, "") for i in range(expected)], expected - len(hyps)


# ----------------------------------------------------------------------------- evaluate
def evaluate(checkpoint, corpus_dir, split="test", directions=None, beam=4, lenpen=1.0, max_tokens=4000,
             batch_size=None, high_threshold=10000, low_threshold=2000, baseline=None,
             out_json=None, out_md=None, generate_args=(), bleu_tokenize="auto", spbleu_tokenize="auto",
             win_metric="bleu"):
    """Translate and score each direction of ``split`` in ``corpus_dir`` with ``checkpoint``.

    ``directions``: list (or comma-separated string) of ``src-tgt``; default: every direction the
    checkpoint was trained on that has data in the split (others may be listed, e.g. zero-shot).
    Groups: high >= ``high_threshold`` (10000) training pairs of the non-English language, low <
    ``low_threshold`` (2000), medium in between, zero-shot for untrained directions.
    ``baseline``: a results JSON path (or dict) to compute the win ratio against, on ``win_metric``
    (bleu, chrf or spbleu). ``bleu_tokenize``/``spbleu_tokenize``: see ``bleu_tokenizer`` and
    ``spbleu_tokenizer``.
    ``generate_args``: extra fairseq-generate flags. Returns the results dict (also written as JSON
    to ``out_json`` and markdown to ``out_md``)."""
    from tqdm import tqdm

    if os.path.isdir(checkpoint):
        try:
            require_checkpoint(checkpoint, "checkpoint")
        except CheckpointError as error:
            raise EvaluationError(str(error)) from None
    if not os.path.isfile(checkpoint):
        raise EvaluationError(f"checkpoint not found: {checkpoint} (pass the .pt file fairseq-train wrote, "
                              f"e.g. checkpoints/checkpoint_best.pt)")
    checkpoint = os.path.abspath(checkpoint)
    baseline_path = baseline if isinstance(baseline, (str, os.PathLike)) else None
    protected = {"corpus": corpus_dir if os.path.isdir(corpus_dir) else None, "run": os.path.dirname(checkpoint)}
    for flag, path, others, kind in (("--out-json", out_json, [], EVALUATE_JSON),
                                     ("--out-md", out_md, [out_json], EVALUATE_MARKDOWN)):
        if path:  # fail now, not after decoding; never over a file evaluate did not write for this checkpoint
            check_writable(path, flag, inputs=[checkpoint, baseline_path, *others], protected=protected,
                           own=_own_output, command="evaluate", held=held_unless(kind, "evaluate", checkpoint))
    extra = shlex.split(generate_args) if isinstance(generate_args, str) else list(generate_args)
    _check_generate_args(extra)
    resource_groups({}, high_threshold, low_threshold)  # validates the options before decoding
    bleu_tokenizer("", bleu_tokenize)
    _, spbleu_note = spbleu_tokenizer(spbleu_tokenize)
    if win_metric not in METRICS:
        raise EvaluationError(f"unknown win-ratio metric {win_metric!r}: pass one of {', '.join(METRICS)}")
    if win_metric == "spbleu" and spbleu_note:
        raise EvaluationError(f"win ratio on spbleu needs the spBLEU model: {spbleu_note}")
    corpus = _Corpus(corpus_dir)
    if isinstance(baseline, (str, os.PathLike)):
        if os.path.isdir(baseline):
            raise EvaluationError(f"--baseline {baseline} is a directory; pass the results JSON that `langshare "
                                  "evaluate --out-json` wrote for the baseline")
        if not os.path.isfile(baseline):
            raise EvaluationError(f"baseline results not found: {baseline} (write one with evaluate --out-json)")
        baseline_results, baseline_name = _read_json(baseline, "baseline results"), str(baseline)
        kind = json_kind(baseline_results)
        if kind in (COMPARE_JSON, HEAD_TO_HEAD_JSON):
            raise EvaluationError(f"--baseline {baseline} is {kind}, not a run's results: pass the --out-json that "
                                  "`langshare evaluate` wrote for the baseline")
    else:
        baseline_results, baseline_name = baseline, "given results"

    task_name, task_cfg, export, num_updates = _checkpoint_task(checkpoint)
    langs = _csv(task_cfg.get("langs")) or _csv(task_cfg.get("lang_dict"))
    trained = _csv(task_cfg.get("lang_pairs"))
    skipped = {}
    if directions is None:
        directions = []
        for d in trained:
            why = corpus.missing(split, *d.split("-"))
            if why is None:
                directions.append(d)
            else:
                skipped[d] = why
        if not directions:
            raise EvaluationError(f"no direction the checkpoint was trained on ({','.join(trained)}) has {split} "
                                  f"data in corpus {corpus.path}; pass --directions or another --split")
        untrained = [d for d in corpus.manifest.get("zero_shot_pairs") or [] if d not in trained
                     and all(c in langs for c in d.split("-")) and corpus.missing(split, *d.split("-")) is None]
        if untrained:
            logger.warning("the corpus also has zero-shot directions %s, not scored here (`langshare evaluate "
                           "--directions` scores them)",
                           ",".join(untrained))
    else:
        given = directions
        directions = list(dict.fromkeys(_csv(directions)))
        if not directions:
            raise EvaluationError(f"--directions {given if isinstance(given, str) else ','.join(given)!r} names no "
                                  "direction: write directions as SRC-TGT, comma-separated, e.g. en-fr,en-de")
        for d in directions:
            parts = d.split("-")
            if len(parts) != 2 or not all(parts):
                raise EvaluationError(f"bad direction {d!r}: write directions as SRC-TGT, e.g. en-fr")
            unknown = [c for c in parts if langs and c not in langs]
            if unknown:
                raise EvaluationError(f"direction {d}: language {unknown[0]!r} is not in the checkpoint's "
                                      f"--langs {','.join(langs)}; evaluate only languages the model knows")
            why = corpus.missing(split, *parts)
            if why is not None:
                raise EvaluationError(why)
    if export:  # a pair's network: another direction would decode with the pair's language-specific parameters
        pair = f"{export['src']}-{export['tgt']}"
        others = [d for d in directions if d != pair]
        if others:
            raise EvaluationError(f"{checkpoint} is the {export['src']}->{export['tgt']} export of {export['from']} "
                                  f"(langshare export): it translates {pair} only; evaluate {','.join(others)} with "
                                  f"{export['from']}")
    for d in skipped:
        logger.warning("skipping %s: %s", d, skipped[d])
    for d in directions:
        corpus.check_references(split, *d.split("-"))
    if baseline_results is not None:  # fail before decoding, not after
        _win_stats({"directions": {d: {win_metric: 0.0} for d in directions}}, baseline_results, win_metric)
        _check_baseline_bleu(directions, bleu_tokenize, baseline_results, baseline_name)

    sizes = {d: corpus.train_size(*d.split("-")) if d in trained else None for d in directions}
    groups = resource_groups(sizes, high_threshold, low_threshold)
    for d in directions:
        if d in trained and sizes[d] is None:
            groups[d] = "unknown"
    flags = ["--task", task_name, "--user-dir", PACKAGE_DIR, "--path", checkpoint, "--gen-subset", split,
             "--beam", str(beam), "--lenpen", str(lenpen), "--remove-bpe", "sentencepiece",
             "--skip-invalid-size-inputs-valid-test", "--no-progress-bar",
             # in process: a worker forked per direction inherits the last direction's loader
             "--num-workers", "0"]
    flags += ["--max-tokens", str(max_tokens)] if max_tokens else []
    flags += ["--batch-size", str(batch_size)] if batch_size else []
    flags += _task_flags(task_name, task_cfg) + extra
    first = directions[0].split("-")  # what fairseq-generate refuses, refused before anything is decoded
    _check_generation_options([corpus.bin, "-s", first[0], "-t", first[1], "--results-path", "unused"] + flags, extra)

    references = {d: reference_identity(corpus.reference_path(split, *d.split("-"))) for d in directions}
    if baseline_results is not None:
        check_same_references(references, baseline_results, baseline_name)
    rows, hypotheses = {}, {}
    with interrupts_kept() as stop_if_interrupted, tempfile.TemporaryDirectory(prefix="langshare-eval-") as tmp, \
            tqdm(directions, desc=f"evaluate {split}", unit="direction") as bar:
        for d in bar:
            bar.set_postfix_str(d)
            src, tgt = d.split("-")
            refs = corpus.references(split, src, tgt)
            out_dir = os.path.join(tmp, d)
            hyps, n_missing = _translate([corpus.bin, "-s", src, "-t", tgt, "--results-path", out_dir] + flags,
                                         out_dir, split, len(refs))
            stop_if_interrupted()  # a Ctrl-C that Python dropped while fairseq shut its data loader down
            rows[d] = {"train_size": sizes[d], "group": groups[d], "supervised": d in trained,
                       **score(hyps, refs, tgt, bleu_tokenize, spbleu_tokenize), "n": len(refs),
                       "n_untranslated": n_missing}
            hypotheses[d] = hyps
            if n_missing:
                logger.warning("%s: %d of %d sentences produced no hypothesis (too long?); scored as empty",
                               d, n_missing, len(refs))

    results = {
        "checkpoint": checkpoint, "num_updates": num_updates,
        "corpus": corpus.path, "split": split, "beam": beam, "lenpen": lenpen,
        "thresholds": {"high": high_threshold, "low": low_threshold},
        "directions": rows,
        "averages": _averages(rows),
        "signatures": {m: sorted({r[f"{m}_signature"] for r in rows.values() if r[f"{m}_signature"]})
                       for m in METRICS},
        "spbleu_note": spbleu_note,
        "skipped": skipped,
        "generate_flags": flags,
        "win_ratio": None,
        "significance": None,
        "references": references,  # what the hypotheses are scored against, for later significance tests
        "hypotheses": hypotheses,  # detokenized, one per test sentence, per direction
    }
    off_target.add_off_target(results, corpus.path)
    if baseline_results is not None:
        wins, total = _win_stats(results, baseline_results, win_metric)
        results["win_ratio"] = {"baseline": baseline_name, "metric": win_metric, "value": wins / total,
                                "wins": wins, "directions": total}
        results["significance"] = baseline_significance(results, baseline_results)
    outputs = {out_json: json_text(results) if out_json else None, out_md: to_markdown(results) if out_md else None}
    try:
        write_files_atomic({path: text for path, text in outputs.items() if path})  # both of this run, or neither
    except OSError as error:  # a full disk: the results are not lost with the files
        raise ResultsNotWritten(results, out_json or out_md, "--out-json" if out_json else "--out-md", error) from None
    return results


class ResultsNotWritten(EvaluationError):
    """The results were computed but their files could not be written; ``results`` holds them."""

    def __init__(self, results, path, flag, error):
        self.results = results
        super().__init__(f"cannot write {flag} {path}: {error.strerror or error}; the results are printed above: "
                         "free some space and evaluate again")


def bleu_signature(row):
    """A BLEU signature without its sacrebleu version (the same tokenization scores the same)."""
    sig = (row or {}).get("bleu_signature")
    return sig and "|".join(f for f in sig.split("|") if not f.startswith("version:"))


def _check_baseline_bleu(directions, tokenize, baseline_results, name):
    """Refuse a baseline whose BLEU of one of ``directions`` was scored with another signature than this
    evaluation's would be (``compare`` refuses such runs alike)."""
    from sacrebleu.metrics import BLEU

    for d in directions:
        theirs = bleu_signature((baseline_results.get("directions") or {}).get(d))
        if not theirs:
            continue
        tgt = d.split("-")[1]
        bleu = BLEU(tokenize=bleu_tokenizer(tgt, tokenize))
        bleu.corpus_score(["-"], [["-"]])  # sacrebleu signs a metric once it knows the number of references
        mine = bleu_signature({"bleu_signature": str(bleu.get_signature())})
        if mine != theirs:
            their_tok = next((f[4:] for f in theirs.split("|") if f.startswith("tok:")), "13a")
            suggest = "auto" if bleu_tokenizer(tgt, "auto") == their_tok else their_tok
            raise EvaluationError(f"direction {d}: the baseline {name} was scored with BLEU signature {theirs}, and "
                                  f"this evaluation would use {mine}; pass --bleu-tokenize {suggest}, or evaluate the "
                                  f"baseline again with --bleu-tokenize {tokenize}")


def _own_output(path) -> bool:
    """Whether ``path`` is an earlier output of evaluate (its results JSON or markdown table)."""
    return file_kind(path) in (EVALUATE_JSON, EVALUATE_MARKDOWN)


# ----------------------------------------------------------------------------- CLI
def _run(args):
    try:
        results = evaluate(
            args.checkpoint, args.corpus, split=args.split, directions=args.directions, beam=args.beam,
            lenpen=args.lenpen, max_tokens=args.max_tokens, batch_size=args.batch_size,
            high_threshold=args.high_threshold, low_threshold=args.low_threshold, baseline=args.baseline,
            out_json=args.out_json, out_md=args.out_md, generate_args=args.generate_args,
            bleu_tokenize=args.bleu_tokenize, spbleu_tokenize=args.spbleu_tokenize, win_metric=args.win_metric,
        )
    except (EvaluationError, FileNotFoundError) as e:
        if isinstance(e, ResultsNotWritten):
            print(to_markdown(e.results), flush=True)
        print(f"langshare evaluate: error: {e}", file=sys.stderr)  # one line, exit 2 like `langshare`
        raise SystemExit(2) from None
    print(to_markdown(results))
    return results


def add_subcommand(subparsers):
    """Register ``langshare evaluate`` on an argparse subparsers object."""
    p = add_command(
        subparsers, "evaluate", help="translate each direction of a corpus split and score it (BLEU, chrF, spBLEU, off-target rate)",
        description="Translate each direction of a corpus split with fairseq-generate and score it with "
                    "sacrebleu: BLEU and chrF (with signatures), spBLEU when its flores SentencePiece model is "
                    "already local (never downloaded); the off-target rate (py3langid, where it tells the target language apart on the references; `langshare off-target CORPUS` shows where); per-direction table, High/Medium/Low/zero-shot and overall "
                    "averages, win ratio against a baseline; JSON and markdown output.",
    )
    p.add_argument("checkpoint", help="fairseq checkpoint (.pt) trained with --task multilingual_langshare")
    p.add_argument("corpus", help="corpus directory from `langshare prepare-data`, `prepare-gettext` or `prepare-corpus` "
                   "(manifest.json, raw/, bin/)")
    p.add_argument("--split", default="test", help="data split to translate and score")
    p.add_argument("--directions", default=None,
                   help="comma-separated SRC-TGT directions, zero-shot ones included; None: every direction "
                        "the checkpoint was trained on that has data in the split")
    p.add_argument("--beam", type=Range(1, why="hypotheses kept per step; 1 is greedy").of(int),
                   default=4, help="beam size")
    p.add_argument("--lenpen", type=Range(why="fairseq-generate's exponent").of(float),
                   default=1.0, help="length penalty")
    p.add_argument("--max-tokens", type=Range(1, why="tokens per batch").of(int),
                   default=4000, help="max tokens per generation batch")
    p.add_argument("--batch-size", type=Range(1, why="sentences per batch").of(int),
                   default=None, help="max sentences per generation batch")
    p.add_argument("--high-threshold", type=Range(0, why="training pairs").of(int), default=10000,
                   help="a direction is high-resource when its non-English language has at least this many "
                        "training pairs")
    p.add_argument("--low-threshold", type=Range(0, why="training pairs").of(int), default=2000,
                   help="a direction is low-resource when its non-English language has fewer training pairs "
                        "than this (medium in between)")
    p.add_argument("--baseline", default=None,
                   help="results JSON of a baseline run (from --out-json): report the win ratio, the share of "
                        "common directions where this run scores higher on --win-metric, and sacrebleu's paired "
                        "bootstrap test against it per direction and pooled (p-values, 95%% CIs)")
    p.add_argument("--win-metric", default="bleu", choices=METRICS, help="metric of the win ratio")
    p.add_argument("--bleu-tokenize", default="auto",
                   help="sacrebleu BLEU tokenization: auto (13a; zh for Chinese targets) or one used for every "
                        "direction, e.g. 13a (the CLSR paper's signature)")
    p.add_argument("--spbleu-tokenize", default="auto", choices=("auto",) + _SPBLEU_TOKENIZERS,
                   help="spBLEU tokenizer: auto (flores200 if local, else flores101) or one of them "
                        "(the LSL paper: flores101)")
    p.add_argument("--out-json", default=None, type=file_name, help="write the results as JSON here")
    p.add_argument("--out-md", default=None, type=file_name, help="write the markdown tables here")
    p.add_argument("--generate-args", default="", type=shell_words,
                   help="extra fairseq-generate flags as one string, e.g. --generate-args='--cpu --nbest 1'; not "
                        "those evaluate sets itself (--beam, --lenpen, --gen-subset, --path, ...: refused)")
    p.set_defaults(func=_run)
    return p
