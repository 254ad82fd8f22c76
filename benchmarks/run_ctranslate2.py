"""CTranslate2 (float32, int8) against fairseq on one exported language pair, in one run.

    python -m benchmarks.run_ctranslate2 --corpus CORPUS --checkpoint CKPT --pair en-fr [--reps 5 ...]

Four configurations decode the same test sentences of the pair (beam 4, one thread each), batch
by batch in the orders of a Williams design (``harness.williams_orders``: each configuration
in each position, and directly after each other one, equally often): fairseq's ``SequenceGenerator`` through the
task on the full multilingual checkpoint and on the pair's exported plain ``transformer``
checkpoint (the decoding path of fairseq-generate and of ``benchmarks.harness``), and CTranslate2
on the pair exported with ``--format ctranslate2`` in float32 and int8 (``PairTranslator.decode``,
what ``langshare translate`` runs, without SentencePiece). CTranslate2 reads exactly the source
tokens fairseq's batches hold (language token included). Hypotheses end where each model stops,
with fairseq-generate's length limits and normalisation, and tokens/s counts the best hypotheses'
tokens including EOS, as fairseq-generate does. Also recorded: the size on disk of each form, and
how many best hypotheses each form shares with fairseq on the exported checkpoint.
"""

import argparse
import datetime
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

import numpy as np
import torch
from tqdm import tqdm

from .fairseq_steps import decode_batch
from .harness import PKG_DIR, interleaved, williams_orders
from .report import machine, stats, write_json
from .run import REPO_ROOT, read_corpus

FAIRSEQ = ("fairseq_full", "fairseq_export")
CT2 = {"ct2_float32": "float32", "ct2_int8": "int8"}
CONFIGS = FAIRSEQ + tuple(CT2)
LABELS = {"fairseq_full": "fairseq, full multilingual checkpoint", "fairseq_export": "fairseq, exported pair (.pt)",
          "ct2_float32": "CTranslate2 float32, exported pair", "ct2_int8": "CTranslate2 int8, exported pair"}
DOC = os.path.join(REPO_ROOT, "docs", "benchmarks.md")


def export_forms(checkpoint, src: str, tgt: str, out_dir: Path) -> Dict:
    """The pair as a fairseq checkpoint and as CTranslate2 models; paths and sizes on disk."""
    from fairseq_langshare.deploy.ctranslate2_export import export_ctranslate2
    from fairseq_langshare.export import export_pair

    out_dir.mkdir(parents=True, exist_ok=True)
    pair_pt = out_dir / f"{src}-{tgt}.pt"
    report = export_pair(checkpoint, src, tgt, pair_pt, verbose=False)
    paths = {"fairseq_full": Path(checkpoint), "fairseq_export": pair_pt}
    for key, quantization in CT2.items():
        paths[key] = out_dir / f"ct2-{src}-{tgt}-{quantization}"
        export_ctranslate2(checkpoint, src, tgt, paths[key], quantization=quantization, verbose=False)
    sizes = {key: (sum(p.stat().st_size for p in path.iterdir()) if path.is_dir() else path.stat().st_size)
             for key, path in paths.items()}
    sizes["fairseq_full_weights"] = report["full_weight_bytes"]  # the full model's weights alone, no optimizer state
    sizes["fairseq_export_weights"] = report["weight_bytes"]
    sizes.update({f"{key}_model_bin": (paths[key] / "model.bin").stat().st_size for key in CT2})
    return {"paths": paths, "bytes": sizes, "params": report["params"], "full_params": report["full_params"]}


def task_flags(pair_pt: Path) -> List[str]:
    """The exported pair's language tokens and inventory as multilingual_langshare flags."""
    cfg = torch.load(pair_pt, map_location="cpu", weights_only=True)["cfg"]["task"]
    flags = ["--langs", ",".join(cfg["langs"]), "--lang-tok-style", cfg.get("lang_tok_style") or "multilingual"]
    flags += ["--encoder-langtok", cfg["encoder_langtok"]] if cfg.get("encoder_langtok") else []
    return flags + (["--decoder-langtok"] if cfg.get("decoder_langtok") else [])


class DeployBenchmark:
    def __init__(self, data: str, pair: str, forms: Dict, beam: int, single: int, batch_size: int, seed: int,
                 threads: int):
        from fairseq import checkpoint_utils, options, tasks

        from fairseq_langshare.deploy.translate import PairTranslator

        self.pair, self.beam, self.batch_size = pair, beam, batch_size
        src, tgt = pair.split("-")
        argv = [data, "--task", "multilingual_langshare", "--user-dir", PKG_DIR, "--lang-pairs", pair, "-s", src,
                "-t", tgt, *task_flags(forms["paths"]["fairseq_export"]), "--path", str(forms["paths"]["fairseq_full"]),
                "--gen-subset", "test", "--beam", str(beam), "--cpu"]
        self.argv = argv
        args = options.parse_args_and_arch(options.get_generation_parser(), argv)
        self.task = tasks.setup_task(args)
        self.models, self.generators = {}, {}
        for key in FAIRSEQ:
            models, _ = checkpoint_utils.load_model_ensemble([str(forms["paths"][key])], task=self.task)
            self.models[key] = models[0].eval()
            self.generators[key] = self.task.build_generator([self.models[key]], args)
        self.translators = {key: PairTranslator(forms["paths"][key], threads=threads) for key in CT2}
        self.task.load_dataset("test")
        ds = self.task.dataset("test")
        sd = self.task.source_dictionary
        # the exact source tokens of fairseq's batches (language token first, EOS last: CTranslate2 adds it)
        self.source = {i: [sd[t] for t in ds[i]["source"][:-1].tolist()] for i in range(len(ds))}
        ordered = sorted(range(len(ds)), key=lambda i: (int(ds.num_tokens(i)), i))
        self.batched = [ds.collater([ds[i] for i in ordered[k:k + batch_size]]) for k in range(0, len(ds), batch_size)]
        picked = np.random.RandomState(seed).choice(len(ds), min(single, len(ds)), replace=False)
        self.single = [ds.collater([ds[int(i)]]) for i in picked]
        self.n_sentences = len(ds)
        self.mean_source_tokens = float(np.mean([len(s) + 1 for s in self.source.values()]))

    def _ct2(self, key, batch):
        return self.translators[key].decode([self.source[i] for i in batch["id"].tolist()], beam=self.beam)

    def step(self, key, batch) -> int:
        """Decode one batch; return the generated tokens (best hypotheses, EOS included)."""
        if key in CT2:
            return sum(len(h) for h in self._ct2(key, batch))
        return decode_batch(self.task, self.generators[key], self.models[key], batch)

    def hypotheses(self, key) -> Dict[int, List[str]]:
        """Best hypothesis of every sentence, as tokens without EOS."""
        out = {}
        td = self.task.target_dictionary
        for batch in self.batched:
            ids = batch["id"].tolist()
            if key in CT2:
                hyps = [[t for t in h if t != "</s>"] for h in self._ct2(key, batch)]
            else:
                found = self.task.inference_step(self.generators[key], [self.models[key]], batch)
                hyps = [[td[t] for t in h[0]["tokens"].tolist() if t != td.eos()] for h in found]
            out.update(zip(ids, hyps))
        return out

    def run(self, reps: int, warmup: int, progress=True) -> Dict:
        samples = {m: {k: [] for k in CONFIGS} for m in ("single", "batched", "cpu:single", "cpu:batched")}
        for rep in tqdm(range(warmup + reps), desc=f"{self.pair}: repetitions (4 configurations interleaved)",
                        unit="rep", disable=not progress):
            for metric, batches in (("single", self.single), ("batched", self.batched)):
                wall, cpu, tokens = interleaved(batches, self.step, keys=CONFIGS, orders=williams_orders(CONFIGS))
                if rep >= warmup:
                    for key in CONFIGS:
                        samples[metric][key].append(sum(tokens[key]) / wall[key])
                        samples["cpu:" + metric][key].append(sum(tokens[key]) / cpu[key])
        return samples


def _ratios(samples, num: str, den: str) -> Dict:
    """Ratio of medians and per-repetition ratios of ``num`` over ``den`` (same repetitions)."""
    a, b = samples[den], samples[num]
    return {"ratio": float(np.median(b) / np.median(a)), "paired_ratio": stats([y / x for x, y in zip(a, b)])}


def run(corpus: str, checkpoint: str, pair: str, reps: int = 5, warmup: int = 1, beam: int = 4, single: int = 100,
        batch_size: int = 64, threads: int = 1, seed: int = 1, work_dir=None, progress=True, name=None) -> Dict:
    data, _, _ = read_corpus(corpus)
    src, tgt = pair.split("-")
    threads_before = torch.get_num_threads()
    torch.set_num_threads(threads)
    started, load_before = time.time(), os.getloadavg()
    try:
        with tempfile.TemporaryDirectory(prefix="langshare-ct2-bench-") as tmp:
            forms = export_forms(checkpoint, src, tgt, Path(work_dir or tmp))
            bench = DeployBenchmark(data, pair, forms, beam, single, batch_size, seed, threads)
            hyps = {key: bench.hypotheses(key) for key in CONFIGS}
            samples = bench.run(reps, warmup, progress)
    finally:
        torch.set_num_threads(threads_before)
    ref = hyps["fairseq_export"]
    metrics = {}
    for metric, label in (("single", "decoding tokens/s, batch 1"), ("batched", f"decoding tokens/s, batch {batch_size}")):
        entry = {"label": label, "unit": "tokens/s"}
        for key in CONFIGS:
            entry[key] = stats(samples[metric][key])
            entry[key]["cpu_time"] = stats(samples["cpu:" + metric][key])
        entry["vs_fairseq_export"] = {key: _ratios(samples[metric], key, "fairseq_export") for key in CONFIGS}
        entry["vs_fairseq_export_cpu_time"] = {key: _ratios(samples["cpu:" + metric], key, "fairseq_export")
                                               for key in CONFIGS}
        metrics[metric] = entry
    mach = machine(threads)
    mach["loadavg_before"], mach["loadavg_after"] = list(load_before), list(os.getloadavg())
    import ctranslate2

    mach["ctranslate2"] = ctranslate2.__version__
    return {
        "name": name or f"ctranslate2-vs-fairseq-{pair}",
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "elapsed_s": round(time.time() - started, 1),
        "machine": mach,
        "checkpoint": os.path.abspath(checkpoint), "corpus": os.path.abspath(corpus), "pair": pair,
        "configs": LABELS,
        "fairseq_argv": bench.argv,
        "data": {"split": "test", "sentences": bench.n_sentences, "single_sentences": len(bench.single),
                 "batch_size": batch_size, "batches": len(bench.batched), "beam": beam,
                 "mean_source_tokens": bench.mean_source_tokens},
        "protocol": {"reps": reps, "warmup": warmup, "threads": threads, "seed": seed,
                     "order": "per repetition: batch 1, then batch N; within each, per batch the four "
                              "configurations in the orders of a 4x4 Williams design, cycled"},
        "metrics": metrics,
        "bytes_on_disk": forms["bytes"], "params": {"export": forms["params"], "full": forms["full_params"]},
        "identical_to_fairseq_export": {key: sum(hyps[key][i] == ref[i] for i in ref) for key in CONFIGS},
    }


def _mb(n):
    return f"{n / 1e6:.2f} MB"


def markdown(result) -> str:
    d, m, p = result["data"], result["machine"], result["protocol"]
    b = result["bytes_on_disk"]
    lines = [f"## {result['name']} ({result['date']})", "",
             f"- checkpoint `{result['checkpoint']}`, corpus `{result['corpus']}`, direction {result['pair']}: "
             f"{d['sentences']} test sentences (mean {d['mean_source_tokens']:.1f} source tokens incl. language token "
             f"and EOS) in {d['batches']} length-sorted batches of {d['batch_size']}, and {d['single_sentences']} of "
             f"them one at a time; beam {d['beam']}, fairseq-generate's length rules (each model stops by itself)",
             f"- protocol: {p['warmup']} warm-up + {p['reps']} measured repetitions; within each, batch by batch, the "
             f"four configurations in the orders of a Williams design (each in each position and right after each "
             f"other one equally often); {p['threads']} thread each (torch and CTranslate2)",
             f"- machine: {m['nproc']} CPUs ({m['cpu']}), torch {m['torch']}, fairseq {m['fairseq']}, CTranslate2 "
             f"{m['ctranslate2']}; load average {m['loadavg_before'][0]:.2f} → {m['loadavg_after'][0]:.2f}; "
             f"wall time {result['elapsed_s']:.0f} s",
             "", f"| configuration | {result['metrics']['single']['label']} | vs fairseq export | "
                 f"{result['metrics']['batched']['label']} | vs fairseq export | same best hypothesis as fairseq "
                 "export | size on disk |",
             "|---|---|---|---|---|---|---|"]
    sizes = {"fairseq_full": f"{_mb(b['fairseq_full'])} file ({_mb(b['fairseq_full_weights'])} of weights)",
             "fairseq_export": _mb(b["fairseq_export"]), "ct2_float32": _mb(b["ct2_float32"]),
             "ct2_int8": _mb(b["ct2_int8"])}
    for key, label in result["configs"].items():
        cells = []
        for metric in ("single", "batched"):
            e = result["metrics"][metric]
            s, r = e[key], e["vs_fairseq_export"][key]
            cells += [f"{s['median']:,.0f} ({s['q1']:,.0f}–{s['q3']:,.0f})",
                      f"**x{r['ratio']:.2f}** (x{r['paired_ratio']['min']:.2f}–x{r['paired_ratio']['max']:.2f}; "
                      f"CPU time x{e['vs_fairseq_export_cpu_time'][key]['ratio']:.2f})"]
        same = result["identical_to_fairseq_export"][key]
        lines.append(f"| {label} | {' | '.join(cells)} | {same} of {d['sentences']} | {sizes[key]} |")
    lines += ["", "Medians over repetitions (interquartile range); the ratios are speed / the exported fairseq "
                  "checkpoint's speed (median ratio, then the range of per-repetition ratios, then by process CPU "
                  "time). Sizes: the full checkpoint file holds the optimizer state; CTranslate2 directories include "
                  "the SentencePiece model and langshare.json."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run_ctranslate2", description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", required=True, help="prepared corpus directory (manifest.json + bin/)")
    parser.add_argument("--checkpoint", required=True, help="full multilingual checkpoint")
    parser.add_argument("--pair", default="en-fr", help="direction to export and decode (default %(default)s)")
    parser.add_argument("--name", help="result name (default ctranslate2-vs-fairseq-PAIR)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--single", type=int, default=100, help="sentences decoded one at a time (default %(default)s)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--work-dir", help="keep the exported forms here (default: a temporary directory)")
    parser.add_argument("--out-json", help="default benchmarks/results/NAME.json")
    parser.add_argument("--no-append", action="store_true", help=f"do not append the table to {DOC}")
    args = parser.parse_args(argv)
    result = run(args.corpus, args.checkpoint, args.pair, args.reps, args.warmup, args.beam, args.single,
                 args.batch_size, args.threads, args.seed, args.work_dir, name=args.name)
    result["command"] = "python -m benchmarks.run_ctranslate2 " + shlex.join(argv if argv is not None else sys.argv[1:])
    out_json = args.out_json or os.path.join(REPO_ROOT, "benchmarks", "results", f"{result['name']}.json")
    write_json(result, out_json)
    text = markdown(result)
    if not args.no_append:
        from .report import append_markdown_text

        append_markdown_text(text, DOC)
    sys.stdout.write(text)
    print(f"JSON: {out_json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
