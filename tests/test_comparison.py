"""Significance (sacrebleu's paired bootstrap) and seed aggregation of ``langshare compare``."""

import argparse
import json

import pytest

from fairseq_langshare import comparison, evaluation, significance
from fairseq_langshare.evaluation import EvaluationError
from synthetic_translations import degrade, sentences


# ----------------------------------------------------------------------------- the test itself
def test_identical_systems_p_one_and_better_on_every_sentence_significant():
    refs = sentences(60)
    base = degrade(refs, 0.5, seed=1)
    same = significance.paired_bootstrap(base, list(base), refs)
    for metric in ("bleu", "chrf"):
        t = same[metric]
        assert t["p_value"] == 1.0 and t["delta"] == 0.0
        assert t["system_mean"] == pytest.approx(t["baseline_mean"]) and t["system_ci"] > 0
    # a system better on every single sentence: significant on both metrics, positive delta
    better = degrade(refs, 0.2, seed=2)
    test = significance.paired_bootstrap(base, better, refs)
    for metric in ("bleu", "chrf"):
        assert test[metric]["p_value"] < 0.05 and test[metric]["delta"] > 5, test[metric]
        assert test[metric]["system"] == pytest.approx(test[metric]["system_mean"], abs=3)
    # the baseline against the better system: the same p-value (two-sided), negative delta
    back = significance.paired_bootstrap(better, base, refs)
    assert back["bleu"]["delta"] == pytest.approx(-test["bleu"]["delta"]) and back["bleu"]["p_value"] < 0.05
    # different hypotheses, the same score (BLEU 0: no 4-gram matches anywhere): no difference
    nothing = significance.paired_bootstrap(["zz"] * 60, ["qq qq"] * 60, refs, metrics=("bleu",))["bleu"]
    assert nothing["delta"] == 0.0 and nothing["p_value"] == 1.0
    # a system that differs from the baseline in one sentence of 60: no evidence of a difference
    one = base[:-1] + [refs[-1]]
    assert significance.paired_bootstrap(base, one, refs)["bleu"]["p_value"] > 0.05
    with pytest.raises(significance.SignificanceError, match="cannot pair"):
        significance.paired_bootstrap(base, better[:-1], refs)


def test_seeds_paired_and_concatenated_per_direction_and_pooled():
    refs = {"en-a": sentences(30, 1), "en-b": sentences(30, 2)}
    base = [{d: degrade(r, 0.5, 10 + k) for d, r in refs.items()} for k in range(2)]
    mine = [{d: degrade(r, 0.2, 20 + k) for d, r in refs.items()} for k in range(2)]  # unequal counts: refused
    sig = significance.compare_to_baseline(base, mine, refs, {"en-a": "13a", "en-b": "13a"}, n_samples=300)
    assert sig["seeds"] == 2 and sig["pooled"]["directions"] == ["en-a", "en-b"]
    for row in list(sig["directions"].values()) + [sig["pooled"]]:
        assert len(row["bleu"]["per_seed"]) == 2 and row["bleu"]["seeds_concatenated"]["p_value"] < 0.05
    # seed 2 alone on en-a is exactly the per-seed entry
    alone = significance.paired_bootstrap(base[1]["en-a"], mine[1]["en-a"], refs["en-a"], n_samples=300)
    assert sig["directions"]["en-a"]["chrf"]["per_seed"][1] == alone["chrf"]
    # concatenated = the seeds' test sets one after the other
    cat = significance.paired_bootstrap(base[0]["en-b"] + base[1]["en-b"], mine[0]["en-b"] + mine[1]["en-b"],
                                        refs["en-b"] * 2, n_samples=300)
    assert sig["directions"]["en-b"]["bleu"]["seeds_concatenated"] == cat["bleu"]
    # pooled over directions: mixed BLEU tokenizations fall back to 13a
    mixed = significance.compare_to_baseline(base[:1], mine[:1], refs, {"en-a": "13a", "en-b": "zh"}, n_samples=100)
    assert mixed["pooled"]["bleu_tokenize"] == "13a"
    assert mixed["directions"]["en-a"]["bleu"]["seeds_concatenated"] == mixed["directions"]["en-a"]["bleu"]["per_seed"][0]
    assert significance.bleu_tokenization("nrefs:1|case:mixed|eff:no|tok:zh|smooth:exp") == "zh"


def test_seed_summary():
    s = significance.seed_summary([10.0, 12.0, 14.0])
    assert s["mean"] == 12.0 and s["std"] == pytest.approx(2.0) and s["values"] == [10.0, 12.0, 14.0]
    assert significance.seed_summary([3.0]) == {"mean": 3.0, "std": None, "values": [3.0]}
    assert significance.seed_summary([3.0, None])["mean"] is None


# ----------------------------------------------------------------------------- compare
def _results(tmp_path, scores, hyps=None, groups=None):
    """Hand-made evaluate results: direction -> BLEU (chrF = BLEU / 2), with hypotheses if given
    (references written to tmp_path)."""
    groups = groups or {}
    res = {"directions": {d: {"bleu": b, "chrf": b / 2, "spbleu": None, "group": groups.get(d, "high"),
                              "train_size": 1, "n": 10, "bleu_signature": "nrefs:1|tok:13a"}
                          for d, b in scores.items()}}
    if hyps is not None:
        res["hypotheses"], res["references"] = {}, {}
        for d, (h, refs) in hyps.items():
            path = tmp_path / f"test.{d}.ref"
            if not path.exists():
                path.write_text("\n".join(refs) + "\n")
            res["hypotheses"][d] = h
            res["references"][d] = evaluation.reference_identity(str(path))
    return res


def test_seed_aggregation_and_win_only_when_seed_mean_is_better(tmp_path):
    groups = {"en-a": "high", "en-b": "low"}
    base = [_results(tmp_path, {"en-a": 10.0, "en-b": 2.0}, groups=groups),
            _results(tmp_path, {"en-a": 20.0, "en-b": 4.0}, groups=groups)]
    # en-a: wins seed 1 (12 > 10) but its seed mean 13 is below the baseline's 15: not a win
    mine = [_results(tmp_path, {"en-a": 12.0, "en-b": 5.0}, groups=groups),
            _results(tmp_path, {"en-a": 14.0, "en-b": 5.0}, groups=groups)]
    runs = [("base", base[0]), ("mine", mine[0]), ("base", base[1]), ("mine", mine[1])]
    cmp = comparison.compare(runs, baseline="base", test=False)
    b, m = cmp["systems"]["base"], cmp["systems"]["mine"]
    assert b["seeds"] == m["seeds"] == 2
    assert b["directions"]["en-a"]["bleu"]["mean"] == 15.0
    assert b["directions"]["en-a"]["bleu"]["std"] == pytest.approx(7.0710678)
    assert m["directions"]["en-b"]["chrf"] == {"mean": 2.5, "std": 0.0, "values": [2.5, 2.5]}
    # group averages: per seed, then mean and std over seeds (all: seed 1 6.0, seed 2 12.0)
    assert b["averages"]["all"]["bleu"]["mean"] == 9.0 and b["averages"]["all"]["bleu"]["std"] == pytest.approx(4.2426407)
    assert b["averages"]["low"]["bleu"]["values"] == [2.0, 4.0]
    assert m["win_ratio"]["bleu"] == {"value": 0.5, "wins": 1, "directions": 2}  # en-b only
    md = comparison.comparison_markdown(cmp)
    assert "BLEU (mean ± std over 2 seeds):" in md
    assert "| en-a | 1 | high | 10 | 15.00 ± 7.07 | 13.00 ± 1.41 |" in md
    assert "| **all** avg |  |  |  | 9.00 ± 4.24 | 9.00 ± 0.71 |" in md
    assert md.count("| win ratio vs base |  |  |  | - | 0.50 (1/2) |") == 2  # BLEU and chrF
    with pytest.raises(EvaluationError, match="not one of the runs"):
        comparison.compare([("base", base[0])], baseline="other")


def test_compare_tests_against_the_baseline_from_stored_hypotheses(tmp_path):
    refs = {"en-a": sentences(30, 1), "en-b": sentences(30, 2)}
    base = [_results(tmp_path, {"en-a": 10.0, "en-b": 10.0}, {d: (degrade(r, 0.5, k), r) for d, r in refs.items()})
            for k in range(2)]
    good = [_results(tmp_path, {"en-a": 30.0, "en-b": 30.0}, {d: (degrade(r, 0.1, 5 + k), r) for d, r in refs.items()})
            for k in range(2)]
    same = [_results(tmp_path, {"en-a": 10.0, "en-b": 10.0}, {d: (list(r["hypotheses"][d]), refs[d]) for d in refs})
            for r in base]
    runs = [("base", base[0]), ("base", base[1]), ("good", good[0]), ("good", good[1]),
            ("same", same[0]), ("same", same[1])]
    cmp = comparison.compare(runs, baseline="base", n_samples=300)
    sig = cmp["systems"]["good"]["significance"]
    assert sig["seeds"] == 2 and set(sig["directions"]) == {"en-a", "en-b"}
    assert sig["pooled"]["bleu"]["seeds_concatenated"]["p_value"] < 0.05
    assert cmp["systems"]["same"]["significance"]["pooled"]["chrf"]["seeds_concatenated"]["p_value"] == 1.0
    assert "significance" not in cmp["systems"]["base"]
    md = comparison.comparison_markdown(cmp)
    assert "† p < 0.05 against base" in md and "| p, all directions pooled |  |  |  | - |" in md
    assert " †" in md.split("| en-a |")[1].split("\n")[0]  # good is marked on en-a
    assert "| all (pooled) |" in md and "[" in md  # per-seed p-values listed
    # the JSON round-trips; the CLI groups repeated names into seeds and writes it
    paths = []
    for i, (name, res) in enumerate(runs):
        (tmp_path / f"{i}.json").write_text(json.dumps(res))
        paths.append(f"{name}={tmp_path / f'{i}.json'}")
    parser = argparse.ArgumentParser()
    comparison.add_subcommand(parser.add_subparsers(dest="cmd"))
    args = parser.parse_args(["compare", *paths, "--baseline", "base", "--out-json", str(tmp_path / "c.json"),
                              "--bootstrap-samples", "100"])
    out = args.func(args)
    assert json.loads((tmp_path / "c.json").read_text()) == json.loads(json.dumps(out))
    assert out["systems"]["good"]["significance"]["n_samples"] == 100
    # changed references are refused, not silently re-scored
    (tmp_path / "test.en-a.ref").write_text("changed\n")
    with pytest.raises(EvaluationError, match="missing or changed"):
        comparison.compare(runs, baseline="base", n_samples=100)


def test_compare_without_hypotheses_says_so_and_leaves_out_missing_metrics(tmp_path):
    runs = [("a", {"directions": {"en-fr": {"bleu": 1.0, "spbleu": None, "group": "high"}}}),
            ("b", {"directions": {"en-fr": {"bleu": 2.0, "spbleu": None, "group": "high"}}})]
    out = comparison.compare_markdown(runs, "a", ("bleu", "spbleu"))
    assert "spBLEU: not in any of the results" in out and "| en-fr |" in out
    assert "Significance: not computed: the results hold no hypotheses" in out


def test_evaluate_baseline_significance_single_seed(tmp_path):
    refs = sentences(30, 4)
    base = _results(tmp_path, {"en-a": 10.0}, {"en-a": (degrade(refs, 0.5, 1), refs)})
    mine = _results(tmp_path, {"en-a": 30.0}, {"en-a": (degrade(refs, 0.1, 2), refs)})
    sig = evaluation.baseline_significance(mine, base)
    assert sig["seeds"] == 1 and sig["directions"]["en-a"]["bleu"]["seeds_concatenated"]["p_value"] < 0.05
    mine["significance"] = sig
    md = evaluation.to_markdown(mine)
    assert "Paired bootstrap vs baseline" in md and "| en-a | better | +" in md and "| all (pooled) |" in md
    assert "note" in evaluation.baseline_significance(mine, {"directions": base["directions"]})
    other = dict(mine, references={"en-a": dict(mine["references"]["en-a"], sha256="0" * 64)})
    with pytest.raises(EvaluationError, match="another reference file"):
        evaluation.check_same_references(base["references"], other, "base.json")


# ----------------------------------------------------------------------------- what the command prints
def _two_systems(tmp_path):
    """base.json and lsl.json: two single-seed evaluate results with hypotheses (lsl the better)."""
    refs = {"en-a": sentences(30, 1), "en-b": sentences(30, 2)}
    paths = []
    for name, share, seed, score in (("base", 0.5, 1, 10.0), ("lsl", 0.2, 2, 20.0)):
        res = _results(tmp_path, {d: score for d in refs}, {d: (degrade(r, share, seed), r) for d, r in refs.items()})
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(res))
    return paths


def test_compare_without_a_baseline_says_what_baseline_adds(tmp_path, capsys):
    """Was: the tables alone, with nothing saying that --baseline NAME adds the win ratios and the significance
    tests --help promises (found by a walk-through)."""
    from cli_checks import langshare

    base, lsl = _two_systems(tmp_path)
    code, _ = langshare(capsys, "compare", base, lsl, "--out-md", tmp_path / "cmp.md")
    assert code == 0
    hint = ("No --baseline: pass --baseline NAME (one of base, lsl) for each system's win ratio against NAME and "
            "sacrebleu's paired bootstrap tests against it.")
    assert hint in (tmp_path / "cmp.md").read_text().splitlines()
    assert "win ratio" not in (tmp_path / "cmp.md").read_text().replace(hint, "")
    code, _ = langshare(capsys, "compare", base, lsl, "--no-significance", "--out-md", tmp_path / "cmp.md")
    assert code == 0 and hint.replace(" and sacrebleu's paired bootstrap tests against it", "") in (
        tmp_path / "cmp.md").read_text().splitlines()
    code, _ = langshare(capsys, "compare", base, lsl, "--baseline", "base", "--bootstrap-samples", "20",
                        "--out-md", tmp_path / "cmp.md")
    text = (tmp_path / "cmp.md").read_text()
    assert code == 0 and "No --baseline" not in text and "| win ratio vs base |" in text
    code, _ = langshare(capsys, "compare", base, "--out-md", tmp_path / "cmp.md")  # one system: nothing to add
    assert code == 0 and "--baseline" not in (tmp_path / "cmp.md").read_text()


def test_the_paired_bootstrap_logs_nothing_to_stderr(tmp_path):
    """Was: about 30 lines of sacrebleu's INFO logging ('Computing BLEU for 'system' and extracting sufficient
    statistics', ...) before the tables: fairseq's imports set the root logger to DEBUG."""
    from cli_checks import BIN, cli_run

    base, lsl = _two_systems(tmp_path)
    code, out, err = cli_run([BIN / "langshare", "compare", base, lsl, "--baseline", "base",
                              "--bootstrap-samples", "50"])
    assert code == 0 and "| win ratio vs base |" in out and "against base" in out
    assert "sacrebleu" not in err.lower() and "INFO" not in err, err


def test_sacrebleus_warnings_still_reach_the_log(tmp_path, caplog, monkeypatch):
    """Only sacrebleu's progress messages are silenced: a warning it logs during the test is kept."""
    import logging

    import sacrebleu.significance as sacrebleu_significance

    original = sacrebleu_significance.PairedTest.__call__

    def warns(self):
        sacrebleu_significance.sacrelogger.warning("a real warning")
        sacrebleu_significance.sacrelogger.info("progress")
        return original(self)

    monkeypatch.setattr(sacrebleu_significance.PairedTest, "__call__", warns)
    refs = sentences(20, 3)
    with caplog.at_level(logging.INFO):
        significance.paired_bootstrap(degrade(refs, 0.5, 1), degrade(refs, 0.2, 2), refs, n_samples=20)
    sacrebleu_records = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "sacrebleu"]
    assert sacrebleu_records == [("WARNING", "a real warning")]
    assert logging.getLogger("sacrebleu").level == logging.NOTSET  # left as it was
