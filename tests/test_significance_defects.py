"""Regression tests for `langshare compare` / significance defects: unequal seed counts, mixed BLEU
signatures, untestable inputs, paths with "=", and non-positive --bootstrap-samples."""

import argparse
import json

import pytest

from fairseq_langshare import comparison, significance
from fairseq_langshare.atomic_files import OutputPathError
from fairseq_langshare.evaluation import EvaluationError
from synthetic_translations import degrade, sentences
from test_comparison import _results


def _parser():
    parser = argparse.ArgumentParser()
    comparison.add_subcommand(parser.add_subparsers(dest="cmd"))
    return parser


def test_unequal_seed_counts_refused(tmp_path):
    refs = {"en-a": sentences(20, 1)}
    base = [_results(tmp_path, {"en-a": 10.0}, {"en-a": (degrade(refs["en-a"], 0.5, k), refs["en-a"])})
            for k in range(2)]
    mine = [_results(tmp_path, {"en-a": 30.0}, {"en-a": (degrade(refs["en-a"], 0.1, 5 + k), refs["en-a"])})
            for k in range(3)]
    runs = [("base", base[0]), ("base", base[1])] + [("mine", r) for r in mine]
    with pytest.raises(EvaluationError, match=r"mine has 3 seeds but the baseline base has 2.*same seeds"):
        comparison.compare(runs, baseline="base", n_samples=50)
    with pytest.raises(EvaluationError, match="same seeds"):  # also without the test: the win ratio pairs seeds
        comparison.compare(runs, baseline="base", test=False)
    with pytest.raises(significance.SignificanceError, match="same seeds"):
        significance.compare_to_baseline([{"en-a": r["hypotheses"]["en-a"]} for r in base],
                                         [{"en-a": r["hypotheses"]["en-a"]} for r in mine], refs, {}, n_samples=50)
    # without a baseline the header names each system's seed count instead of the largest
    md = comparison.comparison_markdown(comparison.compare(runs, test=False))
    assert "over 3 seeds" not in md and "(mean ± std over seeds: base 2, mine 3)" in md


def test_different_bleu_signatures_refused(tmp_path):
    base = _results(tmp_path, {"en-a": 10.0})
    mine = _results(tmp_path, {"en-a": 30.0})
    mine["directions"]["en-a"]["bleu_signature"] = "nrefs:1|tok:intl"
    with pytest.raises(EvaluationError, match=r"direction en-a: .*nrefs:1\|tok:13a.*nrefs:1\|tok:intl.*--bleu-tokenize"):
        comparison.compare([("base", base), ("mine", mine)], baseline="base", test=False)
    # the same tokenization under another sacrebleu version is the same score
    mine["directions"]["en-a"]["bleu_signature"] = "nrefs:1|tok:13a|version:9.9"
    base["directions"]["en-a"]["bleu_signature"] = "nrefs:1|tok:13a|version:2.6.0"
    comparison.compare([("base", base), ("mine", mine)], baseline="base", test=False)


def test_untestable_inputs_give_no_p_value_and_no_dagger(tmp_path):
    one = significance.paired_bootstrap(["the cat sat on a mat"], ["the cat sat on the mat"],
                                        ["the cat sat on the mat"], n_samples=50)
    assert one["bleu"]["p_value"] is None and one["chrf"]["p_value"] is None and one["bleu"]["delta"] > 0
    assert significance.paired_bootstrap(["a b c"], ["a b c"], ["a b c"], n_samples=50)["bleu"]["p_value"] is None
    # every resample identical: every sentence the same, the system better on each
    refs = ["the cat sat on the mat"] * 5
    same = significance.paired_bootstrap(["the cat sat on a mat"] * 5, refs, refs, n_samples=50)
    assert same["bleu"]["p_value"] is None and same["chrf"]["p_value"] is None
    # a real, significant difference keeps its (minimal) p-value
    refs = sentences(40, 3)
    real = significance.paired_bootstrap(degrade(refs, 0.6, 1), degrade(refs, 0.05, 2), refs, n_samples=50)
    assert real["bleu"]["p_value"] == pytest.approx(1 / 51)
    # in compare: no dagger and "not testable" in the table
    r = ["the cat sat on the mat"]
    base = _results(tmp_path, {"en-a": 10.0}, {"en-a": (["the cat sat on a mat"], r)})
    mine = _results(tmp_path, {"en-a": 30.0}, {"en-a": (r, r)})
    md = comparison.comparison_markdown(comparison.compare([("base", base), ("mine", mine)], "base", n_samples=50))
    assert "†" not in md.split("| en-a |")[1].split("\n")[0] and "not testable" in md


def test_paths_with_equals_sign(tmp_path, monkeypatch):
    res = _results(tmp_path, {"en-a": 10.0})
    (tmp_path / "lr=0.005").mkdir()
    (tmp_path / "lr=0.005" / "r.json").write_text(json.dumps(res))
    monkeypatch.chdir(tmp_path)
    path = "lr=0.005/r.json"
    assert comparison.read_runs([f"base={path}"])[0][0] == "base"
    assert comparison.read_runs([path])[0][0] == "r"  # an existing file is a path, named by its file
    assert comparison.read_runs([f"base={tmp_path / path}"])[0][0] == "base"
    # the overwrite check sees the real input path
    args = _parser().parse_args(["compare", f"base={path}", "--out-json", path, "--no-significance"])
    with pytest.raises(OutputPathError, match="would overwrite an input"):
        args.func(args)
    assert json.loads((tmp_path / path).read_text()) == res


@pytest.mark.parametrize("value", ["0", "-5"])
def test_bootstrap_samples_below_one_refused(tmp_path, value, capsys):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(_results(tmp_path, {"en-a": 10.0})))
    with pytest.raises(SystemExit):
        args = _parser().parse_args(["compare", f"a={path}", f"b={path}", "--baseline", "a",
                                     "--bootstrap-samples", value])
        args.func(args)
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--bootstrap-samples" in err and "is outside [1, inf)" in err  # refused when parsed
    with pytest.raises(significance.SignificanceError, match="at least 1"):
        significance.paired_bootstrap(["a b"] * 3, ["a b"] * 3, ["a b"] * 3, n_samples=0)


def test_evaluate_baseline_table_says_not_testable():
    """`langshare evaluate --baseline` prints the same "not testable" as compare for a p-value the
    test could not give (a direction of one sentence), instead of failing to format None."""
    from fairseq_langshare.evaluation import significance_markdown

    untestable = {"delta": 12.75, "p_value": None, "system_mean": 30.0, "system_ci": 0.0}
    testable = {"delta": 1.5, "p_value": 0.02, "system_mean": 31.0, "system_ci": 1.2}
    sig = {"n_samples": 1000, "pooled": {"bleu": {"seeds_concatenated": testable, "verdict": "better"}},
           "directions": {"en-xx": {"bleu": {"seeds_concatenated": untestable, "verdict": "level"}}}}
    table = "\n".join(significance_markdown(sig))
    assert "| en-xx | level | +12.75 | not testable | 30.00 +- 0.00 |" in table
    assert "| all (pooled) | better | +1.50 | 0.020 | 31.00 +- 1.20 |" in table
