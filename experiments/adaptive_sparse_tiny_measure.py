"""The tiny Attn+FFN+Layer training of tests/test_adaptive_sparse_training.py, printing its figures.
Run from the repository root: PYTHONPATH=.:tests python experiments/adaptive_sparse_tiny_measure.py [extra fairseq flags]
(for the old code: from a copy of it, with its own PYTHONPATH)."""
import json, math, sys, tempfile
from collections import Counter
from pathlib import Path
import torch
import test_adaptive_sparse_training as t
from tiny_corpus import generate, make_corpus, task_args, train
from test_export import TRAIN
torch.set_num_threads(1)
root = Path(tempfile.mkdtemp())
corpus = make_corpus(root / "c", pairs=t.PAIRS)
records = train(task_args(corpus) + TRAIN + ["--lr", t.LR, "--arch", t.ARCH, "--sparse-types", "attn,ffn,layer",
    "--decoder-layers", "4", "--sparse-decoder-keep-layers", "2", "--dropout", "0.0", "--max-update", str(t.UPDATES),
    "--save-interval-updates", str(t.EARLY), "--keep-interval-updates", "-1",
    "--save-dir", str(root / "s"), "--log-interval", "1"] + sys.argv[1:])
w = {"sparsity": 0.1, "disparity": 0.02, "topk": 0.1}
ratios = []
for r in records:
    if "nll_loss" in r and "num_updates" in r:
        aux = sum(w[k.split("_")[1]] * float(v) for k, v in r.items() if k.startswith("aux_") and v is not None)
        ratios.append((int(r["num_updates"]), aux / (float(r["nll_loss"]) * math.log(2)), float(r["nll_loss"]) * math.log(2)))
print("max aux/CE", max(x[1] for x in ratios), "at", max(ratios, key=lambda x: x[1])[0], "final CE nats", ratios[-1][2])
ck = root / "s" / "checkpoint_last.pt"
ag = {}
for (stack, c), mu in t.logits_of(ck).items():
    for lang in t.TRAINED_IDS[stack]:
        ag[(stack, c, lang)] = t.sampled_agreement(mu[lang].reshape(-1, mu.size(-1)), t.KEEP[c])
print("agreement mean", sum(ag.values()) / len(ag))
for name, path in (("early", next((root / "s").glob(f"checkpoint_*_{t.EARLY}.pt"))), ("end", ck)):
    print(f"kept score mean at {name}", t.kept_score_mean(path))
tok, ok, tot = Counter(), 0, 0
for pair in t.PAIRS:
    s, g = pair.split("-")
    hy = generate(task_args(corpus, pairs=[pair]) + ["--path", str(ck), "--gen-subset", "valid", "-s", s, "-t", g,
                  "--beam", "2", "--cpu", "--max-tokens", "1000"])
    ws = [x for h in hy.values() for x in h.split()]
    tok.update(ws); ok += sum(x.endswith(g) for x in ws); tot += len(ws)
print("top token share", tok.most_common(1)[0][1] / tot, "target-language share", ok / tot)
from fairseq_langshare.analysis.adaptive_sparse import sampled_vs_inference_nll
print("valid nll nats", sampled_vs_inference_nll(ck, corpus["bin"]))
