"""CLSR analysis (Zhang et al., ICLR 2021, section 5): gate statistics, LSScore, Dedicated.

``langshare analyze clsr CKPT --out DIR``: runs the checkpoint (inference gates [G >= 0]) over
every direction of a split and writes the mean gate per sub-layer and language
(``gates.json``).

``langshare analyze clsr-lsscore RUN.json ... --out DIR``: over runs trained with different
budgets p, LSScore_f(l) = 1/|P| sum_p (g~^p_{l,f} - p) (Eq. 7); draws Figure 3 (LSScore per
sub-layer type and depth) and Figure 6 (LSScore per sub-layer and language, languages ranked
by training size), and prints the Dedicated configuration (the bottom and top layers'
sub-layers with LSScore > 0, Tables 4-5; ``--dedicated-rule any-depth``: every sub-layer with
LSScore > 0) as the exact flags that train it.
"""

import os
import re
from collections import defaultdict
from typing import Dict, List, Optional, Sequence

import torch

from ..modules.clsr import ClsrUnit
from ..atomic_files import save_figure_atomic, write_json_atomic
from .figures import new_figure
from ..saved_config import refuse_export
from ..option_ranges import Range

KINDS = ("enc.self_attn", "enc.ffn", "dec.self_attn", "dec.cross_attn", "dec.ffn")
DEDICATED_RULES = ("top-bottom", "any-depth")
DEFAULT_ARCH = "clsr_transformer"
FIXED_MODES = ("shared", "language")  # gates fixed to 0 / 1: no budget, nothing learned
LEARNED_VARIANTS = ("clsr", "gate")
_NAME = re.compile(r"^(enc|dec)(\d+)\.(\w+)$")


def _sort_key(name):
    stack, layer, kind = _NAME.match(name).groups()
    return (stack != "enc", int(layer), KINDS.index(f"{stack}.{kind}"))


def gate_statistics(checkpoint: str, data: Optional[str] = None, split: str = "valid",
                    max_tokens: int = 4000) -> Dict:
    """Mean inference gate per CLSR sub-layer, overall and per language, over ``split``."""
    from fairseq import checkpoint_utils
    from tqdm import tqdm

    refuse_export(checkpoint, "CLSR units")
    overrides = {"data": data} if data else {}
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([checkpoint], arg_overrides=overrides)
    model = models[0].eval()
    units = [m for m in model.modules() if isinstance(m, ClsrUnit)]
    if not units:
        raise ValueError(f"{checkpoint} has no CLSR units: train it with --arch clsr_transformer*")
    sums = defaultdict(lambda: defaultdict(float))
    counts = defaultdict(lambda: defaultdict(int))

    def collect(name, gates, lang_ids, mask):
        keep = torch.ones_like(gates, dtype=torch.bool) if mask is None else ~mask.t()
        for lang in lang_ids.unique().tolist():
            rows = lang_ids.eq(lang)
            sel = keep[:, rows]
            sums[name][lang] += float(gates[:, rows][sel].sum())
            counts[name][lang] += int(sel.sum())

    fixed = all(unit.mode in FIXED_MODES for unit in units)
    for unit in units:
        unit.collect = collect
        if unit.mode in FIXED_MODES:  # folded inference runs no gate for a fixed unit: record the 0s and 1s
            unit.fold_inference = False
    try:
        task.load_dataset(split)
        itr = task.get_batch_iterator(task.dataset(split), max_tokens=max_tokens).next_epoch_itr(shuffle=False)
        with torch.no_grad():
            for batch in tqdm(itr, desc=f"gates on {split}", unit="batch"):
                model(**task.ensure_lang_ids(batch)["net_input"])
    finally:
        for unit in units:
            unit.collect = None
            unit.__dict__.pop("fold_inference", None)
    langs = task.inventory.langs
    names = sorted(sums, key=_sort_key)
    mean_gate = {n: {langs[l]: sums[n][l] / counts[n][l] for l in sorted(sums[n]) if counts[n][l]} for n in names}
    overall = {n: sum(sums[n].values()) / max(sum(counts[n].values()), 1) for n in names}
    return {"checkpoint": os.path.abspath(checkpoint), "arch": _arch(cfg), "split": split,
            "budget": None if fixed else float(model.cfg.clsr_budget), "fixed_gates": fixed,
            "variant": str(model.cfg.clsr_variant), "sublayers": names, "mean_gate": overall,
            "mean_gate_per_language": mean_gate, "open_rate": sum(overall.values()) / max(len(overall), 1)}


def _arch(cfg) -> str:
    """The --arch a checkpoint was trained with (fairseq keeps it as the model config's name)."""
    model_cfg = cfg.model
    return str(getattr(model_cfg, "_name", None) or getattr(model_cfg, "arch", None) or DEFAULT_ARCH)


def _differing(runs: Sequence[Dict], sources: Sequence[str], field: str) -> Optional[str]:
    """"VALUE: SOURCE, ...; VALUE: ..." when the runs that record ``field`` do not all agree, else None."""
    groups = defaultdict(list)
    for run, source in zip(runs, sources):
        if run.get(field) is not None:
            groups[str(run[field])].append(str(source))
    return "; ".join(f"{value}: {', '.join(names)}" for value, names in groups.items()) if len(groups) > 1 else None


def lsscore(runs: Sequence[Dict], sources: Optional[Sequence[str]] = None) -> Dict:
    """Eq. 7 over runs of one variant, measured on one split, trained with different budgets: overall
    and per language. ``sources`` names the runs in errors (their gates.json)."""
    sources = sources or [f"run {i + 1}" for i in range(len(runs))]
    variants = _differing(runs, sources, "variant")
    if variants:
        raise ValueError(f"runs of different --clsr-variant ({variants}): LSScore compares the budgets of one "
                         "variant; pass the gates.json of runs with the same --clsr-variant")
    splits = _differing(runs, sources, "split")
    if splits:
        raise ValueError(f"runs measured on different splits ({splits}): pass gates.json files that "
                         "`langshare analyze clsr --split` measured on one split")
    budgets = [r["budget"] for r in runs]
    if len(set(budgets)) != len(budgets):
        raise ValueError(f"LSScore needs one run per budget p, got budgets {budgets}")
    names = runs[0]["sublayers"]
    archs = sorted({r["arch"] for r in runs if "arch" in r})
    if len(archs) > 1:
        raise ValueError(f"runs of different architectures ({', '.join(archs)}): LSScore compares budgets of one "
                         "architecture; pass the gates.json of runs with the same --arch")
    for r in runs[1:]:
        if r["sublayers"] != names:
            raise ValueError("runs have different CLSR sub-layers: compare checkpoints of the same architecture")
    score = {n: sum(r["mean_gate"][n] - r["budget"] for r in runs) / len(runs) for n in names}
    langs = sorted(set.intersection(*(set(r["mean_gate_per_language"][names[0]]) for r in runs)))
    per_lang = {n: {l: sum(r["mean_gate_per_language"][n][l] - r["budget"] for r in runs) / len(runs) for l in langs}
                for n in names}
    return {"budgets": budgets, "arch": runs[0].get("arch", DEFAULT_ARCH), "sublayers": names, "lsscore": score,
            "lsscore_per_language": per_lang}


def dedicated_flags(scores: Dict, rule: str = "top-bottom") -> str:
    """The Dedicated model: LS projections fixed on the sub-layers with LSScore > 0 among the
    candidates of ``rule``: ``top-bottom`` (the paper, Tables 4-5) the sub-layers of the bottom
    and top layer of each stack; ``any-depth`` every sub-layer. The flags name the runs' --arch
    (``clsr_transformer`` for a gates.json written before it was recorded)."""
    if rule not in DEDICATED_RULES:
        raise ValueError(f"Dedicated rule {rule!r}: use top-bottom or any-depth")
    place = {n: (stack, int(layer)) for n in scores["sublayers"] for stack, layer, _ in [_NAME.match(n).groups()]}
    depth = {stack: max(layer for s, layer in place.values() if s == stack) for stack, _ in place.values()}
    chosen = [n for n, (stack, layer) in place.items() if scores["lsscore"][n] > 0
              and (rule == "any-depth" or layer in (1, depth[stack]))]
    if not chosen:
        return (f"# no {'' if rule == 'any-depth' else 'bottom or top layer '}sub-layer has LSScore > 0: "
                "the shared model (--clsr-variant shared) is the dedicated one")
    return f"--arch {scores.get('arch', DEFAULT_ARCH)} --clsr-variant dedicated --clsr-dedicated {','.join(chosen)}"


def plot_lsscore(scores: Dict, path: str) -> None:
    """Figure 3: LSScore against depth, one line per sub-layer type."""
    import matplotlib.ticker

    fig = new_figure(6, 3.5)
    ax = fig.add_subplot(1, 1, 1)
    for kind in KINDS:
        stack, sub = kind.split(".")
        points = sorted((int(_NAME.match(n).group(2)), v) for n, v in scores["lsscore"].items()
                        if n.startswith(stack) and n.endswith("." + sub))
        if points:
            ax.plot(*zip(*points), marker="o", label=kind.replace(".", " "))
    ax.axhline(0.0, color="grey", linewidth=0.8)
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.set_xlabel("layer")
    ax.set_ylabel("LSScore")
    ax.set_title(f"LSScore over budgets {scores['budgets']}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure_atomic(fig, path)


def plot_heatmap(scores: Dict, languages_by_size: List[str], path: str) -> None:
    """Figure 6: LSScore per sub-layer (rows) and language (columns, largest training data first)."""
    per_lang = scores["lsscore_per_language"]
    names = scores["sublayers"]
    langs = [l for l in languages_by_size if l in per_lang[names[0]]]
    langs += sorted(set(per_lang[names[0]]) - set(langs))
    matrix = [[per_lang[n][l] for l in langs] for n in names]
    fig = new_figure(1 + 0.5 * len(langs), 1 + 0.3 * len(names))
    ax = fig.add_subplot(1, 1, 1)
    im = ax.imshow(matrix, cmap="coolwarm", vmin=-1, vmax=1, aspect="auto")
    ax.set_xticks(range(len(langs)), langs, rotation=90, fontsize=7)
    ax.set_yticks(range(len(names)), names, fontsize=7)
    fig.colorbar(im, ax=ax, label="LSScore")
    fig.tight_layout()
    save_figure_atomic(fig, path)


def _run_gates(args):
    stats = gate_statistics(args.checkpoint, data=args.data, split=args.split, max_tokens=args.max_tokens)
    write_json_atomic(os.path.join(args.out, "gates.json"), stats)
    said = f"fixed gates (--clsr-variant {stats['variant']})" if stats["fixed_gates"] else f"p={stats['budget']}"
    print(f"{said} open-gate rate {stats['open_rate']:.3f} on {args.split}")
    for name in stats["sublayers"]:
        print(f"  {name:<16} {stats['mean_gate'][name]:.3f}")
    print(f"wrote {os.path.join(args.out, 'gates.json')}")
    return 0


GATES_KEYS = ("budget", "sublayers", "mean_gate", "mean_gate_per_language")


def _read_gates(path: str) -> Dict:
    """A ``gates.json`` of ``langshare analyze clsr``, or a one-line ValueError saying what to pass."""
    from ..evaluation import _read_json

    if os.path.isdir(path):
        raise ValueError(f"{path} is a directory: pass the gates.json in it ({os.path.join(path, 'gates.json')})")
    if not os.path.isfile(path):
        raise ValueError(f"no gates file {path}: pass the gates.json `langshare analyze clsr CHECKPOINT --out DIR` wrote")
    run = _read_json(path, "gates file")
    missing = [key for key in GATES_KEYS if not isinstance(run, dict) or key not in run]
    if missing:
        raise ValueError(f"{path} is not a gates.json of `langshare analyze clsr` (no {missing[0]!r}): pass the "
                         "gates.json of each budget's CLSR run")
    variant = str(run.get("variant", "clsr"))
    if run.get("fixed_gates") or variant not in LEARNED_VARIANTS:
        raise ValueError(f"{path} is the gates.json of a fixed-gate run (--clsr-variant {variant}): its gates follow "
                         "no budget, so it has no LSScore (Eq. 7 compares learned gates over budgets p); pass the "
                         f"gates.json of --clsr-variant {' or '.join(sorted(LEARNED_VARIANTS))} runs")
    if not run["sublayers"]:
        raise ValueError(f"{path} records no CLSR sub-layer: run `langshare analyze clsr` on its checkpoint again")
    return run


def _language_order(path: str) -> List[str]:
    """The corpus's languages by training size, largest first (a manifest without sizes: its own order)."""
    from ..evaluation import _read_json

    if not os.path.isfile(path):
        raise ValueError(f"no corpus manifest {path}: pass the manifest.json of the corpus the runs trained on")
    manifest = _read_json(path, "corpus manifest")
    sizes = manifest.get("train_pairs_per_language") if isinstance(manifest, dict) else None
    if sizes:
        return sorted(sizes, key=sizes.get, reverse=True)
    if isinstance(manifest, dict) and manifest.get("languages"):
        return list(manifest["languages"])
    raise ValueError(f"{path} has neither train_pairs_per_language nor languages: pass the manifest.json of the "
                     "corpus the runs trained on")


def _run_lsscore(args):
    runs = [_read_gates(path) for path in args.runs]
    scores = lsscore(runs, sources=args.runs)
    order = _language_order(args.manifest) if args.manifest else []
    os.makedirs(args.out, exist_ok=True)
    dedicated = dedicated_flags(scores, args.dedicated_rule)
    write_json_atomic(os.path.join(args.out, "lsscore.json"),
                      {**scores, "dedicated": dedicated, "dedicated_rule": args.dedicated_rule})
    plot_lsscore(scores, os.path.join(args.out, "lsscore.png"))
    plot_heatmap(scores, order, os.path.join(args.out, "lsscore_heatmap.png"))
    for name in scores["sublayers"]:
        print(f"  {name:<16} {scores['lsscore'][name]:+.3f}")
    print(dedicated)
    return 0


def add_analysis(methods) -> None:
    p = methods.add_parser("clsr", help="CLSR: mean inference gate per sub-layer and language (gates.json)")
    p.add_argument("checkpoint", help="a clsr_transformer checkpoint")
    p.add_argument("--data", default=None, help="binarized data directory (default: the one the checkpoint was trained on)")
    p.add_argument("--split", default="valid", help="split to run over (every direction of the task)")
    p.add_argument("--max-tokens", type=Range(1, why="tokens per batch").of(int), default=4000, help="tokens per batch")
    p.add_argument("--out", required=True, help="output directory")
    p.set_defaults(func=_run_gates)
    p = methods.add_parser("clsr-lsscore", help="CLSR: LSScore over budgets (Eq. 7), Figures 3 and 6, the Dedicated flags")
    p.add_argument("runs", nargs="+", help="gates.json files of `analyze clsr`, one per budget p")
    p.add_argument("--manifest", default=None, help="corpus manifest.json: ranks languages by training size in Figure 6")
    p.add_argument("--dedicated-rule", choices=DEDICATED_RULES, default="top-bottom",
                   help="sub-layers Dedicated chooses from (LSScore > 0): top-bottom = those of the bottom and top "
                        "layer of each stack (the paper, Tables 4-5); any-depth = every sub-layer")
    p.add_argument("--out", required=True, help="output directory")
    p.set_defaults(func=_run_lsscore)
