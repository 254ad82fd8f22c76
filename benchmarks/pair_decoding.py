"""What the serving-format benchmarks share (``run_ctranslate2``, ``transformers_vs_fairseq``): one
direction's test split decoded in fairseq's batches by several configurations, timed interleaved.

``PairDecoding`` sets up fairseq's task for the direction with the exported pair's language flags,
builds the batches (length-sorted batches of ``batch_size``, and ``single`` sentences drawn with
``seed`` one at a time), keeps each sentence's source tokens as fairseq's batches hold them, for
the other runtimes to read, and decodes with the pair's CTranslate2 exports (``CT2``, what
``export_ctranslate2_forms`` writes); a subclass names its ``configs`` and decodes a batch with the
others in ``decode`` and ``symbols``.
``run`` times them batch by batch in the orders of a Williams design (``harness.williams_orders``),
with torch on the threads ``decoding_threads`` sets;
``speed_metrics`` turns the samples into tokens/s with ratios against the exported fairseq pair, and
``result_head`` writes what every result starts with.
"""

import contextlib
import datetime
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import torch
from tqdm import tqdm

from .harness import PKG_DIR, interleaved, williams_orders
from .report import machine, stats, write_json
from .run import REPO_ROOT

BASELINE = "fairseq_export"
EOS = "</s>"
CT2 = {"ct2_float32": "float32", "ct2_int8": "int8"}  # CTranslate2 configurations: their quantization
CT2_LABELS = {key: f"CTranslate2 {quantization}, exported pair" for key, quantization in CT2.items()}


def task_flags(pair_pt: Path) -> List[str]:
    """The exported pair's language tokens and inventory as multilingual_langshare flags."""
    cfg = torch.load(pair_pt, map_location="cpu", weights_only=True)["cfg"]["task"]
    flags = ["--langs", ",".join(cfg["langs"]), "--lang-tok-style", cfg.get("lang_tok_style") or "multilingual"]
    flags += ["--encoder-langtok", cfg["encoder_langtok"]] if cfg.get("encoder_langtok") else []
    return flags + (["--decoder-langtok"] if cfg.get("decoder_langtok") else [])


def export_ctranslate2_forms(checkpoint, src: str, tgt: str, out_dir: Path) -> Dict[str, Path]:
    """The pair exported with --format ctranslate2 in each ``CT2`` quantization: their directories."""
    from fairseq_langshare.deploy.ctranslate2_export import export_ctranslate2

    paths = {}
    for key, quantization in CT2.items():
        paths[key] = out_dir / f"ct2-{src}-{tgt}-{quantization}"
        export_ctranslate2(checkpoint, src, tgt, paths[key], quantization=quantization, verbose=False)
    return paths


def bytes_on_disk(path: Path) -> int:
    """A file's size, or the sum of a directory's files'."""
    return sum(p.stat().st_size for p in path.iterdir()) if path.is_dir() else path.stat().st_size


class PairDecoding:
    configs: Tuple[str, ...] = ()

    def __init__(self, data: str, pair: str, forms: Dict, checkpoint: Path, beam: int, single: int,
                 batch_size: int, seed: int, threads: int):
        """``forms["paths"]``: the exported forms by configuration (the task's flags come from the
        ``fairseq_export`` one); ``checkpoint``: the one fairseq's ``--path`` names."""
        from fairseq import options, tasks

        from fairseq_langshare.deploy.translate import PairTranslator

        self.pair, self.beam, self.batch_size = pair, beam, batch_size
        src, tgt = pair.split("-")
        self.argv = [data, "--task", "multilingual_langshare", "--user-dir", PKG_DIR, "--lang-pairs", pair, "-s", src,
                     "-t", tgt, *task_flags(forms["paths"][BASELINE]), "--path", str(checkpoint), "--gen-subset",
                     "test", "--beam", str(beam), "--cpu"]
        self.args = options.parse_args_and_arch(options.get_generation_parser(), self.argv)
        self.task = tasks.setup_task(self.args)
        self.translators = {key: PairTranslator(forms["paths"][key], threads=threads) for key in CT2}
        self.task.load_dataset("test")
        ds = self.task.dataset("test")
        sd = self.task.source_dictionary
        self.source_ids = {i: ds[i]["source"].tolist() for i in range(len(ds))}  # language token first, EOS last
        # the same as symbols, without EOS (CTranslate2 adds it)
        self.source = {i: [sd[t] for t in ids[:-1]] for i, ids in self.source_ids.items()}
        ordered = sorted(range(len(ds)), key=lambda i: (int(ds.num_tokens(i)), i))
        self.batched = [ds.collater([ds[i] for i in ordered[k:k + batch_size]]) for k in range(0, len(ds), batch_size)]
        picked = np.random.RandomState(seed).choice(len(ds), min(single, len(ds)), replace=False)
        self.single = [ds.collater([ds[int(i)]]) for i in picked]
        self.n_sentences = len(ds)
        self.mean_source_tokens = float(np.mean([len(ids) for ids in self.source_ids.values()]))

    def load_fairseq(self, path: Path):
        from fairseq import checkpoint_utils

        models, _ = checkpoint_utils.load_model_ensemble([str(path)], task=self.task)
        return models[0].eval()

    def ct2(self, key, batch, beam: int) -> List[List[str]]:
        """CTranslate2's best hypotheses of a batch (symbols, EOS included) from fairseq's source tokens."""
        return self.translators[key].decode([self.source[i] for i in batch["id"].tolist()], beam=beam)

    def step(self, key, batch) -> int:
        """Decode one batch with configuration ``key``; return the generated tokens (best hypotheses, EOS included)."""
        if key in CT2:
            return sum(len(h) for h in self.ct2(key, batch, self.beam))
        return self.decode(key, batch)

    def decode(self, key, batch) -> int:
        """``step`` of a configuration other than CTranslate2's."""
        raise NotImplementedError

    def symbols(self, key, batch, beam: int) -> List[List[str]]:
        """A batch's best hypotheses as target symbols without EOS, for a configuration other than CTranslate2's."""
        raise NotImplementedError

    def hypotheses(self, key, beam: int) -> Dict[int, List[str]]:
        """Best hypothesis of every sentence, as target symbols without EOS, by sentence id."""
        out = {}
        for batch in self.batched:
            if key in CT2:
                hyps = [[t for t in h if t != EOS] for h in self.ct2(key, batch, beam)]
            else:
                hyps = self.symbols(key, batch, beam)
            out.update(zip(batch["id"].tolist(), hyps))
        return out

    def fairseq_symbols(self, generator, model, batch) -> List[List[str]]:
        td = self.task.target_dictionary
        found = self.task.inference_step(generator, [model], batch)
        return [[td[t] for t in h[0]["tokens"].tolist() if t != td.eos()] for h in found]

    def run(self, reps: int, warmup: int, progress=True) -> Dict:
        samples = {m: {k: [] for k in self.configs} for m in ("single", "batched", "cpu:single", "cpu:batched")}
        for rep in tqdm(range(warmup + reps), desc=f"{self.pair}: repetitions (4 configurations interleaved)",
                        unit="rep", disable=not progress):
            for metric, batches in (("single", self.single), ("batched", self.batched)):
                wall, cpu, tokens = interleaved(batches, self.step, keys=self.configs,
                                                orders=williams_orders(self.configs))
                if rep >= warmup:
                    for key in self.configs:
                        samples[metric][key].append(sum(tokens[key]) / wall[key])
                        samples["cpu:" + metric][key].append(sum(tokens[key]) / cpu[key])
        return samples


@contextlib.contextmanager
def decoding_threads(threads: int):
    """torch on ``threads`` threads inside the block (restored after); yields (start time, load average)."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield time.time(), os.getloadavg()
    finally:
        torch.set_num_threads(before)


def _ratios(samples, num: str, den: str) -> Dict:
    """Ratio of medians and per-repetition ratios of ``num`` over ``den`` (same repetitions)."""
    a, b = samples[den], samples[num]
    return {"ratio": float(np.median(b) / np.median(a)), "paired_ratio": stats([y / x for x, y in zip(a, b)])}


def speed_metrics(samples: Dict, configs, batch_size: int) -> Dict:
    """Tokens/s per configuration at batch 1 and batch ``batch_size`` (wall and CPU time), with ratios
    against the exported fairseq pair."""
    metrics = {}
    labels = {"single": "decoding tokens/s, batch 1", "batched": f"decoding tokens/s, batch {batch_size}"}
    for metric, label in labels.items():
        entry = {"label": label, "unit": "tokens/s"}
        for key in configs:
            entry[key] = stats(samples[metric][key])
            entry[key]["cpu_time"] = stats(samples["cpu:" + metric][key])
        entry[f"vs_{BASELINE}"] = {key: _ratios(samples[metric], key, BASELINE) for key in configs}
        entry[f"vs_{BASELINE}_cpu_time"] = {key: _ratios(samples["cpu:" + metric], key, BASELINE) for key in configs}
        metrics[metric] = entry
    return metrics


def result_head(name: str, started: float, load_before, threads: int, versions: Dict, checkpoint: str, corpus: str,
                labels: Dict, bench: PairDecoding, reps: int, warmup: int, seed: int) -> Dict:
    """What a serving-format benchmark's result starts with: when, where (``versions``: the runtimes'),
    what was decoded and how."""
    mach = machine(threads)
    mach["loadavg_before"], mach["loadavg_after"] = list(load_before), list(os.getloadavg())
    mach.update(versions)
    return {
        "name": name,
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "elapsed_s": round(time.time() - started, 1),
        "machine": mach,
        "checkpoint": os.path.abspath(checkpoint), "corpus": os.path.abspath(corpus), "pair": bench.pair,
        "configs": labels,
        "fairseq_argv": bench.argv,
        "data": {"split": "test", "sentences": bench.n_sentences, "single_sentences": len(bench.single),
                 "batch_size": bench.batch_size, "batches": len(bench.batched), "beam": bench.beam,
                 "mean_source_tokens": bench.mean_source_tokens},
        "protocol": {"reps": reps, "warmup": warmup, "threads": threads, "seed": seed,
                     "order": "per repetition: batch 1, then batch N; within each, per batch the four "
                              "configurations in the orders of a 4x4 Williams design, cycled"},
    }


def add_decoding_args(parser, reps: int) -> None:
    """The options both benchmarks take after --corpus, --checkpoint, --pair and --name."""
    parser.add_argument("--reps", type=int, default=reps)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--single", type=int, default=100, help="sentences decoded one at a time (default %(default)s)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1)


def write_result(result: Dict, module: str, argv, out_json, text: str) -> str:
    """Record the command, write the JSON (default benchmarks/results/NAME.json), print ``text`` and
    where the JSON went; returns the JSON's path."""
    result["command"] = f"python -m benchmarks.{module} " + shlex.join(argv if argv is not None else sys.argv[1:])
    out_json = out_json or os.path.join(REPO_ROOT, "benchmarks", "results", f"{result['name']}.json")
    write_json(result, out_json)
    sys.stdout.write(text)
    print(f"JSON: {out_json}")
    return out_json
