"""adaptive_sparse_transformer: the losses of Eq. 8-10, Algorithm 1's phase switch (and its
resume), top-k budgets, deterministic inference where only selected heads/blocks/layers run,
mixed-batch invariance, export of a pair's sub-network, analysis."""

import copy
import json
import math

import pytest
import torch
from fairseq.models.transformer import TransformerModel
from fairseq.sequence_generator import SequenceGenerator

from fairseq_langshare.export import export_pair
from fairseq_langshare.models.adaptive_sparse_transformer import (
    AdaptiveSparseSingleModel,
    AdaptiveSparseTransformerModel,
)
from fairseq_langshare.modules import sparse_scores
from fairseq_langshare.modules.scaled_logits import set_scaled_value
from fairseq_langshare.modules.sparse_scores import (
    SparseScorer,
    disparity_loss,
    sparsity_loss,
    topk_loss,
    topk_mask,
)
from test_export import TRAIN, plain_generate
from test_language_aware_model import (
    assert_beam_search_mixed_equals_alone,
    assert_incremental_equals_full,
    collate,
    mixed_indices,
    row_keys,
)
from tiny_corpus import build_task_and_model, generate, task_args, train

M2M = ["en-xx", "en-yy", "xx-yy"]  # xx-yy (valid/test only): batches mix source languages too
EN, XX, YY = 0, 1, 2
ARCH = "adaptive_sparse_transformer_tiny"  # 2+2 layers, 4 heads of 8 dims, FFN 64 in K = 4 blocks of 16
TOL = 1e-5  # float32 logits of two code paths that multiply in different shapes


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_thread):
    yield


def build(corpus, *flags, pairs=M2M, seed=1):
    task, model, args = build_task_and_model(corpus, arch=ARCH, pairs=pairs, seed=seed,
                                             extra=["--dropout", "0.0", "--max-update", "100", *flags])
    task.load_dataset("valid")
    return task, model, args


def set_distinct_logits(model, seed=0):
    """Random logits: every language keeps other heads, blocks and layers."""
    g = torch.Generator().manual_seed(seed)
    for scorer in model.scorers().values():
        for category in scorer.categories():
            mu = scorer.logits(category)
            set_scaled_value(scorer, f"{category}_logits", torch.randn(mu.shape, generator=g) * 2)


def logits_of(model, batch):
    return model(**batch["net_input"])[0]


# --- the equations --------------------------------------------------------------------------------

def test_losses_equal_their_equations_on_hand_computed_inputs():
    s = torch.tensor([[0.5, 1.0, 0.25], [0.0, 0.5, 1.0]])
    # Eq. 8: sum s (log s - log 0.5): 0 + log 2 + 0.25 log 0.5 + 0 + 0 + log 2
    assert sparsity_loss(s).item() == pytest.approx(2 * math.log(2) + 0.25 * math.log(0.5), abs=1e-6)
    # Eq. 9: sum over pairs of languages of sum_i s_li s_l'i: 0 + 0.5 + 0.25
    assert disparity_loss(s).item() == pytest.approx(0.75, abs=1e-6)
    three = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])  # pairs: (1,2) 1, (1,3) 0, (2,3) 1
    assert disparity_loss(three).item() == pytest.approx(2.0)
    m = torch.tensor([[0.0, 1.0, 0.0], [0.0, 1.0, 1.0]])
    # Eq. 10: sum (s - m)^2 = 0.25 + 0 + 0.0625 + 0 + 0.25 + 0
    assert topk_loss(s, m).item() == pytest.approx(0.5625)
    assert topk_mask(torch.tensor([[0.2, 0.9, 0.9, 0.1]]), 2).tolist() == [[0.0, 1.0, 1.0, 0.0]]
    assert topk_mask(torch.tensor([[0.5, 0.5, 0.5]]), 2).tolist() == [[1.0, 1.0, 0.0]]  # ties: lower index


def test_phase_switch_is_exactly_at_t_bar():
    scorer = SparseScorer("dec", "tgt", 2, 2, 4, 64, types=("attn", "ffn", "layer"), blocks=4, keep_layers=1,
                          keep_heads=2, keep_blocks=1, t_bar=5)
    phases = []
    for n in range(8):
        scorer.set_num_updates(n)
        phases.append(scorer.phase())
    # update t (1-based) is trained with num_updates = t - 1: updates 1..5 phase 1, 6.. phase 2
    assert phases == [1, 1, 1, 1, 1, 2, 2, 2]


def test_layers_switch_at_their_own_t_bar(corpus):
    """Between T-bar (heads, blocks) and the layer T-bar, heads and blocks are top-k masked with L_d + L_t
    while every layer still runs at its sampled score with L_s (Algorithm 1 per category); from the layer
    T-bar on, each language runs exactly its D' layers."""
    task, model, _ = build(corpus, "--sparse-t-bar", "2", "--sparse-layer-t-bar", "5")
    batch = collate(task, mixed_indices(task))
    model.train()
    scorer = model.decoder.sparse_scores
    seen = {}
    for n in (1, 3, 5):
        model.set_num_updates(n)
        logits_of(model, batch)
        rows = scorer._call["rows"]  # per sentence: the scale each component runs at
        losses, stats = model.auxiliary_outputs()
        heads_kept = (rows["heads"] > 0).sum(-1)  # (B, layers)
        layers_kept = (rows["layers"] > 0).sum(-1)  # (B,)
        seen[n] = (set(losses), stats["sparse_phase"], heads_kept.unique().tolist(), layers_kept.unique().tolist())
    assert seen[1] == ({"sparsity_enc", "sparsity_dec"}, 1, [4], [2])
    assert seen[3] == ({"sparsity_enc", "sparsity_dec", "disparity_enc", "disparity_dec", "topk_enc", "topk_dec"},
                       pytest.approx(5 / 3), [2], [2])
    assert seen[5] == ({"disparity_enc", "disparity_dec", "topk_enc", "topk_dec"}, 2, [2], [1])
    model.eval()


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_model_losses_are_the_equations_on_saturated_scores(corpus, reduction):
    """Logits +50: every Gumbel sample is exactly 1, so each reported term has a closed form.
    Encoder (source languages en, xx trained) and decoder (xx, yy): 2 layers x (4 heads + 4 blocks
    + 1 layer) = 18 components per language (8 heads, 8 blocks, 2 layers); budgets 1 layer, 2 heads,
    2 blocks: 9 kept. "sum" is Eq. 8-10 literally; "mean" divides each category's sum by L N_c
    (L_s, L_t) and P N_c (L_d, one pair) and adds the 3 categories: each term is 3x its per-term mean."""
    task, model, _ = build(corpus, "--sparse-logit-init", "50", "--sparse-t-bar", "10",
                           "--sparse-loss-reduction", reduction)
    per_lang, per_pair = (36.0 / 3, 18.0 / 3) if reduction == "mean" else (1.0, 1.0)  # every category: same share
    batch = collate(task, mixed_indices(task))
    model.train()
    model.set_num_updates(9)
    logits_of(model, batch)
    losses, stats = model.auxiliary_outputs()
    assert set(losses) == {"sparsity_enc", "sparsity_dec"} and stats["sparse_phase"] == 1
    for side in ("enc", "dec"):
        value, weight = losses[f"sparsity_{side}"]
        assert weight == 0.1 and value.item() == pytest.approx(2 * 18 * math.log(2) / per_lang, rel=1e-5)
    model.set_num_updates(10)
    logits_of(model, batch)
    losses, stats = model.auxiliary_outputs()
    assert set(losses) == {"disparity_enc", "disparity_dec", "topk_enc", "topk_dec"} and stats["sparse_phase"] == 2
    for side in ("enc", "dec"):
        assert losses[f"disparity_{side}"][1] == 0.02 and losses[f"topk_{side}"][1] == 0.1
        # the same 9 kept by both languages; 9 unselected components per language at s = 1
        assert losses[f"disparity_{side}"][0].item() == pytest.approx(9.0 / per_pair)
        assert losses[f"topk_{side}"][0].item() == pytest.approx(2 * 9.0 / per_lang)
    model.eval()


@pytest.mark.parametrize("t_bar", ["10", "0"], ids=["phase1", "phase2"])
def test_a_category_is_regularised_alike_alone_or_with_the_others(corpus, monkeypatch, t_bar):
    """The auxiliary terms' gradient on the layer logits is the same with layer sparsity alone as with
    Attn+FFN+Layer (same layer logits, noise off): each category is averaged over its own
    components. One mean over all 18 components per language gave the 2 layers 1/9 of their pull
    alone (1/13 at the gettext runs' 52), so Attn+FFN+Layer ran its kept layers at scores 0.57
    where layer sparsity alone ran them at 0.92 (docs/adaptive_sparse.md, "Attn+FFN+Layer")."""
    monkeypatch.setattr(sparse_scores, "gumbel_logits", lambda mu, tau: mu.float() / tau)  # no noise
    grads = {}
    for types in ("layer", "attn,ffn,layer"):
        task, model, _ = build(corpus, "--sparse-types", types, "--sparse-t-bar", t_bar)
        batch = collate(task, mixed_indices(task))
        model.train()
        params = []
        for scorer in model.scorers().values():
            mu = scorer.logits("layers")
            set_scaled_value(scorer, "layers_logits", torch.linspace(-2.0, 3.0, mu.numel()).view(mu.shape))
            params.append(scorer.layers_logits)
        logits_of(model, batch)
        losses, stats = model.auxiliary_outputs()
        assert stats["sparse_phase"] == (1 if t_bar == "10" else 2)
        total = sum(weight * value for value, weight in losses.values())
        grads[types] = torch.autograd.grad(total, params)
    for alone, combined in zip(grads["layer"], grads["attn,ffn,layer"]):
        assert alone.abs().sum() > 0
        torch.testing.assert_close(combined, alone, rtol=1e-5, atol=1e-8)


def test_phase_two_keeps_exactly_the_budgets_per_language(corpus):
    task, model, _ = build(corpus, "--sparse-t-bar", "0", "--sparse-encoder-keep-heads", "3",
                           "--sparse-decoder-keep-blocks", "1")
    batch = collate(task, mixed_indices(task))
    model.train()
    logits_of(model, batch)
    model.auxiliary_outputs()
    budgets = {"encoder": {"heads": 3, "blocks": 2, "layers": 1}, "decoder": {"heads": 2, "blocks": 1, "layers": 1}}
    for stack, scorer in model.scorers().items():
        rows = scorer._call["rows"]  # the scores the sentences use: m * s
        for category, keep in budgets[stack].items():
            active = (rows[category] > 0).sum(-1)
            assert (active == keep).all(), (stack, category, active)
        tables = scorer.inference_tables()  # inference: the same budgets for every language
        for category, keep in budgets[stack].items():
            assert (tables[category]["mask"].sum(-1) == keep).all()
    model.eval()


def test_disparity_loss_pushes_two_languages_selections_apart():
    """Phase 2 on the scores alone, both languages starting from the same logits: with c_d the
    two languages end up keeping different heads and blocks; without it they keep sharing."""
    def overlap_after(c_d):
        torch.manual_seed(0)
        scorer = SparseScorer("dec", "tgt", 2, 2, 4, 64, types=("attn", "ffn"), blocks=4, keep_layers=1,
                              keep_heads=2, keep_blocks=2, t_bar=0, c_d=c_d)
        for category in scorer.categories():  # both languages prefer components 0 and 1
            set_scaled_value(scorer, f"{category}_logits",
                             torch.tensor([2.0, 2.0, -2.0, -2.0]).expand_as(scorer.logits(category)))
        optimizer = torch.optim.Adam(scorer.parameters(), lr=0.05)
        scorer.train()
        for _ in range(300):
            scorer.prepare(torch.tensor([0, 1]))
            losses, _ = scorer.pop_auxiliary()
            loss = sum(weight * value for value, weight in losses.values())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        tables = scorer.inference_tables()
        return sum(int((t["mask"][0] & t["mask"][1]).sum()) for t in tables.values())

    shared = overlap_after(0.0)
    apart = overlap_after(1.0)
    assert shared == 8  # 2 layers x (2 heads + 2 blocks): still all shared
    assert apart < shared / 2, apart


# --- inference ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def full(corpus):
    """All three sparsity types, random logits: languages keep different components."""
    task, model, args = build(corpus)
    set_distinct_logits(model)
    return task, model.eval(), args


def test_inference_is_deterministic_and_runs_only_the_selected_components(corpus, full):
    task, model, _ = full
    shapes, ran = [], []
    hooks = []
    for stack in ("encoder", "decoder"):
        for i, layer in enumerate(getattr(model, stack).layers):
            hooks.append(layer.self_attn.q_proj.register_forward_hook(
                lambda m, inp, out, name=f"{stack}{i}": shapes.append((name, "q", out.size(-1)))))
            hooks.append(layer.fc1.register_forward_hook(
                lambda m, inp, out, name=f"{stack}{i}": shapes.append((name, "fc1", out.size(-1)))))
            hooks.append(layer.register_forward_hook(lambda m, inp, out, name=f"{stack}{i}": ran.append(name)))
    try:
        batch = collate(task, [0, 1, 2])  # en -> xx
        with torch.no_grad():
            first = logits_of(model, batch)
            assert torch.equal(logits_of(model, batch), first)  # no noise at inference
    finally:
        for hook in hooks:
            hook.remove()
    # H' = 2 of 4 heads (8 dims each), K' = 2 of 4 blocks (16 dims each)
    assert {n for _, kind, n in shapes if kind == "q"} == {16} and {n for _, kind, n in shapes if kind == "fc1"} == {32}
    # D' = 1 of 2 layers per stack: the other layer's attention and FFN never ran
    kept = {stack: model.selected(EN if stack == "encoder" else XX, stack)["layers"] for stack in ("encoder", "decoder")}
    computed = {name for name, _, _ in shapes}
    assert computed == {f"encoder{kept['encoder'][0]}", f"decoder{kept['decoder'][0]}"}
    model.train()
    try:
        model.set_num_updates(0)
        with torch.no_grad():
            assert not torch.equal(logits_of(model, batch), logits_of(model, batch))  # training samples
    finally:
        model.eval()
        model.auxiliary_outputs()


def test_sliced_weights_follow_the_decision_and_the_weights(corpus):
    """Decoding keeps each language's sliced projections (no_grad); a new decision or new weights
    must not reuse them (the graph-enabled path never caches: it is the reference). No layer
    sparsity: every layer runs in every call, with other heads and blocks after the change.

    The two paths multiply in different shapes (float rounding differs by CPU: 9.5e-7 on an AMD
    EPYC); a stale cache returns the previous output, which each change moves by far more."""
    task, model, _ = build(corpus, "--sparse-types", "attn,ffn")
    set_distinct_logits(model, seed=1)
    model.eval()
    batch = collate(task, mixed_indices(task))

    def assert_fresh(cached, before):
        reference = logits_of(model, batch).detach()
        assert (before - reference).abs().max() > 1e3 * TOL  # what a stale cache would return
        torch.testing.assert_close(cached, reference, rtol=TOL, atol=TOL)

    with torch.no_grad():
        before = logits_of(model, batch)  # fills the caches
        set_distinct_logits(model, seed=2)
        cached = logits_of(model, batch)
    assert_fresh(cached, before)
    with torch.no_grad():
        for layer in model.decoder.layers:
            layer.self_attn.v_proj.weight.mul_(2.0)
            layer.fc1.weight.mul_(0.5)
        before, cached = cached, logits_of(model, batch)
    assert_fresh(cached, before)


def test_mixed_batch_equals_each_sentence_alone(full):
    assert_mixed_equals_alone(*full[:2])


def assert_mixed_equals_alone(task, model):
    batch = collate(task, mixed_indices(task))
    ids = batch["net_input"]
    assert len(set(ids["src_lang_id"].tolist())) == 2 and len(set(ids["tgt_lang_id"].tolist())) == 2
    with torch.no_grad():
        mixed = dict(zip(row_keys(task, batch), logits_of(model, batch)))
        for i in mixed_indices(task):
            alone = collate(task, [i])
            n = alone["target"].size(1)
            torch.testing.assert_close(mixed[row_keys(task, alone)[0]][:n], logits_of(model, alone)[0],
                                       atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("side", ["src", "tgt"])
def test_language_ids_change_the_output(full, side):
    """Guards the invariance test: another language's components give another output."""
    task, model, _ = full
    batch = collate(task, [40, 41])  # xx -> yy
    swapped = {**batch, "net_input": dict(batch["net_input"])}
    swapped["net_input"][f"{side}_lang_id"] = torch.full_like(batch["net_input"][f"{side}_lang_id"],
                                                              EN if side == "src" else XX)
    with torch.no_grad():
        assert not torch.allclose(logits_of(model, batch), logits_of(model, swapped), atol=1e-4)


def test_incremental_decoding_equals_full_decoding(full):
    task, model, _ = full
    with torch.no_grad():
        assert_incremental_equals_full(task, model, collate(task, mixed_indices(task)))


def test_beam_search_mixed_equals_alone(full):
    task, model, _ = full
    assert_beam_search_mixed_equals_alone(task, model, max_len_b=10)


# --- export ---------------------------------------------------------------------------------------------

def namespace_with(args, changes):
    plain = copy.deepcopy(args)
    for key, value in changes.items():
        if value is None:
            if hasattr(plain, key):
                delattr(plain, key)
        else:
            setattr(plain, key, value)
    return plain


@pytest.mark.parametrize("types", ["ffn,layer", "attn,ffn,layer", "attn"])
def test_export_state_dict_is_the_pairs_sub_network(corpus, types):
    task, model, args = build(corpus, "--sparse-types", types)
    set_distinct_logits(model, seed=3)
    model.eval()
    export_cls = TransformerModel if "attn" not in types else AdaptiveSparseSingleModel
    assert AdaptiveSparseTransformerModel.export_model(args) == ("transformer" if "attn" not in types
                                                                 else "adaptive_sparse_single")
    for weights, changes in assert_pairs_export_equal(task, model, args, export_cls):
        if "layer" in types:
            assert changes["encoder_layers"] == 1 and changes["decoder_layers"] == 1
        if "ffn" in types:
            assert changes["encoder_ffn_embed_dim"] == 32 and weights["decoder.layers.0.fc1.weight"].shape == (32, 32)
        if "attn" in types:
            assert weights["encoder.layers.0.self_attn.q_proj.weight"].shape == (16, 32)


def assert_pairs_export_equal(task, model, args, export_cls):
    """Every pair's exported sub-network gives the full model's output; returns each pair's
    (weights, changes)."""
    ds, exports = task.dataset("valid"), []
    for start in [0] + list(ds.cumulative_sizes[:-1]):  # en-xx, en-yy, xx-yy (zero-shot)
        batch = collate(task, list(range(start, start + 4)))
        ni = dict(batch["net_input"])
        src, tgt = int(ni["src_lang_id"][0]), int(ni["tgt_lang_id"][0])
        weights, changes = AdaptiveSparseTransformerModel.export_state_dict(model.state_dict(), args, src, tgt)
        exported = export_cls.build_model(namespace_with(args, changes), task).eval()
        exported.load_state_dict(weights, strict=True)
        with torch.no_grad():
            expected = model(**ni)[0]
            for key in ("src_lang_id", "tgt_lang_id"):
                ni.pop(key)
            torch.testing.assert_close(exported(**ni)[0], expected, rtol=1e-4, atol=1e-5)
        exports.append((weights, changes))
    return exports


# 5 heads of 8 at d = 32: q/k/v project to 40; 4 kept, so every language runs the dense width 32
WIDE_HEADS = ["--sparse-types", "attn", "--encoder-attention-heads", "5", "--decoder-attention-heads", "5",
              "--sparse-head-dim", "8", "--sparse-encoder-keep-heads", "4", "--sparse-decoder-keep-heads", "4"]


def test_wide_heads_run_the_dense_width_per_language_and_export(corpus):
    """--sparse-head-dim: heads wider than d / H. Training holds all 5 heads; at inference each
    language's 4 heads project to 32 (= d); mixed batches equal each sentence alone; each pair
    exports to a model with 4 heads of 8 that gives the same output."""
    task, model, args = build(corpus, *WIDE_HEADS)
    set_distinct_logits(model, seed=4)
    model.eval()
    for attn in (model.encoder.layers[0].self_attn, model.decoder.layers[1].encoder_attn):
        assert attn.q_proj.weight.shape == (40, 32) and attn.out_proj.weight.shape == (32, 40)
        assert attn.head_dim == 8 and attn.scaling == 8 ** -0.5
    widths = []
    hook = model.decoder.layers[0].self_attn.q_proj.register_forward_hook(
        lambda m, inp, out: widths.append(out.size(-1)))
    try:
        with torch.no_grad():
            logits_of(model, collate(task, [0, 1, 2]))
    finally:
        hook.remove()
    assert set(widths) == {32}
    assert_mixed_equals_alone(task, model)
    assert_beam_search_mixed_equals_alone(task, model, max_len_b=10)
    model.train()
    try:
        for updates in (0, 99):  # phase 1 (every head, scaled) and phase 2 (each language's 4 heads)
            model.set_num_updates(updates)
            model.zero_grad()
            logits_of(model, collate(task, mixed_indices(task))).logsumexp(-1).mean().backward()
            grad = model.decoder.layers[0].self_attn.q_proj.weight.grad
            assert grad.shape == (40, 32) and torch.isfinite(grad).all() and grad.abs().sum() > 0
            model.auxiliary_outputs()
    finally:
        model.eval()
    for weights, changes in assert_pairs_export_equal(task, model, args, AdaptiveSparseSingleModel):
        assert changes["sparse_single_head_dim"] == 8 and changes["sparse_single_decoder_heads"] == 4
        assert weights["decoder.layers.0.encoder_attn.q_proj.weight"].shape == (32, 32)


def test_export_fills_options_a_namespace_leaves_out(corpus):
    """fairseq's parser leaves options the command line did not set out of its Namespace; a model
    loaded from a checkpoint never puts them back (build_model does), so `langshare head-to-head`
    counted a trained model's per-pair parameters with a Namespace lacking the keep budgets."""
    task, model, args = build(corpus, "--sparse-types", "ffn,layer")
    set_distinct_logits(model, seed=3)
    state = model.state_dict()
    src, tgt = task.inventory.id("en"), task.inventory.id("xx")
    weights, changes = AdaptiveSparseTransformerModel.export_state_dict(state, args, src, tgt)
    bare = namespace_with(args, {f"sparse_{stack}_keep_{c}": None for stack in ("encoder", "decoder")
                                 for c in ("layers", "heads", "blocks")})
    assert not hasattr(bare, "sparse_encoder_keep_layers")
    bare_weights, bare_changes = AdaptiveSparseTransformerModel.export_state_dict(state, bare, src, tgt)
    assert bare_changes == changes and bare_weights.keys() == weights.keys()
    assert all(torch.equal(bare_weights[k], weights[k]) for k in weights)


# --- fairseq-train ---------------------------------------------------------------------------------------

def sparse_args(save, max_update, *extra):
    return TRAIN + ["--arch", ARCH, "--max-update", str(max_update), "--save-dir", str(save), "--log-interval", "1",
                    "--sparse-t-bar", "4", *extra]


def logged(records, key):
    values = {int(float(r["num_updates"])): float(r[key]) for r in records if key in r and "num_updates" in r}
    assert values, f"{key} never logged"
    return values


@pytest.fixture(scope="module")
def trained(corpus, tmp_path_factory):
    """4 updates (phase 1 ends at T-bar = 4), stop, resume to 30."""
    save = tmp_path_factory.mktemp("sparse_ckpt")
    first = train(task_args(corpus) + sparse_args(save, 4))
    resumed = train(task_args(corpus) + sparse_args(save, 30))
    return {"dir": save, "checkpoint": save / "checkpoint_last.pt", "first": first, "resumed": resumed}


def test_phase_switch_at_t_bar_survives_resume(trained):
    phase = logged(trained["first"], "stat_sparse_phase")
    assert phase == {1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0}
    assert logged(trained["first"], "aux_sparsity_dec")
    phase = logged(trained["resumed"], "stat_sparse_phase")
    assert min(phase) == 5 and set(phase.values()) == {2.0}  # the resumed run starts at update 5, in phase 2
    assert all(r.get("aux_sparsity_dec") is None for r in trained["resumed"] if "num_updates" in r)  # not reported
    assert logged(trained["resumed"], "aux_topk_dec") and logged(trained["resumed"], "aux_disparity_dec")


def user_dir_generate(corpus, checkpoint, src, tgt):
    from tiny_corpus import PKG_DIR

    return generate([str(corpus["bin"]), "--task", "translation_multi_simple_epoch", "--user-dir", PKG_DIR,
                     "--langs", ",".join(corpus["langs"]), "--lang-pairs", f"{src}-{tgt}", "--encoder-langtok", "tgt",
                     "--path", str(checkpoint), "--gen-subset", "test", "-s", src, "-t", tgt, "--beam", "3", "--cpu",
                     "--max-tokens", "1000", "--required-batch-size-multiple", "1"])


def full_generate(corpus, checkpoint, src, tgt):
    return generate(task_args(corpus, pairs=[f"{src}-{tgt}"]) + [
        "--path", str(checkpoint), "--gen-subset", "test", "-s", src, "-t", tgt, "--beam", "3", "--cpu",
        "--max-tokens", "1000"])


@pytest.mark.parametrize("src,tgt", [("en", "xx"), ("en", "yy"), ("xx", "yy")])  # xx-yy: zero-shot
def test_exported_pair_translates_like_the_full_model(corpus, trained, tmp_path, src, tgt):
    checkpoint = trained["checkpoint"]
    full_hyps = full_generate(corpus, checkpoint, src, tgt)
    assert len(full_hyps) == 20 and full_generate(corpus, checkpoint, src, tgt) == full_hyps
    out = tmp_path / f"{src}-{tgt}.pt"
    report = export_pair(checkpoint, src, tgt, out, verbose=False)
    exported = torch.load(out, weights_only=True)
    assert exported["cfg"]["model"]["_name"] == "adaptive_sparse_single"
    assert exported["cfg"]["model"]["encoder_layers"] == 1 and exported["cfg"]["model"]["sparse_single_decoder_heads"] == 2
    assert not any("sparse_scores" in k for k in exported["model"])
    assert report["params"] < report["full_params"]
    assert user_dir_generate(corpus, out, src, tgt) == full_hyps


def test_trained_model_beam_search_is_per_sentence(corpus, trained):
    """Rows leave the beam at different steps while xx and yy keep different heads, blocks and
    layers: a mixed batch still gives every sentence its own translation (the H'-head caches
    follow the beam)."""
    from fairseq import checkpoint_utils

    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(trained["checkpoint"])], arg_overrides={"data": str(corpus["bin"])})
    model = models[0].eval()
    task.load_dataset("test")
    ds = task.dataset("test")
    indices = [s + k for k in range(8) for s in (0, ds.cumulative_sizes[0])]
    collater = lambda idx: ds.collater([ds[i] for i in idx])  # noqa: E731
    # the first selections (random logits) under which xx and yy differ and the hypotheses end at
    # different steps: which ones do depends on the trained weights
    generator = SequenceGenerator([model], task.target_dictionary, beam_size=3, max_len_b=20)
    for seed in range(20):
        set_distinct_logits(model, seed=seed)
        if model.selected(XX, "decoder") == model.selected(YY, "decoder"):
            continue
        if len({len(h[0]["tokens"]) for h in generator.generate([model], collater(indices))}) >= 2:
            break
    assert_beam_search_mixed_equals_alone(task, model, indices, collater, max_len_b=20, min_distinct_lengths=2)


def test_ffn_and_layer_sparsity_export_a_plain_transformer(corpus, tmp_path):
    """Without head sparsity a pair's sub-network is a plain fairseq transformer: fairseq-generate
    loads it without the plugin and translates exactly as the full model."""
    save = tmp_path / "ckpt"
    train(task_args(corpus) + sparse_args(save, 10, "--sparse-types", "ffn,layer"))
    checkpoint = save / "checkpoint_last.pt"
    full_hyps = full_generate(corpus, checkpoint, "en", "yy")
    export_pair(checkpoint, "en", "yy", tmp_path / "en-yy.pt", verbose=False)
    exported = torch.load(tmp_path / "en-yy.pt", weights_only=True)
    assert exported["cfg"]["model"]["_name"] == "transformer"
    assert exported["cfg"]["model"]["decoder_ffn_embed_dim"] == 32 and exported["cfg"]["model"]["decoder_layers"] == 1
    assert plain_generate(corpus, tmp_path / "en-yy.pt", "en", "yy") == full_hyps


def test_analysis_cli_writes_scores_selection_and_pca(trained, tmp_path, capsys):
    from fairseq_langshare import cli

    families = tmp_path / "families.tsv"
    families.write_text("xx\tIndo-European\nyy\tUralic\n")
    assert cli.main(["analyze", "adaptive-sparse", str(trained["checkpoint"]), "--out", str(tmp_path / "out"),
                     "--language-families", str(families)]) == 0
    result = json.loads((tmp_path / "out" / "adaptive_sparse.json").read_text())
    dec = result["stacks"]["decoder"]
    assert dec["languages"] == ["xx", "yy"] and dec["families"] == {"xx": "Indo-European", "yy": "Uralic"}
    assert len(dec["scores"]["xx"]) == 2 * 4 + 2 * 4 + 2
    assert len(dec["selected"]["yy"]["layers"]) == 1 and all(len(h) == 2 for h in dec["selected"]["yy"]["heads"])
    assert set(dec["pca"]) == {"xx", "yy"}
    selection = dec["selection"]["heads"]
    assert set(selection) == {"kept_score", "other_score", "median_gap", "agreement"}
    assert selection["kept_score"] >= selection["other_score"] and 0 <= selection["agreement"] <= 1
    assert (tmp_path / "out" / "adaptive_sparse_tgt.png").stat().st_size > 0
    printed = capsys.readouterr().out
    # the printout numbers layers, heads and blocks from 1, as the other analyses and the papers do
    # (the JSON keeps 0-based indices)
    yy = next(line for line in printed.splitlines() if line.strip().startswith("yy "))
    layers = dec["selected"]["yy"]["layers"]
    assert f"layers {','.join(str(i + 1) for i in layers)}" in yy, yy
    heads = dec["selected"]["yy"]["heads"]
    assert f"heads L1 {{{','.join(str(h + 1) for h in heads[0])}}}" in yy, yy
    assert "1-based" in printed


@pytest.mark.parametrize("flags,message", [
    (["--sparse-types", "attn,mlp"], "--sparse-types"),
    (["--sparse-ffn-blocks", "5"], "does not divide"),
    (["--sparse-decoder-keep-heads", "5"], "outside 1..4"),
    (["--sparse-encoder-keep-layers", "3"], "outside 1..2"),
    (["--sparse-logit-lr-scale", "0"], r"--sparse-logit-lr-scale 0.0 is outside \(0, inf\): a learning-rate "
                                       "multiplier"),
    (["--sparse-types", "ffn", "--sparse-head-dim", "16"], "--sparse-head-dim 16: a head size > 0 that"),
    (["--sparse-layer-t-bar", "-1"], r"--sparse-layer-t-bar -1 is outside \[0, inf\): T-bar is a number of updates"),
])
def test_bad_flags_are_one_line_errors(corpus, flags, message):
    with pytest.raises(ValueError, match=message) as info:
        build(corpus, *flags)
    assert "\n" not in str(info.value)


def test_t_bar_defaults_to_a_32nd_of_the_run_and_is_saved_in_the_config(corpus):
    """Heads and blocks switch at a 32nd of the run, layers at an eighth (chosen at heads' T-bar, the
    layers of the gettext O2M decoder were a random split); one T-bar given is Algorithm 1's one T-bar
    for every category; both given, each its own."""
    _, model, args = build(corpus)  # --max-update 100
    assert args.sparse_t_bar == 3 and {s.t_bar for s in model.scorers().values()} == {3}
    assert args.sparse_layer_t_bar == 12 and {s.t_bars["layers"] for s in model.scorers().values()} == {12}
    _, model, args = build(corpus, "--sparse-t-bar", "7")
    assert args.sparse_layer_t_bar == 7 and {tuple(s.t_bars.values()) for s in model.scorers().values()} == {(7, 7, 7)}
    _, model, args = build(corpus, "--sparse-t-bar", "7", "--sparse-layer-t-bar", "40")
    assert {tuple(s.t_bars.values()) for s in model.scorers().values()} == {(7, 7, 40)}


def test_missing_language_ids_are_a_clear_error(corpus, full):
    from fairseq_langshare.modules.routing import MissingLanguageIds

    task, model, _ = full
    batch = collate(task, [0, 1])
    net_input = {k: v for k, v in batch["net_input"].items() if not k.endswith("lang_id")}
    with pytest.raises(MissingLanguageIds, match="multilingual_langshare"):
        model(**net_input)


def test_selection_agreement_and_sampled_vs_inference_nll(corpus, trained):
    """Decided logits agree with their Gumbel draws, tied ones do not; the two NLLs of a checkpoint."""
    from fairseq_langshare.analysis.adaptive_sparse import sampled_agreement, sampled_vs_inference_nll

    assert sampled_agreement(torch.tensor([[20.0, 20.0, -20.0, -20.0]]), 2) == 1.0
    assert sampled_agreement(torch.zeros(1, 4), 2) < 0.3  # 1/6 in expectation
    nll = sampled_vs_inference_nll(trained["checkpoint"], corpus["bin"], max_batches=2)
    assert nll["tokens"] > 0 and all(0 < nll[m] < 20 for m in ("inference", "sampled"))


def test_checkpoint_from_before_the_logit_scale_loads_with_scale_one(corpus, trained):
    """Old layout: the parameter is the logit and there is no ``*_logits_scale``: it loads with scale 1,
    so the model, its export and its analysis read the same logits."""
    from fairseq_langshare.analysis.adaptive_sparse import scores_from_state

    state = torch.load(trained["checkpoint"], weights_only=False)
    new = state["model"]
    old = {k: v for k, v in new.items() if not k.endswith("_logits_scale")}
    for key in [k for k in new if k.endswith("_logits_scale")]:
        old[key[: -len("_scale")]] = new[key[: -len("_scale")]].float() * new[key]
    _, model, _ = build(corpus, "--sparse-t-bar", "4")
    model.load_state_dict(old, strict=True)
    scorer = model.decoder.sparse_scores
    assert float(scorer.heads_logits_scale) == 1.0
    expected = new["decoder.sparse_scores.heads_logits"] * new["decoder.sparse_scores.heads_logits_scale"]
    torch.testing.assert_close(scorer.logits("heads").detach(), expected)
    assert scores_from_state({**state, "model": old}) == scores_from_state(state)
