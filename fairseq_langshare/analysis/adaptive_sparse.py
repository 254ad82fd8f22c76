"""Adaptive-sparse analysis (Gong et al., 2022, section 6.2 and Figure 2).

``langshare analyze adaptive-sparse CHECKPOINT --out DIR [--language-families FILE]``:

* every language's score vector per side (encoder: source languages, decoder: target languages):
  the noise-free scores sigmoid(mu / tau) of all its heads, FFN blocks and layers, concatenated;
* the components each language keeps at inference (top-k of mu: layers, heads per layer, blocks
  per layer, 0-based) -> ``adaptive_sparse.json``;
* how decided each selection is (issue 14): per stack and category, the mean noise-free score of the
  kept and of the other components, and the share of training-time (Gumbel-sampled) top-k draws
  that equal the inference top-k (1: decided; about 1 / C(n, k) for tied logits) -> ``selection``;
* the PCA of the score vectors (2 components, centred, by SVD) coloured by language family
  (the ``family`` level of ``data/language_families.py``, as the paper's Figure 2) ->
  ``adaptive_sparse_<side>.png`` for every side with at least two languages.
"""

from pathlib import Path
from typing import Dict, List

import torch

from ..data.language_families import LanguageFamilyError, family_of, read_families_file
from ..languages import decode_inventory
from ..models.adaptive_sparse_transformer import _stack_tables, selected_components
from ..modules.scaled_logits import scaled_from_state
from .figures import new_figure
from ..saved_config import config_value, refuse_export, trained_codes
from ..atomic_files import save_figure_atomic, write_json_atomic
from ..checkpoint_safety import require_checkpoint

__all__ = ["scores_from_state", "sampled_agreement", "selection_summary", "sampled_vs_inference_nll", "pca_2d",
           "plot_pca", "analyze", "add_analysis"]

STACKS = {"encoder": "src", "decoder": "tgt"}


def scores_from_state(state, source: str = "the checkpoint") -> Dict:
    weights = state["model"]
    cfg = state.get("cfg") or {}
    model_cfg, task_cfg = config_value(cfg, "model"), config_value(cfg, "task")
    if not any(".sparse_scores." in k for k in weights):
        refuse_export(source, "component scores", state)
        raise ValueError(f"{source} has no component scores: analyze a checkpoint trained with "
                         "--arch adaptive_sparse_transformer*")
    langs = decode_inventory(weights["lang_inventory"]) if "lang_inventory" in weights else []
    tau = float(config_value(model_cfg, "sparse_tau", 1.0))
    stacks = {}
    for stack, side in STACKS.items():
        prefix = f"{stack}.sparse_scores."
        logits = {c: scaled_from_state(weights, f"{prefix}{c}_logits") for c in ("heads", "blocks", "layers")
                  if f"{prefix}{c}_logits" in weights}
        tables = _stack_tables(weights, model_cfg, stack)
        codes = trained_codes(task_cfg, langs, side)
        vectors = {code: torch.cat([torch.sigmoid(mu[langs.index(code)] / tau).flatten() for mu in logits.values()])
                   for code in codes}
        rows = [langs.index(code) for code in codes]
        keep = {c: int(t["mask"][0].reshape(-1, t["mask"].size(-1))[0].sum()) for c, t in tables.items()}
        stacks[stack] = {
            "side": side, "languages": codes, "categories": list(logits),
            "selection": {c: selection_summary(mu[rows], keep[c], tau) for c, mu in logits.items()},
            "scores": {code: [round(v, 6) for v in vec.tolist()] for code, vec in vectors.items()},
            "selected": {code: selected_components(tables, langs.index(code)) for code in codes},
        }
    return stacks


def sampled_agreement(mu: torch.Tensor, keep: int, draws: int = 1000, seed: int = 0) -> float:
    """Share of Gumbel draws whose top-``keep`` equals the noise-free top-``keep`` (the last dimension is
    one group), averaged over the groups: how often Algorithm 1's phase 2 trains the sub-network that
    inference runs. Tau does not change the order of ``mu + g1 - g0``, so it does not enter."""
    g = torch.Generator().manual_seed(seed)
    mu = mu.float()
    u = torch.rand((draws,) + tuple(mu.shape), generator=g).clamp(1e-6, 1 - 1e-6)
    noisy = mu + torch.log(u) - torch.log1p(-u)
    chosen = torch.zeros_like(noisy).scatter_(-1, noisy.topk(keep, dim=-1).indices, 1.0)
    decided = torch.zeros_like(mu).scatter_(-1, mu.topk(keep, dim=-1).indices, 1.0)
    return float((chosen == decided).all(-1).float().mean())


def selection_summary(mu: torch.Tensor, keep: int, tau: float = 1.0) -> Dict[str, float]:
    """mu (languages, ..., n): mean score sigmoid(mu / tau) of the kept and of the other components,
    the smallest gap between a group's k-th and (k+1)-th logit, and ``sampled_agreement``."""
    mu = mu.float()
    mask = torch.zeros_like(mu).scatter_(-1, mu.topk(keep, dim=-1).indices, 1.0).bool()
    scores = torch.sigmoid(mu / tau)
    ordered = mu.sort(dim=-1, descending=True).values
    gap = (ordered[..., keep - 1] - ordered[..., keep]) if keep < mu.size(-1) else torch.full(mu.shape[:-1], float("inf"))
    return {"kept_score": round(float(scores[mask].mean()), 4),
            "other_score": round(float(scores[~mask].mean()), 4) if (~mask).any() else None,
            "median_gap": round(float(gap.flatten().median()), 4),
            "agreement": round(sampled_agreement(mu, keep), 4)}


def sampled_vs_inference_nll(checkpoint, data: str, split: str = "valid", max_batches: int = 0,
                             seed: int = 1) -> Dict[str, float]:
    """Cross entropy per target token (nats, no label smoothing, dropout off) of ``checkpoint`` on ``split``
    with the inference sub-networks (eval mode) and with the scores of training (Gumbel draws, phase 2
    masks at the checkpoint's update): a collapse in both is a training failure, in inference only a
    mismatch between the trained and the deployed sub-network."""
    from fairseq import checkpoint_utils

    models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task([str(checkpoint)],
                                                                      arg_overrides={"data": str(data)})
    model = models[0]
    history = checkpoint_utils.load_checkpoint_to_cpu(str(checkpoint)).get("optimizer_history") or [{}]
    model.set_num_updates(int(history[-1].get("num_updates", 0)))  # the phase of Algorithm 1 at the checkpoint
    task.load_dataset(split)
    itr = task.get_batch_iterator(dataset=task.dataset(split), max_tokens=4096, seed=seed,
                                  ignore_invalid_inputs=True).next_epoch_itr(shuffle=False)
    torch.manual_seed(seed)
    totals = {"inference": 0.0, "sampled": 0.0}
    tokens = 0
    with torch.no_grad():
        for i, sample in enumerate(itr):
            if max_batches and i >= max_batches:
                break
            target = sample["target"]
            pad = target.eq(task.target_dictionary.pad())
            for mode in totals:
                model.eval()
                if mode == "sampled":
                    for scorer in model.scorers().values():
                        scorer.train()
                out = model(**sample["net_input"])
                lprobs = model.get_normalized_probs(out, log_probs=True)
                nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1).masked_fill(pad, 0.0)
                totals[mode] += float(nll.sum())
                model.auxiliary_outputs()  # drop what the forward recorded
            tokens += int((~pad).sum())
    model.eval()
    return {**{mode: round(total / max(tokens, 1), 4) for mode, total in totals.items()}, "tokens": tokens}


def pca_2d(matrix: torch.Tensor) -> torch.Tensor:
    """Rows projected on the first two principal components (centred; zeros where fewer exist)."""
    x = matrix.double() - matrix.double().mean(0, keepdim=True)
    _, _, v = torch.linalg.svd(x, full_matrices=False)
    coords = x @ v[:2].t()
    if coords.size(1) < 2:
        coords = torch.cat([coords, torch.zeros(coords.size(0), 2 - coords.size(1), dtype=coords.dtype)], 1)
    return coords


def families_for(codes: List[str], path=None, level: str = "family") -> Dict[str, str]:
    overrides = read_families_file(path) if path else None
    out = {}
    for code in codes:
        try:
            out[code] = family_of(code, overrides, level, source=str(path) if path else None)
        except LanguageFamilyError:
            out[code] = "unknown"  # drawn in grey; listed in the JSON
    return out


def plot_pca(stats: Dict, families: Dict[str, str], path) -> Path:
    """Figure 2: languages placed by the PCA of their score vectors, coloured by family."""
    codes = stats["languages"]
    coords = stats["pca"]
    names = sorted(set(families.values()))
    fig = new_figure(5.5, 4.5)
    ax = fig.add_subplot(1, 1, 1)
    import matplotlib

    cmap = matplotlib.colormaps["tab10"]
    for i, name in enumerate(names):
        members = [c for c in codes if families[c] == name]
        color = "grey" if name == "unknown" else cmap(i % 10)
        ax.scatter([coords[c][0] for c in members], [coords[c][1] for c in members], color=color, label=name, s=30)
        for c in members:
            ax.annotate(c, coords[c], fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel("PC 1")
    ax.set_ylabel("PC 2")
    ax.set_title(f"component selection per {stats['side']} language (PCA of scores)", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return save_figure_atomic(fig, path)


def analyze(checkpoint, out_dir, families_file=None, level: str = "family", verbose: bool = True) -> Dict:
    from fairseq import checkpoint_utils

    path = Path(checkpoint)
    require_checkpoint(path, "checkpoint")
    stacks = scores_from_state(checkpoint_utils.load_checkpoint_to_cpu(str(path)), source=str(path))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    result = {"checkpoint": str(path), "stacks": stacks, "figures": []}
    for stack, stats in stacks.items():
        codes = stats["languages"]
        stats["families"] = families_for(codes, families_file, level)
        if len(codes) >= 2:
            coords = pca_2d(torch.tensor([stats["scores"][c] for c in codes]))
            stats["pca"] = {c: [round(float(v), 6) for v in row] for c, row in zip(codes, coords)}
            result["figures"].append(str(plot_pca(stats, stats["families"], out / f"adaptive_sparse_{stats['side']}.png")))
    json_path = out / "adaptive_sparse.json"
    write_json_atomic(json_path, result)
    result["json"] = str(json_path)
    if verbose:
        print("kept at inference (1-based; adaptive_sparse.json holds the 0-based indices):")
        for stack, stats in stacks.items():
            print(f"{stack} ({stats['side']} language):")
            for code in stats["languages"]:
                print(f"  {code:<8} {stats['families'][code]:<16} " + readable_selection(stats["selected"][code]))
        print(f"wrote {json_path} and {len(result['figures'])} figure(s) in {out}")
    return result


def readable_selection(selected: Dict[str, List]) -> str:
    """``selected_components``' 0-based indices as the papers number them: ``layers 1,3; heads L1 {2,4}
    L2 {1,3}; blocks L1 {...} ...`` (a category without sparsity is left out)."""
    def numbers(indices):
        return ",".join(str(i + 1) for i in indices)

    parts = []
    for category, chosen in selected.items():
        if chosen is None:
            continue
        if category == "layers":
            parts.append(f"layers {numbers(chosen)}")
        else:  # one list per layer
            parts.append(f"{category} " + " ".join(f"L{layer + 1} {{{numbers(row)}}}" for layer, row in enumerate(chosen)))
    return "; ".join(parts)


def _run(args) -> int:
    analyze(args.checkpoint, args.out, families_file=args.language_families, level=args.level)
    return 0


def add_analysis(methods) -> None:
    parser = methods.add_parser(
        "adaptive-sparse",
        help="adaptive sparse: PCA of per-language component scores by family (Figure 2), selected components",
        description="Read an adaptive_sparse_transformer checkpoint: each language's component scores (heads, FFN "
                    "blocks, layers), the components it keeps at inference (JSON) and the PCA of the score vectors "
                    "coloured by language family (one figure per side with two or more languages).",
    )
    parser.add_argument("checkpoint", help="an adaptive_sparse_transformer checkpoint")
    parser.add_argument("--out", required=True, help="directory for adaptive_sparse.json and the figures")
    parser.add_argument("--language-families", default=None, metavar="FILE",
                        help="TSV lang<TAB>family overriding/extending the shipped table")
    parser.add_argument("--level", default="family", choices=("family", "genus"),
                        help="grouping of the colours (family: the paper's Figure 2)")
    parser.set_defaults(func=_run)
