"""Latent-depth recipes: Li, Cooper Stickland, Tang, Kong, *Deep Transformers with Latent Depth*,
NeurIPS 2020 (``papers/latent_depth_neurips2020.txt``), Tables 3, 4, 5 (TED-8 related O2M,
diverse O2M, diverse M2O; data statistics in Table 12).

Settings (appendix C.2 and the authors' command in fairseq's ``examples/latent_depth/README.md``):
* Model size of Wang et al. (2020) [32]: d = 512, FFN 1024, 4 heads; pre-norm for every model
  ("For baseline models, we use the pre-norm setting"); decoder input/output embeddings shared,
  a target-language tag on the decoder side (README: ``--share-decoder-input-output-embed
  --decoder-langtok``). "6/6, wide" is Transformer-big's width (1024/4096, 16 heads, C.2).
* Adam (0.9, 0.98), eps 1e-6, inverse square root schedule, 8000 warmup updates from 1e-7, clip
  norm 1.0, dropout 0.3 and attention dropout 0.3, label smoothing 0.1 (README).
* Learning rate 1.5e-3 for the deep models (C.2: "almost 2x learning rate (1.5e-3)" for deeper
  models; README); 7e-4 for the 6-layer static baselines (C.2, Transformer-big setting).
* Batch: 4096 tokens per language (C.2), i.e. 8 x 4096 tokens per update for the 8 languages of
  TED-8; languages sampled uniformly, as the reference's round robin over pairs does.
* 14K updates, the last checkpoint evaluated (C.2); beam 5, length penalty 1.0 (C.2).
* Latent layers: beta = 1, lambda = 0.1 (C.2); KL annealed over 5000 updates (README
  ``--anneal-updates 5000``); target depth K = half the latent stack, on the decoder only
  (README ``--target-layers 12`` for 24 decoder layers; appendix D applies L_K to the decoder only).
* Language of the posteriors: the non-English side (the target for O2M, the source for M2O).
* The paper's procedure, not this package's defaults: the logits learn at the weights' rate
  (``latent_logit_lr_scale: 1``; at 14K updates of lr 1.5e-3 they can travel about 14 units)
  and training never commits (``latent_commit_updates: 0``): inference keeps each language's
  top K, as section 5.2 prunes. Decoding warns if the posteriors end undecided
  (docs/latent_depth.md, "Why the posteriors did not decide").
"""

from .hparams import Batch, Evaluation, Experiment, Method, Paper

NARROW = {"encoder_embed_dim": 512, "decoder_embed_dim": 512, "encoder_ffn_embed_dim": 1024,
          "decoder_ffn_embed_dim": 1024, "encoder_attention_heads": 4, "decoder_attention_heads": 4}
WIDE = {"encoder_embed_dim": 1024, "decoder_embed_dim": 1024, "encoder_ffn_embed_dim": 4096,
        "decoder_ffn_embed_dim": 4096, "encoder_attention_heads": 16, "decoder_attention_heads": 16}
PRE_NORM = {"encoder_normalize_before": True, "decoder_normalize_before": True}
SHALLOW_LR = {"optimization": {"lr": 0.0007}}


def _static(enc, dec, wide=False):
    return {"_name": "langshare_transformer", **(WIDE if wide else NARROW), "encoder_layers": enc,
            "decoder_layers": dec, **PRE_NORM}


def _latent(stacks, enc, dec, side):
    model = {"_name": "latent_depth_transformer", **NARROW, "encoder_layers": enc, "decoder_layers": dec,
             "latent_layers": stacks, "latent_kl_weight": 1.0, "latent_target_depth_weight": 0.1,
             "latent_kl_anneal_updates": 5000, "latent_encoder_lang": side, "latent_decoder_lang": side,
             "latent_logit_lr_scale": 1.0, "latent_commit_updates": 0}
    tiny = {"encoder_layers": 2, "decoder_layers": 4, "latent_kl_anneal_updates": 1}
    if stacks in ("decoder", "both"):
        model["latent_decoder_target_depth"] = dec // 2
        tiny["latent_decoder_target_depth"] = 2
    if stacks == "encoder":
        tiny.update(encoder_layers=4, decoder_layers=2)
    return model, tiny


def _methods(direction, table):
    side = "tgt" if direction == "o2m" else "src"
    static_tiny = lambda enc, dec: {"encoder_layers": enc, "decoder_layers": dec}  # noqa: E731
    methods = [
        Method("baseline", _static(6, 6), f"{table} 6/6", tiny=static_tiny(2, 2), config=SHALLOW_LR),
        Method("static-12-12", _static(12, 12), f"{table} 12/12", tiny=static_tiny(2, 4)),
        Method("static-24-24", _static(24, 24), f"{table} 24/24 (diverged in the paper: NA)",
               tiny=static_tiny(4, 4)),
    ]
    if direction == "o2m":
        methods.insert(1, Method("wide-6-6", _static(6, 6, wide=True), f"{table} 6/6, wide",
                                 tiny=static_tiny(2, 2), config=SHALLOW_LR))
    else:
        methods.insert(2, Method("static-24-12", _static(24, 12), f"{table} 24/12", tiny=static_tiny(4, 2)))
    for name, stacks, enc, dec, only in (("ll-d-12-24", "decoder", 12, 24, None),
                                         ("ll-d-24-24", "decoder", 24, 24, None),
                                         ("ll-d-12-36", "decoder", 12, 36, "m2o"),
                                         ("ll-e-36-12", "encoder", 36, 12, "m2o"),
                                         ("ll-both-24-24", "both", 24, 24, "m2o")):
        if only and only != direction:
            continue
        label = {"decoder": "LL-D", "encoder": "LL-E", "both": "LL-Both"}[stacks]
        model, tiny = _latent(stacks, enc, dec, side)
        methods.append(Method(name, model, f"{table} {label}, {enc}/{dec}", tiny=tiny,
                              after=("langshare analyze latent-depth {ckpt} --out {run}/analysis",)))
    return tuple(methods)


def _experiment(group, direction, table):
    config = {
        "common": {"seed": 2, "log_format": "json", "log_interval": 100},
        "task": {"_name": "multilingual_langshare", "decoder_langtok": True, "sampling_method": "uniform"},
        "model": {"dropout": 0.3, "attention_dropout": 0.3, "share_decoder_input_output_embed": True},
        "criterion": {"_name": "langshare_label_smoothed_cross_entropy", "label_smoothing": 0.1},
        "optimizer": {"_name": "adam", "adam_betas": "(0.9,0.98)", "adam_eps": 1e-6},
        "lr_scheduler": {"_name": "inverse_sqrt", "warmup_updates": 8000, "warmup_init_lr": 1e-7},
        "optimization": {"lr": 0.0015, "max_update": 14000, "clip_norm": 1.0},
        "dataset": {"skip_invalid_size_inputs_valid_test": True},
        "distributed_training": {"ddp_backend": "legacy_ddp"},
    }
    return Experiment(
        name=f"{group}-{direction}", corpus=f"ted8-{group}", direction=direction,
        reproduces=f"{table}: TED-8 {group}, {direction.upper()}",
        config=config,
        batch=Batch(8 * 4096, unit="tokens", per_gpu_cap=4096, source="C.2: 4096 tokens per language, 8 languages"),
        evaluation=Evaluation(beam=5, lenpen=1.0, metrics=("bleu",), average_last=1,
                              source="C.2: beam 5, length penalty 1.0, last checkpoint"),
        methods=_methods(direction, table),
        save_interval_updates=2000,
    )


PAPER = Paper(
    name="latent_depth",
    title="Deep Transformers with Latent Depth (NeurIPS 2020)",
    paper_file="latent_depth_neurips2020.txt",
    experiments=(
        _experiment("related", "o2m", "Table 3"),
        _experiment("diverse", "o2m", "Table 4"),
        _experiment("diverse", "m2o", "Table 5"),
    ),
)
