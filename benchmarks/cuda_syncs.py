"""Where a training step of each method waits for the GPU: ``torch.cuda.set_sync_debug_mode("warn")``
over 4 updates (after 2 warm-up updates), one process, each synchronisation counted at the source
line that caused it (docs/scale.md, "Measured on a GPU"). ``--device cpu`` counts, on the CPU, the
operations that would wait for a GPU (``benchmarks/device_waits.py``): the same lines, no timing.

    python -m benchmarks.cuda_syncs --out benchmarks/results/cuda-syncs-h200.json \
        --configs baseline,latent_depth,adaptive_sparse,lsl_search,clsr
    python -m benchmarks.cuda_syncs --device cpu --out benchmarks/results/device-waits-cpu.json
    python -m benchmarks.cuda_syncs --device cpu --decoding --out benchmarks/results/device-waits-cpu-decoding.json \
        --configs baseline,adapters,multistack,lsl_search,lsl_separate_decoder,clsr,latent_depth,adaptive_sparse

``--decoding`` counts each step of a beam search instead (``count_decoding``).

The trainers and batches are ``benchmarks.ddp_scaling``'s (128 sentences per update, ``_small``
presets).
"""

import argparse
import collections
import contextlib
import json
import tempfile
import time
import warnings

import torch

from . import data_parallel_steps as steps
from .ddp_scaling import CONFIGS, PAIRS, draw_batches, make_corpus, method_of
from .device_waits import device_waits, in_plugin, source_line

LANGS = "en,xx,yy,zz,ww"


@contextlib.contextmanager
def waits(device: str):
    """Per source line, what the block waits for: on cuda the synchronisations torch reports
    (``set_sync_debug_mode``), on cpu the operations that would wait (``device_waits``)."""
    if device == "cpu":
        with device_waits() as sites:
            yield sites
        return
    sites = collections.Counter()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield sites
            torch.cuda.synchronize()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    for w in caught:
        if "synchroniz" in str(w.message):
            sites[source_line(w.filename, w.lineno)] += 1


def per(sites: collections.Counter, n: int, unit: str, device: str) -> dict:
    """Counts per update or step (``unit``): "syncs" where the GPU reported them, "waits" on the CPU."""
    kind = "syncs" if device == "cuda" else "waits"
    return {f"{kind}_per_{unit}": sum(sites.values()) / n, f"in_plugin_per_{unit}": in_plugin(sites) / n,
            f"sites_per_{unit}": {k: v / n for k, v in sites.most_common()}}


def built(config: str, data: str, sentences: int, device: str):
    """The task and the trainer of ``config``, after two training updates (latent depth's commit and
    adaptive sparsity's T-bar are at update 1), and the four updates' samples that follow them."""
    flags = steps.method_argv(method_of(config), "small") + CONFIGS[config] + [
        "--max-tokens", "100000", "--required-batch-size-multiple", "1"]
    argv = steps.fairseq_argv(data, LANGS, ",".join(PAIRS), flags, "pytorch_ddp", 1, 0, 100000, device=device)
    task, trainer, cfg = steps.build(argv, "valid")
    samples = [[steps.collate(task, "valid", b[0])] for b in draw_batches(task, 6, 1, sentences, seed=1)]
    for sample in samples[:2]:
        trainer.train_step(sample)
    return task, trainer, cfg, samples[2:]


def count(config: str, data: str, sentences: int, device: str = "cuda") -> dict:
    """What each of 4 training updates waits for."""
    task, trainer, cfg, samples = built(config, data, sentences, device)
    start = time.perf_counter()
    with waits(device) as sites:
        for sample in samples:
            trainer.train_step(sample)
    row = per(sites, 4, "update", device)
    if device == "cuda":
        row["ms_per_update_under_debug_mode"] = (time.perf_counter() - start) / 4 * 1000
    return row


def count_decoding(config: str, data: str, sentences: int, device: str = "cuda") -> dict:
    """What each step of a beam search (beam 5, the trained model of ``count``) waits for, on 16
    sentences of one direction (how the task decodes a test set) and on 16 of every direction."""
    from fairseq import utils

    task, trainer, cfg, _ = built(config, data, sentences, device)
    model = trainer.model
    model.eval()
    generator = task.build_generator([model], cfg.generation)
    rows = steps.direction_rows(task, "valid")
    one = rows[PAIRS[0]]
    every = [i for group in zip(*rows.values()) for i in group]
    decoder_steps, forward = [], model.decoder.forward  # the generator calls forward itself: no hook runs

    def counted(*args, **kwargs):
        decoder_steps.append(1)
        return forward(*args, **kwargs)

    def sample_of(indices):
        sample = steps.collate(task, "valid", indices)
        return utils.move_to_cuda(sample) if device == "cuda" else sample

    out = {}
    model.decoder.forward = counted
    try:
        with torch.no_grad():
            task.inference_step(generator, [model], sample_of(one[16:32]))  # first-call set-up, not counted
            for name, indices in (("one direction", one[:16]), ("every direction", every[:16])):
                sample = sample_of(indices)  # a new batch, as each batch of a test set is
                decoder_steps.clear()
                with waits(device) as sites:
                    task.inference_step(generator, [model], sample)
                out[name] = {"decoder_steps": len(decoder_steps), **per(sites, len(decoder_steps), "step", device)}
    finally:
        model.decoder.forward = forward
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--configs", default="baseline,latent_depth,adaptive_sparse,lsl_search,clsr")
    parser.add_argument("--sentences", type=int, default=128)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="cuda: the synchronisations torch reports; cpu: the operations that would wait for a GPU")
    parser.add_argument("--decoding", action="store_true",
                        help="count each step of a beam search (per decoder step) instead of each training update")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("needs a CUDA device (it counts the step's waits for the GPU); --device cpu counts them on the CPU")
    data = make_corpus(tempfile.mkdtemp(prefix="cuda-syncs-"), args.sentences)
    counter = count_decoding if args.decoding else count
    out = {config: counter(config, data, args.sentences, args.device) for config in args.configs.split(",")}
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
    for config, result in out.items():
        for name, row in (result.items() if args.decoding else [("", result)]):
            unit, kind = "step" if args.decoding else "update", "syncs" if args.device == "cuda" else "waits"
            print(f"{config:24s} {name:16s} {row[kind + '_per_' + unit]:5.2f} {kind}/{unit} "
                  f"({row['in_plugin_per_' + unit]:.2f} the plugin's)  " +
                  ", ".join(f"{k} x{v:.2g}" for k, v in list(row["sites_per_" + unit].items())[:4]))


if __name__ == "__main__":
    main()
