"""The zero-shot part of a head-to-head block with zero-shot directions (M2M): each model's
zero-shot directions by target language, and the papers' zero-shot claims set against the block's
verdicts.

Fixed before any M2M run (docs/head_to_head.md, "The papers' zero-shot claims"): which claims are
tested, on which model, and what holding means. A claim of a gain holds where the zero-shot
directions pooled are **better** than the baseline by the verdict rule, of a loss where they are
**worse**; level is "not reproduced", the other side "reversed". BLEU decides (the papers' metric);
chrF's verdict stands beside it.
"""

from typing import Dict, List, NamedTuple, Optional

from ..off_target import group_rate
from ..significance import format_p, seed_summary
from .head_to_head_models import BASELINE

ZERO_SHOT = "zero-shot"
METRICS = ("bleu", "chrf")


class Claim(NamedTuple):
    model: str
    source: str
    claim: str
    expects: Optional[str]  # "better" / "worse" against the baseline on the zero-shot directions; None: no claim


CLAIMS = (
    Claim("adaptive_sparse", "Gong et al. (2022), Table 2: OPUS-100, many-to-many, 30 zero-shot directions",
          "+6.2 BLEU over the Transformer at equal inference cost (2.7 -> 8.9, every type of sparsity; FFN "
          "sparsity alone, the configuration here: 2.7 -> 3.0)", "better"),
    Claim("lsl", "Pires et al. (2023), Table 6: LSL-NAS-SD against the shared-decoder baseline, trained "
          "English-centric plus within language groups",
          "ahead on most zero-shot directions (average 29.6 -> 31.9)", "better"),
    Claim("lsl", "Pires et al. (2023), section 4.5: into Sw, whose target-specific layers only English-Sw "
          "trained (Eur->Sw 34.2 -> 11.7, CJK->Sw 24.8 -> 11.7)",
          "behind where a target's language-specific layers were trained from English alone, as every "
          "target's are here", "worse"),
    Claim("adapters", "Pires et al. (2023), Table 6: Shared Decoder Adapters 512 (the design of Philip et al., "
          "2020)", "ahead zero-shot (average 29.6 -> 32.4)", "better"),
    Claim("clsr", "Zhang et al. (2021)", "none: trained one-to-many and many-to-one only", None),
    Claim("latent_depth", "Li et al. (2020)", "none: English-centric language pairs only", None),
)

OUTCOMES = {("better", "better"): "holds", ("worse", "worse"): "holds", ("better", "worse"): "reversed (worse)",
            ("worse", "better"): "reversed (better)"}


def zero_shot_directions(cmp: Dict) -> List[str]:
    return [d for d, info in cmp["directions"].items() if info.get("group") == ZERO_SHOT]


def by_target(cmp: Dict, models: Dict[str, List[Dict]]) -> Dict[str, Dict]:
    """{target: {"directions": [...], "models": {name: per-model summary}}} over the zero-shot
    directions into each target: the mean over those directions of each metric's seed mean, the
    off-target rate pooled over them per seed (``off_target.group_rate``; mean and std over seeds),
    and, against the baseline, how many of them the verdict rule calls better / level / worse."""
    targets: Dict[str, List[str]] = {}
    for d in zero_shot_directions(cmp):
        targets.setdefault(d.split("-")[1], []).append(d)
    out = {}
    for tgt, dirs in targets.items():
        entries = {}
        for name, seeds in models.items():
            system = cmp["systems"][name]
            entry = {m: _mean([system["directions"][d][m]["mean"] for d in dirs]) for m in METRICS}
            entry["off_target"] = seed_summary([group_rate([r["results"]["directions"][d] for d in dirs])["off_target"]
                                                for r in seeds])
            tests = (system.get("significance") or {}).get("directions") or {}
            if name != cmp["baseline"]:
                entry["verdicts"] = {m: {v: sum((tests.get(d) or {}).get(m, {}).get("verdict") == v for d in dirs)
                                         for v in ("better", "level", "worse")} for m in METRICS}
            entries[name] = entry
        out[tgt] = {"directions": dirs, "models": entries}
    return out


def _mean(values) -> Optional[float]:
    return None if not values or any(v is None for v in values) else sum(values) / len(values)


def paper_claims(block_models: Dict[str, Dict], cmp: Dict) -> List[Dict]:
    """Each claim of ``CLAIMS`` whose model is in the block, with what the block measured on the
    zero-shot directions pooled (``verdict_by_kind``), the zero-shot win ratio and pooled
    off-target rates, and the outcome."""
    out = []
    base_rate = _zero_shot_rate(cmp, BASELINE)
    for c in CLAIMS:
        if c.model not in block_models:
            continue
        entry = block_models[c.model]
        here = {m: v for m, v in ((entry.get("verdict_by_kind") or {}).get(ZERO_SHOT) or {}).items() if m in METRICS}
        verdict = (here.get("bleu") or {}).get("verdict")
        if c.expects is None:
            outcome = "no claim to test"
        elif verdict is None:
            outcome = "not tested"
        else:
            outcome = OUTCOMES.get((c.expects, verdict), "not reproduced (level)")
        out.append({"model": c.model, "label": entry["label"], "source": c.source, "claim": c.claim,
                    "expects": c.expects, "zero_shot": here,
                    "win_ratio": ((cmp["systems"][c.model].get("win_ratio_by_kind") or {}).get(ZERO_SHOT) or {}).get("bleu"),
                    "off_target": {"model": _zero_shot_rate(cmp, c.model), "baseline": base_rate},
                    "outcome": outcome})
    return out


def _zero_shot_rate(cmp: Dict, name: str) -> Optional[float]:
    return ((cmp["systems"][name].get("off_target") or {}).get("averages", {}).get(ZERO_SHOT) or {}).get("mean")


def summary(cmp: Dict, models: Dict[str, List[Dict]], block_models: Dict[str, Dict]) -> Optional[Dict]:
    """The block's ``zero_shot`` entry, or None for a block without zero-shot directions."""
    if not zero_shot_directions(cmp) or BASELINE not in models:
        return None
    return {"by_target": by_target(cmp, models), "paper_claims": paper_claims(block_models, cmp)}


# ----------------------------------------------------------------------------- markdown
def _num(x: Optional[float], signed: bool = False) -> str:
    return "-" if x is None else (f"{x:+.2f}" if signed else f"{x:.2f}")


def _rate(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.1f}"


def markdown(zero: Dict, labels: Dict[str, str]) -> List[str]:
    """The zero-shot tables of a block's ``zero_shot`` entry."""
    targets = zero["by_target"]
    names = list(next(iter(targets.values()))["models"]) if targets else []
    others = [n for n in names if n != BASELINE]
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
        for n in others:
            e = row["models"][n]
            delta = None if e["bleu"] is None or base["bleu"] is None else e["bleu"] - base["bleu"]
            v = e["verdicts"]["bleu"]
            cells.append(f"{_num(delta, True)} ({v['better']} / {v['worse']})")
        start = f"| {tgt} | {len(row['directions'])} | "
        lines.append(start + " | ".join(cells) + " |")
        rates.append(start + " | ".join(_rate(row["models"][n]["off_target"]["mean"]) for n in names) + " |")
    lines += rates
    lines += ["", "**The papers' zero-shot claims, here** (decided before any M2M run: a claim of a gain holds where "
              "the zero-shot directions pooled are better than the baseline by the verdict rule, of a loss where they "
              "are worse; level: not reproduced; BLEU decides, chrF beside it; the outcome is about the sign of the difference, "
              "not its size, which the BLEU column gives):", "",
              "| model | paper | claim | BLEU, zero-shot pooled [each seed] | chrF | zero-shot directions ahead | "
              "off-target %, model / baseline | outcome |", "|---|---|---|---|---|---:|---:|---|"]
    for c in zero["paper_claims"]:
        bleu, chrf = (c["zero_shot"].get(m) for m in METRICS)
        win = c["win_ratio"]
        lines.append(f"| {c['label']} | {c['source']} | {c['claim']} | {_verdict_cell(bleu)} | {_verdict_cell(chrf)} | "
                     f"{'-' if not win else str(win['wins']) + ' of ' + str(win['directions'])} | "
                     f"{_rate(c['off_target']['model'])} / {_rate(c['off_target']['baseline'])} | "
                     f"**{c['outcome']}** |")
    return lines + [""]


def _verdict_cell(v: Optional[Dict]) -> str:
    if not v:
        return "-"
    seeds = ", ".join(f"{d:+.2f}" for d in v["seed_deltas"])
    return f"**{v['verdict']}** {v['delta']:+.2f} [{seeds}], p {format_p(v['p_value'])}"

