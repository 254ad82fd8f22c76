"""Every method's tiny architecture, with flags under which each of its auxiliary losses fires
within a few updates (shared by the mixed-precision and GPU tests)."""

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
