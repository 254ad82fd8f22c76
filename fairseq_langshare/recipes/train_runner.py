"""Run (or, with ``dry_run``, print) a recipe: for each method asked for, and before it its
baseline and the run it is initialised from: train with fairseq (in this process, through
fairseq's own ``call_main``, so multi-GPU works as with ``fairseq-train``), average the last
checkpoints where the paper does, evaluate as the paper reports, compare with the baseline, run
the method's analysis. Finished steps are skipped: a training by its ``finished-<updates>``
marker, averaging, evaluation and analyses by their (atomically written) outputs being newer than
their inputs; an interrupted training resumes from ``checkpoint_last.pt``; a run directory trained
for more updates than planned is refused.
"""

import contextlib
import logging
import json
import os
import re
import shlex
import sys
from typing import List

from ..atomic_files import write_text_atomic
from .average_checkpoints import average_checkpoints, last_update_checkpoints
from .experiment_plan import (REAL_GPUS, Corpus, Run, after_commands, check_updates, default_data_dir,
                              default_out_dir, evaluate_command, evaluate_kwargs, hydra_command, lookup, plan_run,
                              train_argv, trained_updates)

logger = logging.getLogger(__name__)


def _shell(argv: List[str]) -> str:
    return " ".join(f'"{a}"' if "$(" in a else shlex.quote(a) for a in argv)


# what each analysis a recipe runs (``langshare analyze NAME ... --out DIR``) writes in DIR, each file
# atomically: all there and newer than the checkpoint, it analysed that checkpoint
ANALYSIS_OUTPUTS = {"lsl": ("lsl_weights.json", "lsl_weights.png"), "clsr": ("gates.json",),
                    "latent-depth": ("latent_depth.json",), "adaptive-sparse": ("adaptive_sparse.json",)}


def _newer(path, than):
    return os.path.exists(path) and (not os.path.exists(than) or os.path.getmtime(path) >= os.path.getmtime(than))


def methods_in_order(exp, names):
    """The methods asked for, each preceded by what it needs (its init run, then the baseline first)."""
    wanted = [m.name for m in exp.methods] if names in (None, [], ["all"]) else list(names)
    order = []

    def add(name):
        method = exp.method(name)
        if name in order:
            return
        if name != exp.baseline:
            add(exp.baseline)
        if method.init_from:
            add(method.init_from)
        order.append(name)

    for name in wanted:
        add(name)
    return order


def run_recipe(paper_name, experiment_name, methods=None, data_dir=None, out_dir=None, *, dry_run=False,
               tiny=False, max_update=None, gpus=None, any_corpus=False, stream=None):
    """Plan every run and print it (``dry_run``) or execute it. Returns the list of ``Run``."""
    stream = stream or sys.stdout
    paper, exp, _ = lookup(paper_name, experiment_name)
    data_dir = data_dir or default_data_dir(exp)
    out_dir = out_dir or default_out_dir(paper, exp)
    gpus = gpus or (1 if tiny else REAL_GPUS)
    if max_update is not None and max_update < 1:
        raise ValueError(f"--max-update {max_update}: give a positive number of updates")
    check_out_dir(out_dir)
    corpus = Corpus.read(data_dir, required=not dry_run, name=exp.corpus)
    if corpus.exists and corpus.name != exp.corpus and not any_corpus:
        what = f"the {corpus.name} corpus" if corpus.name else "a corpus of no recipe (prepare-gettext, prepare-data)"
        raise ValueError(f"{data_dir} is {what} but {paper.name}/{exp.name} trains on {exp.corpus}: "
                         f"pass --data with `langshare prepare-corpus {exp.corpus}`'s output (or --any-corpus)")
    devices = _devices()
    if not dry_run and not tiny and devices != gpus:
        logger.warning("--gpus %d sizes each update for %d GPUs (the paper's batch), but this machine trains on %d "
                       "device(s): an update takes %d/%d of the paper's batch; pass --gpus %d (a larger "
                       "--update-freq)", gpus, gpus, devices, devices, gpus, devices)
    runs = []
    for name in methods_in_order(exp, methods):
        run = plan_run(paper, exp, exp.method(name), data_dir=data_dir, out_dir=out_dir, tiny=tiny, gpus=gpus,
                       max_update=max_update, corpus=corpus)
        check_updates(run.config["checkpoint"]["save_dir"], run.max_update,
                      "pass the same --max-update (or --tiny) or another --out")
        check_run_dir(run, data_dir)
        runs.append(run)
    if dry_run:
        print_plan(runs, corpus, out_dir, gpus, tiny, stream)
        return runs
    from tqdm import tqdm

    for run in tqdm(runs, desc=f"recipe {paper.name}/{exp.name}", unit="run", file=sys.stderr):
        execute(run, data_dir, out_dir)
    return runs


def _devices() -> int:
    """The processes fairseq-train runs on here: one per visible GPU, else 1 (the CPU)."""
    import torch

    return torch.cuda.device_count() or 1


# ----------------------------------------------------------------------------- dry run
def print_plan(runs: List[Run], corpus: Corpus, out_dir, gpus, tiny, stream):
    first, data_dir = runs[0], corpus.path
    paper, exp = first.paper, first.exp
    batch = first.config["dataset"]
    per = batch.get("max_tokens") or batch.get("batch_size")
    unit = "tokens" if "max_tokens" in batch else "sentences"
    uf = first.config["optimization"]["update_freq"]
    print(f"# {paper.title}", file=stream)
    print(f"# experiment {exp.name}: {exp.reproduces} (papers/{paper.paper_file})", file=stream)
    which = exp.corpus
    if corpus.exists and corpus.name != exp.corpus:  # --any-corpus
        which = f"{corpus.name or 'a corpus of no recipe'}, in place of the recipe's {exp.corpus}"
    print(f"# corpus {data_dir} ({which}; {exp.direction} directions); runs under {out_dir}", file=stream)
    print(f"# batch: {per} {unit} x {gpus} device(s) x update-freq {uf} "
          f"(paper: {exp.batch.size} {exp.batch.unit}; {exp.batch.source})", file=stream)
    print(f"# decoding: beam {exp.evaluation.beam}, lenpen {exp.evaluation.lenpen}; "
          f"{exp.evaluation.source}" + (" [--tiny: small model, a few updates]" if tiny else ""), file=stream)
    if not os.path.isdir(data_dir) and (exp.evaluation.zero_shot or exp.evaluation.by_direction):
        print("# (the corpus is not there yet: with it, the evaluation lists the directions explicitly, adds its "
              "zero-shot test directions" + (" and scores O2M, M2O and zero-shot separately" if exp.evaluation.by_direction
                                             else "") + ")", file=stream)
    print("set -e", file=stream)
    for run in runs:
        base = _baseline_run(runs, run)
        print(f"\n# --- {run.method.name}: {run.method.reproduces}", file=stream)
        state = " (finished: skipped)" if os.path.exists(run.finished_marker) else ""
        print(f"# train, {run.max_update} updates{state}", file=stream)
        print(_shell(["fairseq-train"] + train_argv(run.config)), file=stream)
        print("# the same training with fairseq-hydra-train:", file=stream)
        print("# " + _shell(hydra_command(run)), file=stream)
        n = run.average_last
        if n > 1:
            print(_shell(["langshare", "recipe", "average", run.config["checkpoint"]["save_dir"], "--last", str(n),
                          "--out", run.checkpoint]), file=stream)
        for es in run.eval_sets:
            baseline = base.results(es.name) if base is not None else None
            print(_shell(evaluate_command(evaluate_kwargs(run, es, baseline, data_dir))), file=stream)
        if base is not None:
            for es in run.eval_sets:
                print(_shell(compare_command(base, run, es.name)), file=stream)
        for cmd in after_commands(run):
            print(cmd, file=stream)


def _baseline_run(runs, run):
    if run.method.name == run.exp.baseline:
        return None
    return next(r for r in runs if r.method.name == run.exp.baseline)


def compare_command(base: Run, run: Run, eval_set: str) -> List[str]:
    metrics = ",".join(run.exp.evaluation.metrics)
    return ["langshare", "compare", f"{base.method.name}={base.results(eval_set)}",
            f"{run.method.name}={run.results(eval_set)}", "--baseline", base.method.name, "--metrics", metrics]


# ----------------------------------------------------------------------------- execution
class _ConsoleFilter(logging.Filter):
    """On the console: fairseq's per-update records and what fairseq_cli.train says; warnings from all."""
    def filter(self, record):
        if record.levelno >= logging.WARNING or record.name in ("train_inner", "train", "valid"):
            return True
        # not the model's repr (lines) nor the configuration (fairseq's logger.info(cfg))
        return record.name == "fairseq_cli.train" and isinstance(record.msg, str) and "\n" not in record.getMessage()


@contextlib.contextmanager
def _training_log(path):
    """fairseq's INFO log into ``path`` (all of it) and on stderr (progress records and warnings)."""
    names = ("fairseq", "fairseq_cli", "train_inner", "train", "valid")
    loggers = [logging.getLogger(n) for n in names]
    saved = [(lg.level, lg.propagate) for lg in loggers]
    os.makedirs(os.path.dirname(path), exist_ok=True)
    formatter = logging.Formatter("%(asctime)s | %(levelname)s | %(name)s | %(message)s")
    handler = logging.FileHandler(path)
    handler.setFormatter(formatter)
    console = logging.StreamHandler(sys.stderr)
    console.setFormatter(formatter)
    console.addFilter(_ConsoleFilter())
    for lg in loggers:
        lg.setLevel(logging.INFO)
        lg.propagate = False
        lg.addHandler(handler)
        lg.addHandler(console)
    try:
        yield
    finally:
        for lg, (level, propagate) in zip(loggers, saved):
            lg.setLevel(level)
            lg.propagate = propagate
            lg.removeHandler(handler)
            lg.removeHandler(console)
        handler.close()


RUN_RECORD = "recipe.json"  # in a run directory: whose run it is
EARLIER_RUN_FILE = "train_command.sh"  # what a run directory of a version without RUN_RECORD holds
COMPARE_TITLE = "Methods evaluated so far by `langshare recipe run`, side by side: "  # compare-<set>.md's first line


def _identity(run: Run, data_dir) -> dict:
    return {"paper": run.paper.name, "experiment": run.exp.name, "method": run.method.name,
            "corpus": os.path.abspath(data_dir)}


def record_run(run: Run, data_dir) -> None:
    """Write which paper, experiment, method and corpus ``run``'s directory holds (``check_run_dir``)."""
    os.makedirs(run.run_dir, exist_ok=True)
    write_text_atomic(os.path.join(run.run_dir, RUN_RECORD), json.dumps(_identity(run, data_dir), indent=1) + "\n")


def check_out_dir(out_dir) -> None:
    """Refuse an experiment directory that holds something no recipe run wrote (a run directory holds
    RUN_RECORD, a comparison starts with COMPARE_TITLE): training and comparing would write over it."""
    if not os.path.isdir(out_dir):
        return
    for name in sorted(os.listdir(out_dir)):
        path = os.path.join(out_dir, name)
        if os.path.isdir(path):
            ours = not os.listdir(path) or any(os.path.isfile(os.path.join(path, f))
                                               for f in (RUN_RECORD, EARLIER_RUN_FILE))
        else:
            ours = re.fullmatch(r"compare-.+\.md", name) is not None and _starts_with(path, COMPARE_TITLE)
        if not ours:
            raise ValueError(f"--out {out_dir} holds {name}, which no recipe run wrote: pass a new or empty "
                             "directory (one per experiment)")


def _starts_with(path, text: str) -> bool:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read(len(text)) == text


def check_run_dir(run: Run, data_dir) -> None:
    """Refuse a run directory that holds the run of another experiment, method or corpus: its checkpoints
    and results would be taken for this one's."""
    path = os.path.join(run.run_dir, RUN_RECORD)
    if not os.path.isfile(path):
        return
    with open(path, encoding="utf-8") as f:
        held = json.load(f)
    want = _identity(run, data_dir)
    if held != want:
        def name(r):
            return f"{r.get('paper')} {r.get('experiment')} {r.get('method')} on {r.get('corpus')}"
        raise ValueError(f"{run.run_dir} holds the run of {name(held)}, not of {name(want)}: pass another --out "
                         "(one per experiment)")


def train(run: Run):
    """fairseq-train in this process; marks the run finished when it reaches --max-update."""
    from fairseq import distributed_utils, options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq_cli import train as train_cli

    if os.path.exists(run.finished_marker):
        logger.warning("%s: already trained for %d updates (%s)", run.method.name, run.max_update, run.finished_marker)
        return
    argv = train_argv(run.config)
    os.makedirs(run.run_dir, exist_ok=True)
    write_text_atomic(os.path.join(run.run_dir, "train_command.sh"), _shell(["fairseq-train"] + argv) + "\n")
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    cfg = convert_namespace_to_omegaconf(args)
    with _training_log(os.path.join(run.run_dir, "train.log")):
        distributed_utils.call_main(cfg, train_cli.main)
    last = os.path.join(run.config["checkpoint"]["save_dir"], "checkpoint_last.pt")
    if not os.path.isfile(last):
        raise ValueError(f"{run.method.name}: fairseq-train wrote no {last}; see {run.run_dir}/train.log")
    write_text_atomic(run.finished_marker, f"{run.max_update}\n")


def average(run: Run):
    n = run.average_last
    if n <= 1:
        return
    if _newer(run.checkpoint, run.finished_marker):
        return
    average_checkpoints(last_update_checkpoints(run.config["checkpoint"]["save_dir"], n), run.checkpoint)


def evaluate_run(run: Run, base: Run, data_dir):
    from .. import evaluation

    for es in run.eval_sets:
        out = run.results(es.name)
        if _newer(out, run.checkpoint):
            continue
        baseline = base.results(es.name) if base is not None and os.path.isfile(base.results(es.name)) else None
        evaluation.evaluate(**evaluate_kwargs(run, es, baseline, data_dir), max_tokens=4000)


def compare_all(runs_dir: str, eval_set: str, baseline: str, metrics):
    """``compare-<set>.md`` in the experiment directory: every method evaluated so far, side by side."""
    import json

    from .. import comparison

    results = []
    for name in sorted(os.listdir(runs_dir)):
        path = os.path.join(runs_dir, name, f"results-{eval_set}.json")
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                results.append((name, json.load(f)))
    if not results:
        return None
    results.sort(key=lambda r: r[0] != baseline)
    base = baseline if any(name == baseline for name, _ in results) else None
    # a metric only where every run has it (spBLEU needs the local flores model)
    metrics = [m for m in metrics if all(any(r.get(m) is not None for r in res.get("directions", {}).values())
                                         for _, res in results)]
    if not metrics:
        return None
    for name, res in results:  # results of a version that did not record it: the run's own count
        if not res.get("num_updates"):
            res["num_updates"] = trained_updates(os.path.join(runs_dir, name, "checkpoints")) or None
    text = comparison.compare_markdown(results, base, tuple(metrics))
    text = f"{COMPARE_TITLE}{', '.join(name for name, _ in results)} ({eval_set} set)\n\n{text}"
    return write_text_atomic(os.path.join(runs_dir, f"compare-{eval_set}.md"), text)


def execute(run: Run, data_dir, out_dir):
    from .. import analysis, command_line

    record_run(run, data_dir)  # before anything is written there: check_run_dir reads it
    train(run)
    average(run)
    base = None
    if run.method.name != run.exp.baseline:
        base = plan_run(run.paper, run.exp, run.exp.method(run.exp.baseline), data_dir=data_dir, out_dir=out_dir,
                        corpus=Corpus.read(data_dir))
    evaluate_run(run, base, data_dir)
    for es in run.eval_sets:
        written = compare_all(out_dir, es.name, run.exp.baseline, run.exp.evaluation.metrics)
        if written:
            logger.info("%s: the methods evaluated so far, side by side: %s", run.method.name, written)
    for cmd in after_commands(run):
        argv = shlex.split(cmd)[1:]
        out = argv[argv.index("--out") + 1] if "--out" in argv else None
        outputs = [os.path.join(out, name) for name in ANALYSIS_OUTPUTS.get(argv[1], ())] if out else []
        if outputs and all(_newer(path, run.checkpoint) for path in outputs):
            continue  # analysed this checkpoint already
        code = command_line.run((analysis,), argv)  # the recipes' analyses are `langshare analyze ...`
        if code == 130:  # Ctrl-C (command_line.run said so): the recipe is interrupted, not failed
            raise KeyboardInterrupt
        if code:
            raise ValueError(f"{run.method.name}: `{cmd}` failed with exit code {code}")
