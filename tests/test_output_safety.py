"""Outputs never replace what a user has (the second bad-input sweep): ``evaluate --out-md/--out-json`` is
checked against every file of the corpus and of the checkpoint's directory, ``analyze --out`` must be a
directory, and a disk that fills while ``evaluate`` writes still shows the results it computed."""

import errno
import json
from pathlib import Path

import pytest

from cli_checks import langshare, snapshot
from fairseq_langshare import evaluation


@pytest.fixture
def no_decoding(monkeypatch):
    """Refusals must come before any decoding."""
    def fail(*args, **kwargs):
        raise AssertionError("decoded before refusing")
    monkeypatch.setattr(evaluation, "_translate", fail)


@pytest.fixture
def fake_decoding(monkeypatch):
    """Hypotheses without fairseq-generate: each reference itself (the writes are what is tested)."""
    def translate(argv, results_dir, split, expected):
        src, tgt = argv[argv.index("-s") + 1], argv[argv.index("-t") + 1]
        refs = Path(argv[0]).parent / "raw" / f"{split}.{src}-{tgt}.{tgt}"
        return refs.read_text(encoding="utf-8").splitlines()[:expected], 0
    monkeypatch.setattr(evaluation, "_translate", translate)


@pytest.fixture
def run_copy(run, tmp_path):
    import shutil

    shutil.copytree(run, tmp_path / "ckpt")
    (tmp_path / "ckpt" / "train.log").write_text("the training log\n")
    return tmp_path / "ckpt"


@pytest.mark.parametrize("flag,target", [
    ("--out-md", "raw/test.en-xx.xx"),  # the reference it scores against
    ("--out-json", "manifest.json"),
    ("--out-md", "spm.model"),
    ("--out-json", "bin/dict.en.txt"),
    ("--out-md", "CKPT/checkpoint_1_2.pt"),  # a checkpoint of the run, not the one evaluated
    ("--out-json", "CKPT/train.log"),
])
def test_evaluate_never_writes_over_a_corpus_or_run_file(run_copy, eval_corpus, tmp_path, capsys, no_decoding, flag,
                                                        target):
    """Was: exit 0, the file replaced by a markdown table or the results JSON."""
    (eval_corpus / "spm.model").write_bytes(b"\x0a\x05model")
    path = run_copy / target[5:] if target.startswith("CKPT/") else eval_corpus / target
    before = snapshot(tmp_path)
    code, line = langshare(capsys, "evaluate", run_copy / "checkpoint_last.pt", eval_corpus, "--directions", "en-xx",
                           flag, path)
    owner = "run" if target.startswith("CKPT/") else "corpus"
    where = run_copy if owner == "run" else eval_corpus
    assert (code, line) == (2, f"langshare evaluate: error: {flag} {path} would replace a file of the {owner} "
                               f"{where} that evaluate did not write; write to another path"), line
    assert snapshot(tmp_path) == before


def test_evaluate_writes_beside_the_run_and_replaces_its_own_results(run_copy, eval_corpus, capsys, fake_decoding):
    out_json, out_md = run_copy / "results.json", run_copy / "results.md"
    for _ in range(2):  # the second run replaces what the first one wrote
        code, line = langshare(capsys, "evaluate", run_copy / "checkpoint_last.pt", eval_corpus, "--directions",
                               "en-xx", "--out-json", out_json, "--out-md", out_md)
        assert code == 0, line
    assert json.loads(out_json.read_text())["directions"]["en-xx"]["bleu"] == pytest.approx(100.0)
    assert "| en-xx |" in out_md.read_text()


def test_a_full_disk_while_evaluate_writes_prints_the_results_first(run, eval_corpus, tmp_path, capsys,
                                                                    fake_decoding, monkeypatch):
    """Was: everything decoded, then a traceback; nothing written and nothing printed."""
    from fairseq_langshare.atomic_files import write_files_atomic

    def full_disk(tmp, text):
        tmp.write_text(text[: len(text) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(evaluation, "write_files_atomic", lambda writers: write_files_atomic(
        {path: (lambda tmp, text=text: full_disk(tmp, text)) for path, text in writers.items()}))
    out_json = tmp_path / "out" / "r.json"
    out_json.parent.mkdir()
    capsys.readouterr()
    from fairseq_langshare import cli

    with pytest.raises(SystemExit) as exit_:
        cli.main(["evaluate", str(run / "checkpoint_last.pt"), str(eval_corpus), "--directions", "en-xx",
                  "--out-json", str(out_json)])
    code, captured = exit_.value.code, capsys.readouterr()
    assert code == 2
    assert "| en-xx |" in captured.out  # the table, on stdout, before the error
    assert captured.err.strip().splitlines()[-1] == (
        f"langshare evaluate: error: cannot write --out-json {out_json}: No space left on device; the results are "
        "printed above: free some space and evaluate again")
    assert list((tmp_path / "out").iterdir()) == []  # no temporary file left


@pytest.mark.parametrize("method", ["latent-depth", "adaptive-sparse", "clsr", "clsr-lsscore", "lsl", "lsl-similarity"])
def test_analyze_out_onto_a_file_is_one_line(run, tmp_path, capsys, method):
    """Was a traceback (FileExistsError from the directory it makes) after the analysis ran; now refused first."""
    gates = tmp_path / "gates.json"  # what `analyze clsr` writes: clsr-lsscore runs without a model
    gates.write_text(json.dumps({"budget": 0.3, "sublayers": ["enc1.ffn"], "mean_gate": {"enc1.ffn": 0.5},
                                 "mean_gate_per_language": {"enc1.ffn": {"xx": 0.5}}}))
    out = tmp_path / "notes.txt"
    out.write_text("mine\n")
    given = gates if method == "clsr-lsscore" else run / "checkpoint_last.pt"
    code, line = langshare(capsys, "analyze", method, given, "--out", out)
    assert (code, line) == (2, f"langshare analyze {method}: error: --out {out} is a file; pass a directory (the analysis "
                               "writes several files into it)"), line
    assert out.read_text() == "mine\n"


@pytest.mark.parametrize("held", ["another run's checkpoint", "results of another checkpoint",
                                  "table of another checkpoint", "a compare output"])
def test_evaluate_replaces_no_file_it_did_not_write_anywhere(run, eval_corpus, tmp_path, capsys, no_decoding, held):
    """Was: outside the evaluated run and the corpus, --out-json/--out-md replaced anything: another run's
    checkpoint became a results JSON."""
    other = tmp_path / "other_run"
    other.mkdir()
    flag, path, kind = {
        "another run's checkpoint": ("--out-json", other / "checkpoint_last.pt", "a file evaluate did not write"),
        "results of another checkpoint": ("--out-json", other / "results.json",
                                          f"the results of another checkpoint ({other / 'checkpoint_last.pt'})"),
        "table of another checkpoint": ("--out-md", other / "results.md",
                                        f"the results of another checkpoint ({other / 'checkpoint_last.pt'})"),
        "a compare output": ("--out-json", other / "cmp.json", "a `langshare compare` output (--out-json)"),
    }[held]
    (other / "checkpoint_last.pt").write_bytes(b"PK\x03\x04weights")
    (other / "results.json").write_text(json.dumps({"checkpoint": str(other / "checkpoint_last.pt"),
                                                    "directions": {"en-xx": {"bleu": 1.0}}}))
    (other / "results.md").write_text(f"Checkpoint `{other / 'checkpoint_last.pt'}` on `c` (test, beam 5, lenpen 1)\n")
    (other / "cmp.json").write_text(json.dumps({"systems": {}, "metrics": ["bleu"]}))
    before = snapshot(tmp_path)
    code, line = langshare(capsys, "evaluate", run / "checkpoint_last.pt", eval_corpus, "--directions", "en-xx",
                           flag, path)
    assert (code, line) == (2, f"langshare evaluate: error: {flag} {path} holds {kind}, which evaluate would replace; "
                               "write to another path or move it away"), line
    assert snapshot(tmp_path) == before


def test_evaluate_replaces_its_own_results_of_the_checkpoint_anywhere(run, eval_corpus, tmp_path, capsys,
                                                                      fake_decoding):
    out_json, out_md = tmp_path / "results" / "r.json", tmp_path / "results" / "r.md"
    out_json.parent.mkdir()
    (tmp_path / "results" / "empty.json").write_text("")  # nothing to lose
    for target in (out_json, out_json, tmp_path / "results" / "empty.json"):
        code, line = langshare(capsys, "evaluate", run / "checkpoint_last.pt", eval_corpus, "--directions", "en-xx",
                               "--out-json", target, "--out-md", out_md)
        assert code == 0, line


@pytest.mark.parametrize("value", ["", ",", " , "])
def test_evaluate_names_an_empty_directions_list(run, eval_corpus, capsys, no_decoding, value):
    """Was: IndexError: list index out of range."""
    code, line = langshare(capsys, "evaluate", run / "checkpoint_last.pt", eval_corpus, f"--directions={value}")
    assert (code, line) == (2, f"langshare evaluate: error: --directions {value!r} names no direction: write "
                               "directions as SRC-TGT, comma-separated, e.g. en-fr,en-de"), line


def test_evaluate_names_a_checkpoint_directory(run, eval_corpus, capsys, no_decoding):
    """Was: "checkpoint not found: DIR", which it is not."""
    code, line = langshare(capsys, "evaluate", run, eval_corpus)
    assert (code, line) == (2, f"langshare evaluate: error: checkpoint {run} is a directory; pass a checkpoint file, "
                               f"e.g. {run / 'checkpoint_last.pt'}"), line


def test_evaluate_refuses_a_baseline_scored_with_another_bleu_tokenization(run, eval_corpus, tmp_path, capsys,
                                                                           no_decoding):
    """Was: the win ratio compared intl BLEU with the baseline's 13a BLEU, and the significance test re-scored
    the baseline in intl, without a word (compare refuses the same pair)."""
    baseline = tmp_path / "base.json"
    signature = "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.4.0"
    baseline.write_text(json.dumps({"checkpoint": "b.pt", "directions": {"en-xx": {"bleu": 1.0,
                                                                                  "bleu_signature": signature}}}))
    code, line = langshare(capsys, "evaluate", run / "checkpoint_last.pt", eval_corpus, "--directions", "en-xx",
                           "--bleu-tokenize", "intl", "--baseline", baseline)
    assert code == 2
    assert line.startswith(f"langshare evaluate: error: direction en-xx: the baseline {baseline} was scored with BLEU "
                           "signature nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp, and this evaluation would use "
                           "nrefs:1|case:mixed|eff:no|tok:intl|smooth:exp; pass --bleu-tokenize auto, or evaluate the "
                           "baseline again with --bleu-tokenize intl"), line


def test_evaluate_names_a_compare_output_given_as_baseline(run, eval_corpus, tmp_path, capsys, no_decoding):
    """Was: "the baseline shares no direction with a bleu score with this run (...; baseline: none)"."""
    cmp = tmp_path / "cmp.json"
    cmp.write_text(json.dumps({"systems": {"a": {}}, "metrics": ["bleu"], "directions": {}}))
    code, line = langshare(capsys, "evaluate", run / "checkpoint_last.pt", eval_corpus, "--directions", "en-xx",
                           "--baseline", cmp)
    assert (code, line) == (2, f"langshare evaluate: error: --baseline {cmp} is a `langshare compare` output "
                               "(--out-json), not a run's results: pass the --out-json that `langshare evaluate` "
                               "wrote for the baseline"), line


def test_evaluate_prints_the_verdict_against_its_baseline(run, eval_corpus, tmp_path, capsys, fake_decoding):
    """Was: the printed and markdown tables showed delta and p, but not the verdict the JSON holds."""
    base = tmp_path / "base.json"
    assert langshare(capsys, "evaluate", run / "checkpoint_last.pt", eval_corpus, "--directions", "en-xx,en-yy",
                     "--out-json", base)[0] == 0
    code, line = langshare(capsys, "evaluate", run / "checkpoint_last.pt", eval_corpus, "--directions", "en-xx,en-yy",
                           "--baseline", base, "--out-md", tmp_path / "r.md")
    assert code == 0, line
    table = (tmp_path / "r.md").read_text()
    assert "| direction | BLEU verdict | BLEU delta | p | 95% CI | chrF verdict | chrF delta | p | 95% CI |" in table
    rows = [l for l in table.splitlines() if l.startswith(("| en-xx |", "| en-yy |", "| all (pooled) |"))
            and "level" in l]
    assert len(rows) == 3, table  # the same hypotheses as the baseline's: level everywhere


@pytest.mark.parametrize("kind", ["link", "dangling link", "fifo"])
def test_evaluate_never_replaces_a_link_or_a_fifo_given_as_output(run, eval_corpus, tmp_path, capsys, no_decoding,
                                                                   kind):
    """Was: every output but export's was written by a rename over the path, so a symbolic link given as
    --out-json (to the results the user keeps elsewhere) became a regular file and the file it pointed to kept
    the old results, exit 0; a FIFO was replaced the same way. Now refused before decoding, as export does."""
    import os

    out = tmp_path / "r.json"
    if kind == "fifo":
        os.mkfifo(out)
        expected = f"--out-json {out} exists and is no regular file (a FIFO); write to another path"
    else:
        target = tmp_path / "kept" / "r.json"
        if kind == "link":
            target.parent.mkdir()
            target.write_text("")
        out.symlink_to(target)
        expected = (f"--out-json {out} is a symbolic link (to {target}), which evaluate would replace by a file; "
                    "pass the file it points to, or another path")
    before = snapshot(tmp_path)
    code, line = langshare(capsys, "evaluate", run / "checkpoint_last.pt", eval_corpus, "--directions", "en-xx",
                           "--out-json", out)
    assert (code, line) == (2, f"langshare evaluate: error: {expected}"), line
    assert out.is_fifo() if kind == "fifo" else out.is_symlink()
    assert snapshot(tmp_path) == before
