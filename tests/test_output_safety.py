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
    assert (code, line) == (2, f"langshare analyze: error: --out {out} is a file; pass a directory (the analysis "
                               "writes several files into it)"), line
    assert out.read_text() == "mine\n"
