"""Binarized data checked before fairseq opens it.

fairseq's ``MMapIndexedDataset`` (what ``fairseq-preprocess`` writes by default: ``PREFIX.idx`` holding a
header, the number of sentences and their sizes and offsets, ``PREFIX.bin`` the tokens) fails on an empty split
or a truncated file with numpy errors followed by ``AttributeError: 'MMapIndexedDataset' object has no attribute
'_bin_buffer_mmap'``. ``sentence_count`` reads the header and checks both files' sizes against it, so the task
and ``langshare evaluate`` can say in one line which file is wrong and what to do.
"""

import os
import struct

import numpy as np

__all__ = ["BinarizedDataError", "sentence_count"]

_MAGIC = b"MMIDIDX\x00\x00"
_HEADER = len(_MAGIC) + 8 + 1 + 8  # magic, version, dtype code, number of sentences
FAIRSEQ_LEAVE_OUT = "(--lang-pairs, -s/-t)"  # fairseq's flags that leave a direction out


class BinarizedDataError(ValueError):
    """A binarized data set fairseq cannot train or decode on. ``direction``: the direction a command could leave
    out instead (an empty set); ``fix(flags)`` names that command's flags for it."""

    def __init__(self, problem: str, direction: str = None):
        self.problem, self.direction = problem, direction
        super().__init__(self.fix(FAIRSEQ_LEAVE_OUT))

    def fix(self, leave_out_flags: str) -> str:
        """The message, with ``leave_out_flags`` (e.g. "(evaluate --directions)") as the way to leave the
        direction out."""
        if self.direction is None:
            return self.problem
        return f"{self.problem} or leave {self.direction} out {leave_out_flags}"


def _what(prefix: str) -> str:
    """``test.en-xx.en`` -> "the test data of en-xx"."""
    parts = os.path.basename(prefix).split(".")
    return f"the {parts[0]} data of {parts[1]}" if len(parts) == 3 else os.path.basename(prefix)


def sentence_count(prefix: str):
    """Sentences in the mmap data set ``PREFIX.idx``/``PREFIX.bin`` (None for fairseq's other formats); raises
    ``BinarizedDataError`` when it is empty or either file is truncated."""
    from fairseq.data.indexed_dataset import _code_to_dtype

    idx, bin_ = f"{prefix}.idx", f"{prefix}.bin"
    fix = f"re-binarize {_what(prefix)} with fairseq-preprocess"
    size = os.path.getsize(idx)
    with open(idx, "rb") as f:
        header = f.read(_HEADER)
    if header[: len(_MAGIC)] != _MAGIC[: len(header)]:
        return None  # not the mmap format: fairseq's cached/lazy formats are left to fairseq
    if len(header) < _HEADER:
        raise BinarizedDataError(f"{idx} is truncated or corrupt ({size} bytes, shorter than its header): {fix}")
    n = struct.unpack("<Q", header[-8:])[0]
    if n == 0:
        raise BinarizedDataError(f"{idx}: {_what(prefix)} is empty (0 sentences): binarize a non-empty set with "
                                 "fairseq-preprocess", direction=_what(prefix).split()[-1])
    expected = _HEADER + n * (4 + 8)  # an int32 size and an int64 offset per sentence
    if size < expected:
        raise BinarizedDataError(f"{idx} is truncated or corrupt ({size} bytes; its header announces {n} sentences, "
                                 f"which need {expected}): {fix}")
    itemsize = np.dtype(_code_to_dtype[header[len(_MAGIC) + 8]]).itemsize
    tokens = int(np.fromfile(idx, dtype=np.int32, count=n, offset=_HEADER).sum(dtype=np.int64))
    if os.path.getsize(bin_) != tokens * itemsize:
        raise BinarizedDataError(f"{bin_} is truncated or corrupt ({os.path.getsize(bin_)} bytes; {idx} announces "
                                 f"{tokens} tokens, {tokens * itemsize} bytes): {fix}")
    return n
