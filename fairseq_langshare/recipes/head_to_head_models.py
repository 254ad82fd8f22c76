"""The models of the head-to-head (``langshare head-to-head``), in one table: edit the flags here.

Every model runs the baseline's inference cost: 2 encoder and 2 decoder layers per sentence,
d_model 128, FFN 512, 4 heads (``langshare_transformer_small``). The language-sharing methods get
their language-specific capacity without running more (LSL replaces a layer by per-language copies,
latent depth and adaptive sparsity select from a larger pool); adapters and CLSR run the same
layers plus small extra modules, which the plan's FLOPs column shows. ``tests/test_head_to_head.py``
checks layers and widths on the models these flags build. The flags of each direction put the
language-specific part on the side whose language varies (O2M: target, M2O: source), as the papers
do for each direction. In the many-to-many set (M2M: both directions through English, evaluated on
the supervised and the zero-shot directions) both sides vary: each model's ``many_to_many`` says
which side is specific to which language there, and why.
"""

from dataclasses import dataclass
from typing import Dict, Tuple

DIRECTIONS = ("o2m", "m2o", "m2m")


@dataclass(frozen=True)
class H2HModel:
    name: str  # run directory name; "baseline" is what every other model is compared with
    label: str
    arch: str
    flags: Dict[str, Tuple[str, ...]]  # per direction, after --arch
    reason: str  # why this configuration (paper, section)
    extra_compute: str = ""  # what it runs beyond the baseline's layers, if anything
    # `langshare analyze` commands (argv after "analyze") that draw what each language uses;
    # {ckpt}, {out} and {corpus} are filled in
    analysis: Tuple[Tuple[str, ...], ...] = ()
    many_to_many: str = ""  # why its M2M flags (every model but the baselines says, even "the same flags": tests/test_head_to_head_m2m.py)

    def argv(self, direction: str) -> Tuple[str, ...]:
        return ("--arch", self.arch) + tuple(self.flags[direction])

    def reason_for(self, direction: str) -> str:
        """``reason``, and for the many-to-many set ``many_to_many`` after it."""
        return self.reason + (f"; M2M: {self.many_to_many}" if direction == "m2m" and self.many_to_many else "")


def _every(*flags):
    return {d: tuple(flags) for d in DIRECTIONS}


MODELS = (
    H2HModel(
        "baseline", "baseline", "langshare_transformer_small", _every(),
        "the shared multilingual model every method is compared with: 2+2 post-norm layers, 128/512, 4 heads, "
        "target-language token on the source (Johnson et al. 2017)"),
    H2HModel(
        "baseline_prenorm", "baseline (pre-norm)", "langshare_transformer_small",
        _every("--encoder-normalize-before", "--decoder-normalize-before"),
        "the baseline with pre-norm layers, as latent depth and adaptive sparsity have (latent depth section 3.2, "
        "adaptive sparse Eq. 7): tells their effect from the layer-norm placement's"),
    H2HModel(
        "adapters", "language adapters", "langshare_adapter_transformer_small", _every("--adapter-placement", "enc-dec"),
        "the strongest baseline of the papers with a shared decoder: source adapters after every encoder layer, "
        "target adapters after every decoder layer (Philip et al. 2020; LSL paper Table 5, 'Shared Decoder "
        "Adapters'); bottleneck 32 = d/4, as 128 for d = 512 (the preset)",
        extra_compute="an adapter (layer norm, 128->32->128) after every layer",
        many_to_many="the same flags: source adapters in the encoder and target adapters in the decoder are "
                     "Philip et al.'s (2020) design for zero-shot directions (each adapter is trained, through "
                     "English, with its own language on its own side); the LSL paper's zero-shot table compares "
                     "with them (Table 6)"),
    H2HModel(
        "lsl", "LSL", "lsl_transformer_small",
        {"o2m": ("--encoder-layers", "2", "--lsl-encoder-layers", "TGT={2}"),
         "m2o": ("--encoder-layers", "2", "--lsl-encoder-layers", "SRC={1}"),
         "m2m": ("--encoder-layers", "2", "--lsl-encoder-layers", "SRC={1} & TGT={2}")},
        "one of the 2 encoder layers is language-specific, where the LSL paper's search puts them: target LSLs at "
        "the top of the encoder (O2M), source LSLs at the bottom (M2O) (section 5, LSL-NAS-SD in Table 5: "
        "'SRC={4} & TGT={12-16}' of 16); a sentence runs one copy, so the cost is the baseline's",
        analysis=(("lsl-similarity", "{ckpt}", "--split", "test", "--out", "{out}"),),
        many_to_many="the LSL paper's setting is many-to-many (90 directions, zero-shot in Table 6) with a shared "
                     "decoder: LSL-NAS-SD puts a source LSL low and target LSLs at the top of the encoder "
                     "('SRC={4} & TGT={12-16}' of 16, section 4.4), and both kinds beat either alone (Table 1); "
                     "with 2 encoder layers that is SRC={1} & TGT={2}, still one copy per layer per sentence"),
    H2HModel(
        "clsr", "CLSR", "clsr_transformer_small",
        {"o2m": ("--clsr-encoder-lang", "tgt", "--clsr-budget", "0.3"),
         "m2o": ("--clsr-encoder-lang", "src", "--clsr-decoder-lang", "src", "--clsr-budget", "0.1"),
         "m2m": ("--clsr-encoder-lang", "src", "--clsr-decoder-lang", "tgt", "--clsr-budget", "0.3")},
        "target-specific routing on both sides for O2M, source-specific for M2O, with the budget the paper found "
        "best for each (p = 0.3 O2M, p = 0.1 M2O: section 5, Figure 2); gate size d_g 32 (the preset)",
        extra_compute="per sub-layer a gate (128->32->1) and a 128x128 shared or language projection "
                      "(short inputs run both projections and select)",
        analysis=(("clsr", "{ckpt}", "--split", "test", "--out", "{out}"),
                  ("clsr-lsscore", "{out}/gates.json", "--manifest", "{corpus}/manifest.json", "--out", "{out}")),
        many_to_many="the paper trains O2M and M2O only (many-to-many is its future work, section 6), indexing "
                     "W_lang by the language that varies; in M2M each side is indexed by its own language (encoder: "
                     "source, decoder: target, the package's defaults), so a zero-shot pair fr-sr routes through "
                     "W_fr and W_sr, each trained through English, as language adapters do; budget p = 0.3, the "
                     "paper's for many target languages (O2M, Figure 2), since M2M's decoder has 9"),
    H2HModel(
        "latent_depth", "latent depth", "latent_depth_transformer_small",
        {"o2m": ("--encoder-layers", "2", "--decoder-layers", "4", "--latent-decoder-target-depth", "2"),
         "m2o": ("--encoder-layers", "2", "--decoder-layers", "4", "--latent-decoder-target-depth", "2",
                 "--latent-decoder-lang", "src"),
         "m2m": ("--encoder-layers", "2", "--decoder-layers", "4", "--latent-decoder-target-depth", "2")},
        "LL-D, the paper's multilingual setting for O2M and M2O (section 4.3, Tables 3 and 5): 4 latent decoder "
        "layers, target depth K = 2 (Eq. 8); the package's defaults: each language's 2 most probable layers are "
        "committed at a 32nd of training (an eighth in the runs of 2026-11-25 and 26, a quarter in those of "
        "2026-11-23) and the rest of training runs that pruned network, which inference runs; "
        "one posterior per language pair, i.e. per target language (O2M) or source language (M2O)",
        analysis=(("latent-depth", "{ckpt}", "--out", "{out}"),),
        many_to_many="the paper trains O2M and M2O only (it leaves non-English directions out: Broader Impact) with "
                     "one posterior per language pair; a pair's posterior has nothing to say about an unseen "
                     "zero-shot pair, so in M2M the decoder's layers are chosen by the target language (the "
                     "decoder writes it; the package's default), as in O2M"),
    H2HModel(
        "adaptive_sparse", "adaptive sparse (FFN)", "adaptive_sparse_transformer_small",
        {"o2m": ("--encoder-layers", "2", "--decoder-layers", "2", "--sparse-types", "ffn", "--sparse-ffn-blocks", "8",
                 "--decoder-ffn-embed-dim", "1024", "--sparse-decoder-keep-blocks", "4",
                 "--encoder-ffn-embed-dim", "512", "--sparse-encoder-keep-blocks", "8"),
         "m2o": ("--encoder-layers", "2", "--decoder-layers", "2", "--sparse-types", "ffn", "--sparse-ffn-blocks", "8",
                 "--encoder-ffn-embed-dim", "1024", "--sparse-encoder-keep-blocks", "4",
                 "--decoder-ffn-embed-dim", "512", "--sparse-decoder-keep-blocks", "8"),
         "m2m": ("--encoder-layers", "2", "--decoder-layers", "2", "--sparse-types", "ffn", "--sparse-ffn-blocks", "8",
                 "--encoder-ffn-embed-dim", "1024", "--sparse-encoder-keep-blocks", "4",
                 "--decoder-ffn-embed-dim", "1024", "--sparse-decoder-keep-blocks", "4")},
        "FFN-block sparsity at the baseline's active size, as the paper compares (section 5.2), on the side with many "
        "languages only, as the paper's parameter counts imply (Table 1; docs/adaptive_sparse.md, 'FFN: the side "
        "with one language'): there FFN 1024 in 8 blocks, 4 kept per language (512 run); the side with one language "
        "keeps the baseline's dense 512 FFN (8 blocks of 64, all kept); T-bar and loss weights are the model's "
        "defaults",
        analysis=(("adaptive-sparse", "{ckpt}", "--out", "{out}"),),
        many_to_many="the paper's OPUS-100 model is many-to-many (Table 2, +6.2 BLEU zero-shot) and selects "
                     "'based on the source and target languages' (Figure 1): both sides have many languages, so "
                     "both get FFN 1024 in 8 blocks, 4 kept per language (source in the encoder, target in the "
                     "decoder; 512 run)"),
)
BASELINE = "baseline"


def model(name: str) -> H2HModel:
    for m in MODELS:
        if m.name == name:
            return m
    raise ValueError(f"unknown head-to-head model {name!r}: choose from {', '.join(m.name for m in MODELS)}")
