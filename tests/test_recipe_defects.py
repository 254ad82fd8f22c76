"""What the recipes and the CLI do with run directories and outputs that are not the plan's:
a run trained for other updates is refused, not relabelled; an interrupted or failed analysis
runs again; ``compare`` and head-to-head refuse outputs they cannot or must not write, before
any work; Figure 6 ranks languages by training size."""

import io
import json
import logging
import os

import pytest
import torch

from fairseq_langshare.analysis import clsr_gates
from fairseq_langshare.cli import main as langshare
from fairseq_langshare.recipes import experiment_plan as ep
from fairseq_langshare.recipes import head_to_head_report, train_runner
from fairseq_langshare.recipes.head_to_head_runs import plan


def _checkpoint(save_dir, updates, finished=True):
    """A checkpoint_last.pt as fairseq saves its update count (and the finished marker)."""
    os.makedirs(save_dir, exist_ok=True)
    torch.save({"optimizer_history": [{"num_updates": updates}]}, os.path.join(save_dir, "checkpoint_last.pt"))
    if finished:
        open(os.path.join(save_dir, f"finished-{updates}"), "w").close()


def _recipe_corpus(root):
    """A prepared opus100 corpus as far as planning a recipe reads it."""
    os.makedirs(root)
    with open(os.path.join(root, "manifest.json"), "w") as f:
        json.dump({"corpus": "opus100"}, f)
    with open(os.path.join(root, "langs.txt"), "w") as f:
        f.write("en\nde\nfr\n")
    with open(os.path.join(root, "lang_pairs.txt"), "w") as f:
        f.write("en-de,en-fr\n")
    return str(root)


# ----------------------------------------------------------------------------- 1. other updates
def test_head_to_head_refuses_a_run_trained_for_more_updates(tmp_path):
    def planned(updates):
        return plan(["baseline"], ["o2m"], [1], str(tmp_path / "runs"), {"o2m": str(tmp_path)}, updates)[0]

    run_dir = planned(20).dir
    _checkpoint(run_dir, 20)
    assert planned(20).status == "to evaluate"
    with pytest.raises(ValueError, match=r"trained for 20 updates, this plan has 10: pass the same --updates or "
                                         r"another --runs-dir$"):
        planned(10)
    assert planned(30).status == "to resume"  # fewer updates than planned: training goes on
    # an interrupted training that went past the plan's updates is refused too
    os.remove(os.path.join(run_dir, "finished-20"))
    _checkpoint(run_dir, 15, finished=False)
    with pytest.raises(ValueError, match="trained for 15 updates, this plan has 10"):
        planned(10)
    assert planned(20).status == "to resume"


def test_recipe_refuses_a_run_trained_for_more_updates_before_training_anything(tmp_path, monkeypatch):
    data, out = _recipe_corpus(tmp_path / "corpus"), str(tmp_path / "runs")
    executed = []
    monkeypatch.setattr(train_runner, "execute", lambda run, *a: executed.append(run.method.name))
    _checkpoint(os.path.join(out, "clsr-p0.3", "checkpoints"), 10)
    open(os.path.join(out, "clsr-p0.3", train_runner.EARLIER_RUN_FILE), "w").close()  # a recipe's run, before recipe.json

    def run(updates):
        return train_runner.run_recipe("clsr", "opus100-o2m", ["clsr-p0.3"], data, out, tiny=True,
                                       max_update=updates, any_corpus=True)

    with pytest.raises(ValueError, match=r"trained for 10 updates, this plan has 5: pass the same --max-update "
                                         r"\(or --tiny\) or another --out$"):
        run(5)
    assert executed == []  # not even the baseline
    assert langshare(["recipe", "run", "clsr", "opus100-o2m", "clsr-p0.3", "--data", data, "--out", out,
                      "--max-update", "5", "--dry-run"]) == 2
    run(20)  # more updates than trained: resumed
    assert executed == ["baseline", "clsr-p0.3"]


def test_recipe_refuses_the_run_directory_of_another_experiment(tmp_path, monkeypatch):
    """Was: `recipe run clsr opus100-m2o ... --out runs/clsr` where runs/clsr held the opus100-o2m runs said
    "baseline: already trained" and scored the O2M model as the M2O baseline."""
    data, out = _recipe_corpus(tmp_path / "corpus"), str(tmp_path / "runs")
    with open(os.path.join(data, "lang_pairs.txt"), "w") as f:  # both experiments' directions
        f.write("en-de,en-fr,de-en,fr-en\n")
    executed = []
    monkeypatch.setattr(train_runner, "execute", lambda run, *a: executed.append(run.method.name))
    monkeypatch.setattr(train_runner, "check_updates", lambda *a, **k: None)
    o2m = train_runner.run_recipe("clsr", "opus100-o2m", ["baseline"], data, out, tiny=True, any_corpus=True)
    train_runner.record_run(o2m[0], data)  # what training writes into a run directory it starts
    held = os.path.join(out, "baseline")
    assert json.load(open(os.path.join(held, "recipe.json")))["experiment"] == "opus100-o2m"
    for dry_run in (True, False):
        with pytest.raises(ValueError, match=rf"^{held} holds the run of clsr opus100-o2m baseline on "
                                             rf"{tmp_path / 'corpus'}, not of clsr opus100-m2o baseline on "
                                             rf"{tmp_path / 'corpus'}: pass another --out \(one per experiment\)$"):
            train_runner.run_recipe("clsr", "opus100-m2o", ["baseline"], data, out, tiny=True, any_corpus=True,
                                    dry_run=dry_run)
    assert executed == ["baseline"]  # the o2m one only
    train_runner.run_recipe("clsr", "opus100-o2m", ["baseline"], data, out, tiny=True, any_corpus=True)  # its own


# ----------------------------------------------------------------------------- 2. analyses
def test_an_interrupted_or_failed_analysis_runs_again(tmp_path, monkeypatch):
    data = _recipe_corpus(tmp_path / "corpus")
    paper, exp, method = ep.lookup("clsr", "opus100-o2m", "clsr-p0.3")
    run = ep.plan_run(paper, exp, method, data_dir=data, out_dir=str(tmp_path / "runs"))
    os.makedirs(os.path.dirname(run.checkpoint), exist_ok=True)
    open(run.checkpoint, "w").close()
    for name in ("train", "average", "evaluate_run", "compare_all"):  # done: only the analysis is left
        monkeypatch.setattr(train_runner, name, lambda *a, **k: None)
    calls = []

    def gates(outcome):
        def gate_statistics(checkpoint, **kwargs):
            calls.append(checkpoint)
            if isinstance(outcome, BaseException):
                raise outcome
            return outcome
        return gate_statistics

    monkeypatch.setattr(clsr_gates, "gate_statistics", gates(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):  # Ctrl-C is an interruption, not a failure
        train_runner.execute(run, data, str(tmp_path / "runs"))
    monkeypatch.setattr(clsr_gates, "gate_statistics", gates(ValueError("no CLSR units")))
    with pytest.raises(ValueError, match="failed with exit code 2"):
        train_runner.execute(run, data, str(tmp_path / "runs"))
    stats = {"budget": 0.3, "variant": "clsr", "fixed_gates": False, "open_rate": 0.5, "sublayers": ["enc1.ffn"],
             "mean_gate": {"enc1.ffn": 0.5}}
    monkeypatch.setattr(clsr_gates, "gate_statistics", gates(stats))
    train_runner.execute(run, data, str(tmp_path / "runs"))
    assert len(calls) == 3
    assert json.loads((tmp_path / "runs" / "clsr-p0.3" / "gates" / "gates.json").read_text()) == stats
    train_runner.execute(run, data, str(tmp_path / "runs"))  # analysed this checkpoint already
    assert len(calls) == 3


def test_every_recipe_analysis_names_its_output():
    for paper in ep.PAPERS.values():
        for exp in paper.experiments:
            for method in exp.methods:
                for cmd in method.after:
                    assert cmd.split()[2] in train_runner.ANALYSIS_OUTPUTS, cmd


# ----------------------------------------------------------------------------- 3. outputs
def _results(path, bleu):
    path.write_text(json.dumps({"directions": {"en-xx": {"bleu": bleu, "chrf": 40.0, "train_size": 100,
                                                         "group": "low", "n": 3}}}))
    return str(path)


def test_compare_refuses_outputs_it_must_not_or_cannot_write(tmp_path, capsys):
    a, b = _results(tmp_path / "a.json", 10.0), _results(tmp_path / "b.json", 12.0)
    before = open(a).read()
    for flags, problem in ((["--out-json", a], f"--out-json {a} would overwrite an input"),
                           (["--out-md", b], f"--out-md {b} would overwrite an input"),
                           (["--out-md", str(tmp_path)], f"--out-md {tmp_path} is a directory"),
                           (["--out-json", str(tmp_path / "c"), "--out-md", str(tmp_path / "c")],
                            f"--out-md {tmp_path / 'c'} would overwrite")):
        assert langshare(["compare", f"base={a}", f"m={b}", "--baseline", "base", *flags]) == 2, flags
        captured = capsys.readouterr()
        assert problem in captured.err and captured.err.count("\n") == 1 and captured.out == "", captured.err
    assert open(a).read() == before and not (tmp_path / "c").exists()
    assert langshare(["compare", f"base={a}", f"m={b}", "--out-md", str(tmp_path / "c.md")]) == 0
    assert "| en-xx |" in (tmp_path / "c.md").read_text()


def test_head_to_head_outputs_are_checked_before_any_training(tmp_path):
    ok = dict(out_json=str(tmp_path / "h.json"), out_md=str(tmp_path / "results.md"), figure=str(tmp_path / "h.png"))
    head_to_head_report.check_outputs(**ok)
    head_to_head_report.check_outputs(**dict(ok, out_md=None, figure=None))
    for key, flag in (("out_json", "--out-json"), ("out_md", "--out-md"), ("figure", "--figure")):
        with pytest.raises(ValueError, match=f"^{flag} {tmp_path} is a directory; pass a file name$"):
            head_to_head_report.check_outputs(**dict(ok, **{key: str(tmp_path)}))
    with pytest.raises(ValueError, match="--figure .* would overwrite"):
        head_to_head_report.check_outputs(**dict(ok, figure=ok["out_json"]))
    # the head-to-head checks them before it plans any training (even a dry run)
    from fairseq_langshare.recipes.head_to_head import head_to_head

    with pytest.raises(ValueError, match="^--out-json .* is a directory"):
        head_to_head(dry_run=True, runs_dir=str(tmp_path / "runs"), **dict(ok, out_json=str(tmp_path)), stream=io.StringIO())


# ----------------------------------------------------------------------------- 4. Figure 6
def test_lsscore_ranks_languages_by_training_size(tmp_path, monkeypatch):
    gates = []
    for p in (0.1, 0.3):
        gates.append(str(tmp_path / f"g{p}.json"))
        with open(gates[-1], "w") as f:
            json.dump({"budget": p, "sublayers": ["enc1.ffn"], "mean_gate": {"enc1.ffn": p + .1},
                       "mean_gate_per_language": {"enc1.ffn": {"de": .2, "fr": .3, "zh": .4}}}, f)
    seen = []
    save = clsr_gates.save_figure_atomic

    def capture(fig, path):
        if "heatmap" in str(path):
            seen.append([t.get_text() for t in fig.axes[0].get_xticklabels()])
        return save(fig, path)

    monkeypatch.setattr(clsr_gates, "save_figure_atomic", capture)
    manifest = {"corpus": "opus100", "languages": ["de", "fr", "zh"],  # as prepare-corpus writes it
                "train_pairs_per_language": {"de": 1000, "fr": 1000000, "zh": 50000}}
    for m in (manifest, {"languages": ["zh", "de", "fr"]}):  # without sizes: the manifest's order
        (tmp_path / "manifest.json").write_text(json.dumps(m))
        assert langshare(["analyze", "clsr-lsscore", *gates, "--manifest", str(tmp_path / "manifest.json"),
                          "--out", str(tmp_path / "out")]) == 0
    assert seen == [["fr", "zh", "de"], ["zh", "de", "fr"]]


def test_a_missing_corpus_names_the_command_that_builds_it(tmp_path):
    """Was: `langshare prepare-corpus NAME --out ...`, NAME left for the user to guess, and no data source."""
    missing = tmp_path / "corpora" / "ted8-diverse"
    with pytest.raises(ValueError, match=rf"^{missing} is not a prepared corpus \(no manifest.json\): build it with "
                                         rf"`langshare prepare-corpus ted8-diverse --out {missing} --download` "
                                         r"\(or --mirror DIR: docs/recipes.md\), or pass --dry-run$"):
        train_runner.run_recipe("latent_depth", "diverse-o2m", ["baseline"], str(missing), str(tmp_path / "runs"),
                                tiny=True)


def test_the_train_scripts_read_relative_paths_from_the_callers_directory(tmp_path):
    """Was: train_common.sh changed into the repository first, so DATA_DIR=corpora meant the repo's corpora/ while
    the data_<corpus>.sh scripts had written the caller's ("corpora/ted8-related is not a prepared corpus")."""
    import subprocess
    import sys
    from pathlib import Path

    corpus = tmp_path / "corpora" / "ted8-related"
    corpus.mkdir(parents=True)
    (corpus / "manifest.json").write_text(json.dumps({"corpus": "ted8-related"}))
    (corpus / "langs.txt").write_text("en\nqq\nzz\n")
    (corpus / "lang_pairs.txt").write_text("en-qq,en-zz,qq-en,zz-en\n")
    script = Path(__file__).resolve().parents[1] / "scripts" / "recipes" / "train_latent_depth.sh"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "DRY_RUN": "1", "TINY": "1",
           "EXPERIMENTS": "related-o2m", "METHODS": "baseline", "DATA_DIR": "corpora", "OUT": "runs"}
    proc = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "--langs en,qq,zz" in proc.stdout and "en-qq,en-zz" in proc.stdout, proc.stdout[-2000:]


def test_a_corpus_of_no_recipe_is_refused_without_any_corpus(tmp_path, monkeypatch):
    """Was: a prepare-gettext corpus (no corpus name in its manifest) ran a TED experiment without a word."""
    data = _recipe_corpus(tmp_path / "corpus")
    with open(os.path.join(data, "manifest.json"), "w") as f:
        json.dump({"builder": "prepare-gettext"}, f)
    monkeypatch.setattr(train_runner, "execute", lambda run, *a: None)
    with pytest.raises(ValueError, match=r"is a corpus of no recipe \(prepare-gettext, prepare-data\) but "
                                         r"clsr/opus100-o2m trains on opus100: pass --data with `langshare "
                                         r"prepare-corpus opus100`'s output \(or --any-corpus\)$"):
        train_runner.run_recipe("clsr", "opus100-o2m", ["baseline"], data, str(tmp_path / "runs"), tiny=True)
    train_runner.run_recipe("clsr", "opus100-o2m", ["baseline"], data, str(tmp_path / "runs"), tiny=True,
                            any_corpus=True)


def test_a_batch_sized_for_other_devices_is_said(tmp_path, monkeypatch, caplog):
    """Was: --gpus 8 (the default) on a 1-device machine trained 1/8 of the paper's batch per update silently."""
    import logging

    data = _recipe_corpus(tmp_path / "corpus")
    monkeypatch.setattr(train_runner, "execute", lambda run, *a: None)
    monkeypatch.setattr(train_runner, "_devices", lambda: 1)
    with caplog.at_level(logging.WARNING):
        train_runner.run_recipe("clsr", "opus100-o2m", ["baseline"], data, str(tmp_path / "runs"), any_corpus=True)
        assert ("--gpus 8 sizes each update for 8 GPUs (the paper's batch), but this machine trains on 1 device(s): "
                "an update takes 1/8 of the paper's batch; pass --gpus 1 (a larger --update-freq)") in caplog.text
        caplog.clear()
        train_runner.run_recipe("clsr", "opus100-o2m", ["baseline"], data, str(tmp_path / "runs2"), any_corpus=True,
                                gpus=1)
        assert "sizes each update" not in caplog.text


def test_compare_says_when_its_runs_trained_for_different_updates(tmp_path):
    """Was: a baseline retrained with --max-update 60 sat beside a method of 2 updates, with a verdict and
    nothing saying so."""
    from fairseq_langshare.evaluation import _averages

    rows = {"en-de": {"train_size": 20000, "group": "high", "supervised": True, "bleu": 10.0, "chrf": 30.0,
                      "bleu_signature": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.4.0",
                      "chrf_signature": "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.4.0",
                      "spbleu": None, "spbleu_signature": None, "n": 20}}
    runs = tmp_path / "runs"
    for name, updates in (("baseline", 60), ("ll-d-12-24", 2)):
        _checkpoint(str(runs / name / "checkpoints"), updates)
        (runs / name / "results-test.json").write_text(json.dumps({"checkpoint": "x.pt", "directions": rows,
                                                                   "averages": _averages(rows)}))
    title, _, text = open(train_runner.compare_all(str(runs), "test", "baseline", ("bleu",))).read().partition("\n\n")
    assert title == train_runner.COMPARE_TITLE + "baseline, ll-d-12-24 (test set)"
    assert text.startswith("**Runs of different lengths** (updates trained: baseline 60, ll-d-12-24 2): a "
                           "difference between them is also one of training."), text[:300]
    _checkpoint(str(runs / "ll-d-12-24" / "checkpoints"), 60)
    assert "different lengths" not in open(train_runner.compare_all(str(runs), "test", "baseline", ("bleu",))).read()


def test_recipe_refuses_an_out_directory_holding_files_no_recipe_wrote(tmp_path, monkeypatch):
    """Was: `recipe run ... --out ~/notes` trained into ~/notes/baseline and wrote ~/notes/compare-test.md
    over the user's files of those names."""
    data, out = _recipe_corpus(tmp_path / "corpus"), tmp_path / "runs"
    executed = []
    monkeypatch.setattr(train_runner, "execute", lambda run, *a: executed.append(run.method.name))
    (out / "baseline").mkdir(parents=True)
    (out / "baseline" / "my-notes.txt").write_text("mine\n")
    for dry_run in (True, False):
        with pytest.raises(ValueError, match=rf"^--out {out} holds baseline, which no recipe run wrote: pass a new "
                                             r"or empty directory \(one per experiment\)$"):
            train_runner.run_recipe("clsr", "opus100-o2m", ["baseline"], data, str(out), tiny=True, any_corpus=True,
                                    dry_run=dry_run)
    (out / "baseline" / "my-notes.txt").unlink()
    (out / "compare-test.md").write_text("mine\n")
    with pytest.raises(ValueError, match=r"holds compare-test.md, which no recipe run wrote"):
        train_runner.run_recipe("clsr", "opus100-o2m", ["baseline"], data, str(out), tiny=True, any_corpus=True)
    assert (out / "compare-test.md").read_text() == "mine\n" and executed == []
    (out / "compare-test.md").unlink()
    runs = train_runner.run_recipe("clsr", "opus100-o2m", ["baseline"], data, str(out), tiny=True, any_corpus=True)
    train_runner.record_run(runs[0], data)  # what training writes first into a run directory
    train_runner.compare_all(str(out), "test", "baseline", ("bleu",))  # no results yet: nothing written
    (out / "compare-test.md").write_text(train_runner.COMPARE_TITLE + "an earlier comparison\n")
    train_runner.run_recipe("clsr", "opus100-o2m", ["baseline"], data, str(out), tiny=True, any_corpus=True)
    assert executed == ["baseline", "baseline"]  # its own run directory and comparison are taken up again


def test_dry_run_names_the_corpus_it_was_given(tmp_path):
    """Was: `--any-corpus` with a prepare-data corpus printed "# corpus DIR (opus100, ...)", the recipe's corpus."""
    data = _recipe_corpus(tmp_path / "corpus")
    with open(os.path.join(data, "manifest.json"), "w") as f:
        json.dump({"corpus": None}, f)  # prepare-data's own
    out = io.StringIO()
    train_runner.run_recipe("clsr", "opus100-o2m", ["baseline"], data, str(tmp_path / "runs"), tiny=True,
                            any_corpus=True, dry_run=True, stream=out)
    header = [line for line in out.getvalue().splitlines() if line.startswith("# corpus ")]
    assert header == [f"# corpus {data} (a corpus of no recipe, in place of the recipe's opus100; o2m directions); "
                      f"runs under {tmp_path / 'runs'}"]
    out = io.StringIO()
    with open(os.path.join(data, "manifest.json"), "w") as f:
        json.dump({"corpus": "opus100"}, f)
    train_runner.run_recipe("clsr", "opus100-o2m", ["baseline"], data, str(tmp_path / "runs"), tiny=True,
                            dry_run=True, stream=out)
    assert f"# corpus {data} (opus100; o2m directions); " in out.getvalue()


def test_the_recipe_console_leaves_fairseqs_config_dump_to_the_log():
    """Was: `recipe run` printed fairseq-train's whole configuration (`logger.info(cfg)`, one line of
    thousands of characters) on the console; it belongs in train.log only."""
    from omegaconf import OmegaConf

    def shown(name, msg, level=logging.INFO):
        return train_runner._ConsoleFilter().filter(logging.LogRecord(name, level, __file__, 1, msg, None, None))

    assert not shown("fairseq_cli.train", OmegaConf.create({"common": {"seed": 1}, "task": {"langs": "en,de"}}))
    assert shown("fairseq_cli.train", "training on 1 devices (GPUs/TPUs)")
    assert shown("train_inner", "epoch 001:     10 / 20 loss=9.1")
    assert shown("fairseq.trainer", "NOTE: gradient overflow detected", logging.WARNING)


def test_write_configs_into_a_file_is_one_line(tmp_path, capsys):
    """Was a NotADirectoryError traceback: the command line caught ValueError, FileNotFoundError and KeyError only."""
    (tmp_path / "f").write_text("x\n")
    assert langshare(["recipe", "write-configs", "--out", str(tmp_path / "f")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"langshare recipe write-configs: error: --out {tmp_path / 'f'} is a file; pass a directory (the recipes' yaml "
                   "files go under it)"]
    assert (tmp_path / "f").read_text() == "x\n"


def test_an_os_error_of_any_command_is_one_line(tmp_path, capsys, monkeypatch):
    """A disk, permission or path error the command meets (an OSError) is one line, exit 2, as bad input is."""
    from fairseq_langshare.recipes import experiments

    def denied(out, check=False):
        raise PermissionError(13, "Permission denied", os.path.join(out, "clsr"))

    monkeypatch.setattr(experiments, "write_configs", denied)
    assert langshare(["recipe", "write-configs", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"langshare recipe write-configs: error: [Errno 13] Permission denied: '{tmp_path / 'clsr'}'"]


def test_average_refuses_a_save_dir_and_inputs_together(tmp_path, capsys):
    """Was: SAVE_DIR silently ignored when --inputs was given too."""
    assert langshare(["recipe", "average", str(tmp_path), "--inputs", str(tmp_path / "a.pt"), "--out",
                      str(tmp_path / "avg.pt")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"langshare recipe average: error: give SAVE_DIR {tmp_path} (with --last N) or --inputs CHECKPOINT ..., not both"]


def test_average_refuses_last_with_inputs(tmp_path, capsys):
    """Was: --last silently ignored when --inputs named the checkpoints (every one was averaged)."""
    assert langshare(["recipe", "average", "--inputs", str(tmp_path / "a.pt"), str(tmp_path / "b.pt"), "--last", "1",
                      "--out", str(tmp_path / "avg.pt")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "langshare recipe average: error: --last 1 picks the newest checkpoints of SAVE_DIR; with --inputs, list only the "
        "checkpoints to average"]
    assert not (tmp_path / "avg.pt").exists()
