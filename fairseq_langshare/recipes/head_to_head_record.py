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
"""

import gzip
import hashlib
import io
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Dict, Optional

from ..atomic_files import write_atomic

RECORD_DIR = "docs/results/head_to_head"
FORMAT = 1


def run_path(record_dir: str, direction: str, model: str, seed: int) -> str:
    return os.path.join(record_dir, direction, model, f"seed{seed}.json.gz")


def references_path(record_dir: str, direction: str) -> str:
    return os.path.join(record_dir, direction, "references.json.gz")


def dump(path: str, data: Dict) -> None:
    """``data`` as gzip-compressed JSON (sorted keys, zero timestamp), written atomically."""
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0, filename="") as gz:
        gz.write(json.dumps(data, ensure_ascii=False, sort_keys=True, indent=None).encode("utf-8"))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    write_atomic(path, lambda tmp: Path(tmp).write_bytes(buffer.getvalue()))


def load(path: str) -> Dict:
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as error:
        raise ValueError(f"head-to-head record {path} cannot be read ({error}); restore it from git") from None


def _git(*args) -> Optional[str]:
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

    status = _git("status", "--porcelain", "--untracked-files=no", "--", "fairseq_langshare")
    return {"package_commit": _git("rev-parse", "HEAD"), "package_dirty": bool(status) if status is not None else None,
            "machine": {"cpu": _cpu(), "cores": os.cpu_count(), "system": platform.platform()},
            "python": sys.version.split()[0], "torch": torch.__version__, "fairseq": fairseq.__version__,
            "sacrebleu": sacrebleu.__version__}


def last_validation(log_path: str) -> Optional[Dict]:
    """The last validation line fairseq logged in json format (loss, nll_loss, ppl at num_updates)."""
    last = None
    if os.path.isfile(log_path):
        with open(log_path, encoding="utf-8", errors="replace") as f:
            for line in f:
                start = line.find('{"epoch"')
                if start < 0 or '"valid_loss"' not in line:
                    continue
                try:
                    entry = json.loads(line[start:])
                except ValueError:
                    continue
                last = {k[len("valid_"):]: float(v) for k, v in entry.items()
                        if k in ("valid_loss", "valid_nll_loss", "valid_ppl", "valid_num_updates")}
    return last


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


def write_run(record_dir: str, run, seconds: Dict[str, float]) -> str:
    """The record of one evaluated run (``head_to_head_runs.Run``); returns its path."""
    from ..evaluation import _read_json
    from .head_to_head_runs import EVALUATE_FLAGS, TRAIN_FLAGS, profile

    results = _read_json(run.results, "results")
    write_references(record_dir, run.direction, results)
    record = {
        "format": FORMAT, "direction": run.direction, "model": run.model.name, "seed": run.seed,
        "updates": run.updates, "label": run.model.label, "arch": run.model.arch,
        "model_flags": list(run.model.argv(run.direction)), "reason": run.model.reason_for(run.direction),
        "extra_compute": run.model.extra_compute or None,
        "train_flags": list(TRAIN_FLAGS) + list(run.train_flags), "evaluate_flags": list(EVALUATE_FLAGS),
        "corpus": {"path": run.corpus.path, "langs": run.corpus.langs, "lang_pairs": run.corpus.lang_pairs},
        "profile": profile(run, checkpoint=run.checkpoint),
        "validation": last_validation(os.path.join(run.dir, "train.log")),
        "wall_seconds": {k: round(v, 1) for k, v in seconds.items()},
        "provenance": provenance(),
        "results": results,
    }
    path = run_path(record_dir, run.direction, run.model.name, run.seed)
    dump(path, record)
    return path
