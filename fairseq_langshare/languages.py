"""The language inventory: which integer id stands for which language code.

Ids index every per-language parameter of a model, so the inventory travels with the
weights: the model stores it as an int64 buffer (``lang_inventory``, the UTF-8 bytes of the
comma-joined codes; integers survive fairseq's checkpoint averaging). When a checkpoint is
loaded, the task's ``--langs`` is compared with the stored inventory by code: the same set in
another order is re-mapped (the task then emits the checkpoint's ids) unless language tokens
are in use (fairseq numbers them in ``--langs`` order, so their embeddings would be misread);
anything else is refused with a message that says which ``--langs`` to pass. A sentence is never routed
through another language's weights.

The same buffer carries, after the codes, the settings that decide what the weights expect around
the languages: the language-token flags (``--encoder-langtok``, ``--decoder-langtok``,
``--lang-tok-style``, ``--lang-tok-replacing-bos-eos``), which are checked on load like the codes
(a model decoded with other language tokens translates into garbage), and the ``--arch`` it was built
with (named when a resume builds another model). A checkpoint written before they were stored is
loaded without that check.
"""

import hashlib
import logging
from typing import Dict, List, Optional, Sequence, Tuple

import torch

logger = logging.getLogger(__name__)

__all__ = ["LanguageInventory", "LanguageInventoryMismatch", "dictionary_fingerprint", "same_size_other_dictionary",
           "encode_inventory", "decode_inventory", "decode_settings",
           "TOKEN_FLAGS"]

# the language-token flags stored with the inventory, as ``--flag``: value ("" when off)
TOKEN_FLAGS = ("encoder-langtok", "decoder-langtok", "lang-tok-style", "lang-tok-replacing-bos-eos")


class LanguageInventoryMismatch(ValueError):
    pass


def dictionary_fingerprint(dicts, langs: Sequence[str]) -> str:
    """``LANG:SIZE:SHA;...`` for the task's dictionary of each language: its size and a hash of its
    entries in order but the language tokens of ``langs`` (either style; fairseq appends them in
    ``--langs`` order, which the inventory checks itself). Stored with the inventory, so that a
    checkpoint decoded with another corpus's dictionary of the same size (same languages, same
    --vocab-size) is refused, not misread; per language, since a decoding loads its pair's only."""
    tokens = {f"__{lang}__" for lang in langs} | {f"[{lang}]" for lang in langs}

    def sha(d):
        return hashlib.sha256("\n".join(s for s in d.symbols if s not in tokens).encode("utf-8")).hexdigest()[:12]

    return ";".join(f"{lang}:{len(d)}:{sha(d)}" for lang, d in sorted(dicts.items()))


def _fingerprints(text: str) -> Dict[str, Tuple[str, str]]:
    return {lang: (size, sha) for lang, size, sha in (part.rsplit(":", 2) for part in text.split(";") if part)}


def same_size_other_dictionary(stored: Optional[str], own: Optional[str]) -> Optional[Tuple[str, str]]:
    """(language, size) of the first language both ``dictionary_fingerprint``s hold whose dictionaries
    have the same size but other entries (or another order); None when there is none, or when either
    fingerprint is missing (a checkpoint from before they were stored). Dictionaries of other sizes
    are left to the weights' shapes, which say so when they load."""
    if not stored or not own or stored == own:
        return None
    theirs, ours = _fingerprints(stored), _fingerprints(own)
    for lang in sorted(set(theirs) & set(ours)):
        (size, sha), (own_size, own_sha) = theirs[lang], ours[lang]
        if size == own_size and sha != own_sha:
            return lang, size
    return None


def encode_inventory(langs: Sequence[str], settings: Optional[Dict[str, str]] = None) -> torch.Tensor:
    """The codes, comma-joined, then one ``key=value`` line per setting."""
    text = ",".join(langs) + "".join(f"\n{k}={v}" for k, v in sorted((settings or {}).items()))
    return torch.tensor(list(text.encode("utf-8")), dtype=torch.long)


def _decode(tensor: torch.Tensor) -> List[str]:
    return bytes(int(b) for b in tensor.tolist()).decode("utf-8").split("\n")


def decode_inventory(tensor: torch.Tensor) -> List[str]:
    codes = _decode(tensor)[0]
    return codes.split(",") if codes else []


def decode_settings(tensor: torch.Tensor) -> Dict[str, str]:
    """The settings stored after the codes ({} for a checkpoint written before they were stored)."""
    return dict(line.split("=", 1) for line in _decode(tensor)[1:])


def _flags(tokens: Dict[str, str], keys) -> str:
    """How the command line says ``tokens[key]``: ``--flag value``, ``--flag`` or ``no --flag``."""
    said = []
    for key in keys:
        value = tokens.get(key, "")
        if not value:
            said.append(f"no --{key}")
        elif key in ("decoder-langtok", "lang-tok-replacing-bos-eos"):  # switches
            said.append(f"--{key}")
        else:
            said.append(f"--{key} {value}")
    return " ".join(said)


class LanguageInventory:
    """Code <-> id mapping shared by the task (which emits ids) and the model (which stores it)."""

    def __init__(self, langs: Sequence[str], order_fixed_by: str = "", tokens: Optional[Dict[str, str]] = None,
                 dictionary: str = ""):
        """``order_fixed_by``: why the order itself matters beyond the ids (e.g. the task adds
        language tokens to the dictionary in ``--langs`` order); then a reorder is refused.
        ``tokens``: this run's language-token flags (``TOKEN_FLAGS``), checked against a checkpoint's;
        ``dictionary``: its dictionaries' ``dictionary_fingerprint``, likewise."""
        self.order_fixed_by = order_fixed_by
        self.tokens = dict(tokens or {})
        self.dictionary = dictionary
        langs = list(langs)
        dupes = sorted({c for c in langs if langs.count(c) > 1})
        if dupes:
            raise ValueError(f"--langs lists {dupes} more than once; give every language code once")
        bad = [c for c in langs if not c or "," in c or "-" in c or "\n" in c]
        if bad:
            raise ValueError(f"invalid language codes {bad}: codes must be non-empty and contain no ',', '-' or newline")
        self.langs: List[str] = langs
        self._index: Dict[str, int] = {c: i for i, c in enumerate(langs)}
        self._pinned_by = None  # the first checkpoint loaded fixes the ids for every later one

    def __len__(self):
        return len(self.langs)

    def __contains__(self, code):
        return code in self._index

    def id(self, code: str) -> int:
        try:
            return self._index[code]
        except KeyError:
            raise KeyError(
                f"unknown language {code!r}: not in the language inventory {self.langs}; add it to --langs"
            ) from None

    def check_tokens(self, stored: Dict[str, str], where: str = "checkpoint") -> None:
        """Refuse language-token flags other than those the weights were trained with."""
        differ = [k for k in TOKEN_FLAGS if k in stored and stored[k] != self.tokens.get(k, "")]
        if differ:
            passes = [_flags(stored, [k]) for k in differ if stored[k]]
            drops = [f"--{k}" for k in differ if not stored[k]]
            fix = "; ".join(([f"pass {' '.join(passes)}"] if passes else []) + ([f"drop {' '.join(drops)}"] if drops else []))
            raise LanguageInventoryMismatch(
                f"the {where} was trained with {_flags(stored, differ)} but this run has {_flags(self.tokens, differ)}; "
                f"{fix} (a model reads the language tokens it was trained with)"
            )

    def check_dictionary(self, stored: Optional[str], where: str = "checkpoint") -> None:
        """Refuse another dictionary of the same size than the weights were trained with (of another
        size, the weights' shapes do not fit and loading says so)."""
        other = same_size_other_dictionary(stored, self.dictionary)
        if other:
            lang, size = other
            raise LanguageInventoryMismatch(
                f"the {where} was trained with another dictionary of the same size ({size} entries for {lang}, "
                f"other entries or another order): pass the data directory the {where} was trained on (the "
                f"same dict.txt) and the same --langs")

    def adopt(self, stored: Sequence[str], where: str = "checkpoint", settings: Optional[Dict[str, str]] = None) -> None:
        """Make ids follow ``stored`` (the inventory the weights were trained with); ``settings``: the
        language-token flags and the dictionary stored with it, checked first."""
        self.check_tokens(settings or {}, where)
        if sorted(stored) == sorted(self.langs):  # (other languages: refused below, naming them)
            self.check_dictionary((settings or {}).get("dictionary"), where)
        stored = list(stored)
        if stored == self.langs:
            self._pinned_by = self._pinned_by or where
            return
        if self._pinned_by is not None:
            # one inventory serves every model of the task (an ensemble): ids cannot follow two orders
            raise LanguageInventoryMismatch(
                f"the {where} orders the languages {','.join(stored)} but an already loaded "
                f"{self._pinned_by} orders them {','.join(self.langs)}; models loaded together must "
                f"share one --langs order"
            )
        if sorted(stored) == sorted(self.langs) and self.order_fixed_by:
            raise LanguageInventoryMismatch(
                f"the {where} was trained with --langs {','.join(stored)} but this run orders them "
                f"{','.join(self.langs)}, and {self.order_fixed_by}; pass --langs {','.join(stored)}"
            )
        if sorted(stored) == sorted(self.langs):
            logger.warning(
                "--langs order %s differs from the %s inventory %s: re-mapping language ids by code",
                self.langs, where, stored,
            )
            self.langs = stored
            self._index = {c: i for i, c in enumerate(stored)}
            self._pinned_by = where
            return
        missing = sorted(set(self.langs) - set(stored))
        extra = sorted(set(stored) - set(self.langs))
        raise LanguageInventoryMismatch(
            f"the {where} was trained with --langs {','.join(stored)} but this run has --langs "
            f"{','.join(self.langs)} (missing from {where}: {missing or 'none'}; not in --langs: {extra or 'none'}); "
            f"pass --langs {','.join(stored)}"
        )
