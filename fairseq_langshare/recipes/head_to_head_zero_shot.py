"""The zero-shot part of a head-to-head block with zero-shot directions (M2M): each model's
zero-shot directions by target language, and the papers' zero-shot claims set against the block's
verdicts.

Fixed before any M2M run (docs/head_to_head.md, "The papers' zero-shot claims"): which claim is
tested on which model, in the paper's metric, and what holding means. A claimed gain holds where
the zero-shot directions pooled are **better** than the baseline by the verdict rule (and, for a
pre-norm model, better than ``baseline_prenorm`` too, so that the layer-norm placement does not
make the gain); level is "not reproduced", worse "reversed". The outcome is about the sign; the
paper's difference and the block's (mean over the zero-shot directions, as the papers average)
stand beside it.
"""

from typing import Dict, List, NamedTuple, Optional

from .. import comparison
from ..off_target import group_rate, note
from ..significance import VERDICTS, pooled_verdicts, seed_summary
from .head_to_head_models import BASELINE
from .head_to_head_standings import verdict_text

ZERO_SHOT = "zero-shot"
METRICS = ("bleu", "chrf")
LABELS = {"bleu": "BLEU", "chrf": "chrF"}


class Claim(NamedTuple):
    model: str
    source: str
    claim: str
    metric: str  # the paper's
    paper_delta: Optional[float]  # the paper's difference to its baseline, in ``metric``
    expects: Optional[str]  # "better" against the baseline on the zero-shot directions pooled; None: no claim
    also_against: Optional[str] = None  # a second baseline the claim must hold against


CLAIMS = (
    Claim("adaptive_sparse", "Gong et al. (2022), Table 2: OPUS-100, many-to-many, 30 zero-shot directions; FFN "
          "sparsity alone, the configuration here, 2.7 -> 3.0 (the +6.2 of the abstract is every type of sparsity "
          "together, 2.7 -> 8.9)",
          "'The sparsity in each component alone improves BLEU scores in comparison with multilingual Transformer' "
          "(section 6.1), without increasing the inference cost", "bleu", 0.3, "better", "baseline_prenorm"),
    Claim("lsl", "Pires et al. (2023), Table 6: LSL-NAS-SD against the shared-decoder baseline, trained on the "
          "English directions and within language groups (chrF: Table 6 names no metric; its averages are on the "
          "paper's chrF scale)",
          "ahead zero-shot, average 29.6 -> 31.9, 'improvements for most zero-shot directions, except when "
          "translating into Sw'", "chrf", 2.3, "better"),
    Claim("adapters", "Pires et al. (2023), Table 6: Shared Decoder Adapters 512 (source adapters in the encoder, "
          "target adapters in the decoder, after Philip et al., 2020)", "ahead zero-shot, average 29.6 -> 32.4",
          "chrf", 2.8, "better"),
    Claim("clsr", "Zhang et al. (2021)", "none: trained one-to-many and many-to-one only", "bleu", None, None),
    Claim("latent_depth", "Li et al. (2020)", "none: English-centric language pairs only", "bleu", None, None),
)


def zero_shot_directions(cmp: Dict) -> List[str]:
    return [d for d, info in cmp["directions"].items() if info.get("group") == ZERO_SHOT]


def _rated(cmp: Dict, directions: List[str]) -> List[str]:
    """Of ``directions``, those every run has an off-target rate for (the comparison's own rule)."""
    unrated = set((cmp.get("off_target") or {}).get("unrated") or [])
    return [d for d in directions if d not in unrated]


def by_target(cmp: Dict, models: Dict[str, List[Dict]]) -> Dict[str, Dict]:
    """{target: {"directions": [...], "models": {name: per-model summary}}} over the zero-shot
    directions into each target: the mean over those directions of each metric's seed mean; the
    off-target rate with the hypotheses of those directions pooled per seed (the directions every
    run rates, as the comparison's group rates; ``off_target.group_rate``), mean and std over seeds;
    and, against the baseline, how many of them the verdict rule calls better / level / worse
    (None where none of them was tested)."""
    targets: Dict[str, List[str]] = {}
    for d in zero_shot_directions(cmp):
        targets.setdefault(d.split("-")[1], []).append(d)
    out = {}
    for tgt, dirs in targets.items():
        rated = _rated(cmp, dirs)
        entries = {}
        for name, seeds in models.items():
            system = cmp["systems"][name]
            entry = {m: seed_summary([system["directions"][d][m]["mean"] for d in dirs])["mean"] for m in METRICS}
            entry["off_target"] = seed_summary([group_rate([r["results"]["directions"].get(d) or {} for d in rated])
                                                ["off_target"] for r in seeds])
            if name != cmp["baseline"]:
                tests = (system.get("significance") or {}).get("directions") or {}
                verdicts = [(tests.get(d) or {}) for d in dirs]
                entry["verdicts"] = {m: {v: sum(t.get(m, {}).get("verdict") == v for t in verdicts)
                                         for v in VERDICTS}
                                     if any(m in t for t in verdicts) else None for m in METRICS}
            entries[name] = entry
        out[tgt] = {"directions": dirs, "models": entries}
    return out


def _zero_shot_verdicts_and_wins(name: str, entry: Dict, cmp: Dict):
    """The model's verdicts and win ratio on the zero-shot directions pooled: their own where the
    block also has supervised directions, the all-directions ones where every direction is zero-shot."""
    system = cmp["systems"][name]
    if entry.get("verdict_by_kind"):
        verdicts = {m: v for m, v in (entry["verdict_by_kind"].get(ZERO_SHOT) or {}).items() if m in METRICS}
        return verdicts, (system.get("win_ratio_by_kind") or {}).get(ZERO_SHOT) or {}
    if len(zero_shot_directions(cmp)) == len(cmp["directions"]):
        return dict(entry.get("verdict") or {}), system.get("win_ratio") or {}
    return {}, {}


def _group_delta(cmp: Dict, name: str, metric: str) -> Optional[float]:
    """The model's zero-shot group average (mean over the directions of the seed means) minus the
    baseline's: the papers' statistic."""
    def avg(n):
        return ((cmp["systems"][n]["averages"].get(ZERO_SHOT) or {}).get(metric) or {}).get("mean")
    mine, base = avg(name), avg(cmp["baseline"])
    return None if mine is None or base is None else mine - base


def _zero_shot_rate(cmp: Dict, name: str) -> Optional[float]:
    return ((cmp["systems"][name].get("off_target") or {}).get("averages", {}).get(ZERO_SHOT) or {}).get("mean")


def _outcome(expects: Optional[str], verdict: Optional[Dict], second: Optional[Dict], also_against: Optional[str]):
    if expects is None:
        return "no claim to test"
    if not verdict:
        return "not tested"
    if verdict["p_value"] is None:
        return "not testable"
    if verdict["verdict"] == "level":
        return "not reproduced (level)"
    if verdict["verdict"] != expects:
        return f"reversed ({verdict['verdict']})"
    if also_against:
        if not second:
            return f"holds against {BASELINE}; not tested against {also_against}"
        if second["verdict"] != expects:
            return f"not separable from the layer-norm placement ({second['verdict']} against {also_against})"
    return "holds"


def paper_claims(block_models: Dict[str, Dict], cmp: Dict, models: Dict[str, List[Dict]], references: Dict,
                 n_samples: int) -> List[Dict]:
    """Each claim of ``CLAIMS`` whose model is in the block, with what the block measured on the
    zero-shot directions (pooled verdicts, the group-average difference, the win ratio, the pooled
    off-target rates) and the outcome; a claim with ``also_against`` is also tested, on the zero-shot
    directions pooled, against that model where the block has it."""
    out = []
    for c in CLAIMS:
        if c.model not in block_models:
            continue
        here, wins = _zero_shot_verdicts_and_wins(c.model, block_models[c.model], cmp)
        also = c.also_against if c.also_against in models else None
        second = None
        if also:
            sig = comparison.significance_against([r["results"] for r in models[also]],
                                                  [r["results"] for r in models[c.model]], zero_shot_directions(cmp),
                                                  n_samples, references)
            second = pooled_verdicts(sig.get("pooled") or {}, METRICS)
        out.append({"model": c.model, "label": block_models[c.model]["label"], "source": c.source, "claim": c.claim,
                    "metric": c.metric, "paper_delta": c.paper_delta, "expects": c.expects, "zero_shot": here,
                    "group_delta": {m: _group_delta(cmp, c.model, m) for m in METRICS},
                    "also_against": also,
                    "zero_shot_against_also": second,
                    "win_ratio": wins.get(c.metric),
                    "off_target": {"model": _zero_shot_rate(cmp, c.model), "baseline": _zero_shot_rate(cmp, BASELINE)},
                    "outcome": _outcome(c.expects, here.get(c.metric), (second or {}).get(c.metric), also)})
    return out


def summary(cmp: Dict, models: Dict[str, List[Dict]], block_models: Dict[str, Dict], references: Dict,
            n_samples: int) -> Optional[Dict]:
    """The block's ``zero_shot`` entry, or None for a block without zero-shot directions."""
    if not zero_shot_directions(cmp) or BASELINE not in models:
        return None
    return {"by_target": by_target(cmp, models),
            "paper_claims": paper_claims(block_models, cmp, models, references, n_samples)}


# ----------------------------------------------------------------------------- markdown
def _num(x: Optional[float], signed: bool = False) -> str:
    return "-" if x is None else (f"{x:+.2f}" if signed else f"{x:.2f}")


def _rate(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.1f}"


def markdown(zero: Dict, labels: Dict[str, str], off_target_info: Optional[Dict] = None) -> List[str]:
    """The zero-shot tables of a block's ``zero_shot`` entry (``off_target_info``: the comparison's
    ``off_target``, for the note on what the rate leaves out)."""
    targets = zero["by_target"]
    names = list(next(iter(targets.values()))["models"]) if targets else []
    head = "| into | directions | " + " | ".join(labels.get(n, n) for n in names) + " |"
    rule = "|---|---:|" + "---:|" * len(names)
    lines = ["**Zero-shot directions by target language**, BLEU: the baseline's mean over the directions into the "
             "target and the seeds, the others' difference to it, and in brackets how many of those directions the "
             "verdict rule calls better / worse:", "", head, rule]
    rates = ["", "Off-target rate by target language, % (the hypotheses of the directions into the target pooled; "
             "mean over seeds):", "", head, rule]
    for tgt, row in targets.items():
        base = row["models"][BASELINE]
        cells = [_num(base["bleu"])]
        for n in names:
            if n == BASELINE:
                continue
            e = row["models"][n]
            delta = None if e["bleu"] is None or base["bleu"] is None else e["bleu"] - base["bleu"]
            v = e["verdicts"]["bleu"]
            cells.append(_num(delta, True) + (f" ({v['better']} / {v['worse']})" if v else " (not tested)"))
        start = f"| {tgt} | {len(row['directions'])} | "
        lines.append(start + " | ".join(cells) + " |")
        rates.append(start + " | ".join(_rate(row["models"][n]["off_target"]["mean"]) for n in names) + " |")
    lines += rates
    said = note(off_target_info, [d for row in targets.values() for d in row["directions"]])
    if said:
        lines += ["", said + "."]
    if not zero["paper_claims"]:  # none of the block's models has a claim (e.g. only the baselines recorded yet)
        return lines + [""]
    lines += ["", "**The papers' zero-shot claims, here** (decided before any M2M run, in the paper's metric: a "
              "claimed gain holds where the zero-shot directions pooled are better than the baseline by the verdict "
              "rule, and for a pre-norm model better than `baseline_prenorm` too; level: not reproduced; worse: reversed. "
              "The outcome is about the sign; the sizes stand beside it: the paper's difference and the block's, "
              "each a mean over the zero-shot directions):", "",
              "| model | paper | claim | metric | paper's difference | difference here (mean over directions) | "
              "verdict, zero-shot pooled | against the second baseline | zero-shot directions ahead | "
              "off-target %, model / baseline | outcome |", "|---|---|---|---|---:|---:|---|---|---:|---:|---|"]
    for c in zero["paper_claims"]:
        m = c["metric"]
        win = c["win_ratio"]
        also = c["zero_shot_against_also"]
        second = f"{c['also_against']}: {_verdict_cell((also or {}).get(m))}" if c["also_against"] else "-"
        lines.append(f"| {c['label']} | {c['source']} | {c['claim']} | {LABELS[m]} | {_num(c['paper_delta'], True)} | "
                     f"{_num(c['group_delta'][m], True)} | {_verdict_cell(c['zero_shot'].get(m))} | {second} | "
                     f"{'-' if not win else str(win['wins']) + ' of ' + str(win['directions'])} | "
                     f"{_rate(c['off_target']['model'])} / {_rate(c['off_target']['baseline'])} | "
                     f"**{c['outcome']}** |")
    return lines + [""]


def _verdict_cell(v: Optional[Dict]) -> str:
    return verdict_text(v) if v else "-"
