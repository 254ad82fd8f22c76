"""``langshare translate`` on input a user gets wrong (the second bad-input sweep): bytes that are not UTF-8 in
an ``--input`` file (refused before the model loads, naming line, byte and fix) or on stdin (replaced, with a
warning naming the line; one output line per input line), and Ctrl-C while the command is still starting."""

import io
import logging
import sys

import pytest

from cli_checks import BIN, cli_run, langshare
from fairseq_langshare.deploy import translate


class EchoTranslator:
    """Stands in for a CTranslate2 export: 'translates' a line into itself, upper-cased."""

    def __init__(self, model_dir, device="cpu", threads=1):
        pass

    def translate(self, lines, progress=None, **kwargs):
        if progress is not None:
            progress.update(len(lines))
        return [line.upper() for line in lines]


def fake_export(tmp_path):
    """A directory with the manifest of a CTranslate2 export (translate checks it before reading stdin)."""
    export = tmp_path / "export"
    export.mkdir(exist_ok=True)
    (export / "langshare.json").write_text('{"format": "langshare-ctranslate2", "files": ["model.bin", "spm.model"]}')
    for name in ("model.bin", "spm.model"):  # present: translate refuses an export missing a file it lists
        (export / name).touch()
    return export


@pytest.fixture
def echo(monkeypatch):
    monkeypatch.setattr(translate, "PairTranslator", EchoTranslator)


def test_a_non_utf8_input_file_is_refused_before_the_model_loads(tmp_path, capsys, monkeypatch):
    """Was: UnicodeDecodeError with neither the file, the line nor a fix."""
    def no_model(*args, **kwargs):
        raise AssertionError("loaded the model before reading the input")

    monkeypatch.setattr(translate, "PairTranslator", no_model)
    source = tmp_path / "in.txt"
    source.write_bytes(b"cat dog\nred \xff tree\n")
    code, line = langshare(capsys, "translate", fake_export(tmp_path), "--input", source)
    assert (code, line) == (2, f"langshare translate: error: --input {source}: line 2 is not valid UTF-8 (byte 0xff "
                               f"at column 5); convert it with `iconv -c -f utf-8 -t utf-8 {source} > {source}.utf8` "
                               "or pipe it to stdin, where invalid bytes are replaced"), line


def test_an_empty_input_path_is_refused_not_read_as_stdin(tmp_path, capsys, monkeypatch, echo):
    """``--input "$FILE"`` with FILE unset: was stdin read instead (at a terminal, the command waited)."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"cat dog\n"), encoding="utf-8"))
    code, line = langshare(capsys, "translate", fake_export(tmp_path), "--input", "")
    assert (code, line) == (2, "langshare translate: error: --input '' names no file: pass a text file, or - for "
                               "stdin"), line


@pytest.mark.parametrize("errors", ["surrogateescape", "strict"])
def test_non_utf8_lines_on_stdin_are_replaced_with_a_warning(tmp_path, capsys, monkeypatch, echo, caplog, errors):
    """Was: a sentencepiece cast traceback (stdin decoded with surrogateescape, as under a C locale), or a
    UnicodeDecodeError (strict)."""
    stdin = io.TextIOWrapper(io.BytesIO(b"cat dog\nred \xff tree\nbig house\n"), encoding="utf-8", errors=errors)
    monkeypatch.setattr(sys, "stdin", stdin)
    from fairseq_langshare import cli

    capsys.readouterr()
    with caplog.at_level(logging.WARNING):
        assert cli.main(["translate", str(fake_export(tmp_path)), "--quiet"]) == 0
    assert capsys.readouterr().out.splitlines() == ["CAT DOG", "RED \ufffd TREE", "BIG HOUSE"]
    assert "input line 2 is not valid UTF-8: its invalid bytes were replaced by U+FFFD" in caplog.text


def test_max_len_b_zero_with_max_len_a_zero_is_refused(tmp_path, capsys, echo):
    (tmp_path / "in.txt").write_text("cat dog\n")
    code, line = langshare(capsys, "translate", fake_export(tmp_path), "--input", tmp_path / "in.txt", "--max-len-a", "0",
                           "--max-len-b", "0")
    assert (code, line) == (2, "langshare translate: error: --max-len-a 0 with --max-len-b 0 leaves no target token: "
                               "pass --max-len-b 1 or more (fairseq-generate's default is 200)"), line


def test_ctrl_c_while_langshare_starts_is_one_line(tmp_path):
    """A Ctrl-C while the command imports fairseq (the first seconds of every run, after torch) was a traceback
    through the import machinery. (One during CTranslate2's import, inside the subcommand, is cli's one line.)"""
    module = "fairseq"
    hook = tmp_path / "sitecustomize.py"
    hook.write_text(
        "import sys\n"
        "class Interrupt:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name == {module!r}:\n"
        "            raise KeyboardInterrupt\n"
        "sys.meta_path.insert(0, Interrupt())\n")
    (tmp_path / "export").mkdir()
    (tmp_path / "in.txt").write_text("cat dog\n")
    import os

    code, out, err = cli_run([BIN / "langshare", "translate", tmp_path / "export", "--input", tmp_path / "in.txt"],
                             env={"PYTHONPATH": os.pathsep.join([str(tmp_path)] + sys.path)})
    assert code == 130, err[-2000:]
    assert "Traceback" not in err, err[-2000:]
    assert err.strip().splitlines()[-1] == "langshare translate: interrupted (Ctrl-C) while starting; nothing was done"
