"""Which loss terms move the latent-depth posteriors, measured: the gradient of each term of
Eq. 8 on the selection logits alpha, over many training batches of a checkpoint.

For each batch (training mode, the schedules at the checkpoint's update) the cross entropy per
target token (fairseq's loss / sample_size), beta * KL and lambda * L_K are differentiated
separately with respect to alpha (N x L). Over the batches: the mean gradient (the signal an
optimizer accumulates), its standard deviation (the noise of the Gumbel samples and of the
data), and their ratio per term, averaged over the languages trained on the stack's side and
the layers. A term whose mean gradient is small against its noise cannot move the posteriors.

    python experiments/latent_depth_gradients.py CKPT [CKPT ...] --data CORPUS/bin --batches 64 --out grads.json
"""

import argparse
import json
import sys
from pathlib import Path

import torch


def term_gradients(model, criterion, task, batches: int):
    """{term: (batches, N, L) tensor of d term / d alpha} for one checkpoint."""
    selector = model.decoder.layer_select or model.encoder.layer_select
    itr = task.get_batch_iterator(dataset=task.dataset("train"), max_tokens=2048, seed=1, num_workers=0,
                                  ignore_invalid_inputs=True).next_epoch_itr(shuffle=True)
    grads = {"nll": [], "kl": [], "target_depth": []}
    model.train()
    for step, sample in enumerate(itr):
        if step == batches:
            break
        alpha = selector.alpha()  # recomputed from theta each call: take the gradient at alpha
        alpha.retain_grad()
        selector.alpha = lambda: alpha
        try:
            net_output = model(**sample["net_input"])
        finally:
            del selector.alpha
        loss, _ = criterion.compute_loss(model, net_output, sample)
        nll = loss / sample["ntokens"]  # what fairseq's gradient is: the sum over tokens / sample_size
        aux, _ = model.auxiliary_outputs()
        terms = {"kl": aux.get(f"kl_{selector.name}"), "target_depth": aux.get(f"target_depth_{selector.name}")}
        for name, value in (("nll", nll), *((n, t[0] * t[1]) for n, t in terms.items() if t is not None)):
            (g,) = torch.autograd.grad(value, alpha, retain_graph=True, allow_unused=True)
            grads[name].append(torch.zeros_like(alpha) if g is None else g.detach())
        model.zero_grad()
    return {name: torch.stack(values) for name, values in grads.items() if values}, selector


def summarise(grads, selector):
    rows = selector.trained_languages
    out = {}
    for name, g in grads.items():
        g = g[:, rows]
        mean, std = g.mean(0), g.std(0)
        out[name] = {"mean_abs": float(mean.abs().mean()), "std": float(std.mean()),
                     "snr": float((mean.abs() / std.clamp_min(1e-12)).mean()),
                     "mean_per_layer": mean.mean(0).tolist()}
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoints", nargs="+", type=Path)
    parser.add_argument("--data", required=True, type=Path, help="the binarized corpus (CORPUS/bin)")
    parser.add_argument("--batches", type=int, default=64)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    from fairseq import checkpoint_utils

    import fairseq_langshare  # noqa: F401  (registers the models; allow-lists what fairseq checkpoints hold)

    results = {}
    for path in args.checkpoints:
        torch.manual_seed(1)
        models, cfg, task = checkpoint_utils.load_model_ensemble_and_task(
            [str(path)], arg_overrides={"data": str(args.data)})
        model = models[0]
        state = checkpoint_utils.load_checkpoint_to_cpu(str(path))
        updates = int(state["optimizer_history"][-1]["num_updates"])
        model.set_num_updates(updates)
        task.load_dataset("train")
        criterion = task.build_criterion(cfg.criterion)
        grads, selector = term_gradients(model, criterion, task, args.batches)
        summary = summarise(grads, selector)
        summary["updates"] = updates
        summary["beta"], summary["tau"] = selector.kl_beta(), selector.tau()
        summary["q"] = torch.sigmoid(selector.alpha().detach())[selector.trained_languages].tolist()
        results[str(path)] = summary
        print(f"{path.name} (update {updates}, beta {summary['beta']:.2f}, tau {summary['tau']:.2f})")
        for name in ("nll", "kl", "target_depth"):
            if name in summary:
                s = summary[name]
                print(f"  {name:13s} |mean grad| {s['mean_abs']:.2e}  std {s['std']:.2e}  signal/noise {s['snr']:.2f}")
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
