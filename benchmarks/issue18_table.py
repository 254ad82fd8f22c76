"""The summary tables of issue 18 at the top of docs/benchmarks.md, from benchmarks/results/*.json.

    python -m benchmarks.issue18_table            # the per-method summary and the inventory table
    python -m benchmarks.issue18_table --tag d512 # the per-method summary of the runs tagged d512
    python -m benchmarks.issue18_table NAME ...   # one row per comparison

Cells are B / A of the comparison's medians (B's speed over A's, wall clock) with the ratio timed
by CPU time in brackets; a target is met when the wall-clock ratio reaches it.
"""

import json
import os
import sys

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
INVENTORY = [("LSL", "lsl"), ("CLSR", "clsr"), ("latent depth", "latent-depth"),
             ("adaptive sparsity", "adaptive-sparse"), ("multi-decoder", "multidecoder")]


def load(name):
    path = os.path.join(RESULTS, f"{name}.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def ratio(name, label):
    result = load(name)
    key = {lab: key for key, lab in METRICS}[label]
    if result is None or key not in result["metrics"]:
        return None
    metric = result["metrics"][key]
    return metric["ratio"], (metric.get("cpu_time") or {}).get("ratio")


def cell(value, target=None):
    if value is None:
        return "not run"
    wall, cpu = value
    text = f"{wall:.2f}" + (f" ({cpu:.2f})" if cpu is not None else "")
    return f"**{text}**" if target is not None and wall < target else text


def load_range(names):
    loads = [x for n in names if load(n) for x in (load(n)["machine"].get("loadavg_before") or [None])[:1]]
    return f"{min(loads):.1f}-{max(loads):.1f}" if loads else "-"


def summary(tag=""):
    """The per-method table; ``tag``: of the comparisons run with ``--tag TAG`` (NAME-TAG.json)."""
    rows = ["| method | decode b1 | decode b64, one direction | decode b64, mixed targets | train | target | met |",
            "|---|---:|---:|---:|---:|---|---|"]
    for method, cells, targets, target_text in METHODS:
        values = [ratio(f"{c[0]}-{tag}" if tag else c[0], c[1]) if c else None for c in cells]
        checks = [v[0] >= t for v, t in zip(values, targets) if t is not None and v is not None]
        missing = any(t is not None and v is None for v, t in zip(values, targets))
        met = "not run" if missing else ("yes" if all(checks) else "no")
        shown = [cell(v, t) if c else "-" for v, t, c in zip(values, targets, cells)]
        rows.append(f"| {method} | " + " | ".join(shown) + f" | {target_text} | {met} |")
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
    names = sys.argv[1:] if argv is None else argv
    if names[:1] == ["--tag"] and len(names) == 2:
        print(summary(names[1]))
        return 0
    if not names:
        print(summary() + "\n\n" + inventory())
        return 0
    for name in names:
        print(f"| `{name}` | " + " | ".join(cell(ratio(name, label)) for _, label in METRICS)
              + f" | {load_range([name])} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
