"""README's method standings and "Which method to use?", made from the head-to-head's results JSON
(``head_to_head_report.build``) and nothing else, so that README says what the record says.

Per model and direction, the verdict against the baseline over all test directions pooled
(``significance.verdict``), for BLEU and chrF, with the delta, its p-value and each seed's delta,
and the inference cost; a set with zero-shot directions (M2M) gets a verdict for its supervised and
one for its zero-shot directions, each pooled on its own (they answer two questions). The advice
follows one rule per direction set (and kind of direction): a model is recommended when it is
better than the baseline on at least one metric and worse on none, those better on both first;
models of one class are named in the table's order, joined by "or" (they were not tested against
each other, and a delta the rule calls level ranks nothing); when no model is, the shared baseline
is. A model or direction the record does not have yet reads "not yet recorded", and the advice
names the models it did not compare.
"""

import os
from typing import Dict, Optional

from ..significance import format_p
from .head_to_head_models import BASELINE, DIRECTIONS, MODELS
from .head_to_head_record import RECORD_DIR
from .head_to_head_runs import percent_text, ratio_text

START = ("<!-- method standings: start (written by `langshare head-to-head` from its results JSON; edit the tool, "
         "not this block) -->")
END = "<!-- method standings: end -->"
METRICS = (("bleu", "BLEU"), ("chrf", "chrF"))
MISSING = "not yet recorded"
GUIDE = "docs/head_to_head.md"  # as the report's default paths, relative to the working directory (the repository)


def _labels(data: Optional[Dict]) -> Dict[str, str]:
    """Every model's label, the table's order first, then any other model of the JSON."""
    labels = {m.name: m.label for m in MODELS if m.name != BASELINE}
    for block in ((data or {}).get("directions") or {}).values():
        for name, entry in block["models"].items():
            if name != BASELINE and name not in labels:
                labels[name] = entry["label"]
    return labels


def verdict_text(v: Dict) -> str:
    """A pooled verdict (``significance.pooled_verdicts``'s, one metric) as the tables write it."""
    seeds = ", ".join(f"{d:+.2f}" for d in v["seed_deltas"])
    return f"**{v['verdict']}** {v['delta']:+.2f} (p {format_p(v['p_value'])}; seeds {seeds})"


def _cell(entry: Optional[Dict], metric: str) -> str:
    if entry is None or not (entry.get("verdict") or {}).get(metric):
        return MISSING
    if entry.get("verdict_by_kind"):
        return "; ".join(f"{kind} {verdict_text(v[metric])}" for kind, v in entry["verdict_by_kind"].items()
                         if metric in v)
    return verdict_text(entry["verdict"][metric])


def _cost(entry: Optional[Dict]) -> str:
    if entry is None:
        return MISSING
    cost = entry["inference_cost"]
    if cost["equal"]:
        return "equal"
    other = " (other layers or widths)" if cost["layers_and_widths"] else ""
    return f"{ratio_text(cost['flops_ratio'])} FLOPs ({percent_text(cost['flops_ratio'])}){other}"


def _advice(name: str, block: Optional[Dict], labels: Dict[str, str]) -> str:
    """Which model to use for one direction, by the rule of the module docstring."""
    if block is None:
        return f"{name.upper()}: {MISSING}."
    head = f"{name.upper()} (seeds {', '.join(map(str, block['seeds']))}): "
    compared = [m for m in block["models"] if m != BASELINE]
    if not compared:
        return head + "only the baseline is recorded, no model is compared yet."
    missing = [label for model, label in labels.items() if model not in block["models"]]
    kinds = next((list(block["models"][m].get("verdict_by_kind") or []) for m in compared), [])
    if kinds:  # the supervised and the zero-shot directions, each by its own verdicts
        parts = [_recommendation(block, labels, lambda entry, kind=kind: (entry.get("verdict_by_kind") or {}).get(kind))
                 for kind in kinds]
        text = "; ".join(f"{kind} directions: {advice}" for kind, (advice, _) in zip(kinds, parts)) + "." + "".join(
            f" Behind the baseline on the {kind} directions: {', '.join(behind)}."
            for kind, (_, behind) in zip(kinds, parts) if behind)
    else:
        advice, behind = _recommendation(block, labels, lambda entry: entry.get("verdict"))
        text = f"{advice}." + (f" Behind the baseline: {', '.join(behind)}." if behind else "")
    return head + text + (f" Not compared ({MISSING}): {', '.join(missing)}." if missing else "") + _few_seeds(block)


def _few_seeds(block: Dict) -> str:
    """The caveat for verdicts from fewer than 3 seeds, where the sign rule checks little."""
    n = len(block["seeds"])
    if n >= 3:
        return ""
    why = ("the sign agreement checks nothing" if n == 1 else
           "every seed's delta has the same sign by chance half the time")
    return f" With {n} seed{'s' if n > 1 else ''} {why}: these verdicts are provisional (3 seeds or more: " \
           "docs/head_to_head.md)."


def _recommendation(block: Dict, labels: Dict[str, str], verdicts_of):
    """(advice, [models behind the baseline]) by the rule of the module docstring, reading each
    model's {metric: verdict} with ``verdicts_of(entry)``."""
    better, behind = [], []
    for model, entry in block["models"].items():
        found = None if model == BASELINE else verdicts_of(entry)
        if not found:
            continue
        verdicts = {metric: found[metric]["verdict"] for metric, _ in METRICS if metric in found}
        wins = [label for metric, label in METRICS if verdicts.get(metric) == "better"]
        losses = [label for metric, label in METRICS if verdicts.get(metric) == "worse"]
        cost = "equal inference cost" if entry["inference_cost"]["equal"] else f"inference cost {_cost(entry)}"
        if wins and not losses:
            level = [label for metric, label in METRICS if verdicts.get(metric) == "level"]
            text = f"**{labels[model]}** (better on {' and '.join(wins)}" + (
                f", level on {' and '.join(level)}" if level else "") + f"; {cost})"
            better.append((len(wins), text))
        elif losses:
            behind.append(f"{labels[model]} ({' and '.join(losses)})")
    if better:
        counts = sorted({wins for wins, _ in better}, reverse=True)
        classes = [[text for wins, text in better if wins == n] for n in counts]  # the table's order within each
        return "use " + "; then ".join(" or ".join(texts) + (", not tested against each other" if len(texts) > 1
                                                             else "") for texts in classes), behind
    return ("no model is better than the baseline on BLEU or chrF without being worse on the other: use the shared "
            "baseline"), behind


def _rel(path: str, start: str) -> str:
    return os.path.relpath(os.path.abspath(path), start)


def standings_markdown(data: Optional[Dict], readme: str = "README.md", tables: Optional[str] = "docs/results.md") -> str:
    """The README block (between its markers) for the results JSON ``data`` (None: none yet), its links
    relative to the file ``readme`` it goes in: to ``tables``, the results section's file (None: none
    written), and, from a file inside the working directory (the repository), to the guide."""
    here = os.path.dirname(os.path.abspath(readme))
    inside = os.path.commonpath([here, os.getcwd()]) == os.getcwd()
    guide = os.path.relpath(os.path.abspath(GUIDE), here) if inside else GUIDE

    labels = _labels(data)
    blocks = (data or {}).get("directions") or {}
    lines = [START,
             "Each model against the shared baseline (`baseline`), all test directions pooled (a set with zero-shot "
             "directions: its supervised and its zero-shot directions, each pooled on its own): **better** / **worse** "
             "where sacrebleu's paired bootstrap of the seed-concatenated systems gives p < 0.05 and every seed's "
             "delta has the same sign, **level** otherwise; the delta, its p-value and each seed's delta beside it. "
             f"Made by `langshare head-to-head` ([docs/head_to_head.md]({guide})) from the runs recorded "
             f"in `{data['record']['dir'] if data else RECORD_DIR}/`"]
    if not blocks:
        lines[-1] += (". **Not yet recorded**: the head-to-head of record (every model, O2M and M2O, 3 seeds; "
                      "docs/head_to_head.md, \"The record\") has not been reported yet; its standings appear here "
                      "when it is (`langshare head-to-head --report-only`).")
        return "\n".join(lines) + "\n" + END + "\n"
    lines[-1] += (f" ({data['updates']} updates per run, dated {data['generated']}"
                  + (f"; every table in [{_rel(tables, here)}]({_rel(tables, here)})" if tables else "") + ").")
    record = data["record"]["dir"]
    lines += ["", f"| model (record: `{record}/`) | "
              + " | ".join(f"{d.upper()} {label}" for d in DIRECTIONS for _, label in METRICS)
              + " | inference cost vs baseline |",
              "|---|" + "---|" * (len(DIRECTIONS) * len(METRICS) + 1)]
    for model, label in labels.items():
        entries = {d: (blocks.get(d) or {}).get("models", {}).get(model) for d in DIRECTIONS}
        cells = [_cell(entries[d], metric) for d in DIRECTIONS for metric, _ in METRICS]
        costs = "; ".join(f"{d.upper()} {_cost(entries[d])}" for d in DIRECTIONS)
        lines.append(f"| {label} (`{model}`) | " + " | ".join(cells) + f" | {costs} |")
    lines += ["", "**Which method to use?** " + " ".join(_advice(d, blocks.get(d), labels) for d in DIRECTIONS)]
    return "\n".join(lines) + "\n" + END + "\n"


def readme_block(text: str) -> Optional[str]:
    """The standings block of a README's ``text`` with its markers (None without them)."""
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        return None
    return text[start:end + len(END)] + "\n"

