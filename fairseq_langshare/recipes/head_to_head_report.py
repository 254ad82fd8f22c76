"""The head-to-head's outputs from its evaluated runs: the results JSON (per model: flags,
parameters, measured inference cost, per-seed scores, seed means, win ratio, pooled p-values), a
markdown section (rewritten in place between its markers) and one figure (per-direction BLEU
delta against the baseline, one marker per method, error bars over seeds)."""

import datetime
import os
import re
import shlex
import sys
from typing import Dict, List, Optional

from .. import comparison
from ..atomic_files import check_writable, save_figure_atomic, write_json_atomic, write_text_atomic
from ..evaluation import _read_json
from .head_to_head_runs import EVALUATE_FLAGS, TRAIN_FLAGS, Run, equal_cost_problems, profile
from .head_to_head_models import BASELINE, DIRECTIONS

START, END = "<!-- head-to-head: start (written by `langshare head-to-head`) -->", "<!-- head-to-head: end -->"
METRICS = ("bleu", "chrf")
MARKERS = "osD^vP*Xh"


def collect(runs: List[Run], stream=None) -> Dict[str, Dict[str, List[Run]]]:
    """{direction: {model: [evaluated runs, by seed]}} on the seeds every model of the direction has
    evaluated (the comparison pairs seed k with seed k); only directions with a baseline."""
    out = {}
    for r in sorted(runs, key=lambda r: r.seed):
        if r.evaluated:
            out.setdefault(r.direction, {}).setdefault(r.model.name, []).append(r)
    for direction, models in out.items():
        common = set.intersection(*({r.seed for r in seeds} for seeds in models.values()))
        left_out = [r.name for seeds in models.values() for r in seeds if r.seed not in common]
        if left_out and stream is not None:
            print(f"not reported (not every model has that seed evaluated yet): {', '.join(left_out)}", file=stream)
        out[direction] = {m: [r for r in seeds if r.seed in common] for m, seeds in models.items()}
    return {d: models for d, models in out.items() if BASELINE in models and models[BASELINE]}


def _model_entry(name, seeds, cmp, prof):
    model = seeds[0].model
    system = cmp["systems"][name]
    sig = system.get("significance") or {}
    pooled = sig.get("pooled") or {}
    return {
        "label": model.label, "arch": model.arch, "flags": list(model.argv(seeds[0].direction)),
        "reason": model.reason_for(seeds[0].direction), "extra_compute": model.extra_compute or None,
        "parameters": prof["parameters"], "inference": prof["inference"],
        "runs": {str(r.seed): r.dir for r in seeds},
        "seeds": {str(r.seed): {m: {d: row.get(m) for d, row in _read_json(r.results, "results")["directions"].items()}
                                for m in METRICS} for r in seeds},
        "means": {"directions": system["directions"], "groups": system["averages"]},
        "win_ratio": system.get("win_ratio"),
        "pooled_p_value": {m: pooled[m]["seeds_concatenated"]["p_value"] for m in METRICS if m in pooled} or None,
        "pooled_p_value_per_seed": {m: [t["p_value"] for t in pooled[m]["per_seed"]] for m in METRICS
                                    if m in pooled} or None,
    }


def build(runs: List[Run], n_samples: int = 1000, stream=None) -> Dict:
    """The results JSON of every evaluated run."""
    stream = stream or sys.stdout
    data = {"generated": datetime.date.today().isoformat(), "updates": runs[0].updates,
            "seeds": sorted({r.seed for r in runs}), "train_flags": list(TRAIN_FLAGS) + list(runs[0].train_flags),
            "evaluate_flags": list(EVALUATE_FLAGS), "baseline": BASELINE, "directions": {}}
    for direction, models in collect(runs, stream).items():
        named = [(name, _read_json(r.results, "results")) for name, seeds in models.items() for r in seeds]
        cmp = comparison.compare(named, baseline=BASELINE, metrics=METRICS, n_samples=n_samples)
        # parameters and inference cost measured on the trained models (first seed)
        profiles = {name: profile(seeds[0], checkpoint=seeds[0].checkpoint) for name, seeds in models.items()}
        problems = equal_cost_problems(profiles)
        for problem in problems:
            print(f"WARNING: unequal inference cost of a trained model: {problem}", file=stream)
        first = next(iter(models.values()))[0]
        data["directions"][direction] = {
            "generated": data["generated"], "corpus": first.corpus.path, "seeds": [r.seed for r in models[BASELINE]],
            "directions": cmp["directions"],
            "equal_inference_cost": not problems, "inference_cost_problems": problems,
            "models": {name: _model_entry(name, seeds, cmp, profiles[name]) for name, seeds in models.items()},
            "comparison": cmp,
        }
    return data


def keep_other_directions(data: Dict, previous: Dict, stream=None) -> Dict:
    """``data`` plus the blocks of ``previous`` (the results JSON already written) for directions
    ``data`` has no runs of, e.g. O2M reported last week when M2O is run today on another machine.
    Kept only when trained and evaluated with the same settings; otherwise left out, with a warning."""
    stream = stream or sys.stdout
    same = all(previous.get(k) == data[k] for k in ("updates", "train_flags", "evaluate_flags", "baseline"))
    directions = dict(data["directions"])
    for direction, block in previous.get("directions", {}).items():
        if direction in directions:
            continue
        if not same:
            print(f"WARNING: the {direction} block of the previous results was left out: it was trained or evaluated "
                  f"with other settings (updates, flags or baseline) than this run", file=stream)
            continue
        directions[direction] = {"generated": previous.get("generated"), **block}
    ordered = {d: directions[d] for d in DIRECTIONS if d in directions}  # the only ones plan() accepts
    return dict(data, directions=ordered,
                seeds=sorted({s for block in ordered.values() for s in block["seeds"]}))


# ----------------------------------------------------------------------------- figure
def seed_deltas(entry: Dict, baseline: Dict, direction: str, metric: str = "bleu") -> List[float]:
    """The model's score minus the baseline's on the same seed, for every seed both have."""
    return [entry["seeds"][s][metric][direction] - baseline["seeds"][s][metric][direction]
            for s in entry["seeds"] if s in baseline["seeds"]
            and entry["seeds"][s][metric].get(direction) is not None
            and baseline["seeds"][s][metric].get(direction) is not None]


def draw(data: Dict, path: str, metric: str = "bleu"):
    """Per direction, every method's delta against the baseline: mean over seed pairs, error bar
    one standard deviation over them; one panel per translation direction set."""
    import statistics

    from ..analysis.figures import new_figure

    sets = list(data["directions"])
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
            ax.errorbar(xs, ys, yerr=errs, fmt=MARKERS[k % len(MARKERS)], capsize=2, markersize=5,
                        label=block["models"][method]["label"])
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
    save_figure_atomic(fig, path)
    return path


def _thousands(n):
    if not n:
        return "-"
    return f"{n / 1000:.0f}k" if n >= 10000 else f"{n / 1000:.1f}k" if n >= 1000 else str(n)


# ----------------------------------------------------------------------------- markdown
def markdown(data: Dict, figure_rel: str = None) -> str:
    lines = [START, f"## Head-to-head: every sharing strategy at equal inference cost ({data['generated']})", "",
             f"`langshare head-to-head` (docs/head_to_head.md): {data['updates']} updates per run, "
             f"the training settings of `scripts/quality_lib.sh`{_extra_flags(data)}, "
             f"`langshare evaluate {' '.join(data['evaluate_flags'])}`, "
             f"paired bootstrap against the baseline with sacrebleu. Parameters and inference cost are measured on the "
             f"trained models (one sentence per pair, `analysis/inference_cost.py`).", ""]
    for name, block in data["directions"].items():
        lines += [f"### {name.upper()}", "", f"Seeds {', '.join(map(str, block['seeds']))}; reported "
                  f"{block.get('generated') or data['generated']}.", ""]
        lines += model_table({m: (entry["flags"], entry) for m, entry in block["models"].items()})
        if not block["equal_inference_cost"]:
            lines += ["", "**Unequal inference cost:** " + "; ".join(block["inference_cost_problems"])]
        lines += ["", comparison.comparison_markdown(block["comparison"])]
    if figure_rel:
        lines += [f"![BLEU delta against the baseline per direction]({figure_rel})", ""]
    return "\n".join(lines).rstrip() + "\n" + END + "\n"


def _extra_flags(data: Dict) -> str:
    """`` with `FLAGS` after them``: the --train-flags the runs added to the head-to-head's settings."""
    own = list(TRAIN_FLAGS)
    extra = data["train_flags"][len(own):] if data["train_flags"][:len(own)] == own else []
    return f" with `{shlex.join(extra)}` after them" if extra else ""


def model_table(models: Dict[str, tuple]) -> List[str]:
    """Markdown rows of {name: (flags, profile)} (``head_to_head_runs.profile``): parameters, the
    layers and widths one sentence runs, FLOPs against the baseline's."""
    def flops(prof):
        values = [p["flops"] for p in prof["inference"].values()]
        return sum(values) / len(values)

    base = flops(models[BASELINE][1])
    lines = ["| model | flags | parameters total / per pair | layers enc+dec run | d_model / FFN / heads run | "
             "FLOPs/sentence vs baseline |", "|---|---|---:|---:|---:|---:|"]
    for name, (flags, prof) in models.items():
        one = next(iter(prof["inference"].values()))
        per_pair = sorted(set(prof["parameters"]["per_pair"].values()))
        pair = "-".join(sorted({f"{n / 1e6:.2f}" for n in (per_pair[0], per_pair[-1])}))
        widths = " / ".join(",".join(map(str, sorted(set(one["encoder"][k]) | set(one["decoder"][k]))))
                            for k in ("d_model", "ffn", "heads"))
        lines.append(f"| {name} | `{shlex.join(flags)}` | {prof['parameters']['total'] / 1e6:.2f}M / {pair}M | "
                     f"{one['encoder']['layers']}+{one['decoder']['layers']} | {widths} | x{flops(prof) / base:.2f} |")
    return lines


def write_section(path: str, section: str) -> None:
    """Replace the section between the markers in ``path`` (append it when there is none)."""
    text = open(path, encoding="utf-8").read() if os.path.isfile(path) else ""
    pattern = re.compile(re.escape(START) + ".*?" + re.escape(END) + "\n?", re.S)
    text = pattern.sub(lambda _: section, text) if pattern.search(text) else text.rstrip() + "\n\n" + section
    write_text_atomic(path, text)


def check_outputs(out_json: str, out_md: Optional[str], figure: Optional[str]) -> None:
    """Refuse, before any training, a report path that cannot be written or is another of them."""
    check_writable(out_json, "--out-json")
    for flag, path, others in (("--out-md", out_md, [out_json]), ("--figure", figure, [out_json, out_md])):
        if path:
            check_writable(path, flag, inputs=others)


def report(runs: List[Run], out_json: str, out_md: str, figure: str, stream=None, n_samples: int = 1000) -> Dict:
    stream = stream or sys.stdout
    check_outputs(out_json, out_md, figure)
    data = build(runs, n_samples, stream)
    if not data["directions"]:
        print("no direction has an evaluated baseline yet: nothing to report", file=stream)
        return data
    if os.path.isfile(out_json):
        data = keep_other_directions(data, _read_json(out_json, "results"), stream)
    write_json_atomic(out_json, data)
    rel = None
    if figure:
        draw(data, figure)
        rel = os.path.relpath(figure, os.path.dirname(os.path.abspath(out_md)) if out_md else ".")
    if out_md:
        write_section(out_md, markdown(data, rel))
    print(f"wrote {out_json}" + (f", {figure}" if figure else "") + (f" and the section in {out_md}" if out_md else ""),
          file=stream)
    for name, block in data["directions"].items():
        print(f"\n### {name.upper()}\n" + comparison.comparison_markdown(block["comparison"]), file=stream)
    return data


# ----------------------------------------------------------------------------- demo helpers
def print_examples(runs: List[Run], n: int, stream=None) -> None:
    """The first ``n`` test sentences of the largest, a middle and the smallest direction: source,
    reference and every model's translation (first seed)."""
    stream = stream or sys.stdout
    for direction, models in collect(runs).items():
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


def analyze(runs: List[Run], stream=None) -> List[Run]:
    """Each method's ``langshare analyze`` (its table entry) on its first seed, into <run>/analysis/."""
    import argparse

    from .. import analysis

    parser = argparse.ArgumentParser(prog="langshare")
    analysis.add_subcommand(parser.add_subparsers(dest="command"))
    done = []
    for models in collect(runs).values():
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
