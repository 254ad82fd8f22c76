"""Checkpoint averaging, as the papers evaluate (CLSR section 5: "We average the last 5
checkpoints"). fairseq 0.12's ``scripts/average_checkpoints.py`` is not in the installed wheel, so
the recipes carry this small equivalent: the element-wise mean of the model parameters of the
last N update checkpoints (``checkpoint_<epoch>_<updates>.pt``), everything else (config,
training state) from the newest one. Checkpoints are read with fairseq's loader under the
package's safe-globals allow-list (``checkpoint_safety``) and the result is written atomically.
"""

import os
import re

from ..atomic_files import check_writable, write_atomic

UPDATE_CHECKPOINT = re.compile(r"^checkpoint_(\d+)_(\d+)\.pt$")
# what fairseq-train writes into --save-dir (checkpoint_last, _best, per epoch, per update; with a suffix)
TRAINING_CHECKPOINT = re.compile(r"^checkpoint(_last|_best|\d+|_\d+_\d+)[^/]*\.pt$")


def _held(path):
    """For ``check_writable(held=...)``: what an existing ``--out`` holds that an average must not replace (a file
    that is no checkpoint; a checkpoint fairseq-train wrote, which its run resumes or averages); None for another
    checkpoint, e.g. an earlier average."""
    from ..checkpoint_safety import checkpoint_header

    header = checkpoint_header(path)
    if not isinstance(header, dict) or "model" not in header:
        return "a file that is no fairseq checkpoint"
    if TRAINING_CHECKPOINT.match(os.path.basename(path)):
        return "a checkpoint fairseq-train wrote (its run resumes or averages it)"
    return None


def last_update_checkpoints(save_dir, n):
    """Paths of the ``n`` update checkpoints with the most updates in ``save_dir``, oldest first."""
    if not os.path.isdir(save_dir):
        raise ValueError(f"checkpoint directory not found: {save_dir} (train first; averaging reads its "
                         f"checkpoint_<epoch>_<updates>.pt files)")
    found = []
    for name in os.listdir(save_dir):
        match = UPDATE_CHECKPOINT.match(name)
        if match:
            found.append((int(match.group(2)), int(match.group(1)), os.path.join(save_dir, name)))
    found.sort()
    if len(found) < n:
        raise ValueError(f"{save_dir} has {len(found)} update checkpoints, averaging needs {n}: train with "
                         f"--save-interval-updates and --keep-interval-updates >= {n}")
    return [path for _, _, path in found[-n:]]


def average_checkpoints(paths, out):
    """Write to ``out`` the newest of ``paths`` with its model parameters replaced by the mean over
    all ``paths`` (floating tensors; integer buffers must agree and are kept). Returns ``out``."""
    import torch
    from fairseq import checkpoint_utils
    from omegaconf import OmegaConf

    from .. import checkpoint_safety

    checkpoint_safety.install()
    if not paths:
        raise ValueError("no checkpoints to average: give at least one")
    check_writable(out, "--out", inputs=paths, command="recipe average", held=_held)
    sums, keys, state = {}, None, None
    for path in paths:
        if not os.path.isfile(path):
            raise ValueError(f"checkpoint not found: {path}")
        state = checkpoint_utils.load_checkpoint_to_cpu(path)
        params = state["model"]
        if keys is None:
            keys = list(params)
        elif set(params) != set(keys):
            diff = sorted(set(params) ^ set(keys))[:3]
            raise ValueError(f"{path} has other parameters than {paths[0]} (e.g. {', '.join(diff)}): "
                             f"average checkpoints of one training run only")
        for key, value in params.items():
            if torch.is_floating_point(value):
                value = value.double()
                sums[key] = sums[key] + value if key in sums else value.clone()
            elif key in sums and not torch.equal(sums[key], value):
                raise ValueError(f"integer buffer {key} differs between the checkpoints; they cannot be averaged")
            else:
                sums[key] = value
    averaged = {}
    for key in keys:
        original = state["model"][key]
        averaged[key] = (sums[key] / len(paths)).to(original.dtype) if torch.is_floating_point(original) else sums[key]
    state["model"] = averaged
    if OmegaConf.is_config(state.get("cfg")):  # the loader made it a DictConfig; fairseq saves plain containers
        state["cfg"] = OmegaConf.to_container(state["cfg"], resolve=True, enum_to_str=True)
    write_atomic(out, lambda tmp: torch.save(state, tmp))
    return out
