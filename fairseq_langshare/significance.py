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

The verdict (``verdict``), the one rule every table and JSON of the package applies: a system is
better (worse) than the baseline when the seed-concatenated test gives p < ``ALPHA`` and its delta
and every seed's delta are above (below) zero; level otherwise, also where the test cannot say
anything.

A sentence's statistics (BLEU's n-gram matches and lengths, chrF's character and word n-gram
matches) depend on that sentence and its reference alone, so ``SentenceStatistics`` computes them
once per (hypothesis, reference) and the tests of every seed, direction and system reuse them:
sacrebleu's own test then runs on the same numbers, and the results are the same to the last bit.
"""

import re
import statistics
from typing import Dict, List, Optional, Sequence

from .log_levels import warnings_only

METRIC_LABELS = {"bleu": "BLEU", "chrf": "chrF", "spbleu": "spBLEU"}
TESTED_METRICS = ("bleu", "chrf")
DEFAULT_SAMPLES = 1000
ALPHA = 0.05  # the level of the verdict
VERDICTS = ("better", "level", "worse")


class SignificanceError(ValueError):
    """Inputs that cannot be paired; the message names the problem and the fix."""


def verdict(delta: Optional[float], p_value: Optional[float], seed_deltas: Sequence[Optional[float]],
            alpha: float = ALPHA) -> str:
    """"better" or "worse" when the seed-concatenated test's ``p_value`` < ``alpha`` and ``delta``
    and every one of ``seed_deltas`` (the system's score minus the baseline's on each seed pair)
    are above zero, or all below; "level" otherwise (also without a p-value: not testable)."""
    if p_value is None or not p_value < alpha or delta is None or not seed_deltas:
        return "level"
    deltas = [delta, *seed_deltas]
    if any(d is None for d in deltas):
        return "level"
    if all(d > 0 for d in deltas):
        return "better"
    if all(d < 0 for d in deltas):
        return "worse"
    return "level"


def pooled_verdicts(pooled: Dict, metrics: Sequence[str] = TESTED_METRICS) -> Optional[Dict]:
    """{metric: verdict, delta, p-value, each seed's delta} of a pooled test (``compare_to_baseline``'s
    ``pooled`` or one of its ``pooled_subsets``), for the metrics it tested; None if none."""
    return {m: {"verdict": pooled[m]["verdict"], "delta": pooled[m]["seeds_concatenated"]["delta"],
                "p_value": pooled[m]["seeds_concatenated"]["p_value"], "seed_deltas": pooled[m]["seed_deltas"]}
            for m in metrics if m in pooled} or None


class SentenceStatistics:
    """sacrebleu metrics whose per-sentence statistics are computed once per (hypothesis,
    reference) and then reused (see the module docstring); one instance per set of tests that
    share sentences, e.g. one comparison."""

    def __init__(self):
        self._memo = {}

    def metric(self, name: str, bleu_tokenize: str):
        metric = _metric(name, bleu_tokenize)
        memo = self._memo.setdefault((name, bleu_tokenize), {})
        extract = metric._extract_corpus_statistics

        def extract_once(hypotheses, references):
            if references is None or len(references) != 1:  # one reference per sentence only
                return extract(hypotheses, references)
            keys = list(zip(hypotheses, references[0]))
            todo = [k for k in dict.fromkeys(keys) if k not in memo]
            if todo:
                memo.update(zip(todo, extract([h for h, _ in todo], [[r for _, r in todo]])))
            metric.num_refs = 1  # what extracting sets, and the signature reads
            return [memo[k] for k in keys]

        metric._extract_corpus_statistics = extract_once
        return metric


def _metric(name: str, bleu_tokenize: str, statistics: Optional[SentenceStatistics] = None):
    from sacrebleu.metrics import BLEU, CHRF

    if statistics is not None:
        return statistics.metric(name, bleu_tokenize)
    if name == "bleu":
        return BLEU(tokenize=bleu_tokenize)
    if name == "chrf":
        return CHRF()
    raise SignificanceError(f"no significance test for metric {name!r}: test one of {', '.join(TESTED_METRICS)}")


def paired_bootstrap(baseline: Sequence[str], system: Sequence[str], references: Sequence[str],
                     metrics: Sequence[str] = TESTED_METRICS, bleu_tokenize: str = "13a",
                     n_samples: int = DEFAULT_SAMPLES, statistics: Optional[SentenceStatistics] = None
                     ) -> Dict[str, Dict[str, Optional[float]]]:
    """sacrebleu's paired bootstrap of ``system`` against ``baseline`` (hypotheses aligned with
    ``references``). Returns {metric: {baseline, system, delta, p_value, baseline_mean,
    baseline_ci, system_mean, system_ci}} (ci: half-width of the 95% interval; p_value None where
    the test cannot say anything, see the module docstring). ``statistics``: reuse the sentence
    statistics of earlier tests (the same results, faster)."""
    from sacrebleu.significance import PairedTest

    if not len(baseline) == len(system) == len(references):
        raise SignificanceError(f"cannot pair {len(system)} system and {len(baseline)} baseline hypotheses with "
                                f"{len(references)} references: evaluate both systems on the same test set")
    if not references:
        raise SignificanceError("no sentences to test: evaluate on a non-empty test set")
    if n_samples < 1:  # sacrebleu would silently use its default instead
        raise SignificanceError(f"{n_samples} bootstrap resamples: pass at least 1 (the default is {DEFAULT_SAMPLES})")
    named = {name: _metric(name, bleu_tokenize, statistics) for name in metrics}
    with warnings_only("sacrebleu"):  # its INFO lines: six per test, naming nothing the tables do not
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
                        metrics: Sequence[str] = TESTED_METRICS, n_samples: int = DEFAULT_SAMPLES,
                        statistics: Optional[SentenceStatistics] = None,
                        subsets: Optional[Dict[str, Sequence[str]]] = None) -> Dict:
    """Per direction and over all directions pooled, the paired bootstrap of every seed pair and of
    the seed-concatenated systems, each seed's delta and the verdict (``verdict``). ``*_runs``: one
    {direction: hypotheses} per seed, paired by index (as many seeds on both sides); ``tokenize``:
    BLEU tokenization per direction (the pooled test uses the common one, 13a when they differ, and
    says so); ``statistics``: shared with other comparisons against the same baseline; ``subsets``:
    {name: directions} also pooled each on its own (``pooled_subsets``, e.g. the supervised and the
    zero-shot directions, which answer different questions)."""
    if len(baseline_runs) != len(system_runs):
        raise SignificanceError(f"the system has {len(system_runs)} seeds but the baseline {len(baseline_runs)}: "
                                "pass the same seeds for every system")
    seeds = len(baseline_runs)
    if seeds == 0:
        raise SignificanceError("no seed of the baseline or of the system has hypotheses to test")
    base, mine = list(baseline_runs), list(system_runs)
    statistics = statistics or SentenceStatistics()
    directions = [d for d in references if all(d in run for run in base + mine)]
    if not directions:
        raise SignificanceError("the system and the baseline have no direction with hypotheses in common")

    def tests(sets, tok):
        refs = [r for d in sets for r in references[d]]
        per_seed = [paired_bootstrap(_concat([b], sets), _concat([m], sets), refs, metrics, tok, n_samples, statistics)
                    for b, m in zip(base, mine)]
        both = per_seed[0] if seeds == 1 else paired_bootstrap(
            _concat(base, sets), _concat(mine, sets), refs * seeds, metrics, tok, n_samples, statistics)
        out = {}
        for metric in metrics:
            deltas = [seed[metric]["delta"] for seed in per_seed]
            out[metric] = {"per_seed": [seed[metric] for seed in per_seed], "seeds_concatenated": both[metric],
                           "seed_deltas": deltas,
                           "verdict": verdict(both[metric]["delta"], both[metric]["p_value"], deltas)}
        return out

    def pooled(sets):
        toks = {tokenize.get(d) or "13a" for d in sets}
        tok = toks.pop() if len(toks) == 1 else "13a"
        return {"directions": sets, "bleu_tokenize": tok, **tests(sets, tok)}

    out = {
        "test": "paired bootstrap resampling (sacrebleu PairedTest, test type bs)",
        "n_samples": n_samples, "seeds": seeds,
        "directions": {d: tests([d], tokenize.get(d) or "13a") for d in directions},
        "pooled": pooled(directions),
    }
    if subsets:
        chosen = {name: [d for d in directions if d in set(sets)] for name, sets in subsets.items()}
        out["pooled_subsets"] = {name: pooled(sets) for name, sets in chosen.items() if sets}
    return out


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
