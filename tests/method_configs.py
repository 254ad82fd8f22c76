"""Every method's tiny architecture, with flags under which each of its auxiliary losses fires
within a few updates, the training flags of a 4-update run, and distinct per-language
selections (shared by the mixed-precision, tensorboard and GPU tests)."""

import torch

TRAIN = ["--criterion", "langshare_label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--optimizer", "adam",
         "--lr", "0.005", "--max-tokens", "1000", "--log-format", "json", "--log-interval", "1",
         "--no-epoch-checkpoints", "--num-workers", "0", "--seed", "3", "--max-update", "4"]

METHODS = {
    "baseline": ["--arch", "langshare_transformer_tiny"],
    "clsr": ["--arch", "clsr_transformer_tiny", "--clsr-encoder-lang", "tgt"],
    "latent_depth": ["--arch", "latent_depth_transformer_tiny", "--latent-layers", "both",
                     "--latent-decoder-target-depth", "2"],
    "adaptive_sparse": ["--arch", "adaptive_sparse_transformer_tiny", "--sparse-types", "attn,ffn,layer",
                        "--sparse-t-bar", "2"],  # phase 1 (sparsity loss) in updates 1-2, phase 2 after
    "lsl": ["--arch", "lsl_transformer_tiny", "--lsl-encoder-layers", "SRC={1} & TGT={4}",
            "--lsl-decoder-layers", "TGT={2}"],
    "adapter": ["--arch", "langshare_adapter_transformer_tiny", "--adapter-placement", "enc-dec"],
    "multistack": ["--arch", "langshare_multistack_transformer_tiny", "--multi-encoder", "src-lang",
                   "--multi-decoder", "tgt-lang"],
}

# the auxiliary losses each method reports in training (phase-dependent ones included)
AUX_LOSSES = {
    "clsr": {"budget"},
    "latent_depth": {"kl_enc", "kl_dec", "target_depth_dec"},
    "adaptive_sparse": {"sparsity_enc", "sparsity_dec", "disparity_enc", "disparity_dec", "topk_enc", "topk_dec"},
}


def distinct_languages(model, seed=0, noise=0.0):
    """Random selection logits (latent layers, sparse components: every language keeps others,
    KL and disparity > 0) and, with ``noise``, Gaussian noise on every other parameter (adapters
    start near identity)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("logits"):
                p.copy_(torch.randn(p.shape, generator=g) * 2)
            elif noise:
                p.add_(torch.randn(p.shape, generator=g) * noise)
