"""A resume whose flags change what the trained weights mean, refused before the weights are loaded.

fairseq-train resumes ``checkpoint_last.pt`` of ``--save-dir`` into a model built from the command line. A flag
that decides which tensor serves which language, or how a tensor is read, keeps the shapes when it changes
(latent depth's ``--latent-decoder-lang``, an LSL spec, CLSR's ``--clsr-encoder-lang``, a sparse budget): the
weights were reinterpreted with no word; a logit learning-rate scale was ignored (the checkpoint's buffer wins)
while the saved config named the new one. Where the shapes change, the state dict's
misfit named an ``--arch`` that had not changed. ``DEFINING_FLAGS`` lists, per registered model, the flags whose
value is part of what the weights mean; the saved model config (``state["cfg"]["model"]``, read from the
checkpoint's header) is compared with this run's and every changed one is named with both values. Regularizer
weights, schedules and inference rules are not listed: they may change on a resume. ``--restore-file`` of
another file (fine-tuning from another run) and ``--finetune-from-model`` into a new ``--save-dir`` are not
checked: there a change is deliberate, and weights that do not fit are still refused by their shapes.
"""

import argparse
import dataclasses
import numbers
import shlex
from enum import Enum

from .run_options import registered_model_name
from .user_errors import fairseq_cli, option_text

__all__ = ["DEFINING_FLAGS", "ChangedFlagsOnResume", "check_resumed_flags"]

# fairseq's Transformer options that change what a weight means (or its shape) for every model
TRANSFORMER = ("encoder_layers", "decoder_layers", "encoder_embed_dim", "decoder_embed_dim", "encoder_ffn_embed_dim",
               "decoder_ffn_embed_dim", "encoder_attention_heads", "decoder_attention_heads",
               "encoder_normalize_before", "decoder_normalize_before", "activation_fn", "share_all_embeddings",
               "share_decoder_input_output_embed", "no_scale_embedding", "layernorm_embedding")
DEFINING_FLAGS = {
    "langshare_adapter_transformer": ("adapter_placement", "adapter_bottleneck", "adapter_pairs"),
    "langshare_adapter_single": ("adapter_placement", "adapter_bottleneck"),
    "latent_depth_transformer": ("latent_layers", "latent_encoder_lang", "latent_decoder_lang",
                                 "latent_logit_lr_scale"),
    "adaptive_sparse_transformer": ("sparse_types", "sparse_ffn_blocks", "sparse_head_dim",
                                    "sparse_encoder_keep_layers", "sparse_decoder_keep_layers",
                                    "sparse_encoder_keep_heads", "sparse_decoder_keep_heads",
                                    "sparse_encoder_keep_blocks", "sparse_decoder_keep_blocks",
                                    "sparse_logit_lr_scale"),
    "adaptive_sparse_single": ("sparse_single_encoder_heads", "sparse_single_decoder_heads",
                               "sparse_single_head_dim"),
    "clsr_transformer": ("clsr_variant", "clsr_gate_dim", "clsr_lang_proj", "clsr_encoder_lang",
                         "clsr_decoder_lang", "clsr_dedicated"),
    "lsl_transformer": ("lsl_encoder_layers", "lsl_decoder_layers", "lsl_component", "lsl_separate_decoder",
                        "lsl_search"),
    "langshare_multistack_transformer": ("multi_encoder", "multi_decoder"),
}


class ChangedFlagsOnResume(ValueError):
    """A resume with flags that change what the checkpoint's weights mean."""


def _options(cfg) -> dict:
    if isinstance(cfg, argparse.Namespace):
        return dict(vars(cfg))
    try:
        return {k: cfg[k] for k in cfg.keys()}
    except (AttributeError, TypeError):
        return {}


def _value(options, name, default):
    value = options.get(name)
    value = default if value is None else value
    return value.value if isinstance(value, Enum) else value


def _same(a, b) -> bool:
    if isinstance(a, numbers.Number) and isinstance(b, numbers.Number) and not isinstance(a, bool):
        return float(a) == float(b)
    if isinstance(a, str) and isinstance(b, str):
        return a.replace(" ", "") == b.replace(" ", "")  # an LSL spec's spacing means nothing
    return a == b


def _said(option, value) -> str:
    """``--option value`` (``--switch``, ``no --switch``), or fairseq-hydra-train's ``model.option=value``."""
    if fairseq_cli() == "fairseq-hydra-train":
        return option_text(option, "model", value)
    flag = option_text(option)
    if value is True:
        return flag
    if value is False or value is None:
        return f"no {flag}"
    return f"{flag} {shlex.quote(str(value))}"


def check_resumed_flags(path, saved_cfg, cfg, model, arch) -> None:
    """Refuse a resume of ``path`` (whose saved model config is ``saved_cfg``) by ``model``, built as ``--arch
    arch`` from ``cfg``, with another ``--arch`` or another value of a flag in ``DEFINING_FLAGS``. A method flag
    unset on either side (None, or not in fairseq-hydra-train's node) has its declared default."""
    saved, current = _options(saved_cfg), _options(cfg)
    if saved.get("arch") or saved.get("_name"):
        was = saved.get("arch") or saved.get("_name")
        if was != arch:  # the other flags follow from it
            _refuse(path, [("arch", was, arch)])
    name = registered_model_name(model)
    config_class = getattr(model, "config_class", None)
    defaults = {f.name: f.default for f in dataclasses.fields(config_class)} if config_class else {}
    changed = []
    for option in TRANSFORMER + DEFINING_FLAGS.get(name, ()):
        default = defaults.get(option) if option not in TRANSFORMER else None
        was, now = _value(saved, option, default), _value(current, option, default)
        if was is not None and now is not None and not _same(was, now):
            changed.append((option, was, now))
    if changed:
        _refuse(path, changed)


def _refuse(path, changed):
    """``changed``: (option, the checkpoint's value, this run's value) for each option that differs."""
    was = ", ".join(_said(option, value) for option, value, _ in changed)
    now = ", ".join(_said(option, value) for option, _, value in changed)
    restore = [_said(option, value) for option, value, _ in changed]
    with_ = " ".join(said for said in restore if not said.startswith("no --"))
    without = " ".join(said[len("no "):] for said in restore if said.startswith("no --"))
    fix = " and ".join(([f"with {with_}"] if with_ else []) + ([f"without {without}"] if without else []))
    raise ChangedFlagsOnResume(f"{path} was trained with {was}, this run has {now}: resume {fix}, as it was "
                               f"trained, or start a new run in another {option_text('save_dir', 'checkpoint')}")
