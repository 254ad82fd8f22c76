"""clsr_transformer: gates, noise schedule, budget, variants, per-sentence routing."""

import json

import pytest
import torch
from fairseq.sequence_generator import SequenceGenerator

from fairseq_langshare.modules.clsr import ClsrUnit
from test_language_aware_model import assert_incremental_equals_full, collate, encode, mixed_indices, row_keys
from tiny_corpus import build_task_and_model

RAMP = 100


def build(corpus, *extra, pairs=None):
    task, model, args = build_task_and_model(
        corpus, arch="clsr_transformer_tiny", pairs=pairs,
        extra=["--clsr-encoder-lang", "tgt", "--max-update", str(RAMP), "--dropout", "0.0", *extra])
    task.load_dataset("valid")
    return task, model


@pytest.fixture(scope="module")
def clsr(corpus):
    return build(corpus)


def units(model):
    return [m for m in model.modules() if isinstance(m, ClsrUnit)]


def test_a_unit_after_every_sublayer(clsr):
    _, model = clsr
    names = sorted(u.name for u in units(model))
    expected = sorted([f"enc{l}.{k}" for l in (1, 2) for k in ("self_attn", "ffn")]
                      + [f"dec{l}.{k}" for l in (1, 2) for k in ("self_attn", "cross_attn", "ffn")])
    assert names == expected
    # one W_lang bank per stack (the paper's footnote 3), one matrix per language
    banks = {id(u.projections) for u in units(model)}
    assert len(banks) == 2 and model.encoder.lang_proj.weight.shape == (3, 32, 32)


def test_noise_schedule_is_a_function_of_updates(clsr):
    _, model = clsr
    unit = units(model)[0]
    for n, alpha in ((0, 0.0), (RAMP // 2, 2.5), (RAMP, 5.0), (3 * RAMP, 5.0)):
        model.set_num_updates(n)
        assert unit.noise_scale() == pytest.approx(alpha)


def test_no_noise_at_update_zero_and_in_eval(clsr):
    task, model = clsr
    batch = collate(task, mixed_indices(task))
    gates = {}

    def record(name, g, ids, mask):
        gates.setdefault(name, []).append(g.clone())

    for u in units(model):
        u.collect = record
    try:
        model.train()
        model.set_num_updates(0)
        model(**batch["net_input"]), model(**batch["net_input"])
        for name, (g1, g2) in gates.items():
            torch.testing.assert_close(g1, g2)  # alpha(0) = 0: no noise yet
        gates.clear()
        model.set_num_updates(RAMP)
        model(**batch["net_input"]), model(**batch["net_input"])
        assert any(not torch.equal(g1, g2) for g1, g2 in gates.values())  # noise at alpha = 5
        gates.clear()
        model.eval()
        model(**batch["net_input"])
        for name, (g,) in gates.items():
            assert set(g.unique().tolist()) <= {0.0, 1.0}  # hard [G >= 0]
    finally:
        for u in units(model):
            u.collect = None
        model.auxiliary_outputs()


@pytest.mark.parametrize("T,B", [(5, 3), (30, 4)])  # below / above DENSE_MAX_TOKENS (sparse path)
def test_inference_gate_is_G_nonnegative_and_hard_path_matches_the_formula(clsr, T, B):
    _, model = clsr
    model.eval()
    unit = units(model)[0]
    z, h = torch.randn(T, B, 32), torch.randn(T, B, 32)
    ids = torch.tensor([0, 2, 1, 2][:B])
    with unit.languages.bind(src=ids, tgt=ids):
        unit.arm(z)
        hard = unit(h)
    g = (unit.gate(z) >= 0).float()
    expected = g * unit.projections(h, ids) + (1 - g) * unit.shared(h)
    torch.testing.assert_close(hard, expected)
    assert 0 < g.mean() < 1, "test needs both open and closed gates"


def test_budget_counts_non_pad_tokens_only(clsr):
    task, model = clsr
    model.train()
    batch = collate(task, mixed_indices(task))
    seen = {}
    unit = units(model)[0]  # an encoder unit
    unit.collect = lambda name, g, ids, mask: seen.update(g=g, mask=mask)
    model(**batch["net_input"])
    unit.collect = None
    assert seen["mask"] is not None and seen["mask"].any()
    assert float(unit.last_gate_sum) == pytest.approx(float(seen["g"][~seen["mask"].t()].sum()), rel=1e-5)
    assert float(unit.last_gate_sum) < float(seen["g"].sum())  # padding gates were left out
    src_real = batch["net_input"]["src_tokens"].ne(task.source_dictionary.pad()).sum().item()
    tgt_real = batch["net_input"]["prev_output_tokens"].ne(task.target_dictionary.pad()).sum().item()
    counts = {u.name: u.last_token_count for u in units(model)}
    assert batch["net_input"]["src_tokens"].eq(task.source_dictionary.pad()).any()
    for name, count in counts.items():
        assert count == (src_real if name.startswith("enc") else tgt_real), name
    # masked gate sums by hand: only non-pad tokens count (Eq. 6 denominator: |X||M_enc| + |Y||M_dec|)
    open_sum = sum(float(u.last_gate_sum) for u in units(model))
    losses, stats = model.auxiliary_outputs()
    assert stats["gate_open"] == pytest.approx(open_sum / (4 * src_real + 6 * tgt_real), rel=1e-5)
    value, weight = losses["budget"]
    assert value.item() == pytest.approx(abs(stats["gate_open"] - 0.3), abs=1e-6) and weight == 1.0


@pytest.mark.parametrize("variant,uses_lang,uses_shared", [("shared", False, True), ("language", True, False)])
def test_fixed_gate_variants(corpus, variant, uses_lang, uses_shared):
    task, model = build(corpus, "--clsr-variant", variant)
    model.train()
    batch = collate(task, mixed_indices(task))
    model(**batch["net_input"])[0].sum().backward()
    lang_grad = model.encoder.lang_proj.weight.grad
    shared_grads = [u.shared.weight.grad for u in units(model)]
    assert (lang_grad is not None and lang_grad.abs().sum() > 0) == uses_lang
    assert all((g is not None and g.abs().sum() > 0) == uses_shared for g in shared_grads)
    losses, _ = model.auxiliary_outputs()
    assert "budget" not in losses  # fixed gates are not regularized


def test_absent_languages_get_no_gradient(clsr):
    task, model = clsr
    model.train()
    model.zero_grad()
    batch = collate(task, [0, 1, 2])  # en-xx only: target-indexed W_lang of yy unused
    model(**batch["net_input"])[0].sum().backward()
    model.auxiliary_outputs()
    grad = model.decoder.lang_proj.weight.grad
    yy, xx = task.inventory.id("yy"), task.inventory.id("xx")
    assert grad[yy].abs().sum() == 0 and grad[xx].abs().sum() > 0
    model.zero_grad()


@pytest.mark.parametrize("pairs", [None, ["en-xx", "en-yy", "xx-yy"]])
def test_mixed_batch_invariance_and_beam_search(corpus, pairs):
    task, model = build(corpus, pairs=pairs)
    model.eval()
    batch = collate(task, mixed_indices(task))
    mixed = dict(zip(row_keys(task, batch), model(**batch["net_input"])[0]))
    gen = SequenceGenerator([model], task.target_dictionary, beam_size=3, max_len_b=10)
    hyps = {k: h[0]["tokens"].tolist() for k, h in zip(row_keys(task, batch), gen.generate([model], batch))}
    for i in mixed_indices(task):
        alone = collate(task, [i])
        key = row_keys(task, alone)[0]
        n = alone["target"].size(1)
        torch.testing.assert_close(mixed[key][:n], model(**alone["net_input"])[0][0], atol=1e-5, rtol=1e-4)
        assert gen.generate([model], alone)[0][0]["tokens"].tolist() == hyps[key]


def test_incremental_decoding_equals_full_decoding(clsr):
    task, model = clsr
    model.eval()
    assert_incremental_equals_full(task, model, collate(task, mixed_indices(task)))


def test_variants_build_and_derived_flags(corpus):
    _, model = build(corpus, "--clsr-variant", "top-bottom")
    modes = {u.name: u.mode for u in units(model)}
    assert all(m == "language" for m in modes.values())  # 2-layer stacks: every layer is top or bottom
    _, model = build(corpus, "--clsr-variant", "dedicated", "--clsr-dedicated", "enc1.ffn,dec2.cross_attn")
    assert {n for n, m in ((u.name, u.mode) for u in units(model)) if m == "language"} == {"enc1.ffn", "dec2.cross_attn"}
    _, model = build(corpus, "--clsr-lang-proj", "sublayer")
    assert len({id(u.projections) for u in units(model)}) == len(units(model))
    _, model = build(corpus, "--clsr-variant", "ls-encoder-output")
    assert model.encoder.output_unit is not None and all(u.mode == "shared" for u in units(model))


def test_bad_options_are_clear_errors(corpus):
    with pytest.raises(ValueError, match=r"--clsr-budget 1.5 is outside \[0, 1\]"):
        build(corpus, "--clsr-budget", "1.5")
    with pytest.raises(ValueError, match="enc3.ffn is outside layers 1..2"):
        build(corpus, "--clsr-variant", "dedicated", "--clsr-dedicated", "enc3.ffn")
    with pytest.raises(ValueError, match="bad sub-layer 'encoder1'"):
        build(corpus, "--clsr-variant", "dedicated", "--clsr-dedicated", "encoder1")
    with pytest.raises(ValueError, match="needs --clsr-dedicated"):
        build(corpus, "--clsr-variant", "dedicated")
    # options that would otherwise be silently ignored
    with pytest.raises(ValueError, match=r"^--clsr-dedicated enc1.ffn needs --clsr-variant dedicated"):
        build(corpus, "--clsr-dedicated", "enc1.ffn")
    # refused when a training run starts; a checkpoint saved with it still loads for decoding
    task, _, args = build_task_and_model(corpus, arch="clsr_transformer_tiny", extra=["--max-update", "10"])
    args.clsr_dedicated = "enc1.ffn"
    task.build_model(args, from_checkpoint=True)


def test_lsscore_is_eq7_and_dedicated_takes_positive_sublayers():
    from fairseq_langshare.analysis.clsr_gates import dedicated_flags, lsscore

    names = ["enc1.self_attn", "enc1.ffn", "dec1.ffn"]
    runs = [
        {"budget": 0.1, "sublayers": names, "mean_gate": {"enc1.self_attn": 0.3, "enc1.ffn": 0.0, "dec1.ffn": 0.1},
         "mean_gate_per_language": {n: {"fr": 0.2, "de": 0.4} for n in names}},
        {"budget": 0.5, "sublayers": names, "mean_gate": {"enc1.self_attn": 0.5, "enc1.ffn": 0.4, "dec1.ffn": 0.6},
         "mean_gate_per_language": {n: {"fr": 0.5, "de": 0.5} for n in names}},
    ]
    s = lsscore(runs)
    assert s["lsscore"]["enc1.self_attn"] == pytest.approx(((0.3 - 0.1) + (0.5 - 0.5)) / 2)
    assert s["lsscore"]["enc1.ffn"] == pytest.approx(((0.0 - 0.1) + (0.4 - 0.5)) / 2)
    assert s["lsscore_per_language"]["dec1.ffn"]["fr"] == pytest.approx(((0.2 - 0.1) + (0.5 - 0.5)) / 2)
    assert dedicated_flags(s) == "--arch clsr_transformer --clsr-variant dedicated --clsr-dedicated enc1.self_attn,dec1.ffn"
    with pytest.raises(ValueError, match="one run per budget"):
        lsscore([runs[0], runs[0]])
    # the flags name the architecture the runs trained (a gates.json from before it was recorded: the base)
    small = [{**run, "arch": "clsr_transformer_small"} for run in runs]
    assert dedicated_flags(lsscore(small)).startswith("--arch clsr_transformer_small --clsr-variant dedicated ")
    with pytest.raises(ValueError, match=r"^runs of different architectures \(clsr_transformer_small, clsr_transformer_tiny\)"):
        lsscore([small[0], {**runs[1], "arch": "clsr_transformer_tiny"}])


def test_effective_parameters_leave_out_other_languages_projections(clsr):
    _, model = clsr
    total = sum(p.numel() for p in model.parameters())
    # two stack banks of 3 languages x 32 x 32: a pair uses one matrix of each
    assert model.effective_parameters(0, 1) == total - 2 * 2 * 32 * 32


def test_inference_gates_of_a_token_are_the_same_in_every_decoding_step(clsr):
    """A decoder token's gate is computed once, when the token is fed, and equals its gate in
    full (teacher-forced) decoding; earlier tokens are never re-gated."""
    task, model = clsr
    model.eval()
    batch = collate(task, mixed_indices(task))
    enc = encode(model, batch)
    prev = batch["net_input"]["prev_output_tokens"]
    full, steps = {}, {}
    dec_units = [u for u in units(model) if u.name.startswith("dec")]
    for u in dec_units:
        u.collect = lambda name, g, ids, mask: full.setdefault(name, g.clone())
    model.decoder(prev, encoder_out=enc)
    for u in dec_units:
        u.collect = lambda name, g, ids, mask: steps.setdefault(name, []).append(g.clone())
    state = {}
    for t in range(prev.size(1)):
        model.decoder(prev[:, : t + 1], encoder_out=enc, incremental_state=state)
    for u in dec_units:
        u.collect = None
    real = prev.ne(task.target_dictionary.pad()).t()
    for name, per_step in steps.items():
        assert all(g.size(0) == 1 for g in per_step)  # one new token per step
        torch.testing.assert_close(torch.cat(per_step)[real], full[name][real])


def test_training_without_a_noise_horizon_is_a_clear_error(corpus):
    with pytest.raises(ValueError, match="pass --max-update N"):  # a run is refused at build (test_clsr_training.py)
        build_task_and_model(corpus, arch="clsr_transformer_tiny", extra=["--clsr-encoder-lang", "tgt"])
    task, model, _ = build_task_and_model(corpus, arch="clsr_transformer_tiny",
                                          extra=["--clsr-encoder-lang", "tgt", "--max-update", "10"])
    for unit in model.clsr_units():  # the unit's own guard, as a model built without the task's check
        unit.noise_ramp_updates = 0
    task.load_dataset("valid")
    model.train()
    with pytest.raises(ValueError, match="pass --max-update N"):
        model(**collate(task, [0, 1])["net_input"])
    model.eval()
    model(**collate(task, [0, 1])["net_input"])  # decoding needs no schedule


def test_budget_is_summed_in_fp32_past_the_half_range(corpus):
    """--fp16 trains a half model. 10 units x 14,000 tokens at gate 0.5 are 70,000 open gates,
    past half's largest value (65,504): summed in half the total is inf, and |inf - p| pushes
    every gate closed whatever the real ratio. The budget is accumulated in fp32."""
    _, model = build(corpus, "--clsr-budget", "0.9")
    model.half().train()
    model.set_num_updates(0)  # alpha(0) = 0: each gate is sigmoid(G)
    for u in units(model):
        torch.nn.init.zeros_(u.gate.w2)  # G = 0: every gate is 0.5
        u.arm(torch.randn(14_000, 1, 32).half())
    losses, stats = model.auxiliary_outputs()
    value, _ = losses["budget"]
    assert value.dtype == torch.float32 and torch.isfinite(value)
    assert value.item() == pytest.approx(0.4, abs=1e-3) and stats["gate_open"] == pytest.approx(0.5, abs=1e-3)
    value.backward()  # ratio 0.5 < p = 0.9: the budget opens gates (dG/dw2 = relu(h) >= 0)
    grads = torch.stack([u.gate.w2.grad.float() for u in units(model)])
    assert torch.isfinite(grads).all() and (grads <= 0).all() and (grads < 0).any()


def test_budget_is_a_training_loss_only(clsr):
    """The authors add Eq. 6 in training only: validation loss (checkpoint_best, patience) is
    the cross entropy; the budget term is still logged."""
    from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterion

    from fairseq_langshare.criterions.langshare_label_smoothed_cross_entropy import (
        LangshareLabelSmoothedCrossEntropy,
    )

    task, model = clsr
    batch = collate(task, mixed_indices(task))
    ours, ref = LangshareLabelSmoothedCrossEntropy(task, False, 0.1), LabelSmoothedCrossEntropyCriterion(task, False, 0.1)
    model.set_num_updates(0)  # alpha(0) = 0, no dropout: train-mode forwards are deterministic
    try:
        for training in (False, True):
            model.train(training)
            with torch.no_grad():
                loss, sample_size, log = ours(model, batch)
                ce, _, _ = ref(model, batch)
                model.auxiliary_outputs()
            assert log["aux_budget"] > 0  # logged in both modes
            expected = ce + log["aux_budget"] if training else ce  # weight 1, logged as value * sample_size
            torch.testing.assert_close(loss, expected)
    finally:
        model.eval()


def test_dedicated_chooses_among_the_bottom_and_top_layers_as_the_paper():
    """Tables 4-5: Dedicated makes LS the sub-layers with LSScore > 0 of the bottom and top layer
    of each stack; the any-depth rule (every sub-layer with LSScore > 0) is an option."""
    from fairseq_langshare.analysis.clsr_gates import dedicated_flags

    names = [f"enc{l}.{k}" for l in (1, 2, 3) for k in ("self_attn", "ffn")] + \
            [f"dec{l}.{k}" for l in (1, 2, 3) for k in ("self_attn", "cross_attn", "ffn")]
    positive = {"enc1.ffn", "enc2.self_attn", "enc3.self_attn", "dec2.ffn", "dec3.cross_attn"}
    scores = {"sublayers": names, "lsscore": {n: 0.2 if n in positive else -0.1 for n in names}}
    flags = "--arch clsr_transformer --clsr-variant dedicated --clsr-dedicated "
    assert dedicated_flags(scores) == flags + "enc1.ffn,enc3.self_attn,dec3.cross_attn"
    assert dedicated_flags(scores, rule="any-depth") == flags + "enc1.ffn,enc2.self_attn,enc3.self_attn,dec2.ffn,dec3.cross_attn"
    with pytest.raises(ValueError, match="top-bottom or any-depth"):
        dedicated_flags(scores, rule="middle")


def test_lsscore_refuses_bad_inputs_in_one_line(tmp_path, capsys):
    """Was: a traceback (a directory), or raw errors with no fix: `[Errno 2] ...`, `'utf-8' codec can't
    decode ...` (a checkpoint), `budget` (another analysis' JSON); and any JSON taken as --manifest."""
    from fairseq_langshare.cli import main

    names = ["enc1.ffn", "dec1.ffn"]
    gates = []
    for p in (0.1, 0.5):
        run = tmp_path / f"gates_p{p}"
        run.mkdir()
        (run / "gates.json").write_text(json.dumps({"budget": p, "sublayers": names,
                                                    "mean_gate": {n: p for n in names},
                                                    "mean_gate_per_language": {n: {"fr": p} for n in names}}))
        gates.append(run / "gates.json")
    (tmp_path / "model.pt").write_bytes(b"PK\x03\x04\x80\x02binary")
    (tmp_path / "latent_depth.json").write_text('{"checkpoint": "x.pt", "stacks": {}}')
    out = tmp_path / "out"
    cases = [([gates[0].parent, gates[1]], f"{gates[0].parent} is a directory: pass the gates.json in it"),
             ([tmp_path / "nope.json", gates[1]], "no gates file"),
             ([tmp_path / "model.pt", gates[1]], "is not valid JSON"),
             ([tmp_path / "latent_depth.json", gates[1]], "is not a gates.json of `langshare analyze clsr` (no 'budget')")]
    for runs, said in cases:
        assert main(["analyze", "clsr-lsscore", *map(str, runs), "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert said in err and "\n" not in err, err
    for manifest, said in ((tmp_path / "nope.json", "no corpus manifest"),
                           (tmp_path / "latent_depth.json", "neither train_pairs_per_language nor languages")):
        assert main(["analyze", "clsr-lsscore", *map(str, gates), "--manifest", str(manifest), "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert said in err and "\n" not in err, err
    assert not out.exists()
    assert main(["analyze", "clsr-lsscore", *map(str, gates), "--out", str(out)]) == 0
