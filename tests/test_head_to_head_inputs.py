"""`langshare head-to-head` refuses, in one line and before anything trains, input that would
record or report runs it should not: a record made on another corpus, a seed file of another run,
repeated --seeds/--models/--directions, a --corpus that is not a prepared corpus, a report file of
another record, a corpus without validation data.

The runs here are fakes (fairseq-train and langshare evaluate stand-ins, a fabricated profile):
what is checked is what the head-to-head reads and writes around them."""

import json
import os
import re
import shutil

import pytest

from fairseq_langshare import cli
from fairseq_langshare.evaluation import reference_identity
from fairseq_langshare.recipes import head_to_head, head_to_head_record, head_to_head_report, head_to_head_runs

PAIRS = ("en-xx", "en-yy")


def fake_corpus(path, words=("a", "b", "c"), refs=None, valid=True):
    """A prepared corpus as the head-to-head reads it: manifest, langs, pairs, dictionary, test references."""
    os.makedirs(os.path.join(path, "bin"))
    os.makedirs(os.path.join(path, "raw"))
    with open(os.path.join(path, "manifest.json"), "w") as f:
        json.dump({"counts": {"valid": {p: 30 if valid else 0 for p in PAIRS}}}, f)
    with open(os.path.join(path, "langs.txt"), "w") as f:
        f.write("en\nxx\nyy\n")
    with open(os.path.join(path, "lang_pairs.txt"), "w") as f:
        f.write(",".join(PAIRS) + "\n")
    with open(os.path.join(path, "bin", "dict.txt"), "w") as f:
        f.write("".join(f"{w} 1\n" for w in words))
    for p in PAIRS:
        tgt = p.split("-")[1]
        with open(os.path.join(path, "raw", f"test.{p}.{tgt}"), "w") as f:
            f.write("".join(f"{line}\n" for line in (refs or [f"{tgt} sentence {i}" for i in range(5)])))
        if valid:
            open(os.path.join(path, "bin", f"valid.{p}.en.idx"), "w").close()
    return str(path)


@pytest.fixture
def fake_runs(monkeypatch):
    """fairseq-train and langshare evaluate finish at once (evaluate scores the references themselves);
    the plan is not printed (it builds the models) and the recorded profile is fabricated. Returns the
    fairseq-train calls."""
    trained = []

    def call(argv, log):
        run_dir = os.path.dirname(log)
        if argv[2] == "fairseq_cli.train":
            trained.append(run_dir)
            with open(log, "a") as f:
                f.write(f"{run_dir} {len(trained)}\ndone training\n")
            open(os.path.join(run_dir, "checkpoint_last.pt"), "w").close()
        else:
            corpus = argv[argv.index("evaluate") + 2]
            refs = {p: reference_identity(os.path.join(corpus, "raw", f"test.{p}.{p.split('-')[1]}")) for p in PAIRS}
            hyps = {p: open(refs[p]["path"]).read().splitlines() for p in PAIRS}
            with open(argv[argv.index("--out-json") + 1], "w") as f:
                json.dump({"directions": {p: {"bleu": 100.0, "chrf": 100.0} for p in PAIRS}, "hypotheses": hyps,
                           "references": refs}, f)
        return 0

    monkeypatch.setattr(head_to_head_runs, "_call", call)
    monkeypatch.setattr(head_to_head_runs, "profile", lambda run, checkpoint=None, corpus=None: {"parameters": {}})
    monkeypatch.setattr(head_to_head, "print_plan", lambda runs, jobs, stream=None: ([], {}))
    monkeypatch.setattr(head_to_head_report, "report", lambda *a, **k: {})
    return trained


def h2h(*args):
    return cli.main(["head-to-head", "--directions", "o2m", "--models", "baseline", "--updates", "10", "--jobs", "1",
                     *args])


def one_line_error(capsys):
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_a_record_made_on_another_corpus_is_refused_before_training(tmp_path, fake_runs, capsys, monkeypatch):
    """Was: the runs of another corpus (here: the same test references, another dictionary) trained and
    replaced the record's seed file, and the report compared runs of two corpora."""
    monkeypatch.chdir(tmp_path)
    fake_corpus("corpus_a")
    fake_corpus("corpus_b", words=("a", "b", "d"))  # another vocabulary on the same text
    fake_corpus("corpus_c", refs=["other", "references"])
    assert h2h("--corpus", "o2m=corpus_a", "--runs-dir", "runs_a", "--record-dir", "rec", "--seeds", "1") in (0, None)
    seed1 = "rec/o2m/baseline/seed1.json.gz"
    before = open(seed1, "rb").read()
    assert len(fake_runs) == 1
    for other in ("corpus_b", "corpus_c"):
        code = h2h("--corpus", f"o2m={other}", "--runs-dir", "runs_b", "--record-dir", "rec", "--seeds", "1,2")
        err = one_line_error(capsys)
        assert code != 0 and "made on the corpus corpus_a" in err and other in err, err
        assert "pass another --record-dir, or the corpus the record was made on" in err, err
        assert len(fake_runs) == 1 and open(seed1, "rb").read() == before
    # the same corpus moved elsewhere is the same corpus
    shutil.copytree("corpus_a", "moved_a")
    assert h2h("--corpus", "o2m=moved_a", "--runs-dir", "runs_a2", "--record-dir", "rec", "--seeds", "2") in (0, None)
    assert os.path.isfile("rec/o2m/baseline/seed2.json.gz") and open(seed1, "rb").read() == before


def test_a_recorded_seed_of_another_run_is_not_replaced(tmp_path, fake_runs, capsys, monkeypatch):
    """Was: another runs dir's run of the same seed trained and replaced the recorded seed file. A run
    re-evaluated (the same training) replaces its own record."""
    monkeypatch.chdir(tmp_path)
    fake_corpus("corpus_a")
    assert h2h("--corpus", "o2m=corpus_a", "--runs-dir", "runs_a", "--record-dir", "rec", "--seeds", "1") in (0, None)
    seed1 = "rec/o2m/baseline/seed1.json.gz"
    before = open(seed1, "rb").read()
    code = h2h("--corpus", "o2m=corpus_a", "--runs-dir", "runs_b", "--record-dir", "rec", "--seeds", "1")
    err = one_line_error(capsys)
    assert code != 0 and "o2m/baseline/seed1" in err and "runs_b" in err and "another --record-dir" in err, err
    assert len(fake_runs) == 1 and open(seed1, "rb").read() == before
    # and record_run itself never replaces another run's record
    run = head_to_head_runs.plan(["baseline"], ["o2m"], [1], "runs_c", {"o2m": "corpus_a"}, 10)[0]
    head_to_head_runs.train(run)
    head_to_head_runs.evaluate(run)
    with pytest.raises(ValueError, match="seed1.json.gz holds another training of o2m/baseline/seed1"):
        head_to_head_runs.record_run("rec", run, {})
    assert open(seed1, "rb").read() == before
    # the recorded run evaluated again replaces its own record
    os.utime("runs_a/o2m/baseline/seed1/test.json", (0, 0))
    assert h2h("--corpus", "o2m=corpus_a", "--runs-dir", "runs_a", "--record-dir", "rec", "--seeds", "1") in (0, None)
    assert len(fake_runs) == 2  # not trained again (runs_c's is the second training)
    assert os.path.getmtime("runs_a/o2m/baseline/seed1/test.json") > 0 and os.path.isfile(seed1)


def test_report_only_refuses_a_record_of_two_corpora(tmp_path):
    from test_head_to_head_report import PAIRS as REPORT_PAIRS, make_record, write_run
    from synthetic_translations import sentences

    make_record(tmp_path / "record", models=("baseline", "lsl"), seeds=(1,))
    other = {p: sentences(40, 7 + i) for i, p in enumerate(REPORT_PAIRS["o2m"])}
    write_run(tmp_path / "record", "o2m", "lsl", 1, other)
    with pytest.raises(ValueError, match=r"^the record's runs o2m/baseline/seed1 and o2m/lsl/seed1 were scored "
                                         r"against other test references .*another --record-dir"):
        head_to_head_report.build(str(tmp_path / "record"), 20, open(os.devnull, "w"))
    # another dictionary (records that name theirs)
    make_record(tmp_path / "dicts", models=("baseline", "lsl"), seeds=(1,))
    for name, sha in (("baseline", "1" * 64), ("lsl", "2" * 64)):
        path = head_to_head_record.run_path(str(tmp_path / "dicts"), "o2m", name, 1)
        record = head_to_head_record.load(path)
        record["corpus"]["dict_sha256"] = sha
        head_to_head_record.dump(path, record)
    with pytest.raises(ValueError, match=r"^the record's runs o2m/baseline/seed1 and o2m/lsl/seed1 were trained on "
                                         r"other dictionaries"):
        head_to_head_report.build(str(tmp_path / "dicts"), 20, open(os.devnull, "w"))


@pytest.mark.parametrize("flag, value, repeated", [("--seeds", "1,2,1", "1"), ("--models", "baseline,lsl,lsl", "lsl"),
                                                    ("--directions", "o2m,o2m", "o2m")])
def test_a_value_given_twice_is_refused(tmp_path, fake_runs, capsys, monkeypatch, flag, value, repeated):
    """Was: `--seeds 1,1` (or a model, a direction twice) trained the same run directory twice at once."""
    monkeypatch.chdir(tmp_path)
    fake_corpus("corpus_a")
    args = {"--seeds": "1", "--models": "baseline", "--directions": "o2m", flag: value}
    code = cli.main(["head-to-head", "--corpus", "o2m=corpus_a", "--updates", "10", "--runs-dir", "runs",
                     *[x for k, v in args.items() for x in (k, v)]])
    err = one_line_error(capsys)
    assert code != 0 and f"{flag} {value}: {repeated} is given twice" in err, err
    assert fake_runs == [] and not os.path.exists("runs")


def test_a_given_corpus_that_is_not_prepared_is_refused(tmp_path, fake_runs, capsys, monkeypatch):
    """Was: a mistyped --corpus o2m=corpsu_o2m built the 8-language gettext demo corpus there and ran on it.
    Only the default corpora are built when missing."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(head_to_head_runs.Corpus, "prepare", lambda self: pytest.fail("built a corpus"))
    os.makedirs("tsv_o2m")
    open("tsv_o2m/en-xx.tsv", "w").write("a\tb\n")
    for given, advice in (("corpsu_o2m", "run `langshare prepare-data --out corpsu_o2m ...` first"),
                          ("tsv_o2m", "it holds no corpus built by langshare; build one from its parallel text with "
                                      "`langshare prepare-data --out CORPUS tsv_o2m` and pass --corpus o2m=CORPUS")):
        for dry in ([], ["--dry-run"]):
            code = h2h("--corpus", f"o2m={given}", "--runs-dir", "runs", "--seeds", "1", *dry)
            err = one_line_error(capsys)
            assert code != 0 and f"--corpus o2m={given}: not a prepared corpus (no manifest.json)" in err, err
            assert advice in err, err
    assert fake_runs == [] and not os.path.exists("corpsu_o2m") and not os.path.exists("runs")


def test_the_report_of_another_record_is_not_replaced(tmp_path, monkeypatch):
    """Was: --out-json FILE holding another record's head-to-head report was replaced (any head-to-head JSON passed)."""
    from test_head_to_head_report import make_record

    monkeypatch.chdir(tmp_path)
    for record in ("rec_a", "rec_b"):
        make_record(record, models=("baseline", "lsl"), seeds=(1,))
    paths = {"out_json": "report.json", "out_md": "", "figure": "", "readme": ""}
    head_to_head.head_to_head(report_only=True, record_dir="rec_a", n_samples=10, stream=open(os.devnull, "w"),
                              **paths)
    before = open("report.json", "rb").read()
    with pytest.raises(ValueError, match=r"^--out-json report.json holds the report of the record rec_a, not of "
                                         r"this one \(rec_b\), which head-to-head would replace; write to another "
                                         r"path or move it away$"):
        head_to_head.head_to_head(report_only=True, record_dir="rec_b", n_samples=10, **paths)
    assert open("report.json", "rb").read() == before
    head_to_head.head_to_head(report_only=True, record_dir="./rec_a/", n_samples=10, stream=open(os.devnull, "w"),
                              **paths)  # its own record's report is replaced


def test_a_corpus_without_validation_data_is_refused_in_the_plan(tmp_path, fake_runs, capsys, monkeypatch):
    """Was: --dry-run passed, then every run failed with only 'fairseq-train failed (exit 1); see train.log'."""
    monkeypatch.chdir(tmp_path)
    fake_corpus("corpus_a", valid=False)
    for dry in ([], ["--dry-run"]):
        code = h2h("--corpus", "o2m=corpus_a", "--runs-dir", "runs", "--seeds", "1", *dry)
        err = one_line_error(capsys)
        assert code != 0 and "--corpus o2m=corpus_a: no validation data for en-xx, en-yy" in err, err
        assert "--valid-size" in err, err
    assert fake_runs == [] and not os.path.exists("runs")


def test_failed_runs_are_counted_in_the_last_line(tmp_path, fake_runs, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fake_corpus("corpus_a")
    monkeypatch.setattr(head_to_head_runs, "_call", lambda argv, log: 1)
    os.makedirs("runs/record")  # left by an earlier try, nothing recorded in it

    def report(record_dir, **kw):
        raise ValueError(f"no run recorded in {record_dir} yet: nothing to report")

    monkeypatch.setattr(head_to_head_report, "report", report)
    code = h2h("--corpus", "o2m=corpus_a", "--runs-dir", "runs", "--seeds", "1,2")
    out, err = capsys.readouterr()
    assert code != 0 and err.startswith("langshare head-to-head: 2 of 2 runs failed"), err
    assert "nothing to report" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("flag,key,what,path", [("--figure", "figure", "figure", "figure.png"),
                                                 ("--out-md", "out_md", "head-to-head section", "notes.md"),
                                                 ("--readme", "readme", "method standings", "notes.md")])
def test_the_outputs_of_another_record_are_not_replaced(tmp_path, monkeypatch, flag, key, what, path):
    """Was: --figure FILE holding another record's head-to-head figure was replaced (the PNG named no record, so any
    head-to-head figure passed), and --out-md or --readme FILE whose head-to-head section (method standings) was made
    from another record got this record's in its place (docs/results.md's section of the head-to-head of record, from
    a record of one's own). Each names its record now, as the JSON's record.dir does; the rest of a markdown file is
    never touched."""
    from test_head_to_head_report import make_record

    monkeypatch.chdir(tmp_path)
    for record in ("rec_a", "rec_b"):
        make_record(record, models=("baseline", "lsl"), seeds=(1,))
    quiet = open(os.devnull, "w")
    paths = {"out_md": "", "figure": "", "readme": "", key: path}
    if path == "notes.md":
        with open(path, "w") as f:
            f.write("# my notes\n")
    head_to_head.head_to_head(report_only=True, record_dir="rec_a", n_samples=10, stream=quiet, out_json="a.json",
                              **paths)
    before = open(path, "rb").read()
    with pytest.raises(ValueError, match=rf"^{flag} {re.escape(path)} holds the {what} of the record rec_a, not of "
                                         r"this one \(rec_b\), which head-to-head would replace; write to another path "
                                         r"or move it away$"):
        head_to_head.head_to_head(report_only=True, record_dir="rec_b", n_samples=10, out_json="b.json", **paths)
    assert open(path, "rb").read() == before and not os.path.exists("b.json")
    head_to_head.head_to_head(report_only=True, record_dir="./rec_a/", n_samples=10, stream=quiet,
                              out_json="a.json", **paths)  # its own record's output is replaced
    if path == "notes.md":
        assert open(path).read().startswith("# my notes\n")


@pytest.mark.parametrize("model,seed,path,says", [
    ("baseline", "x", "elsewhere", "--import-run baseline x elsewhere: SEED 'x' is not an integer"),
    ("lsl", "1", "elsewhere", "--import-run lsl 1 elsewhere: no planned run of model lsl (pass it in --models)"),
    ("baseline", "7", "elsewhere", "--import-run baseline 7 elsewhere: no planned run of baseline with seed 7 "
                                   "(--seeds)"),
    ("baseline", "1", "elsewhere", "--import-run baseline 1 elsewhere: no checkpoint_last.pt there"),
])
def test_an_import_run_is_checked_before_anything_runs_the_dry_run_too(tmp_path, fake_runs, capsys, monkeypatch,
                                                                     model, seed, path, says):
    """Was: --dry-run passed without a word on --import-run, and a real run read SEED only after preparing the
    corpora ('invalid literal for int() with base 10: x', not naming the option)."""
    monkeypatch.chdir(tmp_path)
    fake_corpus("corpus_a")
    for dry in ([], ["--dry-run"]):
        code = h2h("--corpus", "o2m=corpus_a", "--runs-dir", "runs", "--seeds", "1", "--models", "baseline",
                   "--import-run", model, seed, path, *dry)
        err = one_line_error(capsys)
        assert code != 0 and err.endswith(says), err
    assert fake_runs == [] and not os.path.exists("runs")
