"""The side-by-side table of experiments/latent_depth_side_by_side.sh: per implementation and seed,
the final validation NLL, the mean training words/s (fairseq's ``train_inner`` records) and BLEU
per direction (fairseq-generate's sacrebleu line), then the mean over seeds and the ratios.

    python experiments/latent_depth_side_by_side_table.py runs/latent_depth_sbs
"""

import glob
import json
import os
import re
import statistics
import sys

IMPLS = (("reference", "reference (fairseq examples/latent_depth)"), ("ours", "latent_depth_transformer"))


def records(log, kind):
    """The JSON records of a ``--log-format json --log-file`` log: ``train_inner`` (per-update
    averages: ``loss``, ``wps``, ...) or ``valid`` (``valid_loss``, ...)."""
    out = []
    with open(log, encoding="utf-8") as f:
        for line in f:
            start = line.find('{"')
            if start < 0:
                continue
            try:
                record = json.loads(line[start:])
            except ValueError:  # not a metrics record (e.g. a printed config)
                continue
            if (kind == "valid" and "valid_loss" in record) or (kind == "train_inner" and "wps" in record
                                                                 and "loss" in record):
                out.append(record)
    return out


def run_stats(out_dir, impl, seed):
    log = os.path.join(out_dir, f"{impl}_s{seed}.log")
    valid = records(log, "valid")
    inner = records(log, "train_inner")
    if not valid or not inner:
        raise ValueError(f"{log} has no validation or train_inner records: is the run finished?")
    bleu = {}
    for gen in sorted(glob.glob(os.path.join(out_dir, f"{impl}_s{seed}.*.gen"))):
        direction = gen.rsplit(".", 2)[-2]
        with open(gen, encoding="utf-8") as f:
            match = re.search(r"BLEU = ([\d.]+)", f.read().strip().splitlines()[-1])
        bleu[direction] = float(match.group(1)) if match else None
    return {"valid_nll_loss": float(valid[-1]["valid_nll_loss"]),
            "updates": int(float(valid[-1].get("valid_num_updates", 0))),
            "train_wps": statistics.mean(float(r["wps"]) for r in inner), "bleu": bleu}


def main(out_dir):
    seeds = sorted({int(m.group(1)) for p in glob.glob(os.path.join(out_dir, "*_s*.log"))
                    if (m := re.search(r"_s(\d+)\.log$", p))})
    stats = {impl: {s: run_stats(out_dir, impl, s) for s in seeds} for impl, _ in IMPLS}
    directions = sorted({d for impl in stats.values() for s in impl.values() for d in s["bleu"]})
    lines = ["| implementation | seed | valid NLL | train words/s | " + " | ".join(directions) + " | avg BLEU |",
             "|---|---|---|---|" + "---|" * (len(directions) + 1)]
    means = {}
    for impl, label in IMPLS:
        for seed in seeds:
            s = stats[impl][seed]
            scores = [s["bleu"].get(d) for d in directions]
            avg = statistics.mean(x for x in scores if x is not None)
            lines.append(f"| {label} | {seed} | {s['valid_nll_loss']:.3f} | {s['train_wps']:.0f} | "
                         + " | ".join("-" if x is None else f"{x:.2f}" for x in scores) + f" | {avg:.2f} |")
            means.setdefault(impl, []).append((s["valid_nll_loss"], s["train_wps"], avg))
    lines.append("")
    for impl, label in IMPLS:
        nll, wps, bleu = (statistics.mean(v[i] for v in means[impl]) for i in range(3))
        lines.append(f"* {label}: mean over seeds {seeds}: valid NLL {nll:.3f}, {wps:.0f} words/s, avg BLEU {bleu:.2f}")
    ours, ref = means["ours"], means["reference"]
    wps_ratio = statistics.mean(v[1] for v in ours) / statistics.mean(v[1] for v in ref)
    lines.append(f"* training words/s ratio (this package / reference): {wps_ratio:.3f}")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "runs/latent_depth_sbs"))
