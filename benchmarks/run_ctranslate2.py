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
import os
import sys
import tempfile
from pathlib import Path
from typing import Dict

from .fairseq_steps import decode_batch
from .pair_decoding import (CT2, CT2_LABELS, PairDecoding, add_decoding_args, bytes_on_disk, decoding_threads,
                            export_ctranslate2_forms, result_head, speed_metrics, write_result)
from .run import REPO_ROOT, read_corpus

FAIRSEQ = ("fairseq_full", "fairseq_export")
CONFIGS = FAIRSEQ + tuple(CT2)
LABELS = {"fairseq_full": "fairseq, full multilingual checkpoint", "fairseq_export": "fairseq, exported pair (.pt)",
          **CT2_LABELS}
DOC = os.path.join(REPO_ROOT, "docs", "benchmarks.md")


def export_forms(checkpoint, src: str, tgt: str, out_dir: Path) -> Dict:
    """The pair as a fairseq checkpoint and as CTranslate2 models; paths and sizes on disk."""
    from fairseq_langshare.export import export_pair

    out_dir.mkdir(parents=True, exist_ok=True)
    pair_pt = out_dir / f"{src}-{tgt}.pt"
    report = export_pair(checkpoint, src, tgt, pair_pt, verbose=False)
    paths = {"fairseq_full": Path(checkpoint), "fairseq_export": pair_pt,
             **export_ctranslate2_forms(checkpoint, src, tgt, out_dir)}
    sizes = {key: bytes_on_disk(path) for key, path in paths.items()}
    sizes["fairseq_full_weights"] = report["full_weight_bytes"]  # the full model's weights alone, no optimizer state
    sizes["fairseq_export_weights"] = report["weight_bytes"]
    sizes.update({f"{key}_model_bin": (paths[key] / "model.bin").stat().st_size for key in CT2})
    return {"paths": paths, "bytes": sizes, "params": report["params"], "full_params": report["full_params"]}


class DeployBenchmark(PairDecoding):
    """fairseq on the full checkpoint and on the exported pair, CTranslate2 float32 and int8."""
    configs = CONFIGS

    def __init__(self, data: str, pair: str, forms: Dict, beam: int, single: int, batch_size: int, seed: int,
                 threads: int):
        super().__init__(data, pair, forms, forms["paths"]["fairseq_full"], beam, single, batch_size, seed, threads)
        self.models = {key: self.load_fairseq(forms["paths"][key]) for key in FAIRSEQ}
        self.generators = {key: self.task.build_generator([self.models[key]], self.args) for key in FAIRSEQ}

    def decode(self, key, batch) -> int:
        return decode_batch(self.task, self.generators[key], self.models[key], batch)

    def symbols(self, key, batch, beam: int):
        return self.fairseq_symbols(self.generators[key], self.models[key], batch)


def run(corpus: str, checkpoint: str, pair: str, reps: int = 5, warmup: int = 1, beam: int = 4, single: int = 100,
        batch_size: int = 64, threads: int = 1, seed: int = 1, work_dir=None, progress=True, name=None) -> Dict:
    import ctranslate2

    data, _, _ = read_corpus(corpus)
    src, tgt = pair.split("-")
    with decoding_threads(threads) as (started, load_before), \
            tempfile.TemporaryDirectory(prefix="langshare-ct2-bench-") as tmp:
        forms = export_forms(checkpoint, src, tgt, Path(work_dir or tmp))
        bench = DeployBenchmark(data, pair, forms, beam, single, batch_size, seed, threads)
        hyps = {key: bench.hypotheses(key, beam) for key in CONFIGS}
        samples = bench.run(reps, warmup, progress)
    ref = hyps["fairseq_export"]
    return {
        **result_head(name or f"ctranslate2-vs-fairseq-{pair}", started, load_before, threads,
                      {"ctranslate2": ctranslate2.__version__}, checkpoint, corpus, LABELS, bench, reps, warmup, seed),
        "metrics": speed_metrics(samples, CONFIGS, batch_size),
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
    add_decoding_args(parser, reps=5)
    parser.add_argument("--work-dir", help="keep the exported forms here (default: a temporary directory)")
    parser.add_argument("--out-json", help="default benchmarks/results/NAME.json")
    parser.add_argument("--no-append", action="store_true", help=f"do not append the table to {DOC}")
    args = parser.parse_args(argv)
    result = run(args.corpus, args.checkpoint, args.pair, args.reps, args.warmup, args.beam, args.single,
                 args.batch_size, args.threads, args.seed, args.work_dir, name=args.name)
    text = markdown(result)
    if not args.no_append:
        from .report import append_markdown_text

        append_markdown_text(text, DOC)
    write_result(result, "run_ctranslate2", argv, args.out_json, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
