"""The directory ``langshare export --format ctranslate2|transformers --out DIR`` writes.

An export is built in a hidden staging directory beside ``DIR`` and renamed to ``DIR`` when
complete, so a directory that looks like an export always is a whole one. ``DIR`` may be new, empty,
or an earlier export; its manifest (``langshare.json``) lists the files that export wrote, and an
earlier export is replaced only while it holds nothing else. A directory the user owns, or an
export into which the user put files of their own (hypotheses, a folder), is never emptied: the
export is refused in one line that names what is in the way, before anything is written, and so is
``DIR`` as the working directory (``--out .``), which the rename would leave deleted under the shell.
The manifest also holds each file's sha256: an earlier export whose files were changed since (a
model fine-tuned and saved in place) is refused the same way. A symlinked ``DIR`` keeps its link:
the directory it points to is replaced. ``DIR``'s parent directories are created; the staging
directory of an export that was killed (its process is gone) is removed by the next one.
"""

import json
import os
import re
import shlex
import shutil
from pathlib import Path
from typing import Dict, List, Optional

from ..atomic_files import check_creatable, write_json_atomic
from ..data.corpus_build import sha256
from ..export import ExportError

__all__ = ["MANIFEST", "OutDir", "read_manifest", "reexport_fix", "changed_files"]

MANIFEST = "langshare.json"
# what a CTranslate2 export wrote before its manifest listed its files
_CTRANSLATE2_FILES = ("model.bin", "config.json", "shared_vocabulary.json", "source_vocabulary.json",
                      "target_vocabulary.json", "vocabulary.json", "vocabulary.txt", "spm.model", MANIFEST)


def read_manifest(model_dir, fmt: str, error=ExportError) -> Dict:
    """``langshare.json`` of an export directory of format ``fmt`` (``langshare-ctranslate2``, ...)."""
    path = Path(model_dir) / MANIFEST
    flag = fmt.replace("langshare-", "")
    if not path.is_file():
        raise error(f"{model_dir} holds no {MANIFEST}: pass a directory written by langshare export --format {flag}")
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
    except ValueError as reason:  # truncated or overwritten
        raise error(f"{path} is damaged (not valid JSON: {reason}): {reexport_fix(model_dir, flag)}") from None
    if not isinstance(manifest, dict):
        raise error(f"{path} is damaged (no JSON object): {reexport_fix(model_dir, flag)}")
    if manifest.get("format") != fmt:
        other = str(manifest.get("format") or "").replace("langshare-", "")
        if other in _LOADED_BY:
            raise error(f"{model_dir} is a --format {other} export ({_LOADED_BY[other]}); this needs --format {flag}: "
                        f"export the checkpoint again with langshare export --format {flag}")
        raise error(f"{path} is not a {fmt} manifest: re-export the model with langshare export --format {flag}")
    return manifest


def reexport_fix(model_dir, flag: str, manifest: Optional[Dict] = None) -> str:
    """The fix for an export with a missing or damaged file: the command that writes it again (checkpoint, pair and
    quantization from its ``manifest``; placeholders where it cannot be read)."""
    manifest = manifest if isinstance(manifest, dict) else {}
    provenance = manifest.get("provenance") if isinstance(manifest.get("provenance"), dict) else {}
    argv = ["langshare", "export", str(provenance.get("checkpoint") or "CKPT"), "--src", str(manifest.get("src") or "SRC"),
            "--tgt", str(manifest.get("tgt") or "TGT"), "--format", flag]
    argv += ["--quantization", str(manifest["quantization"])] if manifest.get("quantization") else []
    return f"re-export it ({shlex.join(argv + ['--out', str(model_dir)])})"


def changed_files(model_dir, manifest: Dict) -> List[str]:
    """The files of an export whose sha256 is not the one its ``manifest`` recorded (damaged, or changed since)."""
    written = manifest.get("sha256") if isinstance(manifest, dict) else None
    return [name for name, digest in sorted(written.items() if isinstance(written, dict) else ())
            if (Path(model_dir) / name).is_file() and sha256(Path(model_dir) / name) != digest]


_LOADED_BY = {"transformers": "load it with transformers' AutoModelForSeq2SeqLM.from_pretrained, docs/deploy.md",
              "ctranslate2": "translate with it with langshare translate, docs/deploy.md"}


def _working_directory():
    try:
        return Path(os.path.realpath(os.getcwd()))
    except OSError:  # deleted
        return None


def _running(pid: int) -> bool:
    """Whether a process ``pid`` exists (one of another user counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def _shown(paths) -> str:
    """The first five names of ``paths``, sorted (directories with a trailing /), and how many more."""
    names = sorted(p.name + ("/" if p.is_dir() else "") for p in paths)
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def _export_files(manifest: Dict) -> List[str]:
    files = manifest.get("files")
    if isinstance(files, list) and all(isinstance(name, str) for name in files):
        return files + [MANIFEST]
    return list(_CTRANSLATE2_FILES)


class OutDir:
    """``--out DIR`` of one export: ``check()`` before any work, ``staging`` to build in,
    ``publish(manifest)`` to write the manifest (with the list of files) and rename into place."""

    def __init__(self, out_dir, error=ExportError):
        self.given = Path(out_dir)
        self.target = Path(os.path.realpath(out_dir))  # a symlinked --out keeps its link: its target is replaced
        self.staging = self.target.with_name(f".{self.target.name}.tmp-{os.getpid()}")
        self.error = error

    def check(self) -> None:
        """Refuse (one line, nothing written) a file, a path where the directory cannot be made, or a directory
        holding anything no export wrote."""
        out = self.target
        if out.exists() and not out.is_dir():
            raise self.error(f"{self.given} is a file: --out names the directory the model is written to")
        if out.is_dir() and _working_directory() == out:
            raise self.error(f"--out {self.given} is the working directory, which the export would replace by a new "
                             f"one (your shell would be left in a deleted directory): run it from the parent "
                             f"directory with --out {out.name} (nothing was written)")
        # the staging directory is made beside DIR (its parents created): refuse a path under a file or where
        # nothing can be created, as --format fairseq does
        check_creatable(out, "--out", shown=self.given)
        if not out.is_dir() or not any(out.iterdir()):
            return
        manifest_path = out / MANIFEST
        if not manifest_path.is_file():
            raise self.error(f"{self.given} exists and is not a langshare export (it holds {_shown(out.iterdir())}): "
                             "pass a new --out directory (nothing was written)")
        try:
            with open(manifest_path, encoding="utf-8") as f:
                manifest = json.load(f)
        except ValueError:
            manifest = {}
        ours = set(_export_files(manifest if isinstance(manifest, dict) else {}))
        foreign = [p for p in out.iterdir() if p.name not in ours or p.is_dir()]
        if foreign:
            raise self.error(f"{self.given} is an earlier export that also holds files langshare export did not write "
                             f"({_shown(foreign)}): move them out of it or pass a new --out directory (nothing was "
                             "written)")
        changed = changed_files(out, manifest)
        if changed:
            raise self.error(f"{self.given}/{changed[0]} changed since langshare export wrote it"
                             f"{f' (and {len(changed) - 1} more file)' if len(changed) > 1 else ''} (fine-tuned and "
                             "saved in place?): pass a new --out directory, or delete the changed files to replace "
                             "the export (nothing was written)")

    def fresh_staging(self) -> Path:
        """The staging directory, absent (its parents created); stale ones of killed exports removed."""
        parent = self.staging.parent
        parent.mkdir(parents=True, exist_ok=True)
        pattern = re.compile(rf"\.{re.escape(self.target.name)}\.(tmp|old)-(\d+)")
        for path in parent.iterdir():
            match = pattern.fullmatch(path.name)
            if match and (path == self.staging or not _running(int(match.group(2)))) and path.is_dir():
                shutil.rmtree(path)
        return self.staging

    def publish(self, manifest: Dict) -> None:
        """Write ``manifest`` (plus ``files``: what the staging directory holds) and rename the
        staging directory to ``DIR``, replacing an earlier export (checked again just before)."""
        files = sorted(p.name for p in self.staging.iterdir() if p.name != MANIFEST)
        digests = {name: sha256(self.staging / name) for name in files if (self.staging / name).is_file()}
        write_json_atomic(self.staging / MANIFEST, {**manifest, "files": files, "sha256": digests})
        self.check()
        out = self.target
        if not out.exists():
            os.replace(self.staging, out)
            return
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.replace(out, old)
        os.replace(self.staging, out)
        shutil.rmtree(old)

    def published_bytes(self) -> int:
        """What the published export holds, in bytes."""
        return sum(p.stat().st_size for p in self.target.iterdir())

    def cleanup(self) -> None:
        if self.staging.exists():
            shutil.rmtree(self.staging)
