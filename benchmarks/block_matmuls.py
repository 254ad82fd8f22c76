"""What splitting a linear layer's rows into per-language blocks costs on this CPU (issue 18).

A multi-decoder (or any per-language copy of a decoder layer) decoding a batch that mixes target
languages runs each linear as one matmul per language block instead of one matmul over every row.
This measures that split alone, with no model around it: one ``addmm`` over 256 rows (batch 64,
beam 4) against four over 64-row blocks, with the same weight (what the split itself costs: each
call packs the weight again and runs fewer rows per packing) and with four weights (the copies').

    python -m benchmarks.block_matmuls [--rows 256 --blocks 4 --reps 15]

Prints, per (d_in, d_out), the median CPU time of each form and the speed ratios against the
single matmul, one thread.
"""

import argparse
import statistics
import sys
import time

import torch

SHAPES = ((128, 128), (128, 512), (512, 512), (512, 2048))  # the small preset's and d = 512's linears


def _median_seconds(fn, reps, calls=50):
    for _ in range(calls):
        fn()
    times = []
    for _ in range(reps):
        start = time.process_time()
        for _ in range(calls):
            fn()
        times.append((time.process_time() - start) / calls)
    return statistics.median(times)


def measure(d_in, d_out, rows, blocks, reps):
    torch.manual_seed(0)
    x, out = torch.randn(rows, d_in), torch.empty(rows, d_out)
    weights, biases = [torch.randn(d_out, d_in) for _ in range(blocks)], [torch.randn(d_out) for _ in range(blocks)]
    size = rows // blocks

    def split(copies):
        for i, (part, block) in enumerate(zip(x.split(size), out.split(size))):
            torch.addmm(biases[i % copies], part, weights[i % copies].t(), out=block)
    forms = {"one matmul": lambda: torch.addmm(biases[0], x, weights[0].t(), out=out),
             "blocks, one weight": lambda: split(1), "blocks, a weight each": lambda: split(blocks)}
    times = {name: [] for name in forms}
    for _ in range(3):  # rounds alternate the forms
        for name, fn in forms.items():
            times[name].append(_median_seconds(fn, reps))
    return {name: statistics.median(t) for name, t in times.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.block_matmuls", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print(f"| d_in x d_out | one matmul ({args.rows} rows) | {args.blocks} blocks, one weight | "
          f"{args.blocks} blocks, a weight each |")
    print("|---|---:|---:|---:|")
    for d_in, d_out in SHAPES:
        t = measure(d_in, d_out, args.rows, args.blocks, args.reps)
        one = t["one matmul"]
        print(f"| {d_in} x {d_out} | {one * 1e6:.0f} us | {t['blocks, one weight'] * 1e6:.0f} us "
              f"({one / t['blocks, one weight']:.2f}) | {t['blocks, a weight each'] * 1e6:.0f} us "
              f"({one / t['blocks, a weight each']:.2f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
