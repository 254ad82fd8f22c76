"""The head-to-head's record: one compressed JSON per finished run, written as soon as the run is
evaluated, so that a lost machine loses only the runs still training (docs/head_to_head.md,
"The record").

``RECORD/<direction>/<model>/seed<k>.json.gz`` holds everything the report needs and nothing it
would have to recompute from a checkpoint: the evaluation (scores and every hypothesis), the
parameters and inference cost measured on the trained checkpoint, the model's and the training's
flags, the validation loss, the package commit, the machine and the wall time.
``RECORD/<direction>/references.json.gz`` holds the reference lines every run of the direction was
scored against (with their sha256), so the significance tests can be redone where the corpus is
not (``langshare head-to-head --report-only``). The files are gzip with a zero timestamp: the same
content gives the same bytes.

``RECORD/<direction>/<model>/seed<k>.train.log.gz`` is the run's fairseq-train log, which the
training time is read from (summed over the processes that trained the run).
``RECORD/<direction>/language_id.json`` (optional) is the language identifier's measurement on the
corpus's references, from which the report gives runs evaluated without an off-target rate theirs.

Writers: ``dump``, ``dump_log``, ``write_references``, ``provenance``, ``last_validation``; a run's record is
assembled by ``head_to_head_runs.record_run``, which knows the runs (this module imports none of
the head-to-head's). Readers: ``read`` (every run), ``read_references`` (checked by sha256) and
``committed_date`` (the record is dated by its commits, so that a report made from it again is the
same to the byte).
"""

import datetime
import gzip
import hashlib
import io
import json
import os
import platform
import re
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Dict, Optional

from ..atomic_files import write_atomic

RECORD_DIR = "docs/results/head_to_head"
FORMAT = 1


def run_path(record_dir: str, direction: str, model: str, seed: int) -> str:
    return os.path.join(record_dir, direction, model, f"seed{seed}.json.gz")


def log_path(record_dir: str, direction: str, model: str, seed: int) -> str:
    """The run's fairseq-train log beside its record (gzip), where the training time is read from."""
    return os.path.join(record_dir, direction, model, f"seed{seed}.train.log.gz")


def references_path(record_dir: str, direction: str) -> str:
    return os.path.join(record_dir, direction, "references.json.gz")


def language_id_path(record_dir: str, direction: str) -> str:
    """The language identifier measured on the references of the direction's corpus
    (``langshare off-target CORPUS --out-json``), for runs evaluated before ``langshare evaluate``
    measured the off-target rate: the report computes theirs from their recorded hypotheses."""
    return os.path.join(record_dir, direction, "language_id.json")


def _write_gzip(path: str, text: str) -> None:
    """``text`` gzip-compressed with a zero timestamp (the same text gives the same bytes), written atomically."""
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0, filename="") as gz:
        gz.write(text.encode("utf-8"))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    write_atomic(path, lambda tmp: Path(tmp).write_bytes(buffer.getvalue()))


def dump(path: str, data: Dict) -> None:
    """``data`` as gzip-compressed JSON (sorted keys, zero timestamp), written atomically."""
    _write_gzip(path, json.dumps(data, ensure_ascii=False, sort_keys=True, indent=None))


def dump_log(path: str, text: str) -> None:
    """A run's fairseq-train log, gzip with a zero timestamp, written atomically."""
    _write_gzip(path, text)


def load(path: str) -> Dict:
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError, EOFError, zlib.error) as error:  # EOFError, zlib.error: a truncated or damaged gzip
        raise ValueError(f"head-to-head record {path} cannot be read ({error}); restore it from git") from None


def _git(*args) -> Optional[str]:
    """git's output, run in the package's folder; None where it fails (no git, no checkout)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        return subprocess.run(["git", *args], cwd=package, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def provenance() -> Dict:
    """The package commit (and whether the tree had uncommitted changes), the machine, the versions."""
    import fairseq
    import sacrebleu
    import torch

    # (git runs in the package's folder) a package that is no file of a checkout (pip-installed, maybe into the
    # venv of another repository) has no commit
    checkout = bool(_git("ls-files", "--", "__init__.py"))
    status = _git("status", "--porcelain", "--untracked-files=no", "--", ".") if checkout else None
    return {"package_commit": _git("rev-parse", "HEAD") if checkout else None,
            "package_dirty": bool(status) if status is not None else None,
            "machine": {"cpu": _cpu(), "cores": os.cpu_count(), "system": platform.platform()},
            "python": sys.version.split()[0], "torch": torch.__version__, "fairseq": fairseq.__version__,
            "sacrebleu": sacrebleu.__version__}


# what fairseq-train's trainer logs once per process, as its training starts (a run's log holds one per process that
# trained it: a resumed run appends to it)
_START_LINES = ("| fairseq.trainer | No existing checkpoint found", "| fairseq.trainer | Loaded checkpoint")
_CLOCK = "%Y-%m-%d %H:%M:%S"  # fairseq's log lines start with it


def _logged_stats(log_path: str):
    """(logger, stats, time) for every line fairseq logged its statistics on in json format
    (``DATE | INFO | train_inner | {"epoch": ...}``), and (``None``, {}, time) where a training
    process started (the trainer's checkpoint line), in order; time: the line's clock, a datetime
    (None when it has none). Nothing for a missing log."""
    if not os.path.isfile(log_path):
        return
    opener = gzip.open if log_path.endswith(".gz") else open
    with opener(log_path, "rt", encoding="utf-8", errors="replace") as f:
        try:
            for line in f:
                start = line.find('{"epoch"')
                if start < 0 and not any(marker in line for marker in _START_LINES):
                    continue
                try:
                    clock = datetime.datetime.strptime(line[:19], _CLOCK)
                except ValueError:
                    clock = None
                if start < 0:
                    yield None, {}, clock
                    continue
                try:
                    stats = json.loads(line[start:])
                except ValueError:
                    continue
                fields = line[:start].split(" | ")
                yield (fields[2].strip() if len(fields) > 2 else ""), stats, clock
        except (OSError, EOFError, zlib.error) as error:  # a truncated or damaged gzip
            raise ValueError(f"training log {log_path} cannot be read ({error}); restore it from git") from None


def last_validation(log_path: str) -> Optional[Dict]:
    """The last validation line fairseq logged in json format (loss, nll_loss, ppl at num_updates)."""
    last = None
    for _, stats, _ in _logged_stats(log_path):
        if "valid_loss" in stats:
            last = {k[len("valid_"):]: float(v) for k, v in stats.items()
                    if k in ("valid_loss", "valid_nll_loss", "valid_ppl", "valid_num_updates")}
    return last


def training_seconds(log_path: str) -> Optional[float]:
    """Seconds of training in a run's fairseq-train log, summed over the processes that trained it:
    each from its trainer's checkpoint line to its last statistics line, by the log's clock. (fairseq's
    own wall meter restarts with a process resumed at an epoch's end and stays at 0 in one resumed in
    mid-epoch.) What a killed process ran after its last statistics line is not counted; None when
    no statistics were logged."""
    total, started, last = 0.0, None, None
    for logger, _, clock in _logged_stats(log_path):
        if clock is None:
            continue
        if logger is None:  # a process starts: the previous one's time is in
            total += (last - started).total_seconds() if started and last else 0.0
            started, last = clock, None
        else:
            started, last = started or clock, clock
    if started is None or (last is None and total == 0.0):
        return None
    return total + ((last - started).total_seconds() if last else 0.0)


def _sha256_lines(lines) -> str:
    return hashlib.sha256("".join(line + "\n" for line in lines).encode("utf-8")).hexdigest()


def write_references(record_dir: str, direction: str, results: Dict) -> None:
    """Add the reference lines of ``results`` to the direction's references file (checked by sha256:
    a run scored against other references than the record's is refused)."""
    from ..evaluation import read_references

    path = references_path(record_dir, direction)
    refs = load(path) if os.path.isfile(path) else {}
    changed = False
    for pair, identity in sorted(results["references"].items()):
        if pair in refs:
            if refs[pair]["sha256"] != identity["sha256"]:
                raise ValueError(f"{pair}: this run was scored against other references (sha256 "
                                 f"{identity['sha256'][:12]}...) than the record's ({refs[pair]['sha256'][:12]}...) "
                                 f"in {path}; use the corpus the record was made on")
            continue
        refs[pair] = {"sha256": identity["sha256"], "lines": read_references(results, pair)}
        changed = True
    if changed:
        dump(path, refs)


# ----------------------------------------------------------------------------- reading the record
RUN_FILE = re.compile(r"seed(\d+)\.json\.gz")


def read(record_dir: str) -> Dict[str, Dict[str, Dict[int, Dict]]]:
    """Every run of the record, {direction: {model: {seed: record}}} (sorted); a file whose content
    names another direction, model or seed than its path is refused. A run whose fairseq-train log is
    committed beside it (``log_path``) gets its training time from that log (``training_seconds``):
    records of packages before 33825a2 hold their own process's time only, 0 s for a run trained
    before a restart."""
    if not os.path.isdir(record_dir):
        raise ValueError(f"no head-to-head record in {record_dir}: pass the --record-dir the runs were recorded in "
                         f"(the head-to-head of record: {RECORD_DIR})")
    out = {}
    for direction in sorted(os.listdir(record_dir)):
        if not os.path.isdir(os.path.join(record_dir, direction)):
            continue
        for model in sorted(os.listdir(os.path.join(record_dir, direction))):
            folder = os.path.join(record_dir, direction, model)
            if not os.path.isdir(folder):
                continue
            for name in os.listdir(folder):
                match = RUN_FILE.fullmatch(name)
                if not match:
                    continue
                path, seed = os.path.join(folder, name), int(match.group(1))
                record = load(path)
                if (record.get("direction"), record.get("model"), record.get("seed")) != (direction, model, seed):
                    raise ValueError(f"{path} holds the run {record.get('direction')}/{record.get('model')}/seed"
                                     f"{record.get('seed')}, not the one its path names; restore it from git")
                logged = training_seconds(log_path(record_dir, direction, model, seed))
                if logged is not None:
                    record["wall_seconds"] = {**record["wall_seconds"], "train": round(logged, 1)}
                record["training_time_from_log"] = logged is not None  # (read, not stored)
                out.setdefault(direction, {}).setdefault(model, {})[seed] = record
    return {d: {m: dict(sorted(seeds.items())) for m, seeds in models.items()} for d, models in out.items()}


def read_references(record_dir: str, direction: str) -> Dict[str, Dict]:
    """{pair: {"sha256", "lines"}} of the direction's references file, each checked against its sha256."""
    path = references_path(record_dir, direction)
    if not os.path.isfile(path):
        raise ValueError(f"{path} is missing: the record's runs of {direction} cannot be tested without the "
                         f"references they were scored against; restore it from git")
    refs = load(path)
    for pair, entry in refs.items():
        if _sha256_lines(entry["lines"]) != entry["sha256"]:
            raise ValueError(f"{path}: the reference lines of {pair} do not match their sha256; restore it from git")
    return refs


def committed_date(paths) -> Optional[str]:
    """The date (YYYY-MM-DD, the committer's) of the newest commit that added or changed one of
    ``paths``, when every one of them is committed as it is; None when one is not (or git is not
    there). A shallow clone, which would date them by its one commit, is refused."""
    paths = [os.path.abspath(p) for p in paths]
    if not paths:
        return None
    cwd = os.path.dirname(paths[0])

    def git(*args):
        try:
            return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError):
            return None

    tracked = git("ls-files", "--full-name", "--", *paths)
    if tracked is None or len(tracked.splitlines()) != len(set(paths)):
        return None
    if git("diff", "--quiet", "HEAD", "--", *paths) is None:  # changed since the last commit
        return None
    if (git("rev-parse", "--is-shallow-repository") or "").strip() == "true":
        raise ValueError("the head-to-head record is dated by its commits, and this clone is shallow (it dates every "
                         "file by its one commit): run `git fetch --unshallow` first")
    date = (git("log", "-1", "--format=%cs", "--", *paths) or "").strip()
    return date or None
