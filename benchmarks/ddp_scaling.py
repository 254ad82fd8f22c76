"""Scaling efficiency of data-parallel training, per method, against the baseline's in the same run.

Two processes (2 gloo ranks) build, for every method, fairseq's trainer as ``fairseq-train`` does
(``benchmarks/data_parallel_steps.py``): one on 2 ranks and, on rank 0, one on 1 rank (no DDP).
A repetition times, for each method in turn, K updates of the 1-rank trainer on batch B (rank 1
waits at a barrier) and then K updates of the 2-rank trainer on batch B per rank, so methods and
world sizes are interleaved. Efficiency = t(1 rank) / t(2 ranks) per update (1: two ranks process
twice the sentences in the time one takes); the target is every method within 5% of the
baseline's. ``baseline_find_unused`` is the baseline with ``--find-unused-parameters``: the cost
of DDP's search for unused parameters alone. Batches mix every direction, drawn per rank and
update; the phase switches (latent depth's commit, adaptive sparsity's T-bar) are at update 1,
so the timed updates are in the phase most of a run trains in. ``METHOD_search_off`` (e.g.
``multistack_search_off``, not in the default list) builds the method's DDP without the
``find_unused_parameters`` the plugin turns on: what the search costs it. Only a diagnostic, which
holds because every batch here mixes every direction.

    python -m benchmarks.ddp_scaling --out benchmarks/results/ddp-scaling-cpu.json          # CPU
    python -m benchmarks.ddp_scaling --device cuda --out ddp-scaling-gpu.json              # both ranks on GPU 0
    python -m benchmarks.ddp_scaling --configs baseline,latent_depth --profile DIR ...     # + operator tables

On one GPU both ranks share the device (NCCL refuses two ranks on one GPU, so gloo carries the
all-reduce through host memory): the 2-rank time then includes the two ranks' contention for the
GPU, and only the ratios of the methods' efficiencies to the baseline's compare like with like.
"""

import argparse
import contextlib
import datetime
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Tuple

import torch

from . import data_parallel_steps as steps
from .summary_tables import median_interval
from .report import machine

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAIRS = ("en-xx", "en-yy", "en-zz", "en-ww")  # O2M, 4 target languages
CONFIGS: Dict[str, List[str]] = {
    "baseline": [],
    "baseline_find_unused": ["--find-unused-parameters"],
    "adapters": [], "multistack": [], "lsl_search": [], "lsl_separate_decoder": [], "clsr": [],
    "latent_depth": ["--latent-commit-updates", "1"],
    "adaptive_sparse": ["--sparse-t-bar", "1"],
}
SEARCH_OFF = "_search_off"  # a method's configuration with DDP's search for unused parameters off (diagnostic)


def base_config(config: str) -> str:
    """The configuration ``config`` is a diagnostic variant of (itself for one of CONFIGS)."""
    return config[:-len(SEARCH_OFF)] if config.endswith(SEARCH_OFF) else config


def method_of(config: str) -> str:
    config = base_config(config)
    return "baseline" if config.startswith("baseline") else config


def flags_of(config: str) -> List[str]:
    return CONFIGS[base_config(config)]


@contextlib.contextmanager
def search_off(config: str):
    """For ``METHOD_search_off``: DDP built without the plugin's ``find_unused_parameters``, what the
    search costs the method. Only a diagnostic: it holds here because every batch of this benchmark
    mixes every direction, so a step uses every parameter that is not idle; a batch without one of
    a method's languages would stop a run so built."""
    if not config.endswith(SEARCH_OFF):
        yield
        return
    from fairseq_langshare import data_parallel

    before, data_parallel.leaves_parameters_unused = data_parallel.leaves_parameters_unused, lambda model: False
    try:
        yield
    finally:
        data_parallel.leaves_parameters_unused = before


def make_corpus(root: str, sentences: int) -> str:
    """A synthetic O2M corpus (tests/tiny_corpus.py's toy languages), ``sentences`` per direction in
    its valid split, which the batches are drawn from; returns the binarized directory."""
    sys.path.insert(0, os.path.join(REPO_ROOT, "tests"))
    from tiny_corpus import make_corpus as build

    return str(build(__import__("pathlib").Path(root), pairs=PAIRS, n_train=64, n_test=sentences)["bin"])


def draw_batches(task, updates: int, world_size: int, sentences: int, seed: int):
    """``updates`` lists of ``world_size`` index lists: every direction mixed, drawn per rank."""
    rows = [i for direction in steps.direction_rows(task, "valid").values() for i in direction]
    rng = random.Random(seed)
    return [[rng.sample(rows, sentences) for _ in range(world_size)] for _ in range(updates)]


def timed(trainer, samples_per_update, device) -> Tuple[float, float]:
    """Wall and CPU seconds per update over the updates given."""
    if device == "cuda":
        torch.cuda.synchronize()
    wall, cpu = time.perf_counter(), time.process_time()
    for samples in samples_per_update:
        trainer.train_step(samples)
    if device == "cuda":
        torch.cuda.synchronize()
    n = len(samples_per_update)
    return (time.perf_counter() - wall) / n, (time.process_time() - cpu) / n


def rank_main(args):
    torch.set_num_threads(args.threads)
    rank, world_size = steps.init_distributed()
    barrier = torch.distributed.barrier
    configs = args.configs.split(",")
    built, params = {}, {}
    for config in configs:
        flags = steps.method_argv(method_of(config), args.size) + flags_of(config) + [
            "--max-tokens", "100000", "--required-batch-size-multiple", "1"] + args.fairseq_args.split()

        def argv(world_size, rank_):
            return steps.fairseq_argv(args.data, args.langs, ",".join(PAIRS), flags, args.backend, world_size, rank_,
                                      max_update=100000, device=args.device)

        with search_off(config):  # the trainer wraps its model in DDP as it is built
            two = steps.build(argv(2, rank), "valid")
        one = steps.build(argv(1, 0), "valid") if rank == 0 or args.together else None
        task = two[0]
        batches = draw_batches(task, args.updates, 2, args.sentences, seed=args.seed)
        collate = lambda rows: steps.collate(task, "valid", rows)  # noqa: E731
        model = two[1].get_model()
        params[config] = {"total": sum(p.numel() for p in model.parameters()),
                          "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
                          "find_unused_parameters": getattr(two[1].model.module, "find_unused_parameters", None)}
        built[config] = {"one": one and one[1], "two": two[1],
                         "batches_one": [[collate(b[0])] for b in batches],
                         "batches_two": [[collate(b[rank])] for b in batches]}
    kinds = ("t1", "t2", "cpu1", "cpu2") + (("t1together", "cpu1together") if args.together else ())
    results = {c: {k: [] for k in kinds} for c in configs}
    for rep in range(args.warmup + args.reps):
        for config in configs:
            entry = built[config]
            if rank == 0:
                t1 = timed(entry["one"], entry["batches_one"], args.device)
            barrier()
            if args.together:  # both processes, each its own 1-rank trainer and batches: no DDP
                together = timed(entry["one"], entry["batches_one" if rank == 0 else "batches_two"], args.device)
                barrier()
                if rep >= args.warmup and rank == 0:
                    results[config]["t1together"].append(together[0])
                    results[config]["cpu1together"].append(together[1])
            t2 = timed(entry["two"], entry["batches_two"], args.device)
            barrier()
            if rep >= args.warmup and rank == 0:
                results[config]["t1"].append(t1[0])
                results[config]["cpu1"].append(t1[1])
                results[config]["t2"].append(t2[0])
                results[config]["cpu2"].append(t2[1])
    if rank == 0:
        write(args, results, params)
    if args.profile:
        profile_steps(args, built, configs, rank, barrier)


def profile_steps(args, built, configs, rank, barrier):
    """``torch.profiler`` over one repetition's updates of each configuration, on 1 rank and then on 2:
    each rank writes its operators by self CPU time (on a GPU also by self CUDA time) to
    ``PROFILE/CONFIG-1rank.txt`` and ``-2ranks.txt`` (rank 1: ``-2ranks-rank1.txt``): where a method's
    2-rank step spends host time, and whether one rank waits for the other."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device == "cuda" else [])
    sorts = ["self_cpu_time_total"] + (["self_cuda_time_total"] if args.device == "cuda" else [])
    os.makedirs(args.profile, exist_ok=True)
    for config in configs:
        entry = built[config]
        for name, trainer, batches in (("1rank", entry["one"], entry["batches_one"]),
                                       ("2ranks", entry["two"], entry["batches_two"])):
            if rank == 0 or name == "2ranks":
                with profile(activities=activities) as prof:
                    timed(trainer, batches, args.device)
                tables = [f"# {config}, {name}, rank {rank}, {len(batches)} updates, sorted by {key}\n"
                          + prof.key_averages().table(sort_by=key, row_limit=40) for key in sorts]
                suffix = "" if rank == 0 else f"-rank{rank}"
                with open(os.path.join(args.profile, f"{config}-{name}{suffix}.txt"), "w") as f:
                    f.write("\n".join(tables))
            barrier()


def summary(results) -> Dict[str, dict]:
    """Per configuration: the efficiency t(1 rank) / t(2 ranks) per update, wall clock and rank 0's
    CPU time, and its ratio to the baseline's of the same repetition (medians, 95% bootstrap)."""
    def ratios(r, num, den):
        return [a / b for a, b in zip(r[num], r[den])]

    out = {}
    for config, r in results.items():
        together = bool(r.get("t1together"))
        row = {f"{t}_ms": 1000 * float(torch.tensor(r[t]).median())
               for t in ("t1", "t2") + (("t1together",) if together else ())}
        parts = [("t1", "t2", "efficiency"), ("cpu1", "cpu2", "cpu_efficiency")] + (
            [("t1", "t1together", "sharing_efficiency"), ("t1together", "t2", "ddp_efficiency")] if together else [])
        for num, den, name in parts:
            mine = ratios(r, num, den)
            row[name] = median_interval(mine)
            if "baseline" in results:  # repetition by repetition: the baseline ran in the same repetition
                base = ratios(results["baseline"], num, den)
                row[name.replace("efficiency", "vs_baseline")] = median_interval([e / b for e, b in zip(mine, base)])
        out[config] = row
    return out


def write(args, results, params):
    doc = {"name": "ddp-scaling", "date": datetime.date.today().isoformat(), "machine": machine(args.threads),
           "device": args.device, "gpu": torch.cuda.get_device_name(0) if args.device == "cuda" else None,
           "backend": args.backend, "fairseq_args": args.fairseq_args, "size": args.size,
           "sentences_per_rank_and_update": args.sentences,
           "updates_per_repetition": args.updates, "reps": args.reps, "warmup": args.warmup,
           "load_average_at_start": args.load, "load_average_at_end": list(os.getloadavg()),
           "summary": summary(results), "params": params, "raw": results}
    with open(args.out + ".tmp", "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(args.out + ".tmp", args.out)


def launch(args):
    """Start the two ranks (the variables torchrun sets) and wait for them."""
    with tempfile.TemporaryDirectory() as tmp:
        if args.data is None:
            args.data, args.langs = make_corpus(tmp, args.corpus_sentences), ",".join(
                sorted({l for p in PAIRS for l in p.split("-")}))
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "2",
               "OMP_NUM_THREADS": str(args.threads),
               "PYTHONPATH": os.pathsep.join([REPO_ROOT, os.environ.get("PYTHONPATH", "")])}
        argv = [sys.executable, "-m", "benchmarks.ddp_scaling", "--rank-process", "--data", args.data,
                "--langs", args.langs, "--out", os.path.abspath(args.out), "--device", args.device,
                "--backend", args.backend, "--size", args.size, "--configs", args.configs,
                "--sentences", str(args.sentences), "--updates", str(args.updates), "--reps", str(args.reps),
                "--warmup", str(args.warmup), "--threads", str(args.threads), "--seed", str(args.seed),
                "--load", ",".join(f"{x:.2f}" for x in os.getloadavg()),
                "--fairseq-args=" + args.fairseq_args] + (["--together"] if args.together else []) + (
                    ["--profile", os.path.abspath(args.profile)] if args.profile else [])
        procs = [subprocess.Popen(argv, cwd=REPO_ROOT, env={**env, "RANK": str(r), "LOCAL_RANK": str(r)})
                 for r in (0, 1)]
        codes = [p.wait() for p in procs]
    if any(codes):
        raise SystemExit(f"a rank failed (exit statuses {codes})")
    with open(args.out) as f:
        doc = json.load(f)
    fmt = lambda v: f"{v[0]:.3f} [{v[1]:.3f}, {v[2]:.3f}]" if v else "-"  # noqa: E731
    columns = [("efficiency", "efficiency"), ("vs_baseline", "vs baseline"), ("cpu_efficiency", "CPU efficiency"),
               ("cpu_vs_baseline", "CPU vs baseline")]
    if args.together:
        columns += [("sharing_vs_baseline", "sharing vs baseline"), ("ddp_vs_baseline", "DDP vs baseline")]
    print(f"{'config':<22} " + " ".join(f"{title:<22}" for _, title in columns) + " t1 ms   t2 ms")
    for config, row in doc["summary"].items():
        print(f"{config:<22} " + " ".join(f"{fmt(row.get(key)):<22}" for key, _ in columns)
              + f" {row['t1_ms']:7.1f} {row['t2_ms']:7.1f}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="the JSON written")
    parser.add_argument("--data", default=None, help="binarized corpus (default: a synthetic one, made here)")
    parser.add_argument("--langs", default=None)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--backend", choices=steps.BACKENDS, default="pytorch_ddp")
    parser.add_argument("--size", default="small", help="architecture preset suffix (tiny, small)")
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--sentences", type=int, default=48, help="sentences per rank and update")
    parser.add_argument("--updates", type=int, default=4, help="updates per repetition and world size")
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--corpus-sentences", type=int, default=400, help="per direction, synthetic corpus")
    parser.add_argument("--profile", default=None, metavar="DIR",
                        help="after the timing, profile one repetition per configuration and world size "
                             "(torch.profiler; rank 0's operator tables in DIR)")
    parser.add_argument("--together", action="store_true",
                        help="also time both processes each training its own 1-rank trainer at once (no DDP): "
                             "splits the efficiency into sharing the machine (t1 / t1together) and DDP's own "
                             "cost (t1together / t2)")
    parser.add_argument("--fairseq-args", default="", help="extra fairseq-train flags for every configuration "
                        "(e.g. '--bucket-cap-mb 1000')")
    parser.add_argument("--rank-process", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--load", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rank_process:
        args.load = [float(x) for x in args.load.split(",") if x]
        return rank_main(args)
    return launch(args)


if __name__ == "__main__":
    main()
