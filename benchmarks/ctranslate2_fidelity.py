"""Does CTranslate2 translate like fairseq-generate on the same exported checkpoint?

    python -m benchmarks.ctranslate2_fidelity --corpus CORPUS --model baseline=CKPT --model lsl=CKPT \
        [--pairs en-fr,en-nb] [--work-dir DIR] [--out-json benchmarks/results/ctranslate2-fidelity.json]

For every model and direction: the pair is exported (``langshare export``, fairseq format and
CTranslate2 float32 and int8); fairseq-generate translates the binarized test set with the plain
checkpoint (fairseq's own task, the flags ``langshare evaluate`` uses); ``langshare translate``'s
``PairTranslator`` translates the raw test sentences (SentencePiece and language token applied by
the export). Both at beam 1 and beam 4 with fairseq-generate's defaults (``--lenpen 1``,
``--max-len-a 0 --max-len-b 200``, ``--min-len 1``). Reported: sentences with identical output,
BLEU and chrF of each (``langshare evaluate``'s scoring), and the differing sentences with both
systems' scores, so that each difference can be explained.
"""

import argparse
import datetime
import os
import sys
import tempfile
from pathlib import Path
from typing import Dict, List

import numpy as np
import torch
from tqdm import tqdm

from .run import REPO_ROOT

BEAMS = (1, 4)
QUANTIZATIONS = ("float32", "int8")


def fairseq_generate(corpus, checkpoint: Path, src: str, tgt: str, beam: int, results_dir: str) -> List[str]:
    """fairseq-generate on the exported plain checkpoint (no --user-dir), detokenised, in test order."""
    from fairseq_langshare.evaluation import _checkpoint_task, _task_flags, _translate

    task_name, task_cfg = _checkpoint_task(str(checkpoint))
    n = len(corpus.references("test", src, tgt))
    argv = [corpus.bin, "-s", src, "-t", tgt, "--results-path", results_dir, "--task", task_name,
            "--path", str(checkpoint), "--gen-subset", "test", "--beam", str(beam), "--remove-bpe", "sentencepiece",
            "--max-tokens", "4000", "--required-batch-size-multiple", "1", "--num-workers", "0", "--no-progress-bar",
            *_task_flags(task_name, task_cfg)]
    hyps, missing = _translate(argv, results_dir, "test", n)
    if missing:
        raise RuntimeError(f"fairseq-generate left {missing} {src}-{tgt} sentences untranslated")
    return hyps


def compare(corpus, model_name: str, checkpoint, src: str, tgt: str, work: Path) -> Dict:
    from fairseq_langshare.deploy.ctranslate2_export import export_ctranslate2
    from fairseq_langshare.deploy.translate import PairTranslator, detokenize
    from fairseq_langshare.evaluation import score
    from fairseq_langshare.export import export_pair

    pair = f"{src}-{tgt}"
    out = work / model_name
    plain = out / f"{pair}.pt"
    export_pair(checkpoint, src, tgt, plain, verbose=False)
    ct2 = {q: out / f"ct2-{pair}-{q}" for q in QUANTIZATIONS}
    for q, path in ct2.items():
        export_ctranslate2(checkpoint, src, tgt, path, quantization=q, verbose=False)
    source = corpus.references("test", tgt, src)
    refs = corpus.references("test", src, tgt)
    result = {"n": len(refs)}
    for beam in BEAMS:
        with tempfile.TemporaryDirectory() as tmp:
            theirs = fairseq_generate(corpus, plain, src, tgt, beam, tmp)
        row = {"fairseq": score(theirs, refs, tgt)}
        for q, path in ct2.items():
            translator = PairTranslator(path)
            ours = translator.translate(source, beam=beam, batch_size=64)
            differ = [i for i in range(len(refs)) if ours[i] != theirs[i]]
            row[q] = {**score(ours, refs, tgt), "identical": len(refs) - len(differ),
                      "differing": [{"id": i, "source": source[i], "fairseq": theirs[i], "ctranslate2": ours[i]}
                                    for i in differ[:20]]}
        if beam > 1:  # what CTranslate2's own defaults give: EOS not counted in the length normalisation
            translator = PairTranslator(ct2["float32"])
            order = sorted(range(len(source)), key=lambda i: len(translator.encode(source[i])))
            defaults = [""] * len(source)
            for k in range(0, len(order), 64):
                ids = order[k:k + 64]
                found = translator.translator.translate_batch([translator.encode(source[i]) for i in ids], beam_size=beam)
                for i, r in zip(ids, found):
                    defaults[i] = detokenize(r.hypotheses[0])
            row["float32_ctranslate2_defaults"] = {
                **score(defaults, refs, tgt), "identical": sum(a == b for a, b in zip(defaults, theirs))}
        result[f"beam{beam}"] = row
    return result


def summary(results: Dict) -> Dict:
    out = {}
    for model, pairs in results.items():
        rows = {}
        for beam in BEAMS:
            key = f"beam{beam}"
            n = sum(p["n"] for p in pairs.values())
            rows[key] = {"sentences": n, "fairseq_bleu_avg": float(np.mean([p[key]["fairseq"]["bleu"] for p in pairs.values()]))}
            for q in QUANTIZATIONS:
                same = sum(p[key][q]["identical"] for p in pairs.values())
                diffs = [p[key][q]["bleu"] - p[key]["fairseq"]["bleu"] for p in pairs.values()]
                rows[key][q] = {"identical": same, "identical_share": same / n,
                                "bleu_avg": float(np.mean([p[key][q]["bleu"] for p in pairs.values()])),
                                "bleu_diff_avg": float(np.mean(diffs)), "bleu_diff_max_abs": float(np.max(np.abs(diffs)))}
            f32 = [p[key]["float32"]["bleu"] for p in pairs.values()]
            i8 = [p[key]["int8"]["bleu"] for p in pairs.values()]
            rows[key]["int8_vs_float32_bleu_diff_avg"] = float(np.mean(np.subtract(i8, f32)))
        out[model] = rows
    return out


def markdown(result: Dict) -> str:
    lines = ["| model | beam | sentences | float32: identical to fairseq-generate | BLEU fairseq / float32 / int8 "
             "(average over directions) | float32 - fairseq, largest \\|Δ\\| of a direction | int8 - float32 |",
             "|---|---|---|---|---|---|---|"]
    for model, rows in result["summary"].items():
        for key, r in rows.items():
            f32, i8 = r["float32"], r["int8"]
            lines.append(f"| {model} | {key[4:]} | {r['sentences']} | {f32['identical']} ({f32['identical_share']:.2%}) | "
                         f"{r['fairseq_bleu_avg']:.2f} / {f32['bleu_avg']:.2f} / {i8['bleu_avg']:.2f} | "
                         f"{f32['bleu_diff_avg']:+.2f}, {f32['bleu_diff_max_abs']:.2f} | "
                         f"{r['int8_vs_float32_bleu_diff_avg']:+.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    from benchmarks.report import machine, write_json
    from fairseq_langshare.evaluation import _Corpus

    parser = argparse.ArgumentParser(prog="python -m benchmarks.ctranslate2_fidelity", description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", required=True, help="prepared corpus directory")
    parser.add_argument("--model", action="append", required=True, help="NAME=CHECKPOINT (repeatable)")
    parser.add_argument("--pairs", help="comma-separated directions (default: the corpus' lang_pairs)")
    parser.add_argument("--work-dir", help="where the exported forms go (default: a temporary directory)")
    parser.add_argument("--out-json", default=os.path.join(REPO_ROOT, "benchmarks", "results", "ctranslate2-fidelity.json"))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    corpus = _Corpus(args.corpus)
    pairs = args.pairs.split(",") if args.pairs else corpus.manifest["lang_pairs"]
    models = dict(m.split("=", 1) for m in args.model)
    results = {}
    with tempfile.TemporaryDirectory(prefix="langshare-fidelity-") as tmp:
        work = Path(args.work_dir or tmp)
        jobs = [(m, p) for m in models for p in pairs]
        for model, pair in tqdm(jobs, desc="fidelity", unit="direction"):
            results.setdefault(model, {})[pair] = compare(corpus, model, models[model], *pair.split("-"), work)
    import ctranslate2

    out = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
           "command": "python -m benchmarks.ctranslate2_fidelity " + " ".join(argv if argv is not None else sys.argv[1:]),
           "machine": {**machine(1), "ctranslate2": ctranslate2.__version__},
           "corpus": corpus.path, "models": {m: os.path.abspath(c) for m, c in models.items()},
           "settings": {"beams": list(BEAMS), "lenpen": 1.0, "max_len_a": 0, "max_len_b": 200, "min_len": 1,
                        "quantizations": list(QUANTIZATIONS)},
           "directions": results}
    out["summary"] = summary(results)
    write_json(out, args.out_json)
    sys.stdout.write(markdown(out))
    print(f"JSON: {args.out_json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
