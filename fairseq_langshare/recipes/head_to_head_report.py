"""The head-to-head's outputs, made from its record alone (``head_to_head_record``): the results
JSON (per model: flags, parameters, measured inference cost, per-seed scores, seed means, win
ratio, pooled p-values, each seed's delta and the verdict), a markdown section (rewritten in place
between its markers), one figure (per-direction BLEU delta against the baseline, one marker per
method, error bars over seeds) and README's method standings (``head_to_head_standings``).

Nothing is trained, decoded or read from a corpus or a checkpoint: the significance tests run on
the recorded hypotheses and references, sacrebleu's bootstrap has a fixed seed, the JSON is dated
by the record's commits and the figure carries no date or version, so the same record gives the
same bytes (``langshare head-to-head --report-only``).
"""

import datetime
import json
import os
import re
import shlex
import statistics
import sys
from typing import Dict, List, Optional

from .. import comparison, off_target, significance
from ..atomic_files import check_writable, json_text, write_files_atomic
from ..result_kinds import HEAD_TO_HEAD_JSON, held_unless
from . import head_to_head_record, head_to_head_standings, head_to_head_zero_shot
from .head_to_head_models import BASELINE, DIRECTIONS, MODELS
from .head_to_head_runs import FLOPS_TOLERANCE, TRAIN_FLAGS, inference_cost, percent_text, ratio_text

START, END = "<!-- head-to-head: start (written by `langshare head-to-head`) -->", "<!-- head-to-head: end -->"
METRICS = ("bleu", "chrf")
MARKERS = "osD^vP*Xh"
SETTINGS = ("updates", "train_flags", "evaluate_flags")  # the same in every run of a record


# ----------------------------------------------------------------------------- the runs reported
def _model_order(names) -> List[str]:
    known = [m.name for m in MODELS]
    return [n for n in known if n in names] + sorted(n for n in names if n not in known)


def reported(records: Dict[str, Dict[str, Dict[int, Dict]]]):
    """({direction: {model: [records, by seed]}}, [runs left out]): per direction, the seeds every
    recorded model has (the comparison pairs seed k with seed k); only directions with a baseline."""
    out, left_out = {}, []
    for direction in [d for d in DIRECTIONS if d in records] + sorted(set(records) - set(DIRECTIONS)):
        models = records[direction]
        if BASELINE not in models:
            left_out += [f"{direction}/{m}/seed{s}" for m in _model_order(models) for s in models[m]]
            continue
        common = sorted(set.intersection(*(set(seeds) for seeds in models.values())))
        left_out += [f"{direction}/{m}/seed{s}" for m in _model_order(models) for s in models[m] if s not in common]
        if common:
            out[direction] = {m: [models[m][s] for s in common] for m in _model_order(models)}
    return out, left_out


def _check_settings(records) -> Dict:
    """The settings every run of the record shares; a record mixing two head-to-heads is refused."""
    first, settings = None, None
    for direction, models in records.items():
        for model, seeds in models.items():
            for seed, record in seeds.items():
                mine = {k: record[k] for k in SETTINGS}
                name = f"{direction}/{model}/seed{seed}"
                if settings is None:
                    first, settings = name, mine
                elif mine != settings:
                    differ = ", ".join(k for k in SETTINGS if mine[k] != settings[k])
                    raise ValueError(f"the record's runs {first} and {name} differ in {differ}: a record holds one "
                                     f"head-to-head; record the other one in another --record-dir")
    for direction, models in records.items():  # one corpus per direction: its dictionary and test references
        runs = [(f"{direction}/{model}/seed{seed}", r) for model, seeds in models.items() for seed, r in seeds.items()]
        for what, identity in (("were trained on other dictionaries", lambda r: r["corpus"].get("dict_sha256")),
                               ("were scored against other test references", lambda r: {
                                   p: ref.get("sha256") for p, ref in (r["results"].get("references") or {}).items()})):
            known = [(name, identity(r), r["corpus"]["path"]) for name, r in runs if identity(r)]
            for name, value, path in known[1:]:
                first_name, first_value, first_path = known[0]
                if isinstance(value, dict):  # the pairs both runs were scored on
                    value = {p: v for p, v in value.items() if p in first_value}
                    first_value = {p: first_value[p] for p in value}
                if value != first_value:
                    raise ValueError(f"the record's runs {first_name} and {name} {what} (corpora {first_path} and "
                                     f"{path}): a record holds one head-to-head on one corpus per direction; record "
                                     f"the other one in another --record-dir")
    for direction, models in records.items():
        for model, seeds in models.items():
            flags = {tuple(r["model_flags"]) for r in seeds.values()}
            pairs = {r["corpus"]["lang_pairs"] for m in models.values() for r in m.values()}
            if len(flags) > 1 or len(pairs) > 1:
                raise ValueError(f"the record's runs of {direction}/{model} were trained with other model flags or "
                                 f"language pairs than each other: a model's seeds must be one configuration; "
                                 f"record the other one in another --record-dir")
    return settings


# ----------------------------------------------------------------------------- the results JSON
def _count(values) -> Dict[str, int]:
    out = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return dict(sorted(out.items()))


def _runs_summary(models: Dict[str, List[Dict]]) -> Dict:
    """The CPUs and package commits the reported runs of a block ran on, and their wall time."""
    runs = [r for seeds in models.values() for r in seeds]

    def commit(r):
        prov = r["provenance"]
        return (prov.get("package_commit") or "unknown") + (" (with uncommitted changes)" if prov.get("package_dirty")
                                                            else "")
    return {"machines": _count(r["provenance"]["machine"]["cpu"] for r in runs),
            "package_commits": _count(commit(r) for r in runs),
            "wall_seconds": {k: round(sum(r["wall_seconds"].get(k, 0.0) for r in runs), 1)
                             for k in ("train", "evaluate")},
            # runs whose training time is the one their package recorded, not their committed log's
            "training_time_not_from_log": sorted(f"{r['direction']}/{r['model']}/seed{r['seed']}" for r in runs
                                                 if not r.get("training_time_from_log"))}


def _pooled(system: Dict) -> Dict:
    sig = system.get("significance") or {}
    return sig.get("pooled") or {}


def _model_entry(name: str, seeds: List[Dict], cmp: Dict, cost: Dict, record_dir: str) -> Dict:
    first = seeds[0]
    system = cmp["systems"][name]
    pooled = _pooled(system)
    kinds = (system.get("significance") or {}).get("pooled_subsets")
    return {
        "label": first["label"], "arch": first["arch"], "flags": first["model_flags"], "reason": first["reason"],
        "extra_compute": first["extra_compute"],
        "parameters": first["profile"]["parameters"], "inference": first["profile"]["inference"],
        "inference_cost": cost,
        "records": {str(r["seed"]): os.path.relpath(head_to_head_record.run_path(
            record_dir, r["direction"], r["model"], r["seed"]), record_dir) for r in seeds},
        "seeds": {str(r["seed"]): {m: {d: row.get(m) for d, row in r["results"]["directions"].items()}
                                   for m in METRICS} for r in seeds},
        "validation": {str(r["seed"]): r["validation"] for r in seeds},
        "wall_seconds": {str(r["seed"]): r["wall_seconds"] for r in seeds},
        "means": {"directions": system["directions"], "groups": system["averages"]},
        "win_ratio": system.get("win_ratio"),
        "pooled_p_value": {m: pooled[m]["seeds_concatenated"]["p_value"] for m in METRICS if m in pooled} or None,
        "pooled_p_value_per_seed": {m: [t["p_value"] for t in pooled[m]["per_seed"]] for m in METRICS
                                    if m in pooled} or None,
        "verdict": significance.pooled_verdicts(pooled, METRICS),
        # a set with zero-shot directions: the supervised and the zero-shot ones each pooled on its own
        "verdict_by_kind": {kind: {"directions": row["directions"], **(significance.pooled_verdicts(row, METRICS) or {})}
                            for kind, row in kinds.items()}
                           if kinds else None,
    }


def _cost_problems(costs: Dict[str, Dict]) -> List[str]:
    """What keeps a block from equal inference cost, one line per model."""
    problems = []
    for name, cost in costs.items():
        problems += cost["layers_and_widths"]
        if any(abs(r - 1) > FLOPS_TOLERANCE for r in cost["flops_ratio"]):
            more = "more" if max(cost["flops_ratio"]) > 1 else "fewer"
            problems.append(f"{name}: {ratio_text(cost['flops_ratio'])} the baseline's FLOPs per sentence "
                            f"({more}, {percent_text(cost['flops_ratio'])})")
    return problems


def _off_target_from_record(record_dir: str, direction: str, models: Dict[str, List[Dict]]) -> Optional[Dict]:
    """Runs evaluated before ``langshare evaluate`` measured the off-target rate get it from their
    recorded hypotheses and the direction's committed measurement of the identifier on the corpus's
    references (``head_to_head_record.language_id_path``), as ``langshare off-target --results``
    would give them (in memory: the records stay as they were made). Returns which runs and from
    which file, or None."""
    path = head_to_head_record.language_id_path(record_dir, direction)
    runs = [r for seeds in models.values() for r in seeds
            if not (r["results"].get("off_target") or {}).get("identifier")]
    if not runs or not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        measurement = json.load(f)
    try:
        identifier = off_target.Identifier(list(measurement["languages"]))
        for r in runs:
            off_target.add_measured(r["results"], measurement, identifier)
    except off_target.OffTargetError as error:
        raise ValueError(f"{path}: {error}") from None
    return {"measurement": os.path.relpath(path, record_dir),
            "runs": [f"{r['direction']}/{r['model']}/seed{r['seed']}" for r in runs]}


def _block(record_dir: str, direction: str, models: Dict[str, List[Dict]], n_samples: int, left_out: List[str],
           stream) -> Dict:
    refs = head_to_head_record.read_references(record_dir, direction)
    rated_here = _off_target_from_record(record_dir, direction, models)
    named = [(name, r["results"]) for name, seeds in models.items() for r in seeds]
    print(f"== {direction}: testing {len(models) - 1} models against {BASELINE} on seeds "
          f"{', '.join(str(r['seed']) for r in models[BASELINE])} ({n_samples} bootstrap resamples)", file=stream,
          flush=True)
    cmp = comparison.compare(named, baseline=BASELINE, metrics=METRICS, n_samples=n_samples, references=refs)
    costs = inference_cost({name: [r["profile"] for r in seeds] for name, seeds in models.items()})
    paths = [head_to_head_record.run_path(record_dir, r["direction"], r["model"], r["seed"])
             for seeds in models.values() for r in seeds] + [head_to_head_record.references_path(record_dir, direction)]
    paths += [p for p in (head_to_head_record.log_path(record_dir, r["direction"], r["model"], r["seed"])
                          for seeds in models.values() for r in seeds) if os.path.isfile(p)]
    paths += [head_to_head_record.language_id_path(record_dir, direction)] if rated_here else []
    committed = head_to_head_record.committed_date(paths)
    first = models[BASELINE][0]
    problems = _cost_problems(costs)
    entries = {name: _model_entry(name, seeds, cmp, costs[name], record_dir) for name, seeds in models.items()}
    zero_shot = head_to_head_zero_shot.summary(cmp, models, entries, refs, n_samples)
    block = {
        "generated": committed or datetime.date.today().isoformat(),
        "dated_by": "by the newest commit of its records" if committed else
                    "the day of the report, as the record has runs not committed",
        "corpus": first["corpus"]["path"], "lang_pairs": first["corpus"]["lang_pairs"],
        "seeds": [r["seed"] for r in models[BASELINE]],
        "not_reported": [name for name in left_out if name.startswith(direction + "/")],
        "runs": _runs_summary(models),
        "directions": cmp["directions"],
        "equal_inference_cost": not problems, "inference_cost_problems": problems,
        "models": entries,
        "comparison": cmp,
    }
    if rated_here:
        block["off_target_from_record"] = rated_here
    if zero_shot:  # a set with zero-shot directions (M2M): by target language, and the papers' claims
        block["zero_shot"] = zero_shot
    return block


def record_path(record_dir: str) -> str:
    """How the report names the record: relative to the working directory (the repository's root
    for the head-to-head of record), however it was spelled, so that no machine's path gets in."""
    return os.path.relpath(os.path.abspath(record_dir))


def build(record_dir: str, n_samples: int = significance.DEFAULT_SAMPLES, stream=None) -> Dict:
    """The results JSON of the record in ``record_dir``: a block per direction whose baseline is
    recorded, on the seeds every model of the direction has."""
    stream = stream or sys.stdout
    records = head_to_head_record.read(record_dir)
    if not records:
        raise ValueError(f"no run recorded in {record_dir} yet: nothing to report")
    settings = _check_settings(records)
    models, left_out = reported(records)
    if left_out:
        print(f"not reported (not every model of the direction has that seed, or no baseline): {', '.join(left_out)}",
              file=stream)
    blocks = {d: _block(record_dir, d, m, n_samples, left_out, stream) for d, m in models.items()}
    where = record_path(record_dir)
    return {
        "generated": max((b["generated"] for b in blocks.values()), default=None),
        "record": {"dir": where, "format": head_to_head_record.FORMAT,
                   "command": f"langshare head-to-head --report-only --record-dir {shlex.quote(where)}"},
        **settings, "baseline": BASELINE,
        "verdict_rule": f"better (worse) where the paired bootstrap of the seed-concatenated systems gives p < "
                        f"{significance.ALPHA} and their delta and every seed's delta are above (below) zero; level "
                        "otherwise",
        "alpha": significance.ALPHA, "flops_tolerance": FLOPS_TOLERANCE,
        "bootstrap": {"n_samples": n_samples, "seed": os.environ.get("SACREBLEU_SEED", "12345")},
        "seeds": sorted({s for b in blocks.values() for s in b["seeds"]}),
        "not_reported": left_out,
        "directions": blocks,
    }


# ----------------------------------------------------------------------------- figure
def seed_deltas(entry: Dict, baseline: Dict, direction: str, metric: str = "bleu") -> List[float]:
    """The model's score minus the baseline's on the same seed, for every seed both have."""
    return [entry["seeds"][s][metric][direction] - baseline["seeds"][s][metric][direction]
            for s in entry["seeds"] if s in baseline["seeds"]
            and entry["seeds"][s][metric].get(direction) is not None
            and baseline["seeds"][s][metric].get(direction) is not None]


def draw(data: Dict, metric: str = "bleu"):
    """Per direction, every method's delta against the baseline: mean over seed pairs, error bar
    one standard deviation over them; one panel per translation direction set, a method with the
    same marker and colour in each. Returns the figure."""
    from ..analysis.figures import new_figure

    sets = list(data["directions"])
    everyone = list(dict.fromkeys(m for block in data["directions"].values() for m in block["models"] if m != BASELINE))
    fig = new_figure(7.5, 3.2 * len(sets))
    for row, name in enumerate(sets):
        block = data["directions"][name]
        ax = fig.add_subplot(len(sets), 1, row + 1)
        directions = list(block["directions"])
        methods = [m for m in block["models"] if m != BASELINE]
        base = block["models"][BASELINE]
        for k, method in enumerate(methods):
            xs, ys, errs = [], [], []
            for i, d in enumerate(directions):
                deltas = seed_deltas(block["models"][method], base, d, metric)
                if deltas:
                    xs.append(i + (k - (len(methods) - 1) / 2) * 0.8 / max(1, len(methods)))
                    ys.append(statistics.fmean(deltas))
                    errs.append(statistics.stdev(deltas) if len(deltas) > 1 else 0.0)
            style = everyone.index(method)
            ax.errorbar(xs, ys, yerr=errs, fmt=MARKERS[style % len(MARKERS)], color=f"C{style % 10}", capsize=2,
                        markersize=5, label=block["models"][method]["label"])
        ax.axhline(0.0, color="black", linewidth=0.8)
        sizes = [block["directions"][d].get("train_size") for d in directions]
        ax.set_xticks(range(len(directions)))
        ax.set_xticklabels([f"{d}\n{_thousands(s)}" for d, s in zip(directions, sizes)], fontsize="small")
        ax.set_ylabel(f"{metric.upper() if metric == 'bleu' else metric} - baseline")
        seeds = len(block["seeds"])
        ax.set_title(f"{name.upper()}: {metric.upper() if metric == 'bleu' else metric} delta vs the baseline "
                     + (f"(mean over {seeds} seeds, bars: 1 std)" if seeds > 1 else "(1 seed)"), fontsize="medium")
        ax.legend(fontsize="x-small", ncol=3, loc="best")
    fig.tight_layout()
    return fig


FIGURE_TITLE = "langshare head-to-head"  # the PNG's Title: a --figure the report may replace holds it


def _png_writer(fig, record: str):
    """Write ``fig`` as PNG without the matplotlib version (the same figure, the same bytes), titled FIGURE_TITLE
    and naming its record (``record_path``) in a ``Record`` text chunk, as the JSON's ``record.dir`` does."""
    return lambda tmp: fig.savefig(tmp, format="png", dpi=120,
                                   metadata={"Software": None, "Title": FIGURE_TITLE, "Record": record})


def _figure_held(record_dir: Optional[str]):
    """For ``check_writable(held=...)``: None for a figure of the report's of ``record_dir`` (any record's when
    None; a figure that names no record, made before figures named theirs, too), else what the file is."""
    from PIL import Image

    def held(path) -> Optional[str]:
        try:
            with Image.open(path) as image:
                text = getattr(image, "text", {})
        except (OSError, ValueError):
            text = {}
        if text.get("Title") != FIGURE_TITLE:
            return "a file head-to-head did not write"
        return _other_record("figure", text.get("Record"), record_dir)
    return held


def _thousands(n):
    if not n:
        return "-"
    return f"{n / 1000:.0f}k" if n >= 10000 else f"{n / 1000:.1f}k" if n >= 1000 else str(n)


# ----------------------------------------------------------------------------- markdown
def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h"


def _training_time_source(runs: Dict) -> str:
    without = runs.get("training_time_not_from_log") or []
    if not without:
        return "(from the runs' fairseq logs)"
    return (f"(from the runs' fairseq logs, but for {len(without)} run{'s' if len(without) > 1 else ''} without one, "
            f"whose time is the one {'their' if len(without) > 1 else 'its'} package recorded: {', '.join(without)})")


def _block_intro(block: Dict) -> List[str]:
    runs = block["runs"]
    machines = "; ".join(f"{n} on {cpu}" for cpu, n in runs["machines"].items())
    commits = "; ".join(f"{n} at {commit[:12] if len(commit) == 40 else commit}"
                        for commit, n in runs["package_commits"].items())
    lines = [f"Seeds {', '.join(map(str, block['seeds']))} (those every model has); corpus `{block['corpus']}`; "
             f"dated {block['generated']}, {block['dated_by']}.", "",
             f"Runs: {machines}; package commit: {commits}; wall time summed over the runs: training "
             f"{_hours(runs['wall_seconds']['train'])} {_training_time_source(runs)}, evaluation "
             f"{_hours(runs['wall_seconds']['evaluate'])}."]
    if block["not_reported"]:
        lines += ["", "Recorded but not reported (not every model has the seed yet): "
                  + ", ".join(block["not_reported"]) + "."]
    rated = block.get("off_target_from_record")
    if rated:
        every = len(rated["runs"]) == sum(block["runs"]["machines"].values())
        which = "every run" if every else ", ".join(rated["runs"])
        lines += ["", f"Off-target rates of {which}: computed by the report from the recorded hypotheses and "
                      f"`{rated['measurement']}` (the identifier measured on the corpus's test references, `langshare "
                      "off-target CORPUS --out-json`), as `langshare off-target --results` adds them; these runs were "
                      "evaluated before `langshare evaluate` measured the rate."]
    return lines + [""]


def _cost_sentence(block: Dict) -> str:
    if block["equal_inference_cost"]:
        return (f"**Equal inference cost:** every model runs the baseline's layers and widths per sentence, and its "
                f"FLOPs per sentence are within {FLOPS_TOLERANCE:.0%} of the baseline's (measured on the trained "
                f"models).")
    return (f"**Not equal inference cost** (layers, widths, and FLOPs per sentence within {FLOPS_TOLERANCE:.0%} of the "
            "baseline's, measured on the trained models): " + "; ".join(block["inference_cost_problems"]) + ".")


def markdown(data: Dict, figure_rel: Optional[str] = None) -> str:
    """The results section of ``data`` (the results JSON), between its markers."""
    lines = [START, f"## Head-to-head: every sharing strategy against the shared baseline "
                    f"({data['generated'] or 'not yet recorded'})", "",
             f"`langshare head-to-head` (docs/head_to_head.md), made from its record `{data['record']['dir']}/` by "
             f"`{data['record']['command']}`: {data['updates']} updates per run, the training settings of "
             f"`scripts/quality_lib.sh`{_extra_flags(data)}, `langshare evaluate {' '.join(data['evaluate_flags'])}`, "
             f"sacrebleu's paired bootstrap against `{data['baseline']}` ({data['bootstrap']['n_samples']} resamples, "
             f"seed {data['bootstrap']['seed']}). **Verdict**: {data['verdict_rule']}. Parameters, layers, widths "
             "and FLOPs are measured "
             f"on the trained models (one sentence per pair at a time, teacher-forced, `analysis/inference_cost.py`; "
             "CLSR's compute depends on the batch, and this is its cost at batch 1: docs/head_to_head.md).", ""]
    for name in list(DIRECTIONS) + [d for d in data["directions"] if d not in DIRECTIONS]:
        block = data["directions"].get(name)
        lines += [f"### {name.upper()}", ""]
        if block is None:
            left = [run for run in data.get("not_reported") or [] if run.startswith(name + "/")]
            lines += [f"Recorded but not reported (no seed that every recorded model of {name.upper()} has, or no "
                      f"baseline run): {', '.join(left)}." if left else "Not yet recorded.", ""]
            continue
        lines += _block_intro(block)
        lines += model_table({m: (entry["flags"], entry, entry["inference_cost"]["flops_ratio"])
                              for m, entry in block["models"].items()})
        lines += ["", _cost_sentence(block), "", comparison.comparison_markdown(block["comparison"])]
        if block.get("zero_shot"):
            lines += head_to_head_zero_shot.markdown(block["zero_shot"],
                                                     {m: e["label"] for m, e in block["models"].items()},
                                                     block["comparison"].get("off_target"))
    if figure_rel:
        lines += [f"![BLEU delta against the baseline per direction]({figure_rel})", ""]
    return "\n".join(lines).rstrip() + "\n" + END + "\n"


def _extra_flags(data: Dict) -> str:
    """`` with `FLAGS` after them``: the --train-flags the runs added to the head-to-head's settings."""
    own = list(TRAIN_FLAGS)
    extra = data["train_flags"][len(own):] if data["train_flags"][:len(own)] == own else []
    return f" with `{shlex.join(extra)}` after them" if extra else ""


def model_table(models: Dict[str, tuple]) -> List[str]:
    """Markdown rows of {name: (flags, profile, FLOPs ratios to the baseline's)} (profile:
    ``head_to_head_runs.profile``): parameters, the layers and widths one sentence runs, FLOPs
    against the baseline's (the range over seeds where they differ)."""
    lines = ["| model | flags | parameters total / per pair | layers enc+dec run | d_model / FFN / heads run | "
             "FLOPs/sentence vs baseline |", "|---|---|---:|---:|---:|---:|"]
    for name, (flags, prof, ratios) in models.items():
        one = next(iter(prof["inference"].values()))
        per_pair = sorted(set(prof["parameters"]["per_pair"].values()))
        pair = "-".join(sorted({f"{n / 1e6:.2f}" for n in (per_pair[0], per_pair[-1])}))
        widths = " / ".join(",".join(map(str, sorted(set(one["encoder"][k]) | set(one["decoder"][k]))))
                            for k in ("d_model", "ffn", "heads"))
        lines.append(f"| {name} | `{shlex.join(flags)}` | {prof['parameters']['total'] / 1e6:.2f}M / {pair}M | "
                     f"{one['encoder']['layers']}+{one['decoder']['layers']} | {widths} | {ratio_text(ratios)} |")
    return lines


def replace_section(text: str, start: str, end: str, section: str) -> str:
    """``text`` with the part between the markers replaced by ``section`` (appended when there is none)."""
    pattern = re.compile(re.escape(start) + ".*?" + re.escape(end) + "\n?", re.S)
    return pattern.sub(lambda _: section, text) if pattern.search(text) else text.rstrip() + "\n\n" + section


def write_section(path: str, section: str) -> None:
    """Replace the section between the markers in ``path`` (append it when there is none)."""
    write_files_atomic({path: _with_section(path, START, END, section)})


def _with_section(path: str, start: str, end: str, section: str) -> str:
    text = open(path, encoding="utf-8").read() if os.path.isfile(path) else ""
    return replace_section(text, start, end, section)


def _other_record(what: str, theirs: Optional[str], record_dir: Optional[str]) -> Optional[str]:
    """What a report output naming the record ``theirs`` holds when that is not ``record_dir`` (None: the same
    record, or either unknown)."""
    mine = record_path(record_dir) if record_dir is not None else None
    if theirs and mine and os.path.realpath(theirs) != os.path.realpath(mine):
        return f"the {what} of the record {theirs}, not of this one ({mine})"
    return None


def _json_held(record_dir: Optional[str]):
    """For ``check_writable(held=...)``: None for a results JSON of the report's of ``record_dir`` (any
    record's when None), else what the file is (another record's report is another record's)."""
    kind = held_unless(HEAD_TO_HEAD_JSON, "head-to-head")

    def held(path) -> Optional[str]:
        what = kind(path)
        if what is not None or record_dir is None:
            return what
        try:
            with open(path, encoding="utf-8") as f:
                theirs = (json.load(f).get("record") or {}).get("dir")
        except (OSError, ValueError, AttributeError):
            return None
        return _other_record("report", theirs, record_dir)
    return held


def _section_held(start: str, end: str, names_record: str, what: str, record_dir: Optional[str]):
    """For ``check_writable(held=...)``: what a markdown file holds when its section between the markers names
    another record than ``record_dir`` (``names_record``: the section's words before the record's `DIR/`)."""
    def held(path) -> Optional[str]:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:  # not readable: writing it is refused or fails as for any output
            return None
        section = re.search(re.escape(start) + ".*?" + re.escape(end), text, re.S)
        theirs = re.search(re.escape(names_record) + r" `([^`]+)/`", section.group(0)) if section else None
        return _other_record(what, theirs.group(1) if theirs else None, record_dir)
    return held


def check_outputs(out_json: str, out_md: Optional[str], figure: Optional[str], readme: Optional[str] = None,
                  record_dir: Optional[str] = None) -> None:
    """Refuse, before any training, a report path that cannot be written or is another of them, or a
    results JSON, figure, section or standings of another record than ``record_dir``'s."""
    check_writable(out_json, "--out-json", command="head-to-head", held=_json_held(record_dir))
    standings = head_to_head_standings.START, head_to_head_standings.END
    for flag, path, others, held in (  # a section of --out-md or --readme: the rest of the file is kept
            ("--out-md", out_md, [out_json], _section_held(START, END, "made from its record", "head-to-head section",
                                                           record_dir)),
            ("--figure", figure, [out_json, out_md], _figure_held(record_dir)),
            ("--readme", readme, [out_json, out_md, figure], _section_held(*standings, "from the runs recorded in",
                                                                           "method standings", record_dir))):
        if path:
            check_writable(path, flag, inputs=[p for p in others if p], command="head-to-head", held=held)


def report(record_dir: str, out_json: str, out_md: Optional[str] = None, figure: Optional[str] = None,
           readme: Optional[str] = None, stream=None, n_samples: int = significance.DEFAULT_SAMPLES) -> Dict:
    """Build the results of the record (``build``) and write the JSON, the markdown section, the
    figure and the README standings, all or none."""
    stream = stream or sys.stdout
    check_outputs(out_json, out_md, figure, readme, record_dir)
    data = build(record_dir, n_samples, stream)
    if not data["directions"]:
        print(f"no direction of {record_dir} has a recorded baseline yet: nothing to report", file=stream)
        return data
    outputs = {out_json: json_text(data)}
    rel = None
    if figure:
        outputs[figure] = _png_writer(draw(data), data["record"]["dir"])
        rel = os.path.relpath(figure, os.path.dirname(os.path.abspath(out_md)) if out_md else ".")
    if out_md:
        outputs[out_md] = _with_section(out_md, START, END, markdown(data, rel))
    if readme:
        outputs[readme] = _with_section(readme, head_to_head_standings.START, head_to_head_standings.END,
                                        head_to_head_standings.standings_markdown(data, readme, out_md))
    write_files_atomic(outputs)
    print("wrote " + ", ".join(outputs), file=stream)
    for name, block in data["directions"].items():
        print(f"\n### {name.upper()}\n" + comparison.comparison_markdown(block["comparison"]), file=stream)
    print(head_to_head_standings.standings_markdown(data), file=stream)
    return data
