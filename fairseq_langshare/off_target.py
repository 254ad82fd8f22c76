"""Off-target rate: the share of a direction's hypotheses that are not in its target language.

The **off-target rate** of a direction is the percentage of its hypotheses of at least
``MIN_CHARS`` characters whose identified language is not the target language. The identifier is
py3langid (langid.py's naive Bayes classifier over byte n-grams, Lui & Baldwin 2012, with the model
shipped inside the wheel: nothing is downloaded), asked to choose among the corpus's languages only
(``set_languages``): the question answered is "which of the languages the model was taught is this
output in", which is what off-target translation means (Zhang et al. 2020, ACL) and which
keeps a short Norwegian string from being called Danish.

The identifier is measured first on the references of every language of the corpus (the same split);
a target language enters the rate only when the identifier tells it apart there. The rules below were
fixed on 2026-11-28 from the identifier's accuracy on the references of the gettext corpus alone
(``langshare off-target CORPUS``, docs/results/language_id.json), before any model's hypotheses were
identified (docs/evaluation.md, "Off-target rate"):

* a sentence shorter than ``MIN_CHARS`` (20) characters is not identified: below that the identifier's
  accuracy on the gettext references drops under 0.95 even for French and English;
* a language is measured on at most ``MAX_REFERENCES`` references of that length and needs at least
  ``MIN_REFERENCES`` (20) of them;
* a target language is left out of the rate (``None``, with the reason) unless the identifier labels
  at least ``MIN_ACCURACY`` (95%) of its references as itself and no other language of the corpus has
  more than ``MAX_CONFUSION`` (5%) of its references labelled as it (Bokmal and Nynorsk fail this);
  languages the identifier does not know, or that share its label with another language of the
  corpus (``sr`` and ``sr_latin``), are left out too.

Group averages are means over the group's directions that have a rate (``off_target_directions``).
"""

import glob
import json
import logging
import os
from collections import Counter, OrderedDict
from typing import Dict, List, Optional, Sequence

from .command_line import add_command, file_name
from .direction_groups import group_members

MIN_CHARS = 20
MIN_REFERENCES = 20
MAX_REFERENCES = 1000
MIN_ACCURACY = 0.95
MAX_CONFUSION = 0.05
ALIASES = {"nb": "no"}  # corpus (gettext locale) code -> py3langid label, where they differ
INSTALL = "pip install 'fairseq_langshare[langid]' (py3langid, Python >= 3.10)"


class OffTargetError(ValueError):
    """Bad input to the off-target rate; the message is one line naming the problem and the fix."""


def identifier_label(code: str) -> str:
    """The identifier's label of a corpus language code: its base language (``pt_BR`` -> ``pt``,
    ``sr_latin`` -> ``sr``), renamed where py3langid names it otherwise (``nb`` -> ``no``)."""
    base = code.replace("@", "_").replace("-", "_").split("_")[0].lower()
    return ALIASES.get(base, base)


def rules() -> Dict:
    """The decision rules, recorded with every rate (a comparison refuses rates made under others)."""
    return {"min_chars": MIN_CHARS, "min_references": MIN_REFERENCES, "max_references": MAX_REFERENCES,
            "min_accuracy": MIN_ACCURACY, "max_confusion": MAX_CONFUSION}


class Identifier:
    """py3langid restricted to the labels of ``languages`` (corpus codes) that its model knows."""

    def __init__(self, languages: Sequence[str]):
        try:
            from importlib.metadata import version
            from py3langid.langid import MODEL_FILE, LanguageIdentifier
        except ImportError:
            raise OffTargetError(f"the off-target rate needs py3langid, which is not installed: {INSTALL}") from None
        self.name = f"py3langid {version('py3langid')}"
        logging.getLogger("py3langid").setLevel(logging.WARNING)  # one debug line per restriction
        self._model = LanguageIdentifier.from_model_file(MODEL_FILE)
        known = set(self._model.labels)
        self.languages = list(languages)
        self.labels = {code: identifier_label(code) for code in self.languages}
        self.unknown = [c for c in self.languages if self.labels[c] not in known]
        usable = sorted({lab for c, lab in self.labels.items() if c not in self.unknown})
        if usable:  # an empty restriction would leave py3langid no label to choose (argmax of nothing)
            self._model.set_languages(usable)
        self._usable = bool(usable)
        owners = {}
        for code in self.languages:
            if code not in self.unknown:
                owners.setdefault(self.labels[code], []).append(code)
        self.shared = {c: [o for o in owners[self.labels[c]] if o != c] for codes in owners.values() if len(codes) > 1
                       for c in codes}
        self._codes = {lab: "/".join(codes) for lab, codes in owners.items()}  # label -> what the tables call it

    def identify(self, texts: Sequence[str], min_chars: int = MIN_CHARS) -> List[Optional[str]]:
        """Each text's label, or None when it has fewer than ``min_chars`` characters or no language
        of the corpus is known to the identifier."""
        return [self._model.classify(t.strip())[0] if self._usable and len(t.strip()) >= min_chars else None
                for t in texts]

    def code(self, label: str) -> str:
        return self._codes.get(label, label)


def load_identifier(languages: Sequence[str]):
    """(Identifier, None), or (None, why) when py3langid is not installed."""
    try:
        return Identifier(languages), None
    except OffTargetError as error:
        return None, f"off-target rate not computed: {error}"


# ----------------------------------------------------------------------------- references
def corpus_languages(corpus_dir: str) -> List[str]:
    """The languages of a prepared corpus (its manifest's ``langs``, else its ``langs.txt``)."""
    path = os.path.join(corpus_dir, "manifest.json")
    try:
        with open(path, encoding="utf-8") as f:
            langs = json.load(f).get("langs")
        if not langs and os.path.isfile(os.path.join(corpus_dir, "langs.txt")):
            with open(os.path.join(corpus_dir, "langs.txt"), encoding="utf-8") as f:
                langs = f.read().split()
    except (OSError, ValueError) as error:
        raise OffTargetError(f"cannot read the corpus manifest {path} ({error}); pass a corpus directory "
                             f"from `langshare prepare-gettext`") from None
    if not langs:
        raise OffTargetError(f"{path} lists no languages ('langs') and there is no langs.txt; rebuild the corpus")
    return list(langs)


def reference_sentences(corpus_dir: str, split: str, languages: Sequence[str], min_chars: int = MIN_CHARS,
                        max_references: int = MAX_REFERENCES) -> Dict[str, List[str]]:
    """Per language, the distinct sentences of ``raw/{split}.*.{lang}`` (file name order) with at
    least ``min_chars`` characters, at most ``max_references`` of them."""
    out = {}
    for lang in languages:
        seen = OrderedDict()
        for path in sorted(glob.glob(os.path.join(corpus_dir, "raw", f"{split}.*-*.{lang}"))):
            with open(path, encoding="utf-8") as f:
                for line in f:
                    line = line.strip()
                    if len(line) >= min_chars:
                        seen.setdefault(line, None)
        out[lang] = list(seen)[:max_references]
    return out


def measure(identifier: Identifier, sentences: Dict[str, List[str]]) -> Dict[str, Dict]:
    """Per language: references measured, share identified as itself (accuracy), the languages its
    references are mistaken for, and whether the rate is reported for it (``included``, else ``note``)."""
    labelled = {lang: identifier.identify(s) for lang, s in sentences.items()}
    out = {}
    for lang in identifier.languages:
        labels = labelled.get(lang, [])
        own = identifier.labels[lang]
        n = len(labels)
        counts = Counter(identifier.code(lab) for lab in labels if lab != own)
        out[lang] = {"label": own, "references": n,
                     "accuracy": (n - sum(counts.values())) / n if n and lang not in identifier.unknown else None,
                     "mistaken_for": {c: k / n for c, k in counts.most_common()} if n else {}}
    for lang, row in out.items():
        row["note"] = _exclusion(lang, row, out, identifier)
        row["included"] = row["note"] is None
    return out


def _exclusion(lang, row, rows, identifier) -> Optional[str]:
    if lang in identifier.unknown:
        return f"the identifier does not know '{row['label']}'"
    if lang in identifier.shared:
        return f"shares the identifier's label '{row['label']}' with {', '.join(identifier.shared[lang])}"
    if row["references"] < MIN_REFERENCES:
        return (f"only {row['references']} references of >= {MIN_CHARS} characters to measure the identifier on "
                f"(needs {MIN_REFERENCES})")
    if row["accuracy"] < MIN_ACCURACY:
        return f"identified as itself in {100 * row['accuracy']:.1f}% of its references (needs {100 * MIN_ACCURACY:.0f}%)"
    for other, theirs in rows.items():
        share = theirs["mistaken_for"].get(identifier.code(row["label"]), 0.0)
        if other != lang and theirs["references"] >= MIN_REFERENCES and share > MAX_CONFUSION:
            return (f"{100 * share:.1f}% of {other}'s references are identified as {lang} "
                    f"(at most {100 * MAX_CONFUSION:.0f}%)")
    return None


def measure_corpus(corpus_dir: str, split: str = "test", identifier: Optional[Identifier] = None) -> Dict:
    """The identifier's accuracy on the references of every language of a corpus, with the rules."""
    if not glob.glob(os.path.join(corpus_dir, "raw", f"{split}.*")):
        raise OffTargetError(f"{corpus_dir} has no {split} split (no raw/{split}.* file): pass --split test or "
                             "another split it has")
    languages = corpus_languages(corpus_dir)
    identifier = identifier or Identifier(languages)
    return {"identifier": identifier.name, "rules": rules(), "corpus": os.path.abspath(corpus_dir), "split": split,
            "languages": measure(identifier, reference_sentences(corpus_dir, split, languages))}


# ----------------------------------------------------------------------------- the rate
def direction_rate(identifier: Identifier, hypotheses: Sequence[str], target: str, languages: Dict) -> Dict:
    """``off_target`` (percent, None when the target is left out or no hypothesis is long enough),
    ``off_target_identified`` (hypotheses of >= MIN_CHARS characters) and ``off_target_into``
    (the languages the off-target ones were identified as, with counts)."""
    labels = [lab for lab in identifier.identify(hypotheses) if lab is not None]
    info = languages.get(target)
    if info is None:
        raise OffTargetError(f"target language {target!r} is not a language of the corpus ({', '.join(languages)})")
    own = info["label"]
    into = Counter(identifier.code(lab) for lab in labels if lab != own)
    rate = 100.0 * sum(into.values()) / len(labels) if labels and info["included"] else None
    return {"off_target": rate, "off_target_identified": len(labels),
            "off_target_into": dict(into.most_common()) if info["included"] else {}}


def group_rate(rows: Sequence[Dict]) -> Dict:
    """The off-target rate of a group of direction rows: their off-target hypotheses over their
    identified ones, pooled over the rows that have a rate (so a direction weighs by its identified
    hypotheses, not one for one); how many rows and hypotheses that is."""
    rated = [r for r in rows if r.get("off_target") is not None]
    identified = sum(r["off_target_identified"] for r in rated)
    off = sum(sum((r.get("off_target_into") or {}).values()) for r in rated)
    return {"off_target": 100.0 * off / identified if identified else None, "off_target_directions": len(rated),
            "off_target_identified": identified}


def add_off_target(results: Dict, corpus_dir: Optional[str] = None, identifier: Optional[Identifier] = None) -> Dict:
    """Add the rate to ``langshare evaluate`` results (in place, also returned) from their stored
    hypotheses: every direction row, every group average, and ``results["off_target"]`` (identifier,
    rules, the per-language measurement on the references, the languages left out and why). Without
    py3langid, ``results["off_target"]`` says so and the rows get None."""
    corpus_dir = corpus_dir or results.get("corpus")
    split = results.get("split", "test")
    if not corpus_dir or not os.path.isdir(corpus_dir):
        raise OffTargetError(f"corpus directory {corpus_dir!r} of the results not found; pass the corpus directory")
    _check_corpus_holds_the_references(results, corpus_dir)
    _check_hypotheses(results)
    languages = corpus_languages(corpus_dir)
    _check_corpus_languages(results, corpus_dir, languages)
    if identifier is None:
        identifier, why = load_identifier(languages)
        if identifier is None:
            for row in results["directions"].values():
                row.update(off_target=None, off_target_identified=None, off_target_into={})
            results["off_target"] = {"note": why}
            _add_averages(results)
            return results
    measured = measure(identifier, reference_sentences(corpus_dir, split, languages))
    return _add_rates(results, identifier, measured, split)


def _check_corpus_holds_the_references(results: Dict, corpus_dir: str) -> None:
    """Refuse a corpus other than the one the results were scored on (the identifier would be measured
    on other references): each recorded reference file must be in its raw/, the same bytes (sha256),
    wherever the corpus now lies."""
    from .data.corpus_build import sha256

    for direction, ref in sorted((results.get("references") or {}).items()):
        here = os.path.join(corpus_dir, "raw", os.path.basename(ref.get("path", "")))
        if not os.path.isfile(here) or sha256(here) != ref.get("sha256"):
            why = "differs" if os.path.isfile(here) else "is missing"
            raise OffTargetError(f"the results of {direction} were scored against {ref.get('path')}, which {corpus_dir} "
                                 f"does not hold (its raw/{os.path.basename(here)} {why}): pass the corpus the results "
                                 "were evaluated on, or none (the results name it)")


def _check_corpus_languages(results: Dict, corpus_dir: str, languages: List[str]) -> None:
    """Refuse a corpus of other languages than the results' (two corpora can share a direction's references):
    the identifier would choose among other languages. The results' languages are those their rates were
    measured among, else those of the corpus they name, where it still is."""
    named = results.get("corpus")
    before = list(((results.get("off_target") or {}).get("languages") or {}))
    if not before and named and os.path.isdir(named):
        before = corpus_languages(named)
    if before and set(before) != set(languages):
        raise OffTargetError(f"{corpus_dir} has the languages {', '.join(languages)}, but the results were evaluated "
                             f"on a corpus of {', '.join(before)} ({named}): pass that corpus, or none (the results "
                             "name it)")


def add_measured(results: Dict, measurement: Dict, identifier: Optional[Identifier] = None) -> Dict:
    """``add_off_target`` with the identifier's measurement on the corpus's references given
    (``measure_corpus``'s, e.g. the file ``langshare off-target CORPUS --out-json`` wrote) instead of
    made from the corpus: for results whose corpus is not at hand. Refused when the installed
    identifier or the rules are not the ones the measurement was made with (the rates would differ)."""
    if measurement.get("rules") != rules():
        raise OffTargetError(f"the identifier was measured under other rules ({measurement.get('rules')}) than this "
                             f"version's ({rules()}): measure it again with `langshare off-target CORPUS --out-json`")
    identifier = identifier or Identifier(list(measurement["languages"]))
    if identifier.name != measurement.get("identifier"):
        raise OffTargetError(f"the identifier was measured as {measurement.get('identifier')} but {identifier.name} is "
                             f"installed: install that version (constraints.txt) or measure it again")
    _check_hypotheses(results)
    return _add_rates(results, identifier, measurement["languages"], measurement.get("split", "test"))


def _check_hypotheses(results: Dict) -> None:
    missing = [d for d in results["directions"] if d not in (results.get("hypotheses") or {})]
    if missing:
        raise OffTargetError(f"the results hold no hypotheses for {', '.join(missing)}: evaluate again with "
                             f"`langshare evaluate` of this version (it stores them)")


def _add_rates(results: Dict, identifier: Identifier, measured: Dict, split: str) -> Dict:
    for d, row in results["directions"].items():
        row.update(direction_rate(identifier, results["hypotheses"][d], d.split("-")[1], measured))
    left_out = {lang: m["note"] for lang, m in measured.items() if not m["included"]}
    results["off_target"] = {"identifier": identifier.name, "rules": rules(), "split": split, "languages": measured,
                             "left_out": left_out, "too_short": too_short([results["directions"]], left_out)}
    _add_averages(results)
    return results


def _add_averages(results):
    rows = results["directions"]
    members = group_members({d: row.get("group") for d, row in rows.items()})
    for group, avg in (results.get("averages") or {}).items():
        avg.update(group_rate([rows[d] for d in members.get(group, [])]))


def too_short(runs: Sequence[Dict[str, Dict]], left_out: Dict) -> List[str]:
    """The directions (of ``runs``' direction rows) into a measured language with no rate because no
    hypothesis of any run holding them is long enough to identify."""
    found = []
    for d in dict.fromkeys(d for rows in runs for d in rows):
        rows = [rows[d] for rows in runs if d in rows]
        if d.split("-")[1] not in left_out and all(r.get("off_target_identified") == 0 for r in rows):
            found.append(d)
    return found


def note(info: Optional[Dict], directions: Optional[Sequence[str]] = None) -> Optional[str]:
    """One sentence for a table: what the rate is, which target languages it leaves out and which
    directions have no hypothesis long enough to measure. With ``directions`` (the table's), only the
    left-out languages one of them goes into are named (not a one-to-many table's source language)."""
    if not info:
        return None
    if "identifier" not in info:
        return info.get("note")
    text = (f"Off-target: % of hypotheses of >= {info['rules']['min_chars']} characters that {info['identifier']} "
            f"identifies as another of the corpus's languages")
    left = info.get("left_out") or {}
    if directions is not None:
        targets = {d.split("-")[1] for d in directions}
        left = {lang: why for lang, why in left.items() if lang in targets}
    if left:
        text += "; not measured into " + "; ".join(f"{lang} ({why})" for lang, why in left.items())
    if info.get("too_short"):
        text += (f"; - for {', '.join(info['too_short'])}: no hypothesis of >= {info['rules']['min_chars']} "
                 "characters to identify")
    return text + "."


# ----------------------------------------------------------------------------- comparison
def add_to_comparison(cmp: Dict, systems: Dict[str, List[Dict]]) -> None:
    """Per system, the off-target rate's mean and std over seeds per direction and group
    (``cmp["systems"][name]["off_target"]``), and the rules it was measured under
    (``cmp["off_target"]``); runs measured under other rules or identifiers are refused."""
    from .significance import seed_summary

    infos = {json.dumps({k: r["off_target"].get(k) for k in ("identifier", "rules")}, sort_keys=True): name
             for name, seeds in systems.items() for r in seeds if (r.get("off_target") or {}).get("identifier")}
    if not infos:
        return
    if len(infos) > 1:
        (a, x), (b, y) = list(infos.items())[:2]
        raise OffTargetError(f"the off-target rates of {x} and {y} were measured with other identifiers or rules "
                             f"({a} against {b}); recompute them with `langshare off-target CORPUS --results ...`")
    first = next(r for seeds in systems.values() for r in seeds if (r.get("off_target") or {}).get("identifier"))
    cmp["off_target"] = {k: v for k, v in first["off_target"].items() if k != "languages"}
    cmp["off_target"]["too_short"] = sorted({d for seeds in systems.values() for d in too_short(
        [r["directions"] for r in seeds], cmp["off_target"].get("left_out") or {})}, key=list(cmp["directions"]).index)
    # the groups are made again from the runs' rows, over the directions every run has a rate for: a run's own
    # averages may be over other directions (none long enough in one run), or lack a group (older results)
    runs = [r for seeds in systems.values() for r in seeds]
    rated = [d for d in cmp["directions"] if all((r["directions"].get(d) or {}).get("off_target") is not None
                                                 for r in runs)]
    cmp["off_target"]["unrated"] = [d for d in cmp["directions"] if d not in rated]
    without = [name for name, seeds in systems.items()
               if any(not (r.get("off_target") or {}).get("identifier") for r in seeds)]
    if without:  # results from before evaluate measured the rates
        cmp["off_target"]["runs_without_rates"] = without
    members = group_members({d: info.get("group") for d, info in cmp["directions"].items()})
    for name, seeds in systems.items():
        groups = list(cmp["systems"][name]["averages"])
        cmp["systems"][name]["off_target"] = {
            "directions": {d: seed_summary([r["directions"].get(d, {}).get("off_target") for r in seeds])
                           for d in cmp["directions"]},
            "averages": {g: seed_summary([group_rate([r["directions"][d] for d in members.get(g, []) if d in rated])
                                          ["off_target"] for r in seeds]) for g in groups},
        }


def comparison_table(cmp: Dict, cell) -> List[str]:
    """The off-target table of ``add_to_comparison`` (``cell`` formats a seed summary), or nothing."""
    if "off_target" not in cmp:
        return []
    names = list(cmp["systems"])
    entries = [e.get("off_target") or {"directions": {}, "averages": {}} for e in cmp["systems"].values()]
    none = {"mean": None}
    lines = ["Off-target rate, % (lower is better; mean ± std over seeds):", "",
             "| direction | group | " + " | ".join(names) + " |", "|---|---|" + "---:|" * len(names)]
    for d, info in cmp["directions"].items():
        lines.append(f"| {d} | {info.get('group') or '-'} | "
                     + " | ".join(cell(e["directions"].get(d, none)) for e in entries) + " |")
    for group in next(iter(cmp["systems"].values()))["averages"]:
        lines.append(f"| **{group}** avg |  | " + " | ".join(cell(e["averages"].get(group, none)) for e in entries)
                     + " |")
    unrated = cmp["off_target"].get("unrated") or []
    pooled = ("The group rows pool the hypotheses of the directions every run has a rate for"
              + (f" (not {', '.join(unrated)})" if unrated else "") + ".")
    without = cmp["off_target"].get("runs_without_rates") or []
    if without:
        pooled += (f" {', '.join(without)} {'has' if len(without) == 1 else 'have'} no off-target rates (results "
                   "written before `langshare evaluate` measured them): add them with `langshare off-target CORPUS "
                   "--results FILE.json`, then compare again.")
    return lines + ["", note(cmp["off_target"], cmp["directions"]) + " " + pooled, ""]


# ----------------------------------------------------------------------------- CLI
def markdown(measured: Dict) -> str:
    """The per-language table of ``measure_corpus``."""
    lines = [f"{measured['identifier']} on the {measured['split']} references of `{measured['corpus']}` (sentences of "
             f">= {measured['rules']['min_chars']} characters, restricted to the corpus's languages):", "",
             "| language | label | references | identified as itself | mistaken for | in the rate |",
             "|---|---|---:|---:|---|---|"]
    for lang, m in measured["languages"].items():
        acc = "-" if m["accuracy"] is None else f"{100 * m['accuracy']:.1f}%"
        wrong = ", ".join(f"{c} {100 * s:.1f}%" for c, s in list(m["mistaken_for"].items())[:3]) or "-"
        lines.append(f"| {lang} | {m['label']} | {m['references']} | {acc} | {wrong} | "
                     f"{'yes' if m['included'] else 'no: ' + m['note']} |")
    return "\n".join(lines) + "\n"


def _run(args):
    from .atomic_files import check_writable, write_json_atomic
    from .result_kinds import OFF_TARGET_JSON, held_unless

    if args.results:
        for flag, value in (("--out-json", args.out_json), ("--split", args.split)):
            if value is not None:
                raise OffTargetError(f"{flag} measures a corpus, which --results does not: drop it (the results are "
                                     "rated on the split they were evaluated on)")
        for path in args.results:
            check_writable(path, "--results")
        for path in args.results:
            try:
                with open(path, encoding="utf-8") as f:
                    results = json.load(f)
            except (OSError, ValueError) as error:
                raise OffTargetError(f"cannot read results {path} ({error}); pass `langshare evaluate --out-json` "
                                     f"files") from None
            if not isinstance(results, dict) or not isinstance(results.get("directions"), dict):
                raise OffTargetError(f"{path} is not a `langshare evaluate` results file (no 'directions' table)")
            corpus = args.corpus or results.get("corpus")
            if not corpus or not os.path.isdir(corpus):
                raise OffTargetError(f"corpus directory {corpus!r} of {path} not found; pass the corpus")
            # without the identifier this refuses (evaluate's None rates would overwrite the file's)
            add_off_target(results, corpus, Identifier(corpus_languages(corpus)))
            write_json_atomic(path, results)
            rates = ", ".join(f"{d} {r['off_target']:.1f}%" for d, r in results["directions"].items()
                              if r.get("off_target") is not None)
            print(f"{path}: {rates or note(results['off_target'], results['directions'])}")
        return 0
    if not args.corpus:
        raise OffTargetError("pass the corpus directory (and --results FILE... to add the rate to evaluate results)")
    if args.out_json:  # never over a file off-target did not write, nor one of the corpus
        check_writable(args.out_json, "--out-json", protected={"corpus": args.corpus}, command="off-target",
                       held=held_unless(OFF_TARGET_JSON, "off-target"))
    measured = measure_corpus(args.corpus, args.split or "test")
    if args.out_json:
        write_json_atomic(args.out_json, measured)
    print(markdown(measured))
    return 0


def add_subcommand(subparsers):
    """Register ``langshare off-target``."""
    p = add_command(
        subparsers, "off-target", help="measure the language identifier on a corpus's references, or add the "
                                       "off-target rate to evaluate results",
        description="Without --results: the language identifier's accuracy on the references of every language "
                    "of CORPUS, and which target languages the off-target rate is reported for. With --results: "
                    "add the off-target rate to `langshare evaluate` results from their stored hypotheses "
                    "(rewritten in place). `langshare evaluate` computes the rate itself.")
    p.add_argument("corpus", nargs="?", help="corpus directory (manifest.json, raw/); with --results: default, the "
                                             "corpus the results were evaluated on")
    p.add_argument("--split", default=None, help="split whose references measure the identifier (default: test)")
    p.add_argument("--out-json", default=None, type=file_name, help="write the per-language measurement as JSON here")
    p.add_argument("--results", nargs="+", default=None, metavar="RESULTS.json",
                   help="evaluate results to add the off-target rate to, in place")
    p.set_defaults(func=_run)
    return p

