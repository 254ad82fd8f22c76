"""``langshare head-to-head``: every sharing strategy on the same data, several seeds, equal updates
and the baseline's layers and widths, evaluated and compared with significance (docs/head_to_head.md).

``--dry-run`` prints the plan: every model's flags and the reason for them, its parameters and its
inference cost measured on the built model (refused when a model runs other layers or widths than
the baseline), each run's status and the estimated time. Otherwise the runs are trained and
evaluated ``--jobs`` at a time (``head_to_head_runs``; finished ones are skipped), each recorded as
it finishes (``head_to_head_record``), and the record is reported (``head_to_head_report``): results
JSON, a markdown section, one figure, README's standings. ``--report-only`` reports a record and
does nothing else.
"""

import argparse
import os
import shlex
import sys
import tempfile
from typing import Dict, List

from .. import significance
from ..command_line import add_command, shell_words
from . import head_to_head_record, head_to_head_report
from .head_to_head_models import BASELINE, DIRECTIONS, MODELS
from .head_to_head_runs import (DEFAULT_CORPORA, DEFAULT_UPDATES, EVALUATE_FLAGS, EVALUATE_SECONDS, FLOPS_TOLERANCE,
                                TRAIN_FLAGS, UPDATES_PER_SECOND, Run, _standin_data, check_import, equal_cost_problems,
                                execute, import_run, inference_cost, other_training, percent_text, plan, profile,
                                ratio_text, train_argv)
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
        costs = inference_cost({name: [p] for name, p in profiles.items()})
        print("\n".join(head_to_head_report.model_table(
            {name: (list(r.model.argv(d)), profiles[name], costs[name]["flops_ratio"]) for name, r in first.items()})),
            file=stream)
        for name, r in first.items():
            print(f"# {name}: {r.model.reason_for(d)}" + (f"; adds {r.model.extra_compute}" if r.model.extra_compute else ""),
                  file=stream)
        problems = equal_cost_problems(profiles)
        if problems:
            raise ValueError("unequal inference cost: " + "; ".join(problems) + " -- fix the flags in "
                             "fairseq_langshare/recipes/head_to_head_models.py")
        print("# every model runs the baseline's layers and widths per sentence (measured on the built models)",
              file=stream)
        more = [f"{name} {ratio_text(c['flops_ratio'])} ({percent_text(c['flops_ratio'])})"
                for name, c in costs.items() if not c["equal"]]
        if more:
            print(f"# FLOPs per sentence not within {FLOPS_TOLERANCE:.0%} of the baseline's: {', '.join(more)}",
                  file=stream)
    print("\n## runs", file=stream)
    for r in runs:
        print(f"{r.status:12s} {r.name:32s} {r.dir}", file=stream)
    todo = [r for r in runs if r.status != "done"]
    seconds = sum((0 if r.trained else r.updates / updates_per_second(r)) + EVALUATE_SECONDS[r.direction]
                  for r in todo) / max(1, jobs)
    print(f"\n# {len(todo)} runs to do: about {seconds / 3600:.1f} h on 2 otherwise idle cores, {jobs} at a time "
          f"(speeds: UPDATES_PER_SECOND in fairseq_langshare/recipes/head_to_head_runs.py; longer under load)",
          file=stream)
    if runs[0].corpus.exists:
        print("# train: " + shlex.join(["fairseq-train"] + train_argv(runs[0])), file=stream)
    return todo, measured


def check_record(record_dir: str, runs: List[Run]) -> None:
    """Refuse, before any training, to add runs to a record of other settings (another head-to-head),
    made on another corpus (another dictionary or other test references than the planned corpus's,
    wherever either corpus lies), or to replace a recorded seed with another training of it."""
    if not os.path.isdir(record_dir):
        return
    mine = {"updates": runs[0].updates, "train_flags": list(TRAIN_FLAGS) + list(runs[0].train_flags),
            "evaluate_flags": list(EVALUATE_FLAGS)}
    records = head_to_head_record.read(record_dir)
    for direction, recorded in records.items():
        for model, seeds in recorded.items():
            for seed, record in seeds.items():
                differ = [k for k in mine if record[k] != mine[k]]
                if differ:
                    raise ValueError(f"the record in {record_dir} holds {direction}/{model}/seed{seed}, run with other "
                                     f"{', '.join(differ)} than this plan: a record holds one head-to-head; pass "
                                     f"another --record-dir")
    for direction in dict.fromkeys(r.direction for r in runs):
        corpus = next(r.corpus for r in runs if r.direction == direction)
        if direction not in records or not corpus.exists:
            continue
        held = [(f"{direction}/{model}/seed{seed}", record) for model, seeds in records[direction].items()
                for seed, record in seeds.items()]
        dict_sha = corpus.dict_sha256
        other_dict = [(n, r) for n, r in held if r["corpus"].get("dict_sha256") not in (None, dict_sha)]
        name, record = (other_dict or held)[0]
        other = ["dictionary (bin/dict.txt)"] if other_dict else []
        refs_path = head_to_head_record.references_path(record_dir, direction)
        if os.path.isfile(refs_path):
            recorded_refs = head_to_head_record.load(refs_path)
            test = corpus.test_references()
            pairs = [p for p in recorded_refs if p in test and recorded_refs[p]["sha256"] != test[p]]
            if pairs:
                other.append(f"test references of {', '.join(pairs)}")
        if other:
            raise ValueError(f"--corpus {direction}={corpus.path}: the record in {record_dir} holds {name}, made on the "
                             f"corpus {record['corpus']['path']} (another {' and '.join(other)}): pass another "
                             f"--record-dir, or the corpus the record was made on")
    for run in runs:
        problem = other_training(record_dir, run)
        if problem:
            raise ValueError(problem)


def report_outputs(record_dir: str) -> Dict[str, str]:
    """Where the report of ``record_dir`` goes by default: for the head-to-head of record
    (``head_to_head_record.RECORD_DIR``) the repository's results JSON, results section, figure and
    README; for any other record, files in the folder that holds it (RUNS_DIR for the default
    RUNS_DIR/record), so that a trial run never rewrites the record's report."""
    if head_to_head_report.record_path(record_dir) == head_to_head_record.RECORD_DIR:
        return {"out_json": "docs/results/head_to_head.json", "out_md": "docs/results.md",
                "figure": "docs/img/head_to_head.png", "readme": "README.md"}
    beside = os.path.dirname(os.path.normpath(record_dir))
    return {"out_json": os.path.join(beside, "head_to_head.json"), "out_md": os.path.join(beside, "results.md"),
            "figure": os.path.join(beside, "head_to_head.png"), "readme": os.path.join(beside, "standings.md")}


def head_to_head(models=None, directions=("o2m", "m2o"), seeds=(1, 2, 3), updates=DEFAULT_UPDATES,
                 runs_dir="runs/head_to_head", corpora=None, jobs=2, device="cpu", dry_run=False, imports=(),
                 out_json=None, out_md=None, figure=None, analyze=False, examples=0, train_flags=(), stream=None,
                 record_dir=None, readme=None, report_only=False, n_samples=None):
    """Plan (and print), then train, evaluate, record every run in ``record_dir`` (default
    RUNS_DIR/record) and report the record; with ``analyze``, run each method's analysis on its
    first seed; print ``examples`` translations per shown direction; ``train_flags``: fairseq-train
    flags of every run after the head-to-head's own (``make demo``'s short-budget settings).
    ``report_only``: report the record in ``record_dir`` (default: the head-to-head of record's)
    and nothing else; ``n_samples``: bootstrap resamples of each test (default sacrebleu's 1000).
    ``out_json``, ``out_md``, ``figure``, ``readme``: the report's files (None: ``report_outputs``;
    "": not written). Returns the runs (``report_only``: the results JSON)."""
    stream = stream or sys.stdout
    record_dir = record_dir or (head_to_head_record.RECORD_DIR if report_only else os.path.join(runs_dir, "record"))
    for flag, values in (("--seeds", seeds), ("--models", models or []), ("--directions", directions)):
        refuse_repeats(flag, values)
    given = {"out_json": out_json, "out_md": out_md, "figure": figure, "readme": readme}
    outputs = {k: (v if v is not None else default) or None
               for (k, v), default in zip(given.items(), report_outputs(record_dir).values())}
    if not outputs["out_json"]:
        raise ValueError("--out-json '': the report needs its results JSON; pass a file name")
    head_to_head_report.check_outputs(**outputs, record_dir=record_dir)  # not after hours of training
    n_samples = significance.DEFAULT_SAMPLES if n_samples is None else n_samples
    if n_samples < 1:
        raise ValueError(f"--bootstrap-samples {n_samples}: pass at least 1 (the default is "
                         f"{significance.DEFAULT_SAMPLES})")
    if report_only:
        return head_to_head_report.report(record_dir, stream=stream, n_samples=n_samples, **outputs)
    for direction, path in (corpora or {}).items():
        refuse_unprepared(direction, path, directions)
    corpora = {**DEFAULT_CORPORA, **(corpora or {})}
    runs = plan(models or [m.name for m in MODELS], directions, seeds, runs_dir, corpora, updates, train_flags)
    check_record(record_dir, runs)
    for model, seed, path in imports:  # not after the corpora are prepared
        check_import(runs, model, seed, path)
    if not dry_run:
        for d in dict.fromkeys(r.direction for r in runs):
            corpus = next(r.corpus for r in runs if r.direction == d)
            if not corpus.exists:
                print(f"== preparing the {d} corpus in {corpus.path}", file=stream, flush=True)
                corpus.prepare()
                check_record(record_dir, runs)  # the corpus built: is it the record's?
        for model, seed, path in imports:
            run = import_run(runs, model, seed, path)
            print(f"== imported {path} as {run.name}", file=stream)
    for d in dict.fromkeys(r.direction for r in runs):
        refuse_without_validation(next(r.corpus for r in runs if r.direction == d))
    print_plan(runs, jobs, stream)
    if dry_run:
        return runs
    todo = [r for r in runs if r.status != "done" or not os.path.isfile(head_to_head_record.run_path(
        record_dir, r.direction, r.model.name, r.seed))]
    failures = execute(runs, jobs, device, stream, record_dir=record_dir)
    if os.path.isdir(record_dir):
        try:
            head_to_head_report.report(record_dir, stream=stream, n_samples=n_samples, **outputs)
        except ValueError as error:
            if not failures:
                raise
            print(f"no report: {error}", file=stream)  # the failures are the news
    if examples:
        print_examples(runs, examples, stream)
    if analyze:
        for run in run_analyses(runs, stream):
            print(f"== analysis of {run.name} in {os.path.join(run.dir, 'analysis')}", file=stream)
    if failures:
        raise RuntimeError(f"{len(failures)} of {len(todo)} runs failed: " + "; ".join(failures))
    return runs


# ----------------------------------------------------------------------------- what the runs show
def collect_runs(runs: List[Run], stream=None) -> Dict[str, Dict[str, List[Run]]]:
    """{direction: {model: [evaluated runs, by seed]}} on the seeds every model of the direction has
    evaluated; only directions with a baseline (the runs ``print_examples`` and ``analyze`` show)."""
    out = {}
    for r in sorted(runs, key=lambda r: r.seed):
        if r.evaluated:
            out.setdefault(r.direction, {}).setdefault(r.model.name, []).append(r)
    for direction, models in out.items():
        common = set.intersection(*({r.seed for r in seeds} for seeds in models.values()))
        left_out = [r.name for seeds in models.values() for r in seeds if r.seed not in common]
        if left_out and stream is not None:
            print(f"not shown (not every model has that seed evaluated yet): {', '.join(left_out)}", file=stream)
        out[direction] = {m: [r for r in seeds if r.seed in common] for m, seeds in models.items()}
    return {d: models for d, models in out.items() if BASELINE in models and models[BASELINE]}


def print_examples(runs: List[Run], n: int, stream=None) -> None:
    """The first ``n`` test sentences of the largest, a middle and the smallest direction: source,
    reference and every model's translation (first seed)."""
    from ..evaluation import _read_json

    stream = stream or sys.stdout
    for direction, models in collect_runs(runs).items():
        results = {name: _read_json(seeds[0].results, "results") for name, seeds in models.items()}
        base = results[BASELINE]
        by_size = sorted(base["directions"], key=lambda d: -(base["directions"][d].get("train_size") or 0))
        for d in dict.fromkeys([by_size[0], by_size[len(by_size) // 2], by_size[-1]]):
            ref_path = base["references"][d]["path"]
            src_path = ref_path[: ref_path.rindex(".") + 1] + d.split("-")[0]
            with open(src_path, encoding="utf-8") as f:
                sources = f.read().splitlines()
            with open(ref_path, encoding="utf-8") as f:
                refs = f.read().splitlines()
            print(f"\n-- {d} ({base['directions'][d].get('train_size')} training pairs)", file=stream)
            for i in range(min(n, len(refs))):
                print(f"  source     {sources[i]}\n  reference  {refs[i]}", file=stream)
                for name, res in results.items():
                    print(f"  {name:10s} {res['hypotheses'][d][i]}", file=stream)


def run_analyses(runs: List[Run], stream=None) -> List[Run]:
    """Each method's ``langshare analyze`` (its table entry) on its first seed, into <run>/analysis/."""
    import argparse

    from .. import analysis

    parser = argparse.ArgumentParser(prog="langshare")
    analysis.add_subcommand(parser.add_subparsers(dest="command"))
    done = []
    for models in collect_runs(runs).values():
        for seeds in models.values():
            run = seeds[0]
            out = os.path.join(run.dir, "analysis")
            for command in run.model.analysis:
                args = parser.parse_args(["analyze"] + [a.format(ckpt=run.checkpoint, out=out, corpus=run.corpus.path)
                                                        for a in command])
                args.func(args)
            if run.model.analysis:
                done.append(run)
    return done


# ----------------------------------------------------------------------------- CLI
def refuse_repeats(flag: str, values) -> None:
    """A value given twice in one list would plan the same runs twice, trained in one directory at once."""
    values = [str(v) for v in values]
    repeated = [v for i, v in enumerate(values) if v in values[:i]]
    if repeated:
        raise ValueError(f"{flag} {','.join(values)}: {repeated[0]} is given twice; give each value once")


def refuse_unprepared(direction: str, path: str, directions) -> None:
    """A --corpus DIR given for a planned direction must be a prepared corpus: only the default
    corpora are built when missing (a mistyped DIR would get the gettext demo corpus)."""
    if direction not in directions or os.path.isfile(os.path.join(path, "manifest.json")):
        return
    what = f"--corpus {direction}={path}: not a prepared corpus (no manifest.json): "
    if os.path.isdir(path) and os.listdir(path):
        raise ValueError(what + f"it holds no corpus built by langshare; build one from its parallel text with "
                                f"`langshare prepare-data --out CORPUS {path}` and pass --corpus {direction}=CORPUS")
    raise ValueError(what + f"run `langshare prepare-data --out {path} ...` first (or omit --corpus {direction}= "
                            f"for the default corpus, built when missing)")


def refuse_without_validation(corpus) -> None:
    """fairseq-train validates every trained pair: a built corpus without validation data for some
    would fail every run after the plan, with only fairseq's exit code to show."""
    if not corpus.exists:
        return
    bin_dir = os.path.join(corpus.path, "bin")
    missing = [p for p in corpus.lang_pairs.split(",")
               if not any(os.path.isfile(os.path.join(bin_dir, f"valid.{a}-{b}.{p.split('-')[0]}.idx"))
                          for a, b in (p.split("-"), p.split("-")[::-1]))]
    if missing:
        raise ValueError(f"--corpus {corpus.direction}={corpus.path}: no validation data for {', '.join(missing)} "
                         f"(bin/valid.*), which fairseq-train needs: rebuild the corpus with --valid-size above 0")


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
                     imports=args.import_run or (), out_json=getattr(args, "out_json", None),
                     out_md=getattr(args, "out_md", None), figure=getattr(args, "figure", None),
                     analyze=args.analyze, examples=args.examples, train_flags=args.train_flags,
                     record_dir=args.record_dir, readme=getattr(args, "readme", None), report_only=args.report_only,
                     n_samples=args.bootstrap_samples)
    except RuntimeError as error:
        print(f"langshare head-to-head: {error}", file=sys.stderr)
        return 1
    return 0


def add_subcommand(subparsers):
    p = add_command(
        subparsers, "head-to-head", help="train, evaluate and compare every sharing method at equal updates, with "
                                         "the baseline's layers and widths",
        description="Train langshare_transformer_small and every language-sharing method at equal updates with the "
                    "baseline's layers and widths per sentence on the gettext corpus, for several seeds; evaluate, "
                    "record every run, compare with significance and one verdict rule, and report from the record "
                    "(docs/head_to_head.md).")
    p.add_argument("--models", default=None, help="comma-separated models (default: all of "
                   + ", ".join(m.name for m in MODELS) + "); flags in fairseq_langshare/recipes/head_to_head_models.py")
    p.add_argument("--directions", default="o2m,m2o",
                   help="comma-separated direction sets: o2m, m2o, m2m (many-to-many: both directions through English, "
                        "evaluated also on the zero-shot directions; run after the O2M/M2O record)")
    p.add_argument("--seeds", default=[1, 2, 3], type=Range(1, why="a training seed").list_of(int),
                   help="comma-separated training seeds")
    p.add_argument("--updates", type=Range(1, why="updates").of(int),
                   default=DEFAULT_UPDATES, help="updates of every run")
    p.add_argument("--runs-dir", default="runs/head_to_head", help="runs go to RUNS_DIR/<direction>/<model>/seed<k>/")
    p.add_argument("--corpus", action="append", metavar="DIRECTION=DIR",
                   help=f"corpus of a direction set (default: {DEFAULT_CORPORA['o2m']}, {DEFAULT_CORPORA['m2o']} and "
                        f"{DEFAULT_CORPORA['m2m']}, built as scripts/quality_lib.sh builds them when missing; M2M's "
                        "with --direction both --zero-shot all)")
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
    p.add_argument("--train-flags", default="", type=shell_words,
                   help="fairseq-train flags for every run, after the head-to-head's settings (a flag given here "
                        "wins), recorded in the results; write it with '=', e.g. make demo's "
                        "--train-flags='--max-tokens 1024 --dropout 0'")
    where = (f"(default: for the head-to-head of record, --record-dir {head_to_head_record.RECORD_DIR} or "
             "--report-only, the repository's {}; for another record, {} in the folder that holds it, RUNS_DIR for "
             "the default RUNS_DIR/record)")
    p.add_argument("--out-json", default=argparse.SUPPRESS,
                   help="results JSON " + where.format("docs/results/head_to_head.json", "head_to_head.json"))
    p.add_argument("--out-md", default=argparse.SUPPRESS,
                   help="markdown file whose head-to-head section is (re)written; '' for none "
                        + where.format("docs/results.md", "results.md"))
    p.add_argument("--figure", default=argparse.SUPPRESS,
                   help="per-direction BLEU delta figure; '' for none " + where.format("docs/img/head_to_head.png",
                                                                                      "head_to_head.png"))
    p.add_argument("--record-dir", default=None,
                   help="write each run's record (scores, hypotheses, flags, cost, commit, machine) here as soon "
                        "as it is evaluated, and report from it (default: RUNS_DIR/record; the head-to-head of "
                        f"record's is {head_to_head_record.RECORD_DIR}, the default of --report-only; "
                        "docs/head_to_head.md, 'The record')")
    p.add_argument("--readme", default=argparse.SUPPRESS,
                   help="markdown file whose method standings block is (re)written from the results; '' for none "
                        + where.format("README.md", "standings.md"))
    p.add_argument("--bootstrap-samples", type=Range(1, why="resamples per test").of(int),
                   default=significance.DEFAULT_SAMPLES,
                   help="paired bootstrap resamples per test (the JSON records it: a report with another number "
                        "is another report)")
    p.add_argument("--report-only", action="store_true",
                   help="write the results JSON, the markdown section, the figure and the README standings from the "
                        "record in --record-dir alone (training, decoding and reading corpora or checkpoints "
                        "nothing; the same record gives the same bytes); the options of the runs do not apply")
    p.set_defaults(func=_run)
    return p
