"""What each language uses in a trained LSL model: how similar the languages' copies of each
language-specific encoder layer are, measured on the same inputs.

``langshare analyze lsl-similarity CHECKPOINT --out DIR [--split test]`` runs the checkpoint over
every direction of a split, keeps the inputs every language-specific encoder layer receives (all
languages' sentences), runs every trained language's copy of that layer on all of them, and
compares what the copies add to the same input (output minus input: the residual stream's shared
part would otherwise dominate) pairwise with linear CKA (Kornblith et al. 2019: 1 = the same
function up to rotation and scale, lower = more language-specific). Writes
``lsl_similarity.json`` and ``lsl_similarity.png`` (one heatmap per LSL, languages in inventory
order, which ``langshare prepare-gettext`` makes training-size order). This is the analysis of a
*fixed* LSL architecture; ``langshare analyze lsl`` reads the mixing weights of a search model.
"""

from pathlib import Path
from typing import Dict, Optional

import torch

from ..atomic_files import save_figure_atomic, write_json_atomic
from ..modules.language_specific_layer import LanguageSpecificEncoderLayer, PartialLanguageSpecificEncoderLayer
from .figures import new_figure
from ..saved_config import refuse_export
from ..option_ranges import Range

__all__ = ["linear_cka", "copy_similarity", "plot_similarity", "analyze", "add_analysis"]


def linear_cka(x: torch.Tensor, y: torch.Tensor) -> float:
    """Linear CKA of two (tokens x features) representations of the same tokens."""
    x = x.double() - x.double().mean(0)
    y = y.double() - y.double().mean(0)
    cross = (y.t() @ x).norm() ** 2
    return float(cross / ((x.t() @ x).norm() * (y.t() @ y).norm()))


@torch.no_grad()
def copy_similarity(checkpoint: str, data: Optional[str] = None, split: str = "test",
                    max_sentences: int = 2000, max_tokens: int = 4000) -> Dict:
    """Per language-specific encoder layer: CKA between what every pair of trained languages' copies
    add to the same inputs."""
    from fairseq import checkpoint_utils

    refuse_export(checkpoint, "language-specific encoder layer")
    overrides = {"data": data} if data else {}
    models, _, task = checkpoint_utils.load_model_ensemble_and_task([checkpoint], arg_overrides=overrides)
    model = models[0].eval()
    layers = {i: layer for i, layer in enumerate(model.encoder.layers) if isinstance(layer, LanguageSpecificEncoderLayer)}
    if not layers:
        partial = {layer.component for layer in model.encoder.layers
                   if isinstance(layer, PartialLanguageSpecificEncoderLayer)}
        if partial:
            raise ValueError(f"{checkpoint}'s language-specific encoder layers are --lsl-component {partial.pop()} "
                             "(one block per language, the rest shared): lsl-similarity compares whole-layer copies "
                             "(--lsl-component layer) and has nothing to compare here")
        raise ValueError(f"{checkpoint} has no language-specific encoder layer: analyse an lsl_transformer trained "
                         "with --lsl-encoder-layers (a --lsl-search model: `langshare analyze lsl`)")
    inputs = {i: [] for i in layers}

    def keep(index):
        def hook(module, args, kwargs):
            x = args[0]
            mask = kwargs.get("encoder_padding_mask", args[1] if len(args) > 1 else None)
            rows = x.transpose(0, 1)  # B x T x C
            valid = torch.ones(rows.shape[:2], dtype=torch.bool) if mask is None else ~mask
            inputs[index].append((x.clone(), None if mask is None else mask.clone(), valid))
        return hook

    handles = [layer.register_forward_pre_hook(keep(i), with_kwargs=True) for i, layer in layers.items()]
    seen = 0
    try:
        task.load_dataset(split)
        itr = task.get_batch_iterator(task.dataset(split), max_tokens=max_tokens).next_epoch_itr(shuffle=False)
        for batch in itr:
            model.encoder(**{k: v for k, v in task.ensure_lang_ids(batch)["net_input"].items()
                             if k != "prev_output_tokens"})
            seen += batch["nsentences"]
            if seen >= max_sentences:
                break
    finally:
        for handle in handles:
            handle.remove()
    langs = task.inventory.langs
    pairs = [p.split("-") for p in task.lang_pairs]
    result = {"checkpoint": str(checkpoint), "split": split, "sentences": seen, "layers": []}
    for index, layer in layers.items():
        trained = sorted({(s if layer.side == "src" else t) for s, t in pairs}, key=langs.index)
        outputs = {}
        for lang in trained:
            copy = layer.copies[langs.index(lang)]
            outputs[lang] = torch.cat([(copy(x, encoder_padding_mask=mask) - x).transpose(0, 1)[valid]
                                       for x, mask, valid in inputs[index]])
        matrix = [[linear_cka(outputs[a], outputs[b]) for b in trained] for a in trained]
        result["layers"].append({"layer": index + 1, "side": layer.side, "languages": trained, "cka": matrix,
                                 "tokens": int(next(iter(outputs.values())).size(0))})
    return result


def plot_similarity(result: Dict, path) -> Path:
    """One heatmap per language-specific layer: CKA between the languages' copies."""
    layers = result["layers"]
    fig = new_figure(4.2 * len(layers), 3.8)
    for k, entry in enumerate(layers):
        ax = fig.add_subplot(1, len(layers), k + 1)
        image = ax.imshow(entry["cka"], vmin=0, vmax=1, cmap="viridis")
        n = len(entry["languages"])
        ax.set_xticks(range(n))
        ax.set_xticklabels(entry["languages"], rotation=90, fontsize="small")
        ax.set_yticks(range(n))
        ax.set_yticklabels(entry["languages"], fontsize="small")
        for i in range(n):
            for j in range(n):
                ax.text(j, i, f"{entry['cka'][i][j]:.2f}", ha="center", va="center", fontsize=6,
                        color="white" if entry["cka"][i][j] < 0.6 else "black")
        side = {"src": "source", "tgt": "target"}[entry["side"]]
        ax.set_title(f"encoder layer {entry['layer']} ({side} LSL): CKA of copies", fontsize="small")
        fig.colorbar(image, ax=ax, fraction=0.046)
    fig.tight_layout()
    return save_figure_atomic(fig, Path(path))


def analyze(checkpoint, out_dir, data=None, split="test", max_sentences=2000, verbose=True) -> Dict:
    result = copy_similarity(checkpoint, data, split, max_sentences)
    out = Path(out_dir)
    result["json"], result["png"] = str(out / "lsl_similarity.json"), str(out / "lsl_similarity.png")
    write_json_atomic(result["json"], result)
    plot_similarity(result, result["png"])
    if verbose:
        for entry in result["layers"]:
            cka = torch.tensor(entry["cka"])
            n = cka.size(0)
            others = (cka.sum(1) - 1) / max(n - 1, 1)
            print(f"encoder layer {entry['layer']} ({entry['side']} LSL, {entry['tokens']} tokens): mean CKA of each "
                  "language's copy with the others: " + ", ".join(f"{l} {v:.2f}" for l, v in zip(entry["languages"],
                                                                                            others.tolist())))
        print(f"wrote {result['json']} and {result['png']}")
    return result


def _run(args) -> int:
    analyze(args.checkpoint, args.out, args.data, args.split, args.max_sentences)
    return 0


def add_analysis(methods) -> None:
    p = methods.add_parser(
        "lsl-similarity", help="LSL: how similar the languages' copies of each LSL are on the same inputs (CKA)",
        description="Run a trained lsl_transformer over a split, feed every language-specific encoder layer's inputs "
                    "to every trained language's copy and compare what the copies add to them pairwise (linear CKA).")
    p.add_argument("checkpoint", help="an lsl_transformer checkpoint with --lsl-encoder-layers")
    p.add_argument("--data", default=None, help="binarized data directory (default: the one it was trained on)")
    p.add_argument("--split", default="test", help="split to run over (every direction of the task)")
    p.add_argument("--max-sentences", type=Range(1, why="sentences").of(int),
                   default=2000, help="sentences to collect layer inputs from")
    p.add_argument("--out", required=True, help="directory for lsl_similarity.json and lsl_similarity.png")
    p.set_defaults(func=_run)
