"""The summary tables at the top of docs/benchmarks.md (each method against a dense model of its
active size), from the comparisons' results in benchmarks/results/NAME.json.

    python -m benchmarks.summary_tables            # the per-method summary and the inventory table
    python -m benchmarks.summary_tables --tag d512 # the per-method summary of the runs tagged d512
    python -m benchmarks.summary_tables --tag amd1 --tag amd2  # runs side by side ("run 1 / run 2")
    python -m benchmarks.summary_tables --pooled --tag amd1 --tag amd2  # their repetitions pooled
    python -m benchmarks.summary_tables --pooled NAME ... --tag amd1 ...  # a row per comparison, pooled
    python -m benchmarks.summary_tables NAME ...   # one row per comparison
    python -m benchmarks.summary_tables NAME ... --tag rerun1 --tag rerun2  # a row per comparison and run

A comparison's runs are stored in its one file, each under its tag (``benchmarks.report.store_run``;
untagged: the reference run); ``--tag TAG`` reads run TAG of NAME.json or, from before runs were
kept together, a file NAME-TAG.json.

Cells are B / A of the comparison's medians (B's speed over A's, wall clock) with the ratio timed
by CPU time in brackets; a target is met when the wall-clock ratio reaches it (with several
tags: in every run; the cells then show each run's wall-clock ratio). ``--pooled``: the median of
the per-repetition ratios of every run (A and B ran side by side in each repetition) with a 95%
bootstrap interval (a comparison run with only some of the tags: over those, its run count
shown); a target is met when the interval lies above it, missed when below, and within the noise
otherwise.
"""

import argparse
import os
import sys

import numpy as np

from .report import read_runs

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
METRICS = (("decode_single_tokens_per_s", "decode b1"), ("decode_batched_tokens_per_s", "decode b64"),
           ("train_updates_per_s", "train"))

# method, (comparison, metric) per column: b1, b64 one direction, b64 mixed, train; targets per column
METHODS = [
    ("LSL (`SRC={2,3} & TGT={5,6}`, 6+2 layers)",
     [("lsl-one-direction", "decode b1"), ("lsl-one-direction", "decode b64"), ("lsl-vs-baseline", "decode b64"),
      ("lsl-train-10-langs", "train")], [0.97, 0.97, 0.97, 0.90],
     "decode >= 0.97; train >= 0.90 with 10 languages in every batch"),
    ("CLSR (p = 0.3)",
     [("clsr-one-direction", "decode b1"), ("clsr-one-direction", "decode b64"), ("clsr-vs-baseline", "decode b64"),
      ("clsr-vs-baseline", "train")], [0.90, 0.90, 0.90, 1 / 1.15],
     "decode >= 0.90; step time <= 1.15x (speed >= 0.87)"),
    ("latent depth, pruned (top 3 of 6 decoder layers) vs static 3",
     [("latent-depth-pruned-vs-static", "decode b1"), ("latent-depth-pruned-vs-static", "decode b64"),
      ("latent-depth-pruned-vs-static-mixed", "decode b64"), None], [None, None, 0.90, None],
     "mixed b64 >= 0.90"),
    ("adaptive layer sparsity (3 of 6 decoder layers per target language) vs static 3",
     [None, None, ("adaptive-sparse-layers-vs-static-mixed", "decode b64"), None], [None, None, 0.90, None],
     "mixed b64 >= 0.90"),
    ("multi-decoder (tgt-family)",
     [("multidecoder-one-direction", "decode b1"), ("multidecoder-one-direction", "decode b64"),
      ("multidecoder-vs-baseline", "decode b64"), ("multidecoder-vs-baseline", "train")], [0.97, 0.97, 0.90, None],
     "one direction >= 0.97, mixed >= 0.90"),
]
SUMMARY_HEADER = ("| method | decode b1 | decode b64, one direction | decode b64, mixed targets | train | target | met |",
                  "|---|---:|---:|---:|---:|---|---|")
INVENTORY = [("LSL", "lsl"), ("CLSR", "clsr"), ("latent depth", "latent-depth"),
             ("adaptive sparsity", "adaptive-sparse"), ("multi-decoder", "multidecoder")]


def load(name, tag=""):
    """Run ``tag`` of comparison ``name`` ("": its untagged run), or None if it was not run."""
    for run in read_runs(os.path.join(RESULTS, f"{name}.json")):
        if run.get("tag", "") == tag:
            return run
    if tag:  # a file per run, as results were stored before a comparison's runs were kept together
        for run in read_runs(os.path.join(RESULTS, f"{name}-{tag}.json")):
            if run.get("tag", "") == "":
                return run
    return None


def _metric(name, label, tag=""):
    """The metric ``label`` of run ``tag`` of comparison ``name``, or None if it was not run."""
    result = load(name, tag)
    key = {lab: key for key, lab in METRICS}[label]
    return None if result is None else result["metrics"].get(key)


def ratio(name, label, tag=""):
    metric = _metric(name, label, tag)
    return None if metric is None else (metric["ratio"], (metric.get("cpu_time") or {}).get("ratio"))


def cell(value, target=None):
    if value is None:
        return "not run"
    wall, cpu = value
    text = f"{wall:.2f}" + (f" ({cpu:.2f})" if cpu is not None else "")
    return f"**{text}**" if target is not None and wall < target else text


def load_range(runs):
    """The range of the load averages before ``runs`` [(name, tag)] started."""
    loads = [x for n, t in runs if load(n, t) for x in (load(n, t)["machine"].get("loadavg_before") or [None])[:1]]
    return f"{min(loads):.1f}-{max(loads):.1f}" if loads else "-"


def runs_cell(values, target=None):
    """Several runs' wall-clock ratios, "0.91 / 0.88", bold when one is below ``target``."""
    if any(v is None for v in values):
        return "not run"
    text = " / ".join(f"{v[0]:.2f}" for v in values)
    return f"**{text}**" if target is not None and any(v[0] < target for v in values) else text


def summary(tags=("",)):
    """The per-method table of the comparisons' runs tagged ``tags`` ("": untagged); several tags:
    their runs side by side (a target is met when every run meets it)."""
    rows = list(SUMMARY_HEADER)
    for method, cells, targets, target_text in METHODS:
        runs = [[ratio(c[0], c[1], t) if c else None for c in cells] for t in tags]
        per_cell = list(zip(*runs))  # per column: one value per run
        checks = [v[0] >= t for values, t in zip(per_cell, targets) if t is not None for v in values if v is not None]
        missing = any(t is not None and v is None for values, t in zip(per_cell, targets) for v in values)
        met = "not run" if missing else ("yes" if all(checks) else "no")
        if len(tags) == 1:
            shown = [cell(values[0], t) if c else "-" for values, t, c in zip(per_cell, targets, cells)]
        else:
            shown = [runs_cell(values, t) if c else "-" for values, t, c in zip(per_cell, targets, cells)]
        rows.append(f"| {method} | " + " | ".join(shown) + f" | {target_text} | {met} |")
    return "\n".join(rows)


def paired_ratios(name, label, tag=""):
    """B / A of every repetition of a comparison's run (wall clock), or None if it was not run."""
    metric = _metric(name, label, tag)
    return None if metric is None else [b / a for a, b in zip(metric["A"]["values"], metric["B"]["values"])]


def median_interval(values, resamples=4000, seed=0):
    """The median and its 95% percentile-bootstrap interval."""
    rng = np.random.default_rng(seed)
    values = np.asarray(values, dtype=float)
    medians = np.median(rng.choice(values, size=(resamples, values.size)), axis=1)
    return float(np.median(values)), float(np.quantile(medians, 0.025)), float(np.quantile(medians, 0.975))


def pooled(tags):
    """The per-method table, each cell pooling the repetitions of the runs of ``tags`` that its
    comparison has (its run count shown where fewer than ``tags``)."""
    rows = list(SUMMARY_HEADER)
    for method, cells, targets, target_text in METHODS:
        shown, verdicts = [], []
        for c, target in zip(cells, targets):
            if c is None:
                shown.append("-")
                continue
            runs = [r for r in (paired_ratios(c[0], c[1], t) for t in tags) if r is not None]
            if not runs:
                shown.append("not run")
                if target is not None:
                    verdicts.append(None)
                continue
            mid, low, high = median_interval([x for r in runs for x in r])
            text = f"{mid:.2f} [{low:.2f}, {high:.2f}]" + (f", {len(runs)} runs" if len(runs) < len(tags) else "")
            if target is not None:
                verdicts.append("yes" if low >= target else "no" if high < target else "within noise")
                if low < target:
                    text = f"**{text}**"
            shown.append(text)
        met = ("not run" if None in verdicts else "no" if "no" in verdicts
               else "within noise" if "within noise" in verdicts else "yes")
        rows.append(f"| {method} | " + " | ".join(shown) + f" | {target_text} | {met} |")
    return "\n".join(rows)


def pooled_rows(names, tags):
    """One row per comparison: each metric pooled over those of ``tags`` it was run with."""
    rows = ["| comparison | runs | " + " | ".join(label for _, label in METRICS) + " |",
            "|---|---:|" + "---:|" * len(METRICS)]
    for name in names:
        ran = [t for t in tags if load(name, t) is not None]
        cells = []
        for _, label in METRICS:
            runs = [paired_ratios(name, label, t) for t in ran]
            values = [x for r in runs if r is not None for x in r]
            cells.append("%.2f [%.2f, %.2f]" % median_interval(values) if values else "-")
        rows.append(f"| `{name}` | {len(ran)} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def inventory():
    rows = ["| method | inventory | decode b1 | decode b64 | train | met (>= 1/1.10 = 0.91 each) |",
            "|---|---|---:|---:|---:|---|"]
    for method, prefix in INVENTORY:
        for size in (10, 100):
            name = f"{prefix}-inventory-2-vs-{size}"
            values = [ratio(name, label) for _, label in METRICS]
            met = "not run" if None in values else ("yes" if all(v[0] >= 1 / 1.10 for v in values) else "no")
            rows.append(f"| {method} | 2 vs {size} | " + " | ".join(cell(v, 1 / 1.10) for v in values) + f" | {met} |")
    return "\n".join(rows)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.summary_tables", description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="comparisons: one row each")
    parser.add_argument("--tag", action="append", default=[], help="the runs tagged TAG (repeat for several)")
    parser.add_argument("--pooled", action="store_true", help="pool the repetitions of the tagged runs")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    names = args.names
    if args.pooled:
        if not args.tag:
            parser.error("--pooled needs the runs to pool: --tag TAG (repeat for several)")
        print(pooled_rows(names, args.tag) if names else pooled(args.tag))
        return 0
    if not names:
        print(summary(tags=args.tag) if args.tag else summary() + "\n\n" + inventory())
        return 0
    for name in names:
        for tag in args.tag or [""]:
            label = f"`{name}`" + (f" ({tag})" if tag else "")
            print(f"| {label} | " + " | ".join(cell(ratio(name, metric, tag)) for _, metric in METRICS)
                  + f" | {load_range([(name, tag)])} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
