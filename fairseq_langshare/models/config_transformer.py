"""``ConfigTransformerModel``: fairseq's ``TransformerModel`` built from a ``config_class`` (a
``TransformerConfig`` dataclass, plus a method's own fields) and an ``encoder_class`` /
``decoder_class``. The base of the language-aware model every method subclasses and of the
minimal single-pair models ``langshare export`` writes when a pair's sub-network is no plain
``transformer``.

Models register the fairseq-``transformer`` way (argparse flags generated from ``config_class``,
presets as architectures): fairseq 0.12 cannot turn a Namespace into a TransformerConfig-typed
hydra node (its nested encoder/decoder dataclasses break ``convert_namespace_to_omegaconf``), so
a ``dataclass=`` registration would break the CLI. fairseq-hydra-train still works: its ``model:``
node holds the same flat keys.
"""

import argparse
import functools
from contextlib import nullcontext

from fairseq.dataclass.utils import gen_parser_from_dataclass
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY
from fairseq.models.transformer import (
    TransformerConfig,
    TransformerDecoderBase,
    TransformerEncoderBase,
    TransformerModel,
)
from fairseq.models.transformer.transformer_legacy import base_architecture
from omegaconf import OmegaConf, open_dict

from ..option_ranges import check_ranges

__all__ = ["ConfigTransformerModel", "presets_on_a_namespace", "check_model_node"]


class ConfigTransformerModel(TransformerModel):
    config_class = TransformerConfig
    encoder_class = TransformerEncoderBase
    decoder_class = TransformerDecoderBase

    @classmethod
    def add_args(cls, parser):
        gen_parser_from_dataclass(parser, cls.config_class(), delete_default=True, with_prefix="")

    @classmethod
    def config_from_args(cls, args):
        """``config_class`` from the flat args, after filling what an older config or the preset left out; an
        option outside its declared range is refused (``option_ranges``)."""
        with open_dict(args) if OmegaConf.is_config(args) else nullcontext():
            base_architecture(args)
        cfg = cls.config_class.from_namespace(args)
        check_ranges(cfg, cls.config_class, "model")
        return cfg

    @classmethod
    def build_model(cls, args, task):
        return super(TransformerModel, cls).build_model(cls.config_from_args(args), task)  # TransformerModelBase

    @classmethod
    def build_encoder(cls, cfg, src_dict, embed_tokens):
        return cls.encoder_class(cfg, src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, cfg, tgt_dict, embed_tokens):
        return cls.decoder_class(cfg, tgt_dict, embed_tokens, no_encoder_attn=cfg.no_cross_attention)


@functools.lru_cache(maxsize=None)
def _flat_defaults(config_class) -> dict:
    """The flat options of ``config_class`` with a plain default (``encoder_embed_dim``: 512); interpolations
    such as ``max_source_positions`` (``${task...}``) left out."""
    parser = argparse.ArgumentParser(argument_default=argparse.SUPPRESS, allow_abbrev=False)
    gen_parser_from_dataclass(parser, config_class(), delete_default=False, with_prefix="")
    return {a.dest: a.default for a in parser._actions if a.dest not in (argparse.SUPPRESS, "help")
            and a.default is not argparse.SUPPRESS and not (isinstance(a.default, str) and "${" in a.default)}


def presets_on_a_namespace() -> None:
    """Run every preset (``register_model_architecture`` function) of the plugin's models on an
    ``argparse.Namespace`` of the options given, and write what it sets back, then every option still absent
    with ``config_class``'s default. fairseq-hydra-train runs a preset on the config's ``model:`` node, and
    under omegaconf 2.0 (fairseq's own pin, ``omegaconf<2.1``) a key the node lacks reads as None there, not as
    an AttributeError: every ``getattr(args, "x", default)`` of a preset then kept None (fairseq's trainer
    compared ``base_layers`` None with 0; latent depth and adaptive sparsity refused a None
    ``--decoder-normalize-before``). A Namespace behaves alike under every omegaconf."""
    for arch, model_cls in ARCH_MODEL_REGISTRY.items():
        preset = ARCH_CONFIG_REGISTRY.get(arch)
        if (isinstance(model_cls, type) and issubclass(model_cls, ConfigTransformerModel)
                and preset is not None and not getattr(preset, "_on_a_namespace", False)):
            ARCH_CONFIG_REGISTRY[arch] = _on_a_namespace(preset, model_cls.config_class)


def _on_a_namespace(preset, config_class):
    @functools.wraps(preset)
    def run(args):
        if not OmegaConf.is_config(args):
            return preset(args)
        given = argparse.Namespace(**{key: args[key] for key in args})
        preset(given)
        with open_dict(args):
            for key, value in vars(given).items():
                args[key] = value
            for key, value in _flat_defaults(config_class).items():
                if key not in args:
                    args[key] = value

    run._on_a_namespace = True
    return run


@functools.lru_cache(maxsize=None)
def _node_options(arch: str):
    """{option: its argparse action} of ``arch``'s flags, and the keys its preset sets besides them."""
    model_cls = ARCH_MODEL_REGISTRY[arch]
    parser = argparse.ArgumentParser(add_help=False)
    model_cls.add_args(parser)
    preset = argparse.Namespace()
    ARCH_CONFIG_REGISTRY[arch](preset)
    return {a.dest: a for a in parser._actions}, frozenset(vars(preset))


def _parsed(key: str, value, action):
    """``value`` as the flag's parser reads it; ValueError naming ``model.key`` where it cannot."""
    switch = isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction))
    if switch and not isinstance(value, bool):
        raise ValueError(f"model.{key}: {value!r} is no switch value: write true or false")
    if action.type in (int, float) and value is not None and not isinstance(value, bool):
        try:
            number = action.type(value) if isinstance(value, str) else value
        except ValueError:
            number = None
        if not isinstance(number, (int, float)) or (action.type is int and number != int(number)):
            raise ValueError(f"model.{key}: {value!r} is not {'an integer' if action.type is int else 'a number'}")
        value = action.type(number)
    if action.choices and value is not None and str(value) not in [str(c) for c in action.choices]:
        raise ValueError(f"model.{key}: {value!r} is not one of {', '.join(map(str, action.choices))}")
    return value


def check_model_node(node) -> None:
    """fairseq-hydra-train hands the ``model:`` node of a plugin architecture to the model as the yaml and the
    overrides wrote it (fairseq-train parses each flag): refuse, in one line, a key that is no option of the
    architecture (a typo trained with the default, silently), a switch that is not true or false (``no`` was
    true), a number that is none; a number written as a string becomes the number. For a training run (the
    task's ``build_model``); a checkpoint's saved node is not checked."""
    arch = node.get("_name") if OmegaConf.is_config(node) else None
    model_cls = ARCH_MODEL_REGISTRY.get(arch)
    if not (isinstance(model_cls, type) and issubclass(model_cls, ConfigTransformerModel)):
        return
    actions, preset_keys = _node_options(arch)
    with open_dict(node):
        for key in list(node.keys()):
            if key in ("_name", "arch"):
                continue
            if key not in actions:
                if key in preset_keys:
                    continue
                raise ValueError(f"model.{key}: no such option of {arch}: check the key's spelling")
            value = node[key]
            parsed = _parsed(key, value, actions[key])
            if parsed is not value:
                node[key] = parsed
