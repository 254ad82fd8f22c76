"""The oldest torch the package runs on, checked when it is imported.

torch 2.4 is the first release with an allow-list for weights-only loading
(``torch.serialization.add_safe_globals``): the package reads fairseq checkpoints weights-only
(``checkpoint_safety``), which an older torch cannot do for the config objects fairseq saves in them.
The package also uses ``with torch.device(...)`` and forward hooks with keyword arguments (torch 2.0) and
``torch.utils.flop_counter`` (2.1). On torch 1.13 the export, the head-to-head's cost check, the LSL
analysis and the resume checks failed with tracebacks or stayed silent; 2.4.1 and 2.13.0 pass the test
suite (docs/foundation.md, "Versions").
"""

import re
from typing import Optional, Tuple

import torch

MINIMUM_TORCH = (2, 4)


class TorchTooOldError(ImportError):
    """The installed torch is older than ``MINIMUM_TORCH``."""


def release(version: str) -> Tuple[int, ...]:
    """(major, minor, patch) of a version string (torch's, omegaconf's): ``2.4.1+cu121`` -> (2, 4, 1),
    ``2.5.0a0+git1a2b`` -> (2, 5, 0), ``2.1.0.dev26`` -> (2, 1, 0)."""
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version)
    if match is None:
        raise ValueError(f"not a version: {version!r}")
    return tuple(int(part or 0) for part in match.groups())


def require_torch(version: Optional[str] = None) -> None:
    """Raise ``TorchTooOldError`` where ``version`` (default: the installed torch's) is older than
    ``MINIMUM_TORCH``."""
    version = version or torch.__version__
    if release(version)[:2] < MINIMUM_TORCH:
        floor = ".".join(map(str, MINIMUM_TORCH))
        raise TorchTooOldError(
            f"fairseq_langshare needs torch >= {floor}, this environment has torch {version} (older releases "
            f"cannot load fairseq checkpoints weights-only): pip install 'torch>={floor}' (for a GPU, the CUDA "
            "build for your driver, as pytorch.org's selector gives it)")
