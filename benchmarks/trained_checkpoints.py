"""Decoding speed of two trained checkpoints on the same data, B / A, in one run.

    python -m benchmarks.trained_checkpoints --a BASELINE.pt --b METHOD.pt --data BIN_DIR --name NAME

The comparisons of ``run_methods`` build freshly initialised models: every cost that depends on
what a model learned (CLSR's gates: how many open, whether the beams of a sentence agree) is a
random-weight cost there. This runs two trained checkpoints (``langshare head-to-head`` writes
them, e.g. ``RUNS/m2o/baseline/seed1/checkpoint_best.pt`` and ``RUNS/m2o/clsr/seed1/...``) on a
seeded random set of ``--split`` sentences, as ``run_methods`` decodes: beam 4, every hypothesis
forced to the median reference length, one sentence at a time and in length-sorted batches of 64
(through the task's ``inference_step``, as ``fairseq-generate``), A and B alternating batch by
batch, one thread, CPU time. For a CLSR checkpoint it also records its decoder gates at batch 1:
the open share and how often the beams of a sentence all take the same projection. Writes
``benchmarks/results/NAME.json`` (``--results-dir``).
"""

import argparse
import json
import os
import statistics
import sys

import numpy as np
import torch

from .fairseq_steps import build_generator, decode_batch
from .harness import interleaved, resolve_decode_len

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def load(path, data):
    from fairseq import checkpoint_utils

    models, _, task = checkpoint_utils.load_model_ensemble_and_task([path], arg_overrides={"data": data})
    return models[0].eval(), task


def gate_agreement(model, task, generator, batches):
    """(open share, share of decoder unit-steps whose gates all agree) over ``batches``, or None."""
    from fairseq_langshare.modules.clsr import ClsrUnit

    units = [u for u in model.modules() if isinstance(u, ClsrUnit) and u.name.startswith("dec") and u.gate is not None]
    if not units:
        return None
    seen = []
    for u in units:
        u.collect = lambda name, g, ids, mask: seen.append((bool(g.all() or not g.any()), float(g.float().mean())))
    try:
        for batch in batches:
            decode_batch(task, generator, model, batch)
    finally:
        for u in units:
            u.collect = None
    return {"open_share": float(np.mean([s[1] for s in seen])), "all_beams_agree": float(np.mean([s[0] for s in seen])),
            "unit_steps": len(seen)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.trained_checkpoints", description=__doc__.split("\n\n")[0])
    parser.add_argument("--a", required=True, help="checkpoint A (the baseline)")
    parser.add_argument("--b", required=True, help="checkpoint B (the method)")
    parser.add_argument("--data", required=True, help="the binarized data both were trained on")
    parser.add_argument("--name", required=True, help="results/NAME.json")
    parser.add_argument("--split", default="test")
    parser.add_argument("--sentences", type=int, default=256, help="decoded in batches of 64")
    parser.add_argument("--single", type=int, default=24, help="of those, decoded one at a time")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--results-dir", default=RESULTS, help="where NAME.json goes (default benchmarks/results)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    import fairseq_langshare  # noqa: F401  (registers the models and the task)

    models, tasks = {}, {}
    for key, path in (("A", args.a), ("B", args.b)):
        models[key], tasks[key] = load(path, args.data)
    task = tasks["A"]
    task.load_dataset(args.split)
    ds = task.dataset(args.split)
    rng = np.random.RandomState(args.seed)
    picked = [int(i) for i in rng.choice(len(ds), min(args.sentences, len(ds)), replace=False)]
    single = [ds.collater([ds[i]]) for i in picked[:args.single]]
    ordered = sorted(picked, key=lambda i: (int(ds.num_tokens(i)), i))
    batched = [ds.collater([ds[i] for i in ordered[k:k + 64]]) for k in range(0, len(ordered), 64)]
    decode_len = resolve_decode_len("auto", [int(ds.size(i)[1]) for i in picked])
    generators = {k: build_generator(tasks[k], models[k], 4, decode_len) for k in models}
    result = {"name": args.name, "a": args.a, "b": args.b, "data": args.data, "split": args.split,
              "sentences": len(picked), "single": len(single), "decode_len": decode_len, "reps": args.reps,
              "loadavg_before": os.getloadavg()[0], "metrics": {}}
    result["gates_b1"] = gate_agreement(models["B"], tasks["B"], generators["B"], single[:8])
    for metric, batches in (("decode_single_tokens_per_s", single), ("decode_batched_tokens_per_s", batched)):
        step = lambda k, b: decode_batch(tasks[k], generators[k], models[k], b)  # noqa: E731
        interleaved(batches[:2], step)  # warm-up
        speeds = {"A": [], "B": []}
        for _ in range(args.reps):
            _, cpu, tokens = interleaved(batches, step)
            for k in speeds:
                speeds[k].append(sum(tokens[k]) / cpu[k])
        medians = {k: statistics.median(v) for k, v in speeds.items()}
        result["metrics"][metric] = {"A": medians["A"], "B": medians["B"], "ratio": medians["B"] / medians["A"],
                                     "clock": "cpu", "values": speeds}
        print(f"{metric}: A {medians['A']:.0f} B {medians['B']:.0f} tokens/s (CPU time), B / A {medians['B'] / medians['A']:.3f}")
    result["loadavg_after"] = os.getloadavg()[0]
    with open(os.path.join(args.results_dir, f"{args.name}.json"), "w") as f:
        json.dump(result, f, indent=1)
    if result["gates_b1"]:
        print("decoder gates at batch 1:", result["gates_b1"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
