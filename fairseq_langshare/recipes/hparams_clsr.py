"""CLSR recipes: Zhang, Bapna, Sennrich, Firat, *Share or Not?* ICLR 2021
(``papers/clsr_share_or_not_iclr2021.txt``), Tables 1, 2, 7 and Figures 2-4.

Settings (section 5, "Model Settings", unless noted):
* Transformer base: L = 6, d = 512, 8 heads, FFN 2048; dropout 0.1 on residuals and attention weights.
* Adam (0.9, 0.98), label smoothing 0.1, inverse square root schedule, warmup 4K.
* Peak learning rate: not stated (the authors' Lingvo schedule is Vaswani et al.'s
  d^-0.5 min(t^-0.5, t w^-1.5)); with d = 512 and w = 4000 its peak is 7.0e-4, used here.
* Training sequence length limited to 100; batch size 1920, read as sentences (the paper gives no
  unit; 1920 tokens would be far below any Transformer-base setting): 240 sentences on each of 8
  devices.
* 500K updates on OPUS-100, 600K on WMT-14; beam 4, length penalty 0.6; the last 5 checkpoints
  averaged (saved every 2000 updates here: the paper does not say how often).
* CLSR: d_g = 128 (the preset), alpha ramps linearly 0 -> 5 over the run (the package default
  ``--clsr-noise-ramp-updates`` = ``--max-update``); budgets P = {0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0}.
* Language tags: a target tag on the source for O2M, a source tag for M2O (slides, "For many-to-one
  translation (M2O) task, we adopt source language tag"); W^lang indexed by the target language on
  both sides for O2M and by the source language on both sides for M2O (footnote 6: one matrix per
  language in encoder and decoder).
* Data: "Original" = the natural distribution (fairseq's ``concat``), "Oversample" = temperature
  T = 5 (section 5). SentencePiece 64K (data recipe) -> one joint vocabulary, all embeddings shared
  (the paper does not say; the joint vocabulary makes it the natural choice).
* Resource groups: OPUS-100 High > 0.9M, Low < 0.1M; WMT-14 High > 10M, Low < 1M (section 5).
* BLEU: sacreBLEU ``BLEU+case.mixed+numrefs.1+smooth.exp+tok.13a`` (footnote 5), which is what
  ``langshare evaluate`` computes (sacrebleu 2.x writes it ``nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp``).
"""

from .hparams import Batch, Evaluation, Experiment, Method, Paper

BUDGETS = (0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0)

# Dedicated (Tables 4 and 5): which sub-layers of the bottom (layer 1) and top (layer 6) encoder and
# decoder layers are language-specific. Columns as printed in the tables:
DEDICATED_COLUMNS = ("enc1.self_attn", "enc1.ffn", "enc6.self_attn", "enc6.ffn",
                     "dec1.self_attn", "dec1.cross_attn", "dec1.ffn", "dec6.self_attn", "dec6.cross_attn", "dec6.ffn")
DEDICATED_TABLES = {  # "x": a check mark in that column (Table 4: OPUS-100, Table 5: WMT-14)
    ("opus100", "original", "o2m"): "xx.xx.xxxx",
    ("opus100", "original", "m2o"): "xx......xx",
    ("opus100", "oversample", "o2m"): "...xx..xxx",
    ("opus100", "oversample", "m2o"): "x.......x.",
    ("wmt14", "original", "o2m"): ".x.xx.xxxx",
    ("wmt14", "original", "m2o"): "xx..xx.x.x",
    ("wmt14", "oversample", "o2m"): ".x.xxx.xxx",
    ("wmt14", "oversample", "m2o"): "x....x.x.x",
}
TINY_DEDICATED_LAYERS = {"enc6": "enc2", "dec6": "dec2"}  # the tiny preset has 2 + 2 layers


def dedicated_sublayers(corpus, setting, direction, tiny=False):
    marks = DEDICATED_TABLES[(corpus, setting, direction)]
    names = [name for name, mark in zip(DEDICATED_COLUMNS, marks) if mark == "x"]
    if tiny:
        names = [TINY_DEDICATED_LAYERS.get(n.split(".")[0], n.split(".")[0]) + "." + n.split(".")[1] for n in names]
    return ",".join(names)


def _methods(corpus, setting, direction):
    table = {"opus100": "Table 1", "wmt14": "Table 2"}[corpus]
    side = {"clsr_encoder_lang": "tgt"} if direction == "o2m" else {"clsr_decoder_lang": "src"}
    clsr = {"_name": "clsr_transformer", **side}
    methods = [
        Method("baseline", {"_name": "langshare_transformer"}, f"{table} Baseline"),
        Method("ls", {**clsr, "clsr_variant": "ls-encoder-output"}, f"{table} LS (Zhang et al. 2020b)"),
        Method("clsr-s", {**clsr, "clsr_variant": "shared"}, f"{table} CLSR-S"),
        Method("clsr-l", {**clsr, "clsr_variant": "language"}, f"{table} CLSR-L"),
    ]
    figure = {"opus100": "Figure 2", "wmt14": "Figure 4"}[corpus]
    best = 0.3 if direction == "o2m" else 0.1  # section 5.1: CLSR* is p = 0.3 (O2M), p = 0.1 (M2O)
    for p in BUDGETS:
        star = f"; {table} CLSR*" if p == best else ""
        methods.append(Method(f"clsr-p{p}", {**clsr, "clsr_budget": p}, f"{figure} budget p = {p}{star}",
                              after=("langshare analyze clsr {ckpt} --split test --out {run}/gates",)))
    methods.append(Method("clsr-gate", {**clsr, "clsr_variant": "gate", "clsr_budget": best},
                          f"Table 7 CLSR-Gate (p = {best})"))
    methods.append(Method("clsr-wo-p", {**clsr, "clsr_budget": best, "clsr_budget_weight": 0.0},
                          "Table 7 CLSR w/o p"))
    if corpus == "opus100":
        methods.append(Method("top-bottom", {**clsr, "clsr_variant": "top-bottom"}, f"{table} Top-Bottom"))
    methods.append(Method(
        "dedicated", {**clsr, "clsr_variant": "dedicated",
                      "clsr_dedicated": dedicated_sublayers(corpus, setting, direction)},
        f"{table} Dedicated (sub-layers of Table {4 if corpus == 'opus100' else 5})",
        tiny={"clsr_dedicated": dedicated_sublayers(corpus, setting, direction, tiny=True)}))
    return tuple(methods)


def _experiment(corpus, direction, setting):
    sampling = ({"sampling_method": "concat"} if setting == "original"
                else {"sampling_method": "temperature", "sampling_temperature": 5.0})
    config = {
        "common": {"seed": 1, "log_format": "json", "log_interval": 100},
        "task": {"_name": "multilingual_langshare", "encoder_langtok": "tgt" if direction == "o2m" else "src",
                 "max_source_positions": 100, "max_target_positions": 100, **sampling},
        "model": {"dropout": 0.1, "attention_dropout": 0.1, "share_all_embeddings": True},
        "criterion": {"_name": "langshare_label_smoothed_cross_entropy", "label_smoothing": 0.1},
        "optimizer": {"_name": "adam", "adam_betas": "(0.9,0.98)"},
        "lr_scheduler": {"_name": "inverse_sqrt", "warmup_updates": 4000},
        "optimization": {"lr": 0.0007, "max_update": 500000 if corpus == "opus100" else 600000},
        "dataset": {"skip_invalid_size_inputs_valid_test": True},
        "distributed_training": {"ddp_backend": "legacy_ddp"},
    }
    thresholds = ({"high_threshold": 900001, "low_threshold": 100000} if corpus == "opus100"
                  else {"high_threshold": 10000001, "low_threshold": 1000000})
    table = {"opus100": "Table 1", "wmt14": "Table 2"}[corpus]
    name = f"{corpus}-{direction}" + ("" if setting == "original" else "-oversample")
    return Experiment(
        name=name, corpus=corpus, direction=direction,
        reproduces=f"{table}, {direction.upper()}, {'Original' if setting == 'original' else 'Over Sample'} "
                   f"data ({'Figure 2' if corpus == 'opus100' else 'Figure 4'} for the budget sweep)",
        config=config,
        batch=Batch(1920, unit="sentences", per_gpu_cap=240, source="section 5: batch size 1920"),
        evaluation=Evaluation(beam=4, lenpen=0.6, metrics=("bleu",), average_last=5, **thresholds,
                              bleu_tokenize="13a",
                              source="section 5: beam 4, length penalty 0.6, last 5 checkpoints averaged; "
                                     "footnote 5: sacreBLEU signature case.mixed+numrefs.1+smooth.exp+tok.13a"),
        methods=_methods(corpus, setting, direction),
        save_interval_updates=2000,
    )


PAPER = Paper(
    name="clsr",
    title="Share or Not? Learning to Schedule Language-Specific Capacity for Multilingual Translation (ICLR 2021)",
    paper_file="clsr_share_or_not_iclr2021.txt",
    experiments=tuple(_experiment(c, d, s) for c in ("opus100", "wmt14") for s in ("original", "oversample")
                      for d in ("o2m", "m2o")),
)
