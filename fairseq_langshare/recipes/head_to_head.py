"""``langshare head-to-head``: every sharing strategy on the same data, several seeds, equal updates
and equal inference cost, evaluated and compared with significance (docs/head_to_head.md).

``--dry-run`` prints the plan: every model's flags and the reason for them, its parameters and its
inference cost measured on the built model (refused when a model runs other layers or widths than
the baseline), each run's status and the estimated time. Otherwise the runs are trained and
evaluated ``--jobs`` at a time (``head_to_head_runs``; finished ones are skipped) and reported
(``head_to_head_report``): results JSON, a markdown section, one figure.
"""

import argparse
import os
import shlex
import sys
import tempfile
from typing import List

from . import head_to_head_report
from .head_to_head_models import BASELINE, DIRECTIONS, MODELS
from .head_to_head_runs import (DEFAULT_CORPORA, DEFAULT_UPDATES, EVALUATE_SECONDS, TRAIN_FLAGS, UPDATES_PER_SECOND,
                                Run, _standin_data, equal_cost_problems, execute, import_run, plan, profile, train_argv)
from ..option_ranges import Range


# ----------------------------------------------------------------------------- the plan
def updates_per_second(run: Run) -> float:
    """UPDATES_PER_SECOND of the run's model, for the batch size it trains with: a training
    processes about as many tokens per second at 1,024 as at 2,048 tokens per batch (8.6 against
    4.1 updates/s on one thread, docs/results.md, "make demo"), so a --max-tokens in --train-flags
    scales the rate."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--max-tokens", type=int)  # the last one given wins, as in fairseq-train

    def max_tokens(flags):
        return parser.parse_known_args(list(flags))[0].max_tokens

    rate = UPDATES_PER_SECOND.get(run.model.name, 2.0)
    mine = max_tokens(run.train_flags)
    return rate * max_tokens(TRAIN_FLAGS) / mine if mine else rate


def print_plan(runs: List[Run], jobs: int, stream=None):
    """Models with flags, reasons, parameters and measured inference cost; every run's status; the
    estimated time. Raises when a model's inference cost differs from the baseline's. Returns the
    runs to do and the profiles, {direction: {model: profile}}."""
    stream = stream or sys.stdout
    directions = list(dict.fromkeys(r.direction for r in runs))
    models = list(dict.fromkeys(r.model.name for r in runs))
    seeds = sorted({r.seed for r in runs})
    print(f"# head-to-head: {len(models)} models x {len(seeds)} seeds x {len(directions)} directions = {len(runs)} "
          f"runs of {runs[0].updates} updates, {jobs} at a time (one thread each)", file=stream)
    measured = {}
    for d in directions:
        first = {r.model.name: r for r in runs if r.direction == d and r.seed == seeds[0]}
        corpus = first[BASELINE].corpus
        with tempfile.TemporaryDirectory(prefix="h2h-standin-") as tmp:
            stand_in = None if corpus.exists else _standin_data(tmp, d)
            profiles = measured[d] = {name: profile(r, corpus=stand_in) for name, r in first.items()}
        note = "" if stand_in is None else " (corpus not built yet: stand-in dictionary of 8000 and 8 languages)"
        print(f"\n## {d.upper()}: corpus {corpus.path}{note}", file=stream)
        print("\n".join(head_to_head_report.model_table(
            {name: (list(r.model.argv(d)), profiles[name]) for name, r in first.items()})), file=stream)
        for name, r in first.items():
            print(f"# {name}: {r.model.reason}" + (f"; adds {r.model.extra_compute}" if r.model.extra_compute else ""),
                  file=stream)
        problems = equal_cost_problems(profiles)
        if problems:
            raise ValueError("unequal inference cost: " + "; ".join(problems) + " -- fix the flags in "
                             "fairseq_langshare/recipes/head_to_head_models.py")
        print("# every model runs the baseline's layers and widths per sentence (measured on the built models)",
              file=stream)
    print("\n## runs", file=stream)
    for r in runs:
        print(f"{r.status:12s} {r.name:32s} {r.dir}", file=stream)
    todo = [r for r in runs if r.status != "done"]
    seconds = sum((0 if r.trained else r.updates / updates_per_second(r)) + EVALUATE_SECONDS
                  for r in todo) / max(1, jobs)
    print(f"\n# {len(todo)} runs to do: about {seconds / 3600:.1f} h on 2 otherwise idle cores, {jobs} at a time "
          f"(speeds: UPDATES_PER_SECOND in fairseq_langshare/recipes/head_to_head_runs.py; longer under load)",
          file=stream)
    if runs[0].corpus.exists:
        print("# train: " + shlex.join(["fairseq-train"] + train_argv(runs[0])), file=stream)
    return todo, measured


def head_to_head(models=None, directions=("o2m", "m2o"), seeds=(1, 2, 3), updates=DEFAULT_UPDATES,
                 runs_dir="runs/head_to_head", corpora=None, jobs=2, device="cpu", dry_run=False, imports=(),
                 out_json="docs/results/head_to_head.json", out_md="docs/results.md",
                 figure="docs/img/head_to_head.png", analyze=False, examples=0, train_flags=(), stream=None,
                 record_dir=None):
    """Plan (and print), then train, evaluate, compare and report; with ``analyze``, run each
    method's analysis on its first seed; print ``examples`` translations per shown direction;
    ``train_flags``: fairseq-train flags of every run after the head-to-head's own (``make demo``'s
    short-budget settings). Returns the runs."""
    stream = stream or sys.stdout
    corpora = {**DEFAULT_CORPORA, **(corpora or {})}
    head_to_head_report.check_outputs(out_json, out_md, figure)  # not after hours of training
    runs = plan(models or [m.name for m in MODELS], directions, seeds, runs_dir, corpora, updates, train_flags)
    if not dry_run:
        for d in dict.fromkeys(r.direction for r in runs):
            corpus = next(r.corpus for r in runs if r.direction == d)
            if not corpus.exists:
                print(f"== preparing the {d} corpus in {corpus.path}", file=stream, flush=True)
                corpus.prepare()
        for model, seed, path in imports:
            run = import_run(runs, model, int(seed), path)
            print(f"== imported {path} as {run.name}", file=stream)
    print_plan(runs, jobs, stream)
    if dry_run:
        return runs
    failures = execute(runs, jobs, device, stream, record_dir=record_dir)
    head_to_head_report.report(runs, out_json=out_json, out_md=out_md, figure=figure, stream=stream)
    if examples:
        head_to_head_report.print_examples(runs, examples, stream)
    if analyze:
        for run in head_to_head_report.analyze(runs, stream):
            print(f"== analysis of {run.name} in {os.path.join(run.dir, 'analysis')}", file=stream)
    if failures:
        raise RuntimeError(f"{len(failures)} runs failed: " + "; ".join(failures))
    return runs


# ----------------------------------------------------------------------------- CLI
def _run(args):
    corpora = {}
    for item in args.corpus or []:
        direction, _, path = item.partition("=")
        if direction not in DIRECTIONS or not path:
            raise ValueError(f"--corpus {item!r}: write DIRECTION=DIR with DIRECTION one of {', '.join(DIRECTIONS)}")
        corpora[direction] = path
    try:
        head_to_head(models=args.models.split(",") if args.models else None, directions=args.directions.split(","),
                     seeds=args.seeds, updates=args.updates, runs_dir=args.runs_dir,
                     corpora=corpora, jobs=args.jobs, device=args.device, dry_run=args.dry_run,
                     imports=args.import_run or (), out_json=args.out_json, out_md=args.out_md, figure=args.figure,
                     analyze=args.analyze, examples=args.examples, train_flags=shlex.split(args.train_flags),
                     record_dir=args.record_dir)
    except RuntimeError as error:
        print(f"langshare head-to-head: {error}", file=sys.stderr)
        return 1
    return 0


def add_subcommand(subparsers):
    p = subparsers.add_parser(
        "head-to-head", help="train, evaluate and compare every sharing method at equal updates and inference cost",
        description="Train langshare_transformer_small and every language-sharing method at equal updates and equal "
                    "inference cost on the gettext corpus, for several seeds; evaluate, compare with significance "
                    "and report (docs/head_to_head.md).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--models", default=None, help="comma-separated models (default: all of "
                   + ", ".join(m.name for m in MODELS) + "); flags in fairseq_langshare/recipes/head_to_head_models.py")
    p.add_argument("--directions", default="o2m,m2o", help="o2m, m2o or both (comma-separated)")
    p.add_argument("--seeds", default=[1, 2, 3], type=Range(1, why="a training seed").list_of(int),
                   help="comma-separated training seeds")
    p.add_argument("--updates", type=Range(1, why="updates").of(int),
                   default=DEFAULT_UPDATES, help="updates of every run")
    p.add_argument("--runs-dir", default="runs/head_to_head", help="runs go to RUNS_DIR/<direction>/<model>/seed<k>/")
    p.add_argument("--corpus", action="append", metavar="DIRECTION=DIR",
                   help=f"corpus of a direction (default: {DEFAULT_CORPORA['o2m']} and {DEFAULT_CORPORA['m2o']}, "
                        "built as scripts/quality_lib.sh builds them when missing)")
    p.add_argument("--jobs", type=Range(1, why="runs at a time").of(int),
                   default=2, help="runs at a time, one thread each")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="cuda: train without --cpu")
    p.add_argument("--import-run", nargs=3, action="append", metavar=("MODEL", "SEED", "DIR"),
                   help="link a finished run trained elsewhere with these settings (e.g. /work/runs/bin/train.sh) "
                        "into the layout; checked against the plan")
    p.add_argument("--dry-run", action="store_true", help="print the plan (models, measured inference cost, runs, "
                                                          "estimated time) and stop")
    p.add_argument("--analyze", action="store_true",
                   help="run each method's `langshare analyze` on its first seed (into <run>/analysis/)")
    p.add_argument("--examples", type=Range(0, why="translations shown").of(int), default=0,
                   help="print this many test translations of every model for the largest, a middle and the "
                        "smallest direction")
    p.add_argument("--train-flags", default="",
                   help="fairseq-train flags for every run, after the head-to-head's settings (a flag given here "
                        "wins), recorded in the results; write it with '=', e.g. make demo's "
                        "--train-flags='--max-tokens 1024 --dropout 0'")
    p.add_argument("--out-json", default="docs/results/head_to_head.json", help="results JSON")
    p.add_argument("--out-md", default="docs/results.md",
                   help="markdown file whose head-to-head section is (re)written")
    p.add_argument("--figure", default="docs/img/head_to_head.png", help="per-direction BLEU delta figure")
    p.add_argument("--record-dir", default=None,
                   help="write each run's record (scores, hypotheses, flags, cost, commit, machine) here as soon "
                        "as it is evaluated, e.g. docs/results/head_to_head (docs/head_to_head.md, 'The record')")
    p.set_defaults(func=_run)
    return p
