"""LSL architecture search: read the mixing weights of a ``--lsl-search`` checkpoint, plot them
per layer (the paper's Figure 3) and select the arg-max architecture (section 3.2) as the exact
``--lsl-encoder-layers`` flag that trains it.

``langshare analyze lsl CHECKPOINT [CHECKPOINT ...] --out DIR`` writes ``DIR/lsl_weights.json``
and ``DIR/lsl_weights.png`` and prints the flag. With several checkpoints (runs with different
seeds) the weights are averaged and the plot shades the range between runs, as the paper's
Figure 3 does for its 3 runs; the selection uses the mean.
"""

import os
import re
from pathlib import Path
from typing import Dict, List, Sequence

import torch

from ..modules.language_specific_layer import MIX_KINDS, format_layer_spec
from ..atomic_files import save_figure_atomic, write_json_atomic
from ..checkpoint_safety import require_checkpoint
from ..saved_config import config_value
from .figures import new_figure

__all__ = ["read_mixing_weights", "mixing_weights_from_state_dict", "select_architecture",
           "plot_mixing_weights", "analyze", "add_analysis"]

SIDE_OF_KIND = {"shared": None, "src": "src", "tgt": "tgt"}


def mixing_weights_from_state_dict(state_dict, source="the model") -> List[List[float]]:
    """softmax(mix_logits) of every encoder layer, as [[w_shared, w_src, w_tgt], ...] (layer 1 first)."""
    layers = {}
    for key, value in state_dict.items():
        m = re.fullmatch(r"encoder\.layers\.(\d+)\.mix_logits", key)
        if m:
            layers[int(m.group(1))] = torch.softmax(value.detach().float().cpu(), dim=0).tolist()
    if not layers:
        raise ValueError(f"{source} has no LSL mixing weights: analyze a checkpoint trained with "
                         "--arch lsl_transformer* --lsl-search")
    if sorted(layers) != list(range(len(layers))):
        raise ValueError(f"{source}: mixing weights for encoder layers {sorted(layers)} only; every encoder "
                         "layer of a --lsl-search model has them")
    return [layers[i] for i in range(len(layers))]


def _load(checkpoint):
    from fairseq import checkpoint_utils

    path = Path(checkpoint)
    require_checkpoint(path, "checkpoint")
    return checkpoint_utils.load_checkpoint_to_cpu(str(path))


def read_mixing_weights(checkpoint) -> List[List[float]]:
    return mixing_weights_from_state_dict(_load(checkpoint)["model"], source=str(checkpoint))


def select_architecture(weights: Sequence[Sequence[float]]) -> str:
    """Arg max per layer (ties go to shared, then src): the paper's selection rule."""
    sides = []
    for w in weights:
        best = max(range(len(MIX_KINDS)), key=lambda k: (w[k], -k))
        sides.append(SIDE_OF_KIND[MIX_KINDS[best]])
    return format_layer_spec(sides)


def plot_mixing_weights(runs: Sequence[Sequence[Sequence[float]]], path, title: str = "LSL mixing weights") -> Path:
    """Figure 3: one line per branch (shared / source LSL / target LSL) over encoder layers, the
    mean over runs, shaded between the smallest and largest run."""
    w = torch.tensor(runs, dtype=torch.float64)  # runs x layers x 3
    mean, low, high = w.mean(0), w.min(0).values, w.max(0).values
    layers = list(range(1, w.size(1) + 1))
    fig = new_figure(max(4.0, 0.45 * len(layers) + 2), 3.2)
    ax = fig.add_subplot(1, 1, 1)
    labels = {"shared": "shared", "src": "source LSL", "tgt": "target LSL"}
    for k, kind in enumerate(MIX_KINDS):
        ax.plot(layers, mean[:, k].tolist(), marker="o", label=labels[kind])
        if w.size(0) > 1:
            ax.fill_between(layers, low[:, k].tolist(), high[:, k].tolist(), alpha=0.2)
    ax.set_xlabel("encoder layer")
    ax.set_ylabel("mixing weight")
    ax.set_xticks(layers)
    ax.set_ylim(0, 1)
    ax.set_title(title + (f" ({w.size(0)} runs)" if w.size(0) > 1 else ""))
    ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    path = Path(path)
    save_figure_atomic(fig, path)
    return path


def _training_flags(model_cfg, spec: str) -> List[str]:
    """The flags that train the selected architecture (same arch and decoder setup, no search)."""
    flags = [f"--arch {getattr(model_cfg, 'arch', None) or getattr(model_cfg, '_name', 'lsl_transformer')}",
             f'--lsl-encoder-layers "{spec}"']
    if getattr(model_cfg, "lsl_separate_decoder", False):
        flags.append("--lsl-separate-decoder")
    decoder = getattr(model_cfg, "lsl_decoder_layers", "") or ""
    if decoder.strip():
        flags.append(f'--lsl-decoder-layers "{decoder}"')
    return flags


def _same_weights(a, b) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) if torch.is_tensor(a[k]) else a[k] == b[k] for k in a)


def _seed(state):
    """The --seed a checkpoint was trained with (None where its config does not say)."""
    return config_value(config_value(state.get("cfg"), "common"), "seed")


def refuse_repeated_runs(checkpoints: Sequence, states: Sequence) -> None:
    """One run given twice would be averaged as two seeds' runs (and make Figure 3's band): a one-line
    ValueError for the same path, the same file under another path, a copy (the same weights), or two
    checkpoints trained with the same --seed."""
    for j in range(len(checkpoints)):
        for i in range(j):
            first, second = checkpoints[i], checkpoints[j]
            if str(first) == str(second):
                why = f"{first} is given twice"
            elif os.path.samefile(first, second):
                why = f"{first} and {second} are the same file"
            elif _same_weights(states[i]["model"], states[j]["model"]):
                why = f"{first} and {second} hold the same weights (copies of one checkpoint)"
            elif _seed(states[i]) is not None and _seed(states[i]) == _seed(states[j]):
                why = (f"{first} and {second} were trained with the same --seed {_seed(states[i])} (two checkpoints "
                       "of one run, such as its checkpoint_best.pt and checkpoint_last.pt)")
            else:
                continue
            raise ValueError(f"{why}: the checkpoints are averaged as runs with different seeds and Figure 3's band "
                             "spans them; pass each run's checkpoint once")


def analyze(checkpoints: Sequence, out_dir, verbose: bool = True) -> Dict:
    """Read, average, plot and select; write ``lsl_weights.json`` and ``lsl_weights.png``."""
    if not checkpoints:
        raise ValueError("pass at least one --lsl-search checkpoint")
    states = [_load(c) for c in checkpoints]
    refuse_repeated_runs(checkpoints, states)
    runs = [mixing_weights_from_state_dict(s["model"], source=str(c)) for s, c in zip(states, checkpoints)]
    if len({len(r) for r in runs}) > 1:
        raise ValueError(f"the checkpoints have {sorted({len(r) for r in runs})} encoder layers; compare runs of one architecture")
    mean = torch.tensor(runs, dtype=torch.float64).mean(0).tolist()
    spec = select_architecture(mean)
    flag = f'--lsl-encoder-layers "{spec}"'
    cfg = states[0].get("cfg")
    train_flags = _training_flags(cfg["model"], spec) if cfg is not None and "model" in cfg else [flag]

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    result = {
        "checkpoints": [str(c) for c in checkpoints],
        "layers": [{"layer": i + 1, **{kind: w[k] for k, kind in enumerate(MIX_KINDS)},
                    "runs": [r[i] for r in runs]} for i, w in enumerate(mean)],
        "architecture": spec,
        "flag": flag,
        "train_flags": " ".join(train_flags),
    }
    json_path, png_path = out / "lsl_weights.json", out / "lsl_weights.png"
    write_json_atomic(json_path, result)
    plot_mixing_weights(runs, png_path)
    result.update(json=str(json_path), png=str(png_path))
    if verbose:
        print("layer  shared    src    tgt   selected")
        for entry, side in zip(result["layers"], [s.strip() for s in _sides_of(mean)]):
            print(f"{entry['layer']:5d}  {entry['shared']:6.3f} {entry['src']:6.3f} {entry['tgt']:6.3f}   {side}")
        print(f"wrote {json_path} and {png_path}")
        print(flag)
        print("train it with the search run's other flags (without --lsl-search): " + " ".join(train_flags))
    return result


def _sides_of(weights):
    return [MIX_KINDS[max(range(len(MIX_KINDS)), key=lambda k: (w[k], -k))] for w in weights]


# --- CLI -------------------------------------------------------------------------------------

def _run(args) -> int:
    analyze(args.checkpoints, args.out)
    return 0


def add_analysis(methods) -> None:
    parser = methods.add_parser(
        "lsl",
        help="LSL search: plot the mixing weights per layer and print the selected --lsl-encoder-layers",
        description="Read the mixing weights of --lsl-search checkpoints (several runs are averaged), plot them per "
                    "encoder layer (paper Figure 3) and print the arg-max architecture as the flag that trains it.",
    )
    parser.add_argument("checkpoints", nargs="+", metavar="CHECKPOINT", help="--lsl-search checkpoint(s)")
    parser.add_argument("--out", required=True, help="directory for lsl_weights.json and lsl_weights.png")
    parser.set_defaults(func=_run)
