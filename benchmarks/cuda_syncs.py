"""Where a training step of each method waits for the GPU: ``torch.cuda.set_sync_debug_mode("warn")``
over 4 updates (after 2 warm-up updates), one process, each synchronisation counted at the source
line that caused it (docs/scale.md, "Measured on a GPU"). ``--device cpu`` counts, on the CPU, the
operations that would wait for a GPU (``benchmarks/device_waits.py``): the same lines, no timing.

    python -m benchmarks.cuda_syncs --out benchmarks/results/cuda-syncs-h200.json \
        --configs baseline,latent_depth,adaptive_sparse,lsl_search,clsr
    python -m benchmarks.cuda_syncs --device cpu --out benchmarks/results/device-waits-cpu.json

The trainers and batches are ``benchmarks.ddp_scaling``'s (128 sentences per update, ``_small``
presets).
"""

import argparse
import collections
import json
import tempfile
import time
import warnings

import torch

from . import data_parallel_steps as steps
from .ddp_scaling import CONFIGS, PAIRS, draw_batches, make_corpus, method_of
from .device_waits import device_waits, in_plugin, source_line

LANGS = "en,xx,yy,zz,ww"


def count(config: str, data: str, sentences: int, device: str = "cuda") -> dict:
    flags = steps.method_argv(method_of(config), "small") + CONFIGS[config] + [
        "--max-tokens", "100000", "--required-batch-size-multiple", "1"]
    argv = steps.fairseq_argv(data, LANGS, ",".join(PAIRS), flags, "pytorch_ddp", 1, 0, 100000, device=device)
    task, trainer, _ = steps.build(argv, "valid")
    samples = [[steps.collate(task, "valid", b[0])] for b in draw_batches(task, 6, 1, sentences, seed=1)]
    for sample in samples[:2]:
        trainer.train_step(sample)
    if device == "cpu":
        with device_waits() as sites:
            for sample in samples[2:]:
                trainer.train_step(sample)
        return {"waits_per_update": sum(sites.values()) / 4, "in_plugin_per_update": in_plugin(sites) / 4,
                "sites_per_update": {k: v / 4 for k, v in sites.most_common()}}
    torch.cuda.synchronize()
    sites = collections.Counter()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            start = time.perf_counter()
            for sample in samples[2:]:
                trainer.train_step(sample)
            torch.cuda.synchronize()
            seconds = (time.perf_counter() - start) / 4
    finally:
        torch.cuda.set_sync_debug_mode("default")
    for w in caught:
        if "synchroniz" in str(w.message):
            sites[source_line(w.filename, w.lineno)] += 1
    return {"syncs_per_update": sum(sites.values()) / 4, "ms_per_update_under_debug_mode": seconds * 1000,
            "sites_per_update": {k: v / 4 for k, v in sites.most_common()}}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--configs", default="baseline,latent_depth,adaptive_sparse,lsl_search,clsr")
    parser.add_argument("--sentences", type=int, default=128)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="cuda: the synchronisations torch reports; cpu: the operations that would wait for a GPU")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("needs a CUDA device (it counts the step's waits for the GPU); --device cpu counts them on the CPU")
    data = make_corpus(tempfile.mkdtemp(prefix="cuda-syncs-"), args.sentences)
    out = {config: count(config, data, args.sentences, args.device) for config in args.configs.split(",")}
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
    for config, row in out.items():
        unit = "syncs" if "syncs_per_update" in row else "waits"
        print(f"{config:24s} {row[unit + '_per_update']:5.1f} {unit}/update  " +
              ", ".join(f"{k} x{v:g}" for k, v in list(row["sites_per_update"].items())[:4]))


if __name__ == "__main__":
    main()
