"""Paired significance tests of a system against a baseline, with sacrebleu's own implementation.

Every test is sacrebleu's paired bootstrap resampling (``sacrebleu.significance.PairedTest``,
test type ``bs``; Koehn 2004): the two systems' per-sentence statistics are resampled together
``n_samples`` times (default 1000, sacrebleu's; the resampling seed is ``SACREBLEU_SEED``,
default 12345, so results are reproducible). sacrebleu reports, per metric, each system's score,
the bootstrap mean and the half-width of its 95% confidence interval, and the p-value of the
(two-sided) difference.

Two corrections, both where sacrebleu's strict ``>`` count gives p = 1/(n_samples + 1), which reads
as significant: an observed difference of exactly zero (identical hypotheses, or e.g. both at BLEU 0)
has p = 1 here (the p-value of a zero two-sided statistic); and where the test cannot say anything,
fewer than 2 sentences or the same difference in every resample (zero variance), the p-value is None
("not testable"), and no table marks it.

Several seeds (``compare_to_baseline``): both systems need the same number of seeds; seed k of
the system is paired with seed k of the baseline (same data order and initialisation seed); the
test runs on every seed pair and once
on the seed-concatenated systems (the k test sets one after the other, references repeated).
The concatenated test averages over training randomness but does not model it as a random
effect (three seeds cannot estimate that variance well), so the seed standard deviation and the
per-seed p-values are reported next to it (docs/head_to_head.md, "Significance").
"""

import re
import statistics
from typing import Dict, List, Optional, Sequence

METRIC_LABELS = {"bleu": "BLEU", "chrf": "chrF", "spbleu": "spBLEU"}
TESTED_METRICS = ("bleu", "chrf")
DEFAULT_SAMPLES = 1000


class SignificanceError(ValueError):
    """Inputs that cannot be paired; the message names the problem and the fix."""


def _metric(name: str, bleu_tokenize: str):
    from sacrebleu.metrics import BLEU, CHRF

    if name == "bleu":
        return BLEU(tokenize=bleu_tokenize)
    if name == "chrf":
        return CHRF()
    raise SignificanceError(f"no significance test for metric {name!r}: test one of {', '.join(TESTED_METRICS)}")


def paired_bootstrap(baseline: Sequence[str], system: Sequence[str], references: Sequence[str],
                     metrics: Sequence[str] = TESTED_METRICS, bleu_tokenize: str = "13a",
                     n_samples: int = DEFAULT_SAMPLES) -> Dict[str, Dict[str, Optional[float]]]:
    """sacrebleu's paired bootstrap of ``system`` against ``baseline`` (hypotheses aligned with
    ``references``). Returns {metric: {baseline, system, delta, p_value, baseline_mean,
    baseline_ci, system_mean, system_ci}} (ci: half-width of the 95% interval; p_value None where
    the test cannot say anything, see the module docstring)."""
    from sacrebleu.significance import PairedTest

    if not len(baseline) == len(system) == len(references):
        raise SignificanceError(f"cannot pair {len(system)} system and {len(baseline)} baseline hypotheses with "
                                f"{len(references)} references: evaluate both systems on the same test set")
    if not references:
        raise SignificanceError("no sentences to test: evaluate on a non-empty test set")
    if n_samples < 1:  # sacrebleu would silently use its default instead
        raise SignificanceError(f"{n_samples} bootstrap resamples: pass at least 1 (the default is {DEFAULT_SAMPLES})")
    named = {name: _metric(name, bleu_tokenize) for name in metrics}
    test = PairedTest([("baseline", list(baseline)), ("system", list(system))], named, [list(references)],
                      test_type="bs", n_samples=n_samples)
    _, scores = test()
    out = {}
    for name, (base, mine) in zip(named, (scores[key] for key in scores if key != "System")):
        p = mine.p_value
        if len(references) < 2:
            p = None
        elif mine.score == base.score:
            p = 1.0
        elif p <= 1 / (n_samples + 1) and _constant_difference(named[name], baseline, system, references,
                                                                n_samples, getattr(test, "_seed", None) or None):
            p = None
        values = {"baseline": base.score, "system": mine.score, "delta": mine.score - base.score, "p_value": p,
                  "baseline_mean": base.mean, "baseline_ci": base.ci, "system_mean": mine.mean, "system_ci": mine.ci}
        out[name] = {k: None if v is None else float(v) for k, v in values.items()}  # sacrebleu: numpy floats
    return out


def _constant_difference(metric, baseline, system, references, n_samples, seed) -> bool:
    """Whether every one of sacrebleu's resamples (the same indices as its paired test) gives the
    same score difference: the test has zero variance and its minimal p-value means nothing. Reads
    sacrebleu's per-sentence statistics (what its paired test sums); a sacrebleu without them:
    False, its p-value stands."""
    import numpy as np

    try:
        base, mine = (np.array(metric._extract_corpus_statistics(list(hyps), [list(references)]), dtype="float32")
                      for hyps in (baseline, system))
        score = metric._compute_score_from_stats
    except (AttributeError, TypeError):
        return False
    idxs = np.random.default_rng(seed).choice(len(references), size=(n_samples, len(references)), replace=True)
    first = None
    for idx in idxs:  # stops at the first resample that differs (usually the second)
        diff = abs(score(mine[idx].sum(0)).score - score(base[idx].sum(0)).score)
        if first is not None and diff != first:
            return False
        first = diff
    return True


def bleu_tokenization(signature: Optional[str]) -> Optional[str]:
    """The ``tok:`` field of a sacrebleu BLEU signature (None without one)."""
    match = re.search(r"(?:^|\|)tok:([^|]+)", signature or "")
    return match.group(1) if match else None


def _concat(runs: Sequence[Dict[str, List[str]]], directions: Sequence[str]) -> List[str]:
    return [h for run in runs for d in directions for h in run[d]]


def compare_to_baseline(baseline_runs: Sequence[Dict[str, List[str]]], system_runs: Sequence[Dict[str, List[str]]],
                        references: Dict[str, List[str]], tokenize: Dict[str, str],
                        metrics: Sequence[str] = TESTED_METRICS, n_samples: int = DEFAULT_SAMPLES) -> Dict:
    """Per direction and over all directions pooled, the paired bootstrap of every seed pair and of
    the seed-concatenated systems. ``*_runs``: one {direction: hypotheses} per seed, paired by
    index (as many seeds on both sides); ``tokenize``: BLEU tokenization per direction (the pooled
    test uses the common one, 13a when they differ, and says so)."""
    if len(baseline_runs) != len(system_runs):
        raise SignificanceError(f"the system has {len(system_runs)} seeds but the baseline {len(baseline_runs)}: "
                                "pass the same seeds for every system")
    seeds = len(baseline_runs)
    if seeds == 0:
        raise SignificanceError("no seed of the baseline or of the system has hypotheses to test")
    base, mine = list(baseline_runs), list(system_runs)
    directions = [d for d in references if all(d in run for run in base + mine)]
    if not directions:
        raise SignificanceError("the system and the baseline have no direction with hypotheses in common")

    def tests(sets, tok):
        refs = [r for d in sets for r in references[d]]
        per_seed = [paired_bootstrap(_concat([b], sets), _concat([m], sets), refs, metrics, tok, n_samples)
                    for b, m in zip(base, mine)]
        both = per_seed[0] if seeds == 1 else paired_bootstrap(
            _concat(base, sets), _concat(mine, sets), refs * seeds, metrics, tok, n_samples)
        return {metric: {"per_seed": [seed[metric] for seed in per_seed], "seeds_concatenated": both[metric]}
                for metric in metrics}

    toks = {tokenize.get(d) or "13a" for d in directions}
    pooled_tok = toks.pop() if len(toks) == 1 else "13a"
    return {
        "test": "paired bootstrap resampling (sacrebleu PairedTest, test type bs)",
        "n_samples": n_samples, "seeds": seeds,
        "directions": {d: tests([d], tokenize.get(d) or "13a") for d in directions},
        "pooled": {"directions": directions, "bleu_tokenize": pooled_tok, **tests(directions, pooled_tok)},
    }


def seed_summary(values: Sequence[Optional[float]]) -> Dict[str, object]:
    """Mean and sample standard deviation over seeds (std None with one seed; mean None if a
    seed lacks the value)."""
    values = list(values)
    if not values or any(v is None for v in values):
        return {"mean": None, "std": None, "values": values}
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else None,
            "values": values}


def format_p(p_value: Optional[float]) -> str:
    """A p-value for a table: "not testable" where the test could say nothing (None)."""
    return "not testable" if p_value is None else f"{p_value:.3f}"
