"""The summary table of issue 18 at the top of docs/benchmarks.md, from benchmarks/results/*.json.

    python -m benchmarks.issue18_table   # prints the markdown rows

Each cell is B / A of the comparison's medians (wall clock) with the CPU-time ratio in brackets.
"""

import json
import os
import sys

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
METRICS = (("decode_single_tokens_per_s", "decode b1"), ("decode_batched_tokens_per_s", "decode b64"),
           ("train_updates_per_s", "train"))


def ratios(name):
    path = os.path.join(RESULTS, f"{name}.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        result = json.load(f)
    out = {}
    for key, label in METRICS:
        metric = result["metrics"].get(key)
        if metric:
            cpu = metric.get("cpu_time") or {}
            out[label] = (metric["ratio"], cpu.get("ratio"))
    out["load"] = result["machine"].get("loadavg_before", [None])[0], result["machine"].get("loadavg_after", [None])[0]
    return out


def cell(r, label):
    if r is None or label not in r:
        return "not run"
    wall, cpu = r[label]
    return f"{wall:.2f}" + (f" ({cpu:.2f})" if cpu is not None else "")


def main():
    for name in sys.argv[1:] or sorted(n[:-5] for n in os.listdir(RESULTS) if n.endswith(".json")):
        r = ratios(name)
        load = "" if r is None else f"{r['load'][0]:.1f} → {r['load'][1]:.1f}"
        print(f"| `{name}` | " + " | ".join(cell(r, label) for _, label in METRICS) + f" | {load} |")


if __name__ == "__main__":
    main()
