"""Micro-measurements of the hot paths of issue 18 (Deliver 4), before/after a change: run this
file against two checkouts (``PYTHONPATH=CHECKOUT``) on the benchmark corpus, one thread.

    python -m benchmarks.hot_paths [--reps 5] [--out FILE.json]

Each line is the median CPU seconds of this process (one thread: less disturbed by other jobs on
a shared machine than the wall clock) of one operation over ``--reps`` timed rounds (after one
warm-up), with the numbers of the rounds:
* ``clsr_bank_fwd_bwd_88``: ``LanguageProjections`` forward + backward, 88 languages present
  (20 rows each, 6 tokens, d = 256): the per-language slice of the W^lang bank;
* ``clsr_train_step_aux``: ``auxiliary_outputs()`` after a training forward of
  ``clsr_transformer_small`` on a training batch (the budget's counts);
* ``decode_b1_<model>``: beam-4 decoding of 16 sentences one at a time, one direction (en-fr),
  forced to 20 tokens, for the models whose decoding paths changed.
"""

import argparse
import json
import statistics
import sys
import time

import torch

from .fairseq_steps import build_generator, decode_batch, parse_args
from .harness import Settings
from .run import read_corpus
from .run_baseline import SMALL, corpus_dir

MODELS = {
    "baseline": SMALL,
    "clsr": ["--arch", "clsr_transformer_small", "--share-all-embeddings", "--clsr-encoder-lang", "tgt",
             "--clsr-noise-ramp-updates", "1000"],
    "lsl_separate_decoder": ["--arch", "lsl_transformer_small", "--share-all-embeddings", "--lsl-separate-decoder"],
    "multidecoder": ["--arch", "langshare_multistack_transformer_small", "--share-all-embeddings",
                     "--multi-decoder", "tgt-family"],
}


def timed(fn, reps):
    fn()
    times = []
    for _ in range(reps):
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return statistics.median(times), times


def bank_fwd_bwd():
    from fairseq_langshare.modules.clsr import LanguageProjections

    torch.manual_seed(0)
    proj = LanguageProjections(88, 256)
    ids = torch.arange(88).repeat_interleave(20)
    h = torch.randn(6, ids.numel(), 256)

    def step():
        proj.zero_grad(set_to_none=True)
        proj(h, ids).sum().backward()
    return step


def build(flags):
    from fairseq import tasks

    data, langs, pairs = read_corpus(corpus_dir())
    s = Settings(name="hot", data=data, langs=langs, lang_pairs=pairs, a=flags, b=flags)
    args = parse_args(s.argv(flags, "/tmp/langshare-hot-paths"))
    task = tasks.setup_task(args)
    torch.manual_seed(1)
    return task, task.build_model(args), args


def decode_b1(flags, sentences=16):
    task, model, _ = build(flags)
    task.load_dataset("valid")
    ds = task.dataset("valid")
    picked = [i for i in range(len(ds)) if ds[i]["tgt_lang"] == "fr"][:sentences]
    batches = [ds.collater([ds[i]]) for i in picked]
    gen = build_generator(task, model, 4, 20)
    model.eval()
    return lambda: sum(decode_batch(task, gen, model, b) for b in batches)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.hot_paths", description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    results = {}
    results["clsr_bank_fwd_bwd_88"] = timed(bank_fwd_bwd(), args.reps)
    task_model = build(MODELS["clsr"])
    results["clsr_train_step_aux"] = timed(_aux_timer(*task_model), args.reps * 20)
    for name, flags in MODELS.items():
        results[f"decode_b1_{name}"] = timed(decode_b1(flags), args.reps)
    for name, (median, _) in results.items():
        print(f"{name}: {median * 1000:.2f} ms")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({k: {"median_s": m, "rounds_s": t} for k, (m, t) in results.items()}, f, indent=1)
    return 0


def _aux_timer(task, model, args):
    from fairseq import utils

    task.load_dataset("train")
    itr = task.get_batch_iterator(dataset=task.dataset("train"), max_tokens=2048, seed=1,
                                  max_positions=utils.resolve_max_positions(task.max_positions(), model.max_positions()))
    batch = next(iter(itr.next_epoch_itr(shuffle=True)))
    model.train()
    model.set_num_updates(500)
    with torch.no_grad():
        model(**batch["net_input"])
    recorded = {u: u._call["last"] for u in model.clsr_units()}

    def aux():
        for u, last in recorded.items():  # the same forward's gates every round
            u._call["last"] = last
        model.auxiliary_outputs()
    return aux


if __name__ == "__main__":
    sys.exit(main())
