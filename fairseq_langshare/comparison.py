"""``langshare compare``: several ``langshare evaluate`` results side by side, over seeds, with
significance against a baseline.

A system is a name; giving the same name several times (``lsl=s1.json lsl=s2.json``) gives it
several seeds, paired by position with the baseline's seeds. Per direction and per resource group
(High/Medium/Low, as ``evaluate`` groups them) the tables show the mean and standard deviation over
seeds; a direction counts as a win only when the system's seed mean is above the baseline's. With a
baseline whose results hold hypotheses (``evaluate`` of this version stores them), every system is
tested against it with sacrebleu's paired bootstrap (``significance.compare_to_baseline``), per
direction and over all directions pooled (and, where zero-shot directions are compared beside
trained ones, over each kind pooled on its own), on each seed pair and on the seed-concatenated
systems, and every comparison gets its verdict (``significance.verdict``: better / level / worse). Where
the results hold the off-target rate, a table of its seed mean and std per direction and group
follows (``off_target.add_to_comparison``).
"""

import os
import sys
from collections import OrderedDict
from typing import Dict, List, Optional, Sequence, Tuple

from .atomic_files import check_writable, write_json_atomic, write_text_atomic
from .command_line import add_command, file_name
from .evaluation import METRICS, EvaluationError, _averages, _csv, _fmt, _read_json, bleu_signature, read_references
from . import off_target, significance
from .option_ranges import Range
from .result_kinds import (COMPARE_JSON, COMPARE_MARKDOWN, COMPARE_MARKDOWN_TITLE, EVALUATE_JSON, file_kind,
                           held_unless, json_kind)

LABELS = significance.METRIC_LABELS
ALPHA = significance.ALPHA  # the level the tables mark


def group_systems(runs: Sequence[Tuple[str, dict]]) -> "OrderedDict[str, List[dict]]":
    """[(name, results)] -> {name: [results of seed 1, seed 2, ...]} in first-appearance order."""
    systems = OrderedDict()
    for name, results in runs:
        if not isinstance(results, dict) or not isinstance(results.get("directions"), dict):
            raise EvaluationError(f"{name} is not an evaluate results dict/JSON (no 'directions' mapping)")
        systems.setdefault(name, []).append(results)
    return systems


def _seed_values(seeds, direction, metric):
    return [res["directions"].get(direction, {}).get(metric) for res in seeds]


def _group_summaries(seeds, metrics, directions):
    """Group averages of each seed over ``directions`` (those every run has), then mean/std over seeds."""
    per_seed = [_averages({d: res["directions"][d] for d in directions}) for res in seeds]
    groups = list(per_seed[0])  # direction_groups' order
    return {g: {"n_directions": per_seed[0][g].get("n_directions"),
                **{m: significance.seed_summary([avg.get(g, {}).get(m) for avg in per_seed]) for m in metrics}}
            for g in groups}


def _win(mine, base, directions, metric):
    common = [d for d in directions if mine[d][metric]["mean"] is not None and base[d][metric]["mean"] is not None]
    if not common:
        return None
    wins = sum(mine[d][metric]["mean"] > base[d][metric]["mean"] for d in common)
    return {"value": wins / len(common), "wins": wins, "directions": len(common)}


def _win_cells(cmp, baseline, ratios_of, metric):
    """Each system's win ratio on ``metric`` as a table cell, ``ratios_of(entry)`` giving {metric: ratio}."""
    cells = []
    for name, entry in cmp["systems"].items():
        w = (ratios_of(entry) or {}).get(metric)
        cells.append("-" if name == baseline or w is None else f"{w['value']:.2f} ({w['wins']}/{w['directions']})")
    return cells


def check_same_bleu_signatures(runs, directions):
    """Refuse runs whose BLEU of a direction was computed with another signature (tokenization...)."""
    for d in directions:
        sigs = OrderedDict((bleu_signature(res["directions"].get(d)), name) for name, res in runs)
        sigs.pop(None, None)
        if len(sigs) > 1:
            (a, x), (b, y) = list(sigs.items())[:2]
            raise EvaluationError(f"direction {d}: {x} was scored with BLEU signature {a} but {y} with {b}; "
                                  f"evaluate both again with the same --bleu-tokenize")


def direction_kinds(directions: Dict[str, Dict]) -> Dict[str, List[str]]:
    """{"supervised": [...], "zero-shot": [...]} of a comparison's directions (by evaluate's group)
    where it has both kinds, which are then also tested each pooled on its own; {} otherwise."""
    zero = [d for d, info in directions.items() if info.get("group") == "zero-shot"]
    if not zero or len(zero) == len(directions):
        return {}
    return {"supervised": [d for d in directions if d not in zero], "zero-shot": zero}


def significance_against(base_seeds, seeds, directions, n_samples, references=None, statistics=None, subsets=None):
    """compare_to_baseline on the directions both systems have hypotheses for, or a note why not.
    ``references``: {direction: {"sha256", "lines"}} to test against instead of the files the
    results name (e.g. a head-to-head record's)."""
    have = [d for d in directions if all(d in (r.get("hypotheses") or {}) for r in base_seeds + seeds)]
    if not have:
        return {"note": "not computed: the results hold no hypotheses (evaluate again with this version of "
                        "`langshare evaluate`, which stores them)"}
    refs = {}
    for d in have:
        digests = {(r.get("references") or {}).get(d, {}).get("sha256") for r in base_seeds + seeds}
        if len(digests) != 1:
            files = sorted({str((r.get("references") or {}).get(d, {}).get("path")) for r in base_seeds + seeds})
            raise EvaluationError(f"direction {d}: the runs were scored against different reference files "
                                  f"({', '.join(files)}); compare runs evaluated on the same corpus and split")
        if references is None:
            refs[d] = read_references(seeds[0], d)
        elif (references.get(d) or {}).get("sha256") != digests.pop():
            raise EvaluationError(f"direction {d}: the runs were scored against other references than those given; "
                                  f"pass the references they were evaluated on")
        else:
            refs[d] = references[d]["lines"]
    tokenize = {d: significance.bleu_tokenization(seeds[0]["directions"][d].get("bleu_signature")) for d in have}
    return significance.compare_to_baseline([r["hypotheses"] for r in base_seeds], [r["hypotheses"] for r in seeds],
                                            refs, tokenize, n_samples=n_samples, statistics=statistics,
                                            subsets=subsets)


def compare(runs: Sequence[Tuple[str, dict]], baseline: Optional[str] = None, metrics=("bleu", "chrf"),
            test: bool = True, n_samples: int = significance.DEFAULT_SAMPLES,
            references: Optional[Dict[str, Dict]] = None) -> Dict:
    """The comparison as a JSON-able dict: per system the seed mean/std per direction and group,
    the win ratio (seed means) and, with ``test``, the paired bootstrap against ``baseline`` with
    each seed's delta and the verdict. Directions are those of any run; the group averages are over the
    directions every run has (``common_directions``; ``missing``: the others, with the runs that lack them).
    ``references``: {direction: {"sha256", "lines"}}, the references to test against (default: the files the
    results name, checked by sha256)."""
    if not runs:
        raise EvaluationError("nothing to compare: give at least one results JSON")
    if n_samples < 1:  # sacrebleu would silently use its default
        raise EvaluationError(f"--bootstrap-samples {n_samples}: pass at least 1 (the default is "
                              f"{significance.DEFAULT_SAMPLES})")
    systems = group_systems(runs)
    if baseline is not None and baseline not in systems:
        raise EvaluationError(f"--baseline {baseline!r} is not one of the runs ({', '.join(systems)}); name one of them")
    for name, seeds in systems.items():  # seed k is paired with the baseline's seed k
        if baseline is not None and len(seeds) != len(systems[baseline]):
            raise EvaluationError(f"{name} has {len(seeds)} seeds but the baseline {baseline} has "
                                  f"{len(systems[baseline])}: pass the same seeds for every system")
    directions, common, missing = direction_sets(runs)
    check_same_bleu_signatures(runs, directions)
    row = {d: next(res["directions"][d] for _, res in runs if d in res["directions"]) for d in directions}
    out = {"baseline": baseline, "metrics": list(metrics),
           "directions": {d: {k: row[d].get(k) for k in ("train_size", "group", "n")} for d in directions},
           "common_directions": common, "missing": missing, "systems": OrderedDict()}
    for name, seeds in systems.items():
        out["systems"][name] = {
            "seeds": len(seeds),
            "directions": {d: {m: significance.seed_summary(_seed_values(seeds, d, m)) for m in metrics}
                           for d in directions},
            "averages": _group_summaries(seeds, metrics, common),
        }
    trained = {name: sorted({res["num_updates"] for res in seeds if res.get("num_updates")})
               for name, seeds in systems.items()}
    if len({n for counts in trained.values() for n in counts}) > 1:  # e.g. one run resumed for longer
        out["updates_trained"] = trained
    off_target.add_to_comparison(out, systems)
    if baseline is None:
        return out
    base = out["systems"][baseline]
    tested = [m for m in metrics if m in significance.TESTED_METRICS]
    statistics = significance.SentenceStatistics()  # the baseline's sentences are in every test
    for name, entry in out["systems"].items():
        if name == baseline:
            continue
        entry["win_ratio"] = {m: _win(entry["directions"], base["directions"], directions, m) for m in metrics}
        entry["win_ratio_by_kind"] = {kind: {m: _win(entry["directions"], base["directions"], members, m)
                                             for m in metrics}
                                      for kind, members in direction_kinds(out["directions"]).items()} or None
        if test and tested:
            entry["significance"] = significance_against(systems[baseline], systems[name], directions, n_samples,
                                                         references, statistics, direction_kinds(out["directions"]))
    return out


def direction_sets(runs):
    """(every direction in first-appearance order, those every run has, {direction: [runs lacking it]});
    refuses runs that share none (their averages would compare different test sets)."""
    directions = list(dict.fromkeys(d for _, res in runs for d in res["directions"]))
    missing = OrderedDict()
    for d in directions:
        lacking = list(dict.fromkeys(name for name, res in runs if d not in res["directions"]))
        if lacking:
            missing[d] = lacking
    common = [d for d in directions if d not in missing]
    if not common:
        sets = "; ".join(f"{name}: {','.join(res['directions'])}" for name, res in runs)
        raise EvaluationError(f"the runs share no direction ({sets}): compare runs evaluated on the same directions "
                              "(evaluate --directions)")
    return directions, common, dict(missing)


# ----------------------------------------------------------------------------- markdown
def _cell(summary):
    if summary["mean"] is None:
        return "-"
    return _fmt(summary["mean"]) + (f" ± {summary['std']:.2f}" if summary["std"] is not None else "")


def _row(entry, direction, metric, kind=None):
    """The tests of ``entry`` for a direction (None: pooled; with ``kind``, the directions of that
    kind pooled, ``direction_kinds``) and metric, if computed."""
    sig = entry.get("significance") or {}
    if kind is not None:
        row = (sig.get("pooled_subsets") or {}).get(kind)
    else:
        row = sig.get("pooled") if direction is None else (sig.get("directions") or {}).get(direction)
    return (row or {}).get(metric)


def _test(entry, direction, metric, kind=None):
    """The seed-concatenated test of ``entry`` for a direction (None: pooled), if computed."""
    return (_row(entry, direction, metric, kind) or {}).get("seeds_concatenated")


def _verdict(entry, direction, metric, kind=None):
    """The verdict of ``entry`` for a direction (None: pooled), if tested."""
    return (_row(entry, direction, metric, kind) or {}).get("verdict")


def _marked(cell, verdict):
    return cell + (" †" if verdict in ("better", "worse") else "")


def comparison_markdown(cmp: Dict) -> str:
    """One table per metric (mean ± std over seeds, † where the verdict against the baseline is
    better or worse), the win ratio, and a table of verdicts, deltas, p-values and 95% CIs."""
    names, baseline = list(cmp["systems"]), cmp["baseline"]
    seeds = {n: e["seeds"] for n, e in cmp["systems"].items()}
    lines = []
    if cmp.get("updates_trained"):
        lines += ["**Runs of different lengths** (updates trained: " + ", ".join(
            f"{n} {'/'.join(map(str, counts)) or 'unknown'}" for n, counts in cmp["updates_trained"].items())
            + "): a difference between them is also one of training.", ""]
    for metric in cmp["metrics"]:
        label = LABELS.get(metric, metric)
        if all(row[metric]["mean"] is None for e in cmp["systems"].values() for row in e["directions"].values()):
            lines += [f"{label}: not in any of the results (spBLEU needs its model on disk; see evaluate)", ""]
            continue
        counts = set(seeds.values())
        if len(counts) > 1:  # only without a baseline: compare() refuses unequal seeds against one
            note = " (mean ± std over seeds: " + ", ".join(f"{n} {k}" for n, k in seeds.items()) + ")"
        elif counts != {1}:
            note = f" (mean ± std over {counts.pop()} seeds)"
        else:
            note = ""
        if baseline is not None and any(_test(e, None, metric) for e in cmp["systems"].values()):
            note += f"; † p < {ALPHA} against {baseline} (paired bootstrap" + (
                ", seeds concatenated) and every seed's delta of the same sign: better or worse"
                if max(seeds.values()) > 1 else "): better or worse")
        lines += [f"{label}{note}:", "", "| direction | train pairs | group | sentences | " + " | ".join(names) + " |",
                  "|---|---:|---|---:|" + "---:|" * len(names)]
        missing = cmp.get("missing") or {}
        for d, info in cmp["directions"].items():
            cells = [_marked(_cell(e["directions"][d][metric]), _verdict(e, d, metric)) for e in cmp["systems"].values()]
            name = d + ("*" if d in missing else "")
            lines.append(f"| {name} | {_fmt(info['train_size'])} | {info.get('group') or '-'} | {_fmt(info['n'])} | "
                         + " | ".join(cells) + " |")
        first = next(iter(cmp["systems"].values()))
        for group in first["averages"]:
            cells = [_cell(e["averages"].get(group, {}).get(metric, {"mean": None})) for e in cmp["systems"].values()]
            lines.append(f"| **{group}** avg |  |  |  | " + " | ".join(cells) + " |")
        if baseline is not None:
            lines.append(f"| win ratio vs {baseline} |  |  |  | "
                         + " | ".join(_win_cells(cmp, baseline, lambda e: e.get("win_ratio"), metric)) + " |")
            for kind in direction_kinds(cmp["directions"]):
                lines.append(f"| win ratio vs {baseline}, {kind} directions |  |  |  | " + " | ".join(_win_cells(
                    cmp, baseline, lambda e, kind=kind: (e.get("win_ratio_by_kind") or {}).get(kind), metric)) + " |")
            pooled = [_test(e, None, metric) for e in cmp["systems"].values()]
            if any(pooled):
                lines.append("| p, all directions pooled |  |  |  | "
                             + " | ".join("-" if t is None else significance.format_p(t["p_value"]) for t in pooled) + " |")
                lines.append("| verdict, all directions pooled |  |  |  | "
                             + " | ".join(_verdict(e, None, metric) or "-" for e in cmp["systems"].values()) + " |")
                for kind in direction_kinds(cmp["directions"]):
                    lines.append(f"| verdict, {kind} directions pooled |  |  |  | " + " | ".join(
                        _verdict(e, None, metric, kind) or "-" for e in cmp["systems"].values()) + " |")
        if missing:
            n = len(cmp["common_directions"])
            lines.append("\n* not in every run (" + "; ".join(f"{d}: not in {', '.join(r)}" for d, r in missing.items())
                         + f"): left out of the averages, which are over the {n} direction{'s' * (n != 1)} every run "
                         "has")
        lines.append("")
        lines += _significance_table(cmp, metric)
    lines += off_target.comparison_table(cmp, _cell)
    notes = {e["significance"]["note"] for e in cmp["systems"].values() if "note" in (e.get("significance") or {})}
    lines += [f"Significance: {n}" for n in sorted(notes)]
    return "\n".join(lines).rstrip() + "\n"


def _significance_table(cmp, metric):
    tested = [(n, e) for n, e in cmp["systems"].items() if _test(e, None, metric)]
    if not tested:
        return []
    sig = tested[0][1]["significance"]
    label = LABELS.get(metric, metric)
    several = sig["seeds"] > 1
    if several:
        what = (f"the verdict (better / worse: p < {ALPHA} and every seed's delta of the same sign; level otherwise), "
                "the delta of the score on the seed-concatenated test set [each seed's delta], its p-value [each "
                "seed's]")
    else:
        what = f"the verdict (better / worse: p < {ALPHA}; level otherwise), the delta of the score, its p-value"
    lines = [f"{label} against {cmp['baseline']}: {what}, the system's 95% CI (bootstrap mean ± half-width) "
             f"({sig['n_samples']} paired bootstrap resamples, sacrebleu):", "",
             "| direction | " + " | ".join(n for n, _ in tested) + " |", "|---|" + "---:|" * len(tested)]
    kinds = [(None, kind) for kind in direction_kinds(cmp["directions"])]
    for d, kind in [(d, None) for d in list(cmp["directions"]) + [None]] + kinds:
        cells = []
        for _, e in tested:
            t = _test(e, d, metric, kind)
            if t is None:
                cells.append("-")
                continue
            per_seed = _row(e, d, metric, kind)["per_seed"]
            several = len(per_seed) > 1
            deltas = " [" + ", ".join(f"{s['delta']:+.2f}" for s in per_seed) + "]" if several else ""
            ps = " [" + ", ".join(significance.format_p(s["p_value"]) for s in per_seed) + "]" if several else ""
            cells.append(f"**{_verdict(e, d, metric, kind)}** {t['delta']:+.2f}{deltas}, p "
                         f"{significance.format_p(t['p_value'])}{ps}, {t['system_mean']:.2f} ± {t['system_ci']:.2f}")
        lines.append(f"| {d or (kind or 'all') + ' (pooled)'} | " + " | ".join(cells) + " |")
    return lines + [""]


def compare_markdown(runs, baseline=None, metrics=("bleu", "chrf"), test=True):
    """``comparison_markdown(compare(...))``: the tables for [(name, results)]."""
    return comparison_markdown(compare(runs, baseline, metrics, test=test))


# ----------------------------------------------------------------------------- CLI
def split_item(item: str) -> Tuple[Optional[str], str]:
    """(NAME, PATH) of a ``compare`` argument: an existing file is a path (no name), else
    NAME=PATH split at the first "=" (so a path may hold "=", a name may not)."""
    if os.path.isfile(item) or "=" not in item:
        return None, item
    name, _, path = item.partition("=")
    return name, path


def _results_in(directory: str) -> str:
    """What to pass instead of ``directory``: the one evaluate results JSON it holds, if exactly one."""
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        names = []
    found = [os.path.join(directory, f) for f in names if f.endswith(".json")]
    found = [f for f in found if os.path.isfile(f) and file_kind(f) == EVALUATE_JSON]
    if len(found) == 1:
        return f"pass the results JSON in it, {found[0]}"
    return "pass the results JSON that `langshare evaluate --out-json` wrote"


def read_runs(items: Sequence[str]) -> List[Tuple[str, dict]]:
    """NAME=RESULTS.json (or a path, named by its file name) -> [(name, results)]. A file given twice is
    refused (it would count as two seeds), and so are two files that their file names alone would name
    alike (every head-to-head run writes test.json: they would become seeds of one system)."""
    runs, seen, unnamed = [], {}, {}
    for item in items:
        given, path = split_item(item)
        name = given or os.path.splitext(os.path.basename(path))[0]
        key = os.path.realpath(path)
        if key in seen:
            raise EvaluationError(f"{path} is given twice (as {seen[key]} and {name}); give each run's results once")
        seen[key] = name
        if given is None:
            if name in unnamed:
                raise EvaluationError(f"{unnamed[name]} and {path} would both be named '{name}' (by their file "
                                      "names); name each run: NAME=FILE, the same NAME for the seeds of one system")
            unnamed[name] = path
        if os.path.isdir(path):
            raise EvaluationError(f"{path} is a directory, not a results JSON: {_results_in(path)}")
        if not os.path.isfile(path):
            raise EvaluationError(f"results JSON not found: {path} (write one with `langshare evaluate --out-json`)")
        results = _read_json(path, "results JSON")
        kind = json_kind(results)
        if kind is not None and kind != EVALUATE_JSON:
            raise EvaluationError(f"{path} is {kind}, not `langshare evaluate` results: pass files written by "
                                  "langshare evaluate --out-json")
        if kind is None:
            raise EvaluationError(f"{path} is not a `langshare evaluate` results file (no 'directions' table of "
                                  "per-direction scores): pass files written by langshare evaluate --out-json")
        runs.append((name, results))
    return runs


def _run(args):
    inputs = [split_item(item)[1] for item in args.results]
    for flag, path, others, kind in (("--out-json", args.out_json, [], COMPARE_JSON),
                                     ("--out-md", args.out_md, [args.out_json], COMPARE_MARKDOWN)):
        if path:  # fail now, not after the tests; never over a file compare did not write
            check_writable(path, flag, inputs=[*inputs, *others], command="compare", held=held_unless(kind, "compare"))
    metrics = tuple(_csv(args.metrics))
    try:
        if not metrics or any(m not in METRICS for m in metrics):
            raise EvaluationError(f"--metrics {args.metrics!r}: pass one or more of {', '.join(METRICS)}, "
                                  "comma-separated")
        cmp = compare(read_runs(args.results), args.baseline, metrics,
                      test=not args.no_significance, n_samples=args.bootstrap_samples)
        names = list(cmp["systems"])
        text = (f"{COMPARE_MARKDOWN_TITLE}{', '.join(names)}"
                + (f" against {cmp['baseline']}" if cmp["baseline"] is not None else "") + ".\n\n"
                + _baseline_hint(cmp, tests=not args.no_significance) + comparison_markdown(cmp))
        if args.out_json:
            write_json_atomic(args.out_json, cmp)
        if args.out_md:
            write_text_atomic(args.out_md, text)
        print(text)
    except (EvaluationError, FileNotFoundError) as e:
        print(f"langshare compare: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    return cmp


def _baseline_hint(cmp, tests: bool = True) -> str:
    """Without --baseline, the line that says what it adds (the tables alone do not); "" otherwise."""
    names = list(cmp["systems"])
    if cmp["baseline"] is not None or len(names) < 2:
        return ""
    return (f"No --baseline: pass --baseline NAME (one of {', '.join(names)}) for each system's win ratio against "
            "NAME" + (" and sacrebleu's paired bootstrap tests against it" if tests else "") + ".\n\n")


def add_subcommand(subparsers):
    """Register ``langshare compare``."""
    c = add_command(
        subparsers, "compare", help="side-by-side tables of several `langshare evaluate` results, over seeds, with significance",
        description="One table per metric with a column per system (per direction, group averages; mean ± std over "
                    "seeds when a name is given several times), each system's win ratio against the baseline (seed "
                    "means) and sacrebleu's paired bootstrap test against it per direction and pooled.")
    c.add_argument("results", nargs="+", help="NAME=RESULTS.json (from `langshare evaluate --out-json`; split at the "
                                              "first '='), or a path (named by its file name); repeat a NAME for "
                                              "its other seeds, the same number for every system, in the same "
                                              "seed order: the k-th file of a system is paired with the k-th of the "
                                              "baseline (the results hold no seed)")
    c.add_argument("--baseline", default=None, help="NAME of the system the win ratios and tests are against")
    c.add_argument("--metrics", default="bleu,chrf", help="comma-separated metrics: bleu, chrf, spbleu")
    c.add_argument("--no-significance", action="store_true", help="skip the paired bootstrap tests")
    c.add_argument("--bootstrap-samples", type=Range(1, why="resamples per test").of(int),
                   default=significance.DEFAULT_SAMPLES,
                   help="paired bootstrap resamples per test (at least 1)")
    c.add_argument("--out-json", default=None, type=file_name,
                   help="write the comparison (means, stds, tests) as JSON here")
    c.add_argument("--out-md", default=None, type=file_name, help="write the markdown tables here")
    c.set_defaults(func=_run)
    return c
