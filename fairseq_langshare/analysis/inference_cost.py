"""What a model runs per sentence at inference, measured on the built model, and its parameters.

``inference_profile(model, src_id, tgt_id)`` runs one sentence of the pair through the model in
eval mode (encoder and a teacher-forced decoder pass) with forward hooks on every fairseq
Transformer layer it holds, including per-language copies, and reports per stack:

* ``layers``: the layers whose attention ran (a skipped latent or sparse layer, or an unused
  language's copy, does not count);
* ``d_model``: the width of the layers' input; ``ffn``: the output width of ``fc1`` as it ran (an
  adaptive-sparse FFN runs only its kept blocks); ``heads``: the attention heads that ran
  (projected width / head size where the projections run as modules, else the module's heads);

and the floating-point operations of the whole pass (``torch.utils.flop_counter``), which show
what a method adds on top of the layers (adapters, CLSR gates and projections); the pass is run
once before it is counted, so that what a model computes once after loading is not counted.
``parameters(model, pairs)``: the total and, per pair, what ``effective_parameters`` reports or
what the model's per-pair export keeps.
"""

import contextlib
import warnings
from typing import Dict, Sequence

import torch
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase, TransformerEncoderLayerBase

LAYER_TYPES = (TransformerEncoderLayerBase, TransformerDecoderLayerBase)
STACKS = ("encoder", "decoder")


@contextlib.contextmanager
def _recording(model):
    """Hooks that fill {stack: {layer id: {"d_model", "ran", "ffn", "heads"}}} while active."""
    records = {stack: {} for stack in STACKS}
    handles = []

    def attention_hooks(attention, entry):
        def before(module, args):
            entry["ran"] = True
            entry["heads"].append(getattr(module, "num_heads", None))

        def projected(module, args, out):  # q_proj ran as a module: the heads it projected
            entry["heads"][-1] = out.shape[-1] // attention.head_dim

        handles.append(attention.register_forward_pre_hook(before))
        q_proj = getattr(attention, "q_proj", None)
        if isinstance(q_proj, torch.nn.Module) and hasattr(attention, "head_dim"):
            handles.append(q_proj.register_forward_hook(projected))

    for stack in STACKS:
        for layer in getattr(model, stack).modules():
            if not isinstance(layer, LAYER_TYPES):
                continue
            entry = {"ran": False, "d_model": None, "ffn": [], "heads": []}
            records[stack][id(layer)] = entry
            handles.append(layer.register_forward_pre_hook(
                lambda module, args, entry=entry: entry.update(d_model=args[0].shape[-1])))
            handles.append(layer.fc1.register_forward_hook(
                lambda module, args, out, entry=entry: entry["ffn"].append(out.shape[-1])))
            for name in ("self_attn", "encoder_attn"):
                if isinstance(getattr(layer, name, None), torch.nn.Module):
                    attention_hooks(getattr(layer, name), entry)
    try:
        yield records
    finally:
        for handle in handles:
            handle.remove()


def _sentence(dictionary, length, generator):
    first = dictionary.nspecial
    return torch.randint(first, len(dictionary), (1, length), generator=generator)


@torch.no_grad()
def inference_profile(model, src_lang_id: int, tgt_lang_id: int, length: int = 12) -> Dict:
    """Layers, widths and FLOPs of one ``length``-token sentence of the pair at inference."""
    from torch.utils.flop_counter import FlopCounterMode

    was_training = model.training
    model.eval()
    g = torch.Generator().manual_seed(0)
    src = torch.cat([_sentence(model.encoder.dictionary, length, g),
                     torch.full((1, 1), model.encoder.dictionary.eos())], 1)
    prev = torch.cat([torch.full((1, 1), model.decoder.dictionary.eos()),
                      _sentence(model.decoder.dictionary, length, g)], 1)
    def forward():
        model(src, torch.tensor([src.size(1)]), prev, src_lang_id=torch.tensor([src_lang_id]),
              tgt_lang_id=torch.tensor([tgt_lang_id]))

    try:
        with warnings.catch_warnings():
            # a count, not a decoding: not latent depth's warning that (an untrained model's) posteriors
            # are undecided, which a --dry-run plan printed
            warnings.filterwarnings("ignore", message=".*selection posteriors are undecided")
            # once uncounted: what a model computes once after loading (CLSR's folded matrices,
            # docs/clsr.md "The inference path") is not a cost of every sentence
            forward()
            with _recording(model) as records, FlopCounterMode(display=False) as flops:
                forward()
    finally:
        model.train(was_training)
    out = {"flops": int(flops.get_total_flops())}
    for stack, layers in records.items():
        ran = [e for e in layers.values() if e["ran"]]
        out[stack] = {"layers": len(ran),
                      "d_model": sorted({e["d_model"] for e in ran}),
                      "ffn": sorted({w for e in ran for w in e["ffn"]}),
                      "heads": sorted({h for e in ran for h in e["heads"]})}
    return out


def cost_signature(profile: Dict) -> tuple:
    """What must be equal for equal inference cost: layers run and widths, per stack."""
    return tuple((stack, profile[stack]["layers"], tuple(profile[stack]["d_model"]),
                  tuple(profile[stack]["ffn"]), tuple(profile[stack]["heads"])) for stack in STACKS)


def _unique(tensors) -> int:
    seen, total = set(), 0
    for t in tensors:
        if torch.is_floating_point(t) and (t.data_ptr(), t.shape) not in seen:
            seen.add((t.data_ptr(), t.shape))
            total += t.numel()
    return total


def parameters(model, pair_ids: Dict[str, Sequence[int]], model_cfg=None) -> Dict:
    """{"total", "per_pair": {pair: n}}: tied weights counted once; per pair the model's
    ``effective_parameters`` or its per-pair export (``export_state_dict``; one that refuses the
    configuration is an error naming ``effective_parameters``), else the total."""
    total = _unique(model.parameters())
    per_pair = {}
    state = model.state_dict()
    buffers = {name.rsplit(".", 1)[-1] for name, _ in model.named_buffers()}  # e.g. version: not parameters
    for pair, (src, tgt) in pair_ids.items():
        if hasattr(model, "effective_parameters"):
            per_pair[pair] = int(model.effective_parameters(src, tgt))
        elif hasattr(type(model), "export_state_dict") and model_cfg is not None:
            from ..export import ExportError

            try:
                weights = type(model).export_state_dict(state, model_cfg, src, tgt)[0]
            except ExportError as error:  # its advice is for `langshare export`, not for this count
                raise ValueError(
                    f"{type(model).__name__}: its export_state_dict refuses this configuration ({error}), so the "
                    f"parameters a sentence of {pair} uses are unknown: give the model class a method "
                    "effective_parameters(src_lang_id, tgt_lang_id) that counts them") from error
            per_pair[pair] = _unique(v for k, v in weights.items() if k.rsplit(".", 1)[-1] not in buffers)
        else:
            per_pair[pair] = total
    return {"total": total, "per_pair": per_pair}
