"""Where the papers' corpora come from and how their files are read.

A :class:`Resource` is one published download (archive or file, URL, checksum where the source
publishes one) and the directory of the mirror it unpacks into; a :class:`Source` is one
parallel text inside the mirror (two aligned files, a TSV, a TMX, IWSLT XML, a multi-way TED
table) read as (side-1, side-2) sentence pairs. A *mirror* is a directory holding the releases
unpacked at those places, so ``--download --cache DIR`` fills ``DIR`` with exactly the layout a
``--mirror DIR`` run reads; nothing else distinguishes the two.
"""

import gzip
import hashlib
import html
import os
import platform
import re
import shutil
import tarfile
import urllib.request
import zipfile
from dataclasses import dataclass
from typing import Optional, Tuple
from xml.etree import ElementTree

from tqdm import tqdm

from ..data.corpus_build import read_lines

DONE_DIR = ".langshare-done"  # download markers inside a cache: <resource>.done
TED_NULL = ("__NULL__", "_ _ NULL _ _")


@dataclass(frozen=True)
class Resource:
    """One published download. ``dest``: mirror-relative directory it unpacks into (archives) or
    is stored in (plain/gzip files). ``sacrebleu``: a sacreBLEU test set name, fetched with
    sacreBLEU's own downloader (URL and md5 from sacreBLEU's registry) into ``sacrebleu/``, the
    layout of ``~/.sacrebleu``. ``manual``: no public URL (registration); how to get it."""

    name: str
    url: Optional[str] = None
    dest: str = ""
    filename: Optional[str] = None
    md5: Optional[str] = None
    sha256: Optional[str] = None
    unpack: bool = True
    sacrebleu: Optional[str] = None
    manual: Optional[str] = None

    def describe(self):
        if self.sacrebleu:
            from sacrebleu.dataset import DATASETS
            d = DATASETS[self.sacrebleu]
            return (f"sacrebleu test set {self.sacrebleu}: {' '.join(d.data)} "
                    f"(md5 {' '.join(d.md5 or ['-'])}) -> sacrebleu/{self.sacrebleu}/")
        if self.manual:
            return f"{self.name}: manual download ({self.manual}) -> {self.dest or '.'}/"
        sums = ", ".join(f"{k} {v}" for k, v in (("md5", self.md5), ("sha256", self.sha256)) if v)
        where = f"unpack into {self.dest or '.'}/" if self.unpack else f"-> {self.dest}/{self.file}"
        return f"{self.url} ({sums or 'no published checksum'}) {where}"

    @property
    def file(self):
        return self.filename or os.path.basename(self.url.split("?")[0])


@dataclass(frozen=True)
class Source:
    """One parallel text in a mirror: ``langs`` are the corpus codes of its two sides, ``files``
    mirror-relative paths, ``fmt`` one of FORMATS, ``columns`` the TSV column indices or the TED
    column names of the two sides. ``optional`` sources (registration-only releases) are used
    when present and reported when absent. ``quality`` tags a source "lq" for the LSL recipe's
    CCMatrix downsampling."""

    name: str
    langs: Tuple[str, str]
    files: Tuple[str, ...]
    resource: str
    fmt: str = "text"
    columns: Optional[Tuple] = None
    optional: bool = False
    quality: str = "hq"

    def swapped(self):
        return Source(self.name, self.langs[::-1], self.files[::-1] if len(self.files) == 2
                      else self.files, self.resource, self.fmt,
                      self.columns[::-1] if self.columns else None, self.optional, self.quality)

    def read(self, root):
        """(side-1, side-2) raw sentence pairs."""
        paths = [os.path.join(root, f) for f in self.files]
        return READERS[self.fmt](self, paths)


# ----------------------------------------------------------------------------- readers


def _aligned(source, a, b):
    a, b = iter(a), iter(b)
    n = 0
    for x in a:
        y = next(b, None)
        if y is None:
            break
        n += 1
        yield x, y
    else:
        if next(b, None) is None:
            return
    raise ValueError(f"{source.files[0]} and {source.files[1]} have different numbers of "
                     f"sentences (differ after {n}); re-extract that release into the mirror")


def _read_text(source, paths):
    return _aligned(source, read_lines(paths[0]), read_lines(paths[1]))


def _read_iwslt_tags(source, paths):
    """IWSLT train.tags.*: talk metadata lines (<url>, <talkid>, ...) are skipped."""
    for x, y in _aligned(source, read_lines(paths[0]), read_lines(paths[1])):
        if not (x.lstrip().startswith("<") or y.lstrip().startswith("<")):
            yield x, y


_SEG = re.compile(r"<seg[^>]*>(.*)</seg>")


def _segs(path):
    for line in read_lines(path):
        m = _SEG.search(line)
        if m:
            yield html.unescape(m.group(1)).strip()


def _read_iwslt_xml(source, paths):
    return _aligned(source, _segs(paths[0]), _segs(paths[1]))


def _read_tsv(source, paths):
    i, j = source.columns or (0, 1)
    for line in read_lines(paths[0]):
        cols = line.split("\t")
        if len(cols) > max(i, j):
            yield cols[i], cols[j]


def _read_tmx(source, paths):
    """TMX translation units; a tuv's language is matched on its code prefix (en, en-GB)."""
    want = [lang.split("_")[0].lower() for lang in source.columns or source.langs]
    opener = gzip.open if paths[0].endswith(".gz") else open
    with opener(paths[0], "rb") as f:
        for _, elem in ElementTree.iterparse(f, events=("end",)):
            if elem.tag != "tu":
                continue
            segs = {}
            for tuv in elem.iter("tuv"):
                lang = (tuv.get("{http://www.w3.org/XML/1998/namespace}lang")
                        or tuv.get("lang") or "").split("-")[0].split("_")[0].lower()
                seg = tuv.find("seg")
                if seg is not None:
                    segs[lang] = "".join(seg.itertext())
            if all(w in segs for w in want):
                yield segs[want[0]], segs[want[1]]
            elem.clear()


def _read_ted(source, paths):
    """Qi et al. (2018) TED tables: a header of language columns, one talk sentence per row;
    a missing translation is __NULL__."""
    lines = read_lines(paths[0])
    header = next(lines, "").split("\t")
    try:
        i, j = (header.index(c) for c in source.columns)
    except ValueError:
        raise ValueError(f"{source.files[0]} has no column {source.columns[0]!r} or "
                         f"{source.columns[1]!r} (header: {' '.join(header[:8])} ...); "
                         "use the TED talks release of Qi et al. (2018)") from None
    for line in lines:
        cols = line.split("\t")
        if len(cols) > max(i, j):
            x, y = cols[i].strip(), cols[j].strip()
            if not any(n in x or n in y for n in TED_NULL):
                yield x, y


READERS = {"text": _read_text, "iwslt-tags": _read_iwslt_tags, "iwslt-xml": _read_iwslt_xml,
           "tsv": _read_tsv, "tmx": _read_tmx, "ted": _read_ted}
FORMATS = tuple(READERS)


# ----------------------------------------------------------------------------- downloads


def _digest(path, algo):
    h = hashlib.new(algo)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify(path, md5=None, sha256=None, shown=None):
    """Raise a one-line error if ``path`` (named ``shown`` in the message) does not have the
    published checksum."""
    for algo, expected in (("md5", md5), ("sha256", sha256)):
        if expected:
            got = _digest(path, algo)
            if got != expected:
                raise ValueError(
                    f"checksum mismatch for {shown or path}: expected {algo} {expected}, "
                    f"got {got}; "
                    "run again with --download (a truncated or changed download is not kept), "
                    "or put the published release in the mirror")


def fetch(url, path, md5=None, sha256=None):
    """Download ``url`` to ``path`` with a progress bar, through ``path.part-<pid>`` (so a broken
    download never looks complete), then verify its checksum."""
    part = f"{path}.part-{os.getpid()}"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        with urllib.request.urlopen(url, timeout=60) as r, open(part, "wb") as f:
            total = int(r.headers.get("Content-Length") or 0) or None
            with tqdm(total=total, unit="B", unit_scale=True,
                      desc=f"downloading {os.path.basename(path)}") as bar:
                for block in iter(lambda: r.read(1 << 20), b""):
                    f.write(block)
                    bar.update(len(block))
        verify(part, md5, sha256, shown=path)
        os.replace(part, path)
    except OSError as e:
        raise ValueError(f"cannot download {url} ({e}); check the network or fetch it by hand "
                         "into the mirror and pass --mirror") from e
    finally:
        if os.path.exists(part):
            os.remove(part)


def unpack(archive, dest):
    """Extract a tar/zip into ``dest`` through a temporary directory next to it (a tar with tarfile's
    ``data`` filter: no member lands outside it)."""
    if not zipfile.is_zipfile(archive) and not hasattr(tarfile, "data_filter"):
        raise ValueError(f"cannot unpack {archive} safely: this Python ({platform.python_version()}) has no tarfile "
                         "data filter (3.8.17, 3.9.17, 3.10.12, 3.11.4 and later have it): upgrade Python, or unpack "
                         f"it by hand into {dest}")
    tmp = os.path.join(os.path.dirname(dest.rstrip("/")) or ".",
                       f".unpack-{os.path.basename(archive)}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        if zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as z:
                z.extractall(tmp)
        else:
            with tarfile.open(archive) as t:
                t.extractall(tmp, filter="data")
        os.makedirs(dest, exist_ok=True)
        for entry in os.listdir(tmp):
            target = os.path.join(dest, entry)
            if os.path.isdir(target) and os.path.isdir(os.path.join(tmp, entry)):
                shutil.copytree(os.path.join(tmp, entry), target, dirs_exist_ok=True)
            else:
                os.replace(os.path.join(tmp, entry), target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def ensure(resource, cache, langpairs=()):
    """Make ``resource`` present in ``cache`` (download, verify, unpack), skipping it when its
    marker says it is done. ``langpairs``: the sacreBLEU language pairs needed."""
    if resource.sacrebleu:  # sacrebleu skips what it already has, per language pair
        from sacrebleu.dataset import DATASETS
        d = DATASETS[resource.sacrebleu]
        d._outdir = os.path.join(cache, "sacrebleu", resource.sacrebleu)
        d._rawdir = os.path.join(d._outdir, "raw")
        for lp in langpairs:
            d.get_files(lp)  # downloads (md5-checked by sacrebleu) and writes the text files
        return
    if resource.manual:
        return  # cannot be fetched; the mirror check names what to put where
    marker = os.path.join(cache, DONE_DIR, f"{resource.name}.done")
    if not os.path.exists(marker):
        archive = os.path.join(cache, "downloads", resource.file)
        if not os.path.exists(archive):
            fetch(resource.url, archive, resource.md5, resource.sha256)
        if resource.unpack:
            unpack(archive, os.path.join(cache, resource.dest))
        else:
            os.makedirs(os.path.join(cache, resource.dest), exist_ok=True)
            os.replace(archive, os.path.join(cache, resource.dest, resource.file))
        os.makedirs(os.path.dirname(marker), exist_ok=True)
        with open(marker, "w") as f:
            f.write(f"{resource.url}\n")
