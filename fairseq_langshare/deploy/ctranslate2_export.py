"""``langshare export --format ctranslate2``: one language pair's sub-network as a CTranslate2 model.

The pair's weights are what ``export_pair`` writes (a plain fairseq ``transformer`` checkpoint);
CTranslate2's own ``FairseqConverter`` turns them into its format, quantised as asked. The converter
reads the checkpoint's options as an argparse ``Namespace`` (``checkpoint["args"]``), which the
exported file rightly does not hold (it loads under ``weights_only=True`` with no allow-list); the
bridge is a second, private copy with a ``Namespace`` in a temporary directory, read by the
converter with weights-only loading still on (``argparse.Namespace`` is on the package's allow-list,
``checkpoint_safety``). The output directory holds CTranslate2's files, the corpus' SentencePiece
model and ``langshare.json``: the languages, the language tokens the source (and target) need, and
where the model came from. It is built under a hidden temporary name and renamed when complete.
"""

import argparse
import shutil
import tempfile
from pathlib import Path
from typing import Dict

import torch

from ..export import ExportError
from . import export_dir
from .export_dir import MANIFEST, OutDir
from .pair_export import (FAIRSEQ_INSTEAD, SPM_NAME, data_dir, find_spm, language_tokens, pair_dictionaries,
                          pair_manifest, plain_pair, require_library)

__all__ = ["export_ctranslate2", "require_ctranslate2", "read_manifest", "DeployError", "QUANTIZATIONS",
           "MANIFEST", "SPM_NAME"]

FORMAT = "langshare-ctranslate2"
QUANTIZATIONS = ("float32", "int16", "int8")
RUNTIME = "CTranslate2's Transformer"


class DeployError(ExportError):
    pass


def require_ctranslate2():
    """The ``ctranslate2`` module, or one line saying how to install it."""
    return require_library(("ctranslate2", "ctranslate2.converters"), "CTranslate2", "deploy", "ctranslate2>=4",
                           DeployError)


def read_manifest(model_dir) -> Dict:
    """``langshare.json`` of an exported CTranslate2 model directory."""
    return export_dir.read_manifest(model_dir, FORMAT, DeployError)


def _converter_checkpoint(state: Dict, out: Path) -> None:
    """Write the exported pair ``state`` again with its options as the flat Namespace fairseq's
    legacy ``args`` was (what the converter reads). The languages go in as ``--langs``: the
    converter would look for a ``--lang-dict`` file in the data directory. CTranslate2 up to 4.5
    reads the file with fairseq's ``load_checkpoint_to_cpu``, whose upgrade of a checkpoint without
    optimizer history reads ``best_loss``, ``optimizer`` and ``extra_state``: they are there, empty."""
    cfg = state["cfg"]
    args = argparse.Namespace(**{**(cfg.get("common") or {}), **cfg["task"], **cfg["model"]})
    args.task, args.arch = cfg["task"]["_name"], cfg["model"]["_name"]
    args.langs, args.lang_dict = list(state["extra_state"]["langshare_export"]["langs"]), None
    torch.save({"args": args, "cfg": None, "model": state["model"], "best_loss": None, "optimizer": None,
                "extra_state": {}}, out)


def _refuse_no_layers(model_cfg: Dict, src: str, tgt: str, checkpoint: Path) -> None:
    """CTranslate2 converts a stack without layers (e.g. latent depth, every posterior below the
    threshold) into a model it cannot load: refuse it here."""
    empty = [side for side in ("encoder", "decoder") if not model_cfg.get(f"{side}_layers")]
    if empty:
        raise DeployError(f"the {src}->{tgt} network of {checkpoint} keeps no {' and no '.join(empty)} layer, which "
                          f"CTranslate2 cannot load: {FAIRSEQ_INSTEAD}")


def _refuse_unsupported(error: ValueError, src: str, tgt: str, checkpoint: Path):
    """CTranslate2's refusal (a headline, then one "- reason" a line) as one line with the fix."""
    lines = [line.strip() for line in str(error).splitlines()]
    lines = [line[2:] if line.startswith("- ") else line for line in lines]  # (str.removeprefix: Python >= 3.9)
    head, *reasons = [line for line in lines if line] or [""]
    raise DeployError(f"the {src}->{tgt} network of {checkpoint} is not supported by CTranslate2 "
                      f"({'; '.join(reasons) or head}): {FAIRSEQ_INSTEAD}") from None


def export_ctranslate2(checkpoint, src: str, tgt: str, out_dir, quantization: str = "float32", data=None,
                       spm=None, verbose: bool = True) -> Dict:
    """Write the ``src``->``tgt`` sub-network of ``checkpoint`` to ``out_dir`` as a CTranslate2 model
    (weights quantised to ``quantization``), with its SentencePiece model and ``langshare.json``.
    ``data``: the fairseq-preprocess directory with the dictionaries (default: the one the model was
    trained on); ``spm``: the SentencePiece model (default: the corpus'). Returns the manifest."""
    ct2 = require_ctranslate2()
    from ctranslate2.converters import FairseqConverter

    if quantization not in QUANTIZATIONS:
        raise DeployError(f"--quantization {quantization!r}: pick one of {', '.join(QUANTIZATIONS)}")
    checkpoint, out_dir = Path(checkpoint), Path(out_dir)
    out = OutDir(out_dir, DeployError)
    out.check()
    try:
        with tempfile.TemporaryDirectory(prefix="langshare-ct2-") as scratch:
            report, state = plain_pair(checkpoint, src, tgt, Path(scratch), RUNTIME, DeployError)
            cfg = state["cfg"]
            _refuse_no_layers(cfg["model"], src, tgt, checkpoint)
            tokens = language_tokens(cfg["task"], src, tgt, "CTranslate2's fairseq converter", DeployError)
            data = data_dir(data, cfg["task"], src, tgt, DeployError)
            spm = find_spm(data, spm, DeployError, src)
            pair_dictionaries(state, data, src, tgt, checkpoint, DeployError)
            named_pt = Path(scratch) / "pair-args.pt"
            _converter_checkpoint(state, named_pt)
            converter = FairseqConverter(str(named_pt), str(data), source_lang=src, target_lang=tgt)
            staging = out.fresh_staging()
            try:
                converter.convert(str(staging), quantization=quantization)
            except ValueError as error:
                if "not supported" not in str(error):
                    raise
                _refuse_unsupported(error, src, tgt, checkpoint)
            except RuntimeError as error:
                if "size mismatch" not in str(error):
                    raise
                raise DeployError(f"the dictionaries in {data} do not fit {checkpoint} (embedding sizes differ): "
                                  "pass --data, the fairseq-preprocess directory the model was trained on") from None
        shutil.copyfile(spm, staging / SPM_NAME)
        manifest = pair_manifest(FORMAT, checkpoint, src, tgt, report, state, tokens, data, spm, ct2,
                                 max_target_positions=int(cfg["model"].get("max_target_positions") or 1024),
                                 quantization=quantization)
        out.publish(manifest)
    finally:
        out.cleanup()
    if verbose:
        print(f"exported {src}->{tgt} to {out_dir} (CTranslate2, {quantization}): "
              f"{out.published_bytes() / 1e6:.2f} MB, "
              f"{report['params']:,} parameters ({report['param_ratio']:.0%} of the full model's); "
              f"translate with: langshare translate {out_dir}")
    return manifest
