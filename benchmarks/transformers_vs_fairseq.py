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
import io
import os
import sys
import tempfile
from contextlib import redirect_stdout
from pathlib import Path
from typing import Dict, List

import torch
from tqdm import tqdm

from .harness import PKG_DIR, decode_batch
from .pair_decoding import (CT2, CT2_LABELS, PairDecoding, add_decoding_args, bytes_on_disk, decoding_threads,
                            export_ctranslate2_forms, result_head, speed_metrics, write_result)
from .run import read_corpus

CONFIGS = ("fairseq_export", "transformers", *CT2)
LABELS = {"fairseq_export": "fairseq SequenceGenerator (fairseq-generate), exported pair (.pt)",
          "transformers": "transformers generate, exported pair", **CT2_LABELS}


def export_forms(checkpoint, src: str, tgt: str, out_dir: Path) -> Dict:
    from fairseq_langshare.deploy.transformers_export import export_transformers
    from fairseq_langshare.export import export_pair

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"fairseq_export": out_dir / f"{src}-{tgt}.pt", "transformers": out_dir / f"hf-{src}-{tgt}"}
    export_pair(checkpoint, src, tgt, paths["fairseq_export"], verbose=False)
    export_transformers(checkpoint, src, tgt, paths["transformers"], verbose=False)
    paths.update(export_ctranslate2_forms(checkpoint, src, tgt, out_dir))
    return {"paths": paths, "bytes": {key: bytes_on_disk(path) for key, path in paths.items()}}


class Bench(PairDecoding):
    """fairseq and transformers generate on the exported pair, CTranslate2 float32 and int8."""
    configs = CONFIGS

    def __init__(self, data: str, pair: str, forms: Dict, beam: int, single: int, batch_size: int, seed: int,
                 threads: int):
        from transformers import AutoModelForSeq2SeqLM

        super().__init__(data, pair, forms, forms["paths"]["fairseq_export"], beam, single, batch_size, seed, threads)
        self.model = self.load_fairseq(forms["paths"]["fairseq_export"])
        self.generators = {b: self.task.build_generator([self.model], argparse.Namespace(**{**vars(self.args),
                                                                                             "beam": b}))
                           for b in {1, beam}}
        self.hf = AutoModelForSeq2SeqLM.from_pretrained(str(forms["paths"]["transformers"])).eval()
        sd = self.task.source_dictionary
        self.eos, self.pad = sd.eos(), sd.pad()
        self._hf_inputs = {}

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

    def decode(self, key, batch) -> int:
        if key == "transformers":
            return sum(len(h) for h in self._hf(batch, self.beam))
        return decode_batch(self.task, self.generators[self.beam], self.model, batch)

    def symbols(self, key, batch, beam: int) -> List[List[str]]:
        if key == "transformers":
            td = self.task.target_dictionary
            return [[td[t] for t in h if t != td.eos()] for h in self._hf(batch, beam)]
        return self.fairseq_symbols(self.generators[beam], self.model, batch)


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

def run(corpus: str, checkpoint: str, pair: str, reps: int = 3, warmup: int = 1, beam: int = 4, single: int = 100,
        batch_size: int = 64, threads: int = 1, seed: int = 1, fidelity_pairs=(), name=None, progress=True) -> Dict:
    import ctranslate2
    import transformers

    data, _, _ = read_corpus(corpus)
    src, tgt = pair.split("-")
    with decoding_threads(threads) as (started, load_before):
        with tempfile.TemporaryDirectory(prefix="langshare-hf-bench-") as tmp:
            forms = export_forms(checkpoint, src, tgt, Path(tmp))
            bench = Bench(data, pair, forms, beam, single, batch_size, seed, threads)
            hyps = {b: {key: bench.hypotheses(key, b) for key in CONFIGS} for b in (1, beam)}
            samples = bench.run(reps, warmup, progress)
        raw = fidelity(corpus, checkpoint, list(fidelity_pairs), (1, beam), batch_size, progress) if fidelity_pairs else {}
    identical = {f"beam{b}": {key: sum(hyps[b][key][i] == hyps[b]["fairseq_export"][i] for i in hyps[b]["fairseq_export"])
                              for key in CONFIGS} for b in (1, beam)}
    versions = {"ctranslate2": ctranslate2.__version__, "transformers": transformers.__version__}
    return {
        **result_head(name or f"transformers-vs-fairseq-{pair}", started, load_before, threads, versions, checkpoint,
                      corpus, LABELS, bench, reps, warmup, seed),
        "metrics": speed_metrics(samples, CONFIGS, batch_size), "bytes_on_disk": forms["bytes"],
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
    add_decoding_args(parser, reps=3)
    parser.add_argument("--fidelity-pairs", default="", help="directions whose raw test text is compared with "
                        "fairseq-interactive (comma-separated, 'all': every direction of the corpus; default none)")
    parser.add_argument("--out-json", help="default benchmarks/results/NAME.json")
    args = parser.parse_args(argv)
    _, _, lang_pairs = read_corpus(args.corpus)
    pairs = lang_pairs if args.fidelity_pairs == "all" else [p for p in args.fidelity_pairs.split(",") if p]
    result = run(args.corpus, args.checkpoint, args.pair, args.reps, args.warmup, args.beam, args.single,
                 args.batch_size, args.threads, args.seed, pairs, args.name)
    write_result(result, "transformers_vs_fairseq", argv, args.out_json, markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
