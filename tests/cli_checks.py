"""What the bad-input tests share: running ``langshare`` and fairseq's CLIs the way a user does and reading the
one line they answer; a snapshot of a directory to show nothing was written or half-written."""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
TRAIN = ["--arch", "langshare_transformer_tiny", "--criterion", "langshare_label_smoothed_cross_entropy",
         "--optimizer", "adam", "--lr", "0.005", "--max-tokens", "1000", "--cpu", "--num-workers", "0", "--seed", "1",
         "--disable-validation", "--no-epoch-checkpoints", "--log-format", "json"]
GEN = ["--gen-subset", "test", "-s", "en", "-t", "xx", "--beam", "2", "--cpu", "--max-tokens", "1000"]


def last_line(text):
    lines = [l for l in text.replace("\r", "\n").splitlines() if l.strip()]
    return lines[-1] if lines else ""


def langshare(capsys, *argv):
    """`langshare ARGV` in process: (exit status, last line of stderr)."""
    from fairseq_langshare import cli

    capsys.readouterr()
    try:
        code = cli.main([str(a) for a in argv])
    except SystemExit as exit_:
        code = exit_.code
    return code, last_line(capsys.readouterr().err)


def fairseq_error(entry, *args, prog="fairseq-train"):
    """Run a fairseq CLI in process; return the line its excepthook prints for the failure."""
    with pytest.raises(BaseException) as info:
        entry(*args)
    from fairseq_langshare.user_errors import error_line

    line = error_line(info.value, prog)
    assert line is not None, f"a traceback, not one line: {info.value!r}"
    assert "\n" not in line
    return line


def snapshot(directory):
    """Names, sizes and hashes of the files under ``directory``: nothing written, nothing half-written."""
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(Path(directory).rglob("*")) if p.is_file()}


def cli_run(argv, stdin=None, env=None):
    proc = subprocess.run([str(a) for a in argv], input=stdin, capture_output=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})
    return proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")
