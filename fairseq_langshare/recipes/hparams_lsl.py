"""LSL recipes: Pires, Schmidt, Liao, Monz, Peitz, *Learning Language-Specific Layers for
Multilingual Machine Translation*, ACL 2023 (``papers/lsl_language_specific_layers_acl2023.txt``):
Table 1 and 4 (separate decoder), Table 5 (shared decoder), Table 6 (zero-shot), on the 10
languages with Flores-101 dev/devtest as valid/test.

Settings (section 4.1, unless noted):
* 16 encoder / 3 decoder layers, d = 512, FFN 2048, 8 heads, all embeddings shared; the
  baseline has a separate decoder per target language (Table 1) or a shared one (Table 5).
* Adam, lr 4e-4, inverse square root schedule with 4000 warmup updates, 150K updates, no dropout
  and no weight decay, fp16.
* Not stated, chosen here: Adam betas (0.9, 0.98), label smoothing 0.1, 4096 tokens on each of 8
  devices with update-freq 4 (131K tokens per update), the natural language-pair distribution
  (fairseq's ``concat``; the paper's T = 5 balances data *sources*, appendix B, which is the data
  recipe's business), beam 5 and length penalty 1.0, the last checkpoint (single runs, section 4.1),
  pre-/post-norm as fairseq's default (post-norm). The paper appends source and target tags to
  the source sentence and a corpus tag (HQ/LQ); here the target tag is prepended (the task's
  ``--encoder-langtok tgt``) and there is no corpus tag.
* LSL-NAS: ``SRC={3,4} & TGT={13,14,15}`` (section 4.2, Figure 2); LSL-NAS-SD:
  ``SRC={4} & TGT={12,13,14,15,16}`` (section 4.4); dense pre-training initialises from the
  matching baseline (section 3.3); LS-FFN / LS-ATTENTION (Table 4).
* Evaluation: chrF (``nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no``) and spBLEU
  (``tok:flores101``) with sacreBLEU (section 4.1); spBLEU needs the flores SentencePiece model on
  disk (``langshare evaluate`` never downloads it).
"""

from .hparams import Batch, Evaluation, Experiment, Method, Paper

NAS = "SRC={3,4} & TGT={13,14,15}"
NAS_TINY = "SRC={2} & TGT={3}"          # lsl_transformer_tiny has 4 encoder layers
NAS_SD = "SRC={4} & TGT={12,13,14,15,16}"
NAS_SD_TINY = "SRC={1} & TGT={3,4}"
ADAPTER_SIZE = {"encoder_layers": 16, "decoder_layers": 3, "share_all_embeddings": True}
ANALYZE = ("langshare analyze lsl {ckpt} --out {run}/analysis",)


def _separate_decoder():
    sep = {"_name": "lsl_transformer", "lsl_separate_decoder": True}
    nas = {**sep, "lsl_encoder_layers": NAS}
    return (
        Method("baseline", dict(sep), "Table 1 Separate Decoder Baseline"),
        Method("search", {**sep, "lsl_search": True}, "section 4.2 / Figure 3: architecture search (mixing weights)",
               after=ANALYZE),
        Method("lsl-nas", nas, "Table 1 LSL-NAS", tiny={"lsl_encoder_layers": NAS_TINY}),
        Method("lsl-nas-dense", nas, "Table 1 LSL-NAS + Dense Pre-training", tiny={"lsl_encoder_layers": NAS_TINY},
               init_from="baseline", init_key="lsl_dense_init"),
        Method("ls-ffn", {**nas, "lsl_component": "ffn"}, "Table 4 LS-FFN", tiny={"lsl_encoder_layers": NAS_TINY}),
        Method("ls-attention", {**nas, "lsl_component": "attention"}, "Table 4 LS-ATTENTION",
               tiny={"lsl_encoder_layers": NAS_TINY}),
        Method("adapters-enc-src-tgt-256",
               {"_name": "langshare_adapter_transformer", **ADAPTER_SIZE, "adapter_placement": "enc-src-tgt",
                "adapter_bottleneck": 256},
               "Table 1 Language Adapters ENC (SRC+TGT) 256 (on a shared decoder here)", tiny={"adapter_bottleneck": 8}),
        Method("adapters-enc-128",
               {"_name": "langshare_adapter_transformer", **ADAPTER_SIZE, "adapter_placement": "enc-src",
                "adapter_bottleneck": 128},
               "Table 1 Language Adapters ENC 128 (on a shared decoder here)", tiny={"adapter_bottleneck": 8}),
    )


def _shared_decoder(zero_shot=False):
    table = "Table 6" if zero_shot else "Table 5"
    base = {"_name": "lsl_transformer"}
    sd = {**base, "lsl_encoder_layers": NAS_SD}
    methods = [
        Method("baseline", dict(base), f"{table} Shared Decoder Baseline"),
        Method("lsl-nas-sd", sd, f"{table} LSL-NAS-SD", tiny={"lsl_encoder_layers": NAS_SD_TINY}),
        Method("lsl-nas-sd-dense", sd, f"{table} LSL-NAS-SD + Dense Pre-training",
               tiny={"lsl_encoder_layers": NAS_SD_TINY}, init_from="baseline", init_key="lsl_dense_init"),
        Method("adapters-512",
               {"_name": "langshare_adapter_transformer", **ADAPTER_SIZE, "adapter_placement": "enc-dec",
                "adapter_bottleneck": 512}, f"{table} Shared Decoder Adapters 512", tiny={"adapter_bottleneck": 8}),
    ]
    if not zero_shot:
        methods.insert(1, Method("search-sd", {**base, "lsl_search": True},
                                 "section 4.4: architecture search with a shared decoder", after=ANALYZE))
    return tuple(methods)


def _experiment(name, direction, reproduces, methods, zero_shot=False):
    config = {
        "common": {"seed": 1, "log_format": "json", "log_interval": 100, "fp16": True},
        "task": {"_name": "multilingual_langshare", "encoder_langtok": "tgt", "sampling_method": "concat"},
        "model": {"dropout": 0.0, "attention_dropout": 0.0, "share_all_embeddings": True},
        "criterion": {"_name": "langshare_label_smoothed_cross_entropy", "label_smoothing": 0.1},
        "optimizer": {"_name": "adam", "adam_betas": "(0.9,0.98)", "weight_decay": 0.0},
        "lr_scheduler": {"_name": "inverse_sqrt", "warmup_updates": 4000},
        "optimization": {"lr": 0.0004, "max_update": 150000},
        "dataset": {"skip_invalid_size_inputs_valid_test": True},
        "distributed_training": {"ddp_backend": "legacy_ddp"},
    }
    return Experiment(
        name=name, corpus="lsl10", direction=direction, reproduces=reproduces, config=config,
        batch=Batch(8 * 4 * 4096, unit="tokens", per_gpu_cap=4096, source="not stated in the paper: chosen"),
        evaluation=Evaluation(beam=5, lenpen=1.0, metrics=("chrf", "spbleu", "bleu"), average_last=1,
                              zero_shot=zero_shot, spbleu_tokenize="flores101", win_metric="chrf",
                              source="section 4.1: chrF and spBLEU (flores101); beam and length penalty not stated"),
        methods=methods,
        save_interval_updates=5000,
    )


PAPER = Paper(
    name="lsl",
    title="Learning Language-Specific Layers for Multilingual Machine Translation (ACL 2023)",
    paper_file="lsl_language_specific_layers_acl2023.txt",
    experiments=(
        _experiment("lsl10", "all", "Tables 1 and 4: separate decoder, all 90 directions", _separate_decoder()),
        _experiment("lsl10-sd", "all", "Table 5: shared decoder, all 90 directions", _shared_decoder()),
        _experiment("lsl10-zero-shot", "lsl-zero-shot",
                    "Table 6: shared decoder trained on English and same-group directions, zero-shot between groups",
                    _shared_decoder(zero_shot=True), zero_shot=True),
    ),
)
