"""The runs of ``langshare head-to-head``: where they live, how they are trained (exactly the
settings of ``scripts/quality_lib.sh``, ``--seed k``, json logs), evaluated and skipped, and the
models built from their flags for measuring parameters and inference cost.

Layout: ``RUNS/<direction>/<model>/seed<k>/`` (the one ``/work/runs/bin/train.sh`` writes):
fairseq's checkpoints, ``train.log``, a ``finished-<updates>`` marker once training is done (such a
run is never trained again), and ``test.json``/``test.md`` of ``langshare evaluate`` (redone only
when older than the checkpoint or without hypotheses). Each process runs on one thread.
"""

import argparse
import dataclasses
import gzip
import json
import os
import subprocess
import sys
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from . import head_to_head_record
from .experiment_plan import check_updates
from .head_to_head_models import BASELINE, DIRECTIONS, H2HModel, model as model_named

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_CORPORA = {"o2m": "demo_run/corpus", "m2o": "demo_run/corpus_m2o",  # scripts/quality_lib.sh's
                   "m2m": "demo_run/corpus_m2m"}
# scripts/quality_lib.sh's fairseq-train settings (tests/test_head_to_head.py compares them)
TRAIN_FLAGS = ("--encoder-langtok", "tgt", "--sampling-method", "temperature", "--sampling-temperature", "5",
               "--share-all-embeddings", "--dropout", "0.1",
               "--criterion", "langshare_label_smoothed_cross_entropy", "--label-smoothing", "0.1",
               "--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--lr", "0.002", "--lr-scheduler", "inverse_sqrt",
               "--warmup-updates", "400", "--max-tokens", "2048")
CHECKPOINT_FLAGS = ("--no-epoch-checkpoints", "--validate-interval-updates", "500", "--save-interval-updates", "500",
                    "--keep-interval-updates", "1")
# what every run's command line sets from the plan: --train-flags may not change them
PLAN_FLAGS = ("--user-dir", "--task", "--langs", "--lang-pairs", "--arch", "--max-update", "--save-dir", "--seed",
              "--cpu", "--num-workers", "--log-format", "--log-interval", "--no-save", "--no-last-checkpoints")
TRAIN_FLAGS_FILE = "train_flags.json"  # in a run's directory: the --train-flags it was trained with
EVALUATE_FLAGS = ("--split", "test", "--beam", "4")  # scripts/quality_lib.sh's and /work/runs/bin/eval.sh's
CORPUS_FLAGS = dict(num_langs=8, selection="spread", vocab_size=8000, workers=2)  # scripts/quality_lib.sh's
# the many-to-many set: both directions through English, and the zero-shot test sets of every ordered
# pair of the 8 languages (up to 200 sentences each; pairs with fewer than 20 left out: docs/data.md)
CORPUS_DIRECTION = {"o2m": "o2m", "m2o": "m2o", "m2m": "both"}
ZERO_SHOT_FLAGS = {"m2m": dict(zero_shot_spec="all")}
DIRECTION_NAMES = {"o2m": "one-to-many (one source language)", "m2o": "many-to-one (one target language)",
                   "m2m": "many-to-many"}
# Updates per second of one training process, two at a time on two otherwise idle cores, for the
# --dry-run estimate: measured in the O2M head-to-head on an AMD EPYC machine (2,000 updates in
# 1,077-1,238 s: docs/head_to_head.md, Sizing). The Intel Xeon this machine kind has also been ran the
# baseline about twice as fast (2,400 updates in 581 s); the slower machine is the one the estimate
# must hold on. Latent depth and adaptive sparsity are scaled from the baseline by their relative CPU
# speed (benchmarks/head_to_head_speed.py -> benchmarks/results/head_to_head_speed.json).
UPDATES_PER_SECOND = {"baseline": 1.8, "baseline_prenorm": 1.8, "adapters": 1.8, "lsl": 1.65, "clsr": 1.6,
                      "latent_depth": 1.4, "adaptive_sparse": 1.35}
# one run's test set, beam 4, one thread: O2M/M2O 8 directions, 2,307 sentences, 73-77 s measured;
# M2M scaled from that by its sentences (2 x 2,307 supervised and about 5,200 zero-shot ones)
EVALUATE_SECONDS = {"o2m": 80, "m2o": 80, "m2m": 340}
DEFAULT_UPDATES = 2000


@dataclass
class Corpus:
    path: str
    direction: str

    @property
    def exists(self) -> bool:
        return os.path.isfile(os.path.join(self.path, "manifest.json"))

    def _line(self, name):
        with open(os.path.join(self.path, name), encoding="utf-8") as f:
            return f.read().split()

    @property
    def langs(self) -> str:
        return ",".join(self._line("langs.txt"))

    @property
    def lang_pairs(self) -> str:
        return self._line("lang_pairs.txt")[0]

    @property
    def zero_shot_pairs(self) -> List[str]:
        """The untrained directions the corpus has test sets for (its manifest's ``zero_shot_pairs``;
        none without a manifest)."""
        if not self.exists:
            return []
        with open(os.path.join(self.path, "manifest.json"), encoding="utf-8") as f:
            return list(json.load(f).get("zero_shot_pairs") or [])

    def check_direction(self) -> None:
        """Refuse a built corpus whose trained directions are of another set than ``direction`` (an
        English-to-many corpus given as ``--corpus m2o=DIR`` would train the M2O models on O2M pairs)."""
        if not self.exists:
            return
        pairs = [p.split("-") for p in self.lang_pairs.split(",")]
        sources, targets = {s for s, _ in pairs}, {t for _, t in pairs}
        fits = {"o2m": len(sources) == 1, "m2o": len(targets) == 1}  # one direction is either
        fits["m2m"] = not any(fits.values())
        if not fits[self.direction]:
            actual = next(d for d, ok in fits.items() if ok)
            raise ValueError(f"--corpus {self.direction}={self.path}: its trained directions ({self.lang_pairs}) "
                             f"are {DIRECTION_NAMES[actual]}, not {DIRECTION_NAMES[self.direction]}: pass it as "
                             f"--corpus {actual}={self.path} with --directions {actual}")

    @property
    def dict_sha256(self) -> Optional[str]:
        """The sha256 of the corpus's dictionary (bin/dict.txt; None when it has none): what its runs'
        token ids mean. A corpus moved elsewhere keeps it; one rebuilt with another vocabulary does not."""
        from ..data.corpus_build import sha256

        path = os.path.join(self.path, "bin", "dict.txt")
        return sha256(path) if os.path.isfile(path) else None

    def test_references(self) -> Dict[str, str]:
        """{pair: sha256} of the test references ``langshare evaluate`` scores each pair against
        (raw/test.SRC-TGT.TGT, or raw/test.TGT-SRC.TGT), for the pairs that have them."""
        from ..data.corpus_build import sha256

        out = {}
        for pair in self.lang_pairs.split(",") + self.zero_shot_pairs:
            src, tgt = pair.split("-")
            for a, b in ((src, tgt), (tgt, src)):
                path = os.path.join(self.path, "raw", f"test.{a}-{b}.{tgt}")
                if os.path.isfile(path):
                    out[pair] = sha256(path)
                    break
        return out

    def prepare(self):
        from ..data.gettext_corpus import prepare_gettext

        prepare_gettext(self.path, direction=CORPUS_DIRECTION[self.direction], **CORPUS_FLAGS,
                        **ZERO_SHOT_FLAGS.get(self.direction, {}))


@dataclass
class Run:
    direction: str
    model: H2HModel
    seed: int
    dir: str
    corpus: Corpus
    updates: int
    train_flags: Tuple[str, ...] = ()  # --train-flags: after TRAIN_FLAGS and CHECKPOINT_FLAGS, so they win

    @property
    def name(self) -> str:
        return f"{self.direction}/{self.model.name}/seed{self.seed}"

    @property
    def checkpoint(self) -> str:
        return os.path.join(self.dir, "checkpoint_last.pt")

    @property
    def results(self) -> str:
        return os.path.join(self.dir, "test.json")

    @property
    def trained(self) -> bool:
        return os.path.exists(os.path.join(self.dir, f"finished-{self.updates}"))

    @property
    def evaluated(self) -> bool:
        """test.json with hypotheses, newer than the checkpoint."""
        if not (self.trained and os.path.isfile(self.results) and os.path.isfile(self.checkpoint)):
            return False
        if os.path.getmtime(self.results) < os.path.getmtime(self.checkpoint):
            return False
        with open(self.results, encoding="utf-8") as f:
            return '"hypotheses"' in f.read()

    @property
    def status(self) -> str:
        if self.evaluated:
            return "done"
        if self.trained:
            return "to evaluate"
        return "to resume" if os.path.isfile(self.checkpoint) else "to train"


def train_argv(run: Run, device: str = "cpu") -> List[str]:
    """fairseq-train's arguments: scripts/quality_lib.sh's settings, --seed, json logs, the model."""
    corpus = run.corpus
    argv = [os.path.join(corpus.path, "bin"), "--user-dir", PACKAGE_DIR, "--task", "multilingual_langshare",
            "--langs", corpus.langs, "--lang-pairs", corpus.lang_pairs, *TRAIN_FLAGS,
            "--max-update", str(run.updates), "--save-dir", run.dir, *CHECKPOINT_FLAGS, *run.train_flags,
            *(["--cpu"] if device == "cpu" else []), "--num-workers", "0", "--seed", str(run.seed),
            "--log-format", "json", "--log-interval", "100"]
    return argv + list(run.model.argv(run.direction))


def check_train_flags(flags: Sequence[str]) -> Tuple[str, ...]:
    """``--train-flags`` as given, unless one of them is a flag the plan sets for every run."""
    owned = [f for f in flags if f.split("=")[0] in PLAN_FLAGS]
    if owned:
        raise ValueError(f"--train-flags: {', '.join(owned)} is set by the head-to-head itself; use --models, "
                         f"--updates, --seeds, --runs-dir or --device instead")
    return tuple(flags)


def trained_with(run: Run) -> Optional[Tuple[str, ...]]:
    """The --train-flags a run directory was trained with (none recorded: none), or None when it
    holds no training yet."""
    path = os.path.join(run.dir, TRAIN_FLAGS_FILE)
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            return tuple(json.load(f))
    started = os.path.isfile(run.checkpoint) or os.path.exists(os.path.join(run.dir, f"finished-{run.updates}"))
    return () if started else None


def plan(models: Sequence[str], directions: Sequence[str], seeds: Sequence[int], runs_dir: str,
         corpora: Dict[str, str], updates: int, train_flags: Sequence[str] = ()) -> List[Run]:
    """Every (direction, seed, model) run, seed-major: all models of seed 1 come first. A run
    directory trained with other ``train_flags`` or for more ``updates`` is refused: it would be
    resumed or skipped as if it were this plan's."""
    if BASELINE not in models:
        raise ValueError(f"--models must include {BASELINE}: every model is compared with it")
    chosen = [model_named(m) for m in models]
    for d in directions:
        if d not in DIRECTIONS:
            raise ValueError(f"unknown direction {d!r}: choose from {', '.join(DIRECTIONS)}")
    if updates < 1 or not seeds or min(seeds) < 1:
        raise ValueError("--updates and every --seeds value must be positive integers")
    extra = check_train_flags(train_flags)
    runs = [Run(d, m, s, os.path.join(runs_dir, d, m.name, f"seed{s}"), Corpus(corpora[d], d), updates, extra)
            for d in directions for s in seeds for m in chosen]
    for d in directions:
        Corpus(corpora[d], d).check_direction()
    for run in runs:
        check_updates(run.dir, updates, "pass the same --updates or another --runs-dir")
        before = trained_with(run)
        if before is not None and before != extra:
            raise ValueError(f"{run.dir} was trained with --train-flags {' '.join(before) or '(none)'!r}, this plan "
                             f"has {' '.join(extra) or '(none)'!r}: pass the same flags or another --runs-dir")
    return runs


# ----------------------------------------------------------------------------- building the models
def build(run: Run, checkpoint: Optional[str] = None, data: Optional[str] = None):
    """(model, task, args) as fairseq-train builds them for ``run``, schedules at the end of
    training; with ``checkpoint``, that checkpoint's weights. ``data``: another data directory
    with the corpus's dictionaries (a stand-in when the corpus is not built yet)."""
    from fairseq import checkpoint_utils, options, tasks

    argv = train_argv(run)
    if data is not None:
        argv[0] = data
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    task = tasks.setup_task(args)
    if checkpoint is None:
        model = task.build_model(args)
    else:
        model = checkpoint_utils.load_model_ensemble([checkpoint], task=task)[0][0]
    model.set_num_updates(run.updates)
    return model, task, args


def _standin_data(tmp: str, direction: str, vocab: int = 8000):
    """Dictionaries for a corpus that is not built yet: en + 8 placeholder languages, ``vocab`` symbols."""
    langs = ["en"] + [f"l{i}" for i in range(1, 9)]
    pairs = [p for x in langs[1:] for p, d in ((f"en-{x}", "o2m"), (f"{x}-en", "m2o")) if direction in (d, "m2m")]
    os.makedirs(os.path.join(tmp, "bin"), exist_ok=True)
    words = "".join(f"w{i} 1\n" for i in range(vocab - 4))
    for name in ["dict.txt"] + [f"dict.{lang}.txt" for lang in langs]:
        with open(os.path.join(tmp, "bin", name), "w", encoding="utf-8") as f:
            f.write(words)
    for name, text in (("langs.txt", "\n".join(langs)), ("lang_pairs.txt", ",".join(pairs)), ("manifest.json", "{}")):
        with open(os.path.join(tmp, name), "w", encoding="utf-8") as f:
            f.write(text + "\n")
    return Corpus(tmp, direction)


def profile(run: Run, checkpoint: Optional[str] = None, corpus: Optional[Corpus] = None) -> Dict:
    """Parameters (total, per pair) and the measured inference profile of every pair of ``run``'s
    model (``analysis.inference_cost``)."""
    from ..analysis.inference_cost import inference_profile, parameters

    if corpus is not None:
        run = dataclasses.replace(run, corpus=corpus)
    model, task, args = build(run, checkpoint)
    ids = {p: tuple(task.inventory.id(x) for x in p.split("-")) for p in run.corpus.lang_pairs.split(",")}
    return {"parameters": parameters(model, ids, args),
            "inference": {p: inference_profile(model, *ids[p]) for p in ids}}


def equal_cost_problems(profiles: Dict[str, Dict]) -> List[str]:
    """What differs from the baseline's layers and widths, per model and pair (empty: all equal)."""
    from ..analysis.inference_cost import cost_signature

    base = profiles[BASELINE]["inference"]
    problems = []
    for name, prof in profiles.items():
        for pair, p in prof["inference"].items():
            if cost_signature(p) != cost_signature(base[pair]):
                problems.append(f"{name} {pair}: runs {cost_signature(p)}, the baseline {cost_signature(base[pair])}")
    return problems


FLOPS_TOLERANCE = 0.01  # FLOPs per sentence within 1% of the baseline's: equal inference cost


def flops_per_sentence(prof: Dict) -> float:
    """The measured FLOPs of one sentence, averaged over the language pairs of ``profile``."""
    values = [p["flops"] for p in prof["inference"].values()]
    return sum(values) / len(values)


def inference_cost(profiles: Dict[str, List[Dict]], tolerance: float = FLOPS_TOLERANCE) -> Dict[str, Dict]:
    """Per model, against the baseline's profile of the same seed (the lists are paired by
    position): ``layers_and_widths``, what differs from the baseline's layers and widths (empty:
    nothing); ``flops_ratio``, per seed, its FLOPs per sentence over the baseline's; ``equal``:
    equal layers and widths and every ratio within ``tolerance`` of 1."""
    out = {}
    for name, seeds in profiles.items():
        problems = []
        for k, prof in enumerate(seeds):
            problems += [p for p in equal_cost_problems({BASELINE: profiles[BASELINE][k], name: prof})
                         if p not in problems]
        ratios = [flops_per_sentence(prof) / flops_per_sentence(profiles[BASELINE][k]) for k, prof in enumerate(seeds)]
        out[name] = {"layers_and_widths": problems, "flops_ratio": ratios,
                     "equal": not problems and all(abs(r - 1) <= tolerance for r in ratios)}
    return out


def ratio_text(ratios: List[float]) -> str:
    """FLOPs ratios to the baseline's as ``x1.15`` (``x1.05-1.15`` where the seeds differ)."""
    low, high = f"{min(ratios):.2f}", f"{max(ratios):.2f}"
    return f"x{low}" if low == high else f"x{low}-{high}"


def percent_text(ratios: List[float]) -> str:
    """The same ratios as ``+15.0%`` (``+5.0% to +15.0%``)."""
    low, high = (f"{(r - 1) * 100:+.1f}%" for r in (min(ratios), max(ratios)))
    return low if low == high else f"{low} to {high}"


# ----------------------------------------------------------------------------- running
def _environment():
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.dirname(PACKAGE_DIR), env.get("PYTHONPATH")]))
    return env


def _call(argv, log_path):
    with open(log_path, "a", encoding="utf-8") as log:
        return subprocess.call(argv, stdout=log, stderr=subprocess.STDOUT, env=_environment())


def train(run: Run, device: str = "cpu") -> None:
    """Train (or resume) unless finished; mark ``finished-<updates>`` when fairseq says so."""
    if run.trained:
        return
    os.makedirs(run.dir, exist_ok=True)
    with open(os.path.join(run.dir, TRAIN_FLAGS_FILE), "w", encoding="utf-8") as f:
        json.dump(list(run.train_flags), f)
    log = os.path.join(run.dir, "train.log")
    code = _call([sys.executable, "-m", "fairseq_cli.train", *train_argv(run, device)], log)
    done = False
    if os.path.isfile(log):
        with open(log, encoding="utf-8") as f:
            done = "done training" in f.read()
    if code != 0 or not done:
        raise RuntimeError(f"{run.name}: fairseq-train failed (exit {code}); see {log}")
    open(os.path.join(run.dir, f"finished-{run.updates}"), "w").close()


def evaluate_argv(run: Run) -> List[str]:
    """``langshare evaluate`` on the test split (beam 4) into test.json/test.md, decoding on the CPU
    (one thread) also in a ``--device cuda`` run: beam search of these small models is bound by
    kernel launches, and beside the other runs' trainings on one shared GPU it took 4-5 minutes per
    run on an H200 (docs/head_to_head.md, "On a GPU") against 73-77 s on one CPU core. A corpus with
    zero-shot test sets (M2M) is evaluated on its trained and its zero-shot directions."""
    zero_shot = run.corpus.zero_shot_pairs
    directions = ["--directions", ",".join(run.corpus.lang_pairs.split(",") + zero_shot)] if zero_shot else []
    return [sys.executable, "-m", "fairseq_langshare.cli", "evaluate", run.checkpoint, run.corpus.path,
            *EVALUATE_FLAGS, *directions, "--generate-args=--cpu", "--out-json", run.results,
            "--out-md", os.path.join(run.dir, "test.md")]


def evaluate(run: Run) -> None:
    """Evaluate (``evaluate_argv``) unless the results are current."""
    if run.evaluated:
        return
    log = os.path.join(run.dir, "eval.log")
    if _call(evaluate_argv(run), log) != 0:
        raise RuntimeError(f"{run.name}: langshare evaluate failed; see {log}")


def execute(runs: List[Run], jobs: int, device: str = "cpu", stream=None, record_dir: Optional[str] = None) -> List[str]:
    """Train and evaluate every run not done, ``jobs`` at a time; with ``record_dir``, write each
    run's record there as soon as it is evaluated (``record_run``; also for runs done
    earlier whose record is missing). Returns the failures."""
    stream = stream or sys.stdout
    def recorded(r):
        return record_dir is None or os.path.isfile(head_to_head_record.run_path(record_dir, r.direction, r.model.name,
                                                                                r.seed))
    todo = [r for r in runs if r.status != "done" or not recorded(r)]
    failures = []

    def work(item):
        index, run = item
        start = time.time()
        print(f"[{index}/{len(todo)}] {run.name}: {run.status}", file=stream, flush=True)
        try:
            train(run, device)
            trained = time.time()
            evaluate(run)
            if record_dir is not None:
                path = record_run(
                    record_dir, run, {"train": trained - start, "evaluate": time.time() - trained})
                print(f"[{index}/{len(todo)}] {run.name}: recorded in {path}", file=stream, flush=True)
        except (RuntimeError, ValueError) as error:
            failures.append(str(error))
            print(f"[{index}/{len(todo)}] {run.name}: FAILED: {error}", file=stream, flush=True)
            return
        print(f"[{index}/{len(todo)}] {run.name}: done in {time.time() - start:.0f} s", file=stream, flush=True)

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        list(pool.map(work, enumerate(todo, 1)))
    return failures


def _train_log(run: Run) -> Optional[str]:
    path = os.path.join(run.dir, "train.log")
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def other_training(record_dir: str, run: Run) -> Optional[str]:
    """Why ``run`` may not replace the record's seed file of its direction, model and seed (None: no
    such file, or it records this very training, e.g. evaluated again): a recorded run is the one
    whose fairseq-train log is recorded beside it, and another training of that seed (another
    --runs-dir, a run trained again) would replace it."""
    path = head_to_head_record.run_path(record_dir, run.direction, run.model.name, run.seed)
    if not os.path.isfile(path):
        return None
    logged = head_to_head_record.log_path(record_dir, run.direction, run.model.name, run.seed)
    if os.path.isfile(logged):
        try:
            with gzip.open(logged, "rt", encoding="utf-8", errors="replace") as f:
                if f.read() == _train_log(run):
                    return None
        except (OSError, EOFError, zlib.error):
            pass
    return (f"{path} holds another training of {run.name} than the one in {run.dir}: a recorded run is never "
            f"replaced; pass another --record-dir (or delete {path} to record this one instead)")


def record_run(record_dir: str, run: Run, seconds: Dict[str, float]) -> str:
    """The record of one evaluated run (``head_to_head_record``'s format); returns its path."""
    from ..evaluation import _read_json

    results = _read_json(run.results, "results")
    logged = head_to_head_record.training_seconds(os.path.join(run.dir, "train.log"))
    seconds = {**seconds, **({"train": logged} if logged is not None else {})}
    head_to_head_record.write_references(record_dir, run.direction, results)
    record = {
        "format": head_to_head_record.FORMAT, "direction": run.direction, "model": run.model.name, "seed": run.seed,
        "updates": run.updates, "label": run.model.label, "arch": run.model.arch,
        "model_flags": list(run.model.argv(run.direction)), "reason": run.model.reason_for(run.direction),
        "extra_compute": run.model.extra_compute or None,
        "train_flags": list(TRAIN_FLAGS) + list(run.train_flags), "evaluate_flags": list(EVALUATE_FLAGS),
        "corpus": {"path": run.corpus.path, "langs": run.corpus.langs, "lang_pairs": run.corpus.lang_pairs,
                   "dict_sha256": run.corpus.dict_sha256},
        "profile": profile(run, checkpoint=run.checkpoint),
        "validation": head_to_head_record.last_validation(os.path.join(run.dir, "train.log")),
        "wall_seconds": {k: round(v, 1) for k, v in seconds.items()},  # training: fairseq's, where logged
        "provenance": head_to_head_record.provenance(),
        "results": results,
    }
    path = head_to_head_record.run_path(record_dir, run.direction, run.model.name, run.seed)
    other = other_training(record_dir, run)
    if other:
        raise ValueError(other)
    train_log = os.path.join(run.dir, "train.log")
    if os.path.isfile(train_log):  # where the report reads the training time from
        with open(train_log, encoding="utf-8", errors="replace") as f:
            head_to_head_record.dump_log(head_to_head_record.log_path(record_dir, run.direction, run.model.name,
                                                                      run.seed), f.read())
    head_to_head_record.dump(path, record)
    return path


def _plain(cfg) -> Dict:
    """A checkpoint's config section as a dict (fairseq stores a Namespace or an omegaconf config)."""
    from omegaconf import OmegaConf

    return dict(vars(cfg)) if isinstance(cfg, argparse.Namespace) else OmegaConf.to_container(cfg, resolve=False)


# options an imported run may set differently: where things are, what is logged, which checkpoints
# are kept; none of them changes the model that training produces
IMPORT_IGNORED = frozenset(("data", "save_dir", "user_dir", "log_interval", "log_format", "log_file",
                            "tensorboard_logdir", "keep_interval_updates", "keep_last_epochs",
                            "keep_best_checkpoints", "no_epoch_checkpoints"))


def check_import(runs: List[Run], model: str, seed, path: str) -> int:
    """``--import-run MODEL SEED DIR`` as far as it can be checked before anything is prepared or trained (and in a
    dry run): SEED an integer the plan has for MODEL, DIR a directory with checkpoint_last.pt. Returns SEED."""
    said = f"--import-run {model} {seed} {path}"
    try:
        seed = int(seed)
    except ValueError:
        raise ValueError(f"{said}: SEED {seed!r} is not an integer") from None
    if not any(r.model.name == model for r in runs):
        raise ValueError(f"{said}: no planned run of model {model} (pass it in --models)")
    if not any(r.model.name == model and r.seed == seed for r in runs):
        raise ValueError(f"{said}: no planned run of {model} with seed {seed} (--seeds)")
    if not os.path.isfile(os.path.join(path, "checkpoint_last.pt")):
        raise ValueError(f"{said}: no checkpoint_last.pt there")
    return seed


def import_run(runs: List[Run], model: str, seed: int, path: str) -> Run:
    """Link a finished run trained elsewhere with these settings into the layout, after checking
    it (``check_import``), its marker and that its saved config has this plan's model flags, seed and corpus."""
    from fairseq import checkpoint_utils, options

    seed = check_import(runs, model, seed, path)
    path = os.path.abspath(path)
    ckpt = os.path.join(path, "checkpoint_last.pt")
    cfg = checkpoint_utils.load_checkpoint_to_cpu(ckpt)["cfg"]
    pairs = ",".join(cfg.task.lang_pairs) if isinstance(cfg.task.lang_pairs, (list, tuple)) else str(cfg.task.lang_pairs)
    matches = [r for r in runs if r.model.name == model and r.seed == seed and r.corpus.lang_pairs == pairs]
    if not matches:
        raise ValueError(f"--import-run {model} {seed} {path}: no planned run of model {model}, seed {seed} on "
                         f"the directions {pairs}; check --models, --seeds and the corpora")
    run = matches[0]
    if not os.path.exists(os.path.join(path, f"finished-{run.updates}")):
        raise ValueError(f"--import-run: {path} has no finished-{run.updates} marker: it did not finish "
                         f"{run.updates} updates (pass --updates to match it)")
    args = options.parse_args_and_arch(options.get_training_parser(), train_argv(run))
    # every model option the plan's command line sets (None: resolved by the model when built)
    saved = _plain(cfg.model)
    differ = [k for k, v in vars(args).items() if k in saved and k not in IMPORT_IGNORED
              and v is not None and not isinstance(v, (list, tuple)) and str(saved[k]) != str(v)]
    if int(cfg.common.seed) != seed or differ:
        raise ValueError(f"--import-run: {path} was trained with seed {cfg.common.seed} and differs in "
                         f"{', '.join(differ) or 'nothing else'}; import only runs of the planned configuration")
    if os.path.lexists(run.dir):
        if os.path.realpath(run.dir) == path:
            return run
        raise ValueError(f"--import-run: {run.dir} already exists; remove it first to import {path}")
    os.makedirs(os.path.dirname(run.dir), exist_ok=True)
    os.symlink(path, run.dir)
    return run
