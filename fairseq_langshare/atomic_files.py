"""Output files that are either complete or absent: the content goes to a temporary file next to
the target, which is then renamed over it (``os.replace`` is atomic within one filesystem). Every
file the package writes for a user (evaluation tables, analysis JSON and figures, exported
checkpoints) goes through here, so an interrupted run never leaves a half-written file that
looks finished.

``check_writable`` refuses, before a command does its work, an output path it could not write, that would
replace one of its inputs, or a file of a corpus or run directory the command did not write itself;
``check_directory_writable`` does it for an output directory; ``write_files_atomic`` writes the files of one
result (a JSON and its markdown table) so that they are replaced together or not at all."""

import contextlib
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Callable, Dict, Iterable, Mapping, Optional, Union

__all__ = ["OutputPathError", "check_writable", "check_directory_writable", "check_creatable", "json_text",
           "write_atomic", "write_files_atomic", "write_text_atomic", "write_json_atomic", "save_figure_atomic"]

PathLike = Union[str, os.PathLike]

try:
    import fcntl
except ImportError:  # Windows: renames are not serialised between processes
    fcntl = None


class OutputPathError(ValueError):
    """An output path that cannot be written; the message is one line naming it and the fix."""


def check_writable(path: PathLike, flag: str = "--out", inputs: Iterable[PathLike] = (),
                   protected: Mapping[str, Optional[PathLike]] = None, own: Callable[[Path], bool] = None,
                   command: str = "this command", held: Callable[[Path], Optional[str]] = None,
                   regular: bool = True) -> Path:
    """Refuse ``path`` (the value of option ``flag``) now, before any work, if it is a directory, one of
    ``inputs``, an existing file under one of the ``protected`` directories ({"corpus": dir, "run": dir}) that
    ``own(path)`` does not recognise as an earlier output of ``command``, an existing non-empty file anywhere for
    which ``held(path)`` says what it holds (None: ``command`` may replace it), under a file, or in a directory
    where no file can be created (probed, so that a read-only file system or a root-owned directory counts too).
    With ``regular`` (the default: every output is written by a rename, ``write_files_atomic``), also a symbolic
    link (the rename would replace the link, not its target) and anything that is no regular file (a FIFO, a
    device, a socket). Creates nothing."""
    path = Path(path)
    if regular:
        _check_regular(path, flag, command)
    if path.is_dir():
        raise OutputPathError(f"{flag} {path} is a directory; pass a file name")
    for given in inputs:
        if given is None:
            continue
        if os.path.abspath(path) == os.path.abspath(given) or (
                path.exists() and Path(given).exists() and os.path.samefile(path, given)):
            raise OutputPathError(f"{flag} {path} would overwrite an input or another output of this command; "
                                  "write to another path")
    if path.is_file():
        for name, directory in (protected or {}).items():
            if directory is not None and _inside(path, directory) and not (own is not None and own(path)):
                raise OutputPathError(f"{flag} {path} would replace a file of the {name} {directory} that "
                                      f"{command} did not write; write to another path")
        what = held(path) if held is not None and path.stat().st_size else None
        if what is not None:
            raise OutputPathError(f"{flag} {path} holds {what}, which {command} would replace; write to another path "
                                  "or move it away")
    check_creatable(path, flag)
    return path


_SPECIAL = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
            (stat.S_ISSOCK, "a socket"))


def _check_regular(path: PathLike, flag: str = "--out", command: str = "this command") -> None:
    """Refuse ``path`` when it is a symbolic link (dangling or not) or exists as something other than a regular file
    or a directory: writing it atomically would replace the link or the special file by a regular file."""
    path = Path(path)
    if path.is_symlink():
        raise OutputPathError(f"{flag} {path} is a symbolic link (to {os.readlink(path)}), which {command} would "
                              "replace by a file; pass the file it points to, or another path")
    mode = path.stat().st_mode if path.exists() else None
    what = next((name for test, name in _SPECIAL if mode is not None and test(mode)), None)
    if what is not None:
        raise OutputPathError(f"{flag} {path} exists and is no regular file ({what}); write to another path")


def check_directory_writable(path: PathLike, flag: str = "--out", why: str = "it gets several files") -> Path:
    """Refuse an output directory ``path`` that is a file or cannot be made or written, before any work."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputPathError(f"{flag} {path} is a file; pass a directory ({why})")
    check_creatable(path / "probe", flag, shown=path)
    return path


def _inside(path: Path, directory: PathLike) -> bool:
    real, top = os.path.realpath(path), os.path.realpath(directory)
    return os.path.commonpath([real, top]) == top


def check_creatable(path: PathLike, flag: str, shown: Path = None) -> None:
    """Refuse ``path`` now when its nearest existing parent is a file or a directory where nothing
    can be created (probed, so that a read-only file system or a root-owned directory counts too)."""
    shown = Path(path) if shown is None else shown
    path = Path(os.path.abspath(path))
    parent = path.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise OutputPathError(f"cannot write {flag} {shown}: {parent} is a file, not a directory; choose another path")
    try:
        tempfile.TemporaryFile(dir=parent).close()
    except OSError as error:
        raise OutputPathError(f"cannot write {flag} {shown}: no file can be created in {parent} ({error.strerror}); "
                              "choose another path or fix its permissions") from None


def _tmp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


@contextlib.contextmanager
def _directories_locked(directories):
    """Exclusive ``flock`` on each directory, so two processes renaming into them take turns (best effort:
    where a directory cannot be locked, the renames still happen)."""
    with contextlib.ExitStack() as stack:
        for directory in sorted({os.path.abspath(d) for d in directories}) if fcntl is not None else ():
            try:
                fd = os.open(directory, os.O_RDONLY)
            except OSError:
                continue
            stack.callback(os.close, fd)
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_EX)
        yield


def write_files_atomic(writers: Dict[PathLike, Union[str, Callable[[Path], object]]]) -> None:
    """Write every file to a temporary name first (``writers[path](tmp)``, or the text ``writers[path]`` in
    UTF-8), then rename them all: either every
    file is replaced by this run's content or, if one write fails, none is; two processes writing the same
    files replace them in turn, so the files always come from one of them."""
    tmps = {}
    try:
        for path, write in writers.items():
            path = Path(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmps[path] = _tmp_name(path)
            if isinstance(write, str):
                tmps[path].write_text(write, encoding="utf-8")
            else:
                write(tmps[path])
        with _directories_locked(path.parent for path in tmps) if len(tmps) > 1 else contextlib.nullcontext():
            for path, tmp in tmps.items():
                os.replace(tmp, path)
    finally:
        for tmp in tmps.values():
            if tmp.exists():
                tmp.unlink()


def write_atomic(path: PathLike, write: Callable[[Path], object]) -> Path:
    """``write(tmp)`` writes the content to ``tmp``; then ``tmp`` replaces ``path``."""
    write_files_atomic({path: write})
    return Path(path)


def write_text_atomic(path: PathLike, text: str) -> Path:
    write_files_atomic({path: text})
    return Path(path)


def json_text(obj) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False) + "\n"


def write_json_atomic(path: PathLike, obj) -> Path:
    return write_text_atomic(path, json_text(obj))


def save_figure_atomic(fig, path: PathLike, dpi: int = 120) -> Path:
    """A matplotlib figure as PNG."""
    return write_atomic(path, lambda tmp: fig.savefig(tmp, format="png", dpi=dpi))
