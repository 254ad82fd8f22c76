"""Latent-depth analysis (Li et al., NeurIPS 2020, section 5 and appendix D).

``langshare analyze latent-depth CHECKPOINT --out DIR [--log TRAIN_LOG ...]``:

* from the checkpoint: every language's selection probability q(z_l = 1) per layer of each latent
  stack, the layers the inference rule keeps, the expected and the kept depth per language
  (``latent_depth.json``), and a heatmap of layer utilisation per language with the kept layers
  marked (``latent_depth_<stack>.png``, as Figures 5 and 9);
* from fairseq training logs (``--log-format json`` or ``simple``, e.g. ``--log-file``): the
  expected utilisation u_l the model logs as ``stat_<stack>_u_<l>`` at every logged update,
  drawn as layers x updates (``latent_depth_<stack>_training.png``, Figure 6). A log with no
  per-update line (fairseq's tqdm format, its default under a terminal) is refused, naming the
  flags: its epoch summaries are averages over an epoch, not the values at an update. fairseq 0.12
  repeats lines in ``--log-file`` (one file handler per epoch) and a resumed run logs again:
  one value per update is kept, the last one read.
"""

import json
import re
from pathlib import Path
from typing import Dict, Sequence

import torch

from ..languages import decode_inventory
from ..modules.latent_layers import alpha_from_state, keep_from_state, resolve_keep_rule, undecided_share
from ..atomic_files import save_figure_atomic, write_json_atomic
from ..checkpoint_safety import require_checkpoint
from .figures import new_figure
from ..saved_config import config_value, refuse_export, trained_codes

__all__ = ["utilisation_from_state", "TrainingLog", "utilisation_from_logs", "plot_utilisation", "plot_training",
           "analyze", "add_analysis"]

STACKS = {"encoder": "enc", "decoder": "dec"}
_SIMPLE = re.compile(r"([A-Za-z_][\w]*)=([-+0-9.eE]+|nan|inf)")
_UTILISATION = re.compile(r"stat_(enc|dec)_u_\d+")


def utilisation_from_state(state, source: str = "the checkpoint") -> Dict:
    """Per latent stack: languages (those trained on the stack's side), q(z_l = 1) per language
    and layer, kept layers (1-based) under the model's inference rule, expected/kept depths. ``rule``
    is ``committed`` for a stack training committed, and ``commit_rule`` the rule the commit applied
    (``threshold``/``top_k``: that rule's parameter)."""
    weights = state["model"]
    cfg = state.get("cfg") or {}
    model_cfg, task_cfg = config_value(cfg, "model"), config_value(cfg, "task")
    langs = decode_inventory(weights["lang_inventory"]) if "lang_inventory" in weights else []
    saved_rule = str(config_value(model_cfg, "latent_keep", "threshold"))
    threshold = float(config_value(model_cfg, "latent_keep_threshold", 0.5))
    stacks = {}
    for stack in STACKS:
        prefix = f"{stack}.layer_select."
        logits = alpha_from_state(weights, prefix)
        if logits is None:
            continue
        side = str(config_value(model_cfg, f"latent_{stack}_lang", "src" if stack == "encoder" else "tgt"))
        depth = int(config_value(model_cfg, f"latent_{stack}_target_depth", 0))
        committed = bool(weights.get(prefix + "committed", False))
        decide = resolve_keep_rule(saved_rule, depth)  # the inference rule, which a commit also applied
        rule = "committed" if committed else decide
        probs = torch.sigmoid(logits)
        keep = keep_from_state(weights, prefix, saved_rule, threshold, depth)
        codes = trained_codes(task_cfg, langs, side)
        rows = [langs.index(c) for c in codes]
        stacks[stack] = {
            "side": side, "languages": codes, "layers": int(logits.size(1)), "rule": rule,
            "commit_rule": decide if committed else None,
            "undecided_share": undecided_share(logits[rows]),
            "threshold": threshold if decide == "threshold" else None, "top_k": depth if decide == "top-k" else None,
            "probabilities": {c: [round(v, 6) for v in probs[r].tolist()] for c, r in zip(codes, rows)},
            "kept_layers": {c: [l + 1 for l in keep[r].nonzero().flatten().tolist()] for c, r in zip(codes, rows)},
            "expected_depth": {c: float(probs[r].sum()) for c, r in zip(codes, rows)},
            "kept_depth": {c: int(keep[r].sum()) for c, r in zip(codes, rows)},
            "utilisation": probs[rows].mean(0).tolist(),
        }
    if not stacks:
        refuse_export(source, "latent layers", state)
        raise ValueError(f"{source} has no latent layers: analyze a checkpoint trained with "
                         "--arch latent_depth_transformer*")
    return stacks


_SAVE_DIR = re.compile(r"'save_dir': '((?:[^'\\]|\\.)*)'")


class TrainingLog:
    """One fairseq-train log (``--log-file``), read once: its per-update ``records`` (json or simple
    format), the ``save_dirs`` of every start it logs (fairseq logs its whole config when it starts:
    ``{'_name': None, 'common': ..., 'checkpoint': {..., 'save_dir': ...}}``) and the stacks (``enc``,
    ``dec``) whose ``stat_<stack>_u_<l>`` any line names, per-update or an epoch/validation summary."""

    def __init__(self, path):
        self.path, self.records, self.save_dirs, self.mentions = str(path), [], [], set()
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                self.mentions.update(_UTILISATION.findall(line))
                if "{'_name'" in line:
                    self.save_dirs += [m.group(1) for m in [_SAVE_DIR.search(line)] if m]
                start = line.find("{")
                record = None
                if start >= 0:
                    try:
                        record = json.loads(line[start:])
                    except ValueError:
                        record = None
                if record is None and "stat_" in line:
                    record = {k: v for k, v in _SIMPLE.findall(line)}
                if isinstance(record, dict) and record:
                    self.records.append(record)


def utilisation_from_logs(logs: Sequence[TrainingLog], stack: str) -> Dict:
    """u_l per logged training update: {"updates": [...], "utilisation": [[u_1..u_L] per update]}
    from the ``stat_<enc|dec>_u_<l>`` values of fairseq's per-update training records."""
    key = re.compile(rf"^stat_{STACKS[stack]}_u_(\d+)$")
    by_update = {}
    for log in logs:
        for record in log.records:
            if "num_updates" not in record:
                continue
            layers = {int(m.group(1)): float(v) for k, v in record.items() for m in [key.match(k)] if m}
            if layers:
                by_update[int(float(record["num_updates"]))] = [layers[l] for l in sorted(layers)]
    updates = sorted(by_update)
    return {"updates": updates, "utilisation": [by_update[u] for u in updates]}


def check_logs_match(logs: Sequence[TrainingLog], state, stacks: Dict, source: str) -> None:
    """A one-line ValueError when a --log is not of the run that wrote the checkpoint: it started
    with another --save-dir, or it logs another number of latent layers."""
    save_dir = config_value(config_value(state.get("cfg") or {}, "checkpoint"), "save_dir")
    for log in logs:
        other = sorted({d for d in log.save_dirs if save_dir is not None and d != str(save_dir)})
        if other:
            raise ValueError(f"--log {log.path} is the log of a run saving to {other[0]!r}, and {source} was saved by "
                             f"the run saving to {str(save_dir)!r}: pass the --log-file of the run that wrote the "
                             "checkpoint")
    for stack, stats in stacks.items():
        counts = {len(u) for u in stats["training"]["utilisation"]}
        if counts != {stats["layers"]}:
            raise ValueError(f"--log {', '.join(log.path for log in logs)} logs {'/'.join(map(str, sorted(counts)))} "
                             f"{stack} layers, and {source} has {stats['layers']}: pass the --log-file of the run that "
                             "wrote the checkpoint")


def plot_utilisation(stats: Dict, stack: str, path) -> Path:
    """Figures 5/9: q(z_l = 1) per language (rows) and layer (columns); kept layers are dotted."""
    codes, layers = stats["languages"], stats["layers"]
    matrix = [stats["probabilities"][c] for c in codes]
    fig = new_figure(max(4.0, 0.35 * layers + 2.0), max(2.0, 0.35 * len(codes) + 1.2))
    ax = fig.add_subplot(1, 1, 1)
    image = ax.imshow(matrix, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    for row, code in enumerate(codes):
        for layer in stats["kept_layers"][code]:
            ax.plot(layer - 1, row, marker="o", markersize=3, color="white")
    ax.set_xticks(range(layers), [str(l + 1) for l in range(layers)], fontsize=7)
    ax.set_yticks(range(len(codes)), codes, fontsize=7)
    ax.set_xlabel(f"{stack} layer")
    ax.set_ylabel(f"{stats['side']} language")
    decide = stats.get("commit_rule") or stats["rule"]
    rule = {"threshold": f"q >= {stats['threshold']}", "top-k": f"top {stats['top_k']}"}.get(decide, decide)
    if stats["rule"] == "committed":
        rule = f"committed in training, {rule}"
    ax.set_title(f"layer selection probability ({stack})\ndots: kept ({rule})", fontsize=9)
    fig.colorbar(image, ax=ax, label="q(z_l = 1)")
    fig.tight_layout()
    return save_figure_atomic(fig, path)


def plot_training(history: Dict, stack: str, path) -> Path:
    """Figure 6: expected utilisation u_l (rows: layers) over training updates (columns)."""
    rows = list(map(list, zip(*history["utilisation"])))  # layers x updates
    updates = history["updates"]
    fig = new_figure(6.0, max(2.0, 0.18 * len(rows) + 1.2))
    ax = fig.add_subplot(1, 1, 1)
    image = ax.imshow(rows, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto", origin="lower",
                      extent=(updates[0] - 0.5, updates[-1] + 0.5, 0.5, len(rows) + 0.5))
    ax.set_xlabel("update")
    ax.set_ylabel(f"{stack} layer")
    ax.set_title(f"layer utilisation u_l during training ({stack})", fontsize=9)
    fig.colorbar(image, ax=ax, label="u_l")
    fig.tight_layout()
    return save_figure_atomic(fig, path)


def analyze(checkpoint, out_dir, logs: Sequence = (), verbose: bool = True) -> Dict:
    from fairseq import checkpoint_utils

    path = Path(checkpoint)
    require_checkpoint(path, "checkpoint")
    for log in logs:
        if not Path(log).is_file():
            raise FileNotFoundError(f"no training log {log}: pass the file fairseq-train wrote with --log-file")
    logs = [TrainingLog(log) for log in logs]
    state = checkpoint_utils.load_checkpoint_to_cpu(str(path))
    stacks = utilisation_from_state(state, source=str(path))
    for stack, stats in stacks.items():  # read before anything is written: a wrong --log leaves --out as it was
        if logs:
            history = utilisation_from_logs(logs, stack)
            if not history["updates"] and any(STACKS[stack] in log.mentions for log in logs):
                raise ValueError(f"{', '.join(log.path for log in logs)} holds stat_{STACKS[stack]}_u_* only in its "
                                 "epoch and validation summaries (averages over an epoch), no per-update line, which "
                                 "the utilisation over training needs: fairseq-train wrote it in its tqdm format (its "
                                 "default under a terminal; --log-file writes the console's format) or with a "
                                 "--log-interval above the updates of an epoch; train with --log-format simple "
                                 "--log-interval N")
            if not history["updates"]:
                raise ValueError(f"no stat_{STACKS[stack]}_u_* values in {', '.join(log.path for log in logs)}: "
                                 "pass the log of a latent_depth_transformer run (fairseq-train --log-format json or "
                                 "simple)")
            stats["training"] = history
    if logs:
        check_logs_match(logs, state, stacks, str(path))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    result = {"checkpoint": str(path), "stacks": stacks, "figures": []}
    for stack, stats in stacks.items():
        result["figures"].append(str(plot_utilisation(stats, stack, out / f"latent_depth_{stack}.png")))
        if "training" in stats:
            result["figures"].append(str(plot_training(stats["training"], stack,
                                                       out / f"latent_depth_{stack}_training.png")))
    json_path = out / "latent_depth.json"
    write_json_atomic(json_path, result)
    result["json"] = str(json_path)
    if verbose:
        for stack, stats in stacks.items():
            print(f"{stack} ({stats['side']} language), {stats['layers']} latent layers:")
            for code in stats["languages"]:
                print(f"  {code:<8} expected depth {stats['expected_depth'][code]:6.2f}  kept "
                      f"{stats['kept_depth'][code]:3d}: {','.join(map(str, stats['kept_layers'][code])) or '-'}")
        print(f"wrote {json_path} and {len(result['figures'])} figure(s) in {out}")
    return result


# --- CLI -------------------------------------------------------------------------------------

def _run(args) -> int:
    analyze(args.checkpoint, args.out, logs=args.log or ())
    return 0


def add_analysis(methods) -> None:
    parser = methods.add_parser(
        "latent-depth",
        help="latent depth: layer utilisation per language (Figures 5/9) and over training (Figure 6)",
        description="Read a latent_depth_transformer checkpoint: selection probability of every layer per language, "
                    "the layers inference keeps, expected and kept depths (JSON, heatmap); with --log, the "
                    "utilisation u_l over training from fairseq-train logs.",
    )
    parser.add_argument("checkpoint", help="a latent_depth_transformer checkpoint")
    parser.add_argument("--log", action="append", metavar="TRAIN_LOG",
                        help="fairseq-train log (--log-format json or simple; repeat for resumed runs)")
    parser.add_argument("--out", required=True, help="directory for latent_depth.json and the figures")
    parser.set_defaults(func=_run)
