"""``langshare export --format transformers``: one language pair as a Hugging Face transformers model.

The pair's weights are what ``export_pair`` writes, a plain fairseq ``transformer``
(``pair_export.plain_pair``). transformers holds fairseq's Transformer in two models, loaded with
no custom code (no ``trust_remote_code``):

* pre-norm (``--encoder-normalize-before --decoder-normalize-before``) -> ``M2M100ForConditionalGeneration``:
  fairseq's pre-norm Transformer with final encoder and decoder layer norms and fairseq's sinusoidal
  positions, numbered from ``padding_idx + 1``; one embedding matrix for encoder and decoder.
* post-norm (fairseq's default) -> ``MarianMTModel``: the same post-norm layers (BART's), no final
  layer norms, separate or shared encoder/decoder embeddings and output projection. Marian numbers
  positions from 0 and has its own sinusoid; it is given fairseq's table shifted by
  ``padding_idx + 1``, which is exact for right-padded input (the tokenizer pads right). FSMT,
  transformers' port of fairseq's post-norm WMT19 model, is not used: its decoder computes the
  positions of cached steps wrongly (transformers 4.57 and 5.24: greedy outputs diverge after a few
  tokens unless ``use_cache=False``).

Embeddings are scaled by sqrt(d_model) unless ``--no-scale-embedding``. The layers keep fairseq's
names under ``model.`` (both models name them as fairseq does), as in transformers' own conversion
scripts (``convert_fsmt_original_pytorch_checkpoint_to_pytorch.py``,
``convert_m2m100_original_checkpoint_to_pytorch.py``). Every tensor either transformers major
version names is written (``model.safetensors``; one embedding matrix shared by encoder, decoder and
output projection once, as ``model.shared.weight``), so a directory written with transformers 4
loads in 5 and back.

The tokenizer (``tokenizer.json``, transformers' ``PreTrainedTokenizerFast``) is built here from the
pair's SentencePiece model, with no download: SentencePiece's normaliser (its precompiled NFKC map,
whitespace rules, dummy prefix) and its unigram pieces and scores, but fairseq's dictionary ids, so
``tokenizer(text).input_ids`` is what fairseq-interactive feeds the encoder: the source language
token the model was trained with (``--encoder-langtok``: ``__tgt__`` by default), the pieces, ``</s>``.
Decoding joins the pieces, turns U+2581 into spaces and strips the ends, fairseq's
``--remove-bpe sentencepiece``; ``skip_special_tokens`` drops what fairseq-interactive leaves out
(``<s>``, ``</s>``, and with ``--decoder-langtok`` the pair's two language tokens); an ``<unk>`` or
another generated language token stays visible, as fairseq prints it.

``generation_config.json`` holds fairseq-generate's defaults: decoding starts from ``</s>``, then the
target language token (``--decoder-langtok``, as ``forced_bos_token_id``); beam 5, length penalty 1
with EOS counted, stop once ``beam`` hypotheses ended (``early_stopping``), at most 200 tokens
(``--max-len-b``), EOS not first (``--min-len 1``), ``<pad>`` never generated. Before the directory is
published, the written model is loaded back with transformers and its logits checked against the
fairseq network's on a probe sentence.
"""

import argparse
import math
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Tuple

import torch

from ..export import ExportError
from . import export_dir
from .export_dir import OutDir
from .pair_export import (FAIRSEQ_INSTEAD, SPM_NAME, data_dir, find_spm, language_tokens, pair_dictionaries,
                          pair_manifest, plain_pair, require_library)

__all__ = ["export_transformers", "require_transformers", "read_manifest", "TransformersExportError", "FORMAT"]

FORMAT = "langshare-transformers"
RUNTIME = "transformers' MarianMTModel and M2M100 models"
# fairseq's activation functions (utils.get_activation_fn) by transformers' names (ACT2FN)
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_accurate": "gelu_new", "gelu_fast": "gelu_new",
               "tanh": "tanh", "linear": "linear", "swish": "silu"}
MAX_LEN_B = 200  # fairseq-generate's --max-len-b (with --max-len-a 0)
BEAM = 5  # fairseq-generate's --beam
_NEVER = -1e6  # unigram score of dictionary symbols SentencePiece never emits (specials, language tokens)
_TOLERANCE = 1e-4


class TransformersExportError(ExportError):
    pass


def require_transformers():
    """The ``transformers`` module, or one line saying how to install it."""
    return require_library(("transformers", "tokenizers"), "transformers", "transformers", "transformers>=4.40,<6",
                           TransformersExportError)


def read_manifest(model_dir) -> Dict:
    """``langshare.json`` of an exported transformers model directory."""
    return export_dir.read_manifest(model_dir, FORMAT, TransformersExportError)


# --- what transformers can hold ---------------------------------------------------------------

def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(a, b)


def _unsupported(model_cfg: Dict, weights: Dict[str, torch.Tensor]) -> List[str]:
    """Why the plain fairseq pair network has no Marian / M2M100 equivalent (empty: it has one)."""
    get = model_cfg.get
    reasons = []
    pre = bool(get("encoder_normalize_before")), bool(get("decoder_normalize_before"))
    if pre[0] != pre[1]:
        reasons.append("a pre-norm encoder with a post-norm decoder or the reverse (Marian is post-norm on both "
                       "sides, M2M100 pre-norm on both)")
    if pre[0] and pre[1] and not ("encoder.layer_norm.weight" in weights and "decoder.layer_norm.weight" in weights):
        reasons.append("a pre-norm model without final layer norms (M2M100 has them)")
    for flag, why in (("layernorm_embedding", "--layernorm-embedding"),
                      ("encoder_learned_pos", "learned encoder positions"),
                      ("decoder_learned_pos", "learned decoder positions"),
                      ("no_token_positional_embeddings", "--no-token-positional-embeddings"),
                      ("adaptive_input", "--adaptive-input"), ("adaptive_softmax_cutoff", "an adaptive softmax"),
                      ("cross_self_attention", "--cross-self-attention"), ("no_cross_attention", "--no-cross-attention")):
        if get(flag):
            reasons.append(why)
    dim = get("encoder_embed_dim")
    if len({dim, get("decoder_embed_dim"), get("decoder_input_dim") or dim, get("decoder_output_dim") or dim}) > 1:
        reasons.append("encoder and decoder widths differ (Marian and M2M100 have one d_model)")
    if str(get("activation_fn") or "relu") not in ACTIVATIONS:
        reasons.append(f"--activation-fn {get('activation_fn')}")
    enc, dec = weights["encoder.embed_tokens.weight"], weights["decoder.embed_tokens.weight"]
    if pre[0] and pre[1] and not _same(enc, dec):
        reasons.append("separate encoder and decoder embeddings in a pre-norm model (M2M100 has one embedding matrix; "
                       "train with --share-all-embeddings)")
    return reasons


# --- weights and config ---------------------------------------------------------------------

def _sinusoids(num: int, dim: int, padding_idx: int) -> torch.Tensor:
    from fairseq.modules.sinusoidal_positional_embedding import SinusoidalPositionalEmbedding

    return SinusoidalPositionalEmbedding.get_embedding(num, dim, padding_idx).float()


def _layer_weights(weights: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """The layers (and final layer norms) under transformers' names: fairseq's, under ``model.``."""
    skip = ("encoder.embed_tokens.", "decoder.embed_tokens.", "decoder.output_projection.", "encoder.embed_positions.",
            "decoder.embed_positions.")
    return {f"model.{k}": v for k, v in weights.items()
            if not k.endswith(".version") and not k.startswith(skip)}


def _hf_model(model_cfg: Dict, weights: Dict[str, torch.Tensor], src: str, tgt: str,
              special: Dict[str, int]) -> Tuple[str, Dict, Dict[str, torch.Tensor]]:
    """(transformers model type, its config values, its state dict) of the plain pair network."""
    get = model_cfg.get
    enc, dec = weights["encoder.embed_tokens.weight"], weights["decoder.embed_tokens.weight"]
    out = weights.get("decoder.output_projection.weight", dec)
    tied = _same(enc, dec) and _same(dec, out)
    positions = max(int(get("max_source_positions") or 1024), int(get("max_target_positions") or 1024))
    common = dict(
        d_model=int(get("encoder_embed_dim")), activation_function=ACTIVATIONS[str(get("activation_fn") or "relu")],
        encoder_layers=int(get("encoder_layers")), decoder_layers=int(get("decoder_layers")),
        encoder_attention_heads=int(get("encoder_attention_heads")),
        decoder_attention_heads=int(get("decoder_attention_heads")),
        encoder_ffn_dim=int(get("encoder_ffn_embed_dim")), decoder_ffn_dim=int(get("decoder_ffn_embed_dim")),
        dropout=float(get("dropout") or 0.0), attention_dropout=float(get("attention_dropout") or 0.0),
        activation_dropout=float(get("activation_dropout") or 0.0),
        encoder_layerdrop=float(get("encoder_layerdrop") or 0.0), decoder_layerdrop=float(get("decoder_layerdrop") or 0.0),
        max_position_embeddings=positions, scale_embedding=not get("no_scale_embedding"),
        tie_word_embeddings=tied, is_encoder_decoder=True, decoder_start_token_id=special["eos"],
        pad_token_id=special["pad"], bos_token_id=special["bos"], eos_token_id=special["eos"],
    )
    state = _layer_weights(weights)
    if get("encoder_normalize_before"):
        config = dict(common, model_type="m2m_100", vocab_size=dec.size(0))
        state.update({"model.shared.weight": dec, "model.encoder.embed_tokens.weight": enc,
                      "model.decoder.embed_tokens.weight": dec, "lm_head.weight": out})
    else:
        shared = _same(enc, dec)
        config = dict(common, model_type="marian", vocab_size=enc.size(0), decoder_vocab_size=dec.size(0),
                      share_encoder_decoder_embeddings=shared, tie_word_embeddings=_same(dec, out),
                      forced_eos_token_id=None)
        # Marian numbers positions from 0, fairseq from padding_idx + 1: its table, shifted
        pad = special["pad"]
        table = _sinusoids(positions + pad + 1, enc.size(1), pad)[pad + 1:]
        state.update({"model.encoder.embed_tokens.weight": enc, "model.decoder.embed_tokens.weight": dec,
                      "lm_head.weight": out, "final_logits_bias": torch.zeros(1, dec.size(0)),
                      "model.encoder.embed_positions.weight": table, "model.decoder.embed_positions.weight": table})
        if shared:
            state["model.shared.weight"] = enc
    if tied:  # one matrix: written once, as transformers writes it; both versions tie the others to it on load
        for key in ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight", "lm_head.weight"):
            del state[key]
    return config["model_type"], config, {k: v.detach().clone().contiguous().float() for k, v in state.items()}


def _generation_config(special: Dict[str, int], forced_bos, max_target_positions: int) -> Dict:
    """fairseq-generate's defaults (sequence_generator.py) in transformers' terms; lengths there count
    the decoder's start token."""
    return dict(decoder_start_token_id=special["eos"], bos_token_id=special["bos"], eos_token_id=special["eos"],
                pad_token_id=special["pad"], forced_bos_token_id=forced_bos, forced_eos_token_id=None,
                num_beams=BEAM, length_penalty=1.0, early_stopping=True,
                max_length=min(MAX_LEN_B, max_target_positions - 1) + 1, min_length=2,
                suppress_tokens=[special["pad"]])


# --- tokenizer --------------------------------------------------------------------------------

def _check_dictionary(src_dict, tgt_dict, weights, data: Path, checkpoint: Path) -> None:
    if src_dict.symbols != tgt_dict.symbols:
        raise TransformersExportError(f"the source and target dictionaries in {data} differ: a transformers tokenizer "
                                      f"has one vocabulary; {FAIRSEQ_INSTEAD}")
    rows = weights["encoder.embed_tokens.weight"].size(0), weights["decoder.embed_tokens.weight"].size(0)
    if rows != (len(src_dict), len(tgt_dict)):
        raise TransformersExportError(f"the dictionaries in {data} do not fit {checkpoint} ({len(src_dict)} symbols, "
                                      f"{rows[0]} embeddings): pass --data, the fairseq-preprocess directory the model "
                                      "was trained on")


def _spm_proto(spm_path: Path):
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(spm_path.read_bytes())
    return proto


def _build_tokenizer(spm_path: Path, symbols: List[str], unk: int, prefix: List[str], eos: str, special: List[str]):
    """A ``tokenizers.Tokenizer`` that encodes as fairseq-interactive does (the line stripped,
    SentencePieceProcessor.encode(out_type=str), the pieces split on whitespace and looked up in
    fairseq's dictionary), and adds ``prefix`` and ``eos`` around the pieces.
    The dictionary's symbols SentencePiece never emits (``<s>``, ``</s>``, ``<unk>``, the language
    tokens) are added tokens: their literal text in the input maps to them, as in every transformers
    tokenizer (SentencePiece would cut it into pieces); ``special`` ones are dropped when decoding."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    proto = _spm_proto(spm_path)
    if proto.trainer_spec.model_type != 1 or proto.trainer_spec.byte_fallback:
        raise TransformersExportError(f"{spm_path} is not a unigram SentencePiece model without byte fallback (the kind "
                                      f"langshare prepare-* trains): --format transformers converts those only; "
                                      f"{FAIRSEQ_INSTEAD}")
    normal = {p.piece: p.score for p in proto.pieces if p.type in (1, 4)}  # normal, user-defined (all in the
    # dictionary: find_spm checked)
    vocab = [(s, normal.get(s, _NEVER)) for s in symbols]
    tokenizer = Tokenizer(models.Unigram(vocab, unk, False))
    spec = proto.normalizer_spec
    # fairseq-interactive strips the line (str.strip); Dictionary.encode_line splits the pieces on whitespace
    # (str.split), dropping whitespace SentencePiece keeps (U+0085 under nmt_nfkc), where SentencePiece's
    # segmentation has a boundary anyway (no piece holds such a character): Python's whitespace, as a class
    space = "[" + "".join(c for c in map(chr, range(sys.maxunicode + 1)) if c.isspace()) + "]"
    steps = [normalizers.Replace(Regex(f"\\A{space}+|{space}+\\z"), "")]
    if spec.precompiled_charsmap:
        steps.append(normalizers.Precompiled(spec.precompiled_charsmap))
    if spec.remove_extra_whitespaces:  # spaces only: SentencePiece leaves other whitespace alone
        steps += [normalizers.Replace(Regex(r"\A +| +\z"), ""), normalizers.Replace(Regex(" {2,}"), " ")]
    if spec.escape_whitespaces:
        steps.append(normalizers.Replace(" ", "\u2581"))
    if spec.add_dummy_prefix:  # Metaspace adds no prefix to a text that starts with U+2581; SentencePiece does
        steps.append(normalizers.Replace(Regex("\\A\u2581"), "\u2581\u2581"))
    tokenizer.normalizer = normalizers.Sequence(steps)
    splits = [pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always" if spec.add_dummy_prefix
                                       else "never", split=False),
              pre_tokenizers.Split(Regex(f"{space}+"), behavior="removed")]
    user_defined = sorted((p.piece for p in proto.pieces if p.type == 4), key=len, reverse=True)
    if user_defined:  # SentencePiece emits them whole
        splits.append(pre_tokenizers.Split(Regex("|".join(map(re.escape, user_defined))), behavior="isolated"))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(splits)
    # fairseq's post_process(x, "sentencepiece"): x.replace(" ", "").replace("\u2581", " ").strip()
    # (decoders.Strip would do for the ends, but panics on an empty output: tokenizers 0.22, 0.23)
    tokenizer.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.Fuse(),
                                           decoders.Replace(Regex(f"\\A{space}+|{space}+\\z"), "")])
    others = [s for s in symbols if s not in normal]
    tokenizer.add_special_tokens([AddedToken(s, normalized=False, special=True) for s in others if s in special])
    tokenizer.add_tokens([AddedToken(s, normalized=False, special=False) for s in others if s not in special])
    ids = {s: i for i, s in enumerate(symbols)}
    template = " ".join(prefix + ["$A", eos])
    tokenizer.post_processor = processors.TemplateProcessing(
        single=template, pair=" ".join(prefix + ["$A", "$B", eos]),
        special_tokens=[(t, ids[t]) for t in dict.fromkeys(prefix + [eos])])
    return tokenizer


def _stripped_language_tokens(task_cfg: Dict, src: str, tgt: str) -> List[str]:
    """The language tokens fairseq-interactive leaves out of a translation of the pair: with
    ``--decoder-langtok`` those of the two languages it loads (-s, -t; ``multilingual_langshare``'s
    ``build_generator``), else none (a generated language token is printed)."""
    from fairseq.data.multilingual.multilingual_utils import get_lang_tok

    if not task_cfg.get("decoder_langtok"):
        return []
    style = task_cfg.get("lang_tok_style") or "multilingual"
    return list(dict.fromkeys(get_lang_tok(lang, style) for lang in (src, tgt)))


def _write_tokenizer(tokenizer, directory: Path, dictionary, stripped: List[str], max_positions: int) -> None:
    """``tokenizer.json`` and a ``tokenizer_config.json`` that transformers 4 and 5 both read as a
    ``PreTrainedTokenizerFast`` (what ``save_pretrained`` writes differs between them)."""
    from ..atomic_files import write_json_atomic

    tokenizer.save(str(directory / "tokenizer.json"))
    write_json_atomic(directory / "tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": dictionary[dictionary.bos()], "eos_token": dictionary[dictionary.eos()],
        "pad_token": dictionary[dictionary.pad()],  # <unk> is not declared: decoding keeps it, as fairseq prints it
        "additional_special_tokens": stripped,
        "model_max_length": max_positions, "padding_side": "right", "clean_up_tokenization_spaces": False,
        "model_input_names": ["input_ids", "attention_mask"],
    })


def _readable_as_created(path: Path) -> None:
    """The mode a new file gets under the user's umask (safetensors writes its file 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)


# --- the check before publishing --------------------------------------------------------------

def _fairseq_network(state: Dict, dictionary):
    from fairseq.models.transformer import TransformerModel

    task = argparse.Namespace(source_dictionary=dictionary, target_dictionary=dictionary)
    model = TransformerModel.build_model(argparse.Namespace(**state["cfg"]["model"]), task)
    model.load_state_dict(state["model"])
    return model.eval()


def _check_written(directory: Path, state: Dict, dictionary, src_ids: List[int], checkpoint: Path) -> None:
    """Load ``directory`` with transformers (nothing missing, nothing unused) and require the fairseq
    network's logits on a probe sentence of the pair, within float tolerance."""
    from transformers import AutoModelForSeq2SeqLM
    from transformers.utils import logging as hf_logging

    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # transformers 5 draws a bar per load, amid the export's output
    try:
        model, info = AutoModelForSeq2SeqLM.from_pretrained(str(directory), output_loading_info=True)
    finally:
        if shown:
            hf_logging.enable_progress_bar()
    left = {k: sorted(v)[:3] for k, v in info.items() if k in ("missing_keys", "unexpected_keys", "mismatched_keys")
            and v}
    if left:
        raise TransformersExportError(f"transformers loads the export of {checkpoint} incompletely ({left}): "
                                      f"{FAIRSEQ_INSTEAD}")
    fairseq = _fairseq_network(state, dictionary)
    eos = dictionary.eos()
    src = torch.tensor([src_ids])
    prev = torch.tensor([[eos] + src_ids[1:-1][:8]])
    with torch.no_grad():
        expected = fairseq(src, torch.tensor([src.size(1)]), prev)[0]
        got = model.eval()(input_ids=src, attention_mask=torch.ones_like(src), decoder_input_ids=prev,
                            use_cache=False).logits
    diff = (got.double() - expected.double()).abs().max().item()
    if not math.isfinite(diff) or diff > _TOLERANCE * max(1.0, expected.abs().max().item()):
        raise TransformersExportError(f"the transformers model written for {checkpoint} does not reproduce fairseq's "
                                      f"logits (largest difference {diff:.3g}): {FAIRSEQ_INSTEAD}")


# --- export -----------------------------------------------------------------------------------

def export_transformers(checkpoint, src: str, tgt: str, out_dir, data=None, spm=None, verbose: bool = True) -> Dict:
    """Write the ``src``->``tgt`` sub-network of ``checkpoint`` to ``out_dir`` as a transformers model
    directory (``AutoModelForSeq2SeqLM`` and ``AutoTokenizer`` load it) with ``langshare.json``.
    ``data``: the fairseq-preprocess directory with the dictionaries (default: the one the model was
    trained on); ``spm``: the SentencePiece model (default: the corpus'). Returns the manifest."""
    transformers = require_transformers()
    from safetensors.torch import save_file
    from transformers import AutoConfig, GenerationConfig

    checkpoint = Path(checkpoint)
    out = OutDir(out_dir, TransformersExportError)
    out.check()
    try:
        with tempfile.TemporaryDirectory(prefix="langshare-hf-") as scratch:
            report, state = plain_pair(checkpoint, src, tgt, Path(scratch), RUNTIME, TransformersExportError)
        cfg, weights = state["cfg"], state["model"]
        reasons = _unsupported(cfg["model"], weights)
        if reasons:
            raise TransformersExportError(f"the {src}->{tgt} network of {checkpoint} has no transformers equivalent "
                                          f"({'; '.join(reasons)}): {FAIRSEQ_INSTEAD}")
        tokens = language_tokens(cfg["task"], src, tgt, "transformers", TransformersExportError)
        data = data_dir(data, cfg["task"], src, tgt, TransformersExportError)
        spm = find_spm(data, spm, TransformersExportError, src)
        src_dict, tgt_dict = pair_dictionaries(state, data, src, tgt, checkpoint, TransformersExportError)
        _check_dictionary(src_dict, tgt_dict, weights, data, checkpoint)
        special = {"bos": src_dict.bos(), "pad": src_dict.pad(), "eos": src_dict.eos(), "unk": src_dict.unk()}
        eos_symbol = src_dict[special["eos"]]
        stripped = _stripped_language_tokens(cfg["task"], src, tgt)
        special_symbols = [src_dict[special[k]] for k in ("bos", "pad", "eos")] + stripped
        tokenizer = _build_tokenizer(spm, list(src_dict.symbols), special["unk"], tokens["source_prefix"], eos_symbol,
                                     special_symbols)
        forced_bos = src_dict.index(tokens["target_prefix"][0]) if tokens["target_prefix"] else None
        model_type, config_values, hf_state = _hf_model(cfg["model"], weights, src, tgt, special)

        staging = out.fresh_staging()
        staging.mkdir()
        values = dict(config_values)
        config = AutoConfig.for_model(values.pop("model_type"), **values)
        config.architectures = [{"marian": "MarianMTModel", "m2m_100": "M2M100ForConditionalGeneration"}[model_type]]
        config.save_pretrained(str(staging))
        max_target = int(cfg["model"].get("max_target_positions") or 1024)
        GenerationConfig(**_generation_config(special, forced_bos, max_target)).save_pretrained(str(staging))
        save_file(hf_state, str(staging / "model.safetensors"), metadata={"format": "pt"})
        _readable_as_created(staging / "model.safetensors")
        max_source = int(cfg["model"].get("max_source_positions") or 1024)
        _write_tokenizer(tokenizer, staging, src_dict, stripped, max_source)
        shutil.copyfile(spm, staging / SPM_NAME)
        probe = tokenizer.encode("The quick brown fox jumps over the lazy dog.").ids
        _check_written(staging, state, src_dict, probe, checkpoint)
        manifest = pair_manifest(FORMAT, checkpoint, src, tgt, report, state, tokens, data, spm, transformers,
                                 transformers_model=config.architectures[0])
        out.publish(manifest)
    finally:
        out.cleanup()
    if verbose:
        print(f"exported {src}->{tgt} to {out_dir} (transformers {config.architectures[0]}): "
              f"{out.published_bytes() / 1e6:.2f} MB, "
              f"{report['params']:,} parameters ({report['param_ratio']:.0%} of the full model's); load with "
              f"AutoModelForSeq2SeqLM.from_pretrained({str(out_dir)!r}) and AutoTokenizer.from_pretrained(...)")
    return manifest
