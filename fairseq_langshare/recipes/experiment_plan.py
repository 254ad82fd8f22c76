"""From a paper's experiment and method (``hparams_*``) to what runs: the fairseq config groups,
the ``fairseq-train`` command line, the ``fairseq-hydra-train`` yaml, the checkpoint to evaluate
and the ``langshare evaluate`` / ``compare`` calls, as one plan that ``train_runner`` executes
and ``--dry-run`` prints.
"""

import json
import os
import re
import shlex
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from . import hparams_adaptive_sparse, hparams_clsr, hparams_latent_depth, hparams_lsl
from ..checkpoint_safety import checkpoint_updates
from .hparams import GROUPS, SIZE_KEYS, TINY_MAX_UPDATE, Experiment, Method, Paper, merge, select_pairs

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAPERS: Dict[str, Paper] = {p.name: p for p in (hparams_clsr.PAPER, hparams_latent_depth.PAPER,
                                                 hparams_adaptive_sparse.PAPER, hparams_lsl.PAPER)}
REAL_GPUS = 8            # the yaml and the default dry-run split the paper's batch over one 8-GPU node
LIST_KEYS = {("optimization", "lr"), ("optimization", "update_freq")}
NAME_FLAGS = {"task": "--task", "model": "--arch", "criterion": "--criterion", "optimizer": "--optimizer",
              "lr_scheduler": "--lr-scheduler"}


def lookup(paper: str, experiment: str, method: Optional[str] = None):
    if paper not in PAPERS:
        raise ValueError(f"unknown paper {paper!r}; choose one of {', '.join(PAPERS)} (langshare recipe list)")
    exp = PAPERS[paper].experiment(experiment)
    return PAPERS[paper], exp, (exp.method(method) if method is not None else None)


def default_data_dir(exp: Experiment) -> str:
    return os.path.join("corpora", exp.corpus)


def default_out_dir(paper: Paper, exp: Experiment) -> str:
    return os.path.join("runs", "recipes", paper.name, exp.name)


# ----------------------------------------------------------------------------- the corpus
@dataclass
class Corpus:
    """What a prepared corpus directory says (or, before it exists, shell expressions that read it)."""
    path: str
    exists: bool
    name: Optional[str] = None
    langs: List[str] = field(default_factory=list)
    lang_pairs: List[str] = field(default_factory=list)
    zero_shot_pairs: List[str] = field(default_factory=list)
    pivot: str = "en"

    @classmethod
    def read(cls, path, required=True, name="NAME"):
        """``name``: the corpus an experiment trains on, for the command that builds it."""
        manifest = os.path.join(path, "manifest.json")
        if not os.path.isfile(manifest):
            if required:
                raise ValueError(f"{path} is not a prepared corpus (no manifest.json): build it with "
                                 f"`langshare prepare-corpus {name} --out {path} --download` (or --mirror DIR: "
                                 "docs/recipes.md), or pass --dry-run")
            return cls(path=path, exists=False)
        with open(manifest, encoding="utf-8") as f:
            try:
                data = json.load(f)
            except ValueError as e:
                raise ValueError(f"{manifest} is not valid JSON ({e}); rebuild the corpus") from None
        langs = _read_list(os.path.join(path, "langs.txt"), "\n") or list(data.get("langs", []))
        pairs = _read_list(os.path.join(path, "lang_pairs.txt"), ",") or list(data.get("lang_pairs", []))
        if not langs or not pairs:
            raise ValueError(f"{path}: langs.txt or lang_pairs.txt is missing or empty; rebuild the corpus")
        return cls(path=path, exists=True, name=data.get("corpus"), langs=langs, lang_pairs=pairs,
                   zero_shot_pairs=list(data.get("zero_shot_pairs") or []), pivot=data.get("pivot", "en"))

    def has_split(self, split, pair):
        s, t = pair.split("-")
        raw = any(os.path.isfile(os.path.join(self.path, "raw", f"{split}.{a}-{b}.{t}")) for a, b in ((s, t), (t, s)))
        binary = any(os.path.isfile(os.path.join(self.path, "bin", f"{split}.{a}-{b}.{s}.idx")) for a, b in ((s, t), (t, s)))
        return raw and binary


def _read_list(path, sep):
    if not os.path.isfile(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [x.strip() for x in f.read().replace("\n", sep).split(sep) if x.strip()]


def trained_pairs(exp: Experiment, corpus: Corpus) -> List[str]:
    pairs = select_pairs(corpus.lang_pairs, exp.direction, corpus.pivot)
    if not pairs:
        raise ValueError(f"corpus {corpus.path} has no {exp.direction} direction for experiment {exp.name} "
                         f"(its directions: {','.join(corpus.lang_pairs)}); prepare the corpus with both "
                         f"directions (langshare prepare-corpus {exp.corpus})")
    return pairs


def _pairs_expression(exp: Experiment, path: str) -> str:
    """A shell expression printing the trained directions of a corpus that does not exist yet."""
    read = f"tr , '\\n' < {path}/lang_pairs.txt"
    select = {"o2m": " | grep '^en-'", "m2o": " | grep -- '-en$'", "all": "",
              "lsl-zero-shot": " | langshare recipe select-pairs lsl-zero-shot"}[exp.direction]
    return f"$({read}{select} | paste -sd, -)"


# ----------------------------------------------------------------------------- config groups
def build_config(paper: Paper, exp: Experiment, method: Method, *, run_dir: str, corpus: Corpus, tiny=False,
                 gpus=REAL_GPUS, max_update=None, init_checkpoint=None, hydra=False) -> dict:
    """The fairseq config groups of one run."""
    exp_model = {k: v for k, v in exp.config.get("model", {}).items() if not (tiny and k in SIZE_KEYS)}
    cfg = merge({g: v for g, v in exp.config.items() if g != "model"}, {"model": exp_model},
                method.config, {"model": method.model_config(tiny)})
    updates = max_update or (TINY_MAX_UPDATE if tiny else exp.max_update(method))
    average = averaged_checkpoints(exp, updates, tiny)
    save_interval = 1 if tiny else exp.save_interval_updates
    if hydra:
        data, langs, pairs = os.path.join(corpus.path, "bin"), "???", "???"
    elif corpus.exists:
        data, langs, pairs = os.path.join(corpus.path, "bin"), ",".join(corpus.langs), ",".join(trained_pairs(exp, corpus))
    else:
        data, langs, pairs = (os.path.join(corpus.path, "bin"), f"$(paste -sd, {corpus.path}/langs.txt)",
                              _pairs_expression(exp, corpus.path))
    cfg = merge(cfg, {
        "common": {"user_dir": "fairseq_langshare" if hydra else PACKAGE_DIR},
        "task": {"data": data, "langs": langs, "lang_pairs": pairs},
        "optimization": {"max_update": updates},
        "dataset": {"validate_interval_updates": 0 if tiny else save_interval},
        "checkpoint": {"save_dir": os.path.join(run_dir, "checkpoints"), "no_epoch_checkpoints": True,
                       "save_interval_updates": save_interval, "keep_interval_updates": max(average, 1)},
    }, exp.batch.flags(1 if tiny else gpus))
    if method.init_from is not None:
        if init_checkpoint is None:
            raise ValueError(f"{method.name} starts from {method.init_from}'s checkpoint: pass init_checkpoint")
        cfg = merge(cfg, {"model": {method.init_key: init_checkpoint}})
    if tiny:
        batch = {"max_tokens": 512, "batch_size": None} if exp.batch.unit == "tokens" else {"batch_size": 16}
        cfg = merge(cfg, {"common": {"cpu": True, "fp16": None, "log_interval": 1},
                          "dataset": {**batch, "num_workers": 0, "disable_validation": True},
                          "optimization": {"update_freq": 1}})
    return cfg


def _flag_value(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


def train_argv(cfg: dict) -> List[str]:
    """``fairseq-train`` arguments (without the program name) for a config."""
    argv = [cfg["task"]["data"]]
    for group in GROUPS:
        for key, value in cfg.get(group, {}).items():
            if group == "task" and key == "data":
                continue
            if key == "_name":
                argv += [NAME_FLAGS[group], str(value)]
                continue
            flag = "--" + key.replace("_", "-")
            if isinstance(value, bool):
                argv += [flag] if value else []
            else:
                argv += [flag, _flag_value(value)]
    return argv


def hydra_config(cfg: dict) -> dict:
    """The same config as the yaml of ``fairseq-hydra-train`` (lists where fairseq wants them), run in
    the directory it is started from, as fairseq's own config says (its relative paths mean that one)."""
    out = {"hydra": {"run": {"dir": "."}}}
    for group in GROUPS:
        if group not in cfg:
            continue
        items = sorted(cfg[group].items(), key=lambda kv: kv[0] != "_name")  # _name first, then as defined
        out[group] = {k: ([v] if (group, k) in LIST_KEYS and not isinstance(v, list) else v) for k, v in items}
    return out


# ----------------------------------------------------------------------------- the plan
@dataclass
class EvalSet:
    name: str                       # results-<name>.json
    directions: Optional[List[str]]  # None: every trained direction with data


@dataclass
class Run:
    """One method of one experiment: where it lives and how it is trained and scored."""
    paper: Paper
    exp: Experiment
    method: Method
    run_dir: str
    config: dict
    max_update: int
    average_last: int               # update checkpoints averaged (1: checkpoint_last.pt)
    checkpoint: str                 # the checkpoint evaluated (averaged or last)
    eval_sets: List[EvalSet]
    tiny: bool = False

    @property
    def finished_marker(self):
        return os.path.join(self.run_dir, "checkpoints", f"finished-{self.max_update}")

    def results(self, eval_set):
        return os.path.join(self.run_dir, f"results-{eval_set}.json")


def trained_updates(save_dir: str) -> int:
    """The updates the training in ``save_dir`` has done (0: none): the most of its ``finished-<n>``
    markers and its checkpoint_last.pt."""
    names = os.listdir(save_dir) if os.path.isdir(save_dir) else []
    done = [int(n.split("-")[1]) for n in names if re.fullmatch(r"finished-\d+", n)]
    if "checkpoint_last.pt" in names:
        done.append(checkpoint_updates(os.path.join(save_dir, "checkpoint_last.pt")))
    return max(done, default=0)


def check_updates(save_dir: str, planned: int, fix: str) -> None:
    """Refuse ``save_dir`` if it was trained past ``planned`` updates: fairseq would resume it, train
    one more update and it would be marked finished after ``planned``. Fewer updates: it resumes."""
    done = trained_updates(save_dir)
    if done > planned:
        raise ValueError(f"{save_dir} was trained for {done} updates, this plan has {planned}: {fix}")


def eval_sets(exp: Experiment, corpus: Corpus, trained: List[str], split="test") -> List[EvalSet]:
    """Direction sets scored separately: the trained ones (zero-shot rows added where the paper
    reports them); an English-centric many-to-many run also per O2M / M2O / zero-shot (adaptive
    sparse Table 2)."""
    if not corpus.exists:
        return [EvalSet("test", None)]
    zero = []
    if exp.evaluation.zero_shot:
        candidates = list(dict.fromkeys(corpus.zero_shot_pairs + corpus.lang_pairs))
        zero = [p for p in candidates if p not in trained and corpus.has_split(split, p)
                and all(code in corpus.langs for code in p.split("-"))]
    supervised = [p for p in trained if corpus.has_split(split, p)]
    sets = [EvalSet("test", supervised + zero if zero else None)]
    if exp.evaluation.by_direction and supervised and all(corpus.pivot in p.split("-") for p in supervised):
        o2m = [p for p in supervised if p.startswith(corpus.pivot + "-")]
        m2o = [p for p in supervised if p.endswith("-" + corpus.pivot)]
        sets += [EvalSet(name, pairs) for name, pairs in (("o2m", o2m), ("m2o", m2o), ("zero-shot", zero)) if pairs]
    return sets


def plan_run(paper: Paper, exp: Experiment, method: Method, *, data_dir: str, out_dir: str, tiny=False,
             gpus=REAL_GPUS, max_update=None, corpus: Optional[Corpus] = None) -> Run:
    corpus = corpus or Corpus.read(data_dir, required=False)
    run_dir = os.path.join(out_dir, method.name)
    init = None
    if method.init_from is not None:
        source = exp.method(method.init_from)
        source_updates = max_update or (TINY_MAX_UPDATE if tiny else exp.max_update(source))
        init = final_checkpoint(exp, os.path.join(out_dir, source.name), averaged_checkpoints(exp, source_updates, tiny))
    cfg = build_config(paper, exp, method, run_dir=run_dir, corpus=corpus, tiny=tiny, gpus=gpus,
                       max_update=max_update, init_checkpoint=init)
    trained = trained_pairs(exp, corpus) if corpus.exists else []
    updates = cfg["optimization"]["max_update"]
    n = cfg["checkpoint"]["keep_interval_updates"]
    return Run(paper, exp, method, run_dir, cfg, updates, n, final_checkpoint(exp, run_dir, n),
               eval_sets(exp, corpus, trained), tiny)


def averaged_checkpoints(exp: Experiment, updates: int, tiny=False) -> int:
    """How many update checkpoints are averaged (--tiny: no more than the updates it saves)."""
    n = exp.evaluation.average_last
    return max(1, min(n, updates)) if tiny else n


def final_checkpoint(exp: Experiment, run_dir: str, n: int) -> str:
    name = f"checkpoint_avg{n}.pt" if n > 1 else os.path.join("checkpoints", "checkpoint_last.pt")
    return os.path.join(run_dir, name)


TINY_GENERATE_ARGS = ("--max-len-a", "1", "--max-len-b", "5", "--num-workers", "0")  # --tiny: stop early, no loader process


def evaluate_kwargs(run: Run, eval_set: EvalSet, baseline_json: Optional[str], data_dir: str) -> dict:
    ev = run.exp.evaluation
    return dict(generate_args=TINY_GENERATE_ARGS if run.tiny else (), checkpoint=run.checkpoint,
                corpus_dir=data_dir, split="test", directions=eval_set.directions,
                beam=ev.beam, lenpen=ev.lenpen, high_threshold=ev.high_threshold, low_threshold=ev.low_threshold,
                bleu_tokenize=ev.bleu_tokenize, spbleu_tokenize=ev.spbleu_tokenize, win_metric=ev.win_metric,
                baseline=baseline_json, out_json=run.results(eval_set.name),
                out_md=os.path.join(run.run_dir, f"results-{eval_set.name}.md"))


def evaluate_command(kwargs: dict) -> List[str]:
    cmd = ["langshare", "evaluate", kwargs["checkpoint"], kwargs["corpus_dir"], "--split", kwargs["split"],
           "--beam", str(kwargs["beam"]), "--lenpen", str(kwargs["lenpen"]),
           "--high-threshold", str(kwargs["high_threshold"]), "--low-threshold", str(kwargs["low_threshold"])]
    for option in ("bleu_tokenize", "spbleu_tokenize", "win_metric"):
        cmd += ["--" + option.replace("_", "-"), kwargs[option]]
    if kwargs["directions"]:
        cmd += ["--directions", ",".join(kwargs["directions"])]
    if kwargs["baseline"]:
        cmd += ["--baseline", kwargs["baseline"]]
    if kwargs["generate_args"]:
        cmd += ["--generate-args=" + " ".join(kwargs["generate_args"])]
    return cmd + ["--out-json", kwargs["out_json"], "--out-md", kwargs["out_md"]]


def after_commands(run: Run) -> List[str]:
    return [cmd.format(ckpt=shlex.quote(run.checkpoint), run=shlex.quote(run.run_dir))
            + (f" --log {shlex.quote(os.path.join(run.run_dir, 'train.log'))}" if "latent-depth" in cmd else "")
            for cmd in run.method.after]


def hydra_command(run: Run, config_dir: str = "configs/recipes") -> List[str]:
    task = run.config["task"]
    return ["fairseq-hydra-train", "--config-dir", os.path.join(config_dir, run.paper.name), "--config-name",
            f"{run.exp.name}-{run.method.name}", f"common.user_dir={PACKAGE_DIR}", f"task.data={task['data']}",
            f"task.langs='{task['langs']}'", f"task.lang_pairs='{task['lang_pairs']}'",
            f"checkpoint.save_dir={run.config['checkpoint']['save_dir']}"]
