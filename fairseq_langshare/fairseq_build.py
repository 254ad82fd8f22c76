"""The fairseq build the package runs on, checked when it is imported.

PyPI's fairseq 0.12.2 (June 2022) gives ``TransformerEncoderLayerBase`` a BetterTransformer fast path (fairseq
PR #4480) that fairseq's main branch later removed: the layer reads ``self_attn.q_proj.weight`` and
``fc1.weight`` while it is built, the encoder asks every layer for ``load_to_BT``, and loading a checkpoint
adds zero-filled ``in_proj``/``fc1_`` parameters to every stock layer. CLSR's and partial LSL layers cannot be
built there, LSL and multi-stack forwards fail, and under torch 2 fairseq-generate itself stops on padded
batches ("Mask Type should be defined", fairseq issues #4858, #4899). fairseq installed from source (main,
whose version string is also 0.12.2) and ``ve-fairseq`` 0.12.3 have no such path (docs/foundation.md,
"Versions").
"""

from fairseq.modules.transformer_layer import TransformerEncoderLayerBase


class UnsupportedFairseqError(ImportError):
    """The installed fairseq is a build the package cannot run on."""


def has_better_transformer_path(layer_class=TransformerEncoderLayerBase) -> bool:
    """Whether fairseq's encoder layer is PyPI 0.12.2's, with the BetterTransformer weight conversion on load."""
    return "_load_from_state_dict" in vars(layer_class)


def require_fairseq(layer_class=TransformerEncoderLayerBase) -> None:
    """Raise ``UnsupportedFairseqError`` for PyPI's fairseq 0.12.2 (``has_better_transformer_path``)."""
    if has_better_transformer_path(layer_class):
        raise UnsupportedFairseqError(
            "fairseq_langshare cannot run on PyPI's fairseq 0.12.2, whose encoder layers take a BetterTransformer "
            "path the plugin's layers do not have (it also breaks fairseq-generate under torch 2, fairseq issue "
            "#4858): install fairseq from source, pip install 'fairseq @ git+https://github.com/facebookresearch/"
            "fairseq.git' (on Python 3.11: pip install ve-fairseq==0.12.3)")
