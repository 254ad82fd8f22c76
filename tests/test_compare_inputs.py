"""``langshare compare`` on runs that do not line up (the second bad-input sweep): runs with different direction
sets are averaged over the directions every run has, with the others marked; a file of another kind (a compare
output, a head-to-head JSON) is refused by name instead of read as results."""

import json

import pytest

from cli_checks import langshare
from fairseq_langshare import comparison


def results(scores):
    """evaluate results with these BLEU/chrF scores per direction (all high-resource)."""
    rows = {d: {"train_size": 20000, "group": "high", "supervised": True, "bleu": s, "chrf": s + 20.0,
                "bleu_signature": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.4.0",
                "chrf_signature": "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.4.0",
                "spbleu": None, "spbleu_signature": None, "n": 20} for d, s in scores.items()}
    from fairseq_langshare.evaluation import _averages

    return {"checkpoint": "x.pt", "corpus": "c", "split": "test", "directions": rows, "averages": _averages(rows)}


def write(tmp_path, name, obj):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(obj))
    return path


@pytest.mark.parametrize("order", ["complete-first", "skipping-first"])
def test_runs_with_different_directions_are_averaged_over_the_common_ones(tmp_path, capsys, order):
    """Was: a run that skipped a direction had the higher "all" average while losing every direction it has (it
    averaged over fewer, easier directions); with it first, the other run's extra direction vanished from the table
    while its average still counted it."""
    complete = write(tmp_path, "complete", results({"en-xx": 30.0, "en-yy": 10.0}))
    skipping = write(tmp_path, "skipping", results({"en-xx": 28.0}))
    runs = [complete, skipping] if order == "complete-first" else [skipping, complete]
    code, _ = langshare(capsys, "compare", *runs, "--no-significance", "--out-json", tmp_path / "cmp.json",
                        "--out-md", tmp_path / "cmp.md")
    assert code == 0
    cmp = json.loads((tmp_path / "cmp.json").read_text())
    assert list(cmp["directions"]) == ["en-xx", "en-yy"]  # every direction of every run
    assert cmp["common_directions"] == ["en-xx"] and cmp["missing"] == {"en-yy": ["skipping"]}
    alls = {name: e["averages"]["all"]["bleu"]["mean"] for name, e in cmp["systems"].items()}
    assert alls == {"complete": 30.0, "skipping": 28.0}
    assert all(e["averages"]["all"]["n_directions"] == 1 for e in cmp["systems"].values())
    table = (tmp_path / "cmp.md").read_text()
    assert "| en-yy* |" in table and "| en-xx |" in table
    assert ("* not in every run (en-yy: not in skipping): left out of the averages, which are over the 1 "
            "direction every run has") in table


def test_runs_that_share_no_direction_are_refused(tmp_path, capsys):
    a = write(tmp_path, "a", results({"en-xx": 30.0}))
    b = write(tmp_path, "b", results({"en-yy": 20.0}))
    code, line = langshare(capsys, "compare", a, b, "--no-significance")
    assert (code, line) == (2, "langshare compare: error: the runs share no direction (a: en-xx; b: en-yy): compare "
                               "runs evaluated on the same directions (evaluate --directions)")


@pytest.mark.parametrize("kind", ["compare output", "head-to-head results"])
def test_compare_recognises_files_of_another_kind(tmp_path, capsys, kind):
    """Was: a compare output read as results (every cell "-"); a head-to-head JSON gave `error: group`."""
    a = write(tmp_path, "a", results({"en-xx": 30.0}))
    if kind == "compare output":
        other = write(tmp_path, "other", comparison.compare([("a", json.loads(a.read_text()))], test=False))
        what = "a `langshare compare` output (--out-json)"
    else:
        other = write(tmp_path, "other", {"generated": "2026-11-28", "updates": 10, "seeds": [1], "train_flags": [],
                                          "evaluate_flags": [], "baseline": "shared",
                                          "directions": {"o2m": {"models": {}, "langs": []}}})
        what = "a `langshare head-to-head` results file"
    code, line = langshare(capsys, "compare", a, other, "--no-significance")
    assert (code, line) == (2, f"langshare compare: error: {other} is {what}, not `langshare evaluate` results: "
                               "pass files written by langshare evaluate --out-json"), line


@pytest.mark.parametrize("held", [1, 0])
def test_a_directory_is_refused_naming_the_results_json_to_pass(tmp_path, capsys, held):
    """Was: `a=DIR` said "results JSON not found" of a directory that exists."""
    b = write(tmp_path, "b", results({"en-xx": 30.0}))
    run = tmp_path / "run"
    run.mkdir()
    (run / "notes.json").write_text("{}")  # not results: not offered
    if held:
        write(run, "scores", results({"en-xx": 28.0}))
        fix = f"pass the results JSON in it, {run / 'scores.json'}"
    else:
        fix = "pass the results JSON that `langshare evaluate --out-json` wrote"
    code, line = langshare(capsys, "compare", f"a={run}", b, "--no-significance")
    assert (code, line) == (2, f"langshare compare: error: {run} is a directory, not a results JSON: {fix}"), line


def test_runs_named_alike_by_their_file_names_are_refused(tmp_path, capsys):
    """Was: baseline/seed1/test.json and lsl/seed1/test.json (every head-to-head run writes test.json), given
    without NAME=, became two seeds of one system "test": the baseline and LSL averaged together."""
    (tmp_path / "base").mkdir()
    (tmp_path / "lsl").mkdir()
    a = write(tmp_path / "base", "test", results({"en-xx": 30.0}))
    b = write(tmp_path / "lsl", "test", results({"en-xx": 20.0}))
    code, line = langshare(capsys, "compare", a, b, "--no-significance")
    assert (code, line) == (2, f"langshare compare: error: {a} and {b} would both be named 'test' (by their file "
                               "names); name each run: NAME=FILE, the same NAME for the seeds of one system")
    code, _ = langshare(capsys, "compare", f"base={a}", f"lsl={b}", "--no-significance")
    assert code == 0


def test_a_file_given_twice_is_refused(tmp_path, capsys):
    """Was: base=b1 base=b1 counted as two seeds (std 0), and the seed-concatenated test, with its sentences
    twice, turned p 0.050 into 0.030: a verdict changed by repeating a file."""
    a = write(tmp_path, "a", results({"en-xx": 30.0}))
    b = write(tmp_path, "b", results({"en-xx": 20.0}))
    code, line = langshare(capsys, "compare", f"base={a}", f"base={a}", f"lsl={b}", "--no-significance")
    assert (code, line) == (2, f"langshare compare: error: {a} is given twice (as base and base); give each "
                               "run's results once")


def test_a_gzip_file_is_named_as_such(tmp_path, capsys):
    """Was: "is not valid JSON ('utf-8' codec can't decode byte 0x8b ...); rewrite or regenerate it" of a
    head-to-head record (seedN.json.gz), which reads as a corrupt file."""
    import gzip

    a = write(tmp_path, "a", results({"en-xx": 30.0}))
    packed = tmp_path / "seed1.json.gz"
    packed.write_bytes(gzip.compress(a.read_bytes()))
    code, line = langshare(capsys, "compare", f"a={a}", f"b={packed}", "--no-significance")
    assert (code, line) == (2, f"langshare compare: error: results JSON {packed} is gzip-compressed, not JSON; "
                               f"decompress it first (gunzip -k {packed})")


@pytest.mark.parametrize("flag,held,kind", [
    ("--out-json", "seed2.json", "a `langshare evaluate` results file"),  # another run's results, not an input
    ("--out-md", "test.en-xx.xx", "a file compare did not write"),  # a corpus's references
    ("--out-json", "checkpoint_last.pt", "a file compare did not write"),
    ("--out-md", "cmp.json", "a `langshare compare` output (--out-json)"),
])
def test_compare_replaces_only_its_own_outputs(tmp_path, capsys, flag, held, kind):
    """Was: --out-json/--out-md replaced whatever was there: another seed's results, the test references, a
    checkpoint."""
    a = write(tmp_path, "a", results({"en-xx": 30.0}))
    b = write(tmp_path, "b", results({"en-xx": 28.0}))
    write(tmp_path, "seed2", results({"en-xx": 29.0}))
    (tmp_path / "test.en-xx.xx").write_text("a reference\n")
    (tmp_path / "checkpoint_last.pt").write_bytes(b"PK\x03\x04weights")
    assert langshare(capsys, "compare", a, b, "--no-significance", "--out-json", tmp_path / "cmp.json")[0] == 0
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    code, line = langshare(capsys, "compare", a, b, "--no-significance", flag, tmp_path / held)
    assert (code, line) == (2, f"langshare compare: error: {flag} {tmp_path / held} holds {kind}, which compare "
                               "would replace; write to another path or move it away")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_compare_replaces_its_earlier_outputs(tmp_path, capsys):
    a = write(tmp_path, "a", results({"en-xx": 30.0}))
    b = write(tmp_path, "b", results({"en-xx": 28.0}))
    (tmp_path / "empty.md").write_text("")  # nothing to lose
    for _ in range(2):
        code, line = langshare(capsys, "compare", a, b, "--no-significance", "--out-json", tmp_path / "cmp.json",
                               "--out-md", tmp_path / "cmp.md")
        assert code == 0, line
    assert (tmp_path / "cmp.md").read_text().startswith("Comparison by `langshare compare` of a, b.\n")
    assert langshare(capsys, "compare", a, b, "--no-significance", "--out-md", tmp_path / "empty.md")[0] == 0


@pytest.mark.parametrize("metrics", ["ter", "BLEU", "bleu,ter", ""])
def test_an_unknown_metric_is_refused(tmp_path, capsys, metrics):
    """Was: exit 0 with "ter: not in any of the results", and "metrics": ["ter"] in the JSON."""
    a = write(tmp_path, "a", results({"en-xx": 30.0}))
    b = write(tmp_path, "b", results({"en-xx": 28.0}))
    code, line = langshare(capsys, "compare", a, b, "--no-significance", f"--metrics={metrics}")
    assert code == 2
    assert line == ("langshare compare: error: --metrics " + repr(metrics) + ": pass one or more of bleu, chrf, spbleu, "
                    "comma-separated"), line


def test_runs_trained_for_different_updates_are_named(tmp_path, capsys):
    """Was: a 60-update run sat beside a 40-update one, verdicts and all, with nothing saying so (the results
    named only the checkpoint's path)."""
    long_ = write(tmp_path, "long", {**results({"en-xx": 30.0}), "num_updates": 60})
    short = write(tmp_path, "short", {**results({"en-xx": 28.0}), "num_updates": 40})
    code, _ = langshare(capsys, "compare", long_, short, "--no-significance", "--out-json", tmp_path / "cmp.json",
                        "--out-md", tmp_path / "cmp.md")
    assert code == 0
    assert json.loads((tmp_path / "cmp.json").read_text())["updates_trained"] == {"long": [60], "short": [40]}
    assert ("**Runs of different lengths** (updates trained: long 60, short 40): a difference between them is also "
            "one of training.") in (tmp_path / "cmp.md").read_text()
    same = write(tmp_path, "same", {**results({"en-xx": 29.0}), "num_updates": 60})
    old = write(tmp_path, "old", results({"en-xx": 29.0}))  # a results file of a version without the count
    cmp = comparison.compare(comparison.read_runs([str(long_), str(same), str(old)]), test=False)
    assert "updates_trained" not in cmp
