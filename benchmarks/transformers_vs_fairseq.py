"""transformers ``generate`` against fairseq-generate and CTranslate2 on one exported language pair.

    python -m benchmarks.transformers_vs_fairseq --corpus CORPUS --checkpoint CKPT --pair en-fr \\
        [--reps 3] [--fidelity-pairs all] [--name NAME]

The pair is exported three ways from the same checkpoint: ``--format fairseq`` (a plain
``transformer`` checkpoint), ``--format transformers`` and ``--format ctranslate2`` (float32 and
int8). Speed: four configurations decode the pair's test sentences (beam 4, one thread each, batch
1 and batch 64), batch by batch in the orders of a Williams design (``harness.williams_orders``):
fairseq's ``SequenceGenerator`` through the task on the exported checkpoint (fairseq-generate's
decoding path), transformers' ``generate`` on the exported directory, CTranslate2 float32 and int8
(``PairTranslator.decode``). All read the same source token ids (language token first, EOS last)
and stop by fairseq-generate's length rules; tokens/s counts the best hypotheses' tokens with EOS.
Tokenisation is outside the timed region for all of them.

Fidelity: the best hypotheses of each configuration against fairseq's on the benchmarked pair
(beam 4 and greedy), and for every direction in ``--fidelity-pairs``, raw text through
``AutoTokenizer`` -> ``generate`` -> ``batch_decode`` against fairseq-interactive on the full
multilingual checkpoint (raw text, ``--bpe sentencepiece``), greedy and beam 4.
"""

import argparse
import datetime
import io
import os
import shlex
import sys
import tempfile
import time
from contextlib import redirect_stdout
from pathlib import Path
from typing import Dict, List

import numpy as np
import torch
from tqdm import tqdm

from .harness import PKG_DIR, decode_batch, interleaved, williams_orders
from .report import machine, stats, write_json
from .run import REPO_ROOT, read_corpus

CONFIGS = ("fairseq_export", "transformers", "ct2_float32", "ct2_int8")
LABELS = {"fairseq_export": "fairseq SequenceGenerator (fairseq-generate), exported pair (.pt)",
          "transformers": "transformers generate, exported pair",
          "ct2_float32": "CTranslate2 float32, exported pair", "ct2_int8": "CTranslate2 int8, exported pair"}
CT2 = {"ct2_float32": "float32", "ct2_int8": "int8"}
DOC = os.path.join(REPO_ROOT, "docs", "benchmarks.md")


def export_forms(checkpoint, src: str, tgt: str, out_dir: Path) -> Dict:
    from fairseq_langshare.deploy.ctranslate2_export import export_ctranslate2
    from fairseq_langshare.deploy.transformers_export import export_transformers
    from fairseq_langshare.export import export_pair

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"fairseq_export": out_dir / f"{src}-{tgt}.pt", "transformers": out_dir / f"hf-{src}-{tgt}"}
    export_pair(checkpoint, src, tgt, paths["fairseq_export"], verbose=False)
    export_transformers(checkpoint, src, tgt, paths["transformers"], verbose=False)
    for key, quantization in CT2.items():
        paths[key] = out_dir / f"ct2-{src}-{tgt}-{quantization}"
        export_ctranslate2(checkpoint, src, tgt, paths[key], quantization=quantization, verbose=False)
    sizes = {key: (sum(p.stat().st_size for p in path.iterdir()) if path.is_dir() else path.stat().st_size)
             for key, path in paths.items()}
    return {"paths": paths, "bytes": sizes}


def task_flags(pair_pt: Path) -> List[str]:
    """The exported pair's language tokens and inventory as multilingual_langshare flags."""
    cfg = torch.load(pair_pt, map_location="cpu", weights_only=True)["cfg"]["task"]
    flags = ["--langs", ",".join(cfg["langs"]), "--lang-tok-style", cfg.get("lang_tok_style") or "multilingual"]
    flags += ["--encoder-langtok", cfg["encoder_langtok"]] if cfg.get("encoder_langtok") else []
    return flags + (["--decoder-langtok"] if cfg.get("decoder_langtok") else [])


class Bench:
    def __init__(self, data: str, pair: str, forms: Dict, beam: int, single: int, batch_size: int, seed: int,
                 threads: int):
        from fairseq import checkpoint_utils, options, tasks
        from transformers import AutoModelForSeq2SeqLM

        from fairseq_langshare.deploy.translate import PairTranslator

        self.pair, self.beam = pair, beam
        src, tgt = pair.split("-")
        self.argv = [data, "--task", "multilingual_langshare", "--user-dir", PKG_DIR, "--lang-pairs", pair, "-s", src,
                     "-t", tgt, *task_flags(forms["paths"]["fairseq_export"]), "--path",
                     str(forms["paths"]["fairseq_export"]), "--gen-subset", "test", "--beam", str(beam), "--cpu"]
        args = options.parse_args_and_arch(options.get_generation_parser(), self.argv)
        self.task = tasks.setup_task(args)
        models, _ = checkpoint_utils.load_model_ensemble([str(forms["paths"]["fairseq_export"])], task=self.task)
        self.model = models[0].eval()
        self.generators = {b: self.task.build_generator([self.model], argparse.Namespace(**{**vars(args), "beam": b}))
                           for b in {1, beam}}
        self.hf = AutoModelForSeq2SeqLM.from_pretrained(str(forms["paths"]["transformers"])).eval()
        self.translators = {key: PairTranslator(forms["paths"][key], threads=threads) for key in CT2}
        self.task.load_dataset("test")
        ds = self.task.dataset("test")
        sd = self.task.source_dictionary
        self.eos, self.pad = sd.eos(), sd.pad()
        self.source_ids = {i: ds[i]["source"].tolist() for i in range(len(ds))}  # language token first, EOS last
        self.source = {i: [sd[t] for t in ids[:-1]] for i, ids in self.source_ids.items()}
        ordered = sorted(range(len(ds)), key=lambda i: (int(ds.num_tokens(i)), i))
        self.batched = [ds.collater([ds[i] for i in ordered[k:k + batch_size]]) for k in range(0, len(ds), batch_size)]
        picked = np.random.RandomState(seed).choice(len(ds), min(single, len(ds)), replace=False)
        self.single = [ds.collater([ds[int(i)]]) for i in picked]
        self._hf_inputs = {}
        self.n_sentences = len(ds)
        self.mean_source_tokens = float(np.mean([len(s) for s in self.source_ids.values()]))

    def _hf_input(self, batch):
        """The batch's source ids, right-padded (what the exported tokenizer gives), built once."""
        key = tuple(batch["id"].tolist())
        if key not in self._hf_inputs:
            rows = [self.source_ids[i] for i in key]
            width = max(map(len, rows))
            ids = torch.tensor([r + [self.pad] * (width - len(r)) for r in rows])
            self._hf_inputs[key] = {"input_ids": ids, "attention_mask": ids.ne(self.pad).long()}
        return self._hf_inputs[key]

    def _hf(self, batch, beam):
        with torch.no_grad():
            out = self.hf.generate(**self._hf_input(batch), num_beams=beam)
        hyps = []
        for row in out[:, 1:].tolist():  # after the decoder's start token
            hyps.append(row[:row.index(self.eos) + 1] if self.eos in row else row)
        return hyps

    def step(self, key, batch) -> int:
        """Decode one batch; return the generated tokens (best hypotheses, EOS included)."""
        if key in CT2:
            return sum(len(h) for h in self.translators[key].decode([self.source[i] for i in batch["id"].tolist()],
                                                                    beam=self.beam))
        if key == "transformers":
            return sum(len(h) for h in self._hf(batch, self.beam))
        return decode_batch(self.task, self.generators[self.beam], self.model, batch)

    def hypotheses(self, key, beam) -> Dict[int, List[str]]:
        """Best hypothesis of every sentence, as target symbols without EOS."""
        out = {}
        td = self.task.target_dictionary
        for batch in self.batched:
            ids = batch["id"].tolist()
            if key in CT2:
                hyps = [[t for t in h if t != "</s>"]
                        for h in self.translators[key].decode([self.source[i] for i in ids], beam=beam)]
            elif key == "transformers":
                hyps = [[td[t] for t in h if t != td.eos()] for h in self._hf(batch, beam)]
            else:
                found = self.task.inference_step(self.generators[beam], [self.model], batch)
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


# --- raw-text fidelity -----------------------------------------------------------------------

def fairseq_interactive(corpus: str, checkpoint: str, lines: List[str], pair: str, beam: int, flags: List[str],
                        batch_size: int, work: Path) -> List[str]:
    """fairseq-interactive on the full checkpoint: raw text in, detokenised text out (D- lines)."""
    from fairseq import options
    from fairseq_cli import interactive

    data, langs, pairs = read_corpus(corpus)
    src, tgt = pair.split("-")
    (work / "input.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    argv = [data, "--task", "multilingual_langshare", "--user-dir", PKG_DIR, "--langs", ",".join(langs),
            "--lang-pairs", ",".join(pairs), *flags, "--path", checkpoint, "-s", src, "-t", tgt, "--beam", str(beam),
            "--cpu", "--bpe", "sentencepiece", "--sentencepiece-model", os.path.join(corpus, "spm.model"),
            "--input", str(work / "input.txt"), "--buffer-size", str(batch_size), "--batch-size", str(batch_size)]
    out = io.StringIO()
    with redirect_stdout(out):
        interactive.main(options.parse_args_and_arch(options.get_interactive_generation_parser(), argv))
    return [line.split("\t", 2)[2] for line in out.getvalue().splitlines() if line.startswith("D-")]


def hf_translate(model_dir: Path, lines: List[str], beam: int, batch_size: int) -> List[str]:
    """AutoTokenizer -> generate -> batch_decode, batches of similar length, in input order."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForSeq2SeqLM.from_pretrained(str(model_dir)).eval()
    order = sorted(range(len(lines)), key=lambda i: (len(tokenizer(lines[i]).input_ids), i))
    out = [""] * len(lines)
    for k in range(0, len(order), batch_size):
        ids = order[k:k + batch_size]
        batch = tokenizer([lines[i] for i in ids], return_tensors="pt", padding=True)
        with torch.no_grad():
            decoded = tokenizer.batch_decode(model.generate(**batch, num_beams=beam), skip_special_tokens=True)
        for i, text in zip(ids, decoded):
            out[i] = text
    return out


def fidelity(corpus: str, checkpoint: str, pairs: List[str], beams=(1, 4), batch_size: int = 64,
             progress=True) -> Dict:
    """Per direction and beam: translations identical to fairseq-interactive's, from raw text."""
    from fairseq_langshare.deploy.transformers_export import export_transformers

    flags = task_flags_of(checkpoint)
    result = {}
    with tempfile.TemporaryDirectory(prefix="langshare-hf-fidelity-") as tmp:
        for pair in tqdm(pairs, desc="raw-text fidelity", unit="direction", disable=not progress):
            src, tgt = pair.split("-")
            lines = Path(corpus, "raw", f"test.{pair}.{src}").read_text(encoding="utf-8").splitlines()
            hf_dir = Path(tmp) / f"hf-{pair}"
            export_transformers(checkpoint, src, tgt, hf_dir, verbose=False)
            entry = {"sentences": len(lines)}
            for beam in beams:
                ours = hf_translate(hf_dir, lines, beam, batch_size)
                theirs = fairseq_interactive(corpus, checkpoint, lines, pair, beam, flags, batch_size, Path(tmp))
                differ = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
                entry[f"beam{beam}"] = {"identical": len(lines) - len(differ), "differ": differ[:20],
                                        "examples": [{"line": i, "transformers": ours[i], "fairseq": theirs[i]}
                                                     for i in differ[:3]]}
            result[pair] = entry
    return result


def task_flags_of(checkpoint: str) -> List[str]:
    """The language-token flags the full checkpoint was trained with."""
    from fairseq import checkpoint_utils

    task = checkpoint_utils.load_checkpoint_to_cpu(checkpoint)["cfg"].task
    flags = ["--encoder-langtok", task.encoder_langtok] if getattr(task, "encoder_langtok", None) else []
    return flags + (["--decoder-langtok"] if getattr(task, "decoder_langtok", False) else [])


# --- run and report --------------------------------------------------------------------------

def _ratios(samples, num: str, den: str) -> Dict:
    a, b = samples[den], samples[num]
    return {"ratio": float(np.median(b) / np.median(a)), "paired_ratio": stats([y / x for x, y in zip(a, b)])}


def run(corpus: str, checkpoint: str, pair: str, reps: int = 3, warmup: int = 1, beam: int = 4, single: int = 100,
        batch_size: int = 64, threads: int = 1, seed: int = 1, fidelity_pairs=(), name=None, progress=True) -> Dict:
    import ctranslate2
    import transformers

    data, _, _ = read_corpus(corpus)
    src, tgt = pair.split("-")
    threads_before = torch.get_num_threads()
    torch.set_num_threads(threads)
    started, load_before = time.time(), os.getloadavg()
    try:
        with tempfile.TemporaryDirectory(prefix="langshare-hf-bench-") as tmp:
            forms = export_forms(checkpoint, src, tgt, Path(tmp))
            bench = Bench(data, pair, forms, beam, single, batch_size, seed, threads)
            hyps = {b: {key: bench.hypotheses(key, b) for key in CONFIGS} for b in (1, beam)}
            samples = bench.run(reps, warmup, progress)
        raw = fidelity(corpus, checkpoint, list(fidelity_pairs), (1, beam), batch_size, progress) if fidelity_pairs else {}
    finally:
        torch.set_num_threads(threads_before)
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
    mach["ctranslate2"], mach["transformers"] = ctranslate2.__version__, transformers.__version__
    identical = {f"beam{b}": {key: sum(hyps[b][key][i] == hyps[b]["fairseq_export"][i] for i in hyps[b]["fairseq_export"])
                              for key in CONFIGS} for b in (1, beam)}
    return {
        "name": name or f"transformers-vs-fairseq-{pair}",
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "elapsed_s": round(time.time() - started, 1),
        "machine": mach,
        "checkpoint": os.path.abspath(checkpoint), "corpus": os.path.abspath(corpus), "pair": pair,
        "configs": LABELS, "fairseq_argv": bench.argv,
        "data": {"split": "test", "sentences": bench.n_sentences, "single_sentences": len(bench.single),
                 "batch_size": batch_size, "batches": len(bench.batched), "beam": beam,
                 "mean_source_tokens": bench.mean_source_tokens},
        "protocol": {"reps": reps, "warmup": warmup, "threads": threads, "seed": seed,
                     "order": "per repetition: batch 1, then batch N; within each, per batch the four "
                              "configurations in the orders of a 4x4 Williams design, cycled"},
        "metrics": metrics, "bytes_on_disk": forms["bytes"],
        "identical_to_fairseq_export": identical,
        "raw_text_fidelity_vs_fairseq_interactive": raw,
    }


def markdown(result) -> str:
    d, m, p = result["data"], result["machine"], result["protocol"]
    lines = [f"### {result['name']} ({result['date']})", "",
             f"- checkpoint `{result['checkpoint']}`, corpus `{result['corpus']}`, direction {result['pair']}: "
             f"{d['sentences']} test sentences (mean {d['mean_source_tokens']:.1f} source tokens incl. language token "
             f"and EOS) in {d['batches']} length-sorted batches of {d['batch_size']}, and {d['single_sentences']} of "
             f"them one at a time; beam {d['beam']}, fairseq-generate's length rules",
             f"- protocol: {p['warmup']} warm-up + {p['reps']} measured repetitions, the four configurations "
             f"interleaved batch by batch (Williams design); {p['threads']} thread each",
             f"- machine: {m['nproc']} CPUs ({m['cpu']}), shared with other jobs (load average "
             f"{m['loadavg_before'][0]:.2f} → {m['loadavg_after'][0]:.2f}); torch {m['torch']}, transformers "
             f"{m['transformers']}, CTranslate2 {m['ctranslate2']}; wall time {result['elapsed_s']:.0f} s",
             "", f"| configuration | {result['metrics']['single']['label']} | vs fairseq | "
                 f"{result['metrics']['batched']['label']} | vs fairseq | same best hypothesis as fairseq, beam "
                 f"{d['beam']} / greedy | size on disk |",
             "|---|---|---|---|---|---|---|"]
    for key, label in result["configs"].items():
        cells = []
        for metric in ("single", "batched"):
            e = result["metrics"][metric]
            s, r = e[key], e["vs_fairseq_export"][key]
            cells += [f"{s['median']:,.0f}", f"x{r['ratio']:.2f} (CPU time x{e['vs_fairseq_export_cpu_time'][key]['ratio']:.2f})"]
        same = result["identical_to_fairseq_export"]
        beam_same, greedy_same = same[f"beam{d['beam']}"][key], same["beam1"][key]
        lines.append(f"| {label} | {' | '.join(cells)} | {beam_same} / {greedy_same} of {d['sentences']} | "
                     f"{result['bytes_on_disk'][key] / 1e6:.2f} MB |")
    raw = result["raw_text_fidelity_vs_fairseq_interactive"]
    if raw:
        total = sum(e["sentences"] for e in raw.values())
        cells = []
        for beam_key in [k for k in next(iter(raw.values())) if k.startswith("beam")]:
            same = sum(e[beam_key]["identical"] for e in raw.values())
            cells.append(f"{beam_key.replace('beam', 'beam ')}: {same:,} of {total:,} ({same / total:.2%})")
        lines += ["", f"Raw text through AutoTokenizer, generate and batch_decode against fairseq-interactive on the "
                      f"full checkpoint, {len(raw)} directions: " + "; ".join(cells) + "."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.transformers_vs_fairseq",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", required=True, help="prepared corpus directory (manifest.json + bin/ + raw/)")
    parser.add_argument("--checkpoint", required=True, help="full multilingual checkpoint")
    parser.add_argument("--pair", default="en-fr", help="direction to export and time (default %(default)s)")
    parser.add_argument("--name", help="result name (default transformers-vs-fairseq-PAIR)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--single", type=int, default=100, help="sentences decoded one at a time (default %(default)s)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--fidelity-pairs", default="", help="directions whose raw test text is compared with "
                        "fairseq-interactive (comma-separated, 'all': every direction of the corpus; default none)")
    parser.add_argument("--out-json", help="default benchmarks/results/NAME.json")
    args = parser.parse_args(argv)
    _, _, lang_pairs = read_corpus(args.corpus)
    pairs = lang_pairs if args.fidelity_pairs == "all" else [p for p in args.fidelity_pairs.split(",") if p]
    result = run(args.corpus, args.checkpoint, args.pair, args.reps, args.warmup, args.beam, args.single,
                 args.batch_size, args.threads, args.seed, pairs, args.name)
    result["command"] = ("python -m benchmarks.transformers_vs_fairseq "
                         + shlex.join(argv if argv is not None else sys.argv[1:]))
    out_json = args.out_json or os.path.join(REPO_ROOT, "benchmarks", "results", f"{result['name']}.json")
    write_json(result, out_json)
    sys.stdout.write(markdown(result))
    print(f"JSON: {out_json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
