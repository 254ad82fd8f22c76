"""``clsr_transformer``: conditional language-specific routing (Zhang et al., ICLR 2021).

A CLSR unit (``modules/clsr.py``) after every sub-layer: encoder self-attention and FFN,
decoder self-attention, cross-attention and FFN. For attention the unit replaces the output
projection (W^shared is fairseq's ``out_proj``); for the FFN it sits on top of ``fc2``. The
gate reads the sub-layer input (the residual stream in the post-norm Transformer of Eq. 2).
The budget term of Eq. 6, |sum of gates / number of gate decisions - p|, is reported to the
criterion. Variants (Tables 1 and 7) are one flag, ``--clsr-variant``.

``export_state_dict`` (``langshare export``) writes a language pair's network when every gate is
fixed (``shared``, ``language``, ``top-bottom``, ``dedicated``): each unit is then one linear map, so
the pair's network is a plain fairseq ``transformer``. A shared unit is W^shared (an attention
unit's ``out_proj``; folded into ``fc2`` for an FFN unit), a language unit the pair's W^lang of its
stack's side. Learned or soft gates pick per token, and ``ls-encoder-output`` projects the encoder
output: those are refused in one line.
"""

import dataclasses
import os
import re
from contextlib import nullcontext
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import List, Optional

import torch
from fairseq.dataclass import ChoiceEnum
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerConfig
from fairseq.models.transformer.transformer_legacy import base_architecture
from fairseq.modules import MultiheadAttention
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase, TransformerEncoderLayerBase
from omegaconf import OmegaConf, open_dict
from torch import nn

from ..modules.activation_checkpointing import wrap_like_fairseq
from ..modules.auxiliary import AuxiliaryReporter
from ..modules.clsr import ClsrUnit, LanguageProjections
from ..modules.language_specific_layer import reorder_modules
from ..modules.schedules import HORIZONS, set_given_options
from ..option_ranges import Range
from .language_aware_transformer import (LanguageAwareDecoder, LanguageAwareEncoder, LanguageAwareTransformerModel,
                                         task_inventory)
from .langshare_transformer import small_preset, tiny_preset
from ..run_options import in_fairseq_training, resumed_checkpoint, run_option, saved_checkpoint

VARIANTS = ChoiceEnum(["clsr", "gate", "shared", "language", "top-bottom", "dedicated", "ls-encoder-output"])
SIDES = ChoiceEnum(["src", "tgt"])
LANG_PROJ = ChoiceEnum(["stack", "sublayer"])
SUBLAYER = re.compile(r"^(enc|dec)(\d+)\.(self_attn|cross_attn|ffn)$")


@dataclass
class ClsrTransformerConfig(TransformerConfig):
    clsr_variant: VARIANTS = field(default="clsr", metadata={"help": (
        "clsr: learned hard gates (noise, budget); gate: soft sigmoid gates, no noise, continuous at "
        "inference (CLSR-Gate); shared: gates fixed 0 (CLSR-S); language: gates fixed 1 (CLSR-L); "
        "top-bottom: LS on every sub-layer of the first and last layer of both stacks; dedicated: LS "
        "on the sub-layers of --clsr-dedicated; ls-encoder-output: one LS projection on the encoder "
        "output, no gates (the LS model of Zhang et al. 2020b)")})
    clsr_budget: float = field(default=0.3, metadata={"help": "budget p in [0, 1]: target share of open gates (Eq. 6)",
                                                      "range": Range(0, 1, why="p is the share of open gates")})
    clsr_budget_weight: float = field(default=1.0, metadata={
        "help": "weight of |open-gate ratio - p|; 0 trains 'CLSR w/o p'",
        "range": Range(0, why="a loss weight (0 switches the budget off; below 0 it rewards leaving the budget)")})
    clsr_gate_dim: int = field(default=128, metadata={"help": "hidden size d_g of the gate network (Eq. 5)",
                                                      "range": Range(1, why="the gate network's hidden units")})
    clsr_max_noise: float = field(default=5.0, metadata={"help": "alpha at the end of its linear ramp (Eq. 5)",
                                                         "range": Range(0, why="the scale of the gate noise")})
    clsr_noise_ramp_updates: int = field(default=0, metadata={
        "help": "updates over which alpha grows from 0 to --clsr-max-noise; 0: --max-update",
        "range": Range(0, why="a number of updates (0: --max-update)")})
    clsr_lang_proj: LANG_PROJ = field(default="stack", metadata={"help": "stack: one W_lang per language for the whole encoder and one for the decoder (the paper); sublayer: one per sub-layer"})
    clsr_encoder_lang: SIDES = field(default="src", metadata={"help": "language indexing encoder W_lang (tgt for one-to-many, as the paper)"})
    clsr_decoder_lang: SIDES = field(default="tgt", metadata={"help": "language indexing decoder W_lang (src for many-to-one, as the paper)"})
    clsr_dedicated: str = field(default="", metadata={"help": "sub-layers made LS for --clsr-variant dedicated, e.g. enc1.ffn,dec6.cross_attn (1-based; printed by `langshare analyze clsr-lsscore`)"})


def _resumes_a_horizon(args) -> bool:
    """Whether fairseq-train resumes a checkpoint (--restore-file, else checkpoint_last.pt of --save-dir) whose
    saved schedule horizons all have a length: loading it sets the noise ramp (``modules/schedules.py``)."""
    restore = resumed_checkpoint(args)
    if not in_fairseq_training() or not os.path.isfile(restore):
        return False
    weights = (saved_checkpoint(restore) or {}).get("model") or {}
    horizons = [v for k, v in weights.items() if k.endswith(HORIZONS)]
    return bool(horizons) and all(int(v.min()) > 0 for v in horizons)


def parse_sublayers(spec: str, encoder_layers: int, decoder_layers: int) -> List[str]:
    names = [s.strip() for s in spec.split(",") if s.strip()]
    for name in names:
        m = SUBLAYER.match(name)
        if not m:
            raise ValueError(f"--clsr-dedicated: bad sub-layer {name!r}; write e.g. enc1.self_attn, enc3.ffn, dec2.cross_attn")
        stack, layer, kind = m.group(1), int(m.group(2)), m.group(3)
        depth = encoder_layers if stack == "enc" else decoder_layers
        if not 1 <= layer <= depth:
            raise ValueError(f"--clsr-dedicated: {name} is outside layers 1..{depth} of the {stack}oder")
        if stack == "enc" and kind == "cross_attn":
            raise ValueError(f"--clsr-dedicated: {name}: the encoder has no cross-attention")
    return names


def gate_mode(cfg, name: str, layer: int, depth: int) -> str:
    variant = str(cfg.clsr_variant)
    if variant == "clsr":
        return "learned"
    if variant == "gate":
        return "soft"
    if variant == "language":
        return "language"
    if variant == "top-bottom":
        return "language" if layer in (1, depth) else "shared"
    if variant == "dedicated":
        return "language" if name in cfg.clsr_dedicated_set else "shared"
    return "shared"  # shared, ls-encoder-output


class ClsrStack:
    """What the layers of one stack share: the ids, the W_lang bank, the unit factory."""

    def __init__(self, cfg, stack: str, languages, num_layers: int, bank: Optional[LanguageProjections]):
        self.cfg, self.stack, self.languages, self.num_layers, self.bank = cfg, stack, languages, num_layers, bank
        self.side = str(cfg.clsr_encoder_lang if stack == "enc" else cfg.clsr_decoder_lang)
        self.next_layer = 0

    def unit(self, layer: int, kind: str, shared: nn.Linear) -> ClsrUnit:
        name = f"{self.stack}{layer}.{kind}"
        dim = shared.out_features
        own = self.bank is None
        bank = LanguageProjections(self.cfg.num_languages, dim) if own else self.bank
        return ClsrUnit(name, dim, self.cfg.clsr_gate_dim, gate_mode(self.cfg, name, layer, self.num_layers),
                        shared, bank, self.languages, self.side, self.cfg.clsr_max_noise,
                        self.cfg.clsr_noise_ramp_updates, owns_projections=own)


class ArmingLinear(nn.Linear):
    """The linear that reads the CLSR gate's input (fc1: the FFN sub-layer input; q_proj: the
    query): it arms the unit, and at inference computes the gate's first layer in its own matmul."""

    def forward(self, x):
        return self.__dict__["unit"].arm_linear(self, x)


def _arming(linear: nn.Linear, unit: ClsrUnit) -> ArmingLinear:
    """An ``ArmingLinear`` holding ``linear``'s own parameters (same state-dict keys)."""
    arming = ArmingLinear(linear.in_features, linear.out_features, bias=linear.bias is not None,
                          device="meta")
    arming.weight, arming.bias = linear.weight, linear.bias
    arming.__dict__["unit"] = unit
    return arming


class ClsrAttention(MultiheadAttention):
    """fairseq attention whose output projection is a CLSR unit gated by the query (armed by
    q_proj, which fairseq's attention calls once per forward on the query)."""

    def __init__(self, *args, unit_factory, **kwargs):
        super().__init__(*args, **kwargs)
        self.out_proj = unit_factory(self.out_proj)
        self.q_proj = _arming(self.q_proj, self.out_proj)
        # the fused torch path reads the projections' weights directly; fairseq's own path calls them
        self.skip_embed_dim_check = True


class ClsrLayerMixin:
    """What encoder and decoder layers share: their place in the stack and the FFN unit."""

    def _enter_stack(self, stack: ClsrStack):
        stack.next_layer += 1
        self.clsr_stack, self.clsr_layer = stack, stack.next_layer

    def _unit_factory(self, kind):
        return lambda shared: self.clsr_stack.unit(self.clsr_layer, kind, shared)

    def build_fc1(self, input_dim, output_dim, q_noise, qn_block_size):
        fc1 = ArmingLinear(input_dim, output_dim)
        nn.init.xavier_uniform_(fc1.weight)
        nn.init.zeros_(fc1.bias)
        return fc1

    def build_fc2(self, input_dim, output_dim, q_noise, qn_block_size):
        fc2 = super().build_fc2(input_dim, output_dim, q_noise, qn_block_size)
        shared = nn.Linear(output_dim, output_dim)  # W_shared (with bias) on top of fc2
        nn.init.xavier_uniform_(shared.weight)
        nn.init.zeros_(shared.bias)
        unit = self._unit_factory("ffn")(shared)
        unit.pre = fc2  # the unit runs fc2, then g * h W_lang + (1 - g) * (h W_shared + b)
        self.__dict__["_ffn_unit"] = unit
        return unit

    def _link_ffn(self):
        self.fc1.__dict__["unit"] = self.__dict__.pop("_ffn_unit")


class ClsrEncoderLayer(ClsrLayerMixin, TransformerEncoderLayerBase):
    def __init__(self, cfg, stack: ClsrStack):
        self._enter_stack(stack)
        super().__init__(cfg)
        self._link_ffn()

    def build_self_attention(self, embed_dim, cfg):
        return ClsrAttention(embed_dim, cfg.encoder.attention_heads, dropout=cfg.attention_dropout,
                             self_attention=True, q_noise=self.quant_noise, qn_block_size=self.quant_noise_block_size,
                             xformers_att_config=cfg.encoder.xformers_att_config,
                             unit_factory=self._unit_factory("self_attn"))


class ClsrDecoderLayer(ClsrLayerMixin, TransformerDecoderLayerBase):
    def __init__(self, cfg, stack: ClsrStack, no_encoder_attn=False):
        self._enter_stack(stack)
        super().__init__(cfg, no_encoder_attn)
        self._link_ffn()

    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        return ClsrAttention(embed_dim, cfg.decoder.attention_heads, dropout=cfg.attention_dropout,
                             add_bias_kv=add_bias_kv, add_zero_attn=add_zero_attn,
                             self_attention=not cfg.cross_self_attention, q_noise=self.quant_noise,
                             qn_block_size=self.quant_noise_block_size,
                             xformers_att_config=cfg.decoder.xformers_att_config,
                             unit_factory=self._unit_factory("self_attn"))

    def build_encoder_attention(self, embed_dim, cfg):
        return ClsrAttention(embed_dim, cfg.decoder.attention_heads, kdim=cfg.encoder.embed_dim,
                             vdim=cfg.encoder.embed_dim, dropout=cfg.attention_dropout, encoder_decoder_attention=True,
                             q_noise=self.quant_noise, qn_block_size=self.quant_noise_block_size,
                             xformers_att_config=cfg.encoder.xformers_att_config,
                             unit_factory=self._unit_factory("cross_attn"))


def _stack_bank(cfg, dim):
    return LanguageProjections(cfg.num_languages, dim) if str(cfg.clsr_lang_proj) == "stack" else None


class ClsrEncoder(LanguageAwareEncoder):
    def __init__(self, cfg, dictionary, embed_tokens, return_fc=False):
        bank = _stack_bank(cfg, cfg.encoder.embed_dim)
        self.clsr_stack = ClsrStack(cfg, "enc", None, cfg.encoder.layers, bank)
        super().__init__(cfg, dictionary, embed_tokens, return_fc)
        self.clsr_stack.languages = self.languages
        self.lang_proj = bank  # registered once here, used by every encoder unit
        self.output_unit = None
        if str(cfg.clsr_variant) == "ls-encoder-output":
            # Zhang et al. (2020b): a language-specific projection of the encoder output
            self.output_unit = LanguageProjections(cfg.num_languages, cfg.encoder.embed_dim)

    def build_encoder_layer(self, cfg):
        self.clsr_stack.languages = self.languages
        return wrap_like_fairseq(ClsrEncoderLayer(cfg, self.clsr_stack), cfg)

    def forward(self, src_tokens, src_lengths=None, return_all_hiddens=False, token_embeddings=None,
                src_lang_id=None, tgt_lang_id=None):
        out = super().forward(src_tokens, src_lengths, return_all_hiddens, token_embeddings,
                              src_lang_id=src_lang_id, tgt_lang_id=tgt_lang_id)
        if self.output_unit is not None:
            ids = src_lang_id if self.clsr_stack.side == "src" else tgt_lang_id
            out["encoder_out"] = [self.output_unit(out["encoder_out"][0], ids)]
        return out


class ClsrDecoder(LanguageAwareDecoder):
    def __init__(self, cfg, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        bank = _stack_bank(cfg, cfg.decoder.embed_dim)
        self.clsr_stack = ClsrStack(cfg, "dec", None, cfg.decoder.layers, bank)
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn, output_projection)
        self.lang_proj = bank

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        self.clsr_stack.languages = self.languages
        return wrap_like_fairseq(ClsrDecoderLayer(cfg, self.clsr_stack, no_encoder_attn), cfg)

    def reorder_incremental_state_scripting(self, incremental_state, new_order):
        """fairseq's walk over every module at every decoding step, over a list made once."""
        return reorder_modules(self, incremental_state, new_order)


@register_model("clsr_transformer")
class ClsrTransformerModel(LanguageAwareTransformerModel, AuxiliaryReporter):
    config_class = ClsrTransformerConfig
    encoder_class = ClsrEncoder
    decoder_class = ClsrDecoder

    @classmethod
    def build_model(cls, args, task):
        task_inventory(task, "clsr_transformer", "gates every token by its language")
        given = [] if getattr(args, "clsr_noise_ramp_updates", 0) in (0, None) else ["--clsr-noise-ramp-updates"]
        if not given:
            # alpha grows over the whole run (the authors' setting); without --max-update the
            # ramp stays 0 and training refuses to start (ClsrUnit.noise_scale)
            with open_dict(args) if OmegaConf.is_config(args) else nullcontext():
                args.clsr_noise_ramp_updates = int(run_option(args, "max_update", "optimization", 0))
        model = super().build_model(args, task)
        set_given_options(model, given)  # else the ramp comes from a resumed checkpoint
        return model

    @classmethod
    def build_encoder(cls, cfg, src_dict, embed_tokens):
        cfg.clsr_dedicated_set = set(parse_sublayers(cfg.clsr_dedicated, cfg.encoder.layers, cfg.decoder.layers))
        if str(cfg.clsr_variant) == "dedicated" and not cfg.clsr_dedicated_set:
            raise ValueError("--clsr-variant dedicated needs --clsr-dedicated (e.g. the list `langshare analyze clsr-lsscore` prints)")
        return super().build_encoder(cfg, src_dict, embed_tokens)

    def check_training_run(self, args) -> None:
        """Options a training run would otherwise ignore (called by the task when a run starts, not
        when a checkpoint is decoded, so checkpoints saved with them still load)."""
        super().check_training_run(args)
        dedicated, variant = getattr(args, "clsr_dedicated", ""), str(getattr(args, "clsr_variant", "clsr"))
        if dedicated and variant != "dedicated":
            raise ValueError(f"--clsr-dedicated {dedicated} needs --clsr-variant dedicated (it is --clsr-variant "
                             f"{variant}, which ignores the list)")
        noisy = [u for u in self.clsr_units() if u.mode == "learned" and u.max_noise]  # --clsr-max-noise 0: none
        if any(u.noise_ramp_updates <= 0 for u in noisy) and not _resumes_a_horizon(args):
            # else the first forward stops (ClsrUnit.noise_scale), after fairseq has set up the run
            raise ValueError(f"--clsr-variant {variant} ramps its gate noise alpha(t) over the run, but this run has "
                             "no --max-update to ramp over: pass --max-update N (or "
                             "--clsr-noise-ramp-updates N)")

    @classmethod
    def export_state_dict(cls, state_dict, model_cfg, src_id: int, tgt_id: int):
        """The pair (src_id, tgt_id)'s network under fairseq ``transformer`` names, and the
        model-config changes (None deletes a key): see ``export_fixed_gates``."""
        return export_fixed_gates(state_dict, model_cfg, src_id, tgt_id)

    def effective_parameters(self, src_lang_id: int, tgt_lang_id: int) -> int:
        """Parameters one sentence of the pair can touch: all but other languages' W^lang."""
        total = sum(p.numel() for p in self.parameters())
        banks = {id(m): m for m in self.modules() if isinstance(m, LanguageProjections)}.values()
        unused = sum(b.weight[0].numel() * (b.weight.size(0) - 1) for b in banks)
        return total - unused

    def clsr_units(self) -> List[ClsrUnit]:
        return [m for m in self.modules() if isinstance(m, ClsrUnit)]

    def auxiliary_outputs(self):
        """Eq. 6: |sum of gates / number of gate decisions - p| over the batch, all learned units,
        summed in fp32. A training loss only (as the authors): in eval mode (validation) it is
        logged with weight 0."""
        cfg = self.cfg
        learned = [u for u in self.clsr_units() if u.mode in ("learned", "soft") and u._call["last"] is not None]
        if learned:
            # each unit's sum and count once, kept on the device: no sync here (logging converts)
            sums = {u.name: u.last_gate_sum for u in learned}
            counts = {u.name: u.last_token_count for u in learned}

            def ratio(names):
                count = sum(counts[n] for n in names)
                count = count.clamp(min=1) if torch.is_tensor(count) else max(count, 1)
                return sum(sums[n] for n in names) / count

            total = ratio(list(sums))
            weight = cfg.clsr_budget_weight if self.training else 0.0
            self.report_loss("budget", (total - cfg.clsr_budget).abs(), weight)
            self.report_stat("gate_open", total)
            for stack in ("enc", "dec"):
                part = [n for n in sums if n.startswith(stack)]
                if part:
                    self.report_stat(f"gate_open_{stack}", ratio(part))
            if self.training and learned[0].mode == "learned":
                self.report_stat("noise_alpha", learned[0].noise_scale())
        for u in learned:
            u.reset_gate_record()
        return super().auxiliary_outputs()


# --- langshare export ---------------------------------------------------------------------------

CLSR_FIELDS = tuple(sorted({f.name for f in dataclasses.fields(ClsrTransformerConfig)}
                           - {f.name for f in dataclasses.fields(TransformerConfig)}))
# a unit's state-dict prefix: the attention output projections and fc2, each holding ``shared``
_UNIT_KEY = re.compile(r"^(encoder|decoder)\.layers\.(\d+)\.(self_attn\.out_proj|encoder_attn\.out_proj|fc2)\.shared\.weight$")
_UNIT_KIND = {"self_attn.out_proj": "self_attn", "encoder_attn.out_proj": "cross_attn", "fc2": "ffn"}
_DECODE_FULL = "decode the checkpoint with fairseq-generate --user-dir fairseq_langshare"
_NO_EXPORT = {
    "clsr": "CLSR with learned gates picks W^shared or W^lang token by token",
    "gate": "CLSR with soft gates (--clsr-variant gate) mixes W^shared and W^lang token by token",
    "ls-encoder-output": "CLSR --clsr-variant ls-encoder-output projects the encoder output by language",
}


def _stack_depth(state_dict, stack: str) -> int:
    layers = [int(m.group(1)) for m in (re.match(rf"^{stack}\.layers\.(\d+)\.", k) for k in state_dict) if m]
    return max(layers) + 1 if layers else 0


def export_fixed_gates(state_dict, model_cfg, src_id: int, tgt_id: int):
    """A CLSR model with fixed gates as a plain transformer for one pair. Per unit (Eq. 3 with
    g = 0 or 1), with W^lang the pair's matrix of the stack's side language (applied as
    ``h @ W^lang``, so the linear weight is its transpose):

    - shared attention unit: ``out_proj`` = W^shared with its bias;
    - language attention unit: ``out_proj.weight`` = W^lang^T, bias 0;
    - shared FFN unit: ``fc2`` = W^shared W_fc2, bias W^shared b_fc2 + b^shared;
    - language FFN unit: ``fc2`` = W^lang^T W_fc2, bias W^lang^T b_fc2.

    Products are taken in float64 and stored in the weights' dtype. The W^lang banks
    (``lang_proj`` or a unit's own ``projections``), schedule horizons and the language inventory
    are dropped, and so are the ``clsr_*`` options."""
    from ..export import ExportError  # not at import time: export imports the task, the task the models

    variant = str(getattr(model_cfg, "clsr_variant", "clsr"))
    if variant in _NO_EXPORT:
        raise ExportError(f"{_NO_EXPORT[variant]} and has no plain-transformer export: {_DECODE_FULL}")
    depth = {"encoder": _stack_depth(state_dict, "encoder"), "decoder": _stack_depth(state_dict, "decoder")}
    dedicated = getattr(model_cfg, "clsr_dedicated", "") or ""
    modes_cfg = SimpleNamespace(clsr_variant=variant, clsr_dedicated_set=set(
        parse_sublayers(str(dedicated), depth["encoder"], depth["decoder"]) if variant == "dedicated" else ()))
    lang_of = {"src": src_id, "tgt": tgt_id}
    side = {"encoder": str(getattr(model_cfg, "clsr_encoder_lang", "src")),
            "decoder": str(getattr(model_cfg, "clsr_decoder_lang", "tgt"))}

    out, unit_prefixes = {}, []
    for key in state_dict:
        m = _UNIT_KEY.match(key)
        if m is None:
            continue
        stack, index, path = m.group(1), int(m.group(2)), m.group(3)
        prefix = key[: -len(".shared.weight")]
        unit_prefixes.append(prefix)
        name = f"{stack[:3]}{index + 1}.{_UNIT_KIND[path]}"
        mode = gate_mode(modes_cfg, name, index + 1, depth[stack])
        if f"{prefix}.gate.w1" in state_dict or mode not in ("shared", "language"):
            raise ExportError(f"{_NO_EXPORT['clsr']} ({name}) and has no plain-transformer export: {_DECODE_FULL}")
        shared_w = state_dict[f"{prefix}.shared.weight"]
        shared_b = state_dict.get(f"{prefix}.shared.bias")
        dtype = shared_w.dtype
        if mode == "language":
            bank = state_dict.get(f"{prefix}.projections.weight")
            if bank is None:
                bank = state_dict[f"{stack}.lang_proj.weight"]
            weight, bias = bank[lang_of[side[stack]]].double().t(), None  # h @ W^lang = F.linear(h, W^lang^T)
        else:
            weight, bias = shared_w.double(), None if shared_b is None else shared_b.double()
        pre_w = state_dict.get(f"{prefix}.pre.weight")
        if pre_w is not None:  # FFN: the unit's map after fc2, folded into fc2
            pre_b = state_dict.get(f"{prefix}.pre.bias")
            if pre_b is not None:
                fc2_b = weight @ pre_b.double()
                bias = fc2_b if bias is None else fc2_b + bias
            weight = weight @ pre_w.double()
        if bias is None and (shared_b is not None or pre_w is not None):
            bias = weight.new_zeros(weight.size(0))  # the plain projection has a bias: 0 here
        out[f"{prefix}.weight"] = weight.to(dtype)
        if bias is not None:
            out[f"{prefix}.bias"] = bias.to(dtype)

    drop = ("lang_inventory", "encoder.lang_proj.weight", "decoder.lang_proj.weight")
    for key, value in state_dict.items():
        if key in drop or key.endswith(".schedule_horizons") or any(key.startswith(p + ".") for p in unit_prefixes):
            continue
        out[key] = value
    return out, {name: None for name in CLSR_FIELDS}


@register_model_architecture("clsr_transformer", "clsr_transformer")
def clsr_transformer(args):
    """Transformer base (6+6, 512/2048, 8 heads), d_g = 128, as the paper."""
    base_architecture(args)


@register_model_architecture("clsr_transformer", "clsr_transformer_small")
def clsr_transformer_small(args):
    small_preset(args)
    args.clsr_gate_dim = getattr(args, "clsr_gate_dim", 32)
    base_architecture(args)


@register_model_architecture("clsr_transformer", "clsr_transformer_tiny")
def clsr_transformer_tiny(args):
    tiny_preset(args)
    args.clsr_gate_dim = getattr(args, "clsr_gate_dim", 8)
    base_architecture(args)
