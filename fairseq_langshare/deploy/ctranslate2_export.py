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
import datetime
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Dict, List, Optional

import torch

from ..atomic_files import write_json_atomic
from ..data.corpus_build import sha256
from ..export import PLAIN_ARCH, ExportError, export_pair

__all__ = ["export_ctranslate2", "require_ctranslate2", "read_manifest", "DeployError", "QUANTIZATIONS",
           "MANIFEST"]

MANIFEST = "langshare.json"
FORMAT = "langshare-ctranslate2"
SPM_NAME = "spm.model"
QUANTIZATIONS = ("float32", "int16", "int8")

# pair networks CTranslate2's Transformer cannot hold, by what `langshare export` makes of them (the
# export model, or the full model when the export itself fails), and what to do instead
_FAIRSEQ_INSTEAD = "export with --format fairseq and translate with fairseq-generate --user-dir fairseq_langshare"
_NOT_PLAIN = {
    "langshare_adapter_single": ("adds language adapters to every layer", _FAIRSEQ_INSTEAD),
    "adaptive_sparse_single": ("keeps a different subset of attention heads in each layer", _FAIRSEQ_INSTEAD),
    "clsr_transformer": ("has CLSR projections that langshare export cannot write as a plain transformer (learned "
                         "gates pick them token by token)",
                         "translate the full checkpoint with fairseq-generate --user-dir fairseq_langshare"),
}


class DeployError(ExportError):
    pass


def require_ctranslate2():
    """The ``ctranslate2`` module, or one line saying how to install it."""
    try:
        import ctranslate2
        import ctranslate2.converters  # noqa: F401
    except ImportError:
        raise DeployError("CTranslate2 is not installed: pip install 'fairseq_langshare[deploy]' "
                          "(or pip install 'ctranslate2>=4')") from None
    return ctranslate2


def read_manifest(model_dir) -> Dict:
    """``langshare.json`` of an exported CTranslate2 model directory."""
    path = Path(model_dir) / MANIFEST
    if not path.is_file():
        raise DeployError(f"{model_dir} holds no {MANIFEST}: pass a directory written by "
                          "langshare export --format ctranslate2")
    with open(path, encoding="utf-8") as f:
        manifest = json.load(f)
    if manifest.get("format") != FORMAT:
        raise DeployError(f"{path} is not a {FORMAT} manifest: re-export the model with langshare export "
                          "--format ctranslate2")
    return manifest


def _check_out_dir(out_dir: Path) -> None:
    """Replace only an earlier export (or an empty directory): anything else is the user's."""
    if out_dir.is_dir() and any(out_dir.iterdir()) and not (out_dir / MANIFEST).is_file():
        raise DeployError(f"{out_dir} exists and is not a langshare CTranslate2 export: pass a new --out "
                          "directory (nothing was written)")
    if out_dir.exists() and not out_dir.is_dir():
        raise DeployError(f"{out_dir} is a file: --out names the directory the model is written to")


def _data_dir(data, task_cfg: Dict, src: str, tgt: str) -> Path:
    if data is None:
        trained_on = str(task_cfg.get("data") or "").split(os.pathsep)[0]
        if not trained_on or not Path(trained_on).is_dir():
            raise DeployError(f"the checkpoint's data directory {trained_on!r} does not exist here: pass --data, "
                              "the fairseq-preprocess directory (with dict.*.txt) the model was trained on")
        data = trained_on
    data = Path(data)
    for lang in (src, tgt):
        if not (data / f"dict.{lang}.txt").is_file():
            raise DeployError(f"no dict.{lang}.txt in {data}: pass --data, the fairseq-preprocess directory the "
                              "model was trained on")
    return data


def find_spm(data: Path) -> Optional[Path]:
    """The SentencePiece model of a prepared corpus (``manifest.json``'s ``spm_model`` next to the
    binarized data directory, or ``spm.model`` there or inside it)."""
    corpus = data.parent
    candidates = [data / SPM_NAME, corpus / SPM_NAME]
    if (corpus / "manifest.json").is_file():
        with open(corpus / "manifest.json", encoding="utf-8") as f:
            name = json.load(f).get("spm_model")
        if name:
            candidates.insert(0, corpus / name)
    return next((path for path in candidates if path.is_file()), None)


def language_tokens(task_cfg: Dict, src: str, tgt: str) -> Dict[str, List[str]]:
    """The tokens fairseq's multilingual task puts around a sentence of this pair: ``--encoder-langtok
    src|tgt`` prepends the source or target language's token to the source, ``--decoder-langtok``
    forces the target language's token as the first target token."""
    from fairseq.data.multilingual.multilingual_utils import get_lang_tok

    if task_cfg.get("lang_tok_replacing_bos_eos"):
        raise DeployError("--lang-tok-replacing-bos-eos checkpoints are not supported by CTranslate2's "
                          "fairseq converter: translate with fairseq-generate")
    style = task_cfg.get("lang_tok_style") or "multilingual"
    side = task_cfg.get("encoder_langtok")
    source = [get_lang_tok(src if side == "src" else tgt, style)] if side else []
    target = [get_lang_tok(tgt, style)] if task_cfg.get("decoder_langtok") else []
    return {"source_prefix": source, "target_prefix": target}


def _converter_checkpoint(pair_pt: Path, out: Path) -> Dict:
    """Write the exported pair again with its options as the flat Namespace fairseq's legacy
    ``args`` was (what the converter reads); return the exported config. The languages go in as
    ``--langs``: the converter would look for a ``--lang-dict`` file in the data directory."""
    state = torch.load(pair_pt, map_location="cpu", weights_only=True)
    cfg = state["cfg"]
    args = argparse.Namespace(**{**(cfg.get("common") or {}), **cfg["task"], **cfg["model"]})
    args.task, args.arch = cfg["task"]["_name"], cfg["model"]["_name"]
    args.langs, args.lang_dict = list(state["extra_state"]["langshare_export"]["langs"]), None
    torch.save({"args": args, "cfg": None, "model": state["model"]}, out)
    return state


def _refuse_not_plain(name: str, src: str, tgt: str, checkpoint: Path, error: Optional[Exception] = None):
    why, instead = _NOT_PLAIN.get(name, ("is not a plain Transformer", _FAIRSEQ_INSTEAD))
    raise DeployError(f"the {src}->{tgt} network of {checkpoint} ({name}) {why}, which CTranslate2's Transformer "
                      f"cannot run: {instead}") from error


def _refuse_no_layers(model_cfg: Dict, src: str, tgt: str, checkpoint: Path) -> None:
    """CTranslate2 converts a stack without layers (e.g. latent depth, every posterior below the
    threshold) into a model it cannot load: refuse it here."""
    empty = [side for side in ("encoder", "decoder") if not model_cfg.get(f"{side}_layers")]
    if empty:
        raise DeployError(f"the {src}->{tgt} network of {checkpoint} keeps no {' and no '.join(empty)} layer, which "
                          f"CTranslate2 cannot load: {_FAIRSEQ_INSTEAD}")


def _refuse_unsupported(error: ValueError, src: str, tgt: str, checkpoint: Path):
    """CTranslate2's refusal (a headline, then one "- reason" a line) as one line with the fix."""
    lines = [line.strip() for line in str(error).splitlines()]
    lines = [line[2:] if line.startswith("- ") else line for line in lines]  # (str.removeprefix: Python >= 3.9)
    head, *reasons = [line for line in lines if line] or [""]
    raise DeployError(f"the {src}->{tgt} network of {checkpoint} is not supported by CTranslate2 "
                      f"({'; '.join(reasons) or head}): {_FAIRSEQ_INSTEAD}") from None


def _model_name(checkpoint: Path) -> str:
    """The registered model (not the size preset) of a checkpoint."""
    from fairseq import checkpoint_utils
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    model_cfg = checkpoint_utils.load_checkpoint_to_cpu(str(checkpoint))["cfg"].model
    name = str(getattr(model_cfg, "_name", None) or getattr(model_cfg, "arch", "?"))
    return ARCH_MODEL_NAME_REGISTRY.get(name, name)


def _publish(staging: Path, out_dir: Path) -> None:
    """Rename the finished ``staging`` directory to ``out_dir``, replacing an earlier export."""
    if not out_dir.exists():
        os.replace(staging, out_dir)
        return
    old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}")
    os.replace(out_dir, old)
    os.replace(staging, out_dir)
    shutil.rmtree(old)


def export_ctranslate2(checkpoint, src: str, tgt: str, out_dir, quantization: str = "float32", data=None,
                       spm=None, verbose: bool = True) -> Dict:
    """Write the ``src``->``tgt`` sub-network of ``checkpoint`` to ``out_dir`` as a CTranslate2 model
    (weights quantised to ``quantization``), with its SentencePiece model and ``langshare.json``.
    ``data``: the fairseq-preprocess directory with the dictionaries (default: the one the model was
    trained on); ``spm``: the SentencePiece model (default: the corpus'). Returns the manifest."""
    ct2 = require_ctranslate2()
    from ctranslate2.converters import FairseqConverter

    import fairseq_langshare

    if quantization not in QUANTIZATIONS:
        raise DeployError(f"--quantization {quantization!r}: pick one of {', '.join(QUANTIZATIONS)}")
    checkpoint, out_dir = Path(checkpoint), Path(out_dir)
    target = Path(os.path.realpath(out_dir))  # a symlinked --out keeps its link: its target is replaced
    _check_out_dir(target)
    staging = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        with tempfile.TemporaryDirectory(prefix="langshare-ct2-") as scratch:
            pair_pt, named_pt = Path(scratch) / "pair.pt", Path(scratch) / "pair-args.pt"
            try:
                report = export_pair(checkpoint, src, tgt, pair_pt, verbose=False)
            except ExportError as error:
                name = _model_name(checkpoint)
                if name not in _NOT_PLAIN:
                    raise
                _refuse_not_plain(name, src, tgt, checkpoint, error)
            state = _converter_checkpoint(pair_pt, named_pt)
            cfg = state["cfg"]
            if cfg["model"]["_name"] != PLAIN_ARCH:
                _refuse_not_plain(cfg["model"]["_name"], src, tgt, checkpoint)
            _refuse_no_layers(cfg["model"], src, tgt, checkpoint)
            tokens = language_tokens(cfg["task"], src, tgt)
            data = _data_dir(data, cfg["task"], src, tgt)
            spm = Path(spm) if spm else find_spm(data)
            if spm is None or not spm.is_file():
                raise DeployError(f"no SentencePiece model {'at ' + str(spm) if spm else 'next to ' + str(data)}: "
                                  "pass --spm, the model the corpus was encoded with")
            converter = FairseqConverter(str(named_pt), str(data), source_lang=src, target_lang=tgt)
            if staging.exists():
                shutil.rmtree(staging)
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
        manifest = {
            "format": FORMAT, "version": 1, "src": src, "tgt": tgt,
            "langs": state["extra_state"]["langshare_export"]["langs"],
            "encoder_langtok": cfg["task"].get("encoder_langtok"),
            "decoder_langtok": bool(cfg["task"].get("decoder_langtok")),
            **tokens,
            "spm_model": SPM_NAME,
            "max_target_positions": int(cfg["model"].get("max_target_positions") or 1024),
            "quantization": quantization,
            "params": report["params"], "full_params": report["full_params"],
            "provenance": {
                "checkpoint": str(checkpoint.resolve()), "checkpoint_sha256": sha256(checkpoint),
                "num_updates": state["optimizer_history"][-1]["num_updates"],
                "data": str(data.resolve()), "corpus_spm": str(spm.resolve()), "spm_sha256": sha256(spm),
                "langshare_version": fairseq_langshare.__version__, "ctranslate2_version": ct2.__version__,
                "created": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            },
        }
        write_json_atomic(staging / MANIFEST, manifest)
        _publish(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    if verbose:
        size = sum(p.stat().st_size for p in out_dir.iterdir())
        print(f"exported {src}->{tgt} to {out_dir} (CTranslate2, {quantization}): {size / 1e6:.2f} MB, "
              f"{report['params']:,} parameters ({report['param_ratio']:.0%} of the full model's); "
              f"translate with: langshare translate {out_dir}")
    return manifest
