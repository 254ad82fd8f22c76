"""The user's parallel text files: which direction and split each holds, read with every check.

Forms (``.gz``/``.xz`` compressed or plain, UTF-8):

- ``SRC-TGT.tsv``: one ``source<TAB>target`` pair per line, training data of direction SRC-TGT
  (its valid and test sets are held out by ``prepare-data``);
- ``SPLIT.SRC-TGT.tsv`` with SPLIT ``train``, ``valid`` or ``test``: that split (valid and test
  sets not given are held out of the train file, as of a bare ``SRC-TGT.tsv``);
- ``SPLIT.SRC-TGT.SRC`` with ``SPLIT.SRC-TGT.TGT``: fairseq's plain-text layout, one sentence a
  line, the two files line-aligned;
- a directory: every file in it named in one of these forms (others, e.g. ``dict.txt`` or
  binarized ``*.bin``/``*.idx``, are not read, and :func:`discover` names them, except a file
  meant as data and named otherwise, which is refused: ``.tsv`` in any case or followed by another
  suffix, or one of these forms compressed other than with gzip or xz; sub-directories are not
  read).

Language codes are case-sensitive, and two that differ only in case (``EN`` and ``en``) are refused.

Bad input is one line naming the file and the fix (:class:`InputError`).
"""

import gzip
import lzma
import os
import re
from dataclasses import dataclass
from typing import Iterator, Tuple

SPLITS = ("train", "valid", "test")
COMPRESSION = {".gz": gzip.open, ".xz": lzma.open}
UNREAD_COMPRESSION = (".bz2", ".zst", ".lz4", ".lzma", ".zip", ".7z")
_MEANT_AS_TSV = re.compile(r"\.tsv(\.|$)", re.IGNORECASE)  # en-fr.TSV, en-fr.tsv.txt: data named otherwise
_LANG = r"[A-Za-z][A-Za-z0-9_]*"
_DIRECTION = re.compile(rf"^({_LANG})-({_LANG})$")
_SIDE = re.compile(rf"^([^.]+)\.({_LANG})-({_LANG})\.({_LANG})$")  # SPLIT.SRC-TGT.LANG
FORMS = "SRC-TGT.tsv, SPLIT.SRC-TGT.tsv or SPLIT.SRC-TGT.SRC with SPLIT.SRC-TGT.TGT (SPLIT: train, valid, test)"


class InputError(ValueError):
    """A bad input file; the message is one line naming the file and the fix."""


@dataclass(frozen=True)
class ParallelInput:
    """One split of one direction: a TSV file or two line-aligned side files."""

    split: str
    src: str
    tgt: str
    paths: Tuple[str, ...]
    held_out_here: bool = False  # a bare SRC-TGT.tsv: valid/test are carved out of it

    @property
    def direction(self) -> str:
        return f"{self.src}-{self.tgt}"

    @property
    def form(self) -> str:
        return "tsv" if len(self.paths) == 1 else "fairseq plain text"

    def describe(self) -> str:
        return " and ".join(self.paths)


def _strip_compression(name):
    for ext in COMPRESSION:
        if name.endswith(ext):
            return name[: -len(ext)]
    return name


def _opener(path):
    for ext, opener in COMPRESSION.items():
        if path.endswith(ext):
            return opener
    return open


def _check_direction(path, src, tgt):
    if src == tgt:
        raise InputError(f"{path}: source and target language are both '{src}'; a direction needs two different "
                         "languages (name the file SRC-TGT with SRC != TGT)")


def _check_split(path, split):
    if split not in SPLITS:
        raise InputError(f"{path}: unknown split '{split}'; name the file with train, valid or test "
                         f"({FORMS})")


def _parse(path, strict):
    """('tsv', split, src, tgt, held_out_here) or ('side', split, src, tgt, lang) for a file name;
    None for a name in no known form (an error if ``strict``, i.e. the user named the file, or if
    it is meant as data: a .tsv file, or a known form compressed with a format not read)."""
    base = os.path.basename(path)
    unread = next((ext for ext in UNREAD_COMPRESSION if base.lower().endswith(ext)), None)
    if unread is not None:
        inner = base[: -len(unread)]
        if strict or _MEANT_AS_TSV.search(inner) or _SIDE.match(inner):
            raise InputError(f"{path}: {unread} files are not read; decompress it, or compress it with gzip (.gz) "
                             "or xz (.xz)")
        return None
    name = _strip_compression(base)
    if name.endswith(".tsv"):
        parts = name[: -len(".tsv")].split(".")
        m = _DIRECTION.match(parts[-1])
        if m and len(parts) <= 2:
            split = parts[0] if len(parts) == 2 else "train"
            _check_split(path, split)
            _check_direction(path, *m.groups())
            return ("tsv", split, m.group(1), m.group(2), len(parts) == 1)
        strict = True  # a .tsv file is meant as data, in a directory too
    elif _MEANT_AS_TSV.search(name):
        strict = True
    else:
        m = _SIDE.match(name)
        if m and m.group(4) in (m.group(2), m.group(3)):
            _check_split(path, m.group(1))
            _check_direction(path, m.group(2), m.group(3))
            return ("side",) + m.groups()
    if strict:
        dashed = next((part for part in name.split(".") if part.count("-") > 1), None)
        if dashed is not None:
            raise InputError(f"{path}: language codes cannot contain '-' ('{dashed}': the one '-' separates source "
                             "and target); write a code such as pt-BR with an underscore (pt_BR) in the file name")
        capitals = name.lower().endswith(".tsv") and not name.endswith(".tsv")
        case = "; the extension is a lower-case .tsv" if capitals else ""
        raise InputError(f"{path}: cannot tell the direction and split from the file name; name it {FORMS}{case}")
    return None


def _check_codes_differ_in_more_than_case(inputs):
    """``EN-FR.tsv`` beside ``en-de.tsv`` would make English two languages."""
    spellings = {}
    for inp in inputs:
        for code in (inp.src, inp.tgt):
            spellings.setdefault(code.lower(), {}).setdefault(code, inp.paths[0])
    for found in spellings.values():
        if len(found) > 1:
            (a, path_a), (b, path_b) = sorted(found.items())[:2]
            raise InputError(f"languages '{a}' and '{b}' differ only in case ({path_a}, {path_b}); language codes "
                             "are case-sensitive: spell each language one way in the file names")


def _check_not_empty(path):
    try:
        with _opener(path)(path, "rb") as f:
            first = f.read(1)
    except (OSError, EOFError, lzma.LZMAError) as e:
        raise InputError(f"{path} cannot be read ({e}); pass an uncompressed file or a valid .gz/.xz") from None
    if not first:
        raise InputError(f"{path} is empty; remove it from the inputs or put its sentences in it")


def discover(inputs):
    """({(split, src, tgt): ParallelInput}, {directory: [names in it not read]}) of the given files
    and directories, checked: every file named in a known form, not empty, a side file with its
    partner, no direction's split given twice. A sub-directory is named with a trailing '/'."""
    if not inputs:
        raise InputError(f"no input given; pass parallel text files or directories ({FORMS})")
    tsv, sides, not_read = [], {}, {}
    for given in inputs:
        if not os.path.exists(given):
            raise InputError(f"input {given} does not exist; pass existing files or directories")
        if os.path.isdir(given):
            parsed = []
            for name in sorted(os.listdir(given)):
                path = os.path.join(given, name)
                kind = _parse(path, strict=False) if os.path.isfile(path) else None
                if kind is None:
                    not_read.setdefault(given, []).append(name if os.path.isfile(path) else name + "/")
                else:
                    parsed.append((path, kind))
            if not parsed:
                raise InputError(f"directory {given} holds no parallel text; put files named {FORMS} in it")
        else:
            parsed = [(given, _parse(given, strict=True))]
        for path, kind in parsed:
            path = os.path.abspath(path)
            if kind[0] == "tsv":
                tsv.append((path, kind))
            else:
                _, split, src, tgt, lang = kind
                per_lang = sides.setdefault((split, src, tgt), {})
                if lang in per_lang and per_lang[lang] != path:
                    raise InputError(f"{split} data of {src}-{tgt} in {lang} is given twice: {per_lang[lang]} "
                                     f"and {path}; give each file once")
                per_lang[lang] = path
    found = {}

    def add(inp):
        key = (inp.split, inp.src, inp.tgt)
        if key in found:
            raise InputError(f"the {inp.split} data of {inp.direction} is given twice: {found[key].describe()} "
                             f"and {inp.describe()}; give each split of a direction once")
        found[key] = inp

    for path, (_, split, src, tgt, held_out_here) in tsv:
        if any(i.paths == (path,) for i in found.values()):
            continue  # the same file named twice (a directory and its file)
        add(ParallelInput(split, src, tgt, (path,), held_out_here))
    for (split, src, tgt), per_lang in sides.items():
        for lang, other in ((src, tgt), (tgt, src)):
            if lang in per_lang and other not in per_lang:
                partner = _strip_compression(os.path.basename(per_lang[lang]))[: -len(lang)] + other
                raise InputError(f"{per_lang[lang]} has no partner {partner} beside it; fairseq's plain-text "
                                 f"layout needs both sides of {src}-{tgt}")
        add(ParallelInput(split, src, tgt, (per_lang[src], per_lang[tgt])))
    _check_codes_differ_in_more_than_case(found.values())
    for inp in found.values():
        for path in inp.paths:
            _check_not_empty(path)
    return dict(sorted(found.items(), key=lambda kv: (kv[1].direction, SPLITS.index(kv[1].split)))), not_read


SHOWN = 5  # bad lines a message names; the others are counted
# byte-order marks of encodings other than UTF-8, longest first (UTF-32-LE's begins as UTF-16-LE's does)
_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"), (b"\xff\xfe", "UTF-16"),
         (b"\xfe\xff", "UTF-16"))


def _numbered(numbers, total):
    """'line 7', 'lines 7 and 9', 'lines 7, 9, 12, 20, 31 and 4 more (9 in all)'."""
    if total == 1:
        return f"line {numbers[0]}"
    if total == len(numbers):
        return "lines " + ", ".join(map(str, numbers[:-1])) + f" and {numbers[-1]}"
    return "lines " + ", ".join(map(str, numbers)) + f" and {total - len(numbers)} more ({total} in all)"


class _Faults:
    """The bad lines of one file, gathered while the whole file is read, so that one message names
    them all: lines that are not UTF-8 (the first ``SHOWN`` and how many, against the lines with
    non-ASCII characters that are UTF-8, which decide the advice), and TSV lines without exactly
    one tab."""

    def __init__(self, path):
        self.path = path
        self.not_utf8, self.n_not_utf8 = [], 0  # (line, byte index, byte value)
        self.utf8_non_ascii = 0  # lines with non-ASCII characters that are UTF-8
        self.bom = None  # the encoding whose byte-order mark the file starts with
        self.malformed, self.n_malformed = [], 0  # (line, tabs)

    def __bool__(self):
        return bool(self.n_not_utf8 or self.n_malformed)

    def decode(self, n, raw):
        """The text of line ``n``; a line that is not UTF-8 is recorded (and decoded with U+FFFD)."""
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            if n == 1:
                self.bom = next((name for mark, name in _BOMS if raw.startswith(mark)), None)
            self.n_not_utf8 += 1
            if len(self.not_utf8) < SHOWN:
                self.not_utf8.append((n, e.start, raw[e.start]))
            return raw.decode("utf-8", "replace")
        if not text.isascii():
            self.utf8_non_ascii += 1
        return text

    def tabs(self, n, tabs):
        self.n_malformed += 1
        if len(self.malformed) < SHOWN:
            self.malformed.append((n, tabs))

    def encoding_message(self):
        """What is wrong with the file's encoding and the fix that fits it: the broken lines to fix or
        remove where its other non-ASCII lines are UTF-8 (converting the whole file would garble
        them), the whole file to convert where none is."""
        if not self.n_not_utf8:
            return None
        which = _numbered([n for n, _, _ in self.not_utf8], self.n_not_utf8)
        n, start, byte = self.not_utf8[0]
        where = ("" if self.n_not_utf8 == 1 else f"line {n}: ") + f"byte {start + 1} of the line is 0x{byte:02x}"
        are = "is" if self.n_not_utf8 == 1 else "are"
        if self.bom:
            return (f"{which} {are} not UTF-8 ({where}): the file starts with a {self.bom} byte-order mark; convert "
                    f"the file to UTF-8 (iconv -f {self.bom} -t UTF-8)")
        if self.utf8_non_ascii:
            others = (f"its {self.utf8_non_ascii} other lines with non-ASCII characters are UTF-8"
                      if self.utf8_non_ascii > 1 else "its 1 other line with non-ASCII characters is UTF-8")
            them = "that line" if self.n_not_utf8 == 1 else "those lines"
            return (f"{which} {are} not UTF-8 ({where}), but {others}: the file is UTF-8 with broken lines; fix or "
                    f"remove {them} (converting the whole file, e.g. with iconv, would garble its UTF-8 lines)")
        return (f"{which} {are} not UTF-8 ({where}) and no line of it with non-ASCII characters is UTF-8: the "
                "file looks like another encoding; convert the file to UTF-8 (e.g. iconv -f LATIN1 -t UTF-8 if it is "
                "Latin-1)")

    def tab_message(self):
        if not self.n_malformed:
            return None
        said = [f"line {n} has {'no tab' if tabs == 0 else f'{tabs} tabs'}" for n, tabs in self.malformed]
        if self.n_malformed == 1:
            return f"{said[0]}; a TSV line is SOURCE<TAB>TARGET with exactly one tab (fix or remove the line)"
        more = f" and {self.n_malformed - len(said)} more" if self.n_malformed > len(said) else ""
        return (f"{self.n_malformed} lines are not SOURCE<TAB>TARGET with exactly one tab: {', '.join(said)}{more}; "
                "fix or remove them (a blank line is an empty pair, dropped)")

    def message(self):
        """One line naming every fault of the file, or None (read as UTF-8, a UTF-16 or UTF-32 file's tabs and
        newlines are not where they seem: its encoding alone is named)."""
        said = [m for m in (self.encoding_message(), None if self.bom else self.tab_message()) if m]
        return f"{self.path}: " + "; and ".join(said) if said else None


def _lines(path, faults) -> Iterator[Tuple[int, str]]:
    """(line number, text without its newline) of every line of a file; a line that is not UTF-8 is
    recorded in ``faults`` (and read on, so that every one is named); one line naming the file
    where it is not a valid compressed file."""
    try:
        with _opener(path)(path, "rb") as f:
            for n, raw in enumerate(f, 1):
                yield n, faults.decode(n, raw).rstrip("\n").rstrip("\r")
    except (OSError, EOFError, lzma.LZMAError) as e:
        raise InputError(f"{path} cannot be read to its end ({e}); pass a complete file") from None


def read_pairs(inp: ParallelInput) -> Iterator[Tuple[str, str]]:
    """(source, target) text of every line of ``inp``, as written (not normalised). A blank or
    whitespace-only TSV line is the empty pair ('', ''), as a line that is just a tab is; a file
    with bad lines (not UTF-8, a TSV line with no tab or several that is not blank, sides of
    different lengths) is read to its end and refused in one message naming them all (nothing is
    yielded after the first)."""
    if len(inp.paths) == 1:
        path = inp.paths[0]
        faults = _Faults(path)
        for n, line in _lines(path, faults):
            tabs = line.count("\t")
            if tabs != 1:
                if line.isspace() or not line:
                    line = "\t"
                else:
                    faults.tabs(n, tabs)
            if not faults:
                a, b = line.split("\t")
                yield a, b
        if faults:
            raise InputError(faults.message())
        return
    src_path, tgt_path = inp.paths
    src_faults, tgt_faults = _Faults(src_path), _Faults(tgt_path)
    src_lines, tgt_lines = _lines(src_path, src_faults), _lines(tgt_path, tgt_faults)
    n = 0
    for n, a in src_lines:
        b = next(tgt_lines, None)
        if b is None:
            n_src, n_tgt = n + sum(1 for _ in src_lines), n - 1
            break
        if not (src_faults or tgt_faults):
            yield a, b[1]
    else:
        n_src, n_tgt = n, n + sum(1 for _ in tgt_lines)
    said = [m for m in (src_faults.message(), tgt_faults.message()) if m]
    if n_src != n_tgt:
        said.append(f"{src_path} has {n_src} lines but {tgt_path} has {n_tgt}; the two sides of a pair need one line "
                    "each per sentence pair (fix the alignment)")
    if said:
        raise InputError("; and ".join(said))
