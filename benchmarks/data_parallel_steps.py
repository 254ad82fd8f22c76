"""fairseq training steps of every method on one rank or several, in-process, on fixed batches.

Each process builds the task, the model and fairseq's ``Trainer`` from a ``fairseq-train`` argument
list (the parser and config ``fairseq-train`` uses), so the model is wrapped by the data-parallel
wrapper ``fairseq-train`` would use; its batches come from a fixed plan, one list of sentence
indices per rank and update. That makes two things possible:

* equality: N ranks with batch B each against one process given the N batches of each update as
  its micro-batches (``--update-freq N``); ``tests/test_data_parallel.py`` compares the parameters
  they reach.
* timing: 2 ranks against 1 rank, per method (``benchmarks/ddp_scaling.py``).

Run one process per rank with torchrun's variables (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``,
``MASTER_PORT``) set, or a single process without them::

    python -m benchmarks.data_parallel_steps --data BIN --langs en,xx,yy --lang-pairs en-xx,en-yy,xx-yy \\
        --runs baseline/pytorch_ddp,latent_depth/legacy_ddp/checkpoint --out result.pt

``--out`` (written by rank 0, or the single process) gets ``{(method, backend, variant): {"params":
state dict, "losses": [...], "num_updates": n, "wrapper": the DDP class, "find_unused": its flag}}``.
Random draws (Gumbel samples, gate noise) are seeded per update by fairseq, alike on every rank;
the single process reseeds before each micro-batch the same way, so its micro-batch i draws what
rank i draws.
"""

import argparse
import contextlib
import os
import sys
from typing import Dict, List, Sequence, Tuple

import torch

import fairseq_langshare

from .fairseq_steps import build_model, build_trainer, parse_args

PKG_DIR = os.path.dirname(os.path.abspath(fairseq_langshare.__file__))

# Every architecture ("{size}": a preset suffix, tiny or small), its phase switch at update SWITCH of the plan.
SWITCH = 3
METHODS: Dict[str, List[str]] = {
    "baseline": ["--arch", "langshare_transformer_{size}"],
    "adapters": ["--arch", "langshare_adapter_transformer_{size}", "--adapter-placement", "enc-dec"],
    "multistack": ["--arch", "langshare_multistack_transformer_{size}", "--multi-encoder", "src-lang",
                   "--multi-decoder", "tgt-lang"],
    "lsl_search": ["--arch", "lsl_transformer_{size}", "--lsl-search", "--lsl-decoder-layers", "TGT={2}"],
    "lsl_separate_decoder": ["--arch", "lsl_transformer_{size}", "--lsl-encoder-layers", "SRC={1} & TGT={2}",
                             "--lsl-separate-decoder"],
    "clsr": ["--arch", "clsr_transformer_{size}"],
    # the commit at SWITCH freezes a keep table from posteriors still near 1/2: decoder layers no
    # language keeps train no more (no rank uses them)
    "latent_depth": ["--arch", "latent_depth_transformer_{size}", "--latent-layers", "both",
                     "--latent-decoder-target-depth", "2", "--latent-commit-updates", str(SWITCH)],
    "adaptive_sparse": ["--arch", "adaptive_sparse_transformer_{size}", "--sparse-types", "attn,ffn,layer",
                        "--sparse-t-bar", str(SWITCH)],
}
BACKENDS = ("pytorch_ddp", "legacy_ddp")
TRAIN = ["--criterion", "langshare_label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--optimizer", "adam",
         "--lr", "0.003", "--dropout", "0.0", "--seed", "5", "--num-workers", "0"]


def method_argv(method: str, size: str) -> List[str]:
    return [flag.replace("{size}", size) for flag in METHODS[method]]


def fairseq_argv(data: str, langs: str, pairs: str, method_flags: Sequence[str], backend: str, world_size: int,
                 rank: int, max_update: int, extra: Sequence[str] = (), device: str = "cpu") -> List[str]:
    """fairseq-train's arguments for rank ``rank`` of ``world_size`` (on ``device``: cpu, or cuda:0)."""
    return [data, "--task", "multilingual_langshare", "--user-dir", PKG_DIR, "--langs", langs, "--lang-pairs", pairs,
            "--encoder-langtok", "tgt", *TRAIN, "--max-update", str(max_update), "--ddp-backend", backend,
            "--distributed-world-size", str(world_size), "--distributed-rank", str(rank), *method_flags, *extra,
            *(["--cpu"] if device == "cpu" else ["--device-id", "0"])]


def build(argv: Sequence[str], split: str):
    """Task (with ``split`` loaded), trainer, and the config, as fairseq-train builds them."""
    from fairseq import tasks

    args = parse_args(argv)
    task = tasks.setup_task(args)
    task.load_dataset(split, epoch=1)
    model, criterion = build_model(task, args, seed=args.seed)
    trainer = build_trainer(args, task, model, criterion)
    trainer.lr_step(0)  # the learning rate of update 0, as fairseq-train sets it before training
    return task, trainer, trainer.cfg


def direction_rows(task, split: str) -> Dict[str, List[int]]:
    """Sentence indices of ``split`` per direction (``en-xx`` -> [...]), in the concatenated dataset."""
    dataset = task.dataset(split)
    starts = [0] + list(dataset.cumulative_sizes[:-1])
    return {f"{part.src_lang}-{part.tgt_lang}": list(range(start, end))
            for part, start, end in zip(dataset.datasets, starts, dataset.cumulative_sizes)}


def equality_plan(task, split: str) -> List[List[List[int]]]:
    """Six updates of two ranks' index lists (4 sentences each) for the equality test. Update 2:
    rank 0 trains xx only, rank 1 yy only (each language's parameters used on one rank); update 3:
    both xx only (yy's target-side parameters used by no rank); update 4: a source language (xx-yy)
    only rank 0 has; the switch (latent commit, T-bar) comes before update 4."""
    rows = direction_rows(task, split)
    xx, yy, zz = rows["en-xx"], rows["en-yy"], rows.get("xx-yy", rows["en-yy"])
    return [
        [[xx[0], yy[0], xx[1], yy[1]], [yy[2], xx[2], yy[3], xx[3]]],
        [[xx[4], xx[5], xx[6], xx[7]], [yy[4], yy[5], yy[6], yy[7]]],
        [[xx[8], xx[9], xx[10], xx[11]], [xx[12], xx[13], xx[14], xx[15]]],
        [[zz[0], zz[1], xx[16], xx[17]], [yy[8], yy[9], yy[10], yy[11]]],
        [[xx[18], yy[12], zz[2], yy[13]], [yy[14], xx[19], yy[15], zz[3]]],
        [[yy[16], yy[17], yy[18], yy[19]], [zz[4], zz[5], zz[6], zz[7]]],
    ]


def collate(task, split: str, indices: Sequence[int]):
    dataset = task.dataset(split)
    return dataset.collater([dataset[i] for i in indices])


def reseed_each_micro_batch(task, trainer, cfg, per_rank: int = 1):
    """One process with several micro-batches per update: each rank's ``per_rank`` micro-batches draw
    the random numbers that rank draws (fairseq seeds every rank alike before its update:
    ``Trainer._set_seed``)."""
    from fairseq import utils

    step, calls = task.train_step, [0]

    def train_step(*args, **kwargs):
        if calls[0] % per_rank == 0:
            utils.set_torch_seed(cfg.common.seed + trainer.get_num_updates())
        calls[0] += 1
        return step(*args, **kwargs)

    task.train_step = train_step


@contextlib.contextmanager
def gradients_unsynchronised(trainer):
    """The broken all-reduce the equality test must catch: no gradient leaves its rank (fairseq's own
    check that every rank's gradient norm agrees is switched off, so training goes on)."""
    check = trainer._check_grad_norms
    trainer._check_grad_norms = lambda grad_norm: None
    try:
        with trainer.model.no_sync():
            yield
    finally:
        trainer._check_grad_norms = check


def run_plan(trainer, task, split, plan, rank: int, world_size: int, break_sync=False,
             per_rank: int = 1) -> List[float]:
    """One update per entry of ``plan``: rank ``rank``'s batch, or every rank's as micro-batches; each
    rank's batch split into ``per_rank`` micro-batches (``--update-freq``)."""
    losses = []
    for update in plan:
        batches = [update[rank]] if world_size > 1 else update
        samples = [collate(task, split, b[i::per_rank]) for b in batches for i in range(per_rank)]
        with gradients_unsynchronised(trainer) if break_sync else contextlib.nullcontext():
            log = trainer.train_step(samples)
        losses.append(float(log["loss"]) if log and "loss" in log else float("nan"))
    return losses


def init_distributed() -> Tuple[int, int]:
    """Rank and world size from torchrun's variables; a gloo group when there are several ranks."""
    world_size, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    if world_size > 1 and not torch.distributed.is_initialized():
        torch.distributed.init_process_group("gloo", init_method="env://", world_size=world_size, rank=rank)
    return rank, world_size


VARIANTS = {"plain": [], "checkpoint": ["--checkpoint-activations"], "broken": [], "first": [], "resume": [],
            "accumulate": []}
ACCUMULATE = 2  # micro-batches per rank and update in the "accumulate" variant
SAVE_AT = 4  # "first" trains the plan's first SAVE_AT updates and saves; "resume" loads that and trains the rest


def checkpoint_path(directory: str, method: str, backend: str, world_size: int) -> str:
    return os.path.join(directory, f"{method}-{backend}-ws{world_size}.pt")


def parse_runs(spec: str) -> List[tuple]:
    """``method/backend[/variant]`` items, comma-separated (variant: plain, checkpoint: with
    --checkpoint-activations, broken: gradients left unsynchronised, first: the first SAVE_AT updates,
    saved to --checkpoint-dir, resume: the rest, from the checkpoint the other world size saved,
    accumulate: each rank's batch split into ACCUMULATE micro-batches, --update-freq ACCUMULATE, and
    the one process's into as many, --update-freq 2 x ACCUMULATE);
    ``all``: every method with every backend, plain."""
    if spec == "all":
        return [(m, b, "plain") for m in METHODS for b in BACKENDS]
    runs = []
    for item in spec.split(","):
        method, backend, *variant = item.split("/")
        if method not in METHODS or backend not in BACKENDS or variant and variant[0] not in VARIANTS:
            raise ValueError(f"--runs item {item!r}: METHOD/BACKEND[/VARIANT] with a method of {sorted(METHODS)}, a "
                             f"backend of {BACKENDS} and a variant of {sorted(VARIANTS)}")
        runs.append((method, backend, variant[0] if variant else "plain"))
    return runs


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--langs", required=True)
    parser.add_argument("--lang-pairs", required=True)
    parser.add_argument("--split", default="valid", help="the split the plan's indices refer to")
    parser.add_argument("--runs", default="all", help="method/backend[/variant],... (see parse_runs)")
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--checkpoint-dir", default=None, help="where the first/resume variants save and load")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    rank, world_size = init_distributed()
    results = {}
    for method, backend, variant in parse_runs(args.runs):
        per_rank = ACCUMULATE if variant == "accumulate" else 1
        extra = VARIANTS[variant] + (["--update-freq", str(per_rank * (2 if world_size == 1 else 1))]
                                     if per_rank > 1 else [])
        argv_ = fairseq_argv(args.data, args.langs, args.lang_pairs, method_argv(method, args.size), backend,
                             world_size, rank, max_update=6, extra=extra)
        task, trainer, cfg = build(argv_, args.split)
        if world_size == 1:
            reseed_each_micro_batch(task, trainer, cfg, per_rank)
        plan = equality_plan(task, args.split)
        if variant == "resume":  # a world of the other size saved it (1 -> 2, 2 -> 1)
            trainer.load_checkpoint(checkpoint_path(args.checkpoint_dir, method, backend, 3 - world_size))
            plan = plan[trainer.get_num_updates():]
        elif variant == "first":
            plan = plan[:SAVE_AT]
        broken = variant == "broken" and world_size > 1
        losses = run_plan(trainer, task, args.split, plan, rank, world_size, break_sync=broken, per_rank=per_rank)
        if variant == "first":  # as fairseq's checkpoint_utils.save_checkpoint does
            trainer.consolidate_optimizer()
            trainer.save_checkpoint(checkpoint_path(args.checkpoint_dir, method, backend, world_size), {})
        state = {k: v.detach().clone() for k, v in trainer.get_model().state_dict().items()}
        wrapper = trainer.model.module if world_size > 1 else trainer.model  # under fairseq's ModuleProxyWrapper
        results[(method, backend, variant)] = {
            "params": state, "losses": losses, "num_updates": trainer.get_num_updates(),
            "wrapper": type(wrapper).__name__, "find_unused": getattr(wrapper, "find_unused_parameters", None)}
    if rank == 0:
        torch.save(results, args.out)
    return results


if __name__ == "__main__":
    sys.exit(main() and 0)
