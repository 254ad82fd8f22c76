"""Training speed of every head-to-head model, to size ``langshare head-to-head``'s default.

Each model trains ``--updates`` updates (default 60) with the head-to-head's exact command, one
thread per process, ``--jobs`` processes at a time (as the head-to-head runs them). The child
reports wall and CPU time at every logged update (``--log-interval 10``); the rate is measured
from the first logged update to the last, so start-up and data loading are left out. Updates per
CPU second is what one process gets when it has a core to itself; updates per wall second is what
it got on the machine as it was (the load average is recorded next to it).

    python -m benchmarks.head_to_head_speed --corpus demo_run/corpus [--updates 60 --jobs 2]
"""

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from fairseq_langshare.atomic_files import write_json_atomic
from fairseq_langshare.recipes.head_to_head_models import MODELS
from fairseq_langshare.recipes.head_to_head_runs import Corpus, Run, _environment, train_argv


class _Clock(logging.Handler):
    """Prints (updates, CPU seconds, wall seconds) for every json train_inner record."""

    def emit(self, record):
        message = record.getMessage()
        if message.startswith("{") and '"num_updates"' in message and '"ups"' in message:
            updates = int(json.loads(message)["num_updates"])
            print(f"CLOCK {updates} {time.process_time():.3f} {time.time():.3f}", file=sys.stderr, flush=True)


def _child(argv):
    from fairseq_cli import train

    logging.getLogger().addHandler(_Clock())
    sys.argv = ["fairseq-train"] + argv
    train.cli_main()


def measure(run: Run, updates: int):
    argv = train_argv(run) + ["--max-update", str(updates), "--log-interval", "10", "--disable-validation",
                              "--no-save"]
    proc = subprocess.run([sys.executable, "-m", "benchmarks.head_to_head_speed", "--child", *argv],
                          capture_output=True, text=True, env=_environment())
    clocks = [tuple(map(float, line.split()[1:])) for line in proc.stderr.splitlines() if line.startswith("CLOCK ")]
    if proc.returncode != 0 or len(clocks) < 2:
        raise RuntimeError(f"{run.model.name}: training failed:\n{proc.stderr[-2000:]}")
    (u0, c0, w0), (u1, c1, w1) = clocks[0], clocks[-1]
    return {"updates": int(u1 - u0), "updates_per_cpu_second": (u1 - u0) / (c1 - c0),
            "updates_per_wall_second": (u1 - u0) / (w1 - w0)}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", default="demo_run/corpus", help="a prepared gettext corpus")
    p.add_argument("--direction", default="o2m", choices=("o2m", "m2o"))
    p.add_argument("--updates", type=int, default=60)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--out-json", default="benchmarks/results/head_to_head_speed.json")
    args = p.parse_args(argv)
    corpus = Corpus(os.path.abspath(args.corpus), args.direction)
    with tempfile.TemporaryDirectory(prefix="h2h-speed-") as tmp:
        runs = [Run(args.direction, m, 1, os.path.join(tmp, m.name), corpus, args.updates) for m in MODELS]
        load_before = os.getloadavg()
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            speeds = dict(zip([r.model.name for r in runs], pool.map(lambda r: measure(r, args.updates), runs)))
    result = {"date": time.strftime("%Y-%m-%d %H:%M"), "corpus": corpus.path, "direction": args.direction,
              "jobs": args.jobs, "threads_per_process": 1, "cpu_count": os.cpu_count(),
              "load_average_before": load_before, "load_average_after": os.getloadavg(), "models": speeds}
    write_json_atomic(args.out_json, result)
    for name, s in speeds.items():
        print(f"{name:18s} {s['updates_per_cpu_second']:.2f} updates/CPU-s  {s['updates_per_wall_second']:.2f} "
              f"updates/wall-s over {s['updates']} updates")
    print(f"load average before {load_before}, after {result['load_average_after']}; wrote {args.out_json}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(sys.argv[2:])
    else:
        main()
