"""The head-to-head's report from its record alone (``langshare head-to-head --report-only``): the
same record gives the same bytes, one verdict rule everywhere, equal inference cost claimed only
where it holds, README's standings made from the results JSON.

The records here are synthetic (hand-made hypotheses of known quality, fabricated profiles), which
is all the report reads; tests/test_head_to_head.py's end-to-end test reports a record of real runs.
"""

import datetime
import io
import json
import math
import os
import re
import subprocess
import zlib

import pytest

from fairseq_langshare import cli, significance
from fairseq_langshare.atomic_files import json_text
from fairseq_langshare.recipes import (head_to_head, head_to_head_record, head_to_head_report, head_to_head_standings,
                                       head_to_head_zero_shot)
from fairseq_langshare.recipes.head_to_head_models import MODELS
from synthetic_translations import degrade, sentences

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = 200  # bootstrap resamples: enough to order these systems, cheap
PAIRS = {"o2m": ("en-xx", "en-yy"), "m2o": ("xx-en", "yy-en"),
         "m2m": ("en-xx", "xx-en", "en-yy", "yy-en", "xx-yy", "yy-xx")}
ZERO_SHOT = ("xx-yy", "yy-xx")  # untrained: evaluate's zero-shot group
# share of each sentence's words replaced, per model and seed: lsl better on every seed, clsr better
# on seeds 1 and 3 and clearly worse on seed 2 (level whatever the p-value), adapters worse everywhere
DAMAGE = {"baseline": (0.5, 0.5, 0.5), "lsl": (0.2, 0.25, 0.2), "clsr": (0.2, 0.8, 0.2), "adapters": (0.8, 0.8, 0.8),
          "adaptive_sparse": (0.5, 0.5, 0.5), "baseline_prenorm": (0.5, 0.5, 0.5)}
FLOPS = {"baseline": 1_000_000, "lsl": 1_000_000, "clsr": 1_150_000, "adapters": 1_004_000,  # adapters: +0.4%
         "adaptive_sparse": 1_000_000, "baseline_prenorm": 1_000_000}


def _profile(name, pairs):
    stack = {"layers": 2, "d_model": [128], "ffn": [512], "heads": [4]}
    return {"parameters": {"total": 2_000_000 + 100_000 * len(name), "per_pair": {p: 1_950_000 for p in pairs}},
            "inference": {p: {"flops": FLOPS[name], "encoder": dict(stack), "decoder": dict(stack)} for p in pairs}}


def write_run(record_dir, direction, name, seed, refs, cpu="AMD EPYC 7B13", updates=2000, share=None, off=None,
              hyps=None):
    """One synthetic run's record, as ``head_to_head_runs.record_run`` lays it out; ``share``:
    {pair: share of words replaced} instead of DAMAGE's; ``off``: {pair: hypotheses identified as
    another language} of the 40 identified per pair, as ``langshare evaluate`` records them;
    ``hyps``: {pair: hypotheses} to record as they are."""
    from sacrebleu.metrics import BLEU, CHRF

    pairs = PAIRS[direction]
    hyps = {p: (hyps or {}).get(p) or degrade(refs[p], (share or {}).get(p, DAMAGE[name][(seed - 1) % 3]),
                                              zlib.crc32(f"{name} {seed} {p}".encode())) for p in pairs}
    rows = {p: {"bleu": BLEU().corpus_score(hyps[p], [refs[p]]).score,
                "chrf": CHRF().corpus_score(hyps[p], [refs[p]]).score, "spbleu": None,
                "bleu_signature": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0",
                "train_size": None if p in ZERO_SHOT else 5000 if p in ("en-xx", "xx-en") else 500,
                "group": "zero-shot" if p in ZERO_SHOT else "high" if "xx" in p else "low",
                "n": len(refs[p])} for p in pairs}
    if off is not None:
        for p, row in rows.items():
            row.update(off_target=100.0 * off.get(p, 0) / 40, off_target_identified=40,
                       off_target_into={"en": off[p]} if off.get(p) else {})
    results = {"directions": rows, "hypotheses": hyps,
               "references": {p: {"path": f"/gone/test.{p}", "sha256": head_to_head_record._sha256_lines(refs[p]),
                                  "n": len(refs[p])} for p in pairs}}
    if off is not None:
        results["off_target"] = {"identifier": "py3langid 0.3.0", "rules": {"min_chars": 20}, "left_out": {}}
    model = next(m for m in MODELS if m.name == name)
    record = {"format": 1, "direction": direction, "model": name, "seed": seed, "updates": updates,
              "label": model.label, "arch": model.arch, "model_flags": list(model.argv(direction)),
              "reason": model.reason, "extra_compute": model.extra_compute or None,
              "train_flags": ["--lr", "0.002"], "evaluate_flags": ["--split", "test", "--beam", "4"],
              "corpus": {"path": f"demo_run/corpus_{direction}", "langs": "en,xx,yy",
                         "lang_pairs": ",".join(p for p in pairs if p not in ZERO_SHOT)},
              "profile": _profile(name, pairs), "validation": {"loss": 5.0, "num_updates": float(updates)},
              "wall_seconds": {"train": 1000.0 + seed, "evaluate": 75.0},
              "provenance": {"package_commit": "a" * 40, "package_dirty": False,
                             "machine": {"cpu": cpu, "cores": 2, "system": "Linux"}},
              "results": results}
    head_to_head_record.dump(head_to_head_record.run_path(str(record_dir), direction, name, seed), record)
    head_to_head_record.dump(head_to_head_record.references_path(str(record_dir), direction),
                             {p: {"sha256": head_to_head_record._sha256_lines(refs[p]), "lines": refs[p]}
                              for p in pairs})


def make_record(record_dir, models=("baseline", "lsl", "clsr", "adapters"), seeds=(1, 2, 3), direction="o2m", **kw):
    refs = {p: sentences(40, i) for i, p in enumerate(PAIRS[direction])}
    for name in models:
        for seed in seeds:
            write_run(record_dir, direction, name, seed, refs, **kw)
    return refs


def _outputs(root):
    """Report paths laid out as the repository's (docs/results.md holds text around the section)."""
    (root / "docs").mkdir(parents=True, exist_ok=True)
    (root / "docs" / "results.md").write_text("# Results\n\nbefore\n\n" + head_to_head_report.START + "\nold\n"
                                              + head_to_head_report.END + "\n\nafter\n")
    (root / "README.md").write_text("# x\n\n## Which method to use?\n\n" + head_to_head_standings.START + "\nold\n"
                                     + head_to_head_standings.END + "\n\n## Quick start\n")
    return dict(out_json=str(root / "docs" / "results" / "head_to_head.json"), out_md=str(root / "docs" / "results.md"),
                figure=str(root / "docs" / "img" / "head_to_head.png"), readme=str(root / "README.md"))


def _bytes(paths):
    return {k: open(p, "rb").read() for k, p in paths.items()}


@pytest.fixture(scope="module")
def reported(tmp_path_factory):
    """A synthetic O2M record (4 models x seeds 1-3, plus an lsl seed 4 not every model has), reported."""
    root = tmp_path_factory.mktemp("h2h_report")
    make_record(root / "record")
    write_run(root / "record", "o2m", "lsl", 4, {p: sentences(40, i) for i, p in enumerate(PAIRS["o2m"])})
    paths = _outputs(root / "first")
    data = head_to_head_report.report(str(root / "record"), stream=open(os.devnull, "w"), n_samples=SAMPLES, **paths)
    return root, paths, data


# ----------------------------------------------------------------------------- the verdict rule
@pytest.mark.parametrize("delta, p, seeds, expected", [
    (1.2, 0.01, [1.0, 2.0, 0.5], "better"),
    (-0.9, 0.001, [-1.0, -0.2, -1.5], "worse"),
    (0.84, 0.014, [2.29, -0.70], "level"),  # CLSR O2M chrF of 2026-11-23: p < 0.05, one seed the other way
    (0.61, 0.001, [1.36, -0.33, 0.84], "level"),  # latent depth O2M chrF of 2026-11-26
    (0.21, 0.093, [0.3, 0.1, 0.2], "level"),  # every seed the same way, p not below 0.05
    (0.5, 0.05, [0.5, 0.5], "level"),  # p = alpha is not below it
    (0.5, None, [0.5, 0.5], "level"),  # not testable
    (0.5, 0.001, [0.5, 0.0, 0.7], "level"),  # a seed with no difference
    (-0.1, 0.001, [0.2, 0.3], "level"),  # the pooled delta against every seed's
    (0.4, 0.001, [0.4], "better"),  # one seed: the p-value alone decides
])
def test_verdict_rule(delta, p, seeds, expected):
    assert significance.verdict(delta, p, seeds) == expected


def test_every_comparison_carries_its_seed_deltas_and_verdict_and_shared_statistics_change_nothing():
    refs = {"en-a": sentences(30, 1), "en-b": sentences(30, 2)}
    base = [{d: degrade(r, 0.5, 10 + k) for d, r in refs.items()} for k in range(3)]
    mixed = [{d: degrade(r, share, 20 + k) for d, r in refs.items()} for k, share in enumerate((0.1, 0.9, 0.1))]
    tok = {d: "13a" for d in refs}
    shared = significance.SentenceStatistics()
    sig = significance.compare_to_baseline(base, mixed, refs, tok, n_samples=SAMPLES, statistics=shared)
    for row in list(sig["directions"].values()) + [sig["pooled"]]:
        for metric in ("bleu", "chrf"):
            test = row[metric]
            assert test["seed_deltas"] == [s["delta"] for s in test["per_seed"]]
            assert test["seed_deltas"][0] > 0 > test["seed_deltas"][1]
            assert test["verdict"] == "level"  # whatever the p-value: seed 2 points the other way
    # sacrebleu's test on statistics computed once per sentence: the same numbers as computed afresh
    for d in refs:
        alone = significance.paired_bootstrap(base[1][d], mixed[1][d], refs[d], n_samples=SAMPLES)
        assert sig["directions"][d]["bleu"]["per_seed"][1] == alone["bleu"]
        assert sig["directions"][d]["chrf"]["per_seed"][1] == alone["chrf"]
    again = significance.paired_bootstrap(base[0]["en-a"] + base[1]["en-a"], mixed[0]["en-a"] + mixed[1]["en-a"],
                                          refs["en-a"] * 2, n_samples=SAMPLES, statistics=shared)
    assert again == significance.paired_bootstrap(base[0]["en-a"] + base[1]["en-a"],
                                                  mixed[0]["en-a"] + mixed[1]["en-a"], refs["en-a"] * 2,
                                                  n_samples=SAMPLES)


# ----------------------------------------------------------------------------- the report
def test_report_only_gives_the_same_bytes_and_reads_nothing_but_the_record(reported, tmp_path):
    root, first, data = reported
    # the reference files the runs name are gone and no corpus or checkpoint exists: the record suffices
    assert not os.path.exists("/gone")
    second = _outputs(tmp_path / "second")
    assert cli.main(["head-to-head", "--report-only", "--record-dir", str(root / "record"), "--bootstrap-samples",
                     str(SAMPLES), "--out-json", second["out_json"], "--out-md", second["out_md"], "--figure",
                     second["figure"], "--readme", second["readme"]]) in (0, None)
    a, b = _bytes(first), _bytes(second)
    assert a.keys() == b.keys() and all(a[k] == b[k] for k in a), [k for k in a if a[k] != b[k]]
    # the text around the markers is kept
    md = open(first["out_md"]).read()
    assert md.startswith("# Results\n\nbefore\n\n" + head_to_head_report.START) and md.endswith("\n\nafter\n")
    assert "\nold\n" not in md and "\nold\n" not in open(first["readme"]).read()
    assert a["figure"].startswith(b"\x89PNG") and b"matplotlib" not in a["figure"]  # no version, no date


def test_results_json_seeds_verdicts_cost_and_provenance(reported):
    _, paths, data = reported
    assert json.load(open(paths["out_json"])) == data
    assert list(data["directions"]) == ["o2m"] and data["seeds"] == [1, 2, 3]
    block = data["directions"]["o2m"]
    # only seeds every model has; what is left out is named
    assert block["seeds"] == [1, 2, 3] and block["not_reported"] == ["o2m/lsl/seed4"]
    assert list(block["models"]) == ["baseline", "adapters", "lsl", "clsr"]  # head_to_head_models' order
    assert block["runs"] == {"machines": {"AMD EPYC 7B13": 12}, "package_commits": {"a" * 40: 12},
                             "wall_seconds": {"train": 12 * 1000.0 + 4 * 6, "evaluate": 12 * 75.0},
                             "training_time_not_from_log": [f"o2m/{m}/seed{k}" for m in ("adapters", "baseline", "clsr",
                                                                                        "lsl") for k in (1, 2, 3)]}
    lsl, clsr, adapters = (block["models"][m] for m in ("lsl", "clsr", "adapters"))
    assert lsl["records"] == {"1": "o2m/lsl/seed1.json.gz", "2": "o2m/lsl/seed2.json.gz", "3": "o2m/lsl/seed3.json.gz"}
    for metric in ("bleu", "chrf"):
        assert lsl["verdict"][metric]["verdict"] == "better" and min(lsl["verdict"][metric]["seed_deltas"]) > 0
        assert adapters["verdict"][metric]["verdict"] == "worse"
        v = clsr["verdict"][metric]
        assert v["seed_deltas"][0] > 0 > v["seed_deltas"][1] and v["verdict"] == "level"
        assert v["p_value"] == clsr["pooled_p_value"][metric]
        # the verdict of every direction too, by the same rule
        for d, row in block["comparison"]["systems"]["clsr"]["significance"]["directions"].items():
            t = row[metric]
            assert t["verdict"] == significance.verdict(t["seeds_concatenated"]["delta"],
                                                        t["seeds_concatenated"]["p_value"], t["seed_deltas"])
    # equal layers and widths everywhere, but CLSR computes 15% more per sentence: not equal cost
    assert not block["equal_inference_cost"]
    assert clsr["inference_cost"] == {"layers_and_widths": [], "flops_ratio": [1.15] * 3, "equal": False}
    assert adapters["inference_cost"]["equal"] and lsl["inference_cost"]["equal"]  # +0.4% is within 1%
    assert block["inference_cost_problems"] == ["clsr: x1.15 the baseline's FLOPs per sentence (more, +15.0%)"]
    # dated: a record outside git is dated the day of the report, and says so
    assert block["generated"] == data["generated"] == datetime.date.today().isoformat()
    assert "not committed" in block["dated_by"]


def test_results_section_tables_name_verdicts_seed_deltas_machines_and_cost(reported):
    _, paths, data = reported
    md = open(paths["out_md"]).read()
    section = md[md.index(head_to_head_report.START):]
    assert "### O2M" in section and "### M2O\n\nNot yet recorded." in section
    assert "Runs: 12 on AMD EPYC 7B13; package commit: 12 at aaaaaaaaaaaa;" in section
    assert "Recorded but not reported (not every model has the seed yet): o2m/lsl/seed4." in section
    assert "**Not equal inference cost**" in section and "clsr: x1.15 the baseline's FLOPs per sentence" in section
    assert "| clsr | `--arch clsr_transformer_small" in section and "| x1.15 |" in section
    clsr = data["directions"]["o2m"]["models"]["clsr"]["verdict"]["bleu"]
    deltas = ", ".join(f"{d:+.2f}" for d in clsr["seed_deltas"])
    assert f"**level** {clsr['delta']:+.2f} [{deltas}], p " in section  # the pooled row of the BLEU table
    assert "| verdict, all directions pooled |  |  |  | - | worse | better | level |" in section
    assert "![BLEU delta against the baseline per direction](img/head_to_head.png)" in section


def test_readme_standings_come_from_the_json(reported):
    _, paths, data = reported
    readme = open(paths["readme"]).read()
    block = head_to_head_standings.readme_block(readme)
    assert block == head_to_head_standings.standings_markdown(json.load(open(paths["out_json"])))
    assert readme.startswith("# x\n\n## Which method to use?\n\n") and readme.endswith("\n\n## Quick start\n")
    lsl_row = next(line for line in block.splitlines() if line.startswith("| LSL (`lsl`) |"))
    cells = [c.strip() for c in lsl_row.split("|")[2:-1]]
    assert cells[0].startswith("**better** +") and cells[1].startswith("**better** +")
    assert cells[2:6] == ["not yet recorded"] * 4  # M2O and M2M
    assert cells[6] == "O2M equal; M2O not yet recorded; M2M not yet recorded"
    clsr_row = next(line for line in block.splitlines() if line.startswith("| CLSR (`clsr`) |"))
    assert "**level**" in clsr_row and "O2M x1.15 FLOPs (+15.0%)" in clsr_row
    latent = next(line for line in block.splitlines() if line.startswith("| latent depth (`latent_depth`) |"))
    assert latent.count("not yet recorded") == 9  # a model the record has no run of
    assert ("**Which method to use?** O2M (seeds 1, 2, 3): use **LSL** (better on BLEU and chrF; equal inference "
            "cost). Behind the baseline: language adapters (BLEU and chrF). Not compared (not yet recorded): baseline "
            "(pre-norm), latent depth, adaptive sparse (FFN). M2O: not yet recorded.") in block
    # no record at all: no table, no advice
    empty = head_to_head_standings.standings_markdown(None)
    assert "**Not yet recorded**" in empty and "| model |" not in empty and "Which method" not in empty


def test_a_record_is_dated_by_its_commits_and_holds_both_directions(tmp_path):
    """The JSON's date comes from git (the newest commit of the reported records), not the clock, so
    a report made again another day from the same committed record is the same; O2M and M2O recorded
    on different days and machines end up in one JSON, each block with its own date and CPU."""
    record = tmp_path / "repo" / "record"
    make_record(record, models=("baseline", "lsl"), seeds=(1,), direction="o2m", cpu="Intel Xeon")

    def git(*args, date):
        env = dict(os.environ, GIT_AUTHOR_DATE=date, GIT_COMMITTER_DATE=date, GIT_AUTHOR_NAME="t",
                   GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
        subprocess.run(["git", *args], cwd=tmp_path / "repo", check=True, capture_output=True, env=env)

    def build():
        return head_to_head_report.build(str(record), n_samples=20, stream=open(os.devnull, "w"))

    git("init", "-q", date="2026-11-29T10:00:00+00:00")
    git("add", "record", date="2026-11-29T10:00:00+00:00")
    git("commit", "-q", "-m", "o2m", date="2026-11-29T10:00:00+00:00")
    data = build()
    assert data["generated"] == data["directions"]["o2m"]["generated"] == "2026-11-29"
    assert data["directions"]["o2m"]["dated_by"] == "by the newest commit of its records"
    # M2O recorded later, on another machine: dated the day of the report until committed
    m2o_refs = make_record(record, models=("baseline", "lsl"), seeds=(1,), direction="m2o")
    m2o = build()["directions"]["m2o"]
    assert "not committed" in m2o["dated_by"] and m2o["runs"]["machines"] == {"AMD EPYC 7B13": 2}
    git("add", "record", date="2026-11-30T01:00:00+00:00")
    git("commit", "-q", "-m", "m2o", date="2026-11-30T01:00:00+00:00")
    data = build()
    assert list(data["directions"]) == ["o2m", "m2o"] and data["generated"] == "2026-11-30"
    assert data["directions"]["o2m"]["generated"] == "2026-11-29"  # its records did not change
    assert data["directions"]["o2m"]["runs"]["machines"] == {"Intel Xeon": 2}
    # a record changed and not committed is not what the commit dates
    write_run(record, "m2o", "lsl", 1, m2o_refs, cpu="other")
    assert "not committed" in build()["directions"]["m2o"]["dated_by"]


def test_a_record_outside_git_is_dated_the_day_of_its_report(tmp_path, monkeypatch):
    """A user's record in no git checkout, or on a machine without git, is reported (dated the day of the
    report, which says why), not refused and not a traceback."""
    make_record(tmp_path / "record", models=("baseline", "lsl"), seeds=(1,))
    for path in (os.environ["PATH"], str(tmp_path / "no_git_here")):
        monkeypatch.setenv("PATH", path)
        block = head_to_head_report.build(str(tmp_path / "record"), 20, open(os.devnull, "w"))["directions"]["o2m"]
        assert block["generated"] == datetime.date.today().isoformat() and "not committed" in block["dated_by"]


def test_the_package_commit_is_the_packages_own(tmp_path, monkeypatch):
    """Was: the package pip-installed into a virtual environment inside the user's own git repository recorded
    that repository's HEAD as the package commit of every run; and a checkout's package was recorded without
    uncommitted changes whatever it had (git status looked for fairseq_langshare/ inside the package's folder).
    A package that is no file of a git checkout records no commit (the report says 'unknown')."""
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")

    def git(*args):
        return subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True, text=True,
                              env=env).stdout.strip()

    def provenance(package):  # of the package in the folder ``package``
        (package / "recipes").mkdir(parents=True, exist_ok=True)
        monkeypatch.setattr(head_to_head_record, "__file__", str(package / "recipes" / "head_to_head_record.py"))
        prov = head_to_head_record.provenance()
        return prov["package_commit"], prov["package_dirty"]

    git("init", "-q")
    git("commit", "-q", "--allow-empty", "-m", "the user's project")
    assert provenance(tmp_path / ".venv" / "site-packages" / "fairseq_langshare") == (None, None)
    checkout = tmp_path / "fairseq_langshare"
    (checkout / "recipes").mkdir(parents=True)
    (checkout / "__init__.py").write_text("")
    git("add", "fairseq_langshare")
    git("commit", "-q", "-m", "a checkout of the package")
    assert provenance(checkout) == (git("rev-parse", "HEAD"), False)
    (checkout / "__init__.py").write_text("changed = True\n")
    assert provenance(checkout) == (git("rev-parse", "HEAD"), True)


def test_a_record_of_two_head_to_heads_or_two_configurations_is_refused(tmp_path):
    refs = make_record(tmp_path / "record", models=("baseline", "lsl"), seeds=(1,))
    write_run(tmp_path / "record", "o2m", "lsl", 2, refs, updates=500)
    with pytest.raises(ValueError, match="o2m/baseline/seed1 and o2m/lsl/seed2 differ in updates: a record holds one "
                                         "head-to-head"):
        head_to_head_report.build(str(tmp_path / "record"), 20, open(os.devnull, "w"))
    with pytest.raises(ValueError, match="no head-to-head record in .*nothing"):
        head_to_head_report.build(str(tmp_path / "nothing"), 20, open(os.devnull, "w"))
    # a record whose content is not the run its path names (moved by hand)
    os.makedirs(tmp_path / "moved" / "o2m" / "clsr")
    os.replace(tmp_path / "record" / "o2m" / "lsl" / "seed1.json.gz", tmp_path / "moved" / "o2m" / "clsr" / "seed1.json.gz")
    with pytest.raises(ValueError, match="holds the run o2m/lsl/seed1, not the one its path names"):
        head_to_head_record.read(str(tmp_path / "moved"))
    # a truncated record file (was: gzip's EOFError traceback)
    moved = tmp_path / "moved" / "o2m" / "clsr" / "seed1.json.gz"
    moved.write_bytes(moved.read_bytes()[:200])
    with pytest.raises(ValueError, match=rf"^head-to-head record {moved} cannot be read \(.*\); restore it from git$"):
        head_to_head_record.read(str(tmp_path / "moved"))
    log = tmp_path / "train.log.gz"
    head_to_head_record.dump_log(str(log), "2026-11-28 10:00:00 | INFO | train_inner | {\"epoch\": 1}\n" * 500)
    log.write_bytes(log.read_bytes()[:60])
    with pytest.raises(ValueError, match=rf"^training log {log} cannot be read \(.*\); restore it from git$"):
        head_to_head_record.training_seconds(str(log))
    # references that do not match their sha256
    refs_path = head_to_head_record.references_path(str(tmp_path / "record"), "o2m")
    refs_data = head_to_head_record.load(refs_path)
    refs_data["en-xx"]["lines"][0] += " changed"
    head_to_head_record.dump(refs_path, refs_data)
    with pytest.raises(ValueError, match="en-xx do not match their sha256"):
        head_to_head_record.read_references(str(tmp_path / "record"), "o2m")


def test_report_only_command_line(tmp_path, capsys):
    """`langshare head-to-head --report-only`: a missing record is one line naming it, and nothing is written."""
    paths = _outputs(tmp_path)
    before = _bytes({"out_md": paths["out_md"], "readme": paths["readme"]})
    code = cli.main(["head-to-head", "--report-only", "--record-dir", str(tmp_path / "none"), "--out-json",
                     paths["out_json"], "--out-md", paths["out_md"], "--figure", paths["figure"], "--readme",
                     paths["readme"]])
    err = capsys.readouterr().err
    assert code != 0 and "no head-to-head record in" in err and len(err.strip().splitlines()) == 1
    assert _bytes({"out_md": paths["out_md"], "readme": paths["readme"]}) == before
    assert not os.path.exists(paths["out_json"]) and not os.path.exists(paths["figure"])
    # a record without a baseline run yet: nothing to compare, and nothing is overwritten
    make_record(tmp_path / "record", models=("lsl",), seeds=(1,))
    out = io.StringIO()
    data = head_to_head_report.report(str(tmp_path / "record"), stream=out, n_samples=20, **paths)
    assert data["directions"] == {} and data["not_reported"] == ["o2m/lsl/seed1"]
    assert "nothing to report" in out.getvalue() and not os.path.exists(paths["out_json"])
    assert _bytes({"out_md": paths["out_md"], "readme": paths["readme"]}) == before


# ----------------------------------------------------------------------------- the committed record
COMMITTED = os.path.join(REPO, "docs", "results", "head_to_head.json")


def _committed_json():
    with open(COMMITTED, encoding="utf-8") as f:
        data = json.load(f)
    return data if (data.get("record") or {}).get("dir") == head_to_head_record.RECORD_DIR else None


def test_readme_standings_are_what_the_committed_json_gives():
    """README's block is the one the committed results JSON gives ("not yet recorded" throughout
    until the JSON is made from the record): edit the tool and run --report-only, not README."""
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        block = head_to_head_standings.readme_block(f.read())
    assert block is not None, "README.md has no method standings block"
    assert block == head_to_head_standings.standings_markdown(_committed_json()), (
        "README's standings differ from docs/results/head_to_head.json: run `langshare head-to-head --report-only`")


def _full_history() -> bool:
    """Whether this checkout has the git history that dates the record (not a tarball or a shallow clone)."""
    try:
        out = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=REPO, capture_output=True,
                             text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return False
    return out.strip() == "false"


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isfile(COMMITTED) or _committed_json() is None,
                    reason="docs/results/head_to_head.json is not made from the record in docs/results/head_to_head/ "
                           "yet (the runs of record are not all in): nothing committed to reproduce")
@pytest.mark.skipif(not _full_history(), reason="the record is dated by its commits: needs a git checkout with "
                                                 "history (not a tarball or a shallow clone)")
def test_report_only_reproduces_the_committed_results(tmp_path, monkeypatch):
    """The committed JSON, results section, figure and README block, made again from the committed
    record alone, byte for byte (about 2 minutes of CPU: every test of 42 runs, 1000 resamples)."""
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("SACREBLEU_SEED", raising=False)
    paths = _outputs(tmp_path)
    for name, path in (("docs/results.md", paths["out_md"]), ("README.md", paths["readme"])):
        with open(os.path.join(REPO, name), "rb") as src, open(path, "wb") as dst:
            dst.write(src.read())
    head_to_head.head_to_head(report_only=True, record_dir=head_to_head_record.RECORD_DIR, stream=open(os.devnull, "w"),
                              **paths)
    committed = {"out_json": COMMITTED, "out_md": os.path.join(REPO, "docs", "results.md"),
                 "figure": os.path.join(REPO, "docs", "img", "head_to_head.png"),
                 "readme": os.path.join(REPO, "README.md")}
    a, b = _bytes(committed), _bytes(paths)
    differ = [k for k in a if a[k] != b[k]]
    # another Python rounds statistics.stdev's last bit otherwise (3.11's is correctly rounded), another
    # matplotlib draws other bytes: there the JSON is compared to 1e-12 and the figure not at all
    if "out_json" in differ and _close(json.loads(a["out_json"]), json.loads(b["out_json"])):
        differ.remove("out_json")
    import matplotlib

    if "figure" in differ and matplotlib.__version__ != _pinned("matplotlib"):
        differ.remove("figure")
    assert differ == [], "run `langshare head-to-head --report-only` and commit its outputs"


def _close(a, b) -> bool:
    """JSON values equal, floats to a relative 1e-12."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-12)
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    return a == b


def _pinned(package: str) -> str:
    """The version constraints.txt pins ``package`` to (what `make test` installs)."""
    with open(os.path.join(REPO, "constraints.txt")) as f:
        return next(line.split("==", 1)[1].strip() for line in f if line.startswith(f"{package}=="))


@pytest.mark.parametrize("value", ["0", "-5"])
def test_bootstrap_samples_below_one_refused(tmp_path, capsys, value):
    """Was: 0 became the default 1000 (``n_samples or DEFAULT``), a report of other tests than asked for."""
    paths = _outputs(tmp_path)
    make_record(tmp_path / "record", models=("baseline", "lsl"), seeds=(1,))
    with pytest.raises(SystemExit) as exit_:  # refused when the command line is parsed (option_ranges)
        cli.main(["head-to-head", "--report-only", "--record-dir", str(tmp_path / "record"), "--bootstrap-samples",
                  value, "--out-json", paths["out_json"], "--out-md", paths["out_md"], "--figure",
                  paths["figure"], "--readme", paths["readme"]])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and err[-1] == ("langshare head-to-head: error: argument --bootstrap-samples: "
                                                 f"{value} is outside [1, inf): resamples per test"), err
    assert not os.path.exists(paths["out_json"])
    with pytest.raises(ValueError, match=f"--bootstrap-samples {value}: pass at least 1"):  # and by the library
        head_to_head.head_to_head(report_only=True, record_dir=str(tmp_path / "record"), n_samples=int(value),
                                  **paths)


def test_the_advice_names_the_models_it_did_not_compare(tmp_path):
    """Was: a direction with only the baseline recorded (or with models missing, e.g. failed runs)
    advised "no model is better than the baseline ...: use the shared baseline", a conclusion about
    models never compared."""
    make_record(tmp_path / "record", models=("baseline",), seeds=(1,))
    only = head_to_head_standings.standings_markdown(
        head_to_head_report.build(str(tmp_path / "record"), 20, open(os.devnull, "w")))
    assert "no model is better" not in only and "use the shared baseline" not in only
    assert "O2M (seeds 1): only the baseline is recorded, no model is compared yet." in only
    make_record(tmp_path / "record", models=("lsl",), seeds=(1,))
    some = head_to_head_standings.standings_markdown(
        head_to_head_report.build(str(tmp_path / "record"), 20, open(os.devnull, "w")))
    advice = some[some.index("**Which method to use?**"):]
    missing = ", ".join(m.label for m in MODELS if m.name not in ("baseline", "lsl"))
    assert f"Not compared (not yet recorded): {missing}." in advice.split("M2O:")[0], advice


def test_advice_from_fewer_than_three_seeds_says_its_verdicts_are_provisional(tmp_path):
    """Was: `--seeds 1,2` printed better/worse and advice with no caveat, though with 2 seeds every
    seed's delta agrees in sign by chance half the time (docs/head_to_head.md, "Seeds")."""
    def advice(seeds):
        make_record(tmp_path / f"record{len(seeds)}", models=("baseline", "lsl"), seeds=seeds)
        text = head_to_head_standings.standings_markdown(
            head_to_head_report.build(str(tmp_path / f"record{len(seeds)}"), 20, open(os.devnull, "w")))
        return text[text.index("**Which method to use?**"):].split("M2O:")[0]

    assert ("With 2 seeds every seed's delta has the same sign by chance half the time: these verdicts are "
            "provisional (3 seeds or more: docs/head_to_head.md).") in advice((1, 2))
    assert "provisional" not in advice((1, 2, 3))


def test_a_set_with_zero_shot_directions_gets_a_verdict_for_each_kind(tmp_path):
    """M2M: the supervised and the zero-shot directions pooled separately, by the same rule, in the
    JSON, the tables and README's standings (was: one verdict over both pooled, which a gain on the
    trained directions decides while the zero-shot ones, what the papers' claims are about, lose)."""
    refs = {p: sentences(40, i) for i, p in enumerate(PAIRS["m2m"])}
    for seed in (1, 2):
        write_run(tmp_path / "record", "m2m", "baseline", seed, refs, share={p: 0.5 for p in refs})
        write_run(tmp_path / "record", "m2m", "lsl", seed, refs,
                  share={p: 0.8 if p in ZERO_SHOT else 0.3 for p in refs})  # better trained, worse zero-shot
    data = head_to_head_report.build(str(tmp_path / "record"), 50, open(os.devnull, "w"))
    lsl = data["directions"]["m2m"]["models"]["lsl"]
    # the averages and win ratios also each kind on its own (was: only over both, which the tables showed)
    supervised = [p for p in PAIRS["m2m"] if p not in ZERO_SHOT]
    wins = data["directions"]["m2m"]["comparison"]["systems"]["lsl"]["win_ratio_by_kind"]
    assert {kind: wins[kind]["bleu"]["directions"] for kind in wins} == {"supervised": len(supervised),
                                                                         "zero-shot": len(ZERO_SHOT)}
    assert wins["supervised"]["bleu"]["value"] == 1.0 and wins["zero-shot"]["bleu"]["value"] == 0.0
    assert lsl["means"]["groups"]["supervised"]["n_directions"] == len(supervised)
    section = head_to_head_report.markdown(data)
    assert "| **supervised** avg |" in section and "| win ratio vs baseline, supervised directions |" in section
    assert "| win ratio vs baseline, zero-shot directions |" in section
    for metric in ("bleu", "chrf"):
        kinds = {kind: v[metric]["verdict"] for kind, v in lsl["verdict_by_kind"].items()}
        assert kinds == {"supervised": "better", "zero-shot": "worse"}, kinds
        zero = lsl["verdict_by_kind"]["zero-shot"][metric]
        assert zero["delta"] < 0 and max(zero["seed_deltas"]) < 0 and zero["p_value"] < 0.05
        assert lsl["verdict_by_kind"]["zero-shot"]["directions"] == list(ZERO_SHOT)
    assert data["directions"]["m2m"]["models"]["baseline"]["verdict_by_kind"] is None
    section = head_to_head_report.markdown(data)
    assert "| zero-shot (pooled) | **worse** " in section and "| supervised (pooled) | **better** " in section
    block = head_to_head_standings.standings_markdown(data)
    row = next(line for line in block.splitlines() if line.startswith("| LSL (`lsl`) |"))
    m2m_bleu = [c.strip() for c in row.split("|")[2:-1]][4]
    assert m2m_bleu.startswith("supervised **better** +") and "; zero-shot **worse** -" in m2m_bleu, m2m_bleu
    advice = block[block.index("M2M (seeds 1, 2)"):]
    assert advice.startswith("M2M (seeds 1, 2): supervised directions: use **LSL** (better on BLEU and chrF; "
                             "equal inference cost); zero-shot directions: no model is better"), advice
    assert "Behind the baseline on the zero-shot directions: LSL (BLEU and chrF)." in advice
    # a set without zero-shot directions has no such split
    make_record(tmp_path / "o2m", models=("baseline", "lsl"), seeds=(1,))
    o2m = head_to_head_report.build(str(tmp_path / "o2m"), 20, open(os.devnull, "w"))
    assert o2m["directions"]["o2m"]["models"]["lsl"]["verdict_by_kind"] is None
    assert "(pooled) |" not in head_to_head_report.markdown(o2m).replace("all (pooled) |", "")


def test_zero_shot_directions_by_target_and_the_papers_claims_against_the_verdicts(tmp_path):
    """M2M: per target language, each model's zero-shot BLEU against the baseline's with the rule's
    verdict counts and its pooled off-target rate; each paper's zero-shot claim, in the paper's
    metric, with the pooled zero-shot verdict and its outcome by the rule fixed before the runs: a
    claimed gain measured as a loss is "reversed"; a pre-norm model's gain holds only where it also
    beats ``baseline_prenorm``. Sets without zero-shot directions (the O2M/M2O record) get no such
    entry."""
    refs = {p: sentences(40, i) for i, p in enumerate(PAIRS["m2m"])}
    record = tmp_path / "record"
    for seed in (1, 2):
        write_run(record, "m2m", "baseline", seed, refs, share={p: 0.5 for p in refs}, off={"xx-yy": 2})
        write_run(record, "m2m", "baseline_prenorm", seed, refs, share={p: 0.5 for p in refs}, off={})
        write_run(record, "m2m", "lsl", seed, refs, off={"xx-yy": 20},  # LSL's output into yy half English
                  share={p: 0.8 if p in ZERO_SHOT else 0.3 for p in refs})  # better trained, worse zero-shot
        write_run(record, "m2m", "adaptive_sparse", seed, refs, off={},
                  share={p: 0.2 if p in ZERO_SHOT else 0.5 for p in refs})  # better zero-shot
        write_run(record, "m2m", "clsr", seed, refs, share={p: 0.5 for p in refs}, off={})
    data = head_to_head_report.build(str(record), 50, open(os.devnull, "w"))
    zero = data["directions"]["m2m"]["zero_shot"]
    assert {t: row["directions"] for t, row in zero["by_target"].items()} == {"yy": ["xx-yy"], "xx": ["yy-xx"]}
    into_yy = zero["by_target"]["yy"]["models"]
    assert into_yy["lsl"]["off_target"]["mean"] == 50.0 and into_yy["baseline"]["off_target"]["mean"] == 5.0
    assert zero["by_target"]["xx"]["models"]["lsl"]["off_target"]["mean"] == 0.0
    assert into_yy["lsl"]["bleu"] < into_yy["baseline"]["bleu"] < into_yy["adaptive_sparse"]["bleu"]
    assert into_yy["lsl"]["verdicts"]["bleu"] == {"better": 0, "level": 0, "worse": 1}
    assert into_yy["adaptive_sparse"]["verdicts"]["bleu"]["better"] == 1 and "verdicts" not in into_yy["baseline"]
    claims = {c["model"]: c for c in zero["paper_claims"]}
    assert list(claims) == ["adaptive_sparse", "lsl", "clsr"]  # in CLAIMS' order; adapters not in this block
    sparse, lsl = claims["adaptive_sparse"], claims["lsl"]
    assert (sparse["metric"], sparse["paper_delta"], sparse["also_against"]) == ("bleu", 0.3, "baseline_prenorm")
    assert sparse["zero_shot"]["bleu"]["verdict"] == sparse["zero_shot_against_also"]["bleu"]["verdict"] == "better"
    assert sparse["outcome"] == "holds"
    assert lsl["metric"] == "chrf" and lsl["outcome"] == "reversed (worse)"  # the LSL paper's metric decides
    kinds = data["directions"]["m2m"]["models"]["lsl"]["verdict_by_kind"]["zero-shot"]
    assert lsl["zero_shot"] == {m: kinds[m] for m in ("bleu", "chrf")}
    cmp = data["directions"]["m2m"]["comparison"]["systems"]
    assert lsl["group_delta"]["chrf"] == pytest.approx(cmp["lsl"]["averages"]["zero-shot"]["chrf"]["mean"]
                                                       - cmp["baseline"]["averages"]["zero-shot"]["chrf"]["mean"])
    assert lsl["group_delta"]["chrf"] < 0 < sparse["group_delta"]["bleu"]
    assert lsl["win_ratio"] == {"value": 0.0, "wins": 0, "directions": 2}
    assert lsl["off_target"] == {"model": 25.0, "baseline": 2.5}  # 20 of 80 hypotheses pooled, and 2 of 80
    assert claims["clsr"]["outcome"] == "no claim to test"
    section = head_to_head_report.markdown(data)
    assert "**Zero-shot directions by target language**" in section
    assert "| yy | 1 | " in section and "(0 / 1)" in section
    row = next(line for line in section.splitlines() if line.startswith("| adaptive sparse (FFN) |"))
    assert "Gong et al. (2022)" in row and "| BLEU | +0.30 | +" in row and "baseline_prenorm: **better**" in row
    assert row.endswith("| **holds** |"), row
    assert "| 25.0 / 2.5 | **reversed (worse)** |" in section
    no_claims = head_to_head_zero_shot.markdown(dict(zero, paper_claims=[]), {})  # only baselines recorded yet
    assert "**Zero-shot directions by target language**" in "\n".join(no_claims)
    assert not any("zero-shot claims" in line for line in no_claims)
    # a pre-norm baseline as good zero-shot as the sparse model: its gain is the layer norm's
    for seed in (1, 2):
        write_run(record, "m2m", "baseline_prenorm", seed, refs, share={p: 0.1 if p in ZERO_SHOT else 0.5 for p in refs},
                  off={})
    again = head_to_head_report.build(str(record), 50, open(os.devnull, "w"))
    (sparse,) = [c for c in again["directions"]["m2m"]["zero_shot"]["paper_claims"] if c["model"] == "adaptive_sparse"]
    assert sparse["outcome"] == "not separable from the layer-norm placement (worse against baseline_prenorm)"
    # the O2M/M2O record's blocks are what they were
    make_record(tmp_path / "o2m", models=("baseline", "lsl"), seeds=(1,))
    o2m = head_to_head_report.build(str(tmp_path / "o2m"), 20, open(os.devnull, "w"))
    assert "zero_shot" not in o2m["directions"]["o2m"]
    assert "zero-shot claims" not in head_to_head_report.markdown(o2m)


def test_runs_evaluated_without_the_off_target_rate_get_it_from_the_recorded_hypotheses(tmp_path, monkeypatch):
    """The O2M/M2O record's runs were evaluated before `langshare evaluate` measured the off-target
    rate: with the identifier's measurement on the corpus's references committed beside them
    (`langshare off-target CORPUS --out-json RECORD/o2m/language_id.json`), the report gives them
    the rate `langshare off-target --results` would, from their hypotheses, without changing them."""
    pytest.importorskip("py3langid", reason="the off-target rate needs the langid extra (py3langid)")
    from test_off_target import reference_corpus
    from test_off_target import sentences as in_language

    monkeypatch.setitem(PAIRS, "o2m", ("en-fr", "en-de"))
    refs = {"en-fr": in_language("fr", 40, 1), "en-de": in_language("de", 40, 2)}
    record = tmp_path / "record"
    for seed in (1, 2):
        write_run(record, "o2m", "baseline", seed, refs, share={p: 0.1 for p in refs})
        write_run(record, "o2m", "lsl", seed, refs, share={p: 0.1 for p in refs},
                  hyps={"en-de": in_language("fr", 40, 10 + seed)})  # asked for German, writes French
    block = head_to_head_report.build(str(record), 20, open(os.devnull, "w"))["directions"]["o2m"]
    assert "off_target" not in block["comparison"] and "off_target_from_record" not in block  # no measurement
    corpus = reference_corpus(tmp_path / "corpus", ["en", "fr", "de"])
    assert cli.main(["off-target", corpus, "--out-json", head_to_head_record.language_id_path(str(record), "o2m")]) == 0
    data = head_to_head_report.build(str(record), 20, open(os.devnull, "w"))
    block = data["directions"]["o2m"]
    assert block["off_target_from_record"] == {
        "measurement": os.path.join("o2m", "language_id.json"),
        "runs": ["o2m/baseline/seed1", "o2m/baseline/seed2", "o2m/lsl/seed1", "o2m/lsl/seed2"]}
    rates = {name: e["off_target"]["directions"] for name, e in block["comparison"]["systems"].items()}
    assert rates["lsl"]["en-de"]["mean"] == 100.0 and rates["baseline"]["en-de"]["mean"] < 10
    assert rates["lsl"]["en-fr"]["mean"] == rates["baseline"]["en-fr"]["mean"]  # the same output language
    section = head_to_head_report.markdown(data)
    assert "Off-target rate, %" in section and "Off-target rates of every run: computed by the report" in section
    lsl = head_to_head_record.load(head_to_head_record.run_path(str(record), "o2m", "lsl", 1))
    assert "off_target" not in lsl["results"] and "off_target" not in lsl["results"]["directions"]["en-de"]
    # a measurement of another identifier version would give other rates: refused in one line
    with open(head_to_head_record.language_id_path(str(record), "o2m")) as f:
        measured = json.load(f)
    with open(head_to_head_record.language_id_path(str(record), "o2m"), "w") as f:
        json.dump(dict(measured, identifier="py3langid 0.0.1"), f)
    with pytest.raises(ValueError, match="measured as py3langid 0.0.1 but py3langid"):
        head_to_head_report.build(str(record), 20, open(os.devnull, "w"))


def test_every_compared_model_has_its_papers_zero_shot_claim_or_none():
    """A model added to the head-to-head states before its M2M runs what its paper claims zero-shot
    (or that it claims nothing), so the report cannot leave it out of the claims table."""
    from fairseq_langshare.recipes.head_to_head_zero_shot import CLAIMS

    assert sorted(c.model for c in CLAIMS) == sorted(m.name for m in MODELS if m.name not in ("baseline",
                                                                                            "baseline_prenorm"))
    assert all(c.expects in ("better", None) and c.metric in ("bleu", "chrf") for c in CLAIMS)
    assert all((c.paper_delta is None) == (c.expects is None) for c in CLAIMS)


def test_a_head_to_head_outside_the_record_leaves_the_records_report_alone(tmp_path, monkeypatch, capsys):
    """Was: `langshare head-to-head --directions o2m` (docs/head_to_head.md), recording into
    RUNS_DIR/record, rewrote docs/results/head_to_head.json, docs/results.md's section, the figure
    and README's standings with its own runs. Its report now goes beside its runs; the head-to-head
    of record (--record-dir docs/results/head_to_head) and --report-only still write the repository's."""
    monkeypatch.chdir(tmp_path)
    repository = _outputs(tmp_path)  # docs/results.md and README.md as the repository has them
    before = _bytes({"out_md": repository["out_md"], "readme": repository["readme"]})
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "manifest.json").write_text("{}")
    (corpus / "lang_pairs.txt").write_text("en-xx,en-yy\n")
    (corpus / "bin").mkdir()
    for pair in ("en-xx", "en-yy"):  # validation data, which fairseq-train needs
        (corpus / "bin" / f"valid.{pair}.en.idx").write_text("")

    def execute(runs, jobs, device="cpu", stream=None, record_dir=None):  # the runs, as recorded
        make_record(record_dir, models=("baseline", "lsl"), seeds=(1,))
        return []

    monkeypatch.setattr(head_to_head, "execute", execute)
    monkeypatch.setattr(head_to_head, "print_plan", lambda runs, jobs, stream=None: ([], {}))
    assert cli.main(["head-to-head", "--models", "baseline,lsl", "--directions", "o2m", "--seeds", "1",
                     "--corpus", f"o2m={corpus}", "--runs-dir", "runs", "--bootstrap-samples", "20"]) in (0, None)
    assert _bytes({"out_md": repository["out_md"], "readme": repository["readme"]}) == before
    assert not os.path.exists(repository["out_json"]) and not os.path.exists(repository["figure"])
    assert json.load(open("runs/head_to_head.json"))["record"]["dir"] == os.path.join("runs", "record")
    assert os.path.isfile("runs/head_to_head.png") and head_to_head_report.START in open("runs/results.md").read()
    assert head_to_head_standings.START in open("runs/standings.md").read()


def test_the_report_does_not_depend_on_how_the_record_dir_is_spelled(tmp_path, monkeypatch):
    """Was: `--record-dir /abs/path/docs/results/head_to_head` wrote that machine's path into the
    JSON, the section and README (so the README test took it for another record), and sent the
    report into docs/results/ instead of the repository's files."""
    monkeypatch.chdir(tmp_path)
    make_record(head_to_head_record.RECORD_DIR, models=("baseline", "lsl"), seeds=(1,))
    spelled = [head_to_head_record.RECORD_DIR, str(tmp_path / head_to_head_record.RECORD_DIR),
               "./" + head_to_head_record.RECORD_DIR + "/"]
    texts = {json_text(head_to_head_report.build(d, 20, open(os.devnull, "w"))) for d in spelled}
    assert len(texts) == 1 and json.loads(texts.pop())["record"]["dir"] == head_to_head_record.RECORD_DIR
    assert all(head_to_head.report_outputs(d)["readme"] == "README.md" for d in spelled)


def test_standings_beside_the_runs_link_their_own_tables(reported, tmp_path, monkeypatch):
    """A report outside the repository's layout (make demo's: demo_run/standings.md beside
    demo_run/results.md) links the tables it wrote and the guide from where the standings file
    is, not the record's docs/results.md."""
    root, _, _ = reported
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "head_to_head.md").write_text("# the guide\n")
    monkeypatch.chdir(tmp_path)  # a clone of the repository
    out = tmp_path / "demo_run"
    out.mkdir()
    paths = dict(out_json=str(out / "head_to_head.json"), out_md=str(out / "results.md"),
                 figure=str(out / "head_to_head.png"), readme=str(out / "standings.md"))
    head_to_head_report.report(str(root / "record"), stream=open(os.devnull, "w"), n_samples=SAMPLES, **paths)
    block = open(paths["readme"]).read()
    assert "docs/results.md" not in block
    links = re.findall(r"\]\(([^)]+\.md)\)", block)
    assert "results.md" in links and "../docs/head_to_head.md" in links
    for link in links:
        assert os.path.isfile(os.path.join(out, link)), link


def test_training_time_comes_from_the_runs_committed_fairseq_log(tmp_path):
    """A record written by a package that kept only its own process's training time (0 s for a run trained before
    a restart, the resumed part of one resumed mid-training) is reported with the time its committed fairseq log
    gives, summed over the processes that trained it; without a log, the record's own figure."""
    from test_head_to_head import RESUMED_LOG

    record = tmp_path / "record"
    make_record(record, models=("baseline", "lsl"), seeds=(1, 2))
    head_to_head_record.dump_log(head_to_head_record.log_path(str(record), "o2m", "lsl", 2), RESUMED_LOG)
    runs = head_to_head_record.read(str(record))["o2m"]
    assert runs["lsl"][2]["wall_seconds"] == {"train": 601.0 + 615.0, "evaluate": 75.0}
    assert runs["lsl"][1]["wall_seconds"]["train"] == 1001.0 and runs["baseline"][2]["wall_seconds"]["train"] == 1002.0
    paths = _outputs(tmp_path / "out")
    data = head_to_head_report.report(str(record), stream=open(os.devnull, "w"), n_samples=SAMPLES, **paths)
    assert data["directions"]["o2m"]["runs"]["wall_seconds"]["train"] == 1001.0 + 1002.0 + 1001.0 + 1216.0
    # the runs without a log are named, since their time is what their package recorded (0 s after a restart)
    assert data["directions"]["o2m"]["runs"]["training_time_not_from_log"] == [
        "o2m/baseline/seed1", "o2m/baseline/seed2", "o2m/lsl/seed1"]
    section = open(paths["out_md"]).read()
    assert ("training 1.2 h (from the runs' fairseq logs, but for 3 runs without one, whose time is the one their "
            "package recorded: o2m/baseline/seed1, o2m/baseline/seed2, o2m/lsl/seed1)") in section, section


def test_advice_does_not_rank_models_by_a_delta_the_rule_calls_level():
    """Was: "use **LSL** (...), then **language adapters** (...)", ordered by their BLEU deltas (+0.56, -0.82),
    which the rule calls level for both, and the two were never tested against each other. Models of one
    class (better on both metrics; better on one, level on the other) are named in the table's order, joined by
    "or"; a class better on both comes first."""
    def entry(bleu, chrf, bleu_delta):
        verdict = {"bleu": {"verdict": bleu, "delta": bleu_delta}, "chrf": {"verdict": chrf, "delta": 1.0}}
        return {"verdict": verdict, "inference_cost": {"equal": True}}

    labels = {"adapters": "language adapters", "lsl": "LSL", "clsr": "CLSR"}
    block = {"models": {"baseline": {}, "adapters": entry("level", "better", -0.82),
                        "lsl": entry("level", "better", 0.56), "clsr": entry("better", "better", 0.1)}}
    advice, behind = head_to_head_standings._recommendation(block, labels, lambda e: e.get("verdict"))
    assert advice == ("use **CLSR** (better on BLEU and chrF; equal inference cost); then **language adapters** "
                      "(better on chrF, level on BLEU; equal inference cost) or **LSL** (better on chrF, level on BLEU; "
                      "equal inference cost), not tested against each other"), advice
    assert behind == []


def test_a_direction_recorded_without_a_seed_every_model_has_names_its_runs(tmp_path):
    """Was: "Not yet recorded." under the direction's heading although its runs were recorded (the baseline has
    seed 1, LSL seed 2: no seed to compare on); the runs were named only in the JSON."""
    refs = {p: sentences(40, i) for i, p in enumerate(PAIRS["o2m"])}
    write_run(tmp_path / "record", "o2m", "baseline", 1, refs)
    write_run(tmp_path / "record", "o2m", "lsl", 2, refs)
    m2o = {p: sentences(40, 10 + i) for i, p in enumerate(PAIRS["m2o"])}
    for name in ("baseline", "lsl"):
        write_run(tmp_path / "record", "m2o", name, 1, m2o)
    data = head_to_head_report.build(str(tmp_path / "record"), SAMPLES, open(os.devnull, "w"))
    section = head_to_head_report.markdown(data)
    o2m = section[section.index("### O2M"):section.index("### M2O")]
    assert "Not yet recorded." not in o2m, o2m
    assert ("Recorded but not reported (no seed that every recorded model of O2M has, or no baseline run): "
            "o2m/baseline/seed1, o2m/lsl/seed2.") in o2m, o2m
    assert "### M2M\n\nNot yet recorded." in section


def test_the_report_replaces_only_its_own_json_and_figure(tmp_path, capsys):
    """Was: `head-to-head --report-only --out-json notes.json --figure my.png` replaced the user's files (the
    markdown and README only ever get a marked section)."""
    paths = _outputs(tmp_path)
    make_record(tmp_path / "record", models=("baseline", "lsl"), seeds=(1,))
    for key, held in (("out_json", "a file head-to-head did not write"), ("figure", "a file head-to-head did not write")):
        os.makedirs(os.path.dirname(paths[key]), exist_ok=True)
        with open(paths[key], "w") as f:
            f.write("mine\n")
        with pytest.raises(ValueError, match=rf"holds {held}, which head-to-head would replace"):
            head_to_head.head_to_head(report_only=True, record_dir=str(tmp_path / "record"), n_samples=10, **paths)
        assert open(paths[key]).read() == "mine\n"
        os.remove(paths[key])
    for _ in range(2):  # the second replaces the first's outputs
        head_to_head.head_to_head(report_only=True, record_dir=str(tmp_path / "record"), n_samples=10,
                                  stream=open(os.devnull, "w"), **paths)
    assert open(paths["figure"], "rb").read(8) == b"\x89PNG\r\n\x1a\n"
